//! Writing Parquet files of one table: each created new as `NAME.parquet.part` (never through a
//! link, mode 0640) and written in row groups of at most `row_group_rows` ([`write_staged`]);
//! then the files of one flush made durable and renamed to `NAME.parquet` together: a sync of
//! the filesystem, the renames, a second sync ([`publish`]). A failed write removes the `.part`
//! and names the file in its error.
//!
//! Encodings ([`properties`]): the sorted first column delta-encoded, wide columns split by
//! bytes, few-valued columns in dictionaries, a column of one value uncompressed; other pages
//! compressed with zstd, through one context per thread. Min/max statistics per row group on
//! the columns a reader prunes by, and per page in files of several groups.

use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parquet::basic::Type as PhysicalType;
use parquet::basic::{Compression, Encoding, LogicalType, Repetition, TimeUnit, ZstdLevel};
use parquet::column::page::{CompressedPage, Page, PageWriteSpec, PageWriter};
use parquet::column::writer::{ColumnWriter, get_column_writer};
use parquet::data_type::{ByteArray, FixedLenByteArray};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::file::writer::{SerializedFileWriter, SerializedPageWriter, TrackedWrite};
use parquet::schema::types::{ColumnPath, Type};

use crate::StoreError;
use crate::batch::{Batch, Column};
use crate::schema::ColumnType;

/// Permission bits of every file the store writes: the owner reads and writes, the group reads.
pub const FILE_MODE: u32 = 0o640;
/// Permission bits of the directories it creates.
pub const DIR_MODE: u32 = 0o750;

/// How files are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileOptions {
    /// The zstd level (1 to 22).
    pub zstd_level: i32,
    /// Rows per row group at most: the unit a reader skips by its statistics.
    pub row_group_rows: usize,
}

impl Default for FileOptions {
    fn default() -> Self {
        FileOptions {
            zstd_level: 9,
            row_group_rows: 128 * 1024,
        }
    }
}

