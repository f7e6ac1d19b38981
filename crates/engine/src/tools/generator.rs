//! The traffic generator: sends synthetic frames (N flows, one size) or the packets of a capture
//! file on an AF_PACKET socket, a batch of frames per `sendmmsg` ([`TxBatch`]), as fast as
//! possible or at a set rate.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;
use tapflow_sys::mmap::MappedFile;
use tapflow_sys::tx::{BATCH_FRAMES, TxBatch};
use tapflow_wire::build::{self, FrameSpec, Layout};
use tapflow_wire::capfile::Reader;

use crate::EngineError;

/// What to send.
#[derive(Debug, Clone)]
pub enum Traffic {
    /// Synthetic frames: `flows` distinct source ports starting at `spec.src_port`.
    Synthetic {
        /// The first frame.
        spec: FrameSpec,
        /// Number of distinct flows.
        flows: u32,
    },
    /// The packets of a capture file, in order, looping if `count` asks for more.
    Replay(PathBuf),
}

/// Generator settings.
#[derive(Debug, Clone)]
pub struct GenConfig {
    /// Interface to send on.
    pub ifname: String,
    /// What to send.
    pub traffic: Traffic,
    /// Stop after this many frames.
    pub count: Option<u64>,
    /// Stop after this long.
    pub duration: Option<Duration>,
    /// Frames per second; `None` is as fast as possible.
    pub rate: Option<u64>,
}

/// What the generator sent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct GenReport {
    /// Frames the kernel accepted for sending.
    pub sent: u64,
    /// Bytes of those frames (without FCS).
    pub bytes: u64,
    /// Wall-clock seconds from the first frame to the last completion.
    pub seconds: f64,
    /// Frames not sent: longer than the interface takes (MTU + Ethernet header), shorter than
    /// an Ethernet header, or refused by the kernel (`EINVAL`, `EMSGSIZE`).
    pub failed: u64,
}

/// Produces the next frame into a batch slot; returns its length, or `None` at the end.
trait FrameSource {
    fn next_into(&mut self, buf: &mut [u8]) -> Option<usize>;
    fn max_len(&self) -> usize;
    /// Told once the sender is open: how many slots a batch has.
    fn batch_slots(&mut self, _slots: usize) {}
    /// The EtherType of every frame, or 0 if they differ.
    fn ethertype(&self) -> u16 {
        0
    }
}

struct Synthetic {
    template: Vec<u8>,
    layout: Layout,
    base_port: u16,
    flows: u32,
    next: u32,
    /// Frames produced so far.
    produced: u64,
    /// Slots in a batch.
    slots: u64,
}

impl FrameSource for Synthetic {
    #[inline]
    fn next_into(&mut self, buf: &mut [u8]) -> Option<usize> {
        let n = self.template.len();
        let dst = buf.get_mut(..n)?;
        self.produced += 1;
        // Slots are handed out in order and keep their bytes after sending. When the flow count
        // divides the batch, slot k always carries flow k % flows: after the first batch every
        // slot already holds its frame, and filling one is only counting it.
        if self.produced > self.slots && self.slots.is_multiple_of(u64::from(self.flows)) {
            return Some(n);
        }
        dst.copy_from_slice(&self.template);
        if self.flows > 1 {
            let port = self.base_port.wrapping_add(self.next as u16);
            build::vary_flow(dst, &self.layout, port);
            self.next += 1;
            if self.next == self.flows {
                self.next = 0;
            }
        }
        Some(n)
    }

    fn max_len(&self) -> usize {
        self.template.len()
    }

    fn batch_slots(&mut self, slots: usize) {
        self.slots = slots as u64;
    }

    fn ethertype(&self) -> u16 {
        // Every frame is the template with another port: the same link header.
        self.template
            .get(12..14)
            .map_or(0, |t| u16::from_be_bytes([t[0], t[1]]))
    }
}

struct Replay<'a> {
    bytes: &'a [u8],
    path: PathBuf,
    reader: Reader<'a>,
    max: usize,
    too_large: u64,
    error: Option<EngineError>,
    sent_any: bool,
}

