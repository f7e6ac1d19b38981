//! The Internet checksum (RFC 1071): one's-complement sums, pseudo-headers and incremental
//! update (RFC 1624).
//!
//! A *sum* is an unfolded `u32` accumulator; [`combine`] adds sums, [`fold`] reduces one to 16
//! bits and [`finish`] complements it into the value written into a header.

use core::net::{Ipv4Addr, Ipv6Addr};

/// Folds a 64-bit accumulator into 32 bits with end-around carry (2^32 ≡ 1 mod 0xffff).
#[inline(always)]
const fn fold64(acc: u64) -> u32 {
    let s = (acc & 0xffff_ffff) + (acc >> 32);
    let s = (s & 0xffff_ffff) + (s >> 32);
    s as u32
}

/// One's-complement sum of `data` as big-endian 16-bit words, unfolded.
///
/// An odd final byte is padded with a zero low byte. Sums of consecutive pieces may be
/// [`combine`]d only when every piece but the last has even length.
#[inline]
pub fn sum(data: &[u8]) -> u32 {
    // Four 32-bit words per step into a 64-bit accumulator: 2^32 steps before it can overflow.
    let mut acc: u64 = 0;
    let mut chunks = data.chunks_exact(16);
    for c in &mut chunks {
        let a = u64::from_be_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
        let b = u64::from_be_bytes([c[8], c[9], c[10], c[11], c[12], c[13], c[14], c[15]]);
        acc += (a >> 32) + (a & 0xffff_ffff) + (b >> 32) + (b & 0xffff_ffff);
    }
    let mut words = chunks.remainder().chunks_exact(2);
    for w in &mut words {
        acc += u64::from(u16::from_be_bytes([w[0], w[1]]));
    }
    if let [last] = words.remainder() {
        acc += u64::from(*last) << 8;
    }
    fold64(acc)
}

/// Adds two sums with end-around carry.
#[inline]
pub const fn combine(a: u32, b: u32) -> u32 {
    let (s, carry) = a.overflowing_add(b);
    s + carry as u32
}

/// Folds a sum into 16 bits (not complemented).
#[inline]
pub const fn fold(sum: u32) -> u16 {
    let s = (sum & 0xffff) + (sum >> 16);
    let s = (s & 0xffff) + (s >> 16);
    s as u16
}

/// The checksum field value for a sum: its folded one's complement.
#[inline]
pub const fn finish(sum: u32) -> u16 {
    !fold(sum)
}

/// Whether data whose sum (checksum field included) is `sum` verifies.
#[inline]
pub const fn is_valid(sum: u32) -> bool {
    fold(sum) == 0xffff
}

/// Sum of the IPv4 pseudo-header (RFC 793 §3.1, RFC 768) for `protocol` and upper-layer `len`.
#[inline]
pub fn pseudo_header_v4(src: Ipv4Addr, dst: Ipv4Addr, protocol: u8, len: u16) -> u32 {
    let s = u32::from(src);
    let d = u32::from(dst);
    let acc = u64::from(s >> 16)
        + u64::from(s & 0xffff)
        + u64::from(d >> 16)
        + u64::from(d & 0xffff)
        + u64::from(protocol)
        + u64::from(len);
    fold64(acc)
}

/// Sum of the IPv6 pseudo-header (RFC 8200 §8.1) for `next_header` and upper-layer `len`.
#[inline]
pub fn pseudo_header_v6(src: Ipv6Addr, dst: Ipv6Addr, next_header: u8, len: u32) -> u32 {
    let s = u128::from(src);
    let d = u128::from(dst);
    let halves = |x: u128| {
        let hi = (x >> 64) as u64;
        let lo = x as u64;
        (hi >> 32) + (hi & 0xffff_ffff) + (lo >> 32) + (lo & 0xffff_ffff)
    };
    let acc = halves(s) + halves(d) + u64::from(len >> 16) + u64::from(len & 0xffff);
    fold64(acc + u64::from(next_header))
}

/// Updates checksum field `cksum` after a 16-bit word changed from `old` to `new`
/// (RFC 1624 eqn. 3: `HC' = ~(~HC + ~m + m')`).
#[inline]
pub const fn update(cksum: u16, old: u16, new: u16) -> u16 {
    let s = (!cksum) as u32 + (!old) as u32 + new as u32;
    !fold(s)
}

/// The sum of the same bytes one byte further on (at an odd offset from the start of what a
/// checksum covers): the folded sum with its bytes swapped (RFC 1071 §2(B)).
#[inline]
pub const fn at_odd_offset(sum: u32) -> u32 {
    fold(sum).swap_bytes() as u32
}

