//! `tapflow collect`: checks the request, runs the collector, prints each exporter's
//! accounting and each store's.

use std::io::{IsTerminal, Write};
use std::net::IpAddr;
use std::process::ExitCode;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde::Serialize;
use tapflow_engine::collector::ledger::{self, Book, ExporterCounts, SessionCounts};
use tapflow_engine::collector::listen::Listen;
use tapflow_engine::collector::templates_state::TemplatesState;
use tapflow_engine::collector::writer::{NamedStore, StoreOutcome};
use tapflow_engine::collector::{self, CollectConfig, CollectSummary};
use tapflow_engine::enrich::store::EnrichedStore;
use tapflow_engine::metrics::MetricsServer;
use tapflow_engine::sink::flow::export::{ExportConfig, ExportTarget};
use tapflow_engine::sink::flow::export_store::ExportStore;
use tapflow_engine::stop::Stop;
use tapflow_store::ParquetOptions;
use tapflow_store::anonymized::AnonymizedStore;
use tapflow_store::open::{self, Location};
use tapflow_wire::cryptopan::Anonymizer;
use tapflow_wire::flowdecode::Limits;
use tapflow_wire::prefix::Prefix;

use crate::Failure;
use crate::cli::CollectArgs;

pub fn run(a: CollectArgs, stop: &Arc<Stop>) -> Result<ExitCode, Failure> {
    let mut stores = Vec::new();
    if let Some(d) = &a.store {
        stores.push(Location::parse(d).map_err(|e| Failure::Usage(format!("--store {e}")))?);
    }
    if let Some(url) = &a.clickhouse {
        stores.push(
            Location::clickhouse(url).map_err(|e| Failure::Usage(format!("--clickhouse {e}")))?,
        );
    }
    let hub = crate::detect_cmd::hub(&a.detect, stop, stores)?;
    let cfg = config(&a, hub.as_ref())?;
    // Descriptors held by exporters' sessions and console clients must not starve the stores.
    if let Err(e) = tapflow_sys::rlimit::raise_nofile() {
        eprintln!("tapflow: warning: {e}");
    }
    let metrics_at = a.metrics;
    let server: Mutex<Option<MetricsServer>> = Mutex::new(None);
    let mut setup_error = None;
    let ready = |r: &collector::Ready| {
        if let Some(addr) = metrics_at {
            let l = Arc::clone(&r.ledger);
            let alerts = hub
                .as_ref()
                .map(|h| h.lock().unwrap_or_else(PoisonError::into_inner).gauge());
            match MetricsServer::start_counters_and_alerts(
                addr,
                move || ledger::metrics(&l.snapshot()),
                alerts,
            ) {
                Ok(s) => {
                    eprintln!("tapflow: metrics on http://{}/metrics", s.addr());
                    *server.lock().unwrap_or_else(PoisonError::into_inner) = Some(s);
                }
                Err(e) => {
                    setup_error = Some(e.to_string());
                    stop.raise();
                }
            }
        }
        for b in &r.bound {
            // Tests and scripts wait for these lines.
            let scheme = a
                .listen
                .iter()
                .find(|u| Listen::parse(u).is_ok_and(|l| l == b.listen))
                .and_then(|u| u.split_once("://"))
                .map_or("?", |(s, _)| s);
            eprintln!("tapflow: collecting {scheme} on {}", b.addr);
        }
        eprintln!("tapflow: receive buffer {} KiB per socket", r.rcvbuf / 1024);
        if let Some(line) = &r.templates {
            eprintln!("tapflow: {line}");
        }
    };
    let tty = std::io::stderr().is_terminal();
    let quiet = a.quiet;
    let mut last = (Duration::ZERO, 0u64);
    let tick = |elapsed: Duration, b: &Book| {
        if quiet {
            return;
        }
        let t = b.totals();
        let rate =
            (t.records - last.1.min(t.records)) as f64 / (elapsed - last.0).as_secs_f64().max(1e-3);
        last = (elapsed, t.records);
        let line = format!(
            "tapflow collect: {:.0} s, {} exporters, {} records ({:.0}/s), {} lost before \
             (sequence), {} without template, {} bad, {} socket drops",
            elapsed.as_secs_f64(),
            b.exporters.len(),
            t.records,
            rate,
            t.sequence_lost,
            t.template_missing,
            t.bad_messages + t.malformed,
            b.socket_drops
        );
        let mut err = std::io::stderr().lock();
        let _ = if tty {
            write!(err, "\r\x1b[K{line}")
        } else {
            writeln!(err, "{line}")
        };
    };
    let console = console(&a, stop)?;
    let summary = collector::run(cfg, stop, ready, tick).map_err(Failure::from_engine);
    if let Some(c) = console {
        stop.raise();
        let _ = c.join();
    }
    let summary = summary?;
    drop(server);
    crate::detect_cmd::close(hub.as_ref(), false);
    if tty && !quiet {
        eprint!("\r\x1b[K");
    }
    if let Some(e) = setup_error {
        return Err(Failure::Usage(e));
    }
    for line in summary_lines(&summary) {
        eprintln!("{line}");
    }
    if let Some(why) = &summary.templates_error {
        eprintln!("tapflow: warning: templates state not kept: {why}");
    }
    let code = crate::report::finish(
        a.summary_json.as_deref(),
        || CollectJson::new(&summary),
        None,
    )?;
    match loss(&summary) {
        Some(why) => Err(Failure::Runtime(why)),
        None => Ok(code),
    }
}

