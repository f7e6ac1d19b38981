//! The operator's networks file: prefix → name, role, site, tenant and any other `key=value`,
//! as Akvorado's network attributes and pmacct's networks file. The longest prefix holding an
//! address wins.
//!
//! TOML, each key a prefix, each value a name or a table of attributes:
//!
//! ```toml
//! "10.0.0.0/8" = "corp"
//! "10.1.0.0/16" = { name = "office", role = "users", site = "par1", tenant = "acme", floor = 3 }
//! ```
//!
//! or CSV with a header naming the columns, `prefix` first, then any of `name`, `role`, `site`,
//! `tenant` and other columns, which become `key=value` attributes:
//!
//! ```text
//! prefix,name,role,site,tenant,rack
//! 10.1.0.0/16,office,users,par1,acme,b7
//! ```
//!
//! Looked up per prefix length present, longest first, each a hash of masked prefixes: a file
//! uses a handful of lengths, so a lookup is that many hash probes.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use tapflow_store::names::{intern, intern_network};
use tapflow_store::schema::{NO_NETWORK, Network};
use tapflow_wire::rules::Prefix;

use super::LoadError;

/// The prefixes of one address family, by length, longest first.
#[derive(Debug, Default)]
struct Table {
    lengths: Vec<(u8, HashMap<[u8; 16], &'static Network>)>,
}

/// The networks of one file.
#[derive(Debug, Default)]
pub struct Networks {
    v4: Table,
    v6: Table,
    count: usize,
}

/// `addr` with the bits past `len` cleared.
#[inline]
fn masked(addr: &[u8; 16], len: u8) -> [u8; 16] {
    let mut m = [0u8; 16];
    let full = usize::from(len / 8);
    m[..full].copy_from_slice(&addr[..full]);
    let rest = len % 8;
    if rest != 0 {
        m[full] = addr[full] & (0xffu8 << (8 - rest));
    }
    m
}

impl Networks {
    /// How many prefixes it holds.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Adds the first address of each prefix, and the one after it, to `e`.
    pub fn edges(&self, e: &mut super::merged::Edges) {
        for (ipv6, t) in [(false, &self.v4), (true, &self.v6)] {
            for (len, map) in &t.lengths {
                for a in map.keys() {
                    e.network(super::merged::std_addr(ipv6, a), *len);
                }
            }
        }
    }

    /// The network of the longest prefix holding `addr` (IPv4 in its first 4 bytes, as a flow
    /// record keeps it), or [`NO_NETWORK`].
    #[inline]
    pub fn find(&self, ipv6: bool, addr: &[u8; 16]) -> &'static Network {
        let t = if ipv6 { &self.v6 } else { &self.v4 };
        for (len, map) in &t.lengths {
            if let Some(n) = map.get(&masked(addr, *len)) {
                return n;
            }
        }
        &NO_NETWORK
    }

    /// The networks of `text`, the file at `path`: TOML if the name ends in `.toml`, CSV
    /// otherwise. A bad line is refused with its number, and so is a prefix given twice.
    pub fn parse(path: &Path, text: &str) -> Result<Networks, LoadError> {
        let entries = if path.extension().is_some_and(|e| e == "toml") {
            parse_toml(path, text)?
        } else {
            parse_csv(path, text)?
        };
        let mut v4: BTreeMap<u8, HashMap<[u8; 16], &'static Network>> = BTreeMap::new();
        let mut v6 = v4.clone();
        let mut seen: HashMap<Prefix, usize> = HashMap::new();
        for (line, prefix, net) in entries {
            let p: Prefix = prefix
                .parse()
                .map_err(|e: tapflow_wire::prefix::PrefixError| {
                    LoadError::new(path, line, e.to_string())
                })?;
            let p = Prefix {
                addr: masked(&p.addr, p.len),
                ..p
            };
            if let Some(first) = seen.insert(p, line) {
                return Err(LoadError::new(
                    path,
                    line,
                    format!("{prefix} is also on line {first}"),
                ));
            }
            let t = if p.ipv6 { &mut v6 } else { &mut v4 };
            t.entry(p.len).or_default().insert(p.addr, net);
        }
        let table = |m: BTreeMap<u8, HashMap<[u8; 16], &'static Network>>| Table {
            lengths: m.into_iter().rev().collect(),
        };
        Ok(Networks {
            v4: table(v4),
            v6: table(v6),
            count: seen.len(),
        })
    }
}

/// A network from its attributes, interned: `name`, `role`, `site`, `tenant` to their
/// fields, the rest `key=value` joined by `,`.
fn network<'a>(attrs: impl IntoIterator<Item = (&'a str, String)>) -> &'static Network {
    let mut n = Network::default();
    let mut rest = Vec::new();
    for (k, v) in attrs {
        match k {
            "name" => n.name = intern(&v),
            "role" => n.role = intern(&v),
            "site" => n.site = intern(&v),
            "tenant" => n.tenant = intern(&v),
            _ if !v.is_empty() => rest.push(format!("{k}={v}")),
            _ => {}
        }
    }
    n.attrs = intern(&rest.join(","));
    intern_network(n)
}

