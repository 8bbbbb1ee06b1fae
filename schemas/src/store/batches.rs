//! Rows as Arrow batches and back, and the SQL predicates reads and
//! deletes are filtered by.

use std::sync::Arc;

use arrow_array::builder::{ListBuilder, StringBuilder};
use arrow_array::cast::AsArray;
use arrow_array::types::ArrowPrimitiveType;
use arrow_array::{
    Array, FixedSizeListArray, Float16Array, Float32Array, PrimitiveArray, RecordBatch, StringArray,
};
use arrow_schema::{ArrowError, DataType, Field, Schema};

use super::{Result, StoreError};
use crate::rows::{TableRow, entity_text};
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

/// The column `name` of `batch` as values of `T`, if it has one.
pub fn primitives<'a, T: ArrowPrimitiveType>(
    batch: &'a RecordBatch,
    name: &str,
) -> Option<&'a PrimitiveArray<T>> {
    batch
        .column_by_name(name)
        .and_then(|c| c.as_primitive_opt::<T>())
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
    let schema = Arc::new(Schema::new(table.fields_of_width(vector_width)));
    with_derived_columns(table, &batch, schema).map_err(|e| StoreError::Invalid {
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

/// `batch` (rows of `table`, its row type's columns) with the derived columns
/// appended, as `schema` declares them.
fn with_derived_columns(
    table: Table,
    batch: &RecordBatch,
    schema: Arc<Schema>,
) -> Result<RecordBatch, ArrowError> {
    let mut columns = batch.columns().to_vec();
    if table == Table::TreeNodes {
        let index = batch.schema().index_of(search::TERMS)?;
        columns[index] = Arc::new(stored_node_terms(batch)?);
    }
    if table == Table::Entities {
        let names = string_column(batch, "name")?;
        let aliases = batch
            .column_by_name("aliases")
            .and_then(|c| c.as_any().downcast_ref::<arrow_array::ListArray>())
            .ok_or_else(|| ArrowError::SchemaError("entities have no aliases list".into()))?;
        let field = Field::new_list_field(DataType::Utf8, false);
        let mut keys = ListBuilder::new(StringBuilder::new()).with_field(Arc::new(field));
        for row in 0..batch.num_rows() {
            let row_aliases = aliases.value(row);
            let row_aliases = row_aliases
                .as_any()
                .downcast_ref::<StringArray>()
                .ok_or_else(|| ArrowError::SchemaError("aliases are not strings".into()))?;
            let names = std::iter::once(names.value(row)).chain(row_aliases.iter().flatten());
            for key in search::name_keys(names) {
                keys.values().append_value(key);
            }
            keys.append(true);
        }
        columns.push(Arc::new(keys.finish()));
        let descriptions = string_column(batch, "description")?;
        let terms: StringArray = (0..batch.num_rows())
            .map(|row| {
                let text = entity_text(names.value(row), descriptions.value(row));
                Some(crate::text::searched_terms([text.as_str()]))
            })
            .collect();
        columns.push(Arc::new(terms));
    }
    RecordBatch::try_new(schema, columns)
}

/// `batch` of `embeddings` rows with its vectors' components as single
/// floats, for a table written before they were stored as half floats.
pub fn with_single_float_vectors(batch: &RecordBatch) -> Result<RecordBatch> {
    let table = Table::Embeddings;
    let invalid = |message: String| StoreError::Invalid { table, message };
    let index = (batch.schema().index_of("vector")).map_err(|e| invalid(e.to_string()))?;
    let vectors = (batch.column(index).as_any())
        .downcast_ref::<FixedSizeListArray>()
        .ok_or_else(|| invalid("vector is not a fixed-size list".into()))?;
    let halves = (vectors.values().as_any())
        .downcast_ref::<Float16Array>()
        .ok_or_else(|| invalid("vector components are not half floats".into()))?;
    let singles: Float32Array = halves.iter().map(|v| v.map(f32::from)).collect();
    let component = Arc::new(Field::new_list_field(DataType::Float32, false));
    let widened = FixedSizeListArray::try_new(
        component,
        vectors.value_length(),
        Arc::new(singles),
        vectors.nulls().cloned(),
    )
    .map_err(|e| invalid(e.to_string()))?;
    let schema = batch.schema();
    let mut fields: Vec<Field> = schema.fields().iter().map(|f| f.as_ref().clone()).collect();
    fields[index] = fields[index]
        .clone()
        .with_data_type(widened.data_type().clone());
    let mut columns = batch.columns().to_vec();
    columns[index] = Arc::new(widened);
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).map_err(|e| invalid(e.to_string()))
}

/// The terms column of `batch`'s tree nodes as the table keeps it: none for
/// a leaf that is its segment's own text (no summary, a segment), whose
/// segment's row holds the same terms. Readers go by the segment's (RAPTOR
/// finds such leaves through their chunks; MemWalker reads no node's terms);
/// the lexicon counts a leaf's as it is staged, and a leaf read back gets
/// them from its segment ([`crate::TreeNodeRow::fill_own_text_terms`]).
fn stored_node_terms(batch: &RecordBatch) -> Result<StringArray, ArrowError> {
    let terms = string_column(batch, search::TERMS)?;
    let summaries = string_column(batch, "summary")?;
    let segments = string_column(batch, "seg_id")?;
    Ok((0..batch.num_rows())
        .map(|row| {
            let own_text = summaries.is_null(row) && segments.is_valid(row);
            Some(if own_text { "" } else { terms.value(row) })
        })
        .collect())
}

fn string_column<'a>(batch: &'a RecordBatch, name: &str) -> Result<&'a StringArray, ArrowError> {
    batch
        .column_by_name(name)
        .and_then(|c| c.as_any().downcast_ref::<StringArray>())
        .ok_or_else(|| ArrowError::SchemaError(format!("no string column {name}")))
}
