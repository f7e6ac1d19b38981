//! `tapflow detect`, and `--detect` on `capture`, `flows` and `collect`: builds the detector
//! from the thresholds file and the alert actions, runs it over the source asked for, and says
//! what it saw.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use clap::{Args, FromArgMatches};
use tapflow_engine::detect::action::{Action, Hook, Hooked, Print};
use tapflow_engine::detect::baseline::{BaselineConfig, Learner};
use tapflow_engine::detect::bgp::{Announce, Api, Bgp, Community};
use tapflow_engine::detect::record::Record;
use tapflow_engine::detect::store::DetectStore;
use tapflow_engine::detect::threshold::{Thresholds, ThresholdsFile};
use tapflow_engine::detect::{DetectSummary, Detector, Hub};
use tapflow_engine::stop::Stop;
use tapflow_store::open::Location;
use tapflow_store::parquet::ParquetEngine;
use tapflow_store::query::time::parse_window;
use tapflow_store::query::{Kind, Query, QueryEngine, QueryResult};
use tapflow_store::{FlowStore, StoredFlow};
use tapflow_wire::flowrecord::{Counters, FlowRecord};

use crate::Failure;
use crate::cli::{AlertArgs, CaptureArgs, CollectArgs, DetectArgs, DetectOpts};

/// Reads a thresholds file.
pub fn thresholds(path: &std::path::Path) -> Result<Thresholds, Failure> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Failure::Usage(format!("--thresholds {}: {e}", path.display())))?;
    toml::from_str::<ThresholdsFile>(&text)
        .map_err(|e| e.to_string())
        .and_then(ThresholdsFile::thresholds)
        .map_err(|e| Failure::Usage(format!("--thresholds {}: {e}", path.display())))
}

/// The detector `--detect` asks for, if it does; its alerts are also kept in each of `stores`
/// (the stores the command fills).
pub fn hub(
    opts: &DetectOpts,
    stop: &Arc<Stop>,
    stores: Vec<Location>,
) -> Result<Option<Hub>, Failure> {
    if !opts.detect {
        return Ok(None);
    }
    build(&opts.alerts, opts.stdout, stop, stores).map(Some)
}

fn build(
    a: &AlertArgs,
    stdout: Option<bool>,
    stop: &Arc<Stop>,
    stores: Vec<Location>,
) -> Result<Hub, Failure> {
    let mut th = match &a.thresholds {
        Some(p) => thresholds(p)?,
        None => Thresholds::default(),
    };
    if let Some(store) = &a.baseline {
        th.baseline
            .get_or_insert_with(BaselineConfig::default)
            .store = Some(store.clone());
    }
    let learner = match &th.baseline {
        Some(b) => Some(learner(b, &th)?),
        None => None,
    };
    let bgp = bgp(a)?;
    let mut actions: Vec<Box<dyn Action>> = vec![Box::new(Print {
        json: stdout == Some(true),
        // ExaBGP reads standard output: the alert lines go to standard error.
        stderr: stdout.is_none() || bgp.as_ref().is_some_and(|b| b.0 == Api::Stdout),
    })];
    if let Some(url) = &a.webhook {
        if !url.starts_with("http://") && !url.starts_with("https://") {
            return Err(Failure::Usage(format!(
                "--webhook {url}: give an http:// or https:// URL"
            )));
        }
        actions.push(Box::new(Hooked::start(Hook::Webhook(url.clone()))));
    }
    if let Some(cmd) = &a.alert_exec {
        actions.push(Box::new(Hooked::start(Hook::Exec(cmd.clone()))));
    }
    if let Some((api, announce)) = bgp {
        actions.push(Box::new(Bgp::start(api, announce, Some(Arc::clone(stop)))));
    }
    for at in stores {
        actions.push(Box::new(Record::new(at)));
    }
    let mut d = Detector::new(th, actions, 1);
    if let Some(l) = learner {
        d.set_baseline(l);
    }
    Ok(d.shared())
}

