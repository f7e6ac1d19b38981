//! A table for people (`tapflow flows` on a terminal): aligned columns under a header, like
//! `nfdump`'s default output, numbers in human units (`12.3k` packets, `1.5M` bytes), the
//! endpoints last so that IPv6 addresses never push the other columns out of line. The flows
//! that end together (a batch) are printed in the order they started. Each line is formatted
//! with `fmt`; the table is for a terminal, not for line rate.

use std::io::Write as _;

use tapflow_wire::flowexport::{ConfigError, Stats};
use tapflow_wire::flowrecord::FlowRecord;
use tapflow_wire::ipv4::IpProtocol;

use super::{EncoderConfig, FlowEncoder};
use tapflow_store::query::time::civil_from_days;

/// The column titles.
const HEADER: &str = concat!(
    "Start (UTC)             Duration Proto   Pkts  Bytes  RPkts RBytes Flags    End     ",
    "Initiator -> Responder\n"
);

/// The table encoder: one reused line buffer and the batch's order.
#[derive(Debug)]
pub struct Table {
    line: Vec<u8>,
    order: Vec<usize>,
    stats: Stats,
}

/// A table encoder (it takes no settings).
pub fn build(_: &EncoderConfig) -> Result<Box<dyn FlowEncoder>, ConfigError> {
    Ok(Box::new(Table {
        line: Vec::with_capacity(256),
        order: Vec::new(),
        stats: Stats::default(),
    }))
}

impl FlowEncoder for Table {
    fn begin(&mut self, out: &mut dyn FnMut(&[u8])) {
        out(HEADER.as_bytes());
    }

    fn encode(
        &mut self,
        records: &[FlowRecord],
        _now_ns: u64,
        _epoch_ns: u64,
        out: &mut dyn FnMut(&[u8]),
    ) {
        self.order.clear();
        self.order.extend(0..records.len());
        self.order.sort_by_key(|&i| records[i].start_ns());
        for &i in &self.order {
            self.line.clear();
            table_line(&records[i], &mut self.line);
            out(&self.line);
        }
        self.stats.records += records.len() as u64;
    }

    fn stats(&self) -> Stats {
        self.stats
    }
}

fn table_line(r: &FlowRecord, out: &mut Vec<u8>) {
    let start = r.start_ns();
    let dur = r.end_ns().saturating_sub(start);
    let ends = |a: std::net::IpAddr, port: u16| -> String {
        if r.is_icmp() || matches!(r.proto, 6 | 17 | 33 | 132 | 136) {
            match a {
                std::net::IpAddr::V6(_) => format!("[{a}]:{port}"),
                std::net::IpAddr::V4(_) => format!("{a}:{port}"),
            }
        } else {
            a.to_string()
        }
    };
    let (src, dst) = if r.is_icmp() {
        (
            r.src_addr().to_string(),
            format!(
                "{} type {} code {}",
                r.dst_addr(),
                r.dport >> 8,
                r.dport & 0xff
            ),
        )
    } else {
        (ends(r.src_addr(), r.sport), ends(r.dst_addr(), r.dport))
    };
    let proto = match IpProtocol::from_u8(r.proto).keyword() {
        Some(k) => k.to_string(),
        None => r.proto.to_string(),
    };
    let _ = writeln!(
        out,
        "{} {:>8} {:<5} {:>6} {:>6} {:>6} {:>6} {:<8} {:<7} {src} -> {dst}",
        utc(start),
        duration(dur),
        &proto[..proto.len().min(5)],
        count(r.fwd.packets),
        bytes(r.fwd.octets),
        count(r.rev.packets),
        bytes(r.rev.octets),
        tcp_flags(r.proto, r.fwd.tcp_flags | r.rev.tcp_flags),
        r.end_reason.name()
    );
}

/// A count in at most 6 characters: `950`, `12.3k`, `1.49M`.
fn count(n: u64) -> String {
    let x = n as f64;
    let scaled = |v: f64, s: &str| {
        if v >= 100.0 {
            format!("{v:.0}{s}")
        } else if v >= 10.0 {
            format!("{v:.1}{s}")
        } else {
            format!("{v:.2}{s}")
        }
    };
    match n {
        0..1000 => n.to_string(),
        1000..1_000_000 => scaled(x / 1e3, "k"),
        1_000_000..1_000_000_000 => scaled(x / 1e6, "M"),
        _ => scaled(x / 1e9, "G"),
    }
}

