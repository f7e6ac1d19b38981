//! Measures the Parquet store on real flows: bytes per stored flow (flows table, rollups apart)
//! and write throughput on one core. Used by `scripts/bench-store.sh`.
//!
//! `store_bench FLOWS.jsonl|FLOWS.csv DIR [ZSTD_LEVEL] [ROW_GROUP_ROWS] [live:FLUSH_ROWS:COPIES]`
//! prints one JSON object. By default the flows, whatever hours they span, are inserted and
//! written at close, as `tapflow import` does. `live:` stores them as a live collector would:
//! `COPIES` copies of the flows ([`distinct_copies`]), every flow moved into the current hour
//! (its start's offset in the trace modulo 50 minutes), a flush every `FLUSH_ROWS` flows (a collector flushes every
//! 5 s), maintenance after each flush, compaction at close. `file` in place of `live:...`
//! writes the flows, sorted by start, into one file of the flows table: the writer alone, without
//! hour partitions, rollups or merges.

use std::io::BufRead;
use std::path::Path;
use std::time::Instant;

use tapflow_store::import::{CSV_HEADER, Format, parse_line};
use tapflow_store::parquet::batch::from_flows_in;
use tapflow_store::parquet::partition::{Table, files_between};
use tapflow_store::parquet::writer::{FileOptions, write_file};
use tapflow_store::{FlowStore, ParquetOptions, ParquetStore, StoredFlow};

/// CPU time of this process so far (user + system), seconds, from `/proc/self/stat`.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks = |k: usize| f.get(k).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // Fields 14 and 15 (utime, stime) are the 12th and 13th after the command name.
    (ticks(11) + ticks(12)) / 100.0
}

fn table_bytes(dir: &Path, t: Table) -> (u64, usize) {
    let files = files_between(dir, t, i64::MIN, i64::MAX).expect("list the store");
    let bytes = files
        .iter()
        .map(|f| std::fs::metadata(f).map_or(0, |m| m.len()))
        .sum();
    (bytes, files.len())
}

/// Moves every flow into the current hour, keeping its duration: its start becomes the hour's
/// start plus its start's offset from the earliest one modulo 50 minutes.
fn into_this_hour(flows: &mut [StoredFlow]) {
    const HOUR_NS: u64 = 3_600_000_000_000;
    const SPAN_NS: u64 = 3_000_000_000_000;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("a clock after 1970")
        .as_nanos() as u64;
    let hour = now / HOUR_NS * HOUR_NS;
    let first = flows.iter().map(|f| f.flow.start_ns()).min().unwrap_or(0);
    for f in flows {
        let start = f.flow.start_ns();
        let shift = (hour + (start - first) % SPAN_NS).wrapping_sub(start);
        for side in [&mut f.flow.fwd, &mut f.flow.rev] {
            if side.packets > 0 {
                side.first_ns = side.first_ns.wrapping_add(shift);
                side.last_ns = side.last_ns.wrapping_add(shift);
            }
        }
    }
}

/// `copies` copies of `flows`, one after the other, each unlike the others where a compressor
/// would see it: copy k starts k × 7 minutes later (so once moved into one hour its rows fall
/// between those of the other copies) and has its source port's low bits xored with k.
fn distinct_copies(flows: &[StoredFlow], copies: usize) -> Vec<StoredFlow> {
    const STEP_NS: u64 = 420_000_000_000;
    let mut out = Vec::with_capacity(flows.len() * copies);
    for k in 0..copies as u64 {
        out.extend(flows.iter().map(|&f| {
            let mut f = f;
            f.flow.sport ^= k as u16;
            for side in [&mut f.flow.fwd, &mut f.flow.rev] {
                if side.packets > 0 {
                    side.first_ns += k * STEP_NS;
                    side.last_ns += k * STEP_NS;
                }
            }
            f
        }));
    }
    out
}

/// The flow records of a JSON-lines or CSV file, as a collector stores them.
fn flows_of(input: impl BufRead) -> Vec<StoredFlow> {
    let mut flows: Vec<StoredFlow> = Vec::new();
    let mut format = None;
    for line in input.lines() {
        let line = line.expect("read a line");
        if line == CSV_HEADER {
            format = Some(Format::Csv);
            continue;
        }
        let f = *format.get_or_insert(Format::JsonLines);
        flows.push(StoredFlow {
            flow: parse_line(f, &line).expect("a flow record"),
            sampling: 1,
            received_ns: 1_700_000_000_000_000_000,
            ..StoredFlow::default()
        });
    }
    flows
}

