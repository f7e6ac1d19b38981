//! Grouping: nfdump's `-s KEY/ORDER -n N` (top-N of one key, either-address and either-port
//! keys counting a flow twice) and `-a KEYS` (one row per distinct key tuple), by hash
//! aggregation then a partial sort of the `n` largest.

use hashbrown::HashMap;
use tapflow_wire::prefix::mask;

use super::filter::OneWay;
use super::groups::{AHEAD, Groups};
use super::result::{Counters, QueryResult, Row, Value};
use super::sink::Sink;
use super::{Key, Metric};

/// Calls `out` with each value `key` takes for the flow: one, or two for [`Key::Addr`] and
/// [`Key::Port`].
#[inline]
pub fn key_values(key: Key, f: &OneWay, mut out: impl FnMut(Value)) {
    let addr = |a: &[u8; 16], p: Option<super::Prefixes>| match p {
        None => Value::Addr(*a),
        Some(p) if f.ip_version == 6 => Value::Addr(mask(a, p.v6)),
        Some(p) => Value::Addr(mask(a, 96 + p.v4)),
    };
    match key {
        Key::SrcAddr(p) => out(addr(&f.src, p)),
        Key::DstAddr(p) => out(addr(&f.dst, p)),
        Key::Addr(p) => {
            out(addr(&f.src, p));
            out(addr(&f.dst, p));
        }
        Key::SrcPort => out(Value::Num(f.sport.into())),
        Key::DstPort => out(Value::Num(f.dport.into())),
        Key::Port => {
            out(Value::Num(f.sport.into()));
            out(Value::Num(f.dport.into()));
        }
        Key::Protocol => out(Value::Num(f.protocol.into())),
        Key::Exporter => out(Value::Addr(f.exporter)),
        Key::InIf => out(Value::Num(f.in_if)),
        Key::OutIf => out(Value::Num(f.out_if)),
        Key::Vlan => out(Value::Num(f.vlan.into())),
        Key::SrcAs => out(Value::Num(f.src_as)),
        Key::DstAs => out(Value::Num(f.dst_as)),
        Key::SrcCountry => out(Value::Num(f.src_country.into())),
        Key::DstCountry => out(Value::Num(f.dst_country.into())),
        Key::SrcNet => out(Value::Text(f.src_net)),
        Key::DstNet => out(Value::Text(f.dst_net)),
    }
}

/// Notes the AS names beside the AS numbers `keys` take in the flow.
#[inline]
pub fn note_as_names(keys: &[Key], f: &OneWay, names: &mut HashMap<u32, &'static str>) {
    for k in keys {
        match k {
            Key::SrcAs => note_as_name(names, f.src_as, f.src_as_name),
            Key::DstAs => note_as_name(names, f.dst_as, f.dst_as_name),
            _ => {}
        }
    }
}

/// Notes `name` as AS `asn`'s, unless it has one already or `name` is empty.
#[inline]
pub fn note_as_name(names: &mut HashMap<u32, &'static str>, asn: u32, name: &'static str) {
    if !name.is_empty() {
        names.entry(asn).or_insert(name);
    }
}

/// Of `names`, those of the AS numbers in `rows` under `keys`.
pub fn as_names_of(
    keys: &[Key],
    rows: &[Row],
    names: &HashMap<u32, &'static str>,
) -> super::result::AsNames {
    let mut out = super::result::AsNames::new();
    for r in rows {
        for (k, v) in keys.iter().zip(&r.values) {
            if let (true, Value::Num(n)) = (k.is_as(), v)
                && let Some(name) = names.get(n)
            {
                out.insert(*n, name);
            }
        }
    }
    out
}

/// The stored columns a key reads (both directions', since a reverse flow swaps them).
pub fn key_columns(key: Key) -> &'static [&'static str] {
    match key {
        Key::SrcAddr(None) | Key::DstAddr(None) | Key::Addr(None) => &["src_addr", "dst_addr"],
        Key::SrcAddr(_) | Key::DstAddr(_) | Key::Addr(_) => &["src_addr", "dst_addr", "ip_version"],
        Key::SrcPort | Key::DstPort | Key::Port => &["src_port", "dst_port"],
        Key::Protocol => &["protocol"],
        Key::Exporter => &["exporter"],
        Key::InIf => &["in_if"],
        Key::OutIf => &["out_if"],
        Key::Vlan => &["vlan"],
        Key::SrcAs | Key::DstAs => &["src_as", "dst_as"],
        Key::SrcCountry | Key::DstCountry => &["src_country", "dst_country"],
        Key::SrcNet | Key::DstNet => &["src_net", "dst_net"],
    }
}

