//! The operator's interfaces file: the names and speeds of exporters' interfaces, for exporters
//! that send no names and for the speeds none send, as Akvorado's static metadata. Stored in the
//! `interfaces` table beside what exporters announce, at start and at each reload; where both
//! name an interface, the newest row's name wins and the file's speed stays.
//!
//! CSV with a header naming the columns, `exporter` and `index` first, then any of `name`,
//! `description` and `speed` (bits per second, with `k`, `M`, `G` or `T` for ×1000):
//!
//! ```text
//! exporter,index,name,speed,description
//! 192.0.2.1,3,ge-0/0/3,10G,transit A
//! 2001:db8::1,1,eth0,1G,
//! ```

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::Path;

use tapflow_store::InterfaceName;

use super::LoadError;

/// The interfaces one file names.
#[derive(Debug, Default)]
pub struct Interfaces {
    /// One row per exporter and index, as the `interfaces` table holds them (received at load).
    pub rows: Vec<InterfaceName>,
}

/// A speed in bits per second: digits, with `k`, `M`, `G` or `T` for ×1000 (`10G`, `2.5G`).
pub fn parse_speed(s: &str) -> Option<u64> {
    let (digits, scale) = match s.char_indices().last()? {
        (i, 'k' | 'K') => (&s[..i], 1e3),
        (i, 'M') => (&s[..i], 1e6),
        (i, 'G') => (&s[..i], 1e9),
        (i, 'T') => (&s[..i], 1e12),
        _ => (s, 1.0),
    };
    if !digits.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return None;
    }
    let v = digits.parse::<f64>().ok()? * scale;
    (0.0..1.8e19).contains(&v).then_some(v.round() as u64)
}

impl Interfaces {
    /// The interfaces of the file `path` holding `text`, as received at `now_ns`.
    pub fn parse(path: &Path, text: &str, now_ns: u64) -> Result<Interfaces, LoadError> {
        let (mut rd, header) = super::headed_csv(path, text, true)?;
        if header.get(..2) != Some(&["exporter".to_string(), "index".to_string()]) {
            return Err(LoadError::new(
                path,
                1,
                "the header's first columns are not `exporter,index`",
            ));
        }
        if let Some(c) = header[2..]
            .iter()
            .find(|c| !["name", "description", "speed"].contains(&c.as_str()))
        {
            return Err(LoadError::new(
                path,
                1,
                format!("unknown column `{c}` (name, description, speed)"),
            ));
        }
        let mut rows = Vec::new();
        let mut seen: HashMap<([u8; 16], u32), u64> = HashMap::new();
        for r in rd.records() {
            let r = r.map_err(|e| LoadError::csv(path, &e))?;
            let line = r.position().map_or(0, |p| p.line());
            let bad = |why: String| LoadError::new(path, line, why);
            if r.len() > header.len() {
                return Err(bad(format!(
                    "{} fields, the header names {}",
                    r.len(),
                    header.len()
                )));
            }
            let exporter = match r[0].parse::<IpAddr>() {
                Ok(IpAddr::V4(a)) => a.to_ipv6_mapped().octets(),
                Ok(IpAddr::V6(a)) => a.octets(),
                Err(_) => return Err(bad(format!("'{}' is not an exporter address", &r[0]))),
            };
            let index = r
                .get(1)
                .and_then(|i| i.parse::<u32>().ok())
                .filter(|&i| i > 0)
                .ok_or_else(|| {
                    bad(format!(
                        "'{}' is not an interface index (1 to 4294967295)",
                        r.get(1).unwrap_or("")
                    ))
                })?;
            if let Some(first) = seen.insert((exporter, index), line) {
                return Err(bad(format!(
                    "{} interface {index} is also on line {first}",
                    &r[0]
                )));
            }
            let mut row = InterfaceName {
                exporter,
                domain: 0,
                index,
                received_ns: now_ns,
                ..InterfaceName::default()
            };
            for (k, v) in header.iter().zip(r.iter()).skip(2) {
                match k.as_str() {
                    "name" => row.name = v.to_owned(),
                    "description" => row.description = v.to_owned(),
                    _ if v.is_empty() => {}
                    _ => {
                        row.speed = parse_speed(v).ok_or_else(|| {
                            bad(format!(
                                "'{v}' is not a speed (bits/s: 1000000000, 1G, 2.5G)"
                            ))
                        })?;
                    }
                }
            }
            rows.push(row);
        }
        Ok(Interfaces { rows })
    }

    /// How many interfaces it names.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether it names none.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_carry_name_description_and_speed() {
        let text = "# exporter interfaces\nexporter,index,name,speed,description\n\
                    192.0.2.1, 3, ge-0/0/3, 10G,\"transit A, port 3\"\n\
                    2001:db8::1,1,eth0,2.5G\n192.0.2.1,4,,,\n";
        let i = Interfaces::parse(Path::new("if.csv"), text, 7).unwrap();
        assert_eq!(i.len(), 3);
        let r = &i.rows[0];
        let mapped = "::ffff:192.0.2.1".parse::<std::net::Ipv6Addr>().unwrap();
        assert_eq!(r.exporter, mapped.octets());
        assert_eq!(
            (r.index, r.name.as_str(), r.speed, r.description.as_str()),
            (3, "ge-0/0/3", 10_000_000_000, "transit A, port 3")
        );
        assert_eq!((i.rows[1].speed, i.rows[1].received_ns), (2_500_000_000, 7));
        assert_eq!((i.rows[2].name.as_str(), i.rows[2].speed), ("", 0));
    }

    #[test]
    fn a_bad_file_is_refused_with_its_line() {
        let err = |text: &str| {
            Interfaces::parse(Path::new("if.csv"), text, 0)
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            err("index,exporter\n1,192.0.2.1\n"),
            "if.csv line 1: the header's first columns are not `exporter,index`"
        );
        assert_eq!(
            err("exporter,index,alias\n"),
            "if.csv line 1: unknown column `alias` (name, description, speed)"
        );
        assert_eq!(
            err("exporter,index,name\n192.0.2.1,1,a\n192.0.2.300,2,b\n"),
            "if.csv line 3: '192.0.2.300' is not an exporter address"
        );
        assert_eq!(
            err("exporter,index\n192.0.2.1,0\n"),
            "if.csv line 2: '0' is not an interface index (1 to 4294967295)"
        );
        assert_eq!(
            err("exporter,index,speed\n192.0.2.1,1,fast\n"),
            "if.csv line 2: 'fast' is not a speed (bits/s: 1000000000, 1G, 2.5G)"
        );
        assert_eq!(
            err("exporter,index\n192.0.2.1,1\n192.0.2.1,1\n"),
            "if.csv line 3: 192.0.2.1 interface 1 is also on line 2"
        );
        assert_eq!(
            err("exporter,index,name\n192.0.2.1,1,a,b\n"),
            "if.csv line 2: 4 fields, the header names 3"
        );
    }

    #[test]
    fn speeds_take_their_units() {
        assert_eq!(parse_speed("1000"), Some(1000));
        assert_eq!(parse_speed("100M"), Some(100_000_000));
        assert_eq!(parse_speed("2.5G"), Some(2_500_000_000));
        assert_eq!(parse_speed("1T"), Some(1_000_000_000_000));
        for bad in ["", "G", "-1G", "1e9", "1 G", "10Gb"] {
            assert_eq!(parse_speed(bad), None, "{bad}");
        }
    }
}
