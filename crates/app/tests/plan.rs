//! `tapflow plan`: its answers, its errors, and its loss prediction against a real ring that a
//! stalled capture lets overflow (veth pair in private namespaces; root needed, never skipped).

mod common;

use std::time::{Duration, Instant};

use common::*;

fn plan_json(args: &[&str]) -> String {
    let mut a = vec!["plan", "--json"];
    a.extend_from_slice(args);
    let o = run_limited(&mut tapflow(&a), Duration::from_secs(10));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).unwrap()
}

/// The recommended ring keeps up and rides out the stall asked for; at 10 GbE line rate one
/// worker is busier than two; the text names the options to pass to capture.
#[test]
fn the_recommendation_holds_the_stall_and_keeps_up() {
    for (rate, hold) in [("10k", "50"), ("1M", "50"), ("3M", "200")] {
        let j = plan_json(&["--rate", rate, "--hold-ms", hold]);
        let holds = json_f64(&j, "ring.holds_ms");
        assert!(holds >= hold.parse::<f64>().unwrap(), "{rate}: {j}");
        assert!(json_f64(&j, "ring.busy") < 1.0, "{rate}: {j}");
        let (min, max) = (
            json_f64(&j, "min_block_size"),
            json_f64(&j, "max_block_size"),
        );
        let block = json_f64(&j, "recommended.block_size");
        assert!(min <= block && block <= max, "{rate}: {j}");
    }
    let one = plan_json(&["--speed", "10000"]);
    let two = plan_json(&["--speed", "10000", "--threads", "2"]);
    assert!(
        json_f64(&two, "ring.busy") < json_f64(&one, "ring.busy"),
        "{one}\n{two}"
    );
    let o = run_limited(
        &mut tapflow(["plan", "--rate", "1M", "--stall-ms", "200"]),
        Duration::from_secs(10),
    );
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{text}");
    assert!(
        text.contains("--block-size") && text.contains("--block-count"),
        "{text}"
    );
    assert!(text.contains("stall") && text.contains("loses"), "{text}");
    // A consumer slower than the packets: no ring keeps up, and the plan says so.
    let slow = plan_json(&["--rate", "10M", "--cost-ns", "200"]);
    assert!(json_at(&slow, "min_block_size").is_null(), "{slow}");
    assert!(json_f64(&slow, "ring.busy") > 1.0, "{slow}");
}

/// Bad input: one line naming the problem, exit code 2.
#[test]
fn bad_plan_options_give_one_line_errors() {
    for (args, key) in [
        (vec!["plan"], "--rate"),
        (vec!["plan", "--rate", "fast"], "not a rate"),
        (vec!["plan", "--rate", "1M", "--burst", "3M"], "RATE:MS"),
        (
            vec!["plan", "--rate", "1M", "--block-size", "5000"],
            "power of two",
        ),
        (vec!["plan", "--rate", "1M", "--threads", "0"], "--threads"),
        (
            vec!["plan", "--rate", "1M", "--frame-size", "20"],
            "--frame-size",
        ),
        (vec!["plan", "-i", "no-such-if0"], "no-such-if0"),
        (vec!["plan", "--rate", "1M", "--cost-ns=-5"], "--cost-ns"),
        (vec!["plan", "--rate", "1M", "--memory", "1000"], "--memory"),
    ] {
        let o = run_limited(&mut tapflow(&args), Duration::from_secs(10));
        assert_clean_error(&o, Some(2), &[key], &format!("{args:?}"));
    }
}

