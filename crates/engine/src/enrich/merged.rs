//! Every table merged into one per address family, built when the files are loaded: the address
//! space cut at every edge of every range, prefix and MMDB network, each piece holding the
//! place its addresses have. A lookup is one binary search, whatever the number of files.
//!
//! IPv4: the pieces' first addresses sorted, with an index of where each /16 starts, so a
//! search runs over the few pieces of one /16 (a few hundred bytes). IPv6: a binary search over
//! the sorted first addresses. Each piece holds an index into the places (the distinct ones).
//!
//! Built by looking each piece's first address up in the tables themselves: as many lookups as
//! edges (about 1.5 million for the `@ip-location-db` country and AS files: about a second),
//! at load and reload, never per record.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use tapflow_store::Place;

/// The pieces of one family: `starts[i]` is the first address of piece `i`, which holds
/// `places[at[i]]`. `starts[0]` is 0, so every address lies in a piece.
#[derive(Debug, Default)]
struct Pieces<K> {
    starts: Vec<K>,
    at: Vec<u32>,
}

/// The merged tables.
#[derive(Debug, Default)]
pub struct Merged {
    v4: Pieces<u32>,
    /// `top[h]`: the first piece starting at or after `h << 16` (65,537 entries).
    top: Vec<u32>,
    v6: Pieces<u128>,
    places: Vec<Place>,
}

/// What tells places apart: the names are interned, so their addresses do.
type PlaceKey = (u32, usize, [u8; 2], usize);

fn place_key(p: &Place) -> PlaceKey {
    (
        p.asn,
        p.as_name.as_ptr() as usize,
        p.country,
        std::ptr::from_ref(p.net) as usize,
    )
}

/// The edges (first addresses of pieces) of both families, as the tables give them.
#[derive(Debug, Default)]
pub struct Edges {
    /// IPv4 edges.
    pub v4: Vec<u32>,
    /// IPv6 edges.
    pub v6: Vec<u128>,
}

impl Edges {
    /// The addresses `first..=last` (IPv4 as IPv4-mapped IPv6) start a piece, and so does the
    /// one after them.
    pub fn span(&mut self, first: u128, last: u128) {
        let v4 = |k: u128| (k >> 32 == 0xffff).then_some(k as u32);
        match (v4(first), v4(last)) {
            (Some(f), Some(l)) => {
                self.v4.push(f);
                if let Some(n) = l.checked_add(1) {
                    self.v4.push(n);
                }
            }
            _ => {
                self.v6.push(first);
                if let Some(n) = last.checked_add(1) {
                    self.v6.push(n);
                }
            }
        }
    }

    /// The network `ip/len` starts a piece, and so does the address after it.
    pub fn network(&mut self, ip: IpAddr, len: u8) {
        match ip {
            IpAddr::V4(a) => {
                let f = u32::from(a);
                let host = u32::MAX.checked_shr(u32::from(len)).unwrap_or(0);
                self.v4.push(f);
                if let Some(n) = (f | host).checked_add(1) {
                    self.v4.push(n);
                }
            }
            IpAddr::V6(a) => {
                let f = u128::from(a);
                let host = u128::MAX.checked_shr(u32::from(len)).unwrap_or(0);
                self.v6.push(f);
                if let Some(n) = (f | host).checked_add(1) {
                    self.v6.push(n);
                }
                // An IPv6 file keeps IPv4 under ::/96: its networks there are IPv4's.
                if f >> 32 == 0 && len >= 96 {
                    self.network(IpAddr::V4(Ipv4Addr::from(f as u32)), len - 96);
                }
            }
        }
    }
}

impl Merged {
    /// The pieces cut at `edges`, each holding what `look_up` says of its first address.
    pub fn build(mut edges: Edges, mut look_up: impl FnMut(bool, &[u8; 16]) -> Place) -> Merged {
        let mut m = Merged::default();
        let mut ids: HashMap<PlaceKey, u32> = HashMap::new();
        // Place 0 is the unknown place, what an address outside every piece has.
        ids.insert(place_key(&Place::default()), 0);
        m.places.push(Place::default());
        let mut id = |p: Place, places: &mut Vec<Place>| {
            *ids.entry(place_key(&p)).or_insert_with(|| {
                places.push(p);
                (places.len() - 1) as u32
            })
        };
        edges.v4.push(0);
        edges.v4.sort_unstable();
        edges.v4.dedup();
        for &s in &edges.v4 {
            let mut a = [0u8; 16];
            a[..4].copy_from_slice(&s.to_be_bytes());
            let at = id(look_up(false, &a), &mut m.places);
            if m.v4.at.last() != Some(&at) {
                m.v4.starts.push(s);
                m.v4.at.push(at);
            }
        }
        m.top = (0..=65536u64)
            .map(|h| m.v4.starts.partition_point(|&s| u64::from(s) < h << 16) as u32)
            .collect();
        edges.v6.push(0);
        edges.v6.sort_unstable();
        edges.v6.dedup();
        for &s in &edges.v6 {
            let at = id(look_up(true, &s.to_be_bytes()), &mut m.places);
            if m.v6.at.last() != Some(&at) {
                m.v6.starts.push(s);
                m.v6.at.push(at);
            }
        }
        m
    }

