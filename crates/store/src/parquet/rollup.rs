//! The rollup tiers: traffic per bucket by exporter, domain and protocol, and the
//! hosts of each bucket (the top K of a 1- or 5-minute bucket, every one of a 1-hour bucket, and
//! the bucket's totals beside them), for 1-minute, 5-minute and 1-hour buckets (the rows of
//! [`crate::schema::ROLLUP_COLUMNS`] and [`crate::schema::HOSTS_COLUMNS`]); and every source and
//! destination port of each 1-hour bucket ([`crate::schema::PORTS_COLUMNS`]), and every source
//! and destination place (AS, country, network) of each 1-hour bucket
//! ([`crate::schema::PLACES_COLUMNS`]).
//!
//! Only the open 1-minute buckets are updated per flow. A bucket closes once the store's clock
//! (the latest `time_start` it has stored) is `delay` past the bucket's end: its rows are
//! written, and its traffic and its full host totals (not only the top K) are added to the
//! 5-minute and 1-hour buckets around it, which close the same way. A flow that arrives after
//! its bucket closed opens it again; the rows written then add to the earlier ones.

use std::collections::BTreeMap;

use hashbrown::HashMap;

use crate::parquet::batch::{Batch, Column};
use crate::parquet::partition::Table;
use crate::schema::Tier;
use crate::schema::{Place, StoredFlow, addr16};

/// The totals of one exporter, domain and protocol in a bucket.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Traffic {
    flows: u64,
    rev_flows: u64,
    packets: u64,
    bytes: u64,
    rev_packets: u64,
    rev_bytes: u64,
}

impl Traffic {
    fn add(&mut self, o: &Traffic) {
        self.flows += o.flows;
        self.rev_flows += o.rev_flows;
        self.packets += o.packets;
        self.bytes += o.bytes;
        self.rev_packets += o.rev_packets;
        self.rev_bytes += o.rev_bytes;
    }
}

/// (exporter, domain, protocol).
type TrafficKey = ([u8; 16], u32, u8);

/// What one address sent or received in a bucket, over one-way flows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Host {
    flows: u64,
    packets: u64,
    bytes: u64,
}

impl Host {
    fn add(&mut self, flows: u64, packets: u64, bytes: u64) {
        self.flows += flows;
        self.packets += packets;
        self.bytes += bytes;
    }
}

/// (side, protocol, port) of a ports row as one integer: side 0 source port, 1 destination port.
fn port_key(side: u8, protocol: u8, port: u16) -> u32 {
    u32::from(side) << 24 | u32::from(protocol) << 16 | u32::from(port)
}

/// (side, AS number, AS name, country, network name) of a places row: side 0 the sender's
/// place, 1 the receiver's.
type PlaceKey = (u8, u32, &'static str, [u8; 2], &'static str);

/// One open bucket.
#[derive(Debug, Default)]
struct Bucket {
    traffic: HashMap<TrafficKey, Traffic>,
    /// Index 0: by sender, 1: by receiver.
    hosts: [HashMap<[u8; 16], Host>; 2],
    /// By [`port_key`]; kept in 1-minute buckets only to reach the 1-hour ones.
    ports: HashMap<u32, Host>,
    /// By [`PlaceKey`]; kept in 1-minute buckets only to reach the 1-hour ones.
    places: HashMap<PlaceKey, Host>,
}

impl Bucket {
    /// An empty bucket whose maps have room for what `like` held, so a new minute's maps do not
    /// grow (rehashing every entry) a dozen times while the flows come in.
    fn sized_like(like: [usize; 5]) -> Bucket {
        Bucket {
            traffic: HashMap::with_capacity(like[0]),
            hosts: [
                HashMap::with_capacity(like[1]),
                HashMap::with_capacity(like[2]),
            ],
            ports: HashMap::with_capacity(like[3]),
            places: HashMap::with_capacity(like[4]),
        }
    }

