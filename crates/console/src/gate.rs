//! How many store queries the console runs at once: a few run, a few more wait their turn in
//! line, and the rest are turned away at once (the API answers `503 Service Unavailable`).
//!
//! A query's memory grows with what it reads and returns, and the console may live inside a
//! collector, whose flows are lost if the process runs out of memory: a crowd of requests must
//! wait or be refused rather than all run together.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Admits `running` queries at once and keeps `waiting` more in line.
#[derive(Debug, Clone)]
pub struct Gate {
    running: Arc<Semaphore>,
    in_line: Arc<AtomicUsize>,
    max_running: usize,
    max_waiting: usize,
}

/// The gate is full: every place running and in line is taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "the console is busy: {running} queries running and {waiting} waiting already; try again shortly"
)]
pub struct Busy {
    /// Queries that run at once.
    pub running: usize,
    /// Queries that wait in line at most.
    pub waiting: usize,
}

/// A place among the running queries, given back when dropped.
#[derive(Debug)]
pub struct Pass {
    _permit: OwnedSemaphorePermit,
}

/// A place in line, given back when dropped (also when the waiting request is dropped).
struct InLine<'a>(&'a AtomicUsize);

impl Drop for InLine<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Gate {
    /// A gate running `running` (≥ 1) queries at once with `waiting` more in line.
    pub fn new(running: usize, waiting: usize) -> Gate {
        let running = running.max(1);
        Gate {
            running: Arc::new(Semaphore::new(running)),
            in_line: Arc::new(AtomicUsize::new(0)),
            max_running: running,
            max_waiting: waiting,
        }
    }

    /// A place among the running: at once if one is free, else after those in line before, or
    /// [`Busy`] at once if the line is full too.
    pub async fn enter(&self) -> Result<Pass, Busy> {
        let busy = Busy {
            running: self.max_running,
            waiting: self.max_waiting,
        };
        if let Ok(permit) = self.running.clone().try_acquire_owned() {
            return Ok(Pass { _permit: permit });
        }
        self.in_line
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.max_waiting).then_some(n + 1)
            })
            .map_err(|_| busy)?;
        let _in_line = InLine(&self.in_line);
        // The semaphore is never closed, so this only fails if that changes.
        let permit = self
            .running
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| busy)?;
        Ok(Pass { _permit: permit })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::time::Duration;

    #[tokio::test]
    async fn runs_a_few_queues_a_few_and_turns_the_rest_away() {
        let gate = Gate::new(2, 1);
        let a = gate.enter().await.unwrap();
        let _b = gate.enter().await.unwrap();
        // The third waits in line, so the fourth finds the line full.
        let waiting = {
            let gate = gate.clone();
            tokio::spawn(async move { gate.enter().await })
        };
        for _ in 0..1000 {
            if gate.in_line.load(Ordering::Acquire) == 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let refused = gate.enter().await.unwrap_err();
        assert_eq!(
            refused,
            Busy {
                running: 2,
                waiting: 1
            }
        );
        assert!(!refused.to_string().contains('\n'));
        // A pass given back lets the one in line run, and frees its place in line.
        drop(a);
        let c = tokio::time::timeout(Duration::from_secs(30), waiting)
            .await
            .expect("the one in line runs once a pass is given back")
            .unwrap();
        assert!(c.is_ok());
        assert_eq!(gate.in_line.load(Ordering::Acquire), 0);
    }

    #[tokio::test]
    async fn a_request_dropped_while_in_line_gives_its_place_back() {
        let gate = Gate::new(1, 1);
        let _a = gate.enter().await.unwrap();
        let gone = tokio::time::timeout(Duration::from_millis(50), gate.enter()).await;
        assert!(gone.is_err(), "it waited in line");
        assert_eq!(gate.in_line.load(Ordering::Acquire), 0);
        // The place is free again: the next one waits rather than being refused.
        let next = tokio::time::timeout(Duration::from_millis(50), gate.enter()).await;
        assert!(next.is_err(), "it waited in line too");
    }
}
