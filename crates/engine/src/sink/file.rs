//! The file sink: turns header records into pcapng (or classic pcap) files, rotates
//! them, and writes interface statistics blocks.
//!
//! A gap in a live capture (the link down) is marked in pcapng: an ISB at each of its edges
//! with an `opt_comment` saying what happened, and a comment on the first packet after it,
//! which is what tshark shows ("Packet comments", `frame.comment`). Classic pcap has no place
//! for either.
//!
//! A path ending in `.zst` or `.gz` is compressed ([`Codec`]) in the file's I/O thread, one
//! zstd frame or gzip member per 2 MiB chunk of records, through the page cache; `O_DIRECT` is
//! for uncompressed files. Rotation by size counts the bytes before compression.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tapflow_sys::direct::DirectFile;
use tapflow_sys::mmap::HUGE_PAGE;
use tapflow_sys::outfile;
use tapflow_wire::pcapng::{EpbOptions, IdbOptions, InterfaceStatistics};
use tapflow_wire::record::ControlField;
use tapflow_wire::{pcap, pcapng};

use crate::EngineError;
use crate::compress::Codec;
use crate::counters::Totals;
use crate::naming::{is_stdout, is_timed, output_path, part_path, timed_path};
use crate::sink::record_sink::{Outcome, RecordSink};
use crate::source::{InterfaceInfo, LinkDown, LinkEvent};

/// Output file format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// pcapng with ns timestamps, `epb_flags`, `epb_dropcount` and statistics blocks.
    Pcapng,
    /// Classic pcap with ns timestamps (magic 0xa1b23c4d).
    Pcap,
}

/// Where and how the file sink writes.
#[derive(Debug, Clone)]
pub struct WriterConfig {
    /// The `-w` path.
    pub path: PathBuf,
    /// File format.
    pub format: Format,
    /// Which worker this writer serves, when there are several.
    pub worker: Option<usize>,
    /// Start a new file once this many bytes were written.
    pub rotate_bytes: Option<u64>,
    /// Start a new file once the current one is this old.
    pub rotate_every: Option<Duration>,
    /// How often to write an interface statistics block.
    pub isb_every: Duration,
    /// Keep at most this many finished files of this writer, removing the oldest (a ring of
    /// files, tcpdump `-W`).
    pub keep: Option<usize>,
}

/// The file writes to the device in chunks of this size (direct I/O, past the page cache): one
/// huge page, which a virtio disk takes as one request (see `DirectFile`).
const CHUNK: usize = HUGE_PAGE;

struct OpenFile {
    file: DirectFile,
    part: PathBuf,
    path: PathBuf,
    /// The `.part` file's claim to `path`: published when the file is complete, and the
    /// `.part` removed when it is dropped otherwise. `None` for a stream written in place.
    name: Option<outfile::PartName>,
    bytes: u64,
    opened: Instant,
}

/// What a file sink wrote.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct FileReport {
    /// Files completed, in order.
    pub files: Vec<PathBuf>,
    /// Records written.
    pub records: u64,
}

impl Outcome for FileReport {
    fn add(&mut self, o: &FileReport) {
        self.files.extend(o.files.iter().cloned());
        self.records += o.records;
    }
}

/// The counts at the moment a file was opened.
#[derive(Debug, Clone, Default)]
struct FileBase {
    start_ns: u64,
    totals: Totals,
    if_stats: Option<(u64, u64)>,
    delivered: Vec<u64>,
}

/// Writes a worker's records to pcapng or pcap files.
pub struct FileSink {
    cfg: WriterConfig,
    interfaces: Vec<InterfaceInfo>,
    /// Section, interface and statistics blocks on their way to the file.
    out: Vec<u8>,
    file: Option<OpenFile>,
    rotation: u64,
    report: FileReport,
    last_isb: Instant,
    last_totals: Totals,
    last_if_stats: Option<(u64, u64)>,
    /// Records written per interface (`isb_usrdeliv` of each); their sum is the report's.
    delivered: Vec<u64>,
    /// The counts when the current file was opened: its statistics blocks count from there.
    base: FileBase,
    /// Packets the statistics of the current file say it accepted, so far.
    accepted: u64,
    /// Records handed over that a failed write kept out of the file.
    lost: u64,
    /// Whether the output buffer is prefetched ahead of the records.
    write_ahead: bool,
    /// The link of this interface is down, for this reason (a gap going on).
    gap: Option<(u32, LinkDown)>,
    /// The comment the next packet carries: the end of a gap just before it.
    note: Option<String>,
    /// The finished files still kept, oldest first, when `cfg.keep` bounds them.
    kept: std::collections::VecDeque<PathBuf>,
    /// This sink returned an error: its open file is not complete and never takes its name.
    failed: bool,
}

