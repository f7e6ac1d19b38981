//! The TPACKET_V3 block layout, read from plain bytes (no unsafe, no I/O).
//!
//! A block starts with `struct tpacket_block_desc`; its packets follow from
//! `offset_to_first_pkt`, each a `struct tpacket3_hdr` + `struct sockaddr_ll` + the frame at
//! `tp_mac`, chained by `tp_next_offset`. Nothing here trusts those numbers: every field read and
//! every slice is bounds-checked against the block, and a walk stops at the first value that
//! points outside it.

use std::iter::FusedIterator;
use std::mem::{offset_of, size_of};

use libc::{sockaddr_ll, tpacket_block_desc, tpacket_hdr_v1, tpacket_hdr_variant1, tpacket3_hdr};

use crate::mmap::ReadAhead;

// struct tpacket_block_desc { version, offset_to_priv, hdr: union { struct tpacket_hdr_v1 bh1 } }
const BD_HDR: usize = offset_of!(tpacket_block_desc, hdr);
pub(crate) const BD_STATUS: usize = BD_HDR + offset_of!(tpacket_hdr_v1, block_status);
const BD_NUM_PKTS: usize = BD_HDR + offset_of!(tpacket_hdr_v1, num_pkts);
const BD_FIRST: usize = BD_HDR + offset_of!(tpacket_hdr_v1, offset_to_first_pkt);
const BD_BLK_LEN: usize = BD_HDR + offset_of!(tpacket_hdr_v1, blk_len);
const BD_SEQ: usize = BD_HDR + offset_of!(tpacket_hdr_v1, seq_num);
const BD_SIZE: usize = size_of::<tpacket_block_desc>();

// struct tpacket3_hdr
const PH_NEXT: usize = offset_of!(tpacket3_hdr, tp_next_offset);
const PH_SEC: usize = offset_of!(tpacket3_hdr, tp_sec);
const PH_NSEC: usize = offset_of!(tpacket3_hdr, tp_nsec);
const PH_SNAPLEN: usize = offset_of!(tpacket3_hdr, tp_snaplen);
const PH_LEN: usize = offset_of!(tpacket3_hdr, tp_len);
const PH_STATUS: usize = offset_of!(tpacket3_hdr, tp_status);
const PH_MAC: usize = offset_of!(tpacket3_hdr, tp_mac);
const PH_HV1: usize = offset_of!(tpacket3_hdr, hv1);
const PH_RXHASH: usize = PH_HV1 + offset_of!(tpacket_hdr_variant1, tp_rxhash);
const PH_VLAN_TCI: usize = PH_HV1 + offset_of!(tpacket_hdr_variant1, tp_vlan_tci);
const PH_VLAN_TPID: usize = PH_HV1 + offset_of!(tpacket_hdr_variant1, tp_vlan_tpid);
const PH_SIZE: usize = size_of::<tpacket3_hdr>();
/// `TPACKET_ALIGN(sizeof(struct tpacket3_hdr))`: where the `sockaddr_ll` starts.
const PH_SLL: usize = (PH_SIZE + libc::TPACKET_ALIGNMENT - 1) & !(libc::TPACKET_ALIGNMENT - 1);
const PH_PKTTYPE: usize = PH_SLL + offset_of!(sockaddr_ll, sll_pkttype);
const PH_SLL_END: usize = PH_SLL + size_of::<sockaddr_ll>();
const SLL_PROTOCOL: usize = PH_SLL + offset_of!(sockaddr_ll, sll_protocol);
const SLL_IFINDEX: usize = PH_SLL + offset_of!(sockaddr_ll, sll_ifindex);
const SLL_HATYPE: usize = PH_SLL + offset_of!(sockaddr_ll, sll_hatype);
const SLL_HALEN: usize = PH_SLL + offset_of!(sockaddr_ll, sll_halen);
const SLL_ADDR: usize = PH_SLL + offset_of!(sockaddr_ll, sll_addr);

/// Bytes of `tpacket_block_desc` at the start of every block (`BLK_PLUS_PRIV(0)`): where the
/// first slot may start.
pub const BLOCK_DESC_LEN: u32 = BD_SIZE as u32;

