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
        (vec!["plan", "--rate", "fast"], "packet rate"),
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

/// The model against the kernel, with the stall as it happened (SIGSTOP to SIGCONT):
/// - 8 blocks of 1 MiB at 50k packets/s, which the timer closes with 500 packets each, hold
///   75 ms: a 10 ms stall loses nothing, one of about 400 ms what `tapflow plan` predicts;
/// - 16 blocks of 64 KiB at 200k packets/s fill up (454 slots, 400 carried with the timer's
///   part-full block): a 100 ms stall loses what the slot layout predicts.
///
/// Within 20% (bench/plan.py finds −5%…+14% with the stall as asked, about 1% as timed).
#[test]
fn a_stalled_capture_loses_what_the_plan_predicts() {
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
        (200_000, full, 100, Some(0.2)),
    ]
    .into_iter()
    .enumerate()
    {
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
        let t = Instant::now();
        cap.signal(libc::SIGSTOP);
        std::thread::sleep(Duration::from_millis(stall_ms));
        cap.signal(libc::SIGCONT);
        let stalled = t.elapsed();
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
        let sent_rate = json_f64(&gen_text, "pps");
        let (rate_arg, stall_arg) = (
            format!("{sent_rate:.0}"),
            format!("{:.3}", stalled.as_secs_f64() * 1e3),
        );
        let mut plan = vec!["--rate", &rate_arg, "--frame-size", "64", "-s", "64"];
        plan.extend_from_slice(&ring);
        plan.extend_from_slice(&["--stall-ms", &stall_arg]);
        let want = json_f64(&plan_json(&plan), "stall.loss.packets");
        match tolerance {
            None => {
                assert_eq!(want, 0.0);
                assert_eq!(sum.dropped_kernel, 0, "{}", sum.text);
            }
            Some(tol) => {
                let got = sum.dropped_kernel as f64;
                eprintln!("stall {stalled:?}: dropped {got}, model {want}");
                assert!(want > 5_000.0, "model {want}");
                assert!(
                    (got - want).abs() <= tol * want,
                    "stall {stalled:?}: dropped {got}, model {want}: {}",
                    sum.text
                );
            }
        }
    }
}
