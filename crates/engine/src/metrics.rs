//! The probe's statistics as Prometheus text (exposition format 0.0.4), served on `/metrics`
//! and returned by the control socket's `stats`.
//!
//! Every traffic series carries `worker` (a fanout member), so a dashboard sums them; rule
//! counters carry `rule`.

use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use crate::EngineError;
use crate::probe::{ProbeState, WorkerSnapshot};
use crate::server::Server;

/// One metric family: name, type, help, and its samples as (labels, value).
struct Family {
    name: &'static str,
    kind: &'static str,
    help: &'static str,
    samples: Vec<(String, f64)>,
}

type Pick = fn(&WorkerSnapshot) -> Vec<(&'static str, f64)>;

/// The per-worker families: name, type, help, and the values with their extra labels.
const PER_WORKER: &[(&str, &str, &str, Pick)] = &[
    (
        "tapflow_received_packets_total",
        "counter",
        "Packets the kernel passed to the socket, drops included.",
        |w| vec![("", w.totals.received as f64)],
    ),
    (
        "tapflow_recorded_packets_total",
        "counter",
        "Packets recorded by every output.",
        |w| vec![("", w.totals.recorded as f64)],
    ),
    (
        "tapflow_filtered_packets_total",
        "counter",
        "Packets refused in user space (by the rules, or by -f on a file).",
        |w| vec![("", w.totals.filtered as f64)],
    ),
    (
        "tapflow_kernel_dropped_packets_total",
        "counter",
        "Packets the kernel dropped because the ring was full.",
        |w| vec![("", w.totals.dropped_kernel as f64)],
    ),
    (
        "tapflow_dropped_packets_total",
        "counter",
        "Packets tapflow itself dropped (a full queue or a failed output).",
        |w| vec![("", w.totals.dropped_ours as f64)],
    ),
    (
        "tapflow_ring_freezes_total",
        "counter",
        "Times the kernel froze the ring queue.",
        |w| vec![("", w.totals.freezes as f64)],
    ),
    (
        "tapflow_ring_blocks_total",
        "counter",
        "Ring blocks the kernel handed to tapflow.",
        |w| vec![("", w.totals.blocks as f64)],
    ),
    (
        "tapflow_traffic_packets_total",
        "counter",
        "Packets that passed the filters.",
        |w| vec![("", w.traffic.packets as f64)],
    ),
    (
        "tapflow_traffic_bytes_total",
        "counter",
        "Original bytes of the packets that passed the filters.",
        |w| vec![("", w.traffic.bytes as f64)],
    ),
    (
        "tapflow_network_packets_total",
        "counter",
        "Packets by network layer.",
        |w| {
            vec![
                ("network=\"ipv4\"", w.traffic.ipv4 as f64),
                ("network=\"ipv6\"", w.traffic.ipv6 as f64),
                ("network=\"non_ip\"", w.traffic.non_ip() as f64),
            ]
        },
    ),
    (
        "tapflow_transport_packets_total",
        "counter",
        "IP packets by transport protocol.",
        |w| {
            vec![
                ("transport=\"tcp\"", w.traffic.tcp as f64),
                ("transport=\"udp\"", w.traffic.udp as f64),
                ("transport=\"icmp\"", w.traffic.icmp as f64),
                ("transport=\"other\"", w.traffic.other_transport() as f64),
            ]
        },
    ),
    (
        "tapflow_tcp_flag_packets_total",
        "counter",
        "TCP segments with the flag set.",
        |w| {
            vec![
                ("flag=\"syn\"", w.traffic.syn as f64),
                ("flag=\"fin\"", w.traffic.fin as f64),
                ("flag=\"rst\"", w.traffic.rst as f64),
            ]
        },
    ),
    (
        "tapflow_tcp_options_packets_total",
        "counter",
        "TCP segments whose header carries options.",
        |w| vec![("", w.traffic.tcp_options as f64)],
    ),
    (
        "tapflow_mean_interarrival_seconds",
        "gauge",
        "Mean time between packets since the first one.",
        |w| vec![("", w.traffic.mean_interarrival_s())],
    ),
    (
        "tapflow_mean_rate_bytes_per_second",
        "gauge",
        "Mean rate since the first packet.",
        |w| vec![("", w.traffic.mean_bit_rate() / 8.0)],
    ),
    (
        "tapflow_forward_failed_records_total",
        "counter",
        "Header records whose datagram could not be sent to a collector.",
        |w| vec![("", w.live.forward_failed as f64)],
    ),
    (
        "tapflow_flows_active",
        "gauge",
        "Flows in the flow table.",
        |w| vec![("", w.live.flows_active as f64)],
    ),
    (
        "tapflow_flows_exported_total",
        "counter",
        "Flow records ended and handed to the exporter.",
        |w| vec![("", w.live.flows_exported as f64)],
    ),
];

/// The Prometheus text of the probe's statistics now.
pub fn render(p: &ProbeState) -> String {
    let workers = p.snapshot();
    let mut families: Vec<Family> = PER_WORKER
        .iter()
        .map(|&(name, kind, help, pick)| Family {
            name,
            kind,
            help,
            samples: workers
                .iter()
                .enumerate()
                .flat_map(|(k, w)| {
                    pick(w).into_iter().map(move |(extra, v)| {
                        let sep = if extra.is_empty() { "" } else { "," };
                        (format!("worker=\"{k}\"{sep}{extra}"), v)
                    })
                })
                .collect(),
        })
        .collect();
    families.push(Family {
        name: "tapflow_start_time_seconds",
        kind: "gauge",
        help: "When the capture started, in seconds since 1970.",
        samples: vec![(String::new(), p.started_unix())],
    });
    if let Some(rules) = p.rules() {
        let listing = rules.list();
        let label = |name: &str| format!("rule=\"{}\"", escape(name));
        families.push(Family {
            name: "tapflow_rule_packets_total",
            kind: "counter",
            help: "Packets the rule matched first.",
            samples: listing
                .rules
                .iter()
                .map(|r| (label(&r.rule.name), r.packets as f64))
                .collect(),
        });
        families.push(Family {
            name: "tapflow_rule_bytes_total",
            kind: "counter",
            help: "Original bytes of the packets the rule matched first.",
            samples: listing
                .rules
                .iter()
                .map(|r| (label(&r.rule.name), r.bytes as f64))
                .collect(),
        });
    }
    let mut out = String::new();
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
    out
}

fn escape(s: &str) -> String {
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
        let listener = TcpListener::bind(addr)
            .map_err(|e| EngineError::Config(format!("--metrics {addr}: cannot listen: {e}")))?;
        let addr = listener.local_addr().unwrap_or(addr);
        let server = Server::spawn("tapflow-metrics", listener, move |s| {
            let _ = serve(s, &probe);
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

/// Answers one HTTP/1.x request and closes the connection.
fn serve(mut s: TcpStream, probe: &ProbeState) -> std::io::Result<()> {
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 8192 {
        let n = s.read(&mut buf)?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&head);
    let mut first = text.lines().next().unwrap_or("").split(' ');
    let (method, target) = (first.next().unwrap_or(""), first.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    let (status, body) = match (method, path) {
        ("GET" | "HEAD", "/metrics") => ("200 OK", render(probe)),
        ("GET" | "HEAD", _) => ("404 Not Found", "tapflow serves /metrics\n".to_string()),
        _ => ("405 Method Not Allowed", "GET only\n".to_string()),
    };
    let kind = if status.starts_with("200") {
        "text/plain; version=0.0.4; charset=utf-8"
    } else {
        "text/plain; charset=utf-8"
    };
    let mut reply = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n",
        body.len()
    );
    if method != "HEAD" {
        reply.push_str(&body);
    }
    s.write_all(reply.as_bytes())
}
