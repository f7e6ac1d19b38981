//! Every number with a unit on the command line (and in the config file) is read here, the same
//! way for every flag. A flag takes one of these as its clap `value_parser`:
//!
//! | kind | parser | accepts | example |
//! |---|---|---|---|
//! | count, rate | [`count`], [`count_u32`], [`count_usize`], [`rate`] | `k`, `M`, `G` = 10^3, 10^6, 10^9 (either case) | `-c 1k`, `--rate 1.488M` |
//! | size in bytes | [`size`], [`size_u32`], [`size_usize`], [`size_mb`] (bare = 10^6, tcpdump `-C`) | `K`, `M`, `G` = 2^10, 2^20, 2^30, also `KiB`, `MiB`, `GiB`, `KB`... | `--rotate-size 1G`, `-s 64K` |
//! | duration | [`secs`], [`secs_u64`], [`millis`], [`millis_u32`], [`nanos`] | `ms`, `s`, `m`, `h`, `d`; a bare number is in the flag's own unit (seconds for `--duration`, ms for `--retire-ms`) | `--rotate-seconds 1m`, `--retire-ms 0.5s` |
//! | listen address | [`listen_loopback`], [`listen_any`] | `PORT`, `:PORT`, `HOST:PORT`, `[V6]:PORT` (a bare port listens on 127.0.0.1 or 0.0.0.0) | `--metrics 9100` |
//!
//! A new flag uses one of these, e.g. `#[arg(long, value_parser = units::secs)] pub x: Option<f64>`,
//! and its help names the unit it takes. Errors are one line naming the text and the forms it
//! could have taken; clap adds the flag's name.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, ToSocketAddrs};
use std::time::Duration;

/// `text` split into its number and its unit (the trailing letters), both trimmed.
fn split_unit(text: &str) -> (&str, &str) {
    let t = text.trim();
    let at = t
        .char_indices()
        .rev()
        .take_while(|(_, c)| c.is_ascii_alphabetic())
        .last()
        .map_or(t.len(), |(i, _)| i);
    (t[..at].trim_end(), &t[at..])
}

/// A non-negative finite number, or `None`.
fn number(text: &str) -> Option<f64> {
    if text.is_empty() || text.starts_with('+') {
        return None;
    }
    text.parse::<f64>()
        .ok()
        .filter(|n| n.is_finite() && *n >= 0.0)
}

/// A count: a whole number with an optional `k`, `M` or `G` (powers of 1000; `1.5k` is 1500).
pub fn count(s: &str) -> Result<u64, String> {
    let bad = || format!("'{s}' is not a count (like 1000, 10k, 1.5M, 2G)");
    let (num, unit) = split_unit(s);
    let mult = match unit.to_ascii_lowercase().as_str() {
        "" => 1.0,
        "k" => 1e3,
        "m" => 1e6,
        "g" => 1e9,
        _ => return Err(bad()),
    };
    let n = number(num).ok_or_else(bad)? * mult;
    if n.fract() != 0.0 || n > u64::MAX as f64 {
        return Err(bad());
    }
    Ok(n as u64)
}

/// A count that fits in 32 bits.
pub fn count_u32(s: &str) -> Result<u32, String> {
    u32::try_from(count(s)?).map_err(|_| format!("'{s}' is too large (at most {})", u32::MAX))
}

/// A count as a `usize`.
pub fn count_usize(s: &str) -> Result<usize, String> {
    usize::try_from(count(s)?).map_err(|_| format!("'{s}' is too large"))
}

/// A rate per second: a positive number with an optional `k`, `M` or `G`, at most 10G.
pub fn rate(s: &str) -> Result<f64, String> {
    let bad = || format!("'{s}' is not a rate (like 200000, 200k, 1.488M; at most 10G)");
    let (num, unit) = split_unit(s);
    let mult = match unit.to_ascii_lowercase().as_str() {
        "" => 1.0,
        "k" => 1e3,
        "m" => 1e6,
        "g" => 1e9,
        _ => return Err(bad()),
    };
    match number(num).map(|n| n * mult) {
        Some(r) if r > 0.0 && r <= 1e10 => Ok(r),
        _ => Err(bad()),
    }
}

/// A size in bytes: a whole number with an optional `K`, `M` or `G` (powers of 1024, written
/// also `KiB`, `KB`, `k`...); a fraction is taken where it makes whole bytes (`1.5M`).
pub fn size(s: &str) -> Result<u64, String> {
    let bad = || format!("'{s}' is not a size (like 4096, 64K, 1.5M, 2GiB)");
    let (num, unit) = split_unit(s);
    let shift = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return Err(bad()),
    };
    let n = number(num).ok_or_else(bad)? * (1u64 << shift) as f64;
    if n.fract() != 0.0 {
        return Err(bad());
    }
    if n >= u64::MAX as f64 {
        return Err(format!("'{s}' is too large"));
    }
    Ok(n as u64)
}

