//! Helpers shared by the integration tests: running the binary with a time limit, reading its
//! JSON summary, the real-tool oracles (tshark, capinfos, editcap), small independent readers of
//! pcap and pcapng, network namespaces that clean up after themselves, the corpus of real
//! captures when there is one, and traces built with the packet builder.

#![allow(dead_code)]

#[path = "../../../wire/tests/support/corpus.rs"]
mod corpus;
#[path = "../../../wire/tests/support/traffic.rs"]
pub mod traffic;

#[allow(unused_imports)]
pub use corpus::corpus;
pub mod webdriver;

use std::collections::HashSet;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// The binary under test.
pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_tapflow"))
}

/// Start of the built traces: 2023-11-14 22:13:20 UTC.
pub const T0: u64 = 1_700_000_000_000_000_000;

/// Writes `bytes` to `dir/name` and returns the path.
pub fn write_file(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    p
}

/// A nanosecond Ethernet pcap at `dir/name` of `flows` built conversations
/// ([`traffic::conversations`]) of `packets` frames each, `gap_ns` apart from [`T0`] on.
pub fn built_trace(dir: &Path, name: &str, flows: u32, packets: u32, gap_ns: u64) -> PathBuf {
    let p = traffic::conversations(0, flows, packets, T0, gap_ns);
    let bytes = traffic::pcap_file(tapflow_wire::LinkType::Ethernet, true, false, 65535, &p);
    write_file(dir, name, &bytes)
}

/// A `tapflow` command with these arguments.
pub fn tapflow<I, S>(args: I) -> Command
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    let mut c = Command::new(bin());
    c.args(args);
    c
}

/// Fails the test unless the caller is root: the kernel tests must run, never skip.
pub fn require_root() {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(
        euid, 0,
        "this test needs root (network namespaces, AF_PACKET); CI runs as root"
    );
}

/// Text of a command line, for messages.
pub fn show(c: &Command) -> String {
    let mut s = c.get_program().to_string_lossy().into_owned();
    for a in c.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

/// Runs a command to the end with a time limit; kills it and fails the test past the limit.
pub fn run_limited(c: &mut Command, limit: Duration) -> Output {
    let what = show(c);
    let child = c
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
    let mut g = ChildGuard::new(child, &what);
    let c = g.child.as_mut().expect("child");
    let mut out_pipe = c.stdout.take().expect("stdout");
    let mut err_pipe = c.stderr.take().expect("stderr");
    let out_t = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = out_pipe.read_to_end(&mut v);
        v
    });
    let err_t = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = err_pipe.read_to_end(&mut v);
        v
    });
    let status = g.wait_limited(limit);
    g.child = None;
    let stdout = out_t.join().expect("stdout reader");
    let stderr = err_t.join().expect("stderr reader");
    Output {
        status,
        stdout,
        stderr,
    }
}

