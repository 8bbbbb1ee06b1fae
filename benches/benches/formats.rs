//! Formats: what reading costs, format by format, and what a dataset costs a
//! build beside the same text as loose files.
//!
//! The read stage (`memweave_ingest::parse`, bytes already in memory): MB/s
//! of input and documents (or pages) per second, over real files where
//! Debian ships them (every PDF under /usr/share/doc, Python's HTML
//! documentation) and over a generated archive (FORMATS_TOKENS, default
//! `10M`) as loose text files and as one Parquet file of the same documents.
//!
//! Builds (the `memweave` binary, release, embedded default): the loose
//! files and the Parquet file, each indexed from scratch; wall, peak RSS and
//! their ratio, and the read stage's share of the wall (its time above over
//! the build's).
//!
//! `cargo build --release -p memweave-cli && cargo bench -p memweave-benches
//! --bench formats` (FORMATS_DIR keeps the archives, FORMATS_BIN names the
//! binary).

// A benchmark fails loudly.
#![allow(clippy::unwrap_used, clippy::print_stdout)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use arrow_array::{RecordBatch, StringArray};
use memweave_benches::archive::{Markov, generate, memweave_binary, parse_size};
use memweave_benches::files_in;
use memweave_benches::measure::index_measured;
use memweave_ingest::{Format, ReadOptions, SourceFile, parse};

fn main() {
    let binary = memweave_binary("FORMATS_BIN");
    let work = std::env::var_os("FORMATS_DIR").map_or_else(
        || std::env::temp_dir().join("memweave-formats"),
        PathBuf::from,
    );
    let size = std::env::var("FORMATS_TOKENS").unwrap_or_else(|_| "10M".into());
    let loose = work.join(format!("generated-{size}"));
    let model = Markov::train(&memweave_benches::shared_data("pg-essays"));
    generate(&model, &loose, parse_size(&size));
    let parquet = work.join(format!("generated-{size}.parquet"));
    if !parquet.exists() {
        write_parquet(&loose, &parquet);
    }

    println!(
        "{:<28} {:>7} {:>9} {:>8} {:>10}",
        "read stage", "files", "input MB", "MB/s", "docs/s"
    );
    let pdfs: Vec<PathBuf> = files_in(Path::new("/usr/share/doc"))
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "pdf"))
        .collect();
    read_stage("PDF (/usr/share/doc), pages", &pdfs, true);
    let html: Vec<PathBuf> = files_in(Path::new("/usr/share/doc/python3.11/html"))
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "html"))
        .collect();
    read_stage("HTML (python3.11-doc)", &html, false);
    let texts: Vec<PathBuf> = files_in(&loose)
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "txt"))
        .collect();
    let reading_files = read_stage(&format!("text files ({size})"), &texts, false);
    let reading_dataset = read_stage(
        &format!("Parquet ({size})"),
        std::slice::from_ref(&parquet),
        false,
    );

    println!();
    println!(
        "{:<28} {:>9} {:>10} {:>9} {:>8}",
        "build", "wall s", "peak RSS", "vs loose", "read %"
    );
    let files = build(&binary, &loose, &work.join("tables-loose"));
    println!(
        "{:<28} {:>9.1} {:>9}M {:>9} {:>7.1}%",
        format!("loose files ({size})"),
        files.0,
        files.1 >> 20,
        "1.00×",
        reading_files / files.0 * 100.0
    );
    let dataset = build(&binary, &parquet, &work.join("tables-parquet"));
    println!(
        "{:<28} {:>9.1} {:>9}M {:>8.2}× {:>7.1}%",
        format!("one Parquet file ({size})"),
        dataset.0,
        dataset.1 >> 20,
        dataset.1 as f64 / files.1 as f64,
        reading_dataset / dataset.0 * 100.0
    );
}

/// The generated archive's documents as one Parquet file: the id its
/// relative path, the text the file's.
fn write_parquet(loose: &Path, out: &Path) {
    let mut ids = Vec::new();
    let mut texts = Vec::new();
    for path in files_in(loose) {
        if path.extension().is_some_and(|e| e == "txt") {
            let key = path.strip_prefix(loose).unwrap().display().to_string();
            ids.push(key);
            texts.push(std::fs::read_to_string(&path).unwrap());
        }
    }
    let batch = RecordBatch::try_from_iter([
        ("id", Arc::new(StringArray::from(ids)) as _),
        ("text", Arc::new(StringArray::from(texts)) as _),
    ])
    .unwrap();
    let file = std::fs::File::create(out).unwrap();
    let mut writer = parquet::arrow::ArrowWriter::try_new(file, batch.schema(), None).unwrap();
    writer.write(&batch).unwrap();
    writer.close().unwrap();
}

/// Reads `files` (from memory) as memweave does; prints MB/s and documents
/// (or, for PDFs, pages) per second; returns the seconds it took.
fn read_stage(name: &str, files: &[PathBuf], pages: bool) -> f64 {
    if files.is_empty() {
        println!("{name:<28} (none installed)");
        return 0.0;
    }
    let loaded: Vec<(SourceFile, Vec<u8>)> = files
        .iter()
        .map(|path| {
            let file = SourceFile {
                uri: path.display().to_string(),
                key: path.display().to_string(),
                format: Format::of(path).unwrap(),
                version: None,
            };
            (file, std::fs::read(path).unwrap())
        })
        .collect();
    let bytes: usize = loaded.iter().map(|(_, b)| b.len()).sum();
    let options = ReadOptions::default();
    let started = Instant::now();
    let mut documents = 0;
    for (file, data) in loaded {
        for doc in parse(&file, Ok::<_, String>(data), &options)
            .into_iter()
            .flatten()
        {
            documents += if pages { doc.sections.len() } else { 1 };
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    println!(
        "{name:<28} {:>7} {:>9.1} {:>8.1} {:>10.0}",
        files.len(),
        bytes as f64 / 1e6,
        bytes as f64 / 1e6 / seconds,
        documents as f64 / seconds
    );
    seconds
}

/// Indexes `source` from scratch: wall seconds and peak RSS.
fn build(binary: &Path, source: &Path, tables: &Path) -> (f64, u64) {
    let _ = std::fs::remove_dir_all(tables);
    let (wall, _, peak) = index_measured(binary, source, tables, &[]);
    (wall.as_secs_f64(), peak.rss)
}