impl std::fmt::Debug for FileSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileSink")
            .field("cfg", &self.cfg)
            .field("rotation", &self.rotation)
            .finish()
    }
}

impl FileSink {
    /// A sink writing where `cfg` says; the first file is created when the first interface is
    /// announced, before any packet (as tcpdump does), a rotated one with its first record.
    pub fn new(cfg: WriterConfig) -> FileSink {
        FileSink {
            cfg,
            interfaces: Vec::new(),
            out: Vec::with_capacity(64 << 10),
            file: None,
            rotation: 0,
            report: FileReport::default(),
            last_isb: Instant::now(),
            last_totals: Totals::default(),
            last_if_stats: None,
            delivered: Vec::new(),
            base: FileBase::default(),
            accepted: 0,
            lost: 0,
            write_ahead: false,
            gap: None,
            note: None,
            kept: std::collections::VecDeque::new(),
            failed: false,
        }
    }

    /// The same sink, bringing its output buffer into the cache ahead of the records
    /// ([`DirectFile::with_write_ahead`]): for records from a capture ring, not from a file.
    pub fn with_write_ahead(self) -> FileSink {
        FileSink {
            write_ahead: true,
            ..self
        }
    }
}

impl RecordSink for FileSink {
    type Report = FileReport;

    fn add_interface(&mut self, info: &InterfaceInfo) -> Result<(), EngineError> {
        let r = self.add_interface(info.clone());
        self.failed |= r.is_err();
        r
    }

    #[inline(always)]
    fn record(
        &mut self,
        interface: u32,
        drops_before: u64,
        ctl: &ControlField,
        data: &[u8],
    ) -> Result<(), EngineError> {
        let r = self.write_record(interface, drops_before, ctl, data);
        if r.is_err() {
            self.failed = true;
        }
        r
    }

    fn end_of_block(
        &mut self,
        totals: &Totals,
        if_stats: Option<(u64, u64)>,
    ) -> Result<(), EngineError> {
        let r = self.on_end_of_block(totals, if_stats);
        self.failed |= r.is_err();
        r
    }

    fn link_changed(
        &mut self,
        event: &LinkEvent,
        totals: &Totals,
        if_stats: Option<(u64, u64)>,
    ) -> Result<(), EngineError> {
        let r = self.on_link_changed(event, totals, if_stats);
        self.failed |= r.is_err();
        r
    }

    fn wake_within(&self) -> Option<Duration> {
        let f = self.file.as_ref()?;
        let isb = (self.cfg.format == Format::Pcapng)
            .then(|| self.cfg.isb_every.saturating_sub(self.last_isb.elapsed()));
        let rotation = self
            .cfg
            .rotate_every
            .map(|d| d.saturating_sub(f.opened.elapsed()));
        isb.into_iter().chain(rotation).min()
    }

    fn lost(&self) -> u64 {
        self.lost
    }

    fn close(
        &mut self,
        totals: &Totals,
        if_stats: Option<(u64, u64)>,
    ) -> Result<FileReport, EngineError> {
        self.last_totals = *totals;
        self.last_if_stats = if_stats.or(self.last_if_stats);
        self.close_file()?;
        // Every record was delivered on an announced interface.
        self.report.records = self.delivered.iter().sum();
        Ok(std::mem::take(&mut self.report))
    }
}

