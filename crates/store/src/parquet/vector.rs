//! The flows table a column at a time: a query's window and filter evaluated over a batch's
//! Arrow arrays into one bitmap per direction (forward, reverse), and the one-way flows a
//! bitmap keeps counted straight from the arrays by the sinks ([`ColumnSink`]), with no
//! [`OneWay`] built per row where a sink does not need one.
//!
//! Each test is one pass over one column into a [`BooleanBuffer`] (64 rows to a word, the loop
//! the compiler vectorises, as arrow's own comparison kernels do), `and`/`or`/`not` are
//! word-wise operations on the bitmaps. A column the query does not read holds 0, as in
//! [`OneWay`].

use arrow_array::RecordBatch;
use arrow_array::types::{TimestampMicrosecondType, UInt8Type, UInt16Type, UInt32Type, UInt64Type};
use arrow_buffer::BooleanBuffer;

use super::scan::{addrs, at, countries, prim, texts};
use crate::query::filter::OneWay;
use crate::query::series::SeriesSink;
use crate::query::sink::{ListSink, Sink, SummarySink};
use crate::query::top::{AggregateSink, PACKED_KEYS, TopSink, packed, unpacked};
use crate::query::{Cmp, Filter, IfSide, Key, Net, NetAttr, Side, Term, Value, Window};

/// Which stored direction of a row a one-way flow is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    /// `src_addr → dst_addr`, `packets`, `bytes`, `tcp_flags`.
    Forward,
    /// `dst_addr → src_addr`, `rev_packets`, `rev_bytes`, `rev_tcp_flags`.
    Reverse,
}

