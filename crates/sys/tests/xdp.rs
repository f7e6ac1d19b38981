//! The XDP program, its link and the AF_XDP socket against the real kernel: a veth pair in a
//! throw-away network namespace (`xdpsys<pid>`), which this test's thread enters.
//!
//! Needs root (skips otherwise); a guard deletes the namespace even on panic.

use std::process::Command;

use tapflow_sys::xdp::{self, Map, Program, XdpLink, XdpMode};
use tapflow_sys::xsk::XskSocket;
use tapflow_sys::{iface, netns};

struct Ns(String);

impl Drop for Ns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).output();
    }
}

fn ip(args: &[&str]) -> String {
    let o = Command::new("ip").args(args).output().expect("ip");
    assert!(
        o.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn the_program_loads_attaches_once_and_detaches_on_drop() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: the_program_loads_attaches_once_and_detaches_on_drop: needs root");
        return;
    }
    let ns = Ns(format!("xdpsys{}", std::process::id()));
    let (a, b) = (format!("{}a", ns.0), format!("{}b", ns.0));
    ip(&["netns", "add", &ns.0]);
    ip(&[
        "-n", &ns.0, "link", "add", &a, "type", "veth", "peer", "name", &b,
    ]);
    ip(&["-n", &ns.0, "link", "set", &a, "up"]);
    ip(&["-n", &ns.0, "link", "set", &b, "up"]);
    netns::enter(&ns.0).unwrap();
    let ifindex = iface::index(&a).unwrap();

    let counters = Map::queue_counters(&a, 1).unwrap();
    let sockets = Map::xsk_map(&a, 1).unwrap();
    let capture = Program::load(
        &a,
        "t_capture",
        &xdp::capture_program(&counters, &sockets, 1),
    )
    .expect("the verifier takes the capture program");
    let pass = Program::load(&a, "t_pass", &xdp::pass_program()).unwrap();
    let xsk = XskSocket::open(&a, ifindex, 0, 64, true).unwrap();
    sockets.set_socket(0, xsk.fd()).unwrap();
    let again = XskSocket::open(&a, ifindex, 0, 64, true).expect_err("queue 0 is taken");
    assert!(again.to_string().contains("another XDP capture"), "{again}");

    let link = XdpLink::attach_best(&capture, &a, ifindex).unwrap();
    assert_eq!(link.mode(), XdpMode::Native, "veth has native XDP");
    let show = || ip(&["-n", &ns.0, "link", "show", "dev", &a]);
    assert!(show().contains("prog/xdp"), "{}", show());
    for mode in [XdpMode::Native, XdpMode::Generic] {
        let e = XdpLink::attach(&pass, &a, ifindex, mode).expect_err("one program at a time");
        assert!(
            e.to_string().contains("another XDP program is attached")
                && e.to_string().contains("xdp off"),
            "{e}"
        );
    }
    link.update(&pass).unwrap();
    // Two entries: queue 0 and the queues beyond.
    let c = counters.read_counters(0).unwrap();
    assert!(c.redirected + c.no_socket <= c.seen, "{c:?}");
    assert!(counters.read_counters(1).is_ok() && counters.read_counters(2).is_err());
    drop(link);
    assert!(!show().contains("prog/xdp"), "still attached: {}", show());
    // The fallback for drivers without XDP.
    let link = XdpLink::attach(&capture, &a, ifindex, XdpMode::Generic).unwrap();
    assert!(show().contains("xdpgeneric"), "{}", show());
    drop(link);
    assert!(!show().contains("xdpgeneric"), "still attached: {}", show());
}