/// The learner of the baseline `b` asks for, over the groups of `th`.
fn learner(b: &BaselineConfig, th: &Thresholds) -> Result<Learner, Failure> {
    let Some(store) = &b.store else {
        return Err(Failure::Usage(
            "[baseline] in the thresholds file: give its store (store = \"DIR\") or --baseline STORE".into(),
        ));
    };
    let at = tapflow_store::open::Location::parse(store)
        .map_err(|e| Failure::Usage(format!("--baseline {store}: {e}")))?;
    if let tapflow_store::open::Location::Parquet(dir) = &at
        && !dir.is_dir()
    {
        return Err(Failure::Usage(format!(
            "--baseline {store}: no store directory there"
        )));
    }
    let engine = tapflow_store::open::engine(&at, 1, true)
        .map_err(|e| Failure::Usage(format!("--baseline {store}: {e}")))?;
    let note: tapflow_engine::detect::baseline::Note =
        Box::new(|line: &str| eprintln!("tapflow detect: {line}"));
    Ok(Learner::start(
        engine,
        b.clone(),
        th.groups.clone(),
        Some(note),
    ))
}

/// The BGP action `--bgp-exabgp` asks for, if it does.
fn bgp(a: &AlertArgs) -> Result<Option<(Api, Announce)>, Failure> {
    let Some(target) = &a.bgp_exabgp else {
        return Ok(None);
    };
    let api = Api::parse(target);
    let announce = if a.bgp_flowspec {
        Announce::Flowspec
    } else {
        let communities = a
            .bgp_community
            .iter()
            .map(|c| c.parse::<Community>())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| Failure::Usage(format!("--bgp-community {e}")))?;
        let hops: Vec<&str> = a.bgp_next_hop.iter().map(String::as_str).collect();
        Announce::blackhole(communities, &hops)
            .map_err(|e| Failure::Usage(format!("--bgp-next-hop {e}")))?
    };
    Ok(Some((api, announce)))
}

/// Refuses `--bgp-exabgp -` where standard output carries something else, or standard input
/// does (ExaBGP's answers come there).
pub fn check_bgp_stdio(a: &AlertArgs, stdout_used: bool, stdin_used: bool) -> Result<(), Failure> {
    if a.bgp_exabgp.as_deref() != Some("-") {
        return Ok(());
    }
    if stdout_used {
        return Err(Failure::Usage(
            "--bgp-exabgp - writes ExaBGP's commands to standard output, where another output \
             goes too: write that one to a file, or give --bgp-exabgp a named pipe"
                .into(),
        ));
    }
    if stdin_used {
        return Err(Failure::Usage(
            "--bgp-exabgp - reads ExaBGP's answers on standard input, which -r - reads: give \
             -r a file, or --bgp-exabgp a named pipe"
                .into(),
        ));
    }
    Ok(())
}

/// Ends detection: ends the running alerts, waits for the hooks, and says what it saw.
pub fn close(hub: Option<&Hub>, quiet: bool) {
    let Some(hub) = hub else { return };
    let s = hub.lock().unwrap_or_else(|e| e.into_inner()).close();
    if !quiet {
        eprintln!("{}", summary_line(&s));
    }
}

fn summary_line(s: &DetectSummary) -> String {
    format!(
        "tapflow detect: {} seconds measured, {} packets{}, {} alerts{}",
        s.intervals,
        s.packets,
        if s.flows > 0 {
            format!(" in {} flow records", s.flows)
        } else {
            String::new()
        },
        s.alerts,
        if s.running_at_end > 0 {
            format!(" ({} still running at the end)", s.running_at_end)
        } else {
            String::new()
        }
    ) + &if s.sampled > 0 {
        format!(
            "; {} worker-seconds over {} packets/s counted a sample (at most one packet in {})",
            s.sampled,
            tapflow_engine::detect::meter::EXACT_PER_SECOND,
            s.period
        )
    } else {
        String::new()
    }
}

/// `Args` of a command parsed from words, as if typed.
fn args_of<T: Args + FromArgMatches>(name: &'static str, words: &[String]) -> Result<T, Failure> {
    let cmd = T::augment_args(clap::Command::new(name).no_binary_name(true));
    let m = cmd
        .try_get_matches_from(words)
        .map_err(|e| Failure::Usage(e.to_string()))?;
    T::from_arg_matches(&m).map_err(|e| Failure::Usage(e.to_string()))
}