/// The Parquet schema of a table of `columns`.
pub fn schema(columns: &[(&str, ColumnType)]) -> Result<Type, StoreError> {
    let fields = columns
        .iter()
        .map(|&(name, t)| {
            let (physical, logical) = match t {
                ColumnType::TimestampMicros => (
                    PhysicalType::INT64,
                    Some(LogicalType::timestamp(true, TimeUnit::MICROS)),
                ),
                ColumnType::Addr16 => (PhysicalType::FIXED_LEN_BYTE_ARRAY, None),
                ColumnType::U8 => (PhysicalType::INT32, Some(unsigned(8))),
                ColumnType::U16 => (PhysicalType::INT32, Some(unsigned(16))),
                ColumnType::U32 => (PhysicalType::INT32, Some(unsigned(32))),
                ColumnType::U64 => (PhysicalType::INT64, Some(unsigned(64))),
                ColumnType::Utf8 => (PhysicalType::BYTE_ARRAY, Some(LogicalType::String)),
            };
            let mut b = Type::primitive_type_builder(name, physical)
                .with_repetition(Repetition::REQUIRED)
                .with_logical_type(logical);
            if t == ColumnType::Addr16 {
                b = b.with_length(16);
            }
            b.build().map(Arc::new)
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| StoreError::Other(format!("parquet schema: {e}")))?;
    Type::group_type_builder("schema")
        .with_fields(fields)
        .build()
        .map_err(|e| StoreError::Other(format!("parquet schema: {e}")))
}

fn unsigned(bits: i8) -> LogicalType {
    LogicalType::integer(bits, false)
}

/// Columns of many distinct values, each byte of which zstd compresses better apart
/// (`BYTE_STREAM_SPLIT`) than a dictionary would: measured on a real trace's flows, they took
/// 10.6 B/flow this way against 13.5 with dictionaries everywhere (docs/benchmarks.md).
const SPLIT_COLUMNS: &[&str] = &[
    "time_end",
    "src_port",
    "dst_port",
    "tcp_flags",
    "rev_tcp_flags",
];

/// Columns sorted within runs of rows (a bucket's ports, by key), whose small steps delta
/// encoding packs in a few bits.
const DELTA_COLUMNS: &[&str] = &["port"];

/// Columns whose dictionary would be nearly as large as the values (responders' addresses).
const PLAIN_COLUMNS: &[&str] = &["dst_addr"];

/// Columns no reader prunes by (a file's counters span nearly their whole range): no
/// statistics, which would only lengthen the footer.
const NO_STATISTICS: &[&str] = &[
    "time_received",
    "tcp_flags",
    "rev_tcp_flags",
    "packets",
    "bytes",
    "rev_packets",
    "rev_bytes",
    "end_reason",
];

/// The writer settings for `batch`, rows of a table of `columns`. The first column (the time
/// rows are sorted by) is delta-encoded; `U64` counters and the columns of [`SPLIT_COLUMNS`]
/// are split by bytes; [`PLAIN_COLUMNS`] are plain; the rest take a dictionary. A column of one
/// value in this file (an exporter's, a VLAN, a sampling rate) takes a dictionary and is not
/// compressed ([`write_parquet`]): its one run of indices is smaller than a zstd frame's
/// header. Parquet's own column writers compress nothing: [`ZstdPages`] does. A file of one
/// row group gets chunk statistics only; a larger one a page index.
fn properties(
    columns: &[(&str, ColumnType)],
    batch: &Batch,
    opts: &FileOptions,
    metadata: Vec<KeyValue>,
) -> WriterProperties {
    let one_group = batch.rows() <= opts.row_group_rows;
    let mut b = WriterProperties::builder()
        .set_compression(Compression::UNCOMPRESSED)
        .set_statistics_enabled(if one_group {
            EnabledStatistics::Chunk
        } else {
            EnabledStatistics::Page
        })
        .set_offset_index_disabled(one_group)
        .set_max_row_group_row_count(Some(opts.row_group_rows.max(1)))
        .set_created_by(format!("tapflow {}", env!("CARGO_PKG_VERSION")))
        .set_key_value_metadata((!metadata.is_empty()).then_some(metadata));
    for (k, (&(name, t), values)) in columns.iter().zip(&batch.columns).enumerate() {
        let path = ColumnPath::from(name);
        let encoding = if values.is_constant() {
            None
        } else if k == 0 || DELTA_COLUMNS.contains(&name) {
            Some(Encoding::DELTA_BINARY_PACKED)
        } else if t == ColumnType::U64 || SPLIT_COLUMNS.contains(&name) {
            Some(Encoding::BYTE_STREAM_SPLIT)
        } else if PLAIN_COLUMNS.contains(&name) {
            Some(Encoding::PLAIN)
        } else {
            None
        };
        if let Some(e) = encoding {
            b = b
                .set_column_dictionary_enabled(path.clone(), false)
                .set_column_encoding(path.clone(), e);
        }
        if NO_STATISTICS.contains(&name) {
            b = b.set_column_statistics_enabled(path, EnabledStatistics::None);
        }
    }
    b.build()
}

/// Writes `batch` (rows of a table of `columns`) to `path` (which ends in `.parquet`), through
/// `path.part`, with `metadata` as the file's key-value metadata: [`write_staged`], then
/// [`publish`] of that one file.
pub fn write_file(
    path: &Path,
    columns: &[(&str, ColumnType)],
    batch: &Batch,
    opts: &FileOptions,
    metadata: Vec<KeyValue>,
) -> Result<(), StoreError> {
    let staged = write_staged(path, columns, batch, opts, metadata)?;
    publish(vec![staged]).pop().unwrap_or(Ok(()))
}

/// A complete `NAME.parquet.part`, not yet synced nor renamed to `NAME.parquet`.
#[derive(Debug)]
pub struct Staged {
    part: PathBuf,
    path: PathBuf,
}

/// Writes `batch` to `path.part`; [`publish`] syncs and renames it. A failed write removes
/// the `.part` and names it in its error.
pub fn write_staged(
    path: &Path,
    columns: &[(&str, ColumnType)],
    batch: &Batch,
    opts: &FileOptions,
    metadata: Vec<KeyValue>,
) -> Result<Staged, StoreError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    if !dir.is_dir() {
        create_dirs(dir)?;
    }
    let part = part_name(path);
    let file = create_new(&part).map_err(|source| StoreError::Io {
        what: "create",
        path: part.clone(),
        source,
    })?;
    match write_parquet(file, columns, batch, opts, metadata) {
        Ok(()) => Ok(Staged {
            part,
            path: path.to_path_buf(),
        }),
        Err(e) => {
            let _ = std::fs::remove_file(&part);
            Err(e.at(&part))
        }
    }
}

