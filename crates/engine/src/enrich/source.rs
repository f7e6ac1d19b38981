//! The tables in force, and their reload: when a file's modification time or size changes, or
//! when asked (SIGHUP), the files are loaded anew beside the tables in use and swapped in whole.
//! Enrichers take up the new tables at their next batch, so no flow waits for a load and none
//! is lost. A file that cannot be loaded is refused with its line number, and the previous
//! tables stay in force.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, SystemTime};

use super::{EnrichConfig, LoadError, Tables};

/// What identifies one version of a file: its modification time and size.
type Stamp = Option<(SystemTime, u64)>;

fn stamp(path: &Path) -> Stamp {
    let m = std::fs::metadata(path).ok()?;
    Some((m.modified().ok()?, m.len()))
}

/// The tables in force and where they come from.
#[derive(Debug)]
pub struct Source {
    cfg: EnrichConfig,
    tables: Mutex<Arc<Tables>>,
    generation: AtomicU64,
    /// The files' stamps when they were last loaded (or refused).
    stamps: Mutex<Vec<Stamp>>,
}

impl Source {
    /// The tables of the files `cfg` names, loaded now.
    pub fn open(cfg: EnrichConfig) -> Result<Arc<Source>, LoadError> {
        let stamps = cfg.files().iter().map(|(_, p)| stamp(p)).collect();
        let tables = Tables::load(&cfg)?;
        Ok(Arc::new(Source {
            cfg,
            tables: Mutex::new(Arc::new(tables)),
            generation: AtomicU64::new(0),
            stamps: Mutex::new(stamps),
        }))
    }

    /// The files it reads.
    pub fn config(&self) -> &EnrichConfig {
        &self.cfg
    }

    /// How many times new tables have been swapped in.
    #[inline]
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The tables in force and their generation.
    pub fn current(&self) -> (Arc<Tables>, u64) {
        let t = self.tables.lock().unwrap_or_else(PoisonError::into_inner);
        (Arc::clone(&t), self.generation())
    }

    /// Whether a file changed since it was last loaded.
    pub fn changed(&self) -> bool {
        let now: Vec<Stamp> = self.cfg.files().iter().map(|(_, p)| stamp(p)).collect();
        *self.stamps.lock().unwrap_or_else(PoisonError::into_inner) != now
    }

    /// Loads the files again and swaps the new tables in; on an error the tables in force stay.
    pub fn reload(&self) -> Result<(), LoadError> {
        let now: Vec<Stamp> = self.cfg.files().iter().map(|(_, p)| stamp(p)).collect();
        *self.stamps.lock().unwrap_or_else(PoisonError::into_inner) = now;
        let tables = Tables::load(&self.cfg)?;
        let mut t = self.tables.lock().unwrap_or_else(PoisonError::into_inner);
        *t = Arc::new(tables);
        self.generation.fetch_add(1, Ordering::Release);
        Ok(())
    }

    /// A thread that reloads the tables when a file changes or `hup` is raised (then lowers
    /// it), checking every `every`, until the source is dropped. Each reload and each refused
    /// file is said in one line on standard error.
    pub fn watch(
        self: &Arc<Self>,
        hup: Arc<AtomicBool>,
        every: Duration,
    ) -> std::io::Result<std::thread::JoinHandle<()>> {
        let weak: Weak<Source> = Arc::downgrade(self);
        std::thread::Builder::new()
            .name("tapflow-enrich".into())
            .spawn(move || {
                loop {
                    std::thread::sleep(every);
                    let Some(s) = weak.upgrade() else { return };
                    if !(hup.swap(false, Ordering::AcqRel) || s.changed()) {
                        continue;
                    }
                    match s.reload() {
                        Ok(()) => {
                            let (t, _) = s.current();
                            eprintln!("tapflow: enrichment reloaded: {}", t.describe().join("; "));
                        }
                        Err(e) => {
                            eprintln!("tapflow: warning: {e}; the previous enrichment data stays");
                        }
                    }
                }
            })
    }
}
