//! Turning source files into documents: discovery, then each format's reader.
//!
//! A file yields its documents and the reasons some could not be read, each an
//! [`IngestError`] naming the file (and page, message or row) and a kind from
//! [`kind`]; nothing is dropped silently, and no input makes a reader panic
//! (a parser's panic is caught and reported as `corrupt`).

use std::path::Path;

use memweave_operators::build::RawDocument;

mod access;
mod dataset;
mod html;
mod mail;
mod markup;
mod office;
mod outline;
mod parquet_bounds;
mod pdf;
pub mod sandbox;
mod zipped;

pub use access::{Access, json_labels};
pub use dataset::Columns;
use serde::{Deserialize, Serialize};

/// The `errors` table's kinds for what a reader meets.
pub mod kind {
    /// Bytes that could not be read at all.
    pub const UNREADABLE: &str = "unreadable";
    /// A text file with NUL bytes.
    pub const BINARY: &str = "binary";
    pub const NOT_UTF8: &str = "not_utf8";
    /// A file or record with no text.
    pub const EMPTY: &str = "empty";
    /// A file of a type no reader takes.
    pub const UNSUPPORTED_TYPE: &str = "unsupported_type";
    /// A PDF that needs a password.
    pub const ENCRYPTED: &str = "encrypted";
    /// A document whose memory's build panicked (a bug its text or its
    /// model replies reach): set aside, the run going on, until its text
    /// changes.
    pub const QUARANTINED: &str = "quarantined";
    /// A PDF whose pages have no text (scanned images).
    pub const NO_TEXT_LAYER: &str = "no_text_layer";
    /// A file its format's parser cannot read: truncated, damaged, or not
    /// what its name says.
    pub const CORRUPT: &str = "corrupt";
    /// A file past `--max-document-mib`, or one whose compressed parts
    /// (zip members, PDF filters, gzip or zstd lines) inflate past the limit.
    pub const TOO_LARGE: &str = "too_large";
    /// A file or object that did not arrive within the fetch timeout.
    pub const TIMEOUT: &str = "timeout";
    /// A path or URI outside what the operator allowed: a link out of a
    /// folder source, or a Kafka message's `uri` under no `--allow-uri`.
    pub const FORBIDDEN: &str = "forbidden_uri";
    /// A record of a dataset or JSON Lines file that is not a document:
    /// not an object, no id or text, a text that is not a string.
    pub const BAD_RECORD: &str = "bad_record";
    /// A second document of one file with an id the file already gave.
    pub const DUPLICATE_ID: &str = "duplicate_id";

    /// Every kind a reader gives.
    pub const ALL: [&str; 14] = [
        UNREADABLE,
        BINARY,
        NOT_UTF8,
        EMPTY,
        UNSUPPORTED_TYPE,
        ENCRYPTED,
        NO_TEXT_LAYER,
        CORRUPT,
        TOO_LARGE,
        TIMEOUT,
        FORBIDDEN,
        BAD_RECORD,
        DUPLICATE_ID,
        QUARANTINED,
    ];
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IngestError {
    /// The file's URI, with `:N` for the Nth record or message of a
    /// multi-document file, or `#page=N` for a PDF's page.
    pub source: String,
    /// One of [`kind`].
    pub kind: &'static str,
    pub message: String,
}

impl IngestError {
    pub fn new(source: impl Into<String>, kind: &'static str, message: impl Into<String>) -> Self {
        IngestError {
            source: source.into(),
            kind,
            message: message.into(),
        }
    }

    /// A file or object whose bytes could not be had at all.
    pub fn unreadable(source: impl Into<String>, reason: impl std::fmt::Display) -> Self {
        IngestError::new(source, kind::UNREADABLE, format!("cannot read: {reason}"))
    }
}

/// How a file's documents are read out of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadOptions {
    /// The columns (or JSON fields) of a dataset's rows.
    pub columns: Columns,
    /// Most bytes one file's compressed parts may inflate to, all together:
    /// a zip container's (DOCX, EPUB) members, a PDF's streams (each filter
    /// of a chain counted), a gzip or zstd JSON Lines file's lines.
    pub max_inflated_bytes: u64,
    /// Longest line of a JSON Lines file: one record.
    pub max_record_bytes: u64,
    /// Where whole files are parsed: in this process, or in worker processes.
    pub parsers: Parsers,
    /// The labels of the documents that carry none of their own.
    pub access: Access,
}

