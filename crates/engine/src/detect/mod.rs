//! Flood detection: per-destination rates a second on the packet stream (a capture's workers)
//! or the flow stream (the collector), split by protocol and by the signatures that tell floods
//! apart, measured against thresholds; alerts with evidence to the terminal, a webhook, a
//! command, `/metrics` and BGP (docs/detect.md).
//!
//! - [`signature`]: what one packet or flow direction is, and its signatures;
//! - [`tally`]: one interval's accounting in bounded memory (space-saving);
//! - [`threshold`]: the limits, per host, group and total, and the thresholds file;
//! - [`baseline`]: group and total limits learnt from a store's past days;
//! - [`alert`]: alert start, hold time, hysteresis, end, and the evidence;
//! - [`detector`]: the shared detector that merges the workers' tallies;
//! - [`meter`]: a worker's side; [`sink`] on packets, [`store`] on flows;
//! - [`action`]: what is done with an alert; [`bgp`]: announcing the attacked address;
//!   [`record`]: alerts kept in the store.

pub mod action;
pub mod alert;
pub mod baseline;
pub mod bgp;
pub mod detector;
pub mod meter;
pub mod record;
pub mod signature;
pub mod sink;
pub mod store;
pub mod tally;
pub mod threshold;

pub use detector::{DetectSummary, Detector, Hub};
