//! Datasets: Parquet, Arrow IPC and JSON Lines (plain, gzip or zstd), each
//! row a document keyed by its id column. Rows are read as they are taken,
//! a record batch (or a line) at a time, from the file or from bytes in
//! memory: a dataset of any size costs a batch. A row's document cites the
//! file and its id; errors cite the row's number.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read};

use arrow_array::cast::AsArray;
use arrow_array::{Array, RecordBatch, StringArray};
use arrow_schema::{ArrowError, DataType};
use memweave_operators::build::RawDocument;
use memweave_schemas::Section;

use crate::{Compression, Format, IngestError, Located, ReadOptions, clip, kind};

/// Rows a Parquet or Arrow batch holds: texts of a few kilobytes each.
const BATCH_ROWS: usize = 1024;

/// The columns (or JSON fields) a dataset's rows are read from.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Columns {
    /// The row's id: what the document is known by across versions (a
    /// string, or a number written in decimal).
    pub id: String,
    /// The document's text (a string).
    pub text: String,
    /// Its title, if the row has one (else the id).
    pub title: String,
    /// Its access labels (`--acl-column`), if the rows carry them: a list of
    /// strings or one comma-separated string. A row without (the column
    /// absent, or null) takes its file's labels ([`crate::Access`]).
    pub acl: Option<String>,
}

impl Default for Columns {
    fn default() -> Self {
        Columns {
            id: "id".into(),
            text: "text".into(),
            title: "title".into(),
            acl: None,
        }
    }
}

/// A dataset's rows (documents, or why a row is not one), each with where
/// the file holds it.
pub(crate) type Rows = Box<dyn Iterator<Item = Located> + Send>;

/// Where a dataset's bytes come from.
pub(crate) enum Input {
    Bytes(Vec<u8>),
    File(std::fs::File),
}

/// A dataset's rows, each with where the file holds it, read as they are
/// taken. A file with no rows gives one `empty` error.
pub(crate) fn rows(uri: &str, format: Format, input: Input, options: &ReadOptions) -> Rows {
    let columns = &options.columns;
    let opened = match format {
        Format::JsonLines(compression) => json_lines(uri, compression, input, options),
        Format::Parquet => parquet(uri, input, options),
        Format::ArrowFile | Format::ArrowStream => arrow(uri, format, input, columns),
        _ => unreachable!("{format:?} is not a dataset"),
    };
    let rows = match opened {
        Ok(rows) => rows,
        Err(error) => Box::new(std::iter::once((uri.to_string(), Err(error)))),
    };
    Box::new(NotEmpty {
        uri: uri.to_string(),
        rows,
        any: false,
    })
}

/// Rows, or an `empty` error for a file that has none.
struct NotEmpty {
    uri: String,
    rows: Rows,
    any: bool,
}

impl Iterator for NotEmpty {
    type Item = Located;

    fn next(&mut self) -> Option<Located> {
        match self.rows.next() {
            Some(row) => {
                self.any = true;
                Some(row)
            }
            None if !self.any => {
                self.any = true;
                let error = IngestError::new(&self.uri, kind::EMPTY, "no rows");
                Some((self.uri.clone(), Err(error)))
            }
            None => None,
        }
    }
}

/// A row's document.
fn row(uri: &str, id: String, title: Option<&str>, text: String, acl: Vec<String>) -> RawDocument {
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
        acl,
    }
}

fn at(uri: &str, row: usize) -> String {
    format!("{uri}:{row}")
}

