//! A table for people (`tapflow flows` on a terminal): aligned columns under a header, like
//! `nfdump`'s default output. Each line is formatted with `fmt`; the table is for a terminal,
//! not for line rate.

use std::io::Write as _;

use tapflow_wire::flowexport::{ConfigError, Stats};
use tapflow_wire::flowrecord::FlowRecord;

use super::{EncoderConfig, FlowEncoder};

/// The column titles.
const HEADER: &str = concat!(
    "Start (UTC)                    Duration Proto Initiator                    ",
    "Responder                    Packets     Bytes  RPackets    RBytes Flags    ",
    "RFlags   End\n"
);

/// The table encoder: one reused line buffer.
#[derive(Debug)]
pub struct Table {
    line: Vec<u8>,
    stats: Stats,
}

/// A table encoder (it takes no settings).
pub fn build(_: &EncoderConfig) -> Result<Box<dyn FlowEncoder>, ConfigError> {
    Ok(Box::new(Table {
        line: Vec::with_capacity(256),
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
        for r in records {
            self.line.clear();
            table_line(r, &mut self.line);
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
            format!("{} t{}c{}", r.dst_addr(), r.dport >> 8, r.dport & 0xff),
        )
    } else {
        (ends(r.src_addr(), r.sport), ends(r.dst_addr(), r.dport))
    };
    let _ = writeln!(
        out,
        "{} {:>8}.{:03} {:<5} {:<28} {:<28} {:>7} {:>9} {:>9} {:>9} {:<8} {:<8} {}",
        utc(start),
        dur / 1_000_000_000,
        dur / 1_000_000 % 1000,
        proto_name(r.proto, r.ipv6),
        src,
        dst,
        r.fwd.packets,
        r.fwd.octets,
        r.rev.packets,
        r.rev.octets,
        tcp_flags(r.proto, r.fwd.tcp_flags),
        tcp_flags(r.proto, r.rev.tcp_flags),
        r.end_reason.name()
    );
}

fn proto_name(proto: u8, ipv6: bool) -> String {
    match (proto, ipv6) {
        (6, _) => "TCP".into(),
        (17, _) => "UDP".into(),
        (1, false) => "ICMP".into(),
        (58, true) => "ICMP6".into(),
        (47, _) => "GRE".into(),
        (50, _) => "ESP".into(),
        (132, _) => "SCTP".into(),
        (p, _) => p.to_string(),
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

/// `YYYY-MM-DD hh:mm:ss.nnnnnnnnn` in UTC.
fn utc(ns: u64) -> String {
    let secs = ns / 1_000_000_000;
    let (days, sod) = ((secs / 86_400) as i64, secs % 86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}.{:09}",
        sod / 3600,
        sod / 60 % 60,
        sod % 60,
        ns % 1_000_000_000
    )
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian (H. Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
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
        assert!(
            s.starts_with("2023-11-14 22:13:20.123456789        1.000 TCP   192.0.2.1:40000"),
            "{s}"
        );
        assert!(s.contains("198.51.100.7:443"));
        assert!(s.ends_with("...A..SF ...A..S. end\n"), "{s}");
    }

    #[test]
    fn dates() {
        assert_eq!(utc(0), "1970-01-01 00:00:00.000000000");
        assert_eq!(civil_from_days(19_723), (2024, 1, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
    }
}
