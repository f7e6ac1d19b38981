//! Classic BPF socket filters: compiled from tcpdump syntax by libpcap, or built by hand.
//!
//! The number a filter returns is the snaplen: how many bytes of an accepted packet the kernel
//! copies into the ring. `0` drops the packet before it costs anything.

use crate::SysError;

/// One cBPF instruction, as the kernel takes it (`struct sock_filter`).
#[doc(alias = "sock_filter")]
pub type Instruction = libc::sock_filter;

/// The most instructions the kernel accepts in one program.
pub const BPF_MAXINSNS: usize = 4096;

/// `BPF_RET | BPF_K`: return the constant `k`.
const RET_K: u16 = 0x06;

/// `LINKTYPE_ETHERNET`.
pub const LINKTYPE_ETHERNET: u16 = 1;
/// `LINKTYPE_RAW` (raw IPv4/IPv6).
pub const LINKTYPE_RAW: u16 = 101;

/// Compiles a tcpdump filter expression with libpcap for link type `linktype` (`LINKTYPE_*`)
/// and rewrites every non-zero `ret #k` to `ret #snaplen`, so accepted packets are cut to
/// `snaplen` bytes in the kernel.
#[doc(alias = "pcap_compile")]
pub fn compile(expr: &str, linktype: u16, snaplen: u32) -> Result<Vec<Instruction>, SysError> {
    let filter_err = |message: String| SysError::Filter {
        expr: expr.to_owned(),
        message,
    };
    if snaplen == 0 {
        return Err(filter_err("snaplen 0 would drop every packet".into()));
    }
    let mut prog = pcap_compile(expr, linktype).map_err(filter_err)?;
    for insn in &mut prog {
        if insn.code == RET_K && insn.k != 0 {
            insn.k = snaplen;
        }
    }
    if prog.is_empty() || prog.len() > BPF_MAXINSNS {
        return Err(filter_err(format!(
            "compiles to {} instructions; the kernel takes 1 to {BPF_MAXINSNS}",
            prog.len()
        )));
    }
    Ok(prog)
}

#[cfg(feature = "bpf-expr")]
fn pcap_compile(expr: &str, linktype: u16) -> Result<Vec<Instruction>, String> {
    // pcap_open_dead takes a DLT_ value; they equal LINKTYPE_ values except LINKTYPE_RAW.
    let dlt = if linktype == LINKTYPE_RAW {
        12
    } else {
        i32::from(linktype)
    };
    let dead = pcap::Capture::dead(pcap::Linktype(dlt)).map_err(|e| e.to_string())?;
    let prog = dead.compile(expr, true).map_err(|e| match e {
        pcap::Error::PcapError(text) => text
            .strip_prefix("can't parse filter expression: ")
            .unwrap_or(&text)
            .to_owned(),
        other => other.to_string(),
    })?;
    // pcap's instruction type hides its fields; its Display is "code jt jf k", which is read
    // back here rather than casting memory.
    prog.get_instructions()
        .iter()
        .map(|insn| {
            let text = insn.to_string();
            let mut f = text.split(' ');
            let mut next = || {
                f.next()
                    .ok_or_else(|| format!("unreadable instruction '{text}'"))
            };
            let bad = |_| format!("unreadable instruction '{text}'");
            Ok(Instruction {
                code: next()?.parse().map_err(bad)?,
                jt: next()?.parse().map_err(bad)?,
                jf: next()?.parse().map_err(bad)?,
                k: next()?.parse().map_err(bad)?,
            })
        })
        .collect()
}

#[cfg(not(feature = "bpf-expr"))]
fn pcap_compile(_expr: &str, _linktype: u16) -> Result<Vec<Instruction>, String> {
    Err("tapflow-sys was built without libpcap (feature bpf-expr)".into())
}

/// A program accepting every packet, cut to `snaplen` bytes: `ret #snaplen`.
pub fn accept_all(snaplen: u32) -> Vec<Instruction> {
    vec![Instruction {
        code: RET_K,
        jt: 0,
        jf: 0,
        k: snaplen,
    }]
}

