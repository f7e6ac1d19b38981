//! Writing Parquet files of one table: each created new as `NAME.parquet.part` (never through a
//! link, mode 0640) and written in row groups of at most `row_group_rows` ([`write_staged`]);
//! then the files of one flush made durable and renamed to `NAME.parquet` together: their data
//! synced, the renames, their directories synced ([`publish`]). A failed write removes the
//! `.part` and names the file in its error.
//!
//! Encodings ([`properties`]): the sorted first column delta-encoded, wide columns split by
//! bytes, few-valued columns in dictionaries, a column of one value uncompressed; other pages
//! compressed with zstd, through one context per thread ([`ZstdPages`]): split pages in blocks
//! of like byte streams, `time_end` and `src_port` with zstd's optimal parser. Min/max
//! statistics per row group on the columns a reader can prune by (times, exporter, interfaces,
//! protocol...), and per page in files of several groups; no page encoding statistics and no
//! deprecated min/max copies, which would only lengthen the footer (a third of a small file).

use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parquet::basic::Type as PhysicalType;
use parquet::basic::{Compression, Encoding, LogicalType, Repetition, TimeUnit, ZstdLevel};
use parquet::column::page::{CompressedPage, Page, PageWriteSpec, PageWriter};
use parquet::column::writer::{ColumnWriter, get_column_writer};
use parquet::data_type::{ByteArray, FixedLenByteArray};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::file::statistics::Statistics;
use parquet::file::writer::{SerializedFileWriter, SerializedPageWriter, TrackedWrite};
use parquet::schema::types::{ColumnPath, Type};

use crate::StoreError;
use crate::parquet::batch::{Batch, Column};
use crate::schema::ColumnType;

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

/// Columns no reader prunes by: no statistics, which would only lengthen the footer. A file's
/// counters, ports and addresses span nearly their whole range (every flows file of a thousand
/// rows or more of a real trace had ports 0 to 65,3xx and addresses from `::ffff:0.x` to
/// `fe…`), so their minimum and maximum rule nothing out. `rev_packets` keeps them: a row group
/// whose largest is 0 holds no reverse direction (a router's NetFlow), and a scan decodes only
/// the forward direction's columns of it.
const NO_STATISTICS: &[&str] = &[
    "time_received",
    "src_addr",
    "dst_addr",
    "src_port",
    "dst_port",
    "tcp_flags",
    "rev_tcp_flags",
    "packets",
    "bytes",
    "rev_bytes",
    "end_reason",
];

/// Rows up to which an integer column of one value is delta-encoded rather than put in a
/// dictionary: its delta page takes 5 bytes per 128 values (a block of zero-width deltas), the
/// dictionary a page of its own (a 14-byte header and the value) and a run of indices, so the
/// delta page is the smaller up to about 4 blocks.
const CONSTANT_DELTA_ROWS: usize = 512;

/// The writer settings for `batch`, rows of a table of `columns`. The first column (the time
/// rows are sorted by) is delta-encoded; `U64` counters and the columns of [`SPLIT_COLUMNS`]
/// are split by bytes; [`PLAIN_COLUMNS`] are plain; the rest take a dictionary. A column of one
/// value in this file (an exporter's, a VLAN, a sampling rate) is not compressed
/// ([`write_parquet`]): its zero-width deltas (up to [`CONSTANT_DELTA_ROWS`] rows, integers)
/// or its one run of dictionary indices are smaller than a zstd frame's header. Parquet's own
/// column writers compress nothing: [`ZstdPages`] does. A file of one row group gets chunk
/// statistics only; a larger one a page index.
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
            let integer = !matches!(t, ColumnType::Addr16 | ColumnType::Utf8);
            (integer && batch.rows() <= CONSTANT_DELTA_ROWS)
                .then_some(Encoding::DELTA_BINARY_PACKED)
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
    /// The directories its write made (its own and those above it that were missing).
    made: Vec<PathBuf>,
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
    let made = make_dirs(dir)?;
    let part = part_name(path);
    let file = tapflow_sys::outfile::create_new(&part, 0).map_err(|source| StoreError::Io {
        what: "create",
        path: part.clone(),
        source,
    })?;
    match write_parquet(file, columns, batch, opts, metadata) {
        Ok(()) => Ok(Staged {
            part,
            path: path.to_path_buf(),
            made,
        }),
        Err(e) => {
            let _ = std::fs::remove_file(&part);
            Err(e.at(&part))
        }
    }
}