/// Bytes in at most 6 characters, powers of 1024: `950`, `12.3K`, `1.50M`.
fn bytes(n: u64) -> String {
    let scaled = |shift: u32, s: &str| {
        let v = n as f64 / (1u64 << shift) as f64;
        if v >= 100.0 {
            format!("{v:.0}{s}")
        } else if v >= 10.0 {
            format!("{v:.1}{s}")
        } else {
            format!("{v:.2}{s}")
        }
    };
    match n {
        0..1024 => n.to_string(),
        1024..0x10_0000 => scaled(10, "K"),
        0x10_0000..0x4000_0000 => scaled(20, "M"),
        _ => scaled(30, "G"),
    }
}

/// A duration to the ms under a minute (`1.000`), then `12m05s`, then `3h07m`.
fn duration(ns: u64) -> String {
    let s = ns / 1_000_000_000;
    match s {
        0..60 => format!("{s}.{:03}", ns / 1_000_000 % 1000),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, s / 60 % 60),
    }
}

/// TCP flags as nfdump writes them: `CEUAPRSF` with `.` for a clear bit; `-` for non-TCP.
fn tcp_flags(proto: u8, f: u16) -> String {
    if proto != 6 {
        return "-".into();
    }
    "CEUAPRSF"
        .chars()
        .enumerate()
        .map(|(i, c)| if f & (0x80 >> i) != 0 { c } else { '.' })
        .collect()
}

/// `YYYY-MM-DD hh:mm:ss.mmm` in UTC.
fn utc(ns: u64) -> String {
    let secs = ns / 1_000_000_000;
    let (days, sod) = ((secs / 86_400) as i64, secs % 86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}.{:03}",
        sod / 3600,
        sod / 60 % 60,
        sod % 60,
        ns / 1_000_000 % 1000
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sink::flow::encoder::Transport;
    use crate::sink::flow::text::tests::{record, written};

    #[test]
    fn table_reads_like_nfdump() {
        let cfg = EncoderConfig {
            max_message_len: usize::MAX,
            observation_domain: 0,
            transport: Transport::File,
        };
        let (header, s) = written(&mut *build(&cfg).unwrap(), &record());
        assert!(header.starts_with("Start (UTC)"), "{header}");
        assert_eq!(
            s,
            "2023-11-14 22:13:20.123    1.000 tcp        2    112      1     60 ...A..SF end     \
             192.0.2.1:40000 -> 198.51.100.7:443\n"
        );
        // The columns before the endpoints line up with the header's, whatever the family.
        let mut v6 = record();
        v6.ipv6 = true;
        v6.src = [0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
        let (_, s6) = written(&mut *build(&cfg).unwrap(), &v6);
        let at = header.find("Initiator").unwrap();
        assert_eq!(s6[..at], s[..at]);
        assert!(s6[at..].starts_with("[2001:db8::1]:40000 -> "), "{s6}");
    }

    #[test]
    fn human_units_and_batches_in_start_order() {
        assert_eq!(count(999), "999");
        assert_eq!(count(12_345), "12.3k");
        assert_eq!(count(1_490_000), "1.49M");
        assert_eq!(bytes(1536), "1.50K");
        assert_eq!(bytes(150 << 20), "150M");
        assert_eq!(duration(61_500_000_000), "1m01s");
        assert_eq!(
            duration(3 * 3600 * 1_000_000_000 + 7 * 60 * 1_000_000_000),
            "3h07m"
        );
        assert_eq!(utc(0), "1970-01-01 00:00:00.000");
        let mut t = Table {
            line: Vec::new(),
            order: Vec::new(),
            stats: Stats::default(),
        };
        let (a, mut b) = (record(), record());
        b.fwd = Default::default();
        b.fwd.add(1_600_000_000_000_000_000, 60, 0x02);
        let mut text = Vec::new();
        t.encode(&[a, b], 0, 0, &mut |l| text.extend_from_slice(l));
        let text = String::from_utf8(text).unwrap();
        assert!(text.starts_with("2020-09-13"), "{text}");
    }
}