/// Offset of an Ethernet frame in its slot: the kernel puts the network header at
/// `TPACKET_ALIGN(TPACKET3_HDRLEN + 16)` (`TPACKET3_HDRLEN`: the aligned `tpacket3_hdr` and a
/// `sockaddr_ll`) and the 14-byte MAC header just before it.
pub const ETHERNET_MAC_OFFSET: u32 =
    ((PH_SLL + size_of::<sockaddr_ll>() + 16 + libc::TPACKET_ALIGNMENT - 1)
        & !(libc::TPACKET_ALIGNMENT - 1)) as u32
        - 14;

const _: () = assert!(BD_SIZE == 48 && BD_STATUS == 8 && BD_SEQ == 24);
const _: () = assert!(ETHERNET_MAC_OFFSET == 82);
const _: () = assert!(PH_SIZE == 48 && PH_RXHASH == 28 && PH_SLL == 48 && PH_PKTTYPE == 58);
/// Bytes of a packet's header read at once: the fields, the sockaddr_ll up to its pkttype.
const HEAD_LEN: usize = PH_PKTTYPE + 1;

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(
        b.get(at..at.checked_add(4)?)?.try_into().ok()?,
    ))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(
        b.get(at..at.checked_add(8)?)?.try_into().ok()?,
    ))
}

/// `block_status` of a block's header (0 if the bytes are too short).
#[cfg(test)]
pub(crate) fn block_status(block: &[u8]) -> u32 {
    u32_at(block, BD_STATUS).unwrap_or(0)
}

/// `num_pkts` of a block's header.
pub(crate) fn block_num_pkts(block: &[u8]) -> u32 {
    u32_at(block, BD_NUM_PKTS).unwrap_or(0)
}

/// `seq_num` of a block's header.
pub(crate) fn block_seq_num(block: &[u8]) -> u64 {
    u64_at(block, BD_SEQ).unwrap_or(0)
}

/// Gives every packet of a block of a `SOCK_DGRAM` ring (whose packets start at the network
/// header) a Linux cooked v2 header, built from the `sockaddr_ll` the kernel put before it, as
/// libpcap does for `-i any`: the header goes into the gap the kernel leaves before the
/// network header (`TPACKET_ALIGN(tp_hdrlen) + 16` bytes from the slot, past the
/// `sockaddr_ll`), and the packet's `tp_mac`, `tp_snaplen` and `tp_len` are moved to take it
/// in. A block read afterwards holds `LINKTYPE_LINUX_SLL2` frames.
///
/// A packet whose header or gap does not check out ends the block there (`num_pkts` is cut),
/// so no packet is ever read uncooked. No allocation, no system call.
pub fn cook_block(block: &mut [u8]) {
    const HDR: usize = tapflow_wire::sll::HEADER_LEN;
    let (Some(num), Some(first), Some(blk_len)) = (
        u32_at(block, BD_NUM_PKTS),
        u32_at(block, BD_FIRST),
        u32_at(block, BD_BLK_LEN),
    ) else {
        return;
    };
    let used = match usize::try_from(blk_len) {
        Ok(n) if (BD_SIZE..=block.len()).contains(&n) => n,
        _ => block.len(),
    };
    let mut at = match usize::try_from(first) {
        Ok(f) if f >= BD_SIZE && f < used => f,
        _ => return,
    };
    for i in 0..num {
        if !cook_packet(&mut block[..used], at) {
            block[BD_NUM_PKTS..BD_NUM_PKTS + 4].copy_from_slice(&i.to_ne_bytes());
            return;
        }
        let next = u32_at(block, at + PH_NEXT).unwrap_or(0);
        match usize::try_from(next)
            .ok()
            .filter(|&n| n >= PH_SIZE)
            .and_then(|n| at.checked_add(n))
        {
            Some(n) if n < used => at = n,
            _ => return,
        }
    }

    /// Cooks the packet whose header is at `h`; false if it does not check out.
    fn cook_packet(b: &mut [u8], h: usize) -> bool {
        let Some(head) = b.get(h..).and_then(<[u8]>::first_chunk::<PH_SLL_END>) else {
            return false;
        };
        let u16_of = |at: usize| u16::from_ne_bytes([head[at], head[at + 1]]);
        let u32_of =
            |at: usize| u32::from_ne_bytes([head[at], head[at + 1], head[at + 2], head[at + 3]]);
        let mac = usize::from(u16_of(PH_MAC));
        let snaplen = u32_of(PH_SNAPLEN);
        let fits = mac >= PH_SLL_END + HDR
            && (h + mac)
                .checked_add(snaplen as usize)
                .is_some_and(|end| end <= b.len());
        if !fits {
            return false;
        }
        let mut addr = [0u8; 8];
        addr.copy_from_slice(&head[SLL_ADDR..SLL_ADDR + 8]);
        let cooked = tapflow_wire::sll::Repr {
            // sll_protocol is in network order already.
            protocol: u16::from_be_bytes([head[SLL_PROTOCOL], head[SLL_PROTOCOL + 1]]),
            ifindex: u32_of(SLL_IFINDEX),
            hatype: u16_of(SLL_HATYPE),
            pkttype: head[PH_PKTTYPE],
            halen: head[SLL_HALEN],
            addr,
        };
        let len = u32_of(PH_LEN);
        let start = h + mac - HDR;
        let Some(out) = b[start..].first_chunk_mut::<HDR>() else {
            return false;
        };
        cooked.emit(out);
        let put =
            |b: &mut [u8], at: usize, v: &[u8]| b[h + at..h + at + v.len()].copy_from_slice(v);
        put(b, PH_MAC, &((mac - HDR) as u16).to_ne_bytes());
        put(b, PH_SNAPLEN, &(snaplen + HDR as u32).to_ne_bytes());
        put(b, PH_LEN, &len.saturating_add(HDR as u32).to_ne_bytes());
        true
    }
}

