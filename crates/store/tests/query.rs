//! The Parquet query engine against a plain count over the same flows read back row by row:
//! top-N, aggregation, series, totals, listing and filters agree; a 15-minute window opens only
//! its hour's files and skips row groups by their statistics.

mod common;

use std::collections::HashMap;
use std::path::Path;
use std::sync::OnceLock;
use std::time::Duration;

use common::{H, day0_us, flows};
use tapflow_store::parquet::ParquetEngine;
use tapflow_store::parquet::batch::{Batch, Column};
use tapflow_store::parquet::partition::{Table, files_between, partition_dir};
use tapflow_store::parquet::reader::read_flows;
use tapflow_store::parquet::writer::{FileOptions, write_file};
use tapflow_store::query::filter::{OneWay, parse};
use tapflow_store::query::{
    Counters, Filter, Key, Kind, Metric, Query, QueryEngine, QueryResult, Value, Window,
};
use tapflow_store::schema::Tier;
use tapflow_store::schema::addr16;
use tapflow_store::{FlowStore, ParquetOptions, ParquetStore, StoredFlow};

const N: usize = 12_000;

/// A day of flows (every hour), written by the store in small row groups once for every test,
/// and the same flows read back row by row.
fn day_store() -> &'static (tempfile::TempDir, Vec<StoredFlow>) {
    static STORE: OnceLock<(tempfile::TempDir, Vec<StoredFlow>)> = OnceLock::new();
    STORE.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let flows = write_day(dir.path());
        (dir, flows)
    })
}

fn write_day(dir: &Path) -> Vec<StoredFlow> {
    let opts = ParquetOptions {
        flush_interval: Duration::from_secs(3600),
        maintenance_interval: Duration::from_secs(3600),
        file: FileOptions {
            row_group_rows: 128,
            zstd_level: 1,
        },
        ..ParquetOptions::default()
    };
    let mut store = Box::new(ParquetStore::open(dir, opts).unwrap());
    let mut input = flows(7, N, day0_us(), 24 * H, 500);
    // Enrichment's places: a few ASes with names, countries and networks, some unknown.
    for f in &mut input {
        let pick = usize::from(f.flow.src[3] ^ f.flow.dst[3]);
        f.src_place.asn = [0, 64_500, 13_335][pick % 3];
        f.src_place.as_name = ["", "Example, Inc.", "Cloudflare, Inc."][pick % 3];
        f.src_place.country = [[0; 2], *b"DE", *b"FR", *b"US"][pick % 4];
        f.dst_place.asn = [15_169, 0][pick % 2];
        f.dst_place.as_name = ["Google LLC", ""][pick % 2];
        f.dst_place.country = [*b"US", *b"JP", [0; 2]][pick % 3];
        let net = |name: &str| {
            tapflow_store::names::intern_network(tapflow_store::Network {
                name: tapflow_store::names::intern(name),
                ..Default::default()
            })
        };
        f.src_place.net = net(["office", "", "dc1 web", "lab"][pick % 4]);
        f.dst_place.net = net(["", "office"][pick % 2]);
    }
    for chunk in input.chunks(5000) {
        store.insert(chunk).unwrap();
        store.flush().unwrap();
    }
    store.close().unwrap();
    let mut back = Vec::new();
    for f in files_between(dir, Table::Flows, i64::MIN, i64::MAX).unwrap() {
        back.extend(read_flows(&f).unwrap());
    }
    assert_eq!(back.len(), N);
    back
}

