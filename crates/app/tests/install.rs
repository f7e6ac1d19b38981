//! Installing like a real tool: `scripts/install.sh` and the Debian package of
//! `scripts/package-deb.sh` put the binary, man pages, completions, systemd units and example
//! configurations in place; the package installs (into a throwaway root, with its own dpkg
//! database) and purges; `systemd-analyze verify` accepts the units; and the capture unit's
//! capabilities are all a capture needs.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::*;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn out(c: &mut Command) -> (bool, String) {
    let o = c.output().unwrap_or_else(|e| panic!("{}: {e}", show(c)));
    let text =
        String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
    (o.status.success(), text)
}

const UNITS: [&str; 3] = [
    "tapflow-capture@.service",
    "tapflow-recv.service",
    "tapflow-collect.service",
];

/// `systemd-analyze verify` of the units in `unit_dir`, their binary path moved to `bin` (the
/// host has no /usr/bin/tapflow), their man pages looked up in `man`.
fn verify_units(unit_dir: &Path, prefix_bin: &str, bin: &Path, man: &Path) {
    let tmp = tempfile::tempdir().unwrap();
    let mut names = Vec::new();
    for u in UNITS {
        let text = std::fs::read_to_string(unit_dir.join(u)).unwrap();
        assert!(
            text.contains(&format!("ExecStart={prefix_bin} ")),
            "{u}: {text}"
        );
        for key in [
            "CapabilityBoundingSet=",
            "AmbientCapabilities=",
            "ProtectSystem=strict",
            "ReadWritePaths=/var/lib/tapflow",
            "NoNewPrivileges=yes",
            "User=tapflow",
        ] {
            assert!(text.contains(key), "{u} lacks {key}");
        }
        let moved = text.replace(prefix_bin, &bin.to_string_lossy());
        std::fs::write(tmp.path().join(u), moved).unwrap();
        names.push(tmp.path().join(u.replace("@.", "@eth0.")));
    }
    let (ok, text) = out(Command::new("systemd-analyze")
        .arg("verify")
        .args(&names)
        .env("MANPATH", man));
    assert!(
        ok && text.trim().is_empty(),
        "systemd-analyze verify: {text}"
    );
}

