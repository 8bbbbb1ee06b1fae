//! What a Parquet file declares, checked before the `parquet` crate acts on
//! it. Its decoder (58.x, the line lance 14's arrow 58 pins) reserves what
//! a file declares before reading what it holds: a footer's list of two
//! billion row groups (apache/arrow-rs#10920, fixed in 60) and a dictionary
//! page of two billion values each ask for gigabytes from a file of a few
//! hundred bytes, and a failed allocation aborts the process. Each count is
//! checked here against the bytes that must hold it: a Thrift element takes
//! at least a byte, a dictionary value at least a bit, and a page inflates
//! to no more than a file's inflation budget. The footer's and each read
//! column's page headers are walked once, without building anything.

use parquet::file::metadata::ParquetMetaData;
use parquet::file::reader::ChunkReader;

/// `PAR1`: what ends a plain (unencrypted) Parquet file.
const MAGIC: &[u8; 4] = b"PAR1";
/// The footer's length (u32, little-endian) and the magic after it.
const TAIL_BYTES: u64 = 8;
/// Nesting past this is not a Parquet footer (its structs nest about six
/// deep); the bound keeps the walk's stack small.
const MAX_DEPTH: usize = 64;
/// Bytes first read for a page header: headers are tens of bytes, more with
/// statistics; a longer one is read again with twice the window.
const HEADER_WINDOW: u64 = 4 << 10;
/// The longest page header read: statistics are a few values, where
/// writers truncate long ones.
const MAX_HEADER_BYTES: u64 = 64 << 20;

/// Why a file may not be given to the decoder.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    Corrupt(String),
    /// A page that would inflate past the file's budget.
    TooLarge(String),
}

/// Why the footer of the Parquet file `reader` holds is not one the decoder
/// may be given. A file too short for a footer, or not ending in the magic,
/// passes: the decoder's own errors say what it is (an encrypted footer, not
/// Parquet at all).
pub(crate) fn footer<R: ChunkReader>(reader: &R) -> Result<(), Refusal> {
    let len = reader.len();
    let Some(tail_at) = len.checked_sub(TAIL_BYTES) else {
        return Ok(());
    };
    let tail = reader
        .get_bytes(tail_at, TAIL_BYTES as usize)
        .map_err(|e| Refusal::Corrupt(e.to_string()))?;
    if &tail[4..] != MAGIC {
        return Ok(());
    }
    let footer_len = u64::from(u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]));
    let Some(start) = tail_at.checked_sub(footer_len) else {
        return Ok(());
    };
    let footer = reader
        .get_bytes(start, footer_len as usize)
        .map_err(|e| Refusal::Corrupt(e.to_string()))?;
    let mut walker = Walker::new(&footer, &[]);
    walker
        .read(Kind::Struct("FileMetaData", FILE_METADATA), 0)
        .map_err(|refused| Refusal::Corrupt(format!("its footer {refused}")))
}

/// Checks the page headers of the `leaves` (column indexes) of every row
/// group: each page inside its column chunk, inflating to at most
/// `max_inflated_bytes`, a dictionary of no more values than its bytes hold.
pub(crate) fn pages<R: ChunkReader>(
    reader: &R,
    metadata: &ParquetMetaData,
    leaves: &[usize],
    max_inflated_bytes: u64,
) -> Result<(), Refusal> {
    for (group, row_group) in metadata.row_groups().iter().enumerate() {
        for &leaf in leaves {
            let column = row_group.column(leaf);
            let (start, len) = column.byte_range();
            let end = start.saturating_add(len).min(reader.len());
            let at = |offset: u64| {
                format!(
                    "row group {group}, column {}, byte {offset}",
                    column.column_path().string()
                )
            };
            let mut offset = start;
            while offset < end {
                let (header_len, page) = page_header(reader, offset, end).map_err(|refused| {
                    Refusal::Corrupt(format!("{}: its page header {refused}", at(offset)))
                })?;
                if page.uncompressed < 0 || page.compressed < 0 {
                    return Err(Refusal::Corrupt(format!(
                        "{}: a page of negative size",
                        at(offset)
                    )));
                }
                if page.uncompressed as u64 > max_inflated_bytes {
                    return Err(Refusal::TooLarge(format!(
                        "{}: a page inflating to {} bytes, past the {max_inflated_bytes}-byte budget",
                        at(offset),
                        page.uncompressed
                    )));
                }
                if let Some(values) = page.dictionary_values {
                    // A count from the file: its product may not fit.
                    let fits = value_bytes(column).is_some_and(|bytes| {
                        u64::try_from(values)
                            .ok()
                            .and_then(|values| values.checked_mul(bytes))
                            .is_some_and(|needed| needed <= page.uncompressed as u64)
                    });
                    if !fits {
                        return Err(Refusal::Corrupt(format!(
                            "{}: a dictionary of {values} {:?} values in {} bytes",
                            at(offset),
                            column.column_type(),
                            page.uncompressed
                        )));
                    }
                }
                let next = offset + header_len + page.compressed as u64;
                if next > end {
                    return Err(Refusal::Corrupt(format!(
                        "{}: a page of {} bytes past its column chunk's end",
                        at(offset),
                        page.compressed
                    )));
                }
                offset = next;
            }
        }
    }
    Ok(())
}