/// 256 MiB: ten times the largest real DOCX or EPUB text one meets, and far
/// below what a zip bomb would take.
pub const DEFAULT_MAX_INFLATED_BYTES: u64 = 256 << 20;

/// 64 MiB: a book's text in one record is a few MB.
pub const DEFAULT_MAX_RECORD_BYTES: u64 = 64 << 20;

impl Default for ReadOptions {
    fn default() -> Self {
        ReadOptions {
            columns: Columns::default(),
            max_inflated_bytes: DEFAULT_MAX_INFLATED_BYTES,
            max_record_bytes: DEFAULT_MAX_RECORD_BYTES,
            parsers: Parsers::default(),
            access: Access::default(),
        }
    }
}

impl ReadOptions {
    /// What labels the documents read with these options (a hash of the
    /// label column, the map and the default), or `None` where nothing is
    /// labelled: what a checkpoint records, so that a memory read under
    /// another labelling reads its files again.
    pub fn labelling(&self) -> Option<String> {
        if self.columns.acl.is_none() && self.access.is_none() {
            return None;
        }
        let made = serde_json::json!({"column": self.columns.acl, "access": self.access});
        Some(format!(
            "{:032x}",
            memweave_schemas::hash128(made.to_string().as_bytes())
        ))
    }
}

/// Where [`parse`] runs a file's parser: in this process (the default, for
/// libraries and tests), or in a pool of worker processes
/// ([`sandbox::ParserPool`]) where a crash or a hang costs only that file.
/// Two values are equal whatever they hold: they give the same documents.
#[derive(Clone, Default)]
pub struct Parsers(Option<std::sync::Arc<sandbox::ParserPool>>);

impl Parsers {
    pub fn isolated(command: sandbox::ParserCommand) -> Self {
        Parsers(Some(std::sync::Arc::new(sandbox::ParserPool::new(command))))
    }
}

impl std::fmt::Debug for Parsers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Parsers(isolated)"
        } else {
            "Parsers(in process)"
        })
    }
}

impl PartialEq for Parsers {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for Parsers {}

/// A compression a JSON Lines file may come in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Compression {
    None,
    Gzip,
    Zstd,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Format {
    Text,
    Markdown,
    ReStructuredText,
    AsciiDoc,
    Org,
    Html,
    Pdf,
    Docx,
    Epub,
    /// A mailbox of many messages.
    Mbox,
    /// One message.
    Eml,
    JsonLines(Compression),
    Parquet,
    /// Arrow's IPC file format (Feather v2).
    ArrowFile,
    /// Arrow's IPC stream format.
    ArrowStream,
}

impl Format {
    /// The file names each format is known by, as `--help` and the
    /// `unsupported_type` errors list them.
    pub const NAMES: &str = ".txt .md .rst .adoc .org .html .htm .xhtml .pdf .docx .epub .mbox \
        .eml .jsonl .ndjson (also .gz or .zst) .parquet .arrow .feather .arrows";

    /// The format a file's name says it is in, if any.
    pub fn of(path: &Path) -> Option<Format> {
        let name = path.file_name()?.to_str()?.to_ascii_lowercase();
        let (stem, compression) = if let Some(stem) = name.strip_suffix(".gz") {
            (stem, Compression::Gzip)
        } else if let Some(stem) = name.strip_suffix(".zst") {
            (stem, Compression::Zstd)
        } else {
            (name.as_str(), Compression::None)
        };
        let ext = stem.rsplit_once('.')?.1;
        if compression != Compression::None {
            return matches!(ext, "jsonl" | "ndjson").then_some(Format::JsonLines(compression));
        }
        Some(match ext {
            "txt" | "text" => Format::Text,
            "md" | "markdown" => Format::Markdown,
            "rst" => Format::ReStructuredText,
            "adoc" | "asciidoc" => Format::AsciiDoc,
            "org" => Format::Org,
            "html" | "htm" | "xhtml" => Format::Html,
            "pdf" => Format::Pdf,
            "docx" => Format::Docx,
            "epub" => Format::Epub,
            "mbox" => Format::Mbox,
            "eml" => Format::Eml,
            "jsonl" | "ndjson" => Format::JsonLines(Compression::None),
            "parquet" => Format::Parquet,
            "arrow" | "feather" => Format::ArrowFile,
            "arrows" => Format::ArrowStream,
            _ => return None,
        })
    }

