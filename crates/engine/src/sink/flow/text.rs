//! Flow records as text: a table for people (`tapflow flows` on a terminal), CSV and JSON lines
//! for scripts. The CSV columns and JSON keys are the same and stable:
//!
//! `proto,src,sport,dst,dport,vlan,interface,first_ns,last_ns,packets,octets,tcp_flags,
//! rev_first_ns,rev_last_ns,rev_packets,rev_octets,rev_tcp_flags,end_reason`
//!
//! `src` is the initiator; times are ns since 1970 (0 for a direction without packets); for
//! ICMP `sport` is 0 and `dport` is `type << 8 | code`; `end_reason` is one of idle, active,
//! end, forced, evicted.

use std::io::Write as _;

use tapflow_wire::flowrecord::FlowRecord;

/// A text format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextFormat {
    /// Aligned columns with a header, like `nfdump`'s default output.
    Table,
    /// Comma-separated values with a header line.
    Csv,
    /// One JSON object per line.
    Json,
}

/// Writes the column names once, as the CSV header and as the list of JSON keys.
macro_rules! columns {
    ($first:literal $(, $rest:literal)* $(,)?) => {
        /// The CSV header line (without newline).
        pub const CSV_HEADER: &str = concat!($first $(, ",", $rest)*);

        /// The CSV header line with its newline.
        const CSV_HEADER_LINE: &str = concat!($first $(, ",", $rest)*, "\n");

        /// The column names one by one (the JSON keys).
        const COLUMNS: &[&str] = &[$first $(, $rest)*];
    };
}

columns!(
    "proto",
    "src",
    "sport",
    "dst",
    "dport",
    "vlan",
    "interface",
    "first_ns",
    "last_ns",
    "packets",
    "octets",
    "tcp_flags",
    "rev_first_ns",
    "rev_last_ns",
    "rev_packets",
    "rev_octets",
    "rev_tcp_flags",
    "end_reason",
);

impl TextFormat {
    /// The lines written before the first record (each ending in a newline).
    pub fn header(self) -> &'static str {
        match self {
            TextFormat::Table => concat!(
                "Start (UTC)                    Duration Proto Initiator                    ",
                "Responder                    Packets     Bytes  RPackets    RBytes Flags    ",
                "RFlags   End\n"
            ),
            TextFormat::Csv => CSV_HEADER_LINE,
            TextFormat::Json => "",
        }
    }

    /// Appends one record as one line (with its newline) to `out`.
    pub fn write(self, r: &FlowRecord, out: &mut Vec<u8>) {
        if self == TextFormat::Table {
            return table_line(r, out);
        }
        // The values in column order.
        let values: [Value<'_>; 18] = [
            Value::Num(r.proto.into()),
            Value::Addr(r.ipv6, &r.src),
            Value::Num(r.sport.into()),
            Value::Addr(r.ipv6, &r.dst),
            Value::Num(r.dport.into()),
            Value::Num(r.vlan.into()),
            Value::Num(r.interface.into()),
            Value::Num(r.fwd.first_ns),
            Value::Num(r.fwd.last_ns),
            Value::Num(r.fwd.packets),
            Value::Num(r.fwd.octets),
            Value::Num(r.fwd.tcp_flags.into()),
            Value::Num(r.rev.first_ns),
            Value::Num(r.rev.last_ns),
            Value::Num(r.rev.packets),
            Value::Num(r.rev.octets),
            Value::Num(r.rev.tcp_flags.into()),
            Value::Text(r.end_reason.name()),
        ];
        let json = self == TextFormat::Json;
        if json {
            out.push(b'{');
        }
        for (k, (name, v)) in COLUMNS.iter().zip(values).enumerate() {
            if k > 0 {
                out.push(b',');
            }
            let quoted = json && !matches!(v, Value::Num(_));
            if json {
                out.push(b'"');
                out.extend_from_slice(name.as_bytes());
                out.extend_from_slice(b"\":");
            }
            if quoted {
                out.push(b'"');
            }
            v.push_to(out);
            if quoted {
                out.push(b'"');
            }
        }
        out.extend_from_slice(if json { b"}\n" } else { b"\n" });
    }
}

