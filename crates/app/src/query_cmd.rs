//! `tapflow query`: nfdump's habits over the flow store. The arguments become one
//! [`Query`]; the store's engine answers it; one printer formats the answer.

use std::io::Write;
use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use tapflow_store::open::{self, Location};
use tapflow_store::query::filter::parse;
use tapflow_store::query::output::{Format, print};
use tapflow_store::query::time::{parse_duration, parse_window};
use tapflow_store::query::{Key, Kind, Metric, Query, QueryEngine, QueryError, ScanStats};
use tapflow_store::schema::Tier;

use crate::Failure;
use crate::cli::QueryArgs;

fn usage(e: QueryError) -> Failure {
    match e {
        QueryError::Parse(m) => Failure::Usage(m),
        QueryError::Store(e) => Failure::Runtime(e.to_string()),
    }
}

/// The query the arguments ask.
fn query(a: &QueryArgs) -> Result<Query, QueryError> {
    let now_us = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64);
    let window = a
        .time
        .as_deref()
        .map(|t| parse_window(t, now_us))
        .transpose()?;
    let filter = if a.filter.is_empty() {
        None
    } else {
        Some(parse(&a.filter.join(" "))?)
    };
    let stat = a
        .stat
        .as_deref()
        .map(|s| -> Result<(Key, Metric), QueryError> {
            match s.rsplit_once('/') {
                // `-s srcip4/24` is a masked key without an order.
                Some((_, len)) if len.bytes().all(|b| b.is_ascii_digit()) => {
                    Ok((s.parse()?, Metric::Bytes))
                }
                Some((key, order)) => Ok((key.parse()?, order.parse()?)),
                None => Ok((s.parse()?, Metric::Bytes)),
            }
        })
        .transpose()?;
    let kind = if let Some(every) = &a.every {
        let (key, order_by) = match stat {
            Some((k, m)) => (Some(k), m),
            None => (None, Metric::Bytes),
        };
        Kind::Series {
            every_us: parse_duration(every)?,
            key,
            order_by,
            n: a.top,
        }
    } else if let Some((key, order_by)) = stat {
        Kind::Top {
            key,
            order_by,
            n: a.top,
        }
    } else if let Some(keys) = &a.aggregate {
        let keys = keys
            .split(',')
            .map(str::parse)
            .collect::<Result<Vec<Key>, _>>()?;
        if let Some(k) = keys.iter().find(|k| k.is_either()) {
            return Err(QueryError::Parse(format!(
                "-a takes directional keys: '{}' counts a flow twice (use -s {} instead)",
                k.name(),
                k.name()
            )));
        }
        Kind::Aggregate {
            keys,
            order_by: a.order.parse()?,
            n: a.top,
        }
    } else if a.summary {
        Kind::Summary
    } else {
        Kind::List { limit: a.count }
    };
    Ok(Query {
        window,
        filter,
        kind,
    })
}

/// Says on stderr where the flows are when a window holds none and the newest flow started
/// before it: a store filled from an old trace, asked for `last 1h`.
fn empty_window_hint(engine: &dyn QueryEngine, q: &Query) {
    let Some(w) = q.window else { return };
    if let Ok(Some(newest)) = engine.newest()
        && newest < w.start_us
    {
        use tapflow_store::query::time::format_time;
        const HOUR_US: i64 = 3_600_000_000;
        let hour = format_time(newest.div_euclid(HOUR_US) * HOUR_US);
        let hour = format!("{}:00", hour[..13].replace(' ', "T"));
        eprintln!(
            "tapflow: no flows in the window; the newest started at {} UTC: -t {hour}Z/1h asks its hour",
            format_time(newest)
        );
    }
}