/// Packets interface `ifname` has received, as seen from the network namespace of process `pid`
/// (`/proc/PID/net/dev`; readable while the process is stopped).
fn rx_packets(pid: i32, ifname: &str) -> u64 {
    let dev = std::fs::read_to_string(format!("/proc/{pid}/net/dev")).unwrap();
    let line = dev
        .lines()
        .find_map(|l| l.trim_start().strip_prefix(ifname)?.strip_prefix(':'))
        .unwrap_or_else(|| panic!("no {ifname} in /proc/{pid}/net/dev:\n{dev}"));
    // rx: bytes packets errs drop …
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// One stall of a capture, SIGSTOP to SIGCONT, with each signal bracketed by readings of the
/// clock and of the capture interface's received packets: the stall lasted at least `shortest`
/// (while at least `fewest` packets arrived) and at most `longest` (`most`).
#[derive(Debug)]
struct Stall {
    shortest: Duration,
    longest: Duration,
    fewest: u64,
    most: u64,
}

impl Stall {
    /// Stops `cap` for `ms` milliseconds.
    fn time(cap: &ChildGuard, ifname: &str, ms: u64) -> Stall {
        let mark = || (Instant::now(), rx_packets(cap.pid(), ifname));
        let stop_before = mark();
        cap.signal(libc::SIGSTOP);
        let stop_after = mark();
        std::thread::sleep(Duration::from_millis(ms));
        let cont_before = mark();
        cap.signal(libc::SIGCONT);
        let cont_after = mark();
        Stall {
            shortest: cont_before.0 - stop_after.0,
            longest: cont_after.0 - stop_before.0,
            fewest: cont_before.1 - stop_after.1,
            most: cont_after.1 - stop_before.1,
        }
    }

    /// Whether the stall is known to within 2 ms and 5% of the `asked_ms` (the timing thread was
    /// not held up around a signal).
    fn timed(&self, asked_ms: u64) -> bool {
        self.longest - self.shortest
            <= Duration::from_millis(2) + Duration::from_millis(asked_ms) / 20
    }
}

/// Runs this thread, and every process it starts from now on, at nice -20: on a busy machine
/// the scheduler then runs the capture whenever it has packets, the sender at its pace, and the
/// thread that times the stall when its sleep ends, as the model assumes (bench/plan.py gives
/// each a CPU of its own).
fn run_first() {
    // SAFETY: setpriority changes the nice value of the thread named (this one) and touches no
    // memory of ours.
    let r = unsafe { libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, -20) };
    assert_eq!(r, 0, "setpriority: {}", std::io::Error::last_os_error());
}

/// The model against the kernel, with the stall as it happened (SIGSTOP to SIGCONT) and the
/// packets that arrived during it (the interface's counter, read at both signals):
/// - 8 blocks of 1 MiB at 50k packets/s, which the timer closes with 500 packets each, hold
///   75 ms: a 10 ms stall loses nothing, one of about 400 ms what `tapflow plan` predicts;
/// - 16 blocks of 64 KiB at 100k packets/s fill up (454 slots, 333 carried on average with the
///   timer's part-full block): a 200 ms stall loses what the slot layout predicts.
///
/// Within 20% (bench/plan.py finds −5%…+14% with the stall as asked, about 1% as timed) of the
/// model for the shortest and the longest the stall can have been, at the rate of the packets
/// that arrived during it (on a busy machine the sender falls behind and catches up: its
/// average is not its rate during the stall).
///
/// A run proves nothing either way, and is run again, when its stall could not be timed (the
/// timing thread held up around a signal), when the short stall overran into what the ring
/// cannot hold, or when the ring froze more than once: the consumer fell behind outside the
/// stall (a debug build beside other work), so not all the kernel's drops are the stall's.
#[test]
fn a_stalled_capture_loses_what_the_plan_predicts() {
    run_first();
    let p = VethPair::new("pl");
    let dir = tempfile::tempdir().unwrap();
    let ring = |size, count| {
        [
            "--block-size",
            size,
            "--block-count",
            count,
            "--retire-ms",
            "10",
        ]
    };
    let (timer_bound, full) = (ring("1M", "8"), ring("64K", "16"));
    for (n, (rate, ring, stall_ms, tolerance)) in [
        (50_000u64, timer_bound, 10u64, None),
        (50_000, timer_bound, 400, Some(0.2)),
        (100_000, full, 200, Some(0.2)),
    ]
    .into_iter()
    .enumerate()
    {
        // The model at the rate of the packets that arrived.
        let model = |packets: u64, stall: Duration| {
            let rate = format!("{:.0}", packets as f64 / stall.as_secs_f64());
            let stall = format!("{:.3}", stall.as_secs_f64() * 1e3);
            let mut plan = vec!["--rate", &rate, "--frame-size", "64", "-s", "64"];
            plan.extend_from_slice(&ring);
            plan.extend_from_slice(&["--stall-ms", &stall]);
            json_f64(&plan_json(&plan), "stall.loss.packets")
        };
        let mut runs = 0;
        let (stall, sum, least, most) = loop {
            runs += 1;
            assert!(
                runs <= 4,
                "{stall_ms} ms stall: no run proved anything in 4"
            );
            let json = dir.path().join(format!("cap-{n}.json"));
            let mut args = vec!["capture", "-i", &p.if_b, "-q", "-s", "64"];
            args.extend_from_slice(&ring);
            let js = json.to_string_lossy().into_owned();
            args.extend_from_slice(&["--summary-json", &js]);
            let mut cap = VethPair::spawn(&mut p.tapflow_b(&args));
            wait_capturing(&mut cap, 1);
            let count = rate * (stall_ms + 1500) / 1000;
            let gen_json = dir.path().join("gen.json");
            let mut sender = p.spawn_gen(&[
                "--rate",
                &rate.to_string(),
                "--count",
                &count.to_string(),
                "--summary-json",
                &gen_json.to_string_lossy(),
            ]);
            std::thread::sleep(Duration::from_millis(500));
            let stall = Stall::time(&cap, &p.if_b, stall_ms);
            let (status, err) = sender.wait_output(Duration::from_secs(30));
            assert!(status.success(), "gen: {err}");
            std::thread::sleep(Duration::from_millis(300));
            cap.signal(libc::SIGINT);
            let (status, err) = cap.wait_output(Duration::from_secs(20));
            assert!(status.success(), "capture: {err}");
            let sum = Summary::read(&json);
            sum.assert_adds_up();
            let gen_text = std::fs::read_to_string(&gen_json).unwrap();
            assert_eq!(json_u64(&gen_text, "sent"), count, "{gen_text}");
            assert_eq!(sum.received, count, "{}", sum.text);
            assert!(stall.fewest > 0, "nothing arrived during {stall:?}");
            if !stall.timed(stall_ms) {
                eprintln!("{stall:?}: not timed to 2 ms and 5%; run again");
                continue;
            }
            // The shortest and the longest stall there can have been.
            let (least, most) = (
                model(stall.fewest, stall.shortest),
                model(stall.most, stall.longest),
            );
            if tolerance.is_none() && most > 0.0 {
                eprintln!("{stall:?}: longer than the ring holds (model {most}); run again");
                continue;
            }
            let freezes = json_u64(&sum.text, "freezes");
            if freezes > 1 {
                eprintln!(
                    "{stall:?}: the ring froze {freezes} times; run again: {}",
                    sum.text
                );
                continue;
            }
            break (stall, sum, least, most);
        };
        let got = sum.dropped_kernel as f64;
        eprintln!("{stall:?}: dropped {got}, model {least}..={most}");
        match tolerance {
            None => assert_eq!(sum.dropped_kernel, 0, "{stall:?}: {}", sum.text),
            Some(tol) => {
                assert!(least > 5_000.0, "{stall:?}: model {least}");
                assert!(
                    (1.0 - tol) * least <= got && got <= (1.0 + tol) * most,
                    "{stall:?}: dropped {got}, model {least}..={most}: {}",
                    sum.text
                );
            }
        }
    }
}