/// A program rejecting every packet: `ret #0`.
pub fn reject_all() -> Vec<Instruction> {
    vec![Instruction {
        code: RET_K,
        jt: 0,
        jf: 0,
        k: 0,
    }]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs a cBPF program the way the kernel does, for the few opcodes libpcap emits here.
    fn run(prog: &[Instruction], pkt: &[u8]) -> u32 {
        let (mut a, mut x, mut pc) = (0u32, 0u32, 0usize);
        let load = |off: usize, n: usize| -> Option<u32> {
            pkt.get(off..off + n)
                .map(|b| b.iter().fold(0u32, |acc, &v| acc << 8 | u32::from(v)))
        };
        loop {
            let i = prog[pc];
            pc += 1;
            let k = i.k as usize;
            match i.code {
                0x28 => {
                    a = match load(k, 2) {
                        Some(v) => v,
                        None => return 0,
                    }
                }
                0x30 => {
                    a = match load(k, 1) {
                        Some(v) => v,
                        None => return 0,
                    }
                }
                0x20 => {
                    a = match load(k, 4) {
                        Some(v) => v,
                        None => return 0,
                    }
                }
                0x48 => {
                    a = match load(x as usize + k, 2) {
                        Some(v) => v,
                        None => return 0,
                    }
                }
                0x50 => {
                    a = match load(x as usize + k, 1) {
                        Some(v) => v,
                        None => return 0,
                    }
                }
                0xb1 => {
                    x = match load(k, 1) {
                        Some(v) => (v & 0xf) * 4,
                        None => return 0,
                    }
                }
                0x15 => pc += usize::from(if a == i.k { i.jt } else { i.jf }),
                0x45 => pc += usize::from(if a & i.k != 0 { i.jt } else { i.jf }),
                0x25 => pc += usize::from(if a > i.k { i.jt } else { i.jf }),
                0x35 => pc += usize::from(if a >= i.k { i.jt } else { i.jf }),
                0x54 => a &= i.k,
                0x06 => return i.k,
                op => panic!("opcode {op:#x} not in this test interpreter"),
            }
        }
    }

    fn udp_frame(dport: u16) -> Vec<u8> {
        let mut f = vec![0xff; 12];
        f.extend_from_slice(&[0x08, 0x00, 0x45, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0, 0]);
        f.extend_from_slice(&[10, 0, 0, 1, 10, 0, 0, 2]);
        f.extend_from_slice(&1234u16.to_be_bytes());
        f.extend_from_slice(&dport.to_be_bytes());
        f.extend_from_slice(&[0, 8, 0, 0]);
        f
    }

    #[test]
    #[cfg(feature = "bpf-expr")]
    fn compile_rewrites_accepting_returns_to_snaplen() {
        let prog = compile("udp port 9", LINKTYPE_ETHERNET, 64).unwrap();
        let rets: Vec<u32> = prog
            .iter()
            .filter(|i| i.code == RET_K)
            .map(|i| i.k)
            .collect();
        assert!(rets.contains(&64) && rets.contains(&0), "{rets:?}");
        assert!(!rets.contains(&65535));
        assert_eq!(run(&prog, &udp_frame(9)), 64);
        assert_eq!(run(&prog, &udp_frame(10)), 0);
    }

    #[test]
    #[cfg(feature = "bpf-expr")]
    fn syntax_errors_quote_the_expression_and_libpcap() {
        let err = compile("tcp prt 80", LINKTYPE_ETHERNET, 64).unwrap_err();
        assert_eq!(err.to_string(), "filter 'tcp prt 80': syntax error");
        assert!(compile("udp", LINKTYPE_ETHERNET, 0).is_err());
    }

    #[test]
    fn hand_built_programs() {
        assert_eq!(run(&accept_all(96), &udp_frame(1)), 96);
        assert_eq!(run(&reject_all(), &udp_frame(1)), 0);
        if cfg!(feature = "bpf-expr") {
            let raw = compile("udp", LINKTYPE_RAW, 32).unwrap();
            assert_eq!(run(&raw, &udp_frame(9)[14..]), 32);
        } else {
            assert!(
                compile("udp", LINKTYPE_RAW, 32)
                    .unwrap_err()
                    .to_string()
                    .contains("bpf-expr")
            );
        }
    }
}