/// The one-way flows of a stored row, as the query module documents them: each direction
/// with packets.
fn one_way(s: &StoredFlow) -> Vec<OneWay> {
    let f = &s.flow;
    let fwd = OneWay {
        start_us: (f.start_ns() / 1000) as i64,
        end_us: (f.end_ns() / 1000) as i64,
        src: addr16(f.ipv6, &f.src),
        dst: addr16(f.ipv6, &f.dst),
        sport: f.sport,
        dport: f.dport,
        ip_version: if f.ipv6 { 6 } else { 4 },
        protocol: f.proto,
        tcp_flags: f.fwd.tcp_flags,
        packets: f.fwd.packets,
        bytes: f.fwd.octets,
        exporter: s.exporter,
        in_if: f.interface,
        out_if: s.egress,
        vlan: f.vlan,
        reverse: false,
        flows: 1,
        ..OneWay::default()
    };
    // A direction with no packets is not a flow.
    let mut v = Vec::new();
    if f.fwd.packets > 0 {
        v.push(fwd);
    }
    if f.rev.packets > 0 {
        v.push(OneWay {
            src: fwd.dst,
            dst: fwd.src,
            sport: fwd.dport,
            dport: fwd.sport,
            tcp_flags: f.rev.tcp_flags,
            packets: f.rev.packets,
            bytes: f.rev.octets,
            reverse: true,
            ..fwd
        });
    }
    v
}

fn kept<'a>(
    all: &'a [StoredFlow],
    window: Option<Window>,
    filter: &'a Option<Filter>,
) -> impl Iterator<Item = OneWay> + 'a {
    all.iter().flat_map(one_way).filter(move |f| {
        window.is_none_or(|w| w.contains(f.start_us))
            && filter.as_ref().is_none_or(|x| x.matches(f))
    })
}

fn run(dir: &Path, q: &Query) -> tapflow_store::query::Answer {
    ParquetEngine::new(dir, 2).run(q).unwrap()
}

fn table_rows(r: &QueryResult) -> Vec<(Vec<Value>, u64, u64, u64)> {
    let QueryResult::Table { rows, .. } = r else {
        panic!("not a table: {r:?}")
    };
    rows.iter()
        .map(|r| {
            let c = r.counters;
            (r.values.clone(), c.flows, c.packets, c.bytes)
        })
        .collect()
}

#[test]
fn a_15_minute_window_reads_only_its_hour_and_agrees_with_a_plain_count() {
    let (dir, all) = day_store();
    let t10 = day0_us() + 10 * H;
    let window = Window {
        start_us: t10 + 15 * 60_000_000,
        end_us: t10 + 30 * 60_000_000,
    };
    let hour_files = files_between(dir.path(), Table::Flows, t10, t10 + H)
        .unwrap()
        .len() as u64;
    let every_file = files_between(dir.path(), Table::Flows, i64::MIN, i64::MAX)
        .unwrap()
        .len() as u64;
    assert!(every_file >= 24 && hour_files >= 1);

    let filter = Some(parse("dst port 443 or proto udp").unwrap());
    let q = Query {
        window: Some(window),
        filter: filter.clone(),
        kind: Kind::Top {
            key: Key::SrcAddr(None),
            order_by: Metric::Bytes,
            n: 0,
        },
    };
    let a = run(dir.path(), &q);
    assert_eq!(a.stats.files_opened, hour_files);
    assert_eq!(a.stats.files_listed, every_file);
    assert!(
        a.stats.row_groups_read < a.stats.row_groups,
        "{:?}",
        a.stats
    );

    let mut want: HashMap<[u8; 16], (u64, u64, u64)> = HashMap::new();
    for f in kept(all, Some(window), &filter) {
        let e = want.entry(f.src).or_default();
        e.0 += 1;
        e.1 += f.packets;
        e.2 += f.bytes;
    }
    let got = table_rows(&a.result);
    assert_eq!(got.len(), want.len());
    assert!(!got.is_empty());
    for (values, flows, packets, bytes) in &got {
        let Value::Addr(a) = values[0] else { panic!() };
        assert_eq!(want[&a], (*flows, *packets, *bytes));
    }
    assert!(
        got.windows(2).all(|w| w[0].3 >= w[1].3),
        "by bytes, largest first"
    );
}

type Groups = HashMap<Vec<Value>, (u64, u64, u64)>;

/// Counts the kept one-way flows under each group `key` puts them in.
fn count(
    all: &[StoredFlow],
    window: Option<Window>,
    filter: &Option<Filter>,
    key: &dyn Fn(&OneWay) -> Vec<Vec<Value>>,
) -> Groups {
    let mut m = Groups::new();
    for f in kept(all, window, filter) {
        for k in key(&f) {
            let e = m.entry(k).or_default();
            e.0 += 1;
            e.1 += f.packets;
            e.2 += f.bytes;
        }
    }
    m
}

