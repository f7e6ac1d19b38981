//! The command-line grammar.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use tapflow_engine::sink::flow::export::ExportRate;

use crate::units;

/// `--export-rate`: `auto`, `max`, or a count of messages a second (`2k`).
fn export_rate(s: &str) -> Result<ExportRate, String> {
    match units::count(s) {
        Ok(n) => n.to_string().parse(),
        Err(_) => s.parse(),
    }
}

/// tapflow: line-rate passive network monitor.
#[derive(Debug, Parser)]
#[command(name = "tapflow", version, about, propagate_version = true)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
    /// Read options from this TOML file, whose keys are the subcommand's long flags
    /// (`rotate-seconds = "1h"`); a flag given here wins over its key.
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Capture packet headers from an interface or a file into pcapng/pcap.
    Capture(CaptureArgs),
    /// Meter bidirectional flows from an interface or a file and export them (IPFIX, NetFlow,
    /// JSON, CSV; a table on stdout by default). Takes every option of `capture`.
    Flows(CaptureArgs),
    /// Receive forwarded header datagrams from probes and record them into pcapng.
    Recv(RecvArgs),
    /// Collect flows from exporters (IPFIX over UDP and TCP, NetFlow v9/v5, sFlow v5) and keep
    /// them: re-encoded to files or collectors; per exporter, every record accounted for.
    Collect(CollectArgs),
    /// Generate traffic on an interface (AF_PACKET, a batch of frames per sendmmsg).
    Gen(GenArgs),
    /// List and change the rules of a running capture.
    Rules(RulesArgs),
    /// Print the statistics of a running capture, once or refreshing.
    Stats(StatsArgs),
    /// Nagios/Icinga plugin: drop ratio and packet rate of a running capture against
    /// thresholds (exit 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN).
    Check(CheckArgs),
    /// Bridge two interfaces through AF_XDP (an inline tap): frames from each leave on the
    /// other from the same memory, and their headers are recorded as `capture` records them.
    /// Takes every option of `capture`; -i and -o are the two sides.
    Bridge(BridgeArgs),
    /// Check the NIC settings that make a capture lie or drop (offloads, rx ring, MTU,
    /// promiscuous mode, queues); --fix changes the safe ones.
    Doctor(DoctorArgs),
    /// Size the capture ring from a packet rate and the cost of each packet: the SEPCOM model
    /// adapted to TPACKET_V3 blocks (bounds on the block size, a recommended geometry, the
    /// loss in a stall or a burst).
    Plan(PlanArgs),
    /// Serve the web console over a flow store: traffic over time, top talkers, flow search,
    /// exporter and probe health.
    Console(ConsoleArgs),
    /// Ask the flow store: top-N (-s), aggregation (-a), time series (--every), totals (-I) or
    /// the flows themselves, in a time window (-t) and through a filter (trailing words).
    Query(QueryArgs),
    /// Import flow records written by `tapflow flows` (--json, --csv, --export json:/csv:)
    /// into a store directory.
    Import(ImportArgs),
    /// Watch traffic for floods: per-destination packets, bits and flows a second against
    /// thresholds (default 20,000 packets/s or 1 Gbit/s at one destination), from an interface
    /// (-i), a capture file (-r), exporters (-l) or a store (--store -t); one line per alert
    /// start and end, with its evidence (docs/detect.md).
    Detect(DetectArgs),
    /// Anonymise the IP addresses of a capture file (Crypto-PAn, prefix-preserving, keyed),
    /// fixing the checksums over them; pcap, pcapng, compressed or not.
    Anonymize(AnonymizeArgs),
    /// Writes the man pages and shell completions made from these definitions (for
    /// installers: scripts/install.sh runs it).
    #[command(hide = true)]
    Generate(GenerateArgs),
}

/// `tapflow generate`.
#[derive(Debug, Args)]
pub struct GenerateArgs {
    /// What to write.
    #[command(subcommand)]
    pub what: GenerateWhat,
}

/// What `tapflow generate` writes.
#[derive(Debug, Subcommand)]
pub enum GenerateWhat {
    /// One man page per command (tapflow.1, tapflow-capture.1, ...) into DIR.
    Man {
        /// The directory to write the pages in.
        dir: PathBuf,
    },
    /// The completion script for a shell, on stdout.
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

/// Which running capture to talk to.
#[derive(Debug, Args)]
pub struct ProbeArgs {
    /// The capture on this interface in this network namespace (its control socket
    /// /run/tapflow/IFACE.NETNS.PID.sock).
    #[arg(short = 'i', long, conflicts_with = "control", global = true)]
    pub interface: Option<String>,
    /// The capture serving this control socket (default: the only one in /run/tapflow).
    #[arg(long, value_name = "PATH", global = true)]
    pub control: Option<PathBuf>,
}

/// `tapflow rules`.
#[derive(Debug, Args)]
pub struct RulesArgs {
    /// The capture.
    #[command(flatten)]
    pub probe: ProbeArgs,
    /// What to do.
    #[command(subcommand)]
    pub action: RulesAction,
}

/// What `tapflow rules` does.
#[derive(Debug, Subcommand)]
pub enum RulesAction {
    /// The rules in order, with the packets and bytes each matched first.
    List,
    /// Adds a rule at the end: NAME [proto P] [src PREFIX] [dst PREFIX] [sport RANGE]
    /// [dport RANGE] [both].
    Add {
        /// The rule's words.
        #[arg(required = true, num_args = 1..)]
        rule: Vec<String>,
    },
    /// Removes the rule with this name.
    Del {
        /// The rule's name.
        name: String,
    },
    /// Replaces all rules with those of a rule file.
    Load {
        /// The rule file.
        file: PathBuf,
    },
}

/// `tapflow stats`.
#[derive(Debug, Args)]
pub struct StatsArgs {
    /// The capture.
    #[command(flatten)]
    pub probe: ProbeArgs,
    /// Print again at this interval (`1`, `500ms`, `1m`; seconds), with rates, until
    /// interrupted.
    #[arg(long, value_name = "DURATION", value_parser = units::secs)]
    pub watch: Option<f64>,
    /// One JSON object (total and per worker) instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Stop after this many readings (with `--watch` or `--svg`).
    #[arg(long, value_name = "N", value_parser = units::count)]
    pub count: Option<u64>,
    /// Draw the rates over time (received, recorded, filtered, each drop) as an SVG chart in
    /// FILE, rewritten after every reading; reads every second unless `--watch` says otherwise.
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,
}

/// `tapflow check`.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The capture.
    #[command(flatten)]
    pub probe: ProbeArgs,
    /// Warning thresholds DROP,RATE: Nagios ranges for the drop ratio in percent and the
    /// packet rate in packets/s (e.g. `1,1000:` warns above 1% drops or below 1000 pkt/s).
    #[arg(short = 'w', long, value_name = "DROP,RATE")]
    pub warning: Option<String>,
    /// Critical thresholds DROP,RATE, as for -w.
    #[arg(short = 'c', long, value_name = "DROP,RATE")]
    pub critical: Option<String>,
    /// Time between the two readings the rates come from (`1`, `500ms`; seconds).
    #[arg(long, default_value = "1", value_name = "DURATION", value_parser = units::secs)]
    pub interval: f64,
}

