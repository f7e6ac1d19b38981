//! The probe's live rule set: the kernel filter built from it, the exact match each worker runs,
//! a match counter per rule, and changes while packets flow.
//!
//! A change builds a new table and publishes it under a new generation; each worker sees the
//! generation move at its next packet (one relaxed load per packet, one lock per change) and takes
//! the new table up. Then every ring's kernel filter is replaced: the kernel swaps programs atomically, so each packet is judged by the old rules or
//! the new ones, none is lost. A packet the old kernel filter passed that the new rules refuse is
//! counted as filtered in user space. Counters follow a rule by name across changes.
//!
//! A capture started without rules has an inactive rule set: every packet passes (the `-f`
//! expression alone decides) until the first rule is added or loaded.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use tapflow_sys::bpf;
use tapflow_sys::ring::FilterHandle;
use tapflow_wire::LinkType;
use tapflow_wire::cbpf::{self, Insn};
use tapflow_wire::rule_bpf::{self, Precision};
use tapflow_wire::rule_match::Matcher;
use tapflow_wire::rules::Rule;
use tapflow_wire::sll;

use crate::EngineError;
use crate::stop::Stop;

/// A rule's match counter: packets and their original bytes.
#[derive(Debug, Default)]
struct RuleCount {
    packets: AtomicU64,
    bytes: AtomicU64,
}

/// One version of the rule set, shared by the workers while it is current.
#[derive(Debug)]
struct RuleTable {
    /// Whether rules decide at all (false until a capture without `--rules` gets some).
    active: bool,
    matcher: Matcher,
    precision: Precision,
    instructions: usize,
    /// `[worker][rule]`; each worker writes only its own row.
    counts: Vec<Box<[RuleCount]>>,
}

impl RuleTable {
    fn count(&self, rule: usize) -> (u64, u64) {
        self.counts.iter().fold((0, 0), |(p, b), row| {
            (
                p + row[rule].packets.load(Ordering::Relaxed),
                b + row[rule].bytes.load(Ordering::Relaxed),
            )
        })
    }
}

/// One rule and what it matched so far.
///
/// As JSON: `{"name":"web","rule":"web proto tcp dport 80","packets":…,"bytes":…}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "RuleStatJson", try_from = "RuleStatJson")]
pub struct RuleStat {
    /// The rule.
    pub rule: Rule,
    /// Packets it matched first.
    pub packets: u64,
    /// Their original bytes.
    pub bytes: u64,
}

/// The rule set as it stands (the control socket's answer to `rules ...`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuleListing {
    /// Whether rules decide at all.
    pub active: bool,
    /// How exact the kernel filter is: `exact`, `ports`, `protocols` or `family`.
    #[serde(serialize_with = "precision_out", deserialize_with = "precision_in")]
    pub precision: Precision,
    /// Instructions in the kernel filter (with the `-f` expression's).
    pub instructions: usize,
    /// The rules in order, with their counters.
    pub rules: Vec<RuleStat>,
}

/// [`RuleStat`] as JSON: the rule's name beside its text.
#[derive(Serialize, Deserialize)]
struct RuleStatJson {
    name: String,
    rule: String,
    packets: u64,
    bytes: u64,
}

impl From<RuleStat> for RuleStatJson {
    fn from(r: RuleStat) -> RuleStatJson {
        RuleStatJson {
            name: r.rule.name.clone(),
            rule: r.rule.to_string(),
            packets: r.packets,
            bytes: r.bytes,
        }
    }
}

impl TryFrom<RuleStatJson> for RuleStat {
    type Error = String;

    fn try_from(j: RuleStatJson) -> Result<RuleStat, String> {
        Ok(RuleStat {
            rule: Rule::parse(&j.rule)?,
            packets: j.packets,
            bytes: j.bytes,
        })
    }
}

/// A precision's name in JSON and on the control socket.
pub fn precision_name(p: Precision) -> &'static str {
    match p {
        Precision::Exact => "exact",
        Precision::Ports => "ports",
        Precision::Protocols => "protocols",
        Precision::Family => "family",
    }
}

fn precision_out<S: Serializer>(p: &Precision, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(precision_name(*p))
}

fn precision_in<'de, D: Deserializer<'de>>(d: D) -> Result<Precision, D::Error> {
    let name = String::deserialize(d)?;
    [
        Precision::Exact,
        Precision::Ports,
        Precision::Protocols,
        Precision::Family,
    ]
    .into_iter()
    .find(|&p| precision_name(p) == name)
    .ok_or_else(|| serde::de::Error::custom(format!("unknown precision '{name}'")))
}

