//! An address prefix (CIDR, RFC 4632; IPv6 RFC 4291 §2.3): `10.0.0.0/8`, `2001:db8::/32`, or a
//! bare address for one host. The one parser of prefixes: capture rules, query filters and the
//! collector's `--allow` all read them here.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::bytes::read_u32;

/// An address prefix: the first `len` bits of `addr` (an IPv4 address in the first 4 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Prefix {
    /// Whether it is an IPv6 prefix.
    pub ipv6: bool,
    /// The address, with the bits past `len` cleared.
    pub addr: [u8; 16],
    /// Prefix length in bits: 0–32 for IPv4, 0–128 for IPv6.
    pub len: u8,
}

/// Why a text is not a prefix; each names the text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PrefixError {
    /// The part before `/` is not an IPv4 or IPv6 address.
    #[error("'{0}' is not an address or prefix")]
    Address(String),
    /// The length is not a number up to the address's width.
    #[error("prefix length in '{text}' is not 0 to {max}")]
    Length {
        /// The text.
        text: String,
        /// 32 or 128.
        max: u8,
    },
    /// Bits past the length are set (`10.0.0.1/8`).
    #[error("'{text}' has host bits set past /{len}")]
    HostBits {
        /// The text.
        text: String,
        /// The length it gives.
        len: u8,
    },
}

impl Prefix {
    /// The prefix of `len` bits that holds `ip`, the bits past `len` cleared; `None` if `len`
    /// is longer than the address.
    pub fn covering(ip: IpAddr, len: u8) -> Option<Prefix> {
        let (ipv6, bytes, max) = match ip {
            IpAddr::V4(a) => {
                let mut b = [0u8; 16];
                b[..4].copy_from_slice(&a.octets());
                (false, b, 32u8)
            }
            IpAddr::V6(a) => (true, a.octets(), 128u8),
        };
        (len <= max).then(|| Prefix {
            ipv6,
            addr: mask(&bytes, len),
            len,
        })
    }

    /// Parses `ADDR/LEN` or `ADDR` and clears bits past the length instead of refusing them:
    /// `192.0.2.7/24` is `192.0.2.0/24` (how `--allow` reads a host's address with its
    /// network's length).
    pub fn parse_covering(s: &str) -> Result<Prefix, PrefixError> {
        let (ip, len) = split(s)?;
        Ok(Prefix::covering(ip, len).expect("split checks the length"))
    }

    /// The network's first address.
    pub fn ip(&self) -> IpAddr {
        if self.ipv6 {
            IpAddr::V6(Ipv6Addr::from(self.addr))
        } else {
            IpAddr::V4(Ipv4Addr::new(
                self.addr[0],
                self.addr[1],
                self.addr[2],
                self.addr[3],
            ))
        }
    }

    /// Whether `addr` (4 or 16 significant bytes, as `ipv6` says) lies in the prefix.
    #[inline]
    pub fn contains(&self, addr: &[u8; 16]) -> bool {
        let full = usize::from(self.len / 8);
        if addr[..full] != self.addr[..full] {
            return false;
        }
        let rest = self.len % 8;
        rest == 0 || (addr[full] ^ self.addr[full]) & (0xffu8 << (8 - rest)) == 0
    }

    /// Whether `ip` lies in the prefix; an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`) counts
    /// as the IPv4 address it maps.
    pub fn contains_ip(&self, ip: IpAddr) -> bool {
        match ip.to_canonical() {
            IpAddr::V4(a) if !self.ipv6 => {
                let mut b = [0u8; 16];
                b[..4].copy_from_slice(&a.octets());
                self.contains(&b)
            }
            IpAddr::V6(a) if self.ipv6 => self.contains(&a.octets()),
            _ => false,
        }
    }

    /// The prefix over the 16-byte form that keeps IPv4 addresses IPv4-mapped
    /// (`::ffff:a.b.c.d`): the address so mapped and the length over 128 bits (an IPv4 `/n` is
    /// `/96+n` there, and holds IPv4 addresses only).
    pub fn mapped(&self) -> ([u8; 16], u8) {
        if self.ipv6 {
            (self.addr, self.len)
        } else {
            let mut b = [0u8; 16];
            b[10] = 0xff;
            b[11] = 0xff;
            b[12..].copy_from_slice(&self.addr[..4]);
            (b, 96 + self.len)
        }
    }

    /// The address bits as 32-bit words, and the mask of each, for the filter compiler.
    pub fn words(&self) -> impl Iterator<Item = (u32, u32)> + '_ {
        let words = if self.ipv6 { 4 } else { 1 };
        (0..words).filter_map(move |w| {
            let bits = u32::from(self.len).saturating_sub(w * 32).min(32);
            (bits > 0).then(|| {
                let at = w as usize * 4;
                let value = read_u32(&self.addr[at..]);
                (value, u32::MAX << (32 - bits))
            })
        })
    }
}

