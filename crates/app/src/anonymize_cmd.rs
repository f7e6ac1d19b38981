//! `tapflow anonymize`: a capture file's IP addresses through Crypto-PAn into a new file; and
//! the key file every `--anonymize` reads.

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use tapflow_engine::pipeline::{self, CaptureConfig, Input};
use tapflow_engine::sink::file::{Format, WriterConfig};
use tapflow_engine::stop::Stop;
use tapflow_wire::capfile::MAXIMUM_SNAPLEN;
use tapflow_wire::cryptopan::{CryptoPan, KEY_LEN};
use tapflow_wire::inner::Unread;

use crate::cli::{AnonymizeArgs, FormatArg};
use crate::report::{StatusLine, summary_line};
use crate::{Failure, in_range};

/// Reads a Crypto-PAn key file: exactly 32 bytes, or 64 hex digits (a final newline allowed).
pub fn read_key(path: &Path) -> Result<CryptoPan, Failure> {
    let bad = |m: String| Failure::Usage(format!("{}: {m}", path.display()));
    let bytes = std::fs::read(path).map_err(|e| bad(format!("cannot read the key: {e}")))?;
    let key: [u8; KEY_LEN] = match bytes.len() {
        KEY_LEN => bytes.try_into().expect("32 bytes"),
        _ => {
            let text = bytes.strip_suffix(b"\n").unwrap_or(&bytes);
            let text = text.strip_suffix(b"\r").unwrap_or(text);
            hex_key(text).ok_or_else(|| {
                bad(format!(
                    "not a Crypto-PAn key: {} bytes; a key file holds 32 bytes or 64 hex digits",
                    bytes.len()
                ))
            })?
        }
    };
    Ok(CryptoPan::new(&key))
}

/// 64 hex digits as 32 bytes.
fn hex_key(text: &[u8]) -> Option<[u8; KEY_LEN]> {
    if text.len() != 2 * KEY_LEN {
        return None;
    }
    let digit = |c: u8| (c as char).to_digit(16);
    let mut key = [0u8; KEY_LEN];
    for (k, pair) in key.iter_mut().zip(text.chunks_exact(2)) {
        *k = (digit(pair[0])? * 16 + digit(pair[1])?) as u8;
    }
    Some(key)
}

/// Runs `tapflow anonymize`.
pub fn run(a: &AnonymizeArgs, stop: &Arc<Stop>) -> Result<ExitCode, Failure> {
    let pan = read_key(&a.key)?;
    let snaplen = a.snaplen.unwrap_or(MAXIMUM_SNAPLEN);
    in_range("snaplen", snaplen, 1, MAXIMUM_SNAPLEN)?;
    let cfg = CaptureConfig {
        input: Input::File(a.read.clone()),
        snaplen,
        filter: None,
        file: Some(WriterConfig {
            path: a.write.clone(),
            format: match a.format {
                FormatArg::Pcapng => Format::Pcapng,
                FormatArg::Pcap => Format::Pcap,
            },
            worker: None,
            rotate_bytes: None,
            rotate_every: None,
            isb_every: Duration::from_secs(3600),
            keep: None,
        }),
        count: None,
        duration: None,
        forward: None,
        flows: None,
        rules: None,
        control: None,
        metrics: None,
        drop_privileges: None,
        anonymize: Some(pan.clone()),
        print: false,
        detect: None,
    };
    let len = std::fs::metadata(&a.read).ok().map(|m| m.len());
    let mut status = StatusLine::new(&format!("reading {}", a.read.display()), a.quiet, len);
    let (summary, err) = pipeline::run(&cfg, stop, &mut |_| {}, &mut |t| status.tick(t));
    status.finish();
    if err.is_none() || summary.totals.received > 0 {
        eprintln!("{}", summary_line(&summary.totals));
    }
    say_unread(Some(&pan));
    match err {
        None => Ok(ExitCode::SUCCESS),
        Some(e) => Err(Failure::from_engine(e)),
    }
}

/// Prints [`unread_line`] for the mapping a run anonymised with, if it has one to say.
pub(crate) fn say_unread(pan: Option<&CryptoPan>) {
    if let Some(line) = pan.and_then(|p| unread_line(&p.unread())) {
        eprintln!("{line}");
    }
}

/// The closing line for packets whose headers kept addresses, by kind; `None` if there were
/// none.
fn unread_line(unread: &[(Unread, u64)]) -> Option<String> {
    let total: u64 = unread.iter().map(|(_, n)| n).sum();
    let kinds: Vec<String> = unread
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(k, n)| format!("{n} {}", k.describe()))
        .collect();
    (total > 0).then(|| {
        format!(
            "tapflow: {total} packet{} had headers it could not anonymise, their addresses kept: {}",
            if total == 1 { "" } else { "s" },
            kinds.join(", ")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_unread_line_names_each_kind_and_is_absent_without_any() {
        assert_eq!(unread_line(&[(Unread::Gre, 0), (Unread::TooDeep, 0)]), None);
        assert_eq!(
            unread_line(&[(Unread::Gre, 3), (Unread::TooDeep, 1)]).unwrap(),
            "tapflow: 4 packets had headers it could not anonymise, their addresses kept: \
             3 in GRE payloads of another kind, 1 nested deeper than 4 headers"
        );
    }

    #[test]
    fn keys_are_32_bytes_or_64_hex_digits_and_anything_else_is_one_line() {
        let dir = std::env::temp_dir().join(format!("tf-key-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let raw: Vec<u8> = (0..32).collect();
        let hex: String = raw.iter().map(|b| format!("{b:02x}")).collect();
        let probe = [198, 51, 100, 7];
        let want = CryptoPan::new(&raw.clone().try_into().unwrap()).ipv4(probe);
        for (name, bytes) in [
            ("raw", raw.clone()),
            ("hex", hex.clone().into_bytes()),
            ("hexnl", format!("{}\n", hex.to_uppercase()).into_bytes()),
        ] {
            let p = dir.join(name);
            std::fs::write(&p, bytes).unwrap();
            assert_eq!(read_key(&p).unwrap().ipv4(probe), want, "{name}");
        }
        for (name, bytes) in [
            ("short", vec![1u8; 31]),
            ("long", vec![1u8; 33]),
            ("nothex", format!("{}zz", &hex[..62]).into_bytes()),
            ("empty", Vec::new()),
        ] {
            let p = dir.join(name);
            std::fs::write(&p, bytes).unwrap();
            let Err(Failure::Usage(m)) = read_key(&p) else {
                panic!("{name} accepted");
            };
            assert!(
                m.contains(name) && m.contains("32 bytes or 64 hex digits"),
                "{m}"
            );
            assert!(!m.contains('\n'));
        }
        let Err(Failure::Usage(m)) = read_key(&dir.join("missing")) else {
            panic!("a missing key file accepted");
        };
        assert!(m.contains("missing: cannot read the key"), "{m}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
