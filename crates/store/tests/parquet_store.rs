//! The Parquet store against the files it leaves: read back with the parquet crate's own row
//! reader, partitions, `.part` files, compaction, retention, rollups.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::{H, day0_us, flows};
use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::file::statistics::Statistics;
use parquet::record::RowAccessor;
use tapflow_store::parquet::batch;
use tapflow_store::parquet::batch::as_stored;
use tapflow_store::parquet::partition::{Table, files_between, partitions};
use tapflow_store::parquet::reader::{read_file, read_flows};
use tapflow_store::schema::Tier;
use tapflow_store::schema::{FLOW_COLUMNS, addr16};
use tapflow_store::{
    ExporterStats, FlowStore, InterfaceName, ParquetOptions, ParquetStore, StoredFlow,
};

/// Options that never merge or write on their own during a test.
fn quiet() -> ParquetOptions {
    ParquetOptions {
        flush_interval: Duration::from_secs(3600),
        maintenance_interval: Duration::from_secs(3600),
        ..ParquetOptions::default()
    }
}

fn all_flows(dir: &Path) -> Vec<StoredFlow> {
    let mut out = Vec::new();
    for f in files_between(dir, Table::Flows, i64::MIN, i64::MAX).unwrap() {
        out.extend(read_flows(&f).unwrap());
    }
    out
}

/// Asserts that the store at `dir` holds exactly the flows of `input`, in any order.
fn assert_holds_exactly(dir: &Path, input: &[StoredFlow]) {
    let mut got: Vec<_> = all_flows(dir).iter().map(key).collect();
    let mut want: Vec<_> = input.iter().map(as_stored).map(|f| key(&f)).collect();
    got.sort_unstable();
    want.sort_unstable();
    assert_eq!(got, want);
}

fn key(f: &StoredFlow) -> (u64, [u8; 16], u16, u64, u64) {
    (
        f.flow.start_ns(),
        f.flow.src,
        f.flow.sport,
        f.flow.fwd.octets,
        f.flow.rev.octets,
    )
}

#[test]
fn round_trip_through_the_parquet_row_reader() {
    let dir = tempfile::tempdir().unwrap();
    let input = flows(1, 5000, day0_us() + 10 * H, 3 * H, 300);
    let mut store = Box::new(ParquetStore::open(dir.path(), quiet()).unwrap());
    for chunk in input.chunks(700) {
        store.insert(chunk).unwrap();
    }
    store.flush().unwrap();
    let report = store.close().unwrap();
    assert_eq!((report.received, report.stored), (5000, 5000));
    assert_eq!((report.dropped, report.pending), (0, 0));

    // Every column, read by the parquet crate's generic rows, as the schema says.
    let names: Vec<&str> = FLOW_COLUMNS.iter().map(|c| c.0).collect();
    let mut rows = Vec::new();
    for file in files_between(dir.path(), Table::Flows, i64::MIN, i64::MAX).unwrap() {
        let r = SerializedFileReader::new(std::fs::File::open(&file).unwrap()).unwrap();
        let schema = r.metadata().file_metadata().schema_descr();
        let got: Vec<&str> = schema.columns().iter().map(|c| c.name()).collect();
        assert_eq!(got, names);
        for row in r.into_iter() {
            let row = row.unwrap();
            rows.push((
                (
                    row.get_timestamp_micros(0).unwrap(),
                    row.get_timestamp_micros(1).unwrap(),
                    row.get_timestamp_micros(2).unwrap(),
                    row.get_ubyte(3).unwrap(),
                ),
                (
                    <[u8; 16]>::try_from(row.get_bytes(4).unwrap().data()).unwrap(),
                    <[u8; 16]>::try_from(row.get_bytes(5).unwrap().data()).unwrap(),
                    row.get_ushort(6).unwrap(),
                    row.get_ushort(7).unwrap(),
                    row.get_ubyte(8).unwrap(),
                ),
                (
                    (row.get_ushort(9).unwrap(), row.get_ushort(10).unwrap()),
                    (row.get_ulong(11).unwrap(), row.get_ulong(12).unwrap()),
                    (row.get_ulong(13).unwrap(), row.get_ulong(14).unwrap()),
                    <[u8; 16]>::try_from(row.get_bytes(15).unwrap().data()).unwrap(),
                    (
                        row.get_uint(16).unwrap(),
                        row.get_uint(17).unwrap(),
                        row.get_uint(18).unwrap(),
                    ),
                    (
                        row.get_ushort(19).unwrap(),
                        row.get_ubyte(20).unwrap(),
                        row.get_uint(21).unwrap(),
                    ),
                ),
            ));
        }
    }
    let mut want: Vec<_> = input
        .iter()
        .map(|s| {
            let f = &s.flow;
            (
                (
                    (f.start_ns() / 1000) as i64,
                    (f.end_ns() / 1000) as i64,
                    (s.received_ns / 1000) as i64,
                    if f.ipv6 { 6 } else { 4 },
                ),
                (
                    addr16(f.ipv6, &f.src),
                    addr16(f.ipv6, &f.dst),
                    f.sport,
                    f.dport,
                    f.proto,
                ),
                (
                    (f.fwd.tcp_flags, f.rev.tcp_flags),
                    (f.fwd.packets, f.fwd.octets),
                    (f.rev.packets, f.rev.octets),
                    s.exporter,
                    (s.domain, f.interface, s.egress),
                    (f.vlan, f.end_reason.to_u8(), s.sampling),
                ),
            )
        })
        .collect();
    rows.sort();
    want.sort();
    assert_eq!(rows.len(), want.len());
    assert!(rows == want, "rows differ from the flows written");

    // And the store's own reader gives back the flows as stored.
    let mut back = all_flows(dir.path());
    let mut want: Vec<StoredFlow> = input.iter().map(as_stored).collect();
    back.sort_by_key(key);
    want.sort_by_key(key);
    assert_eq!(back, want);
}

