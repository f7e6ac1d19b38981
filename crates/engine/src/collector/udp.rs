//! A UDP receive worker: one socket of a listener's `SO_REUSEPORT` group, read with
//! `recvmmsg`, and its own decoder. The kernel keeps each exporter (its address and port) on
//! one socket of the group, so the templates it sends are in the decoder its data meets.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tapflow_sys::udp::{RecvBatch, UdpSocket};
use tapflow_wire::flowdecode::SavedExporter;
use tapflow_wire::prefix::Prefix;

use crate::collector::intake::{Intake, exporter_addr};
use crate::collector::ledger::{Book, publish};
use crate::collector::listen::detect;
use crate::collector::templates_state::SAVE_EVERY;

/// How long one wait for datagrams lasts: the longest a stop waits to be seen.
pub const READ_TIMEOUT: Duration = Duration::from_millis(50);
/// How often a worker publishes its counts and expires idle exporters.
const TICK: Duration = Duration::from_secs(1);

/// One UDP worker.
#[derive(Debug)]
pub struct UdpWorker {
    /// The socket.
    pub sock: UdpSocket,
    /// Accepted sender prefixes (empty: all).
    pub allow: Arc<Vec<Prefix>>,
    /// Its decoder and batch.
    pub intake: Intake,
    /// Its slot in the ledger.
    pub slot: Arc<Mutex<Book>>,
    /// Exporters silent this long are forgotten (templates, sequence numbers).
    pub idle: Duration,
    /// Where its exporters' templates are put for the state file, if one is kept.
    pub saved: Option<Arc<Mutex<Vec<SavedExporter>>>>,
}

impl UdpWorker {
    /// Receives until `done` is set, then takes what the socket still holds and hands the last
    /// batch over.
    pub fn run(mut self, done: &AtomicBool) {
        let mut batch = RecvBatch::new();
        let mut last_tick = Instant::now();
        let mut last_save = Instant::now();
        let mut drops_seen = self.sock.drops().unwrap_or(0);
        loop {
            let stopping = done.load(Ordering::Acquire);
            // An error (the socket's pending ICMP error) is no reason to stop receiving.
            let n = self
                .sock
                .recv_batch(&mut batch, !stopping)
                .unwrap_or_default();
            let now_ns = tapflow_sys::clock::realtime_ns();
            for i in 0..n {
                let Some((bytes, from, cut)) = batch.get(i) else {
                    break;
                };
                self.intake.book.datagrams += 1;
                let Some(from) = from else {
                    self.intake.book.bad([0; 16], "no_address");
                    continue;
                };
                if !self.allow.is_empty() && !self.allow.iter().any(|c| c.contains_ip(from.ip())) {
                    self.intake.book.refused += 1;
                    continue;
                }
                let exporter = exporter_addr(from.ip());
                if cut {
                    self.intake.book.bad(exporter, "truncated_datagram");
                    continue;
                }
                self.intake.take(detect(bytes), exporter, bytes, now_ns);
            }
            if stopping && n == 0 {
                break;
            }
            if last_tick.elapsed() >= TICK {
                last_tick = Instant::now();
                self.intake.tick(now_ns, self.idle);
                self.count_drops(&mut drops_seen);
                publish(&self.slot, &self.intake.book);
                if last_save.elapsed() >= SAVE_EVERY {
                    last_save = Instant::now();
                    self.put_templates();
                }
            }
        }
        self.intake.send();
        self.count_drops(&mut drops_seen);
        publish(&self.slot, &self.intake.book);
        self.put_templates();
    }

    /// Puts the exporters' templates where the collector writes its state from.
    fn put_templates(&self) {
        if let Some(slot) = &self.saved {
            let saved = self.intake.save();
            *slot.lock().unwrap_or_else(PoisonError::into_inner) = saved;
        }
    }

    /// Adds what the kernel dropped since the last look (the counter wraps at 2^32).
    fn count_drops(&mut self, last: &mut u32) {
        if let Ok(now) = self.sock.drops() {
            self.intake.book.socket_drops += u64::from(now.wrapping_sub(*last));
            *last = now;
        }
    }
}