/// The stored columns beside a key's that name its values: an AS number's name.
pub fn label_columns(key: Key) -> &'static [&'static str] {
    if key.is_as() {
        &["src_as_name", "dst_as_name"]
    } else {
        &[]
    }
}

/// Sorts `(values, counters)` pairs by `order_by` descending, then values ascending, and keeps
/// the first `n` (all if 0); only the kept ones are fully sorted.
pub fn rank<K: Ord>(mut v: Vec<(K, Counters)>, order_by: Metric, n: usize) -> Vec<(K, Counters)> {
    let cmp = |a: &(K, Counters), b: &(K, Counters)| {
        b.1.metric(order_by)
            .total_cmp(&a.1.metric(order_by))
            .then_with(|| a.0.cmp(&b.0))
    };
    if n > 0 && n < v.len() {
        v.select_nth_unstable_by(n - 1, cmp);
        v.truncate(n);
    }
    v.sort_unstable_by(cmp);
    v
}

/// A key value as one integer, for the hash table of a single key: an address's 16 bytes, or
/// the number (every value of one key is of the same kind); `None` for text, kept apart.
#[inline]
pub fn packed(v: Value) -> Option<u128> {
    match v {
        Value::Addr(a) => Some(u128::from_be_bytes(a)),
        Value::Num(n) => Some(n.into()),
        Value::Text(_) => None,
    }
}

/// The key value of `key` packed as `v` (see [`packed`]).
#[inline]
pub fn unpacked(key: Key, v: u128) -> Value {
    if matches!(
        key,
        Key::SrcAddr(_) | Key::DstAddr(_) | Key::Addr(_) | Key::Exporter
    ) {
        Value::Addr(v.to_be_bytes())
    } else {
        Value::Num(v as u32)
    }
}

/// How many values `key` takes if it is a number of at most 16 bits (a port, protocol or VLAN):
/// its groups are then an array indexed by the value rather than a hash table.
fn small_range(key: Key) -> Option<usize> {
    match key {
        Key::SrcPort | Key::DstPort | Key::Port | Key::Vlan | Key::SrcCountry | Key::DstCountry => {
            Some(1 << 16)
        }
        Key::Protocol => Some(1 << 8),
        _ => None,
    }
}

/// `-s KEY/ORDER -n N`.
#[derive(Debug)]
pub struct TopSink {
    key: Key,
    order_by: Metric,
    n: usize,
    groups: Groups,
    /// The keys of a batch with their hashes and rows, before they are counted.
    pending: Vec<(u128, u64, usize)>,
    /// The groups of a key of [`small_range`], by value (`None`: not seen).
    small: Vec<Option<Counters>>,
    /// The groups of a text key.
    texts: HashMap<&'static str, Counters>,
    /// The text key value counted last, not yet in `texts`: names are interned, so a run of
    /// one name is the same pointer, counted without hashing the text.
    text_run: Option<(&'static str, Counters)>,
    /// The AS names seen, for an AS key.
    as_names: HashMap<u32, &'static str>,
    total: Counters,
}

impl TopSink {
    /// Ranks `key` by `order_by`, keeping `n` (0: all).
    pub fn new(key: Key, order_by: Metric, n: usize) -> TopSink {
        TopSink {
            key,
            order_by,
            n,
            groups: Groups::new(),
            pending: Vec::new(),
            small: vec![None; small_range(key).unwrap_or(0)],
            texts: HashMap::new(),
            text_run: None,
            as_names: HashMap::new(),
            total: Counters::EMPTY,
        }
    }

    /// Notes `name` as AS `asn`'s (for an AS key).
    #[inline]
    pub fn note_as_name(&mut self, asn: u32, name: &'static str) {
        note_as_name(&mut self.as_names, asn, name);
    }

    /// The key ranked.
    pub fn key(&self) -> Key {
        self.key
    }