#[test]
fn hours_split_files_and_rows_are_sorted_with_statistics() {
    let dir = tempfile::tempdir().unwrap();
    let h11 = day0_us() + 11 * H;
    let mut input = flows(2, 3000, h11 - H / 2, H, 50);
    // Exactly on both sides of 11:00.
    input[0] = common::flow(&mut common::Rng(9), h11 - 1, 5);
    input[1] = common::flow(&mut common::Rng(10), h11, 5);
    input[0].flow.fwd.first_ns = (h11 as u64 - 1) * 1000 + 999;
    input[1].flow.fwd.first_ns = h11 as u64 * 1000;
    let opts = ParquetOptions {
        file: tapflow_store::parquet::writer::FileOptions {
            row_group_rows: 500,
            ..Default::default()
        },
        ..quiet()
    };
    let mut store = Box::new(ParquetStore::open(dir.path(), opts).unwrap());
    store.insert(&input).unwrap();
    store.close().unwrap();

    let parts = partitions(dir.path(), Table::Flows).unwrap();
    assert_eq!(parts.len(), 2);
    assert!(parts[0].path.ends_with("flows/date=2024-03-10/hour=10"));
    assert!(parts[1].path.ends_with("flows/date=2024-03-10/hour=11"));
    for p in &parts {
        for file in tapflow_store::parquet::partition::files(&p.path).unwrap() {
            let b = read_file(&file, FLOW_COLUMNS).unwrap();
            let t = b.times();
            assert!(t.is_sorted(), "{} not sorted", file.display());
            assert!(t.iter().all(|&t| p.start_us <= t && t < p.end_us));
            // Row groups of 500 rows, each with min/max on time_start and the exporter, none
            // on the ports and addresses (a file spans nearly their whole range).
            let r = SerializedFileReader::new(std::fs::File::open(&file).unwrap()).unwrap();
            assert!(r.num_row_groups() >= 2);
            let mut last_max = i64::MIN;
            for g in r.metadata().row_groups() {
                assert!(g.num_rows() <= 500);
                match g.column(0).statistics() {
                    Some(Statistics::Int64(s)) => {
                        let (min, max) = (*s.min_opt().unwrap(), *s.max_opt().unwrap());
                        assert!(last_max <= min && min <= max);
                        last_max = max;
                    }
                    s => panic!("time_start statistics: {s:?}"),
                }
                assert!(
                    g.column(15)
                        .statistics()
                        .is_some_and(|s| s.min_bytes_opt().is_some() && s.max_bytes_opt().is_some())
                );
                assert!(g.column(4).statistics().is_none());
                assert!(g.column(7).statistics().is_none());
            }
        }
    }
    let last10 = files_between(dir.path(), Table::Flows, h11 - 1, h11).unwrap();
    let last = last10
        .iter()
        .flat_map(|f| read_flows(f).unwrap())
        .max_by_key(|f| f.flow.start_ns());
    assert_eq!(last.unwrap().flow.start_ns(), (h11 as u64 - 1) * 1000);
}

