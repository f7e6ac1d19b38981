//! Flow export formats: each is one file here that implements [`FlowEncoder`], and one row of
//! [`FORMATS`], the table from URL scheme to default port, transport and encoder.
//!
//! A new format is a new file and its row (plus the file's `mod` line above the table).

use std::fmt;

use tapflow_wire::flowexport::{ConfigError, Stats};
use tapflow_wire::flowrecord::FlowRecord;

pub mod csv;
pub mod ipfix;
pub mod json;
pub mod netflow5;
pub mod netflow9;
pub mod table;

/// Every export format, by URL scheme: `SCHEME://HOST[:PORT]` for a collector, `SCHEME:PATH`
/// (`-` for standard output) for a file.
pub static FORMATS: &[ExportFormat] = &[
    ExportFormat::new("ipfix", 4739, Transport::Udp, ipfix::build),
    ExportFormat::new("ipfix+udp", 4739, Transport::Udp, ipfix::build),
    ExportFormat::new("ipfix+tcp", 4739, Transport::Tcp, ipfix::build),
    ExportFormat::new("nfv9", 2055, Transport::Udp, netflow9::build),
    ExportFormat::new("nfv5", 2055, Transport::Udp, netflow5::build),
    ExportFormat::new("csv", 0, Transport::File, csv::build),
    ExportFormat::new("json", 0, Transport::File, json::build),
    ExportFormat::new("table", 0, Transport::File, table::build),
];

/// The format registered for `scheme`.
pub fn format(scheme: &str) -> Option<&'static ExportFormat> {
    FORMATS.iter().find(|f| f.scheme == scheme)
}

/// The registered schemes, comma-separated, for error messages.
pub fn schemes() -> String {
    let names: Vec<&str> = FORMATS.iter().map(|f| f.scheme).collect();
    names.join(", ")
}

/// One export format's encoder for one output: it turns batches of flow records into messages
/// (datagrams, TCP messages) or lines of text and hands each to `out`.
///
/// The exporter thread calls it once per batch of records (thousands), never per packet, so it
/// is used as a `Box<dyn FlowEncoder>`. An implementation allocates nothing per record and
/// hands `out` a buffer it reuses.
pub trait FlowEncoder: Send + fmt::Debug {
    /// Writes what comes before any record (a CSV header line). Called once, when the output
    /// opens.
    fn begin(&mut self, out: &mut dyn FnMut(&[u8])) {
        let _ = out;
    }

    /// Encodes `records`. `now_ns` is the export time, `epoch_ns` the first packet time of the
    /// meter that ended them (NetFlow's "boot time"), both ns since 1970. A text format calls
    /// `out` once per record, with its line.
    fn encode(
        &mut self,
        records: &[FlowRecord],
        now_ns: u64,
        epoch_ns: u64,
        out: &mut dyn FnMut(&[u8]),
    );

    /// Sends what is due without records (templates a collector must relearn). Called when no
    /// batch came for a while (100 ms).
    fn tick(&mut self, now_ns: u64, out: &mut dyn FnMut(&[u8])) {
        let _ = (now_ns, out);
    }

    /// A new transport session starts (a TCP reconnect): the next message must stand alone.
    fn reset_session(&mut self) {}

    /// What the encoder has done: records and messages handed to `out`, records it cannot
    /// carry.
    fn stats(&self) -> Stats;
}

/// How an output's messages travel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transport {
    /// One datagram per message, to a collector.
    Udp,
    /// Messages back to back on one TCP session, to a collector.
    Tcp,
    /// Bytes appended to a file or standard output.
    File,
}

/// What an encoder is built for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EncoderConfig {
    /// Largest message the transport takes: the UDP payload that fits the path MTU;
    /// `usize::MAX` over TCP and to files, where the format's own limit applies.
    pub max_message_len: usize,
    /// IPFIX Observation Domain ID, NetFlow v9 source ID.
    pub observation_domain: u32,
    /// The transport.
    pub transport: Transport,
}

/// Builds a format's encoder for one output.
pub type BuildFn = fn(&EncoderConfig) -> Result<Box<dyn FlowEncoder>, ConfigError>;

/// One registered export format.
#[derive(Debug)]
pub struct ExportFormat {
    /// The URL scheme, e.g. `ipfix+tcp`.
    pub scheme: &'static str,
    /// The collector port when the URL names none (0 for files).
    pub default_port: u16,
    /// How the messages travel.
    pub transport: Transport,
    /// Builds the encoder.
    pub build: BuildFn,
}

impl ExportFormat {
    /// A row of [`FORMATS`].
    pub const fn new(
        scheme: &'static str,
        default_port: u16,
        transport: Transport,
        build: BuildFn,
    ) -> ExportFormat {
        ExportFormat {
            scheme,
            default_port,
            transport,
            build,
        }
    }
}

/// Formats are equal when their schemes are (each scheme is registered once).
impl PartialEq for ExportFormat {
    fn eq(&self, other: &ExportFormat) -> bool {
        self.scheme == other.scheme
    }
}

impl Eq for ExportFormat {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemes_are_registered_once_and_build() {
        for (i, f) in FORMATS.iter().enumerate() {
            assert!(
                FORMATS[..i].iter().all(|g| g.scheme != f.scheme),
                "{} twice",
                f.scheme
            );
            assert_eq!(f.transport == Transport::File, f.default_port == 0);
            let cfg = EncoderConfig {
                max_message_len: if f.transport == Transport::Udp {
                    1472
                } else {
                    usize::MAX
                },
                observation_domain: 1,
                transport: f.transport,
            };
            let e = (f.build)(&cfg).unwrap_or_else(|e| panic!("{}: {e}", f.scheme));
            assert_eq!(e.stats(), Stats::default());
        }
        assert_eq!(format("nfv5").map(|f| f.default_port), Some(2055));
        assert!(format("sflow").is_none());
        assert!(schemes().starts_with("ipfix, ipfix+udp, ipfix+tcp, nfv9"));
    }
}