/// One packet in a ring block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingPacket<'a> {
    /// The captured bytes: `tp_snaplen` bytes from `tp_mac`, starting at the link header.
    #[doc(alias = "tp_snaplen")]
    pub data: &'a [u8],
    /// Arrival time in ns since the Unix epoch: `tp_sec * 1e9 + tp_nsec`.
    #[doc(alias("tp_sec", "tp_nsec"))]
    pub ts_ns: u64,
    /// The packet's length on the wire (or after GRO), before the snaplen cut.
    #[doc(alias = "tp_len")]
    pub len: u32,
    /// `TP_STATUS_*` bits: checksum state, VLAN validity, timestamp source.
    #[doc(alias = "tp_status")]
    pub status: u32,
    /// The VLAN tag the NIC stripped, valid if `status & TP_STATUS_VLAN_VALID`.
    #[doc(alias = "tp_vlan_tci")]
    pub vlan_tci: u16,
    /// Its TPID, valid if `status & TP_STATUS_VLAN_TPID_VALID`.
    #[doc(alias = "tp_vlan_tpid")]
    pub vlan_tpid: u16,
    /// The kernel's flow hash (filled with `fill_rxhash`).
    #[doc(alias = "tp_rxhash")]
    pub rxhash: u32,
    /// `PACKET_HOST`, `PACKET_BROADCAST`, ..., `PACKET_OUTGOING`.
    #[doc(alias = "sll_pkttype")]
    pub pkttype: u8,
}

/// The packets of one block, in order; stops early, without panicking, at a corrupt header.
#[derive(Debug, Clone)]
pub struct Packets<'a> {
    block: &'a [u8],
    offset: usize,
    remaining: u32,
    /// The kernel wrote the block on another CPU (for veth, the sender's): its lines are
    /// fetched ahead of the walk.
    ahead: ReadAhead,
}