/// The flows table's columns in one batch, those the query reads (`None`: not read, or a file
/// written before the enrichment columns: 0). Countries are [`crate::query::country_code`]
/// numbers, read once per batch from the text column.
#[derive(Debug, Clone)]
pub struct Columns<'a> {
    /// Rows in the batch.
    pub rows: usize,
    start: Option<&'a [i64]>,
    end: Option<&'a [i64]>,
    ip_version: Option<&'a [u8]>,
    src: Option<&'a [[u8; 16]]>,
    dst: Option<&'a [[u8; 16]]>,
    sport: Option<&'a [u16]>,
    dport: Option<&'a [u16]>,
    protocol: Option<&'a [u8]>,
    flags: Option<&'a [u16]>,
    rev_flags: Option<&'a [u16]>,
    packets: Option<&'a [u64]>,
    bytes: Option<&'a [u64]>,
    rev_packets: Option<&'a [u64]>,
    rev_bytes: Option<&'a [u64]>,
    exporter: Option<&'a [[u8; 16]]>,
    in_if: Option<&'a [u32]>,
    out_if: Option<&'a [u32]>,
    vlan: Option<&'a [u16]>,
    src_as: Option<&'a [u32]>,
    dst_as: Option<&'a [u32]>,
    src_country: Option<Vec<u16>>,
    dst_country: Option<Vec<u16>>,
    src_as_name: Option<Vec<&'static str>>,
    dst_as_name: Option<Vec<&'static str>>,
    src_net: Option<Vec<&'static str>>,
    dst_net: Option<Vec<&'static str>>,
    /// Role, site and tenant of the source's network.
    src_net_attrs: [Option<Vec<&'static str>>; 3],
    dst_net_attrs: [Option<Vec<&'static str>>; 3],
}

impl<'a> Columns<'a> {
    /// The batch's columns, each checked to be of its type and as long as the batch.
    pub fn of(b: &'a RecordBatch) -> Result<Columns<'a>, String> {
        let rows = b.num_rows();
        fn long<T>(c: Option<&[T]>, rows: usize) -> Result<Option<&[T]>, String> {
            match c {
                Some(c) if c.len() < rows => Err("a column is shorter than its batch".into()),
                c => Ok(c.map(|c| &c[..rows])),
            }
        }
        Ok(Columns {
            rows,
            start: long(prim::<TimestampMicrosecondType>(b, "time_start")?, rows)?,
            end: long(prim::<TimestampMicrosecondType>(b, "time_end")?, rows)?,
            ip_version: long(prim::<UInt8Type>(b, "ip_version")?, rows)?,
            src: long(addrs(b, "src_addr")?, rows)?,
            dst: long(addrs(b, "dst_addr")?, rows)?,
            sport: long(prim::<UInt16Type>(b, "src_port")?, rows)?,
            dport: long(prim::<UInt16Type>(b, "dst_port")?, rows)?,
            protocol: long(prim::<UInt8Type>(b, "protocol")?, rows)?,
            flags: long(prim::<UInt16Type>(b, "tcp_flags")?, rows)?,
            rev_flags: long(prim::<UInt16Type>(b, "rev_tcp_flags")?, rows)?,
            packets: long(prim::<UInt64Type>(b, "packets")?, rows)?,
            bytes: long(prim::<UInt64Type>(b, "bytes")?, rows)?,
            rev_packets: long(prim::<UInt64Type>(b, "rev_packets")?, rows)?,
            rev_bytes: long(prim::<UInt64Type>(b, "rev_bytes")?, rows)?,
            exporter: long(addrs(b, "exporter")?, rows)?,
            in_if: long(prim::<UInt32Type>(b, "in_if")?, rows)?,
            out_if: long(prim::<UInt32Type>(b, "out_if")?, rows)?,
            vlan: long(prim::<UInt16Type>(b, "vlan")?, rows)?,
            src_as: long(prim::<UInt32Type>(b, "src_as")?, rows)?,
            dst_as: long(prim::<UInt32Type>(b, "dst_as")?, rows)?,
            src_country: countries(b, "src_country")?,
            dst_country: countries(b, "dst_country")?,
            src_as_name: texts(b, "src_as_name")?,
            dst_as_name: texts(b, "dst_as_name")?,
            src_net: texts(b, "src_net")?,
            dst_net: texts(b, "dst_net")?,
            src_net_attrs: [
                texts(b, "src_net_role")?,
                texts(b, "src_net_site")?,
                texts(b, "src_net_tenant")?,
            ],
            dst_net_attrs: [
                texts(b, "dst_net_role")?,
                texts(b, "dst_net_site")?,
                texts(b, "dst_net_tenant")?,
            ],
        })
    }

    /// The sender's addresses of direction `d`.
    fn src(&self, d: Dir) -> Option<&'a [[u8; 16]]> {
        if d == Dir::Forward {
            self.src
        } else {
            self.dst
        }
    }

    /// The receiver's addresses of direction `d`.
    fn dst(&self, d: Dir) -> Option<&'a [[u8; 16]]> {
        if d == Dir::Forward {
            self.dst
        } else {
            self.src
        }
    }

    fn sport(&self, d: Dir) -> Option<&'a [u16]> {
        if d == Dir::Forward {
            self.sport
        } else {
            self.dport
        }
    }

    fn dport(&self, d: Dir) -> Option<&'a [u16]> {
        if d == Dir::Forward {
            self.dport
        } else {
            self.sport
        }
    }

    /// The sender's AS numbers of direction `d`.
    fn src_as(&self, d: Dir) -> Option<&'a [u32]> {
        if d == Dir::Forward {
            self.src_as
        } else {
            self.dst_as
        }
    }

    fn dst_as(&self, d: Dir) -> Option<&'a [u32]> {
        if d == Dir::Forward {
            self.dst_as
        } else {
            self.src_as
        }
    }

    /// The sender's countries of direction `d`.
    fn src_country(&self, d: Dir) -> Option<&[u16]> {
        if d == Dir::Forward {
            self.src_country.as_deref()
        } else {
            self.dst_country.as_deref()
        }
    }

    fn dst_country(&self, d: Dir) -> Option<&[u16]> {
        if d == Dir::Forward {
            self.dst_country.as_deref()
        } else {
            self.src_country.as_deref()
        }
    }

    /// The sender's AS names of direction `d`.
    fn src_as_name(&self, d: Dir) -> Option<&[&'static str]> {
        if d == Dir::Forward {
            self.src_as_name.as_deref()
        } else {
            self.dst_as_name.as_deref()
        }
    }

    fn dst_as_name(&self, d: Dir) -> Option<&[&'static str]> {
        if d == Dir::Forward {
            self.dst_as_name.as_deref()
        } else {
            self.src_as_name.as_deref()
        }
    }

    /// The sender's network names of direction `d`.
    fn src_net(&self, d: Dir) -> Option<&[&'static str]> {
        if d == Dir::Forward {
            self.src_net.as_deref()
        } else {
            self.dst_net.as_deref()
        }
    }

    fn dst_net(&self, d: Dir) -> Option<&[&'static str]> {
        if d == Dir::Forward {
            self.dst_net.as_deref()
        } else {
            self.src_net.as_deref()
        }
    }

    /// The sender's network's attribute `a` in direction `d`.
    fn src_net_attr(&self, d: Dir, a: NetAttr) -> Option<&[&'static str]> {
        if d == Dir::Forward {
            self.src_net_attrs[a as usize].as_deref()
        } else {
            self.dst_net_attrs[a as usize].as_deref()
        }
    }

    fn dst_net_attr(&self, d: Dir, a: NetAttr) -> Option<&[&'static str]> {
        if d == Dir::Forward {
            self.dst_net_attrs[a as usize].as_deref()
        } else {
            self.src_net_attrs[a as usize].as_deref()
        }
    }

    fn packets(&self, d: Dir) -> Option<&'a [u64]> {
        if d == Dir::Forward {
            self.packets
        } else {
            self.rev_packets
        }
    }

    fn bytes(&self, d: Dir) -> Option<&'a [u64]> {
        if d == Dir::Forward {
            self.bytes
        } else {
            self.rev_bytes
        }
    }

    fn flags(&self, d: Dir) -> Option<&'a [u16]> {
        if d == Dir::Forward {
            self.flags
        } else {
            self.rev_flags
        }
    }

    /// Row `i`'s one-way flow in direction `d`.
    pub fn one_way(&self, i: usize, d: Dir) -> OneWay {
        OneWay {
            start_us: at(self.start, i),
            end_us: at(self.end, i),
            src: at(self.src(d), i),
            dst: at(self.dst(d), i),
            sport: at(self.sport(d), i),
            dport: at(self.dport(d), i),
            ip_version: at(self.ip_version, i),
            protocol: at(self.protocol, i),
            tcp_flags: at(self.flags(d), i),
            packets: at(self.packets(d), i),
            bytes: at(self.bytes(d), i),
            exporter: at(self.exporter, i),
            in_if: at(self.in_if, i),
            out_if: at(self.out_if, i),
            vlan: at(self.vlan, i),
            src_as: at(self.src_as(d), i),
            dst_as: at(self.dst_as(d), i),
            src_country: at(self.src_country(d), i),
            dst_country: at(self.dst_country(d), i),
            src_as_name: at(self.src_as_name(d), i),
            dst_as_name: at(self.dst_as_name(d), i),
            src_net: at(self.src_net(d), i),
            dst_net: at(self.dst_net(d), i),
            src_net_attrs: [NetAttr::Role, NetAttr::Site, NetAttr::Tenant]
                .map(|a| at(self.src_net_attr(d, a), i)),
            dst_net_attrs: [NetAttr::Role, NetAttr::Site, NetAttr::Tenant]
                .map(|a| at(self.dst_net_attr(d, a), i)),
            reverse: d == Dir::Reverse,
            flows: 1,
        }
    }

    /// Whether no row has a reverse direction: the reverse pass is skipped.
    pub fn one_way_only(&self) -> bool {
        self.rev_packets.is_none_or(|p| p.iter().all(|&p| p == 0))
    }
}

