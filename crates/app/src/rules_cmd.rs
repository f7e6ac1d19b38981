//! `tapflow rules`: lists and changes the rules of a running capture over its control socket.
//! Rules are checked here first, so a typo is a usage error before anything is sent.

use std::process::ExitCode;

use tapflow_engine::control;
use tapflow_wire::rules::Rule;

use crate::Failure;
use crate::capture_cmd::read_rules;
use crate::cli::{RulesAction, RulesArgs};
use crate::stats_cmd::control_path;

/// Runs `tapflow rules`.
pub fn run(a: RulesArgs) -> Result<ExitCode, Failure> {
    let path = control_path(&a.probe)?;
    let (command, body) = match &a.action {
        RulesAction::List => ("rules list".to_string(), String::new()),
        RulesAction::Add { rule } => {
            let line = rule.join(" ");
            Rule::parse(&line).map_err(|e| Failure::Usage(format!("rule '{line}': {e}")))?;
            ("rules add".to_string(), line)
        }
        RulesAction::Del { name } => (format!("rules del {name}"), String::new()),
        RulesAction::Load { file } => {
            read_rules(file)?;
            let text = std::fs::read_to_string(file)
                .map_err(|e| Failure::Usage(format!("cannot read {}: {e}", file.display())))?;
            ("rules load".to_string(), text)
        }
    };
    let reply =
        control::request(&path, &command, &body).map_err(|e| Failure::Runtime(e.to_string()))?;
    print!("{}", listing(&reply));
    Ok(ExitCode::SUCCESS)
}

/// The control socket's listing as a table for people.
fn listing(reply: &str) -> String {
    let mut lines = reply.lines();
    let head = lines.next().unwrap_or("");
    let field = |k: &str| {
        head.split_whitespace()
            .find_map(|w| w.strip_prefix(k).and_then(|v| v.strip_prefix('=')))
            .unwrap_or("?")
    };
    let mut out = if field("active") == "no" {
        "no rules: every packet passes (the -f expression alone decides)\n".to_string()
    } else {
        format!(
            "{} rules, kernel filter {} ({} instructions)\n",
            field("rules"),
            match field("precision") {
                "exact" => "exact",
                "ports" => "on protocols and ports, exact match in user space",
                "protocols" => "on protocols, exact match in user space",
                _ => "on IP version, exact match in user space",
            },
            field("instructions")
        )
    };
    let rows: Vec<Vec<&str>> = lines.map(|l| l.splitn(4, '\t').collect()).collect();
    if rows.is_empty() {
        return out;
    }
    let w = |c: usize, min: usize| {
        rows.iter()
            .map(|r| r.get(c).map_or(0, |s| s.len()))
            .max()
            .unwrap_or(0)
            .max(min)
    };
    let (wn, wp, wb) = (w(0, 4), w(1, 7), w(2, 5));
    out += &format!(
        "{:<wn$}  {:>wp$}  {:>wb$}  RULE\n",
        "NAME", "PACKETS", "BYTES"
    );
    for r in &rows {
        let get = |c: usize| r.get(c).copied().unwrap_or("");
        out += &format!(
            "{:<wn$}  {:>wp$}  {:>wb$}  {}\n",
            get(0),
            get(1),
            get(2),
            get(3)
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listings_read_well() {
        let t = listing(
            "# active=yes precision=ports instructions=12 rules=2\n\
             web\t10\t1000\tweb proto tcp dport 80\nd\t0\t0\td proto udp\n",
        );
        assert_eq!(
            t,
            "2 rules, kernel filter on protocols and ports, exact match in user space \
             (12 instructions)\n\
             NAME  PACKETS  BYTES  RULE\n\
             web        10   1000  web proto tcp dport 80\n\
             d           0      0  d proto udp\n"
        );
        assert!(
            listing("# active=no precision=exact instructions=1 rules=0\n").starts_with("no rules")
        );
    }
}