#[test]
fn a_reader_never_sees_a_part_file_as_complete() {
    let dir = tempfile::tempdir().unwrap();
    let stop = AtomicBool::new(false);
    let input = flows(3, 40_000, day0_us() + 10 * H, H / 2, 1000);
    std::thread::scope(|s| {
        let reader = s.spawn(|| {
            let (mut reads, mut max_rows) = (0, 0);
            while !stop.load(Ordering::Relaxed) {
                let mut rows = 0;
                for f in files_between(dir.path(), Table::Flows, i64::MIN, i64::MAX).unwrap() {
                    assert!(f.extension().unwrap() == "parquet");
                    // Every complete file reads whole.
                    rows += read_file(&f, FLOW_COLUMNS).unwrap().rows();
                    reads += 1;
                }
                assert!(rows >= max_rows, "rows went down: {rows} < {max_rows}");
                max_rows = rows;
            }
            (reads, max_rows)
        });
        let mut store = Box::new(ParquetStore::open(dir.path(), quiet()).unwrap());
        for chunk in input.chunks(2000) {
            store.insert(chunk).unwrap();
            store.flush().unwrap();
        }
        std::thread::sleep(Duration::from_millis(50));
        stop.store(true, Ordering::Relaxed);
        let (reads, rows) = reader.join().unwrap();
        assert!(reads > 0);
        assert!(rows <= 40_000);
        assert_eq!(store.report().stored, 40_000);
    });
}

#[test]
fn small_files_of_a_closed_hour_merge_into_one() {
    let dir = tempfile::tempdir().unwrap();
    let input = flows(4, 20_000, day0_us() + 10 * H, H, 500);
    let mut store = Box::new(ParquetStore::open(dir.path(), quiet()).unwrap());
    for chunk in input.chunks(1000) {
        store.insert(chunk).unwrap();
        store.flush().unwrap();
    }
    let p = &partitions(dir.path(), Table::Flows).unwrap()[0].path;
    let before = tapflow_store::parquet::partition::files(p).unwrap();
    assert_eq!(before.len(), 20);
    let saved = std::fs::read(&before[3]).unwrap();
    store.close().unwrap();
    let after = tapflow_store::parquet::partition::files(p).unwrap();
    assert_eq!(after.len(), 1, "{after:?}");
    let b = read_file(&after[0], FLOW_COLUMNS).unwrap();
    assert_eq!(b.rows(), 20_000);
    assert!(b.times().is_sorted());

    // A crash after the merged file's rename left a source behind: the next open removes it.
    std::fs::write(&before[3], saved).unwrap();
    // Readers leave it out already: the merged file names it.
    assert_eq!(tapflow_store::parquet::partition::files(p).unwrap(), after);
    assert_eq!(
        tapflow_store::parquet::partition::all_files(p)
            .unwrap()
            .len(),
        2
    );
    drop(ParquetStore::open(dir.path(), quiet()).unwrap());
    assert_eq!(tapflow_store::parquet::partition::files(p).unwrap(), after);
    assert_eq!(all_flows(dir.path()).len(), 20_000);
}

#[test]
fn one_store_per_directory_and_stale_parts_removed() {
    let dir = tempfile::tempdir().unwrap();
    let s = ParquetStore::open(dir.path(), quiet()).unwrap();
    let e = ParquetStore::open(dir.path(), quiet())
        .unwrap_err()
        .to_string();
    assert!(e.contains("in use by another process"), "{e}");
    drop(s);
    let p = dir.path().join("flows/date=2024-03-10/hour=10");
    std::fs::create_dir_all(&p).unwrap();
    std::fs::write(p.join("w-1.parquet.part"), b"half").unwrap();
    drop(ParquetStore::open(dir.path(), quiet()).unwrap());
    assert!(!p.join("w-1.parquet.part").exists());
}

#[test]
fn retention_by_age_deletes_old_partitions_of_every_table() {
    let dir = tempfile::tempdir().unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as i64;
    let hour = now - now.rem_euclid(H);
    let mut store = Box::new(ParquetStore::open(dir.path(), quiet()).unwrap());
    for back in [5, 3, 0] {
        store
            .insert(&flows(5 + back as u64, 100, hour - back * H, H / 2, 10))
            .unwrap();
    }
    store.close().unwrap();
    assert_eq!(partitions(dir.path(), Table::Flows).unwrap().len(), 3);
    let opts = ParquetOptions {
        retain: Some(Duration::from_secs(4 * 3600)),
        ..quiet()
    };
    drop(ParquetStore::open(dir.path(), opts).unwrap());
    let left: Vec<i64> = partitions(dir.path(), Table::Flows)
        .unwrap()
        .iter()
        .map(|p| p.start_us)
        .collect();
    assert_eq!(left, [hour - 3 * H, hour]);
    let minute = partitions(dir.path(), Table::Rollup(Tier::Minute)).unwrap();
    assert!(minute.iter().all(|p| p.start_us >= hour - 3 * H));
    assert_eq!(all_flows(dir.path()).len(), 200);
}

