//! Per-document memory building on pg-essays: segmentation, and whole memories
//! (all four) with the extractive backend
//! through prompts, parsers and an in-memory call cache. Reports bytes/s.
//!
//! Run: `cargo bench -p memweave-benches` (needs ../shared/data/pg-essays).

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use memweave_llm::TaskModel;
use memweave_operators::build::RawDocument;
use memweave_operators::build::{BuildConfig, Document, build_document, segments_of};
use memweave_operators::embed::HashingEmbedder;

fn essays() -> Vec<Document> {
    let dir = memweave_benches::shared_data("pg-essays");
    memweave_benches::files_in(&dir)
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).expect("utf-8 essay");
            let key = p.file_name().expect("name").to_string_lossy().into_owned();
            Document::new(
                RawDocument {
                    source_uri: key.clone(),
                    title: key.clone(),
                    key,
                    text,
                    sections: Vec::new(),
                    acl: Vec::new(),
                },
                1,
            )
        })
        .collect()
}

fn build(c: &mut Criterion) {
    let docs = essays();
    let bytes: u64 = docs.iter().map(|d| d.text.len() as u64).sum();
    let config = BuildConfig::DEFAULT;
    let mut group = c.benchmark_group("pg-essays");
    group.throughput(Throughput::Bytes(bytes));
    group.sample_size(10);
    group.bench_function("segment", |b| {
        b.iter(|| {
            docs.iter()
                .map(|d| segments_of(d, &config.segments).len())
                .sum::<usize>()
        })
    });
    group.bench_function("memories_extractive", |b| {
        b.iter(|| {
            // A fresh model each time: a warm cache would measure look-ups, not building.
            let model = TaskModel::extractive();
            let embedder = HashingEmbedder::new(256);
            docs.iter()
                .map(|d| {
                    futures::executor::block_on(build_document(d, &config, &model, &embedder)).len()
                })
                .sum::<usize>()
        })
    });
    group.finish();
}

criterion_group!(benches, build);
criterion_main!(benches);
