//! pcapng blocks (draft-ietf-opsawg-pcapng): views that parse them and writers that emit them.
//!
//! ```text
//! every block                              options (in the block body, after fixed fields)
//! +--------------------------------+       +----------------+----------------+
//! | Block Type                     |       | Option Code    | Option Length  |
//! | Block Total Length             |       +----------------+----------------+
//! | Block Body (fixed fields,      |       | value, padded to 32 bits        |
//! |   then options), 32-bit padded |       +---------------------------------+
//! | Block Total Length             |       ... ended by opt_endofopt (0, 0)
//! +--------------------------------+
//! ```
//!
//! A Section Header Block's byte-order magic fixes the byte order of every block up to the next
//! SHB. tapflow writes little-endian sections whose interfaces all have `if_tsresol` = 9 (ns).

use crate::LinkType;
use crate::bytes::{get_u64_exact_as, read_u16_as, read_u32_as};
use crate::capfile::{FileErrorKind, MAXIMUM_SNAPLEN};

/// Section Header Block type (a palindrome: the same in both byte orders).
pub const BLOCK_SHB: u32 = 0x0a0d_0d0a;
/// Interface Description Block type.
pub const BLOCK_IDB: u32 = 1;
/// Obsolete Packet Block type.
pub const BLOCK_PB: u32 = 2;
/// Simple Packet Block type.
pub const BLOCK_SPB: u32 = 3;
/// Name Resolution Block type.
pub const BLOCK_NRB: u32 = 4;
/// Interface Statistics Block type.
pub const BLOCK_ISB: u32 = 5;
/// Enhanced Packet Block type.
pub const BLOCK_EPB: u32 = 6;
/// The SHB byte-order magic, as written by the section's writer.
pub const BYTE_ORDER_MAGIC: u32 = 0x1a2b_3c4d;

/// `opt_endofopt`: ends an options list.
pub const OPT_ENDOFOPT: u16 = 0;
/// `opt_comment`: a UTF-8 comment, valid in every block.
pub const OPT_COMMENT: u16 = 1;
/// `shb_hardware`: the writer's hardware.
pub const SHB_HARDWARE: u16 = 2;
/// `shb_os`: the writer's operating system.
pub const SHB_OS: u16 = 3;
/// `shb_userappl`: the application that wrote the section.
pub const SHB_USERAPPL: u16 = 4;
/// `if_name`: the interface's name, e.g. `eth0`.
pub const IF_NAME: u16 = 2;
/// `if_tsresol`: timestamp resolution (MSB 0: 10^-n s, MSB 1: 2^-n s; absent: 10^-6).
pub const IF_TSRESOL: u16 = 9;
/// `if_filter`: the capture filter (first octet 0: a libpcap filter string).
pub const IF_FILTER: u16 = 11;
/// `if_fcslen`: FCS bytes at the end of each frame.
pub const IF_FCSLEN: u16 = 13;
/// `if_tsoffset`: seconds added to every timestamp of the interface.
pub const IF_TSOFFSET: u16 = 14;
/// `if_hardware`: the interface's hardware description.
pub const IF_HARDWARE: u16 = 15;
/// `epb_flags`: direction, reception type, FCS length, checksum and link-error bits.
pub const EPB_FLAGS: u16 = 2;
/// `epb_hash`: a hash of the packet.
pub const EPB_HASH: u16 = 3;
/// `epb_dropcount`: packets lost between this packet and the previous one of its interface.
pub const EPB_DROPCOUNT: u16 = 4;
/// `isb_starttime`: start of the capture.
pub const ISB_STARTTIME: u16 = 2;
/// `isb_endtime`: end of the capture.
pub const ISB_ENDTIME: u16 = 3;
/// `isb_ifrecv`: packets received by the interface.
pub const ISB_IFRECV: u16 = 4;
/// `isb_ifdrop`: packets the interface dropped for lack of resources.
pub const ISB_IFDROP: u16 = 5;
/// `isb_filteraccept`: packets accepted by the filter.
pub const ISB_FILTERACCEPT: u16 = 6;
/// `isb_osdrop`: packets the operating system dropped.
pub const ISB_OSDROP: u16 = 7;
/// `isb_usrdeliv`: packets delivered to the user.
pub const ISB_USRDELIV: u16 = 8;

/// Smallest block: type, two lengths.
pub const MIN_BLOCK_LEN: u32 = 12;
/// Smallest SHB: header plus BOM, version and section length.
pub const MIN_SHB_LEN: u32 = 28;
const MIN_IDB_LEN: u32 = 20;
const MIN_EPB_LEN: u32 = 32;
const MIN_PB_LEN: u32 = 32;
const MIN_SPB_LEN: u32 = 16;
const MIN_ISB_LEN: u32 = 24;

/// Two 32-bit words, high first: the layout of pcapng timestamps.
#[inline(always)]
fn rd_ts(be: bool, b: &[u8], at: usize) -> u64 {
    u64::from(read_u32_as(be, &b[at..])) << 32 | u64::from(read_u32_as(be, &b[at + 4..]))
}

/// Rounds `n` up to a multiple of 4.
#[inline(always)]
const fn pad4(n: usize) -> usize {
    (n + 3) & !3
}

/// One block: its type and the body between the two length fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Block<'a> {
    /// Block Type.
    pub block_type: u32,
    /// The section's byte order.
    pub big_endian: bool,
    /// Block Body (fixed fields, then options).
    pub body: &'a [u8],
}

impl<'a> Block<'a> {
    /// Checks and borrows the block at the start of `buf` (lengths valid, trailer matching).
    #[inline(always)]
    pub fn parse(buf: &'a [u8], big_endian: bool) -> Result<Block<'a>, FileErrorKind> {
        let Some(h) = buf.first_chunk::<8>() else {
            return Err(FileErrorKind::ShortRecordHeader {
                need: 8,
                remain: buf.len() as u64,
            });
        };
        let block_type = read_u32_as(big_endian, h);
        let len = read_u32_as(big_endian, &h[4..]);
        if len < MIN_BLOCK_LEN {
            return Err(FileErrorKind::BlockTooShort {
                block_type,
                len,
                min: MIN_BLOCK_LEN,
            });
        }
        if !len.is_multiple_of(4) {
            return Err(FileErrorKind::BlockLengthUnaligned { len });
        }
        let Some(block) = buf.get(..len as usize) else {
            return Err(FileErrorKind::Truncated {
                claimed: u64::from(len),
                remain: buf.len() as u64,
            });
        };
        let end = len as usize - 4;
        let trailing = read_u32_as(big_endian, &block[end..]);
        if trailing != len {
            return Err(FileErrorKind::BlockLengthMismatch {
                leading: len,
                trailing,
            });
        }
        Ok(Block {
            block_type,
            big_endian,
            body: &block[8..end],
        })
    }

    /// Block Total Length.
    #[inline(always)]
    pub fn total_len(&self) -> usize {
        self.body.len() + 12
    }

    /// Errors unless the block is at least `min` bytes long.
    #[inline(always)]
    fn need(&self, min: u32) -> Result<(), FileErrorKind> {
        if self.total_len() < min as usize {
            return Err(FileErrorKind::BlockTooShort {
                block_type: self.block_type,
                len: self.total_len() as u32,
                min,
            });
        }
        Ok(())
    }

    /// The options that start `at` bytes into the body.
    #[inline(always)]
    fn options(&self, at: usize) -> Options<'a> {
        Options {
            buf: self.body.get(at..).unwrap_or(&[]),
            big_endian: self.big_endian,
            block_type: self.block_type,
        }
    }
}