    /// How many pieces it holds (both families).
    pub fn len(&self) -> usize {
        self.v4.starts.len() + self.v6.starts.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The place of `addr` (IPv4 in its first 4 bytes, as a flow record keeps it).
    #[inline]
    pub fn find(&self, ipv6: bool, addr: &[u8; 16]) -> Place {
        self.place(self.find_index(ipv6, addr))
    }

    /// The place numbered `i` by [`Merged::find_index`].
    #[inline]
    pub fn place(&self, i: u32) -> Place {
        self.places.get(i as usize).copied().unwrap_or_default()
    }

    /// The number of the place of `addr` (0: unknown), for [`Merged::place`].
    #[inline]
    pub fn find_index(&self, ipv6: bool, addr: &[u8; 16]) -> u32 {
        let at = if ipv6 {
            let k = u128::from_be_bytes(*addr);
            let i = self.v6.starts.partition_point(|&s| s <= k);
            self.v6.at.get(i.wrapping_sub(1))
        } else {
            let k = u32::from_be_bytes([addr[0], addr[1], addr[2], addr[3]]);
            let h = (k >> 16) as usize;
            let (Some(&lo), Some(&hi)) = (self.top.get(h), self.top.get(h + 1)) else {
                return 0;
            };
            let (lo, hi) = (lo as usize, hi as usize);
            let i = lo + self.v4.starts[lo..hi].partition_point(|&s| s <= k);
            self.v4.at.get(i.wrapping_sub(1))
        };
        at.copied().unwrap_or(0)
    }

    /// The bytes its pieces and places take.
    pub fn bytes(&self) -> usize {
        self.v4.starts.len() * 8
            + self.top.len() * 4
            + self.v6.starts.len() * 20
            + self.places.len() * std::mem::size_of::<Place>()
    }
}

/// `ip` in a flow record's layout: the family, and IPv4 in the first 4 bytes.
pub fn record_addr(ip: IpAddr) -> (bool, [u8; 16]) {
    match ip {
        IpAddr::V4(a) => {
            let mut b = [0u8; 16];
            b[..4].copy_from_slice(&a.octets());
            (false, b)
        }
        IpAddr::V6(a) => (true, a.octets()),
    }
}

/// The address of a flow record's layout as the standard library's type.
pub fn std_addr(ipv6: bool, a: &[u8; 16]) -> IpAddr {
    if ipv6 {
        IpAddr::V6(Ipv6Addr::from(*a))
    } else {
        IpAddr::V4(Ipv4Addr::new(a[0], a[1], a[2], a[3]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tapflow_store::names::intern;

    fn v4(s: &str) -> [u8; 16] {
        record_addr(s.parse().unwrap()).1
    }

    #[test]
    fn every_address_finds_the_place_of_its_piece() {
        // Two overlapping sources: an AS range and a country network inside it.
        let mut e = Edges::default();
        e.span(
            u128::from(Ipv4Addr::new(10, 0, 0, 0).to_ipv6_mapped()),
            u128::from(Ipv4Addr::new(10, 0, 255, 255).to_ipv6_mapped()),
        );
        e.network("10.0.1.0".parse().unwrap(), 24);
        e.network("2001:db8::".parse().unwrap(), 32);
        e.network("::1.2.3.0".parse().unwrap(), 120);
        let truth = |ipv6: bool, a: &[u8; 16]| {
            let mut p = Place::default();
            let ip = std_addr(ipv6, a);
            if let IpAddr::V4(x) = ip {
                let o = x.octets();
                if o[0] == 10 && o[1] == 0 {
                    p.asn = 64500;
                    p.as_name = intern("Example");
                }
                if o[..3] == [10, 0, 1] {
                    p.country = *b"DE";
                }
                if o[..3] == [1, 2, 3] {
                    p.country = *b"AU";
                }
            } else if let IpAddr::V6(x) = ip
                && x.segments()[..2] == [0x2001, 0xdb8]
            {
                p.asn = 64501;
            }
            p
        };
        let m = Merged::build(e, truth);
        for s in [
            "0.0.0.0",
            "9.255.255.255",
            "10.0.0.0",
            "10.0.0.255",
            "10.0.1.0",
            "10.0.1.255",
            "10.0.2.0",
            "10.0.255.255",
            "10.1.0.0",
            "1.2.3.4",
            "1.2.4.0",
            "255.255.255.255",
        ] {
            assert_eq!(
                place_key(&m.find(false, &v4(s))),
                place_key(&truth(false, &v4(s))),
                "{s}"
            );
        }
        for s in [
            "::",
            "2001:db7:ffff::",
            "2001:db8::1",
            "2001:db9::",
            "ffff::",
        ] {
            let a: Ipv6Addr = s.parse().unwrap();
            assert_eq!(
                place_key(&m.find(true, &a.octets())),
                place_key(&truth(true, &a.octets())),
                "{s}"
            );
        }
        // Pieces with one place are one: 0/8.., 10.0.0/24, 10.0.1/24, 10.0.2..255, 10.1..
        // and 1.2.3/24 cut v4 into 7.
        assert_eq!(m.v4.starts.len(), 7);
    }
}