#[derive(Debug, Default)]
struct History {
    /// Counts of tables no worker holds any more, by rule name.
    carried: HashMap<String, (u64, u64)>,
    /// Earlier tables workers may still be counting into.
    retired: Vec<Arc<RuleTable>>,
}

/// The live rule set of one capture.
#[derive(Debug)]
pub struct LiveRules {
    workers: usize,
    snaplen: u32,
    /// The kernel filter runs on a `SOCK_DGRAM` socket (`-i any`): programs are written for
    /// Linux cooked v2 frames and moved to the network header.
    cooked: bool,
    /// The `-f` expression's program, run before the rules.
    base: Option<Vec<Insn>>,
    current: Mutex<Arc<RuleTable>>,
    generation: AtomicU64,
    history: Mutex<History>,
    filters: Mutex<Vec<FilterHandle>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The stack of the thread libpcap compiles in: its optimizer recurses once per block of the
/// program, and thousands of alternatives go deeper than a thread's default 2 MiB (only what
/// is used is ever touched).
const COMPILE_STACK: usize = 1 << 30;

/// The tcpdump expression `expr` compiled by libpcap for `linktype`, as the rules' compiler
/// and the user-space interpreter see it.
///
/// libpcap compiles in a thread of its own, with a deep stack, and may take minutes on
/// thousands of alternatives: this returns [`EngineError::Stopped`] as soon as `stop` is
/// raised, leaving the compiler to the process's exit.
pub fn compile_expr(
    expr: &str,
    linktype: LinkType,
    snaplen: u32,
    stop: &Stop,
) -> Result<Vec<Insn>, EngineError> {
    let (tx, rx) = std::sync::mpsc::channel();
    let owned = expr.to_owned();
    let compiler = std::thread::Builder::new()
        .name("tapflow-pcap".into())
        .stack_size(COMPILE_STACK)
        .spawn(move || {
            let _ = tx.send(bpf::compile(&owned, linktype.to_u16(), snaplen));
        })
        .map_err(|e| EngineError::Config(format!("cannot start the filter compiler: {e}")))?;
    loop {
        match rx.recv_timeout(std::time::Duration::from_millis(20)) {
            Ok(prog) => {
                // Gone before the caller goes on: a privilege drop wants one thread only.
                let _ = compiler.join();
                return Ok(from_sys(&prog?));
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) if stop.is_raised() => {
                return Err(EngineError::Stopped("libpcap was compiling the filter"));
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                return Err(EngineError::Config("the filter compiler stopped".into()));
            }
        }
    }
}

/// A tcpdump expression's program as the rules' compiler sees it.
pub fn from_sys(prog: &[bpf::Instruction]) -> Vec<Insn> {
    prog.iter()
        .map(|i| Insn {
            code: i.code,
            jt: i.jt,
            jf: i.jf,
            k: i.k,
        })
        .collect()
}

/// A program as the kernel takes it.
pub fn to_sys(prog: &[Insn]) -> Vec<bpf::Instruction> {
    prog.iter()
        .map(|i| bpf::Instruction {
            code: i.code,
            jt: i.jt,
            jf: i.jf,
            k: i.k,
        })
        .collect()
}

impl LiveRules {
    /// A rule set for `workers` workers keeping `snaplen` bytes, after the program of a `-f`
    /// expression if there is one.
    ///
    /// `None` makes an inactive set that passes everything until rules are added or loaded.
    pub fn new(
        rules: Option<Vec<Rule>>,
        workers: usize,
        snaplen: u32,
        base: Option<Vec<Insn>>,
    ) -> Result<Arc<LiveRules>, EngineError> {
        LiveRules::build(rules, workers, snaplen, base, false)
    }

    /// [`LiveRules::new`] for rings on every interface (`-i any`): `base` is written for Linux
    /// cooked v2 frames, and so are the rules' programs; the kernel gets them moved to the
    /// network header ([`sll::for_cooked_socket`]). `snaplen` counts network-layer bytes.
    pub fn new_cooked(
        rules: Option<Vec<Rule>>,
        workers: usize,
        snaplen: u32,
        base: Option<Vec<Insn>>,
    ) -> Result<Arc<LiveRules>, EngineError> {
        LiveRules::build(rules, workers, snaplen, base, true)
    }

