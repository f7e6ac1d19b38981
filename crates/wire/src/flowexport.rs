//! What the flow export encoders share: their configuration errors and counters, and the
//! message loop of the template-based formats, IPFIX (RFC 7011) and NetFlow v9 (RFC 3954).
//!
//! Both formats send a message (v9: an export packet) of a header, the Template Set (v9: Template
//! FlowSet) when templates are due, then one Data Set per address family, IPv4 before IPv6.
//! `TemplateEncoder` (crate-internal) cuts a batch of records into such messages, each as full as
//! `max_message_len` allows, keeps the sequence number and the template schedule, and counts;
//! a `MessageFormat` supplies the lengths, the header, the templates and the records.

use crate::bytes::Put;
use crate::flowrecord::FlowRecord;

/// Default time between template resends over UDP, in seconds.
pub const DEFAULT_REFRESH_SECS: u32 = 60;

/// Default message count between template resends over UDP (ipt_NETFLOW's default).
pub const DEFAULT_REFRESH_MESSAGES: u32 = 20;

/// Length of a set header (set id, length), the same in IPFIX and NetFlow v9.
pub const SET_HEADER_LEN: usize = 4;

/// When templates are resent over UDP (RFC 6728 `templateRefreshTimeout`); a message carries
/// them when either limit is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Refresh {
    /// Seconds after the last message with templates; 0 turns the timer off.
    pub secs: u32,
    /// At least one message in every `messages` carries the templates; 0 turns the count off.
    pub messages: u32,
}

impl Default for Refresh {
    fn default() -> Refresh {
        Refresh {
            secs: DEFAULT_REFRESH_SECS,
            messages: DEFAULT_REFRESH_MESSAGES,
        }
    }
}

impl Refresh {
    /// The refresh, if it ever resends the templates.
    pub(crate) fn check(self, format: &'static str) -> Result<Refresh, ConfigError> {
        if self.secs == 0 && self.messages == 0 {
            Err(ConfigError::NoRefresh { format })
        } else {
            Ok(self)
        }
    }
}

/// Why an encoder could not be built from its configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The largest message cannot hold a full first message.
    #[error(
        "{format}: maximum message length {len} is below {min}, the least that holds a header, the templates (if any) and one record"
    )]
    MessageTooShort {
        /// "IPFIX", "NetFlow v9" or "NetFlow v5".
        format: &'static str,
        /// The configured length.
        len: usize,
        /// The least length that works.
        min: usize,
    },
    /// The largest message exceeds what the format or UDP can carry.
    #[error("{format}: maximum message length {len} exceeds {max}")]
    MessageTooLong {
        /// "IPFIX", "NetFlow v9" or "NetFlow v5".
        format: &'static str,
        /// The configured length.
        len: usize,
        /// The largest length that works.
        max: usize,
    },
    /// Export over UDP with both refresh limits off would never resend the templates.
    #[error("{format} over UDP needs a template refresh: refresh seconds and messages are both 0")]
    NoRefresh {
        /// "IPFIX" or "NetFlow v9".
        format: &'static str,
    },
}

impl ConfigError {
    /// Checks a configured largest message against the least a format needs and the most it
    /// allows.
    pub(crate) fn check_len(
        format: &'static str,
        len: usize,
        min: usize,
        max: usize,
    ) -> Result<(), ConfigError> {
        if len < min {
            Err(ConfigError::MessageTooShort { format, len, min })
        } else if len > max {
            Err(ConfigError::MessageTooLong { format, len, max })
        } else {
            Ok(())
        }
    }
}

/// What an encoder has done since it was built.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Stats {
    /// Messages (export packets) handed to `out`, template-only ones included.
    pub messages: u64,
    /// Messages that carried the templates.
    pub template_messages: u64,
    /// Data records written (NetFlow v5: one per direction that had packets).
    pub records: u64,
    /// Flow records the format cannot carry, skipped (NetFlow v5: IPv6 or no packets).
    pub unencodable: u64,
}

/// `v` in 32 bits, `u32::MAX` if it does not fit.
#[inline]
pub(crate) fn saturate(v: u64) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

/// Whole seconds since 1970 in 32 bits, saturating in 2106.
#[inline]
pub(crate) fn unix_secs(ns: u64) -> u32 {
    saturate(ns / 1_000_000_000)
}

/// When templates are due: first message of a session, then by time and message count.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TemplateClock {
    /// `None`: send once per session (TCP).
    refresh: Option<Refresh>,
    /// Templates went out in this session.
    sent: bool,
    /// Export time of the last message with templates.
    last_ns: u64,
    /// Messages since the last one with templates, that one included.
    messages: u32,
}