    /// Counts one one-way flow under the text key value `t` (a network name), leaving the
    /// totals alone.
    #[inline]
    pub fn count_text(&mut self, t: &'static str, packets: u64, bytes: u64, s: i64, e: i64) {
        let c = match &mut self.text_run {
            Some((k, c)) if std::ptr::eq(*k, t) => c,
            run => {
                if let Some((k, c)) = run.take() {
                    self.texts.entry(k).or_insert(Counters::EMPTY).merge(&c);
                }
                &mut run.insert((t, Counters::EMPTY)).1
            }
        };
        c.add(1, packets, bytes, s, e);
    }

    /// Counts one one-way flow in the totals alone.
    #[inline]
    pub fn count_total(&mut self, packets: u64, bytes: u64, start_us: i64, end_us: i64) {
        self.total.add(1, packets, bytes, start_us, end_us);
    }

    /// Counts one one-way flow of each row `i` in `rows` under its packed key value `v`, its
    /// packets, bytes, start and end `counters(i)`, leaving the totals alone. In a hash table,
    /// the keys are hashed first and each group's slot fetched [`AHEAD`] keys before it is
    /// counted.
    #[inline]
    pub fn count_rows(
        &mut self,
        rows: impl Iterator<Item = (usize, u128)>,
        counters: impl Fn(usize) -> (u64, u64, i64, i64),
    ) {
        if !self.small.is_empty() {
            for (i, v) in rows {
                let (p, b, s, e) = counters(i);
                self.group(v).add(1, p, b, s, e);
            }
            return;
        }
        let mut pending = std::mem::take(&mut self.pending);
        pending.clear();
        pending.extend(rows.map(|(i, v)| (v, Groups::hash(v), i)));
        for (j, &(v, h, i)) in pending.iter().enumerate() {
            if let Some(&(_, ahead, _)) = pending.get(j + AHEAD) {
                self.groups.prefetch(ahead);
            }
            let (p, b, s, e) = counters(i);
            self.groups.get(v, h).add(1, p, b, s, e);
        }
        self.pending = pending;
    }

    #[inline]
    fn group(&mut self, v: u128) -> &mut Counters {
        match usize::try_from(v).ok().and_then(|i| self.small.get_mut(i)) {
            Some(slot) => slot.get_or_insert(Counters::EMPTY),
            None => self.groups.get(v, Groups::hash(v)),
        }
    }
}

impl Sink for TopSink {
    #[inline]
    fn add(&mut self, f: &OneWay) {
        self.total
            .add(f.flows, f.packets, f.bytes, f.start_us, f.end_us);
        key_values(self.key, f, |v| {
            let c = match (packed(v), v) {
                (Some(p), _) => self.group(p),
                (None, Value::Text(t)) => self.texts.entry(t).or_insert(Counters::EMPTY),
                (None, _) => return,
            };
            c.add(f.flows, f.packets, f.bytes, f.start_us, f.end_us)
        });
        note_as_names(&[self.key], f, &mut self.as_names);
    }

    fn merge(&mut self, o: TopSink) {
        self.total.merge(&o.total);
        for (v, c) in o.groups.into_groups() {
            self.groups.merge(v, &c);
        }
        for (v, c) in smalls(o.small) {
            self.group(v).merge(&c);
        }
        for (t, c) in o.texts.into_iter().chain(o.text_run) {
            self.texts.entry(t).or_insert(Counters::EMPTY).merge(&c);
        }
        for (n, name) in o.as_names {
            self.as_names.entry(n).or_insert(name);
        }
    }