impl FileSink {
    #[inline(always)]
    fn write_record(
        &mut self,
        interface: u32,
        drops_before: u64,
        ctl: &ControlField,
        data: &[u8],
    ) -> Result<(), EngineError> {
        if self.file.is_none() {
            self.open_file()?;
        }
        let f = self.file.as_mut().expect("opened above");
        // Each packet is encoded in place, in the buffer that goes to the device. (Blocks other
        // than packets never wait in `out`: they are flushed where they are made.)
        let n = match self.cfg.format {
            Format::Pcapng => {
                let flags = Some(ctl.flags.epb_flags()).filter(|&f| f != 0);
                let drops = Some(drops_before).filter(|&d| d > 0);
                if self.note.is_some() {
                    let note = self.note.take();
                    let o = EpbOptions {
                        comment: note.as_deref(),
                        flags,
                        dropcount: drops,
                    };
                    write_noted(f, interface, ctl, data, &o)?
                } else {
                    let n = pcapng::epb_len(data.len(), flags.is_some(), drops.is_some());
                    let buf = f.file.append(n).map_err(|e| write_err(&f.part, e))?;
                    pcapng::emit_epb(
                        buf,
                        interface,
                        ctl.rxtime,
                        data,
                        ctl.orig_len(),
                        flags,
                        drops,
                    );
                    n
                }
            }
            Format::Pcap => {
                let n = pcap::record_len(data.len());
                let buf = f.file.append(n).map_err(|e| write_err(&f.part, e))?;
                pcap::emit_record(buf, ctl.rxtime, data, ctl.orig_len());
                n
            }
        };
        f.bytes += n as u64;
        if let Some(d) = self.delivered.get_mut(interface as usize) {
            *d += 1;
        }
        if self.cfg.rotate_bytes.is_some_and(|limit| f.bytes >= limit) {
            self.rotate()?;
        }
        Ok(())
    }

    fn on_end_of_block(
        &mut self,
        totals: &Totals,
        if_stats: Option<(u64, u64)>,
    ) -> Result<(), EngineError> {
        self.last_totals = *totals;
        self.last_if_stats = if_stats.or(self.last_if_stats);
        if let Some(f) = &mut self.file {
            // A stream's reader (tshark on the other end of a pipe) sees each block as it ends.
            if f.part == f.path {
                f.file.flush().map_err(|e| write_err(&f.path, e))?;
            }
            let old = self
                .cfg
                .rotate_every
                .is_some_and(|d| f.opened.elapsed() >= d);
            if self.cfg.format == Format::Pcapng && self.last_isb.elapsed() >= self.cfg.isb_every {
                self.write_isbs(None)?;
            }
            if old {
                self.rotate()?;
            }
        }
        Ok(())
    }

    fn on_link_changed(
        &mut self,
        event: &LinkEvent,
        totals: &Totals,
        if_stats: Option<(u64, u64)>,
    ) -> Result<(), EngineError> {
        self.last_totals = *totals;
        self.last_if_stats = if_stats.or(self.last_if_stats);
        if self.cfg.format != Format::Pcapng {
            return Ok(());
        }
        let comment = match *event {
            LinkEvent::Down { interface, why } => {
                self.gap = Some((interface, why));
                (
                    interface,
                    format!("link down on {} ({})", self.name(interface), why.describe()),
                )
            }
            LinkEvent::Up { interface, down_ns } => {
                let why = self
                    .gap
                    .take()
                    .map_or(String::new(), |(_, why)| format!(" ({})", why.describe()));
                let name = self.name(interface);
                let secs = down_ns as f64 / 1e9;
                let note = format!(
                    "the first packet after a gap: the link on {name} was down for {secs:.3} s{why}"
                );
                let comment = format!("link up on {name} after {secs:.3} s down");
                self.note = Some(note);
                (interface, comment)
            }
        };
        // A file rotated during the gap opens with its first record, which carries the note.
        if self.file.is_some() {
            self.write_isbs(Some((comment.0, &comment.1)))?;
        }
        Ok(())
    }
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

impl FileSink {
    fn add_interface(&mut self, info: InterfaceInfo) -> Result<(), EngineError> {
        if self.cfg.format == Format::Pcap
            && let Some(first) = self.interfaces.first()
            && first.linktype != info.linktype
        {
            return Err(EngineError::Unsupported(format!(
                "classic pcap holds one link type, but the input has {} and {}: use --format pcapng",
                first.linktype, info.linktype
            )));
        }
        if self.file.is_some() && self.cfg.format == Format::Pcapng {
            write_idb(&mut self.out, &info);
            self.flush_out()?;
        }
        let first = self.interfaces.is_empty();
        self.interfaces.push(info);
        self.delivered.push(0);
        if first {
            self.open_file()?;
        }
        Ok(())
    }

