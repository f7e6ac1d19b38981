//! The one printer of query results: an aligned table with human units (the default), CSV, or
//! JSON lines (one object per row).

use std::io::{self, Write};

use serde::Serialize;

use super::filter::OneWay;
use super::result::{Counters, Names, QueryResult, Row, Summary, Value, addr_text, proto_name};
use super::time::format_time;
use super::{Key, Kind, Query};

/// How results are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Aligned columns, counts in k/M/G (×1000).
    Table,
    /// CSV with a header line, exact numbers, times as RFC 3339 UTC.
    Csv,
    /// One JSON object per line, exact numbers, times as RFC 3339 UTC.
    Json,
}

/// Prints `result` (the answer to `query`) to `out`.
pub fn print(
    out: &mut dyn Write,
    query: &Query,
    result: &QueryResult,
    format: Format,
) -> io::Result<()> {
    let every_us = match query.kind {
        Kind::Series { every_us, .. } => Some(every_us),
        _ => None,
    };
    let lines = match result {
        QueryResult::Flows(rows) => flow_lines(rows, format),
        QueryResult::Table {
            keys,
            rows,
            total,
            as_names,
            if_names,
            ..
        } => table_lines(
            keys,
            rows,
            total,
            Names { as_names, if_names },
            every_us,
            format,
        ),
        QueryResult::Summary(s) => summary_lines(s, format),
    };
    match format {
        Format::Table => write_aligned(out, &lines),
        Format::Csv | Format::Json => {
            for l in lines {
                writeln!(out, "{}", l.join(","))?;
            }
            Ok(())
        }
    }
}

/// A count in nfdump's human form: `1234`, `12.3 k`, `1.2 M`, `3.4 G` (×1000).
pub fn human(n: f64) -> String {
    const UNITS: [&str; 5] = ["", " k", " M", " G", " T"];
    let mut v = n;
    let mut u = 0;
    while v >= 1000.0 && u + 1 < UNITS.len() {
        v /= 1000.0;
        u += 1;
    }
    if u == 0 {
        format!("{}", n.round() as u64)
    } else {
        format!("{v:.1}{}", UNITS[u])
    }
}

fn rfc3339(us: i64) -> String {
    let t = format_time(us - us.rem_euclid(1000)).replace(' ', "T");
    format!("{t}{:03}Z", us.rem_euclid(1000))
}

/// `s` as one CSV field: quoted, its quotes doubled, if it holds a comma, a quote or a newline.
pub fn csv_field(s: String) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s
    }
}

fn json_line<T: Serialize>(v: &T) -> Vec<String> {
    vec![serde_json::to_string(v).unwrap_or_default()]
}

fn write_aligned(out: &mut dyn Write, lines: &[Vec<String>]) -> io::Result<()> {
    let cols = lines.iter().map(Vec::len).max().unwrap_or(0);
    let mut width = vec![0; cols];
    // A line of one cell (a footer, a blank) is printed as it is.
    for l in lines.iter().filter(|l| l.len() > 1) {
        for (i, c) in l.iter().enumerate() {
            width[i] = width[i].max(c.chars().count());
        }
    }
    for l in lines {
        if l.len() <= 1 {
            writeln!(out, "{}", l.first().map_or("", String::as_str))?;
            continue;
        }
        let mut s = String::new();
        for (i, c) in l.iter().enumerate() {
            if i > 0 {
                s.push_str("  ");
            }
            // Text left, numbers right.
            let numeric = c.starts_with(|ch: char| ch.is_ascii_digit()) && !c.contains([':', '.'])
                || c.ends_with(['k', 'M', 'G', 'T', '%']);
            if numeric {
                s.push_str(&format!("{c:>w$}", w = width[i]));
            } else {
                s.push_str(&format!("{c:<w$}", w = width[i]));
            }
        }
        writeln!(out, "{}", s.trim_end())?;
    }
    Ok(())
}

fn pct(part: u64, total: u64) -> String {
    if total == 0 {
        "0.0%".into()
    } else {
        format!("{:.1}%", part as f64 * 100.0 / total as f64)
    }
}