/// Output file format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FormatArg {
    /// pcapng with ns timestamps, drop counts and statistics blocks.
    Pcapng,
    /// Classic pcap with ns timestamps, for old tools.
    Pcap,
}

/// Transport protocol of generated frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ProtoArg {
    /// UDP.
    Udp,
    /// TCP (ACK|PSH segments).
    Tcp,
}

/// `tapflow capture`.
#[derive(Debug, Args)]
#[command(group(
    clap::ArgGroup::new("input").required(true).args(["interface", "read", "list_interfaces"])
))]
pub struct CaptureArgs {
    /// Interface to capture on (`any`: every interface of the network namespace, with Linux
    /// cooked v2 headers naming the interface and direction; no promiscuous mode).
    #[arg(short = 'i', long)]
    pub interface: Option<String>,
    /// Capture file to read instead (pcap, pcapng or ERF; `-`: standard input, read to its end).
    #[arg(short = 'r', long)]
    pub read: Option<PathBuf>,
    /// Print the interfaces that can be captured on, with their state, and exit (as tcpdump
    /// -D).
    #[arg(short = 'D', long)]
    pub list_interfaces: bool,
    /// Output file (written as NAME.part, renamed when complete; `-`: standard output, as a
    /// stream for `tshark -r -`). With strftime conversions (`-w t-%Y%m%d-%H%M%S.pcap`) each
    /// file is named by the local time it opens. Without -w, --forward or a flow output,
    /// `capture` prints one line per packet.
    #[arg(short = 'w', long)]
    pub write: Option<PathBuf>,
    /// Output format (default: from -w's name, `.pcap` classic pcap, pcapng otherwise).
    #[arg(long, value_enum)]
    pub format: Option<FormatArg>,
    /// Bytes of each packet to keep (`0`: the whole packet, up to 256K).
    #[arg(short = 's', long, default_value = "128", value_parser = units::size_u32)]
    pub snaplen: u32,
    /// Do not put the interface in promiscuous mode (as tcpdump -p): only traffic to and from
    /// this host is seen.
    #[arg(short = 'p', long = "no-promiscuous-mode")]
    pub no_promiscuous: bool,
    /// Capture filter in tcpdump syntax, compiled to classic BPF by libpcap: run in the kernel
    /// on an interface, in user space on a file (`-r`).
    #[arg(short = 'f', long)]
    pub filter: Option<String>,
    /// Rule file: only packets a rule matches are kept; one rule a line, `NAME [proto P]
    /// [src PREFIX] [dst PREFIX] [sport RANGE] [dport RANGE] [both]`, `#` comments; changed
    /// while capturing with `tapflow rules`.
    #[arg(long, value_name = "FILE")]
    pub rules: Option<PathBuf>,
    /// Control socket for `tapflow rules`, `stats` and `check` (live capture default:
    /// /run/tapflow/IFACE.NETNS.PID.sock, which they find with -i IFACE; `none`: no socket).
    #[arg(long, value_name = "PATH|none")]
    pub control: Option<String>,
    /// Serve Prometheus metrics on http://[ADDR:]PORT/metrics (address 127.0.0.1 unless
    /// given).
    #[arg(long, value_name = "[ADDR:]PORT", value_parser = units::listen_loopback)]
    pub metrics: Option<std::net::SocketAddr>,
    /// Once the inputs are open, and before any output is, become this user, with no
    /// capability left (as tcpdump -Z; default: the `tapflow` user if it exists; `root` keeps
    /// root).
    #[arg(short = 'Z', long = "relinquish-privileges", value_name = "USER")]
    pub user: Option<String>,
    /// Workers in one PACKET_FANOUT group (symmetric hash), each with its own ring and file.
    #[arg(long, default_value = "1", value_parser = units::count_usize)]
    pub threads: usize,
    /// PACKET_FANOUT group id (default: derived from the process id).
    #[arg(long)]
    pub fanout_group: Option<u16>,
    /// Stop after this many packets are recorded (`1000`, `10k`, `1M`).
    #[arg(short = 'c', long, value_name = "COUNT", value_parser = units::count)]
    pub count: Option<u64>,
    /// Stop after this long (`30`, `90s`, `5m`, `1h`; seconds).
    #[arg(long, value_name = "DURATION", value_parser = units::period)]
    pub duration: Option<Duration>,
    /// Ring block size (tp_block_size): a power-of-two multiple of the page size (`1M`).
    #[arg(long, value_name = "SIZE", value_parser = units::size)]
    pub block_size: Option<u64>,
    /// Ring blocks per worker (tp_block_nr); default holds 50 ms of line-rate traffic.
    #[arg(long, value_name = "COUNT", value_parser = units::count_u32)]
    pub block_count: Option<u32>,
    /// Block retire timeout (tp_retire_blk_tov; `10`, `0.5s`; milliseconds): the latency
    /// bound on quiet links.
    #[arg(long, default_value = "10", value_name = "DURATION", value_parser = units::millis_u32)]
    pub retire_ms: u32,
    /// Start a new file after this many bytes (`100M`, `1G`).
    #[arg(long, value_name = "SIZE", value_parser = units::size)]
    pub rotate_size: Option<u64>,
    /// Start a new file after this many millions of bytes, as tcpdump -C (`100`; or a size
    /// with its unit, `100M`).
    #[arg(short = 'C', long, value_name = "MB", value_parser = units::size_mb, conflicts_with = "rotate_size")]
    pub file_size: Option<u64>,
    /// Start a new file after this long (`3600`, `15m`, `1h`; seconds; tcpdump's -G).
    #[arg(short = 'G', long, value_name = "DURATION", value_parser = units::period)]
    pub rotate_seconds: Option<Duration>,
    /// Keep at most this many files per worker, removing the oldest: a ring of files (as
    /// tcpdump -W; needs rotation).
    #[arg(short = 'W', long, value_name = "COUNT", value_parser = units::count_usize)]
    pub file_count: Option<usize>,
    /// No live status line.
    #[arg(short = 'q', long)]
    pub quiet: bool,
    /// A run that lost packets (dropped by the kernel or by tapflow) exits with code 1.
    #[arg(long)]
    pub strict: bool,
    /// Write the final accounting as JSON to this file.
    #[arg(long)]
    pub summary_json: Option<PathBuf>,
    /// The capture filter as trailing words, as tcpdump takes it (`tapflow capture -i eth0
    /// tcp port 443`): the same as -f.
    #[arg(
        value_name = "EXPRESSION",
        trailing_var_arg = true,
        conflicts_with = "filter"
    )]
    pub expression: Vec<String>,
    /// Forward header records in UDP datagrams to these collectors (`tapflow recv`).
    #[arg(long, value_name = "HOST:PORT[,HOST:PORT...]", value_delimiter = ',')]
    pub forward: Vec<String>,
    /// How records are spread over the collectors.
    #[arg(long, value_enum, default_value_t = BalanceArg::Flow, requires = "forward")]
    pub balance: BalanceArg,
    /// Size of the IP packets carrying the datagrams (default: the route's MTU to the first
    /// collector; 1500, 4124, 9000, up to 65535 on loopback).
    #[arg(long, value_name = "SIZE", value_parser = units::size_u32, requires = "forward")]
    pub mtu: Option<u32>,
    /// A datagram leaves at the latest this long after its first record (`10`, `0.1s`;
    /// milliseconds).
    #[arg(long, default_value = "10", value_name = "DURATION", value_parser = units::millis_u32,
          requires = "forward")]
    pub flush_ms: u32,
    /// This probe's id in the datagrams (the collector names its interface after it).
    #[arg(long, default_value_t = 0, requires = "forward")]
    pub probe_id: u32,
    /// Where live packets come from: `packet`, an AF_PACKET TPACKET_V3 ring; `xdp`, AF_XDP
    /// sockets fed by an XDP program before the stack, one worker per receive queue, taking
    /// the frames from the stack (for a tap or SPAN port: docs/xdp.md).
    #[arg(long, value_enum, default_value_t = SourceArg::Packet)]
    pub source: SourceArg,
    /// UMEM frames of 4 KiB per receive queue with `--source xdp` (a power of two): the most
    /// frames that wait for the reader (default 64 MiB per queue).
    #[arg(long, value_name = "N", default_value_t = 16384)]
    pub xdp_frames: u32,
    /// With `--source xdp`: let every frame go on to the stack and take a copy of its first
    /// snaplen bytes through a BPF ring buffer (one worker), for a host's own interface.
    #[arg(long)]
    pub pass: bool,
    /// Anonymise the IPv4 and IPv6 addresses with Crypto-PAn (prefix-preserving, keyed) under
    /// the key in this file (32 bytes, or 64 hex digits): in the recorded and forwarded headers,
    /// with their checksums, and in flow records (docs/anonymize.md).
    #[arg(long, value_name = "KEYFILE")]
    pub anonymize: Option<PathBuf>,
    /// Flow metering and export.
    #[command(flatten)]
    pub flows: FlowArgs,
    /// Flood detection on the packets (alerts on standard error; docs/detect.md).
    #[command(flatten)]
    pub detect: DetectOpts,
}