impl<'a> Packets<'a> {
    /// Walks a whole TPACKET_V3 block given as bytes (from the ring, or a saved block).
    pub fn from_block_bytes(block: &'a [u8]) -> Packets<'a> {
        let empty = Packets {
            block,
            offset: 0,
            remaining: 0,
            ahead: ReadAhead::from(0),
        };
        let (Some(num), Some(first), Some(blk_len)) = (
            u32_at(block, BD_NUM_PKTS),
            u32_at(block, BD_FIRST),
            u32_at(block, BD_BLK_LEN),
        ) else {
            return empty;
        };
        // blk_len is the bytes used, header included; a wild value falls back to the whole block.
        let used = match usize::try_from(blk_len) {
            Ok(n) if (BD_SIZE..=block.len()).contains(&n) => n,
            _ => block.len(),
        };
        match usize::try_from(first) {
            Ok(first) if first >= BD_SIZE && first < used => Packets {
                block: &block[..used],
                offset: first,
                remaining: num,
                ahead: ReadAhead::from(first),
            },
            _ => empty,
        }
    }

    fn parse(&self) -> Option<(RingPacket<'a>, u32)> {
        let b = self.block;
        let h = self.offset;
        // The header and the sockaddr_ll up to its pkttype as one array: one bounds check, then
        // loads at fixed offsets.
        let head: &[u8; HEAD_LEN] = b.get(h..)?.first_chunk()?;
        let u32_of =
            |at: usize| u32::from_ne_bytes([head[at], head[at + 1], head[at + 2], head[at + 3]]);
        let u16_of = |at: usize| u16::from_ne_bytes([head[at], head[at + 1]]);
        let start = h + usize::from(u16_of(PH_MAC));
        let data = b.get(start..start.checked_add(u32_of(PH_SNAPLEN) as usize)?)?;
        let packet = RingPacket {
            data,
            ts_ns: u64::from(u32_of(PH_SEC)) * 1_000_000_000 + u64::from(u32_of(PH_NSEC)),
            len: u32_of(PH_LEN),
            status: u32_of(PH_STATUS),
            // The kernel's field is 32 bits wide; a TCI is 16.
            vlan_tci: u32_of(PH_VLAN_TCI) as u16,
            vlan_tpid: u16_of(PH_VLAN_TPID),
            rxhash: u32_of(PH_RXHASH),
            pkttype: head[PH_PKTTYPE],
        };
        Some((packet, u32_of(PH_NEXT)))
    }
}

impl<'a> Iterator for Packets<'a> {
    type Item = RingPacket<'a>;

    #[inline]
    fn next(&mut self) -> Option<RingPacket<'a>> {
        if self.remaining == 0 {
            return None;
        }
        self.ahead.advance(self.block, self.offset);
        let Some((packet, next)) = self.parse() else {
            self.remaining = 0;
            return None;
        };
        self.remaining -= 1;
        if self.remaining > 0 {
            // Each header is at least PH_SIZE bytes: a shorter step is corrupt and could loop.
            match usize::try_from(next)
                .ok()
                .filter(|&n| n >= PH_SIZE)
                .and_then(|n| self.offset.checked_add(n))
            {
                Some(at) if at < self.block.len() => self.offset = at,
                _ => self.remaining = 0,
            }
        }
        Some(packet)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, Some(self.remaining as usize))
    }
}

impl FusedIterator for Packets<'_> {}

/// Builds TPACKET_V3 blocks in memory the way the kernel lays them out (for tests).
#[cfg(test)]
pub(crate) mod build {
    use super::*;

    /// `macoff` for Ethernet on a SOCK_RAW socket with no reserve: `ALIGN16(68 + 16) - 14`.
    pub(crate) const MACOFF: usize = 82;

    fn put(b: &mut [u8], at: usize, v: &[u8]) {
        b[at..at + v.len()].copy_from_slice(v);
    }

    /// A block of `size` bytes holding `frames` (data, tp_len, ts_ns), status `status`.
    pub(crate) fn block(
        size: usize,
        status: u32,
        seq: u64,
        frames: &[(&[u8], u32, u64)],
    ) -> Vec<u8> {
        block_at(size, status, seq, frames, MACOFF)
    }

    /// `macoff` on a SOCK_DGRAM socket with no reserve: `ALIGN16(68) + 16`.
    pub(crate) const DGRAM_MACOFF: usize = 96;