fn bpp(c: &Counters) -> u64 {
    c.bytes.checked_div(c.packets).unwrap_or(0)
}

/// A table row in JSON.
#[derive(Serialize)]
struct JsonRow {
    #[serde(skip_serializing_if = "Option::is_none")]
    time: Option<String>,
    #[serde(flatten)]
    keys: serde_json::Map<String, serde_json::Value>,
    flows: u64,
    packets: u64,
    bytes: u64,
    bps: f64,
    pps: f64,
    first: Option<String>,
    last: Option<String>,
}

/// The key columns' headers: each key's name, an AS key's followed by `NAME_name`.
fn key_headers(keys: &[Key]) -> Vec<String> {
    let mut h = Vec::new();
    for k in keys {
        h.push(k.name().to_string());
        if k.is_named() {
            h.push(format!("{}_name", k.name()));
        }
    }
    h
}

/// The key cells of a row: each value as text, an AS number or an interface followed by its
/// name (`unknown` when there is none).
fn key_cells(keys: &[Key], values: &[Value], names: Names<'_>, unknown: &str) -> Vec<String> {
    let mut l = Vec::new();
    for (i, (v, k)) in values.iter().zip(keys).enumerate() {
        l.push(v.show(*k));
        if k.is_named() {
            l.push(names.of(keys, values, i).unwrap_or(unknown).to_string());
        }
    }
    l
}

fn table_lines(
    keys: &[Key],
    rows: &[Row],
    total: &Counters,
    names: Names<'_>,
    every_us: Option<i64>,
    format: Format,
) -> Vec<Vec<String>> {
    // A series' rates are over its bucket; a group's over its flows' span.
    let rates = |c: &Counters| match every_us {
        Some(e) => (
            c.bytes as f64 * 8e6 / e as f64,
            c.packets as f64 * 1e6 / e as f64,
        ),
        None => (c.bps(), c.pps()),
    };
    let times = |c: &Counters| (c.flows > 0).then_some((c.first_us, c.last_us));
    let mut lines = Vec::new();
    match format {
        Format::Table => {
            let mut h: Vec<String> = Vec::new();
            if every_us.is_some() {
                h.push("time".into());
            } else {
                h.extend(["first seen".into(), "duration".into()]);
            }
            h.extend(key_headers(keys));
            for x in [
                "flows", "flows%", "packets", "packets%", "bytes", "bytes%", "pps", "bps", "bpp",
            ] {
                h.push(x.into());
            }
            lines.push(h);
            for r in rows {
                let c = &r.counters;
                let mut l = Vec::new();
                match r.time_us {
                    Some(t) => l.push(format_time(t)),
                    None => {
                        l.push(format_time(c.first_us));
                        l.push(duration(c.span_us()));
                    }
                }
                l.extend(key_cells(keys, &r.values, names, "-"));
                let (bps, pps) = rates(c);
                l.extend([
                    human(c.flows as f64),
                    pct(c.flows, total.flows),
                    human(c.packets as f64),
                    pct(c.packets, total.packets),
                    human(c.bytes as f64),
                    pct(c.bytes, total.bytes),
                    human(pps),
                    human(bps),
                    bpp(c).to_string(),
                ]);
                lines.push(l);
            }
            lines.push(vec![]);
            lines.push(vec![format!(
                "total: {} flows, {} packets, {} bytes",
                total.flows, total.packets, total.bytes
            )]);
        }
        Format::Csv => {
            let mut h: Vec<String> = Vec::new();
            if every_us.is_some() {
                h.push("time".into());
            }
            h.extend(key_headers(keys));
            h.extend(
                ["flows", "packets", "bytes", "bps", "pps", "first", "last"].map(String::from),
            );
            lines.push(h);
            for r in rows {
                let c = &r.counters;
                let (bps, pps) = rates(c);
                let mut l: Vec<String> = r.time_us.map(rfc3339).into_iter().collect();
                l.extend(
                    key_cells(keys, &r.values, names, "")
                        .into_iter()
                        .map(csv_field),
                );
                let (first, last) = times(c).map_or((String::new(), String::new()), |(a, b)| {
                    (rfc3339(a), rfc3339(b))
                });
                l.extend([
                    c.flows.to_string(),
                    c.packets.to_string(),
                    c.bytes.to_string(),
                    format!("{bps:.0}"),
                    format!("{pps:.0}"),
                    first,
                    last,
                ]);
                lines.push(l);
            }
        }
        Format::Json => {
            let keys_of = keys;
            for r in rows {
                let c = &r.counters;
                let (bps, pps) = rates(c);
                let mut keys = serde_json::Map::new();
                for (i, (k, v)) in keys_of.iter().zip(&r.values).enumerate() {
                    let j = match v {
                        Value::Num(n)
                            if !matches!(k, Key::Protocol | Key::SrcCountry | Key::DstCountry) =>
                        {
                            (*n).into()
                        }
                        Value::Text(t) => (*t).into(),
                        v => v.show(*k).into(),
                    };
                    keys.insert(k.name().to_string(), j);
                    if let Some(name) = names.of(keys_of, &r.values, i) {
                        keys.insert(format!("{}_name", k.name()), name.into());
                    }
                }
                lines.push(json_line(&JsonRow {
                    time: r.time_us.map(rfc3339),
                    keys,
                    flows: c.flows,
                    packets: c.packets,
                    bytes: c.bytes,
                    bps: bps.round(),
                    pps: pps.round(),
                    first: times(c).map(|t| rfc3339(t.0)),
                    last: times(c).map(|t| rfc3339(t.1)),
                }));
            }
        }
    }
    lines
}

