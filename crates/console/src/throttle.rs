//! Failed logins counted per source address, so that guessing passwords stops at a few a
//! minute: past [`FAILURES`] unverified attempts within [`WINDOW`], a source is answered 429
//! (with the seconds left as `Retry-After`) and no hash is computed for it. An IPv6 source
//! counts as its /64, since one host holds a whole /64.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Attempts a source may make without success within [`WINDOW`].
pub const FAILURES: u32 = 10;
/// How long a source's count of failures is kept, from its first failure.
pub const WINDOW: Duration = Duration::from_secs(60);
/// Sources whose counts are kept at once; past it the oldest count is dropped.
const SOURCES: usize = 4096;

/// Where attempts come from, as counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Source(IpAddr);

impl Source {
    fn of(addr: IpAddr) -> Source {
        match addr {
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => Source(IpAddr::V4(v4)),
                None => {
                    let prefix = u128::from(v6) & !((1u128 << 64) - 1);
                    Source(IpAddr::V6(Ipv6Addr::from(prefix)))
                }
            },
            v4 => Source(v4),
        }
    }
}

/// A source's attempts since `start`.
#[derive(Debug, Clone, Copy)]
struct Window {
    start: Instant,
    attempts: u32,
}

/// The attempts of every recent source.
#[derive(Debug, Default)]
pub struct Throttle {
    sources: Mutex<HashMap<Source, Window>>,
}

impl Throttle {
    /// Counts an attempt from `addr` that is about to be checked, or refuses it: `Err` holds
    /// how long until the source may try again.
    pub fn attempt(&self, addr: IpAddr, now: Instant) -> Result<(), Duration> {
        let mut sources = self.sources.lock().unwrap_or_else(PoisonError::into_inner);
        let source = Source::of(addr);
        if !sources.contains_key(&source) && sources.len() >= SOURCES {
            sources.retain(|_, w| now.duration_since(w.start) < WINDOW);
            if sources.len() >= SOURCES
                && let Some(oldest) = sources.iter().min_by_key(|(_, w)| w.start).map(|(s, _)| *s)
            {
                sources.remove(&oldest);
            }
        }
        let window = sources.entry(source).or_insert(Window {
            start: now,
            attempts: 0,
        });
        let age = now.duration_since(window.start);
        if age >= WINDOW {
            *window = Window {
                start: now,
                attempts: 0,
            };
        } else if window.attempts >= FAILURES {
            return Err(WINDOW - age);
        }
        window.attempts += 1;
        Ok(())
    }

    /// An attempt from `addr` succeeded: its count is forgotten.
    pub fn succeeded(&self, addr: IpAddr) {
        self.sources
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&Source::of(addr));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_is_refused_past_its_failures_until_the_window_ends() {
        let t = Throttle::default();
        let a: IpAddr = "127.0.0.1".parse().unwrap();
        let b: IpAddr = "127.0.0.2".parse().unwrap();
        let now = Instant::now();
        for _ in 0..FAILURES {
            assert_eq!(t.attempt(a, now), Ok(()));
        }
        let later = now + Duration::from_secs(20);
        assert_eq!(t.attempt(a, later), Err(Duration::from_secs(40)));
        assert_eq!(t.attempt(b, later), Ok(()), "another source is not");
        assert_eq!(t.attempt(a, now + WINDOW), Ok(()), "a new window");
        t.succeeded(a);
        for _ in 0..FAILURES {
            assert_eq!(t.attempt(a, now + WINDOW), Ok(()), "forgotten on success");
        }
    }

    #[test]
    fn an_ipv6_host_counts_as_its_64() {
        let t = Throttle::default();
        let now = Instant::now();
        for i in 0..FAILURES {
            let addr: IpAddr = format!("2001:db8::{i:x}").parse().unwrap();
            assert_eq!(t.attempt(addr, now), Ok(()));
        }
        let next: IpAddr = "2001:db8::ffff:1".parse().unwrap();
        assert!(t.attempt(next, now).is_err());
        let other: IpAddr = "2001:db8:0:1::1".parse().unwrap();
        assert_eq!(t.attempt(other, now), Ok(()));
    }

    #[test]
    fn the_table_stays_bounded() {
        let t = Throttle::default();
        let now = Instant::now();
        for i in 0..(SOURCES as u32 + 10) {
            let addr = IpAddr::V4(std::net::Ipv4Addr::from(0x0a00_0000 + i));
            assert_eq!(t.attempt(addr, now), Ok(()));
        }
        assert_eq!(t.sources.lock().unwrap().len(), SOURCES);
    }
}
