//! The learnt baseline: limits for each group's total and for all traffic, learnt from what a
//! store kept at the same hour of the day over the past days.
//!
//! For the hour starting at `H` (UTC), each of the past `days` days gives the hour `H − d × 24 h`.
//! Its per-minute traffic comes from the store through [`QueryEngine`] (a time series of 1-minute
//! buckets: the rollup tier answers it where it can, and the flows a group's prefixes select
//! otherwise), so a Parquet directory and ClickHouse both serve. Each minute stands for its mean
//! rate a second (its packets / 60, its bytes × 8 / 60): the percentile is over minute means,
//! not over seconds. A minute counts when the store holds any traffic in it (a group that
//! received nothing then counts 0); a minute the store holds nothing for (the store did not
//! exist, or the collector was down) does not count. A limit is
//! `max(floor, factor × percentile)`; with fewer than [`MIN_MINUTES`] minutes there is none and
//! the static limit applies.
//!
//! The hours are computed on a thread of their own, never on the path of the traffic: the next
//! hour is asked for while the current one is measured, so on live traffic the limits are ready
//! when the hour turns (until they are, the static ones apply). Recorded traffic (a capture file,
//! a store window), whose hours are not the clock's, waits for its hour's limits.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, Condvar, Mutex};

use serde::Deserialize;
use tapflow_store::query::{
    Filter, Kind, Metric, Net, Query, QueryEngine, QueryResult, Term, Window,
};
use tapflow_wire::rules::Prefix;

use crate::detect::threshold::{Group, Limits};

/// Days looked back by default.
pub const DEFAULT_DAYS: u32 = 7;
/// The limit is this many times the percentile by default.
pub const DEFAULT_FACTOR: f64 = 3.0;
/// The percentile of the minute means, by default.
pub const DEFAULT_PERCENTILE: f64 = 95.0;
/// The lowest learnt packets limit by default: a quiet network does not alert on a burst.
pub const DEFAULT_FLOOR_PACKETS: u64 = 5_000;
/// The lowest learnt bits limit by default.
pub const DEFAULT_FLOOR_BITS: u64 = 50_000_000;
/// Seconds in a row a learnt limit must be reached before an alert starts, by default.
pub const DEFAULT_SUSTAIN: u64 = 5;
/// The fewest minutes a baseline is learnt from.
pub const MIN_MINUTES: usize = 30;

const MINUTE_US: i64 = 60_000_000;
const HOUR_US: i64 = 3_600_000_000;
const DAY_US: i64 = 24 * HOUR_US;

/// How the baseline is learnt: the `[baseline]` table of the thresholds file.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BaselineConfig {
    /// The store to learn from (a directory or a ClickHouse URL; `--baseline` sets it too).
    pub store: Option<String>,
    /// Days looked back.
    pub days: u32,
    /// The limit is this many times the percentile.
    pub factor: f64,
    /// The percentile (0–100) of the minute means.
    pub percentile: f64,
    /// The lowest learnt limits (packets and bits a second).
    pub floor: Limits,
    /// Seconds in a row a learnt limit must be reached before its alert starts: the limit
    /// comes from minute means, and a second of a burst (a page of a thousand requests) is
    /// no flood.
    pub sustain: u64,
}

impl Default for BaselineConfig {
    fn default() -> BaselineConfig {
        BaselineConfig {
            store: None,
            days: DEFAULT_DAYS,
            factor: DEFAULT_FACTOR,
            percentile: DEFAULT_PERCENTILE,
            floor: Limits {
                packets: Some(DEFAULT_FLOOR_PACKETS),
                bits: Some(DEFAULT_FLOOR_BITS),
                flows: None,
            },
            sustain: DEFAULT_SUSTAIN,
        }
    }
}

impl BaselineConfig {
    /// Checks the values; the error names the bad one.
    pub fn check(&self) -> Result<(), String> {
        if self.days == 0 || self.days > 366 {
            return Err(format!(
                "baseline days {} is not between 1 and 366",
                self.days
            ));
        }
        if !(self.factor > 0.0 && self.factor.is_finite()) {
            return Err(format!("baseline factor {} is not above 0", self.factor));
        }
        if self.sustain == 0 || self.sustain > 3600 {
            return Err(format!(
                "baseline sustain {} is not between 1 and 3600 seconds",
                self.sustain
            ));
        }
        if !(0.0..=100.0).contains(&self.percentile) {
            return Err(format!(
                "baseline percentile {} is not between 0 and 100",
                self.percentile
            ));
        }
        Ok(())
    }
}

