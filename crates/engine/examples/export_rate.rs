//! Records per second the flow exporter sustains: N synthetic biflow records (default 5M, a
//! quarter IPv6) through the exporter thread to one IPFIX/UDP collector on loopback, which
//! counts the datagrams and the data records in them.
//!
//!     cargo run --release -p tapflow-engine --example export_rate [N] [MTU]
//!
//! Prints records, messages, seconds and records/s as the exporter saw them, and what arrived.

use std::net::UdpSocket;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tapflow_engine::sink::flow::export::{
    BATCH, ExportConfig, ExportRate, ExportTarget, Exporter, MeterClock,
};
use tapflow_wire::flowrecord::{EndReason, FlowRecord};
use tapflow_wire::ipfix;

fn record(i: u64) -> FlowRecord {
    let mut r = FlowRecord {
        ipv6: i % 4 == 3,
        proto: if i.is_multiple_of(2) { 6 } else { 17 },
        sport: 1024 + (i % 60_000) as u16,
        dport: 443,
        end_reason: EndReason::IdleTimeout,
        ..FlowRecord::default()
    };
    r.src[..8].copy_from_slice(&i.to_be_bytes());
    r.dst[..4].copy_from_slice(&[192, 0, 2, 1]);
    let t = 1_700_000_000_000_000_000 + i * 1000;
    r.fwd.add(t, 1500, 0x18);
    r.rev.add(t + 500, 60, 0x10);
    r
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: u64 = args.next().map_or(5_000_000, |s| s.parse().expect("N"));
    let mtu: u32 = args.next().map_or(1500, |s| s.parse().expect("MTU"));
    let sink = UdpSocket::bind("127.0.0.1:0").expect("bind");
    sink.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let addr = sink.local_addr().unwrap();
    let (got_msgs, got_records) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let done = Arc::new(AtomicBool::new(false));
    let counter = {
        let (m, r, done) = (got_msgs.clone(), got_records.clone(), done.clone());
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 65536];
            loop {
                match sink.recv(&mut buf) {
                    Ok(len) => {
                        m.fetch_add(1, Ordering::Relaxed);
                        let mut s = 16;
                        while s + 4 <= len {
                            let id = u16::from_be_bytes([buf[s], buf[s + 1]]);
                            let sl = usize::from(u16::from_be_bytes([buf[s + 2], buf[s + 3]]));
                            let per = match id {
                                ipfix::TEMPLATE_ID_V4 => ipfix::RECORD_LEN_V4,
                                ipfix::TEMPLATE_ID_V6 => ipfix::RECORD_LEN_V6,
                                _ => 0,
                            };
                            if let Some(k) = sl.saturating_sub(4).checked_div(per) {
                                r.fetch_add(k as u64, Ordering::Relaxed);
                            }
                            s += sl.max(4);
                        }
                    }
                    Err(_) if done.load(Ordering::Relaxed) => break,
                    Err(_) => {}
                }
            }
        })
    };
    let x = Exporter::start(
        &ExportConfig {
            targets: vec![ExportTarget::collector("ipfix", addr).expect("target")],
            mtu: Some(mtu),
            observation_domain: 1,
            rate: ExportRate::Unpaced,
            anonymize: None,
            store: None,
            enrich: None,
        },
        MeterClock::Packets,
    )
    .expect("exporter");
    let q = x.queue();
    let records: Vec<FlowRecord> = (0..BATCH as u64 * 64).map(record).collect();
    let mut batch = Vec::with_capacity(BATCH);
    let start = Instant::now();
    let mut sent = 0u64;
    while sent < n {
        let k = (n - sent).min(BATCH as u64) as usize;
        let at = (sent as usize) % records.len();
        batch.extend_from_slice(&records[at..(at + k).min(records.len())]);
        sent += batch.len() as u64;
        q.send(
            &mut batch,
            1_700_000_100_000_000_000,
            1_700_000_000_000_000_000,
        )
        .expect("send");
    }
    drop(q);
    let report = x.finish();
    let secs = start.elapsed().as_secs_f64();
    std::thread::sleep(Duration::from_millis(400));
    done.store(true, Ordering::Relaxed);
    counter.join().unwrap();
    let o = &report.outputs[0];
    println!(
        "records {}  messages {}  lost_messages {}  seconds {secs:.3}  records_per_s {:.0}  \
         arrived_messages {}  arrived_records {}",
        o.records,
        o.messages,
        o.lost_messages,
        o.records as f64 / secs,
        got_msgs.load(Ordering::Relaxed),
        got_records.load(Ordering::Relaxed)
    );
}