    fn rotate(&mut self) -> Result<(), EngineError> {
        self.close_file()?;
        self.rotation += 1;
        Ok(())
    }

    /// Opens the next file. Out of line: once per file.
    #[cold]
    #[inline(never)]
    fn open_file(&mut self) -> Result<(), EngineError> {
        let base = &self.cfg.path;
        let rotating = self.cfg.rotate_bytes.is_some() || self.cfg.rotate_every.is_some();
        let path = if is_timed(base) {
            let named = timed_path(base, SystemTime::now()).map_err(EngineError::Config)?;
            output_path(&named, self.cfg.worker, None)
        } else {
            output_path(base, self.cfg.worker, rotating.then_some(self.rotation))
        };
        let encoder = match Codec::for_path(base) {
            Some(c) => Some(c.encoder().map_err(|e| write_err(&path, e))?),
            None => None,
        };
        // Standard output, a device or FIFO (`-w -`, `-w /dev/null`, a named pipe) is written
        // in place; a file is written as NAME.part and renamed. What is neither is refused
        // before anything is written.
        let target = if is_stdout(base) {
            if rotating || self.cfg.worker.is_some() {
                return Err(EngineError::Unsupported(
                    "-w - is one stream: it cannot be rotated or shared by workers".into(),
                ));
            }
            None
        } else {
            Some(outfile::target(&path)?)
        };
        let (part, created) = match target {
            None => (path.clone(), DirectFile::stdout(CHUNK)),
            Some(outfile::Target::Stream) if rotating => {
                return Err(EngineError::Unsupported(format!(
                    "{}: a device or FIFO cannot be rotated",
                    path.display()
                )));
            }
            Some(outfile::Target::Stream) => (
                path.clone(),
                match encoder {
                    Some(e) => DirectFile::stream_encoded(&path, CHUNK, e),
                    None => DirectFile::stream(&path, CHUNK),
                },
            ),
            Some(_) => {
                let part = part_path(&path);
                outfile::check_replaceable(&path)?;
                let f = match encoder {
                    Some(e) => DirectFile::create_encoded(&part, CHUNK, e),
                    None => DirectFile::create(&part, CHUNK),
                };
                (part, f)
            }
        };
        let file = match created {
            Ok(f) => f.with_write_ahead(self.write_ahead),
            Err(e)
                if e.errno()
                    .map(std::io::Error::from_raw_os_error)
                    .map(|e| e.kind())
                    == Some(std::io::ErrorKind::AlreadyExists) =>
            {
                return Err(EngineError::StalePart(part));
            }
            Err(e) => return Err(e.into()),
        };
        // Created here, so removed unless it is complete.
        let name = (part != path).then(|| outfile::PartName::new(part.clone(), path.clone()));
        // A file rotated within a block opens before the totals move: it counts from where
        // the last file's statistics ended.
        let mut totals = self.last_totals;
        totals.received = totals.received.max(
            self.base
                .totals
                .received
                .saturating_add(std::mem::take(&mut self.accepted)),
        );
        self.base = FileBase {
            start_ns: now_ns(),
            totals,
            if_stats: self.last_if_stats,
            delivered: self.delivered.clone(),
        };
        self.file = Some(OpenFile {
            file,
            part,
            path,
            name,
            bytes: 0,
            opened: Instant::now(),
        });
        match self.cfg.format {
            Format::Pcapng => {
                pcapng::write_shb(
                    &mut self.out,
                    concat!("tapflow ", env!("CARGO_PKG_VERSION")),
                );
                for info in &self.interfaces {
                    write_idb(&mut self.out, info);
                }
            }
            Format::Pcap => {
                let Some(first) = self.interfaces.first() else {
                    return Err(EngineError::Unsupported(
                        "no interface is known for the pcap header".into(),
                    ));
                };
                pcap::write_header(&mut self.out, first.linktype, first.snaplen);
            }
        }
        self.flush_out()
    }