/// Where live packets come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SourceArg {
    /// AF_PACKET TPACKET_V3 ring.
    Packet,
    /// AF_XDP through an XDP program.
    Xdp,
}

/// Enrichment: AS, country and the operator's networks for both addresses of every stored flow
/// (docs/enrichment.md). Files are reloaded when they change and on SIGHUP.
#[derive(Debug, Clone, Default, Args)]
pub struct EnrichArgs {
    /// Country data: an MMDB file (GeoLite2-Country, DB-IP, IPinfo, `@ip-location-db`), or CSV
    /// ranges FIRST,LAST,COUNTRY.
    #[arg(long, value_name = "FILE")]
    pub geoip: Option<PathBuf>,
    /// AS data: an MMDB file (GeoLite2-ASN, DB-IP, IPinfo), or CSV ranges FIRST,LAST,ASN,NAME
    /// (`@ip-location-db/asn`).
    #[arg(long, value_name = "FILE")]
    pub asn: Option<PathBuf>,
    /// The operator's networks: TOML or CSV, prefix -> name, role, site, tenant and any other
    /// attributes; the longest prefix wins.
    #[arg(long, value_name = "FILE")]
    pub networks: Option<PathBuf>,
    /// The operator's interfaces: CSV exporter,index,name,speed,description, the names and
    /// speeds (1G, 10G) of exporters' interfaces, kept beside the flows for query and the
    /// console.
    #[arg(long, value_name = "FILE")]
    pub interfaces: Option<PathBuf>,
}

