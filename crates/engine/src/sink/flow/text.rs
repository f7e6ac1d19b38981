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

use tapflow_store::query::time::civil_from_days;
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

/// One CSV column or JSON value.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Value<'a> {
    Num(u64),
    /// An address: IPv6, and the 16 bytes (IPv4 in the first 4).
    Addr(bool, &'a [u8; 16]),
    Text(&'a str),
    /// A time in ns since 1970, written in ISO 8601 (nothing for 0).
    Time(u64),
}

/// The most one line takes: a JSON line with two full IPv6 addresses and every counter at
/// its largest is under 900 bytes (`longest_lines_fit` checks both formats).
pub(crate) const LINE_MAX: usize = 1024;

/// One CSV or JSON line, put together in a fixed buffer. A line is written for every flow:
/// numbers, IPv4 addresses and times are written by hand, digit pairs straight into place,
/// with no `fmt` machinery and no copy call per field. The writers are inlined into the
/// encoder's loop, so the length stays in a register instead of going through memory at
/// every byte (that alone took a CSV line from 415 to 190 ns).
pub(crate) struct Line {
    buf: [u8; LINE_MAX],
    len: usize,
    /// The last second [`Line::iso8601`] wrote, and its text up to the fraction.
    second: u64,
    time: [u8; 30],
}

impl std::fmt::Debug for Line {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Line").field("len", &self.len).finish()
    }
}

impl Default for Line {
    fn default() -> Self {
        Line {
            buf: [0; LINE_MAX],
            len: 0,
            second: u64::MAX,
            time: *b"0000-00-00T00:00:00.000000000Z",
        }
    }
}

impl Line {
    /// Starts a new line.
    pub(crate) fn clear(&mut self) {
        self.len = 0;
    }

    /// The line so far.
    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }

    /// Appends one byte.
    #[inline(always)]
    pub(crate) fn byte(&mut self, b: u8) {
        self.buf[self.len] = b;
        self.len += 1;
    }

    /// Appends `bytes`.
    #[inline(always)]
    pub(crate) fn bytes(&mut self, bytes: &[u8]) {
        self.buf[self.len..self.len + bytes.len()].copy_from_slice(bytes);
        self.len += bytes.len();
    }

    /// Appends `v`.
    #[inline(always)]
    pub(crate) fn value(&mut self, v: Value<'_>) {
        match v {
            Value::Num(n) => self.decimal(n),
            Value::Addr(false, a) => self.ipv4([a[0], a[1], a[2], a[3]]),
            Value::Addr(true, a) => {
                let mut rest = &mut self.buf[self.len..];
                let room = rest.len();
                let _ = write!(rest, "{}", std::net::Ipv6Addr::from(*a));
                self.len += room - rest.len();
            }
            Value::Text(t) => self.bytes(t.as_bytes()),
            Value::Time(0) => {}
            Value::Time(ns) => self.iso8601(ns),
        }
    }

    /// Appends `n` in decimal, each pair of digits straight into its place: eight digits at
    /// a time split off in 64 bits, the rest in 32 (what `itoa` does).
    #[inline(always)]
    fn decimal(&mut self, mut n: u64) {
        let digits = n.checked_ilog10().map_or(1, |l| l as usize + 1);
        let out = &mut self.buf[self.len..self.len + digits];
        let mut at = digits;
        while n >= 100_000_000 {
            let low = (n % 100_000_000) as u32;
            n /= 100_000_000;
            at -= 8;
            let (hi, lo) = (low / 10_000, low % 10_000);
            out[at..at + 2].copy_from_slice(&pair(hi / 100));
            out[at + 2..at + 4].copy_from_slice(&pair(hi));
            out[at + 4..at + 6].copy_from_slice(&pair(lo / 100));
            out[at + 6..at + 8].copy_from_slice(&pair(lo));
        }
        let mut n = n as u32;
        while n >= 100 {
            at -= 2;
            out[at..at + 2].copy_from_slice(&pair(n));
            n /= 100;
        }
        if n >= 10 {
            out[..2].copy_from_slice(&pair(n));
        } else {
            out[0] = b'0' + n as u8;
        }
        self.len += digits;
    }

    /// Appends an IPv4 address in dotted decimal.
    #[inline(always)]
    fn ipv4(&mut self, a: [u8; 4]) {
        for (i, b) in a.into_iter().enumerate() {
            if i > 0 {
                self.byte(b'.');
            }
            if b >= 100 {
                self.byte(b'0' + b / 100);
            }
            if b >= 10 {
                self.byte(b'0' + b / 10 % 10);
            }
            self.byte(b'0' + b % 10);
        }
    }

    /// Appends `ns` (since 1970) as `YYYY-MM-DDThh:mm:ss.nnnnnnnnnZ`: the 30 bytes put
    /// together two digits per division and appended in one fixed-size copy. The date and
    /// time of the last second written are kept: a line's four times, and the lines of one
    /// batch, mostly fall in the same second, so only the fraction is new.
    #[inline(always)]
    fn iso8601(&mut self, ns: u64) {
        let secs = ns / 1_000_000_000;
        let frac = (ns % 1_000_000_000) as u32;
        if secs != self.second {
            self.second = secs;
            let (y, m, d) = civil_from_days((secs / 86_400) as i64);
            let y = y.clamp(0, 9999) as u32;
            let sod = (secs % 86_400) as u32;
            let s = &mut self.time;
            s[0..2].copy_from_slice(&pair(y / 100));
            s[2..4].copy_from_slice(&pair(y));
            s[5..7].copy_from_slice(&pair(m));
            s[8..10].copy_from_slice(&pair(d));
            s[11..13].copy_from_slice(&pair(sod / 3600));
            s[14..16].copy_from_slice(&pair(sod / 60 % 60));
            s[17..19].copy_from_slice(&pair(sod % 60));
        }
        let s = &mut self.time;
        s[20] = b'0' + (frac / 100_000_000) as u8;
        s[21..23].copy_from_slice(&pair(frac / 1_000_000));
        s[23..25].copy_from_slice(&pair(frac / 10_000));
        s[25..27].copy_from_slice(&pair(frac / 100));
        s[27..29].copy_from_slice(&pair(frac));
        self.buf[self.len..self.len + s.len()].copy_from_slice(s);
        self.len += s.len();
    }
}

