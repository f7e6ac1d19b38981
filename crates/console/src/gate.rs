//! What the console does at once: a few store queries run, a few more wait their turn in line,
//! and the rest are turned away at once (the API answers `503 Service Unavailable`); answers on
//! their way to clients hold a bounded number of bytes together, and one past them is turned
//! away too.
//!
//! A query's memory grows with what it reads and returns, an answer stays in memory until the
//! client has read it, and the console may live inside a collector, whose flows are lost if the
//! process runs out of memory: a crowd of requests, or of clients that do not read, must wait or
//! be refused rather than all be served together.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::body::Bytes;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Admits `running` queries at once, keeps `waiting` more in line, and lets answers of
/// `sending` bytes together be on their way.
#[derive(Debug, Clone)]
pub struct Gate {
    running: Arc<Semaphore>,
    in_line: Arc<AtomicUsize>,
    max_running: usize,
    max_waiting: usize,
    /// One permit per KiB of answers on their way.
    sending: Arc<Semaphore>,
    max_sending_kib: usize,
}

/// The gate is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Busy {
    /// Every place running and in line is taken.
    #[error(
        "the console is busy: {running} queries running and {waiting} waiting already; try again shortly"
    )]
    Queries {
        /// Queries that run at once.
        running: usize,
        /// Queries that wait in line at most.
        waiting: usize,
    },
    /// The answers on their way to clients leave no room for this one.
    #[error(
        "the console is busy: answers of {kib} KiB together are on their way to clients already; try again shortly"
    )]
    Sending {
        /// The answers' bytes that may be on their way together, in KiB.
        kib: usize,
    },
}

/// An answer's bytes and their share of [`Gate`]'s room, given back when the bytes are dropped
/// (sent, or the client gone).
struct Held {
    body: Vec<u8>,
    _permit: OwnedSemaphorePermit,
}

impl AsRef<[u8]> for Held {
    fn as_ref(&self) -> &[u8] {
        &self.body
    }
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
    /// A gate running `running` (≥ 1) queries at once with `waiting` more in line, and answers
    /// of `sending` bytes together on their way.
    pub fn new(running: usize, waiting: usize, sending: usize) -> Gate {
        let running = running.max(1);
        let kib = sending.div_ceil(1024).clamp(1, Semaphore::MAX_PERMITS);
        Gate {
            running: Arc::new(Semaphore::new(running)),
            in_line: Arc::new(AtomicUsize::new(0)),
            max_running: running,
            max_waiting: waiting,
            sending: Arc::new(Semaphore::new(kib)),
            max_sending_kib: kib,
        }
    }

    /// `body` as bytes that take their share of the room for answers on their way until they
    /// are dropped, or [`Busy`] at once if the room is taken.
    pub fn hold(&self, body: Vec<u8>) -> Result<Bytes, Busy> {
        let busy = Busy::Sending {
            kib: self.max_sending_kib,
        };
        let kib = u32::try_from(body.len().div_ceil(1024).max(1)).map_err(|_| busy)?;
        let permit = self
            .sending
            .clone()
            .try_acquire_many_owned(kib)
            .map_err(|_| busy)?;
        Ok(Bytes::from_owner(Held {
            body,
            _permit: permit,
        }))
    }

    /// A place among the running: at once if one is free, else after those in line before, or
    /// [`Busy`] at once if the line is full too.
    pub async fn enter(&self) -> Result<Pass, Busy> {
        let busy = Busy::Queries {
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
        let gate = Gate::new(2, 1, 1024);
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
            Busy::Queries {
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
        let gate = Gate::new(1, 1, 1024);
        let _a = gate.enter().await.unwrap();
        let gone = tokio::time::timeout(Duration::from_millis(50), gate.enter()).await;
        assert!(gone.is_err(), "it waited in line");
        assert_eq!(gate.in_line.load(Ordering::Acquire), 0);
        // The place is free again: the next one waits rather than being refused.
        let next = tokio::time::timeout(Duration::from_millis(50), gate.enter()).await;
        assert!(next.is_err(), "it waited in line too");
    }

    #[test]
    fn answers_on_their_way_hold_their_bytes_until_dropped() {
        let gate = Gate::new(1, 0, 10 * 1024);
        let a = gate.hold(vec![7; 6 * 1024]).unwrap();
        assert_eq!(&a[..], &[7; 6 * 1024][..]);
        let b = gate.hold(vec![1; 4 * 1024]).unwrap();
        // 6 + 4 KiB fill the room: one byte more is turned away.
        assert_eq!(gate.hold(vec![0]), Err(Busy::Sending { kib: 10 }));
        // A copy shares the bytes: the room is given back once the last one is dropped.
        let a2 = a.slice(1..);
        drop(a);
        assert!(gate.hold(vec![0]).is_err());
        drop(a2);
        let c = gate.hold(vec![0; 6 * 1024]).unwrap();
        assert!(
            gate.hold(vec![0; 11 * 1024]).is_err(),
            "larger than the room"
        );
        drop((b, c));
        assert!(gate.hold(vec![0; 10 * 1024]).is_ok());
    }
}
