//! The inserting store: the caller's thread encodes rows into a batch (no allocation per row)
//! and seals it at `batch_rows` rows or `batch_age`; a sender thread per server (per shard in a
//! cluster) posts sealed batches, oldest first. While a server is away, batches queue in the
//! [`Spool`] (memory, then disk), its sender retries with backoff (and re-creates the tables, in
//! case the server came back empty), and the queue drains in order when a server answers again.
//!
//! Accounting: `received = stored + dropped + pending` at every moment. A batch is `stored` when
//! a server acknowledged it (in a cluster, the shard whose local tables took it), and
//! `dropped` when it fit neither in memory nor in the spool. An acknowledgement lost on the way
//! makes the retry insert the batch twice: delivery is at least once.

use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::rowbinary::{encode_flow, encode_if_counters, encode_interface, encode_stats};
use super::spool::{Batch, Entry, Spool, Table};
use super::{Dialect, Layout, Schema, Server, Target};
use crate::{ExporterStats, FlowStore, InterfaceName, StoreError, StoreReport, StoredFlow};

/// How a [`ClickHouseStore`] connects, batches and spools.
#[derive(Debug, Clone)]
pub struct ClickHouseConfig {
    /// `http://HOST:PORT/DB`, or every shard's `HOST:PORT` and `?cluster=NAME`.
    pub url: String,
    /// Where batches wait on disk while the server is away (`--clickhouse-spool DIR`).
    pub spool_dir: Option<PathBuf>,
    /// The most bytes of batches kept in the spool directory.
    pub spool_limit: u64,
    /// The most bytes of batches kept in memory before the spool directory (without one, all
    /// there is).
    pub memory_limit: u64,
    /// Rows per insert.
    pub batch_rows: u64,
    /// The longest a row waits before its batch is sent.
    pub batch_age: Duration,
    /// How long `close` keeps trying to send what is queued before it leaves it in the spool.
    pub close_timeout: Duration,
}

impl ClickHouseConfig {
    /// Defaults for `url`: 500,000 rows or 2 s per insert, 256 MiB in memory, no spool directory
    /// (1 GiB once one is given), 10 s to drain at close.
    pub fn new(url: &str) -> ClickHouseConfig {
        ClickHouseConfig {
            url: url.to_string(),
            spool_dir: None,
            spool_limit: 1 << 30,
            memory_limit: 256 << 20,
            batch_rows: 500_000,
            batch_age: Duration::from_secs(2),
            close_timeout: Duration::from_secs(10),
        }
    }
}

/// Rows being gathered for one table.
#[derive(Debug)]
struct Gathering {
    table: Table,
    data: Vec<u8>,
    rows: u64,
    since: Instant,
}

impl Gathering {
    fn new(table: Table) -> Gathering {
        Gathering {
            table,
            data: Vec::new(),
            rows: 0,
            since: Instant::now(),
        }
    }

    fn take(&mut self) -> Batch {
        let capacity = self.data.capacity();
        let data = std::mem::replace(&mut self.data, Vec::with_capacity(capacity));
        let rows = std::mem::take(&mut self.rows);
        Batch {
            table: self.table,
            rows,
            data,
        }
    }
}

/// What the caller's thread and the sender share.
#[derive(Debug)]
struct State {
    spool: Spool,
    report: StoreReport,
    /// Flows an earlier run spooled and this one stored.
    resumed_stored: u64,
    /// Set by `close`: send what is queued until then, then stop.
    closing: Option<Instant>,
}