    /// [`block`] with the packets at `macoff` in their slots.
    pub(crate) fn block_at(
        size: usize,
        status: u32,
        seq: u64,
        frames: &[(&[u8], u32, u64)],
        macoff: usize,
    ) -> Vec<u8> {
        let mut b = vec![0u8; size];
        let mut at = BD_SIZE.next_multiple_of(8);
        put(&mut b, 0, &3u32.to_ne_bytes());
        put(&mut b, BD_STATUS, &status.to_ne_bytes());
        put(&mut b, BD_NUM_PKTS, &(frames.len() as u32).to_ne_bytes());
        put(&mut b, BD_FIRST, &(at as u32).to_ne_bytes());
        put(&mut b, BD_SEQ, &seq.to_ne_bytes());
        for (i, (data, len, ts)) in frames.iter().enumerate() {
            let step = (macoff + data.len()).next_multiple_of(8);
            let next = if i + 1 == frames.len() {
                0
            } else {
                step as u32
            };
            put(&mut b, at + PH_NEXT, &next.to_ne_bytes());
            put(
                &mut b,
                at + PH_SEC,
                &((ts / 1_000_000_000) as u32).to_ne_bytes(),
            );
            put(
                &mut b,
                at + PH_NSEC,
                &((ts % 1_000_000_000) as u32).to_ne_bytes(),
            );
            put(&mut b, at + PH_SNAPLEN, &(data.len() as u32).to_ne_bytes());
            put(&mut b, at + PH_LEN, &len.to_ne_bytes());
            put(&mut b, at + PH_STATUS, &libc::TP_STATUS_USER.to_ne_bytes());
            put(&mut b, at + PH_MAC, &(macoff as u16).to_ne_bytes());
            put(&mut b, at + PH_RXHASH, &(0xabc0 + i as u32).to_ne_bytes());
            put(&mut b, at + PH_VLAN_TCI, &(100 + i as u32).to_ne_bytes());
            put(&mut b, at + PH_VLAN_TPID, &0x8100u16.to_ne_bytes());
            b[at + PH_PKTTYPE] = libc::PACKET_BROADCAST;
            put(&mut b, at + macoff, data);
            at += step;
        }
        put(&mut b, BD_BLK_LEN, &(at as u32).to_ne_bytes());
        b
    }

    /// The offset of packet `i`'s header in a block made by [`block`].
    pub(crate) fn header_offset(frames: &[usize], i: usize) -> usize {
        BD_SIZE.next_multiple_of(8)
            + frames[..i]
                .iter()
                .map(|n| (MACOFF + n).next_multiple_of(8))
                .sum::<usize>()
    }

    pub(crate) fn set_next(b: &mut [u8], header: usize, next: u32) {
        put(b, header + PH_NEXT, &next.to_ne_bytes());
    }

    pub(crate) fn set_snaplen(b: &mut [u8], header: usize, snaplen: u32) {
        put(b, header + PH_SNAPLEN, &snaplen.to_ne_bytes());
    }

