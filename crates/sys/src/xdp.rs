//! XDP: the small eBPF program that hands a queue's frames to its AF_XDP socket, written here
//! instruction by instruction (no compiler at build or run time), its maps, and its
//! attachment to an interface through a BPF link, which the kernel detaches when the link's
//! last descriptor closes (also when the process is killed).
//!
//! The capture program, per frame: counts it for its receive queue in a per-CPU array
//! ([`QueueCounters`]), stamps `bpf_ktime_get_ns()` into 8 bytes of metadata before the frame,
//! and redirects it to the queue's socket in the `XSKMAP`; without a socket the frame goes on
//! to the stack (`XDP_PASS`) and is counted as such. The copy program lets every frame go on
//! and copies its first bytes, behind their length and arrival time, into a BPF ring buffer.
#![allow(unsafe_code)]

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use crate::{SysError, syscall};

/// One eBPF instruction (`struct bpf_insn`): opcode, registers (dst low nibble, src high), a
/// 16-bit offset and a 32-bit immediate.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Insn {
    code: u8,
    regs: u8,
    off: i16,
    imm: i32,
}

/// The eBPF opcodes and operands this crate emits (`linux/bpf.h`, `linux/bpf_common.h`).
mod op {
    pub const ALU64_MOV_K: u8 = 0xb7;
    pub const ALU64_MOV_X: u8 = 0xbf;
    pub const ALU64_ADD_K: u8 = 0x07;
    pub const LDX_W: u8 = 0x61;
    pub const LDX_DW: u8 = 0x79;
    pub const STX_W: u8 = 0x63;
    pub const STX_DW: u8 = 0x7b;
    pub const ST_W: u8 = 0x62;
    pub const LD_IMM64: u8 = 0x18;
    pub const JA: u8 = 0x05;
    pub const JEQ_K: u8 = 0x15;
    pub const JNE_K: u8 = 0x55;
    pub const JLT_K: u8 = 0xa5;
    pub const JLE_K: u8 = 0xb5;
    pub const JGT_X: u8 = 0x2d;
    pub const CALL: u8 = 0x85;
    pub const EXIT: u8 = 0x95;
    /// `src_reg` of an `LD_IMM64` whose immediate is a map's descriptor.
    pub const PSEUDO_MAP_FD: u8 = 1;

    pub const FN_MAP_LOOKUP_ELEM: i32 = 1;
    pub const FN_KTIME_GET_NS: i32 = 5;
    pub const FN_REDIRECT_MAP: i32 = 51;
    pub const FN_XDP_ADJUST_META: i32 = 54;
    pub const FN_RINGBUF_RESERVE: i32 = 131;
    pub const FN_RINGBUF_SUBMIT: i32 = 132;
    pub const FN_XDP_GET_BUFF_LEN: i32 = 188;
    pub const FN_XDP_LOAD_BYTES: i32 = 189;

    /// `struct xdp_md` field offsets.
    pub const MD_DATA: i16 = 0;
    pub const MD_DATA_META: i16 = 8;
    pub const MD_RX_QUEUE_INDEX: i16 = 16;
}

/// XDP verdicts (`enum xdp_action`).
const XDP_PASS: i32 = 2;
const XDP_REDIRECT: i32 = 4;

/// Registers.
const R0: u8 = 0;
const R1: u8 = 1;
const R2: u8 = 2;
const R3: u8 = 3;
const R4: u8 = 4;
const R6: u8 = 6;
const R7: u8 = 7;
const R8: u8 = 8;
const R9: u8 = 9;
const R10: u8 = 10;

/// A jump target in an [`Asm`] program.
#[derive(Debug, Clone, Copy)]
struct Label(usize);

/// A forward-jumping eBPF assembler: labels are bound once, jumps to them patched at the end.
#[derive(Debug, Default)]
struct Asm {
    insns: Vec<Insn>,
    labels: Vec<Option<usize>>,
    fixups: Vec<(usize, Label)>,
}