    /// The sizes of its maps, for [`Bucket::sized_like`].
    fn sizes(&self) -> [usize; 5] {
        [
            self.traffic.len(),
            self.hosts[0].len(),
            self.hosts[1].len(),
            self.ports.len(),
            self.places.len(),
        ]
    }

    /// Adds this bucket's sums to `other`'s, its ports and places too if `hourly`.
    fn merge_into(&self, other: &mut Bucket, hourly: bool) {
        if hourly {
            for (k, h) in &self.ports {
                other
                    .ports
                    .entry(*k)
                    .or_default()
                    .add(h.flows, h.packets, h.bytes);
            }
            for (k, h) in &self.places {
                other
                    .places
                    .entry(*k)
                    .or_default()
                    .add(h.flows, h.packets, h.bytes);
            }
        }
        for (k, t) in &self.traffic {
            other.traffic.entry(*k).or_default().add(t);
        }
        for side in 0..2 {
            for (a, h) in &self.hosts[side] {
                other.hosts[side]
                    .entry(*a)
                    .or_default()
                    .add(h.flows, h.packets, h.bytes);
            }
        }
    }
}

/// The open buckets of every tier.
#[derive(Debug)]
pub struct Rollups {
    /// Open buckets per tier (finest first), by bucket start µs.
    open: [BTreeMap<i64, Bucket>; 3],
    /// Addresses kept per bucket and side.
    top_k: usize,
    /// How long past a bucket's end flows may still arrive for it, µs.
    delay_us: i64,
    /// The latest `time_start` added, µs.
    clock_us: i64,
    /// The sizes of the last 1-minute bucket closed ([`Bucket::sized_like`]).
    minute_sizes: [usize; 5],
}

/// Rows ready to be written, per table.
pub type Closed = Vec<(Table, Batch)>;

impl Rollups {
    /// No buckets yet; `top_k` hosts per bucket and side; buckets close `delay_us` after their
    /// end.
    pub fn new(top_k: usize, delay_us: i64) -> Rollups {
        Rollups {
            open: Default::default(),
            top_k,
            delay_us,
            clock_us: i64::MIN,
            minute_sizes: [0; 5],
        }
    }

