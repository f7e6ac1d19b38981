//! Reading a whole capture file held in memory: classic pcap or pcapng, told apart by magic, or
//! ERF, which has none and is recognised by its first records once the magics are ruled out.
//!
//! [`Reader`] borrows the file's bytes (the engine maps the file) and hands out packets that
//! borrow them too: no copy and no allocation per packet. Every timestamp is converted to
//! nanoseconds since 1970 with integer arithmetic, saturating instead of overflowing.
//!
//! Damage ends the file: the first malformed record or block yields a [`FileError`] naming its
//! byte offset, after every packet before it was returned, and the reader then stops.
//!
//! Tolerances, as libpcap and Wireshark have them:
//! - a `caplen` larger than the original length is accepted; the packet's `len` is then
//!   `max(len, caplen)`;
//! - a `caplen` above [`MAXIMUM_SNAPLEN`] (libpcap's 256 KiB limit) is an error, so a lying
//!   length field cannot make the reader swallow the rest of a file as one packet;
//! - pcap's linktype field names the link type in its low 16 bits; above them, an FCS length
//!   (with its "F" bit) is honoured: the FCS is cut from every packet that holds it, so a
//!   packet reads as it would without one, and `len` counts it out too. Any other bit set there
//!   (libpcap's `LT_RESERVED1`, bits 16-25) refuses the file, as tcpdump and tshark refuse it;
//! - pcapng options with an unexpected length are ignored; options that overrun their block
//!   are an error;
//! - ERF records of a type tapflow does not read (HDLC, ATM, AAL5, ...) are skipped and counted
//!   ([`Reader::skipped`]), padding and metadata records skipped; each ERF capture port and
//!   payload link type (Ethernet, raw IP) is an interface, met as the file goes;
//! - a pcapng Simple Packet Block has no timestamp: its packet gets the previous packet's time
//!   (0 before the first), marked [`TsSource::Copied`], so that it does not date from 1970 in
//!   the middle of the file.

use crate::LinkType;
use crate::erf;
use crate::pcap;
use crate::pcapng::{self, Block, Idb, Packet, Shb};
use crate::record::TsSource;

/// Largest `caplen` accepted: libpcap's `MAXIMUM_SNAPLEN` (256 KiB).
pub const MAXIMUM_SNAPLEN: u32 = 262_144;

/// The format of a capture file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Classic pcap.
    Pcap {
        /// Nanosecond timestamps (magic `0xa1b23c4d`) rather than microseconds.
        nanos: bool,
        /// Written big-endian.
        big_endian: bool,
    },
    /// pcapng (each section has its own byte order).
    Pcapng,
    /// ERF (Endace DAG records, no file header).
    Erf,
}

/// An interface of the file: pcap's single one, or a pcapng IDB.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interface {
    /// The link type of its packets.
    pub linktype: LinkType,
    /// SnapLen (0 in pcapng: no limit).
    pub snaplen: u32,
    /// `if_name`, if the IDB had one (invalid UTF-8 replaced).
    pub name: Option<String>,
    /// Bytes of FCS the file says end each of its packets (pcap's `LT_FCS_LENGTH`); the
    /// reader has cut them off.
    pub fcs_len: u8,
    ts: TsScale,
}

impl Interface {
    /// `if_tsresol` (6 for microsecond pcap, 9 for nanosecond pcap).
    pub fn if_tsresol(&self) -> u8 {
        self.ts.tsresol
    }

    /// `if_tsoffset` in seconds (always 0 for pcap).
    pub fn if_tsoffset(&self) -> i64 {
        self.ts.tsoffset
    }

    /// Converts a timestamp in this interface's units to ns since 1970, saturating.
    #[inline(always)]
    pub fn ts_to_ns(&self, ts: u64) -> u64 {
        self.ts.to_ns(ts)
    }
}

/// Converts timestamps of one interface to nanoseconds without floating point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct TsScale {
    tsresol: u8,
    tsoffset: i64,
    conv: Conv,
    /// `tsoffset` in nanoseconds.
    offset_ns: i128,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Conv {
    /// Units of 10^-n s with n <= 9: multiply.
    Mul(u64),
    /// Units of 10^-n s with 9 < n <= 28: divide.
    Div(u64),
    /// Units so fine that every u64 value is under a nanosecond.
    Zero,
    /// Units of 2^-n s: `ts * 10^9 >> n`.
    Pow2(u32),
}

impl TsScale {
    fn new(tsresol: u8, tsoffset: i64) -> TsScale {
        let n = u32::from(tsresol & 0x7f);
        let conv = if tsresol & 0x80 != 0 {
            Conv::Pow2(n)
        } else if n <= 9 {
            Conv::Mul(10u64.pow(9 - n))
        } else {
            10u64.checked_pow(n - 9).map_or(Conv::Zero, Conv::Div)
        };
        TsScale {
            tsresol,
            tsoffset,
            conv,
            offset_ns: i128::from(tsoffset) * 1_000_000_000,
        }
    }

    #[inline(always)]
    fn to_ns(self, ts: u64) -> u64 {
        let ns = match self.conv {
            Conv::Mul(m) => ts.saturating_mul(m),
            Conv::Div(d) => ts / d,
            Conv::Zero => 0,
            Conv::Pow2(n) => {
                u64::try_from((u128::from(ts) * 1_000_000_000) >> n).unwrap_or(u64::MAX)
            }
        };
        if self.offset_ns == 0 {
            return ns;
        }
        (i128::from(ns) + self.offset_ns).clamp(0, i128::from(u64::MAX)) as u64
    }
}