impl Asm {
    fn emit(&mut self, code: u8, dst: u8, src: u8, off: i16, imm: i32) {
        self.insns.push(Insn {
            code,
            regs: dst | (src << 4),
            off,
            imm,
        });
    }

    fn label(&mut self) -> Label {
        self.labels.push(None);
        Label(self.labels.len() - 1)
    }

    fn bind(&mut self, l: Label) {
        self.labels[l.0] = Some(self.insns.len());
    }

    fn jump(&mut self, code: u8, dst: u8, src: u8, imm: i32, to: Label) {
        self.fixups.push((self.insns.len(), to));
        self.emit(code, dst, src, 0, imm);
    }

    fn mov_k(&mut self, dst: u8, imm: i32) {
        self.emit(op::ALU64_MOV_K, dst, 0, 0, imm);
    }

    fn mov_x(&mut self, dst: u8, src: u8) {
        self.emit(op::ALU64_MOV_X, dst, src, 0, 0);
    }

    fn add_k(&mut self, dst: u8, imm: i32) {
        self.emit(op::ALU64_ADD_K, dst, 0, 0, imm);
    }

    fn ld_map(&mut self, dst: u8, map: &Map) {
        self.emit(op::LD_IMM64, dst, op::PSEUDO_MAP_FD, 0, map.fd.as_raw_fd());
        self.emit(0, 0, 0, 0, 0);
    }

    fn call(&mut self, helper: i32) {
        self.emit(op::CALL, 0, 0, 0, helper);
    }

    /// `*(u64 *)(reg + off) += 1`: a per-CPU counter needs no atomic.
    fn count(&mut self, reg: u8, off: i16) {
        self.emit(op::LDX_DW, R1, reg, off, 0);
        self.add_k(R1, 1);
        self.emit(op::STX_DW, reg, R1, off, 0);
    }

    fn exit_with(&mut self, verdict: i32) {
        self.mov_k(R0, verdict);
        self.emit(op::EXIT, 0, 0, 0, 0);
    }

    fn finish(mut self) -> Vec<Insn> {
        for (at, l) in self.fixups {
            let to = self.labels[l.0].expect("every label is bound");
            self.insns[at].off = (to as i64 - at as i64 - 1) as i16;
        }
        self.insns
    }
}

/// What the capture program counts for one receive queue (one per-CPU array entry; the
/// entry after the last queue counts frames from queues beyond it).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct QueueCounters {
    /// Frames the program ran on.
    pub seen: u64,
    /// Frames handed over: to the queue's socket (`bpf_redirect_map` said `XDP_REDIRECT`), or
    /// copied to the ring buffer.
    pub redirected: u64,
    /// Frames with no socket to go to: passed to the stack.
    pub no_socket: u64,
    /// Frames not copied because the ring buffer was full.
    pub ring_full: u64,
}

/// Byte offsets of the counters in an entry.
const SEEN: i16 = 0;
const REDIRECTED: i16 = 8;
const NO_SOCKET: i16 = 16;
const RING_FULL: i16 = 24;
const COUNTERS_SIZE: u32 = 32;

/// Bytes before a copied frame's bytes in a ring buffer record: the arrival time
/// (`bpf_ktime_get_ns()`, u64), the frame's length and the bytes copied (u32 each).
pub const COPY_HEADER: usize = 16;

/// The size of a ring buffer record for frames cut to `snaplen`.
pub fn copy_record(snaplen: u32) -> u32 {
    COPY_HEADER as u32 + snaplen.next_multiple_of(8)
}