/// The fewest bytes a dictionary value of `column` takes, as the decoder
/// reads it (plain): it sets aside room for as many values as the page
/// declares before reading them. `None`: no dictionary of these is valid
/// (booleans are never dictionary-encoded).
fn value_bytes(column: &parquet::file::metadata::ColumnChunkMetaData) -> Option<u64> {
    use parquet::basic::Type;
    match column.column_type() {
        Type::BOOLEAN => None,
        Type::INT32 | Type::FLOAT => Some(4),
        Type::INT64 | Type::DOUBLE => Some(8),
        Type::INT96 => Some(12),
        // A length, then the bytes.
        Type::BYTE_ARRAY => Some(4),
        Type::FIXED_LEN_BYTE_ARRAY => Some(column.column_descr().type_length().max(1) as u64),
    }
}

/// What a page header declares.
struct Page {
    uncompressed: i64,
    compressed: i64,
    dictionary_values: Option<i64>,
}

/// The header at `offset` (a chunk ending at `end`): its length and what it
/// declares. Read a window at a time, doubling while the header runs past it.
fn page_header<R: ChunkReader>(reader: &R, offset: u64, end: u64) -> Result<(u64, Page), Walked> {
    let mut window = HEADER_WINDOW;
    loop {
        let len = window.min(end - offset);
        let bytes = reader
            .get_bytes(offset, len as usize)
            .map_err(|_| Walked::Malformed)?;
        let mut walker = Walker::new(&bytes, &["PageHeader", "DictionaryPageHeader"]);
        match walker.read(Kind::Struct("PageHeader", PAGE_HEADER), 0) {
            Ok(()) => {
                let read = (bytes.len() - walker.rest.len()) as u64;
                // A field written twice is read twice: the last stays.
                let value = |of: &str, field: i16| {
                    (walker.values.iter().rev())
                        .find(|v| v.0 == of && v.1 == field)
                        .map(|v| v.2)
                };
                let page = Page {
                    uncompressed: value("PageHeader", 2).unwrap_or_default(),
                    compressed: value("PageHeader", 3).unwrap_or_default(),
                    dictionary_values: value("DictionaryPageHeader", 1),
                };
                return Ok((read, page));
            }
            // Cut by the window, perhaps: read again with twice as much.
            Err(_) if len < end - offset && window < MAX_HEADER_BYTES => window *= 2,
            Err(refused) => return Err(refused),
        }
    }
}

// Thrift compact protocol types, as a field header or a list header names them.
const BOOL_TRUE: u8 = 1;
const BOOL_FALSE: u8 = 2;
const BYTE: u8 = 3;
const I16: u8 = 4;
const I32: u8 = 5;
const I64: u8 = 6;
const DOUBLE: u8 = 7;
const BINARY: u8 = 8;
const LIST: u8 = 9;
const STRUCT: u8 = 12;

