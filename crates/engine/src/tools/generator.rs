//! The traffic generator: sends synthetic frames (N flows, one size) or the packets of a capture
//! file on an AF_PACKET socket, a batch of frames per `sendmmsg` ([`TxBatch`]), as fast as
//! possible or at a set rate.

use std::num::NonZeroU64;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;
use tapflow_sys::iface;
use tapflow_sys::tx::{BATCH_FRAMES, TxBatch};
use tapflow_wire::build::{self, FrameSpec, Layout};
use tapflow_wire::capfile::Reader;
use tapflow_wire::ethernet;

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
    /// The packets of a capture file, in order, `loops` times over (`None`: until stopped).
    Replay {
        /// The capture file.
        path: PathBuf,
        /// How many times to send the file; `None` repeats it until `count`, `duration` or
        /// the stop.
        loops: Option<NonZeroU64>,
    },
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
    /// Frames not sent, for any reason: `too_large + too_short + refused`.
    pub failed: u64,
    /// Frames of a replay longer than the interface takes: its MTU plus the 14-byte Ethernet
    /// header.
    pub too_large: u64,
    /// Frames of a replay shorter than an Ethernet header (14 bytes).
    pub too_short: u64,
    /// Frames the kernel refused when they were sent (`EINVAL`, `EMSGSIZE`).
    pub refused: u64,
    /// The MTU of the interface.
    pub mtu: u32,
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

/// The packets of a capture file, pass after pass. A frame that does not fit a slot (the
/// interface's MTU + Ethernet header) or is shorter than an Ethernet header is counted and
/// skipped; the others are copied into the slots as they are.
struct Replay<'a> {
    path: PathBuf,
    /// The file read from its start: each pass begins with a copy.
    start: Reader<'a>,
    reader: Reader<'a>,
    /// Passes left after this one; `None`: no end.
    passes_left: Option<u64>,
    /// The longest frame the interface takes.
    max: usize,
    too_large: u64,
    too_short: u64,
    error: Option<EngineError>,
    /// Whether this pass has produced a frame: a pass that produces none ends the replay, or
    /// `--loop 0` over a file of unsendable frames would never end.
    sent_any: bool,
}

impl<'a> Replay<'a> {
    fn new(path: PathBuf, start: Reader<'a>, loops: Option<NonZeroU64>, max: usize) -> Self {
        Replay {
            path,
            reader: start.clone(),
            start,
            passes_left: loops.map(|n| n.get() - 1),
            max,
            too_large: 0,
            too_short: 0,
            error: None,
            sent_any: false,
        }
    }

    /// Starts the next pass, if there is one.
    #[cold]
    fn next_pass(&mut self) -> bool {
        let more = self.sent_any
            && match &mut self.passes_left {
                None => true,
                Some(0) => false,
                Some(n) => {
                    *n -= 1;
                    true
                }
            };
        if more {
            self.reader = self.start.clone();
            self.sent_any = false;
        }
        more
    }
}

impl FrameSource for Replay<'_> {
    fn next_into(&mut self, buf: &mut [u8]) -> Option<usize> {
        loop {
            match self.reader.next_packet() {
                Some(Ok(p)) => {
                    let n = p.data.len();
                    if n > buf.len() {
                        self.too_large += 1;
                        continue;
                    }
                    if n < ethernet::HEADER_LEN {
                        self.too_short += 1;
                        continue;
                    }
                    buf[..n].copy_from_slice(p.data);
                    self.sent_any = true;
                    return Some(n);
                }
                Some(Err(e)) => {
                    self.error = Some(EngineError::File {
                        path: self.path.clone(),
                        source: e,
                    });
                    return None;
                }
                None if self.next_pass() => {}
                None => return None,
            }
        }
    }

    fn max_len(&self) -> usize {
        self.max
    }
}