/// Runs a command that must succeed, returning its stdout.
pub fn run_ok(c: &mut Command) -> String {
    let what = show(c);
    let o = run_limited(c, Duration::from_secs(120));
    assert!(
        o.status.success(),
        "{what} failed ({}): {}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A child process that is killed if the test ends early (a panic included).
#[derive(Debug)]
pub struct ChildGuard {
    pub child: Option<Child>,
    pub what: String,
}

impl ChildGuard {
    /// Guards `child`, described as `what` in messages.
    pub fn new(child: Child, what: &str) -> ChildGuard {
        ChildGuard {
            child: Some(child),
            what: what.to_string(),
        }
    }

    /// The process id.
    pub fn pid(&self) -> i32 {
        self.child.as_ref().expect("child").id() as i32
    }

    /// Sends a signal.
    pub fn signal(&self, sig: i32) {
        // SAFETY: kill() with a pid of our own live (unreaped) child and a valid signal number.
        let r = unsafe { libc::kill(self.pid(), sig) };
        assert_eq!(r, 0, "kill({}, {sig}) failed", self.pid());
    }

    /// Whether the process has exited.
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        self.child
            .as_mut()
            .expect("child")
            .try_wait()
            .expect("try_wait")
    }

    /// Waits for the exit; kills the process and fails the test past `limit`.
    pub fn wait_limited(&mut self, limit: Duration) -> ExitStatus {
        let start = Instant::now();
        loop {
            if let Some(s) = self.try_wait() {
                return s;
            }
            if start.elapsed() > limit {
                let c = self.child.as_mut().expect("child");
                let _ = c.kill();
                let _ = c.wait();
                panic!("{} did not exit within {:?}", self.what, limit);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Polls `ready(pid)` every 20 ms until it holds; fails the test, with the process's stderr,
    /// if the process exits first, or if `limit` passes (`waiting_for` says for what).
    pub fn wait_until(
        &mut self,
        limit: Duration,
        waiting_for: &str,
        mut ready: impl FnMut(i32) -> bool,
    ) {
        let start = Instant::now();
        loop {
            if let Some(st) = self.try_wait() {
                let (_, err) = self.wait_output(Duration::from_secs(1));
                panic!(
                    "{} exited ({st}) while waiting until it {waiting_for}: {err}",
                    self.what
                );
            }
            if ready(self.pid()) {
                return;
            }
            assert!(
                start.elapsed() < limit,
                "{} has not {waiting_for} after {limit:?}",
                self.what
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits for the exit and collects stderr (stdout must not be piped).
    pub fn wait_output(&mut self, limit: Duration) -> (ExitStatus, String) {
        let status = self.wait_limited(limit);
        let mut err = String::new();
        if let Some(mut e) = self.child.as_mut().expect("child").stderr.take() {
            e.read_to_string(&mut err).expect("read stderr");
        }
        self.child = None;
        (status, err)
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Some(c) = self.child.as_mut()
            && c.try_wait().ok().flatten().is_none()
        {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The numbers of `--summary-json`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    pub received: u64,
    pub recorded: u64,
    /// Packets no rule matched in user space.
    pub filtered: u64,
    pub dropped_kernel: u64,
    pub dropped_ours: u64,
    pub files: Vec<String>,
    pub text: String,
}

impl Summary {
    /// Reads a capture's JSON summary.
    pub fn read(path: &Path) -> Summary {
        let text = std::fs::read_to_string(path)
            .unwrap_or_else(|e| panic!("no summary JSON at {}: {e}", path.display()));
        Summary {
            received: json_u64(&text, "received"),
            recorded: json_u64(&text, "recorded"),
            filtered: json_u64(&text, "filtered"),
            dropped_kernel: json_u64(&text, "dropped_kernel"),
            dropped_ours: json_u64(&text, "dropped_ours"),
            files: json_strings(&text, "files"),
            text,
        }
    }

    /// Checks that every packet is accounted for.
    pub fn assert_adds_up(&self) {
        assert_eq!(
            self.received,
            self.recorded + self.filtered + self.dropped_kernel + self.dropped_ours,
            "received != recorded + filtered + dropped_kernel + dropped_ours in {}",
            self.text
        );
    }

    /// Checks that the exit line on stderr carries the same numbers.
    pub fn assert_matches_exit_line(&self, stderr: &str) {
        let line = stderr
            .lines()
            .find(|l| l.contains(" received, ") && l.starts_with("tapflow: "))
            .unwrap_or_else(|| panic!("no exit summary line on stderr: {stderr:?}"));
        let nums: Vec<u64> = line
            .split(|c: char| !c.is_ascii_digit() && c != '.')
            .filter(|w| !w.is_empty() && !w.contains('.'))
            .map(|w| w.parse().expect("number"))
            .collect();
        assert!(nums.len() >= 4, "exit line {line:?}");
        assert_eq!(
            &nums[..4],
            &[
                self.received,
                self.recorded,
                self.dropped_kernel,
                self.dropped_ours
            ],
            "exit line {line:?} disagrees with the JSON {}",
            self.text
        );
        assert!(
            line.contains("dropped by kernel") && line.contains("dropped by tapflow"),
            "{line:?}"
        );
        assert!(line.ends_with("% collected)"), "{line:?}");
    }
}

/// The value at `path` in JSON text: keys joined by `.`, e.g. `forward.records`.
pub fn json_at(text: &str, path: &str) -> serde_json::Value {
    let v: serde_json::Value =
        serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"));
    let pointer = format!("/{}", path.replace('.', "/"));
    v.pointer(&pointer)
        .unwrap_or_else(|| panic!("no \"{path}\" in {text}"))
        .clone()
}

/// The unsigned number at `path` (see [`json_at`]).
pub fn json_u64(text: &str, path: &str) -> u64 {
    json_at(text, path)
        .as_u64()
        .unwrap_or_else(|| panic!("\"{path}\" is not a u64 in {text}"))
}

/// The number at `path` (see [`json_at`]).
pub fn json_f64(text: &str, path: &str) -> f64 {
    json_at(text, path)
        .as_f64()
        .unwrap_or_else(|| panic!("\"{path}\" is not a number in {text}"))
}

/// The array of strings at `path` (see [`json_at`]).
pub fn json_strings(text: &str, path: &str) -> Vec<String> {
    serde_json::from_value(json_at(text, path))
        .unwrap_or_else(|e| panic!("\"{path}\" is not an array of strings ({e}) in {text}"))
}

/// Stderr of a real tool without its harmless note about running as root.
fn tool_stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr)
        .lines()
        .filter(|l| !l.contains("Running as user") && !l.trim().is_empty())
        .collect::<Vec<_>>()
        .join("\n")
}

/// `tshark -r FILE -T fields -e ...`: one row per packet. Fails if tshark reports any problem.
pub fn tshark_fields(file: &Path, fields: &[&str]) -> Vec<Vec<String>> {
    let (rows, err) = tshark_fields_lenient(file, fields);
    assert!(
        err.is_empty(),
        "tshark cannot read {} cleanly: {err}",
        file.display()
    );
    rows
}

/// Like `tshark_fields`, but returns what tshark read together with its complaint, if any.
pub fn tshark_fields_lenient(file: &Path, fields: &[&str]) -> (Vec<Vec<String>>, String) {
    let mut c = Command::new("tshark");
    c.arg("-n")
        .arg("-r")
        .arg(file)
        .args(["-T", "fields", "-E", "separator=\t"]);
    for f in fields {
        c.args(["-e", f]);
    }
    let o = run_limited(&mut c, Duration::from_secs(120));
    let mut err = tool_stderr(&o);
    if !o.status.success() && err.is_empty() {
        err = format!("tshark exited with {}", o.status);
    }
    let rows = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| l.split('\t').map(str::to_string).collect())
        .collect();
    (rows, err)
}

/// The packet count capinfos gives; fails if capinfos cannot read the file.
pub fn capinfos_count(file: &Path) -> u64 {
    let out = run_ok(Command::new("capinfos").args(["-c", "-M"]).arg(file));
    let line = out
        .lines()
        .find(|l| l.starts_with("Number of packets"))
        .unwrap_or_else(|| panic!("capinfos -c said {out:?}"));
    line.rsplit(':')
        .next()
        .unwrap()
        .trim()
        .parse()
        .expect("capinfos count")
}

/// Full capinfos output (long names, as people read it).
pub fn capinfos(file: &Path) -> String {
    run_ok(Command::new("capinfos").arg(file))
}

/// `tshark`'s `frame.time_epoch` ("secs.fraction") as ns since 1970; None past the u128 range.
pub fn epoch_ns(s: &str) -> Option<i128> {
    let s = s.trim();
    let (neg, s) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s),
    };
    let (sec, frac) = s.split_once('.').unwrap_or((s, ""));
    let mut frac = frac.to_string();
    frac.truncate(9);
    while frac.len() < 9 {
        frac.push('0');
    }
    let v = sec.parse::<i128>().ok()? * 1_000_000_000 + frac.parse::<i128>().ok()?;
    Some(if neg { -v } else { v })
}

/// One packet as an independent reader sees it in a pcap or pcapng file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pkt {
    /// Interface index (0 for pcap).
    pub iface: u32,
    /// Link type of the packet's interface.
    pub linktype: u16,
    /// Timestamp in ns since 1970 (u128: pcapng allows more than u64 ns).
    pub ts_ns: u128,
    pub caplen: u32,
    pub len: u32,
    pub data: Vec<u8>,
    /// `epb_dropcount`, when present.
    pub dropcount: Option<u64>,
    /// Byte offset of the record or block in the file.
    pub offset: u64,
}

/// An Interface Statistics Block's options (code → value; u64 options only), and its comment.
#[derive(Debug, Clone, Default)]
pub struct Isb {
    pub iface: u32,
    pub opts: Vec<(u16, u64)>,
    /// `opt_comment`, when present.
    pub comment: Option<String>,
    /// Byte offset of the block in the file.
    pub offset: u64,
}

impl Isb {
    /// The value of option `code`, if present.
    pub fn get(&self, code: u16) -> Option<u64> {
        self.opts.iter().find(|(c, _)| *c == code).map(|(_, v)| *v)
    }
}

/// isb_ifrecv, isb_ifdrop, isb_filteraccept, isb_osdrop, isb_usrdeliv.
pub const ISB_IFRECV: u16 = 4;
pub const ISB_FILTERACCEPT: u16 = 6;
pub const ISB_OSDROP: u16 = 7;
pub const ISB_USRDELIV: u16 = 8;

/// Everything the independent reader found in a file.
#[derive(Debug, Clone, Default)]
pub struct Capture {
    pub pcapng: bool,
    /// (link type, snaplen, tsresol option byte if present) per interface.
    pub ifaces: Vec<(u16, u32, Option<u8>)>,
    pub packets: Vec<Pkt>,
    pub isbs: Vec<Isb>,
    /// Where and why reading stopped early, if it did.
    pub damage: Option<(u64, String)>,
}

/// Reads a pcap or pcapng file with a deliberately simple reader independent of tapflow's.
pub fn read_capture(path: &Path) -> Capture {
    let d = std::fs::read(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    if d.len() >= 4 && d[..4] == [0x0a, 0x0d, 0x0d, 0x0a] {
        read_pcapng(&d)
    } else {
        read_pcap(&d)
    }
}

fn read_pcap(d: &[u8]) -> Capture {
    let mut cap = Capture::default();
    if d.len() < 24 {
        cap.damage = Some((0, "short file header".into()));
        return cap;
    }
    let m = [d[0], d[1], d[2], d[3]];
    let (le, nano) = match m {
        [0xd4, 0xc3, 0xb2, 0xa1] => (true, false),
        [0x4d, 0x3c, 0xb2, 0xa1] => (true, true),
        [0xa1, 0xb2, 0xc3, 0xd4] => (false, false),
        [0xa1, 0xb2, 0x3c, 0x4d] => (false, true),
        _ => {
            cap.damage = Some((0, "not a pcap magic".into()));
            return cap;
        }
    };
    let u32at = |o: usize| {
        let b = [d[o], d[o + 1], d[o + 2], d[o + 3]];
        if le {
            u32::from_le_bytes(b)
        } else {
            u32::from_be_bytes(b)
        }
    };
    let snaplen = u32at(16);
    let linktype = (u32at(20) & 0xffff) as u16;
    cap.ifaces.push((linktype, snaplen, None));
    let mut o = 24usize;
    while o < d.len() {
        if o + 16 > d.len() {
            cap.damage = Some((o as u64, "partial record header".into()));
            break;
        }
        let sec = u32at(o) as u128;
        let frac = u32at(o + 4) as u128;
        let caplen = u32at(o + 8);
        let len = u32at(o + 12);
        if o + 16 + caplen as usize > d.len() {
            cap.damage = Some((o as u64, "record past the end".into()));
            break;
        }
        let ts_ns = sec * 1_000_000_000 + if nano { frac } else { frac * 1000 };
        cap.packets.push(Pkt {
            iface: 0,
            linktype,
            ts_ns,
            caplen,
            len,
            data: d[o + 16..o + 16 + caplen as usize].to_vec(),
            dropcount: None,
            offset: o as u64,
        });
        o += 16 + caplen as usize;
    }
    cap
}

fn read_pcapng(d: &[u8]) -> Capture {
    let mut cap = Capture {
        pcapng: true,
        ..Capture::default()
    };
    let mut le = true;
    // Per section: (link type, tsresol) of each interface, and the index of the first one in
    // `cap.ifaces`.
    let mut section_base = 0usize;
    let mut o = 0usize;
    while o < d.len() {
        if o + 12 > d.len() {
            cap.damage = Some((o as u64, "partial block header".into()));
            break;
        }
        let btype_raw = [d[o], d[o + 1], d[o + 2], d[o + 3]];
        if btype_raw == [0x0a, 0x0d, 0x0d, 0x0a] {
            let bom = [d[o + 8], d[o + 9], d[o + 10], d[o + 11]];
            le = match bom {
                [0x4d, 0x3c, 0x2b, 0x1a] => true,
                [0x1a, 0x2b, 0x3c, 0x4d] => false,
                _ => {
                    cap.damage = Some((o as u64, "bad byte-order magic".into()));
                    break;
                }
            };
            section_base = cap.ifaces.len();
        }
        let u32at = |p: usize| {
            let b = [d[p], d[p + 1], d[p + 2], d[p + 3]];
            if le {
                u32::from_le_bytes(b)
            } else {
                u32::from_be_bytes(b)
            }
        };
        let u16at = |p: usize| {
            let b = [d[p], d[p + 1]];
            if le {
                u16::from_le_bytes(b)
            } else {
                u16::from_be_bytes(b)
            }
        };
        let u64at = |p: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&d[p..p + 8]);
            if le {
                u64::from_le_bytes(b)
            } else {
                u64::from_be_bytes(b)
            }
        };
        let btype = u32at(o);
        let blen = u32at(o + 4) as usize;
        if blen < 12
            || !blen.is_multiple_of(4)
            || o + blen > d.len()
            || u32at(o + blen - 4) as usize != blen
        {
            cap.damage = Some((o as u64, format!("bad block length {blen}")));
            break;
        }
        let body = o + 8;
        let body_end = o + blen - 4;
        // Options from `p` to `body_end`: (code, value offset, value length).
        let options = |mut p: usize| {
            let mut v = Vec::new();
            while p + 4 <= body_end {
                let code = u16at(p);
                let len = u16at(p + 2) as usize;
                if code == 0 || p + 4 + len > body_end {
                    break;
                }
                v.push((code, p + 4, len));
                p += 4 + len.div_ceil(4) * 4;
            }
            v
        };
        let ts = |iface: usize, hi: u32, lo: u32| -> u128 {
            let raw = ((hi as u128) << 32) | lo as u128;
            let res = cap.ifaces.get(iface).and_then(|i| i.2).unwrap_or(6);
            if res & 0x80 == 0 {
                let p = 10u128.pow(u32::from(res));
                if p <= 1_000_000_000 {
                    raw * (1_000_000_000 / p)
                } else {
                    raw / (p / 1_000_000_000)
                }
            } else {
                (raw * 1_000_000_000) >> (res & 0x7f)
            }
        };
        match btype {
            1 => {
                let linktype = u16at(body);
                let snaplen = u32at(body + 4);
                let res = options(body + 8)
                    .into_iter()
                    .find(|(c, _, l)| *c == 9 && *l >= 1);
                cap.ifaces
                    .push((linktype, snaplen, res.map(|(_, p, _)| d[p])));
            }
            6 | 2 => {
                let (iface, drops, hi, lo, caplen, len, data_at) = if btype == 6 {
                    (
                        u32at(body),
                        None,
                        u32at(body + 4),
                        u32at(body + 8),
                        u32at(body + 12),
                        u32at(body + 16),
                        body + 20,
                    )
                } else {
                    let drops = u16at(body + 2);
                    (
                        u16at(body) as u32,
                        Some(drops as u64),
                        u32at(body + 4),
                        u32at(body + 8),
                        u32at(body + 12),
                        u32at(body + 16),
                        body + 20,
                    )
                };
                let gi = section_base + iface as usize;
                if data_at + caplen as usize > body_end {
                    cap.damage = Some((o as u64, "packet data past the block".into()));
                    break;
                }
                let opts_at = data_at + (caplen as usize).div_ceil(4) * 4;
                let mut dropcount = drops;
                if btype == 6 {
                    for (c, p, l) in options(opts_at) {
                        if c == 4 && l == 8 {
                            dropcount = Some(u64at(p));
                        }
                    }
                }
                cap.packets.push(Pkt {
                    iface: gi as u32,
                    linktype: cap.ifaces.get(gi).map(|i| i.0).unwrap_or(0xffff),
                    ts_ns: ts(gi, hi, lo),
                    caplen,
                    len,
                    data: d[data_at..data_at + caplen as usize].to_vec(),
                    dropcount,
                    offset: o as u64,
                });
            }
            3 => {
                let len = u32at(body);
                let snap = cap
                    .ifaces
                    .get(section_base)
                    .map(|i| i.1)
                    .unwrap_or(u32::MAX);
                let caplen = len
                    .min(if snap == 0 { u32::MAX } else { snap })
                    .min((body_end - body - 4) as u32);
                cap.packets.push(Pkt {
                    iface: section_base as u32,
                    linktype: cap.ifaces.get(section_base).map(|i| i.0).unwrap_or(0xffff),
                    ts_ns: 0,
                    caplen,
                    len,
                    data: d[body + 4..body + 4 + caplen as usize].to_vec(),
                    dropcount: None,
                    offset: o as u64,
                });
            }
            5 => {
                let iface = u32at(body);
                let all = options(body + 12);
                let opts = all
                    .iter()
                    .filter(|(c, _, l)| *c != 1 && *l == 8)
                    .map(|&(c, p, _)| (c, u64at(p)))
                    .collect();
                let comment = all
                    .iter()
                    .find(|(c, _, _)| *c == 1)
                    .map(|&(_, p, l)| String::from_utf8_lossy(&d[p..p + l]).into_owned());
                cap.isbs.push(Isb {
                    iface: section_base as u32 + iface,
                    opts,
                    comment,
                    offset: o as u64,
                });
            }
            _ => {}
        }
        o += blen;
    }
    cap
}

/// Every bound packet socket of process `pid` (socket inodes of its fds found in
/// `/proc/PID/net/packet` with R=1 and an interface).
pub fn bound_packet_sockets(pid: i32) -> usize {
    let inodes = socket_inodes(pid);
    let table = std::fs::read_to_string(format!("/proc/{pid}/net/packet")).unwrap_or_default();
    table
        .lines()
        .skip(1)
        .filter(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            // sk RefCnt Type Proto Iface R Rmem User Inode
            f.len() >= 9 && f[4] != "0" && f[5] == "1" && inodes.contains(f[8])
        })
        .count()
}

/// Waits until `pid` has `n` bound packet sockets, then a little more for the fanout join and
/// the filter; fails the test if the process exits or takes too long.
pub fn wait_capturing(g: &mut ChildGuard, n: usize) {
    g.wait_until(
        Duration::from_secs(15),
        &format!("bound {n} packet sockets"),
        |pid| bound_packet_sockets(pid) >= n,
    );
    std::thread::sleep(Duration::from_millis(300));
}

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// Two network namespaces joined by a veth pair, IPv6 off; removed on drop.
#[derive(Debug)]
pub struct VethPair {
    pub ns_a: String,
    pub ns_b: String,
    pub if_a: String,
    pub if_b: String,
}

/// Runs `ip ARGS`, which must succeed.
pub fn ip(args: &[&str]) {
    run_ok(Command::new("ip").args(args));
}

/// Turns IPv6 off in namespace `ns` for `scope` (`all`, `default` or an interface).
pub fn disable_ipv6(ns: &str, scope: &str) {
    let key = format!("net.ipv6.conf.{scope}.disable_ipv6=1");
    run_ok(Command::new("ip").args(["netns", "exec", ns, "sysctl", "-qw", &key]));
}

impl VethPair {
    /// Makes namespaces `tf-PID-TAG-N-a`/`-b` with interfaces `tPIDTAGNa`/`b` (tag ≤ 3 chars).
    pub fn new(tag: &str) -> VethPair {
        require_root();
        assert!(tag.len() <= 3, "tag {tag:?} too long for an interface name");
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let pid = std::process::id();
        let p = VethPair {
            ns_a: format!("tf-{pid}-{tag}-{n}-a"),
            ns_b: format!("tf-{pid}-{tag}-{n}-b"),
            if_a: format!("t{pid}{tag}{n}a"),
            if_b: format!("t{pid}{tag}{n}b"),
        };
        assert!(p.if_a.len() <= 15, "interface name {} too long", p.if_a);
        // From here on, Drop removes whatever was made.
        ip(&["netns", "add", &p.ns_a]);
        ip(&["netns", "add", &p.ns_b]);
        for ns in [&p.ns_a, &p.ns_b] {
            for k in ["all", "default"] {
                disable_ipv6(ns, k);
            }
        }
        ip(&[
            "-n", &p.ns_a, "link", "add", &p.if_a, "type", "veth", "peer", "name", &p.if_b,
            "netns", &p.ns_b,
        ]);
        for (ns, ifn) in [(&p.ns_a, &p.if_a), (&p.ns_b, &p.if_b)] {
            disable_ipv6(ns, ifn);
            ip(&["-n", ns, "link", "set", ifn, "up"]);
        }
        p
    }

    /// Waits until both ends are up with a working link (operational state UP, which the
    /// kernel sets a moment after the carrier); fails the test past 10 s.
    pub fn wait_link_up(&self) {
        let start = Instant::now();
        let up = |ns: &str, ifname: &str| {
            run_ok(Command::new("ip").args(["-n", ns, "-o", "link", "show", "dev", ifname]))
                .contains(" state UP ")
        };
        while !(up(&self.ns_a, &self.if_a) && up(&self.ns_b, &self.if_b)) {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "{}/{} not up after 10 s",
                self.if_a,
                self.if_b
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// A command run inside namespace `ns`.
    pub fn in_ns(ns: &str, program: &Path, args: &[&str]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns]).arg(program).args(args);
        c
    }

    /// `tapflow ARGS` in namespace A (the sender's).
    pub fn tapflow_a(&self, args: &[&str]) -> Command {
        Self::in_ns(&self.ns_a, &bin(), args)
    }

    /// `tapflow ARGS` in namespace B (the capturer's).
    pub fn tapflow_b(&self, args: &[&str]) -> Command {
        Self::in_ns(&self.ns_b, &bin(), args)
    }

    /// Starts a long-running command with stderr piped, stdout discarded.
    pub fn spawn(c: &mut Command) -> ChildGuard {
        let what = show(c);
        let child = c
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
        ChildGuard::new(child, &what)
    }

    /// Starts `tapflow gen -i A -q ARGS` in A, in the background.
    pub fn spawn_gen(&self, args: &[&str]) -> ChildGuard {
        let mut a = vec!["gen", "-i", &self.if_a, "-q"];
        a.extend_from_slice(args);
        Self::spawn(&mut self.tapflow_a(&a))
    }

    /// Runs `tapflow gen` in A to the end and checks that it sent `count` frames.
    pub fn send(&self, args: &[&str], dir: &Path, count: u64) {
        let json = dir.join("gen.json");
        let json_s = json.to_string_lossy().into_owned();
        let mut a = vec!["gen", "-i", &self.if_a, "-q", "--summary-json", &json_s];
        a.extend_from_slice(args);
        let o = run_limited(&mut self.tapflow_a(&a), Duration::from_secs(60));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            o.status.success(),
            "tapflow {a:?} failed ({}): {err}",
            o.status
        );
        let text = std::fs::read_to_string(&json).expect("gen summary JSON");
        assert_eq!(json_u64(&text, "sent"), count, "gen summary {text}");
        assert_eq!(json_u64(&text, "failed"), 0, "gen summary {text}");
    }
}

