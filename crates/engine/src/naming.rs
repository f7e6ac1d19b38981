//! Output file names: `-w out.pcapng` with workers (`out-w1.pcapng`) and rotation
//! (`out-00003.pcapng`, `out-w1-00003.pcapng`), or, when the name has strftime conversions
//! (`-w trace-%Y%m%d-%H%M%S.pcapng`), the local time each file is opened, as tcpdump `-G`
//! names them. `-w -` is standard output. Files are written as `NAME.part` first.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// The name `-w -` gives standard output.
pub const STDOUT: &str = "-";

/// Whether `base` is standard output.
pub fn is_stdout(base: &Path) -> bool {
    base.as_os_str() == STDOUT
}

/// Whether `base` names files by their opening time (it has a `%` conversion).
pub fn is_timed(base: &Path) -> bool {
    base.to_string_lossy().contains('%')
}

/// `base` with its strftime conversions filled in for `at` (local time); an error names a
/// conversion that is not one.
pub fn timed_path(base: &Path, at: SystemTime) -> Result<PathBuf, String> {
    use std::fmt::Write;
    let text = base.to_string_lossy();
    let local: chrono::DateTime<chrono::Local> = at.into();
    let mut name = String::new();
    write!(name, "{}", local.format(&text))
        .map_err(|_| format!("{text}: not a strftime pattern (like trace-%Y%m%d-%H%M%S.pcapng)"))?;
    Ok(PathBuf::from(name))
}

/// The name of one output file.
pub fn output_path(base: &Path, worker: Option<usize>, rotation: Option<u64>) -> PathBuf {
    if worker.is_none() && rotation.is_none() {
        return base.to_path_buf();
    }
    let file = base
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    // A compressed file's extension is two: `out.pcapng.zst` becomes `out-00003.pcapng.zst`.
    let dot = |s: &str| s.rfind('.').filter(|&i| i > 0);
    let at = dot(&file).map(|i| match &file[i..] {
        ".zst" | ".zstd" | ".gz" => dot(&file[..i]).unwrap_or(i),
        _ => i,
    });
    let (stem, ext) = match at {
        Some(i) => (&file[..i], &file[i..]),
        None => (file.as_str(), ""),
    };
    let mut name = stem.to_string();
    if let Some(w) = worker {
        name.push_str(&format!("-w{w}"));
    }
    if let Some(r) = rotation {
        name.push_str(&format!("-{r:05}"));
    }
    name.push_str(ext);
    base.with_file_name(name)
}

/// The temporary name a file has while it is being written.
pub fn part_path(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_os_string();
    s.push(".part");
    PathBuf::from(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_contract() {
        let b = Path::new("/tmp/x/out.pcapng");
        assert_eq!(output_path(b, None, None), b);
        assert_eq!(
            output_path(b, Some(1), None),
            Path::new("/tmp/x/out-w1.pcapng")
        );
        assert_eq!(
            output_path(b, None, Some(3)),
            Path::new("/tmp/x/out-00003.pcapng")
        );
        assert_eq!(
            output_path(b, Some(0), Some(12)),
            Path::new("/tmp/x/out-w0-00012.pcapng")
        );
        assert_eq!(
            output_path(Path::new("/x/t.pcapng.zst"), Some(1), Some(2)),
            Path::new("/x/t-w1-00002.pcapng.zst")
        );
        assert_eq!(
            output_path(Path::new("t.gz"), None, Some(2)),
            Path::new("t-00002.gz")
        );
        assert_eq!(
            output_path(Path::new("trace"), Some(2), None),
            Path::new("trace-w2")
        );
        assert_eq!(part_path(b), Path::new("/tmp/x/out.pcapng.part"));
    }

    #[test]
    fn timed_names_take_the_local_time() {
        let at = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000);
        let p = Path::new("/tmp/t-%Y-%%.pcap");
        assert!(is_timed(p) && !is_timed(Path::new("/tmp/t.pcap")));
        let name = timed_path(p, at).unwrap();
        assert!(
            name == Path::new("/tmp/t-2023-%.pcap"),
            "{}",
            name.display()
        );
        assert!(timed_path(Path::new("t-%Q"), at).is_err());
        assert!(is_stdout(Path::new("-")) && !is_stdout(Path::new("./-")));
    }
}
