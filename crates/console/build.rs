//! The charting library (uPlot, from npm) is compiled into the console: it must be in
//! `vendor/` before the build, put there by `scripts/fetch-console-assets.sh`.

use std::path::Path;

fn main() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("vendor");
    println!("cargo::rerun-if-changed=vendor");
    for name in ["uPlot.esm.js", "uPlot.min.css"] {
        let path = dir.join(name);
        println!("cargo::rerun-if-changed=vendor/{name}");
        if !path.is_file() {
            println!(
                "cargo::error={}: the console's charting library is missing: run \
                 scripts/fetch-console-assets.sh (it fetches uPlot with npm), then build again",
                path.display()
            );
        }
    }
}
