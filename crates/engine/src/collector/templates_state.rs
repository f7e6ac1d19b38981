//! The exporters' templates kept across restarts: a JSON file in the collector's state
//! directory (`STORE/state/templates.json`, or `--state-dir`), replaced whole through a
//! `.part` file every [`SAVE_EVERY`] and when the collector stops, read back when it starts.
//!
//! The file is untrusted bytes: it is read only up to [`MAX_FILE_LEN`], parsed by serde into
//! plain types, and what it says goes through the decoder's own limits. A file that cannot be
//! read or parsed is named in one warning and ignored: the collector then learns its
//! templates from the wire, as it would without the file.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tapflow_sys::outfile;
use tapflow_wire::flowdecode::{Protocol, SavedExporter, SavedField, SavedTemplate};

/// How often the state is written while the collector runs.
pub const SAVE_EVERY: Duration = Duration::from_secs(30);
/// The largest state file read (its limits allow about 4096 exporters of 16 templates).
pub const MAX_FILE_LEN: u64 = 64 << 20;
/// The format's version; a file of another is ignored with a warning.
const VERSION: u32 = 1;

/// The file as written.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    version: u32,
    /// When it was written, ns since 1970.
    saved_ns: u64,
    exporters: Vec<Exporter>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Exporter {
    address: IpAddr,
    protocol: String,
    domain: u32,
    heard_ns: u64,
    init_ms: u64,
    sampling: u32,
    samplers: Vec<(u64, u32)>,
    templates: Vec<Template>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Template {
    id: u16,
    options: bool,
    /// (element, responder's direction, length).
    fields: Vec<(String, bool, u16)>,
}

/// Where the state lives.
#[derive(Debug, Clone)]
pub struct TemplatesState {
    path: PathBuf,
}

impl TemplatesState {
    /// The state file in `dir` (created when first written).
    pub fn in_dir(dir: &Path) -> TemplatesState {
        TemplatesState {
            path: dir.join("templates.json"),
        }
    }

    /// The file's name.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What the file holds: nothing if there is no file yet, or why it is ignored.
    pub fn load(&self) -> Result<Vec<SavedExporter>, String> {
        let why = |e: String| format!("{} ignored: {e}", self.path.display());
        let f = match std::fs::File::open(&self.path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(why(e.to_string())),
        };
        let mut bytes = Vec::new();
        f.take(MAX_FILE_LEN + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| why(e.to_string()))?;
        if bytes.len() as u64 > MAX_FILE_LEN {
            return Err(why(format!("longer than {MAX_FILE_LEN} bytes")));
        }
        parse(&bytes).map_err(why)
    }

    /// Replaces the file with `exporters` (written as `NAME.part`, then renamed).
    pub fn save(&self, exporters: &[SavedExporter], now_ns: u64) -> Result<(), String> {
        let why = |e: String| format!("{}: {e}", self.path.display());
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| why(e.to_string()))?;
        }
        let file = File {
            version: VERSION,
            saved_ns: now_ns,
            exporters: exporters.iter().map(Exporter::from_saved).collect(),
        };
        let json = serde_json::to_vec(&file).map_err(|e| why(e.to_string()))?;
        let mut part = self.path.clone().into_os_string();
        part.push(".part");
        let part = PathBuf::from(part);
        // A `.part` file left by a run that died mid-write is this collector's own.
        if std::fs::symlink_metadata(&part).is_ok_and(|m| m.file_type().is_file()) {
            std::fs::remove_file(&part).map_err(|e| why(e.to_string()))?;
        }
        let mut f = outfile::create_new(&part, 0).map_err(|e| why(e.to_string()))?;
        let name = outfile::PartName::new(part, self.path.clone());
        f.write_all(&json)
            .and_then(|()| f.sync_all())
            .map_err(|e| why(e.to_string()))?;
        drop(f);
        name.publish().map(drop).map_err(|e| why(e.to_string()))
    }
}

/// The exporters a state file holds, or why it cannot be read.
pub fn parse(bytes: &[u8]) -> Result<Vec<SavedExporter>, String> {
    let f: File = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
    if f.version != VERSION {
        return Err(format!("format version {}, not {VERSION}", f.version));
    }
    f.exporters.into_iter().map(Exporter::into_saved).collect()
}