/// Flow metering options, shared by `capture` (where any output turns metering on) and `flows`.
#[derive(Debug, Args)]
pub struct FlowArgs {
    /// Export flow records to collectors: ipfix://HOST:PORT (UDP), ipfix+tcp://HOST:PORT,
    /// nfv9://HOST:PORT, nfv5://HOST:PORT.
    #[arg(long, value_name = "URL[,URL...]", value_delimiter = ',')]
    pub export: Vec<String>,
    /// Write flow records as JSON lines to this file ('-' for stdout).
    #[arg(long, value_name = "PATH|-")]
    pub json: Option<PathBuf>,
    /// Write flow records as CSV to this file ('-' for stdout).
    #[arg(long, value_name = "PATH|-")]
    pub csv: Option<PathBuf>,
    /// Keep flow records in the Parquet store in this directory (as `tapflow collect --store`),
    /// without a network hop.
    #[arg(long, value_name = "DIR")]
    pub store: Option<PathBuf>,
    /// Enrichment of the flows the store keeps.
    #[command(flatten)]
    pub enrich: EnrichArgs,
    /// A flow record never spans more than this long (`300`, `5m`; seconds); the flow
    /// continues in a new one.
    #[arg(long, value_name = "DURATION", default_value = "300", value_parser = units::secs_u64)]
    pub active_timeout: u64,
    /// End a flow after this long without a packet (`60`, `2m`; seconds); repeat with PROTO=
    /// for one protocol class (tcp, udp, icmp, other, closed = TCP after FIN both ways or RST).
    /// Defaults: tcp=300 udp=60 icmp=60 other=60 closed=5.
    #[arg(long, value_name = "[PROTO=]DURATION", value_delimiter = ',')]
    pub idle_timeout: Vec<String>,
    /// Most flows held at once, over all workers (`2M`); the oldest is ended (reason 5) for a
    /// new one.
    #[arg(long, default_value = "2M", value_name = "COUNT", value_parser = units::count_usize)]
    pub max_flows: usize,
    /// IPFIX observation domain (NetFlow v9 source id).
    #[arg(long, default_value_t = 1)]
    pub observation_domain: u32,
    /// Largest IP packet sent to a UDP collector (IPFIX/NetFlow messages are sized to fit;
    /// default: the MTU of the route to each collector, at most 9000).
    #[arg(long, value_name = "SIZE", value_parser = units::size_u32)]
    pub export_mtu: Option<u32>,
    /// Pace of the messages to each UDP collector. 'auto' (the default): 1.5 MB/s, i.e. 166
    /// messages of 9000 bytes a second or 1000 of 1500 bytes, which a default nfcapd on the
    /// same host takes without loss on a busy machine. N: N messages a second, evenly spaced.
    /// 'max' (or 0): as fast as the socket takes them; a collector's socket buffer then drops
    /// most of a burst. Paced, an offline run of a big trace takes time: the records of 100k
    /// flows (935 messages of 9000 bytes) take about 6 s. Where loss matters, export over TCP
    /// (ipfix+tcp://), which is never paced.
    #[arg(long, value_name = "auto|MSGS|max", default_value = "auto", value_parser = export_rate)]
    pub export_rate: ExportRate,
}

impl FlowArgs {
    /// Whether any flow output was asked for.
    pub fn any_output(&self) -> bool {
        !self.export.is_empty() || self.json.is_some() || self.csv.is_some() || self.store.is_some()
    }
}

/// How forwarded records are spread over collectors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BalanceArg {
    /// By the symmetric 5-tuple hash: both directions of a connection reach one collector.
    Flow,
    /// Whole datagrams to each collector in turn.
    Rr,
}

/// `tapflow recv`.
#[derive(Debug, Args)]
pub struct RecvArgs {
    /// UDP port to receive datagrams on, on every address (`5000`) or one (`ADDR:PORT`).
    #[arg(short = 'l', long, value_name = "[ADDR:]PORT", value_parser = units::listen_any)]
    pub listen: std::net::SocketAddr,
    /// Output file (pcapng; written as NAME.part, renamed when complete).
    #[arg(short = 'w', long)]
    pub write: PathBuf,
    /// Accept datagrams only from these networks (CIDR, e.g. 10.0.0.0/8,192.0.2.7).
    #[arg(long, value_name = "CIDR[,CIDR...]", value_delimiter = ',')]
    pub allow: Vec<String>,
    /// Start a new file after this many bytes (`100M`, `1G`).
    #[arg(long, value_name = "SIZE", value_parser = units::size)]
    pub rotate_size: Option<u64>,
    /// Start a new file after this long (`3600`, `15m`, `1h`; seconds).
    #[arg(long, value_name = "DURATION", value_parser = units::period)]
    pub rotate_seconds: Option<Duration>,
    /// Socket receive buffer (SO_RCVBUF).
    #[arg(long, default_value = "64M", value_name = "SIZE", value_parser = units::size_usize)]
    pub rcvbuf: usize,
    /// Serve Prometheus metrics (totals, bad datagrams by sender and reason, each probe
    /// interface's records and losses) on http://[ADDR:]PORT/metrics (address 127.0.0.1 unless
    /// given).
    #[arg(long, value_name = "[ADDR:]PORT", value_parser = units::listen_loopback)]
    pub metrics: Option<std::net::SocketAddr>,
    /// Once the inputs are open, and before any output is, become this user, with no
    /// capability left (as tcpdump -Z; default: the `tapflow` user if it exists; `root` keeps
    /// root).
    #[arg(short = 'Z', long = "relinquish-privileges", value_name = "USER")]
    pub user: Option<String>,
    /// Stop after this long (`30`, `90s`, `5m`, `1h`; seconds).
    #[arg(long, value_name = "DURATION", value_parser = units::period)]
    pub duration: Option<Duration>,
    /// No live status line.
    #[arg(short = 'q', long)]
    pub quiet: bool,
    /// Write the final accounting as JSON to this file.
    #[arg(long)]
    pub summary_json: Option<PathBuf>,
    /// Anonymise the IPv4 and IPv6 addresses with Crypto-PAn (prefix-preserving, keyed) under
    /// the key in this file (32 bytes, or 64 hex digits): in the recorded and forwarded headers,
    /// with their checksums, and in flow records (docs/anonymize.md).
    #[arg(long, value_name = "KEYFILE")]
    pub anonymize: Option<PathBuf>,
    /// Flow metering of the received records (any flow output turns it on).
    #[command(flatten)]
    pub flows: FlowArgs,
}