/// The program that lets every frame go on to the stack and copies its first `snaplen` bytes,
/// behind a [`COPY_HEADER`], to the ring buffer `ring`, counting into entry 0 of `counters`.
pub fn copy_program(counters: &Map, ring: &Map, snaplen: u32) -> Vec<Insn> {
    let mut a = Asm::default();
    let (pass, full, submit, cut) = (a.label(), a.label(), a.label(), a.label());
    let snap = snaplen.next_multiple_of(8) as i32;
    a.mov_x(R6, R1);
    a.emit(op::ST_W, R10, 0, -4, 0);
    a.mov_x(R2, R10);
    a.add_k(R2, -4);
    a.ld_map(R1, counters);
    a.call(op::FN_MAP_LOOKUP_ELEM);
    a.jump(op::JEQ_K, R0, 0, 0, pass);
    a.mov_x(R8, R0);
    a.count(R8, SEEN);
    // r9 = the frame's length, r7 = the bytes to copy.
    a.mov_x(R1, R6);
    a.call(op::FN_XDP_GET_BUFF_LEN);
    a.mov_x(R9, R0);
    a.mov_x(R7, R0);
    a.jump(op::JLE_K, R7, 0, snaplen as i32, cut);
    a.mov_k(R7, snaplen as i32);
    a.bind(cut);
    a.ld_map(R1, ring);
    a.mov_k(R2, COPY_HEADER as i32 + snap);
    a.mov_k(R3, 0);
    a.call(op::FN_RINGBUF_RESERVE);
    a.jump(op::JEQ_K, R0, 0, 0, full);
    a.emit(op::STX_W, R0, R9, 8, 0);
    a.emit(op::STX_W, R0, R7, 12, 0);
    a.mov_x(R9, R0);
    a.call(op::FN_KTIME_GET_NS);
    a.emit(op::STX_DW, R9, R0, 0, 0);
    a.jump(op::JLT_K, R7, 0, 1, submit);
    a.mov_x(R1, R6);
    a.mov_k(R2, 0);
    a.mov_x(R3, R9);
    a.add_k(R3, COPY_HEADER as i32);
    a.mov_x(R4, R7);
    a.call(op::FN_XDP_LOAD_BYTES);
    a.bind(submit);
    a.mov_x(R1, R9);
    a.mov_k(R2, 0);
    a.call(op::FN_RINGBUF_SUBMIT);
    a.count(R8, REDIRECTED);
    a.jump(op::JA, 0, 0, 0, pass);
    a.bind(full);
    a.count(R8, RING_FULL);
    a.bind(pass);
    a.exit_with(XDP_PASS);
    a.finish()
}

/// The capture program for an interface with `queues` receive queues, counting into
/// `counters` ([`Map::queue_counters`], `queues + 1` entries) and redirecting into `sockets`
/// (an [`Map::xsk_map`]).
pub fn capture_program(counters: &Map, sockets: &Map, queues: u32) -> Vec<Insn> {
    let mut a = Asm::default();
    let (pass, redirect, failed) = (a.label(), a.label(), a.label());
    let known_queue = a.label();
    a.mov_x(R6, R1);
    // r7 = the receive queue, or `queues` for one beyond the last.
    a.emit(op::LDX_W, R7, R6, op::MD_RX_QUEUE_INDEX, 0);
    a.jump(op::JLT_K, R7, 0, queues as i32, known_queue);
    a.mov_k(R7, queues as i32);
    a.bind(known_queue);
    // r8 = &counters[r7]
    a.emit(op::STX_W, R10, R7, -4, 0);
    a.mov_x(R2, R10);
    a.add_k(R2, -4);
    a.ld_map(R1, counters);
    a.call(op::FN_MAP_LOOKUP_ELEM);
    a.jump(op::JEQ_K, R0, 0, 0, pass);
    a.mov_x(R8, R0);
    a.count(R8, SEEN);
    // The arrival time, in 8 bytes of metadata before the frame (skipped without room).
    a.call(op::FN_KTIME_GET_NS);
    a.mov_x(R9, R0);
    a.mov_x(R1, R6);
    a.mov_k(R2, -8);
    a.call(op::FN_XDP_ADJUST_META);
    a.jump(op::JNE_K, R0, 0, 0, redirect);
    a.emit(op::LDX_W, R2, R6, op::MD_DATA_META, 0);
    a.emit(op::LDX_W, R3, R6, op::MD_DATA, 0);
    a.mov_x(R4, R2);
    a.add_k(R4, 8);
    a.jump(op::JGT_X, R4, R3, 0, redirect);
    a.emit(op::STX_DW, R2, R9, 0, 0);
    a.bind(redirect);
    a.ld_map(R1, sockets);
    a.mov_x(R2, R7);
    a.mov_k(R3, XDP_PASS);
    a.call(op::FN_REDIRECT_MAP);
    a.jump(op::JNE_K, R0, 0, XDP_REDIRECT, failed);
    a.count(R8, REDIRECTED);
    a.exit_with(XDP_REDIRECT);
    a.bind(failed);
    a.count(R8, NO_SOCKET);
    a.bind(pass);
    a.exit_with(XDP_PASS);
    a.finish()
}

