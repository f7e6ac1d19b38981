//! The columnar read path (filters as bitmaps over Arrow arrays, sinks fed from the columns)
//! against the row-by-row path it replaced: the same flows read back row by row, each stored
//! direction made a one-way flow, tested by `Filter::matches` and handed to the same sink one
//! at a time. Generated filters of every term, joined by and/or/not, under every kind of query,
//! give the same answer.

mod common;

use std::path::Path;
use std::sync::OnceLock;
use std::time::Duration;

use common::{H, day0_us, flows};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use tapflow_store::parquet::ParquetEngine;
use tapflow_store::parquet::partition::{Table, files_between};
use tapflow_store::parquet::reader::read_flows;
use tapflow_store::parquet::writer::FileOptions;
use tapflow_store::query::filter::OneWay;
use tapflow_store::query::series::SeriesSink;
use tapflow_store::query::sink::{ListSink, Sink, SummarySink};
use tapflow_store::query::top::{AggregateSink, TopSink};
use tapflow_store::query::{
    Cmp, Filter, IfSide, Key, Kind, Metric, Net, NetAttr, Prefixes, Query, QueryEngine,
    QueryResult, Side, Term, Window, country_code,
};
use tapflow_store::schema::addr16;
use tapflow_store::{FlowStore, ParquetOptions, ParquetStore, StoredFlow};

const N: usize = 6_000;

/// Four hours of flows in row groups of 256, written once, and the same flows read back.
fn store() -> &'static (tempfile::TempDir, Vec<StoredFlow>) {
    static STORE: OnceLock<(tempfile::TempDir, Vec<StoredFlow>)> = OnceLock::new();
    STORE.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let opts = ParquetOptions {
            flush_interval: Duration::from_secs(3600),
            maintenance_interval: Duration::from_secs(3600),
            file: FileOptions {
                row_group_rows: 256,
                zstd_level: 1,
            },
            ..ParquetOptions::default()
        };
        let mut s = Box::new(ParquetStore::open(dir.path(), opts).unwrap());
        // The third hour's flows one-way only (as a router's NetFlow): their row groups' statistics
        // say no reverse direction, and the scan reads only the forward columns there.
        let mut input = flows(11, N, day0_us(), 4 * H, 300);
        for f in &mut input {
            if (f.flow.start_ns() / 1000) as i64 / H == day0_us() / H + 2 {
                f.flow.rev = Default::default();
            }
            // Enrichment's AS numbers and countries, a few of each, some unknown (0, "").
            let pick = u32::from(f.flow.sport) ^ u32::from(f.flow.src[3]);
            f.src_place.asn = [0, 64_500, 64_501, 13_335][pick as usize % 4];
            f.src_place.country = [[0; 2], *b"DE", *b"FR"][pick as usize % 3];
            f.dst_place.asn = [0, 64_500, 15_169][usize::from(f.flow.dst[3]) % 3];
            f.dst_place.country = [*b"DE", *b"US", [0; 2]][usize::from(f.flow.dst[3]) % 3];
            // AS names beside the numbers, and the operator's networks, some in none.
            f.src_place.as_name = as_name(f.src_place.asn);
            f.dst_place.as_name = as_name(f.dst_place.asn);
            f.src_place.net = network(["", "office", "dc1 web"][pick as usize % 3]);
            f.dst_place.net = network(["office", "", "lab"][usize::from(f.flow.dst[2]) % 3]);
        }
        for chunk in input.chunks(2000) {
            s.insert(chunk).unwrap();
            s.flush().unwrap();
        }
        s.close().unwrap();
        let mut back = Vec::new();
        for f in files_between(dir.path(), Table::Flows, i64::MIN, i64::MAX).unwrap() {
            back.extend(read_flows(&f).unwrap());
        }
        assert_eq!(back.len(), N);
        (dir, back)
    })
}

/// The name the fixture gives AS `asn` (none for 0).
fn as_name(asn: u32) -> &'static str {
    match asn {
        0 => "",
        13_335 => "Cloudflare, Inc.",
        15_169 => "Google LLC",
        _ => "Example\tNet",
    }
}

/// The network named `name` (none if empty), its role, site and tenant some of a few.
fn network(name: &str) -> &'static tapflow_store::Network {
    let intern = tapflow_store::names::intern;
    let (role, site, tenant) = match name {
        "" => ("", "", ""),
        "office" => ("users", "fra1", ""),
        "lab" => ("servers", "fra1", "acme"),
        _ => ("servers", "ams2", "acme"),
    };
    tapflow_store::names::intern_network(tapflow_store::Network {
        name: intern(name),
        role: intern(role),
        site: intern(site),
        tenant: intern(tenant),
        attrs: "",
    })
}