fn duration(us: i64) -> String {
    let s = us / 1_000_000;
    format!(
        "{:02}:{:02}:{:02}.{:03}",
        s / 3600,
        s / 60 % 60,
        s % 60,
        us % 1_000_000 / 1000
    )
}

fn proto_text(p: u8) -> String {
    proto_name(p).map_or_else(|| p.to_string(), str::to_owned)
}

fn flags_text(f: u16) -> String {
    "CEUAPRSF"
        .chars()
        .enumerate()
        .map(|(i, c)| if f & (0x80 >> i) != 0 { c } else { '.' })
        .collect()
}

/// A listed flow in JSON.
#[derive(Serialize)]
struct JsonFlow {
    time_start: String,
    time_end: String,
    protocol: String,
    src_addr: String,
    src_port: u16,
    dst_addr: String,
    dst_port: u16,
    tcp_flags: String,
    packets: u64,
    bytes: u64,
    exporter: String,
    in_if: u32,
    out_if: u32,
    vlan: u16,
    reverse: bool,
}

fn flow_lines(rows: &[OneWay], format: Format) -> Vec<Vec<String>> {
    let mut lines = Vec::new();
    match format {
        Format::Table => {
            lines.push(
                [
                    "first seen",
                    "duration",
                    "proto",
                    "src addr:port",
                    "",
                    "dst addr:port",
                    "flags",
                    "packets",
                    "bytes",
                ]
                .map(String::from)
                .to_vec(),
            );
            let ep = |a: &[u8; 16], p: u16| {
                let t = addr_text(a);
                if t.contains(':') {
                    format!("[{t}]:{p}")
                } else {
                    format!("{t}:{p}")
                }
            };
            for r in rows {
                lines.push(vec![
                    format_time(r.start_us),
                    duration(r.end_us - r.start_us),
                    proto_text(r.protocol),
                    ep(&r.src, r.sport),
                    "->".into(),
                    ep(&r.dst, r.dport),
                    flags_text(r.tcp_flags),
                    human(r.packets as f64),
                    human(r.bytes as f64),
                ]);
            }
            lines.push(vec![]);
            lines.push(vec![format!("{} flows", rows.len())]);
        }
        Format::Csv | Format::Json => {
            if format == Format::Csv {
                lines.push(
                    [
                        "time_start",
                        "time_end",
                        "protocol",
                        "src_addr",
                        "src_port",
                        "dst_addr",
                        "dst_port",
                        "tcp_flags",
                        "packets",
                        "bytes",
                        "exporter",
                        "in_if",
                        "out_if",
                        "vlan",
                        "reverse",
                    ]
                    .map(String::from)
                    .to_vec(),
                );
            }
            for r in rows {
                let j = JsonFlow {
                    time_start: rfc3339(r.start_us),
                    time_end: rfc3339(r.end_us),
                    protocol: proto_text(r.protocol),
                    src_addr: addr_text(&r.src),
                    src_port: r.sport,
                    dst_addr: addr_text(&r.dst),
                    dst_port: r.dport,
                    tcp_flags: flags_text(r.tcp_flags),
                    packets: r.packets,
                    bytes: r.bytes,
                    exporter: addr_text(&r.exporter),
                    in_if: r.in_if,
                    out_if: r.out_if,
                    vlan: r.vlan,
                    reverse: r.reverse,
                };
                if format == Format::Json {
                    lines.push(json_line(&j));
                } else {
                    lines.push(vec![
                        j.time_start,
                        j.time_end,
                        j.protocol,
                        j.src_addr,
                        j.src_port.to_string(),
                        j.dst_addr,
                        j.dst_port.to_string(),
                        j.tcp_flags,
                        j.packets.to_string(),
                        j.bytes.to_string(),
                        j.exporter,
                        j.in_if.to_string(),
                        j.out_if.to_string(),
                        j.vlan.to_string(),
                        j.reverse.to_string(),
                    ]);
                }
            }
        }
    }
    lines
}

