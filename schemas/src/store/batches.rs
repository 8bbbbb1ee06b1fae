//! Rows as Arrow batches and back, and the SQL predicates reads and
//! deletes are filtered by.

use std::sync::Arc;

use arrow_array::{Array, RecordBatch, StringArray};

use super::{Result, StoreError};
use crate::rows::TableRow;
use crate::search::{self};
use crate::tables::{DEFAULT_VECTOR_WIDTH, EachTable, MemoryTables, Table};

/// Keys a predicate names at most: a few thousand keep each one quick to
/// parse and plan.
pub const KEYS_PER_PREDICATE: usize = 4096;

/// The predicate "`table`'s key is one of `keys`", keys quoted as SQL strings.
pub(super) fn key_in(table: Table, keys: &[String]) -> String {
    column_in(table.key_column(), keys)
}

/// The predicate "`column` is one of `values`", values quoted as SQL strings.
pub(super) fn column_in(column: &str, values: &[String]) -> String {
    format!("{column} IN ({})", sql_strings(values))
}

/// `value` as an SQL string literal.
pub fn sql_string(value: &str) -> String {
    format!("'{}'", value.replace('\'', "''"))
}

/// `values` as a comma-separated list of SQL string literals.
pub fn sql_strings(values: &[String]) -> String {
    let quoted: Vec<String> = values.iter().map(|v| sql_string(v)).collect();
    quoted.join(", ")
}

/// The rows of `table` in `batch`, as `R` (columns `R` lacks are ignored).
pub fn batch_rows<R: serde::de::DeserializeOwned>(
    table: Table,
    batch: &RecordBatch,
) -> Result<Vec<R>> {
    serde_arrow::from_record_batch(batch).map_err(|cause| StoreError::Rows { table, cause })
}

/// The rows of `table` in `batches`, in order.
pub fn rows_of<R: serde::de::DeserializeOwned>(
    table: Table,
    batches: &[RecordBatch],
) -> Result<Vec<R>> {
    let mut rows = Vec::new();
    for batch in batches {
        rows.extend(batch_rows(table, batch)?);
    }
    Ok(rows)
}

/// The string column `name` of `batch`, if it has one.
pub fn strings<'a>(batch: &'a RecordBatch, name: &str) -> Option<&'a StringArray> {
    batch
        .column_by_name(name)
        .and_then(|c| c.as_any().downcast_ref::<StringArray>())
}

/// `rows` as one Arrow batch with their table's declared schema.
pub fn to_batch<R: TableRow>(rows: &[&R]) -> Result<RecordBatch> {
    rows_batch(rows, DEFAULT_VECTOR_WIDTH)
}

/// [`to_batch`] where vectors have `vector_width` components: the rows'
/// fields, then the columns derived from them for search.
pub fn rows_batch<R: TableRow>(rows: &[&R], vector_width: usize) -> Result<RecordBatch> {
    let table = R::TABLE;
    let batch = serde_arrow::to_record_batch(&table.row_fields(vector_width), &rows)
        .map_err(|cause| StoreError::Rows { table, cause })?;
    let schema = Arc::new(arrow_schema::Schema::new(
        table.fields_of_width(vector_width),
    ));
    search::with_derived_columns(table, &batch, schema).map_err(|e| StoreError::Invalid {
        table,
        message: format!("deriving the search columns: {e}"),
    })
}

impl MemoryTables {
    /// Each table that has rows, as one Arrow batch (vectors of
    /// `vector_width` components), with its number of rows.
    pub fn batches(&mut self, vector_width: usize) -> Result<Vec<(Table, RecordBatch, usize)>> {
        struct Batches {
            vector_width: usize,
            made: Vec<(Table, RecordBatch, usize)>,
        }
        impl EachTable for Batches {
            type Error = StoreError;
            fn rows<R: TableRow>(&mut self, rows: &mut Vec<R>) -> Result<()> {
                if !rows.is_empty() {
                    let rows: Vec<&R> = rows.iter().collect();
                    let batch = rows_batch(&rows, self.vector_width)?;
                    self.made.push((R::TABLE, batch, rows.len()));
                }
                Ok(())
            }
        }
        let mut batches = Batches {
            vector_width,
            made: Vec::new(),
        };
        self.each_table(&mut batches)?;
        Ok(batches.made)
    }
}
