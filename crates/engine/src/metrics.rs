//! The probe's statistics as Prometheus text (exposition format 0.0.4), served on `/metrics`;
//! the control socket's `stats` answers the same counters as JSON ([`crate::probe::Stats`]).
//!
//! Every traffic series carries `interface` (what is captured: the interface's name, or the
//! file or address read) and `worker` (a fanout member), so a dashboard sums them and tells
//! probes apart; rule counters carry `interface` and `rule`, and a rule removed or replaced
//! keeps its series at its last values (a counter never vanishes); the endpoint's own counters
//! carry `server`.
//!
//! The endpoint is the least of HTTP/1.x a scraper needs: `GET` (or `HEAD`) `/metrics`, 404 for
//! any other path, 405 for any other method, 431 for a request head over 8 KiB, one request per
//! connection. Up to 16 clients are served at once, more are turned away; a client has 5 s to
//! send its request and 5 s to take the reply, so a slow one holds up neither a scrape nor the
//! capture's exit.

use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;

use crate::EngineError;
use crate::probe::{ProbeState, WorkerSnapshot};
use crate::server::{Connection, Limits, Server, ServerCounts};
use crate::source::SourceCounter;

/// One metric family: name, type, help, and its samples as (labels, value).
struct Family {
    name: &'static str,
    kind: &'static str,
    help: &'static str,
    samples: Vec<(String, f64)>,
}

type Pick = fn(&WorkerSnapshot) -> f64;

/// The per-worker families: name, type, help, and the value. Each name is `tapflow_` + the key
/// the counter has in [`WorkerSnapshot`]'s JSON (`traffic_` + the key for those under
/// `traffic`) + `_total` for counters; a test holds the two lists together.
const PER_WORKER: &[(&str, &str, &str, Pick)] = &[
    (
        "tapflow_received_total",
        "counter",
        "Packets the kernel passed to the socket, drops included.",
        |w| w.totals.received as f64,
    ),
    (
        "tapflow_recorded_total",
        "counter",
        "Packets recorded by every output.",
        |w| w.totals.recorded as f64,
    ),
    (
        "tapflow_filtered_total",
        "counter",
        "Packets refused in user space (by the rules, or by -f on a file).",
        |w| w.totals.filtered as f64,
    ),
    (
        "tapflow_dropped_kernel_total",
        "counter",
        "Packets the kernel dropped because the ring was full (lost on the probes, for recv).",
        |w| w.totals.dropped_kernel as f64,
    ),
    (
        "tapflow_dropped_in_transit_total",
        "counter",
        "Header records a probe sent that never reached this receiver.",
        |w| w.totals.dropped_in_transit as f64,
    ),
    (
        "tapflow_dropped_ours_total",
        "counter",
        "Packets tapflow itself dropped (a full queue or a failed output).",
        |w| w.totals.dropped_ours as f64,
    ),
    (
        "tapflow_past_limit_total",
        "counter",
        "Packets received after the -c count was reached.",
        |w| w.totals.past_limit as f64,
    ),
    (
        "tapflow_freezes_total",
        "counter",
        "Times the kernel froze the ring queue.",
        |w| w.totals.freezes as f64,
    ),
    (
        "tapflow_blocks_total",
        "counter",
        "Ring blocks the kernel handed to tapflow.",
        |w| w.totals.blocks as f64,
    ),
    (
        "tapflow_bytes_total",
        "counter",
        "Original bytes of the packets received.",
        |w| w.totals.bytes as f64,
    ),
    (
        "tapflow_link_gaps_total",
        "counter",
        "Times the link went down (set down, or lost its carrier) during the capture.",
        |w| w.totals.link_gaps as f64,
    ),
    (
        "tapflow_link_down_seconds_total",
        "counter",
        "Time the link was down during the capture, a gap going on included.",
        |w| w.totals.link_down_ns as f64 / 1e9,
    ),
    (
        "tapflow_ring_fill_ratio",
        "gauge",
        "How full the ring was when the last block was taken (0 to 1).",
        |w| w.totals.ring_fill_ppm as f64 / 1e6,
    ),
    (
        "tapflow_ring_fill_peak_ratio",
        "gauge",
        "The highest ring fill since the capture started (0 to 1).",
        |w| w.totals.ring_fill_peak_ppm as f64 / 1e6,
    ),
    (
        "tapflow_traffic_packets_total",
        "counter",
        "Packets that passed the filters.",
        |w| w.traffic.packets as f64,
    ),
    (
        "tapflow_traffic_bytes_total",
        "counter",
        "Original bytes of the packets that passed the filters.",
        |w| w.traffic.bytes as f64,
    ),
    (
        "tapflow_traffic_ipv4_total",
        "counter",
        "IPv4 packets.",
        |w| w.traffic.ipv4 as f64,
    ),
    (
        "tapflow_traffic_ipv6_total",
        "counter",
        "IPv6 packets.",
        |w| w.traffic.ipv6 as f64,
    ),
    (
        "tapflow_traffic_non_ip_total",
        "counter",
        "Packets that are not IP.",
        |w| w.traffic.non_ip() as f64,
    ),
    (
        "tapflow_traffic_tcp_total",
        "counter",
        "TCP segments.",
        |w| w.traffic.tcp as f64,
    ),
    (
        "tapflow_traffic_udp_total",
        "counter",
        "UDP datagrams.",
        |w| w.traffic.udp as f64,
    ),
    (
        "tapflow_traffic_icmp_total",
        "counter",
        "ICMP and ICMPv6 messages.",
        |w| w.traffic.icmp as f64,
    ),
    (
        "tapflow_traffic_other_transport_total",
        "counter",
        "IP packets that are neither TCP, UDP nor ICMP.",
        |w| w.traffic.other_transport() as f64,
    ),
    (
        "tapflow_traffic_tcp_syn_total",
        "counter",
        "TCP segments with SYN.",
        |w| w.traffic.tcp_syn as f64,
    ),
    (
        "tapflow_traffic_tcp_fin_total",
        "counter",
        "TCP segments with FIN.",
        |w| w.traffic.tcp_fin as f64,
    ),
    (
        "tapflow_traffic_tcp_rst_total",
        "counter",
        "TCP segments with RST.",
        |w| w.traffic.tcp_rst as f64,
    ),
    (
        "tapflow_traffic_tcp_options_total",
        "counter",
        "TCP segments whose header carries options.",
        |w| w.traffic.tcp_options as f64,
    ),
    (
        "tapflow_traffic_mean_interarrival_seconds",
        "gauge",
        "Mean time between packets since the first one.",
        |w| w.traffic.mean_interarrival_seconds(),
    ),
    (
        "tapflow_traffic_mean_rate_bytes_per_second",
        "gauge",
        "Mean rate since the first packet.",
        |w| w.traffic.mean_rate_bytes_per_second(),
    ),
    (
        "tapflow_forward_failed_total",
        "counter",
        "Header records whose datagram could not be sent to a collector.",
        |w| w.live.forward_failed as f64,
    ),
    (
        "tapflow_flows_active",
        "gauge",
        "Flows in the flow table.",
        |w| w.live.flows_active as f64,
    ),
    (
        "tapflow_flows_exported_total",
        "counter",
        "Flow records ended and handed to the exporter.",
        |w| w.live.flows_exported as f64,
    ),
];

