//! Arbitrary bytes as a Linux cooked v2 header and as a classic BPF program for cooked frames:
//! the view never panics and re-emits its fields to the same bytes (the reserved word aside);
//! moving a program to the network header (`sll::for_cooked_socket`) never panics, puts the
//! loopback skip first, keeps every instruction's opcode and jumps, and keeps a valid program
//! valid.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tapflow_wire::cbpf::{self, Insn};
use tapflow_wire::sll::{self, HEADER_LEN, Header, Repr};

fuzz_target!(|data: &[u8]| {
    if let Ok(h) = Header::new_checked(data) {
        assert!(h.addr().len() <= sll::ADDR_LEN);
        assert_eq!(h.payload().len(), data.len() - HEADER_LEN);
        let _ = sll::direction_name(h.pkttype());
        let mut out = [0u8; HEADER_LEN];
        Repr::parse(&h).emit(&mut out);
        assert_eq!(out[..2], data[..2]);
        assert_eq!(out[2..4], [0, 0]);
        assert_eq!(out[4..], data[4..HEADER_LEN]);
    }
    let prog: Vec<Insn> = data
        .chunks_exact(8)
        .map(|c| Insn {
            code: u16::from_le_bytes([c[0], c[1]]),
            jt: c[2],
            jf: c[3],
            k: u32::from_le_bytes([c[4], c[5], c[6], c[7]]),
        })
        .collect();
    if let Ok(kernel) = sll::for_cooked_socket(&prog) {
        let skip = sll::LOOPBACK_OUTGOING_SKIPPED.len();
        assert_eq!(kernel[..skip], sll::LOOPBACK_OUTGOING_SKIPPED);
        let moved = &kernel[skip..];
        assert_eq!(moved.len(), prog.len());
        for (a, b) in prog.iter().zip(moved) {
            assert_eq!((a.code, a.jt, a.jf), (b.code, b.jt, b.jf));
        }
        if prog.len() + skip <= cbpf::BPF_MAXINSNS {
            assert_eq!(cbpf::validate(&kernel).is_ok(), cbpf::validate(&prog).is_ok());
        }
    }
});