    /// Adds flows (already stored) to their 1-minute buckets. The clock follows their start
    /// times up to `now_us` at most, so a flow from a wrong clock far in the future does not
    /// close every open bucket.
    pub fn add<'a>(&mut self, flows: impl IntoIterator<Item = &'a StoredFlow>, now_us: i64) {
        for s in flows {
            self.add_one(s, now_us);
        }
    }

    fn add_one(&mut self, s: &StoredFlow, now_us: i64) {
        let f = &s.flow;
        let width = Tier::Minute.bucket_us();
        let t = (f.start_ns() / 1000) as i64;
        self.clock_us = self.clock_us.max(t.min(now_us));
        // A direction with no packets is not a flow: it counts nowhere.
        let (fwd, rev) = (f.fwd.packets > 0, f.rev.packets > 0);
        if !fwd && !rev {
            return;
        }
        let sizes = self.minute_sizes;
        let b = self.open[0]
            .entry(t.div_euclid(width) * width)
            .or_insert_with(|| Bucket::sized_like(sizes));
        b.traffic
            .entry((s.exporter, s.domain, f.proto))
            .or_default()
            .add(&Traffic {
                flows: u64::from(fwd),
                rev_flows: u64::from(rev),
                packets: f.fwd.packets,
                bytes: f.fwd.octets,
                rev_packets: f.rev.packets,
                rev_bytes: f.rev.octets,
            });
        let ports = &mut b.ports;
        let mut port = |side, p, packets, octets| {
            ports
                .entry(port_key(side, f.proto, p))
                .or_default()
                .add(1, packets, octets);
        };
        if fwd {
            port(0, f.sport, f.fwd.packets, f.fwd.octets);
            port(1, f.dport, f.fwd.packets, f.fwd.octets);
        }
        if rev {
            port(0, f.dport, f.rev.packets, f.rev.octets);
            port(1, f.sport, f.rev.packets, f.rev.octets);
        }
        let places = &mut b.places;
        let mut place = |side, p: &Place, packets, octets| {
            places
                .entry((side, p.asn, p.as_name, p.country, p.net.name))
                .or_default()
                .add(1, packets, octets);
        };
        if fwd {
            place(0, &s.src_place, f.fwd.packets, f.fwd.octets);
            place(1, &s.dst_place, f.fwd.packets, f.fwd.octets);
        }
        if rev {
            place(0, &s.dst_place, f.rev.packets, f.rev.octets);
            place(1, &s.src_place, f.rev.packets, f.rev.octets);
        }
        let (src, dst) = (addr16(f.ipv6, &f.src), addr16(f.ipv6, &f.dst));
        if fwd {
            b.hosts[0]
                .entry(src)
                .or_default()
                .add(1, f.fwd.packets, f.fwd.octets);
            b.hosts[1]
                .entry(dst)
                .or_default()
                .add(1, f.fwd.packets, f.fwd.octets);
        }
        if rev {
            b.hosts[0]
                .entry(dst)
                .or_default()
                .add(1, f.rev.packets, f.rev.octets);
            b.hosts[1]
                .entry(src)
                .or_default()
                .add(1, f.rev.packets, f.rev.octets);
        }
    }

    /// Closes the buckets that ended `delay` before the clock (all of them if `all`), and
    /// returns their rows.
    pub fn close(&mut self, all: bool) -> Closed {
        let mut out = Closed::new();
        for (level, tier) in Tier::ALL.into_iter().enumerate() {
            let width = tier.bucket_us();
            let limit = self.clock_us.saturating_sub(self.delay_us);
            let ready: Vec<i64> = self.open[level]
                .keys()
                .copied()
                .filter(|&start| all || start + width <= limit)
                .collect();
            if ready.is_empty() {
                continue;
            }
            let mut traffic = Batch::empty(Table::Rollup(tier).columns());
            let mut hosts = Batch::empty(Table::Hosts(tier).columns());
            let mut ports = Batch::empty(Table::Ports.columns());
            let mut places = Batch::empty(Table::Places.columns());
            for start in ready {
                let b = self.open[level].remove(&start).unwrap_or_default();
                if level == 0 {
                    self.minute_sizes = b.sizes();
                }
                traffic_rows(start, &b, &mut traffic);
                let k = if tier == Tier::Hour {
                    usize::MAX
                } else {
                    self.top_k
                };
                host_rows(start, &b, k, &mut hosts);
                if tier == Tier::Hour {
                    port_rows(start, &b, &mut ports);
                    place_rows(start, &b, &mut places);
                }
                for (up, coarser) in Tier::ALL.into_iter().enumerate().skip(level + 1) {
                    // The 1-hour tier takes the 1-minute buckets directly, not twice.
                    if level == 1 && up == 2 {
                        continue;
                    }
                    let w = coarser.bucket_us();
                    b.merge_into(
                        self.open[up].entry(start.div_euclid(w) * w).or_default(),
                        coarser == Tier::Hour,
                    );
                }
            }
            out.push((Table::Rollup(tier), traffic));
            out.push((Table::Hosts(tier), hosts));
            if tier == Tier::Hour {
                out.push((Table::Ports, ports));
                out.push((Table::Places, places));
            }
        }
        out
    }
}

/// Appends the traffic rows of the bucket starting at `start`, sorted by key.
fn traffic_rows(start: i64, b: &Bucket, out: &mut Batch) {
    let mut rows: Vec<(&TrafficKey, &Traffic)> = b.traffic.iter().collect();
    rows.sort_unstable_by_key(|(k, _)| **k);
    for (&(exporter, domain, protocol), t) in rows {
        push(&mut out.columns[0], start);
        push_addr(&mut out.columns[1], exporter);
        push32(&mut out.columns[2], domain as i32);
        push32(&mut out.columns[3], i32::from(protocol));
        for (k, v) in [
            t.flows,
            t.rev_flows,
            t.packets,
            t.bytes,
            t.rev_packets,
            t.rev_bytes,
        ]
        .into_iter()
        .enumerate()
        {
            push(&mut out.columns[4 + k], v as i64);
        }
    }
}