/// What the decoder reads a known field as. It reads a field by its id,
/// whatever type the field's header names, so a footer whose types differ
/// from these is read out of step with its bytes; they are refused, and
/// what is walked is then what the decoder reads.
#[derive(Clone, Copy)]
enum Kind {
    Bool,
    I8,
    I16,
    /// An `i32` or an enum.
    I32,
    I64,
    Double,
    /// A `binary` or a `string`.
    Binary,
    List(&'static Kind),
    Struct(&'static str, &'static [(i16, Kind)]),
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Bool => "a bool",
            Kind::I8 => "an i8",
            Kind::I16 => "an i16",
            Kind::I32 => "an i32",
            Kind::I64 => "an i64",
            Kind::Double => "a double",
            Kind::Binary => "a binary",
            Kind::List(_) => "a list",
            Kind::Struct(name, _) => name,
        }
    }

    fn is_written_as(self, wire: u8) -> bool {
        match self {
            Kind::Bool => wire == BOOL_TRUE || wire == BOOL_FALSE,
            Kind::I8 => wire == BYTE,
            Kind::I16 => wire == I16,
            Kind::I32 => wire == I32,
            Kind::I64 => wire == I64,
            Kind::Double => wire == DOUBLE,
            Kind::Binary => wire == BINARY,
            Kind::List(_) => wire == LIST,
            Kind::Struct(..) => wire == STRUCT,
        }
    }
}