/// Runs `tapflow query`.
pub fn run(a: &QueryArgs) -> Result<ExitCode, Failure> {
    // A scan's per-batch buffers are freed and taken again thousands of times.
    tapflow_sys::heap::keep_freed_memory(SCAN_BUFFERS);
    let q = query(a).map_err(usage)?;
    let threads = a
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, std::num::NonZero::get));
    let at = match (&a.clickhouse, &a.store) {
        (Some(url), _) => Location::clickhouse(url),
        (None, Some(dir)) => Location::parse(dir),
        (None, None) => return Err(Failure::Usage("query: -R DIR or --clickhouse URL".into())),
    }
    .map_err(|e| Failure::Usage(e.to_string()))?;
    let engine = open::engine(&at, threads, !a.raw).map_err(usage)?;
    if a.interfaces {
        return interfaces(engine.as_ref(), &q, a);
    }
    if a.alerts {
        return alerts(engine.as_ref(), &q, a);
    }
    let answer = engine.run(&q).map_err(usage)?;
    if answer.result.is_empty() {
        empty_window_hint(engine.as_ref(), &q);
    }
    let format = if a.csv {
        Format::Csv
    } else if a.json {
        Format::Json
    } else {
        Format::Table
    };
    let mut out = std::io::stdout().lock();
    match print(&mut out, &q, &answer.result, format).and_then(|()| out.flush()) {
        // A reader that had enough (`| head`) is not a failure.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(ExitCode::SUCCESS),
        r => r.map_err(|e| Failure::Runtime(format!("writing the result: {e}")))?,
    }
    // A rollup's row is a bucket: its first and last are the bucket's bounds, its rates over
    // the bucket, not those of the flows in it.
    if answer.stats.tier_seconds > 0
        && matches!(
            q.kind,
            Kind::Top { .. } | Kind::Aggregate { .. } | Kind::Series { .. }
        )
    {
        eprintln!(
            "first, last, bps and pps per {} bucket of the rollup that answered, not the flows' own (--raw reads the flows)",
            tier_name(answer.stats.tier_seconds)
        );
    }
    if a.stats {
        match &at {
            // The server reads; it says what in its own query log.
            Location::ClickHouse(_) => eprintln!(
                "read: ClickHouse, {}",
                match answer.stats.tier_seconds {
                    0 => "the flow table".to_string(),
                    t => format!("rollup_{}", tier_name(t)),
                }
            ),
            Location::Parquet(_) => eprintln!("{}", stats_line(&answer.stats)),
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The largest freed block the heap keeps for a scan's next batch (glibc's largest mmap
/// threshold).
pub const SCAN_BUFFERS: usize = 32 << 20;

/// The suffix of the tier whose buckets are `seconds` wide (`1m`, `5m`, `1h`).
fn tier_name(seconds: u32) -> &'static str {
    Tier::ALL
        .into_iter()
        .find(|t| t.bucket_us() == i64::from(seconds) * 1_000_000)
        .map_or("?", Tier::suffix)
}

/// `query --interfaces`: one line per exporter, domain and interface.
fn interfaces(engine: &dyn QueryEngine, q: &Query, a: &QueryArgs) -> Result<ExitCode, Failure> {
    let window = q.window.unwrap_or(tapflow_store::query::Window {
        start_us: i64::MIN,
        end_us: i64::MAX,
    });
    let rows = engine.interfaces(window).map_err(usage)?;
    let names =
        tapflow_store::query::interfaces::IfNames::new(engine.interface_names().map_err(usage)?);
    // An interface's name, and its speed: the agent's, or the interfaces file's.
    let named = |r: &tapflow_store::query::interfaces::InterfaceTotals| {
        let name = names
            .get(&r.exporter, r.if_index)
            .map_or("", |n| n.name.as_str());
        (name, names.speed(&r.exporter, r.if_index, r.if_speed))
    };
    let text = if a.json {
        let mut s = String::new();
        for r in &rows {
            let (name, speed) = named(r);
            let mut j = serde_json::to_value(r).map_err(|e| Failure::Runtime(e.to_string()))?;
            j["name"] = name.into();
            j["if_speed"] = speed.into();
            s += &j.to_string();
            s.push('\n');
        }
        s
    } else {
        let sep = if a.csv { "," } else { "  " };
        let mut lines = vec![
            [
                "exporter",
                "domain",
                "if_index",
                "name",
                "samples",
                "first",
                "last",
                "speed",
                "status",
                "in_bytes",
                "out_bytes",
                "in_packets",
                "out_packets",
                "in_errors",
                "in_discards",
                "out_errors",
                "out_discards",
            ]
            .map(String::from)
            .to_vec(),
        ];
        for r in &rows {
            let time = |ns: u64| {
                tapflow_store::query::time::format_time(i64::try_from(ns / 1000).unwrap_or(0))
            };
            let status = match r.if_status & 3 {
                3 => "up",
                1 => "down",
                _ => "admin-down",
            };
            lines.push(vec![
                std::net::Ipv6Addr::from(r.exporter)
                    .to_canonical()
                    .to_string(),
                r.domain.to_string(),
                r.if_index.to_string(),
                named(r).0.to_string(),
                r.samples.to_string(),
                time(r.first_ns),
                time(r.last_ns),
                named(r).1.to_string(),
                status.to_string(),
                r.in_octets.to_string(),
                r.out_octets.to_string(),
                r.in_packets.to_string(),
                r.out_packets.to_string(),
                r.in_errors.to_string(),
                r.in_discards.to_string(),
                r.out_errors.to_string(),
                r.out_discards.to_string(),
            ]);
        }
        let widths: Vec<usize> = (0..lines[0].len())
            .map(|c| lines.iter().map(|l| l[c].len()).max().unwrap_or(0))
            .collect();
        let mut s = String::new();
        for l in &lines {
            let cells: Vec<String> = if a.csv {
                l.iter()
                    .map(|c| tapflow_store::query::output::csv_field(c.clone()))
                    .collect()
            } else {
                l.iter()
                    .zip(&widths)
                    .map(|(c, w)| format!("{c:>w$}"))
                    .collect()
            };
            s += &cells.join(sep);
            s.push('\n');
        }
        s
    };
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(ExitCode::SUCCESS),
        r => r
            .map(|()| ExitCode::SUCCESS)
            .map_err(|e| Failure::Runtime(format!("writing the result: {e}"))),
    }
}

