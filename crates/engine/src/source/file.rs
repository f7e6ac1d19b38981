//! A capture file as a packet source: pcap (µs or ns, either byte order), pcapng or ERF.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tapflow_sys::mmap::{MappedFile, ReadAhead};
use tapflow_wire::Flags;
use tapflow_wire::capfile::{FileError, FilePacket, Reader};
use tapflow_wire::record::Direction;

use crate::EngineError;
use crate::compress::Codec;
use crate::rules::LiveRules;
use crate::source::{InterfaceInfo, Opened, Packet, PacketSource, Progress, SourceStats};
use tapflow_wire::rules::Rule;

/// Maps the capture file at `path`. A compressed one (zstd or gzip, known by its first bytes)
/// is decompressed first into an unnamed file in the temporary directory (`$TMPDIR`, else
/// `/tmp`), which is mapped instead; it goes when the mapping does. Decompression stops at the
/// first damage or where a file cut short ends: what came before is read.
pub fn map(path: &Path) -> Result<MappedFile, EngineError> {
    let map = MappedFile::open(path)?;
    let Some(codec) = Codec::sniff(map.bytes()) else {
        return Ok(map);
    };
    let tmp = std::env::temp_dir();
    let write_err = |source| EngineError::Write {
        path: tmp.clone(),
        source,
    };
    let file = tapflow_sys::outfile::unnamed(&tmp).map_err(write_err)?;
    let mut out = std::io::BufWriter::with_capacity(1 << 20, &file);
    codec
        .decompress(map.bytes(), &mut out, u64::MAX)
        .and_then(|_| out.flush())
        .map_err(write_err)?;
    drop(out);
    Ok(MappedFile::from_file(&file, path)?)
}

/// Opens a mapped capture file as the input of one worker. A file has no kernel filter: its
/// rules, if any, and a `-f` expression run in user space.
pub fn open(
    map: &MappedFile,
    snaplen: u32,
    rules: Option<Vec<Rule>>,
) -> Result<Opened<FileSource<'_>>, EngineError> {
    let source = FileSource::new(map)?;
    let rules = match rules {
        Some(r) => Some(LiveRules::new(Some(r), 1, snaplen, None)?),
        None => None,
    };
    Ok(Opened {
        input: map.path().display().to_string(),
        linktype: source
            .interfaces()
            .first()
            .map_or(tapflow_wire::LinkType::Ethernet, |i| i.linktype),
        ring: None,
        mode: None,
        hw_timestamps: false,
        rules,
        filter_in_user_space: true,
        realtime: false,
        drain_quiet: std::time::Duration::ZERO,
        progress: Some((source.position(), source.len())),
        metrics: None,
        sources: vec![source],
    })
}

/// Packets delivered per block.
const BLOCK_PACKETS: usize = 4096;

/// Reads packets from a capture file held in memory.
#[derive(Debug)]
pub struct FileSource<'a> {
    reader: Reader<'a>,
    map: &'a MappedFile,
    /// `map`'s bytes, read on every packet.
    bytes: &'a [u8],
    ahead: ReadAhead,
    interfaces: Vec<InterfaceInfo>,
    held: Option<FilePacket<'a>>,
    error: Option<FileError>,
    ended: bool,
    read: u64,
    position: Arc<AtomicU64>,
}

impl<'a> FileSource<'a> {
    /// A source over a mapped capture file.
    pub fn new(map: &'a MappedFile) -> Result<FileSource<'a>, EngineError> {
        let bytes = map.bytes();
        let reader = Reader::new(bytes).map_err(|source| EngineError::File {
            path: map.path().to_path_buf(),
            source,
        })?;
        let mut s = FileSource {
            reader,
            map,
            bytes,
            ahead: ReadAhead::from(0),
            interfaces: Vec::new(),
            held: None,
            error: None,
            ended: false,
            read: 0,
            position: Arc::new(AtomicU64::new(0)),
        };
        s.sync_interfaces();
        Ok(s)
    }

    /// How many bytes have been read so far, shared with whoever shows progress.
    pub fn position(&self) -> Arc<AtomicU64> {
        Arc::clone(&self.position)
    }

    /// The file's length in bytes.
    pub fn len(&self) -> u64 {
        self.bytes.len() as u64
    }

    /// Whether the file is empty.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    fn sync_interfaces(&mut self) {
        for i in &self.reader.interfaces()[self.interfaces.len()..] {
            self.interfaces.push(InterfaceInfo {
                linktype: i.linktype,
                snaplen: if i.snaplen == 0 { u32::MAX } else { i.snaplen },
                name: i.name.clone(),
                filter: None,
                max_frame: None,
            });
        }
    }
}

