//! NetFlow v9 (RFC 3954) over UDP: the wire encoder ([`tapflow_wire::netflow9`]), its
//! sysUptime counted from the first packet of the first batch.

use tapflow_wire::flowexport::{ConfigError, Stats};
use tapflow_wire::flowrecord::FlowRecord;
use tapflow_wire::netflow9;

use super::{EncoderConfig, FlowEncoder};

/// A NetFlow v9 encoder. It sends nothing, not even templates, before the first batch: its
/// clock starts there.
#[derive(Debug)]
pub struct Netflow9 {
    enc: netflow9::Encoder,
    started: bool,
}

/// A NetFlow v9 encoder with `c`'s message size (at most a datagram's) and source ID.
pub fn build(c: &EncoderConfig) -> Result<Box<dyn FlowEncoder>, ConfigError> {
    let mut cfg = netflow9::Config::new(c.observation_domain, 0);
    cfg.max_message_len = c.max_message_len.min(netflow9::MAX_MESSAGE_LEN);
    Ok(Box::new(Netflow9 {
        enc: netflow9::Encoder::new(cfg)?,
        started: false,
    }))
}

impl FlowEncoder for Netflow9 {
    fn encode(
        &mut self,
        records: &[FlowRecord],
        now_ns: u64,
        epoch_ns: u64,
        out: &mut dyn FnMut(&[u8]),
    ) {
        if !self.started {
            self.enc.set_start_ns(epoch_ns);
            self.started = true;
        }
        self.enc.encode(records, now_ns, out);
    }

    fn tick(&mut self, now_ns: u64, out: &mut dyn FnMut(&[u8])) {
        if self.started {
            self.enc.tick(now_ns, out);
        }
    }

    fn stats(&self) -> Stats {
        self.enc.stats()
    }
}