#[test]
fn retention_by_size_deletes_the_oldest_flow_files_first() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Box::new(ParquetStore::open(dir.path(), quiet()).unwrap());
    for h in 0..4 {
        store
            .insert(&flows(20 + h as u64, 2000, day0_us() + h * H, H, 500))
            .unwrap();
    }
    store.close().unwrap();
    let size = |t: Table| -> u64 {
        files_between(dir.path(), t, i64::MIN, i64::MAX)
            .unwrap()
            .iter()
            .map(|f| std::fs::metadata(f).unwrap().len())
            .sum()
    };
    let flow_files = files_between(dir.path(), Table::Flows, i64::MIN, i64::MAX).unwrap();
    assert_eq!(flow_files.len(), 4);
    let total: u64 = Table::ALL.iter().map(|&t| size(t)).sum();
    let first = std::fs::metadata(&flow_files[0]).unwrap().len();
    let second = std::fs::metadata(&flow_files[1]).unwrap().len();
    // Room for all but the oldest file and a half.
    let opts = ParquetOptions {
        retain_size: Some(total - first - second / 2),
        ..quiet()
    };
    let rollups_before = size(Table::Rollup(Tier::Minute));
    drop(ParquetStore::open(dir.path(), opts).unwrap());
    let left = files_between(dir.path(), Table::Flows, i64::MIN, i64::MAX).unwrap();
    assert_eq!(left, flow_files[2..]);
    assert_eq!(size(Table::Rollup(Tier::Minute)), rollups_before);
    let total_after: u64 = Table::ALL.iter().map(|&t| size(t)).sum();
    assert!(total_after <= total - first - second / 2);
}

/// (bucket start, exporter, domain, protocol) → (flows, rev_flows, packets, bytes, rev_packets,
/// rev_bytes).
type Sums = BTreeMap<(i64, [u8; 16], u32, u8), [u64; 6]>;

/// An address and its (flows, packets, bytes).
type HostRow = ([u8; 16], [u64; 3]);

/// Per side: (bucket, address) → (flows, packets, bytes).
type HostSums = [HashMap<(i64, [u8; 16]), [u64; 3]>; 2];

