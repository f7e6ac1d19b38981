//! Time series: counters in fixed buckets of `time_start`, split by a key, the `n` keys largest
//! over the whole window shown.

use hashbrown::HashMap;

use super::filter::OneWay;
use super::result::{Counters, QueryResult, Row, Value};
use super::sink::Sink;
use super::top::{as_names_of, key_values, note_as_names, rank};
use super::{Key, Metric};

/// `--every`.
#[derive(Debug)]
pub struct SeriesSink {
    every_us: i64,
    key: Option<Key>,
    order_by: Metric,
    n: usize,
    buckets: HashMap<(i64, Value), Counters>,
    /// The group the last flow counted went to, not yet in `buckets`: a rollup's rows come
    /// sorted by exporter and protocol within a bucket, so runs of them fall in one group.
    run: Option<((i64, Value), Counters)>,
    /// The only key values counted, if known beforehand (the whole window's top `n`).
    only: Option<Vec<Value>>,
    /// The AS names seen, for an AS key.
    as_names: HashMap<u32, &'static str>,
    total: Counters,
}

impl SeriesSink {
    /// Buckets of `every_us` (> 0) split by `key`, the `n` largest keys by `order_by` kept.
    pub fn new(every_us: i64, key: Option<Key>, order_by: Metric, n: usize) -> SeriesSink {
        SeriesSink {
            every_us: every_us.max(1),
            key,
            order_by,
            n,
            buckets: HashMap::new(),
            run: None,
            only: None,
            as_names: HashMap::new(),
            total: Counters::EMPTY,
        }
    }

    /// Counts only the key values in `only` (a few: they are searched one by one), so the
    /// buckets hold no others; the totals still count every flow.
    pub fn only(mut self, only: Option<Vec<Value>>) -> SeriesSink {
        self.only = only;
        self
    }
}

impl SeriesSink {
    /// The key split by (`None`: the totals alone).
    pub fn key(&self) -> Option<Key> {
        self.key
    }

    /// The only key values counted, if known beforehand.
    pub fn only_values(&self) -> Option<&[Value]> {
        self.only.as_deref()
    }

    /// Counts `flows` one-way flows starting at `start_us` in the totals.
    #[inline]
    pub fn count_total(
        &mut self,
        flows: u64,
        packets: u64,
        bytes: u64,
        start_us: i64,
        end_us: i64,
    ) {
        self.total.add(flows, packets, bytes, start_us, end_us);
    }

    /// Counts `flows` one-way flows starting at `start_us` under key value `v` (not checked
    /// against [`SeriesSink::only`]; the totals apart, see [`SeriesSink::count_total`]).
    #[inline]
    pub fn count(
        &mut self,
        v: Value,
        flows: u64,
        packets: u64,
        bytes: u64,
        start_us: i64,
        end_us: i64,
    ) {
        let t = start_us - start_us.rem_euclid(self.every_us);
        let c = match &mut self.run {
            Some((k, c)) if *k == (t, v) => c,
            run => {
                if let Some((k, c)) = run.take() {
                    self.buckets.entry(k).or_insert(Counters::EMPTY).merge(&c);
                }
                &mut run.insert(((t, v), Counters::EMPTY)).1
            }
        };
        c.add(flows, packets, bytes, start_us, end_us)
    }

    /// Notes `name` as AS `asn`'s (for an AS key).
    #[inline]
    pub fn note_as_name(&mut self, asn: u32, name: &'static str) {
        super::top::note_as_name(&mut self.as_names, asn, name);
    }
}

impl Sink for SeriesSink {
    #[inline]
    fn add(&mut self, f: &OneWay) {
        self.count_total(f.flows, f.packets, f.bytes, f.start_us, f.end_us);
        let mut values = [None; 2];
        match self.key {
            Some(k) => {
                let mut i = 0;
                key_values(k, f, |v| {
                    values[i] = Some(v);
                    i += 1;
                });
                note_as_names(&[k], f, &mut self.as_names);
            }
            None => values[0] = Some(Value::Num(0)),
        }
        for v in values.into_iter().flatten() {
            if self.only.as_ref().is_some_and(|o| !o.contains(&v)) {
                continue;
            }
            self.count(v, f.flows, f.packets, f.bytes, f.start_us, f.end_us);
        }
    }

    fn merge(&mut self, o: SeriesSink) {
        self.total.merge(&o.total);
        for (k, c) in o.buckets.into_iter().chain(o.run) {
            self.buckets.entry(k).or_insert(Counters::EMPTY).merge(&c);
        }
        for (n, name) in o.as_names {
            self.as_names.entry(n).or_insert(name);
        }
    }

    fn finish(mut self) -> QueryResult {
        if let Some((k, c)) = self.run.take() {
            self.buckets.entry(k).or_insert(Counters::EMPTY).merge(&c);
        }
        // The keys shown: the n largest over the whole window.
        let mut per_key: HashMap<Value, Counters> = HashMap::new();
        for ((_, v), c) in &self.buckets {
            per_key.entry(*v).or_insert(Counters::EMPTY).merge(c);
        }
        let shown: HashMap<Value, usize> =
            rank(per_key.into_iter().collect(), self.order_by, self.n)
                .into_iter()
                .enumerate()
                .map(|(i, (v, _))| (v, i))
                .collect();
        let mut rows: Vec<(i64, usize, Row)> = self
            .buckets
            .into_iter()
            .filter_map(|((t, v), counters)| {
                let at = *shown.get(&v)?;
                let values = if self.key.is_some() { vec![v] } else { vec![] };
                Some((
                    t,
                    at,
                    Row {
                        time_us: Some(t),
                        values,
                        counters,
                    },
                ))
            })
            .collect();
        // By time, then by the metric within the bucket (ties in the key's overall rank).
        rows.sort_by(|a, b| {
            a.0.cmp(&b.0).then_with(|| {
                b.2.counters
                    .metric(self.order_by)
                    .total_cmp(&a.2.counters.metric(self.order_by))
                    .then(a.1.cmp(&b.1))
            })
        });
        let keys: Vec<Key> = self.key.into_iter().collect();
        let rows: Vec<Row> = rows.into_iter().map(|(_, _, r)| r).collect();
        QueryResult::Table {
            as_names: as_names_of(&keys, &rows, &self.as_names),
            if_names: Default::default(),
            keys,
            rows,
            total: self.total,
            order_by: self.order_by,
        }
    }
}
