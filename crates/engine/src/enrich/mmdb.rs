//! MaxMind DB files (GeoLite2, GeoIP2, IPinfo, DB-IP and the `@ip-location-db` packages) through
//! the `maxminddb` reader: a country and an AS for an address.
//!
//! Records differ by vendor; the first of these paths that holds a value is taken:
//! country `country.iso_code` (GeoLite2, DB-IP), `country_code` (IPinfo, `@ip-location-db`),
//! `country` as text (IPinfo); AS number `autonomous_system_number` (GeoLite2-ASN, DB-IP) or
//! `asn` (`"AS13335"` or 13335, IPinfo); AS name `autonomous_system_organization`, `as_name`
//! or `name`.

use std::net::IpAddr;
use std::path::Path;

use maxminddb::{PathElement, Reader, WithinOptions};

use super::LoadError;

/// One MMDB file, held in memory.
#[derive(Debug)]
pub struct Mmdb {
    reader: Reader<Vec<u8>>,
}

/// What an MMDB record says of an address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Found<'a> {
    /// AS number (0: none).
    pub asn: u32,
    /// AS name (empty: none).
    pub as_name: &'a str,
    /// Country code as the file has it (empty: none).
    pub country: &'a str,
}

/// The marker that starts an MMDB file's metadata section.
pub const METADATA_MARKER: &[u8] = b"\xab\xcd\xefMaxMind.com";

/// Whether `bytes` look like an MMDB file (the metadata marker in the last 128 KiB).
pub fn is_mmdb(bytes: &[u8]) -> bool {
    let tail = &bytes[bytes.len().saturating_sub(128 * 1024)..];
    tail.windows(METADATA_MARKER.len())
        .any(|w| w == METADATA_MARKER)
}

impl Mmdb {
    /// The file at `path`, already read into `bytes`.
    pub fn new(path: &Path, bytes: Vec<u8>) -> Result<Mmdb, LoadError> {
        let reader = Reader::from_source(bytes).map_err(|e| LoadError::new(path, 0, e))?;
        Ok(Mmdb { reader })
    }

    /// The file's type as its metadata says (`GeoLite2-ASN`, `geo-whois-asn-country`, …) and
    /// when it was built (s since 1970).
    pub fn describe(&self) -> (String, u64) {
        let m = self.reader.metadata();
        (m.database_type.clone(), m.build_epoch)
    }

    /// Adds the first address of each of its networks with data, and the one after it, to `e`.
    pub fn edges(&self, e: &mut super::merged::Edges) {
        let Ok(all) = self.reader.networks(WithinOptions::default()) else {
            return;
        };
        for r in all.flatten() {
            if let Ok(n) = r.network() {
                e.network(n.network(), n.prefix());
            }
        }
    }

    /// The data record's offset for `ip`, if the file has one: the same for every address
    /// of a network, so a cache of decoded records can be keyed by it.
    #[inline]
    pub fn offset(&self, ip: IpAddr) -> Option<usize> {
        self.reader.lookup(ip).ok()?.offset()
    }

    /// What the record for `ip` says (nothing if the file has no record, or one it cannot
    /// decode).
    pub fn find(&self, ip: IpAddr) -> Found<'_> {
        let Ok(r) = self.reader.lookup(ip) else {
            return Found::default();
        };
        if !r.has_data() {
            return Found::default();
        }
        let text = |path: &[PathElement<'_>]| r.decode_path::<&str>(path).ok().flatten();
        let country = text(&[PathElement::Key("country"), PathElement::Key("iso_code")])
            .or_else(|| text(&[PathElement::Key("country_code")]))
            .or_else(|| text(&[PathElement::Key("country")]))
            .unwrap_or("");
        let asn = r
            .decode_path::<u32>(&[PathElement::Key("autonomous_system_number")])
            .ok()
            .flatten()
            .or_else(|| {
                r.decode_path::<u32>(&[PathElement::Key("asn")])
                    .ok()
                    .flatten()
            })
            .or_else(|| text(&[PathElement::Key("asn")]).and_then(parse_asn))
            .unwrap_or(0);
        let as_name = text(&[PathElement::Key("autonomous_system_organization")])
            .or_else(|| text(&[PathElement::Key("as_name")]))
            .or_else(|| text(&[PathElement::Key("name")]))
            .unwrap_or("");
        Found {
            asn,
            as_name,
            country,
        }
    }
}

/// An AS number written `AS13335`, `as13335` or `13335`.
pub fn parse_asn(s: &str) -> Option<u32> {
    let s = s.trim();
    let digits = s
        .strip_prefix("AS")
        .or_else(|| s.strip_prefix("as"))
        .unwrap_or(s);
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn as_numbers_in_their_spellings() {
        assert_eq!(parse_asn("AS13335"), Some(13335));
        assert_eq!(parse_asn("13335"), Some(13335));
        assert_eq!(parse_asn("ASX"), None);
    }

    #[test]
    fn text_is_not_taken_for_a_database() {
        assert!(!is_mmdb(b"1.0.0.0,1.0.0.255,13335,Cloudflare\n"));
        let mut b = vec![0u8; 100];
        b.extend_from_slice(METADATA_MARKER);
        assert!(is_mmdb(&b));
    }
}
