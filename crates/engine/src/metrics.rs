//! The probe's statistics as Prometheus text (exposition format 0.0.4), served on `/metrics`;
//! the control socket's `stats` answers the same counters as JSON ([`crate::probe::Stats`]).
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
                .map(|(k, w)| (format!("worker=\"{k}\""), pick(w)))
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
}