/// The program that takes nothing: every frame goes on to the stack, uncounted (a capture's
/// intake, closed).
pub fn pass_program() -> Vec<Insn> {
    let mut a = Asm::default();
    a.exit_with(XDP_PASS);
    a.finish()
}

const BPF_MAP_CREATE: i32 = 0;
const BPF_MAP_LOOKUP_ELEM: i32 = 1;
const BPF_MAP_UPDATE_ELEM: i32 = 2;
const BPF_PROG_LOAD: i32 = 5;
const BPF_PROG_GET_FD_BY_ID: i32 = 13;
const BPF_OBJ_GET_INFO_BY_FD: i32 = 15;
const BPF_LINK_CREATE: i32 = 28;
const BPF_LINK_UPDATE: i32 = 29;
const BPF_LINK_DETACH: i32 = 34;

const BPF_MAP_TYPE_PERCPU_ARRAY: u32 = 6;
const BPF_MAP_TYPE_XSKMAP: u32 = 17;
const BPF_MAP_TYPE_RINGBUF: u32 = 27;
const BPF_PROG_TYPE_XDP: u32 = 6;
const BPF_XDP: u32 = 37;
const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;

/// `union bpf_attr` for `BPF_MAP_CREATE`.
#[repr(C)]
#[derive(Default)]
struct MapCreateAttr {
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    map_flags: u32,
    inner_map_fd: u32,
    numa_node: u32,
    map_name: [u8; 16],
}