    /// The name of interface `i`, for comments.
    fn name(&self, i: u32) -> &str {
        self.interfaces
            .get(i as usize)
            .and_then(|i| i.name.as_deref())
            .unwrap_or("the interface")
    }

    /// Writes a statistics block per interface. Every count is the file's own, from its
    /// opening (`isb_starttime`) to now. `comment` goes on the block of its interface.
    fn write_isbs(&mut self, comment: Option<(u32, &str)>) -> Result<(), EngineError> {
        self.last_isb = Instant::now();
        let (t, b) = (&self.last_totals, &self.base.totals);
        let now = now_ns();
        let delivered: Vec<u64> = (0..self.delivered.len())
            .map(|i| {
                let base = self.base.delivered.get(i).copied().unwrap_or(0);
                self.delivered[i].saturating_sub(base)
            })
            .collect();
        // The capture's counters (the socket's, or the file's) are one set: they describe the
        // interface only when there is one. Each interface gets what was written for it. (A
        // file input may announce a second interface later: ISBs written before then carried
        // the counters for interface 0, those after do not.)
        let one = self.interfaces.len() == 1;
        let dropped = |t: &Totals| {
            t.dropped_kernel
                .saturating_add(t.dropped_in_transit)
                .saturating_add(t.dropped_ours)
        };
        let osdrop = dropped(t).saturating_sub(dropped(b));
        // A file rotated by size within a block has written records the totals, settled at the
        // last block's end, do not count yet: what it accepted is at least what it kept.
        let filteraccept = t
            .received
            .saturating_sub(b.received)
            .max(delivered.iter().sum::<u64>().saturating_add(osdrop));
        self.accepted = filteraccept;
        let if_stats = self.last_if_stats.filter(|_| one).map(|(rx, drop)| {
            let (rx0, drop0) = self.base.if_stats.unwrap_or((0, 0));
            (rx.saturating_sub(rx0), drop.saturating_sub(drop0))
        });
        for (id, &delivered) in (0u32..).zip(&delivered) {
            let s = InterfaceStatistics {
                starttime_ns: Some(self.base.start_ns),
                endtime_ns: Some(now),
                ifrecv: if_stats.map(|s| s.0),
                ifdrop: if_stats.map(|s| s.1),
                filteraccept: one.then_some(filteraccept),
                osdrop: one.then_some(osdrop),
                usrdeliv: Some(delivered),
            };
            match comment {
                Some((i, c)) if i == id => {
                    pcapng::write_isb_with_comment(&mut self.out, id, now, &s, c);
                }
                _ => pcapng::write_isb(&mut self.out, id, now, &s),
            }
        }
        self.flush_out()
    }

    fn flush_out(&mut self) -> Result<(), EngineError> {
        if let Some(f) = &mut self.file {
            f.file
                .write_all(&self.out)
                .map_err(|e| write_err(&f.part, e))?;
            f.bytes += self.out.len() as u64;
        }
        self.out.clear();
        Ok(())
    }

