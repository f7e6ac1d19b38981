//! Enrichment's lookups against reference readers on the same files, for 100,000 random
//! addresses (half IPv4, half IPv6): the country MMDB against Python's `maxminddb` (MaxMind's
//! reader), the AS ranges against Python's `ipaddress` and `bisect` over the CSV.
//!
//! The data is what scripts/fetch-ipdb.sh fetched (`TAPFLOW_IPDB`, default
//! /var/cache/tapflow/ipdb); without it, or without Python's `maxminddb`, the test says skipped.

use std::io::Write;
use std::path::PathBuf;
use std::process::Command;

use tapflow_engine::enrich::{EnrichConfig, Enricher, Source};

const ADDRESSES: usize = 100_000;

const ORACLE: &str = r#"
import bisect, csv, ipaddress, sys
import maxminddb
country_db, asn_csv, addrs = sys.argv[1:4]
reader = maxminddb.open_database(country_db)
starts, rows = [], []
with open(asn_csv, newline="") as f:
    for first, last, asn, name in csv.reader(f):
        a, b = ipaddress.ip_address(first), ipaddress.ip_address(last)
        k = lambda x: int(x) + (0xFFFF00000000 if x.version == 4 else 0)
        rows.append((k(a), k(b), int(asn), name.strip()))
rows.sort(key=lambda r: (r[0], r[1]))
starts = [r[0] for r in rows]
out = sys.stdout
for line in open(addrs):
    ip = ipaddress.ip_address(line.strip())
    rec = reader.get(ip) or {}
    c = rec.get("country_code") or (rec.get("country") or {}).get("iso_code") or ""
    k = int(ip) + (0xFFFF00000000 if ip.version == 4 else 0)
    i = bisect.bisect_right(starts, k) - 1
    asn, name = (rows[i][2], rows[i][3]) if i >= 0 and k <= rows[i][1] else (0, "")
    out.write(f"{c}\t{asn}\t{name}\n")
"#;

fn python() -> Option<PathBuf> {
    let env = std::env::var_os("TAPFLOW_PYENV").map(PathBuf::from);
    let candidates = [
        env.map(|p| p.join("bin/python3")),
        Some(PathBuf::from("/var/cache/tapflow/pyenv/bin/python3")),
        Some(PathBuf::from("python3")),
    ];
    candidates.into_iter().flatten().find(|p| {
        Command::new(p)
            .args(["-c", "import maxminddb"])
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

/// A xorshift generator: the same addresses every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Half IPv4 anywhere, half IPv6 in 2000::/4 (where nearly all allocated space is), with a
/// few fixed ones; (family, address as a flow record holds it, text).
fn addresses() -> Vec<(bool, [u8; 16], String)> {
    let mut rng = Rng(0x5eed_1234_abcd_0001);
    let mut out = Vec::with_capacity(ADDRESSES);
    for i in 0..ADDRESSES {
        let mut a = [0u8; 16];
        if i % 2 == 0 {
            a[..4].copy_from_slice(&(rng.next() as u32).to_be_bytes());
            let ip = std::net::Ipv4Addr::new(a[0], a[1], a[2], a[3]);
            out.push((false, a, ip.to_string()));
        } else {
            a[..8].copy_from_slice(&rng.next().to_be_bytes());
            a[8..].copy_from_slice(&rng.next().to_be_bytes());
            // 2000::/4, with the first 32 bits drawn from fewer values so that more land in
            // allocated blocks.
            a[0] = 0x20 | (a[0] & 0x0f);
            if i % 4 == 1 {
                a[1] = 0;
                a[2] &= 0x0f;
            }
            let ip = std::net::Ipv6Addr::from(a);
            out.push((true, a, ip.to_string()));
        }
    }
    out
}

#[test]
fn lookups_equal_the_reference_readers() {
    let dir = std::env::var_os("TAPFLOW_IPDB")
        .map_or_else(|| PathBuf::from("/var/cache/tapflow/ipdb"), PathBuf::from);
    let (country, asn) = (dir.join("country.mmdb"), dir.join("asn.csv"));
    if !country.exists() || !asn.exists() {
        println!(
            "skipped: lookups_equal_the_reference_readers: no data at {} (run scripts/fetch-ipdb.sh)",
            dir.display()
        );
        return;
    }
    let Some(python) = python() else {
        println!("skipped: lookups_equal_the_reference_readers: no Python maxminddb");
        return;
    };
    let addrs = addresses();
    let tmp = std::env::temp_dir().join(format!("tapflow-enrich-ref-{}", std::process::id()));
    {
        let mut f = std::io::BufWriter::new(std::fs::File::create(&tmp).unwrap());
        for (_, _, s) in &addrs {
            writeln!(f, "{s}").unwrap();
        }
    }
    let out = Command::new(&python)
        .args(["-c", ORACLE])
        .arg(&country)
        .arg(&asn)
        .arg(&tmp)
        .output()
        .unwrap();
    std::fs::remove_file(&tmp).unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let want: Vec<&str> = text.lines().collect();
    assert_eq!(want.len(), ADDRESSES);

    let source = Source::open(EnrichConfig {
        geoip: Some(country.clone()),
        asn: Some(asn.clone()),
        networks: None,
        interfaces: None,
    })
    .unwrap();
    let mut e = Enricher::new(source);
    let (mut countries, mut ases) = (0, 0);
    for ((ipv6, a, s), w) in addrs.iter().zip(&want) {
        let p = e.place(*ipv6, a);
        let got = format!("{}\t{}\t{}", p.country_code(), p.asn, p.as_name);
        assert_eq!(&got, w, "{s}");
        countries += usize::from(!p.country_code().is_empty());
        ases += usize::from(p.asn != 0);
    }
    // The comparison means something only if many addresses were found.
    assert!(countries > ADDRESSES / 4, "{countries} with a country");
    assert!(ases > ADDRESSES / 4, "{ases} with an AS");
    println!("{countries} of {ADDRESSES} with a country, {ases} with an AS: all equal");
}
