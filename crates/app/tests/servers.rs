//! The control socket and `/metrics` of a live capture (in private namespaces) under a client
//! that sends its request one byte every 1.5 s: it holds up neither another client nor the
//! capture's exit. Needs root; fails (never skips) without it.
//!
//! The bounds are loose (seconds, for machines with every core busy); a server that serves one
//! client at a time, or waits for a slow client on exit, misses them by far.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::*;

/// How long another client's whole request may take while the slow client is connected.
const ANSWER_WITHIN: Duration = Duration::from_secs(3);
/// How long the capture may take to exit after SIGTERM while the slow client is connected; less
/// than the servers' request deadline (5 s), so a server that waits the slow client out fails.
const EXIT_WITHIN: Duration = Duration::from_secs(3);

/// A capture on B's interface with a control socket in `dir` and `/metrics` on `port`, started,
/// bound and answering.
fn start(p: &VethPair, dir: &Path, port: u16) -> (ChildGuard, PathBuf) {
    let control = dir.join("ctl.sock");
    let c = control.to_string_lossy().into_owned();
    let m = format!("127.0.0.1:{port}");
    ip(&["-n", &p.ns_b, "link", "set", "lo", "up"]);
    let mut g = VethPair::spawn(&mut p.tapflow_b(&[
        "capture",
        "-i",
        &p.if_b,
        "-q",
        "--control",
        &c,
        "--metrics",
        &m,
    ]));
    wait_capturing(&mut g, 1);
    g.wait_until(Duration::from_secs(10), "served /metrics", |_| {
        scrape(&p.ns_b, port).is_ok()
    });
    g.wait_until(Duration::from_secs(10), "served its control socket", |_| {
        UnixStream::connect(&control).is_ok()
    });
    (g, control)
}

/// Runs `f` in a thread that has entered namespace `ns`; sockets it opens live there.
fn in_ns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let ns = ns.to_string();
    std::thread::spawn(move || {
        tapflow_sys::netns::enter(&ns).unwrap();
        f()
    })
    .join()
    .unwrap()
}

/// A whole `GET /metrics` from inside namespace `ns`: the reply.
fn scrape(ns: &str, port: u16) -> std::io::Result<String> {
    in_ns(ns, move || {
        let mut s = TcpStream::connect(("127.0.0.1", port))?;
        s.set_read_timeout(Some(Duration::from_secs(15)))?;
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: probe\r\n\r\n")?;
        let mut reply = String::new();
        s.read_to_string(&mut reply)?;
        Ok(reply)
    })
}

/// A client that sends `request` one byte every 1.5 s, over and over, until dropped or until
/// the server closes the connection.
struct SlowClient {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl SlowClient {
    fn start(mut conn: impl Write + Send + 'static, request: &'static [u8]) -> SlowClient {
        let stop = Arc::new(AtomicBool::new(false));
        let thread = std::thread::spawn({
            let stop = Arc::clone(&stop);
            move || {
                for b in request.iter().cycle() {
                    if conn.write_all(std::slice::from_ref(b)).is_err() {
                        return;
                    }
                    let sent = Instant::now();
                    while sent.elapsed() < Duration::from_millis(1500) {
                        if stop.load(Ordering::Relaxed) {
                            return;
                        }
                        std::thread::sleep(Duration::from_millis(20));
                    }
                }
            }
        });
        // Long enough for the server to take the connection and start reading the request.
        std::thread::sleep(Duration::from_millis(500));
        SlowClient {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for SlowClient {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Stops the capture with SIGTERM and returns how long it took to exit (successfully).
fn stop(mut g: ChildGuard) -> Duration {
    let t = Instant::now();
    g.signal(libc::SIGTERM);
    let (status, err) = g.wait_output(Duration::from_secs(15));
    let took = t.elapsed();
    assert!(status.success(), "capture exited with {status}: {err}");
    took
}

#[test]
fn a_slow_metrics_client_delays_neither_a_scrape_nor_the_exit() {
    let p = VethPair::new("svm");
    let dir = tempfile::tempdir().unwrap();
    let port = 9464;
    let (g, _) = start(&p, dir.path(), port);
    let conn = in_ns(&p.ns_b, move || TcpStream::connect(("127.0.0.1", port))).unwrap();
    let _slow = SlowClient::start(conn, b"GET /metrics HTTP/1.1\r\nX-Slow: aaaaaaaaaaaaaaaa");

    let t = Instant::now();
    let reply = scrape(&p.ns_b, port).unwrap();
    let took = t.elapsed();
    assert!(
        reply.starts_with("HTTP/1.1 200 OK\r\n") && reply.contains("\ntapflow_received_total{"),
        "{reply}"
    );
    assert!(
        took < ANSWER_WITHIN,
        "a scrape took {took:?} beside a slow client"
    );

    let took = stop(g);
    assert!(
        took < EXIT_WITHIN,
        "the capture took {took:?} to exit beside a slow /metrics client"
    );
}

#[test]
fn a_slow_control_client_delays_neither_stats_nor_rules_nor_the_exit() {
    let p = VethPair::new("svc");
    let dir = tempfile::tempdir().unwrap();
    let (g, control) = start(&p, dir.path(), 9465);
    let conn = UnixStream::connect(&control).unwrap();
    let _slow = SlowClient::start(conn, b"stats\n");

    for args in [&["stats"][..], &["rules", "list"]] {
        let t = Instant::now();
        let mut c = tapflow(args);
        c.arg("--control").arg(&control);
        let o = run_limited(&mut c, Duration::from_secs(15));
        let took = t.elapsed();
        assert!(
            o.status.success(),
            "tapflow {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(
            took < ANSWER_WITHIN,
            "tapflow {args:?} took {took:?} beside a slow client"
        );
    }

    let took = stop(g);
    assert!(
        took < EXIT_WITHIN,
        "the capture took {took:?} to exit beside a slow control client"
    );
}