/// `side` of the row holding a bucket's totals over every one-way flow.
pub const TOTAL_SIDE: u8 = 2;

/// Appends the top `k` senders and receivers of the bucket starting at `start`, by bytes
/// (ties by address), then the bucket's totals as side [`TOTAL_SIDE`] (the unspecified
/// address): a reader summing a side's rows to these totals knows it has every host.
fn host_rows(start: i64, b: &Bucket, k: usize, out: &mut Batch) {
    let mut row = |side: u8, addr: [u8; 16], h: &Host| {
        push(&mut out.columns[0], start);
        push32(&mut out.columns[1], i32::from(side));
        push_addr(&mut out.columns[2], addr);
        push(&mut out.columns[3], h.flows as i64);
        push(&mut out.columns[4], h.packets as i64);
        push(&mut out.columns[5], h.bytes as i64);
    };
    for (side, hosts) in (0u8..).zip(&b.hosts) {
        let mut rows: Vec<(&[u8; 16], &Host)> = hosts.iter().collect();
        rows.sort_unstable_by(|a, b| b.1.bytes.cmp(&a.1.bytes).then(a.0.cmp(b.0)));
        for (addr, h) in rows.into_iter().take(k) {
            row(side, *addr, h);
        }
    }
    let mut total = Host::default();
    for t in b.traffic.values() {
        total.add(
            t.flows + t.rev_flows,
            t.packets + t.rev_packets,
            t.bytes + t.rev_bytes,
        );
    }
    if total.flows > 0 {
        row(TOTAL_SIDE, [0; 16], &total);
    }
}

/// Appends every (side, protocol, port) of the bucket starting at `start`, sorted by key.
fn port_rows(start: i64, b: &Bucket, out: &mut Batch) {
    let mut rows: Vec<(&u32, &Host)> = b.ports.iter().collect();
    rows.sort_unstable_by_key(|(k, _)| **k);
    for (&k, h) in rows {
        push(&mut out.columns[0], start);
        push32(&mut out.columns[1], (k >> 24) as i32);
        push32(&mut out.columns[2], (k >> 16 & 0xff) as i32);
        push32(&mut out.columns[3], (k & 0xffff) as i32);
        push(&mut out.columns[4], h.flows as i64);
        push(&mut out.columns[5], h.packets as i64);
        push(&mut out.columns[6], h.bytes as i64);
    }
}

/// Appends every (side, AS, country, network) of the bucket starting at `start`, sorted by key.
fn place_rows(start: i64, b: &Bucket, out: &mut Batch) {
    let mut rows: Vec<(&PlaceKey, &Host)> = b.places.iter().collect();
    rows.sort_unstable_by_key(|(k, _)| **k);
    for (&(side, asn, as_name, country, net), h) in rows {
        let country = Place {
            country,
            ..Place::default()
        };
        push(&mut out.columns[0], start);
        push32(&mut out.columns[1], i32::from(side));
        push32(&mut out.columns[2], asn as i32);
        push_text(&mut out.columns[3], as_name);
        push_text(&mut out.columns[4], country.country_code());
        push_text(&mut out.columns[5], net);
        push(&mut out.columns[6], h.flows as i64);
        push(&mut out.columns[7], h.packets as i64);
        push(&mut out.columns[8], h.bytes as i64);
    }
}

fn push_text(c: &mut Column, v: &str) {
    if let Column::Text(c) = c {
        c.push(v.to_owned().into());
    }
}

fn push(c: &mut Column, v: i64) {
    if let Column::I64(c) = c {
        c.push(v);
    }
}

fn push32(c: &mut Column, v: i32) {
    if let Column::I32(c) = c {
        c.push(v);
    }
}

fn push_addr(c: &mut Column, v: [u8; 16]) {
    if let Column::Addr(c) = c {
        c.push(v);
    }
}