/// `union bpf_attr` for `BPF_MAP_*_ELEM`.
#[repr(C)]
struct MapElemAttr {
    map_fd: u32,
    _pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

/// `union bpf_attr` for `BPF_PROG_LOAD`.
#[repr(C)]
#[derive(Default)]
struct ProgLoadAttr {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
}

/// `union bpf_attr` for `BPF_LINK_CREATE`.
#[repr(C)]
struct LinkCreateAttr {
    prog_fd: u32,
    target_ifindex: u32,
    attach_type: u32,
    flags: u32,
}

/// `union bpf_attr` for `BPF_LINK_UPDATE` and `BPF_LINK_DETACH`.
#[repr(C)]
struct LinkUpdateAttr {
    link_fd: u32,
    new_prog_fd: u32,
    flags: u32,
    old_prog_fd: u32,
}

fn name16(name: &str) -> [u8; 16] {
    let mut out = [0u8; 16];
    for (d, s) in out.iter_mut().take(15).zip(name.bytes()) {
        *d = s;
    }
    out
}

/// A descriptor the kernel just returned from `bpf()`.
fn owned(fd: i32) -> OwnedFd {
    // SAFETY: `fd` is a fresh descriptor from a successful bpf() call, owned by nobody else.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// A BPF map.
#[derive(Debug)]
pub struct Map {
    fd: OwnedFd,
    value_size: u32,
    entries: u32,
    ifname: String,
}

impl Map {
    fn create(
        ifname: &str,
        map_type: u32,
        name: &str,
        value_size: u32,
        entries: u32,
    ) -> Result<Map, SysError> {
        const CALL: &str = "bpf(BPF_MAP_CREATE)";
        let mut attr = MapCreateAttr {
            map_type,
            key_size: if map_type == BPF_MAP_TYPE_RINGBUF {
                0
            } else {
                4
            },
            value_size,
            max_entries: entries,
            map_name: name16(name),
            ..MapCreateAttr::default()
        };
        // SAFETY: `attr` is the BPF_MAP_CREATE member, with no pointers.
        let fd = unsafe { syscall::bpf(BPF_MAP_CREATE, &mut attr, CALL) }.map_err(|e| {
            SysError::call_with(CALL, ifname, format!("{name}: {entries} entries"), e)
        })?;
        Ok(Map {
            fd: owned(fd),
            value_size,
            entries,
            ifname: ifname.to_owned(),
        })
    }

    /// A per-CPU array of [`QueueCounters`], one entry per receive queue and one more.
    pub fn queue_counters(ifname: &str, queues: u32) -> Result<Map, SysError> {
        Map::create(
            ifname,
            BPF_MAP_TYPE_PERCPU_ARRAY,
            "tapflow_counts",
            COUNTERS_SIZE,
            queues + 1,
        )
    }

    /// An `XSKMAP` with one slot per receive queue.
    #[doc(alias = "BPF_MAP_TYPE_XSKMAP")]
    pub fn xsk_map(ifname: &str, queues: u32) -> Result<Map, SysError> {
        Map::create(ifname, BPF_MAP_TYPE_XSKMAP, "tapflow_xsks", 4, queues)
    }

    /// A ring buffer of `bytes` (a power-of-two number of pages) shared by every CPU.
    #[doc(alias = "BPF_MAP_TYPE_RINGBUF")]
    pub fn ring_buffer(ifname: &str, bytes: u32) -> Result<Map, SysError> {
        Map::create(ifname, BPF_MAP_TYPE_RINGBUF, "tapflow_copies", 0, bytes)
    }

    /// The map's descriptor.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Puts the AF_XDP socket `xsk` in slot `queue`.
    pub fn set_socket(&self, queue: u32, xsk: BorrowedFd<'_>) -> Result<(), SysError> {
        const CALL: &str = "bpf(BPF_MAP_UPDATE_ELEM)";
        let key = queue;
        let value = xsk.as_raw_fd() as u32;
        let mut attr = MapElemAttr {
            map_fd: self.fd.as_raw_fd() as u32,
            _pad: 0,
            key: std::ptr::from_ref(&key) as u64,
            value: std::ptr::from_ref(&value) as u64,
            flags: 0,
        };
        // SAFETY: the BPF_MAP_UPDATE_ELEM member; key and value point at live u32s (the map's
        // key and value sizes), which the kernel only reads.
        unsafe { syscall::bpf(BPF_MAP_UPDATE_ELEM, &mut attr, CALL) }
            .map(drop)
            .map_err(|e| SysError::call_with(CALL, &self.ifname, format!("XSKMAP slot {queue}"), e))
    }

    /// The counters of entry `queue`, summed over every possible CPU.
    pub fn read_counters(&self, queue: u32) -> Result<QueueCounters, SysError> {
        const CALL: &str = "bpf(BPF_MAP_LOOKUP_ELEM)";
        let cpus = possible_cpus();
        let words = self.value_size.div_ceil(8) as usize;
        let mut values = vec![0u64; words * cpus];
        let key = queue;
        let mut attr = MapElemAttr {
            map_fd: self.fd.as_raw_fd() as u32,
            _pad: 0,
            key: std::ptr::from_ref(&key) as u64,
            value: values.as_mut_ptr() as u64,
            flags: 0,
        };
        if queue >= self.entries {
            return Err(SysError::invalid(
                CALL,
                &self.ifname,
                format!("entry {queue}"),
            ));
        }
        // SAFETY: the BPF_MAP_LOOKUP_ELEM member; `key` is a live u32 and `values` holds the
        // value rounded up to 8 bytes for each possible CPU, all a per-CPU lookup writes.
        unsafe { syscall::bpf(BPF_MAP_LOOKUP_ELEM, &mut attr, CALL) }
            .map_err(|e| SysError::call_with(CALL, &self.ifname, format!("entry {queue}"), e))?;
        let mut c = QueueCounters::default();
        for cpu in values.chunks_exact(words) {
            c.seen += cpu[SEEN as usize / 8];
            c.redirected += cpu[REDIRECTED as usize / 8];
            c.no_socket += cpu[NO_SOCKET as usize / 8];
            c.ring_full += cpu[RING_FULL as usize / 8];
        }
        Ok(c)
    }
}

/// The number of possible CPUs (`/sys/devices/system/cpu/possible`, e.g. `0-3`): the width of
/// a per-CPU map's value.
fn possible_cpus() -> usize {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/possible").unwrap_or_default();
    let n = text
        .trim()
        .split(',')
        .filter_map(|r| {
            let (a, b) = r.split_once('-').unwrap_or((r, r));
            Some(b.parse::<usize>().ok()? - a.parse::<usize>().ok()? + 1)
        })
        .sum::<usize>();
    n.max(1)
}

/// A loaded XDP program.
#[derive(Debug)]
pub struct Program {
    fd: OwnedFd,
}

impl Program {
    /// Loads `insns` as an XDP program; a refusal carries the verifier's last lines.
    pub fn load(ifname: &str, name: &str, insns: &[Insn]) -> Result<Program, SysError> {
        const CALL: &str = "bpf(BPF_PROG_LOAD)";
        let license = c"Dual MIT/GPL";
        let mut attr = ProgLoadAttr {
            prog_type: BPF_PROG_TYPE_XDP,
            insn_cnt: insns.len() as u32,
            insns: insns.as_ptr() as u64,
            license: license.as_ptr() as u64,
            prog_name: name16(name),
            ..ProgLoadAttr::default()
        };
        // SAFETY: the BPF_PROG_LOAD member; `insns` and `license` outlive the call, no log.
        match unsafe { syscall::bpf(BPF_PROG_LOAD, &mut attr, CALL) } {
            Ok(fd) => Ok(Program { fd: owned(fd) }),
            Err(e) => {
                // Again with the verifier's log, to say why.
                let mut log = vec![0u8; 1 << 16];
                attr.log_level = 1;
                attr.log_size = log.len() as u32;
                attr.log_buf = log.as_mut_ptr() as u64;
                // SAFETY: as above, and `log` is writable for `log_size` bytes.
                let _ = unsafe { syscall::bpf(BPF_PROG_LOAD, &mut attr, CALL) };
                let text = String::from_utf8_lossy(&log);
                let text = text.trim_end_matches('\0');
                let tail: Vec<&str> = text.lines().rev().take(3).collect();
                let detail = format!(
                    "the verifier refused the {}-instruction program {name}: {}",
                    insns.len(),
                    tail.into_iter().rev().collect::<Vec<_>>().join(" / ")
                );
                Err(SysError::call_with(CALL, ifname, detail, e))
            }
        }
    }
}

/// `union bpf_attr` for `BPF_PROG_GET_FD_BY_ID`.
#[repr(C)]
struct GetFdByIdAttr {
    id: u32,
    next_id: u32,
    open_flags: u32,
}

/// `union bpf_attr` for `BPF_OBJ_GET_INFO_BY_FD`.
#[repr(C)]
struct InfoAttr {
    fd: u32,
    info_len: u32,
    info: u64,
}

/// The name of loaded program `id` (`bpf_prog_info.name`, 15 bytes at most), as `ip link`
/// and `bpftool` print it. Needs `CAP_SYS_ADMIN`.
pub fn program_name(ifname: &str, id: u32) -> Result<String, SysError> {
    const GET: &str = "bpf(BPF_PROG_GET_FD_BY_ID)";
    const INFO: &str = "bpf(BPF_OBJ_GET_INFO_BY_FD)";
    let mut attr = GetFdByIdAttr {
        id,
        next_id: 0,
        open_flags: 0,
    };
    // SAFETY: the BPF_PROG_GET_FD_BY_ID member, with no pointers.
    let fd = unsafe { syscall::bpf(BPF_PROG_GET_FD_BY_ID, &mut attr, GET) }
        .map_err(|e| SysError::call_with(GET, ifname, format!("program {id}"), e))?;
    let fd = owned(fd);
    // `struct bpf_prog_info` up to its name, which ends at byte 80.
    let mut info = [0u8; 80];
    let mut attr = InfoAttr {
        fd: fd.as_raw_fd() as u32,
        info_len: info.len() as u32,
        info: info.as_mut_ptr() as u64,
    };
    // SAFETY: the BPF_OBJ_GET_INFO_BY_FD member; `info` is writable for `info_len` bytes,
    // all the kernel writes.
    unsafe { syscall::bpf(BPF_OBJ_GET_INFO_BY_FD, &mut attr, INFO) }
        .map_err(|e| SysError::call_with(INFO, ifname, format!("program {id}"), e))?;
    let name = &info[64..80];
    let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
    Ok(String::from_utf8_lossy(&name[..end]).into_owned())
}

/// How an XDP program runs on an interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XdpMode {
    /// In the driver, before a socket buffer exists (`XDP_FLAGS_DRV_MODE`).
    Native,
    /// After the stack made a socket buffer, for drivers without XDP (`XDP_FLAGS_SKB_MODE`).
    Generic,
}

impl XdpMode {
    /// The mode's name.
    pub fn name(self) -> &'static str {
        match self {
            XdpMode::Native => "native",
            XdpMode::Generic => "generic",
        }
    }
}

