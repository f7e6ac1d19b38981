//! Reading back a file the store wrote: every row, column by column, checked against the
//! table's columns.

use std::path::Path;

use parquet::column::reader::ColumnReader;
use parquet::file::reader::{FileReader, RowGroupReader};
use parquet::file::serialized_reader::SerializedFileReader;

use crate::StoreError;
use crate::parquet::batch::{Batch, Column};
use crate::schema::{
    ColumnType, FLOW_COLUMNS, FLOW_COLUMNS_BEFORE_ENRICHMENT, INTERFACE_COLUMNS,
    INTERFACE_COLUMNS_BEFORE_SPEED, StoredFlow,
};

/// Every row of the file at `path`, a table of `columns`. A file that cannot be read is
/// [`StoreError::Damaged`], and moved into quarantine ([`crate::parquet::damaged::read`]).
pub fn read_file(path: &Path, columns: &[(&str, ColumnType)]) -> Result<Batch, StoreError> {
    crate::parquet::damaged::read(path, |file| {
        let bad = |e: String| crate::parquet::damaged::damaged(path, &e);
        let reader = SerializedFileReader::new(file).map_err(|e| bad(e.to_string()))?;
        let schema = reader.metadata().file_metadata().schema_descr();
        let names: Vec<&str> = schema.columns().iter().map(|c| c.name()).collect();
        let want: Vec<&str> = columns.iter().map(|c| c.0).collect();
        // A file written before columns were appended (the flows' enrichment, the interfaces'
        // speed) holds the others; the appended ones read as empty.
        let before = if columns == FLOW_COLUMNS {
            FLOW_COLUMNS_BEFORE_ENRICHMENT
        } else if columns == INTERFACE_COLUMNS {
            INTERFACE_COLUMNS_BEFORE_SPEED
        } else {
            want.len()
        };
        let older = names.len() == before && names[..] == want[..names.len()];
        if names != want && !older {
            return Err(bad(format!("columns {names:?}, not the table's {want:?}")));
        }
        let mut batch = Batch::empty(columns);
        for i in 0..reader.num_row_groups() {
            let rg = reader.get_row_group(i).map_err(|e| bad(e.to_string()))?;
            let rows = usize::try_from(rg.metadata().num_rows()).unwrap_or(0);
            for (k, col) in batch.columns.iter_mut().enumerate() {
                if k >= names.len() {
                    col.pad(rows);
                    continue;
                }
                read_column(rg.as_ref(), k, rows, col).map_err(|e| bad(e.to_string()))?;
            }
        }
        if batch.columns.iter().any(|c| c.len() != batch.rows()) {
            return Err(bad("columns of different lengths".into()));
        }
        Ok(batch)
    })
}

/// The most rows a column's buffer is made for before they are read: a damaged footer may claim
/// any number.
const PREALLOCATED_ROWS: usize = 1 << 16;

/// Appends the `rows` values of column `k` of row group `rg` to `out`.
fn read_column(
    rg: &dyn RowGroupReader,
    k: usize,
    rows: usize,
    out: &mut Column,
) -> parquet::errors::Result<()> {
    let general = |m: &str| parquet::errors::ParquetError::General(m.to_owned());
    match (rg.get_column_reader(k)?, out) {
        (ColumnReader::Int32ColumnReader(mut r), Column::I32(v)) => {
            let mut buf = Vec::with_capacity(rows.min(PREALLOCATED_ROWS));
            read_all(rows, |n, b| r.read_records(n, None, None, b), &mut buf)?;
            v.extend_from_slice(&buf);
        }
        (ColumnReader::Int64ColumnReader(mut r), Column::I64(v)) => {
            let mut buf = Vec::with_capacity(rows.min(PREALLOCATED_ROWS));
            read_all(rows, |n, b| r.read_records(n, None, None, b), &mut buf)?;
            v.extend_from_slice(&buf);
        }
        (ColumnReader::FixedLenByteArrayColumnReader(mut r), Column::Addr(v)) => {
            let mut buf = Vec::with_capacity(rows.min(PREALLOCATED_ROWS));
            read_all(rows, |n, b| r.read_records(n, None, None, b), &mut buf)?;
            for a in buf {
                v.push(
                    a.data()
                        .try_into()
                        .map_err(|_| general("an address is not 16 bytes"))?,
                );
            }
        }
        (ColumnReader::ByteArrayColumnReader(mut r), Column::Text(v)) => {
            let mut buf = Vec::with_capacity(rows.min(PREALLOCATED_ROWS));
            read_all(rows, |n, b| r.read_records(n, None, None, b), &mut buf)?;
            for s in buf {
                v.push(
                    s.as_utf8()
                        .map_err(|_| general("text is not UTF-8"))?
                        .to_owned()
                        .into(),
                );
            }
        }
        _ => return Err(general("a column's physical type is not the table's")),
    }
    Ok(())
}

/// Reads `rows` records with `read` into `buf` (one call may stop at a page's end).
fn read_all<T>(
    rows: usize,
    mut read: impl FnMut(usize, &mut Vec<T>) -> parquet::errors::Result<(usize, usize, usize)>,
    buf: &mut Vec<T>,
) -> parquet::errors::Result<()> {
    let mut done = 0;
    while done < rows {
        let (records, _, _) = read(rows - done, buf)?;
        if records == 0 {
            return Err(parquet::errors::ParquetError::General(format!(
                "{done} of {rows} rows in a row group"
            )));
        }
        done += records;
    }
    Ok(())
}

/// The flows of a file of the flows table, as [`crate::parquet::batch::to_flows`] rebuilds them.
pub fn read_flows(path: &Path) -> Result<Vec<StoredFlow>, StoreError> {
    Ok(crate::parquet::batch::to_flows(&read_file(
        path,
        FLOW_COLUMNS,
    )?))
}

/// The file's key-value metadata entry `key`, if it has one. A file that cannot be read is
/// [`StoreError::Damaged`], and moved into quarantine.
pub fn metadata_value(path: &Path, key: &str) -> Result<Option<String>, StoreError> {
    crate::parquet::damaged::read(path, |file| {
        let reader = SerializedFileReader::new(file)
            .map_err(|e| crate::parquet::damaged::damaged(path, &e.to_string()))?;
        Ok(reader
            .metadata()
            .file_metadata()
            .key_value_metadata()
            .and_then(|kv| kv.iter().find(|e| e.key == key))
            .and_then(|e| e.value.clone()))
    })
}