/// The `p`th percentile (0–100) of `v` by nearest rank (the smallest value with at least p % of
/// the values at or under it); `None` for no values. Sorts `v`.
pub fn percentile(v: &mut [f64], p: f64) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let rank = (p / 100.0 * v.len() as f64).ceil() as usize;
    Some(v[rank.clamp(1, v.len()) - 1])
}

/// The hour (hours since 1970 UTC) a second lies in.
pub fn hour_of(second: u64) -> u64 {
    second / 3600
}

/// The windows of the same hour of the day as `hour` over the `days` days before it, newest
/// first.
pub fn past_windows(hour: u64, days: u32) -> Vec<Window> {
    let start = hour as i64 * HOUR_US;
    (1..=i64::from(days))
        .map(|d| Window {
            start_us: start - d * DAY_US,
            end_us: start - d * DAY_US + HOUR_US,
        })
        .filter(|w| w.start_us >= 0)
        .collect()
}

/// What a percentile became: the rates and the limits.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Learnt {
    /// The percentile of the minute means: packets and bits a second.
    pub packets: f64,
    /// Bits a second.
    pub bits: f64,
    /// The limits: `max(floor, factor × percentile)`, flows not checked.
    pub limits: Limits,
}

/// The baseline of one hour.
#[derive(Debug, Clone, PartialEq)]
pub struct Hour {
    /// Hours since 1970 UTC.
    pub hour: u64,
    /// Minutes of the past days that counted.
    pub minutes: usize,
    /// All traffic's, if learnt.
    pub total: Option<Learnt>,
    /// Each group's total, in the thresholds file's order.
    pub groups: Vec<Option<Learnt>>,
    /// Why nothing was learnt, if the store failed.
    pub error: Option<String>,
}

impl Hour {
    /// One line saying what was learnt, for the terminal.
    pub fn describe(&self, names: &[String]) -> String {
        let when = crate::detect::alert::rfc3339(self.hour * 3600);
        if let Some(e) = &self.error {
            return format!("baseline for {when}: {e}; static limits apply");
        }
        if self.total.is_none() {
            return format!(
                "baseline for {when}: {} minutes in the store (fewer than {MIN_MINUTES}); static limits apply",
                self.minutes
            );
        }
        let one = |name: &str, l: &Option<Learnt>| match l {
            Some(l) => format!(
                "{name} {} packets/s, {} bit/s (p {:.0} packets/s, {:.0} bit/s)",
                l.limits.packets.unwrap_or(0),
                l.limits.bits.unwrap_or(0),
                l.packets,
                l.bits
            ),
            None => format!("{name} static"),
        };
        let mut s = format!(
            "baseline for {when} from {} minutes: {}",
            self.minutes,
            one("total", &self.total)
        );
        for (n, g) in names.iter().zip(&self.groups) {
            s += "; ";
            s += &one(&format!("group {n}"), g);
        }
        s
    }
}

/// The filter of the one-way flows whose destination is in group `g` and in no group with a
/// longer prefix inside it (a destination belongs to its longest matching prefix's group).
pub fn group_filter(groups: &[Group], g: usize) -> Option<Filter> {
    let net = |p: &Prefix| Net {
        addr: tapflow_store::schema::addr16(p.ipv6, &p.addr),
        len: if p.ipv6 { p.len } else { 96 + p.len },
    };
    let dst = |p: &Prefix| Filter::Term(Term::Addr(tapflow_store::query::Side::Dst, net(p)));
    let own = &groups.get(g)?.prefixes;
    let mut inside: Vec<Filter> = Vec::new();
    for (i, o) in groups.iter().enumerate() {
        if i == g {
            continue;
        }
        for q in &o.prefixes {
            let longer = own
                .iter()
                .any(|p| p.ipv6 == q.ipv6 && q.len > p.len && p.contains(&q.addr));
            if longer {
                inside.push(dst(q));
            }
        }
    }
    let any = |mut v: Vec<Filter>| match v.len() {
        0 => None,
        1 => v.pop(),
        _ => Some(Filter::Or(v)),
    };
    let mine = any(own.iter().map(dst).collect())?;
    Some(match any(inside) {
        None => mine,
        Some(x) => Filter::And(vec![mine, Filter::Not(Box::new(x))]),
    })
}