/// A stored row's one-way flows, row by row: each direction that has packets (a direction with
/// no packets is not a flow).
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
        src_as: s.src_place.asn,
        dst_as: s.dst_place.asn,
        src_country: country_code(&s.src_place.country),
        dst_country: country_code(&s.dst_place.country),
        src_as_name: s.src_place.as_name,
        dst_as_name: s.dst_place.as_name,
        src_net: s.src_place.net.name,
        dst_net: s.dst_place.net.name,
        src_net_attrs: {
            let n = s.src_place.net;
            [n.role, n.site, n.tenant]
        },
        dst_net_attrs: {
            let n = s.dst_place.net;
            [n.role, n.site, n.tenant]
        },
        reverse: false,
        flows: 1,
    };
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
            src_as: fwd.dst_as,
            dst_as: fwd.src_as,
            src_country: fwd.dst_country,
            dst_country: fwd.src_country,
            src_as_name: fwd.dst_as_name,
            dst_as_name: fwd.src_as_name,
            src_net: fwd.dst_net,
            dst_net: fwd.src_net,
            src_net_attrs: fwd.dst_net_attrs,
            dst_net_attrs: fwd.src_net_attrs,
            tcp_flags: f.rev.tcp_flags,
            packets: f.rev.packets,
            bytes: f.rev.octets,
            reverse: true,
            ..fwd
        });
    }
    v
}

/// The answer row by row: every kept one-way flow through [`Sink::add`].
fn row_by_row(all: &[StoredFlow], q: &Query) -> QueryResult {
    fn fill<S: Sink>(mut s: S, all: &[StoredFlow], q: &Query) -> QueryResult {
        for f in all.iter().flat_map(one_way) {
            if q.window.is_none_or(|w| w.contains(f.start_us))
                && q.filter.as_ref().is_none_or(|x| x.matches(&f))
            {
                s.add(&f);
            }
        }
        s.finish()
    }
    match &q.kind {
        Kind::List { limit } => fill(ListSink::new(*limit), all, q),
        Kind::Top { key, order_by, n } => fill(TopSink::new(*key, *order_by, *n), all, q),
        Kind::Aggregate { keys, order_by, n } => {
            fill(AggregateSink::new(keys.clone(), *order_by, *n), all, q)
        }
        Kind::Series {
            every_us,
            key,
            order_by,
            n,
        } => fill(SeriesSink::new(*every_us, *key, *order_by, *n), all, q),
        Kind::Summary => fill(SummarySink::default(), all, q),
    }
}

fn columnar(dir: &Path, q: &Query) -> QueryResult {
    ParquetEngine::new(dir, 2)
        .prefer_rollups(false)
        .run(q)
        .unwrap()
        .result
}

fn v4(a: [u8; 4], len: u8) -> Net {
    let mut addr = std::net::Ipv4Addr::from(a).to_ipv6_mapped().octets();
    let len = 96 + len;
    for (i, b) in addr.iter_mut().enumerate() {
        let keep = (usize::from(len)).saturating_sub(i * 8).min(8);
        *b &= (0xffu16 << (8 - keep)) as u8;
    }
    Net { addr, len }
}

fn v6(prefix: &[u8], len: u8) -> Net {
    let mut addr = [0u8; 16];
    addr[..prefix.len()].copy_from_slice(prefix);
    Net { addr, len }
}

fn nets() -> impl Strategy<Value = Net> {
    prop_oneof![
        Just(v4([10, 0, 0, 0], 8)),
        (0u8..40).prop_map(|h| v4([10, 0, 0, h], 32)),
        (0u8..7).prop_map(|h| v4([192, 0, 2, h], 32)),
        Just(v4([192, 0, 2, 0], 24)),
        Just(v4([10, 0, 0, 0], 30)),
        Just(v6(&[0x20, 0x01, 0x0d, 0xb8], 32)),
        Just(v6(&[0x20, 0x01, 0x0d, 0xb8, 0, 1], 48)),
        Just(v6(&[], 0)),
    ]
}

fn cmps() -> impl Strategy<Value = Cmp> {
    prop_oneof![
        Just(Cmp::Eq),
        Just(Cmp::Ne),
        Just(Cmp::Lt),
        Just(Cmp::Le),
        Just(Cmp::Gt),
        Just(Cmp::Ge)
    ]
}

