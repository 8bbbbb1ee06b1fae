//! Datasets: Parquet, Arrow IPC and JSON Lines (plain, gzip or zstd), each
//! row a document keyed by its id column, read batch by batch. A row's
//! document cites the file and its id; errors cite the row's number.

use std::io::{BufRead, BufReader, Read};

use arrow_array::{Array, RecordBatch, StringArray};
use arrow_schema::DataType;
use memweave_operators::build::RawDocument;
use memweave_schemas::Section;

use crate::{Compression, Format, IngestError, Located, Parsed, clip, first_of_each_id, kind};

/// Rows a Parquet or Arrow batch holds: texts of a few kilobytes each.
const BATCH_ROWS: usize = 1024;

/// The columns (or JSON fields) a dataset's rows are read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Columns {
    /// The row's id: what the document is known by across versions (a
    /// string, or a number written in decimal).
    pub id: String,
    /// The document's text (a string).
    pub text: String,
    /// Its title, if the row has one (else the id).
    pub title: String,
}

impl Default for Columns {
    fn default() -> Self {
        Columns {
            id: "id".into(),
            text: "text".into(),
            title: "title".into(),
        }
    }
}

/// A row's document.
fn row(uri: &str, id: String, title: Option<&str>, text: String) -> RawDocument {
    RawDocument {
        title: clip(title.filter(|t| !t.trim().is_empty()).unwrap_or(&id), 120),
        source_uri: uri.to_string(),
        sections: vec![Section {
            start_char: 0,
            kind: "row".into(),
            label: id.clone(),
        }],
        key: id,
        text,
    }
}

fn at(uri: &str, row: usize) -> String {
    format!("{uri}:{row}")
}

pub(crate) fn read_json_lines(
    uri: &str,
    compression: Compression,
    bytes: &[u8],
    columns: &Columns,
) -> Parsed {
    let reader: Box<dyn Read + '_> = match compression {
        Compression::None => Box::new(bytes),
        Compression::Gzip => Box::new(flate2::read::MultiGzDecoder::new(bytes)),
        Compression::Zstd => match zstd::stream::read::Decoder::new(bytes) {
            Ok(decoder) => Box::new(decoder),
            Err(e) => return vec![Err(IngestError::new(uri, kind::CORRUPT, e.to_string()))],
        },
    };
    let mut reader = BufReader::new(reader);
    let mut located = Vec::new();
    let mut line = Vec::new();
    let mut number = 0;
    loop {
        line.clear();
        match reader.read_until(b'\n', &mut line) {
            Ok(0) => break,
            Ok(_) => number += 1,
            Err(e) => {
                let place = at(uri, number + 1);
                let message = format!("cannot decompress past line {number}: {e}");
                located.push((
                    place.clone(),
                    Err(IngestError::new(place, kind::CORRUPT, message)),
                ));
                break;
            }
        }
        let place = at(uri, number);
        let Ok(text) = std::str::from_utf8(&line) else {
            let error = IngestError::new(&place, kind::BAD_RECORD, "not UTF-8");
            located.push((place, Err(error)));
            continue;
        };
        if text.trim().is_empty() {
            continue;
        }
        located.push((place, json_record(uri, number, text, columns)));
    }
    if located.is_empty() {
        return vec![Err(IngestError::new(uri, kind::EMPTY, "no records"))];
    }
    first_of_each_id(located)
}

fn json_record(
    uri: &str,
    line: usize,
    text: &str,
    columns: &Columns,
) -> Result<RawDocument, IngestError> {
    let bad = |message: String| IngestError::new(at(uri, line), kind::BAD_RECORD, message);
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| bad(format!("not JSON: {e}")))?;
    let serde_json::Value::Object(mut record) = value else {
        return Err(bad("not a JSON object".into()));
    };
    let id = match record.remove(&columns.id) {
        Some(serde_json::Value::String(s)) => s,
        Some(serde_json::Value::Number(n)) => n.to_string(),
        Some(other) => {
            return Err(bad(format!(
                "\"{}\" must be a string or number, got {other}",
                columns.id
            )));
        }
        None => return Err(bad(format!("no \"{}\" field", columns.id))),
    };
    let text = match record.remove(&columns.text) {
        Some(serde_json::Value::String(s)) => s,
        Some(other) => {
            return Err(bad(format!(
                "\"{}\" must be a string, got {}",
                columns.text,
                json_type(&other)
            )));
        }
        None => return Err(bad(format!("no \"{}\" field", columns.text))),
    };
    if text.trim().is_empty() {
        return Err(IngestError::new(
            at(uri, line),
            kind::EMPTY,
            format!("record {id} has no text"),
        ));
    }
    let title = match record.remove(&columns.title) {
        Some(serde_json::Value::String(s)) => Some(s),
        _ => None,
    };
    Ok(row(uri, id, title.as_deref(), text))
}