/// Per minute (its start, µs): packets and bytes.
type Minutes = BTreeMap<i64, (u64, u64)>;

fn minutes(engine: &dyn QueryEngine, w: Window, filter: Option<Filter>) -> Result<Minutes, String> {
    let q = Query {
        window: Some(w),
        filter,
        kind: Kind::Series {
            every_us: MINUTE_US,
            key: None,
            order_by: Metric::Packets,
            n: 0,
        },
    };
    let answer = engine.run(&q).map_err(|e| e.to_string())?;
    let QueryResult::Table { rows, .. } = answer.result else {
        return Err("the store answered no time series".into());
    };
    Ok(rows
        .into_iter()
        .filter_map(|r| Some((r.time_us?, (r.counters.packets, r.counters.bytes))))
        .collect())
}

/// The limits of one series of minute samples (packets, bytes per minute).
pub fn learn(samples: &[(u64, u64)], c: &BaselineConfig) -> Option<Learnt> {
    if samples.len() < MIN_MINUTES {
        return None;
    }
    let mut p: Vec<f64> = samples.iter().map(|s| s.0 as f64 / 60.0).collect();
    let mut b: Vec<f64> = samples.iter().map(|s| s.1 as f64 * 8.0 / 60.0).collect();
    let packets = percentile(&mut p, c.percentile)?;
    let bits = percentile(&mut b, c.percentile)?;
    let limit =
        |x: f64, floor: Option<u64>| Some(((c.factor * x).ceil() as u64).max(floor.unwrap_or(0)));
    Some(Learnt {
        packets,
        bits,
        limits: Limits {
            packets: limit(packets, c.floor.packets),
            bits: limit(bits, c.floor.bits),
            flows: None,
        },
    })
}

/// Computes the baseline of `hour` from `engine`.
pub fn compute(engine: &dyn QueryEngine, c: &BaselineConfig, groups: &[Group], hour: u64) -> Hour {
    let mut out = Hour {
        hour,
        minutes: 0,
        total: None,
        groups: vec![None; groups.len()],
        error: None,
    };
    match samples(engine, c, groups, hour) {
        Ok((total, per_group)) => {
            out.minutes = total.len();
            out.total = learn(&total, c);
            if out.total.is_some() {
                out.groups = per_group.iter().map(|s| learn(s, c)).collect();
            }
        }
        Err(e) => out.error = Some(e),
    }
    out
}

/// The minute samples of all traffic and of each group, over the past days' same hour.
#[allow(clippy::type_complexity)]
fn samples(
    engine: &dyn QueryEngine,
    c: &BaselineConfig,
    groups: &[Group],
    hour: u64,
) -> Result<(Vec<(u64, u64)>, Vec<Vec<(u64, u64)>>), String> {
    let mut total = Vec::new();
    let mut per_group = vec![Vec::new(); groups.len()];
    for w in past_windows(hour, c.days) {
        let all = minutes(engine, w, None)?;
        if all.is_empty() {
            continue;
        }
        total.extend(all.values().copied());
        for (g, samples) in per_group.iter_mut().enumerate() {
            let mine = minutes(engine, w, group_filter(groups, g))?;
            samples.extend(all.keys().map(|t| mine.get(t).copied().unwrap_or((0, 0))));
        }
    }
    Ok((total, per_group))
}

/// Says what was learnt (the terminal's line).
pub type Note = Box<dyn Fn(&str) + Send + Sync>;

struct Shared {
    done: Mutex<BTreeMap<u64, Arc<Hour>>>,
    ready: Condvar,
}

/// The learner: computes hours on its own thread and keeps the ones asked for.
pub struct Learner {
    shared: Arc<Shared>,
    ask: Sender<u64>,
    asked: BTreeSet<u64>,
    current: Option<Arc<Hour>>,
    note: Option<Note>,
    names: Vec<String>,
    /// Hours since 1970 UTC of the clock, for telling live traffic from recorded.
    clock: fn() -> u64,
}

impl std::fmt::Debug for Learner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Learner")
            .field("asked", &self.asked)
            .field("current", &self.current)
            .finish_non_exhaustive()
    }
}

fn wall_hour() -> u64 {
    hour_of(tapflow_sys::clock::realtime_ns() / 1_000_000_000)
}

