//! CSV: a header line, then one line per record in the columns of [`crate::sink::flow::text`].

use tapflow_wire::flowexport::{ConfigError, Stats};
use tapflow_wire::flowrecord::FlowRecord;

use super::{EncoderConfig, FlowEncoder};
use crate::sink::flow::text::{CSV_HEADER_LINE, Line, values};

/// The CSV encoder: one reused line buffer.
#[derive(Debug)]
pub struct Csv {
    line: Box<Line>,
    stats: Stats,
}

/// A CSV encoder (it takes no settings).
pub fn build(_: &EncoderConfig) -> Result<Box<dyn FlowEncoder>, ConfigError> {
    Ok(Box::new(Csv {
        line: Box::default(),
        stats: Stats::default(),
    }))
}

impl FlowEncoder for Csv {
    fn begin(&mut self, out: &mut dyn FnMut(&[u8])) {
        out(CSV_HEADER_LINE.as_bytes());
    }

    fn encode(
        &mut self,
        records: &[FlowRecord],
        _now_ns: u64,
        _epoch_ns: u64,
        out: &mut dyn FnMut(&[u8]),
    ) {
        for r in records {
            self.line.clear();
            for (k, v) in values(r).into_iter().enumerate() {
                if k > 0 {
                    self.line.byte(b',');
                }
                self.line.value(v);
            }
            self.line.byte(b'\n');
            out(self.line.as_bytes());
        }
        self.stats.records += records.len() as u64;
    }

    fn stats(&self) -> Stats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sink::flow::encoder::Transport;
    use crate::sink::flow::text::CSV_HEADER;
    use crate::sink::flow::text::tests::{record, written};

    #[test]
    fn csv_carries_every_field() {
        let cfg = EncoderConfig {
            max_message_len: usize::MAX,
            observation_domain: 0,
            transport: Transport::File,
        };
        let (header, s) = written(&mut *build(&cfg).unwrap(), &record());
        assert_eq!(
            s,
            "6,192.0.2.1,40000,198.51.100.7,443,0,0,1700000000123456789,1700000001123456789,2,112,19,1700000000200000000,1700000000200000000,1,60,18,end,tcp,2023-11-14T22:13:20.123456789Z,2023-11-14T22:13:21.123456789Z,2023-11-14T22:13:20.200000000Z,2023-11-14T22:13:20.200000000Z\n"
        );
        assert_eq!(header.trim_end(), CSV_HEADER, "header and constant agree");
        assert_eq!(CSV_HEADER.split(',').count(), s.split(',').count());
    }
}