#[test]
fn rollups_equal_the_sums_of_the_raw_flows() {
    let dir = tempfile::tempdir().unwrap();
    // Three hours and a bit, arriving in time order in batches, plus late flows.
    let mut input = flows(7, 30_000, day0_us() + 10 * H, 3 * H + H / 4, 400);
    input.sort_by_key(|f| f.flow.start_ns());
    let late = flows(8, 500, day0_us() + 10 * H, H / 6, 400);
    let opts = ParquetOptions {
        top_hosts: 5,
        ..quiet()
    };
    let mut store = Box::new(ParquetStore::open(dir.path(), opts).unwrap());
    for chunk in input.chunks(1500) {
        store.insert(chunk).unwrap();
        store.flush().unwrap();
    }
    store.insert(&late).unwrap();
    store.close().unwrap();

    let raw = all_flows(dir.path());
    assert_eq!(raw.len(), 30_500);
    for tier in Tier::ALL {
        let w = tier.bucket_us();
        let mut want = Sums::new();
        let mut hosts: HostSums = Default::default();
        for s in &raw {
            let f = &s.flow;
            let t = (f.start_ns() / 1000) as i64;
            let b = t - t.rem_euclid(w);
            let e = want.entry((b, s.exporter, s.domain, f.proto)).or_default();
            // A direction with no packets is not a flow.
            let fwd = u64::from(f.fwd.packets > 0);
            let rev = u64::from(f.rev.packets > 0);
            for (k, v) in [
                fwd,
                rev,
                f.fwd.packets,
                f.fwd.octets,
                f.rev.packets,
                f.rev.octets,
            ]
            .into_iter()
            .enumerate()
            {
                e[k] += v;
            }
            let (src, dst) = (addr16(f.ipv6, &f.src), addr16(f.ipv6, &f.dst));
            let mut add = |side: usize, a, p, o| {
                let h = hosts[side].entry((b, a)).or_default();
                h[0] += 1;
                h[1] += p;
                h[2] += o;
            };
            if fwd == 1 {
                add(0, src, f.fwd.packets, f.fwd.octets);
                add(1, dst, f.fwd.packets, f.fwd.octets);
            }
            if rev == 1 {
                add(0, dst, f.rev.packets, f.rev.octets);
                add(1, src, f.rev.packets, f.rev.octets);
            }
        }
        let mut got = Sums::new();
        for file in files_between(dir.path(), Table::Rollup(tier), i64::MIN, i64::MAX).unwrap() {
            let b = read_file(&file, Table::Rollup(tier).columns()).unwrap();
            let col = |k: usize| match &b.columns[k] {
                batch::Column::I64(v) => v.clone(),
                batch::Column::I32(v) => v.iter().map(|&x| i64::from(x)).collect(),
                c => panic!("{c:?}"),
            };
            let addrs = match &b.columns[1] {
                batch::Column::Addr(v) => v.clone(),
                c => panic!("{c:?}"),
            };
            let (time, domain, proto) = (col(0), col(2), col(3));
            let sums: Vec<Vec<i64>> = (4..10).map(col).collect();
            for i in 0..b.rows() {
                let e = got
                    .entry((time[i], addrs[i], domain[i] as u32, proto[i] as u8))
                    .or_default();
                for k in 0..6 {
                    e[k] += sums[k][i] as u64;
                }
            }
        }
        assert_eq!(got.len(), want.len(), "tier {tier:?}");
        assert!(
            got == want,
            "tier {tier:?}: rollup sums differ from the flows"
        );

        // Top hosts: the late flows were written as a second set of rows for their buckets,
        // so check the buckets they did not touch, whose rows are exact top-5s (every host in
        // the hour tier), and every bucket's totals (side 2) against the flows.
        let late_end = day0_us() + 10 * H + H / 6;
        let mut got_hosts: BTreeMap<(i64, u8), Vec<HostRow>> = BTreeMap::new();
        for file in files_between(dir.path(), Table::Hosts(tier), i64::MIN, i64::MAX).unwrap() {
            let b = read_file(&file, Table::Hosts(tier).columns()).unwrap();
            let (t, side, addr) = match (&b.columns[0], &b.columns[1], &b.columns[2]) {
                (batch::Column::I64(t), batch::Column::I32(s), batch::Column::Addr(a)) => {
                    (t.clone(), s.clone(), a.clone())
                }
                c => panic!("{c:?}"),
            };
            let v = |k: usize| match &b.columns[k] {
                batch::Column::I64(v) => v.clone(),
                c => panic!("{c:?}"),
            };
            let (fl, pk, by) = (v(3), v(4), v(5));
            for i in 0..b.rows() {
                got_hosts
                    .entry((t[i], side[i] as u8))
                    .or_default()
                    .push((addr[i], [fl[i] as u64, pk[i] as u64, by[i] as u64]));
            }
        }
        let mut checked = 0;
        for side in 0..2u8 {
            let mut per_bucket: BTreeMap<i64, Vec<HostRow>> = BTreeMap::new();
            for (&(b, a), &v) in &hosts[side as usize] {
                per_bucket.entry(b).or_default().push((a, v));
            }
            for (b, mut v) in per_bucket {
                if b < late_end {
                    continue;
                }
                v.sort_by(|x, y| y.1[2].cmp(&x.1[2]).then(x.0.cmp(&y.0)));
                if tier != Tier::Hour {
                    v.truncate(5);
                }
                assert_eq!(
                    got_hosts.get(&(b, side)),
                    Some(&v),
                    "tier {tier:?} bucket {b}"
                );
                checked += 1;
            }
        }
        assert!(checked >= 2, "tier {tier:?}");
        let mut want_totals: BTreeMap<i64, [u64; 3]> = BTreeMap::new();
        for (&(b, _), v) in &hosts[0] {
            let t = want_totals.entry(b).or_default();
            for k in 0..3 {
                t[k] += v[k];
            }
        }
        let mut got_totals: BTreeMap<i64, [u64; 3]> = BTreeMap::new();
        for (&(b, side), rows) in &got_hosts {
            if side == 2 {
                let t = got_totals.entry(b).or_default();
                for (_, v) in rows {
                    for k in 0..3 {
                        t[k] += v[k];
                    }
                }
            }
        }
        assert_eq!(got_totals, want_totals, "tier {tier:?} totals");
    }
}