    /// Finishes the current file: statistics, flush, sync, rename from `.part`. If a write
    /// failed (a full disk), the file keeps the records that reached it whole (see
    /// [`FileSink::salvage`]), and the error is returned. If the sink returned an error of
    /// another kind (an input the format cannot hold), the file is not complete: its `.part`
    /// is removed and no file takes the name.
    fn close_file(&mut self) -> Result<(), EngineError> {
        // No file is open if no interface was ever announced, or if nothing arrived since the
        // last rotation.
        if self.file.is_none() {
            return Ok(());
        }
        let isbs = match self.cfg.format {
            Format::Pcapng if !self.failed => {
                let still_down = self.gap.map(|(i, why)| {
                    let name = self.name(i);
                    (
                        i,
                        format!(
                            "link down on {name} ({}) until this file closed",
                            why.describe()
                        ),
                    )
                });
                self.write_isbs(still_down.as_ref().map(|(i, c)| (*i, c.as_str())))
            }
            _ => Ok(()),
        };
        let OpenFile {
            file,
            part,
            path,
            name,
            ..
        } = self.file.take().expect("checked above");
        // Finished in every case: it waits for the I/O thread, so the file is still after it.
        let finished = file.finish().map_err(|e| write_err(&part, e));
        if let Err(e) = isbs.and(finished) {
            self.salvage(name);
            return Err(e);
        }
        if self.failed {
            // Dropping `name` removes the `.part` file.
            return Ok(());
        }
        let Some(name) = name else {
            // A device or FIFO, written in place.
            self.report.files.push(path);
            return Ok(());
        };
        // The name is taken only from a regular file: a device, a directory or a link put
        // there keeps it, and the packets stay in the `.part` file.
        let path = name.publish()?;
        self.keep_within(&path)?;
        self.report.files.push(path);
        Ok(())
    }

    /// With a file count (`-W`), removes the oldest finished files past it, `done` being the
    /// newest. A name given again (a time pattern with one file a minute, say) is one file.
    fn keep_within(&mut self, done: &Path) -> Result<(), EngineError> {
        let Some(keep) = self.cfg.keep else {
            return Ok(());
        };
        self.kept.retain(|p| p != done);
        self.kept.push_back(done.to_path_buf());
        while self.kept.len() > keep.max(1) {
            let old = self.kept.pop_front().expect("longer than 1");
            match std::fs::remove_file(&old) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(write_err(&old, e)),
            }
            self.report.files.retain(|p| *p != old);
        }
        Ok(())
    }

    /// After a failed write: cuts the `.part` file after its last whole record, gives it its
    /// name, and counts the records handed to it that did not reach it as lost. A `.part` file
    /// that holds no capture, or could not be cut, is removed. Out of line: once, at the end.
    #[cold]
    #[inline(never)]
    fn salvage(&mut self, name: Option<outfile::PartName>) {
        let handed: u64 = (0..self.delivered.len())
            .map(|i| self.delivered[i] - self.base.delivered.get(i).copied().unwrap_or(0))
            .sum();
        // A device or FIFO cannot be read back: nothing of it is counted as kept.
        let kept = match name
            .as_ref()
            .and_then(|n| whole_records(n.part(), Codec::for_path(n.path())).map(|w| (n.part(), w)))
        {
            Some((part, (kept, end, seal))) => {
                let cut = std::fs::OpenOptions::new()
                    .write(true)
                    .open(part)
                    .and_then(|f| {
                        f.set_len(end)?;
                        std::os::unix::fs::FileExt::write_all_at(&f, seal, end)
                    });
                match (cut, name) {
                    (Ok(()), Some(name)) => match name.publish() {
                        Ok(path) => {
                            self.report.files.push(path);
                            kept
                        }
                        Err(_) => kept,
                    },
                    _ => 0,
                }
            }
            None => 0,
        };
        self.lost += handed.saturating_sub(kept);
    }
}

/// The packets a capture file holds whole, and the byte offset where the last one ends (or
/// the headers do, if none); `None` if it is not a capture file at all. A compressed file is
/// cut where a piece ends that ends a record ([`Codec::pieces`]), and closed with the
/// format's seal, which is returned too.
fn whole_records(path: &Path, codec: Option<Codec>) -> Option<(u64, u64, &'static [u8])> {
    let map = tapflow_sys::mmap::MappedFile::open(path).ok()?;
    let Some(codec) = codec else {
        let (kept, end) = records(map.bytes())?.last().copied()?;
        return Some((kept, end as u64, &[]));
    };
    let p = codec.pieces(map.bytes());
    let ends = records(&p.decoded)?;
    // The last piece that ends where a record (or the headers) does.
    p.ends.iter().rev().find_map(|&(at, decoded)| {
        let i = ends.binary_search_by_key(&decoded, |&(_, e)| e).ok()?;
        Some((ends[i].0, at as u64, codec.seal()))
    })
}

