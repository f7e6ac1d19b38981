//! Classic BPF socket filters: compiled from tcpdump syntax by libpcap (loaded when the first
//! expression is compiled), or built by hand.
//!
//! The number a filter returns is the snaplen: how many bytes of an accepted packet the kernel
//! copies into the ring. `0` drops the packet before it costs anything.
#![allow(unsafe_code)]

use std::ffi::{CStr, CString, c_char, c_int, c_uint, c_void};
use std::sync::{Mutex, OnceLock};

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
        expr: shown(expr),
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
    if prog.is_empty() {
        return Err(filter_err("compiles to no instruction".into()));
    }
    Ok(prog)
}

/// Refuses a program the kernel would not take (more than `BPF_MAXINSNS` instructions). A
/// program run in user space (on a file's packets) has no such limit.
pub fn check_kernel_len(expr: &str, prog: &[Instruction]) -> Result<(), SysError> {
    if prog.len() > BPF_MAXINSNS {
        return Err(SysError::Filter {
            expr: shown(expr),
            message: format!(
                "compiles to {} instructions; the kernel takes 1 to {BPF_MAXINSNS} (a file read \
                 with -r has no such limit)",
                prog.len()
            ),
        });
    }
    Ok(())
}

/// The expression as an error quotes it: whole if short, else its start and its length.
fn shown(expr: &str) -> String {
    const MAX: usize = 80;
    match expr.char_indices().nth(MAX) {
        None => expr.to_owned(),
        Some((at, _)) => format!("{}... ({} characters)", &expr[..at], expr.len()),
    }
}

/// libpcap's compiler, loaded on first use (`dlopen`): only a filter expression needs it, and
/// linking it would load it and the dozen libraries it links at every start of tapflow (0.56 ms
/// of a 1.8 ms `tapflow --version`).
struct Libpcap {
    open_dead: OpenDead,
    compile: Compile,
    geterr: GetErr,
    freecode: FreeCode,
    close: Close,
}

// libpcap's functions as pcap/pcap.h declares them (`pcap_t *` is opaque here).
type OpenDead = unsafe extern "C" fn(c_int, c_int) -> *mut c_void;
type Compile =
    unsafe extern "C" fn(*mut c_void, *mut BpfProgram, *const c_char, c_int, u32) -> c_int;
type GetErr = unsafe extern "C" fn(*mut c_void) -> *const c_char;
type FreeCode = unsafe extern "C" fn(*mut BpfProgram);
type Close = unsafe extern "C" fn(*mut c_void);

/// `struct bpf_program`.
#[repr(C)]
struct BpfProgram {
    bf_len: c_uint,
    bf_insns: *const Instruction,
}

/// `PCAP_NETMASK_UNKNOWN`.
const NETMASK_UNKNOWN: u32 = 0xffff_ffff;

impl Libpcap {
    /// The library, loaded once; an error names what is missing.
    fn get() -> Result<&'static (Libpcap, Mutex<()>), String> {
        static LIB: OnceLock<Result<(Libpcap, Mutex<()>), String>> = OnceLock::new();
        LIB.get_or_init(|| Libpcap::load().map(|l| (l, Mutex::new(()))))
            .as_ref()
            .map_err(Clone::clone)
    }

    fn load() -> Result<Libpcap, String> {
        let names = [c"libpcap.so.0.8", c"libpcap.so.1", c"libpcap.so"];
        // SAFETY: dlopen with a NUL-terminated name; the handle is never closed, so the symbols
        // below stay valid for the life of the process.
        let Some(lib) = names
            .iter()
            .map(|n| unsafe { libc::dlopen(n.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) })
            .find(|h| !h.is_null())
        else {
            return Err("filter expressions need libpcap, which is not installed \
                        (Debian: apt-get install libpcap0.8)"
                .into());
        };
        let sym = |name: &CStr| {
            // SAFETY: dlsym on a live handle with a NUL-terminated name.
            let p = unsafe { libc::dlsym(lib, name.as_ptr()) };
            if p.is_null() {
                Err(format!("libpcap lacks {}", name.to_string_lossy()))
            } else {
                Ok(p)
            }
        };
        // SAFETY: each symbol is libpcap's function of that name, with the C signature declared
        // in pcap/pcap.h that the field's type spells out.
        unsafe {
            Ok(Libpcap {
                open_dead: std::mem::transmute::<*mut c_void, OpenDead>(sym(c"pcap_open_dead")?),
                compile: std::mem::transmute::<*mut c_void, Compile>(sym(c"pcap_compile")?),
                geterr: std::mem::transmute::<*mut c_void, GetErr>(sym(c"pcap_geterr")?),
                freecode: std::mem::transmute::<*mut c_void, FreeCode>(sym(c"pcap_freecode")?),
                close: std::mem::transmute::<*mut c_void, Close>(sym(c"pcap_close")?),
            })
        }
    }
}

fn pcap_compile(expr: &str, linktype: u16) -> Result<Vec<Instruction>, String> {
    let (lib, lock) = Libpcap::get()?;
    let expr_c = CString::new(expr).map_err(|_| "the expression holds a NUL byte".to_string())?;
    // pcap_open_dead takes a DLT_ value; they equal LINKTYPE_ values except LINKTYPE_RAW.
    let dlt = if linktype == LINKTYPE_RAW {
        12
    } else {
        c_int::from(linktype)
    };
    // Older libpcaps compile through global parser state: one compilation at a time.
    let _one = lock
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    // SAFETY: libpcap's documented sequence: a dead handle, compile into a program we own,
    // copy its instructions out, free the program, close the handle. Every pointer passed is
    // live for the call; the program's instructions are read only between a successful
    // compile and freecode.
    unsafe {
        let dead = (lib.open_dead)(dlt, 65535);
        if dead.is_null() {
            return Err(format!("libpcap refused link type {linktype}"));
        }
        let mut prog = BpfProgram {
            bf_len: 0,
            bf_insns: std::ptr::null(),
        };
        let out = if (lib.compile)(dead, &mut prog, expr_c.as_ptr(), 1, NETMASK_UNKNOWN) == 0 {
            let insns = if prog.bf_insns.is_null() {
                Vec::new()
            } else {
                std::slice::from_raw_parts(prog.bf_insns, prog.bf_len as usize).to_vec()
            };
            (lib.freecode)(&mut prog);
            Ok(insns)
        } else {
            let text = CStr::from_ptr((lib.geterr)(dead)).to_string_lossy();
            Err(text
                .strip_prefix("can't parse filter expression: ")
                .unwrap_or(&text)
                .to_owned())
        };
        (lib.close)(dead);
        out
    }
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
    fn syntax_errors_quote_the_expression_and_libpcap() {
        let err = compile("tcp prt 80", LINKTYPE_ETHERNET, 64).unwrap_err();
        assert_eq!(err.to_string(), "filter 'tcp prt 80': syntax error");
        assert!(compile("udp", LINKTYPE_ETHERNET, 0).is_err());
    }

    #[test]
    fn hand_built_programs() {
        assert_eq!(run(&accept_all(96), &udp_frame(1)), 96);
        assert_eq!(run(&reject_all(), &udp_frame(1)), 0);
        let raw = compile("udp", LINKTYPE_RAW, 32).unwrap();
        assert_eq!(run(&raw, &udp_frame(9)[14..]), 32);
    }
}