/// Sends traffic until `count`, `duration` or `stop` (or the end of a replay); `tick` is called
/// about every 100 ms with the frames sent so far.
///
/// Refused before anything is sent: synthetic frames longer than the interface takes (its MTU
/// plus the Ethernet header), and a capture file without packets.
pub fn run(
    cfg: &GenConfig,
    stop: &AtomicBool,
    tick: &mut dyn FnMut(u64, Duration),
) -> Result<GenReport, EngineError> {
    let mtu = iface::mtu(&cfg.ifname)?;
    let max_frame = mtu as usize + ethernet::HEADER_LEN;
    let mut report = match &cfg.traffic {
        Traffic::Synthetic { spec, flows } => {
            if *flows == 0 || *flows > 65_536 {
                return Err(EngineError::Config(format!(
                    "--flows {flows} is out of range: 1 to 65536 distinct source ports"
                )));
            }
            if spec.frame_len > max_frame {
                return Err(EngineError::Config(format!(
                    "--size {} is larger than {} can send: its MTU of {mtu} allows frames of at \
                     most {max_frame} bytes (the MTU + the 14-byte Ethernet header)",
                    spec.frame_len, cfg.ifname
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
            send(cfg, &mut src, stop, tick)?
        }
        Traffic::Replay { path, loops } => {
            // Compressed or not, as `-r` reads it.
            let map = crate::source::file::map(path)?;
            let file_error = |source| EngineError::File {
                path: path.clone(),
                source,
            };
            let reader = Reader::new(map.bytes()).map_err(file_error)?;
            match reader.clone().next_packet() {
                None => {
                    return Err(EngineError::Config(format!(
                        "{}: the file holds no packets: nothing to send",
                        path.display()
                    )));
                }
                Some(Err(e)) => return Err(file_error(e)),
                Some(Ok(_)) => {}
            }
            let mut src = Replay::new(path.clone(), reader, *loops, max_frame);
            let mut report = send(cfg, &mut src, stop, tick)?;
            if let Some(e) = src.error {
                return Err(e);
            }
            report.too_large = src.too_large;
            report.too_short = src.too_short;
            report
        }
    };
    report.failed = report.too_large + report.too_short + report.refused;
    report.mtu = mtu;
    Ok(report)
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
    let mut ended = false;
    while queued < limit && !ended {
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
                // The end of a replay: the frames filled so far still go, and count.
                ended = true;
                break;
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
    // The sources hand over no length the batch's own check refuses: what it counts, the
    // kernel refused.
    let refused = tx.wrong_format();
    Ok(GenReport {
        sent: queued - refused.min(queued),
        bytes,
        seconds: started.elapsed().as_secs_f64(),
        refused,
        ..GenReport::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tapflow_wire::build::L4;
    use tapflow_wire::ethernet::EthernetAddress;
    use tapflow_wire::linktype::LinkType;
    use tapflow_wire::pcap;

    /// A UDP frame of `len` bytes from source port `port` (at least 60 bytes: cut shorter).
    fn frame(port: u16, len: usize) -> Vec<u8> {
        let spec = FrameSpec {
            src_mac: EthernetAddress([2, 0, 0, 0, 0, 1]),
            dst_mac: EthernetAddress([2, 0, 0, 0, 0, 2]),
            src_ip: "198.18.0.1".parse().unwrap(),
            dst_ip: "198.18.0.2".parse().unwrap(),
            proto: L4::Udp,
            src_port: port,
            dst_port: 9,
            frame_len: len.max(build::MIN_FRAME_LEN),
        };
        let mut f = vec![0; spec.frame_len];
        build::build(&spec, &mut f).unwrap();
        f.truncate(len);
        f
    }

    /// A pcap file of `frames`.
    fn pcap_of(frames: &[Vec<u8>]) -> Vec<u8> {
        let mut d = Vec::new();
        pcap::write_header(&mut d, LinkType::Ethernet, 65535);
        for (i, f) in frames.iter().enumerate() {
            pcap::write_record(&mut d, i as u64 * 1000, f, f.len() as u32);
        }
        d
    }

    /// The source ports of the frames a replay of `file` produces into slots of `slot` bytes,
    /// `loops` times over, stopping after `limit` frames; and the replay, for its counters.
    fn replay(file: &[u8], loops: u64, slot: usize, limit: usize) -> (Vec<u16>, u64, u64) {
        let mut r = Replay::new(
            "t.pcap".into(),
            Reader::new(file).unwrap(),
            NonZeroU64::new(loops),
            slot,
        );
        let mut buf = vec![0; slot];
        let mut ports = Vec::new();
        while ports.len() < limit {
            let Some(n) = r.next_into(&mut buf) else {
                break;
            };
            assert!(n >= 34, "a whole UDP frame");
            ports.push(u16::from_be_bytes([buf[34], buf[35]]));
        }
        assert!(r.error.is_none());
        (ports, r.too_large, r.too_short)
    }

    #[test]
    fn a_replay_sends_the_file_once_unless_asked_to_loop() {
        let file = pcap_of(&[frame(1, 60), frame(2, 60), frame(3, 60)]);
        assert_eq!(replay(&file, 1, 1514, 100).0, [1, 2, 3]);
        assert_eq!(replay(&file, 2, 1514, 100).0, [1, 2, 3, 1, 2, 3]);
        // 0 loops: until stopped (here, by the frame limit).
        let (ports, ..) = replay(&file, 0, 1514, 1000);
        assert_eq!(ports.len(), 1000);
        assert_eq!(&ports[..4], [1, 2, 3, 1]);
    }

    #[test]
    fn frames_that_do_not_fit_the_link_are_counted_by_reason_on_every_pass() {
        let file = pcap_of(&[
            frame(1, 60),
            frame(2, 1515),
            frame(3, 1514),
            frame(4, 13),
            frame(5, 14),
        ]);
        // The 14-byte frame is an Ethernet header alone: sendable, but not a UDP frame.
        let mut r = Replay::new(
            "t.pcap".into(),
            Reader::new(&file).unwrap(),
            NonZeroU64::new(2),
            1514,
        );
        let mut buf = vec![0; 1514];
        let lens: Vec<usize> = std::iter::from_fn(|| r.next_into(&mut buf)).collect();
        assert_eq!(lens, [60, 1514, 14, 60, 1514, 14]);
        assert_eq!((r.too_large, r.too_short), (2, 2));
    }

    #[test]
    fn a_replay_of_frames_none_of_which_fit_ends_even_when_looping_forever() {
        let file = pcap_of(&[frame(1, 1600), frame(2, 9000)]);
        let (ports, too_large, too_short) = replay(&file, 0, 1514, 10);
        assert_eq!((ports.len(), too_large, too_short), (0, 2, 0));
    }
}
