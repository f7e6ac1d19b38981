//! What people see on a terminal, through a real pseudo-terminal (`script`): one status line cut
//! to the terminal's width and rewritten in place (capture, gen, recv alike), one log line per
//! interval off a terminal, `stats --watch` redrawing like top, and a run that lost packets
//! ending with advice (and exit code 1 under `--strict`).

mod common;

use std::process::Command;
use std::time::Duration;

use common::*;

/// `sh -c SCRIPT` in namespace `ns` under a pseudo-terminal of `cols` columns; the terminal's
/// bytes.
fn in_pty(ns: &str, cols: u16, script: &str, limit: Duration) -> String {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns, "script", "-q", "-e", "-c"])
        .arg(format!("stty cols {cols} rows 40; {script}"))
        .arg("/dev/null");
    let o = run_limited(&mut c, limit);
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The status lines a terminal showed: what follows each `\r\x1b[K` up to the next control,
/// unless a line end follows it (a line that stays, like the summary after the last clear).
fn rewritten(term: &str) -> Vec<String> {
    term.split("\r\x1b[K")
        .skip(1)
        .filter_map(|s| {
            let end = s.find(['\r', '\n', '\x1b']).unwrap_or(s.len());
            let stays = s[end..].starts_with("\r\n") || s[end..].starts_with('\n');
            (!stays && end > 0).then(|| s[..end].to_string())
        })
        .collect()
}

#[test]
fn status_lines_fit_the_terminal_and_are_rewritten() {
    let p = VethPair::new("st");
    p.wait_link_up();
    let bin = bin().display().to_string();
    let mut gen_ = p.spawn_gen(&["--rate", "20k", "--flows", "64", "--duration", "5s"]);
    let term = in_pty(
        &p.ns_b,
        50,
        &format!("{bin} capture -i {} -w /dev/null --duration 3.5s", p.if_b),
        Duration::from_secs(30),
    );
    gen_.wait_limited(Duration::from_secs(30));
    let lines = rewritten(&term);
    assert!(lines.len() >= 2, "{term:?}");
    for l in &lines {
        assert!(l.chars().count() <= 49, "{l:?} is wider than the terminal");
        assert!(l.starts_with("capturing on "), "{l:?}");
    }
    // The summary stays, on a line of its own; no status line is left behind it.
    let after = term.rsplit("\r\x1b[K").next().unwrap();
    assert!(
        after.starts_with("tapflow: ") && after.contains("received"),
        "{term:?}"
    );
    // gen alike, on a narrower terminal.
    let term = in_pty(
        &p.ns_a,
        40,
        &format!("{bin} gen -i {} --rate 5k --duration 2.5s", p.if_a),
        Duration::from_secs(30),
    );
    let lines = rewritten(&term);
    assert!(!lines.is_empty(), "{term:?}");
    assert!(
        lines
            .iter()
            .all(|l| l.chars().count() <= 39 && l.starts_with("tapflow gen")),
        "{lines:?}"
    );
    assert!(
        !term.contains("queued after 1.0 s\r\n"),
        "gen printed a line per second: {term:?}"
    );
}

#[test]
fn off_a_terminal_there_is_one_line_per_interval() {
    let p = VethPair::new("lg");
    p.wait_link_up();
    let mut gen_ = p.spawn_gen(&["--rate", "5k", "--duration", "4s"]);
    let o = run_limited(
        &mut p.tapflow_b(&[
            "capture",
            "-i",
            &p.if_b,
            "-w",
            "/dev/null",
            "--duration",
            "3.5s",
        ]),
        Duration::from_secs(30),
    );
    gen_.wait_limited(Duration::from_secs(30));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains('\r') && !err.contains('\x1b'), "{err:?}");
    let status = err
        .lines()
        .filter(|l| l.starts_with("capturing on "))
        .count();
    assert!(
        (2..=4).contains(&status),
        "{status} status lines in 3.5 s: {err}"
    );
}

#[test]
fn stats_watch_redraws_like_top() {
    let p = VethPair::new("sw");
    p.wait_link_up();
    let dir = tempfile::tempdir().unwrap();
    let ctl = dir.path().join("c.sock");
    let mut cap = VethPair::spawn(&mut p.tapflow_b(&[
        "capture",
        "-i",
        &p.if_b,
        "-q",
        "-w",
        "/dev/null",
        "--control",
        ctl.to_str().unwrap(),
    ]));
    wait_capturing(&mut cap, 1);
    let term = in_pty(
        &p.ns_b,
        100,
        &format!(
            "timeout -s INT 1.6 {} stats --control {} --watch 0.4s",
            bin().display(),
            ctl.display()
        ),
        Duration::from_secs(20),
    );
    cap.signal(libc::SIGINT);
    let homes = term.matches("\x1b[H").count();
    assert!(homes >= 3, "{homes} redraws: {term:?}");
    assert_eq!(term.matches("\x1b[2J").count(), 1, "{term:?}");
    // Every table starts at the top left: none follows another below it.
    let tables = term.matches("received").count();
    assert_eq!(tables, homes, "{term:?}");
}

#[test]
fn a_lossy_run_gives_advice_and_fails_under_strict() {
    let p = VethPair::new("ls");
    p.wait_link_up();
    let mut cap = VethPair::spawn(&mut p.tapflow_b(&[
        "capture",
        "-i",
        &p.if_b,
        "-q",
        "-s",
        "0",
        "-w",
        "/dev/null",
        "--block-size",
        "4K",
        "--block-count",
        "2",
        "--strict",
    ]));
    wait_capturing(&mut cap, 1);
    let dir = tempfile::tempdir().unwrap();
    p.send(&["-c", "200k", "--size", "1400"], dir.path(), 200_000);
    std::thread::sleep(Duration::from_millis(300));
    cap.signal(libc::SIGINT);
    let (status, err) = cap.wait_output(Duration::from_secs(20));
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(err.contains("dropped by kernel"), "{err}");
    assert!(
        err.contains("tapflow: advice: the ring (2 blocks of 4K per worker) overflowed"),
        "{err}"
    );
    assert!(err.contains("`tapflow plan --rate "), "{err}");
    assert!(
        err.lines()
            .last()
            .unwrap()
            .starts_with("tapflow: error: --strict: "),
        "{err}"
    );
}

#[test]
fn a_flow_table_on_the_terminal_has_no_status_line_in_it() {
    let p = VethPair::new("ft");
    p.wait_link_up();
    let mut gen_ = p.spawn_gen(&["--rate", "2k", "--flows", "8", "--duration", "3s"]);
    let term = in_pty(
        &p.ns_b,
        200,
        &format!(
            "{} flows -i {} --duration 2.5s --idle-timeout 1s",
            bin().display(),
            p.if_b
        ),
        Duration::from_secs(30),
    );
    gen_.wait_limited(Duration::from_secs(30));
    assert!(term.contains("Start (UTC)"), "{term:?}");
    assert!(
        rewritten(&term).is_empty(),
        "a status line in the table: {term:?}"
    );
    let rows: Vec<&str> = term.lines().filter(|l| l.contains(" udp ")).collect();
    assert!(rows.len() >= 8, "{term:?}");
    // Rows in the order their flows started.
    let starts: Vec<&str> = rows.iter().map(|r| &r[..23]).collect();
    let mut sorted = starts.clone();
    sorted.sort();
    assert_eq!(starts, sorted);
}
