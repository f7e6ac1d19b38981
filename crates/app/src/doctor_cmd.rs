//! `tapflow doctor`: reads the interface, prints the findings (text or JSON), and with `--fix`
//! changes the safe settings first. Exit code 0 without warnings, 1 with warnings left.

use std::fmt::Write as _;
use std::process::ExitCode;

use serde::{Serialize, Serializer};
use tapflow_engine::tools::doctor::{
    self, Change, FeatureState, Finding, Intent, Outcome, Readings, Severity, warnings,
};
use tapflow_engine::tools::doctor_xdp::XdpReadings;
use tapflow_sys::ethtool::Support;

use crate::cli::DoctorArgs;
use crate::report::json_line;
use crate::{Failure, in_range};

/// Width the explanations are wrapped to.
const WIDTH: usize = 100;

/// Runs `tapflow doctor`.
pub fn run(a: DoctorArgs) -> Result<ExitCode, Failure> {
    in_range(
        "--threads",
        a.threads,
        1,
        tapflow_engine::tools::plan::MAX_THREADS,
    )?;
    let intent = Intent {
        threads: a.threads,
        snaplen: a.snaplen,
    };
    let mut readings = Readings::read(&a.interface).map_err(Failure::from_engine)?;
    let mut findings = doctor::diagnose(&readings, &intent);
    let mut changes = Vec::new();
    if a.fix {
        changes = doctor::apply(&a.interface, &findings).map_err(Failure::from_engine)?;
        readings = Readings::read(&a.interface).map_err(Failure::from_engine)?;
        findings = doctor::diagnose(&readings, &intent);
    }
    let out = if a.json {
        json_line(&DoctorJson::new(&readings, &findings, &changes))?
    } else {
        text(&readings, &findings, &changes, a.fix, a.verbose)
    };
    print!("{out}");
    Ok(if warnings(&findings) == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The human report: a header line, the changes made, the findings (problems first, each with
/// its explanation and fix; a passing check on one line, explained with `verbose`), a total.
fn text(
    r: &Readings,
    findings: &[Finding],
    changes: &[Change],
    fixed: bool,
    verbose: bool,
) -> String {
    let mut s = String::new();
    let mut head = format!("tapflow doctor: {}", r.ifname);
    if let Support::Supported(d) = &r.driver {
        let _ = write!(head, ", driver {}", d.driver);
        if !d.bus.is_empty() {
            let _ = write!(head, " at {}", d.bus);
        }
    }
    if let Some(mbps) = r.speed_mbps {
        let _ = write!(head, ", {mbps} Mbit/s");
    }
    let _ = writeln!(s, "{head}");
    // The enrichment data (`--geoip`, `--asn`): where it came from, its licence and date.
    let dir = tapflow_engine::enrich::default_data_dir();
    match tapflow_engine::enrich::data_sources(&dir) {
        Some(lines) => {
            for l in lines {
                let _ = writeln!(s, "{:<9}enrichment data in {}: {l}", "data", dir.display());
            }
        }
        None => {
            let _ = writeln!(
                s,
                "{:<9}no enrichment data in {} (scripts/fetch-ipdb.sh fetches it)",
                "data",
                dir.display()
            );
        }
    }
    if fixed {
        if changes.is_empty() {
            let _ = writeln!(s, "nothing to change");
        }
        for c in changes {
            let (label, detail) = match &c.outcome {
                Outcome::Applied => ("changed", String::new()),
                Outcome::Kept(why) => ("kept", format!(": {why}")),
                Outcome::Refused(e) => ("refused", format!(": {e}")),
                Outcome::NotSupported => ("not supported", ": the driver cannot do it".into()),
                Outcome::Fixed => (
                    "fixed",
                    ": the driver does not let it be changed ([fixed])".into(),
                ),
            };
            let cmd = c
                .command
                .as_deref()
                .map_or(String::new(), |c| format!(" ({c})"));
            let _ = writeln!(s, "{label:<9}{}{cmd}{detail}", c.what);
        }
    }
    let mut sorted: Vec<&Finding> = findings.iter().collect();
    sorted.sort_by_key(|f| std::cmp::Reverse(f.severity));
    for f in sorted {
        let _ = writeln!(s, "{:<9}{}", f.severity.name(), f.what);
        if f.severity == Severity::Ok && !verbose {
            continue;
        }
        if !f.why.is_empty() {
            wrap(&mut s, &f.why, 9);
        }
        if let Some(cmd) = &f.command {
            let by = if f.fix.is_some() {
                " (--fix does this)"
            } else {
                ""
            };
            let _ = writeln!(s, "{:9}fix: {cmd}{by}", "");
        }
    }
    let n_warn = warnings(findings);
    let n_advice = findings
        .iter()
        .filter(|f| f.severity == Severity::Advice)
        .count();
    let fixable = findings.iter().any(|f| f.fix.is_some());
    let _ = write!(
        s,
        "tapflow doctor: {n_warn} warning{}, {n_advice} advice",
        if n_warn == 1 { "" } else { "s" }
    );
    if fixable {
        let _ = write!(
            s,
            "; `tapflow doctor -i {} --fix` makes the changes marked --fix",
            r.ifname
        );
    }
    s.push('\n');
    s
}

/// Appends `text` wrapped to [`WIDTH`], every line indented by `indent` spaces.
fn wrap(s: &mut String, text: &str, indent: usize) {
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && indent + line.len() + 1 + word.len() > WIDTH {
            let _ = writeln!(s, "{:indent$}{line}", "");
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        let _ = writeln!(s, "{:indent$}{line}", "");
    }
}

/// The JSON report (`--json`): the readings, the findings in check order, the changes made,
/// and the counts.
#[derive(Debug, Serialize)]
struct DoctorJson<'a> {
    interface: &'a str,
    driver: Answer<DriverJson<'a>>,
    speed_mbps: Option<u32>,
    mtu: u32,
    flags: FlagsJson,
    rings: Answer<RingsJson>,
    channels: Answer<ChannelsJson>,
    #[serde(serialize_with = "features")]
    features: &'a [FeatureState],
    xdp: &'a XdpReadings,
    findings: &'a [Finding],
    changes: &'a [Change],
    warnings: usize,
    advice: usize,
}

impl<'a> DoctorJson<'a> {
    fn new(r: &'a Readings, findings: &'a [Finding], changes: &'a [Change]) -> DoctorJson<'a> {
        let i = &r.flags;
        DoctorJson {
            interface: &r.ifname,
            driver: Answer::of(r.driver.as_ref(), |d| DriverJson {
                driver: &d.driver,
                version: &d.version,
                firmware: &d.firmware,
                bus: &d.bus,
            }),
            speed_mbps: r.speed_mbps,
            mtu: r.mtu,
            flags: FlagsJson {
                up: i.up,
                running: i.running,
                promisc: i.promisc,
            },
            rings: Answer::of(r.rings.as_ref(), |g| RingsJson {
                rx: g.rx,
                rx_max: g.rx_max,
                tx: g.tx,
                tx_max: g.tx_max,
            }),
            channels: Answer::of(r.channels.as_ref(), |c| ChannelsJson {
                rx: c.rx,
                tx: c.tx,
                other: c.other,
                combined: c.combined,
                max_rx: c.max_rx,
                max_tx: c.max_tx,
                max_other: c.max_other,
                max_combined: c.max_combined,
            }),
            features: &r.features,
            xdp: &r.xdp,
            findings,
            changes,
            warnings: warnings(findings),
            advice: findings
                .iter()
                .filter(|f| f.severity == Severity::Advice)
                .count(),
        }
    }
}

/// The features in the kernel's order, each under its name.
fn features<S: Serializer>(f: &[FeatureState], s: S) -> Result<S::Ok, S::Error> {
    s.collect_map(f.iter().map(|f| (&f.name, f)))
}

/// A driver's answer: `{"supported":true,…}` with its fields, or `{"supported":false}`.
#[derive(Debug, Serialize)]
struct Answer<T> {
    supported: bool,
    #[serde(flatten)]
    value: Option<T>,
}

impl<T> Answer<T> {
    fn of<U>(s: Support<U>, f: impl FnOnce(U) -> T) -> Answer<T> {
        let value = s.supported().map(f);
        Answer {
            supported: value.is_some(),
            value,
        }
    }
}

/// `ethtool -i`.
#[derive(Debug, Serialize)]
struct DriverJson<'a> {
    driver: &'a str,
    version: &'a str,
    firmware: &'a str,
    bus: &'a str,
}

/// The interface flags.
#[derive(Debug, Serialize)]
struct FlagsJson {
    up: bool,
    running: bool,
    promisc: bool,
}

/// `ethtool -g`.
#[derive(Debug, Serialize)]
struct RingsJson {
    rx: u32,
    rx_max: u32,
    tx: u32,
    tx_max: u32,
}

/// `ethtool -l`.
#[derive(Debug, Serialize)]
struct ChannelsJson {
    rx: u32,
    tx: u32,
    other: u32,
    combined: u32,
    max_rx: u32,
    max_tx: u32,
    max_other: u32,
    max_combined: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrap_indents_and_keeps_lines_short() {
        let mut s = String::new();
        let text = "word ".repeat(60);
        wrap(&mut s, &text, 9);
        assert!(s.lines().count() > 2);
        for l in s.lines() {
            assert!(l.len() <= WIDTH && l.starts_with("         word"), "{l:?}");
        }
    }
}