/// An XDP program attached to an interface by a BPF link: detached on drop, and by the
/// kernel when the process ends however it ends (the link's only descriptor closes).
#[derive(Debug)]
pub struct XdpLink {
    fd: OwnedFd,
    ifname: String,
    mode: XdpMode,
}

impl XdpLink {
    /// Attaches `prog` to `ifname` in `mode` (`BPF_LINK_CREATE`). Another XDP program on the
    /// interface is a clear error that says how to remove it.
    #[doc(alias = "BPF_LINK_CREATE")]
    pub fn attach(
        prog: &Program,
        ifname: &str,
        ifindex: u32,
        mode: XdpMode,
    ) -> Result<XdpLink, SysError> {
        const CALL: &str = "bpf(BPF_LINK_CREATE)";
        let mut attr = LinkCreateAttr {
            prog_fd: prog.fd.as_raw_fd() as u32,
            target_ifindex: ifindex,
            attach_type: BPF_XDP,
            flags: match mode {
                XdpMode::Native => XDP_FLAGS_DRV_MODE,
                XdpMode::Generic => XDP_FLAGS_SKB_MODE,
            },
        };
        // SAFETY: the BPF_LINK_CREATE member, with no pointers.
        match unsafe { syscall::bpf(BPF_LINK_CREATE, &mut attr, CALL) } {
            Ok(fd) => Ok(XdpLink {
                fd: owned(fd),
                ifname: ifname.to_owned(),
                mode,
            }),
            Err(e) if matches!(e.raw_os_error(), Some(libc::EBUSY | libc::EEXIST)) => {
                Err(SysError::call_with(
                    CALL,
                    ifname,
                    format!(
                        "another XDP program is attached to {ifname}; see it with `ip link show dev \
                     {ifname}` and remove it with `ip link set dev {ifname} xdp off` (or stop \
                     the program that holds it)"
                    ),
                    e,
                ))
            }
            Err(e) => Err(SysError::call_with(
                CALL,
                ifname,
                format!("{} mode", mode.name()),
                e,
            )),
        }
    }