/// The rows whose one-way flow in direction `d` is counted: the direction only where it has
/// packets (a direction with no packets is not a flow), its `time_start` in `window`, passing
/// `filter`.
pub fn keep(
    c: &Columns<'_>,
    d: Dir,
    window: Option<Window>,
    filter: Option<&Filter>,
) -> BooleanBuffer {
    let n = c.rows;
    let mut m = Some(compare(c.packets(d), Cmp::Gt, 0, n));
    if let Some(w) = window {
        let inside = match c.start {
            Some(s) => BooleanBuffer::collect_bool(n, |i| w.start_us <= s[i] && s[i] < w.end_us),
            None => constant(w.contains(0), n),
        };
        m = Some(and(m, inside));
    }
    if let Some(f) = filter {
        m = Some(and(m, eval(f, c, d)));
    }
    m.unwrap_or_else(|| BooleanBuffer::new_set(n))
}

fn and(a: Option<BooleanBuffer>, b: BooleanBuffer) -> BooleanBuffer {
    match a {
        Some(a) => &a & &b,
        None => b,
    }
}

fn constant(v: bool, n: usize) -> BooleanBuffer {
    if v {
        BooleanBuffer::new_set(n)
    } else {
        BooleanBuffer::new_unset(n)
    }
}

/// The rows of direction `d` that pass `f`.
pub fn eval(f: &Filter, c: &Columns<'_>, d: Dir) -> BooleanBuffer {
    match f {
        Filter::And(v) => v
            .iter()
            .map(|a| eval(a, c, d))
            .reduce(|a, b| &a & &b)
            .unwrap_or_else(|| BooleanBuffer::new_set(c.rows)),
        Filter::Or(v) => v
            .iter()
            .map(|a| eval(a, c, d))
            .reduce(|a, b| &a | &b)
            .unwrap_or_else(|| BooleanBuffer::new_unset(c.rows)),
        Filter::Not(a) => !&eval(a, c, d),
        Filter::Term(t) => term(t, c, d),
    }
}