    fn build(
        rules: Option<Vec<Rule>>,
        workers: usize,
        snaplen: u32,
        base: Option<Vec<Insn>>,
        cooked: bool,
    ) -> Result<Arc<LiveRules>, EngineError> {
        let live = LiveRules {
            workers,
            snaplen,
            cooked,
            base,
            current: Mutex::new(Arc::new(RuleTable {
                active: false,
                matcher: Matcher::new(Vec::new()),
                precision: Precision::Exact,
                instructions: 0,
                counts: Vec::new(),
            })),
            generation: AtomicU64::new(0),
            history: Mutex::new(History::default()),
            filters: Mutex::new(Vec::new()),
        };
        if let Some(rules) = rules {
            let table = live.table(rules)?;
            *lock(&live.current) = Arc::new(table);
        }
        Ok(Arc::new(live))
    }

    /// The kernel program for `rules`; without rules, the `-f` expression's or pass-all.
    fn program(&self, rules: Option<&[Rule]>) -> (Vec<Insn>, Precision) {
        let Some(rules) = rules else {
            let prog = self
                .base
                .clone()
                .unwrap_or_else(|| vec![Insn::stmt(cbpf::RET_K, self.snaplen)]);
            return (prog, Precision::Exact);
        };
        let budget = cbpf::BPF_MAXINSNS
            - self.base.as_ref().map_or(0, Vec::len)
            - if self.cooked {
                sll::LOOPBACK_OUTGOING_SKIPPED.len()
            } else {
                0
            };
        let linktype = if self.cooked {
            LinkType::LinuxSll2
        } else {
            LinkType::Ethernet
        };
        let compiled = rule_bpf::compile_for(linktype, rules, self.snaplen, budget);
        let prog = match &self.base {
            Some(b) => cbpf::and_then(b, &compiled.program),
            None => compiled.program,
        };
        (prog, compiled.precision)
    }

    fn table(&self, rules: Vec<Rule>) -> Result<RuleTable, EngineError> {
        let (prog, precision) = self.program(Some(&rules));
        cbpf::validate(&prog)
            .map_err(|e| EngineError::Config(format!("the rules' filter cannot be loaded: {e}")))?;
        let n = rules.len();
        Ok(RuleTable {
            active: true,
            matcher: Matcher::new(rules),
            precision,
            instructions: prog.len(),
            counts: (0..self.workers)
                .map(|_| (0..n).map(|_| RuleCount::default()).collect())
                .collect(),
        })
    }

    /// The kernel filter for the current rules.
    pub fn kernel_program(&self) -> Result<Vec<bpf::Instruction>, EngineError> {
        let table = Arc::clone(&lock(&self.current));
        self.kernel(self.program(table.active.then(|| table.matcher.rules())).0)
    }

    /// A program as the kernel runs it: on a cooked socket, moved to the network header.
    fn kernel(&self, prog: Vec<Insn>) -> Result<Vec<bpf::Instruction>, EngineError> {
        if !self.cooked {
            return Ok(to_sys(&prog));
        }
        sll::for_cooked_socket(&prog)
            .map(|p| to_sys(&p))
            .map_err(|e| EngineError::Config(format!("the filter cannot run on -i any: {e}")))
    }

    /// The rings whose kernel filters follow the rules from now on.
    pub fn attach(&self, handles: Vec<FilterHandle>) {
        *lock(&self.filters) = handles;
    }

    /// The rules now.
    pub fn rules(&self) -> Vec<Rule> {
        lock(&self.current).matcher.rules().to_vec()
    }

    /// Replaces the whole rule set.
    pub fn replace(&self, rules: Vec<Rule>) -> Result<RuleListing, EngineError> {
        let mut current = lock(&self.current);
        let table = Arc::new(self.table(rules)?);
        let prog = self.kernel(self.program(Some(table.matcher.rules())).0)?;
        let old = std::mem::replace(&mut *current, Arc::clone(&table));
        lock(&self.history).retired.push(old);
        self.generation.fetch_add(1, Ordering::Release);
        for f in lock(&self.filters).iter() {
            f.set_filter(&prog)?;
        }
        drop(current);
        Ok(self.list())
    }

    /// Adds a rule at the end.
    pub fn add(&self, rule: Rule) -> Result<RuleListing, EngineError> {
        let mut rules = self.rules();
        if rules.iter().any(|r| r.name == rule.name) {
            return Err(EngineError::Config(format!(
                "a rule named '{}' exists already",
                rule.name
            )));
        }
        rules.push(rule);
        self.replace(rules)
    }