#[test]
fn the_package_installs_verifies_and_purges() {
    let tmp = tempfile::tempdir().unwrap();
    let (ok, text) = out(Command::new(repo().join("scripts/package-deb.sh"))
        .args(["--bin", bin().to_str().unwrap(), "--out"])
        .arg(tmp.path()));
    assert!(ok, "package-deb.sh: {text}");
    let deb = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "deb"))
        .unwrap_or_else(|| panic!("no .deb: {text}"));
    assert!(
        text.contains(&*deb.to_string_lossy()),
        "the script names its .deb: {text}"
    );
    let (_, info) = out(Command::new("dpkg-deb").arg("--info").arg(&deb));
    assert!(info.contains("Package: tapflow"), "{info}");
    // A throwaway root with its own dpkg database, where the package's dependencies are
    // recorded as installed (their files are the host's).
    let root = tmp.path().join("root");
    let admin = root.join("var/lib/dpkg");
    std::fs::create_dir_all(admin.join("info")).unwrap();
    std::fs::create_dir_all(admin.join("updates")).unwrap();
    let (ok, status) =
        out(Command::new("dpkg-query").args(["-s", "libc6", "libgcc-s1", "adduser"]));
    assert!(ok, "{status}");
    std::fs::write(admin.join("status"), status).unwrap();
    for p in ["libc6:amd64", "libgcc-s1:amd64", "adduser"] {
        std::fs::write(admin.join(format!("info/{p}.list")), "").unwrap();
    }
    let dpkg = |args: &[&str]| {
        let mut c = Command::new("dpkg");
        c.arg(format!("--root={}", root.display()))
            .args([
                "--force-script-chrootless",
                "--force-not-root",
                "--log=/dev/null",
            ])
            .args(args);
        out(&mut c)
    };
    let (ok, text) = dpkg(&["-i", deb.to_str().unwrap()]);
    assert!(ok, "dpkg -i: {text}");
    let (_, st) = dpkg(&["-s", "tapflow"]);
    assert!(st.contains("Status: install ok installed"), "{st}");
    // It runs, and says its version.
    let (ok, v) = out(Command::new(root.join("usr/bin/tapflow")).arg("--version"));
    assert!(
        ok && v.trim() == format!("tapflow {}", env!("CARGO_PKG_VERSION")),
        "{v}"
    );
    // Man pages for every command, found by man.
    let man = root.join("usr/share/man");
    for page in [
        "tapflow",
        "tapflow-capture",
        "tapflow-recv",
        "tapflow-rules-add",
    ] {
        let (ok, path) = out(Command::new("man").args(["-w", page]).env("MANPATH", &man));
        assert!(
            ok && path.trim().starts_with(&*root.to_string_lossy()),
            "man {page}: {path}"
        );
    }
    let (ok, page) = out(Command::new("man")
        .args(["-P", "cat", "tapflow-capture"])
        .env("MANPATH", &man)
        .env("MANWIDTH", "100"));
    assert!(ok && page.contains("--rotate-seconds"), "{page}");
    // Completions for bash (which parses it), zsh and fish.
    let bash = root.join("usr/share/bash-completion/completions/tapflow");
    let (ok, text) = out(Command::new("bash").arg("-n").arg(&bash));
    assert!(ok, "bash -n: {text}");
    for f in [
        bash,
        root.join("usr/share/zsh/vendor-completions/_tapflow"),
        root.join("usr/share/fish/vendor_completions.d/tapflow.fish"),
    ] {
        let text = std::fs::read_to_string(&f).unwrap();
        assert!(
            text.contains("capture") && text.contains("rotate-seconds"),
            "{}",
            f.display()
        );
    }
    // The units verify; the example configurations are conffiles.
    verify_units(
        &root.join("usr/lib/systemd/system"),
        "/usr/bin/tapflow",
        &root.join("usr/bin/tapflow"),
        &man,
    );
    let (_, conf) = dpkg(&["--status", "tapflow"]);
    assert!(conf.contains("/etc/tapflow/capture.conf.example"), "{conf}");
    the_installed_console_draws_its_chart(&root.join("usr/bin/tapflow"), tmp.path());
    // Purged, nothing of it is left.
    let (ok, text) = dpkg(&["--purge", "tapflow"]);
    assert!(ok, "dpkg --purge: {text}");
    for gone in [
        "usr/bin/tapflow",
        "etc/tapflow",
        "usr/lib/systemd/system/tapflow-recv.service",
    ] {
        assert!(!root.join(gone).exists(), "{gone} left after purge");
    }
}

