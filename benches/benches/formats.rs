//! Formats: what reading costs, format by format, and what a build of each
//! costs beside the same text as loose files.
//!
//! The read stage, as the indexer reads (files parsed in parallel; datasets
//! read a batch at a time from their file, `memweave_ingest::read_rows`):
//! MB/s of input and documents (or pages) per second, over real files where
//! Debian ships them (every PDF under /usr/share/doc: with
//! `apt-get install texlive-latex-base-doc texlive-latex-recommended-doc
//! gnuplot-doc` 467 files, 178 MB; Python's HTML documentation) and over
//! generated data: an archive (FORMATS_TOKENS, default `10M`) as loose text
//! files and as one Parquet file of the same documents, and a Parquet file
//! of FORMATS_ROWS rows (default 1,000,000) of a sentence or three each;
//! the archive also as JSON Lines (plain, gzip, zstd), Arrow IPC and an mbox,
//! and pg-essays as DOCX and EPUB where pandoc is installed.
//!
//! Builds (the `memweave` binary, release, embedded default), each from
//! scratch: wall, peak RSS, its ratio to the loose files', and the read
//! stage's share of the wall (its time above over the build's).
//!
//! `cargo build --release -p memweave-cli && cargo bench -p memweave-benches
//! --bench formats` (FORMATS_DIR keeps the data, FORMATS_BIN names the
//! binary, FORMATS_READ_ONLY=1 measures the read stage alone).

// A benchmark fails loudly.
#![allow(clippy::unwrap_used, clippy::print_stdout)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use arrow_array::{RecordBatch, StringArray};
use memweave_benches::archive::{Markov, generate, memweave_binary, parse_size};
use memweave_benches::measure::index_measured;
use memweave_ingest::{Format, ReadOptions, SourceFile, parse, read_rows};
use rayon::prelude::*;

fn main() {
    let binary = memweave_binary("FORMATS_BIN");
    let work = std::env::var_os("FORMATS_DIR").map_or_else(
        || std::env::temp_dir().join("memweave-formats"),
        PathBuf::from,
    );
    let size = std::env::var("FORMATS_TOKENS").unwrap_or_else(|_| "10M".into());
    let rows: usize = std::env::var("FORMATS_ROWS").map_or(1_000_000, |r| r.parse().unwrap());
    let loose = work.join(format!("generated-{size}"));
    let model = Markov::train(&memweave_benches::shared_data("pg-essays"));
    generate(&model, &loose, parse_size(&size));
    let parquet = work.join(format!("generated-{size}.parquet"));
    if !parquet.exists() {
        write_parquet(&loose, &parquet);
    }
    let short_rows = work.join(format!("rows-{rows}.parquet"));
    if !short_rows.exists() {
        write_rows(&model, rows, &short_rows);
    }
    // The PDFs, linked into one folder to index.
    let pdfs = files_of(Path::new("/usr/share/doc"), Format::Pdf);
    let pdf_folder = work.join("pdfs");
    let _ = std::fs::remove_dir_all(&pdf_folder);
    std::fs::create_dir_all(&pdf_folder).unwrap();
    for (i, pdf) in pdfs.iter().enumerate() {
        let name = format!("{i:04}-{}", pdf.file_name().unwrap().to_string_lossy());
        std::os::unix::fs::symlink(pdf, pdf_folder.join(name)).unwrap();
    }

    println!(
        "{:<30} {:>7} {:>9} {:>8} {:>10}",
        "read stage", "files", "input MB", "MB/s", "docs/s"
    );
    let reading_pdfs = read_stage("PDF (/usr/share/doc), pages", &pdfs, true);
    let html = files_of(Path::new("/usr/share/doc/python3.11/html"), Format::Html);
    read_stage("HTML (python3.11-doc)", &html, false);
    let texts = files_of(&loose, Format::Text);
    let reading_files = read_stage(&format!("text files ({size})"), &texts, false);
    let reading_dataset = read_stage(
        &format!("Parquet ({size})"),
        std::slice::from_ref(&parquet),
        false,
    );
    let reading_rows = read_stage(
        &format!("Parquet ({rows} rows)"),
        std::slice::from_ref(&short_rows),
        false,
    );
    for (name, files) in other_formats(&loose, &work.join(format!("formats-{size}"))) {
        read_stage(&name, &files, false);
    }

    if std::env::var_os("FORMATS_READ_ONLY").is_some() {
        return;
    }
    println!();
    println!(
        "{:<30} {:>9} {:>10} {:>9} {:>8}",
        "build", "wall s", "peak RSS", "vs loose", "read %"
    );
    let files = build(&binary, &loose, &work.join("tables-loose"));
    let row = |name: String, (wall, peak): (f64, u64), reading: f64| {
        println!(
            "{name:<30} {wall:>9.1} {:>9}M {:>8.2}× {:>7.1}%",
            peak >> 20,
            peak as f64 / files.1 as f64,
            reading / wall * 100.0
        );
    };
    row(format!("loose files ({size})"), files, reading_files);
    let dataset = build(&binary, &parquet, &work.join("tables-parquet"));
    row(
        format!("one Parquet file ({size})"),
        dataset,
        reading_dataset,
    );
    if !pdfs.is_empty() {
        let built = build(&binary, &pdf_folder, &work.join("tables-pdfs"));
        row(format!("{} PDFs", pdfs.len()), built, reading_pdfs);
    }
    let built = build(&binary, &short_rows, &work.join("tables-rows"));
    row(
        format!("one Parquet file, {rows} rows"),
        built,
        reading_rows,
    );
}