/// One packet read from a file; `data` borrows the file's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FilePacket<'a> {
    /// Index into [`Reader::interfaces`] (global over pcapng sections).
    pub interface: u32,
    /// Arrival time in ns since 1970; for a pcapng Simple Packet Block, which has none, the
    /// previous packet's (0 before the first).
    pub ts_ns: u64,
    /// [`TsSource::File`], or [`TsSource::Copied`] for a Simple Packet Block.
    pub ts_source: TsSource,
    /// Original length on the wire (at least `data.len()`).
    pub len: u32,
    /// The captured bytes.
    pub data: &'a [u8],
    /// `epb_flags`, if the block had them.
    pub epb_flags: Option<u32>,
    /// `epb_dropcount`, if the block had it.
    pub dropcount: Option<u64>,
}

/// Why a capture file could not be read further.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("byte offset {offset}: {kind}")]
pub struct FileError {
    /// Byte offset of the file header, record or block at fault.
    pub offset: u64,
    /// What was wrong.
    pub kind: FileErrorKind,
}

/// What was wrong with a capture file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FileErrorKind {
    /// The first four bytes are no pcap or pcapng magic, and the file does not start with ERF
    /// records.
    #[error("not a pcap, pcapng or ERF file: magic 0x{magic:08x}")]
    NotCapture {
        /// The first four bytes, read big-endian.
        magic: u32,
    },
    /// The file is shorter than its header.
    #[error("file ends inside the {format} header: the header needs {need} bytes, {have} remain")]
    HeaderTruncated {
        /// `pcap` or `pcapng`.
        format: &'static str,
        /// Bytes the header needs.
        need: u64,
        /// Bytes in the file.
        have: u64,
    },
    /// A pcap `linktype` field with reserved bits set (`LT_RESERVED1`, bits 16-25).
    #[error(
        "pcap link-type field 0x{field:08x} has reserved bits 0x{:08x} set (bits 16-25 must be zero)",
        field & crate::pcap::LINKTYPE_RESERVED
    )]
    LinkTypeReserved {
        /// The whole 32-bit field.
        field: u32,
    },
    /// An ERF record whose `rlen` cannot hold its own headers.
    #[error("ERF record length {rlen} is below the {need} bytes of its headers")]
    ErfRecordTooShort {
        /// The record's `rlen`.
        rlen: u16,
        /// The header, the extension headers it claims, and an Ethernet type's pad.
        need: u32,
    },
    /// A version this reader does not know.
    #[error("unsupported {format} version {major}.{minor}")]
    UnsupportedVersion {
        /// `pcap` or `pcapng`.
        format: &'static str,
        /// Major version.
        major: u16,
        /// Minor version.
        minor: u16,
    },
    /// The file ends before a record or block header is complete.
    #[error("file ends mid-record header: {need} bytes needed, {remain} remain")]
    ShortRecordHeader {
        /// Bytes the header needs.
        need: u32,
        /// Bytes left in the file.
        remain: u64,
    },
    /// The file ends before a record or block is complete.
    #[error("file ends mid-record: record claims {claimed} bytes, {remain} remain")]
    Truncated {
        /// Bytes the record claims, headers included.
        claimed: u64,
        /// Bytes left in the file.
        remain: u64,
    },
    /// A `caplen` above [`MAXIMUM_SNAPLEN`].
    #[error(
        "caplen {caplen} is larger than {} bytes, libpcap's MAXIMUM_SNAPLEN",
        MAXIMUM_SNAPLEN
    )]
    CaplenTooLarge {
        /// The claimed caplen.
        caplen: u32,
    },
    /// A pcapng Block Total Length that is not a multiple of 4.
    #[error("pcapng block length {len} is not a multiple of 4")]
    BlockLengthUnaligned {
        /// Block Total Length.
        len: u32,
    },
    /// A pcapng Block Total Length below the minimum for its type.
    #[error("pcapng block type 0x{block_type:08x}: block length {len} is below its minimum {min}")]
    BlockTooShort {
        /// Block Type.
        block_type: u32,
        /// Block Total Length.
        len: u32,
        /// The smallest valid length.
        min: u32,
    },
    /// A pcapng block whose two length fields differ.
    #[error("pcapng block length {leading} does not match its trailing length {trailing}")]
    BlockLengthMismatch {
        /// Leading Block Total Length.
        leading: u32,
        /// Trailing Block Total Length.
        trailing: u32,
    },
    /// An SHB whose byte-order magic is neither order of `0x1a2b3c4d`.
    #[error("pcapng byte-order magic 0x{magic:08x} is not 0x1a2b3c4d in either byte order")]
    BadByteOrderMagic {
        /// The four bytes, read big-endian.
        magic: u32,
    },
    /// A packet block whose Captured Packet Length exceeds the block.
    #[error(
        "pcapng block type 0x{block_type:08x}: caplen {caplen} exceeds the {room} bytes it holds"
    )]
    CaplenExceedsBlock {
        /// Block Type.
        block_type: u32,
        /// Captured Packet Length.
        caplen: u32,
        /// Bytes after the fixed fields.
        room: u32,
    },
    /// A packet for an Interface ID that has no IDB in its section.
    #[error("packet for interface {interface}, but its section has {count} interface(s)")]
    NoInterface {
        /// Interface ID within the section.
        interface: u32,
        /// IDBs seen so far in the section.
        count: u32,
    },
    /// An option that runs past the end of its block.
    #[error(
        "pcapng block type 0x{block_type:08x}: option {code} claims {len} bytes, {remain} remain"
    )]
    BadOption {
        /// Block Type.
        block_type: u32,
        /// Option Code.
        code: u16,
        /// Option Length.
        len: u16,
        /// Bytes left in the block.
        remain: u32,
    },
}