fn json_lines(
    uri: &str,
    compression: Compression,
    input: Input,
    options: &ReadOptions,
) -> Result<Rows, IngestError> {
    let raw: Box<dyn Read + Send> = match input {
        Input::Bytes(bytes) => Box::new(std::io::Cursor::new(bytes)),
        Input::File(file) => Box::new(BufReader::new(file)),
    };
    // What a compressed file inflates to counts against one budget: past
    // it, the read fails as `too_large` rather than filling memory or disk.
    let budget = options.max_inflated_bytes;
    let decoded: Box<dyn Read + Send> = match compression {
        Compression::None => raw,
        Compression::Gzip => Box::new(Inflated::new(
            flate2::read::MultiGzDecoder::new(raw),
            budget,
        )),
        Compression::Zstd => Box::new(Inflated::new(
            zstd::stream::read::Decoder::new(raw)
                .map_err(|e| IngestError::new(uri, kind::CORRUPT, e.to_string()))?,
            budget,
        )),
    };
    Ok(Box::new(JsonRows {
        uri: uri.to_string(),
        columns: options.columns.clone(),
        max_line: options.max_record_bytes,
        reader: BufReader::new(decoded),
        line: Vec::new(),
        number: 0,
        done: false,
    }))
}

/// A decompressor that fails once it has given `budget` bytes.
struct Inflated<R> {
    inner: R,
    left: u64,
    budget: u64,
}

impl<R> Inflated<R> {
    fn new(inner: R, budget: u64) -> Self {
        Inflated {
            inner,
            left: budget,
            budget,
        }
    }
}

impl<R: Read> Read for Inflated<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.left = self.left.checked_sub(n as u64).ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::FileTooLarge,
                format!(
                    "it inflates past {} MiB (--max-inflated-mib)",
                    self.budget >> 20
                ),
            )
        })?;
        Ok(n)
    }
}

/// A JSON Lines file's records, a line at a time.
struct JsonRows {
    uri: String,
    columns: Columns,
    /// The longest line read; a longer one is a `too_large` error, skipped.
    max_line: u64,
    reader: BufReader<Box<dyn Read + Send>>,
    line: Vec<u8>,
    number: usize,
    done: bool,
}

impl JsonRows {
    /// Reads the next line into `self.line`, at most `max_line` bytes of it:
    /// whether a line was there, and whether it was cut short (the rest of
    /// it is read past, never held).
    fn next_line(&mut self) -> std::io::Result<Option<bool>> {
        self.line.clear();
        let limit = self.max_line.saturating_add(1);
        if (&mut self.reader)
            .take(limit)
            .read_until(b'\n', &mut self.line)?
            == 0
        {
            return Ok(None);
        }
        let whole = self.line.ends_with(b"\n") || self.line.len() as u64 <= self.max_line;
        if !whole {
            // Past the cap: skip to the line's end a buffer at a time.
            loop {
                let buffer = self.reader.fill_buf()?;
                if buffer.is_empty() {
                    break;
                }
                match buffer.iter().position(|&b| b == b'\n') {
                    Some(at) => {
                        self.reader.consume(at + 1);
                        break;
                    }
                    None => {
                        let n = buffer.len();
                        self.reader.consume(n);
                    }
                }
            }
        }
        Ok(Some(!whole))
    }
}

impl Iterator for JsonRows {
    type Item = Located;

    fn next(&mut self) -> Option<Located> {
        while !self.done {
            let cut = match self.next_line() {
                Ok(None) => {
                    self.done = true;
                    break;
                }
                Ok(Some(cut)) => {
                    self.number += 1;
                    cut
                }
                Err(e) => {
                    self.done = true;
                    let place = at(&self.uri, self.number + 1);
                    let kind = if e.kind() == std::io::ErrorKind::FileTooLarge {
                        kind::TOO_LARGE
                    } else {
                        kind::CORRUPT
                    };
                    let message = format!("cannot decompress past line {}: {e}", self.number);
                    let error = IngestError::new(&place, kind, message);
                    return Some((place, Err(error)));
                }
            };
            let place = at(&self.uri, self.number);
            if cut {
                let message = format!("a line longer than {} MiB; not read", self.max_line >> 20);
                let error = IngestError::new(&place, kind::TOO_LARGE, message);
                return Some((place, Err(error)));
            }
            let Ok(text) = std::str::from_utf8(&self.line) else {
                let error = IngestError::new(&place, kind::BAD_RECORD, "not UTF-8");
                return Some((place, Err(error)));
            };
            let text = text.strip_prefix('\u{feff}').unwrap_or(text);
            if text.trim().is_empty() {
                continue;
            }
            let record = json_record(&self.uri, self.number, text, &self.columns);
            return Some((place, record));
        }
        None
    }
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
    let acl = match &columns.acl {
        Some(field) => crate::access::json_labels(record.remove(field))
            .map_err(|e| bad(format!("\"{field}\" of record {id}: {e}")))?,
        None => Vec::new(),
    };
    Ok(row(uri, id, title.as_deref(), text, acl))
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

fn parquet(uri: &str, input: Input, options: &ReadOptions) -> Result<Rows, IngestError> {
    use parquet::arrow::ProjectionMask;
    use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ParquetRecordBatchReaderBuilder};
    use parquet::file::reader::ChunkReader;