/// The files under `dir` (recursively, as the indexer lists them) in
/// `format`; none if `dir` is not there.
fn files_of(dir: &Path, format: Format) -> Vec<PathBuf> {
    let listed = memweave_ingest::discover(dir).map_or_else(|_| Vec::new(), |d| d.files);
    (listed.into_iter())
        .filter(|f| f.format == format)
        .map(|f| PathBuf::from(f.uri))
        .collect()
}

/// The generated archive as JSON Lines (plain, gzip, zstd), Arrow IPC and an
/// mbox, and pg-essays as DOCX and EPUB (by pandoc, where it is installed),
/// each written into `dir` once; with their read stage's names.
fn other_formats(loose: &Path, dir: &Path) -> Vec<(String, Vec<PathBuf>)> {
    use std::io::Write;
    std::fs::create_dir_all(dir).unwrap();
    let documents: Vec<(String, String)> = files_of(loose, Format::Text)
        .into_iter()
        .map(|path| {
            let key = path.strip_prefix(loose).unwrap().display().to_string();
            (key, std::fs::read_to_string(&path).unwrap())
        })
        .collect();
    let jsonl = dir.join("rows.jsonl");
    if !jsonl.exists() {
        let lines: String = (documents.iter())
            .map(|(id, text)| format!("{}\n", serde_json::json!({"id": id, "text": text})))
            .collect();
        std::fs::write(&jsonl, &lines).unwrap();
        let mut gzip = flate2::write::GzEncoder::new(
            std::fs::File::create(dir.join("rows.jsonl.gz")).unwrap(),
            flate2::Compression::default(),
        );
        gzip.write_all(lines.as_bytes()).unwrap();
        gzip.finish().unwrap();
        let zstd_file = std::fs::File::create(dir.join("rows.jsonl.zst")).unwrap();
        zstd::stream::copy_encode(lines.as_bytes(), zstd_file, 3).unwrap();
        let batch = RecordBatch::try_from_iter([
            (
                "id",
                Arc::new(StringArray::from_iter_values(
                    documents.iter().map(|d| &d.0),
                )) as _,
            ),
            (
                "text",
                Arc::new(StringArray::from_iter_values(
                    documents.iter().map(|d| &d.1),
                )) as _,
            ),
        ])
        .unwrap();
        let file = std::fs::File::create(dir.join("rows.arrow")).unwrap();
        let mut writer = arrow_ipc::writer::FileWriter::try_new(file, &batch.schema()).unwrap();
        writer.write(&batch).unwrap();
        writer.finish().unwrap();
        let mut mbox = String::new();
        for (n, (id, text)) in documents.iter().enumerate() {
            mbox.push_str(&format!(
                "From bench@example.org Thu Jan  1 00:00:00 2026\nMessage-ID: <{n}@bench>\n\
                 Subject: {id}\nContent-Type: text/plain; charset=utf-8\n\n"
            ));
            for line in text.lines() {
                if line.starts_with("From ") {
                    mbox.push('>');
                }
                mbox.push_str(line);
                mbox.push('\n');
            }
            mbox.push('\n');
        }
        std::fs::write(dir.join("archive.mbox"), mbox).unwrap();
    }
    let mut formats: Vec<(String, Vec<PathBuf>)> = [
        ("JSON Lines", "rows.jsonl"),
        ("JSON Lines, gzip", "rows.jsonl.gz"),
        ("JSON Lines, zstd", "rows.jsonl.zst"),
        ("Arrow IPC", "rows.arrow"),
        ("mbox, a message each", "archive.mbox"),
    ]
    .into_iter()
    .map(|(name, file)| (name.to_string(), vec![dir.join(file)]))
    .collect();
    let essays = files_of(&memweave_benches::shared_data("pg-essays"), Format::Text);
    for (name, extension) in [
        ("DOCX (pandoc, pg-essays)", "docx"),
        ("EPUB (pandoc, pg-essays)", "epub"),
    ] {
        let mut written = Vec::new();
        for essay in &essays {
            let out = dir
                .join(essay.file_name().unwrap())
                .with_extension(extension);
            let made = out.exists()
                || std::process::Command::new("pandoc")
                    .args(["-f", "markdown", "-o"])
                    .arg(&out)
                    .arg(essay)
                    .status()
                    .is_ok_and(|s| s.success());
            if made {
                written.push(out);
            }
        }
        formats.push((name.to_string(), written));
    }
    formats
}