/// The installed binary serves its console, charting library included, from anywhere: over a
/// store of an old trace, Chromium opens it on the newest hour with flows and draws the chart.
fn the_installed_console_draws_its_chart(tapflow: &Path, tmp: &Path) {
    if !Path::new("/usr/bin/chromium").exists() {
        eprintln!("the installed console: not loaded in a browser (no chromium)");
        return;
    }
    let trace = built_trace(tmp, "old.pcap", 20, 4, 1_000_000);
    let store = tmp.join("store");
    let (ok, text) = out(Command::new(tapflow)
        .args(["flows", "-q", "-r"])
        .arg(&trace)
        .arg("--store")
        .arg(&store));
    assert!(ok, "flows --store: {text}");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new(tapflow)
        .current_dir(tmp)
        .arg("console")
        .arg("--store")
        .arg(&store)
        .args(["--http", &format!("127.0.0.1:{port}")])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut console = ChildGuard::new(child, "the installed tapflow console");
    console.wait_until(Duration::from_secs(30), "listens", |_| {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    let profile = tempfile::tempdir().unwrap();
    let (ok, dom) = out(Command::new("timeout")
        .args([
            "120",
            "chromium",
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(["--virtual-time-budget=15000", "--dump-dom"])
        .arg(format!("http://127.0.0.1:{port}/")));
    assert!(ok, "chromium: {dom}");
    assert!(
        dom.contains("class=\"uplot") && dom.contains("<canvas"),
        "no chart drawn: {dom}"
    );
    assert!(dom.contains("showing the newest hour with flows"), "{dom}");
}

#[test]
fn install_sh_follows_the_prefix() {
    let tmp = tempfile::tempdir().unwrap();
    let (ok, text) = out(Command::new(repo().join("scripts/install.sh"))
        .args([
            "--prefix",
            "/opt/tf",
            "--bin",
            bin().to_str().unwrap(),
            "--destdir",
        ])
        .arg(tmp.path()));
    assert!(ok, "install.sh: {text}");
    let r = tmp.path();
    assert!(r.join("opt/tf/bin/tapflow").exists());
    assert!(r.join("opt/tf/share/man/man1/tapflow-flows.1.gz").exists());
    assert!(r.join("opt/tf/share/zsh/site-functions/_tapflow").exists());
    // Units outside /usr go with the administrator's, pointing at the prefix's binary.
    verify_units(
        &r.join("etc/systemd/system"),
        "/opt/tf/bin/tapflow",
        &r.join("opt/tf/bin/tapflow"),
        &r.join("opt/tf/share/man"),
    );
    // Nothing outside the stage.
    assert!(!Path::new("/opt/tf").exists());
}

/// The capabilities a unit names in `key`, as setpriv takes them (`-all,+net_raw`).
fn unit_caps(unit: &str, key: &str) -> String {
    let line = unit
        .lines()
        .find(|l| l.starts_with(key))
        .unwrap_or_else(|| panic!("no {key}"));
    let caps: Vec<String> = line[key.len()..]
        .split_whitespace()
        .map(|c| format!("+{}", c.trim_start_matches("CAP_").to_lowercase()))
        .collect();
    format!("-all,{}", caps.join(","))
}

#[test]
fn the_capture_unit_runs_with_only_its_capabilities() {
    let p = VethPair::new("un");
    p.wait_link_up();
    let unit =
        std::fs::read_to_string(repo().join("dist/systemd/tapflow-capture@.service")).unwrap();
    let exec = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart=/usr/bin/tapflow "))
        .unwrap()
        .replace("%I", &p.if_b);
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let out_file = dir.path().join("u.pcapng");
    let conf = dir.path().join(format!("{}.conf", p.if_b));
    std::fs::write(
        &conf,
        format!(
            "write = \"{}\"\ncount = 20\nquiet = true\ncontrol = \"{}\"\n",
            out_file.display(),
            dir.path().join("ctl.sock").display()
        ),
    )
    .unwrap();
    let args: Vec<String> = exec
        .replace(
            &format!("/etc/tapflow/{}.conf", p.if_b),
            &conf.to_string_lossy(),
        )
        .split_whitespace()
        .map(String::from)
        .collect();
    // As systemd starts it: user nobody, the unit's ambient and bounding sets, no new
    // privileges.
    let run_as = |ambient: &str| {
        let mut c = Command::new("ip");
        c.args([
            "netns",
            "exec",
            &p.ns_b,
            "setpriv",
            "--reuid=nobody",
            "--regid=nogroup",
        ])
        .arg("--clear-groups")
        .arg(format!("--inh-caps={ambient}"))
        .arg(format!("--ambient-caps={ambient}"))
        .arg(format!(
            "--bounding-set={}",
            unit_caps(&unit, "CapabilityBoundingSet=")
        ))
        .arg("--no-new-privs")
        .arg(bin())
        .args(&args);
        c
    };
    let mut cap = VethPair::spawn(&mut run_as(&unit_caps(&unit, "AmbientCapabilities=")));
    wait_capturing(&mut cap, 1);
    p.send(&["-c", "20"], dir.path(), 20);
    let (status, err) = cap.wait_output(Duration::from_secs(30));
    assert!(status.success(), "{err}");
    assert_eq!(capinfos_count(&out_file), 20);
    // Without them, the same start fails and says why.
    std::fs::remove_file(&out_file).unwrap();
    let o = run_limited(&mut run_as("-all"), Duration::from_secs(20));
    assert_clean_error(&o, None, &["CAP_NET_RAW"], "no caps");
}