impl TemplateClock {
    pub(crate) fn new(refresh: Option<Refresh>) -> TemplateClock {
        TemplateClock {
            refresh,
            sent: false,
            last_ns: 0,
            messages: 0,
        }
    }

    /// Whether a message sent at `now_ns` must carry the templates.
    pub(crate) fn due(&self, now_ns: u64) -> bool {
        if !self.sent {
            return true;
        }
        let Some(r) = self.refresh else {
            return false;
        };
        let by_count = r.messages != 0 && self.messages >= r.messages;
        // A clock that stepped back also resends: cheaper than reasoning about it.
        let by_time = r.secs != 0
            && now_ns
                .checked_sub(self.last_ns)
                .is_none_or(|d| d >= u64::from(r.secs) * 1_000_000_000);
        by_count || by_time
    }

    /// Records that a message went out at `now_ns`, with or without templates.
    pub(crate) fn sent(&mut self, templates: bool, now_ns: u64) {
        if templates {
            self.sent = true;
            self.last_ns = now_ns;
            self.messages = 1;
        } else {
            self.messages = self.messages.saturating_add(1);
        }
    }

    /// Starts a new session: templates are due again.
    pub(crate) fn reset(&mut self) {
        *self = TemplateClock::new(self.refresh);
    }
}

/// What a message header says; [`MessageFormat::write_header`] writes the fields its format has.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MessageHeader {
    /// Length of the whole message, padding included.
    pub(crate) len: usize,
    /// Data records in the message.
    pub(crate) records: usize,
    /// Whether the message carries the Template Set.
    pub(crate) templates: bool,
    /// The sequence number the message carries.
    pub(crate) sequence: u32,
    /// Export time, ns since 1970.
    pub(crate) now_ns: u64,
}

/// A template-based format, as its encoder's configuration: what [`TemplateEncoder`] needs to
/// know about it. Index 0 of the per-family arrays is IPv4, 1 is IPv6.
pub(crate) trait MessageFormat {
    /// The format's name in errors: "IPFIX", "NetFlow v9".
    const NAME: &'static str;
    /// Length of the message header.
    const HEADER_LEN: usize;
    /// Length of the Template Set that carries both templates.
    const TEMPLATE_SET_LEN: usize;
    /// Set ids of the Data Sets (the template ids), IPv4 and IPv6.
    const DATA_SET_ID: [u16; 2];
    /// Length of a data record, IPv4 and IPv6.
    const RECORD_LEN: [usize; 2];
    /// A Data Set's length is padded with zeros to a multiple of this (NetFlow v9: 4).
    const SET_ALIGN: usize;
    /// Whether the sequence number counts data records (IPFIX) rather than messages (v9).
    const SEQUENCE_COUNTS_RECORDS: bool;
    /// The least `max_message_len`: a header, the templates and one IPv6 record.
    const MIN_MESSAGE_LEN: usize;
    /// The most `max_message_len`.
    const MAX_MESSAGE_LEN: usize;

