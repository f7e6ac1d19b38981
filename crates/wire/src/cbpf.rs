//! Classic BPF programs (`struct sock_filter`): the instruction, an interpreter with the
//! kernel's semantics, and splicing two programs into one.
//!
//! The kernel runs a socket filter on the whole packet; the number it returns is how many bytes
//! to keep, and 0 drops the packet. A load past the end of the packet, or a division by zero,
//! ends the program with 0 (`bpf_prog_run` in `net/core/filter.c` after the cBPF → eBPF
//! conversion keeps that rule).

/// One instruction, field for field the kernel's `struct sock_filter`.
#[doc(alias = "sock_filter")]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Insn {
    /// Opcode: class | size | mode, or class | op | source.
    pub code: u16,
    /// Jump offset if true (conditional jumps).
    pub jt: u8,
    /// Jump offset if false.
    pub jf: u8,
    /// The constant operand.
    pub k: u32,
}

/// The most instructions the kernel accepts in one program (`BPF_MAXINSNS`).
pub const BPF_MAXINSNS: usize = 4096;
/// Words of scratch memory (`BPF_MEMWORDS`).
pub const BPF_MEMWORDS: usize = 16;

/// `ld [k]` (word).
pub const LD_W_ABS: u16 = 0x20;
/// `ldh [k]`.
pub const LD_H_ABS: u16 = 0x28;
/// `ldb [k]`.
pub const LD_B_ABS: u16 = 0x30;
/// `ld [x + k]`.
pub const LD_W_IND: u16 = 0x40;
/// `ldh [x + k]`.
pub const LD_H_IND: u16 = 0x48;
/// `ldb [x + k]`.
pub const LD_B_IND: u16 = 0x50;
/// `ld #k`.
pub const LD_IMM: u16 = 0x00;
/// `ld #len`.
pub const LD_LEN: u16 = 0x80;
/// `ld M[k]`.
pub const LD_MEM: u16 = 0x60;
/// `ldx #k`.
pub const LDX_IMM: u16 = 0x01;
/// `ldx #len`.
pub const LDX_LEN: u16 = 0x81;
/// `ldx M[k]`.
pub const LDX_MEM: u16 = 0x61;
/// `ldxb 4*([k]&0xf)`: the IPv4 header length.
pub const LDX_MSH: u16 = 0xb1;
/// `st M[k]`.
pub const ST: u16 = 0x02;
/// `stx M[k]`.
pub const STX: u16 = 0x03;
/// `ja +k`.
pub const JA: u16 = 0x05;
/// `jeq #k`.
pub const JEQ_K: u16 = 0x15;
/// `jgt #k`.
pub const JGT_K: u16 = 0x25;
/// `jge #k`.
pub const JGE_K: u16 = 0x35;
/// `jset #k`.
pub const JSET_K: u16 = 0x45;
/// `and #k`.
pub const AND_K: u16 = 0x54;
/// `ret #k`.
pub const RET_K: u16 = 0x06;
/// `ret a`.
pub const RET_A: u16 = 0x16;
/// `tax`.
pub const TAX: u16 = 0x07;
/// `txa`.
pub const TXA: u16 = 0x87;

impl Insn {
    /// A load, store, return or arithmetic instruction.
    pub const fn stmt(code: u16, k: u32) -> Insn {
        Insn {
            code,
            jt: 0,
            jf: 0,
            k,
        }
    }

    /// A conditional jump.
    pub const fn jump(code: u16, k: u32, jt: u8, jf: u8) -> Insn {
        Insn { code, jt, jf, k }
    }

    /// Whether this ends the program.
    pub const fn is_ret(&self) -> bool {
        self.code & 0x07 == 0x06
    }
}

/// Why a program cannot be run (the kernel's `bpf_check_classic` would refuse it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Invalid {
    /// No instruction, or more than `BPF_MAXINSNS`.
    #[error("{0} instructions; the kernel takes 1 to 4096")]
    Length(usize),
    /// A jump lands outside the program.
    #[error("instruction {0} jumps past the end")]
    Jump(usize),
    /// An opcode the kernel does not know, or a scratch word out of range.
    #[error("instruction {0} has an unknown opcode or operand")]
    Opcode(usize),
    /// The last instruction does not return.
    #[error("the program does not end with a return")]
    NoReturn,
}

