//! Importing the flow records `tapflow flows` writes as text (`--json`, `--csv`, `--export
//! json:FILE`, `--export csv:FILE`) into a store.
//!
//! The format is told by the first line: a JSON object (JSON lines) or the CSV header
//! [`CSV_HEADER`]. Blank lines are skipped. A bad line stops the import with one line naming
//! the file and the line; the flows of the lines before it are already in the store.

use std::io::BufRead;
use std::net::IpAddr;

use tapflow_wire::flowrecord::{EndReason, FlowRecord};

use crate::schema::StoredFlow;
use crate::{FlowStore, StoreError};

/// The columns of `tapflow flows --csv` the import reads (the JSON keys are the same names).
/// `tapflow flows` writes these first, then columns derived from them (protocol name, ISO 8601
/// times), which the import skips.
pub const CSV_HEADER: &str = "proto,src,sport,dst,dport,vlan,interface,first_ns,last_ns,\
packets,octets,tcp_flags,rev_first_ns,rev_last_ns,rev_packets,rev_octets,rev_tcp_flags,end_reason";

/// Flows handed to the store at once.
const BATCH: usize = 8192;

/// The two text formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// One JSON object per line.
    JsonLines,
    /// A header line, then comma-separated values.
    Csv,
}

/// What one file gave.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Imported {
    /// Lines read (header and blank lines included).
    pub lines: u64,
    /// Flow records handed to the store.
    pub flows: u64,
}

/// Why an import stopped.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// A line or the file itself is not what `tapflow flows` writes: `FILE:LINE: why`.
    #[error("{0}")]
    Input(String),
    /// The store could not take the flows.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// One JSON line, as the JSON lines encoder writes it.
#[derive(Debug, serde::Deserialize)]
struct JsonFlow {
    proto: u8,
    src: IpAddr,
    sport: u16,
    dst: IpAddr,
    dport: u16,
    vlan: u16,
    interface: u32,
    first_ns: u64,
    last_ns: u64,
    packets: u64,
    octets: u64,
    tcp_flags: u16,
    rev_first_ns: u64,
    rev_last_ns: u64,
    rev_packets: u64,
    rev_octets: u64,
    rev_tcp_flags: u16,
    end_reason: String,
}

impl JsonFlow {
    fn record(self) -> Result<FlowRecord, String> {
        let mut r = FlowRecord {
            proto: self.proto,
            sport: self.sport,
            dport: self.dport,
            vlan: self.vlan,
            interface: self.interface,
            end_reason: end_reason(&self.end_reason)?,
            ..FlowRecord::default()
        };
        (r.ipv6, r.src, r.dst) = addresses(self.src, self.dst)?;
        r.fwd.first_ns = self.first_ns;
        r.fwd.last_ns = self.last_ns;
        r.fwd.packets = self.packets;
        r.fwd.octets = self.octets;
        r.fwd.tcp_flags = self.tcp_flags;
        r.rev.first_ns = self.rev_first_ns;
        r.rev.last_ns = self.rev_last_ns;
        r.rev.packets = self.rev_packets;
        r.rev.octets = self.rev_octets;
        r.rev.tcp_flags = self.rev_tcp_flags;
        Ok(r)
    }
}

/// The end reason called `name` in text output.
fn end_reason(name: &str) -> Result<EndReason, String> {
    (1..=5)
        .filter_map(EndReason::from_u8)
        .find(|r| r.name() == name)
        .ok_or_else(|| {
            format!("end_reason '{name}' is not one of idle, active, end, forced, evicted")
        })
}

/// Both addresses of one family, as [`FlowRecord`] holds them.
fn addresses(src: IpAddr, dst: IpAddr) -> Result<(bool, [u8; 16], [u8; 16]), String> {
    let (mut s, mut d) = ([0u8; 16], [0u8; 16]);
    match (src, dst) {
        (IpAddr::V4(a), IpAddr::V4(b)) => {
            s[..4].copy_from_slice(&a.octets());
            d[..4].copy_from_slice(&b.octets());
            Ok((false, s, d))
        }
        (IpAddr::V6(a), IpAddr::V6(b)) => Ok((true, a.octets(), b.octets())),
        _ => Err(format!("src {src} and dst {dst} are not of one IP version")),
    }
}

/// Parses one line of `format`.
pub fn parse_line(format: Format, line: &str) -> Result<FlowRecord, String> {
    match format {
        Format::JsonLines => serde_json::from_str::<JsonFlow>(line)
            .map_err(|e| format!("not a flow record: {e}"))?
            .record(),
        Format::Csv => parse_csv(line),
    }
}