/// A size where a bare number counts millions of bytes, as tcpdump `-C` takes it (`100` is
/// 100,000,000 bytes; `100M` is 100 MiB).
pub fn size_mb(s: &str) -> Result<u64, String> {
    match count(s) {
        Ok(n) if s.trim().bytes().all(|b| b.is_ascii_digit()) => n
            .checked_mul(1_000_000)
            .ok_or_else(|| format!("'{s}' is too large")),
        _ => size(s),
    }
}

/// A size that fits in 32 bits.
pub fn size_u32(s: &str) -> Result<u32, String> {
    u32::try_from(size(s)?).map_err(|_| format!("'{s}' is too large (at most 4G - 1)"))
}

/// A size as a `usize`.
pub fn size_usize(s: &str) -> Result<usize, String> {
    usize::try_from(size(s)?).map_err(|_| format!("'{s}' is too large"))
}

/// A duration: a number with `ms`, `s`, `m` (minutes), `h` or `d`; a bare number is in
/// `bare` units. At most 10 years.
pub fn duration(s: &str, bare: Duration) -> Result<Duration, String> {
    let bad = || format!("'{s}' is not a duration (like 500ms, 10s, 1m, 1h, 1d)");
    let (num, unit) = split_unit(s);
    let unit_secs = match unit {
        "" => bare.as_secs_f64(),
        "ns" => 1e-9,
        "us" => 1e-6,
        "ms" => 1e-3,
        "s" | "sec" => 1.0,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        "d" => 86_400.0,
        _ => return Err(bad()),
    };
    let secs = number(num).ok_or_else(bad)? * unit_secs;
    if secs > 10.0 * 365.0 * 86_400.0 {
        return Err(format!("'{s}' is too long (at most 10 years)"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// A positive duration (a bare number is seconds): every `--duration`, `--rotate-seconds` and
/// period flag.
pub fn period(s: &str) -> Result<Duration, String> {
    let d = duration(s, Duration::from_secs(1))?;
    if d.is_zero() {
        return Err(format!("'{s}' is not a positive duration"));
    }
    Ok(d)
}

/// A duration in seconds (a bare number is seconds), as `f64` seconds.
pub fn secs(s: &str) -> Result<f64, String> {
    duration(s, Duration::from_secs(1)).map(|d| d.as_secs_f64())
}

/// A duration in whole seconds (a bare number is seconds).
pub fn secs_u64(s: &str) -> Result<u64, String> {
    let d = duration(s, Duration::from_secs(1))?;
    if d.subsec_nanos() != 0 {
        return Err(format!("'{s}' is not a whole number of seconds"));
    }
    Ok(d.as_secs())
}

/// A duration in milliseconds (a bare number is milliseconds), as `f64` milliseconds.
pub fn millis(s: &str) -> Result<f64, String> {
    duration(s, Duration::from_millis(1)).map(|d| d.as_secs_f64() * 1e3)
}

/// A duration in whole milliseconds (a bare number is milliseconds).
pub fn millis_u32(s: &str) -> Result<u32, String> {
    let d = duration(s, Duration::from_millis(1))?;
    if d.as_nanos() % 1_000_000 != 0 {
        return Err(format!("'{s}' is not a whole number of milliseconds"));
    }
    u32::try_from(d.as_millis()).map_err(|_| format!("'{s}' is too long"))
}

/// A duration in nanoseconds (a bare number is nanoseconds), as `f64` nanoseconds.
pub fn nanos(s: &str) -> Result<f64, String> {
    duration(s, Duration::from_nanos(1)).map(|d| d.as_secs_f64() * 1e9)
}

/// A socket address to listen on: `PORT` or `:PORT` (on `host`), `HOST:PORT`, `[V6]:PORT`;
/// a host name is resolved.
pub fn listen(s: &str, host: IpAddr) -> Result<SocketAddr, String> {
    let t = s.trim();
    let port = t.strip_prefix(':').unwrap_or(t);
    if let Ok(p) = port.parse::<u16>() {
        return Ok(SocketAddr::new(host, p));
    }
    if let Ok(a) = t.parse::<SocketAddr>() {
        return Ok(a);
    }
    let bad = format!("'{s}' is not PORT, :PORT, HOST:PORT or [V6]:PORT (e.g. 9100, 0.0.0.0:9100)");
    if !t.contains(':') {
        return Err(bad);
    }
    t.to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or(bad)
}

/// A listen address whose bare port listens on loopback (127.0.0.1): `--metrics`.
pub fn listen_loopback(s: &str) -> Result<SocketAddr, String> {
    listen(s, IpAddr::V4(Ipv4Addr::LOCALHOST))
}

/// A listen address whose bare port listens on every IPv4 address (0.0.0.0): `recv --listen`.
pub fn listen_any(s: &str) -> Result<SocketAddr, String> {
    listen(s, IpAddr::V4(Ipv4Addr::UNSPECIFIED))
}

/// A byte count the way [`size`] reads it: `256K`, `11.5M`.
pub fn format_size(n: u64) -> String {
    let unit = |shift: u32, suffix: &str| {
        let v = n as f64 / f64::from(1u32 << shift);
        if n.is_multiple_of(1 << shift) {
            format!("{v:.0}{suffix}")
        } else {
            format!("{v:.1}{suffix}")
        }
    };
    match n {
        n if n >= 1 << 30 => unit(30, "G"),
        n if n >= 1 << 20 => unit(20, "M"),
        n if n >= 1 << 10 => unit(10, "K"),
        n => n.to_string(),
    }
}

/// A count the way [`count`] reads it, to three significant digits: `950`, `12.3k`, `1.49M`.
pub fn format_count(x: f64) -> String {
    let scaled = |v: f64, suffix: &str| {
        if v >= 100.0 {
            format!("{v:.0}{suffix}")
        } else if v >= 10.0 {
            format!("{v:.1}{suffix}")
        } else {
            format!("{v:.2}{suffix}")
        }
    };
    match x {
        x if x >= 1e9 => scaled(x / 1e9, "G"),
        x if x >= 1e6 => scaled(x / 1e6, "M"),
        x if x >= 1e3 => scaled(x / 1e3, "k"),
        x => format!("{x:.0}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_rates_are_powers_of_1000() {
        assert_eq!(count("1000"), Ok(1000));
        assert_eq!(count("10k"), Ok(10_000));
        assert_eq!(count("1K"), Ok(1000));
        assert_eq!(count("1.5M"), Ok(1_500_000));
        assert_eq!(count("2G"), Ok(2_000_000_000));
        assert_eq!(count(" 7 "), Ok(7));
        for bad in ["", "k", "1.5", "-1", "1x", "+3", "1e400", "1kk"] {
            assert!(count(bad).is_err(), "{bad}");
        }
        assert_eq!(
            count_u32("5G"),
            Err("'5G' is too large (at most 4294967295)".into())
        );
        assert_eq!(rate("200k"), Ok(200e3));
        assert_eq!(rate("1.488M"), Ok(1.488e6));
        assert!(rate("fast").is_err() && rate("0").is_err() && rate("11G").is_err());
    }

    #[test]
    fn sizes_are_powers_of_1024() {
        assert_eq!(size("4096"), Ok(4096));
        assert_eq!(size("64K"), Ok(65536));
        assert_eq!(size("64KiB"), Ok(65536));
        assert_eq!(size("1m"), Ok(1 << 20));
        assert_eq!(size("1.5M"), Ok(3 << 19));
        assert_eq!(size("2GiB"), Ok(2 << 30));
        assert_eq!(size("2 GB"), Ok(2 << 30));
        assert!(size("0.3").is_err() && size("").is_err() && size("1Q").is_err());
        assert!(size("99999999999G").is_err());
        assert!(size_u32("4G").is_err());
        assert_eq!(size_mb("100"), Ok(100_000_000));
        assert_eq!(size_mb("100M"), Ok(100 << 20));
        assert_eq!(format_size(256 << 10), "256K");
        assert_eq!(format_size(11_776 << 10), "11.5M");
        assert_eq!(size(&format_size(4 << 20)), Ok(4 << 20));
        assert_eq!(format_count(1_488_000.0), "1.49M");
        assert_eq!(format_count(12_345.0), "12.3k");
        assert_eq!(format_count(950.0), "950");
    }

    #[test]
    fn durations_take_a_unit_or_the_flags_own() {
        assert_eq!(secs("10"), Ok(10.0));
        assert_eq!(secs("1m"), Ok(60.0));
        assert_eq!(secs("1.5h"), Ok(5400.0));
        assert_eq!(secs("250ms"), Ok(0.25));
        assert_eq!(secs("1d"), Ok(86_400.0));
        assert_eq!(secs_u64("5m"), Ok(300));
        assert!(secs_u64("1.5").is_err());
        assert_eq!(millis("10"), Ok(10.0));
        assert_eq!(millis("1s"), Ok(1000.0));
        assert_eq!(millis_u32("0.5s"), Ok(500));
        assert!(millis_u32("1.5").is_err());
        for bad in ["", "m", "1y", "-1s", "1 minute", "nan", "inf"] {
            assert!(secs(bad).is_err(), "{bad}");
        }
        assert!(secs("11000d").is_err());
    }

    #[test]
    fn listen_addresses_with_or_without_host() {
        let lo = |p| SocketAddr::from(([127, 0, 0, 1], p));
        assert_eq!(listen_loopback("9100"), Ok(lo(9100)));
        assert_eq!(listen_loopback(":9100"), Ok(lo(9100)));
        assert_eq!(
            listen_any("5000"),
            Ok(SocketAddr::from(([0, 0, 0, 0], 5000)))
        );
        assert_eq!(
            listen_any("10.1.2.3:5000"),
            Ok(SocketAddr::from(([10, 1, 2, 3], 5000)))
        );
        assert_eq!(
            listen_any("[::1]:5000"),
            "[::1]:5000"
                .parse::<SocketAddr>()
                .map_err(|e| e.to_string())
        );
        assert_eq!(listen_any("localhost:5000").map(|a| a.port()), Ok(5000));
        for bad in ["", "x", "70000", "1.2.3.4", "1.2.3.4:x"] {
            assert!(listen_any(bad).is_err(), "{bad}");
        }
    }
}