/// The web console over the store (`--http`), on a thread of its own until the collector stops.
fn console(
    a: &CollectArgs,
    stop: &Arc<Stop>,
) -> Result<Option<std::thread::JoinHandle<()>>, Failure> {
    let (Some(listen), Some(dir)) = (a.http, &a.store) else {
        return Ok(None);
    };
    let config = tapflow_console::ConsoleConfig {
        listen,
        auth: a.http_auth.clone(),
        tls: a
            .tls_cert
            .clone()
            .zip(a.tls_key.clone())
            .map(|(cert, key)| tapflow_console::TlsFiles { cert, key }),
        hosts: a.http_host.clone(),
        probes: Vec::new(),
        send_timeout: tapflow_console::SEND_TIMEOUT,
    };
    tapflow_console::check(&config).map_err(|e| Failure::Usage(format!("--http: {e}")))?;
    let at = Location::parse(dir).map_err(|e| Failure::Usage(format!("--store {e}")))?;
    let engine: Arc<_> = open::engine(&at, 2, true)
        .map_err(|e| Failure::Usage(format!("--store {e}")))?
        .into();
    let flag = Arc::clone(stop.flag());
    let stopper = Arc::clone(stop);
    let scheme = if config.tls.is_some() {
        "https"
    } else {
        "http"
    };
    eprintln!("tapflow: console on {scheme}://{listen}/");
    std::thread::Builder::new()
        .name("tapflow-console".into())
        .spawn(move || {
            if let Err(e) = tapflow_console::serve(config, engine, flag) {
                eprintln!("tapflow: error: {e}");
                stopper.raise();
            }
        })
        .map(Some)
        .map_err(|e| Failure::Runtime(format!("cannot start the console: {e}")))
}