fn v4_24(a: &[u8; 16]) -> Value {
    let mut m = *a;
    m[15] = 0;
    Value::Addr(m)
}

#[test]
fn every_kind_agrees_with_a_plain_count() {
    let (dir, all) = day_store();
    let check = |q: Query, key: &dyn Fn(&OneWay) -> Vec<Vec<Value>>| {
        let got = table_rows(&run(dir.path(), &q).result);
        let n = got.len();
        let got: Groups = got.into_iter().map(|(v, a, b, c)| (v, (a, b, c))).collect();
        assert_eq!(got.len(), n, "one row per group");
        assert_eq!(got, count(all, q.window, &q.filter, key), "{q:?}");
    };
    let num = |n: u16| Value::Num(n.into());
    let day = Window {
        start_us: day0_us() + 3 * H,
        end_us: day0_us() + 9 * H + 123_456_789,
    };

    // Either address and either port: a flow under both of its values.
    check(
        Query {
            window: None,
            filter: Some(parse("ipv6").unwrap()),
            kind: Kind::Top {
                key: Key::Addr(None),
                order_by: Metric::Flows,
                n: 0,
            },
        },
        &|f| vec![vec![Value::Addr(f.src)], vec![Value::Addr(f.dst)]],
    );
    check(
        Query {
            window: Some(day),
            filter: None,
            kind: Kind::Top {
                key: Key::Port,
                order_by: Metric::Packets,
                n: 0,
            },
        },
        &|f| vec![vec![num(f.sport)], vec![num(f.dport)]],
    );
    // -a srcip4/24,dstport,proto over IPv4 TCP flows with SYN seen.
    check(
        Query {
            window: Some(day),
            filter: Some(parse("ipv4 and tcp and flags S").unwrap()),
            kind: Kind::Aggregate {
                keys: vec![
                    Key::SrcAddr(Some(tapflow_store::query::Prefixes { v4: 24, v6: 64 })),
                    Key::DstPort,
                    Key::Protocol,
                ],
                order_by: Metric::Bytes,
                n: 0,
            },
        },
        &|f| {
            vec![vec![
                v4_24(&f.src),
                num(f.dport),
                Value::Num(f.protocol.into()),
            ]]
        },
    );
    // Exporter, interfaces, VLAN.
    check(
        Query {
            window: None,
            filter: Some(parse("not vlan 1 and (in if 2 or out if 3)").unwrap()),
            kind: Kind::Aggregate {
                keys: vec![Key::Exporter, Key::InIf, Key::OutIf, Key::Vlan],
                order_by: Metric::Flows,
                n: 0,
            },
        },
        &|f| {
            vec![vec![
                Value::Addr(f.exporter),
                Value::Num(f.in_if),
                Value::Num(f.out_if),
                num(f.vlan),
            ]]
        },
    );
    // A series by protocol in 5-minute buckets.
    let q = Query {
        window: Some(day),
        filter: Some(parse("bytes > 2k").unwrap()),
        kind: Kind::Series {
            every_us: 300_000_000,
            key: Some(Key::Protocol),
            order_by: Metric::Bytes,
            n: 0,
        },
    };
    let QueryResult::Table { rows, .. } = run(dir.path(), &q).result else {
        panic!()
    };
    let mut got = Groups::new();
    for r in &rows {
        let t = r.time_us.unwrap();
        assert_eq!(t % 300_000_000, 0);
        let c = r.counters;
        got.insert(
            vec![Value::Num(t as u32 / 300), r.values[0]],
            (c.flows, c.packets, c.bytes),
        );
    }
    assert!(rows.windows(2).all(|w| w[0].time_us <= w[1].time_us));
    let want = count(all, q.window, &q.filter, &|f| {
        let t = f.start_us - f.start_us % 300_000_000;
        vec![vec![
            Value::Num(t as u32 / 300),
            Value::Num(f.protocol.into()),
        ]]
    });
    assert_eq!(got, want);
}

