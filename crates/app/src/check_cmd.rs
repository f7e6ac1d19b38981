//! `tapflow check`: a Nagios/Icinga plugin. Two readings of a running capture's counters,
//! `--interval` apart, give its drop ratio (packets dropped by the kernel or by tapflow, per
//! packet received) and its packet rate; each is held against Nagios threshold ranges
//! (`-w`/`-c DROP,RATE`). Prints one status line with performance data and exits 0 (OK),
//! 1 (WARNING), 2 (CRITICAL) or 3 (UNKNOWN).
//!
//! Ranges follow the Nagios plugin guidelines: `10` alerts outside 0..10, `10:` below 10,
//! `~:10` above 10, `10:20` outside 10..20, `@10:20` inside it.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use tapflow_engine::probe::Stats;

use crate::cli::CheckArgs;
use crate::stats_cmd::{control_path, read};

/// Exit code of an OK check.
pub const OK: u8 = 0;
/// Exit code of a WARNING.
pub const WARNING: u8 = 1;
/// Exit code of a CRITICAL.
pub const CRITICAL: u8 = 2;
/// Exit code when the check could not be made.
pub const UNKNOWN: u8 = 3;

/// A Nagios threshold range.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Range {
    lo: f64,
    hi: f64,
    /// `@`: alert inside the range instead of outside.
    inside: bool,
}

impl Range {
    /// Parses a range: `[@][LO:][HI]`, `~` for minus infinity.
    pub fn parse(s: &str) -> Result<Range, String> {
        let bad = || format!("'{s}' is not a Nagios range (N, N:, ~:N, N:M or @N:M)");
        let (inside, body) = match s.strip_prefix('@') {
            Some(b) => (true, b),
            None => (false, s),
        };
        let num = |t: &str| t.parse::<f64>().ok().filter(|v| v.is_finite());
        let (lo, hi) = match body.split_once(':') {
            None => (0.0, num(body).ok_or_else(bad)?),
            Some((l, h)) => {
                let lo = if l == "~" {
                    f64::NEG_INFINITY
                } else {
                    num(l).ok_or_else(bad)?
                };
                let hi = if h.is_empty() {
                    f64::INFINITY
                } else {
                    num(h).ok_or_else(bad)?
                };
                (lo, hi)
            }
        };
        if lo > hi {
            return Err(format!("range '{s}' has its start above its end"));
        }
        Ok(Range { lo, hi, inside })
    }

    /// Whether `v` raises the alert.
    pub fn alerts(&self, v: f64) -> bool {
        let within = self.lo <= v && v <= self.hi;
        within == self.inside
    }
}

/// Thresholds for the two values; either may be absent.
type Pair = (Option<Range>, Option<Range>);

fn pair(s: Option<&str>, flag: &str) -> Result<(Pair, String), String> {
    let Some(s) = s else {
        return Ok(((None, None), String::new()));
    };
    let (drop, rate) = s.split_once(',').unwrap_or((s, ""));
    let one = |t: &str| -> Result<Option<Range>, String> {
        if t.is_empty() {
            Ok(None)
        } else {
            Range::parse(t.trim_end_matches('%'))
                .map(Some)
                .map_err(|e| format!("{flag}: {e}"))
        }
    };
    Ok(((one(drop)?, one(rate)?), s.to_string()))
}

/// What the two readings say.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Measured {
    /// Dropped per received, in percent.
    pub drop_percent: f64,
    /// Received packets per second.
    pub rate: f64,
}

/// Drop ratio and rate between two readings `secs` apart.
pub fn measure(before: &Stats, after: &Stats, secs: f64) -> Measured {
    let (b, a) = (before.total().totals, after.total().totals);
    let received = a.received.saturating_sub(b.received) as f64;
    let dropped = (a.dropped_kernel + a.dropped_ours)
        .saturating_sub(b.dropped_kernel + b.dropped_ours) as f64;
    Measured {
        drop_percent: if received > 0.0 {
            dropped * 100.0 / received
        } else {
            0.0
        },
        rate: received / secs,
    }
}