    /// Whether the format's files hold rows, each a document: they are read
    /// as their rows are taken ([`read_rows`]), not whole.
    pub fn is_dataset(self) -> bool {
        matches!(
            self,
            Format::JsonLines(_) | Format::Parquet | Format::ArrowFile | Format::ArrowStream
        )
    }

    /// Whether the format's bytes are text (checked for NUL bytes and UTF-8
    /// before its reader sees them).
    fn is_text(self) -> bool {
        matches!(
            self,
            Format::Text
                | Format::Markdown
                | Format::ReStructuredText
                | Format::AsciiDoc
                | Format::Org
                | Format::Html
        )
    }
}

/// A file or object to ingest and the key its documents are known by.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceFile {
    /// Where it is read from, and what documents cite: a path or an object URL.
    pub uri: String,
    /// Relative to the source, '/'-separated: documents' ids derive from it.
    pub key: String,
    pub format: Format,
    /// Its version: an object's ETag, else size and modification time.
    pub version: Option<String>,
}

/// What a source holds: the files to read, and the files that will not be read.
#[derive(Debug, Default)]
pub struct Discovery {
    pub files: Vec<SourceFile>,
    pub rejected: Vec<IngestError>,
}

impl Discovery {
    /// Takes `uri` (known by `key`) if its name has a format, else rejects it.
    pub fn add(&mut self, uri: String, key: String, version: Option<String>) {
        match Format::of(Path::new(&key)) {
            Some(format) => self.files.push(SourceFile {
                uri,
                key,
                format,
                version,
            }),
            None => self.rejected.push(IngestError::new(
                uri,
                kind::UNSUPPORTED_TYPE,
                format!("not one of {}; skipped", Format::NAMES),
            )),
        }
    }
}

/// Lists the files under `source` (a file or a directory, recursively, hidden
/// entries skipped), sorted by key so every run and every worker sees one order.
/// A link is followed only when its target is inside `source` (canonical, as
/// the source's own path is), and only regular files are read: a link out of
/// the folder is a `forbidden_uri` error, a FIFO or device an `unreadable` one.
pub fn discover(source: &Path) -> std::io::Result<Discovery> {
    let meta = std::fs::metadata(source)?;
    let mut discovery = Discovery::default();
    if meta.is_file() {
        let key = source.file_name().map_or_else(
            || source.to_string_lossy().into_owned(),
            |n| n.to_string_lossy().into_owned(),
        );
        // A file named explicitly is read as text unless its name says otherwise.
        let format = Format::of(source).unwrap_or(Format::Text);
        discovery.files.push(SourceFile {
            uri: source.display().to_string(),
            key,
            format,
            version: Some(file_version(&meta)),
        });
        return Ok(discovery);
    }
    let root = std::fs::canonicalize(source)?;
    let mut outside = Vec::new();
    let walker = walkdir::WalkDir::new(source)
        .follow_links(true)
        .sort_by_file_name()
        .into_iter()
        .filter_entry(|e| {
            if e.depth() > 0 && e.file_name().to_string_lossy().starts_with('.') {
                return false;
            }
            // Checked before walkdir descends: a link to `/` is never walked.
            // A broken link goes on, to be reported unreadable.
            let inside = !e.path_is_symlink()
                || std::fs::canonicalize(e.path()).map_or(true, |target| target.starts_with(&root));
            if !inside {
                outside.push(IngestError::new(
                    e.path().display().to_string(),
                    kind::FORBIDDEN,
                    "a link out of the source folder; not followed",
                ));
            }
            inside
        });
    for entry in walker {
        let entry = match entry {
            Ok(entry) => entry,
            Err(err) => {
                let path = err
                    .path()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default();
                // A link whose target is gone shows up here; report it as unreadable.
                discovery.rejected.push(IngestError::new(
                    path,
                    kind::UNREADABLE,
                    format!("cannot read: {}", io_reason(&err)),
                ));
                continue;
            }
        };
        if entry.file_type().is_dir() {
            continue;
        }
        let path = entry.path().to_path_buf();
        if !entry.file_type().is_file() {
            discovery.rejected.push(IngestError::new(
                path.display().to_string(),
                kind::UNREADABLE,
                "not a regular file (a FIFO, socket or device); skipped",
            ));
            continue;
        }
        let key = path
            .strip_prefix(source)
            .unwrap_or(&path)
            .components()
            .map(|c| c.as_os_str().to_string_lossy())
            .collect::<Vec<_>>()
            .join("/");
        let version = entry.metadata().ok().map(|m| file_version(&m));
        discovery.add(path.display().to_string(), key, version);
    }
    discovery.rejected.append(&mut outside);
    discovery.files.sort_by(|a, b| a.key.cmp(&b.key));
    Ok(discovery)
}

