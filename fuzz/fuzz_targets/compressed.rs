//! Fuzzes the reading of compressed capture files (`-r` of `.zst`, `.gz`): any bytes give
//! decoded bytes or a stop, never a panic; the pieces a salvage would cut at are in order and
//! decode to a prefix of what the stream decoder gives; the capture-file reader takes the
//! result.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tapflow_engine::compress::Codec;
use tapflow_wire::capfile::Reader;

/// Decoded bytes kept at most (a small input can stand for a great deal).
const LIMIT: u64 = 64 << 20;

fuzz_target!(|data: &[u8]| {
    let Some(codec) = Codec::sniff(data) else {
        return;
    };
    let mut out = Vec::new();
    let Ok((n, stop)) = codec.decompress(data, &mut out, LIMIT) else {
        return;
    };
    assert_eq!(n as usize, out.len());
    let p = codec.pieces(data);
    let mut last = (0, 0);
    for &(end, decoded) in &p.ends {
        assert!(end > last.0 && decoded >= last.1 && end <= data.len());
        last = (end, decoded);
    }
    assert_eq!(last.1, p.decoded.len());
    let m = p.decoded.len().min(out.len());
    assert_eq!(p.decoded[..m], out[..m]);
    if stop.is_none() {
        assert!(out.len() >= p.decoded.len());
    }
    if let Ok(mut r) = Reader::new(&out) {
        while let Some(Ok(_)) = r.next_packet() {}
    }
});