#[test]
fn the_svg_draws_no_loss_up_to_what_the_ring_holds_and_loss_after() {
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("plan.svg");
    let j = plan_json(&["--rate", "1M", "--svg", svg.to_str().unwrap()]);
    let holds = json_f64(&j, "ring.holds_ms");
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.starts_with("<svg") && text.trim_end().ends_with("</svg>"));
    let lines: Vec<Vec<(f64, f64)>> = text
        .split("<polyline")
        .skip(1)
        .map(|p| {
            let pts = p
                .split("points=\"")
                .nth(1)
                .unwrap()
                .split('"')
                .next()
                .unwrap();
            pts.split(' ')
                .map(|xy| {
                    let (x, y) = xy.split_once(',').unwrap();
                    (x.parse().unwrap(), y.parse().unwrap())
                })
                .collect()
        })
        .collect();
    assert_eq!(lines.len(), 3, "recommended, half and twice the blocks");
    assert!(lines.iter().all(|l| l.len() == 201));
    // The x axis spans 3 × holds rounded up to a round tick; the plot is 630 px wide from x=70.
    let rec = &lines[0];
    let bottom = rec[0].1;
    let first_loss = rec.iter().position(|p| p.1 < bottom).expect("some loss");
    // Point i is at i/200 of 3 × holds: the first loss lies just past holds, i ≈ 67.
    assert!(
        (66..=69).contains(&first_loss),
        "first loss at point {first_loss} (holds {holds} ms)"
    );
    // More blocks lose later, fewer sooner.
    let first = |l: &Vec<(f64, f64)>| l.iter().position(|p| p.1 < bottom).unwrap_or(usize::MAX);
    assert!(first(&lines[1]) < first_loss && first_loss < first(&lines[2]));
}