impl FileSource<'_> {
    /// Says, in one line, which ERF records were skipped for a type tapflow does not read.
    #[cold]
    fn report_skipped(&self) {
        let skipped = self.reader.skipped();
        if skipped.is_empty() {
            return;
        }
        let what: Vec<String> = skipped
            .iter()
            .map(|(t, n)| format!("{n} of unsupported type {}", t.to_u8()))
            .collect();
        eprintln!(
            "tapflow: {}: skipped ERF records: {}",
            self.map.path().display(),
            what.join(", ")
        );
    }
}

fn packet<'p>(fp: &FilePacket<'p>) -> Packet<'p> {
    let mut flags = Flags::default().with_ts_source(fp.ts_source);
    if let Some(f) = fp.epb_flags {
        flags = flags.with_direction(match f & 0b11 {
            0b01 => Direction::Inbound,
            0b10 => Direction::Outbound,
            _ => Direction::Unknown,
        });
    }
    Packet {
        data: fp.data,
        ts_ns: fp.ts_ns,
        len: fp.len.max(fp.data.len() as u32),
        flags,
        interface: fp.interface,
        stripped_vlan: None,
        drops_before: fp.dropcount.unwrap_or(0),
    }
}

impl PacketSource for FileSource<'_> {
    fn interfaces(&self) -> &[InterfaceInfo] {
        &self.interfaces
    }

    fn next_block<F: FnMut(&Packet<'_>)>(
        &mut self,
        _timeout_ms: i32,
        max_packets: usize,
        mut f: F,
    ) -> Result<Progress, EngineError> {
        if self.ended {
            return match self.error.take() {
                Some(source) => Err(EngineError::Damaged {
                    path: self.map.path().to_path_buf(),
                    packet: self.read + 1,
                    source,
                }),
                None => Ok(Progress::End),
            };
        }
        // A packet held back by the last block (it named a new interface) comes first.
        let mut held = self.held.take();
        for _ in 0..BLOCK_PACKETS.min(max_packets) {
            let next = match held.take() {
                Some(fp) => Some(Ok(fp)),
                None => self.reader.next_packet(),
            };
            let fp = match next {
                Some(Ok(fp)) => fp,
                Some(Err(e)) => {
                    self.error = Some(e);
                    self.ended = true;
                    break;
                }
                None => {
                    // Done with the file: its page tables go now, while the sinks drain, not
                    // at exit.
                    self.ended = true;
                    self.report_skipped();
                    self.map.release();
                    break;
                }
            };
            if fp.interface as usize >= self.interfaces.len() {
                self.sync_interfaces();
                if self.read > 0 || fp.interface as usize >= self.interfaces.len() {
                    // Let the worker announce the new interface before its first packet.
                    self.held = Some(fp);
                    break;
                }
            }
            self.read += 1;
            self.ahead
                .advance(self.bytes, self.reader.offset() as usize);
            f(&packet(&fp));
        }
        if held.is_some() {
            // Asked for no packet at all: it waits for the next block.
            self.held = held;
        }
        self.position.store(self.reader.offset(), Ordering::Relaxed);
        Ok(Progress::Block)
    }

    fn stats(&mut self) -> Result<SourceStats, EngineError> {
        Ok(SourceStats {
            received: self.read,
            ..SourceStats::default()
        })
    }

    fn stop_intake(&mut self) -> Result<(), EngineError> {
        self.ended = true;
        Ok(())
    }

    fn progress(&self) -> Option<(u64, u64)> {
        Some((self.reader.offset(), self.len()))
    }
}
