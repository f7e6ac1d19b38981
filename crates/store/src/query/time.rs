//! Times as queries write them: `-t` windows, durations, and UTC dates and back.
//!
//! A time is `YYYY-MM-DD[THH:MM[:SS[.frac]]]` (a space or `.` may stand for the `T`, and nfdump's
//! `YYYY/MM/DD.HH:MM:SS` works too), in UTC unless it ends in `Z` or an offset `+HH:MM`/`-HH:MM`.
//! A window is `START/DURATION`, `START-END`, `START` alone (to the end of the store), or `last
//! DURATION` (ending now). A duration is a number and a unit: `s`, `m`, `h`, `d` or `w`.

use super::{QueryError, Window};

const US_PER_S: i64 = 1_000_000;

fn err(m: String) -> QueryError {
    QueryError::Parse(m)
}

/// Parses a `-t` window; `now_us` is the end of `last DURATION`.
pub fn parse_window(text: &str, now_us: i64) -> Result<Window, QueryError> {
    let t = text.trim();
    let bad = |why: &str| err(format!("time window '{text}': {why}"));
    if let Some(d) = t.strip_prefix("last") {
        let d = parse_duration(d.trim())?;
        return Ok(Window {
            start_us: now_us - d,
            end_us: now_us,
        });
    }
    let with_duration = t
        .rsplit_once('/')
        .and_then(|(s, d)| Some((s, parse_duration(d).ok()?)));
    let w = if let Some((start, dur)) = with_duration {
        let start_us = parse_time(start)?;
        Window {
            start_us,
            end_us: start_us + dur,
        }
    } else if let Ok(start_us) = parse_time(t) {
        Window {
            start_us,
            end_us: i64::MAX,
        }
    } else {
        // START-END: the dash that splits the text into two times.
        t.match_indices('-')
            .find_map(|(i, _)| {
                let (a, b) = (parse_time(&t[..i]).ok()?, parse_time(&t[i + 1..]).ok()?);
                Some(Window {
                    start_us: a,
                    end_us: b,
                })
            })
            .ok_or_else(|| bad("not START/DURATION, START-END, START or 'last DURATION'"))?
    };
    if w.end_us <= w.start_us {
        return Err(bad("it ends before it starts"));
    }
    Ok(w)
}

/// Parses `15m`, `1h`, `30s`, `2d`, `1w` into µs (> 0).
pub fn parse_duration(text: &str) -> Result<i64, QueryError> {
    let bad = || {
        err(format!(
            "duration '{text}': a number and a unit s, m, h, d or w"
        ))
    };
    let t = text.trim();
    let unit = match t.chars().last().ok_or_else(bad)? {
        's' => 1,
        'm' => 60,
        'h' => 3600,
        'd' => 86_400,
        'w' => 7 * 86_400,
        _ => return Err(bad()),
    };
    let n: i64 = t[..t.len() - 1].parse().map_err(|_| bad())?;
    if n <= 0 || n > 100 * 365 * 86_400 / unit {
        return Err(bad());
    }
    Ok(n * unit * US_PER_S)
}