#[test]
fn top_n_keeps_the_largest_and_summary_totals_match() {
    let (dir, all) = day_store();
    let q = |kind| Query {
        window: None,
        filter: None,
        kind,
    };
    let top = run(
        dir.path(),
        &q(Kind::Top {
            key: Key::SrcAddr(None),
            order_by: Metric::Bytes,
            n: 10,
        }),
    )
    .result;
    let want = count(all, None, &None, &|f| vec![vec![Value::Addr(f.src)]]);
    let mut want: Vec<(u64, Vec<Value>)> = want.into_iter().map(|(k, v)| (v.2, k)).collect();
    want.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    let got: Vec<(u64, Vec<Value>)> = table_rows(&top)
        .into_iter()
        .map(|(k, _, _, b)| (b, k))
        .collect();
    assert_eq!(got, want[..10]);

    // From the flows: the first and last times are the flows' own (a rollup's are its
    // buckets' bounds).
    let raw = ParquetEngine::new(dir.path(), 2).prefer_rollups(false);
    let QueryResult::Summary(s) = raw.run(&q(Kind::Summary)).unwrap().result else {
        panic!()
    };
    let mut total = Counters::EMPTY;
    let mut tcp = Counters::EMPTY;
    for f in kept(all, None, &None) {
        total.add(f.flows, f.packets, f.bytes, f.start_us, f.end_us);
        if f.protocol == 6 {
            tcp.add(f.flows, f.packets, f.bytes, f.start_us, f.end_us);
        }
    }
    assert_eq!((s.total, s.tcp), (total, tcp));
    let mut parts = s.udp;
    for c in [s.tcp, s.icmp, s.other] {
        parts.merge(&c);
    }
    assert_eq!(parts, s.total);
}

#[test]
fn listing_is_by_time_and_limited() {
    let (dir, all) = day_store();
    let filter = Some(parse("src net 10.0.0.0/24").unwrap());
    let QueryResult::Flows(rows) = run(
        dir.path(),
        &Query {
            window: None,
            filter: filter.clone(),
            kind: Kind::List { limit: Some(100) },
        },
    )
    .result
    else {
        panic!()
    };
    let mut want: Vec<i64> = kept(all, None, &filter).map(|f| f.start_us).collect();
    want.sort();
    assert_eq!(rows.len(), 100);
    assert_eq!(
        rows.iter().map(|r| r.start_us).collect::<Vec<_>>(),
        want[..100]
    );
}