/// `query --alerts`: one line per alert kept in the store.
fn alerts(engine: &dyn QueryEngine, q: &Query, a: &QueryArgs) -> Result<ExitCode, Failure> {
    if q.filter.is_some() {
        return Err(Failure::Usage(
            "--alerts takes no filter: each alert's own query words show its flows".into(),
        ));
    }
    let window = q.window.unwrap_or(tapflow_store::query::Window {
        start_us: i64::MIN,
        end_us: i64::MAX,
    });
    let found = engine.alerts(window).map_err(usage)?;
    if found.unreadable > 0 {
        eprintln!(
            "tapflow: {} lines of the alert log could not be read and are left out",
            found.unreadable
        );
    }
    let mut text = String::new();
    if a.json {
        for r in &found.alerts {
            text += &serde_json::to_string(r).map_err(|e| Failure::Runtime(e.to_string()))?;
            text.push('\n');
        }
    } else {
        let limit = |l: Option<u64>| l.map_or("-".to_string(), |l| l.to_string());
        let mut lines = vec![
            [
                "start",
                "end",
                "target",
                "kind",
                "packets/s",
                "limit",
                "bit/s",
                "limit",
                "sources",
            ]
            .map(String::from)
            .to_vec(),
        ];
        for r in &found.alerts {
            lines.push(vec![
                r.start.clone(),
                r.end.clone().unwrap_or_else(|| r.state.to_string()),
                r.target.clone(),
                r.kind.clone(),
                format!("{:.0}", r.packets_per_second),
                limit(r.threshold.packets_per_second),
                format!("{:.0}", r.bits_per_second),
                limit(r.threshold.bits_per_second),
                r.top_sources
                    .iter()
                    .take(3)
                    .map(|s| s.source.as_str())
                    .collect::<Vec<_>>()
                    .join(","),
            ]);
        }
        let widths: Vec<usize> = (0..lines[0].len())
            .map(|c| lines.iter().map(|l| l[c].len()).max().unwrap_or(0))
            .collect();
        for l in &lines {
            let cells: Vec<String> = l
                .iter()
                .zip(&widths)
                .map(|(c, w)| format!("{c:<w$}"))
                .collect();
            text += cells.join("  ").trim_end();
            text.push('\n');
        }
        for r in &found.alerts {
            text += &format!("{} {}: tapflow query {}\n", r.start, r.target, r.query);
        }
    }
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(ExitCode::SUCCESS),
        r => r
            .map(|()| ExitCode::SUCCESS)
            .map_err(|e| Failure::Runtime(format!("writing the result: {e}"))),
    }
}

fn stats_line(s: &ScanStats) -> String {
    format!(
        "read: tier {}, {} of {} files opened, {} of {} row groups read, {} rows",
        s.table, s.files_opened, s.files_listed, s.row_groups_read, s.row_groups, s.rows_read
    )
}
