//! ClickHouse, for flows past one machine: a [`FlowStore`](crate::FlowStore) that creates its
//! tables (chosen by the server's version), inserts in RowBinary batches over HTTP, spools to disk
//! while the server is away, and the translation of a query into SQL over those tables.
//!
//! One server: `http://HOST:8123/DB`. A cluster without ZooKeeper: every shard's HTTP address,
//! `http://HOST1:8123,HOST2:8123/DB?cluster=NAME`, where `NAME` is a `remote_servers` cluster
//! the servers know: the local tables are created on each shard, a `Distributed` table over them
//! on each, and inserts go through the first reachable shard's `Distributed` table.

pub mod alerts;
mod ddl;
mod http;
mod rowbinary;
mod spool;
mod sql;
mod store;

pub use alerts::ClickHouseAlerts;
pub use ddl::{Dialect, Layout, Schema};
pub use http::{Server, Version};
pub use rowbinary::encode_flow;
pub use sql::{ClickHouseEngine, filter_sql};
pub use store::{ClickHouseConfig, ClickHouseStore};

use crate::StoreError;

/// Where the flows go, as parsed from `http://[USER[:PASSWORD]@]HOST:PORT[,HOST:PORT…]/DB[?…]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// `HOST:PORT` of each server (each shard of a cluster).
    pub hosts: Vec<String>,
    /// The database (created if missing; `tapflow` when the URL has no path).
    pub database: String,
    /// The `remote_servers` cluster the servers form (`?cluster=NAME`), if any.
    pub cluster: Option<String>,
    /// Days raw flows (and the 1-minute rollup) are kept where the server has TTL
    /// (`?retain=DAYS`, 30 by default).
    pub retain_days: u32,
    /// The user, if the URL names one.
    pub user: Option<String>,
    /// The password, if the URL gives one.
    pub password: Option<String>,
}

impl Target {
    /// Parses a store URL, saying what is wrong and where in one line.
    pub fn parse(url: &str) -> Result<Target, StoreError> {
        let bad = |why: &str| StoreError::Other(format!("ClickHouse URL {url:?}: {why}"));
        let rest = url
            .strip_prefix("http://")
            .ok_or_else(|| bad("must start with http:// (HTTPS is not supported)"))?;
        let (authority, rest) = rest.split_once('/').unwrap_or((rest, ""));
        let (path, params) = rest.split_once('?').unwrap_or((rest, ""));
        let (userinfo, hostlist) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, authority),
        };
        let (user, password) = match userinfo {
            Some(u) => match u.split_once(':') {
                Some((n, p)) => (Some(n.to_string()), Some(p.to_string())),
                None => (Some(u.to_string()), None),
            },
            None => (None, None),
        };
        let mut hosts = Vec::new();
        for h in hostlist.split(',') {
            let port = h.rsplit_once(':').map(|(_, p)| p);
            if h.is_empty() || port.is_none_or(|p| p.parse::<u16>().is_err()) {
                return Err(bad(&format!("{h:?} is not HOST:PORT")));
            }
            hosts.push(h.to_string());
        }
        let database = match path.trim_end_matches('/') {
            "" => "tapflow".to_string(),
            d if is_identifier(d) => d.to_string(),
            d => return Err(bad(&format!("database {d:?} is not a name ([A-Za-z0-9_])"))),
        };
        let mut cluster = None;
        let mut retain_days = 30;
        for kv in params.split('&').filter(|kv| !kv.is_empty()) {
            match kv.split_once('=') {
                Some(("cluster", c)) if is_identifier(c) => cluster = Some(c.to_string()),
                Some(("retain", d)) => {
                    retain_days = d
                        .trim_end_matches('d')
                        .parse()
                        .ok()
                        .filter(|&d| d > 0)
                        .ok_or_else(|| bad(&format!("retain={d} is not a number of days")))?;
                }
                _ => {
                    return Err(bad(&format!(
                        "unknown or bad parameter {kv:?} (cluster=NAME, retain=DAYS)"
                    )));
                }
            }
        }
        if hosts.len() > 1 && cluster.is_none() {
            return Err(bad(
                "several hosts need ?cluster=NAME (their remote_servers cluster)",
            ));
        }
        Ok(Target {
            hosts,
            database,
            cluster,
            retain_days,
            user,
            password,
        })
    }

    /// A client for each host, in the URL's order.
    pub fn servers(&self) -> Vec<Server> {
        self.hosts
            .iter()
            .map(|h| Server::new(h, self.user.as_deref(), self.password.as_deref()))
            .collect()
    }
}

/// Whether `s` can be used unquoted as a database, table or cluster name.
fn is_identifier(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_one_server_and_a_cluster() {
        let t = Target::parse("http://127.0.0.1:8123/flows").unwrap();
        assert_eq!(t.hosts, ["127.0.0.1:8123"]);
        assert_eq!((t.database.as_str(), t.cluster.as_deref()), ("flows", None));
        let t = Target::parse("http://u:p@a:1,b:2/?cluster=c1&retain=7d").unwrap();
        assert_eq!(t.hosts, ["a:1", "b:2"]);
        assert_eq!(t.database, "tapflow");
        assert_eq!(t.cluster.as_deref(), Some("c1"));
        assert_eq!(t.retain_days, 7);
        assert_eq!(
            (t.user.as_deref(), t.password.as_deref()),
            (Some("u"), Some("p"))
        );
    }

    #[test]
    fn refuses_what_it_cannot_use() {
        for url in [
            "https://a:1/db",
            "http://a/db",
            "http://a:1/db;drop",
            "http://a:1,b:2/db",
            "http://a:1/db?retain=x",
            "http://a:1/db?shard=2",
        ] {
            let e = Target::parse(url).unwrap_err().to_string();
            assert!(e.starts_with("ClickHouse URL"), "{url}: {e}");
        }
    }
}