impl Learner {
    /// Starts learning from `engine` for `groups`, the clock's current hour and the next one
    /// first; `note` hears one line per hour as it comes into use.
    pub fn start(
        engine: Box<dyn QueryEngine + Send + Sync>,
        config: BaselineConfig,
        groups: Vec<Group>,
        note: Option<Note>,
    ) -> Learner {
        Learner::with_clock(engine, config, groups, note, wall_hour)
    }

    fn with_clock(
        engine: Box<dyn QueryEngine + Send + Sync>,
        config: BaselineConfig,
        groups: Vec<Group>,
        note: Option<Note>,
        clock: fn() -> u64,
    ) -> Learner {
        let shared = Arc::new(Shared {
            done: Mutex::new(BTreeMap::new()),
            ready: Condvar::new(),
        });
        let (ask, asks) = channel::<u64>();
        let s = Arc::clone(&shared);
        let names: Vec<String> = groups.iter().map(|g| g.name.clone()).collect();
        let _ = std::thread::Builder::new()
            .name("baseline".into())
            .spawn(move || {
                for hour in asks {
                    let h = compute(engine.as_ref(), &config, &groups, hour);
                    let mut done = s.done.lock().unwrap_or_else(|e| e.into_inner());
                    done.insert(hour, Arc::new(h));
                    // Hours long past are not asked for again.
                    while done.len() > 4 {
                        done.pop_first();
                    }
                    s.ready.notify_all();
                }
            });
        let mut l = Learner {
            shared,
            ask,
            asked: BTreeSet::new(),
            current: None,
            note,
            names,
            clock,
        };
        let now = clock();
        l.request(now);
        l.request(now + 1);
        l
    }

    fn request(&mut self, hour: u64) {
        if self.asked.insert(hour) {
            let _ = self.ask.send(hour);
        }
    }