/// `a` with the bits past the first `len` cleared.
#[inline]
pub fn mask(a: &[u8; 16], len: u8) -> [u8; 16] {
    let mut m = *a;
    for (i, b) in m.iter_mut().enumerate() {
        let bits = u32::from(len).saturating_sub(i as u32 * 8).min(8);
        *b &= (0xff00u16 >> bits) as u8;
    }
    m
}

/// The address and length of `ADDR/LEN` or `ADDR` (the full width), the length checked.
fn split(s: &str) -> Result<(IpAddr, u8), PrefixError> {
    let (addr, len) = match s.split_once('/') {
        Some((a, l)) => (a, Some(l)),
        None => (s, None),
    };
    let ip: IpAddr = addr
        .parse()
        .map_err(|_| PrefixError::Address(s.to_string()))?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    let len = match len {
        Some(l) => {
            l.parse::<u8>()
                .ok()
                .filter(|&l| l <= max)
                .ok_or_else(|| PrefixError::Length {
                    text: s.to_string(),
                    max,
                })?
        }
        None => max,
    };
    Ok((ip, len))
}

impl std::str::FromStr for Prefix {
    type Err = PrefixError;

    /// `ADDR/LEN` or `ADDR`; bits set past the length are an error.
    fn from_str(s: &str) -> Result<Prefix, PrefixError> {
        let (ip, len) = split(s)?;
        let p = Prefix::covering(ip, len).expect("split checks the length");
        if p.ip() != ip {
            return Err(PrefixError::HostBits {
                text: s.to_string(),
                len,
            });
        }
        Ok(p)
    }
}

impl fmt::Display for Prefix {
    /// The canonical form, `ADDR/LEN` (RFC 5952 for IPv6), which parses back to the same prefix.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.ip(), self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4(s: &str) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[..4].copy_from_slice(&s.parse::<Ipv4Addr>().unwrap().octets());
        b
    }

    #[test]
    fn parses_contains_and_displays_canonically() {
        let p: Prefix = "10.0.0.0/15".parse().unwrap();
        assert!(p.contains(&v4("10.1.255.255")) && !p.contains(&v4("10.2.0.0")));
        assert_eq!(p.to_string(), "10.0.0.0/15");
        let host: Prefix = "192.0.2.7".parse().unwrap();
        assert_eq!((host.len, host.to_string().as_str()), (32, "192.0.2.7/32"));
        let v6: Prefix = "2001:0db8:0::/32".parse().unwrap();
        assert_eq!(v6.to_string(), "2001:db8::/32");
        assert!(v6.contains_ip("2001:db8::1".parse().unwrap()));
        assert!(!v6.contains_ip("10.0.0.1".parse().unwrap()));
        assert!(p.contains_ip("::ffff:10.1.0.1".parse().unwrap()));
        let z: Prefix = "0.0.0.0/0".parse().unwrap();
        assert!(z.contains_ip("203.0.113.9".parse().unwrap()));
        assert!(!z.contains_ip("::1".parse().unwrap()));
        assert_eq!(
            p.mapped(),
            ("::ffff:10.0.0.0".parse::<Ipv6Addr>().unwrap().octets(), 111)
        );
    }

    #[test]
    fn errors_name_the_text() {
        let e = |s: &str| s.parse::<Prefix>().unwrap_err().to_string();
        assert_eq!(e("nonsense"), "'nonsense' is not an address or prefix");
        assert_eq!(
            e("10.0.0.0/33"),
            "prefix length in '10.0.0.0/33' is not 0 to 32"
        );
        assert_eq!(e("::/129"), "prefix length in '::/129' is not 0 to 128");
        assert_eq!(
            e("10.0.0.0/x"),
            "prefix length in '10.0.0.0/x' is not 0 to 32"
        );
        assert_eq!(e("10.0.0.1/8"), "'10.0.0.1/8' has host bits set past /8");
        assert_eq!(
            Prefix::parse_covering("10.1.2.3/16").unwrap().to_string(),
            "10.1.0.0/16"
        );
        assert!(Prefix::parse_covering("10.1.2.3/40").is_err());
    }

    proptest::proptest! {
        #[test]
        fn any_text_parses_or_says_why_and_a_prefix_prints_back_to_itself(
            text in "[0-9a-f:./]{0,24}",
            a in proptest::prelude::any::<u128>(),
            len in 0u8..=128,
            v4 in proptest::prelude::any::<bool>(),
        ) {
            if let Ok(p) = text.parse::<Prefix>() {
                proptest::prop_assert_eq!(Prefix::parse_covering(&text), Ok(p));
                proptest::prop_assert_eq!(p.to_string().parse::<Prefix>(), Ok(p));
            }
            let ip = if v4 { IpAddr::V4(Ipv4Addr::from(a as u32)) } else { IpAddr::V6(Ipv6Addr::from(a)) };
            let len = if v4 { len % 33 } else { len };
            let p = Prefix::covering(ip, len).unwrap();
            proptest::prop_assert!(p.contains_ip(ip));
            proptest::prop_assert_eq!(p.to_string().parse::<Prefix>(), Ok(p));
            proptest::prop_assert_eq!(Prefix::parse_covering(&format!("{ip}/{len}")), Ok(p));
        }
    }
}
