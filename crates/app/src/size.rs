//! Sizes and rates on the command line: `4096`, `64K`, `1M`, `2G` (powers of 1024) for bytes,
//! `200k`, `1.488M` (powers of 1000) for packet rates; and sizes printed back the same way.

use tapflow_engine::tools::plan;

/// `text` split into its number and its K, M or G suffix (lower case), if it has one.
fn split_suffix(text: &str) -> (&str, Option<char>) {
    let t = text.trim();
    match t.char_indices().last() {
        Some((i, c)) if matches!(c.to_ascii_lowercase(), 'k' | 'm' | 'g') => {
            (&t[..i], Some(c.to_ascii_lowercase()))
        }
        _ => (t, None),
    }
}

/// Parses a byte count with an optional K, M or G suffix.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let (num, suffix) = split_suffix(s);
    let mult: u64 = match suffix {
        Some('k') => 1 << 10,
        Some('m') => 1 << 20,
        Some('g') => 1 << 30,
        _ => 1,
    };
    let n: u64 = num
        .parse()
        .map_err(|_| format!("'{s}' is not a size (like 4096, 64K, 1M, 2G)"))?;
    n.checked_mul(mult)
        .ok_or_else(|| format!("'{s}' is too large"))
}

/// A packet rate: a number with an optional SI suffix (`200k`, `1.488M`, `2G`), at most 10G.
pub fn parse_rate(s: &str) -> Result<f64, String> {
    let (num, suffix) = split_suffix(s);
    let mult = match suffix {
        Some('k') => 1e3,
        Some('m') => 1e6,
        Some('g') => 1e9,
        _ => 1.0,
    };
    match num.parse::<f64>() {
        Ok(n) if n.is_finite() && n > 0.0 && n * mult <= 1e10 => Ok(n * mult),
        _ => Err(format!(
            "'{s}' is not a packet rate (like 200000, 200k, 1.488M; at most 10G)"
        )),
    }
}

/// A ring block size (`--block-size`): a power of two from 4K to 1G.
pub fn block_size(bytes: u64) -> Result<u32, String> {
    match u32::try_from(bytes) {
        Ok(b) if b.is_power_of_two() && (plan::PAGE..=plan::MAX_BLOCK_SIZE).contains(&b) => Ok(b),
        _ => Err(format!(
            "--block-size {bytes} must be a power of two from 4K to 1G"
        )),
    }
}

/// A byte count the way `parse_size` reads it: `256K`, `11.5M`.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suffixes_are_powers_of_1024() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("64K"), Ok(65536));
        assert_eq!(parse_size("1m"), Ok(1 << 20));
        assert_eq!(parse_size("2G"), Ok(2 << 30));
        assert!(parse_size("1.5M").is_err());
        assert!(parse_size("").is_err());
        assert!(parse_size("99999999999G").is_err());
    }

    #[test]
    fn rates_are_powers_of_1000_and_sizes_print_back() {
        assert_eq!(parse_rate("200k"), Ok(200e3));
        assert_eq!(parse_rate("1.488M"), Ok(1.488e6));
        assert!(parse_rate("fast").is_err() && parse_rate("0").is_err());
        assert!(parse_rate("11G").is_err());
        assert_eq!(block_size(65536), Ok(65536));
        assert!(block_size(3000).is_err() && block_size(2048).is_err());
        assert_eq!(format_size(256 << 10), "256K");
        assert_eq!(format_size(11_776 << 10), "11.5M");
        assert_eq!(parse_size(&format_size(4 << 20)), Ok(4 << 20));
    }
}
