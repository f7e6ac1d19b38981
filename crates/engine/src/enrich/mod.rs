//! Enrichment: every flow gets, for its source and its destination address, the AS number and
//! name, the country and the operator's own network (name, role, site, tenant, other
//! attributes), set once per record from tables in memory before it is stored.
//!
//! The collector and the flow meter use it alike: [`store::EnrichedStore`] sits in front of a
//! store. The tables ([`Tables`]) come from files: MMDB or CSV ranges ([`mmdb`], [`ranges`]) for
//! country and AS, the networks file ([`networks`]). The interfaces file ([`interfaces`]) names
//! exporters' interfaces: its rows go to the store's interfaces table, not into each flow. A
//! [`Source`] holds the tables in force and reloads them when a file changes or on SIGHUP; a bad
//! file is refused with its line number and the previous tables stay.
//!
//! At load, every table is merged into one per address family ([`merged`]). Per record: a
//! lookup in a small direct-mapped cache of addresses; on a miss, one binary search in the
//! merged table. No allocation, lock or system call per record.

pub mod interfaces;
pub mod merged;
pub mod mmdb;
pub mod networks;
pub mod ranges;
pub mod source;
pub mod store;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tapflow_store::names::intern;
use tapflow_store::{Place, StoredFlow};

pub use source::Source;

/// The files enrichment reads (`--geoip`, `--asn`, `--networks`, `--interfaces`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EnrichConfig {
    /// Country data: an MMDB file, or CSV ranges `first,last,country`.
    pub geoip: Option<PathBuf>,
    /// AS data: an MMDB file, or CSV ranges `first,last,asn,name`.
    pub asn: Option<PathBuf>,
    /// The operator's networks file (TOML or CSV).
    pub networks: Option<PathBuf>,
    /// The operator's interfaces file (CSV).
    pub interfaces: Option<PathBuf>,
}

impl EnrichConfig {
    /// Whether any file is given.
    pub fn is_enabled(&self) -> bool {
        !self.files().is_empty()
    }

    /// The files given, with the option that names each.
    pub fn files(&self) -> Vec<(&'static str, &Path)> {
        [
            ("--geoip", &self.geoip),
            ("--asn", &self.asn),
            ("--networks", &self.networks),
            ("--interfaces", &self.interfaces),
        ]
        .into_iter()
        .filter_map(|(o, p)| p.as_deref().map(|p| (o, p)))
        .collect()
    }
}

/// Where scripts/fetch-ipdb.sh puts the default data: `$TAPFLOW_IPDB`, or
/// /var/cache/tapflow/ipdb.
pub fn default_data_dir() -> PathBuf {
    std::env::var_os("TAPFLOW_IPDB")
        .map_or_else(|| PathBuf::from("/var/cache/tapflow/ipdb"), PathBuf::from)
}

/// The lines of the data directory's `SOURCES` file (file, package and version, licence, fetch
/// date), or `None` if it has none.
pub fn data_sources(dir: &Path) -> Option<Vec<String>> {
    let text = std::fs::read_to_string(dir.join("SOURCES")).ok()?;
    Some(text.lines().map(str::to_owned).collect())
}

/// A file that could not be loaded: which, on which line (0: the file as a whole), and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}{}: {why}", path.display(), if *line > 0 { format!(" line {line}") } else { String::new() })]
pub struct LoadError {
    /// The file.
    pub path: PathBuf,
    /// The line, from 1; 0 when the error is not on one line.
    pub line: u64,
    /// What is wrong.
    pub why: String,
}

impl LoadError {
    /// An error in `path` at `line` (0: none).
    pub fn new(path: &Path, line: impl TryInto<u64>, why: impl std::fmt::Display) -> LoadError {
        LoadError {
            path: path.to_owned(),
            line: line.try_into().unwrap_or(0),
            why: why.to_string(),
        }
    }

    /// A CSV reader's error in `path`, at the line it names.
    pub fn csv(path: &Path, e: &csv::Error) -> LoadError {
        LoadError::new(path, e.position().map_or(0, |p| p.line()), e)
    }
}

/// A reader of `text`, the CSV file at `path` with a header (`#` starts a comment line, fields
/// are trimmed; `flexible`: records may have fewer or more fields than it), and the header's
/// columns.
pub fn headed_csv<'a>(
    path: &Path,
    text: &'a str,
    flexible: bool,
) -> Result<(csv::Reader<&'a [u8]>, Vec<String>), LoadError> {
    let mut rd = csv::ReaderBuilder::new()
        .comment(Some(b'#'))
        .trim(csv::Trim::All)
        .flexible(flexible)
        .from_reader(text.as_bytes());
    let header = rd
        .headers()
        .map_err(|e| LoadError::new(path, 1, e))?
        .iter()
        .map(str::to_owned)
        .collect();
    Ok((rd, header))
}