#[test]
fn interface_names_and_exporter_stats_are_kept() {
    use tapflow_store::parquet::writer::{FileOptions, write_file};
    use tapflow_store::query::QueryEngine;
    use tapflow_store::schema::{INTERFACE_COLUMNS, INTERFACE_COLUMNS_BEFORE_SPEED};
    let dir = tempfile::tempdir().unwrap();
    let mut store = Box::new(ParquetStore::open(dir.path(), quiet()).unwrap());
    let first = InterfaceName {
        exporter: addr16(false, &[192, 0, 2, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]),
        domain: 3,
        index: 7,
        name: "xe-0/0/1".into(),
        description: "uplink é".into(),
        speed: 10_000_000_000,
        received_ns: (day0_us() as u64 + 5) * 1000,
    };
    store
        .insert_interfaces(std::slice::from_ref(&first))
        .unwrap();
    // A refresh of the same name is not kept twice; a change, and a change back, are.
    let later = |s: u64, name: &str| InterfaceName {
        received_ns: first.received_ns + s * 1_000_000_000,
        name: name.into(),
        ..first.clone()
    };
    store.insert_interfaces(&[later(60, "xe-0/0/1")]).unwrap();
    store.insert_interfaces(&[later(120, "renamed")]).unwrap();
    store.insert_interfaces(&[later(180, "xe-0/0/1")]).unwrap();
    let stats = ExporterStats {
        exporter: first.exporter,
        domain: 3,
        time_ns: (day0_us() as u64 + 10) * 1000,
        records: 1000,
        sequence_lost: 4,
        template_missing: 2,
        bad_messages: 1,
    };
    store.insert_exporter_stats(&[stats]).unwrap();
    store.close().unwrap();
    let f = files_between(dir.path(), Table::Interfaces, i64::MIN, i64::MAX).unwrap();
    assert!(
        f[0].to_str()
            .unwrap()
            .contains("interfaces/date=2024-03-10/")
    );
    let names: Vec<InterfaceName> = f
        .iter()
        .flat_map(|f| batch::to_interfaces(&read_file(f, Table::Interfaces.columns()).unwrap()))
        .collect();
    assert_eq!(
        names,
        [first.clone(), later(120, "renamed"), later(180, "xe-0/0/1")]
    );
    let f = files_between(dir.path(), Table::ExporterStats, i64::MIN, i64::MAX).unwrap();
    let got = batch::to_exporter_stats(&read_file(&f[0], Table::ExporterStats.columns()).unwrap());
    assert_eq!(got, [stats]);

    // A file an older tapflow wrote, without the speed column, reads with speed 0.
    let older = later(240, "older");
    let mut b = batch::from_interfaces(std::slice::from_ref(&older));
    b.columns.truncate(INTERFACE_COLUMNS_BEFORE_SPEED);
    let path = dir.path().join("interfaces/date=2024-03-10/older.parquet");
    write_file(
        &path,
        &INTERFACE_COLUMNS[..INTERFACE_COLUMNS_BEFORE_SPEED],
        &b,
        &FileOptions::default(),
        Vec::new(),
    )
    .unwrap();
    let got = batch::to_interfaces(&read_file(&path, INTERFACE_COLUMNS).unwrap());
    assert_eq!(got, [InterfaceName { speed: 0, ..older }]);
    // The engine hands every row over; the newest name wins, the speed stays.
    let engine = tapflow_store::parquet::ParquetEngine::new(dir.path(), 1);
    let names = tapflow_store::query::interfaces::IfNames::new(engine.interface_names().unwrap());
    let one = names.get(&first.exporter, 7).unwrap();
    assert_eq!((one.name.as_str(), one.speed), ("older", 10_000_000_000));
}

#[test]
fn the_flush_interval_makes_flows_visible_without_a_flush() {
    let dir = tempfile::tempdir().unwrap();
    let opts = ParquetOptions {
        flush_interval: Duration::from_millis(200),
        ..quiet()
    };
    let mut store = Box::new(ParquetStore::open(dir.path(), opts).unwrap());
    let input = flows(11, 10, day0_us(), H, 5);
    store.insert(&input[..5]).unwrap();
    assert_eq!(store.report().pending, 5);
    assert!(all_flows(dir.path()).is_empty());
    std::thread::sleep(Duration::from_millis(300));
    store.insert(&input[5..]).unwrap();
    let r = store.report();
    assert_eq!((r.received, r.stored, r.pending), (10, 10, 0));
    assert_eq!(all_flows(dir.path()).len(), 10);
    store.close().unwrap();
}

#[test]
fn a_partition_being_written_keeps_few_files() {
    let dir = tempfile::tempdir().unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as i64;
    // The current hour is not closed: only the file count makes it merge.
    let opts = ParquetOptions {
        maintenance_interval: Duration::ZERO,
        ..quiet()
    };
    let mut store = Box::new(ParquetStore::open(dir.path(), opts).unwrap());
    for k in 0..80 {
        store.insert(&flows(300 + k, 100, now - 1, 1, 20)).unwrap();
        store.flush().unwrap();
    }
    for p in partitions(dir.path(), Table::Flows).unwrap() {
        let files = tapflow_store::parquet::partition::all_files(&p.path).unwrap();
        assert!(
            files.len() < 32,
            "{} files in {}",
            files.len(),
            p.path.display()
        );
        // Each merge took fresh files only: no row was merged twice while the hour was open.
        for f in files.iter().filter(|f| name(f).starts_with("m-")) {
            let list = tapflow_store::parquet::reader::metadata_value(f, "tapflow.replaces")
                .unwrap()
                .unwrap();
            assert!(list.split(',').all(|n| n.starts_with("w-")), "{list}");
        }
    }
    assert_eq!(all_flows(dir.path()).len(), 8000);
    store.close().unwrap();
}

fn name(path: &Path) -> &str {
    path.file_name().unwrap().to_str().unwrap()
}

