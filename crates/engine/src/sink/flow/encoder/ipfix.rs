//! IPFIX (RFC 7011) with RFC 5103 biflow records, over UDP or TCP: the wire encoder
//! ([`tapflow_wire::ipfix`]) as it is.

use tapflow_wire::flowexport::{ConfigError, Stats};
use tapflow_wire::flowrecord::FlowRecord;
use tapflow_wire::ipfix::{self, Encoder};

use super::{EncoderConfig, FlowEncoder, Transport};

/// An IPFIX encoder with `c`'s message size and observation domain; over TCP, templates go
/// once per session.
pub fn build(c: &EncoderConfig) -> Result<Box<dyn FlowEncoder>, ConfigError> {
    let mut cfg = ipfix::Config::new(c.observation_domain);
    cfg.max_message_len = c.max_message_len.min(ipfix::MAX_MESSAGE_LEN);
    if c.transport == Transport::Tcp {
        cfg.transport = ipfix::Transport::Tcp;
    }
    Ok(Box::new(Encoder::new(cfg)?))
}

impl FlowEncoder for Encoder {
    fn encode(
        &mut self,
        records: &[FlowRecord],
        now_ns: u64,
        _epoch_ns: u64,
        out: &mut dyn FnMut(&[u8]),
    ) {
        Encoder::encode(self, records, now_ns, out);
    }

    fn tick(&mut self, now_ns: u64, out: &mut dyn FnMut(&[u8])) {
        Encoder::tick(self, now_ns, out);
    }

    fn reset_session(&mut self) {
        Encoder::reset_session(self);
    }

    fn stats(&self) -> Stats {
        Encoder::stats(self)
    }
}