/// Runs `tapflow detect`.
pub fn run(a: DetectArgs, stop: &Arc<Stop>) -> Result<ExitCode, Failure> {
    let opts = DetectOpts {
        detect: true,
        alerts: a.alerts.clone(),
        stdout: Some(a.json),
    };
    let mut words: Vec<String> = Vec::new();
    if let Some(d) = a.duration {
        words.extend(["--duration".into(), format!("{}", d.as_secs_f64())]);
    }
    if a.quiet {
        words.push("-q".into());
    }
    if let Some(m) = a.metrics {
        words.extend(["--metrics".into(), m.to_string()]);
    }
    if let (Some(dir), Some(t)) = (&a.store, &a.time) {
        return from_store(dir, t, &opts, a.quiet, stop);
    }
    if !a.listen.is_empty() {
        words.extend(["-l".into(), a.listen.join(",")]);
        let mut c: CollectArgs = args_of("collect", &words)?;
        c.detect = opts;
        return crate::collect_cmd::run(c, stop);
    }
    match (&a.interface, &a.read) {
        (Some(i), _) => {
            words.extend(["-i".into(), i.clone(), "--threads".into()]);
            words.push(a.threads.to_string());
        }
        (None, Some(r)) => words.extend(["-r".into(), r.display().to_string()]),
        (None, None) => return Err(Failure::Usage("give -i, -r, -l or --store".into())),
    }
    words.extend(a.filter.iter().cloned());
    let mut c: CaptureArgs = args_of("capture", &words)?;
    c.detect = opts;
    crate::capture_cmd::run(c, stop, false)
}

/// Detection over the flows a store kept in `window`, in their time order.
fn from_store(
    dir: &std::path::Path,
    window: &str,
    opts: &DetectOpts,
    quiet: bool,
    stop: &Arc<Stop>,
) -> Result<ExitCode, Failure> {
    let now_us = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64);
    let window = parse_window(window, now_us).map_err(|e| Failure::Usage(format!("-t {e}")))?;
    let engine = ParquetEngine::new(dir, 2).prefer_rollups(false);
    let answer = engine
        .run(&Query {
            window: Some(window),
            filter: None,
            kind: Kind::List { limit: None },
        })
        .map_err(|e| Failure::Runtime(format!("--store {}: {e}", dir.display())))?;
    let QueryResult::Flows(rows) = answer.result else {
        return Err(Failure::Runtime("the store answered no flows".into()));
    };
    let Some(hub) = hub(opts, stop, Vec::new())? else {
        return Ok(ExitCode::SUCCESS);
    };
    let mut stage = Box::new(DetectStore::new(Arc::clone(&hub), false));
    let mut batch = Vec::with_capacity(4096);
    for r in &rows {
        let v4 = r.ip_version == 4;
        let addr = |a: &[u8; 16]| {
            if v4 {
                let mut b = [0u8; 16];
                b[..4].copy_from_slice(&a[12..16]);
                b
            } else {
                *a
            }
        };
        let (first, last) = (
            r.start_us.max(0) as u64 * 1000,
            r.end_us.max(0) as u64 * 1000,
        );
        let flow = FlowRecord {
            ipv6: !v4,
            proto: r.protocol,
            src: addr(&r.src),
            dst: addr(&r.dst),
            sport: r.sport,
            dport: r.dport,
            fwd: Counters {
                packets: r.packets,
                octets: r.bytes,
                tcp_flags: r.tcp_flags,
                first_ns: first,
                last_ns: last,
            },
            ..Default::default()
        };
        batch.push(StoredFlow {
            flow,
            received_ns: last,
            ..Default::default()
        });
        if batch.len() == batch.capacity() {
            stage.observe(&batch);
            batch.clear();
        }
    }
    stage.observe(&batch);
    let _ = stage.close();
    close(Some(&hub), quiet);
    Ok(ExitCode::SUCCESS)
}
