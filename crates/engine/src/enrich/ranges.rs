//! Address ranges from CSV, as the `@ip-location-db` packages publish them: `first,last,asn,name`
//! (an ASN list) or `first,last,country` (a country list), IPv4 and IPv6 ranges in one file or
//! several, no header. Looked up by binary search over the ranges sorted by their first address:
//! the range with the greatest first address at or below the address answers, if it holds it.

use std::net::IpAddr;
use std::path::Path;

use tapflow_store::Place;
use tapflow_store::names::intern;

use super::LoadError;

/// One range and what it says.
#[derive(Debug, Clone, Copy)]
struct Range {
    first: u128,
    last: u128,
    asn: u32,
    as_name: &'static str,
    country: [u8; 2],
}

/// The ranges of one CSV file.
#[derive(Debug, Default)]
pub struct Ranges {
    ranges: Vec<Range>,
}

/// `ip` as a 128-bit number, IPv4 IPv4-mapped, so both families sort in one table.
#[inline]
pub fn key(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(a) => u128::from(a.to_ipv6_mapped()),
        IpAddr::V6(a) => u128::from(a),
    }
}

impl Ranges {
    /// The ranges of `text`, the file at `path`. A line that is not a range is refused with its
    /// number, and so is a range that ends before it starts.
    pub fn parse(path: &Path, text: &[u8]) -> Result<Ranges, LoadError> {
        let mut rd = csv::ReaderBuilder::new()
            .has_headers(false)
            .flexible(true)
            .from_reader(text);
        let mut ranges = Vec::new();
        for r in rd.records() {
            let r = r.map_err(|e| LoadError::csv(path, &e))?;
            let line = r.position().map_or(0, |p| p.line());
            let bad = |what: &str| LoadError::new(path, line, what);
            let addr = |i: usize| -> Result<IpAddr, LoadError> {
                r.get(i)
                    .unwrap_or("")
                    .trim()
                    .parse()
                    .map_err(|_| bad(&format!("field {} is not an address", i + 1)))
            };
            let (first, last) = (addr(0)?, addr(1)?);
            if first.is_ipv4() != last.is_ipv4() || key(first) > key(last) {
                return Err(bad("the range's last address is before its first"));
            }
            let mut range = Range {
                first: key(first),
                last: key(last),
                asn: 0,
                as_name: "",
                country: [0; 2],
            };
            match r.len() {
                3 => range.country = Place::country_from(r[2].trim()),
                4 => {
                    range.asn = super::mmdb::parse_asn(&r[2])
                        .ok_or_else(|| bad("field 3 is not an AS number"))?;
                    range.as_name = intern(r[3].trim());
                }
                n => {
                    return Err(bad(&format!(
                        "{n} fields, not first,last,country or first,last,asn,name"
                    )));
                }
            }
            ranges.push(range);
        }
        // Published lists have a few overlapping ranges (a block inside a larger one): the
        // range with the greatest first address at or below an address answers for it, if it
        // holds it, as a binary search over the sorted first addresses finds.
        ranges.sort_by_key(|r| (r.first, r.last));
        Ok(Ranges { ranges })
    }

    /// How many ranges it holds.
    pub fn len(&self) -> usize {
        self.ranges.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// Adds the first address of each range, and the one after it, to `e`.
    pub fn edges(&self, e: &mut super::merged::Edges) {
        for r in &self.ranges {
            e.span(r.first, r.last);
        }
    }

    /// The AS number, AS name and country of the range holding `ip` (zero and empty if none).
    #[inline]
    pub fn find(&self, ip: IpAddr) -> (u32, &'static str, [u8; 2]) {
        let k = key(ip);
        let at = self.ranges.partition_point(|r| r.first <= k);
        match at.checked_sub(1).map(|i| &self.ranges[i]) {
            Some(r) if k <= r.last => (r.asn, r.as_name, r.country),
            _ => (0, "", [0; 2]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_range_holding_an_address_answers() {
        let csv = b"1.0.0.0,1.0.0.255,13335,\"Cloudflare, Inc.\"\n\
                    2a00:1450::,2a00:1450:ffff:ffff:ffff:ffff:ffff:ffff,15169,Google LLC\n\
                    1.0.4.0,1.0.7.255,38803,Gtelecom Pty Ltd\n";
        let r = Ranges::parse(Path::new("asn.csv"), csv).unwrap();
        assert_eq!(r.len(), 3);
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(r.find(ip("1.0.0.7")), (13335, "Cloudflare, Inc.", [0; 2]));
        assert_eq!(r.find(ip("1.0.7.255")).0, 38803);
        assert_eq!(r.find(ip("1.0.1.0")).0, 0);
        assert_eq!(r.find(ip("2a00:1450::1")).0, 15169);
        assert_eq!(r.find(ip("0.0.0.1")).0, 0);
    }

    #[test]
    fn a_bad_line_is_refused_with_its_number() {
        let e = Ranges::parse(
            Path::new("asn.csv"),
            b"1.0.0.0,1.0.0.255,1,A\n1.0.1.0,x,2,B\n",
        )
        .unwrap_err();
        assert_eq!(e.to_string(), "asn.csv line 2: field 2 is not an address");
    }
}