/// Updates checksum field `cksum` after covered data summing to `old` became data summing to
/// `new` (RFC 1624 eqn. 3 over any number of words).
#[inline]
pub const fn update_sum(cksum: u16, old: u32, new: u32) -> u16 {
    finish(combine(combine((!cksum) as u32, (!fold(old)) as u32), new))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn naive(data: &[u8]) -> u16 {
        let mut s: u32 = 0;
        for pair in data.chunks(2) {
            let w = u16::from_be_bytes([pair[0], *pair.get(1).unwrap_or(&0)]);
            s += u32::from(w);
            s = (s & 0xffff) + (s >> 16);
        }
        s as u16
    }

    #[test]
    fn rfc1071_example() {
        // RFC 1071 §3: bytes 00 01 f2 03 f4 f5 f6 f7 sum to 0xddf2.
        let d = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(fold(sum(&d)), 0xddf2);
    }

    #[test]
    fn ipv4_header_fixture() {
        // A real IPv4 header with checksum 0xb861 (Wikipedia's worked example).
        let h = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        assert!(is_valid(sum(&h)));
        let mut z = h;
        z[10] = 0;
        z[11] = 0;
        assert_eq!(finish(sum(&z)), 0xb861);
    }

    #[test]
    fn pseudo_headers_match_byte_layout() {
        let (s4, d4) = (
            Ipv4Addr::new(10, 0, 0, 1),
            Ipv4Addr::new(192, 168, 200, 255),
        );
        let mut b = Vec::new();
        b.extend_from_slice(&s4.octets());
        b.extend_from_slice(&d4.octets());
        b.extend_from_slice(&[0, 17, 0x12, 0x34]);
        assert_eq!(fold(pseudo_header_v4(s4, d4, 17, 0x1234)), naive(&b));

        let s6: Ipv6Addr = "2001:db8::ffff:1".parse().unwrap();
        let d6: Ipv6Addr = "fe80::1234:5678:9abc:def0".parse().unwrap();
        let mut b = Vec::new();
        b.extend_from_slice(&s6.octets());
        b.extend_from_slice(&d6.octets());
        b.extend_from_slice(&0x0001_0203u32.to_be_bytes());
        b.extend_from_slice(&[0, 0, 0, 6]);
        assert_eq!(fold(pseudo_header_v6(s6, d6, 6, 0x0001_0203)), naive(&b));
    }

    proptest! {
        /// A checksum updated from the sums of a changed piece at any offset, odd ones
        /// included, verifies as one computed afresh does.
        #[test]
        fn update_sum_of_a_piece_at_any_offset(mut data in proptest::collection::vec(any::<u8>(), 8..120),
                                               at in 0usize..100,
                                               piece in proptest::collection::vec(any::<u8>(), 1..17)) {
            data[0] = 0;
            data[1] = 0;
            let ck = finish(sum(&data));
            data[..2].copy_from_slice(&ck.to_be_bytes());
            let at = 2 + at % (data.len() - 2);
            let n = piece.len().min(data.len() - at);
            let odd = |s: u32| if at % 2 == 1 { at_odd_offset(s) } else { s };
            let (old, new) = (odd(sum(&data[at..at + n])), odd(sum(&piece[..n])));
            data[at..at + n].copy_from_slice(&piece[..n]);
            let inc = update_sum(ck, old, new);
            data[..2].copy_from_slice(&inc.to_be_bytes());
            prop_assert!(is_valid(sum(&data)));
        }
    }

    proptest! {
        #[test]
        fn sum_matches_naive(data in proptest::collection::vec(any::<u8>(), 0..2000)) {
            prop_assert_eq!(fold(sum(&data)), naive(&data));
        }

        #[test]
        fn combine_of_even_split(data in proptest::collection::vec(any::<u8>(), 0..600),
                                 at in 0usize..300) {
            let at = (at * 2).min(data.len() & !1);
            let (a, b) = data.split_at(at);
            prop_assert_eq!(fold(combine(sum(a), sum(b))), naive(&data));
        }

        #[test]
        fn update_matches_recompute(mut data in proptest::collection::vec(any::<u8>(), 4..200),
                                    word in 0usize..100, new in any::<u16>()) {
            let len = data.len() & !1;
            data.truncate(len);
            data[0] = 0;
            data[1] = 0;
            let ck = finish(sum(&data));
            data[..2].copy_from_slice(&ck.to_be_bytes());
            let i = 2 + (word * 2) % (len - 2);
            let old = u16::from_be_bytes([data[i], data[i + 1]]);
            data[i..i + 2].copy_from_slice(&new.to_be_bytes());
            let inc = update(ck, old, new);
            data[0] = 0;
            data[1] = 0;
            let full = finish(sum(&data));
            // 0x0000 and 0xffff are the same one's-complement number.
            prop_assert!(inc == full || (inc ^ full) == 0xffff && (inc == 0 || full == 0),
                         "inc {inc:#x} full {full:#x}");
            data[..2].copy_from_slice(&inc.to_be_bytes());
            prop_assert!(is_valid(sum(&data)));
        }
    }
}
