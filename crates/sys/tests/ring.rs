//! The rings against the real kernel: a veth pair in a throw-away network namespace per test.
//!
//! Needs root (skips otherwise). Each test makes namespace `tfsys<pid><t>` holding
//! `tfsys<pid><t>a` <-> `tfsys<pid><t>b` with IPv6 disabled and no addresses, so the kernel sends
//! nothing of its own; a guard deletes the namespace (and with it the pair) even on panic.

use std::collections::{HashMap, HashSet};
use std::process::Command;
use std::time::{Duration, Instant};

use tapflow_sys::bpf;
use tapflow_sys::ring::{Fanout, FanoutMode, PACKET_BROADCAST, RxRing, RxRingConfig};
use tapflow_sys::tx::TxBatch;
use tapflow_sys::{clock, netns};

/// A namespace with a veth pair inside; deleted on drop.
struct Pair {
    ns: String,
    a: String,
    b: String,
}

fn ip(args: &[&str]) -> bool {
    Command::new("ip")
        .args(args)
        .output()
        .is_ok_and(|o| o.status.success())
}

impl Pair {
    /// `None` (test skipped) without root.
    fn new(test: char) -> Option<Pair> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: needs root for network namespaces and AF_PACKET");
            return None;
        }
        let ns = format!("tfsys{}{test}", std::process::id());
        let pair = Pair {
            a: format!("{ns}a"),
            b: format!("{ns}b"),
            ns,
        };
        assert!(pair.a.len() <= 15, "interface name {} too long", pair.a);
        assert!(
            ip(&["netns", "add", &pair.ns]),
            "ip netns add {} failed",
            pair.ns
        );
        // From here the guard cleans up whatever happens.
        for key in ["all", "default"] {
            let _ = Command::new("ip")
                .args(["netns", "exec", &pair.ns, "sysctl", "-qw"])
                .arg(format!("net.ipv6.conf.{key}.disable_ipv6=1"))
                .output();
        }
        let (ns, a, b) = (&pair.ns, &pair.a, &pair.b);
        assert!(ip(&[
            "-n", ns, "link", "add", a, "type", "veth", "peer", "name", b
        ]));
        for dev in [a, b, &"lo".to_owned()] {
            assert!(ip(&["-n", ns, "link", "set", dev, "up"]));
        }
        let deadline = Instant::now() + Duration::from_secs(3);
        while !pair.carrier() {
            assert!(Instant::now() < deadline, "veth {a}/{b} has no carrier");
            std::thread::sleep(Duration::from_millis(10));
        }
        Some(pair)
    }

    fn carrier(&self) -> bool {
        [&self.a, &self.b].iter().all(|dev| {
            Command::new("ip")
                .args(["-n", &self.ns, "link", "show", dev])
                .output()
                .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("LOWER_UP"))
        })
    }

    /// Runs `f` on a thread inside the namespace; a panic there fails the test after cleanup.
    fn run<T: Send>(&self, f: impl FnOnce(&str, &str) -> T + Send) -> T {
        std::thread::scope(|s| {
            s.spawn(|| {
                netns::enter(&self.ns).unwrap();
                f(&self.a, &self.b)
            })
            .join()
            .unwrap_or_else(|e| std::panic::resume_unwind(e))
        })
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        // Deleting the namespace removes the veth end inside it, and with it the pair.
        ip(&["netns", "del", &self.ns]);
    }
}

/// An Ethernet broadcast frame of `len` bytes: IPv4/UDP `sport -> dport` with `seq` in the
/// payload, or (`dport == 0`) a frame of local-experimental ethertype 0x88b5.
fn frame(len: usize, sport: u16, dport: u16, seq: u32) -> Vec<u8> {
    assert!(len >= 60);
    let mut f = vec![0u8; len];
    f[..6].fill(0xff);
    f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 1]);
    if dport == 0 {
        f[12..14].copy_from_slice(&[0x88, 0xb5]);
        f[14..18].copy_from_slice(&seq.to_be_bytes());
        return f;
    }
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    let ip_len = (len - 14) as u16;
    let iph = &mut f[14..34];
    iph[0] = 0x45;
    iph[2..4].copy_from_slice(&ip_len.to_be_bytes());
    iph[8] = 64;
    iph[9] = 17;
    iph[12..16].copy_from_slice(&[198, 18, 0, 1]);
    iph[16..20].copy_from_slice(&[198, 18, 0, 2]);
    let sum = (0..20)
        .step_by(2)
        .map(|i| u32::from(u16::from_be_bytes([iph[i], iph[i + 1]])))
        .sum::<u32>();
    let sum = !((sum & 0xffff) + (sum >> 16)) as u16;
    iph[10..12].copy_from_slice(&sum.to_be_bytes());
    let udp = &mut f[34..];
    udp[0..2].copy_from_slice(&sport.to_be_bytes());
    udp[2..4].copy_from_slice(&dport.to_be_bytes());
    udp[4..6].copy_from_slice(&(ip_len - 20).to_be_bytes());
    udp[8..12].copy_from_slice(&seq.to_be_bytes());
    for (i, b) in udp[12..].iter_mut().enumerate() {
        *b = (i as u8).wrapping_mul(31) ^ seq as u8;
    }
    f
}

