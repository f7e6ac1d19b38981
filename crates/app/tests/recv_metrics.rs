//! `tapflow recv --metrics`: bad and refused datagrams are on `/metrics` while it runs, by
//! sender and reason, not only in the exit lines.

mod common;

use std::io::{Read, Write};
use std::net::{TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use common::*;

fn free_udp_port() -> u16 {
    UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn free_tcp_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// GET /metrics, retrying until the endpoint answers (at most 10 s).
fn scrape(port: u16) -> String {
    let t0 = Instant::now();
    loop {
        if let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) {
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
            let mut body = String::new();
            if s.read_to_string(&mut body).is_ok() && body.contains("tapflow_") {
                return body;
            }
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "no /metrics on {port}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn bad_datagrams_are_on_metrics_by_sender_and_reason() {
    let dir = tempfile::tempdir().unwrap();
    let (udp, tcp) = (free_udp_port(), free_tcp_port());
    let child = tapflow([
        "recv",
        "--listen",
        &format!("127.0.0.1:{udp}"),
        "-w",
        &dir.path().join("r.pcapng").to_string_lossy(),
        "--metrics",
        &format!("127.0.0.1:{tcp}"),
        "-q",
        "-Z",
        "root",
    ])
    .stderr(std::process::Stdio::piped())
    .spawn()
    .unwrap();
    let mut g = ChildGuard::new(child, "recv --metrics");
    let before = scrape(tcp);
    assert!(!before.contains("reason=\"malformed\""), "{before}");
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    for _ in 0..3 {
        s.send_to(b"not a batch datagram", ("127.0.0.1", udp))
            .unwrap();
    }
    let want = "tapflow_recv_bad_datagrams_total{source=\"127.0.0.1\",reason=\"malformed\"} 3";
    let t0 = Instant::now();
    let mut body = scrape(tcp);
    while !body.contains(want) && t0.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(100));
        body = scrape(tcp);
    }
    assert!(body.contains(want), "{body}");
    assert!(
        body.contains("tapflow_recv_refused_datagrams_total 0"),
        "{body}"
    );
    g.signal(libc::SIGTERM);
    let (status, err) = g.wait_output(Duration::from_secs(10));
    assert!(status.success(), "{err}");
    assert!(err.contains("3 bad datagrams"), "{err}");
}
