//! Output file names: `-w out.pcapng` with workers (`out-w1.pcapng`) and rotation
//! (`out-00003.pcapng`, `out-w1-00003.pcapng`). Files are written as `NAME.part` first.

use std::path::{Path, PathBuf};

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
}