    use crate::parquet_bounds::{self, Refusal};
    fn open<T: ChunkReader + 'static>(
        uri: &str,
        reader: T,
        options: &ReadOptions,
    ) -> Result<Batches, IngestError> {
        let columns = &options.columns;
        let refused = |refusal: Refusal| match refusal {
            Refusal::Corrupt(why) => unreadable_parquet(uri, why),
            Refusal::TooLarge(why) => IngestError::new(uri, kind::TOO_LARGE, why),
        };
        let corrupt = |e: parquet::errors::ParquetError| unreadable_parquet(uri, e);
        parquet_bounds::footer(&reader).map_err(refused)?;
        let metadata = ArrowReaderMetadata::load(&reader, Default::default()).map_err(corrupt)?;
        if let Some(error) = missing_columns(uri, metadata.schema(), columns) {
            return Err(error);
        }
        let names: Vec<&str> = [&columns.id, &columns.text, &columns.title]
            .into_iter()
            .chain(&columns.acl)
            .map(String::as_str)
            .filter(|name| metadata.schema().field_with_name(name).is_ok())
            .collect();
        let leaves: Vec<usize> = (metadata.parquet_schema().columns().iter().enumerate())
            .filter(|(_, leaf)| names.contains(&leaf.path().parts()[0].as_str()))
            .map(|(index, _)| index)
            .collect();
        let declared = metadata.metadata();
        parquet_bounds::pages(&reader, declared, &leaves, options.max_inflated_bytes)
            .map_err(refused)?;
        let mask = ProjectionMask::columns(metadata.parquet_schema(), names);
        let reader = ParquetRecordBatchReaderBuilder::new_with_metadata(reader, metadata)
            .with_projection(mask)
            .with_batch_size(BATCH_ROWS)
            .build()
            .map_err(corrupt)?;
        Ok(Box::new(reader))
    }
    let batches = match input {
        Input::Bytes(bytes) => open(uri, bytes::Bytes::from(bytes), options)?,
        Input::File(file) => open(uri, file, options)?,
    };
    Ok(batch_rows_of(uri, batches, &options.columns))
}

fn unreadable_parquet(uri: &str, why: impl std::fmt::Display) -> IngestError {
    IngestError::new(
        uri,
        kind::CORRUPT,
        format!("not a readable Parquet file: {why}"),
    )
}

fn arrow(uri: &str, format: Format, input: Input, columns: &Columns) -> Result<Rows, IngestError> {
    let batches = match input {
        Input::Bytes(bytes) => {
            let len = bytes.len() as u64;
            IpcBatches::open(format, std::io::Cursor::new(bytes), len)
        }
        Input::File(file) => match file.metadata() {
            Ok(meta) => IpcBatches::open(format, BufReader::new(file), meta.len()),
            Err(e) => Err(ArrowError::from(e)),
        },
    }
    .map_err(|e| {
        IngestError::new(
            uri,
            kind::CORRUPT,
            format!("not a readable Arrow IPC file: {e}"),
        )
    })?;
    Ok(batch_rows_of(uri, Box::new(batches), columns))
}

