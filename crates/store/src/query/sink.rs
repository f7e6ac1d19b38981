//! Where a scan puts the one-way flows that pass: one sink per query kind, one per scanning
//! thread, merged at the end. The flow listing and the `-I` summary live here; grouping in
//! `top.rs` and `series.rs`.

use super::filter::OneWay;
use super::result::{QueryResult, Summary};

/// Takes the one-way flows a scan keeps.
pub trait Sink: Send + Sized {
    /// Counts one flow.
    fn add(&mut self, f: &OneWay);
    /// Takes in what another thread's sink counted.
    fn merge(&mut self, other: Self);
    /// The answer.
    fn finish(self) -> QueryResult;
}

/// The flows themselves, first by time.
#[derive(Debug)]
pub struct ListSink {
    limit: Option<u64>,
    rows: Vec<OneWay>,
}

impl ListSink {
    /// Keeps the first `limit` flows by time (all if `None`).
    pub fn new(limit: Option<u64>) -> ListSink {
        ListSink {
            limit,
            rows: Vec::new(),
        }
    }

    fn trim(&mut self) {
        self.rows.sort_unstable_by_key(|r| {
            (
                r.start_us, r.end_us, r.src, r.dst, r.sport, r.dport, r.reverse,
            )
        });
        if let Some(l) = self.limit {
            self.rows.truncate(usize::try_from(l).unwrap_or(usize::MAX));
        }
    }
}

impl Sink for ListSink {
    fn add(&mut self, f: &OneWay) {
        // A listing shows no enrichment columns: they are listed as 0 whichever columns a
        // filter made a store read, so every store lists the same flows.
        self.rows.push(OneWay {
            src_as: 0,
            dst_as: 0,
            src_country: 0,
            dst_country: 0,
            src_as_name: "",
            dst_as_name: "",
            src_net: "",
            dst_net: "",
            src_net_attrs: [""; 3],
            dst_net_attrs: [""; 3],
            ..*f
        });
        // Bounded memory under a limit: keep the earliest `limit` now and then.
        if let Some(l) = self.limit
            && self.rows.len() as u64 >= l.saturating_mul(2).max(65_536)
        {
            self.trim();
        }
    }

    fn merge(&mut self, other: ListSink) {
        self.rows.extend(other.rows);
        if self.limit.is_some() {
            self.trim();
        }
    }

    fn finish(mut self) -> QueryResult {
        self.trim();
        QueryResult::Flows(self.rows)
    }
}

/// nfdump's `-I` totals.
#[derive(Debug, Default)]
pub struct SummarySink(Summary);

impl SummarySink {
    /// Counts `flows` one-way flows of `protocol`.
    #[inline]
    pub fn count(
        &mut self,
        protocol: u8,
        flows: u64,
        packets: u64,
        bytes: u64,
        start_us: i64,
        end_us: i64,
    ) {
        let s = &mut self.0;
        let by = match protocol {
            6 => &mut s.tcp,
            17 => &mut s.udp,
            1 => &mut s.icmp,
            _ => &mut s.other,
        };
        by.add(flows, packets, bytes, start_us, end_us);
        s.total.add(flows, packets, bytes, start_us, end_us);
    }
}

impl Sink for SummarySink {
    fn add(&mut self, f: &OneWay) {
        self.count(
            f.protocol, f.flows, f.packets, f.bytes, f.start_us, f.end_us,
        );
    }

    fn merge(&mut self, o: SummarySink) {
        let (s, o) = (&mut self.0, o.0);
        for (a, b) in [
            (&mut s.total, o.total),
            (&mut s.tcp, o.tcp),
            (&mut s.udp, o.udp),
            (&mut s.icmp, o.icmp),
            (&mut s.other, o.other),
        ] {
            a.merge(&b);
        }
    }

    fn finish(self) -> QueryResult {
        QueryResult::Summary(self.0)
    }
}
