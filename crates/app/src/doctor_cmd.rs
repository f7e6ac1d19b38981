//! `tapflow doctor`: reads the interface, prints the findings (text or JSON), and with `--fix`
//! changes the safe settings first. Exit code 0 without warnings, 1 with warnings left.

use std::fmt::Write as _;
use std::process::ExitCode;

use tapflow_engine::tools::doctor::{
    self, Change, Finding, Fix, Intent, Outcome, Readings, Severity, warnings,
};
use tapflow_sys::ethtool::Support;

use crate::cli::DoctorArgs;
use crate::report::json_string;
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
        json(&readings, &findings, &changes)
    } else {
        text(&readings, &findings, &changes, a.fix)
    };
    print!("{out}");
    Ok(if warnings(&findings) == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The human report: a header line, the changes made, the findings (warnings first), a total.
fn text(r: &Readings, findings: &[Finding], changes: &[Change], fixed: bool) -> String {
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

fn opt_str(v: Option<&str>) -> String {
    v.map_or("null".into(), json_string)
}

/// The JSON report: the readings, the findings in check order, the changes made.
fn json(r: &Readings, findings: &[Finding], changes: &[Change]) -> String {
    let driver = match &r.driver {
        Support::Supported(d) => format!(
            "{{\"supported\":true,\"driver\":{},\"version\":{},\"firmware\":{},\"bus\":{}}}",
            json_string(&d.driver),
            json_string(&d.version),
            json_string(&d.firmware),
            json_string(&d.bus)
        ),
        Support::NotSupported => "{\"supported\":false}".into(),
    };
    let rings = match &r.rings {
        Support::Supported(g) => format!(
            "{{\"supported\":true,\"rx\":{},\"rx_max\":{},\"tx\":{},\"tx_max\":{}}}",
            g.rx, g.rx_max, g.tx, g.tx_max
        ),
        Support::NotSupported => "{\"supported\":false}".into(),
    };
    let channels = match &r.channels {
        Support::Supported(c) => format!(
            "{{\"supported\":true,\"rx\":{},\"tx\":{},\"other\":{},\"combined\":{},\
             \"max_rx\":{},\"max_tx\":{},\"max_other\":{},\"max_combined\":{}}}",
            c.rx, c.tx, c.other, c.combined, c.max_rx, c.max_tx, c.max_other, c.max_combined
        ),
        Support::NotSupported => "{\"supported\":false}".into(),
    };
    let features: Vec<String> = r
        .features
        .iter()
        .map(|f| {
            format!(
                "{}:{{\"active\":{},\"changeable\":{}}}",
                json_string(&f.name),
                f.active,
                f.changeable
            )
        })
        .collect();
    let list: Vec<String> = findings
        .iter()
        .map(|f| {
            let unchangeable: Vec<String> = f.unchangeable.iter().map(|n| json_string(n)).collect();
            let fix = match &f.fix {
                None => "null".into(),
                Some(Fix::FeaturesOff { features, .. }) => format!(
                    "{{\"features_off\":[{}]}}",
                    features
                        .iter()
                        .map(|n| json_string(n))
                        .collect::<Vec<_>>()
                        .join(",")
                ),
                Some(Fix::RxRing(n)) => format!("{{\"rx_ring\":{n}}}"),
            };
            format!(
                "{{\"check\":{},\"severity\":{},\"what\":{},\"why\":{},\"command\":{},\
                 \"fix\":{fix},\"unchangeable\":[{}]}}",
                json_string(f.check),
                json_string(f.severity.name()),
                json_string(&f.what),
                json_string(&f.why),
                opt_str(f.command.as_deref()),
                unchangeable.join(",")
            )
        })
        .collect();
    let done: Vec<String> = changes
        .iter()
        .map(|c| {
            let (outcome, detail) = match &c.outcome {
                Outcome::Applied => ("applied", None),
                Outcome::Kept(why) => ("kept", Some(why.as_str())),
                Outcome::Refused(e) => ("refused", Some(e.as_str())),
                Outcome::NotSupported => ("not_supported", None),
                Outcome::Fixed => ("fixed", None),
            };
            let features: Vec<String> = c.features.iter().map(|n| json_string(n)).collect();
            format!(
                "{{\"check\":{},\"what\":{},\"features\":[{}],\"command\":{},\"outcome\":{},\
                 \"detail\":{}}}",
                json_string(c.check),
                json_string(&c.what),
                features.join(","),
                opt_str(c.command.as_deref()),
                json_string(outcome),
                opt_str(detail)
            )
        })
        .collect();
    let advice = findings
        .iter()
        .filter(|f| f.severity == Severity::Advice)
        .count();
    format!(
        "{{\"interface\":{},\"driver\":{driver},\"speed_mbps\":{},\"mtu\":{},\
         \"flags\":{{\"up\":{},\"running\":{},\"promisc\":{}}},\"rings\":{rings},\
         \"channels\":{channels},\"features\":{{{}}},\"findings\":[{}],\"changes\":[{}],\
         \"warnings\":{},\"advice\":{advice}}}\n",
        json_string(&r.ifname),
        r.speed_mbps.map_or("null".into(), |s| s.to_string()),
        r.mtu,
        r.flags.up,
        r.flags.running,
        r.flags.promisc,
        features.join(","),
        list.join(","),
        done.join(","),
        warnings(findings)
    )
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