    /// Largest message in octets.
    fn max_message_len(&self) -> usize;
    /// When templates are resent; `None`: once per session (IPFIX over TCP).
    fn refresh(&self) -> Option<Refresh>;
    /// Zero octets to add inside the last Data Set of a message that has `room` octets left
    /// before `max_message_len` and whose last set holds `record_len`-octet records.
    fn end_padding(&self, room: usize, record_len: usize) -> usize;
    /// Writes the Template Set.
    fn write_template_set(w: &mut Put<'_>);
    /// Writes one data record in its template's order.
    fn write_record(&self, w: &mut Put<'_>, r: &FlowRecord);
    /// Writes the message header.
    fn write_header(&self, h: &mut Put<'_>, m: &MessageHeader);
}

/// The encoder of a template-based format for one collector: a reusable message buffer, the
/// sequence number and the template schedule. Nothing here allocates after [`Self::new`].
#[derive(Debug)]
pub(crate) struct TemplateEncoder<F> {
    pub(crate) cfg: F,
    buf: Box<[u8]>,
    /// The sequence number of the next message, modulo 2^32.
    pub(crate) sequence: u32,
    templates: TemplateClock,
    stats: Stats,
}

impl<F: MessageFormat> TemplateEncoder<F> {
    /// Checks `cfg` and allocates the message buffer.
    pub(crate) fn new(cfg: F) -> Result<TemplateEncoder<F>, ConfigError> {
        let len = cfg.max_message_len();
        ConfigError::check_len(F::NAME, len, F::MIN_MESSAGE_LEN, F::MAX_MESSAGE_LEN)?;
        let refresh = cfg.refresh().map(|r| r.check(F::NAME)).transpose()?;
        Ok(TemplateEncoder {
            cfg,
            buf: vec![0; len].into_boxed_slice(),
            sequence: 0,
            templates: TemplateClock::new(refresh),
            stats: Stats::default(),
        })
    }

    /// What the encoder has done so far.
    pub(crate) fn stats(&self) -> Stats {
        self.stats
    }

    /// Starts a new transport session: the sequence restarts at 0 and the next message carries
    /// the templates.
    pub(crate) fn reset_session(&mut self) {
        self.sequence = 0;
        self.templates.reset();
    }

    /// Encodes `records` into one or more messages of at most `max_message_len` octets and
    /// calls `out` with each; `now_ns` (ns since 1970) is the export time.
    pub(crate) fn encode(
        &mut self,
        records: &[FlowRecord],
        now_ns: u64,
        out: &mut dyn FnMut(&[u8]),
    ) {
        let mut rest = records;
        while !rest.is_empty() {
            let templates = self.templates.due(now_ns);
            let n = self.fit(rest, templates);
            let len = self.write_message(&rest[..n], templates, now_ns);
            out(&self.buf[..len]);
            self.sent(n, templates, now_ns);
            rest = &rest[n..];
        }
    }

    /// Sends a template-only message if templates are due.
    pub(crate) fn tick(&mut self, now_ns: u64, out: &mut dyn FnMut(&[u8])) {
        if self.templates.due(now_ns) {
            let len = self.write_message(&[], true, now_ns);
            out(&self.buf[..len]);
            self.sent(0, true, now_ns);
        }
    }

    fn sent(&mut self, records: usize, templates: bool, now_ns: u64) {
        let step = if F::SEQUENCE_COUNTS_RECORDS {
            records as u32
        } else {
            1
        };
        self.sequence = self.sequence.wrapping_add(step);
        self.templates.sent(templates, now_ns);
        self.stats.messages += 1;
        self.stats.template_messages += u64::from(templates);
        self.stats.records += records as u64;
    }

    /// How many of `records`, taken in order, fit in one message.
    fn fit(&self, records: &[FlowRecord], templates: bool) -> usize {
        let max = self.cfg.max_message_len();
        // The message so far, its Data Sets padded.
        let mut len = F::HEADER_LEN + if templates { F::TEMPLATE_SET_LEN } else { 0 };
        // Each Data Set so far, unpadded; 0 while it has no record.
        let (mut v4, mut v6) = (0, 0);
        for (i, r) in records.iter().enumerate() {
            let set = if r.ipv6 { v6 } else { v4 };
            let grown = set.max(SET_HEADER_LEN) + F::RECORD_LEN[usize::from(r.ipv6)];
            let next =
                len + grown.next_multiple_of(F::SET_ALIGN) - set.next_multiple_of(F::SET_ALIGN);
            if next > max {
                // MIN_MESSAGE_LEN guarantees room for the first record.
                debug_assert!(i > 0);
                return i;
            }
            len = next;
            if r.ipv6 {
                v6 = grown;
            } else {
                v4 = grown;
            }
        }
        records.len()
    }

    /// Writes one message with `batch` (all of which fit) and returns its length.
    fn write_message(&mut self, batch: &[FlowRecord], templates: bool, now_ns: u64) -> usize {
        let mut w = Put::at(&mut self.buf, F::HEADER_LEN);
        if templates {
            F::write_template_set(&mut w);
        }
        // Where the last Data Set starts and the length of its records.
        let mut last_set = None;
        for ipv6 in [false, true] {
            if !batch.iter().any(|r| r.ipv6 == ipv6) {
                continue;
            }
            let family = usize::from(ipv6);
            let start = w.pos();
            w.u16(F::DATA_SET_ID[family]);
            w.u16(0); // length, filled in below
            for r in batch.iter().filter(|r| r.ipv6 == ipv6) {
                self.cfg.write_record(&mut w, r);
            }
            let set_len = (w.pos() - start).next_multiple_of(F::SET_ALIGN);
            w.zeros(start + set_len - w.pos());
            w.set_u16(start + 2, set_len as u16);
            last_set = Some((start, F::RECORD_LEN[family]));
        }
        if let Some((start, record_len)) = last_set {
            let room = self.cfg.max_message_len() - w.pos();
            let padding = self.cfg.end_padding(room, record_len);
            if padding > 0 {
                w.zeros(padding);
                w.set_u16(start + 2, (w.pos() - start) as u16);
            }
        }
        let len = w.pos();
        let header = MessageHeader {
            len,
            records: batch.len(),
            templates,
            sequence: self.sequence,
            now_ns,
        };
        self.cfg
            .write_header(&mut Put::at(&mut self.buf, 0), &header);
        len
    }
}
