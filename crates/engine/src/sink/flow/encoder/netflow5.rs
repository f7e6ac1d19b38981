//! NetFlow v5 over UDP: the wire encoder ([`tapflow_wire::netflow5`]), its sysUptime counted
//! from the first packet of the first batch. IPv4 only, one record per direction.

use tapflow_wire::flowexport::{ConfigError, Stats};
use tapflow_wire::flowrecord::FlowRecord;
use tapflow_wire::netflow5;

use super::{EncoderConfig, FlowEncoder};

/// A NetFlow v5 encoder; its clock starts with the first batch.
#[derive(Debug)]
pub struct Netflow5 {
    enc: netflow5::Encoder,
    started: bool,
}

/// A NetFlow v5 encoder with `c`'s message size (30 records at most).
pub fn build(c: &EncoderConfig) -> Result<Box<dyn FlowEncoder>, ConfigError> {
    let mut cfg = netflow5::Config::new(0);
    cfg.max_message_len = c.max_message_len.min(netflow5::MAX_MESSAGE_LEN);
    Ok(Box::new(Netflow5 {
        enc: netflow5::Encoder::new(cfg)?,
        started: false,
    }))
}

impl FlowEncoder for Netflow5 {
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

    fn stats(&self) -> Stats {
        self.enc.stats()
    }
}