/// For the headers and then each whole record of a capture file: how many records, and where
/// they end.
fn records(bytes: &[u8]) -> Option<Vec<(u64, usize)>> {
    let mut r = tapflow_wire::capfile::Reader::new(bytes).ok()?;
    let mut ends = vec![(0, r.offset() as usize)];
    while let Some(Ok(_)) = r.next_packet() {
        ends.push((ends.len() as u64, r.offset() as usize));
    }
    Some(ends)
}

/// Writes a packet block that carries a comment, and returns its length. Out of line: once
/// per gap.
#[cold]
#[inline(never)]
fn write_noted(
    f: &mut OpenFile,
    interface: u32,
    ctl: &ControlField,
    data: &[u8],
    o: &EpbOptions<'_>,
) -> Result<usize, EngineError> {
    let mut block = Vec::new();
    pcapng::write_epb_with(&mut block, interface, ctl.rxtime, data, ctl.orig_len(), o);
    f.file
        .write_all(&block)
        .map_err(|e| write_err(&f.part, e))?;
    Ok(block.len())
}

fn write_idb(out: &mut Vec<u8>, info: &InterfaceInfo) {
    pcapng::write_idb(
        out,
        &IdbOptions {
            linktype: info.linktype,
            snaplen: info.snaplen,
            name: info.name.as_deref(),
            filter: info.filter.as_deref(),
            hardware: None,
        },
    );
}

