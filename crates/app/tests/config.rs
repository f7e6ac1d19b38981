//! `--config FILE`: a TOML file whose keys are the long flags, for the units and for people who
//! run the same capture every day; a flag on the command line wins over its key.

mod common;

use std::time::Duration;

use common::*;

#[test]
fn a_config_file_gives_the_flags_and_the_command_line_wins() {
    let dir = tempfile::tempdir().unwrap();
    let t = built_trace(dir.path(), "t.pcap", 20, 5, 1_000_000);
    let out = dir.path().join("out.pcap");
    let conf = write_file(
        dir.path(),
        "c.conf",
        format!(
            "# every day's capture\nwrite = \"{}\"\ncount = \"10\"\nquiet = true\n\
             filter = \"greater 100\"\nsnaplen = 96\n",
            out.display()
        )
        .as_bytes(),
    );
    let c = conf.to_str().unwrap();
    run_ok(&mut tapflow([
        "capture",
        "-r",
        t.to_str().unwrap(),
        "--config",
        c,
    ]));
    assert_eq!(capinfos_count(&out), 10);
    // Classic pcap, as the name in the file says, and the file's snaplen.
    assert!(capinfos(&out).contains("- nanosecond pcap"));
    let fields = tshark_fields(&out, &["frame.len", "frame.cap_len"]);
    assert!(
        fields.iter().all(|f| f[0].parse::<u32>().unwrap() > 100),
        "{fields:?}"
    );
    assert!(fields.iter().any(|f| f[1] == "96"), "{fields:?}");
    // The command line wins.
    run_ok(&mut tapflow([
        "capture",
        "-r",
        t.to_str().unwrap(),
        "--config",
        c,
        "-c",
        "5",
        "-s",
        "0",
    ]));
    assert_eq!(capinfos_count(&out), 5);
    let fields = tshark_fields(&out, &["frame.len", "frame.cap_len"]);
    assert!(fields.iter().all(|f| f[0] == f[1]), "{fields:?}");
}

#[test]
fn required_flags_can_come_from_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let conf = write_file(
        dir.path(),
        "recv.conf",
        format!(
            "listen = \"127.0.0.1:0\"\nwrite = \"{}\"\nduration = \"300ms\"\nquiet = true\n\
             summary-json = \"{}\"\n",
            dir.path().join("r.pcapng").display(),
            dir.path().join("s.json").display()
        )
        .as_bytes(),
    );
    let o = run_limited(
        &mut tapflow(["recv", "--config", conf.to_str().unwrap()]),
        Duration::from_secs(20),
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let json = std::fs::read_to_string(dir.path().join("s.json")).unwrap();
    assert_eq!(json_u64(&json, "datagrams"), 0, "{json}");
    assert!(json_f64(&json, "seconds") >= 0.3, "{json}");
}

#[test]
fn a_bad_config_is_one_line_naming_the_file_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let bad = write_file(dir.path(), "bad.conf", b"rotate-secs = \"1h\"\n");
    let b = bad.to_str().unwrap();
    let o = run_limited(
        &mut tapflow(["capture", "-i", "lo", "--config", b]),
        Duration::from_secs(10),
    );
    assert_clean_error(&o, Some(2), &["unknown key 'rotate-secs'"], "bad key");
    assert!(String::from_utf8_lossy(&o.stderr).contains(b));
    let unit = write_file(
        dir.path(),
        "unit.conf",
        b"rotate-seconds = \"1 fortnight\"\n",
    );
    let o = run_limited(
        &mut tapflow(["capture", "-i", "lo", "--config", unit.to_str().unwrap()]),
        Duration::from_secs(10),
    );
    assert_clean_error(&o, Some(2), &["not a duration"], "bad value");
    let o = run_limited(
        &mut tapflow(["capture", "-i", "lo", "--config", "/nonexistent/tf.conf"]),
        Duration::from_secs(10),
    );
    assert_clean_error(&o, Some(2), &["/nonexistent/tf.conf"], "missing file");
}