fn term(t: &Term, c: &Columns<'_>, d: Dir) -> BooleanBuffer {
    let n = c.rows;
    let either = |a: BooleanBuffer, b: BooleanBuffer| &a | &b;
    match *t {
        Term::Addr(Side::Src, net) => within(c.src(d), net, n),
        Term::Addr(Side::Dst, net) => within(c.dst(d), net, n),
        Term::Addr(Side::Any, net) => either(within(c.src(d), net, n), within(c.dst(d), net, n)),
        Term::Port(Side::Src, op, p) => compare(c.sport(d), op, p, n),
        Term::Port(Side::Dst, op, p) => compare(c.dport(d), op, p, n),
        Term::Port(Side::Any, op, p) => {
            either(compare(c.sport(d), op, p, n), compare(c.dport(d), op, p, n))
        }
        Term::Protocol(p) => compare(c.protocol, Cmp::Eq, p, n),
        Term::IpVersion(v) => compare(c.ip_version, Cmp::Eq, v, n),
        Term::Exporter(net) => within(c.exporter, net, n),
        Term::Interface(IfSide::In, i) => compare(c.in_if, Cmp::Eq, i, n),
        Term::Interface(IfSide::Out, i) => compare(c.out_if, Cmp::Eq, i, n),
        Term::Interface(IfSide::Any, i) => either(
            compare(c.in_if, Cmp::Eq, i, n),
            compare(c.out_if, Cmp::Eq, i, n),
        ),
        Term::Vlan(v) => compare(c.vlan, Cmp::Eq, v, n),
        Term::As(Side::Src, a) => compare(c.src_as(d), Cmp::Eq, a, n),
        Term::As(Side::Dst, a) => compare(c.dst_as(d), Cmp::Eq, a, n),
        Term::As(Side::Any, a) => either(
            compare(c.src_as(d), Cmp::Eq, a, n),
            compare(c.dst_as(d), Cmp::Eq, a, n),
        ),
        Term::Country(Side::Src, cc) => compare(c.src_country(d), Cmp::Eq, cc, n),
        Term::Country(Side::Dst, cc) => compare(c.dst_country(d), Cmp::Eq, cc, n),
        Term::Country(Side::Any, cc) => either(
            compare(c.src_country(d), Cmp::Eq, cc, n),
            compare(c.dst_country(d), Cmp::Eq, cc, n),
        ),
        Term::NetName(Side::Src, name) => compare(c.src_net(d), Cmp::Eq, name, n),
        Term::NetName(Side::Dst, name) => compare(c.dst_net(d), Cmp::Eq, name, n),
        Term::NetName(Side::Any, name) => either(
            compare(c.src_net(d), Cmp::Eq, name, n),
            compare(c.dst_net(d), Cmp::Eq, name, n),
        ),
        Term::NetAttr(Side::Src, a, v) => compare(c.src_net_attr(d, a), Cmp::Eq, v, n),
        Term::NetAttr(Side::Dst, a, v) => compare(c.dst_net_attr(d, a), Cmp::Eq, v, n),
        Term::NetAttr(Side::Any, a, v) => either(
            compare(c.src_net_attr(d, a), Cmp::Eq, v, n),
            compare(c.dst_net_attr(d, a), Cmp::Eq, v, n),
        ),
        Term::Packets(op, v) => compare(c.packets(d), op, v, n),
        Term::Bytes(op, v) => compare(c.bytes(d), op, v, n),
        Term::TcpFlags(m) => match c.flags(d) {
            Some(f) => BooleanBuffer::collect_bool(n, |i| f[i] & m == m),
            None => constant(m == 0, n),
        },
    }
}