/// The status and its line, given the measurement and the thresholds.
pub fn verdict(m: Measured, warn: Pair, crit: Pair, texts: (&str, &str)) -> (u8, String) {
    let hits = |p: Pair| {
        let d = p.0.is_some_and(|r| r.alerts(m.drop_percent));
        let r = p.1.is_some_and(|r| r.alerts(m.rate));
        (d, r)
    };
    let (cd, cr) = hits(crit);
    let (wd, wr) = hits(warn);
    let (code, word) = if cd || cr {
        (CRITICAL, "CRITICAL")
    } else if wd || wr {
        (WARNING, "WARNING")
    } else {
        (OK, "OK")
    };
    let part = |s: &str, i: usize| {
        s.split(',')
            .nth(i)
            .unwrap_or("")
            .trim_end_matches('%')
            .to_string()
    };
    let (w, c) = texts;
    let line = format!(
        "TAPFLOW {word} - drop {:.3}%, {:.0} pkt/s | drop={:.4}%;{};{};0;100 rate={:.1};{};{};0",
        m.drop_percent,
        m.rate,
        m.drop_percent,
        part(w, 0),
        part(c, 0),
        m.rate,
        part(w, 1),
        part(c, 1),
    );
    (code, line)
}

/// Runs the check; prints its line on stdout.
pub fn run(a: &CheckArgs) -> ExitCode {
    let unknown = |why: String| {
        println!("TAPFLOW UNKNOWN - {why}");
        ExitCode::from(UNKNOWN)
    };
    let (warn, wtext) = match pair(a.warning.as_deref(), "-w") {
        Ok(p) => p,
        Err(e) => return unknown(e),
    };
    let (crit, ctext) = match pair(a.critical.as_deref(), "-c") {
        Ok(p) => p,
        Err(e) => return unknown(e),
    };
    if !(a.interval.is_finite() && a.interval > 0.0 && a.interval <= 300.0) {
        return unknown(format!("--interval {} is not 0 to 300 seconds", a.interval));
    }
    let reading = || {
        control_path(&a.probe)
            .and_then(|p| read(&p))
            .map_err(|e| match e {
                crate::Failure::Usage(m) | crate::Failure::Runtime(m) => m,
            })
    };
    let before = match reading() {
        Ok(r) => r,
        Err(e) => return unknown(e),
    };
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(a.interval));
    let after = match reading() {
        Ok(r) => r,
        Err(e) => return unknown(e),
    };
    let m = measure(&before, &after, t0.elapsed().as_secs_f64());
    let (code, line) = verdict(m, warn, crit, (&wtext, &ctext));
    println!("{line}");
    ExitCode::from(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nagios_ranges() {
        let r = |s: &str| Range::parse(s).unwrap();
        assert!(r("10").alerts(10.5) && !r("10").alerts(10.0) && r("10").alerts(-1.0));
        assert!(r("10:").alerts(9.0) && !r("10:").alerts(1e9));
        assert!(r("~:10").alerts(11.0) && !r("~:10").alerts(-1e9));
        assert!(r("10:20").alerts(21.0) && !r("10:20").alerts(15.0));
        assert!(r("@10:20").alerts(15.0) && !r("@10:20").alerts(21.0));
        assert!(Range::parse("20:10").is_err());
        assert!(Range::parse("x").is_err());
    }

    #[test]
    fn verdicts_at_each_threshold() {
        let (w, _) = pair(Some("1,1000:"), "-w").unwrap();
        let (c, _) = pair(Some("5%,10:"), "-c").unwrap();
        let at = |d: f64, r: f64| {
            verdict(
                Measured {
                    drop_percent: d,
                    rate: r,
                },
                w,
                c,
                ("1,1000:", "5%,10:"),
            )
        };
        assert_eq!(at(0.5, 5000.0).0, OK);
        assert_eq!(at(2.0, 5000.0).0, WARNING);
        assert_eq!(at(0.0, 500.0).0, WARNING);
        assert_eq!(at(6.0, 5000.0).0, CRITICAL);
        assert_eq!(at(0.0, 5.0).0, CRITICAL);
        assert_eq!(
            at(0.5, 5000.0).1,
            "TAPFLOW OK - drop 0.500%, 5000 pkt/s | drop=0.5000%;1;5;0;100 rate=5000.0;1000:;10:;0"
        );
    }
}