#[derive(Debug)]
struct Shared {
    state: Mutex<State>,
    wake: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A [`FlowStore`] inserting into ClickHouse.
#[derive(Debug)]
pub struct ClickHouseStore {
    config: ClickHouseConfig,
    schema: Schema,
    shared: Arc<Shared>,
    /// One per server: each takes the oldest batch whenever its server is free.
    senders: Vec<JoinHandle<()>>,
    flows: Gathering,
    interfaces: Gathering,
    stats: Gathering,
    if_counters: Gathering,
}

impl ClickHouseStore {
    /// Connects to every server of the URL, creates the database and tables for their version,
    /// takes up batches an earlier run left in the spool directory, and starts the sender.
    pub fn open(config: ClickHouseConfig) -> Result<ClickHouseStore, StoreError> {
        let target = Target::parse(&config.url)?;
        let servers = target.servers();
        let mut dialect = None;
        for s in &servers {
            let d = Dialect::for_version(s.version()?);
            if dialect.is_some_and(|x| x != d) {
                return Err(StoreError::Other(format!(
                    "ClickHouse {}: servers of different generations in one cluster",
                    s.host()
                )));
            }
            dialect = Some(d);
        }
        let layout = match &target.cluster {
            None => Layout::Single,
            Some(c) => {
                let n = servers[0].query(&format!(
                    "SELECT count() FROM system.clusters WHERE cluster = '{c}'"
                ))?;
                if n.trim() == "0" {
                    return Err(StoreError::Other(format!(
                        "ClickHouse {}: no cluster {c:?} in its remote_servers",
                        servers[0].host()
                    )));
                }
                Layout::Cluster(c.clone())
            }
        };
        let schema = Schema {
            dialect: dialect.expect("a URL names at least one host"),
            layout,
            database: target.database.clone(),
            retain_days: target.retain_days,
        };
        create_tables(&servers, &schema)?;
        let spool = Spool::open(
            config.spool_dir.as_deref(),
            config.spool_limit,
            config.memory_limit,
        )?;
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                spool,
                report: StoreReport::default(),
                resumed_stored: 0,
                closing: None,
            }),
            wake: Condvar::new(),
        });
        let mut senders = Vec::new();
        for server in servers {
            let (shared, schema) = (shared.clone(), schema.clone());
            let sender = std::thread::Builder::new()
                .name("clickhouse".into())
                .spawn(move || send_loop(&shared, &server, &schema))
                .map_err(|e| {
                    StoreError::Other(format!("ClickHouse: cannot start a sender: {e}"))
                })?;
            senders.push(sender);
        }
        Ok(ClickHouseStore {
            config,
            schema,
            shared,
            senders,
            flows: Gathering::new(Table::Flows),
            interfaces: Gathering::new(Table::Interfaces),
            stats: Gathering::new(Table::ExporterStats),
            if_counters: Gathering::new(Table::IfCounters),
        })
    }

    /// The tables' names and dialect.
    pub fn schema(&self) -> &Schema {
        &self.schema
    }

    /// Flows an earlier run left in the spool directory and this run stored.
    pub fn resumed_stored(&self) -> u64 {
        self.shared.lock().resumed_stored
    }

    /// Hands a gathered batch to the sender (or the spool, or counts it dropped).
    fn seal(&mut self, which: Table) -> Result<(), StoreError> {
        let g = match which {
            Table::Flows => &mut self.flows,
            Table::Interfaces => &mut self.interfaces,
            Table::ExporterStats => &mut self.stats,
            Table::IfCounters => &mut self.if_counters,
        };
        g.since = Instant::now();
        if g.rows == 0 {
            return Ok(());
        }
        let batch = g.take();
        let mut st = self.shared.lock();
        if let Some(refused) = st.spool.push(batch)?
            && refused.table == Table::Flows
        {
            st.report.dropped += refused.rows;
        }
        self.shared.wake.notify_all();
        Ok(())
    }

    /// Seals every batch older than `batch_age`.
    fn seal_aged(&mut self) -> Result<(), StoreError> {
        for (t, since) in [
            (Table::Flows, self.flows.since),
            (Table::Interfaces, self.interfaces.since),
            (Table::ExporterStats, self.stats.since),
            (Table::IfCounters, self.if_counters.since),
        ] {
            if since.elapsed() >= self.config.batch_age {
                self.seal(t)?;
            }
        }
        Ok(())
    }

    fn pending(st: &State) -> StoreReport {
        let mut r = st.report;
        r.pending = r.received - r.stored - r.dropped;
        r
    }
}

impl FlowStore for ClickHouseStore {
    fn insert(&mut self, flows: &[StoredFlow]) -> Result<(), StoreError> {
        self.shared.lock().report.received += flows.len() as u64;
        for f in flows {
            encode_flow(&mut self.flows.data, f);
            self.flows.rows += 1;
            if self.flows.rows >= self.config.batch_rows {
                self.seal(Table::Flows)?;
            }
        }
        self.seal_aged()
    }

    fn insert_interfaces(&mut self, names: &[InterfaceName]) -> Result<(), StoreError> {
        for n in names {
            encode_interface(&mut self.interfaces.data, n);
        }
        self.interfaces.rows += names.len() as u64;
        self.seal_aged()
    }

    fn insert_exporter_stats(&mut self, stats: &[ExporterStats]) -> Result<(), StoreError> {
        for s in stats {
            encode_stats(&mut self.stats.data, s);
        }
        self.stats.rows += stats.len() as u64;
        self.seal_aged()
    }

    fn insert_if_counters(&mut self, rows: &[crate::InterfaceCounters]) -> Result<(), StoreError> {
        for r in rows {
            encode_if_counters(&mut self.if_counters.data, r);
        }
        self.if_counters.rows += rows.len() as u64;
        self.seal_aged()
    }

    /// Hands everything gathered to the sender; it is visible once the server took it (at
    /// once while the server is up).
    fn flush(&mut self) -> Result<(), StoreError> {
        self.seal(Table::Flows)?;
        self.seal(Table::Interfaces)?;
        self.seal(Table::ExporterStats)?;
        self.seal(Table::IfCounters)
    }

    fn report(&self) -> StoreReport {
        Self::pending(&self.shared.lock())
    }