/// A file's version as a watcher compares it: size and modification time.
fn file_version(meta: &std::fs::Metadata) -> String {
    let modified = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .unwrap_or_default();
    format!("{}@{}", meta.len(), modified.as_nanos())
}

fn io_reason(err: &walkdir::Error) -> String {
    err.io_error()
        .map_or_else(|| err.to_string(), ToString::to_string)
}

/// One file's documents and errors, in the order the file holds them.
pub type Parsed = Vec<Result<RawDocument, IngestError>>;

/// A document (or why a record is not one) and where its file holds it.
type Located = (String, Result<RawDocument, IngestError>);

/// One file's documents from its bytes (or the error fetching them), or the
/// reasons there are none; parsed where `options.parsers` says.
pub fn parse(
    file: &SourceFile,
    bytes: Result<Vec<u8>, IngestError>,
    options: &ReadOptions,
) -> Parsed {
    let mut parsed = match (bytes, &options.parsers.0) {
        (Err(error), _) => vec![Err(error)],
        (Ok(bytes), Some(pool)) => pool.parse(file, bytes, options),
        (Ok(bytes), None) => parse_here(file, bytes, options),
    };
    for raw in parsed.iter_mut().flatten() {
        label(file, raw, &options.access);
    }
    parsed
}

/// Gives `raw`, read from `file`, the labels `access` says it has. Done here,
/// in the process that asked, so a parser process never sees the map.
fn label(file: &SourceFile, raw: &mut RawDocument, access: &Access) {
    let own = std::mem::take(&mut raw.acl);
    raw.acl = access.labels_of(Some(&file.key), own);
}

/// [`parse`] in this process: what a worker process runs.
fn parse_here(file: &SourceFile, bytes: Vec<u8>, options: &ReadOptions) -> Parsed {
    // A parser's panic on hostile bytes is a file it cannot read, not a
    // failed run.
    let read = memweave_process::panics::caught(|| read_bytes(file, bytes, options));
    read.unwrap_or_else(|panic| vec![Err(panicked(&file.uri, &panic))])
}

fn read_bytes(file: &SourceFile, bytes: Vec<u8>, options: &ReadOptions) -> Parsed {
    let source = file.uri.as_str();
    let fail = |kind, message: String| vec![Err(IngestError::new(source, kind, message))];
    if !file.format.is_text() {
        return match file.format {
            Format::Pdf => pdf::read(file, &bytes, options.max_inflated_bytes),
            Format::Docx => office::read_docx(file, &bytes, options.max_inflated_bytes),
            Format::Epub => office::read_epub(file, &bytes, options.max_inflated_bytes),
            Format::Mbox => mail::read_mbox(file, &bytes),
            Format::Eml => mail::read_eml(file, &bytes),
            Format::JsonLines(_) | Format::Parquet | Format::ArrowFile | Format::ArrowStream => {
                dataset_documents(file, Ok(dataset::Input::Bytes(bytes)), options).collect()
            }
            _ => unreachable!("text formats are read below"),
        };
    }
    if bytes.contains(&0) {
        return fail(
            kind::BINARY,
            "binary content (NUL bytes); not a text document".into(),
        );
    }
    let text = match String::from_utf8(bytes) {
        Ok(text) => text,
        Err(err) => {
            let at = err.utf8_error().valid_up_to();
            return fail(
                kind::NOT_UTF8,
                format!("not valid UTF-8 (first bad byte at offset {at})"),
            );
        }
    };
    let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
    if text.trim().is_empty() {
        return fail(kind::EMPTY, "no text".into());
    }
    match file.format {
        Format::Html => {
            let page = html::extract(text);
            if page.text.trim().is_empty() {
                return fail(kind::EMPTY, "no text outside markup".into());
            }
            let title = page
                .title
                .unwrap_or_else(|| markup::first_line_title(&page.text));
            vec![Ok(document(file, title, page.text, page.sections))]
        }
        markup => {
            let outline = markup::outline(text, markup);
            let title = markup::title(text, markup, &outline);
            vec![Ok(document(file, title, text.to_string(), outline))]
        }
    }
}