/// Writes of at most this many files (or syncs of at most this many directories) sync each one
/// alone; larger ones sync the whole filesystem at once.
pub const SYNC_EACH_AT_MOST: usize = 32;

/// Makes the staged files durable and names them, so that a `.parquet` name never stands for
/// data a crash could lose and a file is durable under its name when its result is `Ok`: the
/// data of each is synced, then each is renamed to its name, then the directories that hold the
/// new names (and the ones above the directories the writes made) are synced ([`sync_dirs`]).
/// Up to [`SYNC_EACH_AT_MOST`] files (every flush of a live store) are synced one by one
/// (`fdatasync`), which waits for their own blocks only, whatever else the filesystem holds
/// dirty; more (a store's first write of a trace spread over many hours) by one `syncfs`, which
/// costs one wait instead of one per file but also waits for other programs' dirty data. One
/// result per file, in order; a file whose sync or rename fails is removed.
pub fn publish(staged: Vec<Staged>) -> Vec<Result<(), StoreError>> {
    let mut out: Vec<Result<(), StoreError>> = if staged.len() <= SYNC_EACH_AT_MOST {
        staged.iter().map(|s| sync_data(&s.part)).collect()
    } else {
        let dirs: Vec<&Path> = staged.iter().map(|s| parent(&s.path)).collect();
        let synced = sync_filesystems(&dirs).map_err(|e| e.to_string());
        staged
            .iter()
            .map(|_| synced.clone().map_err(StoreError::Other))
            .collect()
    };
    for (s, r) in staged.iter().zip(out.iter_mut()) {
        if r.is_ok() {
            *r = rename_new(&s.part, &s.path);
        }
        if r.is_err() {
            let _ = std::fs::remove_file(&s.part);
        }
    }
    // The renamed names, and the entries of the directories the writes made.
    let mut dirs: Vec<&Path> = Vec::new();
    for (s, r) in staged.iter().zip(&out) {
        if r.is_ok() {
            dirs.push(parent(&s.path));
            dirs.extend(s.made.iter().map(|d| parent(d)));
        }
    }
    if let Err(e) = sync_dirs(&dirs) {
        for r in out.iter_mut().filter(|r| r.is_ok()) {
            *r = Err(StoreError::Other(e.to_string()));
        }
    }
    out
}

fn parent(path: &Path) -> &Path {
    path.parent().unwrap_or(Path::new("."))
}

/// `fdatasync` of the file at `path` (opened again, never through a link).
fn sync_data(path: &Path) -> Result<(), StoreError> {
    let err = |what, source| StoreError::Io {
        what,
        path: path.to_path_buf(),
        source,
    };
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| err("open", e))?
        .sync_data()
        .map_err(|e| err("sync", e))
}

/// `NAME.parquet.part` for `NAME.parquet`.
pub fn part_name(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(".part");
    PathBuf::from(s)
}

/// Creates `dir` and its parents, mode [`DIR_MODE`]; returns those it made, deepest first.
fn make_dirs(dir: &Path) -> Result<Vec<PathBuf>, StoreError> {
    let mut missing = Vec::new();
    let mut d = dir;
    while !d.as_os_str().is_empty() && !d.is_dir() {
        missing.push(d.to_path_buf());
        d = parent(d);
    }
    if !missing.is_empty() {
        create_dirs(dir)?;
    }
    Ok(missing)
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
                    width: value_width(&descrs[k]),
                    optimal: OPTIMAL_COLUMNS.contains(&columns[k].0),
                };
                let mut col = get_column_writer(descrs[k].clone(), props.clone(), Box::new(pages));
                write_column(&mut col, values, at, n)?;
                let mut done = col.close()?;
                // No page encoding statistics (each page's type and encoding, a tenth of a
                // small file's footer): a reader that looks for them, to learn whether every
                // data page is in the dictionary, takes the safe answer without them.
                let stats = done.metadata.statistics().cloned();
                let mut meta = done.metadata.into_builder().clear_page_encoding_stats();
                if let Some(s) = stats {
                    meta = meta.set_statistics(current_min_max_only(s));
                }
                if compress {
                    meta = meta.set_compression(Compression::ZSTD(level));
                }
                done.metadata = meta.build()?;
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

