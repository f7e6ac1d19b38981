//! Flow metering: each worker's meter keeps its flows in its own table and hands the records it
//! ends to the exporter thread, which encodes them for every output.

pub mod encoder;
pub mod export;
pub mod export_store;
pub mod meter;
pub mod table;
pub mod text;