fn tx(iface: &str, bypass: bool) -> TxBatch {
    // Every test frame is IPv4: the socket is bound to that EtherType.
    TxBatch::open(iface, 2048, bypass, 0x0800).unwrap()
}

/// Sends `frames`, a `sendmmsg` every `batch` frames (so the receiving veth's backlog, 1000
/// packets by default, never overflows) or every full batch if `batch` is 0.
fn send_all<F: AsRef<[u8]>>(tx: &mut TxBatch, frames: impl IntoIterator<Item = F>, batch: usize) {
    for (i, f) in frames.into_iter().enumerate() {
        let f = f.as_ref();
        if tx.slot().is_none() {
            tx.flush().unwrap();
        }
        let mut slot = tx.slot().unwrap();
        slot.buf()[..f.len()].copy_from_slice(f);
        slot.send(f.len());
        if batch > 0 && (i + 1) % batch == 0 {
            tx.flush().unwrap();
        }
    }
    tx.flush().unwrap();
    assert_eq!(tx.pending(), 0);
    assert_eq!(tx.wrong_format(), 0);
}

/// One received packet: tp_len, the captured bytes, timestamp, pkttype.
type Seen = (u32, Vec<u8>, u64, u8);

/// Reads blocks until `want` packets arrived or `wait` passed without news.
fn drain(ring: &RxRing, want: usize, wait: Duration) -> Vec<Seen> {
    let mut seen = Vec::new();
    let mut last = Instant::now();
    while seen.len() < want || want == usize::MAX {
        match ring.next_block(20, None).unwrap() {
            Some(block) => {
                let before = seen.len();
                seen.extend(
                    block
                        .packets()
                        .map(|p| (p.len, p.data.to_vec(), p.ts_ns, p.pkttype)),
                );
                assert_eq!(seen.len() - before, block.num_pkts() as usize);
                last = Instant::now();
            }
            None if last.elapsed() > wait => break,
            None => {}
        }
    }
    seen
}

fn rx_cfg(filter: Vec<bpf::Instruction>) -> RxRingConfig {
    RxRingConfig {
        block_size: 1 << 18,
        block_count: 8,
        retire_tov_ms: 5,
        filter,
        fanout: None,
        hw_timestamps: true,
        fill_rxhash: true,
        promiscuous: false,
    }
}

#[test]
fn a_every_frame_arrives_once_cut_to_snaplen_in_order() {
    let Some(pair) = Pair::new('a') else { return };
    pair.run(|a, b| {
        const K: usize = 1000;
        let rx = RxRing::open(b, &rx_cfg(bpf::accept_all(64))).unwrap();
        assert!(!rx.hw_timestamps(), "veth has no hardware clock");
        let sent: Vec<Vec<u8>> = (0..K)
            .map(|i| frame(60 + i * 7 % 500, 4000, 7777, i as u32))
            .collect();
        let t0 = clock::realtime_ns();
        send_all(&mut tx(a, false), sent.clone(), 64);
        let seen = drain(&rx, K, Duration::from_millis(500));
        assert_eq!(seen.len(), K, "packets seen");
        let mut last_ts = t0;
        for (i, (len, data, ts, pkttype)) in seen.iter().enumerate() {
            assert_eq!(*len as usize, sent[i].len(), "tp_len of packet {i}");
            assert_eq!(
                data.as_slice(),
                &sent[i][..sent[i].len().min(64)],
                "first bytes of packet {i}"
            );
            assert!(*ts >= last_ts, "timestamp of packet {i} went backwards");
            assert_eq!(*pkttype, PACKET_BROADCAST);
            last_ts = *ts;
        }
        assert!(last_ts <= clock::realtime_ns());
        let stats = rx.statistics().unwrap();
        assert_eq!((stats.packets, stats.drops), (K as u32, 0), "{stats:?}");
        // Clear on read.
        assert_eq!(rx.statistics().unwrap().packets, 0);
    });
}