/// The Prometheus text of the probe's statistics now.
pub fn render(p: &ProbeState) -> String {
    let stats = p.stats();
    // `interface="eth0",` before the other labels, when the capture has a name.
    let iface = match p.interface() {
        "" => String::new(),
        name => format!("interface=\"{}\",", escape(name)),
    };
    let mut families: Vec<Family> = PER_WORKER
        .iter()
        .map(|&(name, kind, help, pick)| Family {
            name,
            kind,
            help,
            samples: stats
                .workers
                .iter()
                .enumerate()
                .map(|(k, w)| (format!("{iface}worker=\"{k}\""), pick(w)))
                .collect(),
        })
        .collect();
    families.push(Family {
        name: "tapflow_start_time_seconds",
        kind: "gauge",
        help: "When the capture started, in seconds since 1970.",
        samples: vec![(String::new(), stats.start_time_seconds)],
    });
    if let Some(rules) = p.rules() {
        let counts = rules.counts_ever();
        let label = |name: &str| format!("{iface}rule=\"{}\"", escape(name));
        families.push(Family {
            name: "tapflow_rule_packets_total",
            kind: "counter",
            help: "Packets the rule matched first (a removed rule's as it went).",
            samples: counts
                .iter()
                .map(|(name, p, _)| (label(name), *p as f64))
                .collect(),
        });
        families.push(Family {
            name: "tapflow_rule_bytes_total",
            kind: "counter",
            help: "Original bytes of the packets the rule matched first.",
            samples: counts
                .iter()
                .map(|(name, _, b)| (label(name), *b as f64))
                .collect(),
        });
    }
    families.extend(counter_families(p.source_metrics()));
    let mut out = String::new();
    write_families(&mut out, families);
    if let Some(g) = p.alerts() {
        out += &g.exposition();
    }
    out
}

/// Counters as families.
fn counter_families(c: Vec<SourceCounter>) -> impl Iterator<Item = Family> {
    c.into_iter().map(|c| Family {
        name: c.name,
        kind: "counter",
        help: c.help,
        samples: c.samples,
    })
}