    /// The baseline of the hour `second` lies in, asking for the next one too. Live traffic
    /// (the clock's hour) takes what is ready; recorded traffic waits for its hour.
    pub fn hour(&mut self, second: u64) -> Option<Arc<Hour>> {
        let hour = hour_of(second);
        if let Some(c) = &self.current
            && c.hour == hour
        {
            return Some(Arc::clone(c));
        }
        self.request(hour);
        self.request(hour + 1);
        let wait = hour != (self.clock)();
        let mut done = self.shared.done.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(h) = done.get(&hour) {
                let h = Arc::clone(h);
                drop(done);
                if let Some(n) = &self.note {
                    n(&h.describe(&self.names));
                }
                self.current = Some(Arc::clone(&h));
                return Some(h);
            }
            if !wait {
                return None;
            }
            done = self
                .shared
                .ready
                .wait(done)
                .unwrap_or_else(|e| e.into_inner());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_by_nearest_rank() {
        let mut v: Vec<f64> = (1..=100).rev().map(f64::from).collect();
        assert_eq!(percentile(&mut v, 95.0), Some(95.0));
        assert_eq!(percentile(&mut v, 100.0), Some(100.0));
        assert_eq!(percentile(&mut v, 0.0), Some(1.0));
        let mut v = vec![3.0, 1.0, 2.0];
        assert_eq!(percentile(&mut v, 50.0), Some(2.0));
        assert_eq!(percentile(&mut v, 95.0), Some(3.0));
        assert_eq!(percentile(&mut [], 95.0), None);
        // 57 quiet minutes and 3 busy ones: the busy 5 % is cut off.
        let mut v: Vec<f64> = (0..60).map(|i| if i < 3 { 1e6 } else { 10.0 }).collect();
        assert_eq!(percentile(&mut v, 95.0), Some(10.0));
        v[3] = 1e6;
        assert_eq!(percentile(&mut v, 95.0), Some(1e6));
    }

    #[test]
    fn past_windows_are_the_same_hour_on_the_days_before() {
        // 2025-11-25T14:00:00Z.
        let hour = hour_of(1_764_079_200);
        assert_eq!(hour * 3600, 1_764_079_200);
        assert_eq!(hour_of(1_764_079_200 + 3599), hour);
        let w = past_windows(hour, 7);
        assert_eq!(w.len(), 7);
        assert_eq!(w[0].start_us, (1_764_079_200 - 86_400) * 1_000_000);
        assert_eq!(w[0].end_us - w[0].start_us, 3_600_000_000);
        assert_eq!(w[6].start_us, (1_764_079_200 - 7 * 86_400) * 1_000_000);
        // Nothing before 1970.
        assert_eq!(past_windows(30, 7).len(), 1);
    }

    #[test]
    fn limits_are_the_factor_times_the_percentile_above_the_floor() {
        let c = BaselineConfig::default();
        // 60 minutes of 12,000 packets (200/s) of 1,000 bytes, then 60 of 600,000 (10k/s).
        let mut s = vec![(12_000u64, 12_000_000u64); 60];
        assert_eq!(learn(&s[..29], &c), None);
        let l = learn(&s, &c).unwrap();
        assert_eq!(l.packets, 200.0);
        assert_eq!(l.bits, 1_600_000.0);
        // 3 × 200/s is under the floor.
        assert_eq!(l.limits.packets, Some(DEFAULT_FLOOR_PACKETS));
        assert_eq!(l.limits.bits, Some(DEFAULT_FLOOR_BITS));
        s.extend([(600_000, 600_000_000); 60]);
        let l = learn(&s, &c).unwrap();
        assert_eq!(l.packets, 10_000.0);
        assert_eq!(l.limits.packets, Some(30_000));
        assert_eq!(l.limits.bits, Some(240_000_000));
        assert_eq!(l.limits.flows, None);
    }

    #[test]
    fn a_group_excludes_the_longer_prefixes_of_other_groups_inside_it() {
        let g = |name: &str, p: &[&str]| Group {
            name: name.into(),
            prefixes: p.iter().map(|s| s.parse().unwrap()).collect(),
            host: Limits::DEFAULT,
            total: None,
        };
        let groups = [
            g("net", &["10.0.0.0/8"]),
            g("dns", &["10.1.0.0/16", "2001:db8::/32"]),
        ];
        let mapped = |s: &str| {
            let p: Prefix = s.parse().unwrap();
            tapflow_store::schema::addr16(p.ipv6, &p.addr)
        };
        let holds = |f: &Filter, a: &[u8; 16]| -> bool {
            fn h(f: &Filter, a: &[u8; 16]) -> bool {
                match f {
                    Filter::And(v) => v.iter().all(|x| h(x, a)),
                    Filter::Or(v) => v.iter().any(|x| h(x, a)),
                    Filter::Not(x) => !h(x, a),
                    Filter::Term(Term::Addr(_, n)) => n.contains(a),
                    Filter::Term(_) => unreachable!(),
                }
            }
            h(f, a)
        };
        let net = group_filter(&groups, 0).unwrap();
        let dns = group_filter(&groups, 1).unwrap();
        assert!(holds(&net, &mapped("10.2.0.1")));
        assert!(!holds(&net, &mapped("10.1.0.1")));
        assert!(holds(&dns, &mapped("10.1.0.1")));
        assert!(holds(&dns, &mapped("2001:db8::1")));
        assert!(!holds(&dns, &mapped("11.0.0.1")));
        assert!(group_filter(&groups, 2).is_none());
        // A group with no other inside it is its prefixes alone (no empty `or`).
        assert_eq!(
            group_filter(&groups[1..], 0),
            Some(Filter::Or(vec![
                Filter::Term(Term::Addr(
                    tapflow_store::query::Side::Dst,
                    Net {
                        addr: mapped("10.1.0.0"),
                        len: 112
                    }
                )),
                Filter::Term(Term::Addr(
                    tapflow_store::query::Side::Dst,
                    Net {
                        addr: mapped("2001:db8::"),
                        len: 32
                    }
                )),
            ]))
        );
    }

    #[test]
    fn recorded_hours_wait_for_their_baseline_and_live_ones_never_do() {
        fn clock() -> u64 {
            500_000
        }
        let empty = std::env::temp_dir().join(format!("tapflow-baseline-{}", std::process::id()));
        let engine = Box::new(tapflow_store::parquet::ParquetEngine::new(&empty, 1));
        let mut l = Learner::with_clock(engine, BaselineConfig::default(), Vec::new(), None, clock);
        // A recorded hour: waits, and finds nothing learnt in an empty store.
        let h = l.hour(123 * 3600 + 5).unwrap();
        assert_eq!((h.hour, h.minutes, h.total), (123, 0, None));
        assert!(l.asked.contains(&124), "the next hour is asked for ahead");
        // The clock's hour was asked for at the start: it comes without waiting, once ready.
        let mut live = None;
        for _ in 0..600 {
            live = l.hour(500_000 * 3600);
            if live.is_some() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        assert_eq!(live.unwrap().hour, 500_000);
    }
}
