//! The packet path allocates nothing: a capture of 200,000 packets makes no more allocations
//! than one of 20,000, beyond the bounded pool of batch buffers.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tapflow_engine::capture::{self, CaptureConfig, Input};
use tapflow_engine::writer::{Format, WriterConfig};
use tapflow_wire::LinkType;
use tapflow_wire::build::{self, FrameSpec, L4};

struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards to the system allocator unchanged; only counts calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// A pcap file of `n` UDP frames of 200 bytes over 64 flows.
fn trace(n: usize, path: &std::path::Path) {
    let spec = FrameSpec {
        src_mac: "02:00:00:00:00:01".parse().unwrap(),
        dst_mac: "02:00:00:00:00:02".parse().unwrap(),
        src_ip: "198.18.0.1".parse().unwrap(),
        dst_ip: "198.18.0.2".parse().unwrap(),
        proto: L4::Udp,
        src_port: 1024,
        dst_port: 9,
        frame_len: 200,
    };
    let mut frame = vec![0u8; 200];
    let layout = build::build(&spec, &mut frame).unwrap();
    let mut out = Vec::new();
    tapflow_wire::pcap::write_header(&mut out, LinkType::Ethernet, 65535);
    for i in 0..n {
        build::vary_flow(&mut frame, &layout, 1024 + (i % 64) as u16);
        tapflow_wire::pcap::write_record(
            &mut out,
            1_700_000_000_000_000_000 + i as u64,
            &frame,
            200,
        );
    }
    std::fs::write(path, out).unwrap();
}

/// Allocations made by a whole offline capture of `n` packets to pcapng.
fn allocations_for(n: usize, dir: &std::path::Path) -> u64 {
    let input = dir.join(format!("in-{n}.pcap"));
    trace(n, &input);
    let cfg = CaptureConfig {
        input: Input::File(input),
        snaplen: 64,
        file: Some(WriterConfig {
            path: dir.join(format!("out-{n}.pcapng")),
            format: Format::Pcapng,
            worker: None,
            rotate_bytes: None,
            rotate_every: None,
            isb_every: Duration::from_secs(3600),
        }),
        count: None,
        duration: None,
        forward: None,
    };
    let stop = Arc::new(AtomicBool::new(false));
    let before = ALLOCS.load(Ordering::Relaxed);
    let (summary, err) = capture::run(&cfg, &stop, &mut |_| {}, &mut |_| {});
    let after = ALLOCS.load(Ordering::Relaxed);
    assert!(err.is_none(), "{err:?}");
    assert_eq!(summary.totals.recorded, n as u64);
    after - before
}

#[test]
fn packet_path_does_not_allocate() {
    let dir = std::env::temp_dir().join(format!("tapflow-noalloc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let small = allocations_for(20_000, &dir);
    let large = allocations_for(200_000, &dir);
    std::fs::remove_dir_all(&dir).unwrap();
    eprintln!("allocations: {small} for 20k, {large} for 200k");
    // 180,000 more packets; at most the bounded batch pool (34 buffers) more allocations.
    assert!(
        large <= small + 40,
        "{small} allocations for 20k packets but {large} for 200k: the packet path allocates"
    );
}