/// An Arrow IPC file's or stream's record batches, through arrow's push
/// decoder fed the input a chunk at a time. Arrow's readers
/// (`StreamReader`, `FileReader`) allocate the length a message or the
/// footer declares before reading it, so a file of a few hundred bytes
/// could ask for terabytes (found by the `arrow` fuzz target); the decoder
/// holds only what the input holds.
struct IpcBatches {
    messages: Box<dyn Read + Send>,
    decoder: arrow_ipc::reader::StreamDecoder,
    pending: arrow_buffer::Buffer,
    /// A batch decoded while looking for the schema.
    first: Option<RecordBatch>,
    finished: bool,
}

/// What the decoder is fed at a time.
const IPC_CHUNK: u64 = 1 << 20;

impl IpcBatches {
    /// The batches of `reader` (`len` bytes), read up to the schema: bytes
    /// that are not Arrow IPC fail here, as a whole.
    fn open<R: Read + std::io::Seek + Send + 'static>(
        format: Format,
        mut reader: R,
        len: u64,
    ) -> Result<Self, ArrowError> {
        let messages: Box<dyn Read + Send> = if format == Format::ArrowStream {
            Box::new(reader)
        } else {
            // The file format is the stream format between an 8-byte head
            // and a footer whose length the last ten bytes give.
            let invalid = || ArrowError::ParseError("no Arrow file magic at its ends".into());
            let mut head = [0; 6];
            reader.read_exact(&mut head)?;
            let tail_at = len.checked_sub(10).ok_or_else(invalid)?;
            reader.seek(std::io::SeekFrom::Start(tail_at))?;
            let mut tail = [0; 10];
            reader.read_exact(&mut tail)?;
            if &head != b"ARROW1" || &tail[4..] != b"ARROW1" {
                return Err(invalid());
            }
            let footer = u64::from(u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]));
            let end = tail_at
                .checked_sub(footer)
                .filter(|&end| end >= 8)
                .ok_or_else(|| {
                    ArrowError::ParseError("its footer is longer than the file".into())
                })?;
            reader.seek(std::io::SeekFrom::Start(8))?;
            Box::new(reader.take(end - 8))
        };
        let mut batches = IpcBatches {
            messages,
            decoder: arrow_ipc::reader::StreamDecoder::new(),
            pending: arrow_buffer::Buffer::from(Vec::<u8>::new()),
            first: None,
            finished: false,
        };
        while batches.decoder.schema().is_none() {
            match batches.decoded()? {
                Some(batch) => batches.first = Some(batch),
                None if batches.finished => break,
                None => {}
            }
        }
        Ok(batches)
    }

    /// The next batch decoded from what is pending, or from one more chunk
    /// (`None`: none yet, or `finished`).
    fn decoded(&mut self) -> Result<Option<RecordBatch>, ArrowError> {
        if self.pending.is_empty() {
            let mut chunk = Vec::new();
            (&mut self.messages)
                .take(IPC_CHUNK)
                .read_to_end(&mut chunk)?;
            if chunk.is_empty() {
                self.finished = true;
                self.decoder.finish()?;
                return Ok(None);
            }
            self.pending = arrow_buffer::Buffer::from(chunk);
        }
        self.decoder.decode(&mut self.pending)
    }
}

impl Iterator for IpcBatches {
    type Item = Result<RecordBatch, ArrowError>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(batch) = self.first.take() {
            return Some(Ok(batch));
        }
        while !self.finished {
            match self.decoded() {
                Ok(Some(batch)) => return Some(Ok(batch)),
                Ok(None) => {}
                Err(e) => {
                    self.finished = true;
                    return Some(Err(e));
                }
            }
        }
        None
    }
}

type Batches = Box<dyn Iterator<Item = Result<RecordBatch, ArrowError>> + Send>;

/// The rows of a dataset's record batches, numbered from 1.
fn batch_rows_of(uri: &str, batches: Batches, columns: &Columns) -> Rows {
    Box::new(BatchRows {
        uri: uri.to_string(),
        columns: columns.clone(),
        batches: Some(batches),
        rows: VecDeque::new(),
        first_row: 1,
    })
}

/// A dataset's rows, read a record batch at a time.
struct BatchRows {
    uri: String,
    columns: Columns,
    /// `None` once read to the end or to an error.
    batches: Option<Batches>,
    /// The rows of the batch being taken.
    rows: VecDeque<Located>,
    first_row: usize,
}

