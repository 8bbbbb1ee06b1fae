//! Prints what memweave reads out of a file: each document's key, title,
//! sections and text, or the errors. `cargo run --release -p memweave-ingest
//! --example extract -- FILE [--sections]`
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::path::Path;

use memweave_ingest::{Format, ReadOptions, SourceFile, parse, read_rows};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(path) = args.first() else {
        eprintln!("usage: extract FILE [--sections]");
        std::process::exit(2);
    };
    let file = SourceFile {
        uri: path.clone(),
        key: path.clone(),
        format: Format::of(Path::new(path)).unwrap_or(Format::Text),
        version: None,
    };
    let started = std::time::Instant::now();
    let options = ReadOptions::default();
    // A dataset a batch at a time, as the indexer reads it; else the bytes.
    let parsed: Box<dyn Iterator<Item = _>> = if file.format.is_dataset() {
        Box::new(read_rows(&file, Path::new(path), &options))
    } else {
        Box::new(
            parse(
                &file,
                std::fs::read(path)
                    .map_err(|e| memweave_ingest::IngestError::unreadable(&file.uri, e)),
                &options,
            )
            .into_iter(),
        )
    };
    for item in parsed {
        match item {
            Ok(doc) => {
                eprintln!(
                    "== {} ({}) {} sections",
                    doc.key,
                    doc.title,
                    doc.sections.len()
                );
                if args.iter().any(|a| a == "--sections") {
                    for s in &doc.sections {
                        eprintln!("   {} {} {}", s.start_char, s.kind, s.label);
                    }
                }
                println!("{}", doc.text);
            }
            Err(e) => eprintln!("error {} {}: {}", e.kind, e.source, e.message),
        }
    }
    eprintln!("read in {:?}", started.elapsed());
}
