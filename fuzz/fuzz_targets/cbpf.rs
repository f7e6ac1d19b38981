//! Arbitrary classic BPF programs and packets: `validate` never panics; a program it accepts
//! runs to a verdict without panicking; and `and_then(a, b)` of two valid programs is valid and
//! passes a packet exactly when `a` accepts it, with `b`'s verdict (but see the known
//! exception for `ret a` below).
//!
//! Input: one byte with the two programs' lengths (1 to 16 instructions each), two bytes added
//! to the packet's length for `ld #len`, the instructions (8 bytes each, `struct sock_filter`
//! little-endian), then the packet.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tapflow_wire::cbpf::{self, Insn};

fn insns(bytes: &[u8]) -> Vec<Insn> {
    bytes
        .chunks_exact(8)
        .map(|c| Insn {
            code: u16::from_le_bytes([c[0], c[1]]),
            jt: c[2],
            jf: c[3],
            k: u32::from_le_bytes([c[4], c[5], c[6], c[7]]),
        })
        .collect()
}

fuzz_target!(|data: &[u8]| {
    let Some((&[lens, w0, w1], rest)) = data.split_first_chunk::<3>() else {
        return;
    };
    let (na, nb) = (usize::from(lens & 0x0f) + 1, usize::from(lens >> 4) + 1);
    if rest.len() < 8 * (na + nb) {
        return;
    }
    let (a, rest) = rest.split_at(8 * na);
    let (b, pkt) = rest.split_at(8 * nb);
    let (a, mut b) = (insns(a), insns(b));
    let wire_len = pkt.len() as u32 + u32::from(u16::from_le_bytes([w0, w1]));
    let a_ok = cbpf::validate(&a).is_ok();
    let b_ok = cbpf::validate(&b).is_ok();
    let verdict_a = a_ok.then(|| cbpf::run(&a, pkt, wire_len));
    if !(a_ok && b_ok) {
        return;
    }
    // `b` runs after `a` with `a`'s registers and scratch memory; as a program of its own it
    // starts from zeros. Both agree when `b` clears A and X first and reads no scratch word.
    b.splice(
        0..0,
        [Insn::stmt(cbpf::LD_IMM, 0), Insn::stmt(cbpf::LDX_IMM, 0)],
    );
    let reads_memory = b
        .iter()
        .any(|i| matches!(i.code, cbpf::LD_MEM | cbpf::LDX_MEM));
    let both = cbpf::and_then(&a, &b);
    assert_eq!(
        cbpf::validate(&both),
        Ok(()),
        "and_then of valid programs is valid"
    );
    let verdict = cbpf::run(&both, pkt, wire_len);
    if reads_memory {
        return;
    }
    match verdict_a {
        // Known: `and_then` takes every `ret a` in `a` for an acceptance, also when A is 0
        // (docs/fuzzing.md). libpcap's programs return constants only.
        Some(0) if a.iter().any(|i| i.code == cbpf::RET_A) => {}
        Some(0) => assert_eq!(verdict, 0, "and_then passes what a refuses: a = {a:?}"),
        _ => assert_eq!(
            verdict,
            cbpf::run(&b, pkt, wire_len),
            "and_then: a = {a:?}, b = {b:?}"
        ),
    }
});