/// The codec of every column chunk of a file.
fn codecs(path: &Path) -> Vec<parquet::basic::Compression> {
    let r = SerializedFileReader::new(std::fs::File::open(path).unwrap()).unwrap();
    let rg = r.metadata().row_group(0);
    rg.columns().iter().map(|c| c.compression()).collect()
}

#[test]
fn a_lone_fresh_file_is_rewritten_at_the_store_level_when_its_hour_closes() {
    let dir = tempfile::tempdir().unwrap();
    let input = flows(7, 5000, day0_us() + 10 * H, H, 300);
    let mut store = Box::new(ParquetStore::open(dir.path(), quiet()).unwrap());
    store.insert(&input).unwrap();
    store.flush().unwrap();
    let p = &partitions(dir.path(), Table::Flows).unwrap()[0].path;
    let fresh = tapflow_store::parquet::partition::files(p).unwrap();
    assert_eq!(fresh.len(), 1);
    assert!(name(&fresh[0]).starts_with("w-"), "{fresh:?}");
    let fresh_codecs = codecs(&fresh[0]);
    let fresh_size = std::fs::metadata(&fresh[0]).unwrap().len();
    store.close().unwrap();
    let merged = tapflow_store::parquet::partition::all_files(p).unwrap();
    assert_eq!(merged.len(), 1, "{merged:?}");
    assert!(name(&merged[0]).starts_with("m-"), "{merged:?}");
    // Compressed columns stay zstd (columns of one value are stored plain in both); level 9
    // writes fewer bytes than level 1.
    assert_eq!(codecs(&merged[0]), fresh_codecs);
    assert!(
        fresh_codecs
            .iter()
            .any(|c| matches!(c, parquet::basic::Compression::ZSTD(_)))
    );
    assert!(std::fs::metadata(&merged[0]).unwrap().len() < fresh_size);
    assert_holds_exactly(dir.path(), &input);
}

#[test]
fn a_flush_too_large_to_merge_is_written_once_at_the_fast_level() {
    let dir = tempfile::tempdir().unwrap();
    // Files under 1,000 rows are merged: 2,000 rows of one hour are written final at once,
    // 100 of another fresh.
    let opts = ParquetOptions {
        compact_rows: 8000,
        ..quiet()
    };
    let mut input = flows(11, 2000, day0_us() + 10 * H, H, 300);
    input.extend(flows(12, 100, day0_us() + 11 * H, H, 30));
    let mut store = Box::new(ParquetStore::open(dir.path(), opts).unwrap());
    store.insert(&input).unwrap();
    store.flush().unwrap();
    let parts = partitions(dir.path(), Table::Flows).unwrap();
    let only_file = |p: &Path| {
        let f = tapflow_store::parquet::partition::all_files(p).unwrap();
        assert_eq!(f.len(), 1, "{f:?}");
        f[0].clone()
    };
    let (big, small) = (only_file(&parts[0].path), only_file(&parts[1].path));
    assert!(name(&big).starts_with("m-"), "{big:?}");
    assert!(name(&small).starts_with("w-"), "{small:?}");
    // The fast level, not 9: the same bytes as the fresh file a store that merges these rows
    // writes, and larger than those rows at the store's level (the footer names zstd, not
    // its level).
    let size = |f: &Path| std::fs::metadata(f).unwrap().len();
    let other = tempfile::tempdir().unwrap();
    let mut fresh_store = Box::new(ParquetStore::open(other.path(), quiet()).unwrap());
    fresh_store.insert(&input).unwrap();
    fresh_store.flush().unwrap();
    let fresh = only_file(&partitions(other.path(), Table::Flows).unwrap()[0].path);
    assert!(name(&fresh).starts_with("w-"), "{fresh:?}");
    assert_eq!(size(&big), size(&fresh));
    fresh_store.close().unwrap();
    let merged = only_file(&partitions(other.path(), Table::Flows).unwrap()[0].path);
    assert!(name(&merged).starts_with("m-"), "{merged:?}");
    assert!(
        size(&merged) < size(&big),
        "{} >= {}",
        size(&merged),
        size(&big)
    );
    store.close().unwrap();
    // The large file is left as it was; the small one is rewritten at the store's level.
    assert_eq!(only_file(&parts[0].path), big);
    let rewritten = only_file(&parts[1].path);
    assert!(name(&rewritten).starts_with("m-"), "{rewritten:?}");
    assert_holds_exactly(dir.path(), &input);
}