    /// Sends what is queued for up to `close_timeout`; what is still queued then stays in the
    /// spool directory (pending, sent by the next run) or, without one, is dropped.
    fn close(mut self: Box<Self>) -> Result<StoreReport, StoreError> {
        self.flush()?;
        self.shared.lock().closing = Some(Instant::now() + self.config.close_timeout);
        self.shared.wake.notify_all();
        for h in std::mem::take(&mut self.senders) {
            h.join()
                .map_err(|_| StoreError::Other("ClickHouse: a sender panicked".into()))?;
        }
        let mut st = self.shared.lock();
        let (_, dropped) = st.spool.persist()?;
        for e in dropped
            .iter()
            .filter(|e| e.table == Table::Flows && !e.resumed)
        {
            st.report.dropped += e.rows;
        }
        Ok(Self::pending(&st))
    }
}

/// Runs every statement of `schema` on every server, after those that bring an older
/// tapflow's tables up to it.
fn create_tables(servers: &[Server], schema: &Schema) -> Result<(), StoreError> {
    for s in servers {
        let columns = |name: &str| -> Result<Vec<String>, StoreError> {
            let (database, table) = schema.local_name(name);
            let text = s.query(&format!(
                "SELECT name FROM system.columns WHERE database = '{database}' \
                 AND table = '{table}' FORMAT TabSeparated"
            ))?;
            Ok(text.lines().map(str::to_string).collect())
        };
        for stmt in schema.migrations(&columns("flows")?, &columns("interfaces")?) {
            s.query(&stmt)?;
        }
        for stmt in schema.statements() {
            s.query(&stmt)?;
        }
    }
    Ok(())
}

/// A sender, one per server: takes the oldest batch and posts it to its server, retrying with
/// backoff from 100 ms to 5 s (a failed batch goes back to the front of the queue, for whichever
/// server is free first); stops when closing and the queue is empty or the close deadline has
/// passed. In a cluster every shard's sender drains the one queue, so the shards insert at once
/// and a shard that is down leaves its batches to the others.
fn send_loop(shared: &Shared, server: &Server, schema: &Schema) {
    let mut backoff = Duration::from_millis(100);
    let mut need_tables = false;
    // Whether the last attempt failed (to log each outage once).
    let mut failing = false;
    loop {
        let entry = {
            let mut st = shared.lock();
            loop {
                // Closing, a sender stays while another has a batch out: if that one fails,
                // the batch comes back for whichever sender is free.
                if let Some(deadline) = st.closing
                    && (st.spool.is_idle() || Instant::now() >= deadline)
                {
                    return;
                }
                if let Some(e) = st.spool.take_front() {
                    break e;
                }
                st = shared.wake.wait(st).unwrap_or_else(|p| p.into_inner());
            }
        };
        let result = (|| {
            if need_tables {
                create_tables(std::slice::from_ref(server), schema)?;
            }
            send(server, schema, &entry)
        })();
        let mut st = shared.lock();
        match result {
            Ok(()) => {
                need_tables = false;
                backoff = Duration::from_millis(100);
                if failing {
                    failing = false;
                    eprintln!(
                        "tapflow: ClickHouse {} answers again: sending the queued batches",
                        server.host()
                    );
                }
                if entry.table == Table::Flows {
                    if entry.resumed {
                        st.resumed_stored += entry.rows;
                    } else {
                        st.report.stored += entry.rows;
                    }
                }
                if let Err(e) = st.spool.done(entry) {
                    eprintln!("tapflow: ClickHouse spool: {e}");
                }
                // Senders waiting to close see the spool idle.
                shared.wake.notify_all();
            }
            Err(e) => {
                if !failing {
                    failing = true;
                    eprintln!("tapflow: {e}; queueing batches and retrying");
                }
                need_tables = true;
                st.spool.put_back(entry);
                // Another sender may take the batch at once; this one waits out its backoff
                // (new batches do not cut it short), or until the close deadline.
                shared.wake.notify_all();
                let until = Instant::now() + backoff;
                loop {
                    let end = st.closing.map_or(until, |deadline| until.min(deadline));
                    let left = end.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        break;
                    }
                    st = match shared.wake.wait_timeout(st, left) {
                        Ok((st, _)) => st,
                        Err(p) => p.into_inner().0,
                    };
                }
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
        }
    }
}

/// Posts one batch into the local tables of `server` (in a cluster, those of one shard).
fn send(server: &Server, schema: &Schema, entry: &Entry) -> Result<(), StoreError> {
    let data = entry.data()?;
    let insert = match entry.table {
        Table::Flows => schema.insert_flows(),
        Table::Interfaces => schema.insert_interfaces(),
        Table::ExporterStats => schema.insert_exporter_stats(),
        Table::IfCounters => schema.insert_if_counters(),
    };
    server.insert(&insert, &data, &[])
}