fn sides() -> impl Strategy<Value = Side> {
    prop_oneof![Just(Side::Src), Just(Side::Dst), Just(Side::Any)]
}

fn terms() -> impl Strategy<Value = Term> {
    prop_oneof![
        (sides(), nets()).prop_map(|(s, n)| Term::Addr(s, n)),
        (
            sides(),
            cmps(),
            prop_oneof![
                Just(53u16),
                Just(80),
                Just(443),
                Just(1234),
                Just(8080),
                any::<u16>()
            ]
        )
            .prop_map(|(s, c, p)| Term::Port(s, c, p)),
        prop_oneof![Just(1u8), Just(6), Just(17), Just(47), Just(58)].prop_map(Term::Protocol),
        prop_oneof![Just(4u8), Just(6)].prop_map(Term::IpVersion),
        (0u8..4).prop_map(|h| Term::Exporter(v4([198, 51, 100, h], 32))),
        (
            prop_oneof![Just(IfSide::In), Just(IfSide::Out), Just(IfSide::Any)],
            0u32..5
        )
            .prop_map(|(s, i)| Term::Interface(s, i)),
        (0u16..4).prop_map(Term::Vlan),
        (
            sides(),
            prop_oneof![Just(0u32), Just(64_500), Just(13_335), Just(15_169)]
        )
            .prop_map(|(s, a)| Term::As(s, a)),
        (
            sides(),
            prop_oneof![Just(*b"DE"), Just(*b"US"), Just(*b"FR")]
        )
            .prop_map(|(s, c)| Term::Country(s, country_code(&c))),
        (
            sides(),
            prop_oneof![
                Just(""),
                Just("office"),
                Just("dc1 web"),
                Just("lab"),
                Just("x")
            ]
        )
            .prop_map(|(s, n)| Term::NetName(s, tapflow_store::names::intern(n))),
        (
            sides(),
            prop_oneof![
                Just(NetAttr::Role),
                Just(NetAttr::Site),
                Just(NetAttr::Tenant)
            ],
            prop_oneof![
                Just(""),
                Just("users"),
                Just("servers"),
                Just("fra1"),
                Just("ams2"),
                Just("acme")
            ]
        )
            .prop_map(|(s, a, v)| Term::NetAttr(s, a, tapflow_store::names::intern(v))),
        (cmps(), 0u64..25).prop_map(|(c, v)| Term::Packets(c, v)),
        (cmps(), 0u64..20_000).prop_map(|(c, v)| Term::Bytes(c, v)),
        (0u16..64).prop_map(Term::TcpFlags),
    ]
}

fn filters() -> impl Strategy<Value = Filter> {
    terms()
        .prop_map(Filter::Term)
        .prop_recursive(3, 12, 3, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 2..4).prop_map(Filter::And),
                prop::collection::vec(inner.clone(), 2..4).prop_map(Filter::Or),
                inner.prop_map(|f| Filter::Not(Box::new(f))),
            ]
        })
}

fn keys() -> impl Strategy<Value = Key> {
    let p = Some(Prefixes { v4: 24, v6: 48 });
    prop_oneof![
        Just(Key::SrcAddr(None)),
        Just(Key::DstAddr(None)),
        Just(Key::Addr(None)),
        Just(Key::SrcAddr(p)),
        Just(Key::Addr(p)),
        Just(Key::SrcPort),
        Just(Key::DstPort),
        Just(Key::Port),
        Just(Key::Protocol),
        Just(Key::Exporter),
        Just(Key::InIf),
        Just(Key::OutIf),
        Just(Key::Vlan),
        Just(Key::SrcAs),
        Just(Key::DstAs),
        Just(Key::SrcCountry),
        Just(Key::DstCountry),
        Just(Key::SrcNet),
        Just(Key::DstNet),
    ]
}

fn directional() -> impl Strategy<Value = Key> {
    keys().prop_filter("directional", |k| !k.is_either())
}

fn metrics() -> impl Strategy<Value = Metric> {
    prop_oneof![
        Just(Metric::Flows),
        Just(Metric::Packets),
        Just(Metric::Bytes),
        Just(Metric::Bps),
        Just(Metric::Pps)
    ]
}