// The footer's structs as parquet 58's decoder reads them (parquet.thrift):
// fields it skips are walked by the type their header names.
const FILE_METADATA: &[(i16, Kind)] = &[
    (1, Kind::I32),
    (
        2,
        Kind::List(&Kind::Struct("SchemaElement", SCHEMA_ELEMENT)),
    ),
    (3, Kind::I64),
    (4, Kind::List(&Kind::Struct("RowGroup", ROW_GROUP))),
    (5, Kind::List(&KEY_VALUE)),
    (6, Kind::Binary),
    (7, Kind::List(&Kind::Struct("ColumnOrder", &[(1, EMPTY)]))),
    (
        8,
        Kind::Struct("EncryptionAlgorithm", &[(1, AES_GCM), (2, AES_GCM)]),
    ),
    (9, Kind::Binary),
];
const SCHEMA_ELEMENT: &[(i16, Kind)] = &[
    (1, Kind::I32),
    (2, Kind::I32),
    (3, Kind::I32),
    (4, Kind::Binary),
    (5, Kind::I32),
    (6, Kind::I32),
    (7, Kind::I32),
    (8, Kind::I32),
    (9, Kind::I32),
    (10, Kind::Struct("LogicalType", LOGICAL_TYPE)),
];
const LOGICAL_TYPE: &[(i16, Kind)] = &[
    (1, EMPTY),
    (2, EMPTY),
    (3, EMPTY),
    (4, EMPTY),
    (
        5,
        Kind::Struct("DecimalType", &[(1, Kind::I32), (2, Kind::I32)]),
    ),
    (6, EMPTY),
    (7, TIME_TYPE),
    (8, TIME_TYPE),
    (
        10,
        Kind::Struct("IntType", &[(1, Kind::I8), (2, Kind::Bool)]),
    ),
    (11, EMPTY),
    (12, EMPTY),
    (13, EMPTY),
    (14, EMPTY),
    (15, EMPTY),
    (16, Kind::Struct("VariantType", &[(1, Kind::I8)])),
    (17, Kind::Struct("GeometryType", &[(1, Kind::Binary)])),
    (
        18,
        Kind::Struct("GeographyType", &[(1, Kind::Binary), (2, Kind::I32)]),
    ),
];
/// `TimeType` and `TimestampType`: whether adjusted to UTC, and a unit.
const TIME_TYPE: Kind = Kind::Struct(
    "TimeType",
    &[
        (1, Kind::Bool),
        (
            2,
            Kind::Struct("TimeUnit", &[(1, EMPTY), (2, EMPTY), (3, EMPTY)]),
        ),
    ],
);
const EMPTY: Kind = Kind::Struct("an empty struct", &[]);
const ROW_GROUP: &[(i16, Kind)] = &[
    (1, Kind::List(&Kind::Struct("ColumnChunk", COLUMN_CHUNK))),
    (2, Kind::I64),
    (3, Kind::I64),
    (4, Kind::List(&SORTING_COLUMN)),
    (5, Kind::I64),
    (6, Kind::I64),
    (7, Kind::I16),
];
const SORTING_COLUMN: Kind = Kind::Struct(
    "SortingColumn",
    &[(1, Kind::I32), (2, Kind::Bool), (3, Kind::Bool)],
);
const COLUMN_CHUNK: &[(i16, Kind)] = &[
    (1, Kind::Binary),
    (2, Kind::I64),
    (3, Kind::Struct("ColumnMetaData", COLUMN_METADATA)),
    (4, Kind::I64),
    (5, Kind::I32),
    (6, Kind::I64),
    (7, Kind::I32),
    (
        8,
        Kind::Struct(
            "ColumnCryptoMetaData",
            &[
                (1, EMPTY),
                (
                    2,
                    Kind::Struct(
                        "EncryptionWithColumnKey",
                        &[(1, Kind::List(&Kind::Binary)), (2, Kind::Binary)],
                    ),
                ),
            ],
        ),
    ),
    (9, Kind::Binary),
];
const COLUMN_METADATA: &[(i16, Kind)] = &[
    (1, Kind::I32),
    (2, Kind::List(&Kind::I32)),
    (3, Kind::List(&Kind::Binary)),
    (4, Kind::I32),
    (5, Kind::I64),
    (6, Kind::I64),
    (7, Kind::I64),
    (8, Kind::List(&KEY_VALUE)),
    (9, Kind::I64),
    (10, Kind::I64),
    (11, Kind::I64),
    (12, Kind::Struct("Statistics", STATISTICS)),
    (
        13,
        Kind::List(&Kind::Struct(
            "PageEncodingStats",
            &[(1, Kind::I32), (2, Kind::I32), (3, Kind::I32)],
        )),
    ),
    (14, Kind::I64),
    (15, Kind::I32),
    (
        16,
        Kind::Struct(
            "SizeStatistics",
            &[
                (1, Kind::I64),
                (2, Kind::List(&Kind::I64)),
                (3, Kind::List(&Kind::I64)),
            ],
        ),
    ),
    (
        17,
        Kind::Struct(
            "GeospatialStatistics",
            &[
                (1, Kind::Struct("BoundingBox", BOUNDING_BOX)),
                (2, Kind::List(&Kind::I32)),
            ],
        ),
    ),
];
const STATISTICS: &[(i16, Kind)] = &[
    (1, Kind::Binary),
    (2, Kind::Binary),
    (3, Kind::I64),
    (4, Kind::I64),
    (5, Kind::Binary),
    (6, Kind::Binary),
    (7, Kind::Bool),
    (8, Kind::Bool),
];
const BOUNDING_BOX: &[(i16, Kind)] = &[
    (1, Kind::Double),
    (2, Kind::Double),
    (3, Kind::Double),
    (4, Kind::Double),
    (5, Kind::Double),
    (6, Kind::Double),
    (7, Kind::Double),
    (8, Kind::Double),
];
const KEY_VALUE: Kind = Kind::Struct("KeyValue", &[(1, Kind::Binary), (2, Kind::Binary)]);
const AES_GCM: Kind = Kind::Struct(
    "AesGcmV1",
    &[(1, Kind::Binary), (2, Kind::Binary), (3, Kind::Bool)],
);
const PAGE_HEADER: &[(i16, Kind)] = &[
    (1, Kind::I32),
    (2, Kind::I32),
    (3, Kind::I32),
    (4, Kind::I32),
    (
        5,
        Kind::Struct(
            "DataPageHeader",
            &[
                (1, Kind::I32),
                (2, Kind::I32),
                (3, Kind::I32),
                (4, Kind::I32),
                (5, Kind::Struct("Statistics", STATISTICS)),
            ],
        ),
    ),
    (6, EMPTY),
    (
        7,
        Kind::Struct(
            "DictionaryPageHeader",
            &[(1, Kind::I32), (2, Kind::I32), (3, Kind::Bool)],
        ),
    ),
    (
        8,
        Kind::Struct(
            "DataPageHeaderV2",
            &[
                (1, Kind::I32),
                (2, Kind::I32),
                (3, Kind::I32),
                (4, Kind::I32),
                (5, Kind::I32),
                (6, Kind::I32),
                (7, Kind::Bool),
                (8, Kind::Struct("Statistics", STATISTICS)),
            ],
        ),
    ),
];