    /// Attaches `prog` in native mode, or in generic mode where the driver has no XDP. Another
    /// program on the interface, or a lack of privilege, is an error at once.
    pub fn attach_best(prog: &Program, ifname: &str, ifindex: u32) -> Result<XdpLink, SysError> {
        match XdpLink::attach(prog, ifname, ifindex, XdpMode::Native) {
            Err(e)
                if !matches!(
                    e.errno(),
                    Some(libc::EBUSY | libc::EEXIST | libc::EPERM | libc::EACCES)
                ) =>
            {
                XdpLink::attach(prog, ifname, ifindex, XdpMode::Generic)
            }
            r => r,
        }
    }

    /// The mode the program runs in.
    pub fn mode(&self) -> XdpMode {
        self.mode
    }

    /// Replaces the program at once (`BPF_LINK_UPDATE`): each frame meets the old or the new.
    #[doc(alias = "BPF_LINK_UPDATE")]
    pub fn update(&self, prog: &Program) -> Result<(), SysError> {
        const CALL: &str = "bpf(BPF_LINK_UPDATE)";
        let mut attr = LinkUpdateAttr {
            link_fd: self.fd.as_raw_fd() as u32,
            new_prog_fd: prog.fd.as_raw_fd() as u32,
            flags: 0,
            old_prog_fd: 0,
        };
        // SAFETY: the BPF_LINK_UPDATE member, with no pointers.
        unsafe { syscall::bpf(BPF_LINK_UPDATE, &mut attr, CALL) }
            .map(drop)
            .map_err(|e| SysError::call(CALL, &self.ifname, e))
    }
}

