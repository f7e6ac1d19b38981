//! One ClickHouse server's HTTP interface (port 8123): statements and queries as a POST body,
//! inserts as `INSERT … FORMAT RowBinary` with the rows as the body. `ureq`, blocking, plain HTTP.

use std::time::Duration;

use crate::StoreError;

/// A server's version, from `SELECT version()`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version {
    /// Year-based major (18 for 18.16.1, 24 for 24.8.4.13).
    pub major: u32,
    /// Minor.
    pub minor: u32,
}

impl Version {
    /// Parses `MAJOR.MINOR[.…]`.
    pub fn parse(s: &str) -> Option<Version> {
        let mut it = s.trim().split('.');
        let major = it.next()?.parse().ok()?;
        let minor = it.next()?.parse().ok()?;
        Some(Version { major, minor })
    }
}

/// A client for one server.
#[derive(Debug, Clone)]
pub struct Server {
    agent: ureq::Agent,
    url: String,
    host: String,
    user: Option<String>,
    password: Option<String>,
}

impl Server {
    /// A client for `HOST:PORT` (nothing is sent yet).
    pub fn new(host: &str, user: Option<&str>, password: Option<&str>) -> Server {
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_connect(Some(Duration::from_secs(3)))
            .timeout_global(Some(Duration::from_secs(120)))
            .build()
            .into();
        Server {
            agent,
            url: format!("http://{host}/"),
            host: host.to_string(),
            user: user.map(str::to_string),
            password: password.map(str::to_string),
        }
    }

    /// `HOST:PORT`.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// Runs `sql` (a statement, or a query whose `FORMAT` says how to answer) and returns the
    /// answer's text.
    pub fn query(&self, sql: &str) -> Result<String, StoreError> {
        self.post(&[], sql.as_bytes(), sql)
    }

    /// Sends `body` as the data of `insert` (`INSERT INTO t FORMAT RowBinary`), with `settings`
    /// as URL parameters.
    pub fn insert(
        &self,
        insert: &str,
        body: &[u8],
        settings: &[(&str, &str)],
    ) -> Result<(), StoreError> {
        let mut params = vec![("query", insert)];
        params.extend_from_slice(settings);
        self.post(&params, body, insert).map(drop)
    }

    /// The server's version.
    pub fn version(&self) -> Result<Version, StoreError> {
        let v = self.query("SELECT version()")?;
        Version::parse(&v).ok_or_else(|| {
            StoreError::Other(format!(
                "ClickHouse {}: version {:?} not understood",
                self.host,
                v.trim()
            ))
        })
    }

    fn post(&self, params: &[(&str, &str)], body: &[u8], what: &str) -> Result<String, StoreError> {
        let mut req = self.agent.post(&self.url);
        for (k, v) in params {
            req = req.query(*k, *v);
        }
        if let Some(u) = &self.user {
            req = req.query("user", u);
        }
        if let Some(p) = &self.password {
            req = req.query("password", p);
        }
        let fail = |why: String| {
            let stmt: String = what.chars().take(60).collect();
            StoreError::Other(format!("ClickHouse {}: {stmt}: {why}", self.host))
        };
        let mut resp = req.send(body).map_err(|e| fail(e.to_string()))?;
        let status = resp.status();
        let text = resp
            .body_mut()
            .with_config()
            .limit(u64::MAX)
            .read_to_string();
        match text {
            Ok(text) if status.is_success() => Ok(text),
            // An insert answered 200 is in the table, even if the connection broke after it.
            Err(_) if status.is_success() && params.first().is_some_and(|(k, _)| *k == "query") => {
                Ok(String::new())
            }
            Ok(text) => Err(fail(format!(
                "HTTP {}: {}",
                status.as_u16(),
                text.lines().next().unwrap_or("")
            ))),
            Err(e) => Err(fail(format!("HTTP {}: {e}", status.as_u16()))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse_and_order() {
        let old = Version::parse("18.16.1\n").unwrap();
        let new = Version::parse("26.9.2.1").unwrap();
        assert_eq!(
            old,
            Version {
                major: 18,
                minor: 16
            }
        );
        assert!(old < new);
        assert_eq!(Version::parse("x"), None);
    }
}