/// The endpoint's own counters, as families labelled `server="metrics"`.
fn server_families(c: ServerCounts) -> Vec<Family> {
    let sample = |v: u64| vec![("server=\"metrics\"".to_string(), v as f64)];
    vec![
        Family {
            name: "tapflow_server_connections_total",
            kind: "counter",
            help: "Connections accepted and served.",
            samples: sample(c.served),
        },
        Family {
            name: "tapflow_server_connections_refused_total",
            kind: "counter",
            help: "Connections closed unanswered because too many were open.",
            samples: sample(c.refused),
        },
        Family {
            name: "tapflow_server_requests_timed_out_total",
            kind: "counter",
            help: "Connections closed because the client was too slow to send its request or \
                   take the reply.",
            samples: sample(c.timed_out),
        },
    ]
}

/// Appends `families` to `out` in the text format.
fn write_families(out: &mut String, families: impl IntoIterator<Item = Family>) {
    for f in families {
        let _ = writeln!(out, "# HELP {} {}", f.name, f.help);
        let _ = writeln!(out, "# TYPE {} {}", f.name, f.kind);
        for (labels, v) in f.samples {
            if labels.is_empty() {
                let _ = writeln!(out, "{} {v}", f.name);
            } else {
                let _ = writeln!(out, "{}{{{labels}}} {v}", f.name);
            }
        }
    }
}

pub(crate) fn escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// An HTTP endpoint serving [`render`] on `GET /metrics`, until dropped.
#[derive(Debug)]
pub struct MetricsServer {
    addr: SocketAddr,
    _server: Server,
}

impl MetricsServer {
    /// Listens on `addr` and serves `probe`'s statistics.
    pub fn start(addr: SocketAddr, probe: Arc<ProbeState>) -> Result<MetricsServer, EngineError> {
        MetricsServer::serve(addr, move || render(&probe))
    }

    /// Listens on `addr` and serves the counters `read` gives at each scrape (each
    /// [`SourceCounter`] a counter family), with the endpoint's own.
    pub fn start_counters(
        addr: SocketAddr,
        read: impl Fn() -> Vec<SourceCounter> + Send + Sync + 'static,
    ) -> Result<MetricsServer, EngineError> {
        MetricsServer::start_counters_and_alerts(addr, read, None)
    }

    /// [`MetricsServer::start_counters`], with `tapflow_alert_active` from `alerts` if given.
    pub fn start_counters_and_alerts(
        addr: SocketAddr,
        read: impl Fn() -> Vec<SourceCounter> + Send + Sync + 'static,
        alerts: Option<crate::detect::action::Gauge>,
    ) -> Result<MetricsServer, EngineError> {
        MetricsServer::serve(addr, move || {
            let mut out = String::new();
            write_families(&mut out, counter_families(read()));
            if let Some(g) = &alerts {
                out += &g.exposition();
            }
            out
        })
    }