/// Reads packets, one after another, from a capture file in memory.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    /// The file; cut at the damage once an error was returned.
    bytes: &'a [u8],
    /// Offset of the next record or block.
    pos: usize,
    format: Format,
    interfaces: Vec<Interface>,
    /// pcapng: index in `interfaces` of the current section's interface 0.
    section_base: usize,
    /// pcapng: the current section is big-endian.
    big_endian: bool,
    /// pcap: nanoseconds per unit of `ts_frac`.
    frac_ns: u64,
    /// pcap: bytes of FCS to cut from the end of each packet.
    fcs: u32,
    /// pcapng: the time of the last packet that had one, for a Simple Packet Block.
    prev_ns: u64,
    /// ERF: the interface of each (port, payload link type) met so far.
    erf_ports: Vec<(u8, LinkType)>,
    /// ERF: records skipped for their type, per type.
    skipped: Vec<(erf::RecordType, u64)>,
}

/// Whether `bytes` start with a pcap magic in either byte order and resolution.
fn pcap_magic(bytes: &[u8]) -> bool {
    bytes.first_chunk::<4>().is_some_and(|m| {
        let m = u32::from_le_bytes(*m);
        [pcap::MAGIC_MICROS, pcap::MAGIC_NANOS]
            .iter()
            .any(|&k| m == k || m == k.swap_bytes())
    })
}

/// What one pcapng block turned out to be.
enum Step<'a> {
    Packet(FilePacket<'a>),
    Other,
}

impl<'a> Reader<'a> {
    /// Reads the file header, or the first SHB and the IDBs and other non-packet blocks after it.
    pub fn new(bytes: &'a [u8]) -> Result<Reader<'a>, FileError> {
        let at0 = |kind| FileError { offset: 0, kind };
        let mut r = Reader {
            bytes,
            pos: 0,
            format: Format::Pcapng,
            interfaces: Vec::new(),
            section_base: 0,
            big_endian: false,
            frac_ns: 1,
            fcs: 0,
            prev_ns: 0,
            erf_ports: Vec::new(),
            skipped: Vec::new(),
        };
        if bytes.first_chunk::<4>() == Some(&pcapng::BLOCK_SHB.to_le_bytes()) {
            r.read_first_shb().map_err(at0)?;
            r.read_leading_blocks();
        } else if !pcap_magic(bytes) && erf::sniff(bytes) {
            r.format = Format::Erf;
            r.read_leading_erf();
        } else {
            let h = pcap::FileHeader::parse(bytes).map_err(at0)?;
            r.format = Format::Pcap {
                nanos: h.nanos,
                big_endian: h.big_endian,
            };
            r.big_endian = h.big_endian;
            r.frac_ns = if h.nanos { 1 } else { 1000 };
            r.fcs = u32::from(h.fcs_len());
            r.interfaces.push(Interface {
                linktype: h.linktype,
                snaplen: h.snaplen,
                name: None,
                fcs_len: h.fcs_len(),
                ts: TsScale::new(if h.nanos { 9 } else { 6 }, 0),
            });
            r.pos = pcap::HEADER_LEN;
        }
        Ok(r)
    }

    /// The file's format.
    pub fn format(&self) -> Format {
        self.format
    }

    /// ERF records skipped because tapflow does not read their type (padding and metadata
    /// not counted), per type, in the order first met.
    pub fn skipped(&self) -> &[(erf::RecordType, u64)] {
        &self.skipped
    }

    /// The interfaces met so far; [`FilePacket::interface`] indexes this slice.
    pub fn interfaces(&self) -> &[Interface] {
        &self.interfaces
    }

    /// Byte offset of the next record or block (of the damage, after an error).
    pub fn offset(&self) -> u64 {
        self.pos as u64
    }

    /// The next packet, `None` at the end of the file; after an error, `None` forever.
    #[inline(always)]
    pub fn next_packet(&mut self) -> Option<Result<FilePacket<'a>, FileError>> {
        match self.format {
            Format::Pcap {
                big_endian: false, ..
            } => self.next_pcap::<false>(),
            Format::Pcap {
                big_endian: true, ..
            } => self.next_pcap::<true>(),
            Format::Pcapng => loop {
                let p = match self.big_endian {
                    true => self.next_pcapng::<true>(),
                    false => self.next_pcapng::<false>(),
                };
                // `None` before the end: a new section changed the byte order.
                if p.is_some() || self.pos == self.bytes.len() {
                    return p;
                }
            },
            Format::Erf => self.next_erf(),
        }
    }