fn parse_csv(line: &str) -> Result<FlowRecord, String> {
    let f: Vec<&str> = line.split(',').collect();
    if f.len() < 18 {
        return Err(format!("{} fields, not the 18 of the header", f.len()));
    }
    let names: Vec<&str> = CSV_HEADER.split(',').collect();
    let num = |k: usize| -> Result<u64, String> {
        f[k].parse::<u64>()
            .map_err(|_| format!("{} '{}' is not a number", names[k], f[k]))
    };
    let small = |k: usize, max: u64| -> Result<u64, String> {
        let v = num(k)?;
        if v > max {
            return Err(format!("{} {v} is above {max}", names[k]));
        }
        Ok(v)
    };
    let ip = |k: usize| -> Result<IpAddr, String> {
        f[k].parse()
            .map_err(|_| format!("{} '{}' is not an IP address", names[k], f[k]))
    };
    let mut r = FlowRecord {
        proto: small(0, 255)? as u8,
        sport: small(2, 65535)? as u16,
        dport: small(4, 65535)? as u16,
        vlan: small(5, 65535)? as u16,
        interface: small(6, u64::from(u32::MAX))? as u32,
        end_reason: end_reason(f[17])?,
        ..FlowRecord::default()
    };
    (r.ipv6, r.src, r.dst) = addresses(ip(1)?, ip(3)?)?;
    r.fwd.first_ns = num(7)?;
    r.fwd.last_ns = num(8)?;
    r.fwd.packets = num(9)?;
    r.fwd.octets = num(10)?;
    r.fwd.tcp_flags = small(11, 65535)? as u16;
    r.rev.first_ns = num(12)?;
    r.rev.last_ns = num(13)?;
    r.rev.packets = num(14)?;
    r.rev.octets = num(15)?;
    r.rev.tcp_flags = small(16, 65535)? as u16;
    Ok(r)
}

/// Imports the records read from `input` (named `name` in errors) into `store`, as received at
/// `received_ns`.
pub fn import(
    input: &mut dyn BufRead,
    name: &str,
    received_ns: u64,
    store: &mut dyn FlowStore,
) -> Result<Imported, ImportError> {
    let at = |line: u64, why: String| ImportError::Input(format!("{name}:{line}: {why}"));
    let mut done = Imported::default();
    let mut format = None;
    let mut batch = Vec::with_capacity(BATCH);
    let mut text = String::new();
    loop {
        text.clear();
        let n = input
            .read_line(&mut text)
            .map_err(|e| at(done.lines + 1, format!("read: {e}")))?;
        if n == 0 {
            break;
        }
        done.lines += 1;
        let line = text.trim_end_matches(['\n', '\r']);
        if line.trim().is_empty() {
            continue;
        }
        let f = match format {
            Some(f) => f,
            None => {
                let f = if line.starts_with('{') {
                    Format::JsonLines
                } else if line
                    .strip_prefix(CSV_HEADER)
                    .is_some_and(|rest| rest.is_empty() || rest.starts_with(','))
                {
                    format = Some(Format::Csv);
                    continue;
                } else {
                    return Err(at(
                        done.lines,
                        "neither a JSON flow record nor the CSV header of tapflow flows".into(),
                    ));
                };
                format = Some(f);
                f
            }
        };
        let flow = match parse_line(f, line) {
            Ok(flow) => flow,
            Err(why) => {
                // The lines before the bad one go into the store, as they would have anyway.
                store.insert(&batch)?;
                return Err(at(done.lines, why));
            }
        };
        batch.push(StoredFlow {
            flow,
            sampling: 1,
            received_ns,
            ..StoredFlow::default()
        });
        if batch.len() == BATCH {
            store.insert(&batch)?;
            done.flows += batch.len() as u64;
            batch.clear();
        }
    }
    if !batch.is_empty() {
        store.insert(&batch)?;
        done.flows += batch.len() as u64;
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;

    const JSON: &str = r#"{"proto":6,"src":"192.0.2.1","sport":40000,"dst":"198.51.100.7","dport":443,"vlan":0,"interface":0,"first_ns":1700000000123456789,"last_ns":1700000001123456789,"packets":2,"octets":112,"tcp_flags":19,"rev_first_ns":1700000000200000000,"rev_last_ns":1700000000200000000,"rev_packets":1,"rev_octets":60,"rev_tcp_flags":18,"end_reason":"end"}"#;
    const CSV: &str = "6,192.0.2.1,40000,198.51.100.7,443,0,0,1700000000123456789,1700000001123456789,2,112,19,1700000000200000000,1700000000200000000,1,60,18,end";

    #[test]
    fn json_and_csv_give_the_same_record() {
        let j = parse_line(Format::JsonLines, JSON).unwrap();
        let c = parse_line(Format::Csv, CSV).unwrap();
        assert_eq!(j, c);
        assert_eq!(j.src[..4], [192, 0, 2, 1]);
        assert_eq!((j.sport, j.dport, j.proto), (40000, 443, 6));
        assert_eq!((j.fwd.packets, j.fwd.octets, j.rev.octets), (2, 112, 60));
        assert_eq!(j.end_reason, EndReason::EndOfFlow);
        assert_eq!(j.start_ns(), 1_700_000_000_123_456_789);
    }

    #[test]
    fn bad_lines_say_why() {
        let e = |f, l: &str| parse_line(f, l).unwrap_err();
        assert!(e(Format::Csv, "6,1.2.3.4").contains("2 fields"));
        let bad_port = CSV.replace(",40000,", ",70000,");
        assert!(e(Format::Csv, &bad_port).contains("sport 70000 is above 65535"));
        let mixed = CSV.replace("198.51.100.7", "2001:db8::1");
        assert!(e(Format::Csv, &mixed).contains("not of one IP version"));
        let reason = CSV.replace(",end", ",done");
        assert!(e(Format::Csv, &reason).contains("end_reason 'done'"));
        assert!(e(Format::JsonLines, "{\"proto\":6}").contains("missing field"));
        let big = JSON.replace("\"proto\":6", "\"proto\":300");
        assert!(e(Format::JsonLines, &big).contains("not a flow record"));
    }
}