/// Makes the staged files durable and names them: one sync of the filesystem for the data of
/// them all, then each renamed to its name, then a second sync for the renames (and the
/// directories made for them). A `.parquet` name thus never stands for data a crash could
/// lose, and a file is durable under its name when its result is `Ok`. One result per file, in
/// order; a file whose sync or rename fails is removed.
pub fn publish(staged: Vec<Staged>) -> Vec<Result<(), StoreError>> {
    let dirs: Vec<&Path> = staged
        .iter()
        .map(|s| s.path.parent().unwrap_or(Path::new(".")))
        .collect();
    if let Err(e) = sync_dirs(&dirs) {
        let e = e.to_string();
        return staged
            .iter()
            .map(|s| {
                let _ = std::fs::remove_file(&s.part);
                Err(StoreError::Other(e.clone()))
            })
            .collect();
    }
    let mut out: Vec<Result<(), StoreError>> = staged
        .iter()
        .map(|s| {
            rename_new(&s.part, &s.path).inspect_err(|_| {
                let _ = std::fs::remove_file(&s.part);
            })
        })
        .collect();
    if let Err(e) = sync_dirs(&dirs) {
        let e = e.to_string();
        for r in out.iter_mut().filter(|r| r.is_ok()) {
            *r = Err(StoreError::Other(e.clone()));
        }
    }
    out
}

/// `NAME.parquet.part` for `NAME.parquet`.
pub fn part_name(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(".part");
    PathBuf::from(s)
}

/// Creates `dir` and its parents, mode [`DIR_MODE`].
pub fn create_dirs(dir: &Path) -> Result<(), StoreError> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(DIR_MODE)
        .create(dir)
        .map_err(|source| StoreError::Io {
            what: "create directory",
            path: dir.to_path_buf(),
            source,
        })
}

/// Creates `path`, which must not exist: a file or link planted there is refused, not
/// followed; mode [`FILE_MODE`] whatever the umask.
fn create_new(path: &Path) -> std::io::Result<File> {
    let f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(FILE_MODE)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)?;
    f.set_permissions(std::fs::Permissions::from_mode(FILE_MODE))?;
    Ok(f)
}