fn config(
    a: &CollectArgs,
    hub: Option<&tapflow_engine::detect::Hub>,
) -> Result<CollectConfig, Failure> {
    let bad = |m: String| Failure::Usage(m);
    let listen = a
        .listen
        .iter()
        .map(|u| Listen::parse(u).map_err(|e| bad(format!("--listen {e}"))))
        .collect::<Result<Vec<_>, _>>()?;
    let allow = a
        .allow
        .iter()
        .map(|s| Prefix::parse_covering(s).map_err(|e| bad(format!("--allow {e}"))))
        .collect::<Result<Vec<_>, _>>()?;
    crate::in_range("--threads", a.threads, 1, 256)?;
    let flush = a.flush_seconds;
    let mut stores = Vec::new();
    let options = tapflow_store::open::Options {
        parquet: ParquetOptions {
            flush_interval: flush,
            retain: a.retain,
            retain_size: a.retain_size,
            ..ParquetOptions::default()
        },
        spool_dir: a.clickhouse_spool.clone(),
        spool_limit: a.clickhouse_spool_size,
    };
    let given = [
        ("--store", a.store.as_ref().map(|d| d.as_os_str())),
        ("--clickhouse", a.clickhouse.as_ref().map(|u| u.as_ref())),
    ];
    for (flag, at) in given {
        let Some(at) = at else { continue };
        let at = match flag {
            "--clickhouse" => Location::clickhouse(&at.to_string_lossy()),
            _ => Location::parse(at),
        }
        .map_err(|e| bad(format!("{flag} {e}")))?;
        let store = open::store(&at, &options).map_err(|e| bad(format!("{flag} {e}")))?;
        stores.push(NamedStore {
            name: at.name(),
            store,
        });
    }
    let mut targets = Vec::new();
    for w in &a.write {
        let t = ExportTarget::parse_url(w).map_err(|e| bad(format!("-w {e}")))?;
        targets.push(t);
    }
    for u in &a.export {
        let t = ExportTarget::parse_url(u).map_err(|e| bad(format!("--export {e}")))?;
        targets.push(t);
    }
    if !targets.is_empty() {
        let name = targets
            .iter()
            .map(ExportTarget::name)
            .collect::<Vec<_>>()
            .join(",");
        let export = ExportStore::start(&ExportConfig {
            targets,
            mtu: a.export_mtu,
            observation_domain: 1,
            rate: a.export_rate,
            store: None,
            enrich: None,
            anonymize: None,
        })
        .map_err(Failure::from_engine)?;
        stores.push(NamedStore {
            name,
            store: Box::new(export),
        });
    }
    if let Some(key) = &a.anonymize {
        let pan = crate::anonymize_cmd::read_key(key)?;
        stores = stores
            .into_iter()
            .map(|s| NamedStore {
                name: s.name,
                store: Box::new(AnonymizedStore::new(s.store, Anonymizer::new(pan.clone()))),
            })
            .collect();
    }
    // Outermost, so that lookups see the real addresses before anonymisation; only the
    // stores keep the places (an IPFIX or text output has no field for them).
    if let Some(source) = crate::enrich_source(&a.enrich)? {
        stores = stores
            .into_iter()
            .map(|s| {
                if s.name.starts_with("parquet:") || s.name.starts_with("clickhouse:") {
                    NamedStore {
                        store: Box::new(EnrichedStore::new(
                            s.store,
                            tapflow_engine::enrich::Enricher::new(Arc::clone(&source)),
                        )),
                        name: s.name,
                    }
                } else {
                    s
                }
            })
            .collect();
    }
    if let Some(hub) = hub {
        let stage = tapflow_engine::detect::store::DetectStore::new(Arc::clone(hub), true);
        stores.push(NamedStore {
            name: "detect".into(),
            store: Box::new(stage),
        });
    }
    if stores.is_empty() {
        return Err(bad(
            "nowhere to keep the flows: give --store DIR, -w FORMAT:FILE or --export URL".into(),
        ));
    }
    Ok(CollectConfig {
        listen,
        threads: a.threads,
        rcvbuf: a.rcvbuf,
        allow,
        stores,
        flush,
        stats_every: a.stats_seconds,
        duration: a.duration,
        idle: a.exporter_timeout,
        limits: Limits::default(),
        templates: a
            .state_dir
            .clone()
            .or_else(|| a.store.as_ref().map(|d| d.join("state")))
            .map(|d| TemplatesState::in_dir(&d)),
    })
}

/// Records that reached the collector and were not stored, said in one line; `None` when
/// every one was stored.
fn loss(s: &CollectSummary) -> Option<String> {
    let t = s.book.totals();
    let mut parts = Vec::new();
    if s.book.socket_drops > 0 {
        parts.push(format!(
            "{} datagrams dropped by the socket buffer (raise --rcvbuf or --threads)",
            s.book.socket_drops
        ));
    }
    if t.records > s.book.flows {
        parts.push(format!(
            "{} records not handed to the stores",
            t.records - s.book.flows
        ));
    }
    for st in &s.stores {
        if st.lost() > 0 {
            parts.push(format!(
                "{} flows not stored by {}{}",
                st.lost(),
                st.name,
                st.error
                    .as_ref()
                    .map_or(String::new(), |e| format!(" ({e})"))
            ));
        }
    }
    (!parts.is_empty()).then(|| format!("lost in the collector: {}", parts.join("; ")))
}