/// What the rollup tiers answer equals what the flows answer, and comes from the coarsest tier
/// that can: totals and protocols from the hour tier, a 5-minute series from the 5-minute tier;
/// a port filter or an unaligned window goes to the flows.
#[test]
fn rollup_tiers_answer_like_the_flows() {
    let (dir, _) = day_store();
    let day = Window {
        start_us: day0_us() + 2 * H,
        end_us: day0_us() + 20 * H,
    };
    let both = |q: Query, tier: u32| {
        let from_tier = ParquetEngine::new(dir.path(), 2).run(&q).unwrap();
        let raw = ParquetEngine::new(dir.path(), 2)
            .prefer_rollups(false)
            .run(&q)
            .unwrap();
        assert_eq!(from_tier.stats.tier_seconds, tier, "{q:?}");
        assert_eq!(raw.stats.tier_seconds, 0);
        match (&from_tier.result, &raw.result) {
            (QueryResult::Summary(a), QueryResult::Summary(b)) => {
                let c = |c: &Counters| (c.flows, c.packets, c.bytes);
                assert_eq!(
                    [a.total, a.tcp, a.udp, a.icmp, a.other].map(|x| c(&x)),
                    [b.total, b.tcp, b.udp, b.icmp, b.other].map(|x| c(&x))
                );
            }
            (a, b) => {
                let QueryResult::Table {
                    rows: ra,
                    total: xa,
                    ..
                } = a
                else {
                    panic!()
                };
                let QueryResult::Table {
                    rows: rb,
                    total: xb,
                    ..
                } = b
                else {
                    panic!()
                };
                let c = |c: &Counters| (c.flows, c.packets, c.bytes);
                assert_eq!(c(xa), c(xb), "totals of {q:?}");
                let key = |r: &tapflow_store::query::Row| {
                    let c = r.counters;
                    (r.time_us, r.values.clone(), c.flows, c.packets, c.bytes)
                };
                let mut ta: Vec<_> = ra.iter().map(key).collect();
                let mut tb: Vec<_> = rb.iter().map(key).collect();
                ta.sort();
                tb.sort();
                assert_eq!(ta, tb, "{q:?}");
                assert!(!ra.is_empty());
            }
        }
        from_tier.stats
    };
    let q = |window, filter: Option<&str>, kind| Query {
        window,
        filter: filter.map(|f| parse(f).unwrap()),
        kind,
    };
    both(q(None, None, Kind::Summary), 3600);
    both(q(Some(day), Some("not proto udp"), Kind::Summary), 3600);
    both(
        q(
            Some(day),
            None,
            Kind::Top {
                key: Key::Protocol,
                order_by: Metric::Packets,
                n: 3,
            },
        ),
        3600,
    );
    both(
        q(
            None,
            Some("exporter 198.51.100.0/24"),
            Kind::Series {
                every_us: 300_000_000,
                key: Some(Key::Exporter),
                order_by: Metric::Bytes,
                n: 0,
            },
        ),
        300,
    );
    let odd = Window {
        start_us: day.start_us + 60_000_000,
        end_us: day.end_us,
    };
    both(q(Some(odd), None, Kind::Summary), 60);
    let raw = both(q(Some(odd), Some("dst port 443"), Kind::Summary), 0);
    assert!(raw.rows_read > 0);
    both(
        q(
            Some(Window {
                start_us: day.start_us + 1,
                end_us: day.end_us,
            }),
            None,
            Kind::Summary,
        ),
        0,
    );

    // AS, country and network from the 1-hour places table, with the AS names; a filter, an
    // unaligned window or keys of both sides go to the flows.
    let by = |key, order_by| Kind::Top {
        key,
        order_by,
        n: 0,
    };
    for (key, order_by) in [
        (Key::SrcAs, Metric::Bytes),
        (Key::DstAs, Metric::Flows),
        (Key::SrcCountry, Metric::Packets),
        (Key::DstCountry, Metric::Flows),
        (Key::SrcNet, Metric::Bytes),
        (Key::DstNet, Metric::Bytes),
    ] {
        let stats = both(q(Some(day), None, by(key, order_by)), 3600);
        assert_eq!(stats.table, "places_1h", "{key:?}");
    }
    let names = |q: &Query, rollups| {
        let e = ParquetEngine::new(dir.path(), 2).prefer_rollups(rollups);
        match e.run(q).unwrap().result {
            QueryResult::Table { as_names, .. } => as_names,
            r => panic!("{r:?}"),
        }
    };
    let srcas = q(None, None, by(Key::SrcAs, Metric::Bytes));
    assert_eq!(both(srcas.clone(), 3600).table, "places_1h");
    // (The answers' senders are the receivers: Google's.)
    assert_eq!(
        names(&srcas, true).into_iter().collect::<Vec<_>>(),
        [
            (13_335, "Cloudflare, Inc."),
            (15_169, "Google LLC"),
            (64_500, "Example, Inc.")
        ]
    );
    assert_eq!(names(&srcas, true), names(&srcas, false));
    let by_both = Kind::Aggregate {
        keys: vec![Key::SrcNet, Key::SrcAs, Key::SrcCountry],
        order_by: Metric::Flows,
        n: 0,
    };
    assert_eq!(both(q(Some(day), None, by_both), 3600).table, "places_1h");
    let series = Kind::Series {
        every_us: 2 * H,
        key: Some(Key::DstCountry),
        order_by: Metric::Bytes,
        n: 2,
    };
    assert_eq!(both(q(Some(day), None, series), 3600).table, "places_1h");
    let sides = Kind::Aggregate {
        keys: vec![Key::SrcNet, Key::DstNet],
        order_by: Metric::Flows,
        n: 0,
    };
    both(q(Some(day), None, sides), 0);
    both(
        q(
            Some(day),
            Some("src as 64500"),
            by(Key::SrcNet, Metric::Bytes),
        ),
        0,
    );
    both(q(Some(odd), None, by(Key::DstAs, Metric::Bytes)), 0);

    // Senders and receivers from the 1-hour hosts table, which keeps all of them; a filter or
    // an unaligned window goes to the flows.
    let top = |key| Kind::Top {
        key,
        order_by: Metric::Bytes,
        n: 10,
    };
    both(q(None, None, top(Key::SrcAddr(None))), 3600);
    both(q(Some(day), None, top(Key::DstAddr(None))), 3600);
    both(
        q(
            Some(day),
            None,
            Kind::Aggregate {
                keys: vec![Key::DstAddr(None)],
                order_by: Metric::Flows,
                n: 0,
            },
        ),
        3600,
    );
    both(
        q(
            Some(day),
            None,
            Kind::Series {
                every_us: 2 * H,
                key: Some(Key::SrcAddr(None)),
                order_by: Metric::Packets,
                n: 5,
            },
        ),
        3600,
    );
    both(
        q(
            Some(day),
            None,
            Kind::Series {
                every_us: H,
                key: None,
                order_by: Metric::Bytes,
                n: 0,
            },
        ),
        3600,
    );
    // The console's top tables: daily buckets of the top 10 (receivers read with the totals
    // they are checked against, the other side's rows skipped), protocols and exporters from
    // the 1-hour rollup, whose rows come in runs of one exporter and protocol.
    for key in [Key::DstAddr(None), Key::Protocol, Key::Exporter] {
        let tier = both(
            q(
                None,
                None,
                Kind::Series {
                    every_us: 24 * H,
                    key: Some(key),
                    order_by: Metric::Bytes,
                    n: 10,
                },
            ),
            3600,
        );
        assert_ne!(tier.table, "flows", "{key:?}");
    }
    both(q(Some(day), Some("proto tcp"), top(Key::SrcAddr(None))), 0);
    both(q(Some(odd), None, top(Key::SrcAddr(None))), 0);
    both(q(None, None, top(Key::Addr(None))), 0);

    // Source and destination ports from the 1-hour ports table, which keeps every one of each
    // hour with its protocol: a filter of protocols still, any other filter, an unaligned
    // window or either port goes to the flows.
    let ports = |q: Query| assert_eq!(both(q, 3600).table, "ports_1h");
    ports(q(None, None, top(Key::DstPort)));
    ports(q(Some(day), None, top(Key::SrcPort)));
    ports(q(Some(day), Some("proto tcp"), top(Key::DstPort)));
    ports(q(
        Some(day),
        Some("not (proto udp or proto icmp)"),
        Kind::Aggregate {
            keys: vec![Key::Protocol, Key::DstPort],
            order_by: Metric::Packets,
            n: 0,
        },
    ));
    ports(q(
        None,
        None,
        Kind::Series {
            every_us: 24 * H,
            key: Some(Key::DstPort),
            order_by: Metric::Bytes,
            n: 10,
        },
    ));
    ports(q(
        Some(day),
        Some("proto udp"),
        Kind::Series {
            every_us: 3 * H,
            key: Some(Key::SrcPort),
            order_by: Metric::Flows,
            n: 0,
        },
    ));
    for (window, filter, kind) in [
        (Some(odd), None, top(Key::DstPort)),
        (Some(day), Some("dst port 443"), top(Key::DstPort)),
        (None, Some("exporter 198.51.100.0/24"), top(Key::SrcPort)),
        (None, Some("src ip 10.0.0.0/8"), top(Key::DstPort)),
        (None, None, top(Key::Port)),
        (
            Some(day),
            None,
            Kind::Aggregate {
                keys: vec![Key::SrcPort, Key::DstPort],
                order_by: Metric::Bytes,
                n: 10,
            },
        ),
        (
            Some(day),
            None,
            Kind::Series {
                every_us: 300_000_000,
                key: Some(Key::DstPort),
                order_by: Metric::Bytes,
                n: 5,
            },
        ),
    ] {
        assert_eq!(both(q(window, filter, kind), 0).table, "flows");
    }
}