    /// Removes the rule named `name`.
    pub fn delete(&self, name: &str) -> Result<RuleListing, EngineError> {
        let mut rules = self.rules();
        let before = rules.len();
        rules.retain(|r| r.name != name);
        if rules.len() == before {
            return Err(EngineError::Config(format!("no rule named '{name}'")));
        }
        self.replace(rules)
    }

    /// The rules with their counters.
    pub fn list(&self) -> RuleListing {
        let table = Arc::clone(&lock(&self.current));
        let mut history = lock(&self.history);
        let History { carried, retired } = &mut *history;
        // Tables no worker holds any more are final: fold them into the carried counts.
        retired.retain(|t| {
            if Arc::strong_count(t) > 1 {
                return true;
            }
            for (i, r) in t.matcher.rules().iter().enumerate() {
                let (p, b) = t.count(i);
                let c = carried.entry(r.name.clone()).or_default();
                (c.0, c.1) = (c.0 + p, c.1 + b);
            }
            false
        });
        let rules = table
            .matcher
            .rules()
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let (mut packets, mut bytes) = table.count(i);
                let (p, b) = carried.get(&r.name).copied().unwrap_or_default();
                (packets, bytes) = (packets + p, bytes + b);
                for t in retired.iter() {
                    if let Some(j) = t.matcher.rules().iter().position(|o| o.name == r.name) {
                        let (p, b) = t.count(j);
                        (packets, bytes) = (packets + p, bytes + b);
                    }
                }
                RuleStat {
                    rule: r.clone(),
                    packets,
                    bytes,
                }
            })
            .collect();
        RuleListing {
            active: table.active,
            precision: table.precision,
            instructions: table.instructions,
            rules,
        }
    }

    /// The counters of every rule this capture has had, by name, in name order: the current
    /// rules' as [`LiveRules::list`] has them, and a removed rule's as they stood when it went.
    /// A counter must never go away (Prometheus would read its absence as a reset).
    pub fn counts_ever(&self) -> Vec<(String, u64, u64)> {
        let listing = self.list();
        let mut all: std::collections::BTreeMap<String, (u64, u64)> = listing
            .rules
            .iter()
            .map(|r| (r.rule.name.clone(), (r.packets, r.bytes)))
            .collect();
        let current: Vec<String> = all.keys().cloned().collect();
        let gone = |name: &String| current.binary_search(name).is_err();
        let history = lock(&self.history);
        for (name, &(p, b)) in history.carried.iter().filter(|(n, _)| gone(n)) {
            let c = all.entry(name.clone()).or_default();
            (c.0, c.1) = (c.0 + p, c.1 + b);
        }
        for t in &history.retired {
            for (i, r) in t.matcher.rules().iter().enumerate() {
                if gone(&r.name) {
                    let (p, b) = t.count(i);
                    let c = all.entry(r.name.clone()).or_default();
                    (c.0, c.1) = (c.0 + p, c.1 + b);
                }
            }
        }
        all.into_iter().map(|(n, (p, b))| (n, p, b)).collect()
    }

    /// The view worker `worker` matches packets with.
    pub fn reader(self: &Arc<Self>, worker: usize) -> RuleReader {
        RuleReader {
            table: Arc::clone(&lock(&self.current)),
            seen: self.generation.load(Ordering::Acquire),
            live: Arc::clone(self),
            worker,
        }
    }
}

/// One worker's view of the live rules.
#[derive(Debug)]
pub struct RuleReader {
    live: Arc<LiveRules>,
    table: Arc<RuleTable>,
    seen: u64,
    worker: usize,
}

impl RuleReader {
    /// Takes up a changed rule set.
    #[cold]
    fn refresh(&mut self, generation: u64) {
        self.table = Arc::clone(&lock(&self.live.current));
        self.seen = generation;
    }

    /// Takes up the newest rule set if it changed (one load when it did not).
    #[inline]
    fn catch_up(&mut self) {
        let generation = self.live.generation.load(Ordering::Acquire);
        if generation != self.seen {
            self.refresh(generation);
        }
    }

    /// Whether the rules changed since this reader last looked (one load).
    #[inline]
    pub fn changed(&self) -> bool {
        self.live.generation.load(Ordering::Acquire) != self.seen
    }

    /// Whether every packet is admitted: no rule is active in the newest rule set.
    pub fn admits_all(&mut self) -> bool {
        self.catch_up();
        !self.table.active
    }