/// Country or AS data from one file.
#[derive(Debug)]
pub enum Db {
    /// A MaxMind DB file.
    Mmdb(mmdb::Mmdb),
    /// CSV ranges.
    Ranges(ranges::Ranges),
}

impl Db {
    /// The file at `path`: MMDB if it carries MMDB metadata, CSV ranges otherwise.
    pub fn load(path: &Path) -> Result<Db, LoadError> {
        let bytes = std::fs::read(path).map_err(|e| LoadError::new(path, 0, e))?;
        if mmdb::is_mmdb(&bytes) {
            Ok(Db::Mmdb(mmdb::Mmdb::new(path, bytes)?))
        } else {
            Ok(Db::Ranges(ranges::Ranges::parse(path, &bytes)?))
        }
    }

    /// Adds the edges of its ranges or networks to `e`.
    pub fn edges(&self, e: &mut merged::Edges) {
        match self {
            Db::Mmdb(m) => m.edges(e),
            Db::Ranges(r) => r.edges(e),
        }
    }

    /// One line saying what it is.
    pub fn describe(&self) -> String {
        match self {
            Db::Mmdb(m) => {
                let (kind, built) = m.describe();
                let day = chrono::DateTime::from_timestamp(built as i64, 0)
                    .map_or_else(String::new, |t| t.format("%Y-%m-%d").to_string());
                format!("MMDB {kind}, built {day}")
            }
            Db::Ranges(r) => format!("CSV, {} ranges", r.len()),
        }
    }
}

/// Every table enrichment looks addresses up in, as loaded together from the files.
#[derive(Debug, Default)]
pub struct Tables {
    /// Country data.
    pub geoip: Option<Db>,
    /// AS data.
    pub asn: Option<Db>,
    /// The operator's networks.
    pub networks: Option<networks::Networks>,
    /// The operator's interfaces.
    pub interfaces: Option<interfaces::Interfaces>,
    /// All of them merged, what records are looked up in.
    pub merged: merged::Merged,
}

impl Tables {
    /// The tables of the files `cfg` names.
    pub fn load(cfg: &EnrichConfig) -> Result<Tables, LoadError> {
        let networks = match &cfg.networks {
            Some(p) => {
                let text = std::fs::read_to_string(p).map_err(|e| LoadError::new(p, 0, e))?;
                Some(networks::Networks::parse(p, &text)?)
            }
            None => None,
        };
        let interfaces = match &cfg.interfaces {
            Some(p) => {
                let text = std::fs::read_to_string(p).map_err(|e| LoadError::new(p, 0, e))?;
                let now = tapflow_sys::clock::realtime_ns();
                Some(interfaces::Interfaces::parse(p, &text, now)?)
            }
            None => None,
        };
        let mut t = Tables {
            geoip: cfg.geoip.as_deref().map(Db::load).transpose()?,
            asn: cfg.asn.as_deref().map(Db::load).transpose()?,
            networks,
            interfaces,
            merged: merged::Merged::default(),
        };
        let mut edges = merged::Edges::default();
        for db in [&t.geoip, &t.asn].into_iter().flatten() {
            db.edges(&mut edges);
        }
        if let Some(n) = &t.networks {
            n.edges(&mut edges);
        }
        let mut decoded = HashMap::new();
        t.merged = merged::Merged::build(edges, |ipv6, a| t.look_up(&mut decoded, ipv6, a));
        Ok(t)
    }

    /// The place of one address from the tables themselves (each file in turn), decoding each
    /// MMDB record once into `decoded`.
    pub fn look_up(
        &self,
        decoded: &mut HashMap<(u8, usize), Decoded>,
        ipv6: bool,
        addr: &[u8; 16],
    ) -> Place {
        let at = merged::std_addr(ipv6, addr);
        let mut p = Place::default();
        let mut find = |which: u8, db: &Db| match db {
            Db::Ranges(r) => r.find(at),
            Db::Mmdb(m) => {
                let Some(offset) = m.offset(at) else {
                    return (0, "", [0; 2]);
                };
                *decoded.entry((which, offset)).or_insert_with(|| {
                    let f = m.find(at);
                    (f.asn, intern(f.as_name), Place::country_from(f.country))
                })
            }
        };
        if let Some(db) = &self.geoip {
            p.country = find(0, db).2;
        }
        if let Some(db) = &self.asn {
            (p.asn, p.as_name, _) = find(1, db);
        }
        if let Some(n) = &self.networks {
            p.net = n.find(ipv6, addr);
        }
        p
    }

    /// Whether any table gives addresses places (not only the interfaces file).
    pub fn has_places(&self) -> bool {
        self.geoip.is_some() || self.asn.is_some() || self.networks.is_some()
    }