/// A ports table that starts after the first flows (as in a store written before it existed)
/// leaves a window reaching back past its first hour to the flows, and answers the windows it
/// covers.
#[test]
fn ports_written_after_the_first_flows_leave_the_answer_to_the_flows() {
    let dir = tempfile::tempdir().unwrap();
    write_day(dir.path());
    let top = |window| Query {
        window,
        filter: None,
        kind: Kind::Top {
            key: Key::DstPort,
            order_by: Metric::Bytes,
            n: 10,
        },
    };
    let whole = run(dir.path(), &top(None));
    assert_eq!(whole.stats.table, "ports_1h");
    // The ports table without its first three hours.
    let table = Table::Ports;
    let mut kept = Batch::empty(table.columns());
    let listed = files_between(dir.path(), table, i64::MIN, i64::MAX).unwrap();
    for f in &listed {
        let b = tapflow_store::parquet::reader::read_file(f, table.columns())
            .unwrap()
            .sorted_by_time();
        let from = b.times().partition_point(|&t| t < day0_us() + 3 * H);
        kept.append(&b.slice(from, b.rows() - from));
        std::fs::remove_file(f).unwrap();
    }
    assert!(kept.rows() > 0);
    let kept = kept.sorted_by_time();
    let path = partition_dir(dir.path(), table, day0_us()).join("w-later.parquet");
    write_file(
        &path,
        table.columns(),
        &kept,
        &FileOptions::default(),
        Vec::new(),
    )
    .unwrap();

    let after = run(dir.path(), &top(None));
    assert_eq!(after.stats.table, "flows");
    assert_eq!(table_rows(&after.result), table_rows(&whole.result));
    for (start, from) in [(2, "flows"), (3, "ports_1h"), (5, "ports_1h")] {
        let w = Window {
            start_us: day0_us() + start * H,
            end_us: day0_us() + 20 * H,
        };
        let got = run(dir.path(), &top(Some(w)));
        let raw = ParquetEngine::new(dir.path(), 2)
            .prefer_rollups(false)
            .run(&top(Some(w)))
            .unwrap();
        assert_eq!(got.stats.table, from, "from hour {start}");
        assert_eq!(table_rows(&got.result), table_rows(&raw.result));
    }
}