/// `column OP v` for each row; a column not read holds 0.
fn compare<T: Copy + Default + PartialOrd>(
    column: Option<&[T]>,
    op: Cmp,
    v: T,
    n: usize,
) -> BooleanBuffer {
    let Some(c) = column else {
        return constant(op.holds(T::default(), v), n);
    };
    let c = &c[..n];
    // One loop per operator, so each is a straight comparison the compiler vectorises.
    match op {
        Cmp::Eq => BooleanBuffer::collect_bool(n, |i| c[i] == v),
        Cmp::Ne => BooleanBuffer::collect_bool(n, |i| c[i] != v),
        Cmp::Lt => BooleanBuffer::collect_bool(n, |i| c[i] < v),
        Cmp::Le => BooleanBuffer::collect_bool(n, |i| c[i] <= v),
        Cmp::Gt => BooleanBuffer::collect_bool(n, |i| c[i] > v),
        Cmp::Ge => BooleanBuffer::collect_bool(n, |i| c[i] >= v),
    }
}

/// Whether each address lies in `net`: the address as one 128-bit number, masked.
fn within(column: Option<&[[u8; 16]]>, net: Net, n: usize) -> BooleanBuffer {
    let Some(c) = column else {
        return constant(net.contains(&[0; 16]), n);
    };
    let c = &c[..n];
    let mask = u128::MAX
        .checked_shl(128 - u32::from(net.len.min(128)))
        .unwrap_or(0);
    let want = u128::from_be_bytes(net.addr) & mask;
    BooleanBuffer::collect_bool(n, |i| u128::from_be_bytes(c[i]) & mask == want)
}