#[test]
fn late_flows_of_a_closed_hour_are_merged_once_until_its_merged_files_gather() {
    let dir = tempfile::tempdir().unwrap();
    let p = partition_dir_of(dir.path());
    let mut input = Vec::new();
    let mut before: Vec<std::path::PathBuf> = Vec::new();
    let gather = tapflow_store::parquet::compaction::MERGE_MERGED_AT as u64;
    for round in 0..=gather {
        // Each run stores more flows of the same closed hour, flushed twice, then closes.
        let mut store = Box::new(ParquetStore::open(dir.path(), quiet()).unwrap());
        for k in 0..2 {
            let more = flows(40 + 2 * round + k, 500, day0_us() + 10 * H, H, 100);
            store.insert(&more).unwrap();
            store.flush().unwrap();
            input.extend(more);
        }
        store.close().unwrap();
        let after = files_in(&p);
        if round < gather {
            // The two fresh files became one merged file; the earlier ones were left alone.
            assert_eq!(after.len(), round as usize + 1, "{after:?}");
            assert!(
                before.iter().all(|f| after.contains(f)),
                "{before:?} {after:?}"
            );
            assert!(after.iter().all(|f| name(f).starts_with("m-")), "{after:?}");
        } else {
            // Eight small merged files gathered: all of them and the fresh ones merged into one.
            assert_eq!(after.len(), 1, "{after:?}");
            assert!(!before.contains(&after[0]));
        }
        before = after;
    }
    assert_holds_exactly(dir.path(), &input);
}

/// The files of partition `p`, in name order.
fn files_in(p: &Path) -> Vec<std::path::PathBuf> {
    let mut f = tapflow_store::parquet::partition::all_files(p).unwrap();
    f.sort();
    f
}

/// The flows partition of day 0, 10:00, in the store at `dir`.
fn partition_dir_of(dir: &Path) -> std::path::PathBuf {
    tapflow_store::parquet::partition::partition_dir(
        dir,
        Table::Flows,
        tapflow_store::parquet::partition::partition_start(Table::Flows, day0_us() + 10 * H),
    )
}

#[test]
fn a_round_of_compaction_leaves_what_is_over_its_rows_to_the_next_flush() {
    let dir = tempfile::tempdir().unwrap();
    let opts = ParquetOptions {
        maintenance_interval: Duration::ZERO,
        compact_rows_per_round: 1,
        ..quiet()
    };
    let mut store = Box::new(ParquetStore::open(dir.path(), opts).unwrap());
    // Two closed hours: the first round merges the first one's fresh file, and stops there.
    let mut input = flows(21, 300, day0_us() + 10 * H, H, 50);
    input.extend(flows(22, 300, day0_us() + 11 * H, H, 50));
    store.insert(&input).unwrap();
    store.flush().unwrap();
    let kinds = |store_dir: &Path| -> Vec<Vec<String>> {
        partitions(store_dir, Table::Flows)
            .unwrap()
            .iter()
            .map(|p| {
                files_in(&p.path)
                    .iter()
                    .map(|f| name(f)[..2].to_owned())
                    .collect()
            })
            .collect()
    };
    assert_eq!(kinds(dir.path()), [["m-"], ["w-"]]);
    // The next flush's round, with nothing new, merges the rest.
    store.flush().unwrap();
    assert_eq!(kinds(dir.path()), [["m-"], ["m-"]]);
    store.close().unwrap();
    assert_eq!(all_flows(dir.path()).len(), 600);
}

#[test]
fn a_close_out_of_merge_time_writes_every_flow_and_leaves_the_merges_to_the_next_run() {
    let dir = tempfile::tempdir().unwrap();
    let p = partition_dir_of(dir.path());
    let opts = ParquetOptions {
        close_merge: Some(Duration::ZERO),
        ..quiet()
    };
    let mut store = Box::new(ParquetStore::open(dir.path(), opts).unwrap());
    // Three fresh files in a closed hour, and flows still buffered when the store closes.
    let mut input = Vec::new();
    for k in 0..4 {
        let more = flows(60 + k, 400, day0_us() + 10 * H, H, 100);
        store.insert(&more).unwrap();
        if k < 3 {
            store.flush().unwrap();
        }
        input.extend(more);
    }
    let report = store.close().unwrap();
    assert_eq!((report.stored, report.pending), (1600, 0));
    let files = files_in(&p);
    assert_eq!(files.len(), 4, "{files:?}");
    assert!(files.iter().all(|f| name(f).starts_with("w-")), "{files:?}");
    assert_holds_exactly(dir.path(), &input);
    // The next run's first round of maintenance merges them.
    let opts = ParquetOptions {
        maintenance_interval: Duration::ZERO,
        ..quiet()
    };
    let mut store = Box::new(ParquetStore::open(dir.path(), opts).unwrap());
    store.flush().unwrap();
    let files = files_in(&p);
    assert_eq!(files.len(), 1, "{files:?}");
    assert!(name(&files[0]).starts_with("m-"), "{files:?}");
    store.close().unwrap();
    assert_holds_exactly(dir.path(), &input);
}