/// The one document a file is.
fn document(
    file: &SourceFile,
    title: String,
    text: String,
    sections: Vec<memweave_schemas::Section>,
) -> RawDocument {
    RawDocument {
        key: file.key.clone(),
        source_uri: file.uri.clone(),
        title,
        text,
        sections,
        acl: Vec::new(),
    }
}

/// The first `n` characters of `text`: what a title keeps.
fn clip(text: &str, n: usize) -> String {
    text.chars().take(n).collect()
}

/// The documents of `located` (each with where the file holds it), the
/// first of each id kept and the others turned into `duplicate_id` errors
/// naming where the id was first given: the rows of one file are told apart
/// by their ids alone, so two would be one. It remembers ids and places,
/// not texts.
struct FirstOfEachId<I> {
    located: I,
    seen: std::collections::HashMap<String, String>,
}

impl<I: Iterator<Item = Located>> FirstOfEachId<I> {
    fn new(located: I) -> Self {
        FirstOfEachId {
            located,
            seen: std::collections::HashMap::new(),
        }
    }
}

impl<I: Iterator<Item = Located>> Iterator for FirstOfEachId<I> {
    type Item = Result<RawDocument, IngestError>;

    fn next(&mut self) -> Option<Self::Item> {
        let (place, item) = self.located.next()?;
        let doc = match item {
            Ok(doc) => doc,
            Err(error) => return Some(Err(error)),
        };
        if let Some(first) = self.seen.get(&doc.key) {
            return Some(Err(IngestError::new(
                place,
                kind::DUPLICATE_ID,
                format!(
                    "id {} already given by {first}; this copy was not indexed",
                    doc.key
                ),
            )));
        }
        self.seen.insert(doc.key.clone(), place);
        Some(Ok(doc))
    }
}

/// The documents of the dataset file `file` whose bytes are at `path`, read
/// a record batch (or a line) at a time as they are taken: a file of any
/// size costs a batch, and the ids seen. The same documents and errors as
/// [`parse`] gives for its bytes.
/// Where `options.parsers` says: in this process, or streamed from a worker.
pub fn read_rows(
    file: &SourceFile,
    path: &Path,
    options: &ReadOptions,
) -> Box<dyn Iterator<Item = Result<RawDocument, IngestError>> + Send> {
    let rows: Box<dyn Iterator<Item = Result<RawDocument, IngestError>> + Send> =
        match &options.parsers.0 {
            Some(pool) => Box::new(pool.rows(file, path, options)),
            None => Box::new(read_rows_here(file, path, options)),
        };
    if options.access.is_none() {
        return rows;
    }
    let (file, access) = (file.clone(), options.access.clone());
    Box::new(rows.map(move |row| {
        row.map(|mut raw| {
            label(&file, &mut raw, &access);
            raw
        })
    }))
}

/// [`read_rows`] in this process: what a worker process runs.
fn read_rows_here(
    file: &SourceFile,
    path: &Path,
    options: &ReadOptions,
) -> impl Iterator<Item = Result<RawDocument, IngestError>> + Send + use<> {
    let input = std::fs::File::open(path)
        .map(dataset::Input::File)
        .map_err(|e| IngestError::unreadable(&file.uri, e));
    dataset_documents(file, input, options)
}