impl Iterator for BatchRows {
    type Item = Located;

    fn next(&mut self) -> Option<Located> {
        loop {
            if let Some(row) = self.rows.pop_front() {
                return Some(row);
            }
            let uri = self.uri.as_str();
            let batch = match self.batches.as_mut()?.next() {
                None => {
                    self.batches = None;
                    return None;
                }
                Some(Ok(batch)) => batch,
                Some(Err(e)) => {
                    self.batches = None;
                    let place = at(uri, self.first_row);
                    let message = format!("cannot read the rows from {} on: {e}", self.first_row);
                    return Some((
                        place.clone(),
                        Err(IngestError::new(place, kind::CORRUPT, message)),
                    ));
                }
            };
            match batch_rows(uri, &batch, self.first_row, &self.columns) {
                Ok(rows) => self.rows.extend(rows),
                // A column missing or of the wrong type is so for every row.
                Err(error) => {
                    self.batches = None;
                    return Some((uri.to_string(), Err(error)));
                }
            }
            self.first_row += batch.num_rows();
        }
    }
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
    let labels = match &columns.acl {
        Some(name) => RowLabels::of(uri, batch, name)?,
        None => RowLabels::None,
    };
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
        let acl = match labels.of_row(i) {
            Ok(acl) => acl,
            Err(e) => return bad(kind::BAD_RECORD, format!("row {id}'s labels: {e}")),
        };
        Ok(row(uri, id, title.as_deref(), text.to_string(), acl))
    };
    Ok((0..batch.num_rows())
        .map(|i| {
            let number = first_row + i;
            (at(uri, number), row_document(number, i))
        })
        .collect())
}

/// A batch's label column: one comma-separated string a row, or a list of
/// strings a row.
enum RowLabels {
    None,
    Strings(StringArray),
    Lists(arrow_array::ListArray),
}

impl RowLabels {
    /// The labels of `batch`'s column `name` (absent: none).
    fn of(uri: &str, batch: &RecordBatch, name: &str) -> Result<RowLabels, IngestError> {
        let Some(array) = batch.column_by_name(name) else {
            return Ok(RowLabels::None);
        };
        let wrong =
            |e: String| IngestError::new(uri, kind::BAD_RECORD, format!("column {name}: {e}"));
        let strings = |array: &dyn Array| -> Result<StringArray, IngestError> {
            let cast =
                arrow_cast::cast(array, &DataType::Utf8).map_err(|e| wrong(e.to_string()))?;
            Ok(cast.as_string::<i32>().clone())
        };
        match array.data_type() {
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => {
                Ok(RowLabels::Strings(strings(array)?))
            }
            DataType::List(item) | DataType::LargeList(item) | DataType::ListView(item)
                if matches!(
                    item.data_type(),
                    DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
                ) =>
            {
                let as_list = DataType::List(std::sync::Arc::new(
                    arrow_schema::Field::new_list_field(DataType::Utf8, true),
                ));
                let cast = arrow_cast::cast(array, &as_list).map_err(|e| wrong(e.to_string()))?;
                Ok(RowLabels::Lists(cast.as_list::<i32>().clone()))
            }
            other => Err(wrong(format!(
                "holds {other}, not strings or lists of strings"
            ))),
        }
    }

    /// Row `i`'s labels, normalised (null: none).
    fn of_row(&self, i: usize) -> Result<Vec<String>, String> {
        match self {
            RowLabels::None => Ok(Vec::new()),
            RowLabels::Strings(strings) if strings.is_null(i) => Ok(Vec::new()),
            RowLabels::Strings(strings) => memweave_schemas::acl::comma_separated(strings.value(i)),
            RowLabels::Lists(lists) if lists.is_null(i) => Ok(Vec::new()),
            RowLabels::Lists(lists) => {
                let list = lists.value(i);
                let items = list.as_string::<i32>();
                if items.null_count() > 0 {
                    return Err("a null label".into());
                }
                memweave_schemas::acl::labels(items.iter().flatten())
            }
        }
    }
}