/// Iterates `(code, value)` options up to `opt_endofopt` or the end of the body.
#[derive(Debug, Clone)]
pub struct Options<'a> {
    buf: &'a [u8],
    big_endian: bool,
    block_type: u32,
}

impl<'a> Iterator for Options<'a> {
    type Item = Result<(u16, &'a [u8]), FileErrorKind>;

    #[inline(always)]
    fn next(&mut self) -> Option<Self::Item> {
        // Fewer than 4 bytes cannot hold an option header: the list ended without endofopt.
        let h = self.buf.first_chunk::<4>()?;
        let code = read_u16_as(self.big_endian, h);
        let len = read_u16_as(self.big_endian, &h[2..]);
        if code == OPT_ENDOFOPT {
            self.buf = &[];
            return None;
        }
        let rest = &self.buf[4..];
        let Some(value) = rest.get(..len as usize) else {
            let e = FileErrorKind::BadOption {
                block_type: self.block_type,
                code,
                len,
                remain: rest.len() as u32,
            };
            self.buf = &[];
            return Some(Err(e));
        };
        // The last option's padding may be missing.
        self.buf = rest.get(pad4(len as usize)..).unwrap_or(&[]);
        Some(Ok((code, value)))
    }
}

/// Returns the byte order of the SHB at the start of `buf` (`true`: big-endian).
pub fn section_byte_order(buf: &[u8]) -> Result<bool, FileErrorKind> {
    let Some(h) = buf.first_chunk::<12>() else {
        return Err(FileErrorKind::ShortRecordHeader {
            need: 12,
            remain: buf.len() as u64,
        });
    };
    let bom = [h[8], h[9], h[10], h[11]];
    match u32::from_le_bytes(bom) {
        BYTE_ORDER_MAGIC => Ok(false),
        m if m == BYTE_ORDER_MAGIC.swap_bytes() => Ok(true),
        _ => Err(FileErrorKind::BadByteOrderMagic {
            magic: u32::from_be_bytes(bom),
        }),
    }
}

/// A Section Header Block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shb<'a> {
    /// The section is big-endian.
    pub big_endian: bool,
    /// Major Version (1).
    pub major: u16,
    /// Minor Version (0).
    pub minor: u16,
    /// Section Length in bytes, -1 if not given.
    pub section_len: i64,
    /// `shb_hardware`.
    pub hardware: Option<&'a [u8]>,
    /// `shb_os`.
    pub os: Option<&'a [u8]>,
    /// `shb_userappl`.
    pub user_appl: Option<&'a [u8]>,
}

impl<'a> Shb<'a> {
    /// Parses an SHB; only major version 1 is accepted.
    pub fn parse(b: &Block<'a>) -> Result<Shb<'a>, FileErrorKind> {
        b.need(MIN_SHB_LEN)?;
        let be = b.big_endian;
        let major = read_u16_as(be, &b.body[4..]);
        let minor = read_u16_as(be, &b.body[6..]);
        if major != 1 {
            return Err(FileErrorKind::UnsupportedVersion {
                format: "pcapng",
                major,
                minor,
            });
        }
        let mut s = Shb {
            big_endian: be,
            major,
            minor,
            section_len: rd_ts(be, b.body, 8) as i64,
            hardware: None,
            os: None,
            user_appl: None,
        };
        for o in b.options(16) {
            match o? {
                (SHB_HARDWARE, v) => s.hardware = Some(v),
                (SHB_OS, v) => s.os = Some(v),
                (SHB_USERAPPL, v) => s.user_appl = Some(v),
                _ => {}
            }
        }
        Ok(s)
    }
}

/// An Interface Description Block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Idb<'a> {
    /// LinkType.
    pub linktype: LinkType,
    /// SnapLen (0: no limit).
    pub snaplen: u32,
    /// `if_tsresol` (6, microseconds, when absent).
    pub tsresol: u8,
    /// `if_tsoffset` in seconds (0 when absent).
    pub tsoffset: i64,
    /// `if_name`.
    pub name: Option<&'a [u8]>,
    /// `if_filter` when it is a libpcap filter string (type octet 0), without the type octet.
    pub filter: Option<&'a [u8]>,
    /// `if_hardware`.
    pub hardware: Option<&'a [u8]>,
    /// `if_fcslen`.
    pub fcslen: Option<u8>,
}

impl<'a> Idb<'a> {
    /// Parses an IDB.
    pub fn parse(b: &Block<'a>) -> Result<Idb<'a>, FileErrorKind> {
        b.need(MIN_IDB_LEN)?;
        let be = b.big_endian;
        let mut i = Idb {
            linktype: LinkType::from_u16(read_u16_as(be, b.body)),
            snaplen: read_u32_as(be, &b.body[4..]),
            tsresol: 6,
            tsoffset: 0,
            name: None,
            filter: None,
            hardware: None,
            fcslen: None,
        };
        for o in b.options(8) {
            match o? {
                (IF_NAME, v) => i.name = Some(v),
                (IF_TSRESOL, &[r]) => i.tsresol = r,
                (IF_TSOFFSET, v) => i.tsoffset = get_u64_exact_as(be, v).map_or(0, |v| v as i64),
                (IF_FILTER, [0, f @ ..]) => i.filter = Some(f),
                (IF_HARDWARE, v) => i.hardware = Some(v),
                (IF_FCSLEN, &[n]) => i.fcslen = Some(n),
                _ => {}
            }
        }
        Ok(i)
    }
}

/// A packet from an EPB, an SPB or an obsolete Packet Block, timestamp in interface units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<'a> {
    /// Interface ID within the section (0 for an SPB).
    pub interface_id: u32,
    /// Timestamp in units of the interface's `if_tsresol` (0 for an SPB).
    pub ts: u64,
    /// Original Packet Length (at least `data.len()`).
    pub orig_len: u32,
    /// Packet Data, without padding.
    pub data: &'a [u8],
    /// `epb_flags` (or the obsolete `pack_flags`).
    pub flags: Option<u32>,
    /// `epb_dropcount` (or the obsolete Drops Count unless it is 0xffff).
    pub dropcount: Option<u64>,
}