    fn finish(mut self) -> QueryResult {
        if let Some((t, c)) = self.text_run.take() {
            self.texts.entry(t).or_insert(Counters::EMPTY).merge(&c);
        }
        let key = self.key;
        let unpack = |k: u128| unpacked(key, k);
        let groups = self
            .groups
            .into_groups()
            .chain(smalls(self.small))
            .map(|(k, c)| (unpack(k), c))
            .chain(self.texts.into_iter().map(|(t, c)| (Value::Text(t), c)))
            .collect();
        let rows: Vec<Row> = rank(groups, self.order_by, self.n)
            .into_iter()
            .map(|(v, counters)| Row {
                time_us: None,
                values: vec![v],
                counters,
            })
            .collect();
        QueryResult::Table {
            keys: vec![self.key],
            as_names: as_names_of(&[self.key], &rows, &self.as_names),
            if_names: Default::default(),
            rows,
            total: self.total,
            order_by: self.order_by,
        }
    }
}

/// The groups seen in a [`TopSink`]'s array, with their values.
fn smalls(small: Vec<Option<Counters>>) -> impl Iterator<Item = (u128, Counters)> {
    (0u128..).zip(small).filter_map(|(v, c)| Some((v, c?)))
}

/// `-a KEYS`.
#[derive(Debug)]
pub struct AggregateSink {
    keys: Vec<Key>,
    order_by: Metric,
    n: usize,
    groups: HashMap<Vec<Value>, Counters>,
    /// The groups counted a column at a time: each key's value packed (see [`packed`]), up to
    /// [`PACKED_KEYS`] keys, the rest 0.
    packed: HashMap<[u128; PACKED_KEYS], Counters>,
    scratch: Vec<Value>,
    as_names: HashMap<u32, &'static str>,
    total: Counters,
}

impl AggregateSink {
    /// Groups by `keys` (directional keys only), keeping the `n` largest by `order_by`.
    pub fn new(keys: Vec<Key>, order_by: Metric, n: usize) -> AggregateSink {
        AggregateSink {
            keys,
            order_by,
            n,
            groups: HashMap::new(),
            packed: HashMap::new(),
            scratch: Vec::new(),
            as_names: HashMap::new(),
            total: Counters::EMPTY,
        }
    }
}

/// How many keys an [`AggregateSink`] groups by packed values at most.
pub const PACKED_KEYS: usize = 3;

impl AggregateSink {
    /// The grouping keys.
    pub fn keys(&self) -> &[Key] {
        &self.keys
    }

    /// Counts one one-way flow under the keys' packed values `v`.
    #[inline]
    pub fn count_packed(
        &mut self,
        v: [u128; PACKED_KEYS],
        packets: u64,
        bytes: u64,
        start_us: i64,
        end_us: i64,
    ) {
        self.total.add(1, packets, bytes, start_us, end_us);
        self.packed
            .entry(v)
            .or_insert(Counters::EMPTY)
            .add(1, packets, bytes, start_us, end_us);
    }

    /// Notes `name` as AS `asn`'s (for an AS key).
    #[inline]
    pub fn note_as_name(&mut self, asn: u32, name: &'static str) {
        note_as_name(&mut self.as_names, asn, name);
    }
}

impl Sink for AggregateSink {
    #[inline]
    fn add(&mut self, f: &OneWay) {
        self.total
            .add(f.flows, f.packets, f.bytes, f.start_us, f.end_us);
        self.scratch.clear();
        for &k in &self.keys {
            key_values(k, f, |v| self.scratch.push(v));
        }
        match self.groups.get_mut(self.scratch.as_slice()) {
            Some(c) => c.add(f.flows, f.packets, f.bytes, f.start_us, f.end_us),
            None => {
                let mut c = Counters::EMPTY;
                c.add(f.flows, f.packets, f.bytes, f.start_us, f.end_us);
                self.groups.insert(self.scratch.clone(), c);
            }
        }
        note_as_names(&self.keys, f, &mut self.as_names);
    }

    fn merge(&mut self, o: AggregateSink) {
        self.total.merge(&o.total);
        for (v, c) in o.groups {
            self.groups.entry(v).or_insert(Counters::EMPTY).merge(&c);
        }
        for (v, c) in o.packed {
            self.packed.entry(v).or_insert(Counters::EMPTY).merge(&c);
        }
        for (n, name) in o.as_names {
            self.as_names.entry(n).or_insert(name);
        }
    }

    fn finish(mut self) -> QueryResult {
        for (v, c) in self.packed.drain() {
            let values = self
                .keys
                .iter()
                .zip(v)
                .map(|(&k, v)| unpacked(k, v))
                .collect();
            self.groups
                .entry(values)
                .or_insert(Counters::EMPTY)
                .merge(&c);
        }
        let rows: Vec<Row> = rank(self.groups.into_iter().collect(), self.order_by, self.n)
            .into_iter()
            .map(|(values, counters)| Row {
                time_us: None,
                values,
                counters,
            })
            .collect();
        QueryResult::Table {
            as_names: as_names_of(&self.keys, &rows, &self.as_names),
            if_names: Default::default(),
            keys: self.keys,
            rows,
            total: self.total,
            order_by: self.order_by,
        }
    }
}