impl Drop for VethPair {
    fn drop(&mut self) {
        for ns in [&self.ns_a, &self.ns_b] {
            let _ = Command::new("ip")
                .args(["netns", "del", ns])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// Checks the error contract: exit code, one `tapflow: error:` line (plus at most clap's
/// 'try --help' line), naming the problem, no panic or backtrace.
pub fn assert_clean_error(o: &Output, code: Option<i32>, keys: &[&str], what: &str) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{what}: exit 0, stderr {err:?}");
    if let Some(c) = code {
        assert_eq!(
            o.status.code(),
            Some(c),
            "{what}: exit code; stderr {err:?}"
        );
    }
    for bad in ["panicked", "RUST_BACKTRACE", "stack backtrace"] {
        assert!(!err.contains(bad), "{what}: stderr has {bad:?}: {err:?}");
    }
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(!lines.is_empty(), "{what}: nothing on stderr");
    assert!(
        lines[0].starts_with("tapflow: error: "),
        "{what}: first line must start 'tapflow: error: ': {err:?}"
    );
    match lines.len() {
        1 => {}
        2 => assert!(
            lines[1].contains("--help"),
            "{what}: second line is not the 'try --help' hint: {err:?}"
        ),
        _ => panic!("{what}: {} lines on stderr, want one: {err:?}", lines.len()),
    }
    let first = lines[0].to_lowercase();
    assert!(
        keys.iter().any(|k| first.contains(&k.to_lowercase())),
        "{what}: the error line names none of {keys:?}: {:?}",
        lines[0]
    );
}

/// One private network namespace with only loopback, up; removed on drop. Its UDP counters
/// (`/proc/net/snmp`) count only what runs inside it.
#[derive(Debug)]
pub struct Netns {
    pub name: String,
}

impl Netns {
    /// Makes namespace `tf-PID-TAG-N`.
    pub fn new(tag: &str) -> Netns {
        require_root();
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let ns = Netns {
            name: format!("tf-{}-{tag}-{n}", std::process::id()),
        };
        ip(&["netns", "add", &ns.name]);
        ip(&["-n", &ns.name, "link", "set", "lo", "up"]);
        ns
    }

    /// The same namespace with IPv6 off, so its links carry no router solicitations or MLD
    /// reports that would pollute a capture.
    pub fn without_ipv6(self) -> Netns {
        for k in ["all", "default"] {
            disable_ipv6(&self.name, k);
        }
        self
    }

    /// `tapflow ARGS` inside the namespace.
    pub fn tapflow(&self, args: &[&str]) -> Command {
        let mut c = self.cmd(bin());
        c.args(args);
        c
    }

    /// `PROGRAM` run inside the namespace.
    pub fn cmd(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name]).arg(program);
        c
    }