    /// One line per table saying what it holds.
    pub fn describe(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(d) = &self.geoip {
            out.push(format!("country: {}", d.describe()));
        }
        if let Some(d) = &self.asn {
            out.push(format!("AS: {}", d.describe()));
        }
        if let Some(n) = &self.networks {
            out.push(format!("networks: {} prefixes", n.len()));
        }
        if let Some(i) = &self.interfaces {
            out.push(format!("interfaces: {}", i.len()));
        }
        out.push(format!(
            "merged: {} pieces in {:.1} MiB",
            self.merged.len(),
            self.merged.bytes() as f64 / f64::from(1 << 20)
        ));
        out
    }
}

/// Entries of the per-enricher IPv4 address cache (a power of two): 8 bytes each, 512 KiB,
/// within a core's L2 cache.
const CACHE_V4: usize = 65536;

/// Entries of the IPv6 address cache (a power of two): 32 bytes each, 512 KiB.
const CACHE_V6: usize = 16384;

/// An empty cache entry's place number (no table holds that many places).
const EMPTY: u32 = u32::MAX;

/// What an MMDB record decoded to: AS number, AS name, country.
pub type Decoded = (u32, &'static str, [u8; 2]);

/// Sets the places of flows: one per store thread, over the tables a [`Source`] holds. Each
/// address looked up is cached with the number of its place in the merged table.
#[derive(Debug)]
pub struct Enricher {
    source: Arc<Source>,
    tables: Arc<Tables>,
    generation: u64,
    /// The generation whose interfaces were handed to the store.
    named: Option<u64>,
    /// IPv4 addresses and their place numbers, direct-mapped.
    v4: Vec<(u32, u32)>,
    /// IPv6 addresses and their place numbers, direct-mapped.
    v6: Vec<(u128, u32)>,
}

/// The cache slot of an IPv4 address: a multiplicative hash.
#[inline]
fn slot_v4(a: u32) -> usize {
    (a.wrapping_mul(0x9e37_79b1) >> 16) as usize & (CACHE_V4 - 1)
}

/// The cache slot of an IPv6 address: a multiplicative hash of its halves.
#[inline]
fn slot_v6(a: u128) -> usize {
    let h = (a as u64 ^ (a >> 64) as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (h >> 32) as usize & (CACHE_V6 - 1)
}

impl Enricher {
    /// An enricher over the tables `source` holds, now and after each reload.
    pub fn new(source: Arc<Source>) -> Enricher {
        let (tables, generation) = source.current();
        Enricher {
            source,
            tables,
            generation,
            named: None,
            v4: vec![(0, EMPTY); CACHE_V4],
            v6: vec![(0, EMPTY); CACHE_V6],
        }
    }

    /// Takes up tables reloaded since the last call (one atomic load when there are none).
    #[inline]
    fn refresh(&mut self) {
        if self.source.generation() != self.generation {
            (self.tables, self.generation) = self.source.current();
            self.v4.fill((0, EMPTY));
            self.v6.fill((0, EMPTY));
        }
    }

    /// The interfaces file's rows, once per load of the tables: for the store's interfaces
    /// table.
    pub fn new_interfaces(&mut self) -> Option<&[tapflow_store::InterfaceName]> {
        self.refresh();
        if self.named == Some(self.generation) {
            return None;
        }
        self.named = Some(self.generation);
        self.tables
            .interfaces
            .as_ref()
            .map(|i| i.rows.as_slice())
            .filter(|r| !r.is_empty())
    }

    /// Sets the source and destination places of every flow of `flows` (none if only the
    /// interfaces file is given). Takes up tables reloaded since the last call first.
    pub fn enrich(&mut self, flows: &mut [StoredFlow]) {
        self.refresh();
        if !self.tables.has_places() {
            return;
        }
        for f in flows {
            let ipv6 = f.flow.ipv6;
            f.src_place = self.place(ipv6, &f.flow.src);
            f.dst_place = self.place(ipv6, &f.flow.dst);
        }
    }

    /// The place of one address, from the cache or the tables.
    #[inline]
    pub fn place(&mut self, ipv6: bool, addr: &[u8; 16]) -> Place {
        let merged = &self.tables.merged;
        let at = if ipv6 {
            let k = u128::from_be_bytes(*addr);
            let e = &mut self.v6[slot_v6(k)];
            if e.0 != k || e.1 == EMPTY {
                *e = (k, merged.find_index(true, addr));
            }
            e.1
        } else {
            let k = u32::from_be_bytes([addr[0], addr[1], addr[2], addr[3]]);
            let e = &mut self.v4[slot_v4(k)];
            if e.0 != k || e.1 == EMPTY {
                *e = (k, merged.find_index(false, addr));
            }
            e.1
        };
        merged.place(at)
    }

    /// The place of one address from the merged table.
    #[inline]
    pub fn look_up(&self, ipv6: bool, addr: &[u8; 16]) -> Place {
        self.tables.merged.find(ipv6, addr)
    }
}