/// Every worker's states as one list: for an exporter two workers both hold (it moved
/// between sockets), the one heard from last.
pub fn merge(parts: impl IntoIterator<Item = Vec<SavedExporter>>) -> Vec<SavedExporter> {
    let mut by_key: HashMap<([u8; 16], Protocol, u32), SavedExporter> = HashMap::new();
    for s in parts.into_iter().flatten() {
        let key = (s.address, s.protocol, s.domain);
        match by_key.get(&key) {
            Some(old) if old.heard_ns >= s.heard_ns => {}
            _ => {
                by_key.insert(key, s);
            }
        }
    }
    let mut all: Vec<SavedExporter> = by_key.into_values().collect();
    all.sort_by_key(|e| (e.address, e.protocol.name(), e.domain));
    all
}

impl Exporter {
    fn from_saved(s: &SavedExporter) -> Exporter {
        Exporter {
            address: IpAddr::V6(Ipv6Addr::from(s.address)).to_canonical(),
            protocol: s.protocol.name().to_string(),
            domain: s.domain,
            heard_ns: s.heard_ns,
            init_ms: s.init_ms,
            sampling: s.sampling,
            samplers: s.samplers.clone(),
            templates: s
                .templates
                .iter()
                .map(|t| Template {
                    id: t.id,
                    options: t.options,
                    fields: t
                        .fields
                        .iter()
                        .map(|f| (f.elem.clone(), f.reverse, f.len))
                        .collect(),
                })
                .collect(),
        }
    }

    fn into_saved(self) -> Result<SavedExporter, String> {
        let protocol = match self.protocol.as_str() {
            "ipfix" => Protocol::Ipfix,
            "nfv9" => Protocol::NetflowV9,
            other => return Err(format!("exporter {}: protocol {other:?}", self.address)),
        };
        Ok(SavedExporter {
            address: crate::collector::intake::exporter_addr(self.address),
            protocol,
            domain: self.domain,
            heard_ns: self.heard_ns,
            init_ms: self.init_ms,
            sampling: self.sampling,
            samplers: self.samplers,
            templates: self
                .templates
                .into_iter()
                .map(|t| SavedTemplate {
                    id: t.id,
                    options: t.options,
                    fields: t
                        .fields
                        .into_iter()
                        .map(|(elem, reverse, len)| SavedField { elem, reverse, len })
                        .collect(),
                })
                .collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn saved(domain: u32, heard_ns: u64) -> SavedExporter {
        SavedExporter {
            address: crate::collector::intake::exporter_addr("192.0.2.9".parse().unwrap()),
            protocol: Protocol::NetflowV9,
            domain,
            heard_ns,
            init_ms: 5,
            sampling: 100,
            samplers: vec![(3, 10)],
            templates: vec![SavedTemplate {
                id: 256,
                options: true,
                fields: vec![SavedField {
                    elem: "InIf".into(),
                    reverse: false,
                    len: 4,
                }],
            }],
        }
    }

    #[test]
    fn a_saved_state_reads_back_whole_and_a_damaged_one_is_refused() {
        let dir = std::env::temp_dir().join(format!("tapflow-tstate-{}", std::process::id()));
        let state = TemplatesState::in_dir(&dir.join("state"));
        assert_eq!(state.load().unwrap(), []);
        let all = vec![saved(1, 10), saved(2, 20)];
        state.save(&all, 30).unwrap();
        assert_eq!(state.load().unwrap(), all);
        let text = std::fs::read_to_string(state.path()).unwrap();
        assert!(text.contains("\"address\":\"192.0.2.9\""), "{text}");
        // Cut, emptied, of another version, or of an unknown protocol: one reason each.
        for (bytes, says) in [
            (&text.as_bytes()[..text.len() / 2], "EOF"),
            (&b""[..], "EOF"),
            (
                &br#"{"version":2,"saved_ns":0,"exporters":[]}"#[..],
                "version 2",
            ),
            (
                &text.replace("nfv9", "sflow").into_bytes()[..],
                "protocol \"sflow\"",
            ),
            (&[0xff, 0, 1][..], "expected value"),
        ] {
            std::fs::write(state.path(), bytes).unwrap();
            let e = state.load().unwrap_err();
            assert!(
                e.contains("templates.json ignored") && e.contains(says),
                "{e}"
            );
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn merged_states_keep_the_newest_of_each_exporter() {
        let m = merge([vec![saved(1, 10), saved(2, 50)], vec![saved(1, 40)]]);
        assert_eq!(
            m.iter().map(|s| (s.domain, s.heard_ns)).collect::<Vec<_>>(),
            [(1, 40), (2, 50)]
        );
    }
}
