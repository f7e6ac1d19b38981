//! The packet path allocates nothing: a capture of 200,000 packets makes no more allocations
//! than one of 20,000, beyond the bounded pool of batch buffers; with flood detection; and with
//! rules, flow metering, header forwarding to two collectors and Crypto-PAn anonymisation all at
//! once.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tapflow_engine::pipeline::{self, CaptureConfig, Input};
use tapflow_engine::sink::file::{Format, WriterConfig};
use tapflow_engine::sink::flow::export::{ExportConfig, ExportRate, ExportTarget};
use tapflow_engine::sink::flow::meter::FlowConfig;
use tapflow_engine::sink::flow::table::{CLASSES, TableConfig};
use tapflow_engine::sink::forward::{Balance, ForwardConfig, payload_for_mtu};
use tapflow_engine::stop::Stop;
use tapflow_wire::LinkType;
use tapflow_wire::build::{self, FrameSpec, L4};
use tapflow_wire::cryptopan::CryptoPan;
use tapflow_wire::rules::Rule;

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
            1_700_000_000_000_000_000 + i as u64 * 1000,
            &frame,
            200,
        );
    }
    std::fs::write(path, out).unwrap();
}

/// Allocations made by a whole offline capture of `n` packets to pcapng (and, with `flows`,
/// through 40 rules matched by tuple-space search that pass 40 of the 64 flows, through flow
/// meter and exporter to CSV, with timeouts so short that flows end all the time, and through
/// header forwarding balanced by flow over two loopback collectors).
fn allocations_for(n: usize, dir: &std::path::Path, flows: bool) -> u64 {
    let collectors: Vec<std::net::UdpSocket> = (0..2)
        .map(|_| std::net::UdpSocket::bind("127.0.0.1:0").unwrap())
        .collect();
    let destinations: Vec<_> = collectors.iter().map(|c| c.local_addr().unwrap()).collect();
    let input = dir.join(format!("in-{n}.pcap"));
    trace(n, &input);
    let cfg = CaptureConfig {
        input: Input::File(input),
        snaplen: 64,
        filter: None,
        file: Some(WriterConfig {
            path: dir.join(format!("out-{n}.pcapng")),
            format: Format::Pcapng,
            worker: None,
            rotate_bytes: None,
            rotate_every: None,
            isb_every: Duration::from_secs(3600),
            keep: None,
        }),
        count: None,
        duration: None,
        print: false,
        forward: flows.then(|| ForwardConfig {
            payload_max: payload_for_mtu(65535, &destinations[0]),
            destinations: destinations.clone(),
            balance: Balance::Flow,
            flush_after: Duration::from_millis(10),
            probe: 1,
            session: 1,
            stream: 0,
        }),
        flows: flows.then(|| FlowConfig {
            table: TableConfig {
                max_flows: 1000,
                active_ns: 2_000_000,
                idle_ns: [500_000; CLASSES],
                seed: 1,
            },
            export: ExportConfig {
                targets: vec![
                    ExportTarget::file("csv", &dir.join(format!("flows-{n}.csv"))).unwrap(),
                ],
                mtu: Some(1500),
                observation_domain: 1,
                rate: ExportRate::Unpaced,
                anonymize: flows.then(|| CryptoPan::new(&[7; 32])),
                store: None,
                enrich: None,
            },
        }),
        rules: flows.then(|| {
            (0..40)
                .map(|i| Rule::parse(&format!("r{i} proto udp sport {}", 1024 + i)).unwrap())
                .collect()
        }),
        control: None,
        metrics: None,
        drop_privileges: None,
        anonymize: flows.then(|| CryptoPan::new(&[7; 32])),
        // Flood detection on the plain path: the exporter's pool of batches (with flows) grows
        // with the relative speed of its threads and would hide what detection adds.
        detect: (!flows).then(|| {
            tapflow_engine::detect::Detector::new(Default::default(), Vec::new(), 1).shared()
        }),
    };
    let stop = Arc::new(Stop::new().unwrap());
    let before = ALLOCS.load(Ordering::Relaxed);
    let (summary, err) = pipeline::run(&cfg, &stop, &mut |_| {}, &mut |_| None);
    let after = ALLOCS.load(Ordering::Relaxed);
    assert!(err.is_none(), "{err:?}");
    if flows {
        // Ports 1024 + (i % 64): 40 of every 64 packets pass the rules.
        let passed = (0..n).filter(|i| i % 64 < 40).count() as u64;
        assert_eq!(summary.totals.recorded, passed);
        assert_eq!(summary.totals.filtered, n as u64 - passed);
        let rules = summary.rules.expect("rule listing");
        assert_eq!(rules.rules.iter().map(|r| r.packets).sum::<u64>(), passed);
        let fw = summary.sinks.forward.expect("forward report");
        assert_eq!(fw.records + fw.failed, passed, "{fw:?}");
        assert!(fw.collectors.iter().all(|d| d.records > 0), "{fw:?}");
        let f = summary.flows.expect("flow summary");
        assert!(f.export.records > n as u64 / 100, "{f:?}");
        assert_eq!(f.export.outputs[0].records, f.export.records);
    } else {
        assert_eq!(summary.totals.recorded, n as u64);
        let d = summary.sinks.detect.expect("detect report");
        // Every packet is counted, not IP, or passed over by sampling (these come fast).
        assert_eq!(d.packets + d.not_ip + d.not_sampled, n as u64, "{d:?}");
        assert!(d.packets > 0, "{d:?}");
    }
    after - before
}

#[test]
fn packet_path_does_not_allocate() {
    let dir = std::env::temp_dir().join(format!("tapflow-noalloc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let small = allocations_for(20_000, &dir, false);
    let large = allocations_for(200_000, &dir, false);
    let flows_small = allocations_for(20_000, &dir, true);
    let flows_large = allocations_for(200_000, &dir, true);
    std::fs::remove_dir_all(&dir).unwrap();
    eprintln!("with rules, flows and forwarding: {flows_small} for 20k, {flows_large} for 200k");
    // The exporter's batch pool: at most QUEUE + 2 batches per worker.
    assert!(
        flows_large <= flows_small + 40,
        "{flows_small} allocations for 20k packets but {flows_large} for 200k with rules, flow \
         metering and forwarding: one of them allocates"
    );
    eprintln!("allocations: {small} for 20k, {large} for 200k");
    // 180,000 more packets; at most the bounded batch pool (34 buffers) more allocations.
    assert!(
        large <= small + 40,
        "{small} allocations for 20k packets but {large} for 200k: the packet path allocates"
    );
}
