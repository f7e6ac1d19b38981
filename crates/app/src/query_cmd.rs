//! `tapflow query`: nfdump's habits over the flow store. The arguments become one
//! [`Query`]; the store's engine answers it; one printer formats the answer.

use std::io::Write;
use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use tapflow_store::parquet::ParquetEngine;
use tapflow_store::query::filter::parse;
use tapflow_store::query::output::{Format, print};
use tapflow_store::query::time::{parse_duration, parse_window};
use tapflow_store::query::{Key, Kind, Metric, Query, QueryEngine, QueryError, ScanStats};

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
    let q = query(a).map_err(usage)?;
    let threads = a
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, std::num::NonZero::get));
    let engine: Box<dyn QueryEngine> = match (&a.clickhouse, &a.store) {
        (Some(url), _) => {
            tapflow_store::clickhouse::Target::parse(url)
                .map_err(|e| Failure::Usage(e.to_string()))?;
            let engine = tapflow_store::clickhouse::ClickHouseEngine::open(url)
                .map_err(|e| Failure::Runtime(e.to_string()))?;
            Box::new(engine.prefer_rollups(!a.raw))
        }
        (None, Some(dir)) => Box::new(ParquetEngine::new(dir, threads).prefer_rollups(!a.raw)),
        (None, None) => return Err(Failure::Usage("query: -R DIR or --clickhouse URL".into())),
    };
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
    if a.stats {
        match &a.clickhouse {
            // The server reads; it says what in its own query log.
            Some(_) => eprintln!(
                "read: ClickHouse, {}",
                match answer.stats.tier_seconds {
                    0 => "the flow table".to_string(),
                    t if t % 3600 == 0 => format!("rollup_{}h", t / 3600),
                    t => format!("rollup_{}m", t / 60),
                }
            ),
            None => eprintln!("{}", stats_line(&answer.stats)),
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn stats_line(s: &ScanStats) -> String {
    format!(
        "read: tier {}, {} of {} files opened, {} of {} row groups read, {} rows",
        s.table, s.files_opened, s.files_listed, s.row_groups_read, s.row_groups, s.rows_read
    )
}