/// Two decimal digits of each of 0..100.
const PAIRS: &[u8; 200] = b"0001020304050607080910111213141516171819\
                            2021222324252627282930313233343536373839\
                            4041424344454647484950515253545556575859\
                            6061626364656667686970717273747576777879\
                            8081828384858687888990919293949596979899";

/// The two digits of `n % 100`.
fn pair(n: u32) -> [u8; 2] {
    let at = (n % 100) as usize * 2;
    [PAIRS[at], PAIRS[at + 1]]
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

    /// `v` as a `Line` writes it.
    fn text(v: Value<'_>) -> String {
        let mut l = Line::default();
        l.value(v);
        String::from_utf8(l.as_bytes().to_vec()).unwrap()
    }

    #[test]
    fn iso8601_agrees_with_chrono() {
        for ns in [
            1u64,
            1_700_000_000_123_456_789,
            951_782_400_000_000_007, // 2000-02-29
            4_102_444_799_999_999_999,
            1_234_567_890_000_000_001,
            i64::MAX as u64,
        ] {
            let want = chrono::DateTime::from_timestamp_nanos(ns as i64)
                .format("%Y-%m-%dT%H:%M:%S%.9fZ")
                .to_string();
            assert_eq!(text(Value::Time(ns)), want);
        }
        assert_eq!(text(Value::Time(0)), "");
        // One line, as a record's four times: the same second again, the next, a day on.
        let times = [
            1_700_000_000_123_456_789u64,
            1_700_000_000_999_999_999,
            1_700_000_001_000_000_000,
            1_700_086_401_000_000_001,
            1_700_000_000_000_000_000,
        ];
        let mut l = Line::default();
        let mut want = String::new();
        for ns in times {
            l.value(Value::Time(ns));
            l.byte(b',');
            let t = chrono::DateTime::from_timestamp_nanos(ns as i64);
            want += &t.format("%Y-%m-%dT%H:%M:%S%.9fZ,").to_string();
        }
        assert_eq!(String::from_utf8(l.as_bytes().to_vec()).unwrap(), want);
    }

    #[test]
    fn decimals_addresses_and_columns() {
        for n in [
            0u64,
            7,
            10,
            99,
            100,
            101,
            99_999_999,
            100_000_000,
            1_000_000_007,
            1_700_000_000_123_456_789,
            u64::MAX,
        ] {
            assert_eq!(text(Value::Num(n)), n.to_string());
        }
        for a in [[0, 0, 0, 0], [192, 0, 2, 1], [10, 99, 100, 255], [255; 4]] {
            let mut b = [0u8; 16];
            b[..4].copy_from_slice(&a);
            assert_eq!(
                text(Value::Addr(false, &b)),
                std::net::Ipv4Addr::from(a).to_string()
            );
        }
        let b = [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
        assert_eq!(text(Value::Addr(true, &b)), "fe80::1");
        assert_eq!(COLUMNS.join(","), CSV_HEADER);
        assert_eq!(COLUMNS.len(), COLUMN_COUNT);
    }

    #[test]
    fn longest_lines_fit() {
        let mut r = record();
        r.ipv6 = true;
        r.src = [0xfe; 16];
        r.dst = [0xfe; 16];
        for d in [&mut r.fwd, &mut r.rev] {
            d.first_ns = u64::MAX;
            d.last_ns = u64::MAX;
            d.packets = u64::MAX;
            d.octets = u64::MAX;
        }
        r.proto = 200;
        r.sport = u16::MAX;
        r.dport = u16::MAX;
        r.vlan = u16::MAX;
        r.interface = u32::MAX;
        let cfg = crate::sink::flow::encoder::EncoderConfig {
            max_message_len: usize::MAX,
            observation_domain: 0,
            transport: crate::sink::flow::encoder::Transport::File,
        };
        for build in [
            crate::sink::flow::encoder::csv::build,
            crate::sink::flow::encoder::json::build,
        ] {
            let (_, line) = written(&mut *build(&cfg).unwrap(), &r);
            assert!(line.len() < 900, "{} bytes: {line}", line.len());
        }
    }
}