/// The line of byte offset `at` in `text`, from 1.
fn line_of(text: &str, at: usize) -> usize {
    text.as_bytes()[..at.min(text.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// One network of a TOML file: a name, or a table of attributes.
#[derive(Debug, serde::Deserialize)]
#[serde(untagged)]
enum TomlEntry {
    Name(String),
    Attrs(BTreeMap<String, toml::Value>),
}

type Entries = Vec<(usize, String, &'static Network)>;

fn parse_toml(path: &Path, text: &str) -> Result<Entries, LoadError> {
    let spans: BTreeMap<toml::Spanned<String>, toml::Spanned<toml::Value>> = toml::from_str(text)
        .map_err(|e| {
        let line = e.span().map_or(0, |s| line_of(text, s.start));
        LoadError::new(path, line, e.message().trim())
    })?;
    let mut out = Vec::new();
    for (k, v) in spans {
        let line = line_of(text, k.span().start);
        let entry: TomlEntry = v
            .into_inner()
            .try_into()
            .map_err(|_| LoadError::new(path, line, "not a name or a table of attributes"))?;
        let net = match entry {
            TomlEntry::Name(name) => network([("name", name)]),
            TomlEntry::Attrs(a) => network(a.iter().map(|(k, v)| {
                let v = match v {
                    toml::Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                (k.as_str(), v)
            })),
        };
        out.push((line, k.into_inner(), net));
    }
    Ok(out)
}

fn parse_csv(path: &Path, text: &str) -> Result<Entries, LoadError> {
    let (mut rd, header) = super::headed_csv(path, text, false)?;
    if header.first().map(String::as_str) != Some("prefix") {
        return Err(LoadError::new(
            path,
            1,
            "the header's first column is not `prefix`",
        ));
    }
    let mut out = Vec::new();
    for r in rd.records() {
        let r = r.map_err(|e| LoadError::csv(path, &e))?;
        let line = r.position().map_or(0, |p| p.line() as usize);
        let net = network(
            header
                .iter()
                .zip(r.iter())
                .skip(1)
                .map(|(k, v)| (k.as_str(), v.to_owned())),
        );
        out.push((line, r[0].to_owned(), net));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4(s: &str) -> [u8; 16] {
        let mut a = [0u8; 16];
        a[..4].copy_from_slice(&s.parse::<std::net::Ipv4Addr>().unwrap().octets());
        a
    }

    #[test]
    fn the_longest_prefix_wins() {
        let text = "\"10.0.0.0/8\" = \"corp\"\n\
                    \"10.1.0.0/16\" = { name = \"office\", role = \"users\", site = \"par1\", tenant = \"acme\", floor = 3 }\n\
                    \"10.1.2.0/24\" = \"lab\"\n\
                    \"0.0.0.0/0\" = \"internet\"\n\
                    \"2001:db8::/32\" = \"doc6\"\n";
        let n = Networks::parse(Path::new("n.toml"), text).unwrap();
        assert_eq!(n.len(), 5);
        assert_eq!(n.find(false, &v4("10.1.2.3")).name, "lab");
        let office = n.find(false, &v4("10.1.3.3"));
        assert_eq!(
            (
                office.name,
                office.role,
                office.site,
                office.tenant,
                office.attrs
            ),
            ("office", "users", "par1", "acme", "floor=3")
        );
        assert_eq!(n.find(false, &v4("10.200.0.1")).name, "corp");
        assert_eq!(n.find(false, &v4("192.0.2.1")).name, "internet");
        let a6: std::net::Ipv6Addr = "2001:db8::1".parse().unwrap();
        assert_eq!(n.find(true, &a6.octets()).name, "doc6");
        let b6: std::net::Ipv6Addr = "2001:db9::1".parse().unwrap();
        assert_eq!(n.find(true, &b6.octets()), &NO_NETWORK);
    }

    #[test]
    fn csv_columns_past_the_four_become_attributes() {
        let text = "prefix,name,role,site,tenant,rack\n\
                    # the office\n\
                    10.1.0.0/16,office,users,par1,acme,b7\n\
                    10.1.2.0/24,lab,,,,\n";
        let n = Networks::parse(Path::new("n.csv"), text).unwrap();
        let o = n.find(false, &v4("10.1.9.9"));
        assert_eq!((o.name, o.tenant, o.attrs), ("office", "acme", "rack=b7"));
        assert_eq!(n.find(false, &v4("10.1.2.9")).name, "lab");
        assert_eq!(n.find(false, &v4("10.2.0.0")), &NO_NETWORK);
    }

    #[test]
    fn bad_lines_are_refused_with_their_number() {
        let e = Networks::parse(
            Path::new("n.csv"),
            "prefix,name\n10.0.0.0/8,a\n10.0.0.0/33,b\n",
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "n.csv line 3: prefix length in '10.0.0.0/33' is not 0 to 32"
        );
        let e = Networks::parse(
            Path::new("n.csv"),
            "prefix,name\n10.0.0.0/8,a\n10.0.0.0/8,b\n10.9.0.0/8,c\n",
        )
        .unwrap_err();
        assert_eq!(e.to_string(), "n.csv line 3: 10.0.0.0/8 is also on line 2");
        let e =
            Networks::parse(Path::new("n.toml"), "\"10.0.0.0/8\" = \"a\"\nx = = 1\n").unwrap_err();
        assert!(e.to_string().starts_with("n.toml line 2: "), "{e}");
        let e = Networks::parse(
            Path::new("n.toml"),
            "\"a\" = \"x\"\n\"10.0.0.0/8\" = \"a\"\n",
        )
        .unwrap_err();
        assert!(e.to_string().starts_with("n.toml line 1: "), "{e}");
    }
}