/// Why a walk stopped short of the struct's end.
#[derive(Debug)]
enum Walked {
    Count { declared: u64, left: usize },
    Depth,
    Mistyped { what: String, wire: u8 },
    Malformed,
}

impl std::fmt::Display for Walked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Walked::Count { declared, left } => {
                write!(
                    f,
                    "declares {declared} elements in the {left} bytes left of it"
                )
            }
            Walked::Depth => write!(f, "nests deeper than {MAX_DEPTH}"),
            Walked::Mistyped { what, wire } => write!(f, "writes {what} as Thrift type {wire}"),
            Walked::Malformed => write!(f, "is cut short or not Thrift"),
        }
    }
}

struct Walker<'a> {
    rest: &'a [u8],
    /// The structs whose integers are kept.
    keep: &'static [&'static str],
    /// The integers kept, each with its struct's name and field id.
    values: Vec<(&'static str, i16, i64)>,
}

impl<'a> Walker<'a> {
    fn new(bytes: &'a [u8], keep: &'static [&'static str]) -> Self {
        Walker {
            rest: bytes,
            keep,
            values: Vec::new(),
        }
    }

    fn byte(&mut self) -> Result<u8, Walked> {
        let (&first, rest) = self.rest.split_first().ok_or(Walked::Malformed)?;
        self.rest = rest;
        Ok(first)
    }

    fn varint(&mut self) -> Result<u64, Walked> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = self.byte()?;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(Walked::Malformed)
    }

    fn bytes(&mut self, n: u64) -> Result<(), Walked> {
        let n = usize::try_from(n).map_err(|_| Walked::Malformed)?;
        self.rest = self.rest.get(n..).ok_or(Walked::Malformed)?;
        Ok(())
    }

    /// A list's count (from its header's high nibble, or the varint after
    /// it), checked against what is left.
    fn list_count(&mut self, header: u8) -> Result<u64, Walked> {
        let count = match header >> 4 {
            15 => self.varint()?,
            short => u64::from(short),
        };
        self.fits(count)
    }

    /// `count`, if that many elements of at least a byte each fit what is left.
    fn fits(&self, count: u64) -> Result<u64, Walked> {
        if count > self.rest.len() as u64 {
            return Err(Walked::Count {
                declared: count,
                left: self.rest.len(),
            });
        }
        Ok(count)
    }

    /// One value the decoder reads as `kind`.
    fn read(&mut self, kind: Kind, depth: usize) -> Result<(), Walked> {
        if depth > MAX_DEPTH {
            return Err(Walked::Depth);
        }
        match kind {
            Kind::List(element) => {
                let header = self.byte()?;
                let count = self.list_count(header)?;
                // An empty list may name no element type (some writers).
                if count > 0 && !element.is_written_as(header & 0x0f) {
                    return Err(Walked::Mistyped {
                        what: format!("a list's elements, {}", element.name()),
                        wire: header & 0x0f,
                    });
                }
                for _ in 0..count {
                    self.read(*element, depth + 1)?;
                }
                Ok(())
            }
            Kind::Struct(name, fields) => {
                let mut id = 0i16;
                loop {
                    let header = self.byte()?;
                    let wire = header & 0x0f;
                    if wire == 0 {
                        return Ok(());
                    }
                    id = match header >> 4 {
                        0 => {
                            i16::try_from(zigzag(self.varint()?)).map_err(|_| Walked::Malformed)?
                        }
                        delta => id.checked_add(i16::from(delta)).ok_or(Walked::Malformed)?,
                    };
                    match fields.iter().find(|(known, _)| *known == id) {
                        Some(&(_, kind)) if !kind.is_written_as(wire) => {
                            return Err(Walked::Mistyped {
                                what: format!("field {id} of {name}, {}", kind.name()),
                                wire,
                            });
                        }
                        Some(&(_, kind)) => self.read_field((name, id), kind, wire, depth + 1)?,
                        None => self.skip(wire, depth + 1)?,
                    }
                }
            }
            Kind::Bool | Kind::I8 => self.bytes(1),
            Kind::I16 | Kind::I32 | Kind::I64 => self.varint().map(drop),
            Kind::Double => self.bytes(8),
            Kind::Binary => {
                let len = self.varint()?;
                self.bytes(len)
            }
        }
    }