/// A 1-hour hosts table that does not hold every host (as stores written when it kept only the
/// top hosts): its side no longer sums to the buckets' totals, and the flows answer.
#[test]
fn incomplete_hosts_leave_the_answer_to_the_flows() {
    let dir = tempfile::tempdir().unwrap();
    write_day(dir.path());
    let top = Query {
        window: None,
        filter: None,
        kind: Kind::Top {
            key: Key::SrcAddr(None),
            order_by: Metric::Bytes,
            n: 10,
        },
    };
    let before = ParquetEngine::new(dir.path(), 2).run(&top).unwrap();
    assert_eq!(before.stats.tier_seconds, 3600);
    // One more sender row in the first hour, with no totals row beside it.
    let table = Table::Hosts(Tier::Hour);
    let mut extra = Batch::empty(table.columns());
    let [
        Column::I64(t),
        Column::I32(side),
        Column::Addr(addr),
        counts @ ..,
    ] = &mut extra.columns[..]
    else {
        panic!("hosts columns")
    };
    t.push(day0_us());
    side.push(0);
    addr.push(addr16(
        false,
        &[203, 0, 113, 77, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
    ));
    for c in counts {
        let Column::I64(v) = c else { panic!() };
        v.push(1 << 40);
    }
    let path = partition_dir(dir.path(), table, day0_us()).join("w-extra.parquet");
    write_file(
        &path,
        table.columns(),
        &extra,
        &FileOptions::default(),
        Vec::new(),
    )
    .unwrap();
    let after = ParquetEngine::new(dir.path(), 2).run(&top).unwrap();
    assert_eq!(after.stats.tier_seconds, 0, "answered from the flows");
    assert_eq!(table_rows(&after.result), table_rows(&before.result));
}