/// Why a write failed, before the file's name is known to the error.
#[derive(Debug)]
enum WriteError {
    Io(&'static str, std::io::Error),
    Parquet(parquet::errors::ParquetError),
}

impl WriteError {
    fn at(self, path: &Path) -> StoreError {
        match self {
            WriteError::Io(what, source) => StoreError::Io {
                what,
                path: path.to_path_buf(),
                source,
            },
            // The Parquet writer wraps the I/O errors of the file it writes (a full disk).
            WriteError::Parquet(parquet::errors::ParquetError::External(e)) => {
                match e.downcast::<std::io::Error>() {
                    Ok(source) => StoreError::Io {
                        what: "write",
                        path: path.to_path_buf(),
                        source: *source,
                    },
                    Err(e) => StoreError::Other(format!("write {}: {e}", path.display())),
                }
            }
            WriteError::Parquet(e) => StoreError::Other(format!("write {}: {e}", path.display())),
        }
    }
}

impl From<parquet::errors::ParquetError> for WriteError {
    fn from(e: parquet::errors::ParquetError) -> Self {
        WriteError::Parquet(e)
    }
}

fn write_parquet(
    file: File,
    columns: &[(&str, ColumnType)],
    batch: &Batch,
    opts: &FileOptions,
    metadata: Vec<KeyValue>,
) -> Result<(), WriteError> {
    let general = |e: StoreError| parquet::errors::ParquetError::General(e.to_string());
    let schema = schema(columns).map_err(general)?;
    let level = ZstdLevel::try_new(opts.zstd_level).map_err(|e| {
        general(StoreError::Other(format!(
            "zstd level {}: {e}",
            opts.zstd_level
        )))
    })?;
    let props = Arc::new(properties(columns, batch, opts, metadata));
    let mut w = SerializedFileWriter::new(
        std::io::BufWriter::with_capacity(1 << 20, file),
        Arc::new(schema),
        props.clone(),
    )?;
    let descrs: Vec<_> = (0..columns.len())
        .map(|k| w.schema_descr().column(k))
        .collect();
    let rows = batch.rows();
    let step = opts.row_group_rows.max(1);
    let mut at = 0;
    COMPRESSOR.with_borrow_mut(|zstd| -> Result<(), WriteError> {
        while at < rows {
            let n = step.min(rows - at);
            let mut rg = w.next_row_group()?;
            for (k, values) in batch.columns.iter().enumerate() {
                let compress = !values.is_constant();
                let mut chunk = TrackedWrite::new(Vec::new());
                let pages = ZstdPages {
                    inner: SerializedPageWriter::new(&mut chunk),
                    zstd: compress.then_some((&mut *zstd, opts.zstd_level)),
                };
                let mut col = get_column_writer(descrs[k].clone(), props.clone(), Box::new(pages));
                write_column(&mut col, values, at, n)?;
                let mut done = col.close()?;
                if compress {
                    done.metadata = done
                        .metadata
                        .into_builder()
                        .set_compression(Compression::ZSTD(level))
                        .build()?;
                }
                let chunk = bytes::Bytes::from(chunk.into_inner()?);
                rg.append_column(&chunk, done)?;
            }
            rg.close()?;
            at += n;
        }
        Ok(())
    })?;
    let buf = w.into_inner()?;
    let mut file = buf
        .into_inner()
        .map_err(|e| WriteError::Io("write", e.into_error()))?;
    file.flush().map_err(|e| WriteError::Io("write", e))
}

thread_local! {
    /// One zstd compression context per thread, for every page it writes: `parquet`'s own
    /// column writers would make a compression and a decompression context per column chunk,
    /// which cost more than compressing the chunk on the small files of a sparse hour.
    static COMPRESSOR: std::cell::RefCell<zstd::bulk::Compressor<'static>> =
        std::cell::RefCell::new(zstd::bulk::Compressor::default());
}

/// Compresses each page of one column chunk with zstd through a context it borrows, then
/// writes it (`zstd: None`: as it comes). The chunk's metadata then names the codec
/// ([`write_parquet`]).
struct ZstdPages<'a> {
    inner: SerializedPageWriter<'a, Vec<u8>>,
    zstd: Option<(&'a mut zstd::bulk::Compressor<'static>, i32)>,
}

