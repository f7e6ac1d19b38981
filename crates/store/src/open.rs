//! The one way into a store: a path or URL, as a user writes it after `--store`, `-R` or
//! `--clickhouse`, becomes a [`FlowStore`] to write or a [`QueryEngine`] to ask.
//!
//! - `DIR` or `file://DIR`: the Parquet store in that directory ([`crate::parquet`]);
//! - `http://HOST:PORT/DB[?…]` or `clickhouse://HOST:PORT/DB[?…]` (the same, over HTTP): a
//!   ClickHouse server or cluster ([`crate::clickhouse`]).
//!
//! A new backend is one folder beside those two and one arm in [`Location::parse`],
//! [`store`] and [`engine`].

use std::ffi::OsStr;
use std::path::PathBuf;

use crate::clickhouse::{ClickHouseConfig, ClickHouseEngine, ClickHouseStore};
use crate::parquet::{ParquetEngine, ParquetOptions, ParquetStore};
use crate::query::{QueryEngine, QueryError};
use crate::{FlowStore, StoreError};

/// Where flows are kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// A Parquet store directory.
    Parquet(PathBuf),
    /// A ClickHouse server or cluster: its `http://` URL.
    ClickHouse(String),
}

impl Location {
    /// Reads a path or URL, saying in one line what is wrong with it. A URL is checked here
    /// (its hosts and database), before anything is opened.
    pub fn parse(text: impl AsRef<OsStr>) -> Result<Location, StoreError> {
        let text = text.as_ref();
        let Some(s) = text.to_str() else {
            return Ok(Location::Parquet(PathBuf::from(text)));
        };
        if let Some(dir) = s.strip_prefix("file://") {
            if dir.is_empty() {
                return Err(StoreError::Other(format!("{s:?}: no directory")));
            }
            return Ok(Location::Parquet(PathBuf::from(dir)));
        }
        if let Some(rest) = s.strip_prefix("clickhouse://") {
            let url = format!("http://{rest}");
            crate::clickhouse::Target::parse(&url)?;
            return Ok(Location::ClickHouse(url));
        }
        if s.starts_with("http://") || s.starts_with("https://") {
            crate::clickhouse::Target::parse(s)?;
            return Ok(Location::ClickHouse(s.to_string()));
        }
        if let Some((scheme, _)) = s.split_once("://")
            && !scheme.is_empty()
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
        {
            return Err(StoreError::Other(format!(
                "{s:?}: unknown scheme {scheme}:// (a directory, file://DIR, http://HOST:PORT/DB or clickhouse://HOST:PORT/DB)"
            )));
        }
        Ok(Location::Parquet(PathBuf::from(s)))
    }

    /// Reads a URL that must name a ClickHouse server (`--clickhouse`): `http://` or
    /// `clickhouse://`, never a directory.
    pub fn clickhouse(url: &str) -> Result<Location, StoreError> {
        match Location::parse(url)? {
            Location::Parquet(_) => {
                crate::clickhouse::Target::parse(url)?;
                Err(StoreError::Other(format!(
                    "ClickHouse URL {url:?}: not a URL"
                )))
            }
            at => Ok(at),
        }
    }

    /// How the summary and `/metrics` name it: `parquet:DIR`, `clickhouse:URL`.
    pub fn name(&self) -> String {
        match self {
            Location::Parquet(dir) => format!("parquet:{}", dir.display()),
            Location::ClickHouse(url) => format!("clickhouse:{url}"),
        }
    }
}

/// How a store is opened for writing: each backend reads its own part.
#[derive(Debug, Clone)]
pub struct Options {
    /// The Parquet store's.
    pub parquet: ParquetOptions,
    /// Where ClickHouse batches wait on disk while the server is away.
    pub spool_dir: Option<PathBuf>,
    /// The most bytes of batches kept in that directory.
    pub spool_limit: u64,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            parquet: ParquetOptions::default(),
            spool_dir: None,
            spool_limit: ClickHouseConfig::new("").spool_limit,
        }
    }
}

/// Opens the store at `at` for writing.
pub fn store(at: &Location, options: &Options) -> Result<Box<dyn FlowStore>, StoreError> {
    Ok(match at {
        Location::Parquet(dir) => Box::new(ParquetStore::open(dir, options.parquet.clone())?),
        Location::ClickHouse(url) => {
            let mut config = ClickHouseConfig::new(url);
            config.spool_dir.clone_from(&options.spool_dir);
            config.spool_limit = options.spool_limit;
            Box::new(ClickHouseStore::open(config)?)
        }
    })
}

/// Opens the store at `at` for queries, scanning with up to `threads` threads where the backend
/// scans itself, and answering from rollups where they answer exactly if `rollups`.
pub fn engine(
    at: &Location,
    threads: usize,
    rollups: bool,
) -> Result<Box<dyn QueryEngine + Send + Sync>, QueryError> {
    Ok(match at {
        Location::Parquet(dir) => {
            Box::new(ParquetEngine::new(dir, threads).prefer_rollups(rollups))
        }
        Location::ClickHouse(url) => Box::new(ClickHouseEngine::open(url)?.prefer_rollups(rollups)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_urls_name_their_backend() {
        let p = |s: &str| Location::parse(s).unwrap();
        assert_eq!(p("flows"), Location::Parquet("flows".into()));
        assert_eq!(p("/var/lib/t"), Location::Parquet("/var/lib/t".into()));
        assert_eq!(
            p("file:///var/lib/t"),
            Location::Parquet("/var/lib/t".into())
        );
        assert_eq!(
            p("http://h:8123/db"),
            Location::ClickHouse("http://h:8123/db".into())
        );
        assert_eq!(
            p("clickhouse://a:8123,b:8123/db?cluster=c"),
            Location::ClickHouse("http://a:8123,b:8123/db?cluster=c".into())
        );
        assert_eq!(p("flows").name(), "parquet:flows");
        assert_eq!(p("http://h:8123/db").name(), "clickhouse:http://h:8123/db");
    }

    #[test]
    fn a_bad_location_is_one_line_naming_it() {
        let e = |s: &str| Location::parse(s).unwrap_err().to_string();
        assert!(
            e("s3://bucket/x").contains("unknown scheme s3://"),
            "{}",
            e("s3://b/x")
        );
        assert!(e("file://").contains("no directory"));
        assert!(e("https://h:8123/db").contains("HTTPS is not supported"));
        assert!(
            e("clickhouse://").contains("ClickHouse URL"),
            "{}",
            e("clickhouse://")
        );
    }
}