#[test]
fn b_a_tiny_ring_overflows_and_every_packet_is_accounted_for() {
    let Some(pair) = Pair::new('b') else { return };
    pair.run(|a, b| {
        let page = 4096; // the smallest block the kernel takes on x86-64
        let cfg = RxRingConfig {
            block_size: page,
            block_count: 1,
            ..rx_cfg(bpf::accept_all(64))
        };
        let rx = RxRing::open(b, &cfg).unwrap();
        assert_eq!(rx.ring_bytes(), page as usize);
        send_all(
            &mut tx(a, true),
            (0..20_000u32).map(|i| frame(60, 4000, 7777, i)),
            256,
        );
        let seen = drain(&rx, usize::MAX, Duration::from_millis(200)).len() as u32;
        let stats = rx.statistics().unwrap();
        eprintln!("tiny ring: seen {seen}, {stats:?}");
        assert!(stats.drops > 0, "{stats:?}");
        assert!(stats.freeze_q_cnt > 0, "{stats:?}");
        assert_eq!(stats.packets, seen + stats.drops, "{stats:?}, seen {seen}");
    });
}

#[test]
fn c_a_compiled_filter_lets_only_matching_frames_through_and_swaps_live() {
    let Some(pair) = Pair::new('c') else { return };
    pair.run(|a, b| {
        let filter = bpf::compile("udp port 9", bpf::LINKTYPE_ETHERNET, 48).unwrap();
        let rx = RxRing::open(b, &rx_cfg(filter)).unwrap();
        let mut tx = tx(a, false);
        let mix = |n: u32| {
            (0..n).map(|i| match i % 3 {
                0 => frame(100, 4000, 9, i),
                1 => frame(100, 4000, 10, i),
                _ => frame(100, 0, 0, i),
            })
        };
        send_all(&mut tx, mix(300), 64);
        let seen = drain(&rx, 100, Duration::from_millis(300));
        assert_eq!(seen.len(), 100);
        for (len, data, _, _) in &seen {
            assert_eq!((*len, data.len()), (100, 48));
            assert_eq!(&data[36..38], &9u16.to_be_bytes(), "udp dport");
        }
        assert_eq!(rx.statistics().unwrap().packets, 100);
        // Swap to reject-all on the live socket: nothing more arrives, nothing is counted.
        rx.set_filter(&bpf::reject_all()).unwrap();
        send_all(&mut tx, mix(90), 64);
        assert!(drain(&rx, usize::MAX, Duration::from_millis(100)).is_empty());
        assert_eq!(rx.statistics().unwrap().packets, 0);
        let err = RxRing::open("tfsysnosuch", &rx_cfg(vec![])).unwrap_err();
        assert_eq!(err.to_string(), "no such interface: tfsysnosuch");
    });
}

#[test]
fn d_hash_fanout_puts_each_flow_on_exactly_one_ring() {
    let Some(pair) = Pair::new('d') else { return };
    pair.run(|a, b| {
        const FLOWS: u16 = 64;
        const PER_FLOW: u32 = 10;
        let fanout = Some(Fanout {
            group_id: std::process::id() as u16,
            mode: FanoutMode::Hash,
            defrag: true,
        });
        let cfg = RxRingConfig {
            fanout,
            ..rx_cfg(bpf::accept_all(64))
        };
        let rings = [
            RxRing::open(b, &cfg).unwrap(),
            RxRing::open(b, &cfg).unwrap(),
        ];
        let frames =
            (0..PER_FLOW).flat_map(|n| (0..FLOWS).map(move |f| frame(60, 10_000 + f, 7777, n)));
        send_all(&mut tx(a, false), frames, 64);
        let mut owner: HashMap<u16, usize> = HashMap::new();
        let mut per_ring = [0usize; 2];
        let total = usize::from(FLOWS) * PER_FLOW as usize;
        let deadline = Instant::now() + Duration::from_secs(3);
        while per_ring.iter().sum::<usize>() < total && Instant::now() < deadline {
            for (r, ring) in rings.iter().enumerate() {
                if let Some(block) = ring.next_block(5, None).unwrap() {
                    for p in block.packets() {
                        let sport = u16::from_be_bytes([p.data[34], p.data[35]]);
                        assert_eq!(
                            *owner.entry(sport).or_insert(r),
                            r,
                            "flow {sport} on both rings"
                        );
                        per_ring[r] += 1;
                    }
                }
            }
        }
        eprintln!("fanout: {per_ring:?} packets, {} flows", owner.len());
        assert_eq!(per_ring.iter().sum::<usize>(), total);
        assert_eq!(owner.len(), usize::from(FLOWS));
        assert!(per_ring.iter().all(|&n| n > 0), "{per_ring:?}");
        let counted: u32 = rings.iter().map(|r| r.statistics().unwrap().packets).sum();
        assert_eq!(counted as usize, total);
        let flows: HashSet<u16> = owner.keys().copied().collect();
        assert_eq!(flows.len(), usize::from(FLOWS));
    });
}