/// Checks what the kernel checks before it runs a program: length, opcodes, jump targets, the
/// final return.
pub fn validate(prog: &[Insn]) -> Result<(), Invalid> {
    if prog.is_empty() || prog.len() > BPF_MAXINSNS {
        return Err(Invalid::Length(prog.len()));
    }
    for (pc, i) in prog.iter().enumerate() {
        let left = prog.len() - pc - 1;
        match i.code & 0x07 {
            0x05 if i.code == JA && i.k as usize >= left => return Err(Invalid::Jump(pc)),
            0x05 if i.code == JA => {}
            0x05 if usize::from(i.jt.max(i.jf)) >= left || !known_jump(i.code) => {
                return Err(Invalid::Jump(pc));
            }
            0x05 => {}
            _ if !known_stmt(i.code) => return Err(Invalid::Opcode(pc)),
            _ if matches!(i.code, LD_MEM | LDX_MEM | ST | STX) && i.k as usize >= BPF_MEMWORDS => {
                return Err(Invalid::Opcode(pc));
            }
            _ => {}
        }
    }
    if !prog[prog.len() - 1].is_ret() {
        return Err(Invalid::NoReturn);
    }
    Ok(())
}

fn known_jump(code: u16) -> bool {
    matches!(code, 0x15 | 0x1d | 0x25 | 0x2d | 0x35 | 0x3d | 0x45 | 0x4d)
}

fn known_stmt(code: u16) -> bool {
    matches!(
        code,
        LD_W_ABS
            | LD_H_ABS
            | LD_B_ABS
            | LD_W_IND
            | LD_H_IND
            | LD_B_IND
            | LD_IMM
            | LD_LEN
            | LD_MEM
            | LDX_IMM
            | LDX_LEN
            | LDX_MEM
            | LDX_MSH
            | ST
            | STX
            | RET_K
            | RET_A
            | TAX
            | TXA
    ) || (code < 0x100 && code & 0x07 == 0x04 && code & 0xf0 <= 0xa0 && code != 0x8c)
}

/// Runs a valid program (see [`validate`]) over `pkt`, the packet's captured bytes, whose
/// length on the wire was `wire_len`. Returns the program's verdict: bytes to keep, 0 = drop.
///
/// Ancillary loads (`SKF_AD_*`, offsets from 0xfffff000) read socket-buffer metadata that a
/// captured packet no longer has: they end the program with 0 here.
pub fn run(prog: &[Insn], pkt: &[u8], wire_len: u32) -> u32 {
    let (mut a, mut x) = (0u32, 0u32);
    let mut mem = [0u32; BPF_MEMWORDS];
    let load = |off: u32, n: usize| -> Option<u32> {
        let off = usize::try_from(off).ok()?;
        let bytes = pkt.get(off..off.checked_add(n)?)?;
        Some(bytes.iter().fold(0u32, |acc, &b| acc << 8 | u32::from(b)))
    };
    let mut pc = 0usize;
    while let Some(&i) = prog.get(pc) {
        pc += 1;
        let k = i.k;
        let src = if i.code & 0x08 != 0 { x } else { k };
        match i.code {
            LD_W_ABS | LD_H_ABS | LD_B_ABS | LD_W_IND | LD_H_IND | LD_B_IND => {
                let n = match i.code & 0x18 {
                    0x00 => 4,
                    0x08 => 2,
                    _ => 1,
                };
                let off = if i.code & 0xe0 == 0x40 {
                    x.wrapping_add(k)
                } else {
                    k
                };
                match load(off, n) {
                    Some(v) => a = v,
                    None => return 0,
                }
            }
            LD_IMM => a = k,
            LD_LEN => a = wire_len,
            LD_MEM => a = mem[k as usize % BPF_MEMWORDS],
            LDX_IMM => x = k,
            LDX_LEN => x = wire_len,
            LDX_MEM => x = mem[k as usize % BPF_MEMWORDS],
            LDX_MSH => match load(k, 1) {
                Some(v) => x = (v & 0xf) * 4,
                None => return 0,
            },
            ST => mem[k as usize % BPF_MEMWORDS] = a,
            STX => mem[k as usize % BPF_MEMWORDS] = x,
            RET_K => return k,
            RET_A => return a,
            TAX => x = a,
            TXA => a = x,
            JA => pc += k as usize,
            c if c & 0x07 == 0x05 => {
                let taken = match c & 0xf0 {
                    0x10 => a == src,
                    0x20 => a > src,
                    0x30 => a >= src,
                    0x40 => a & src != 0,
                    _ => return 0,
                };
                pc += usize::from(if taken { i.jt } else { i.jf });
            }
            c if c & 0x07 == 0x04 => {
                a = match c & 0xf0 {
                    0x00 => a.wrapping_add(src),
                    0x10 => a.wrapping_sub(src),
                    0x20 => a.wrapping_mul(src),
                    0x30 if src == 0 => return 0,
                    0x30 => a / src,
                    0x40 => a | src,
                    0x50 => a & src,
                    0x60 => a.checked_shl(src).unwrap_or(0),
                    0x70 => a.checked_shr(src).unwrap_or(0),
                    0x80 => a.wrapping_neg(),
                    0x90 if src == 0 => return 0,
                    0x90 => a % src,
                    0xa0 => a ^ src,
                    _ => return 0,
                }
            }
            _ => return 0,
        }
    }
    0
}