fn kinds() -> impl Strategy<Value = Kind> {
    prop_oneof![
        prop_oneof![Just(None), Just(Some(7u64)), Just(Some(100))]
            .prop_map(|limit| Kind::List { limit }),
        (keys(), metrics(), prop_oneof![Just(0usize), Just(5)])
            .prop_map(|(key, order_by, n)| Kind::Top { key, order_by, n }),
        (
            prop::collection::vec(directional(), 1..3),
            metrics(),
            prop_oneof![Just(0usize), Just(5)]
        )
            .prop_map(|(keys, order_by, n)| Kind::Aggregate { keys, order_by, n }),
        (
            prop::option::of(keys()),
            metrics(),
            prop_oneof![Just(0usize), Just(3)]
        )
            .prop_map(|(key, order_by, n)| Kind::Series {
                every_us: 600_000_000,
                key,
                order_by,
                n
            }),
        Just(Kind::Summary),
    ]
}

fn windows() -> impl Strategy<Value = Option<Window>> {
    prop::option::of((0i64..4 * H, 1i64..2 * H).prop_map(|(a, len)| Window {
        start_us: day0_us() + a,
        end_us: day0_us() + a + len,
    }))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn the_columnar_path_answers_as_the_row_by_row_path(
        window in windows(),
        filter in prop::option::of(filters()),
        kind in kinds(),
    ) {
        let (dir, all) = store();
        let q = Query { window, filter, kind };
        prop_assert_eq!(columnar(dir.path(), &q), row_by_row(all, &q), "{:?}", q);
    }
}

#[test]
fn every_term_alone_answers_as_the_row_by_row_path() {
    let (dir, all) = store();
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let mut checked = 0;
    for _ in 0..200 {
        let t = terms().new_tree(&mut runner).unwrap().current();
        let q = Query {
            window: None,
            filter: Some(Filter::Term(t)),
            kind: Kind::Top {
                key: Key::SrcAddr(None),
                order_by: Metric::Bytes,
                n: 0,
            },
        };
        let want = row_by_row(all, &q);
        if let QueryResult::Table { rows, .. } = &want {
            checked += usize::from(!rows.is_empty());
        }
        assert_eq!(columnar(dir.path(), &q), want, "{t:?}");
    }
    assert!(checked > 100, "most terms keep some flows: {checked}");
}

/// A store whose files were written before the enrichment columns: the same flows with their
/// AS and country columns cut off. They read as 0 and "" under every AS or country term and key.
#[test]
fn files_without_the_enrichment_columns_read_as_unknown_places() {
    use parquet::arrow::ProjectionMask;
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    use tapflow_store::schema::FLOW_COLUMNS_BEFORE_ENRICHMENT;

    let (dir, all) = store();
    let old = tempfile::tempdir().unwrap();
    let mut cut = 0;
    for f in files_between(dir.path(), Table::Flows, i64::MIN, i64::MAX).unwrap() {
        let to = old.path().join(f.strip_prefix(dir.path()).unwrap());
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        let b = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(&f).unwrap()).unwrap();
        let mask = ProjectionMask::roots(b.parquet_schema(), 0..FLOW_COLUMNS_BEFORE_ENRICHMENT);
        let reader = b.with_projection(mask).build().unwrap();
        let mut w = parquet::arrow::ArrowWriter::try_new(
            std::fs::File::create(&to).unwrap(),
            arrow_array::RecordBatchReader::schema(&reader),
            None,
        )
        .unwrap();
        for batch in reader {
            w.write(&batch.unwrap()).unwrap();
        }
        w.close().unwrap();
        cut += 1;
    }
    assert!(cut > 0);
    let unknown: Vec<StoredFlow> = all
        .iter()
        .map(|f| StoredFlow {
            src_place: Default::default(),
            dst_place: Default::default(),
            ..*f
        })
        .collect();
    let de = country_code(b"DE");
    for (filter, kind) in [
        (Term::As(Side::Src, 64_500), Kind::Summary),
        (Term::As(Side::Any, 0), Kind::Summary),
        (Term::Country(Side::Dst, de), Kind::Summary),
        (
            Term::Port(Side::Dst, Cmp::Eq, 443),
            Kind::Top {
                key: Key::SrcCountry,
                order_by: Metric::Flows,
                n: 0,
            },
        ),
        (
            Term::Protocol(6),
            Kind::Aggregate {
                keys: vec![Key::SrcAs, Key::DstCountry],
                order_by: Metric::Bytes,
                n: 0,
            },
        ),
    ] {
        let q = Query {
            window: None,
            filter: Some(Filter::Term(filter)),
            kind,
        };
        let want = row_by_row(&unknown, &q);
        assert_eq!(columnar(old.path(), &q), want, "{q:?}");
        // The enriched store answers otherwise where it knows the places.
        if matches!(filter, Term::As(Side::Src, _) | Term::Country(..)) {
            assert_ne!(columnar(dir.path(), &q), want, "{q:?}");
        }
    }
}