/// `s` without the deprecated `min` and `max` fields, which `parquet` repeats beside
/// `min_value` and `max_value` for columns of signed order (the times) for readers older than
/// Parquet 1.10 (2018); every reader of the store reads `min_value` and `max_value`.
fn current_min_max_only(s: Statistics) -> Statistics {
    match s {
        Statistics::Int32(v) => Statistics::Int32(v.with_backwards_compatible_min_max(false)),
        Statistics::Int64(v) => Statistics::Int64(v.with_backwards_compatible_min_max(false)),
        s => s,
    }
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
/// ([`write_parquet`]). A `BYTE_STREAM_SPLIT` page, `width` streams of one byte of every
/// value, is compressed in zstd blocks of streams alike ([`stream_blocks`]) at
/// [`BLOCK_LEVELS`]; the pages of an `optimal` column with zstd's optimal parser at
/// [`OPTIMAL_LEVELS`].
struct ZstdPages<'a> {
    inner: SerializedPageWriter<'a, Vec<u8>>,
    zstd: Option<(&'a mut zstd::bulk::Compressor<'static>, i32)>,
    width: usize,
    optimal: bool,
}

/// Columns whose pages zstd's optimal parser (`btultra`, with matches from 3 bytes) compresses
/// well beyond its lazy one, cheaply: the middle bytes of `time_end` repeat in runs of 2 and 3
/// that a lazy parser's 4-byte matches miss, and the optimal parser weighs a port's low and
/// high bytes as literals or matches better. Measured at level 9 on a real trace's flows:
/// `time_end` 2.4% and `src_port` 2.2% smaller, for 6% more of the write's CPU; the counters,
/// flags and the responder's port grew or held.
const OPTIMAL_COLUMNS: &[&str] = &["time_end", "src_port"];

/// The levels at which [`OPTIMAL_COLUMNS`] take the optimal parser: zstd's own parsers are
/// lazy there at every page size; below, speed matters more (a live store's flushes are at 1).
const OPTIMAL_LEVELS: std::ops::RangeInclusive<i32> = 9..=12;

/// Sets `cctx` to compress at `level`, with the optimal parser if `optimal`: a search of 2
/// candidates (search log 1) for matches of 3 bytes or more, which stops at 8, keeping its
/// cost near the lazy parser's; the window, hash and chain sizes are the level's.
fn set_parameters(
    cctx: &mut zstd::zstd_safe::CCtx<'static>,
    level: i32,
    optimal: bool,
) -> std::io::Result<()> {
    use zstd::zstd_safe::{CParameter, ResetDirective, Strategy};
    let fail = |code| std::io::Error::other(zstd::zstd_safe::get_error_name(code));
    cctx.reset(ResetDirective::Parameters).map_err(fail)?;
    cctx.set_parameter(CParameter::CompressionLevel(level))
        .map_err(fail)?;
    if optimal {
        for p in [
            CParameter::Strategy(Strategy::ZSTD_btultra),
            CParameter::SearchLog(1),
            CParameter::MinMatch(3),
            CParameter::TargetLength(8),
        ] {
            cctx.set_parameter(p).map_err(fail)?;
        }
    }
    Ok(())
}