/// The exit lines: the accounting, then one per exporter and domain, one per store.
fn summary_lines(s: &CollectSummary) -> Vec<String> {
    let b = &s.book;
    let t = b.totals();
    let stored: Vec<String> = s
        .stores
        .iter()
        .map(|st| format!("{} stored by {}", st.stored, st.name))
        .collect();
    let mut out = vec![
        format!(
            "tapflow: {} records received from {} exporters in {} datagrams: {}, {} without \
             template, {} malformed",
            t.records + t.template_missing + t.malformed,
            b.exporters.len(),
            b.datagrams,
            stored.join(", "),
            t.template_missing,
            t.malformed
        ),
        format!(
            "tapflow: lost before the collector: {} (sequence numbers); in the collector: {} \
             datagrams dropped by the socket buffer, {} not handed to the stores; {} bad \
             messages, {} refused",
            t.sequence_lost,
            b.socket_drops,
            t.records - b.flows.min(t.records),
            t.bad_messages,
            b.refused
        ),
    ];
    let ss = &b.sessions;
    if ss.served + ss.refused > 0 {
        out.push(format!(
            "tapflow: IPFIX/TCP sessions: {} served, {} refused (too many at once, or from one \
             address), {} cut (a message not whole in time)",
            ss.served, ss.refused, ss.timed_out
        ));
    }
    let mut keys: Vec<_> = b.exporters.iter().collect();
    keys.sort_by_key(|(k, _)| **k);
    for (k, c) in keys {
        let bad: Vec<String> = c.bad.iter().map(|(w, n)| format!("{n} {w}")).collect();
        out.push(format!(
            "tapflow:   exporter {} domain {} ({}): {} records in {} messages, {} lost \
             (sequence){}, {} without template, {} templates, {} bad messages{}{}",
            k.address(),
            k.domain,
            if c.protocol.is_empty() {
                "?"
            } else {
                c.protocol
            },
            c.records,
            c.messages,
            c.sequence_lost,
            match c.sequence_resets {
                0 => String::new(),
                n => format!(" across {n} sequence restarts"),
            },
            c.template_missing,
            c.templates,
            c.bad_messages,
            if bad.is_empty() {
                String::new()
            } else {
                format!(" ({})", bad.join(", "))
            },
            match c.names_refused {
                0 => String::new(),
                n => format!(", {n} interface names refused"),
            }
        ));
    }
    for st in &s.stores {
        out.push(format!(
            "tapflow:   store {}: {} flows, {} stored, {} dropped, {} pending, {} withheld, {} \
             held back while it failed ({} retries){}",
            st.name,
            st.flows,
            st.stored,
            st.dropped,
            st.pending,
            st.withheld,
            st.held_back,
            st.retries,
            st.error
                .as_ref()
                .map_or(String::new(), |e| format!(" (error: {e})"))
        ));
    }
    out
}

/// The JSON summary of a collector run (`--summary-json`).
#[derive(Debug, Serialize)]
struct CollectJson<'a> {
    seconds: f64,
    datagrams: u64,
    records: u64,
    template_missing: u64,
    malformed: u64,
    sequence_lost: u64,
    sequence_resets: u64,
    bad_messages: u64,
    socket_drops: u64,
    refused: u64,
    flows: u64,
    tcp_sessions: SessionCounts,
    exporters: Vec<ExporterJson<'a>>,
    stores: &'a [StoreOutcome],
}

/// One exporter and domain in the JSON summary.
#[derive(Debug, Serialize)]
struct ExporterJson<'a> {
    exporter: IpAddr,
    domain: u32,
    #[serde(flatten)]
    counts: &'a ExporterCounts,
}

impl<'a> CollectJson<'a> {
    fn new(s: &'a CollectSummary) -> CollectJson<'a> {
        let t = s.book.totals();
        let mut exporters: Vec<ExporterJson<'a>> = s
            .book
            .exporters
            .iter()
            .map(|(k, c)| ExporterJson {
                exporter: k.address(),
                domain: k.domain,
                counts: c,
            })
            .collect();
        exporters.sort_by_key(|e| (e.exporter, e.domain));
        CollectJson {
            seconds: s.seconds,
            datagrams: s.book.datagrams,
            records: t.records,
            template_missing: t.template_missing,
            malformed: t.malformed,
            sequence_lost: t.sequence_lost,
            sequence_resets: t.sequence_resets,
            bad_messages: t.bad_messages,
            socket_drops: s.book.socket_drops,
            refused: s.book.refused,
            flows: s.book.flows,
            tcp_sessions: s.book.sessions,
            exporters,
            stores: &s.stores,
        }
    }
}