impl<'a> Packet<'a> {
    /// Parses an Enhanced Packet Block.
    #[inline(always)]
    pub fn parse_epb(b: &Block<'a>) -> Result<Packet<'a>, FileErrorKind> {
        b.need(MIN_EPB_LEN)?;
        let be = b.big_endian;
        let body = b.body;
        let mut p = Self::common(b, read_u32_as(be, body), rd_ts(be, body, 4))?;
        for o in b.options(20 + pad4(p.data.len())) {
            match o? {
                (EPB_FLAGS, v) if v.len() == 4 => p.flags = Some(read_u32_as(be, v)),
                (EPB_DROPCOUNT, v) => p.dropcount = get_u64_exact_as(be, v),
                _ => {}
            }
        }
        Ok(p)
    }

    /// Parses the block at the start of `buf` if it is an intact EPB in byte order `BE`, with
    /// its total length; `None` for anything else, damage included ([`Self::parse_epb`] then
    /// names it). The reader's fast path.
    #[inline(always)]
    pub fn parse_intact_epb<const BE: bool>(buf: &'a [u8]) -> Option<(Packet<'a>, usize)> {
        let h = buf.first_chunk::<28>()?;
        let len = read_u32_as(BE, &h[4..]);
        if read_u32_as(BE, h) != BLOCK_EPB || len < MIN_EPB_LEN || !len.is_multiple_of(4) {
            return None;
        }
        let block = buf.get(..len as usize)?;
        let end = len as usize - 4;
        let caplen = read_u32_as(BE, &h[20..]);
        if caplen > MAXIMUM_SNAPLEN
            || caplen as usize > end - 28
            || read_u32_as(BE, &block[end..]) != len
        {
            return None;
        }
        let mut p = Packet {
            interface_id: read_u32_as(BE, &h[8..]),
            ts: rd_ts(BE, h, 12),
            orig_len: read_u32_as(BE, &h[24..]).max(caplen),
            data: &block[28..28 + caplen as usize],
            flags: None,
            dropcount: None,
        };
        let opts = block.get(28 + pad4(caplen as usize)..end).unwrap_or(&[]);
        if !opts.is_empty() {
            let it = Options {
                buf: opts,
                big_endian: BE,
                block_type: BLOCK_EPB,
            };
            for o in it {
                match o.ok()? {
                    (EPB_FLAGS, v) if v.len() == 4 => p.flags = Some(read_u32_as(BE, v)),
                    (EPB_DROPCOUNT, v) => p.dropcount = get_u64_exact_as(BE, v),
                    _ => {}
                }
            }
        }
        Some((p, len as usize))
    }

    /// Parses an obsolete Packet Block (type 2).
    pub fn parse_pb(b: &Block<'a>) -> Result<Packet<'a>, FileErrorKind> {
        b.need(MIN_PB_LEN)?;
        let be = b.big_endian;
        let body = b.body;
        let mut p = Self::common(b, u32::from(read_u16_as(be, body)), rd_ts(be, body, 4))?;
        let drops = read_u16_as(be, &body[2..]);
        p.dropcount = (drops != 0xffff).then_some(u64::from(drops));
        for o in b.options(20 + pad4(p.data.len())) {
            if let (EPB_FLAGS, v) = o?
                && v.len() == 4
            {
                p.flags = Some(read_u32_as(be, v));
            }
        }
        Ok(p)
    }

    /// EPB and PB share the layout from offset 12 of the body: caplen, len, data.
    #[inline(always)]
    fn common(b: &Block<'a>, interface_id: u32, ts: u64) -> Result<Packet<'a>, FileErrorKind> {
        let be = b.big_endian;
        let caplen = read_u32_as(be, &b.body[12..]);
        let orig_len = read_u32_as(be, &b.body[16..]);
        let room = &b.body[20..];
        if caplen > MAXIMUM_SNAPLEN {
            return Err(FileErrorKind::CaplenTooLarge { caplen });
        }
        let Some(data) = room.get(..caplen as usize) else {
            return Err(FileErrorKind::CaplenExceedsBlock {
                block_type: b.block_type,
                caplen,
                room: room.len() as u32,
            });
        };
        Ok(Packet {
            interface_id,
            ts,
            orig_len: orig_len.max(caplen),
            data,
            flags: None,
            dropcount: None,
        })
    }

    /// Parses a Simple Packet Block of a section whose first interface has `snaplen`.
    ///
    /// Captured length is the smallest of Original Packet Length, the block's room and a
    /// non-zero `snaplen`.
    pub fn parse_spb(b: &Block<'a>, snaplen: u32) -> Result<Packet<'a>, FileErrorKind> {
        b.need(MIN_SPB_LEN)?;
        let orig_len = read_u32_as(b.big_endian, b.body);
        let room = &b.body[4..];
        let snap = if snaplen == 0 { u32::MAX } else { snaplen };
        let caplen = orig_len.min(snap).min(MAXIMUM_SNAPLEN) as usize;
        let data = &room[..caplen.min(room.len())];
        Ok(Packet {
            interface_id: 0,
            ts: 0,
            orig_len,
            data,
            flags: None,
            dropcount: None,
        })
    }
}

/// Counters of an Interface Statistics Block; timestamps in the interface's units (ns for
/// interfaces tapflow writes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct InterfaceStatistics {
    /// `isb_starttime`.
    pub starttime_ns: Option<u64>,
    /// `isb_endtime`.
    pub endtime_ns: Option<u64>,
    /// `isb_ifrecv`.
    pub ifrecv: Option<u64>,
    /// `isb_ifdrop`.
    pub ifdrop: Option<u64>,
    /// `isb_filteraccept`.
    pub filteraccept: Option<u64>,
    /// `isb_osdrop`.
    pub osdrop: Option<u64>,
    /// `isb_usrdeliv`.
    pub usrdeliv: Option<u64>,
}

/// An Interface Statistics Block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Isb {
    /// Interface ID within the section.
    pub interface_id: u32,
    /// Timestamp in interface units.
    pub ts: u64,
    /// The counters present.
    pub stats: InterfaceStatistics,
}

impl Isb {
    /// Parses an ISB.
    pub fn parse(b: &Block<'_>) -> Result<Isb, FileErrorKind> {
        b.need(MIN_ISB_LEN)?;
        let be = b.big_endian;
        let mut s = InterfaceStatistics::default();
        for o in b.options(12) {
            let (code, v) = o?;
            let ts = || (v.len() == 8).then(|| rd_ts(be, v, 0));
            match code {
                ISB_STARTTIME => s.starttime_ns = ts(),
                ISB_ENDTIME => s.endtime_ns = ts(),
                ISB_IFRECV => s.ifrecv = get_u64_exact_as(be, v),
                ISB_IFDROP => s.ifdrop = get_u64_exact_as(be, v),
                ISB_FILTERACCEPT => s.filteraccept = get_u64_exact_as(be, v),
                ISB_OSDROP => s.osdrop = get_u64_exact_as(be, v),
                ISB_USRDELIV => s.usrdeliv = get_u64_exact_as(be, v),
                _ => {}
            }
        }
        Ok(Isb {
            interface_id: read_u32_as(be, b.body),
            ts: rd_ts(be, b.body, 4),
            stats: s,
        })
    }
}

// ---- writers: little-endian, appended to a caller's buffer ----

/// Starts a block: type and a placeholder length. Returns the block's start.
#[inline(always)]
fn begin(out: &mut Vec<u8>, block_type: u32, reserve: usize) -> usize {
    out.reserve(reserve);
    let start = out.len();
    out.extend_from_slice(&block_type.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    start
}

/// Ends a block: writes the trailing length and patches the leading one.
#[inline(always)]
fn finish(out: &mut Vec<u8>, start: usize) {
    let len = ((out.len() - start + 4) as u32).to_le_bytes();
    out.extend_from_slice(&len);
    out[start + 4..start + 8].copy_from_slice(&len);
}

/// Appends one option (values longer than 65535 bytes are cut).
#[inline(always)]
fn push_option(out: &mut Vec<u8>, code: u16, value: &[u8]) {
    push_str_option(out, code, &[], value);
}

/// Appends one option whose value is `prefix` then `value`, cut to 65535 bytes, then padding.
#[inline(always)]
fn push_str_option(out: &mut Vec<u8>, code: u16, prefix: &[u8], value: &[u8]) {
    let value = &value[..value.len().min(u16::MAX as usize - prefix.len())];
    let len = prefix.len() + value.len();
    out.extend_from_slice(&code.to_le_bytes());
    out.extend_from_slice(&(len as u16).to_le_bytes());
    out.extend_from_slice(prefix);
    out.extend_from_slice(value);
    out.extend_from_slice(&[0u8; 3][..pad4(len) - len]);
}

/// Appends `opt_endofopt`.
#[inline(always)]
fn push_end(out: &mut Vec<u8>) {
    out.extend_from_slice(&[0, 0, 0, 0]);
}

/// Appends a pcapng timestamp (high word, then low word).
#[inline(always)]
fn push_ts(out: &mut Vec<u8>, ts: u64) {
    out.extend_from_slice(&((ts >> 32) as u32).to_le_bytes());
    out.extend_from_slice(&(ts as u32).to_le_bytes());
}

/// Appends a little-endian Section Header Block, version 1.0, Section Length -1, with
/// `shb_userappl` unless `user_appl` is empty.
pub fn write_shb(out: &mut Vec<u8>, user_appl: &str) {
    let start = begin(out, BLOCK_SHB, 36 + pad4(user_appl.len()));
    out.extend_from_slice(&BYTE_ORDER_MAGIC.to_le_bytes());
    out.extend_from_slice(&1u16.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(&(-1i64).to_le_bytes());
    if !user_appl.is_empty() {
        push_option(out, SHB_USERAPPL, user_appl.as_bytes());
        push_end(out);
    }
    finish(out, start);
}

/// What [`write_idb`] writes about an interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdbOptions<'a> {
    /// LinkType.
    pub linktype: LinkType,
    /// SnapLen.
    pub snaplen: u32,
    /// `if_name`.
    pub name: Option<&'a str>,
    /// `if_filter`, written as a libpcap filter string (type octet 0).
    pub filter: Option<&'a str>,
    /// `if_hardware`.
    pub hardware: Option<&'a str>,
}

/// Appends an Interface Description Block; always writes `if_tsresol` = 9 (nanoseconds).
pub fn write_idb(out: &mut Vec<u8>, o: &IdbOptions<'_>) {
    let strs = [o.name, o.filter, o.hardware].map(|s| s.map_or(0, |s| 4 + pad4(s.len() + 1)));
    let start = begin(out, BLOCK_IDB, 32 + strs.iter().sum::<usize>());
    out.extend_from_slice(&o.linktype.to_u16().to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(&o.snaplen.to_le_bytes());
    if let Some(name) = o.name {
        push_option(out, IF_NAME, name.as_bytes());
    }
    push_option(out, IF_TSRESOL, &[9]);
    if let Some(f) = o.filter {
        push_str_option(out, IF_FILTER, &[0], f.as_bytes());
    }
    if let Some(h) = o.hardware {
        push_option(out, IF_HARDWARE, h.as_bytes());
    }
    push_end(out);
    finish(out, start);
}

/// Length of the Enhanced Packet Block [`emit_epb`] writes for `caplen` bytes and the given
/// options.
#[inline]
pub const fn epb_len(caplen: usize, epb_flags: bool, dropcount: bool) -> usize {
    let opts = if epb_flags { 8 } else { 0 } + if dropcount { 12 } else { 0 };
    let opts = if opts == 0 { 0 } else { opts + 4 };
    32 + pad4(caplen) + opts
}

/// Writes an Enhanced Packet Block (ns timestamps; optional `epb_flags` and `epb_dropcount`)
/// into `buf`, which must be exactly [`epb_len`] bytes long.
///
/// # Panics
/// If `buf` has another length: the caller sizes it with [`epb_len`].
#[inline(always)]
pub fn emit_epb(
    buf: &mut [u8],
    interface_id: u32,
    ts_ns: u64,
    data: &[u8],
    orig_len: u32,
    epb_flags: Option<u32>,
    dropcount: Option<u64>,
) {
    let total = epb_len(data.len(), epb_flags.is_some(), dropcount.is_some());
    assert_eq!(buf.len(), total, "EPB buffer sized by epb_len");
    let caplen = data.len() as u32;
    // The fixed part as one array: one bounds check, then plain stores.
    let (head, rest) = buf.split_at_mut(28);
    let head: &mut [u8; 28] = head.try_into().expect("28 bytes");
    let words = [
        BLOCK_EPB,
        total as u32,
        interface_id,
        (ts_ns >> 32) as u32,
        ts_ns as u32,
        caplen,
        orig_len.max(caplen),
    ];
    for (chunk, w) in head.chunks_exact_mut(4).zip(words) {
        chunk.copy_from_slice(&w.to_le_bytes());
    }
    let padded = pad4(data.len());
    let (body, rest) = rest.split_at_mut(padded);
    if padded > 0 {
        // Zero the last word before the data lands on it: the padding, without a memset call.
        body[padded - 4..].copy_from_slice(&[0; 4]);
    }
    body[..data.len()].copy_from_slice(data);
    let (opts, trailer) = rest.split_at_mut(rest.len() - 4);
    let mut at = 0;
    if let Some(f) = epb_flags {
        let mut o = [0u8; 8];
        o[0..2].copy_from_slice(&EPB_FLAGS.to_le_bytes());
        o[2..4].copy_from_slice(&4u16.to_le_bytes());
        o[4..8].copy_from_slice(&f.to_le_bytes());
        opts[..8].copy_from_slice(&o);
        at = 8;
    }
    if let Some(d) = dropcount {
        let mut o = [0u8; 12];
        o[0..2].copy_from_slice(&EPB_DROPCOUNT.to_le_bytes());
        o[2..4].copy_from_slice(&8u16.to_le_bytes());
        o[4..12].copy_from_slice(&d.to_le_bytes());
        opts[at..at + 12].copy_from_slice(&o);
        at += 12;
    }
    if at > 0 {
        opts[at..at + 4].copy_from_slice(&[0; 4]); // opt_endofopt
    }
    trailer.copy_from_slice(&(total as u32).to_le_bytes());
}

/// Appends an Enhanced Packet Block for an interface written by [`write_idb`] (ns timestamps).
///
/// Original Packet Length is written as `max(orig_len, data.len())`; `epb_flags` and
/// `epb_dropcount` are written when given. Allocates only if `out` lacks capacity.
#[inline]
pub fn write_epb(
    out: &mut Vec<u8>,
    interface_id: u32,
    ts_ns: u64,
    data: &[u8],
    orig_len: u32,
    epb_flags: Option<u32>,
    dropcount: Option<u64>,
) {
    let start = out.len();
    out.resize(
        start + epb_len(data.len(), epb_flags.is_some(), dropcount.is_some()),
        0,
    );
    emit_epb(
        &mut out[start..],
        interface_id,
        ts_ns,
        data,
        orig_len,
        epb_flags,
        dropcount,
    );
}

/// What [`write_epb_with`] writes among an Enhanced Packet Block's options.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EpbOptions<'a> {
    /// `opt_comment` (tshark shows it under "Packet comments", as `frame.comment`).
    pub comment: Option<&'a str>,
    /// `epb_flags`.
    pub flags: Option<u32>,
    /// `epb_dropcount`.
    pub dropcount: Option<u64>,
}

/// Appends an Enhanced Packet Block as [`write_epb`] does, with the options of `o`: for the
/// rare packet that carries a comment (the packet path uses [`emit_epb`]).
pub fn write_epb_with(
    out: &mut Vec<u8>,
    interface_id: u32,
    ts_ns: u64,
    data: &[u8],
    orig_len: u32,
    o: &EpbOptions<'_>,
) {
    let comment = o.comment.map_or(0, |c| 4 + pad4(c.len()));
    let start = begin(out, BLOCK_EPB, 56 + pad4(data.len()) + comment);
    out.extend_from_slice(&interface_id.to_le_bytes());
    push_ts(out, ts_ns);
    let caplen = data.len() as u32;
    out.extend_from_slice(&caplen.to_le_bytes());
    out.extend_from_slice(&orig_len.max(caplen).to_le_bytes());
    out.extend_from_slice(data);
    out.extend_from_slice(&[0u8; 3][..pad4(data.len()) - data.len()]);
    if let Some(c) = o.comment {
        push_option(out, OPT_COMMENT, c.as_bytes());
    }
    if let Some(f) = o.flags {
        push_option(out, EPB_FLAGS, &f.to_le_bytes());
    }
    if let Some(d) = o.dropcount {
        push_option(out, EPB_DROPCOUNT, &d.to_le_bytes());
    }
    if o.comment.is_some() || o.flags.is_some() || o.dropcount.is_some() {
        push_end(out);
    }
    finish(out, start);
}

/// Appends a Simple Packet Block: Original Packet Length `max(orig_len, data.len())`, then
/// `data` (its captured length is what a reader's snaplen leaves of it). It has no timestamp
/// and no interface: the section's interface 0.
pub fn write_spb(out: &mut Vec<u8>, data: &[u8], orig_len: u32) {
    let start = begin(out, BLOCK_SPB, 16 + pad4(data.len()));
    out.extend_from_slice(&orig_len.max(data.len() as u32).to_le_bytes());
    out.extend_from_slice(data);
    out.extend_from_slice(&[0u8; 3][..pad4(data.len()) - data.len()]);
    finish(out, start);
}

/// Appends an Interface Statistics Block with the counters present in `s` (ns timestamps).
pub fn write_isb(out: &mut Vec<u8>, interface_id: u32, ts_ns: u64, s: &InterfaceStatistics) {
    isb(out, interface_id, ts_ns, s, None);
}

/// Appends an Interface Statistics Block as [`write_isb`] does, with `comment` as its
/// `opt_comment` (what happened at that moment, e.g. a gap in the capture).
pub fn write_isb_with_comment(
    out: &mut Vec<u8>,
    interface_id: u32,
    ts_ns: u64,
    s: &InterfaceStatistics,
    comment: &str,
) {
    isb(out, interface_id, ts_ns, s, Some(comment));
}

fn isb(
    out: &mut Vec<u8>,
    interface_id: u32,
    ts_ns: u64,
    s: &InterfaceStatistics,
    comment: Option<&str>,
) {
    let opts = [
        (ISB_STARTTIME, s.starttime_ns.map(|t| t.rotate_left(32))),
        (ISB_ENDTIME, s.endtime_ns.map(|t| t.rotate_left(32))),
        (ISB_IFRECV, s.ifrecv),
        (ISB_IFDROP, s.ifdrop),
        (ISB_FILTERACCEPT, s.filteraccept),
        (ISB_OSDROP, s.osdrop),
        (ISB_USRDELIV, s.usrdeliv),
    ];
    let n = opts.iter().filter(|(_, v)| v.is_some()).count();
    let comment_len = comment.map_or(0, |c| 4 + pad4(c.len()));
    let start = begin(out, BLOCK_ISB, 28 + 12 * n + comment_len + 4);
    out.extend_from_slice(&interface_id.to_le_bytes());
    push_ts(out, ts_ns);
    if let Some(c) = comment {
        push_option(out, OPT_COMMENT, c.as_bytes());
    }
    for (code, v) in opts {
        if let Some(v) = v {
            push_option(out, code, &v.to_le_bytes());
        }
    }
    if n != 0 || comment.is_some() {
        push_end(out);
    }
    finish(out, start);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capfile::{FileError, Format, Reader};
    use crate::record::TsSource;
    use proptest::prelude::*;

    // Little-endian SHB, version 1.0, Section Length -1, shb_userappl "tapflow".
    static SHB_BYTES: [u8; 44] = [
        0x0a, 0x0d, 0x0d, 0x0a, 0x2c, 0x00, 0x00, 0x00, //
        0x4d, 0x3c, 0x2b, 0x1a, 0x01, 0x00, 0x00, 0x00, //
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, //
        0x04, 0x00, 0x07, 0x00, b't', b'a', b'p', b'f', //
        b'l', b'o', b'w', 0x00, 0x00, 0x00, 0x00, 0x00, //
        0x2c, 0x00, 0x00, 0x00,
    ];

    // IDB: LINKTYPE_ETHERNET, SnapLen 128, if_name "eth0", if_tsresol 9, if_filter "tcp".
    static IDB_BYTES: [u8; 48] = [
        0x01, 0x00, 0x00, 0x00, 0x30, 0x00, 0x00, 0x00, //
        0x01, 0x00, 0x00, 0x00, 0x80, 0x00, 0x00, 0x00, //
        0x02, 0x00, 0x04, 0x00, b'e', b't', b'h', b'0', //
        0x09, 0x00, 0x01, 0x00, 0x09, 0x00, 0x00, 0x00, //
        0x0b, 0x00, 0x04, 0x00, 0x00, b't', b'c', b'p', //
        0x00, 0x00, 0x00, 0x00, 0x30, 0x00, 0x00, 0x00,
    ];

    // EPB: interface 1, 1700000000.123456789 s, caplen 5, len 60, 3 bytes of padding,
    // epb_flags 0x401 (inbound, checksum valid), epb_dropcount 42.
    static EPB_BYTES: [u8; 64] = [
        0x06, 0x00, 0x00, 0x00, 0x40, 0x00, 0x00, 0x00, //
        0x01, 0x00, 0x00, 0x00, 0xfe, 0x9c, 0x97, 0x17, //
        0x15, 0xcd, 0x85, 0x3d, 0x05, 0x00, 0x00, 0x00, //
        0x3c, 0x00, 0x00, 0x00, 0xde, 0xad, 0xbe, 0xef, //
        0x01, 0x00, 0x00, 0x00, 0x02, 0x00, 0x04, 0x00, //
        0x01, 0x04, 0x00, 0x00, 0x04, 0x00, 0x08, 0x00, //
        0x2a, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, //
        0x00, 0x00, 0x00, 0x00, 0x40, 0x00, 0x00, 0x00,
    ];

    // ISB: interface 0 at 1700000000.123456789 s; isb_starttime 1700000000 s, isb_endtime
    // = the block's time, ifrecv 1000, ifdrop 1, filteraccept 990, osdrop 2, usrdeliv 988.
    static ISB_BYTES: [u8; 112] = [
        0x05, 0x00, 0x00, 0x00, 0x70, 0x00, 0x00, 0x00, //
        0x00, 0x00, 0x00, 0x00, 0xfe, 0x9c, 0x97, 0x17, //
        0x15, 0xcd, 0x85, 0x3d, 0x02, 0x00, 0x08, 0x00, //
        0xfe, 0x9c, 0x97, 0x17, 0x00, 0x00, 0x2a, 0x36, //
        0x03, 0x00, 0x08, 0x00, 0xfe, 0x9c, 0x97, 0x17, //
        0x15, 0xcd, 0x85, 0x3d, 0x04, 0x00, 0x08, 0x00, //
        0xe8, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, //
        0x05, 0x00, 0x08, 0x00, 0x01, 0x00, 0x00, 0x00, //
        0x00, 0x00, 0x00, 0x00, 0x06, 0x00, 0x08, 0x00, //
        0xde, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, //
        0x07, 0x00, 0x08, 0x00, 0x02, 0x00, 0x00, 0x00, //
        0x00, 0x00, 0x00, 0x00, 0x08, 0x00, 0x08, 0x00, //
        0xdc, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, //
        0x00, 0x00, 0x00, 0x00, 0x70, 0x00, 0x00, 0x00,
    ];

    // A big-endian section: SHB without options; IDB LINKTYPE_RAW, SnapLen 0, if_tsresol 0x83
    // (1/8 s), if_tsoffset 10 s; EPB on interface 0 at 11 units (11.375 s), 3 bytes,
    // epb_flags 2 (outbound) and no opt_endofopt.
    static BE_SECTION_BYTES: [u8; 116] = [
        0x0a, 0x0d, 0x0d, 0x0a, 0x00, 0x00, 0x00, 0x1c, //
        0x1a, 0x2b, 0x3c, 0x4d, 0x00, 0x01, 0x00, 0x00, //
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, //
        0x00, 0x00, 0x00, 0x1c, //
        0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x2c, //
        0x00, 0x65, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, //
        0x00, 0x09, 0x00, 0x01, 0x83, 0x00, 0x00, 0x00, //
        0x00, 0x0e, 0x00, 0x08, 0x00, 0x00, 0x00, 0x00, //
        0x00, 0x00, 0x00, 0x0a, 0x00, 0x00, 0x00, 0x00, //
        0x00, 0x00, 0x00, 0x2c, //
        0x00, 0x00, 0x00, 0x06, 0x00, 0x00, 0x00, 0x2c, //
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, //
        0x00, 0x00, 0x00, 0x0b, 0x00, 0x00, 0x00, 0x03, //
        0x00, 0x00, 0x00, 0x03, 0x45, 0x00, 0x00, 0x00, //
        0x00, 0x02, 0x00, 0x04, 0x00, 0x00, 0x00, 0x02, //
        0x00, 0x00, 0x00, 0x2c,
    ];

    // Simple Packet Block: Original Packet Length 10, 8 bytes of room.
    static SPB_BYTES: [u8; 24] = [
        0x03, 0x00, 0x00, 0x00, 0x18, 0x00, 0x00, 0x00, //
        0x0a, 0x00, 0x00, 0x00, 0x01, 0x02, 0x03, 0x04, //
        0x05, 0x06, 0x07, 0x08, 0x18, 0x00, 0x00, 0x00,
    ];

    // Obsolete Packet Block: interface 0, Drops Count 7, ts 5, caplen 1, len 2, pack_flags 1.
    static PB_BYTES: [u8; 48] = [
        0x02, 0x00, 0x00, 0x00, 0x30, 0x00, 0x00, 0x00, //
        0x00, 0x00, 0x07, 0x00, 0x00, 0x00, 0x00, 0x00, //
        0x05, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, //
        0x02, 0x00, 0x00, 0x00, 0xaa, 0x00, 0x00, 0x00, //
        0x02, 0x00, 0x04, 0x00, 0x01, 0x00, 0x00, 0x00, //
        0x00, 0x00, 0x00, 0x00, 0x30, 0x00, 0x00, 0x00,
    ];

    // A custom block (type 0x40000bad) that readers skip.
    static CUSTOM_BYTES: [u8; 16] = [
        0xad, 0x0b, 0x00, 0x40, 0x10, 0x00, 0x00, 0x00, //
        0xde, 0xad, 0xbe, 0xef, 0x10, 0x00, 0x00, 0x00,
    ];

    const TS: u64 = 1_700_000_000_123_456_789;

    fn stats() -> InterfaceStatistics {
        InterfaceStatistics {
            starttime_ns: Some(1_700_000_000_000_000_000),
            endtime_ns: Some(TS),
            ifrecv: Some(1000),
            ifdrop: Some(1),
            filteraccept: Some(990),
            osdrop: Some(2),
            usrdeliv: Some(988),
        }
    }

    fn idb_options() -> IdbOptions<'static> {
        IdbOptions {
            linktype: LinkType::Ethernet,
            snaplen: 128,
            name: Some("eth0"),
            filter: Some("tcp"),
            hardware: None,
        }
    }

    fn block(bytes: &[u8]) -> Block<'_> {
        Block::parse(bytes, false).unwrap()
    }

    #[test]
    fn deconstruct_shb() {
        assert_eq!(section_byte_order(&SHB_BYTES), Ok(false));
        let b = block(&SHB_BYTES);
        assert_eq!((b.block_type, b.total_len()), (BLOCK_SHB, 44));
        let s = Shb::parse(&b).unwrap();
        assert_eq!((s.major, s.minor, s.section_len), (1, 0, -1));
        assert_eq!(s.user_appl, Some(&b"tapflow"[..]));
        assert_eq!((s.hardware, s.os), (None, None));
    }

    #[test]
    fn construct_shb() {
        let mut out = Vec::new();
        write_shb(&mut out, "tapflow");
        assert_eq!(out, SHB_BYTES);
        out.clear();
        write_shb(&mut out, "");
        assert_eq!(out.len(), 28, "no options, no opt_endofopt");
    }

    #[test]
    fn deconstruct_idb() {
        let i = Idb::parse(&block(&IDB_BYTES)).unwrap();
        assert_eq!(i.linktype, LinkType::Ethernet);
        assert_eq!((i.snaplen, i.tsresol, i.tsoffset), (128, 9, 0));
        assert_eq!(i.name, Some(&b"eth0"[..]));
        assert_eq!(i.filter, Some(&b"tcp"[..]));
        assert_eq!((i.hardware, i.fcslen), (None, None));
    }

    #[test]
    fn construct_idb() {
        let mut out = Vec::new();
        write_idb(&mut out, &idb_options());
        assert_eq!(out, IDB_BYTES);
    }

    #[test]
    fn idb_hardware_round_trips_and_default_resolution_is_micros() {
        let mut out = Vec::new();
        let o = IdbOptions {
            hardware: Some("Intel X710"),
            name: None,
            ..idb_options()
        };
        write_idb(&mut out, &o);
        assert_eq!(out.len() % 4, 0);
        let i = Idb::parse(&block(&out)).unwrap();
        assert_eq!(i.hardware, Some(&b"Intel X710"[..]));
        assert_eq!(i.name, None);
        // An IDB without options: if_tsresol defaults to 6.
        let bare = [1, 0, 0, 0, 20, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 20, 0, 0, 0];
        assert_eq!(Idb::parse(&block(&bare)).unwrap().tsresol, 6);
    }

    #[test]
    fn deconstruct_epb() {
        let p = Packet::parse_epb(&block(&EPB_BYTES)).unwrap();
        assert_eq!(
            p,
            Packet {
                interface_id: 1,
                ts: TS,
                orig_len: 60,
                data: &[0xde, 0xad, 0xbe, 0xef, 0x01],
                flags: Some(0x401),
                dropcount: Some(42),
            }
        );
    }

    #[test]
    fn construct_epb() {
        let mut out = Vec::new();
        write_epb(
            &mut out,
            1,
            TS,
            &[0xde, 0xad, 0xbe, 0xef, 0x01],
            60,
            Some(0x401),
            Some(42),
        );
        assert_eq!(out, EPB_BYTES);
        out.clear();
        write_epb(&mut out, 0, 0, &[1, 2, 3, 4], 4, None, None);
        assert_eq!(out.len(), 36, "no options, no opt_endofopt");
    }

    #[test]
    fn deconstruct_isb() {
        let i = Isb::parse(&block(&ISB_BYTES)).unwrap();
        assert_eq!(
            i,
            Isb {
                interface_id: 0,
                ts: TS,
                stats: stats()
            }
        );
    }

    #[test]
    fn construct_isb() {
        let mut out = Vec::new();
        write_isb(&mut out, 0, TS, &stats());
        assert_eq!(out, ISB_BYTES);
        out.clear();
        let only_drop = InterfaceStatistics {
            ifdrop: Some(5),
            ..Default::default()
        };
        write_isb(&mut out, 3, 9, &only_drop);
        let i = Isb::parse(&block(&out)).unwrap();
        assert_eq!(
            i,
            Isb {
                interface_id: 3,
                ts: 9,
                stats: only_drop
            }
        );
    }

    /// The `opt_comment` values of a block whose options start `at` bytes into its body.
    fn comments(b: &Block<'_>, at: usize) -> Vec<String> {
        b.options(at)
            .map(Result::unwrap)
            .filter(|(code, _)| *code == OPT_COMMENT)
            .map(|(_, v)| String::from_utf8(v.to_vec()).unwrap())
            .collect()
    }

    #[test]
    fn a_comment_rides_on_an_isb_and_an_epb_beside_their_other_options() {
        let mut out = Vec::new();
        write_isb_with_comment(&mut out, 0, TS, &stats(), "link down on eth0");
        let b = block(&out);
        assert_eq!(comments(&b, 12), ["link down on eth0"]);
        let i = Isb::parse(&b).unwrap();
        assert_eq!((i.ts, i.stats), (TS, stats()));
        out.clear();
        write_isb_with_comment(&mut out, 2, 9, &InterfaceStatistics::default(), "odd");
        assert_eq!(comments(&block(&out), 12), ["odd"]);
        assert_eq!(Isb::parse(&block(&out)).unwrap().interface_id, 2);

        // Without a comment, the same bytes as write_epb, whatever the other options.
        for (flags, dropcount) in [
            (None, None),
            (Some(1), None),
            (None, Some(3)),
            (Some(2), Some(4)),
        ] {
            let (mut a, mut b) = (Vec::new(), Vec::new());
            write_epb(&mut a, 1, TS, &[1, 2, 3, 4, 5], 9, flags, dropcount);
            let o = EpbOptions {
                comment: None,
                flags,
                dropcount,
            };
            write_epb_with(&mut b, 1, TS, &[1, 2, 3, 4, 5], 9, &o);
            assert_eq!(a, b, "{flags:?} {dropcount:?}");
        }
        let o = EpbOptions {
            comment: Some("after a gap of 2.000 s"),
            flags: Some(1),
            dropcount: Some(7),
        };
        out.clear();
        write_epb_with(&mut out, 1, TS, &[1, 2, 3, 4, 5], 9, &o);
        let b = block(&out);
        let p = Packet::parse_epb(&b).unwrap();
        assert_eq!(
            (
                p.interface_id,
                p.ts,
                p.orig_len,
                p.data,
                p.flags,
                p.dropcount
            ),
            (1, TS, 9, &[1, 2, 3, 4, 5][..], Some(1), Some(7))
        );
        assert_eq!(comments(&b, 20 + 8), ["after a gap of 2.000 s"]);
        let (fast, len) = Packet::parse_intact_epb::<false>(&out).unwrap();
        assert_eq!((fast, len), (p, out.len()));
    }

    #[test]
    fn construct_spb() {
        let mut out = Vec::new();
        write_spb(&mut out, &[1, 2, 3, 4, 5, 6, 7, 8], 10);
        assert_eq!(out, SPB_BYTES);
        out.clear();
        write_spb(&mut out, &[9], 0);
        let spb = Packet::parse_spb(&block(&out), 0).unwrap();
        assert_eq!((out.len(), spb.orig_len, spb.data), (20, 1, &[9][..]));
    }

    #[test]
    fn deconstruct_spb_and_obsolete_pb() {
        let spb = Packet::parse_spb(&block(&SPB_BYTES), 4).unwrap();
        assert_eq!((spb.orig_len, spb.data), (10, &[1, 2, 3, 4][..]));
        let spb = Packet::parse_spb(&block(&SPB_BYTES), 0).unwrap();
        assert_eq!(
            spb.data,
            &[1, 2, 3, 4, 5, 6, 7, 8],
            "no snaplen: the block's room"
        );
        let pb = Packet::parse_pb(&block(&PB_BYTES)).unwrap();
        assert_eq!(
            (pb.interface_id, pb.ts, pb.orig_len, pb.data),
            (0, 5, 2, &[0xaa][..])
        );
        assert_eq!((pb.flags, pb.dropcount), (Some(1), Some(7)));
    }

    /// The big-endian section, a little-endian one with SPB, PB, ISB and a custom block.
    fn two_sections() -> Vec<u8> {
        let mut f = BE_SECTION_BYTES.to_vec();
        write_shb(&mut f, "");
        f.extend_from_slice(&CUSTOM_BYTES);
        write_idb(
            &mut f,
            &IdbOptions {
                snaplen: 4,
                name: None,
                filter: None,
                ..idb_options()
            },
        );
        f.extend_from_slice(&SPB_BYTES);
        write_isb(&mut f, 0, TS, &stats());
        f.extend_from_slice(&PB_BYTES);
        f.extend_from_slice(&CUSTOM_BYTES);
        f
    }

    #[test]
    fn reads_sections_of_both_byte_orders() {
        let f = two_sections();
        let mut r = Reader::new(&f).unwrap();
        assert_eq!(r.format(), Format::Pcapng);
        assert_eq!(r.interfaces().len(), 1);
        let i = &r.interfaces()[0];
        assert_eq!(
            (i.linktype, i.snaplen, i.if_tsresol(), i.if_tsoffset()),
            (LinkType::Raw, 0, 0x83, 10)
        );
        let p = r.next_packet().unwrap().unwrap();
        assert_eq!(
            (p.interface, p.ts_ns, p.len, p.data),
            (0, 11_375_000_000, 3, &[0x45, 0, 0][..])
        );
        assert_eq!((p.epb_flags, p.dropcount), (Some(2), None));

        // New section: its interface 0 is global interface 1; SPB has no timestamp, so it
        // takes the previous packet's.
        let p = r.next_packet().unwrap().unwrap();
        assert_eq!(r.interfaces().len(), 2);
        assert_eq!(
            (p.interface, p.ts_ns, p.ts_source, p.len, p.data),
            (1, 11_375_000_000, TsSource::Copied, 10, &[1, 2, 3, 4][..])
        );
        let p = r.next_packet().unwrap().unwrap();
        assert_eq!(
            (p.interface, p.ts_ns, p.ts_source, p.len, p.data),
            (1, 5, TsSource::File, 2, &[0xaa][..])
        );
        assert_eq!((p.epb_flags, p.dropcount), (Some(1), Some(7)));
        assert!(r.next_packet().is_none());
        assert_eq!(r.offset(), f.len() as u64);
    }

    #[test]
    fn rejects_damaged_blocks() {
        let first_err = |bytes: &[u8]| {
            let mut r = Reader::new(bytes).unwrap();
            let e = loop {
                match r.next_packet() {
                    Some(Ok(_)) => {}
                    Some(Err(e)) => break e,
                    None => panic!("no error"),
                }
            };
            assert!(r.next_packet().is_none(), "None forever after an error");
            assert_eq!(r.offset(), e.offset);
            e
        };
        let file = |blocks: &[&[u8]]| {
            let mut f = SHB_BYTES.to_vec();
            f.extend_from_slice(&IDB_BYTES);
            f.extend_from_slice(&IDB_BYTES);
            blocks.iter().for_each(|b| f.extend_from_slice(b));
            f
        };
        let epb0 = {
            let mut v = Vec::new();
            write_epb(&mut v, 0, 1, &[9; 7], 7, None, None);
            v
        };
        let at = (SHB_BYTES.len() + 2 * IDB_BYTES.len() + epb0.len()) as u64;

        let mut b = EPB_BYTES;
        b[4] = 0x3e;
        let e = first_err(&file(&[&epb0, &b]));
        assert_eq!(
            e,
            FileError {
                offset: at,
                kind: FileErrorKind::BlockLengthUnaligned { len: 0x3e }
            }
        );
        b[4] = 8;
        assert_eq!(
            first_err(&file(&[&epb0, &b])).kind,
            FileErrorKind::BlockTooShort {
                block_type: 6,
                len: 8,
                min: 12
            }
        );
        b[4] = 16;
        assert_eq!(
            first_err(&file(&[&epb0, &b])).kind,
            FileErrorKind::BlockLengthMismatch {
                leading: 16,
                trailing: 0x1797_9cfe
            }
        );
        let mut b = EPB_BYTES;
        b[20] = 41;
        assert_eq!(
            first_err(&file(&[&epb0, &b])).kind,
            FileErrorKind::CaplenExceedsBlock {
                block_type: 6,
                caplen: 41,
                room: 32
            }
        );
        let mut b = EPB_BYTES;
        b[46] = 13; // epb_dropcount claims 13 bytes: 8 + endofopt remain
        assert_eq!(
            first_err(&file(&[&epb0, &b])).kind,
            FileErrorKind::BadOption {
                block_type: 6,
                code: 4,
                len: 13,
                remain: 12
            }
        );
        let mut b = EPB_BYTES;
        b[8] = 2;
        assert_eq!(
            first_err(&file(&[&epb0, &b])).kind,
            FileErrorKind::NoInterface {
                interface: 2,
                count: 2
            }
        );
        let mut b = EPB_BYTES;
        b[22] = 0x10; // caplen 0x100005
        assert_eq!(
            first_err(&file(&[&epb0, &b])).kind,
            FileErrorKind::CaplenTooLarge { caplen: 0x10_0005 }
        );
        let mut shb2 = SHB_BYTES;
        shb2[12] = 2;
        assert_eq!(
            first_err(&file(&[&epb0, &shb2])).kind,
            FileErrorKind::UnsupportedVersion {
                format: "pcapng",
                major: 2,
                minor: 0
            }
        );
        shb2[8] = 0;
        assert_eq!(
            first_err(&file(&[&epb0, &shb2])).kind,
            FileErrorKind::BadByteOrderMagic { magic: 0x003c_2b1a }
        );
        let f = file(&[&epb0, &EPB_BYTES]);
        let mut r = Reader::new(&f).unwrap();
        assert_eq!(r.interfaces().len(), 2);
        assert_eq!(r.next_packet().unwrap().unwrap().data, &[9; 7]);
        assert_eq!(r.next_packet().unwrap().unwrap().ts_ns, TS);
        assert!(r.next_packet().is_none());
        assert_eq!(
            first_err(&f[..f.len() - 1]),
            FileError {
                offset: at,
                kind: FileErrorKind::Truncated {
                    claimed: 64,
                    remain: 63
                }
            }
        );
        assert_eq!(
            first_err(&f[..at as usize + 5]).kind,
            FileErrorKind::ShortRecordHeader { need: 8, remain: 5 }
        );
    }

    proptest! {
        #[test]
        fn round_trip(
            names in (proptest::option::of("[a-z0-9]{0,20}"), proptest::option::of("[ -~]{0,40}")),
            pkts in proptest::collection::vec(
                (0u32..2, any::<u64>(), proptest::collection::vec(any::<u8>(), 0..200), 0u32..3000,
                 proptest::option::of(any::<u32>()), proptest::option::of(any::<u64>()), any::<bool>()),
                0..30),
        ) {
            let mut f = Vec::new();
            write_shb(&mut f, "proptest");
            let o0 = IdbOptions { linktype: LinkType::Ethernet, snaplen: 65535, name: names.0.as_deref(), filter: names.1.as_deref(), hardware: None };
            let o1 = IdbOptions { linktype: LinkType::LinuxSll2, snaplen: 0, name: None, filter: None, hardware: names.0.as_deref() };
            write_idb(&mut f, &o0);
            write_idb(&mut f, &o1);
            for (i, ts, data, extra, flags, drops, isb) in &pkts {
                if *isb {
                    write_isb(&mut f, *i, *ts, &InterfaceStatistics { ifrecv: Some(*ts), ..Default::default() });
                }
                write_epb(&mut f, *i, *ts, data, data.len() as u32 + extra, *flags, *drops);
                prop_assert_eq!(f.len() % 4, 0);
            }
            let mut r = Reader::new(&f).unwrap();
            prop_assert_eq!(r.interfaces().len(), 2);
            prop_assert_eq!(&r.interfaces()[0].name, &names.0);
            prop_assert_eq!(r.interfaces()[1].linktype, LinkType::LinuxSll2);
            prop_assert_eq!(r.interfaces()[1].if_tsresol(), 9);
            for (i, ts, data, extra, flags, drops, _) in &pkts {
                let p = r.next_packet().unwrap().unwrap();
                prop_assert_eq!(p.interface, *i);
                prop_assert_eq!(p.ts_ns, *ts);
                prop_assert_eq!(p.data, data.as_slice());
                prop_assert_eq!(p.len, data.len() as u32 + extra);
                prop_assert_eq!((p.epb_flags, p.dropcount), (*flags, *drops));
            }
            prop_assert!(r.next_packet().is_none());
        }

        #[test]
        fn isb_round_trip(
            id in any::<u32>(), ts in any::<u64>(),
            v in proptest::collection::vec(proptest::option::of(any::<u64>()), 7),
        ) {
            let s = InterfaceStatistics {
                starttime_ns: v[0], endtime_ns: v[1], ifrecv: v[2], ifdrop: v[3],
                filteraccept: v[4], osdrop: v[5], usrdeliv: v[6],
            };
            let mut out = Vec::new();
            write_isb(&mut out, id, ts, &s);
            prop_assert_eq!(Isb::parse(&block(&out)), Ok(Isb { interface_id: id, ts, stats: s }));
        }
    }
}