    fn serve(
        addr: SocketAddr,
        render: impl Fn() -> String + Send + Sync + 'static,
    ) -> Result<MetricsServer, EngineError> {
        let listener = TcpListener::bind(addr)
            .map_err(|e| EngineError::Config(format!("--metrics {addr}: cannot listen: {e}")))?;
        let addr = listener.local_addr().unwrap_or(addr);
        let server = Server::spawn("tapflow-metrics", listener, Limits::SERVICE, move |s| {
            let _ = serve(s, &render);
        })
        .map_err(|e| EngineError::Config(format!("cannot start the metrics thread: {e}")))?;
        Ok(MetricsServer {
            addr,
            _server: server,
        })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

/// The most of a request's head (request line and header fields) `/metrics` reads.
const HEAD_LIMIT: usize = 8 << 10;

/// What `/metrics` answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    Metrics,
    NotFound,
    MethodNotAllowed,
    HeadTooLarge,
}

impl Status {
    /// The status line's code and reason, and the header fields.
    fn head(self) -> (&'static str, &'static str) {
        const TEXT: &str = "Content-Type: text/plain; charset=utf-8\r\n";
        match self {
            Status::Metrics => (
                "200 OK",
                "Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n",
            ),
            Status::NotFound => ("404 Not Found", TEXT),
            Status::MethodNotAllowed => (
                "405 Method Not Allowed",
                "Content-Type: text/plain; charset=utf-8\r\nAllow: GET, HEAD\r\n",
            ),
            Status::HeadTooLarge => ("431 Request Header Fields Too Large", TEXT),
        }
    }
}

/// Answers one HTTP/1.x request; the connection closes after it.
fn serve(s: &mut Connection<TcpStream>, render: &dyn Fn() -> String) -> std::io::Result<()> {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        if head.len() >= HEAD_LIMIT {
            return reply(s, Status::HeadTooLarge, false, "request head too large\n");
        }
        let n = s.read(&mut buf)?;
        if n == 0 {
            // A client that ends its side early has sent all it will.
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&head);
    let mut first = text.lines().next().unwrap_or("").split(' ');
    let (method, target) = (first.next().unwrap_or(""), first.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    let head_only = method == "HEAD";
    match (method, path) {
        ("GET" | "HEAD", "/metrics") => {
            let mut text = render();
            write_families(&mut text, server_families(s.server_counts()));
            reply(s, Status::Metrics, head_only, &text)
        }
        ("GET" | "HEAD", _) => reply(s, Status::NotFound, head_only, "tapflow serves /metrics\n"),
        _ => reply(s, Status::MethodNotAllowed, false, "GET only\n"),
    }
}

/// Writes a reply with `status` and `body`, or only its head.
fn reply(s: &mut impl Write, status: Status, head_only: bool, body: &str) -> std::io::Result<()> {
    let (code, fields) = status.head();
    let mut reply = format!(
        "HTTP/1.1 {code}\r\n{fields}Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    if !head_only {
        reply.push_str(body);
    }
    s.write_all(reply.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// The keys of a worker's JSON, those under `traffic` as `traffic_KEY`, without the raw
    /// arrival times (the mean inter-arrival time and rate stand for them).
    fn json_stems() -> BTreeSet<String> {
        let v = serde_json::to_value(WorkerSnapshot::default()).unwrap();
        let mut stems = BTreeSet::new();
        for (k, v) in v.as_object().unwrap() {
            match v.as_object() {
                Some(inner) => stems.extend(inner.keys().map(|i| format!("{k}_{i}"))),
                None => {
                    stems.insert(k.clone());
                }
            }
        }
        stems.remove("traffic_first_ns");
        stems.remove("traffic_last_ns");
        stems
    }

    #[test]
    fn every_metric_is_named_after_its_json_key() {
        let names: BTreeSet<String> = PER_WORKER
            .iter()
            .map(|&(name, kind, _, _)| {
                let stem = name.strip_prefix("tapflow_").unwrap();
                let stem = match kind {
                    "counter" => stem.strip_suffix("_total").unwrap(),
                    _ => stem,
                };
                stem.to_string()
            })
            .collect();
        assert_eq!(names, json_stems());
    }

    #[test]
    fn the_text_has_one_sample_per_worker_and_family() {
        let probe = ProbeState::new(vec![Default::default(), Default::default()], None);
        let text = render(&probe);
        for &(name, ..) in PER_WORKER {
            for k in 0..2 {
                assert!(
                    text.contains(&format!("\n{name}{{worker=\"{k}\"}} 0\n")),
                    "{name} {k}\n{text}"
                );
            }
        }
        assert!(text.contains("\ntapflow_start_time_seconds "), "{text}");
    }

    /// Sends `request` to `addr` and returns the whole reply.
    fn http(addr: SocketAddr, request: &[u8]) -> String {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .unwrap();
        s.write_all(request).unwrap();
        let mut reply = String::new();
        s.read_to_string(&mut reply).unwrap();
        reply
    }

    #[test]
    fn only_get_metrics_is_served() {
        let probe = Arc::new(ProbeState::new(vec![Default::default()], None));
        let server = MetricsServer::start("127.0.0.1:0".parse().unwrap(), probe).unwrap();
        let a = server.addr();
        let r = http(a, b"GET /metrics?x=1 HTTP/1.1\r\nHost: probe\r\n\r\n");
        assert!(r.starts_with("HTTP/1.1 200 OK\r\n"), "{r}");
        assert!(
            r.contains("\r\nContent-Type: text/plain; version=0.0.4"),
            "{r}"
        );
        assert!(
            r.contains("\ntapflow_received_total{worker=\"0\"} 0\n"),
            "{r}"
        );
        assert!(
            r.contains("\ntapflow_server_connections_refused_total{server=\"metrics\"} 0\n"),
            "{r}"
        );
        let body = r.split_once("\r\n\r\n").unwrap().1;
        assert!(r.contains(&format!("\r\nContent-Length: {}\r\n", body.len())));

        let r = http(a, b"HEAD /metrics HTTP/1.1\r\n\r\n");
        assert!(
            r.starts_with("HTTP/1.1 200 OK\r\n") && r.ends_with("\r\n\r\n"),
            "{r}"
        );
        let r = http(a, b"GET / HTTP/1.1\r\n\r\n");
        assert!(r.starts_with("HTTP/1.1 404 Not Found\r\n"), "{r}");
        let r = http(a, b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
        assert!(r.starts_with("HTTP/1.1 405 Method Not Allowed\r\n"), "{r}");
        assert!(r.contains("\r\nAllow: GET, HEAD\r\n"), "{r}");
        // A head that never ends: exactly the limit, all of it read, so the close is orderly.
        let mut big = b"GET /metrics HTTP/1.1\r\nX-Big: ".to_vec();
        big.resize(HEAD_LIMIT, b'a');
        let r = http(a, &big);
        assert!(r.starts_with("HTTP/1.1 431 "), "{r}");
    }
}