/// `tapflow gen`.
#[derive(Debug, Args)]
pub struct GenArgs {
    /// Interface to send on.
    #[arg(short = 'i', long)]
    pub interface: String,
    /// Ethernet frame length without FCS (60 to 9000, and at most the MTU + 14).
    #[arg(long, default_value = "60", value_name = "SIZE", value_parser = units::size_usize)]
    pub size: usize,
    /// Frames to send (`1000`, `10k`, `1M`).
    #[arg(short = 'c', long, value_name = "COUNT", value_parser = units::count)]
    pub count: Option<u64>,
    /// Send for this long (`30`, `90s`, `5m`; seconds).
    #[arg(long, value_name = "DURATION", value_parser = units::period)]
    pub duration: Option<Duration>,
    /// Frames per second (`10k`, `1.488M`; default: as fast as possible).
    #[arg(long, value_name = "RATE", value_parser = units::count)]
    pub rate: Option<u64>,
    /// Distinct flows (source ports).
    #[arg(long, default_value = "1", value_name = "COUNT", value_parser = units::count_u32)]
    pub flows: u32,
    /// Transport protocol.
    #[arg(long, value_enum, default_value_t = ProtoArg::Udp)]
    pub proto: ProtoArg,
    /// Source MAC address.
    #[arg(long, default_value = "02:00:00:00:00:01")]
    pub src_mac: String,
    /// Destination MAC address (default: one no host has, as traffic on a mirror port).
    #[arg(long, default_value = "02:00:00:00:00:02")]
    pub dst_mac: String,
    /// Source IP address (v4 or v6).
    #[arg(long, default_value = "198.18.0.1")]
    pub src_ip: std::net::IpAddr,
    /// Destination IP address (v4 or v6).
    #[arg(long, default_value = "198.18.0.2")]
    pub dst_ip: std::net::IpAddr,
    /// First source port.
    #[arg(long, default_value_t = 1024)]
    pub src_port: u16,
    /// Destination port.
    #[arg(long, default_value_t = 9)]
    pub dst_port: u16,
    /// Send the packets of this capture file instead (pcap, pcapng or ERF, zstd- or
    /// gzip-compressed or not), once (see --loop), as fast as possible or at --rate; frames
    /// longer than the MTU + 14-byte Ethernet header are not sent.
    #[arg(long)]
    pub replay: Option<PathBuf>,
    /// Send the --replay file N times over; 0 repeats it until --count, --duration or a signal.
    #[arg(
        short = 'l',
        long = "loop",
        value_name = "N",
        default_value = "1",
        value_parser = units::count,
        requires = "replay"
    )]
    pub loops: u64,
    /// No progress output.
    #[arg(short = 'q', long)]
    pub quiet: bool,
    /// Write what was sent as JSON to this file.
    #[arg(long)]
    pub summary_json: Option<PathBuf>,
}

/// `tapflow bridge`.
#[derive(Debug, Args)]
pub struct BridgeArgs {
    /// The second interface: frames from -i leave on it, and frames from it leave on -i.
    #[arg(short = 'o', long = "out-interface", value_name = "INTERFACE")]
    pub out_interface: String,
    /// What is recorded, as for `capture` (-i is the first interface; --xdp-frames the UMEM
    /// shared by both directions).
    #[command(flatten)]
    pub capture: CaptureArgs,
}

/// `tapflow doctor`.
#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Interface to check.
    #[arg(short = 'i', long)]
    pub interface: String,
    /// Change what is safe to change: receive and segmentation offloads off, the rx ring to its
    /// maximum (never the MTU, VLAN stripping, promiscuous mode or the queues). Needs root.
    #[arg(long)]
    pub fix: bool,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
    /// Explain the checks that pass too (by default they take one line each).
    #[arg(short = 'v', long)]
    pub verbose: bool,
    /// Workers the capture will run (checked against the NIC's receive queues).
    #[arg(long, default_value = "1", value_parser = units::count_usize)]
    pub threads: usize,
    /// Bytes of each packet the capture will keep (checked against the MTU).
    #[arg(short = 's', long, default_value = "128", value_parser = units::size_u32)]
    pub snaplen: u32,
}

/// `tapflow plan`.
#[derive(Debug, Args)]
pub struct PlanArgs {
    /// Packets per second on the link (`200k`, `1.488M`); by default the line rate of
    /// --frame-size frames at --speed or at the speed of -i.
    #[arg(long, value_parser = units::rate, value_name = "PPS")]
    pub rate: Option<f64>,
    /// Link speed in Mbit/s (`10k` for 10 Gbit/s), for the line rate.
    #[arg(long, value_name = "MBITS", value_parser = units::count_u32, conflicts_with = "rate")]
    pub speed: Option<u32>,
    /// The interface whose link speed sets the line rate.
    #[arg(short = 'i', long, conflicts_with_all = ["rate", "speed"])]
    pub interface: Option<String>,
    /// Frame size on the wire in bytes, FCS included (64 is the worst case).
    #[arg(long, default_value = "64", value_name = "SIZE", value_parser = units::size_u32)]
    pub frame_size: u32,
    /// Bytes kept of each packet, as for capture.
    #[arg(short = 's', long, default_value = "128", value_parser = units::size_u32)]
    pub snaplen: u32,
    /// Fanout members sharing the rate.
    #[arg(long, default_value = "1", value_parser = units::count_usize)]
    pub threads: usize,
    /// Block retire timeout (milliseconds), as for capture.
    #[arg(long, default_value = "10", value_name = "DURATION", value_parser = units::millis_u32)]
    pub retire_ms: u32,
    /// The consumer's cost per packet (`85`, `0.1us`; nanoseconds; default: measured by
    /// bench/plan.py for capture writing pcapng).
    #[arg(long, value_name = "DURATION", value_parser = units::nanos)]
    pub cost_ns: Option<f64>,
    /// The consumer's cost per block (nanoseconds; default: measured by bench/plan.py).
    #[arg(long, value_name = "DURATION", value_parser = units::nanos)]
    pub block_cost_ns: Option<f64>,
    /// The stall of the consumer the recommended ring rides out without loss (`50`, `0.1s`;
    /// milliseconds).
    #[arg(long, default_value = "50", value_name = "DURATION", value_parser = units::millis)]
    pub hold_ms: f64,
    /// Ring memory per member at most (`64M`, `1G`).
    #[arg(long, value_parser = units::size, value_name = "SIZE")]
    pub memory: Option<u64>,
    /// Judge this block size instead of recommending one.
    #[arg(long, value_parser = units::size, value_name = "SIZE")]
    pub block_size: Option<u64>,
    /// Judge this many blocks instead of recommending a count.
    #[arg(long, value_name = "COUNT", value_parser = units::count_u32)]
    pub block_count: Option<u32>,
    /// Predict the loss when the consumer stops for this long (`20`, `0.1s`; milliseconds).
    #[arg(long, value_name = "DURATION", value_parser = units::millis)]
    pub stall_ms: Option<f64>,
    /// Predict the loss in a burst of RATE packets/s lasting MS milliseconds (`3M:50`).
    #[arg(long, value_name = "RATE:MS")]
    pub burst: Option<String>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
    /// Also draw the loss against the length of a stall, for the chosen ring and for half and
    /// twice as many blocks, as an SVG file.
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,
}