    pub(crate) fn set_num_pkts(b: &mut [u8], n: u32) {
        put(b, BD_NUM_PKTS, &n.to_ne_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::build::*;
    use super::*;

    fn frames() -> Vec<Vec<u8>> {
        (0..5u8).map(|i| vec![i; 60 + usize::from(i) * 7]).collect()
    }

    fn sample() -> (Vec<u8>, Vec<usize>) {
        let f = frames();
        let spec: Vec<(&[u8], u32, u64)> = f
            .iter()
            .enumerate()
            .map(|(i, d)| (d.as_slice(), 1000 + i as u32, 5_000_000_007 + i as u64))
            .collect();
        (
            block(4096, libc::TP_STATUS_USER, 42, &spec),
            f.iter().map(Vec::len).collect(),
        )
    }

    #[test]
    fn walks_every_packet_with_its_fields() {
        let (b, _) = sample();
        assert_eq!(block_num_pkts(&b), 5);
        assert_eq!(block_seq_num(&b), 42);
        assert_eq!(block_status(&b), libc::TP_STATUS_USER);
        let got: Vec<RingPacket<'_>> = Packets::from_block_bytes(&b).collect();
        assert_eq!(got.len(), 5);
        for (i, p) in got.iter().enumerate() {
            assert_eq!(p.data, frames()[i].as_slice());
            assert_eq!(p.len, 1000 + i as u32);
            assert_eq!(p.ts_ns, 5_000_000_007 + i as u64);
            assert_eq!(p.rxhash, 0xabc0 + i as u32);
            assert_eq!((p.vlan_tci, p.vlan_tpid), (100 + i as u16, 0x8100));
            assert_eq!(p.pkttype, libc::PACKET_BROADCAST);
        }
    }

    #[test]
    fn cooking_gives_every_packet_an_sll2_header() {
        let ip = [[0x45u8; 40], [0x46; 40]];
        let spec: Vec<(&[u8], u32, u64)> = ip.iter().map(|d| (d.as_slice(), 1500, 7)).collect();
        let mut b = block_at(4096, libc::TP_STATUS_USER, 1, &spec, DGRAM_MACOFF);
        // The sockaddr_ll of each: IPv4 from interface 5 (Ethernet), and the second going out.
        for (i, pkttype) in [(0, libc::PACKET_HOST), (1, libc::PACKET_OUTGOING)] {
            let h = BD_SIZE.next_multiple_of(8) + i * (DGRAM_MACOFF + 40).next_multiple_of(8);
            b[SLL_PROTOCOL + h..SLL_PROTOCOL + h + 2].copy_from_slice(&[0x08, 0x00]);
            b[SLL_IFINDEX + h..SLL_IFINDEX + h + 4].copy_from_slice(&5i32.to_ne_bytes());
            b[SLL_HATYPE + h..SLL_HATYPE + h + 2].copy_from_slice(&1u16.to_ne_bytes());
            b[PH_PKTTYPE + h] = pkttype;
            b[SLL_HALEN + h] = 6;
            b[SLL_ADDR + h..SLL_ADDR + h + 8].copy_from_slice(&[2, 0, 0, 0, 0, 9, 0xee, 0xee]);
        }
        cook_block(&mut b);
        let got: Vec<RingPacket<'_>> = Packets::from_block_bytes(&b).collect();
        assert_eq!(got.len(), 2);
        for (p, (out, first)) in got.iter().zip([(0u8, 0x45u8), (4, 0x46)]) {
            assert_eq!((p.len, p.data.len(), p.pkttype), (1520, 60, out));
            let mut want = vec![0x08, 0x00, 0, 0, 0, 0, 0, 5, 0, 1, out, 6];
            want.extend_from_slice(&[2, 0, 0, 0, 0, 9, 0xee, 0xee]);
            assert_eq!(p.data[..20], want[..]);
            assert_eq!(p.data[20..], [first; 40]);
        }
        // A slot with no room for the header (a raw socket's) ends the block before it.
        let mut raw = block(4096, libc::TP_STATUS_USER, 1, &spec);
        cook_block(&mut raw);
        assert_eq!(block_num_pkts(&raw), 0);
        assert_eq!(Packets::from_block_bytes(&raw).count(), 0);
        // Junk never panics.
        let mut x = 0x9e3779b9u32;
        for n in [0, 47, 48, 100, 512] {
            let mut junk: Vec<u8> = (0..n)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 17;
                    x ^= x << 5;
                    x as u8
                })
                .collect();
            cook_block(&mut junk);
        }
    }

    #[test]
    fn corrupt_next_offset_stops_the_walk() {
        let (clean, lens) = sample();
        // Points past the block.
        let mut b = clean.clone();
        set_next(&mut b, header_offset(&lens, 1), 1 << 30);
        assert_eq!(Packets::from_block_bytes(&b).count(), 2);
        // Zero while more packets are announced: would loop on the same header.
        let mut b = clean.clone();
        set_next(&mut b, header_offset(&lens, 0), 0);
        assert_eq!(Packets::from_block_bytes(&b).count(), 1);
        // Shorter than a header.
        let mut b = clean.clone();
        set_next(&mut b, header_offset(&lens, 2), 8);
        assert_eq!(Packets::from_block_bytes(&b).count(), 3);
        // u32::MAX must not overflow.
        let mut b = clean.clone();
        set_next(&mut b, header_offset(&lens, 3), u32::MAX);
        assert_eq!(Packets::from_block_bytes(&b).count(), 4);
    }

    #[test]
    fn corrupt_lengths_and_counts_never_panic() {
        let (clean, lens) = sample();
        // A snaplen running past the block ends the walk at that packet.
        let mut b = clean.clone();
        set_snaplen(&mut b, header_offset(&lens, 2), 5000);
        assert_eq!(Packets::from_block_bytes(&b).count(), 2);
        // More packets announced than present: stops at the last chained one.
        let mut b = clean.clone();
        set_num_pkts(&mut b, 1_000_000);
        assert_eq!(Packets::from_block_bytes(&b).count(), 5);
        // Truncated blocks of every length.
        for n in 0..clean.len() {
            let _ = Packets::from_block_bytes(&clean[..n]).count();
        }
        // Random bytes.
        let mut x = 0x2545f491u32;
        for _ in 0..200 {
            let junk: Vec<u8> = (0..512)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 17;
                    x ^= x << 5;
                    x as u8
                })
                .collect();
            let _ = Packets::from_block_bytes(&junk).count();
        }
    }
}