/// The summary in JSON.
#[derive(Serialize)]
struct JsonSummary {
    flows: u64,
    packets: u64,
    bytes: u64,
    first: Option<String>,
    last: Option<String>,
    tcp: [u64; 3],
    udp: [u64; 3],
    icmp: [u64; 3],
    other: [u64; 3],
}

fn summary_lines(s: &Summary, format: Format) -> Vec<Vec<String>> {
    let parts = [
        ("", s.total),
        ("_tcp", s.tcp),
        ("_udp", s.udp),
        ("_icmp", s.icmp),
        ("_other", s.other),
    ];
    let t = s.total;
    match format {
        // nfdump -I's words, one per line.
        Format::Table => {
            let mut v = Vec::new();
            for (name, get) in [
                ("Flows", (|c: &Counters| c.flows) as fn(&Counters) -> u64),
                ("Packets", |c| c.packets),
                ("Bytes", |c| c.bytes),
            ] {
                for (suffix, c) in &parts {
                    v.push(vec![format!("{name}{suffix}: {}", get(c))]);
                }
            }
            if t.flows > 0 {
                v.push(vec![format!("First: {}", t.first_us.div_euclid(1_000_000))]);
                v.push(vec![format!("Last: {}", t.last_us.div_euclid(1_000_000))]);
                v.push(vec![format!(
                    "msec_first: {}",
                    t.first_us.rem_euclid(1_000_000) / 1000
                )]);
                v.push(vec![format!(
                    "msec_last: {}",
                    t.last_us.rem_euclid(1_000_000) / 1000
                )]);
            }
            v
        }
        Format::Csv => {
            let mut v = vec![
                ["protocol", "flows", "packets", "bytes"]
                    .map(String::from)
                    .to_vec(),
            ];
            for (name, c) in [
                ("any", t),
                ("tcp", s.tcp),
                ("udp", s.udp),
                ("icmp", s.icmp),
                ("other", s.other),
            ] {
                v.push(vec![
                    name.into(),
                    c.flows.to_string(),
                    c.packets.to_string(),
                    c.bytes.to_string(),
                ]);
            }
            v
        }
        Format::Json => {
            let three = |c: Counters| [c.flows, c.packets, c.bytes];
            json_line(&JsonSummary {
                flows: t.flows,
                packets: t.packets,
                bytes: t.bytes,
                first: (t.flows > 0).then(|| rfc3339(t.first_us)),
                last: (t.flows > 0).then(|| rfc3339(t.last_us)),
                tcp: three(s.tcp),
                udp: three(s.udp),
                icmp: three(s.icmp),
                other: three(s.other),
            })
            .into_iter()
            .map(|l| vec![l])
            .collect()
        }
    }
}