#[test]
fn e_batch_sender_rate_on_veth() {
    let Some(pair) = Pair::new('e') else { return };
    pair.run(|a, _b| {
        const N: u32 = 100_000;
        let mut sender = tx(a, true);
        let template = frame(60, 4000, 7777, 0);
        let start = clock::monotonic_ns();
        send_all(
            &mut sender,
            std::iter::repeat_n(&template[..], N as usize),
            0,
        );
        let secs = (clock::monotonic_ns() - start) as f64 / 1e9;
        eprintln!(
            "sendmmsg on veth: {N} frames of 60 bytes in {secs:.3} s = {:.0} pps",
            f64::from(N) / secs
        );
    });
}

#[test]
fn g_a_sender_bound_to_a_protocol_keeps_nothing_it_receives() {
    use std::os::fd::{AsFd, AsRawFd};
    let Some(pair) = Pair::new('g') else { return };
    pair.run(|a, b| {
        // A's sender is bound to IPv4 on A; B sends IPv4 frames to A.
        let listener = tx(a, true);
        let frames: Vec<Vec<u8>> = (0..50).map(|i| frame(60, 5000, 80, i)).collect();
        send_all(&mut tx(b, true), &frames, 0);
        std::thread::sleep(Duration::from_millis(50));
        let mut buf = [0u8; 2048];
        // SAFETY: recv into a live buffer of its length, on a socket we own.
        let n = unsafe {
            libc::recv(
                listener.as_fd().as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_DONTWAIT,
            )
        };
        let err = std::io::Error::last_os_error();
        assert_eq!(n, -1, "the sender received a frame");
        assert_eq!(err.raw_os_error(), Some(libc::EAGAIN), "{err}");
    });
}

#[test]
fn h_a_readable_wake_fd_ends_the_wait_and_packets_still_come_first() {
    use std::io::Write;
    use std::os::fd::AsFd;
    use std::os::unix::net::UnixStream;
    let Some(pair) = Pair::new('h') else { return };
    pair.run(|a, b| {
        let rx = RxRing::open(b, &rx_cfg(bpf::accept_all(64))).unwrap();
        let (wake_rx, mut wake_tx) = UnixStream::pair().unwrap();
        // Not readable: an idle ring waits out its timeout.
        let t0 = Instant::now();
        assert!(rx.next_block(200, Some(wake_rx.as_fd())).unwrap().is_none());
        assert!(
            t0.elapsed() >= Duration::from_millis(190),
            "{:?}",
            t0.elapsed()
        );
        // Readable (and never read): a 10 s wait ends at once, every time.
        wake_tx.write_all(b"!").unwrap();
        for _ in 0..2 {
            let t0 = Instant::now();
            assert!(
                rx.next_block(10_000, Some(wake_rx.as_fd()))
                    .unwrap()
                    .is_none()
            );
            assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
        }
        // A block the kernel handed over is still taken while the wake fd is readable.
        send_all(
            &mut tx(a, false),
            (0..10u32).map(|i| frame(60, 4000, 7777, i)),
            10,
        );
        let t0 = Instant::now();
        let block = loop {
            if let Some(b) = rx.next_block(10_000, Some(wake_rx.as_fd())).unwrap() {
                break b;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(5),
                "the block never came"
            );
            std::thread::sleep(Duration::from_millis(5));
        };
        assert_eq!(block.packets().count(), 10);
    });
}