/// One program out of two: a packet passes if `first` accepts it and then `second` does, and
/// `second`'s verdict is the result. `first`'s accepting returns become jumps to `second`, so
/// no jump inside either program moves.
pub fn and_then(first: &[Insn], second: &[Insn]) -> Vec<Insn> {
    let mut prog = Vec::with_capacity(first.len() + second.len());
    for (pc, i) in first.iter().enumerate() {
        let accepts = match i.code {
            RET_K => i.k != 0,
            RET_A => true,
            _ => false,
        };
        prog.push(if accepts {
            Insn::stmt(JA, (first.len() - pc - 1) as u32)
        } else {
            *i
        });
    }
    prog.extend_from_slice(second);
    prog
}

#[cfg(test)]
mod tests {
    use super::*;

    fn udp_frame(dport: u16) -> Vec<u8> {
        let mut f = vec![0xff; 12];
        f.extend_from_slice(&[0x08, 0x00, 0x45, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0, 0]);
        f.extend_from_slice(&[10, 0, 0, 1, 10, 0, 0, 2]);
        f.extend_from_slice(&1234u16.to_be_bytes());
        f.extend_from_slice(&dport.to_be_bytes());
        f.extend_from_slice(&[0, 8, 0, 0]);
        f
    }

    /// `udp dst port P` as tcpdump -d prints it for IPv4 only.
    fn udp_dport(p: u32) -> Vec<Insn> {
        vec![
            Insn::stmt(LD_H_ABS, 12),
            Insn::jump(JEQ_K, 0x800, 0, 8),
            Insn::stmt(LD_B_ABS, 23),
            Insn::jump(JEQ_K, 17, 0, 6),
            Insn::stmt(LD_H_ABS, 20),
            Insn::jump(JSET_K, 0x1fff, 4, 0),
            Insn::stmt(LDX_MSH, 14),
            Insn::stmt(LD_H_IND, 16),
            Insn::jump(JEQ_K, p, 0, 1),
            Insn::stmt(RET_K, 262_144),
            Insn::stmt(RET_K, 0),
        ]
    }

    #[test]
    fn runs_a_tcpdump_program() {
        let prog = udp_dport(53);
        validate(&prog).unwrap();
        assert_eq!(run(&prog, &udp_frame(53), 42), 262_144);
        assert_eq!(run(&prog, &udp_frame(54), 42), 0);
        // Cut before the port: the load fails and the packet is dropped.
        assert_eq!(run(&prog, &udp_frame(53)[..36], 42), 0);
    }

    #[test]
    fn and_then_needs_both() {
        let both = and_then(
            &udp_dport(53),
            &[Insn::stmt(LD_LEN, 0), Insn::stmt(RET_A, 0)],
        );
        validate(&both).unwrap();
        assert_eq!(run(&both, &udp_frame(53), 42), 42);
        assert_eq!(run(&both, &udp_frame(80), 42), 0);
        let never = and_then(&udp_dport(53), &[Insn::stmt(RET_K, 0)]);
        assert_eq!(run(&never, &udp_frame(53), 42), 0);
    }

    #[test]
    fn arithmetic_memory_and_faults() {
        let prog = [
            Insn::stmt(LD_IMM, 7),
            Insn::stmt(ST, 3),
            Insn::stmt(LDX_IMM, 2),
            Insn::stmt(0x2c, 0), // mul x
            Insn::stmt(0x04, 1), // add #1
            Insn::stmt(LDX_MEM, 3),
            Insn::stmt(0x1c, 0), // sub x
            Insn::stmt(RET_A, 0),
        ];
        validate(&prog).unwrap();
        assert_eq!(run(&prog, &[], 0), 8);
        let div0 = [
            Insn::stmt(LD_IMM, 7),
            Insn::stmt(0x3c, 0),
            Insn::stmt(RET_K, 1),
        ];
        assert_eq!(run(&div0, &[], 0), 0);
    }

    #[test]
    fn validate_refuses_what_the_kernel_refuses() {
        assert_eq!(validate(&[]), Err(Invalid::Length(0)));
        assert_eq!(
            validate(&[Insn::jump(JEQ_K, 1, 1, 0), Insn::stmt(RET_K, 0)]),
            Err(Invalid::Jump(0))
        );
        assert_eq!(validate(&[Insn::stmt(LD_IMM, 0)]), Err(Invalid::NoReturn));
        assert_eq!(
            validate(&[Insn::stmt(0xff, 0), Insn::stmt(RET_K, 0)]),
            Err(Invalid::Opcode(0))
        );
        assert_eq!(
            validate(&[Insn::stmt(ST, 16), Insn::stmt(RET_K, 0)]),
            Err(Invalid::Opcode(0))
        );
        assert_eq!(
            validate(&vec![Insn::stmt(RET_K, 0); BPF_MAXINSNS + 1]),
            Err(Invalid::Length(BPF_MAXINSNS + 1))
        );
    }
}