impl PageWriter for ZstdPages<'_> {
    fn write_page(&mut self, page: CompressedPage) -> parquet::errors::Result<PageWriteSpec> {
        let Some((zstd, level)) = self.zstd.as_mut() else {
            return self.inner.write_page(page);
        };
        let raw = page.uncompressed_size();
        let (width, optimal) = (self.width, self.optimal && OPTIMAL_LEVELS.contains(level));
        let squeeze = |zstd: &mut zstd::bulk::Compressor<'static>, buf: &[u8], split: bool| {
            let cuts = if split {
                stream_blocks(buf, width)
            } else {
                Vec::new()
            };
            set_parameters(zstd.context_mut(), *level, optimal)
                .and_then(|()| match cuts.is_empty() {
                    true => zstd.compress(buf),
                    false => compress_blocks(zstd.context_mut(), buf, &cuts),
                })
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
                buf: squeeze(
                    zstd,
                    &buf,
                    encoding == Encoding::BYTE_STREAM_SPLIT && BLOCK_LEVELS.contains(level),
                )?,
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
                buf: squeeze(zstd, &buf, false)?,
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

/// The bytes of one value of column `c`, which a `BYTE_STREAM_SPLIT` page splits into as many
/// streams.
fn value_width(c: &parquet::schema::types::ColumnDescriptor) -> usize {
    match c.physical_type() {
        PhysicalType::INT32 | PhysicalType::FLOAT => 4,
        PhysicalType::INT64 | PhysicalType::DOUBLE => 8,
        PhysicalType::FIXED_LEN_BYTE_ARRAY => usize::try_from(c.type_length()).unwrap_or(0),
        _ => 0,
    }
}

/// The levels at which a byte-split page is cut into blocks ([`stream_blocks`]): from 3. The
/// fresh files of a live store (level 1), merged soon after, are written as fast as they can.
const BLOCK_LEVELS: std::ops::RangeFrom<i32> = 3..;

/// What a zstd block's own tables (literals' Huffman codes, sequences' FSE tables) cost, in
/// bytes, about: the saving a new block must beat.
const BLOCK_COST: f64 = 256.0;

/// Where `buf`, a `BYTE_STREAM_SPLIT` page of a required column (`width` streams of equal
/// length, no levels), is cut into zstd blocks: before each stream whose bytes are distributed
/// so unlike those of the streams before it since the last cut that coding them apart saves
/// more than a block costs (by their order-0 entropy, estimated on at most 2,048 bytes of each
/// stream). The low byte of a port and its high byte, or a time's changing bytes and its
/// fixed ones, then each get their own code: 2% off the ports, where one block's code over all
/// streams fits none of them. Empty: one block. Coding `a` bytes and `b` bytes together costs
/// at most a bit a byte more than apart, so pages under 8 blocks' cost are not looked at.
fn stream_blocks(buf: &[u8], width: usize) -> Vec<usize> {
    const SAMPLE: usize = 2048;
    if width < 2 || !buf.len().is_multiple_of(width) || (buf.len() as f64) < 8.0 * BLOCK_COST {
        return Vec::new();
    }
    let n = buf.len() / width;
    let step = n.div_ceil(SAMPLE);
    let histogram = |s: &[u8]| {
        // Four tables in turn: a stream of one repeated byte would otherwise wait on the
        // same counter at every byte.
        let mut h = [[0u32; 256]; 4];
        for (i, &b) in s.iter().step_by(step).enumerate() {
            h[i % 4][usize::from(b)] += 1;
        }
        let [mut a, b, c, d] = h;
        for (j, x) in a.iter_mut().enumerate() {
            *x += b[j] + c[j] + d[j];
        }
        a
    };
    let block_cost = BLOCK_COST / step as f64;
    let mut cuts = Vec::new();
    let mut group = histogram(&buf[..n]);
    let mut group_bytes = entropy_bytes(&group);
    for k in 1..width {
        let next = histogram(&buf[k * n..(k + 1) * n]);
        let next_bytes = entropy_bytes(&next);
        for (g, c) in group.iter_mut().zip(&next) {
            *g += c;
        }
        let joined_bytes = entropy_bytes(&group);
        if group_bytes + next_bytes + block_cost < joined_bytes {
            cuts.push(k * n);
            (group, group_bytes) = (next, next_bytes);
        } else {
            group_bytes = joined_bytes;
        }
    }
    cuts
}

/// The bytes an order-0 entropy coder needs at least for the bytes counted in `h`.
fn entropy_bytes(h: &[u32; 256]) -> f64 {
    let n = f64::from(h.iter().sum::<u32>());
    h.iter()
        .filter(|&&c| c > 0)
        .map(|&c| f64::from(c) * (n / f64::from(c)).log2())
        .sum::<f64>()
        / 8.0
}

/// `buf` compressed as one zstd frame whose blocks end at `cuts` (and wherever zstd's own
/// 128 KiB limit ends them): each flush of a zstd stream ends a block, and the next one codes
/// its literals and sequences with tables of its own (or the last ones, if they fit better).
fn compress_blocks(
    cctx: &mut zstd::zstd_safe::CCtx<'static>,
    buf: &[u8],
    cuts: &[usize],
) -> std::io::Result<Vec<u8>> {
    use zstd::zstd_safe::{InBuffer, OutBuffer, ResetDirective};
    let fail = |code| std::io::Error::other(zstd::zstd_safe::get_error_name(code));
    cctx.reset(ResetDirective::SessionOnly).map_err(fail)?;
    cctx.set_pledged_src_size(Some(buf.len() as u64))
        .map_err(fail)?;
    let mut out = Vec::with_capacity(zstd::zstd_safe::compress_bound(buf.len()) + 8 * cuts.len());
    let mut start = 0;
    for (i, &end) in cuts.iter().chain([&buf.len()]).enumerate() {
        let mut input = InBuffer::around(&buf[start..end]);
        let last = i == cuts.len();
        loop {
            let pos = out.len();
            let mut o = OutBuffer::around_pos(&mut out, pos);
            let left = if input.pos < input.src.len() {
                cctx.compress_stream(&mut o, &mut input).map(|_| 1)
            } else if last {
                cctx.end_stream(&mut o)
            } else {
                cctx.flush_stream(&mut o)
            }
            .map_err(fail)?;
            if input.pos == input.src.len() && left == 0 {
                break;
            }
            out.reserve(left.max(64));
        }
        start = end;
    }
    Ok(out)
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
            // Interned names are taken as they are; only text read from a file is copied.
            let values: Vec<ByteArray> = v[at..at + n]
                .iter()
                .map(|s| match s {
                    std::borrow::Cow::Borrowed(s) => {
                        ByteArray::from(bytes::Bytes::from_static(s.as_bytes()))
                    }
                    std::borrow::Cow::Owned(s) => ByteArray::from(s.as_bytes().to_vec()),
                })
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

/// Makes the entries of `dirs` (names renamed, made or removed in them) durable: an `fsync` of
/// each, or, for more than [`SYNC_EACH_AT_MOST`] of them, one `syncfs` per filesystem.
pub fn sync_dirs(dirs: &[&Path]) -> Result<(), StoreError> {
    let mut unique: Vec<&Path> = dirs.to_vec();
    unique.sort_unstable();
    unique.dedup();
    if unique.len() > SYNC_EACH_AT_MOST {
        return sync_filesystems(&unique);
    }
    for dir in unique {
        let err = |what, source| StoreError::Io {
            what,
            path: dir.to_path_buf(),
            source,
        };
        File::open(dir)
            .map_err(|e| err("open", e))?
            .sync_all()
            .map_err(|e| err("sync", e))?;
    }
    Ok(())
}

/// Makes everything written, renamed, made or removed in `dirs` durable: one `syncfs` per
/// filesystem they are on.
fn sync_filesystems(dirs: &[&Path]) -> Result<(), StoreError> {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A `BYTE_STREAM_SPLIT` page of `ports` as 32-bit values: low bytes, high bytes, zeros.
    fn split_ports(ports: &[u16]) -> Vec<u8> {
        let mut page = Vec::new();
        for k in 0..4 {
            page.extend(ports.iter().map(|&p| u32::from(p).to_le_bytes()[k]));
        }
        page
    }

    /// Writes `n` files of one row, each in a directory of its own under `root`, and publishes
    /// them together.
    fn publish_files(root: &Path, n: usize) -> Vec<Result<(), StoreError>> {
        let cols: &[(&str, ColumnType)] = &[("time", ColumnType::TimestampMicros)];
        let rows = Batch {
            columns: vec![Column::I64(vec![1])],
        };
        let staged: Vec<Staged> = (0..n)
            .map(|k| {
                let path = root.join(format!("t/date=d{k}/hour=00/f.parquet"));
                write_staged(&path, cols, &rows, &FileOptions::default(), Vec::new()).unwrap()
            })
            .collect();
        assert!(staged.iter().all(|s| s.part.exists() && !s.path.exists()));
        publish(staged)
    }

    #[test]
    fn few_files_and_many_are_all_published_whole() {
        for n in [1, SYNC_EACH_AT_MOST, SYNC_EACH_AT_MOST + 1] {
            let root = tempfile::tempdir().unwrap();
            let results = publish_files(root.path(), n);
            assert_eq!(results.len(), n);
            assert!(results.iter().all(Result::is_ok), "{results:?}");
            for k in 0..n {
                let dir = root.path().join(format!("t/date=d{k}/hour=00"));
                let names: Vec<_> = std::fs::read_dir(&dir)
                    .unwrap()
                    .map(|e| e.unwrap().file_name())
                    .collect();
                assert_eq!(names, ["f.parquet"], "{n} files: {}", dir.display());
                let back = crate::parquet::reader::read_file(
                    &dir.join("f.parquet"),
                    &[("time", ColumnType::TimestampMicros)],
                )
                .unwrap();
                assert_eq!(back.rows(), 1);
            }
        }
    }

    #[test]
    fn a_write_names_the_directories_it_made() {
        let root = tempfile::tempdir().unwrap();
        let deep = root.path().join("a/b/c");
        assert_eq!(
            make_dirs(&deep).unwrap(),
            [deep.clone(), root.path().join("a/b"), root.path().join("a")]
        );
        assert!(deep.is_dir());
        assert!(make_dirs(&deep).unwrap().is_empty());
        assert_eq!(
            std::fs::metadata(root.path().join("a")).unwrap().mode() & 0o777,
            DIR_MODE
        );
    }

    #[test]
    fn port_streams_take_blocks_of_their_own_and_decompress_whole() {
        // Ephemeral ports: a uniform low byte, a high byte in 128..=238, two zero bytes.
        let mut x = 0x2545_f491_u32;
        let ports: Vec<u16> = (0..20_000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                32_768 + (x % 28_000) as u16
            })
            .collect();
        let page = split_ports(&ports);
        let cuts = stream_blocks(&page, 4);
        assert_eq!(cuts, vec![20_000, 40_000], "low, high, then the zeros");
        let mut zstd = zstd::bulk::Compressor::default();
        set_parameters(zstd.context_mut(), 9, false).unwrap();
        let blocks = compress_blocks(zstd.context_mut(), &page, &cuts).unwrap();
        let whole = zstd.compress(&page).unwrap();
        assert!(
            blocks.len() < whole.len(),
            "{} >= {}",
            blocks.len(),
            whole.len()
        );
        let back = zstd::bulk::decompress(&blocks, page.len()).unwrap();
        assert_eq!(back, page);
    }

    #[test]
    fn like_streams_and_small_pages_stay_one_block() {
        // Four streams of the same bytes: nothing to gain from a block each.
        let page: Vec<u8> = (0..4)
            .flat_map(|_| (0..5_000u32).map(|i| (i * 7) as u8))
            .collect();
        assert!(stream_blocks(&page, 4).is_empty());
        // Under 8 blocks' cost, whatever the bytes.
        assert!(stream_blocks(&split_ports(&[40_000; 400]), 4).is_empty());
        assert!(stream_blocks(&[1, 2, 3], 4).is_empty());
    }
}
