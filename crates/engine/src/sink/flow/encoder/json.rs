//! JSON lines: one object per record, its keys the columns of [`crate::sink::flow::text`];
//! numbers bare, addresses and the end reason as strings.

use tapflow_wire::flowexport::{ConfigError, Stats};
use tapflow_wire::flowrecord::FlowRecord;

use super::{EncoderConfig, FlowEncoder};
use crate::sink::flow::text::{COLUMNS, Line, Value, values};

/// The JSON lines encoder: one reused line buffer.
#[derive(Debug)]
pub struct JsonLines {
    line: Box<Line>,
    stats: Stats,
}

/// A JSON lines encoder (it takes no settings).
pub fn build(_: &EncoderConfig) -> Result<Box<dyn FlowEncoder>, ConfigError> {
    Ok(Box::new(JsonLines {
        line: Box::default(),
        stats: Stats::default(),
    }))
}

impl FlowEncoder for JsonLines {
    fn encode(
        &mut self,
        records: &[FlowRecord],
        _now_ns: u64,
        _epoch_ns: u64,
        out: &mut dyn FnMut(&[u8]),
    ) {
        for r in records {
            let line = &mut self.line;
            line.clear();
            line.byte(b'{');
            for (k, (name, v)) in COLUMNS.iter().zip(values(r)).enumerate() {
                if k > 0 {
                    line.byte(b',');
                }
                // Column names need no escaping, and neither do addresses or reasons.
                line.byte(b'"');
                line.bytes(name.as_bytes());
                line.bytes(b"\":");
                let quoted = !matches!(v, Value::Num(_));
                if quoted {
                    line.byte(b'"');
                }
                line.value(v);
                if quoted {
                    line.byte(b'"');
                }
            }
            line.bytes(b"}\n");
            out(line.as_bytes());
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
    fn json_carries_every_field() {
        let cfg = EncoderConfig {
            max_message_len: usize::MAX,
            observation_domain: 0,
            transport: Transport::File,
        };
        let (header, j) = written(&mut *build(&cfg).unwrap(), &record());
        assert_eq!(header, "");
        assert!(j.starts_with(r#"{"proto":6,"src":"192.0.2.1","sport":40000,"#));
        assert!(
            j.ends_with(
                "\"rev_tcp_flags\":18,\"end_reason\":\"end\",\"proto_name\":\"tcp\",\
                 \"first\":\"2023-11-14T22:13:20.123456789Z\",\
                 \"last\":\"2023-11-14T22:13:21.123456789Z\",\
                 \"rev_first\":\"2023-11-14T22:13:20.200000000Z\",\
                 \"rev_last\":\"2023-11-14T22:13:20.200000000Z\"}\n"
            ),
            "{j}"
        );
        for key in CSV_HEADER.split(',') {
            assert!(j.contains(&format!("\"{key}\":")), "{key} missing in {j}");
        }
    }
}
