//! `tapflow rules`: lists and changes the rules of a running capture over its control socket.
//! Rules are checked here first, so a typo is a usage error before anything is sent.

use std::process::ExitCode;

use tapflow_engine::control;
use tapflow_engine::rules::RuleListing;
use tapflow_wire::rule_bpf::Precision;
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
        control::rules(&path, &command, &body).map_err(|e| Failure::Runtime(e.to_string()))?;
    print!("{}", listing(&reply));
    Ok(ExitCode::SUCCESS)
}

/// The control socket's listing as a table for people.
fn listing(l: &RuleListing) -> String {
    let mut out = if !l.active {
        "no rules: every packet passes (the -f expression alone decides)\n".to_string()
    } else {
        format!(
            "{} rules, kernel filter {} ({} instructions)\n",
            l.rules.len(),
            match l.precision {
                Precision::Exact => "exact",
                Precision::Ports => "on protocols and ports, exact match in user space",
                Precision::Protocols => "on protocols, exact match in user space",
                Precision::Family => "on IP version, exact match in user space",
            },
            l.instructions
        )
    };
    if l.rules.is_empty() {
        return out;
    }
    let rows: Vec<[String; 4]> = l
        .rules
        .iter()
        .map(|r| {
            [
                r.rule.name.clone(),
                r.packets.to_string(),
                r.bytes.to_string(),
                r.rule.to_string(),
            ]
        })
        .collect();
    let w = |c: usize, min: usize| rows.iter().map(|r| r[c].len()).max().unwrap_or(0).max(min);
    let (wn, wp, wb) = (w(0, 4), w(1, 7), w(2, 5));
    out += &format!(
        "{:<wn$}  {:>wp$}  {:>wb$}  RULE\n",
        "NAME", "PACKETS", "BYTES"
    );
    for [name, packets, bytes, rule] in &rows {
        out += &format!("{name:<wn$}  {packets:>wp$}  {bytes:>wb$}  {rule}\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use tapflow_engine::rules::RuleStat;

    #[test]
    fn listings_read_well() {
        let stat = |line: &str, packets: u64, bytes: u64| RuleStat {
            rule: Rule::parse(line).unwrap(),
            packets,
            bytes,
        };
        let t = listing(&RuleListing {
            active: true,
            precision: Precision::Ports,
            instructions: 12,
            rules: vec![
                stat("web proto tcp dport 80", 10, 1000),
                stat("d proto udp", 0, 0),
            ],
        });
        assert_eq!(
            t,
            "2 rules, kernel filter on protocols and ports, exact match in user space \
             (12 instructions)\n\
             NAME  PACKETS  BYTES  RULE\n\
             web        10   1000  web proto tcp dport 80\n\
             d           0      0  d proto udp\n"
        );
        let none = listing(&RuleListing {
            active: false,
            precision: Precision::Exact,
            instructions: 1,
            rules: vec![],
        });
        assert!(none.starts_with("no rules"));
    }
}