/// A dataset's documents from `input` (or why it cannot be read), the first
/// of each id; a reader's panic ends them with a `corrupt` error, the rows
/// before it kept.
fn dataset_documents(
    file: &SourceFile,
    input: Result<dataset::Input, IngestError>,
    options: &ReadOptions,
) -> FirstOfEachId<CatchPanics> {
    let uri = file.uri.clone();
    let rows = match input {
        Ok(input) => {
            memweave_process::panics::caught(|| dataset::rows(&uri, file.format, input, options))
                .unwrap_or_else(|panic| {
                    Box::new(std::iter::once((uri.clone(), Err(panicked(&uri, &panic)))))
                })
        }
        Err(error) => Box::new(std::iter::once((uri.clone(), Err(error)))),
    };
    FirstOfEachId::new(CatchPanics {
        uri,
        rows: Some(rows),
    })
}

/// Rows until their reader panics (hostile bytes), then the `corrupt`
/// error of that panic.
struct CatchPanics {
    uri: String,
    rows: Option<dataset::Rows>,
}

impl Iterator for CatchPanics {
    type Item = Located;

    fn next(&mut self) -> Option<Located> {
        let rows = self.rows.as_mut()?;
        match memweave_process::panics::caught(|| rows.next()) {
            Ok(row) => row,
            Err(panic) => {
                self.rows = None;
                Some((self.uri.clone(), Err(panicked(&self.uri, &panic))))
            }
        }
    }
}