/// Writes `flows`, sorted by start, into one file of the flows table (three times, each its own
/// file) and prints its size and the writer's CPU per file.
fn one_file(flows: &[StoredFlow], dir: &Path, opts: &FileOptions) {
    const TIMES: u32 = 3;
    let mut order: Vec<u32> = (0..flows.len() as u32).collect();
    order.sort_by_key(|&i| flows[i as usize].flow.start_ns());
    std::fs::create_dir_all(dir).expect("make the directory");
    let path = |k| dir.join(format!("flows{k}.parquet"));
    let (cpu0, t0) = (cpu_seconds(), Instant::now());
    for k in 0..TIMES {
        let rows = from_flows_in(flows, &order);
        write_file(&path(k), Table::Flows.columns(), &rows, opts, Vec::new()).expect("write");
    }
    let cpu = (cpu_seconds() - cpu0) / f64::from(TIMES);
    let wall = t0.elapsed().as_secs_f64() / f64::from(TIMES);
    let path = path(0);
    let bytes = std::fs::metadata(&path).expect("the file").len();
    let n = flows.len() as f64;
    println!(
        "{{\"flows\":{},\"flow_bytes\":{bytes},\"bytes_per_flow\":{:.2},\"zstd_level\":{},\
         \"cpu_s\":{cpu:.3},\"wall_s\":{wall:.3},\"flows_per_cpu_s\":{:.0}}}",
        flows.len(),
        bytes as f64 / n,
        opts.zstd_level,
        n / cpu.max(1e-9),
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 3 {
        eprintln!("usage: store_bench FLOWS.jsonl|FLOWS.csv DIR [ZSTD_LEVEL] [ROW_GROUP_ROWS]");
        std::process::exit(2);
    }
    let input = std::io::BufReader::new(std::fs::File::open(&args[1]).expect("open the flows"));
    let dir = Path::new(&args[2]);
    // Merged wholly at close, as `tapflow import` does.
    let mut opts = ParquetOptions {
        close_merge: None,
        ..ParquetOptions::default()
    };
    if let Some(l) = args.get(3) {
        opts.file.zstd_level = l.parse().expect("a zstd level");
    }
    if let Some(r) = args.get(4) {
        opts.file.row_group_rows = r.parse().expect("a row count");
    }
    if args.get(5).is_some_and(|a| a == "file") {
        one_file(&flows_of(input), dir, &opts.file);
        return;
    }
    let live: Option<(usize, usize)> = args.get(5).map(|a| {
        let mut it = a
            .strip_prefix("live:")
            .expect("live:FLUSH_ROWS:COPIES")
            .split(':')
            .map(|v| v.parse::<usize>().expect("a count"));
        (it.next().expect("FLUSH_ROWS"), it.next().unwrap_or(1))
    });
    let mut flows = flows_of(input);
    if let Some((_, copies)) = live {
        flows = distinct_copies(&flows, copies);
        into_this_hour(&mut flows);
        opts.maintenance_interval = std::time::Duration::ZERO;
        opts.flush_interval = std::time::Duration::from_secs(3600);
    }
    let (cpu0, t0) = (cpu_seconds(), Instant::now());
    let mut store = Box::new(ParquetStore::open(dir, opts.clone()).expect("open the store"));
    let mut since_flush = 0;
    for chunk in flows.chunks(8192) {
        store.insert(chunk).expect("insert");
        since_flush += chunk.len();
        if let Some((every, _)) = live
            && since_flush >= every
        {
            store.flush().expect("flush");
            since_flush = 0;
        }
    }
    let report = store.close().expect("close");
    let total = flows.len();
    let (cpu, wall) = (cpu_seconds() - cpu0, t0.elapsed().as_secs_f64());
    assert_eq!(report.stored, total as u64);
    let (flow_bytes, flow_files) = table_bytes(dir, Table::Flows);
    let rollup_bytes: u64 = Table::ALL[1..10]
        .iter()
        .map(|&t| table_bytes(dir, t).0)
        .sum();
    let ports_bytes = table_bytes(dir, Table::Ports).0;
    let n = total as f64;
    println!(
        "{{\"flows\":{},\"flow_bytes\":{flow_bytes},\"flow_files\":{flow_files},\
         \"bytes_per_flow\":{:.2},\"rollup_bytes\":{rollup_bytes},\
         \"rollup_bytes_per_flow\":{:.2},\"ports_bytes\":{ports_bytes},\
         \"ports_bytes_per_flow\":{:.2},\"zstd_level\":{},\"row_group_rows\":{},\
         \"cpu_s\":{cpu:.3},\"wall_s\":{wall:.3},\"flows_per_cpu_s\":{:.0}}}",
        total,
        flow_bytes as f64 / n,
        rollup_bytes as f64 / n,
        ports_bytes as f64 / n,
        opts.file.zstd_level,
        opts.file.row_group_rows,
        n / cpu.max(1e-9),
    );
}