    /// ERF: the next record that holds a packet; others are skipped (and counted if their type
    /// is one tapflow does not read).
    fn next_erf(&mut self) -> Option<Result<FilePacket<'a>, FileError>> {
        loop {
            let rest = &self.bytes[self.pos..];
            if rest.is_empty() {
                return None;
            }
            let r = match erf::Record::new_checked(rest) {
                Ok(r) => r,
                Err(kind) => return Some(Err(self.fail(kind))),
            };
            self.pos += usize::from(r.rlen());
            let t = r.record_type();
            let Some(linktype) = t.linktype() else {
                if !t.is_not_a_packet() {
                    match self.skipped.iter_mut().find(|(s, _)| *s == t) {
                        Some((_, n)) => *n += 1,
                        None => self.skipped.push((t, 1)),
                    }
                }
                continue;
            };
            let drops = if t.has_loss_counter() { r.lctr() } else { 0 };
            let (port, ts, wlen) = (r.port(), r.ts(), r.wlen());
            let data = r.into_payload();
            return Some(Ok(FilePacket {
                interface: self.erf_interface(port, linktype),
                ts_ns: erf::ts_to_ns(ts),
                ts_source: TsSource::File,
                len: u32::from(wlen).max(data.len() as u32),
                data,
                epb_flags: None,
                dropcount: (drops > 0).then_some(u64::from(drops)),
            }));
        }
    }

    /// ERF: the interface of capture port `port` with payloads of `linktype`, made if new.
    fn erf_interface(&mut self, port: u8, linktype: LinkType) -> u32 {
        if let Some(i) = self.erf_ports.iter().position(|&p| p == (port, linktype)) {
            return i as u32;
        }
        self.erf_ports.push((port, linktype));
        self.interfaces.push(Interface {
            linktype,
            snaplen: 0,
            name: Some(format!("port {}", char::from(b'A' + port))),
            fcs_len: 0,
            ts: TsScale::new(9, 0),
        });
        (self.interfaces.len() - 1) as u32
    }

    /// ERF: makes the interface of the first packet record known before it is read, as a
    /// pcapng file's leading IDBs are.
    fn read_leading_erf(&mut self) {
        let mut rest = self.bytes;
        while let Ok(r) = erf::Record::new_checked(rest) {
            if let Some(linktype) = r.record_type().linktype() {
                self.erf_interface(r.port(), linktype);
                return;
            }
            rest = &rest[usize::from(r.rlen())..];
        }
    }

    /// Stops reading: later calls return `None`. Returns the error at the current offset.
    #[cold]
    fn fail(&mut self, kind: FileErrorKind) -> FileError {
        self.bytes = &self.bytes[..self.pos];
        FileError {
            offset: self.pos as u64,
            kind,
        }
    }

    #[inline(always)]
    fn next_pcap<const BE: bool>(&mut self) -> Option<Result<FilePacket<'a>, FileError>> {
        let rest = &self.bytes[self.pos..];
        let Some(h) = rest.first_chunk::<{ pcap::RECORD_HEADER_LEN }>() else {
            if rest.is_empty() {
                return None;
            }
            let remain = rest.len() as u64;
            let need = pcap::RECORD_HEADER_LEN as u32;
            return Some(Err(
                self.fail(FileErrorKind::ShortRecordHeader { need, remain })
            ));
        };
        let r = pcap::RecordHeader::parse(h, BE);
        if r.caplen > MAXIMUM_SNAPLEN {
            return Some(Err(
                self.fail(FileErrorKind::CaplenTooLarge { caplen: r.caplen })
            ));
        }
        let end = pcap::RECORD_HEADER_LEN + r.caplen as usize;
        let Some(data) = rest.get(pcap::RECORD_HEADER_LEN..end) else {
            let kind = FileErrorKind::Truncated {
                claimed: end as u64,
                remain: rest.len() as u64,
            };
            return Some(Err(self.fail(kind)));
        };
        self.pos += end;
        let mut len = r.len.max(r.caplen);
        let mut data = data;
        if self.fcs != 0 {
            // The FCS is the frame's last bytes: cut whatever of it was captured.
            len = len.saturating_sub(self.fcs);
            data = &data[..data.len().min(len as usize)];
        }
        Some(Ok(FilePacket {
            interface: 0,
            ts_ns: u64::from(r.ts_sec) * 1_000_000_000 + u64::from(r.ts_frac) * self.frac_ns,
            ts_source: TsSource::File,
            len,
            data,
            epb_flags: None,
            dropcount: None,
        }))
    }

    /// pcapng: an intact EPB takes a straight path; any other block, or a damaged one, goes
    /// through [`Self::pcapng_block`], which also names the damage. Returns `None` at the end
    /// and when a new section switches the byte order away from `BE`.
    #[inline(never)]
    fn next_pcapng<const BE: bool>(&mut self) -> Option<Result<FilePacket<'a>, FileError>> {
        loop {
            let rest = &self.bytes[self.pos..];
            if let Some((p, len)) = Packet::parse_intact_epb::<BE>(rest)
                && let Some(iface) =
                    self.interfaces[self.section_base..].get(p.interface_id as usize)
            {
                let interface = (self.section_base + p.interface_id as usize) as u32;
                let ts_ns = iface.ts_to_ns(p.ts);
                self.pos += len;
                self.prev_ns = ts_ns;
                return Some(Ok(FilePacket {
                    interface,
                    ts_ns,
                    ts_source: TsSource::File,
                    len: p.orig_len,
                    data: p.data,
                    epb_flags: p.flags,
                    dropcount: p.dropcount,
                }));
            }
            if rest.is_empty() {
                return None;
            }
            match self.pcapng_block::<BE>(rest) {
                Ok(Step::Packet(p)) => return Some(Ok(p)),
                // A new section changed the byte order: the caller switches.
                Ok(Step::Other) if self.big_endian != BE => return None,
                Ok(Step::Other) => {}
                Err(kind) => return Some(Err(self.fail(kind))),
            }
        }
    }

    /// Reads the block at `rest` (the current offset); advances past it unless it is damaged.
    #[inline(never)]
    fn pcapng_block<const BE: bool>(&mut self, rest: &'a [u8]) -> Result<Step<'a>, FileErrorKind> {
        let b = if rest.first_chunk::<4>() == Some(&pcapng::BLOCK_SHB.to_le_bytes()) {
            Block::parse(rest, pcapng::section_byte_order(rest)?)?
        } else {
            Block::parse(rest, BE)?
        };
        let (p, section_id) = match b.block_type {
            pcapng::BLOCK_EPB => {
                let p = Packet::parse_epb(&b)?;
                (p, p.interface_id)
            }
            pcapng::BLOCK_SPB => {
                let snaplen = self.section_interface(0)?.snaplen;
                (Packet::parse_spb(&b, snaplen)?, 0)
            }
            pcapng::BLOCK_PB => {
                let p = Packet::parse_pb(&b)?;
                (p, p.interface_id)
            }
            _ => {
                self.apply_other(&b)?;
                self.pos += b.total_len();
                return Ok(Step::Other);
            }
        };
        let iface = self.section_interface(section_id)?;
        let interface = (self.section_base + section_id as usize) as u32;
        let (ts_ns, ts_source) = if b.block_type == pcapng::BLOCK_SPB {
            (self.prev_ns, TsSource::Copied)
        } else {
            (iface.ts_to_ns(p.ts), TsSource::File)
        };
        self.prev_ns = ts_ns;
        self.pos += b.total_len();
        Ok(Step::Packet(FilePacket {
            interface,
            ts_ns,
            ts_source,
            len: p.orig_len,
            data: p.data,
            epb_flags: p.flags,
            dropcount: p.dropcount,
        }))
    }

    /// The current section's interface `id`.
    #[inline(always)]
    fn section_interface(&self, id: u32) -> Result<&Interface, FileErrorKind> {
        let section = &self.interfaces[self.section_base..];
        section.get(id as usize).ok_or(FileErrorKind::NoInterface {
            interface: id,
            count: section.len() as u32,
        })
    }

    /// Handles a non-packet block: a new section, an IDB, or anything else (skipped).
    fn apply_other(&mut self, b: &Block<'a>) -> Result<(), FileErrorKind> {
        match b.block_type {
            pcapng::BLOCK_SHB => {
                Shb::parse(b)?;
                self.big_endian = b.big_endian;
                self.section_base = self.interfaces.len();
            }
            pcapng::BLOCK_IDB => {
                let i = Idb::parse(b)?;
                self.interfaces.push(Interface {
                    linktype: i.linktype,
                    snaplen: i.snaplen,
                    name: i.name.map(|n| String::from_utf8_lossy(n).into_owned()),
                    fcs_len: 0,
                    ts: TsScale::new(i.tsresol, i.tsoffset),
                });
            }
            _ => {}
        }
        Ok(())
    }

    /// Reads the SHB at offset 0.
    fn read_first_shb(&mut self) -> Result<(), FileErrorKind> {
        let have = self.bytes.len() as u64;
        let need = u64::from(pcapng::MIN_SHB_LEN);
        let truncated = |need| FileErrorKind::HeaderTruncated {
            format: "pcapng",
            need,
            have,
        };
        if have < need {
            return Err(truncated(need));
        }
        let be = pcapng::section_byte_order(self.bytes)?;
        let b = Block::parse(self.bytes, be).map_err(|e| match e {
            FileErrorKind::Truncated { claimed, .. } => truncated(claimed),
            e => e,
        })?;
        self.apply_other(&b)?;
        self.pos = b.total_len();
        Ok(())
    }

    /// Consumes the intact non-packet blocks after the first SHB, so that [`Self::interfaces`]
    /// lists the IDBs before the first packet. Stops before a packet, a new section or damage.
    fn read_leading_blocks(&mut self) {
        loop {
            let rest = &self.bytes[self.pos..];
            let Ok(b) = Block::parse(rest, self.big_endian) else {
                return;
            };
            if matches!(
                b.block_type,
                pcapng::BLOCK_SHB | pcapng::BLOCK_EPB | pcapng::BLOCK_SPB | pcapng::BLOCK_PB
            ) || self.apply_other(&b).is_err()
            {
                return;
            }
            self.pos += b.total_len();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pcapng::{IdbOptions, InterfaceStatistics};
    use proptest::prelude::*;

    fn ns(tsresol: u8, tsoffset: i64, ts: u64) -> u64 {
        TsScale::new(tsresol, tsoffset).to_ns(ts)
    }

    #[test]
    fn converts_every_resolution_without_float() {
        assert_eq!(ns(6, 0, 1_700_000_000_123_456), 1_700_000_000_123_456_000);
        assert_eq!(
            ns(9, 0, 1_700_000_000_123_456_789),
            1_700_000_000_123_456_789
        );
        assert_eq!(ns(0, 0, 3), 3_000_000_000);
        assert_eq!(ns(3, 0, 1_500), 1_500_000_000);
        assert_eq!(
            ns(12, 0, 1_700_000_000_123_456_789_u64),
            1_700_000_000_123_456
        );
        assert_eq!(
            ns(28, 0, u64::MAX),
            1,
            "10^-28 s: u64::MAX units are 1.8 ns"
        );
        assert_eq!(ns(29, 0, u64::MAX), 0, "10^-29 s: every u64 is under 1 ns");
        assert_eq!(ns(127, 0, u64::MAX), 0);
        assert_eq!(ns(0x80, 0, 5), 5_000_000_000, "2^0 s");
        assert_eq!(ns(0x80 | 20, 0, 3 << 20), 3_000_000_000, "2^-20 s");
        assert_eq!(ns(0x80 | 30, 0, 1), 0, "2^-30 s = 0.93 ns, floored");
        assert_eq!(ns(0x80 | 127, 0, u64::MAX), 0);
        assert_eq!(ns(0x80 | 3, 10, 11), 11_375_000_000);
    }

    #[test]
    fn timestamps_saturate() {
        assert_eq!(ns(6, 0, u64::MAX), u64::MAX);
        assert_eq!(ns(0x80, 0, u64::MAX), u64::MAX);
        assert_eq!(ns(9, i64::MAX, 1), u64::MAX);
        assert_eq!(ns(9, -10, 5_000_000_000), 0, "before 1970 clamps to 0");
        assert_eq!(ns(9, i64::MIN, u64::MAX), 0);
        assert_eq!(ns(9, -1, 5_000_000_000), 4_000_000_000);
    }

    #[test]
    fn errors_are_one_line_and_name_the_value() {
        let e = |offset, kind| FileError { offset, kind }.to_string();
        assert_eq!(
            e(
                1040,
                FileErrorKind::Truncated {
                    claimed: 1530,
                    remain: 77
                }
            ),
            "byte offset 1040: file ends mid-record: record claims 1530 bytes, 77 remain"
        );
        assert_eq!(
            e(24, FileErrorKind::CaplenTooLarge { caplen: 4_000_000 }),
            "byte offset 24: caplen 4000000 is larger than 262144 bytes, libpcap's MAXIMUM_SNAPLEN"
        );
        assert_eq!(
            e(0, FileErrorKind::NotCapture { magic: 0x504b_0304 }),
            "byte offset 0: not a pcap, pcapng or ERF file: magic 0x504b0304"
        );
        assert_eq!(
            e(
                96,
                FileErrorKind::NoInterface {
                    interface: 3,
                    count: 1
                }
            ),
            "byte offset 96: packet for interface 3, but its section has 1 interface(s)"
        );
        assert_eq!(
            e(28, FileErrorKind::BlockLengthUnaligned { len: 30 }),
            "byte offset 28: pcapng block length 30 is not a multiple of 4"
        );
        assert_eq!(
            e(
                0,
                FileErrorKind::HeaderTruncated {
                    format: "pcapng",
                    need: 28,
                    have: 3
                }
            ),
            "byte offset 0: file ends inside the pcapng header: the header needs 28 bytes, 3 remain"
        );
    }

    #[test]
    fn rejects_files_that_are_not_captures() {
        assert_eq!(
            Reader::new(b"").unwrap_err().kind,
            FileErrorKind::HeaderTruncated {
                format: "pcap",
                need: 24,
                have: 0
            }
        );
        assert_eq!(
            Reader::new(b"\x0a\x0d\x0d\x0a").unwrap_err().kind,
            FileErrorKind::HeaderTruncated {
                format: "pcapng",
                need: 28,
                have: 4
            }
        );
        assert_eq!(
            Reader::new(b"PK\x03\x04").unwrap_err().kind,
            FileErrorKind::NotCapture { magic: 0x504b_0304 }
        );
        let mut f = Vec::new();
        pcapng::write_shb(&mut f, "x");
        assert_eq!(
            Reader::new(&f[..f.len() - 4]).unwrap_err().kind,
            FileErrorKind::HeaderTruncated {
                format: "pcapng",
                need: 40,
                have: 36
            }
        );
    }

    #[test]
    fn interfaces_are_known_before_the_first_packet() {
        let mut f = Vec::new();
        pcapng::write_shb(&mut f, "");
        let o = IdbOptions {
            linktype: LinkType::Ethernet,
            snaplen: 9,
            name: Some("eth0"),
            filter: None,
            hardware: None,
        };
        pcapng::write_idb(&mut f, &o);
        pcapng::write_isb(&mut f, 0, 1, &InterfaceStatistics::default());
        pcapng::write_idb(
            &mut f,
            &IdbOptions {
                linktype: LinkType::Raw,
                name: None,
                ..o
            },
        );
        let first_packet = f.len() as u64;
        pcapng::write_epb(&mut f, 1, 1, &[1], 1, None, None);
        pcapng::write_idb(
            &mut f,
            &IdbOptions {
                name: Some("lo"),
                ..o
            },
        );
        pcapng::write_epb(&mut f, 2, 1, &[1], 1, None, None);
        let mut r = Reader::new(&f).unwrap();
        assert_eq!(r.offset(), first_packet);
        assert_eq!(r.interfaces().len(), 2);
        assert_eq!(r.interfaces()[0].name.as_deref(), Some("eth0"));
        assert_eq!(r.interfaces()[1].linktype, LinkType::Raw);
        assert_eq!(r.next_packet().unwrap().unwrap().interface, 1);
        assert_eq!(r.next_packet().unwrap().unwrap().interface, 2);
        assert_eq!(r.interfaces()[2].name.as_deref(), Some("lo"));
    }

    #[test]
    fn many_sections_of_alternating_byte_order() {
        let be_shb: [u8; 28] = [
            0x0a, 0x0d, 0x0d, 0x0a, 0, 0, 0, 0x1c, 0x1a, 0x2b, 0x3c, 0x4d, 0, 1, 0, 0, //
            0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0x1c,
        ];
        let mut f = Vec::new();
        for _ in 0..200_000 {
            pcapng::write_shb(&mut f, "");
            f.extend_from_slice(&be_shb);
        }
        pcapng::write_shb(&mut f, "");
        let o = IdbOptions {
            linktype: LinkType::Ethernet,
            snaplen: 0,
            name: None,
            filter: None,
            hardware: None,
        };
        pcapng::write_idb(&mut f, &o);
        pcapng::write_epb(&mut f, 0, 7, &[1, 2], 2, None, None);
        let mut r = Reader::new(&f).unwrap();
        let p = r.next_packet().unwrap().unwrap();
        assert_eq!((p.interface, p.ts_ns, p.data), (0, 7, &[1, 2][..]));
        assert!(r.next_packet().is_none());
        assert_eq!(r.offset(), f.len() as u64);
    }

    /// A Simple Packet Block has no timestamp: it takes the previous packet's (whichever
    /// interface that was on, whether it came through the fast path or not), or 0 when no
    /// packet came before it, and says so.
    #[test]
    fn a_simple_packet_block_takes_the_previous_packets_time() {
        const T: u64 = 1_700_000_000_000_000_000;
        let mut f = Vec::new();
        pcapng::write_shb(&mut f, "");
        let o = IdbOptions {
            linktype: LinkType::Raw,
            snaplen: 0,
            name: None,
            filter: None,
            hardware: None,
        };
        pcapng::write_idb(&mut f, &o);
        pcapng::write_idb(&mut f, &o);
        pcapng::write_spb(&mut f, &[1], 1);
        pcapng::write_epb(&mut f, 0, T, &[2], 2, None, None);
        pcapng::write_spb(&mut f, &[3], 3);
        pcapng::write_spb(&mut f, &[4], 4);
        pcapng::write_epb(&mut f, 1, T + 5, &[5], 5, None, None);
        pcapng::write_spb(&mut f, &[6], 6);
        let mut r = Reader::new(&f).unwrap();
        let got: Vec<_> = std::iter::from_fn(|| r.next_packet())
            .map(|p| p.unwrap())
            .map(|p| (p.data[0], p.interface, p.ts_ns, p.ts_source))
            .collect();
        assert_eq!(
            got,
            [
                (1, 0, 0, TsSource::Copied),
                (2, 0, T, TsSource::File),
                (3, 0, T, TsSource::Copied),
                (4, 0, T, TsSource::Copied),
                (5, 1, T + 5, TsSource::File),
                (6, 0, T + 5, TsSource::Copied),
            ]
        );
    }

    /// What `editcap -F erf` (Wireshark 4.0) writes first: a META record (type 27 with an
    /// extension header, 0x9b) naming the program, 128 bytes.
    const EDITCAP_META: &str = "00000000000000009b04008000000068110000000000000000020008000000000000\
        0000ff000004000000540010004545646974636170202857697265736861726b2920342e302e313720284769\
        742076342e302e3137207061636b6167656420617320342e302e31372d302b64656231327533290000\
        00ff01000400000008";

    #[test]
    fn erf_files_are_recognised_and_their_records_sorted_out() {
        let mut f: Vec<u8> = (0..EDITCAP_META.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&EDITCAP_META[i..i + 2], 16).unwrap())
            .collect();
        assert_eq!(f.len(), 128);
        let t = 1_700_000_000_123_456_789;
        erf::write_record(&mut f, erf::RecordType::Pad, 0, 0, 0, &[0; 8], 0);
        erf::write_record(
            &mut f,
            erf::RecordType::HdlcPos,
            0,
            t,
            0,
            &[0xff, 3, 0, 0x21],
            4,
        );
        erf::write_record(&mut f, erf::RecordType::ColorEth, 2, t, 0x77, &[1; 60], 64);
        erf::write_record(&mut f, erf::RecordType::Eth, 0, t + 1, 3, &[2; 60], 64);
        erf::write_record(&mut f, erf::RecordType::Ipv6, 2, t + 2, 0, &[0x60; 40], 40);
        erf::write_record(
            &mut f,
            erf::RecordType::ColorHashEth,
            2,
            t + 3,
            9,
            &[3; 60],
            60,
        );
        let mut r = Reader::new(&f).unwrap();
        assert_eq!(r.format(), Format::Erf);
        // The first packet's interface is known before it is read.
        assert_eq!(r.interfaces().len(), 1);
        assert_eq!(r.interfaces()[0].name.as_deref(), Some("port C"));
        let got: Vec<_> = std::iter::from_fn(|| r.next_packet())
            .map(|p| p.unwrap())
            .map(|p| (p.interface, p.ts_ns, p.len, p.data[0], p.dropcount))
            .collect();
        assert_eq!(
            got,
            [
                (0, t, 64, 1, None),
                (1, t + 1, 64, 2, Some(3)),
                (2, t + 2, 40, 0x60, None),
                (0, t + 3, 60, 3, None),
            ]
        );
        let lts: Vec<_> = r.interfaces().iter().map(|i| i.linktype).collect();
        assert_eq!(lts, [LinkType::Ethernet, LinkType::Ethernet, LinkType::Raw]);
        assert_eq!(r.skipped(), [(erf::RecordType::HdlcPos, 1)]);
        assert_eq!(r.offset(), f.len() as u64);

        // Damage after a good record ends the file there, named.
        let cut = f.len() - 3;
        let mut r = Reader::new(&f[..cut]).unwrap();
        let n = std::iter::from_fn(|| r.next_packet())
            .take_while(|p| p.is_ok())
            .count();
        assert_eq!(n, 3);
        let mut bad = f.clone();
        let last = f.len() - 80;
        bad[last + 11] = 8; // rlen 8
        let mut r = Reader::new(&bad).unwrap();
        let e = std::iter::from_fn(|| r.next_packet())
            .find_map(|p| p.err())
            .unwrap();
        assert_eq!(
            e.to_string(),
            format!("byte offset {last}: ERF record length 8 is below the 18 bytes of its headers")
        );
    }

    /// A pcap or pcapng file and the end offset of each of its packets.
    fn sample(pcapng: bool, pkts: &[(u64, Vec<u8>)]) -> (Vec<u8>, Vec<usize>) {
        let mut f = Vec::new();
        let mut ends = Vec::new();
        if pcapng {
            pcapng::write_shb(&mut f, "t");
            let o = IdbOptions {
                linktype: LinkType::Ethernet,
                snaplen: 0,
                name: Some("eth0"),
                filter: None,
                hardware: None,
            };
            pcapng::write_idb(&mut f, &o);
        } else {
            pcap::write_header(&mut f, LinkType::Ethernet, 65535);
        }
        for (i, (ts, data)) in pkts.iter().enumerate() {
            if pcapng {
                if i % 3 == 2 {
                    pcapng::write_isb(&mut f, 0, *ts, &InterfaceStatistics::default());
                }
                pcapng::write_epb(&mut f, 0, *ts, data, 1500, Some(1), None);
            } else {
                pcap::write_record(&mut f, *ts, data, 1500);
            }
            ends.push(f.len());
        }
        (f, ends)
    }

    proptest! {
        #[test]
        fn never_panics_on_arbitrary_bytes(
            prefix in 0usize..4,
            tail in proptest::collection::vec(any::<u8>(), 0..600),
        ) {
            let heads: [&[u8]; 4] = [
                b"",
                &[0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0],
                &[0x0a, 0x0d, 0x0d, 0x0a, 0x1c, 0, 0, 0, 0x4d, 0x3c, 0x2b, 0x1a, 1, 0, 0, 0],
                &[0x0a, 0x0d, 0x0d, 0x0a, 0, 0, 0, 0x1c, 0x1a, 0x2b, 0x3c, 0x4d, 0, 1, 0, 0],
            ];
            let mut f = heads[prefix].to_vec();
            f.extend_from_slice(&tail);
            if let Ok(mut r) = Reader::new(&f) {
                let mut n = 0;
                while let Some(p) = r.next_packet() {
                    n += 1;
                    prop_assert!(n <= f.len());
                    match p {
                        Ok(p) => prop_assert!((p.interface as usize) < r.interfaces().len()),
                        Err(e) => prop_assert!(e.offset <= f.len() as u64),
                    }
                }
            }
        }

        #[test]
        fn valid_blocks_with_mutations_never_panic(
            pcapng in any::<bool>(),
            flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8),
        ) {
            let pkts: Vec<(u64, Vec<u8>)> = (0..6).map(|i| (i * 1_000_000_007, vec![i as u8; i as usize * 5])).collect();
            let (mut f, _) = sample(pcapng, &pkts);
            for (at, v) in flips {
                let n = f.len();
                f[at % n] = v;
            }
            if let Ok(mut r) = Reader::new(&f) {
                while let Some(p) = r.next_packet() {
                    if let Err(e) = p {
                        prop_assert!(e.offset <= f.len() as u64);
                    }
                }
            }
        }

        #[test]
        fn truncation_keeps_every_packet_before_the_cut(
            pcapng in any::<bool>(),
            pkts in proptest::collection::vec((any::<u64>(), proptest::collection::vec(any::<u8>(), 0..70)), 0..8),
        ) {
            let pkts: Vec<(u64, Vec<u8>)> = pkts.into_iter()
                .map(|(ts, d)| (if pcapng { ts } else { ts % (u64::from(u32::MAX) * 1_000_000_000) }, d))
                .collect();
            let (f, ends) = sample(pcapng, &pkts);
            for cut in 0..=f.len() {
                let file = &f[..cut];
                let whole = ends.iter().filter(|&&e| e <= cut).count();
                let mut r = match Reader::new(file) {
                    Ok(r) => r,
                    Err(e) => {
                        prop_assert_eq!(e.offset, 0);
                        prop_assert!(ends.first().is_none_or(|&e| cut < e));
                        continue;
                    }
                };
                let mut got = 0;
                let mut error = None;
                while let Some(p) = r.next_packet() {
                    match p {
                        Ok(p) => {
                            prop_assert_eq!(p.ts_ns, pkts[got].0);
                            prop_assert_eq!(p.data, pkts[got].1.as_slice());
                            got += 1;
                        }
                        Err(e) => error = Some(e),
                    }
                }
                prop_assert_eq!(got, whole, "cut at {}", cut);
                // A cut on a record boundary is a clean end; anything else is an error before it.
                let on_boundary = cut == f.len() || r.offset() == cut as u64 && error.is_none();
                if let Some(e) = error {
                    prop_assert!(e.offset <= cut as u64);
                    prop_assert!(e.offset >= ends.get(whole.wrapping_sub(1)).map_or(0, |&e| e as u64));
                } else {
                    prop_assert!(on_boundary, "cut at {} ended silently at {}", cut, r.offset());
                }
            }
        }
    }
}