/// The `corrupt` error of a parser that panicked reading `uri`, saying `why`.
fn panicked(uri: &str, why: &str) -> IngestError {
    IngestError::new(uri, kind::CORRUPT, format!("its parser failed: {why}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(name: &str) -> SourceFile {
        SourceFile {
            uri: format!("/in/{name}"),
            key: name.into(),
            format: Format::of(Path::new(name)).expect("a known format"),
            version: None,
        }
    }

    #[test]
    fn names_tell_formats_and_compressions() {
        let of = |name: &str| Format::of(Path::new(name));
        assert_eq!(of("a/b.PDF"), Some(Format::Pdf));
        assert_eq!(
            of("rows.jsonl.zst"),
            Some(Format::JsonLines(Compression::Zstd))
        );
        assert_eq!(
            of("rows.ndjson.gz"),
            Some(Format::JsonLines(Compression::Gzip))
        );
        assert_eq!(of("notes.txt.gz"), None);
        assert_eq!(of("book.epub"), Some(Format::Epub));
        assert_eq!(of("photo.png"), None);
        assert_eq!(of("README"), None);
    }

    #[test]
    fn a_text_file_with_nul_bytes_or_bad_utf8_is_named_with_its_reason() {
        let options = ReadOptions::default();
        let parsed = parse(&file("a.txt"), Ok(b"x\0y".to_vec()), &options);
        assert_eq!(parsed[0].as_ref().unwrap_err().kind, kind::BINARY);
        let parsed = parse(&file("a.md"), Ok(vec![b'a', 0xff]), &options);
        let error = parsed[0].as_ref().unwrap_err();
        assert_eq!(
            (error.kind, error.source.as_str()),
            (kind::NOT_UTF8, "/in/a.md")
        );
        let parsed = parse(
            &file("a.md"),
            Err(IngestError::unreadable("/in/a.md", "gone")),
            &options,
        );
        assert_eq!(parsed[0].as_ref().unwrap_err().kind, kind::UNREADABLE);
    }

    #[test]
    fn a_dataset_read_from_its_file_gives_what_its_bytes_give() {
        use std::io::Write;
        use std::sync::Arc;
        let lines = concat!(
            "{\"id\": \"a\", \"text\": \"The first row.\"}\n",
            "not json\n",
            "{\"id\": \"a\", \"text\": \"The first row again.\"}\n",
            "{\"id\": 7, \"text\": \"Row seven.\", \"title\": \"Seven\"}\n",
        );
        let mut gzip = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gzip.write_all(lines.as_bytes()).unwrap();
        let schema = Arc::new(arrow_schema::Schema::new(vec![
            arrow_schema::Field::new("id", arrow_schema::DataType::Utf8, true),
            arrow_schema::Field::new("text", arrow_schema::DataType::Utf8, true),
        ]));
        let ids: Vec<Option<String>> = (0..2500).map(|i| Some(format!("r{}", i % 2400))).collect();
        let texts: Vec<Option<String>> = (0..2500)
            .map(|i| (i != 5).then(|| format!("Row {i}.")))
            .collect();
        let batch = arrow_array::RecordBatch::try_new(
            Arc::clone(&schema),
            vec![
                Arc::new(arrow_array::StringArray::from(ids)),
                Arc::new(arrow_array::StringArray::from(texts)),
            ],
        )
        .unwrap();
        let mut parquet = Vec::new();
        let mut writer = parquet::arrow::ArrowWriter::try_new(&mut parquet, schema, None).unwrap();
        writer.write(&batch).unwrap();
        writer.close().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let options = ReadOptions::default();
        for (name, bytes, documents) in [
            ("rows.jsonl", lines.as_bytes().to_vec(), 2),
            ("rows.jsonl.gz", gzip.finish().unwrap(), 2),
            // Three batches; row 5 has no text, and the last 100 rows repeat
            // ids (r5's second row is its first document).
            ("rows.parquet", parquet, 2400),
        ] {
            let path = dir.path().join(name);
            std::fs::write(&path, &bytes).unwrap();
            let parsed = parse(&file(name), Ok(bytes), &options);
            let streamed: Parsed = read_rows(&file(name), &path, &options).collect();
            assert_eq!(streamed, parsed, "{name}");
            assert_eq!(streamed.iter().filter(|d| d.is_ok()).count(), documents);
            let kinds: std::collections::BTreeSet<&str> = streamed
                .iter()
                .filter_map(|d| Some(d.as_ref().err()?.kind))
                .collect();
            assert_eq!(
                kinds,
                [kind::BAD_RECORD, kind::DUPLICATE_ID].into(),
                "{name}"
            );
        }
        let gone = read_rows(&file("gone.parquet"), &dir.path().join("gone"), &options);
        let errors: Vec<&str> = gone.map(|d| d.unwrap_err().kind).collect();
        assert_eq!(errors, [kind::UNREADABLE]);
    }

    #[test]
    fn discovery_follows_links_only_inside_the_folder_and_reads_only_files() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret.md"), "Secret.").unwrap();
        let root = tempfile::tempdir().unwrap();
        let folder = root.path();
        std::fs::write(folder.join("a.md"), "A.").unwrap();
        std::os::unix::fs::symlink(folder.join("a.md"), folder.join("again.md")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret.md"), folder.join("out.md"))
            .unwrap();
        std::os::unix::fs::symlink(outside.path(), folder.join("out-dir")).unwrap();
        std::os::unix::fs::symlink("/", folder.join("root")).unwrap();
        let fifo = std::process::Command::new("mkfifo")
            .arg(folder.join("pipe.txt"))
            .status()
            .unwrap();
        assert!(fifo.success());
        let found = discover(folder).unwrap();
        let keys: Vec<&str> = found.files.iter().map(|f| f.key.as_str()).collect();
        assert_eq!(keys, ["a.md", "again.md"]);
        let mut rejected: Vec<(String, &str)> = found
            .rejected
            .iter()
            .map(|e| {
                let name = Path::new(&e.source).file_name().unwrap();
                (name.to_string_lossy().into_owned(), e.kind)
            })
            .collect();
        rejected.sort();
        assert_eq!(
            rejected,
            [
                ("out-dir".to_string(), kind::FORBIDDEN),
                ("out.md".to_string(), kind::FORBIDDEN),
                ("pipe.txt".to_string(), kind::UNREADABLE),
                ("root".to_string(), kind::FORBIDDEN),
            ]
        );
    }

    #[test]
    fn a_second_document_with_an_id_is_an_error_naming_the_first() {
        let doc = |key: &str| {
            Ok(RawDocument {
                key: key.into(),
                source_uri: "f".into(),
                title: key.into(),
                text: "t".into(),
                sections: Vec::new(),
                acl: Vec::new(),
            })
        };
        let kept: Parsed = FirstOfEachId::new(
            [
                ("f:1".into(), doc("a")),
                ("f:2".into(), doc("b")),
                ("f:3".into(), doc("a")),
            ]
            .into_iter(),
        )
        .collect();
        let error = kept[2].as_ref().unwrap_err();
        assert_eq!(
            (error.kind, error.source.as_str()),
            (kind::DUPLICATE_ID, "f:3")
        );
        assert!(error.message.contains("f:1"), "{}", error.message);
        assert!(kept[1].is_ok());
    }
}