/// Takes the packets of every ring until `want` arrived in all, or fails after 5 s; returns
/// how many each ring took.
fn take_all(rings: &[RxRing], want: usize) -> Vec<usize> {
    let mut got = vec![0; rings.len()];
    let deadline = Instant::now() + Duration::from_secs(5);
    while got.iter().sum::<usize>() < want {
        assert!(Instant::now() < deadline, "{got:?} of {want} packets");
        for (r, ring) in rings.iter().enumerate() {
            if let Some(block) = ring.next_block(5, None).unwrap() {
                got[r] += block.packets().count();
            }
        }
    }
    assert_eq!(got.iter().sum::<usize>(), want, "{got:?}");
    got
}

#[test]
fn i_a_link_flap_is_reported_once_and_the_rings_resume_without_a_new_bind() {
    use tapflow_sys::iface::{self, LinkState};
    use tapflow_sys::ring::Wait;
    let Some(pair) = Pair::new('i') else { return };
    pair.run(|a, b| {
        let cfg = RxRingConfig {
            fanout: Some(Fanout {
                group_id: (std::process::id() as u16) ^ 0x5a5a,
                mode: FanoutMode::Hash,
                defrag: true,
            }),
            ..rx_cfg(bpf::accept_all(64))
        };
        let rings = [
            RxRing::open(b, &cfg).unwrap(),
            RxRing::open(b, &cfg).unwrap(),
        ];
        let index = rings[0].ifindex();
        let burst = |n: u32| (0..n).map(|i| frame(60, 2000 + (i % 32) as u16, 7777, i));
        send_all(&mut tx(a, false), burst(200), 50);
        take_all(&rings, 200);

        assert!(ip(&["-n", &pair.ns, "link", "set", b, "down"]));
        for ring in &rings {
            assert_eq!(ring.wait(1000, None).unwrap(), Wait::LinkDown);
            // Said once: the socket's error is cleared by reading it.
            assert_eq!(ring.wait(20, None).unwrap(), Wait::Nothing);
        }
        assert_eq!(iface::link_state(b, index).unwrap(), LinkState::SetDown);

        assert!(ip(&["-n", &pair.ns, "link", "set", b, "up"]));
        let deadline = Instant::now() + Duration::from_secs(5);
        while iface::link_state(b, index).unwrap() != LinkState::Up {
            assert!(Instant::now() < deadline, "{b} not up again");
            std::thread::sleep(Duration::from_millis(10));
        }
        // The same sockets, not bound again: both fanout members take packets.
        send_all(&mut tx(a, false), burst(200), 50);
        let got = take_all(&rings, 200);
        assert!(got.iter().all(|&n| n > 0), "{got:?}");

        // A deleted interface is gone for good, even when a new one takes its name.
        assert!(ip(&["-n", &pair.ns, "link", "del", b]));
        assert_eq!(rings[0].wait(1000, None).unwrap(), Wait::LinkDown);
        let err = iface::link_state(b, index).unwrap_err().to_string();
        assert!(err.contains("no interface is named"), "{err}");
        assert!(ip(&[
            "-n", &pair.ns, "link", "add", b, "type", "veth", "peer", "name", a
        ]));
        let err = iface::link_state(b, index).unwrap_err().to_string();
        assert!(err.contains("is now another device"), "{err}");
    });
}

#[test]
fn f_without_cap_net_raw_the_error_says_what_is_needed() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return;
    }
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const CAP_NET_RAW: u32 = 13;
    // Capabilities are per thread: drop CAP_NET_RAW on a thread of our own.
    std::thread::spawn(|| {
        let mut header = Header {
            version: 0x2008_0522,
            pid: 0,
        };
        let mut data = [Data::default(); 2];
        // SAFETY: capget with a v3 header and room for the two u32 words v3 uses.
        let got = unsafe { libc::syscall(libc::SYS_capget, &mut header, data.as_mut_ptr()) };
        assert_eq!(got, 0);
        data[0].effective &= !(1 << CAP_NET_RAW);
        data[0].permitted &= !(1 << CAP_NET_RAW);
        // SAFETY: capset on the calling thread (pid 0) with the sets just read, minus one bit.
        let set = unsafe { libc::syscall(libc::SYS_capset, &mut header, data.as_ptr()) };
        assert_eq!(set, 0);
        let err = RxRing::open("lo", &rx_cfg(bpf::accept_all(64))).unwrap_err();
        assert!(err.is_permission(), "{err}");
        assert_eq!(
            err.to_string(),
            "socket(AF_PACKET) on lo failed: needs root or CAP_NET_RAW (Operation not permitted)"
        );
        let err = TxBatch::open("lo", 2048, false, 0).unwrap_err();
        assert!(err.is_permission(), "{err}");
    })
    .join()
    .unwrap();
}