impl PageWriter for ZstdPages<'_> {
    fn write_page(&mut self, page: CompressedPage) -> parquet::errors::Result<PageWriteSpec> {
        let Some((zstd, level)) = self.zstd.as_mut() else {
            return self.inner.write_page(page);
        };
        let raw = page.uncompressed_size();
        let squeeze = |zstd: &mut zstd::bulk::Compressor<'static>, buf: &[u8]| {
            zstd.set_compression_level(*level)
                .and_then(|()| zstd.compress(buf))
                .map(bytes::Bytes::from)
                .map_err(|e| parquet::errors::ParquetError::External(Box::new(e)))
        };
        let page = match page.compressed_page().clone() {
            Page::DataPage {
                buf,
                num_values,
                encoding,
                def_level_encoding,
                rep_level_encoding,
                statistics,
            } => Page::DataPage {
                buf: squeeze(zstd, &buf)?,
                num_values,
                encoding,
                def_level_encoding,
                rep_level_encoding,
                statistics,
            },
            Page::DictionaryPage {
                buf,
                num_values,
                encoding,
                is_sorted,
            } => Page::DictionaryPage {
                buf: squeeze(zstd, &buf)?,
                num_values,
                encoding,
                is_sorted,
            },
            Page::DataPageV2 { .. } => {
                return Err(parquet::errors::ParquetError::General(
                    "version 2 data pages are not written".into(),
                ));
            }
        };
        self.inner.write_page(CompressedPage::new(page, raw))
    }

    fn close(&mut self) -> parquet::errors::Result<()> {
        self.inner.close()
    }
}

/// Writes values `at..at + n` of `column` into `w`.
fn write_column(
    w: &mut ColumnWriter<'_>,
    column: &Column,
    at: usize,
    n: usize,
) -> Result<(), WriteError> {
    match (w, column) {
        (ColumnWriter::Int32ColumnWriter(w), Column::I32(v)) => {
            w.write_batch(&v[at..at + n], None, None)?;
        }
        (ColumnWriter::Int64ColumnWriter(w), Column::I64(v)) => {
            w.write_batch(&v[at..at + n], None, None)?;
        }
        (ColumnWriter::FixedLenByteArrayColumnWriter(w), Column::Addr(v)) => {
            // One buffer for the chunk; each value is a slice of it, not an allocation.
            let all = bytes::Bytes::from(v[at..at + n].as_flattened().to_vec());
            let values: Vec<FixedLenByteArray> = (0..n)
                .map(|i| FixedLenByteArray::from(ByteArray::from(all.slice(i * 16..i * 16 + 16))))
                .collect();
            w.write_batch(&values, None, None)?;
        }
        (ColumnWriter::ByteArrayColumnWriter(w), Column::Text(v)) => {
            let values: Vec<ByteArray> = v[at..at + n]
                .iter()
                .map(|s| ByteArray::from(s.as_bytes().to_vec()))
                .collect();
            w.write_batch(&values, None, None)?;
        }
        (_, c) => {
            return Err(WriteError::Parquet(parquet::errors::ParquetError::General(
                format!(
                    "a column of {} values does not fit its Parquet type",
                    c.len()
                ),
            )));
        }
    }
    Ok(())
}

/// Renames the complete `part` to `path`, which must not exist.
fn rename_new(part: &Path, path: &Path) -> Result<(), StoreError> {
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Ok(_) => {
            return Err(StoreError::Io {
                what: "rename to",
                path: path.to_path_buf(),
                source: std::io::ErrorKind::AlreadyExists.into(),
            });
        }
        Err(source) => {
            return Err(StoreError::Io {
                what: "stat",
                path: path.to_path_buf(),
                source,
            });
        }
    }
    std::fs::rename(part, path).map_err(|source| StoreError::Io {
        what: "rename",
        path: part.to_path_buf(),
        source,
    })
}

/// Makes everything written, renamed, made or removed in `dirs` durable: one `syncfs` per
/// filesystem they are on.
pub fn sync_dirs(dirs: &[&Path]) -> Result<(), StoreError> {
    let mut done: Vec<u64> = Vec::new();
    for &dir in dirs {
        let err = |what, source| StoreError::Io {
            what,
            path: dir.to_path_buf(),
            source,
        };
        let d = File::open(dir).map_err(|e| err("open", e))?;
        let dev = d.metadata().map_err(|e| err("stat", e))?.dev();
        if !done.contains(&dev) {
            tapflow_sys::outfile::sync_filesystem(&d)
                .map_err(|e| err("sync the filesystem of", e))?;
            done.push(dev);
        }
    }
    Ok(())
}