fn json_type(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

pub(crate) fn read_parquet(uri: &str, bytes: Vec<u8>, columns: &Columns) -> Parsed {
    use parquet::arrow::ProjectionMask;
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    let builder = match ParquetRecordBatchReaderBuilder::try_new(bytes::Bytes::from(bytes)) {
        Ok(builder) => builder,
        Err(e) => {
            return vec![Err(IngestError::new(
                uri,
                kind::CORRUPT,
                format!("not a readable Parquet file: {e}"),
            ))];
        }
    };
    if let Some(error) = missing_columns(uri, builder.schema(), columns) {
        return vec![Err(error)];
    }
    let names: Vec<&str> = [&columns.id, &columns.text, &columns.title]
        .into_iter()
        .map(String::as_str)
        .filter(|name| builder.schema().field_with_name(name).is_ok())
        .collect();
    let mask = ProjectionMask::columns(builder.parquet_schema(), names);
    match builder
        .with_projection(mask)
        .with_batch_size(BATCH_ROWS)
        .build()
    {
        Ok(batches) => read_batches(uri, batches, columns),
        Err(e) => vec![Err(IngestError::new(uri, kind::CORRUPT, e.to_string()))],
    }
}

pub(crate) fn read_arrow(uri: &str, format: Format, bytes: &[u8], columns: &Columns) -> Parsed {
    use arrow_ipc::reader::{FileReader, StreamReader};
    let cursor = std::io::Cursor::new(bytes);
    let batches: Result<Box<dyn Iterator<Item = _>>, _> = if format == Format::ArrowStream {
        StreamReader::try_new(cursor, None).map(|r| Box::new(r) as Box<dyn Iterator<Item = _>>)
    } else {
        FileReader::try_new(cursor, None).map(|r| Box::new(r) as Box<dyn Iterator<Item = _>>)
    };
    match batches {
        Ok(batches) => read_batches(uri, batches, columns),
        Err(e) => vec![Err(IngestError::new(
            uri,
            kind::CORRUPT,
            format!("not a readable Arrow IPC file: {e}"),
        ))],
    }
}

/// The documents of a dataset's record batches, rows numbered from 1.
fn read_batches(
    uri: &str,
    batches: impl Iterator<Item = Result<RecordBatch, arrow_schema::ArrowError>>,
    columns: &Columns,
) -> Parsed {
    let mut located = Vec::new();
    let mut first_row = 1;
    for batch in batches {
        let batch = match batch {
            Ok(batch) => batch,
            Err(e) => {
                let place = at(uri, first_row);
                let message = format!("cannot read the rows from {first_row} on: {e}");
                located.push((
                    place.clone(),
                    Err(IngestError::new(place, kind::CORRUPT, message)),
                ));
                break;
            }
        };
        match batch_rows(uri, &batch, first_row, columns) {
            Ok(rows) => located.extend(rows),
            // A column missing or of the wrong type is so for every row.
            Err(error) => return vec![Err(error)],
        }
        first_row += batch.num_rows();
    }
    if located.is_empty() {
        return vec![Err(IngestError::new(uri, kind::EMPTY, "no rows"))];
    }
    first_of_each_id(located)
}

/// The error of a dataset without its id or text column, naming the
/// columns it has.
fn missing_columns(
    uri: &str,
    schema: &arrow_schema::Schema,
    columns: &Columns,
) -> Option<IngestError> {
    let missing: Vec<&str> = [&columns.id, &columns.text]
        .into_iter()
        .filter(|name| schema.field_with_name(name).is_err())
        .map(String::as_str)
        .collect();
    let has: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    (!missing.is_empty()).then(|| {
        IngestError::new(
            uri,
            kind::BAD_RECORD,
            format!(
                "no column {} (its columns: {}); see --id-column and --text-column",
                missing.join(" or "),
                has.join(", ")
            ),
        )
    })
}

fn batch_rows(
    uri: &str,
    batch: &RecordBatch,
    first_row: usize,
    columns: &Columns,
) -> Result<Vec<Located>, IngestError> {
    if let Some(error) = missing_columns(uri, &batch.schema(), columns) {
        return Err(error);
    }
    let column = |name: &str, strings_only: bool| -> Result<Option<StringArray>, IngestError> {
        let Some(array) = batch.column_by_name(name) else {
            return Ok(None);
        };
        let is_string = matches!(
            array.data_type(),
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
        );
        if strings_only && !is_string {
            return Err(IngestError::new(
                uri,
                kind::BAD_RECORD,
                format!("column {name} holds {}, not strings", array.data_type()),
            ));
        }
        let cast = arrow_cast::cast(array, &DataType::Utf8)
            .map_err(|e| IngestError::new(uri, kind::BAD_RECORD, format!("column {name}: {e}")))?;
        Ok(cast.as_any().downcast_ref::<StringArray>().cloned())
    };
    let missing = |name: &str| IngestError::new(uri, kind::BAD_RECORD, format!("no column {name}"));
    let ids = column(&columns.id, false)?.ok_or_else(|| missing(&columns.id))?;
    let texts = column(&columns.text, true)?.ok_or_else(|| missing(&columns.text))?;
    let titles = column(&columns.title, false)?;
    let row_document = |number: usize, i: usize| {
        let bad = |kind, message: String| Err(IngestError::new(at(uri, number), kind, message));
        if ids.is_null(i) {
            return bad(
                kind::BAD_RECORD,
                format!("row {number} has no {}", columns.id),
            );
        }
        let id = ids.value(i).to_string();
        if texts.is_null(i) {
            return bad(
                kind::BAD_RECORD,
                format!("row {id} has no {}", columns.text),
            );
        }
        let text = texts.value(i);
        if text.trim().is_empty() {
            return bad(kind::EMPTY, format!("row {id} has no text"));
        }
        let title = (titles.as_ref())
            .filter(|t| !t.is_null(i))
            .map(|t| t.value(i).to_string());
        Ok(row(uri, id, title.as_deref(), text.to_string()))
    };
    Ok((0..batch.num_rows())
        .map(|i| {
            let number = first_row + i;
            (at(uri, number), row_document(number, i))
        })
        .collect())
}
