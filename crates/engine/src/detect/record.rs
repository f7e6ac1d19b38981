//! Alerts kept with the flows: each start and end appended to the store's alert log or table
//! ([`tapflow_store::alerts`]), where the console and `tapflow query --alerts` read them.

use tapflow_store::StoreError;
use tapflow_store::alerts::AlertSink;
use tapflow_store::open::Location;

use crate::detect::action::Action;
use crate::detect::alert::Alert;

/// Appends every alert event to a store's alert log (or ClickHouse table).
///
/// The log is opened at the first event, by the detector's thread: after a capture has become
/// its unprivileged user, so the log and its directory are that user's, as the store's files are.
#[derive(Debug)]
pub struct Record {
    at: Location,
    log: Option<AlertSink>,
    /// Events the log could not take, and the first reason.
    failed: u64,
    first_error: Option<String>,
}

impl Record {
    /// Keeps the alerts in the store at `at`.
    pub fn new(at: Location) -> Record {
        Record {
            at,
            log: None,
            failed: 0,
            first_error: None,
        }
    }

    fn append(&mut self, a: &Alert) -> Result<(), StoreError> {
        let log = match &mut self.log {
            Some(log) => log,
            None => self.log.insert(AlertSink::open(&self.at)?),
        };
        log.append(a)
    }
}

impl Action for Record {
    fn alert(&mut self, a: &Alert) {
        if let Err(e) = self.append(a) {
            if self.first_error.is_none() {
                eprintln!("tapflow: alert {} {} not kept: {e}", a.event, a.target);
                self.first_error = Some(e.to_string());
            }
            self.failed += 1;
        }
    }

    fn close(&mut self) {
        if let Some(e) = &self.first_error {
            eprintln!(
                "tapflow: {} alert events not kept in the store: {e}",
                self.failed
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::detect::alert::{Alerts, Measure, Target};
    use crate::detect::tally::Counts;
    use crate::detect::threshold::Limits;

    #[test]
    fn a_recorded_alert_reads_back_from_the_store() {
        let dir = tempfile::tempdir().unwrap();
        let mut r = Record::new(Location::Parquet(dir.path().to_path_buf()));
        let mut alerts = Alerts::new(3, 0.8, 1);
        let m = Measure {
            target: Target::Host("10.0.0.1".parse().unwrap()),
            group: None,
            counts: Counts {
                packets: 30_000,
                bytes: 1_800_000,
                protos: [30_000, 0, 0, 0],
                signatures: [30_000, 0, 0, 0],
                ..Default::default()
            },
            entry: None,
            limits: Limits::DEFAULT,
            limit: "static",
        };
        // 2026-11-29T09:00:00Z
        let t = 1_795_942_800;
        r.alert(&alerts.measure(t, &m).unwrap());
        for e in alerts.expire(t + 10, false) {
            r.alert(&e);
        }
        r.close();
        let w = tapflow_store::query::Window {
            start_us: 0,
            end_us: i64::MAX,
        };
        let got = tapflow_store::alerts::read(dir.path(), w).unwrap();
        assert_eq!(got.unreadable, 0);
        let a = &got.alerts[0];
        assert_eq!(
            (a.target.as_str(), a.kind.as_str()),
            ("10.0.0.1", "syn_flood")
        );
        assert_eq!(
            (a.state, a.start.as_str()),
            ("ended", "2026-11-29T09:00:00Z")
        );
        assert_eq!(a.end.as_deref(), Some("2026-11-29T09:00:01Z"));
        assert_eq!(a.threshold.packets_per_second, Some(20_000));
        assert_eq!(a.filter, "dst host 10.0.0.1");
    }
}