/// `tapflow console`.
#[derive(Debug, Args)]
pub struct ConsoleArgs {
    /// The flow store to read (the directory `tapflow collect --store` writes).
    #[arg(long, value_name = "DIR", required_unless_present = "hash_password")]
    pub store: Option<PathBuf>,
    /// Where to listen. A non-loopback address needs --http-auth.
    #[arg(long, value_name = "[HOST:]PORT", default_value = "127.0.0.1:8080", value_parser = units::listen_loopback)]
    pub http: std::net::SocketAddr,
    /// Credentials: `user:hash` lines, argon2 (`tapflow console --hash-password`) or bcrypt
    /// (`htpasswd -nB user`) hashes; every request then needs HTTP Basic authentication.
    #[arg(long, value_name = "FILE")]
    pub http_auth: Option<PathBuf>,
    /// Serve HTTPS with this PEM certificate chain (with --tls-key).
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The PEM private key for --tls-cert.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// A name the console is reached by (a request naming another host than its address, or
    /// localhost on loopback, is refused); repeatable.
    #[arg(long, value_name = "NAME")]
    pub http_host: Vec<String>,
    /// A tapflow probe's metrics address (its --metrics) to show in the health view; repeatable.
    #[arg(long, value_name = "HOST:PORT")]
    pub probe: Vec<String>,
    /// Seconds an answer may wait for its client to take any of it; then the connection is
    /// closed and the room its answer held is freed (nginx's send_timeout).
    #[arg(long, value_name = "SECONDS", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub send_timeout: u64,
    /// Print an argon2 hash of the password read from standard input, for --http-auth, and exit.
    #[arg(long)]
    pub hash_password: bool,
}

/// `tapflow query`.
#[derive(Debug, Args)]
pub struct QueryArgs {
    /// The store directory (what `--store` of the collector wrote).
    #[arg(
        short = 'R',
        long,
        value_name = "DIR",
        required_unless_present = "clickhouse"
    )]
    pub store: Option<PathBuf>,
    // ---- ClickHouse (docs/clickhouse.md) ----
    /// Ask a ClickHouse server (or cluster) the collector inserts into instead of a directory:
    /// `http://HOST:8123/DB`, or every shard's `HOST:PORT` and `?cluster=NAME`.
    #[arg(long, value_name = "URL", conflicts_with = "store")]
    pub clickhouse: Option<String>,
    /// The time window, UTC unless a zone is given: `2026-11-25T10:00/15m`, `START-END`,
    /// `START` (to the end), `last 1h`. A flow belongs to the window its start lies in.
    #[arg(short = 't', long, value_name = "WINDOW")]
    pub time: Option<String>,
    /// Top-N of a key, nfdump style: `srcip/bytes`, `dstport/flows`, `proto/packets` (keys:
    /// srcip dstip ip srcport dstport port proto exporter inif outif vlan; orders: flows
    /// packets bytes bps pps; default bytes).
    #[arg(short = 's', long, value_name = "KEY[/ORDER]", conflicts_with_all = ["aggregate", "summary"])]
    pub stat: Option<String>,
    /// Aggregate by these keys, one row per distinct tuple: `srcip,dstport`, `srcip4/24`.
    #[arg(short = 'a', long, value_name = "KEYS", conflicts_with_all = ["summary", "every"])]
    pub aggregate: Option<String>,
    /// What -a orders by (flows, packets, bytes, bps, pps).
    #[arg(short = 'O', long, default_value = "bytes", value_name = "ORDER")]
    pub order: String,
    /// Rows (-s, -a) or keys of a series shown at most; 0 for all.
    #[arg(short = 'n', long, default_value_t = 10, value_name = "N")]
    pub top: usize,
    /// A time series in buckets of this width (`1m`, `5m`, `1h`); with -s, one series per
    /// key of the top N.
    #[arg(long, value_name = "DURATION", conflicts_with = "summary")]
    pub every: Option<String>,
    /// Totals in nfdump's words (Flows:, Packets:, Bytes:, per protocol).
    #[arg(short = 'I', long)]
    pub summary: bool,
    /// List at most this many flows (the default output: flows by time).
    #[arg(short = 'c', long, value_name = "N")]
    pub count: Option<u64>,
    /// Print CSV.
    #[arg(long, conflicts_with = "json")]
    pub csv: bool,
    /// Print JSON lines.
    #[arg(long)]
    pub json: bool,
    /// Read the flows themselves, never a rollup tier.
    #[arg(long)]
    pub raw: bool,
    /// Print what was read (tier, files, row groups, rows) on stderr.
    #[arg(short = 'v', long)]
    pub stats: bool,
    /// Instead of flows: what each interface carried in the window, from sFlow counter
    /// samples (octets, packets, errors and discards in and out; docs/query.md).
    #[arg(long, conflicts_with_all = ["stat", "aggregate", "summary", "every", "raw"])]
    pub interfaces: bool,
    /// Instead of flows: the flood alerts `--detect` kept in the store that overlap the window,
    /// one per line with its start, end (or `running`), target, kind, peak rates against the
    /// limits, top sources and the query words that show its flows (docs/detect.md).
    #[arg(long, conflicts_with_all = ["stat", "aggregate", "summary", "every", "raw", "interfaces", "csv"])]
    pub alerts: bool,
    /// Threads scanning files (default: the CPUs).
    #[arg(long, value_name = "N")]
    pub threads: Option<usize>,
    /// The filter: `src net 10.0.0.0/8 and dst port 443`, `proto udp`, `not port 53`...
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "FILTER"
    )]
    pub filter: Vec<String>,
}

