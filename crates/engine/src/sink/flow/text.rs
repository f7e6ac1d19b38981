//! Flow records as text for scripts: the columns CSV ([`super::encoder::csv`]) and JSON lines
//! ([`super::encoder::json`]) share, in a stable order; the CSV header names them and so do the
//! JSON keys:
//!
//! `proto,src,sport,dst,dport,vlan,interface,first_ns,last_ns,packets,octets,tcp_flags,
//! rev_first_ns,rev_last_ns,rev_packets,rev_octets,rev_tcp_flags,end_reason,proto_name,first,
//! last,rev_first,rev_last`
//!
//! `src` is the initiator; `*_ns` times are ns since 1970 (0 for a direction without packets),
//! and `first`, `last`, `rev_first`, `rev_last` the same in ISO 8601, UTC, to the ns
//! (`2023-11-14T22:13:20.123456789Z`; empty for a direction without packets); `proto_name` is
//! the IANA keyword beside the number (`tcp`, `udp`, `ipv6-icmp`; the number for one without);
//! for ICMP `sport` is 0 and `dport` is `type << 8 | code`; `end_reason` is one of idle,
//! active, end, forced, evicted.

use std::io::Write as _;

use tapflow_wire::flowrecord::FlowRecord;
use tapflow_wire::ipv4::IpProtocol;

/// Writes the column names once, as the CSV header and as the list of JSON keys.
macro_rules! columns {
    ($first:literal $(, $rest:literal)* $(,)?) => {
        /// The CSV header line (without newline).
        pub const CSV_HEADER: &str = concat!($first $(, ",", $rest)*);

        /// The CSV header line with its newline.
        pub(crate) const CSV_HEADER_LINE: &str = concat!($first $(, ",", $rest)*, "\n");

        /// The column names one by one (the JSON keys).
        pub(crate) const COLUMNS: &[&str] = &[$first $(, $rest)*];

        /// How many columns there are.
        pub(crate) const COLUMN_COUNT: usize = COLUMNS.len();
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
    "proto_name",
    "first",
    "last",
    "rev_first",
    "rev_last",
);

/// The values of `r`, in column order.
pub(crate) fn values(r: &FlowRecord) -> [Value<'_>; COLUMN_COUNT] {
    [
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
        match IpProtocol::from_u8(r.proto).keyword() {
            Some(k) => Value::Text(k),
            None => Value::Num(r.proto.into()),
        },
        Value::Time(r.fwd.first_ns),
        Value::Time(r.fwd.last_ns),
        Value::Time(r.rev.first_ns),
        Value::Time(r.rev.last_ns),
    ]
}

/// One CSV column or JSON value. Numbers and IPv4 addresses are written by hand: a record is
/// written for every flow, and `fmt` machinery per field was most of its cost.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Value<'a> {
    Num(u64),
    /// An address: IPv6, and the 16 bytes (IPv4 in the first 4).
    Addr(bool, &'a [u8; 16]),
    Text(&'a str),
    /// A time in ns since 1970, written in ISO 8601 (nothing for 0).
    Time(u64),
}

impl Value<'_> {
    pub(crate) fn push_to(self, out: &mut Vec<u8>) {
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
            Value::Time(0) => {}
            Value::Time(ns) => push_iso8601(out, ns),
        }
    }
}

/// Appends `ns` (since 1970) as `YYYY-MM-DDThh:mm:ss.nnnnnnnnnZ`, by hand like the numbers.
pub(crate) fn push_iso8601(out: &mut Vec<u8>, ns: u64) {
    let secs = ns / 1_000_000_000;
    let (y, m, d) = civil_from_days((secs / 86_400) as i64);
    let sod = secs % 86_400;
    let mut put = |n: u64, width: usize, after: u8| {
        let mut digits = [b'0'; 9];
        let mut v = n;
        for slot in digits[..width].iter_mut().rev() {
            *slot = b'0' + (v % 10) as u8;
            v /= 10;
        }
        out.extend_from_slice(&digits[..width]);
        out.push(after);
    };
    put(y.max(0) as u64, 4, b'-');
    put(m.into(), 2, b'-');
    put(d.into(), 2, b'T');
    put(sod / 3600, 2, b':');
    put(sod / 60 % 60, 2, b':');
    put(sod % 60, 2, b'.');
    put(ns % 1_000_000_000, 9, b'Z');
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian (H. Hinnant's algorithm).
pub(crate) fn civil_from_days(z: i64) -> (i64, u32, u32) {
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::sink::flow::encoder::FlowEncoder;
    use tapflow_wire::flowrecord::EndReason;

    /// A TCP biflow 192.0.2.1:40000 → 198.51.100.7:443 that ended with FIN.
    pub(crate) fn record() -> FlowRecord {
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

    /// What `enc` writes at the start and for `r`, as text.
    pub(crate) fn written(enc: &mut dyn FlowEncoder, r: &FlowRecord) -> (String, String) {
        let (mut head, mut line) = (Vec::new(), Vec::new());
        enc.begin(&mut |b| head.extend_from_slice(b));
        enc.encode(std::slice::from_ref(r), 0, 0, &mut |b| {
            line.extend_from_slice(b)
        });
        assert_eq!(enc.stats().records, 1);
        (
            String::from_utf8(head).unwrap(),
            String::from_utf8(line).unwrap(),
        )
    }

    #[test]
    fn iso8601_agrees_with_chrono() {
        for ns in [
            1u64,
            1_700_000_000_123_456_789,
            951_782_400_000_000_007, // 2000-02-29
            4_102_444_799_999_999_999,
        ] {
            let mut s = Vec::new();
            push_iso8601(&mut s, ns);
            let want = chrono::DateTime::from_timestamp_nanos(ns as i64)
                .format("%Y-%m-%dT%H:%M:%S%.9fZ")
                .to_string();
            assert_eq!(String::from_utf8(s).unwrap(), want);
        }
    }

    #[test]
    fn decimals_and_columns() {
        for n in [0u64, 7, 10, 99, 100, 101, 1_000_000_007, u64::MAX] {
            let mut s = Vec::new();
            push_decimal(&mut s, n);
            assert_eq!(s, n.to_string().as_bytes());
        }
        assert_eq!(COLUMNS.join(","), CSV_HEADER);
        assert_eq!(COLUMNS.len(), COLUMN_COUNT);
    }
}