/// Parses one time (see the module doc) into µs since 1970 UTC.
pub fn parse_time(text: &str) -> Result<i64, QueryError> {
    let bad = || {
        err(format!(
            "time '{text}': not YYYY-MM-DD[THH:MM[:SS]][Z|+HH:MM]"
        ))
    };
    let t = text.trim();
    // The zone: Z, or +HH:MM / -HH:MM / +HHMM after the time of day.
    let (t, offset_s) = if let Some(rest) = t.strip_suffix(['Z', 'z']) {
        (rest, 0)
    } else {
        match t.rfind(['+', '-']).filter(|&i| i > 10) {
            Some(i) => {
                let z = t[i + 1..].replace(':', "");
                if z.len() != 4 || !z.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(bad());
                }
                let s = z[..2].parse::<i64>().map_err(|_| bad())? * 3600
                    + z[2..].parse::<i64>().map_err(|_| bad())? * 60;
                (&t[..i], if &t[i..=i] == "-" { -s } else { s })
            }
            None => (t, 0),
        }
    };
    let Some((date, clock)) = t.split_at_checked(10) else {
        return Err(bad());
    };
    let date: Vec<&str> = date.split(['-', '/']).collect();
    let [y, mo, d] = date[..] else {
        return Err(bad());
    };
    let num = |s: &str, lo: i64, hi: i64| {
        s.parse::<i64>()
            .ok()
            .filter(|n| (lo..=hi).contains(n) && !s.is_empty() && s.len() <= 4)
            .ok_or_else(bad)
    };
    let (y, mo, d) = (
        num(y, 1970, 9999)?,
        num(mo, 1, 12)? as u32,
        num(d, 1, 31)? as u32,
    );
    let mut us = 0;
    if !clock.is_empty() {
        let clock = clock.strip_prefix(['T', ' ', '.']).ok_or_else(bad)?;
        let (hms, frac) = clock.split_once('.').unwrap_or((clock, ""));
        let parts: Vec<&str> = hms.split(':').collect();
        let (h, m, s) = match parts[..] {
            [h, m] => (num(h, 0, 23)?, num(m, 0, 59)?, 0),
            [h, m, s] => (num(h, 0, 23)?, num(m, 0, 59)?, num(s, 0, 60)?),
            _ => return Err(bad()),
        };
        if !frac.is_empty() {
            if frac.len() > 6 || !frac.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad());
            }
            us = format!("{frac:0<6}").parse::<i64>().map_err(|_| bad())?;
        }
        us += (h * 3600 + m * 60 + s) * US_PER_S;
    }
    Ok((days_from_civil(y, mo, d) * 86_400 - offset_s) * US_PER_S + us)
}

/// `µs` as `YYYY-MM-DD HH:MM:SS.mmm` UTC.
pub fn format_time(us: i64) -> String {
    let s = us.div_euclid(US_PER_S);
    let ms = us.rem_euclid(US_PER_S) / 1000;
    let (y, mo, d) = civil_from_days(s.div_euclid(86_400));
    let sod = s.rem_euclid(86_400);
    format!(
        "{y:04}-{mo:02}-{d:02} {:02}:{:02}:{:02}.{ms:03}",
        sod / 3600,
        sod / 60 % 60,
        sod % 60
    )
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's `days_from_civil`).
pub fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (i64::from(m) + 9) % 12;
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date of a day since 1970-01-01 (H. Hinnant's `civil_from_days`).
pub fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (
        if m <= 2 {
            yoe + era * 400 + 1
        } else {
            yoe + era * 400
        },
        m,
        d,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const T10: i64 = 1_795_600_800 * US_PER_S; // 2026-11-25T10:00:00Z

    #[test]
    fn windows_in_every_form() {
        let w = |s: &str| parse_window(s, T10).unwrap_or_else(|e| panic!("{s}: {e}"));
        let q = Window {
            start_us: T10,
            end_us: T10 + 900 * US_PER_S,
        };
        assert_eq!(w("2026-11-25T10:00/15m"), q);
        assert_eq!(w("2026-11-25 10:00:00/900s"), q);
        assert_eq!(w("2026-11-25T10:00-2026-11-25T10:15"), q);
        assert_eq!(w("2026/11/25.10:00:00-2026/11/25.10:15:00"), q);
        assert_eq!(w("2026-11-25T11:00+01:00/15m"), q);
        assert_eq!(w("2026-11-25T10:00Z-2026-11-25T10:15Z"), q);
        assert_eq!(w("2026-11-25T04:00-06:00/15m"), q);
        assert_eq!(
            w("last 1h"),
            Window {
                start_us: T10 - 3600 * US_PER_S,
                end_us: T10
            }
        );
        assert_eq!(w("2026-11-25T10:00").end_us, i64::MAX);
        assert_eq!(w("2026-11-25").start_us, T10 - 10 * 3600 * US_PER_S);
        for bad in [
            "2026-11-2Ś5T10:00",
            "2026-11-25T10:00/15",
            "yesterday",
            "2026-13-01",
            "2026-11-25T10:15-2026-11-25T10:00",
        ] {
            assert!(parse_window(bad, T10).is_err(), "{bad}");
        }
    }

    #[test]
    fn dates_round_trip() {
        assert_eq!(format_time(T10 + 1_500), "2026-11-25 10:00:00.001");
    }
}