/// `tapflow collect`.
#[derive(Debug, Args)]
pub struct CollectArgs {
    /// Listeners: ipfix://ADDR[:PORT] (UDP, port 4739), ipfix+tcp://ADDR[:PORT],
    /// nfv9://ADDR[:PORT] and nfv5://ADDR[:PORT] (2055), sflow://ADDR[:PORT] (6343). A UDP
    /// listener takes all four protocols.
    #[arg(
        short = 'l',
        long,
        value_name = "URL[,URL...]",
        value_delimiter = ',',
        required = true
    )]
    pub listen: Vec<String>,
    /// Keep the flows in a Parquet store in this directory (hourly zstd files, rollups,
    /// interface names and exporter counters; docs/store.md).
    #[arg(long, value_name = "DIR")]
    pub store: Option<PathBuf>,
    /// Delete the store's partitions older than this (`30d`, `12h`; units s, m, h, d, w).
    #[arg(long, value_name = "AGE", requires = "store", value_parser = tapflow_store::parse_age)]
    pub retain: Option<std::time::Duration>,
    /// Keep the store's files under this size (e.g. 50G): the oldest go first.
    #[arg(long, value_name = "SIZE", value_parser = units::size, requires = "store")]
    pub retain_size: Option<u64>,
    /// Write the flows to a file: json:FILE, csv:FILE ('-' for stdout); repeatable.
    #[arg(short = 'w', long = "write", value_name = "FORMAT:FILE")]
    pub write: Vec<String>,
    /// Send the flows on to collectors: ipfix://HOST:PORT, ipfix+tcp://HOST:PORT,
    /// nfv9://HOST:PORT, nfv5://HOST:PORT.
    #[arg(long, value_name = "URL[,URL...]", value_delimiter = ',')]
    pub export: Vec<String>,
    /// Pace of the messages to each UDP collector of --export (as for `flows`).
    #[arg(long, value_name = "auto|MSGS|max", default_value_t)]
    pub export_rate: ExportRate,
    /// Largest IP packet sent to a UDP collector of --export.
    #[arg(long, value_name = "BYTES")]
    pub export_mtu: Option<u32>,
    /// Receive workers per UDP listener: sockets sharing its port (SO_REUSEPORT), each with
    /// its own decoder; the kernel keeps each exporter on one.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Receive buffer of each socket (SO_RCVBUFFORCE as root); memory is used only while
    /// datagrams wait in it.
    #[arg(long, default_value = "256M", value_parser = units::size_usize)]
    pub rcvbuf: usize,
    /// Accept flows only from exporters in these networks (CIDR, e.g. 10.0.0.0/8,192.0.2.7).
    #[arg(long, value_name = "CIDR[,CIDR...]", value_delimiter = ',')]
    pub allow: Vec<String>,
    /// Serve Prometheus metrics (per exporter and domain: records, sequence loss, missing
    /// templates, refused messages by reason) on http://[ADDR:]PORT/metrics.
    #[arg(long, value_name = "[ADDR:]PORT", value_parser = units::listen_loopback)]
    pub metrics: Option<std::net::SocketAddr>,
    /// Time between the stores' flushes (`5`, `500ms`, `1m`; seconds): a query sees a flow at
    /// most this long after it arrived.
    #[arg(long, value_name = "DURATION", default_value = "5", value_parser = units::period)]
    pub flush_seconds: Duration,
    /// Time between the rows of exporter counters written to the stores (`60`, `5m`; seconds).
    #[arg(long, value_name = "DURATION", default_value = "60", value_parser = units::period)]
    pub stats_seconds: Duration,
    /// Forget an exporter's templates and sequence numbers after this long without a message
    /// from it (`3600`, `1h`; seconds).
    #[arg(long, value_name = "DURATION", default_value = "3600", value_parser = units::period)]
    pub exporter_timeout: Duration,
    /// Keep the UDP exporters' templates in this directory across restarts (default with
    /// --store: DIR/state; docs/collector.md).
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// Also keep the flows in ClickHouse: `http://HOST:8123/DB`, or every shard's
    /// `HOST:PORT` and `?cluster=NAME` (docs/clickhouse.md).
    #[arg(long, value_name = "URL")]
    pub clickhouse: Option<String>,
    /// Where ClickHouse batches wait on disk while the server is away.
    #[arg(long, value_name = "DIR", requires = "clickhouse")]
    pub clickhouse_spool: Option<PathBuf>,
    /// The most the spool directory holds; past it, batches are dropped and counted.
    #[arg(long, value_name = "SIZE", default_value = "1G", value_parser = units::size, requires = "clickhouse_spool")]
    pub clickhouse_spool_size: u64,
    /// Also serve the web console over --store on this address (docs/console.md).
    #[arg(long, value_name = "[HOST:]PORT", value_parser = units::listen_loopback, requires = "store")]
    pub http: Option<std::net::SocketAddr>,
    /// Credentials for the console (`user:hash` lines); required for a non-loopback --http.
    #[arg(long, value_name = "FILE", requires = "http")]
    pub http_auth: Option<PathBuf>,
    /// Serve the console over HTTPS with this PEM certificate chain (with --tls-key).
    #[arg(long, value_name = "FILE", requires_all = ["http", "tls_key"])]
    pub tls_cert: Option<PathBuf>,
    /// The PEM private key for --tls-cert.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// A name the console is reached by besides its address (see `tapflow console`); repeatable.
    #[arg(long, value_name = "NAME", requires = "http")]
    pub http_host: Vec<String>,
    /// Anonymise the flows' addresses with Crypto-PAn under the key in this file (32 bytes, or
    /// 64 hex digits) before any store or output gets them (docs/anonymize.md).
    #[arg(long, value_name = "KEYFILE")]
    pub anonymize: Option<PathBuf>,
    /// Flood detection on the flows (alerts on standard error; docs/detect.md).
    #[command(flatten)]
    pub detect: DetectOpts,
    /// Enrichment of the flows the stores keep.
    #[command(flatten)]
    pub enrich: EnrichArgs,
    /// Stop after this long (`30`, `90s`, `5m`, `1h`; seconds).
    #[arg(long, value_name = "DURATION", value_parser = units::period)]
    pub duration: Option<Duration>,
    /// No live status line.
    #[arg(short = 'q', long)]
    pub quiet: bool,
    /// Write the final accounting as JSON to this file.
    #[arg(long)]
    pub summary_json: Option<PathBuf>,
}

// ---- the Parquet store's options and `tapflow import` ----

/// Where and how flows are kept (`--store DIR`).
#[derive(Debug, Args)]
pub struct StoreArgs {
    /// The store directory: Parquet files partitioned by hour (docs/store.md).
    #[arg(long, value_name = "DIR")]
    pub store: PathBuf,
    /// Delete what is older than this (`30d`, `12h`; units s, m, h, d, w).
    #[arg(long, value_parser = tapflow_store::parse_age, value_name = "AGE")]
    pub retain: Option<std::time::Duration>,
    /// Keep the store under this size, deleting the oldest flow files first (`50G`).
    #[arg(long, value_parser = units::size, value_name = "SIZE")]
    pub retain_size: Option<u64>,
    /// zstd level of the files once merged, and of those written at exit (1 to 22); a flush
    /// writes at level 1, which compaction rewrites at this one.
    #[arg(long, default_value_t = 9, value_parser = clap::value_parser!(i32).range(1..=22), value_name = "N")]
    pub zstd_level: i32,
}

impl StoreArgs {
    /// The store's options.
    pub fn options(&self) -> tapflow_store::ParquetOptions {
        let mut o = tapflow_store::ParquetOptions {
            retain: self.retain,
            retain_size: self.retain_size,
            close_merge: None,
            ..tapflow_store::ParquetOptions::default()
        };
        o.file.zstd_level = self.zstd_level;
        o
    }
}