/// `rows` rows of one to three sentences each, ids `row-N`.
fn write_rows(model: &Markov, rows: usize, out: &Path) {
    let mut rng = fastrand::Rng::with_seed(7);
    let file = std::fs::File::create(out).unwrap();
    let schema = Arc::new(arrow_schema::Schema::new(vec![
        arrow_schema::Field::new("id", arrow_schema::DataType::Utf8, false),
        arrow_schema::Field::new("text", arrow_schema::DataType::Utf8, false),
    ]));
    let mut writer = parquet::arrow::ArrowWriter::try_new(file, schema, None).unwrap();
    for start in (0..rows).step_by(100_000) {
        let end = (start + 100_000).min(rows);
        let ids: Vec<String> = (start..end).map(|i| format!("row-{i:07}")).collect();
        let texts: Vec<String> = (start..end)
            .map(|_| {
                let words = 15 + rng.usize(..45);
                model.write(&mut rng, words, &[])
            })
            .collect();
        let batch = RecordBatch::try_from_iter([
            ("id", Arc::new(StringArray::from(ids)) as _),
            ("text", Arc::new(StringArray::from(texts)) as _),
        ])
        .unwrap();
        writer.write(&batch).unwrap();
    }
    writer.close().unwrap();
}

/// The generated archive's documents as one Parquet file: the id its
/// relative path, the text the file's.
fn write_parquet(loose: &Path, out: &Path) {
    let mut ids = Vec::new();
    let mut texts = Vec::new();
    for path in files_of(loose, Format::Text) {
        let key = path.strip_prefix(loose).unwrap().display().to_string();
        ids.push(key);
        texts.push(std::fs::read_to_string(&path).unwrap());
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

/// Reads `files` as the indexer does (from disk, parsed in parallel; a
/// dataset a batch at a time from its file); prints MB/s and documents
/// (or, for PDFs, pages) per second; returns the seconds it took.
fn read_stage(name: &str, files: &[PathBuf], pages: bool) -> f64 {
    if files.is_empty() {
        println!("{name:<30} (none installed)");
        return 0.0;
    }
    let options = ReadOptions::default();
    let file_of = |path: &PathBuf| SourceFile {
        uri: path.display().to_string(),
        key: path.display().to_string(),
        format: Format::of(path).unwrap(),
        version: None,
    };
    let bytes: u64 = files.iter().map(|p| p.metadata().unwrap().len()).sum();
    let count = |doc: memweave_operators::build::RawDocument| {
        if pages { doc.sections.len() } else { 1 }
    };
    let started = Instant::now();
    let documents: usize = if files.iter().all(|p| Format::of(p).unwrap().is_dataset()) {
        let read = |path: &PathBuf| read_rows(&file_of(path), path, &options).flatten();
        files.iter().flat_map(read).map(count).sum()
    } else {
        let loaded: Vec<(SourceFile, Vec<u8>)> = files
            .iter()
            .map(|path| (file_of(path), std::fs::read(path).unwrap()))
            .collect();
        (loaded.into_par_iter())
            .map(|(file, data)| {
                let parsed = parse(&file, Ok(data), &options);
                parsed.into_iter().flatten().map(count).sum::<usize>()
            })
            .sum()
    };
    let seconds = started.elapsed().as_secs_f64();
    println!(
        "{name:<30} {:>7} {:>9.1} {:>8.1} {:>10.0}",
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