impl FrameSource for Replay<'_> {
    fn next_into(&mut self, buf: &mut [u8]) -> Option<usize> {
        loop {
            match self.reader.next_packet() {
                Some(Ok(p)) => {
                    if p.data.len() > buf.len() {
                        self.too_large += 1;
                        continue;
                    }
                    buf[..p.data.len()].copy_from_slice(p.data);
                    self.sent_any = true;
                    return Some(p.data.len());
                }
                Some(Err(e)) => {
                    self.error = Some(EngineError::File {
                        path: self.path.clone(),
                        source: e,
                    });
                    return None;
                }
                None if self.sent_any => {
                    // Start the file over.
                    self.reader = Reader::new(self.bytes).ok()?;
                    self.sent_any = false;
                }
                None => return None,
            }
        }
    }

    fn max_len(&self) -> usize {
        self.max
    }
}

/// Sends traffic until `count`, `duration` or `stop`; `tick` is called about every 100 ms with
/// the frames sent so far.
pub fn run(
    cfg: &GenConfig,
    stop: &AtomicBool,
    tick: &mut dyn FnMut(u64, Duration),
) -> Result<GenReport, EngineError> {
    match &cfg.traffic {
        Traffic::Synthetic { spec, flows } => {
            if *flows == 0 || *flows > 65_536 {
                return Err(EngineError::Config(format!(
                    "--flows {flows} is out of range: 1 to 65536 distinct source ports"
                )));
            }
            let mut template = vec![0u8; spec.frame_len];
            let layout = build::build(spec, &mut template)
                .map_err(|e| EngineError::Config(format!("cannot build the frame: {e}")))?;
            let mut src = Synthetic {
                template,
                layout,
                base_port: spec.src_port,
                flows: *flows,
                next: 0,
                produced: 0,
                slots: u64::MAX,
            };
            send(cfg, &mut src, stop, tick)
        }
        Traffic::Replay(path) => {
            let map = MappedFile::open(path)?;
            let reader = Reader::new(map.bytes()).map_err(|source| EngineError::File {
                path: path.clone(),
                source,
            })?;
            let mut src = Replay {
                bytes: map.bytes(),
                path: path.clone(),
                reader,
                max: 9216,
                too_large: 0,
                error: None,
                sent_any: false,
            };
            let mut report = send(cfg, &mut src, stop, tick)?;
            if let Some(e) = src.error {
                return Err(e);
            }
            report.failed += src.too_large;
            Ok(report)
        }
    }
}

fn send(
    cfg: &GenConfig,
    src: &mut dyn FrameSource,
    stop: &AtomicBool,
    tick: &mut dyn FnMut(u64, Duration),
) -> Result<GenReport, EngineError> {
    let mut tx = TxBatch::open(&cfg.ifname, src.max_len(), true, src.ethertype())?;
    src.batch_slots(BATCH_FRAMES);
    let limit = cfg.count.unwrap_or(u64::MAX);
    let started = Instant::now();
    let mut last_tick = started;
    let mut queued: u64 = 0;
    let mut bytes: u64 = 0;
    'outer: while queued < limit {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let now = Instant::now();
        if cfg.duration.is_some_and(|d| now - started >= d) {
            break;
        }
        let allowed = match cfg.rate {
            Some(r) => {
                let due = ((now - started).as_secs_f64() * r as f64) as u64 + 1;
                due.saturating_sub(queued).min(limit - queued)
            }
            None => limit - queued,
        };
        let mut filled = 0u64;
        while filled < allowed {
            let Some(mut slot) = tx.slot() else { break };
            let Some(n) = src.next_into(slot.buf()) else {
                break 'outer;
            };
            slot.send(n);
            bytes += n as u64;
            filled += 1;
        }
        queued += filled;
        tx.flush()?;
        if cfg.rate.is_some() && filled == 0 {
            std::thread::sleep(Duration::from_micros(50));
        }
        if now - last_tick >= Duration::from_millis(100) {
            last_tick = now;
            tick(queued, now - started);
        }
    }
    tx.flush()?;
    let failed = tx.wrong_format();
    Ok(GenReport {
        sent: queued - failed.min(queued),
        bytes,
        seconds: started.elapsed().as_secs_f64(),
        failed,
    })
}