fn write_err(path: &Path, source: std::io::Error) -> EngineError {
    EngineError::Write {
        path: path.to_path_buf(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tapflow_wire::LinkType;
    use tapflow_wire::record::Flags;

    fn sink(dir: &Path, rotate_bytes: Option<u64>) -> FileSink {
        FileSink::new(WriterConfig {
            path: dir.join("out.pcapng"),
            format: Format::Pcapng,
            worker: None,
            rotate_bytes,
            rotate_every: None,
            isb_every: Duration::from_secs(3600),
            keep: None,
        })
    }

    fn ethernet() -> InterfaceInfo {
        InterfaceInfo {
            linktype: LinkType::Ethernet,
            snaplen: 64,
            name: Some("eth0".into()),
            filter: None,
            max_frame: None,
        }
    }

    fn files(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn the_first_file_is_made_with_the_interface_and_a_rotated_one_with_its_first_record() {
        let dir = std::env::temp_dir().join(format!("tf-writer-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        // Each file holds one record: the section and interface blocks alone are smaller than
        // this, with one packet block they are larger.
        let mut s = sink(&dir, Some(150));
        assert!(files(&dir).is_empty());
        RecordSink::add_interface(&mut s, &ethernet()).unwrap();
        // Before any packet, as tcpdump: a bad path or a full disk shows at once.
        assert_eq!(files(&dir), ["out-00000.pcapng.part"]);
        let ctl = ControlField::new(1, Flags::default(), 60, 0, 60);
        s.record(0, 0, &ctl, &[0u8; 60]).unwrap();
        // Rotated after its record, and no empty file waits for the next one.
        assert_eq!(files(&dir), ["out-00000.pcapng"]);
        s.record(0, 0, &ctl, &[0u8; 60]).unwrap();
        assert_eq!(files(&dir), ["out-00000.pcapng", "out-00001.pcapng"]);
        let report = s.close(&Totals::default(), None).unwrap();
        assert_eq!(report.files.len(), 2);
        assert_eq!(report.records, 2);
        assert_eq!(files(&dir), ["out-00000.pcapng", "out-00001.pcapng"]);
        let first = std::fs::read(dir.join("out-00000.pcapng")).unwrap();
        assert_eq!(first[..4], [0x0A, 0x0D, 0x0D, 0x0A], "section header block");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_sink_that_refused_its_input_leaves_no_file() {
        let dir = std::env::temp_dir().join(format!("tf-writer-refused-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut s = FileSink::new(WriterConfig {
            path: dir.join("out.pcap"),
            format: Format::Pcap,
            ..sink(&dir, None).cfg
        });
        RecordSink::add_interface(&mut s, &ethernet()).unwrap();
        let ctl = ControlField::new(1, Flags::default(), 60, 0, 60);
        s.record(0, 0, &ctl, &[0u8; 60]).unwrap();
        assert_eq!(files(&dir), ["out.pcap.part"]);
        let null = InterfaceInfo {
            linktype: LinkType::Null,
            ..ethernet()
        };
        let e = RecordSink::add_interface(&mut s, &null).unwrap_err();
        assert!(e.to_string().contains("one link type"), "{e}");
        // The worker closes every sink at the end, this one too: the file is not complete.
        let report = s.close(&Totals::default(), None).unwrap();
        assert!(report.files.is_empty());
        assert!(files(&dir).is_empty(), "{:?}", files(&dir));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The blocks of a pcapng file: type and whole block.
    fn blocks(path: &Path) -> Vec<(u32, Vec<u8>)> {
        let d = std::fs::read(path).unwrap();
        let mut out = Vec::new();
        let mut at = 0;
        while at < d.len() {
            let word = |o: usize| u32::from_le_bytes(d[o..o + 4].try_into().unwrap());
            let len = word(at + 4) as usize;
            out.push((word(at), d[at..at + len].to_vec()));
            at += len;
        }
        out
    }

    fn has(block: &[u8], text: &str) -> bool {
        block.windows(text.len()).any(|w| w == text.as_bytes())
    }

    #[test]
    fn a_gap_is_an_isb_at_each_edge_and_a_comment_on_the_next_packet() {
        let dir = std::env::temp_dir().join(format!("tf-writer-gap-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let t = Totals::default();
        let down = LinkEvent::Down {
            interface: 0,
            why: LinkDown::SetDown,
        };
        let up = LinkEvent::Up {
            interface: 0,
            down_ns: 2_004_000_000,
        };
        let ctl = ControlField::new(1, Flags::default(), 60, 0, 60);
        let mut s = sink(&dir, None);
        RecordSink::add_interface(&mut s, &ethernet()).unwrap();
        s.record(0, 0, &ctl, &[1; 60]).unwrap();
        s.link_changed(&down, &t, None).unwrap();
        s.link_changed(&up, &t, None).unwrap();
        s.record(0, 0, &ctl, &[2; 60]).unwrap();
        s.record(0, 0, &ctl, &[3; 60]).unwrap();
        s.close(&t, None).unwrap();
        let b = blocks(&dir.join("out.pcapng"));
        let kinds: Vec<u32> = b.iter().map(|(k, _)| *k).collect();
        assert_eq!(kinds, [pcapng::BLOCK_SHB, 1, 6, 5, 5, 6, 6, 5]);
        assert!(has(&b[3].1, "link down on eth0 (set down)"));
        assert!(has(&b[4].1, "link up on eth0 after 2.004 s down"));
        assert!(has(
            &b[5].1,
            "the first packet after a gap: the link on eth0 was down for 2.004 s (set down)"
        ));
        assert!(b[5].1.windows(60).any(|w| w == [2; 60]));
        assert!(!has(&b[6].1, "gap") && !has(&b[7].1, "link"));

        // Still down at the end: the closing ISB says so.
        let mut s = sink(&dir, None);
        RecordSink::add_interface(&mut s, &ethernet()).unwrap();
        s.link_changed(&down, &t, None).unwrap();
        s.close(&t, None).unwrap();
        let b = blocks(&dir.join("out.pcapng"));
        assert!(has(
            &b.last().unwrap().1,
            "link down on eth0 (set down) until this file closed"
        ));

        // Classic pcap has no place for either: the packets only.
        let mut s = FileSink::new(WriterConfig {
            path: dir.join("out.pcap"),
            format: Format::Pcap,
            ..sink(&dir, None).cfg
        });
        RecordSink::add_interface(&mut s, &ethernet()).unwrap();
        s.link_changed(&down, &t, None).unwrap();
        s.link_changed(&up, &t, None).unwrap();
        s.record(0, 0, &ctl, &[2; 60]).unwrap();
        s.close(&t, None).unwrap();
        let len = std::fs::metadata(dir.join("out.pcap")).unwrap().len();
        assert_eq!(len, 24 + 16 + 60);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