    /// A struct field's value: a boolean is its header's type, no byte.
    fn read_field(
        &mut self,
        (of, id): (&'static str, i16),
        kind: Kind,
        wire: u8,
        depth: usize,
    ) -> Result<(), Walked> {
        match (wire, kind) {
            (BOOL_TRUE | BOOL_FALSE, _) => Ok(()),
            (_, Kind::I32 | Kind::I64) if self.keep.contains(&of) => {
                let value = zigzag(self.varint()?);
                self.values.push((of, id, value));
                Ok(())
            }
            _ => self.read(kind, depth),
        }
    }

    /// One value the decoder skips, by the type its header (or its list's)
    /// names, as the decoder skips it: a boolean is no bytes (a field's is
    /// in its header; a list's byte the decoder does not read either), and
    /// sets, maps and UUIDs are errors to it.
    fn skip(&mut self, wire: u8, depth: usize) -> Result<(), Walked> {
        if depth > MAX_DEPTH {
            return Err(Walked::Depth);
        }
        match wire {
            BOOL_TRUE | BOOL_FALSE => Ok(()),
            BYTE => self.bytes(1),
            I16 | I32 | I64 => self.varint().map(drop),
            DOUBLE => self.bytes(8),
            BINARY => {
                let len = self.varint()?;
                self.bytes(len)
            }
            LIST => {
                let header = self.byte()?;
                for _ in 0..self.list_count(header)? {
                    self.skip(header & 0x0f, depth + 1)?;
                }
                Ok(())
            }
            STRUCT => loop {
                let header = self.byte()?;
                let wire = header & 0x0f;
                if wire == 0 {
                    return Ok(());
                }
                if header >> 4 == 0 {
                    self.varint()?; // the field's id, written whole
                }
                self.skip(wire, depth + 1)?;
            },
            _ => Err(Walked::Malformed),
        }
    }
}

fn zigzag(n: u64) -> i64 {
    (n >> 1) as i64 ^ -((n & 1) as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file of `footer` between the magics.
    fn file(footer: &[u8]) -> Vec<u8> {
        let mut bytes = MAGIC.to_vec();
        bytes.extend_from_slice(footer);
        bytes.extend_from_slice(&(footer.len() as u32).to_le_bytes());
        bytes.extend_from_slice(MAGIC);
        bytes
    }

    /// Why the footer of `bytes` is refused.
    fn refused(bytes: &[u8]) -> Option<String> {
        match footer(&bytes::Bytes::copy_from_slice(bytes)) {
            Ok(()) => None,
            Err(Refusal::Corrupt(why) | Refusal::TooLarge(why)) => Some(why),
        }
    }

    /// A real file: 300 texts of 100 distinct values (dictionary encoded),
    /// uncompressed, and its metadata.
    fn real_file() -> (bytes::Bytes, ParquetMetaData) {
        use std::sync::Arc;
        let schema = Arc::new(arrow_schema::Schema::new(vec![arrow_schema::Field::new(
            "text",
            arrow_schema::DataType::Utf8,
            false,
        )]));
        let texts: Vec<String> = (0..300).map(|i| format!("text {}", i % 100)).collect();
        let batch = arrow_array::RecordBatch::try_new(
            schema.clone(),
            vec![Arc::new(arrow_array::StringArray::from(texts))],
        )
        .unwrap();
        let mut bytes = Vec::new();
        let mut writer = parquet::arrow::ArrowWriter::try_new(&mut bytes, schema, None).unwrap();
        writer.write(&batch).unwrap();
        writer.close().unwrap();
        let bytes = bytes::Bytes::from(bytes);
        let metadata = parquet::file::metadata::ParquetMetaDataReader::new()
            .parse_and_finish(&bytes)
            .unwrap();
        (bytes, metadata)
    }

    #[test]
    fn a_real_file_passes() {
        let (bytes, metadata) = real_file();
        assert_eq!(footer(&bytes), Ok(()));
        assert_eq!(pages(&bytes, &metadata, &[0], 1 << 20), Ok(()));
    }

    #[test]
    fn a_page_past_the_budget_or_a_dictionary_past_its_bytes_is_refused() {
        let (bytes, metadata) = real_file();
        match pages(&bytes, &metadata, &[0], 100) {
            Err(Refusal::TooLarge(why)) => assert!(
                why.contains("column text, byte 4: a page inflating to")
                    && why.contains("past the 100-byte budget"),
                "{why}"
            ),
            other => panic!("{other:?}"),
        }
        // The dictionary page's header begins [0x15, type, 0x15, its
        // inflated size as a varint]: declare that size as 1, written in as
        // many bytes (a varint may run on), under its 100 values.
        let mut patched = bytes.to_vec();
        let at = metadata.row_group(0).column(0).byte_range().0 as usize;
        assert_eq!(patched[at..at + 3], [0x15, 0x04, 0x15], "a dictionary page");
        let size_at = at + 3;
        let size_len = patched[size_at..]
            .iter()
            .position(|b| b & 0x80 == 0)
            .unwrap()
            + 1;
        assert!(size_len >= 2, "a size of {size_len} varint bytes");
        let mut one = vec![0x80; size_len];
        one[0] = 0x82; // zigzag(1) = 2
        one[size_len - 1] = 0x00;
        patched[size_at..size_at + size_len].copy_from_slice(&one);
        let patched = bytes::Bytes::from(patched);
        match pages(&patched, &metadata, &[0], 1 << 20) {
            Err(Refusal::Corrupt(why)) => {
                assert!(
                    why.ends_with("a dictionary of 100 BYTE_ARRAY values in 1 bytes"),
                    "{why}"
                )
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_list_longer_than_its_bytes_is_refused() {
        // Field 2 (schema), a list of structs (0xfc: its count in the
        // varint after) of 109,002,364, holding none.
        let footer = [0x29, 0xfc, 0xfc, 0xfc, 0xfc, 0x33, 0x00, 0x00];
        assert_eq!(
            refused(&file(&footer)).as_deref(),
            Some("its footer declares 109002364 elements in the 2 bytes left of it")
        );
        // The same list with its one element present is not refused.
        assert_eq!(refused(&file(&[0x29, 0x1c, 0x00, 0x00])), None);
    }

    #[test]
    fn unknown_fields_are_walked_by_their_types_and_bounded_alike() {
        // Field 20 (its id written whole, zigzagged), a list of 200 i32s
        // holding one.
        let list = [0x09, 0x28, 0xf5, 0xc8, 0x01, 0x02, 0x00];
        let why = refused(&file(&list)).expect("refused");
        assert!(why.contains("declares 200 elements"), "{why}");
        // A list of booleans the decoder skips reading no byte of them: the
        // bytes after are its next fields (here a boolean one, then the end).
        assert_eq!(refused(&file(&[0x09, 0x28, 0x21, 0x01, 0x00, 0x00])), None);
        // A map (no Parquet struct has one) is the decoder's error.
        assert!(refused(&file(&[0x0b, 0x28, 0x00, 0x00])).is_some());
        // Field 15, structs in structs past the bound.
        let mut deep = vec![0xfc];
        deep.extend(vec![0x1c; MAX_DEPTH + 1]);
        deep.extend(vec![0x00; MAX_DEPTH + 3]);
        assert!(refused(&file(&deep)).unwrap().contains("nests deeper"));
        // The same nesting, shallow enough, with a boolean field (its value
        // in its header) in each struct.
        let mut nested = vec![0xfc, 0x11, 0x1c, 0x11, 0x1c, 0x11];
        nested.extend([0x00; 4]);
        assert_eq!(refused(&file(&nested)), None);
    }

    #[test]
    fn a_known_field_of_another_type_or_a_cut_footer_is_refused() {
        // The version (field 1, an i32) written as a double: the decoder would
        // read a varint there and go on out of step with the bytes.
        assert_eq!(
            refused(&file(&[0x17, 0, 0, 0, 0, 0, 0, 0, 0, 0x00])).as_deref(),
            Some("its footer writes field 1 of FileMetaData, an i32 as Thrift type 7")
        );
        assert_eq!(
            refused(&file(&[0x15])).as_deref(),
            Some("its footer is cut short or not Thrift")
        );
        // Not a Parquet file at all: the decoder's to judge.
        assert_eq!(refused(b"plain text, long enough"), None);
    }
}