/// A key's values in one direction, as [`crate::query::top`] packs them (an address's 16 bytes, or
/// the number).
#[derive(Clone, Copy)]
enum KeyColumn<'a> {
    Addr(&'a [[u8; 16]]),
    U32(&'a [u32]),
    U16(&'a [u16]),
    U8(&'a [u8]),
    Zero,
}

impl KeyColumn<'_> {
    #[inline(always)]
    fn get(self, i: usize) -> u128 {
        match self {
            KeyColumn::Addr(a) => u128::from_be_bytes(a[i]),
            KeyColumn::U32(a) => a[i].into(),
            KeyColumn::U16(a) => a[i].into(),
            KeyColumn::U8(a) => a[i].into(),
            KeyColumn::Zero => 0,
        }
    }
}

/// The one or two columns `key` takes its values from in direction `d`; `None` for a masked
/// address (which goes through [`crate::query::top::key_values`]).
fn key_columns<'a>(
    key: Key,
    c: &'a Columns<'_>,
    d: Dir,
) -> Option<(KeyColumn<'a>, Option<KeyColumn<'a>>)> {
    let addr = |a: Option<&'a [[u8; 16]]>| a.map_or(KeyColumn::Zero, KeyColumn::Addr);
    let u16s = |a: Option<&'a [u16]>| a.map_or(KeyColumn::Zero, KeyColumn::U16);
    Some(match key {
        Key::SrcAddr(None) => (addr(c.src(d)), None),
        Key::DstAddr(None) => (addr(c.dst(d)), None),
        Key::Addr(None) => (addr(c.src(d)), Some(addr(c.dst(d)))),
        Key::SrcAddr(Some(_)) | Key::DstAddr(Some(_)) | Key::Addr(Some(_)) => return None,
        Key::SrcPort => (u16s(c.sport(d)), None),
        Key::DstPort => (u16s(c.dport(d)), None),
        Key::Port => (u16s(c.sport(d)), Some(u16s(c.dport(d)))),
        Key::Protocol => (c.protocol.map_or(KeyColumn::Zero, KeyColumn::U8), None),
        Key::Exporter => (addr(c.exporter), None),
        Key::InIf => (c.in_if.map_or(KeyColumn::Zero, KeyColumn::U32), None),
        Key::OutIf => (c.out_if.map_or(KeyColumn::Zero, KeyColumn::U32), None),
        Key::Vlan => (u16s(c.vlan), None),
        Key::SrcAs => (c.src_as(d).map_or(KeyColumn::Zero, KeyColumn::U32), None),
        Key::DstAs => (c.dst_as(d).map_or(KeyColumn::Zero, KeyColumn::U32), None),
        Key::SrcCountry => (u16s(c.src_country(d)), None),
        Key::DstCountry => (u16s(c.dst_country(d)), None),
        Key::SrcNet | Key::DstNet => return None,
    })
}

/// A text key's values in direction `d` (network names): `Some(None)` where the file has no
/// such column (every value ""); `None` if `key` is not a text key.
#[allow(clippy::option_option)]
fn text_column<'a>(key: Key, c: &'a Columns<'_>, d: Dir) -> Option<Option<&'a [&'static str]>> {
    match key {
        Key::SrcNet => Some(c.src_net(d)),
        Key::DstNet => Some(c.dst_net(d)),
        _ => None,
    }
}

/// The AS names beside an AS key's numbers in direction `d`.
fn as_names<'a>(key: Key, c: &'a Columns<'_>, d: Dir) -> Option<&'a [&'static str]> {
    match key {
        Key::SrcAs => c.src_as_name(d),
        Key::DstAs => c.dst_as_name(d),
        _ => None,
    }
}

/// A sink that takes a batch's kept one-way flows from the columns: by default one
/// [`OneWay`] at a time through [`Sink::add`].
pub trait ColumnSink: Sink {
    /// Counts the one-way flows of direction `d` of the rows set in `keep`.
    fn add_columns(&mut self, c: &Columns<'_>, d: Dir, keep: &BooleanBuffer) {
        self.add_rows(c, d, keep);
    }

    /// Counts them one [`OneWay`] at a time.
    fn add_rows(&mut self, c: &Columns<'_>, d: Dir, keep: &BooleanBuffer) {
        for i in keep.set_indices() {
            self.add(&c.one_way(i, d));
        }
    }
}

impl ColumnSink for ListSink {}

impl ColumnSink for SeriesSink {
    fn add_columns(&mut self, c: &Columns<'_>, d: Dir, keep: &BooleanBuffer) {
        let (p, b, s, e) = (c.packets(d), c.bytes(d), c.start, c.end);
        let Some(key) = self.key() else {
            for i in keep.set_indices() {
                let (p, b, s, e) = (at(p, i), at(b, i), at(s, i), at(e, i));
                self.count_total(1, p, b, s, e);
                self.count(Value::Num(0), 1, p, b, s, e);
            }
            return;
        };
        if let Some(names) = text_column(key, c, d) {
            for i in keep.set_indices() {
                let (p, b, s, e) = (at(p, i), at(b, i), at(s, i), at(e, i));
                self.count_total(1, p, b, s, e);
                let v = Value::Text(names.map_or("", |n| n[i]));
                if self.only_values().is_none_or(|o| o.contains(&v)) {
                    self.count(v, 1, p, b, s, e);
                }
            }
            return;
        }
        // A key of one or two columns, and the values counted known as numbers (or all).
        let only: Option<Vec<u128>> = match self.only_values() {
            Some(o) => match o.iter().map(|&v| packed(v)).collect() {
                Some(o) => Some(o),
                None => return self.add_rows(c, d, keep),
            },
            None => None,
        };
        let Some((first, second)) = key_columns(key, c, d) else {
            return self.add_rows(c, d, keep);
        };
        for i in keep.set_indices() {
            let (p, b, s, e) = (at(p, i), at(b, i), at(s, i), at(e, i));
            self.count_total(1, p, b, s, e);
            for k in [Some(first), second].into_iter().flatten() {
                let v = k.get(i);
                if only.as_ref().is_none_or(|o| o.contains(&v)) {
                    self.count(unpacked(key, v), 1, p, b, s, e);
                }
            }
        }
        if let Some(names) = as_names(key, c, d) {
            for i in keep.set_indices() {
                self.note_as_name(first.get(i) as u32, names[i]);
            }
        }
    }
}

impl ColumnSink for AggregateSink {
    fn add_columns(&mut self, c: &Columns<'_>, d: Dir, keep: &BooleanBuffer) {
        // Each key one column (directional keys), at most PACKED_KEYS of them.
        let mut columns = [KeyColumn::Zero; PACKED_KEYS];
        if self.keys().len() > PACKED_KEYS {
            return self.add_rows(c, d, keep);
        }
        for (slot, &k) in columns.iter_mut().zip(self.keys()) {
            match key_columns(k, c, d) {
                Some((one, None)) => *slot = one,
                _ => return self.add_rows(c, d, keep),
            }
        }
        let (p, b, s, e) = (c.packets(d), c.bytes(d), c.start, c.end);
        for i in keep.set_indices() {
            let v = columns.map(|k| k.get(i));
            self.count_packed(v, at(p, i), at(b, i), at(s, i), at(e, i));
        }
        let keys: Vec<Key> = self.keys().to_vec();
        for (k, column) in keys.into_iter().zip(columns) {
            if let Some(names) = as_names(k, c, d) {
                for i in keep.set_indices() {
                    self.note_as_name(column.get(i) as u32, names[i]);
                }
            }
        }
    }
}

impl ColumnSink for SummarySink {
    fn add_columns(&mut self, c: &Columns<'_>, d: Dir, keep: &BooleanBuffer) {
        let (p, b, s, e) = (c.packets(d), c.bytes(d), c.start, c.end);
        for i in keep.set_indices() {
            self.count(at(c.protocol, i), 1, at(p, i), at(b, i), at(s, i), at(e, i));
        }
    }
}

impl ColumnSink for TopSink {
    fn add_columns(&mut self, c: &Columns<'_>, d: Dir, keep: &BooleanBuffer) {
        let (p, b, s, e) = (c.packets(d), c.bytes(d), c.start, c.end);
        let counters = |i| (at(p, i), at(b, i), at(s, i), at(e, i));
        if let Some(names) = text_column(self.key(), c, d) {
            for i in keep.set_indices() {
                let (p, b, s, e) = counters(i);
                self.count_total(p, b, s, e);
                self.count_text(names.map_or("", |n| n[i]), p, b, s, e);
            }
            return;
        }
        let Some((first, second)) = key_columns(self.key(), c, d) else {
            return self.add_rows(c, d, keep);
        };
        for i in keep.set_indices() {
            let (p, b, s, e) = counters(i);
            self.count_total(p, b, s, e);
        }
        for k in [Some(first), second].into_iter().flatten() {
            self.count_rows(keep.set_indices().map(|i| (i, k.get(i))), counters);
        }
        if let Some(names) = as_names(self.key(), c, d) {
            for i in keep.set_indices() {
                self.note_as_name(first.get(i) as u32, names[i]);
            }
        }
    }
}