/// One CSV column or JSON value. Numbers and IPv4 addresses are written by hand: a record is
/// written for every flow, and `fmt` machinery per field was most of its cost.
#[derive(Debug, Clone, Copy)]
enum Value<'a> {
    Num(u64),
    /// An address: IPv6, and the 16 bytes (IPv4 in the first 4).
    Addr(bool, &'a [u8; 16]),
    Text(&'a str),
}

impl Value<'_> {
    fn push_to(self, out: &mut Vec<u8>) {
        match self {
            Value::Num(n) => push_decimal(out, n),
            Value::Addr(false, a) => {
                for (i, &b) in a[..4].iter().enumerate() {
                    if i > 0 {
                        out.push(b'.');
                    }
                    push_decimal(out, b.into());
                }
            }
            Value::Addr(true, a) => {
                let _ = write!(out, "{}", std::net::Ipv6Addr::from(*a));
            }
            Value::Text(t) => out.extend_from_slice(t.as_bytes()),
        }
    }
}

/// Appends `n` in decimal, two digits per division.
fn push_decimal(out: &mut Vec<u8>, mut n: u64) {
    const PAIRS: &[u8; 200] = b"0001020304050607080910111213141516171819\
                                2021222324252627282930313233343536373839\
                                4041424344454647484950515253545556575859\
                                6061626364656667686970717273747576777879\
                                8081828384858687888990919293949596979899";
    let mut digits = [b'0'; 20];
    let mut at = digits.len();
    while n >= 100 {
        let pair = (n % 100) as usize * 2;
        n /= 100;
        at -= 2;
        digits[at..at + 2].copy_from_slice(&PAIRS[pair..pair + 2]);
    }
    if n >= 10 {
        at -= 2;
        digits[at..at + 2].copy_from_slice(&PAIRS[n as usize * 2..n as usize * 2 + 2]);
    } else {
        at -= 1;
        digits[at] = b'0' + n as u8;
    }
    out.extend_from_slice(&digits[at..]);
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
    use tapflow_wire::flowrecord::EndReason;

    fn record() -> FlowRecord {
        let mut r = FlowRecord {
            proto: 6,
            sport: 40000,
            dport: 443,
            end_reason: EndReason::EndOfFlow,
            ..FlowRecord::default()
        };
        r.src[..4].copy_from_slice(&[192, 0, 2, 1]);
        r.dst[..4].copy_from_slice(&[198, 51, 100, 7]);
        r.fwd.add(1_700_000_000_123_456_789, 60, 0x02);
        r.fwd.add(1_700_000_001_123_456_789, 52, 0x11);
        r.rev.add(1_700_000_000_200_000_000, 60, 0x12);
        r
    }

    #[test]
    fn csv_and_json_carry_every_field() {
        let mut s = Vec::new();
        TextFormat::Csv.write(&record(), &mut s);
        let s = String::from_utf8(s).unwrap();
        assert_eq!(
            s,
            "6,192.0.2.1,40000,198.51.100.7,443,0,0,1700000000123456789,1700000001123456789,2,112,19,1700000000200000000,1700000000200000000,1,60,18,end\n"
        );
        assert_eq!(
            TextFormat::Csv.header().trim_end(),
            CSV_HEADER,
            "header and constant agree"
        );
        assert_eq!(CSV_HEADER.split(',').count(), s.split(',').count());
        let mut j = Vec::new();
        TextFormat::Json.write(&record(), &mut j);
        let j = String::from_utf8(j).unwrap();
        assert!(j.starts_with(r#"{"proto":6,"src":"192.0.2.1","sport":40000,"#));
        assert!(j.ends_with("\"rev_tcp_flags\":18,\"end_reason\":\"end\"}\n"));
        for key in CSV_HEADER.split(',') {
            assert!(j.contains(&format!("\"{key}\":")), "{key} missing in {j}");
        }
    }

    #[test]
    fn table_reads_like_nfdump() {
        let mut s = Vec::new();
        TextFormat::Table.write(&record(), &mut s);
        let s = String::from_utf8(s).unwrap();
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

    #[test]
    fn decimals_and_columns() {
        for n in [0u64, 7, 10, 99, 100, 101, 1_000_000_007, u64::MAX] {
            let mut s = Vec::new();
            push_decimal(&mut s, n);
            assert_eq!(s, n.to_string().as_bytes());
        }
        assert_eq!(COLUMNS.join(","), CSV_HEADER);
    }
}