    /// Whether a packet matches a rule; counts it under the first rule it matches.
    ///
    /// The rules are those published before the packet reached the ring: a change publishes
    /// the new table before it replaces the kernel filter, and the generation is checked here,
    /// for every packet.
    #[inline]
    pub fn admit(&mut self, linktype: LinkType, frame: &[u8], len: u32) -> bool {
        self.catch_up();
        if !self.table.active {
            return true;
        }
        let Some(i) = self.table.matcher.classify_frame(linktype, frame) else {
            return false;
        };
        let c = &self.table.counts[self.worker][i];
        // One writer per row: a plain load and store, no locked instruction.
        c.packets
            .store(c.packets.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        c.bytes.store(
            c.bytes.load(Ordering::Relaxed) + u64::from(len),
            Ordering::Relaxed,
        );
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tapflow_wire::rules::parse_rules;

    fn udp(dport: u16) -> Vec<u8> {
        let mut f = vec![0u8; 12];
        f.extend_from_slice(&[0x08, 0x00, 0x45, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0, 0]);
        f.extend_from_slice(&[10, 0, 0, 1, 10, 0, 0, 2]);
        f.extend_from_slice(&[0, 9]);
        f.extend_from_slice(&dport.to_be_bytes());
        f.extend_from_slice(&[0, 8, 0, 0]);
        f
    }

    #[test]
    fn counters_follow_names_across_changes() {
        let rules = parse_rules("a proto udp dport 1\nb proto udp dport 2\n").unwrap();
        let live = LiveRules::new(Some(rules), 2, 64, None).unwrap();
        let mut r0 = live.reader(0);
        let mut r1 = live.reader(1);
        assert!(r0.admit(LinkType::Ethernet, &udp(1), 100));
        assert!(r1.admit(LinkType::Ethernet, &udp(1), 100));
        assert!(r1.admit(LinkType::Ethernet, &udp(2), 50));
        assert!(!r0.admit(LinkType::Ethernet, &udp(3), 50));
        let l = live.delete("b").unwrap();
        assert_eq!(l.rules.len(), 1);
        assert_eq!((l.rules[0].packets, l.rules[0].bytes), (2, 200));
        // The next packet of either worker is judged by the new rules.
        assert!(!r1.admit(LinkType::Ethernet, &udp(2), 50));
        assert!(!r0.admit(LinkType::Ethernet, &udp(2), 50));
        assert!(r0.admit(LinkType::Ethernet, &udp(1), 100));
        let l = live
            .add(Rule::parse("b proto udp dport 2").unwrap())
            .unwrap();
        assert_eq!(l.rules[0].packets, 3);
        // 'b' was deleted and added again: it keeps its history.
        assert_eq!(l.rules[1].packets, 1);
        assert!(r1.admit(LinkType::Ethernet, &udp(2), 50));
        drop(r1);
        assert_eq!(live.list().rules[1].packets, 2);
        assert!(live.add(Rule::parse("a").unwrap()).is_err());
        assert!(live.delete("zz").is_err());
    }

    #[test]
    fn with_a_tcpdump_expression_first() {
        let base = vec![
            Insn::stmt(cbpf::LD_LEN, 0),
            Insn::jump(cbpf::JGT_K, 40, 0, 1),
            Insn::stmt(cbpf::RET_K, 1),
            Insn::stmt(cbpf::RET_K, 0),
        ];
        let live = LiveRules::new(
            Some(parse_rules("a proto udp dport 1").unwrap()),
            1,
            64,
            Some(base),
        )
        .unwrap();
        let prog = from_sys(&live.kernel_program().unwrap());
        let f = udp(1);
        assert_eq!(cbpf::run(&prog, &f, 60), 64);
        assert_eq!(cbpf::run(&prog, &f, 40), 0);
        assert_eq!(cbpf::run(&prog, &udp(2), 60), 0);
    }

    #[test]
    fn without_rules_everything_passes_until_one_is_added() {
        let live = LiveRules::new(None, 1, 64, None).unwrap();
        let mut r = live.reader(0);
        assert!(r.admit(LinkType::Ethernet, &udp(7), 60));
        assert_eq!(
            from_sys(&live.kernel_program().unwrap()),
            vec![Insn::stmt(cbpf::RET_K, 64)]
        );
        assert!(!live.list().active);
        live.add(Rule::parse("one proto udp dport 1").unwrap())
            .unwrap();
        assert!(!r.admit(LinkType::Ethernet, &udp(7), 60));
        assert!(r.admit(LinkType::Ethernet, &udp(1), 60));
        assert!(live.list().active);
    }
}