/// `tapflow import`.
#[derive(Debug, Args)]
pub struct ImportArgs {
    /// The store.
    #[command(flatten)]
    pub store: StoreArgs,
    /// Files of JSON lines or CSV as `tapflow flows` writes them (`-` for stdin).
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
}

/// `tapflow anonymize`.
#[derive(Debug, Args)]
pub struct AnonymizeArgs {
    /// Capture file to read (pcap, pcapng or ERF, zstd- or gzip-compressed or not).
    #[arg(short = 'r', long)]
    pub read: PathBuf,
    /// Output file (`.zst` or `.gz` compresses it; written as NAME.part, renamed when complete).
    #[arg(short = 'w', long)]
    pub write: PathBuf,
    /// The Crypto-PAn key: a file of 32 bytes, or of 64 hex digits (`nfanon -K 0x...` takes
    /// the same key).
    #[arg(short = 'K', long, value_name = "KEYFILE")]
    pub key: PathBuf,
    /// Output format.
    #[arg(long, value_enum, default_value_t = FormatArg::Pcapng)]
    pub format: FormatArg,
    /// Bytes of each packet to keep (default: all of them).
    #[arg(short = 's', long, value_parser = units::size_u32)]
    pub snaplen: Option<u32>,
    /// No progress output.
    #[arg(short = 'q', long)]
    pub quiet: bool,
}

/// `--detect` and what it does with alerts: on `capture`, `flows` and `collect`.
#[derive(Debug, Clone, Default, Args)]
pub struct DetectOpts {
    /// Watch the traffic for floods as it passes (alerts on standard error; the outputs keep
    /// everything they would keep without it).
    #[arg(long)]
    pub detect: bool,
    /// What to do with alerts.
    #[command(flatten)]
    pub alerts: AlertArgs,
    /// Alerts on standard output rather than standard error: `Some(true)` as JSON lines
    /// (`tapflow detect` sets it).
    #[arg(skip)]
    pub stdout: Option<bool>,
}

/// Thresholds and actions of flood detection.
#[derive(Debug, Clone, Default, Args)]
pub struct AlertArgs {
    /// Thresholds per host, prefix group and in total, hold time and hysteresis (TOML;
    /// docs/detect.md). Default: 20,000 packets/s or 1 Gbit/s at one destination.
    #[arg(long, value_name = "FILE")]
    pub thresholds: Option<PathBuf>,
    /// Learn each group's and the total's limits from this store (a directory or a ClickHouse
    /// URL): 3 × the 95th percentile of the same hour over the past 7 days, per minute
    /// (docs/detect.md, "Learnt baseline"; the thresholds file's [baseline] tunes it).
    #[arg(long, value_name = "STORE")]
    pub baseline: Option<String>,
    /// POST each alert start and end as JSON to this URL (tried 4 times).
    #[arg(long, value_name = "URL")]
    pub webhook: Option<String>,
    /// Run this command (`sh -c`) for each alert start and end, the alert as JSON on its
    /// standard input and TAPFLOW_ALERT_EVENT, _TARGET and _KIND in its environment.
    #[arg(long, value_name = "COMMAND")]
    pub alert_exec: Option<String>,
    /// Announce each attacked address through ExaBGP's text API, withdrawn when its alert ends:
    /// `-` writes the commands on standard output (tapflow run as an ExaBGP process; alert
    /// lines then go to standard error), a path writes them to that named pipe.
    #[arg(long, value_name = "-|PIPE")]
    pub bgp_exabgp: Option<String>,
    /// Communities of the announced /32 or /128 (default 65535:666, BLACKHOLE of RFC 7999).
    #[arg(
        long,
        value_name = "ASN:VALUE[,...]",
        value_delimiter = ',',
        requires = "bgp_exabgp"
    )]
    pub bgp_community: Vec<String>,
    /// Next hops of the announced routes: an IPv4 address for IPv4 routes, an IPv6 address for
    /// IPv6 routes; `self` (the BGP connection's own address) for a family not given.
    #[arg(
        long,
        value_name = "ADDR[,ADDR6]",
        value_delimiter = ',',
        requires = "bgp_exabgp"
    )]
    pub bgp_next_hop: Vec<String>,
    /// Announce a flowspec rule (the destination, the flood's protocol, a reflection's source
    /// port; discard) instead of a blackhole route.
    #[arg(long, requires = "bgp_exabgp", conflicts_with_all = ["bgp_community", "bgp_next_hop"])]
    pub bgp_flowspec: bool,
}

/// `tapflow detect`.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("source").required(true).args(["interface", "read", "listen", "store"])))]
pub struct DetectArgs {
    /// Interface to watch (AF_PACKET ring, as `capture -i`).
    #[arg(short = 'i', long)]
    pub interface: Option<String>,
    /// Capture file to read (pcap, pcapng or ERF), by its own timestamps.
    #[arg(short = 'r', long)]
    pub read: Option<PathBuf>,
    /// Collect flows from exporters on these listeners (as `collect -l`: ipfix://, nfv9://,
    /// sflow://, ...); sampled records count as many packets as they stand for.
    #[arg(short = 'l', long, value_name = "URL[,URL...]", value_delimiter = ',')]
    pub listen: Vec<String>,
    /// Read the flows a store kept in a time window (-t) instead.
    #[arg(long, value_name = "DIR", requires = "time")]
    pub store: Option<PathBuf>,
    /// The store's time window, as `tapflow query -t` takes it.
    #[arg(short = 't', long, value_name = "WINDOW", requires = "store")]
    pub time: Option<String>,
    /// One JSON object per line instead of text.
    #[arg(long)]
    pub json: bool,
    /// Workers for -i (fanout members).
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Serve `/metrics` here (`tapflow_alert_active{target,kind}` with the source's counters).
    #[arg(long, value_name = "[ADDR:]PORT", value_parser = units::listen_loopback)]
    pub metrics: Option<std::net::SocketAddr>,
    /// Stop after this long (`30`, `90s`, `5m`; seconds).
    #[arg(long, value_name = "DURATION", value_parser = units::period)]
    pub duration: Option<Duration>,
    /// No start banner or summary.
    #[arg(short = 'q', long)]
    pub quiet: bool,
    /// Thresholds and actions.
    #[command(flatten)]
    pub alerts: AlertArgs,
    /// A tcpdump filter expression for -i and -r (trailing words).
    #[arg(trailing_var_arg = true, value_name = "FILTER")]
    pub filter: Vec<String>,
}