    /// A field of the namespace's `Udp:` line in `/proc/net/snmp` (`RcvbufErrors`, …).
    pub fn udp_counter(&self, field: &str) -> u64 {
        let text = run_ok(self.cmd("cat").arg("/proc/net/snmp"));
        let mut udp = text.lines().filter(|l| l.starts_with("Udp: "));
        let (names, values) = (udp.next().unwrap(), udp.next().unwrap());
        names
            .split_whitespace()
            .zip(values.split_whitespace())
            .find(|(n, _)| *n == field)
            .unwrap_or_else(|| panic!("no Udp {field} in /proc/net/snmp"))
            .1
            .parse()
            .unwrap()
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// Waits until `g`'s process has a UDP socket (IPv4 or IPv6) bound to `port`, in whatever
/// namespace it runs (`/proc/PID/net` is the process's own). A process started by `ip netns
/// exec` still shows the host's table until it has entered the namespace and exec'd, so the
/// table is read only once the process is no longer `ip`.
pub fn wait_udp_bound(g: &mut ChildGuard, port: u16) {
    let want = format!(":{port:04X}");
    g.wait_until(
        Duration::from_secs(10),
        &format!("bound UDP {port}"),
        |pid| {
            // A socket of the process itself (not of `ip netns exec` before it execs, nor of
            // another process on the port).
            let inodes = socket_inodes(pid);
            ["udp", "udp6"].iter().any(|t| {
                std::fs::read_to_string(format!("/proc/{pid}/net/{t}"))
                    .unwrap_or_default()
                    .lines()
                    .skip(1)
                    .any(|l| {
                        // sl local_address rem_address st queues timer retrnsmt uid timeout inode
                        let f: Vec<&str> = l.split_whitespace().collect();
                        f.len() >= 10 && f[1].ends_with(&want) && inodes.contains(f[9])
                    })
            })
        },
    );
}

/// The inodes of the sockets process `pid` holds open.
fn socket_inodes(pid: i32) -> HashSet<String> {
    let mut inodes = HashSet::new();
    if let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/fd")) {
        for e in rd.flatten() {
            if let Ok(t) = std::fs::read_link(e.path()) {
                let t = t.to_string_lossy().into_owned();
                if let Some(i) = t.strip_prefix("socket:[").and_then(|r| r.strip_suffix(']')) {
                    inodes.insert(i.to_string());
                }
            }
        }
    }
    inodes
}

/// The Enhanced Packet Blocks of a pcapng file tapflow wrote (little-endian), byte for byte.
pub fn epbs(path: &Path) -> Vec<Vec<u8>> {
    let d = std::fs::read(path).unwrap();
    let mut out = Vec::new();
    let mut at = 0;
    while at + 12 <= d.len() {
        let word = |o: usize| u32::from_le_bytes(d[o..o + 4].try_into().unwrap());
        let len = word(at + 4) as usize;
        assert!(
            len >= 12 && at + len <= d.len(),
            "bad block at {at} in {}",
            path.display()
        );
        if word(at) == 6 {
            out.push(d[at..at + len].to_vec());
        }
        at += len;
    }
    out
}

/// A ClickHouse server (Debian's, through `scripts/clickhouse.sh`) in its own directory on its
/// own ports, stopped when dropped.
pub struct ClickHouse(tempfile::TempDir);

fn clickhouse_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/clickhouse.sh")
}

impl ClickHouse {
    /// A server on HTTP port `port`, and its URL.
    pub fn start(port: u16) -> (ClickHouse, String) {
        let dir = tempfile::tempdir().unwrap();
        let out = Command::new(clickhouse_script())
            .args([
                "start",
                dir.path().to_str().unwrap(),
                "1",
                &port.to_string(),
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "clickhouse.sh: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let url = String::from_utf8(out.stdout).unwrap().trim().to_string();
        (ClickHouse(dir), url)
    }
}

impl Drop for ClickHouse {
    fn drop(&mut self) {
        let _ = Command::new(clickhouse_script())
            .args(["stop", self.0.path().to_str().unwrap()])
            .status();
    }
}

/// A TCP port free on 127.0.0.1 now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}