impl Drop for XdpLink {
    fn drop(&mut self) {
        let mut attr = LinkUpdateAttr {
            link_fd: self.fd.as_fd().as_raw_fd() as u32,
            new_prog_fd: 0,
            flags: 0,
            old_prog_fd: 0,
        };
        // SAFETY: the BPF_LINK_DETACH member (`link_fd` only), with no pointers. A failure
        // leaves the close of the descriptor, just after, to detach.
        let _ = unsafe { syscall::bpf(BPF_LINK_DETACH, &mut attr, "bpf(BPF_LINK_DETACH)") };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jumps_land_on_their_labels() {
        let mut a = Asm::default();
        let l = a.label();
        a.jump(op::JEQ_K, R0, 0, 0, l);
        a.mov_k(R0, 1);
        a.mov_k(R0, 2);
        a.bind(l);
        a.exit_with(0);
        let p = a.finish();
        assert_eq!(p[0].off, 2);
        assert_eq!(p[3].code, op::ALU64_MOV_K);
        assert_eq!(p[4].code, op::EXIT);
    }

    #[test]
    fn instructions_have_the_kernel_layout() {
        assert_eq!(size_of::<Insn>(), 8);
        let i = Insn {
            code: op::STX_W,
            regs: R10 | (R7 << 4),
            off: -4,
            imm: 0,
        };
        // SAFETY: `Insn` is four plain integers, 8 bytes, no padding.
        let bytes: [u8; 8] = unsafe { std::mem::transmute(i) };
        assert_eq!(bytes, [0x63, 0x7a, 0xfc, 0xff, 0, 0, 0, 0]);
        assert_eq!(size_of::<ProgLoadAttr>(), 72);
        assert_eq!(size_of::<MapCreateAttr>(), 44);
    }

    fn fake_map() -> Map {
        Map {
            fd: std::fs::File::open("/dev/null").unwrap().into(),
            value_size: COUNTERS_SIZE,
            entries: 2,
            ifname: "x".into(),
        }
    }

    #[test]
    fn the_programs_end_in_exits_and_jump_inside() {
        let (m, r) = (fake_map(), fake_map());
        for p in [
            capture_program(&m, &r, 4),
            copy_program(&m, &r, 64),
            pass_program(),
        ] {
            assert_eq!(p.last().unwrap().code, op::EXIT);
            for (i, insn) in p.iter().enumerate() {
                if insn.code & 0x07 == 0x05 && insn.code != op::CALL && insn.code != op::EXIT {
                    let to = i as i64 + 1 + i64::from(insn.off);
                    assert!(to > i as i64 && to < p.len() as i64, "jump at {i} to {to}");
                }
            }
        }
        // 43 and 48 instructions: a few dozen, as docs/design.md says.
        assert!(capture_program(&m, &r, 4).len() < 50);
        assert!(copy_program(&m, &r, 64).len() < 50);
    }

    #[test]
    fn possible_cpus_reads_the_range() {
        assert!(possible_cpus() >= 1);
    }
}
