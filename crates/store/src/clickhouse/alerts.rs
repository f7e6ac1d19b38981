//! The alerts a ClickHouse store keeps: the alert log's lines ([`crate::alerts`]) as rows of
//! `DB.alerts` (`time_us`, `line`), on the URL's first server (a cluster's first shard), where
//! the query engine reads them back.

use serde::Serialize;

use super::{Server, Target};
use crate::StoreError;
use crate::query::time::parse_time;

/// The table's name.
const TABLE: &str = "alerts";

/// Appends alert events to a ClickHouse store's `alerts` table.
#[derive(Debug)]
pub struct ClickHouseAlerts {
    server: Server,
    table: String,
}

impl ClickHouseAlerts {
    /// Connects to the URL's first server and creates the table if missing.
    pub fn open(url: &str) -> Result<ClickHouseAlerts, StoreError> {
        let target = Target::parse(url)?;
        let server = target.servers().swap_remove(0);
        server.query(&format!(
            "CREATE DATABASE IF NOT EXISTS {}",
            target.database
        ))?;
        let table = table(&target.database);
        server.query(&format!(
            "CREATE TABLE IF NOT EXISTS {table} (time_us UInt64, line String) \
             ENGINE = MergeTree ORDER BY time_us"
        ))?;
        Ok(ClickHouseAlerts { server, table })
    }

    /// Inserts one event as one row.
    pub fn append(&mut self, event: &impl Serialize) -> Result<(), StoreError> {
        let other = |e: serde_json::Error| StoreError::Other(e.to_string());
        let line = serde_json::to_string(event).map_err(other)?;
        let time = serde_json::to_value(event)
            .map_err(other)?
            .get("time")
            .and_then(|t| t.as_str())
            .and_then(|t| parse_time(t).ok())
            .unwrap_or(0)
            .max(0);
        let row = serde_json::json!({ "time_us": time, "line": line }).to_string();
        self.server.insert(
            &format!("INSERT INTO {} FORMAT JSONEachRow", self.table),
            row.as_bytes(),
            &[],
        )
    }
}

fn table(database: &str) -> String {
    format!("{database}.{TABLE}")
}

/// Every line the store's `alerts` table holds, in time order, as a log's text; empty when the
/// table does not exist.
pub fn log_text(server: &Server, database: &str) -> Result<String, StoreError> {
    let exists = server.query(&format!("EXISTS TABLE {}", table(database)))?;
    if exists.trim() != "1" {
        return Ok(String::new());
    }
    server.query(&format!(
        "SELECT line FROM {} ORDER BY time_us FORMAT TabSeparatedRaw",
        table(database)
    ))
}
