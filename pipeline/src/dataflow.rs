//! The indexing dataflow: documents in as a differential collection, every memory
//! table's rows out as collections derived from it.
//!
//! Documents are a collection of (doc_id, version, text) records from the start, so
//! an update (retract the old version, insert the new) or a delete (retract) flows
//! through every derived table and recomputes only what depends on it.

use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::Hash;
use std::rc::Rc;
use std::sync::Arc;

use differential_dataflow::VecCollection;
use differential_dataflow::input::{Input, InputSession};
use memweave_operators::build::{BuildConfig, Document, page_rows, segment_rows, tree_rows};
use memweave_operators::model::MemoryModel;
use memweave_operators::tokens::count_tokens;
use memweave_schemas::{DocumentRow, ErrorRow, PageRow, SegmentRow, TreeNodeRow};
use timely::dataflow::operators::probe::Handle as ProbeHandle;
use timely::worker::Worker;

/// The rows one worker's share of the dataflow produced, with their multiplicities.
#[derive(Debug, Default)]
pub struct WorkerOutput {
    pub documents: HashMap<DocumentRow, isize>,
    pub segments: HashMap<SegmentRow, isize>,
    pub tree_nodes: HashMap<TreeNodeRow, isize>,
    pub pages: HashMap<PageRow, isize>,
    pub errors: HashMap<ErrorRow, isize>,
}

/// A document as the input collection holds it, with the time it was first seen.
pub type DocumentInput = InputSession<u64, (Document, i64), isize>;

/// Builds the indexing dataflow in `worker`; returns its input and a probe that
/// tells when an input epoch has been fully processed, and the shared output.
pub fn build(
    worker: &mut Worker,
    model: &Arc<dyn MemoryModel>,
    config: BuildConfig,
) -> (DocumentInput, ProbeHandle<u64>, Rc<RefCell<WorkerOutput>>) {
    let output = Rc::new(RefCell::new(WorkerOutput::default()));
    let mut probe = ProbeHandle::new();
    let input = worker.dataflow::<u64, _, _>(|scope| {
        let (input, raw) = scope.new_collection::<(Document, i64), isize>();

        // One version per doc_id: two sources claiming one id keep the first (by
        // source), and the others become errors rather than vanish.
        let claimed = raw
            .map(|(doc, seen)| (doc.doc_id.clone(), (doc, seen)))
            .reduce_named("ClaimDocId", |_doc_id, claims, out| {
                let mut claims: Vec<&(Document, i64)> = claims.iter().map(|(d, _)| *d).collect();
                claims.sort_by(|a, b| a.0.source_uri.cmp(&b.0.source_uri));
                let (winner, rest) = claims.split_first().expect("reduce groups are never empty");
                out.push((Ok((*winner).clone()), 1));
                for (loser, _) in rest {
                    out.push((Err(duplicate_error(loser, &winner.0)), 1));
                }
            });
        let documents = claimed.clone().flat_map(|(_, claim)| claim.ok());
        let duplicates = claimed.flat_map(|(_, claim)| claim.err());

        let document_rows = documents
            .clone()
            .map(|(doc, seen)| document_row(&doc, seen));
        let docs = documents.map(|(doc, _)| doc);

        let segment_config = config.segments;
        let segments = docs
            .clone()
            .flat_map(move |doc| segment_rows(&doc, &segment_config));

        let tree_model = Arc::clone(model);
        let max_children = config.max_children;
        let tree_nodes = segments
            .clone()
            .map(|s| (s.doc_id.clone(), s))
            .reduce_named("MemWalkerTree", move |doc_id, segments, out| {
                let segments: Vec<SegmentRow> =
                    segments.iter().map(|(s, _)| (*s).clone()).collect();
                for node in tree_rows(doc_id, &segments, tree_model.as_ref(), max_children) {
                    out.push((node, 1));
                }
            })
            .map(|(_, node)| node);

        let page_model = Arc::clone(model);
        let page_config = config.pages;
        let pages = docs.flat_map(move |doc| page_rows(&doc, &page_config, page_model.as_ref()));

        collect(document_rows, &output, |o| &mut o.documents, &mut probe);
        collect(segments, &output, |o| &mut o.segments, &mut probe);
        collect(tree_nodes, &output, |o| &mut o.tree_nodes, &mut probe);
        collect(pages, &output, |o| &mut o.pages, &mut probe);
        collect(duplicates, &output, |o| &mut o.errors, &mut probe);
        input
    });
    (input, probe, output)
}

/// Accumulates a collection's updates into one map of the worker's output.
fn collect<'scope, D>(
    collection: VecCollection<'scope, u64, D, isize>,
    output: &Rc<RefCell<WorkerOutput>>,
    field: fn(&mut WorkerOutput) -> &mut HashMap<D, isize>,
    probe: &mut ProbeHandle<u64>,
) where
    D: differential_dataflow::Data + Hash,
{
    let output = Rc::clone(output);
    collection
        .inspect(move |(row, _time, diff)| {
            let mut output = output.borrow_mut();
            let map = field(&mut output);
            let count = map.entry(row.clone()).or_insert(0);
            *count += diff;
            if *count == 0 {
                map.remove(row);
            }
        })
        .probe_with(probe);
}

fn document_row(doc: &Document, seen: i64) -> DocumentRow {
    DocumentRow {
        doc_id: doc.doc_id.clone(),
        source_uri: doc.source_uri.clone(),
        content_hash: doc.content_hash.clone(),
        version: doc.version,
        title: doc.title.clone(),
        n_chars: doc.text.chars().count() as u64,
        n_tokens: count_tokens(&doc.text) as u64,
        ingested_at: seen,
        deleted: false,
    }
}

fn duplicate_error(loser: &Document, winner: &Document) -> ErrorRow {
    ErrorRow::new(
        "ingest",
        &loser.source_uri,
        Some(loser.doc_id.clone()),
        "duplicate_id",
        &format!(
            "document id already taken by {}; this copy was not indexed",
            winner.source_uri
        ),
    )
}
