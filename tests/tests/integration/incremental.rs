//! Incremental maintenance: after any sequence of upserts and deletes, in one
//! long-lived indexer or across restarts, the tables equal a from-scratch build
//! of the final corpus, and an edit costs only the model calls of what changed.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::time::Duration;

use memweave_llm::sim::{Fault, SimConfig};
use memweave_operators::build::BuildConfig;
use memweave_operators::entity_graph::GraphConfig;
use memweave_operators::paginate::PageConfig;
use memweave_operators::segment::SegmentConfig;
use memweave_pipeline::index::{IndexOptions, Indexer, run_index};
use memweave_pipeline::source::{Source, SourceOptions};
use memweave_schemas::CallStatRow;
use memweave_tests::{
    SimServer, Tables, index, model_calls, openai_flags, read_calls, read_every_row, read_tables,
    stdout,
};
use proptest::prelude::*;

use super::shared::essay;

/// Small sizes, so a few paragraphs make several segments, pages and tree
/// levels; the corpus-level trees on; and the model asked about every two
/// mentions of a name, so that some names become several entities.
fn options(source: &Path, tables: &Path) -> IndexOptions {
    IndexOptions {
        workers: 2,
        build: BuildConfig {
            corpus_tree: true,
            graph: GraphConfig {
                same_above: 1.0,
                apart_below: -1.0,
                ..GraphConfig::DEFAULT
            },
            ..BuildConfig::new(
                SegmentConfig::around(60),
                PageConfig {
                    min_words: 40,
                    max_words: 120,
                    gist_word_budget: 0,
                },
                3,
            )
        },
        ..IndexOptions::new(source.to_string_lossy(), tables.to_string_lossy())
    }
}

/// Row by row, ignoring what differs by history alone: when a document was
/// first seen (and the checkpoint), and how many versions it went through.
pub fn comparable(t: &Tables) -> Tables {
    let mut t = super::indexing::comparable(t);
    for d in &mut t.documents {
        d.version = 0;
    }
    t
}

/// Paragraphs of four sentences of a real essay (its file has no blank lines),
/// to compose documents from.
fn paragraphs() -> Vec<String> {
    let text = essay("addiction.txt").replace('\n', " ");
    let sentences: Vec<&str> = text.split_inclusive(". ").collect();
    sentences
        .chunks(4)
        .map(|s| s.concat().trim().to_string())
        .take(12)
        .collect()
}

#[derive(Debug, Clone)]
enum Op {
    /// Write document `doc` (a .txt or .md file) as these paragraphs.
    Upsert {
        doc: usize,
        paras: Vec<usize>,
    },
    Delete {
        doc: usize,
    },
    /// Write record `id` of the JSON Lines file as one paragraph.
    UpsertRecord {
        id: usize,
        para: usize,
    },
    DeleteRecord {
        id: usize,
    },
    /// Stop the indexer and start a new one over the same tables, with
    /// this many workers.
    Restart {
        workers: usize,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..4usize, proptest::collection::vec(0..12usize, 1..5))
            .prop_map(|(doc, paras)| Op::Upsert { doc, paras }),
        2 => (0..4usize).prop_map(|doc| Op::Delete { doc }),
        2 => (0..3usize, 0..12usize).prop_map(|(id, para)| Op::UpsertRecord { id, para }),
        1 => (0..3usize).prop_map(|id| Op::DeleteRecord { id }),
        2 => (1..=2usize).prop_map(|workers| Op::Restart { workers }),
    ]
}

fn doc_path(source: &Path, doc: usize) -> std::path::PathBuf {
    source.join(format!(
        "doc{doc}.{}",
        if doc.is_multiple_of(2) { "txt" } else { "md" }
    ))
}

fn write_records(source: &Path, records: &BTreeMap<usize, usize>, paras: &[String]) {
    let path = source.join("records.jsonl");
    if records.is_empty() {
        let _ = std::fs::remove_file(path);
        return;
    }
    let lines: Vec<String> = records
        .iter()
        .map(|(id, para)| {
            serde_json::json!({"id": format!("r{id}"), "text": paras[*para]}).to_string()
        })
        .collect();
    std::fs::write(path, lines.join("\n")).unwrap();
}

fn incremental_equals_scratch(ops: &[Op]) {
    let paras = paragraphs();
    let dir = tempfile::tempdir().unwrap();
    let (source, tables, scratch) = (
        dir.path().join("source"),
        dir.path().join("incremental"),
        dir.path().join("scratch"),
    );
    std::fs::create_dir(&source).unwrap();
    // A corpus to start from, so every op has something to change or delete.
    for doc in 0..4 {
        std::fs::write(doc_path(&source, doc), paras[doc * 3..][..3].join("\n\n")).unwrap();
    }
    let mut records: BTreeMap<usize, usize> = [(0, 0), (1, 5)].into();
    write_records(&source, &records, &paras);
    let live = options(&source, &tables);
    let files = Source::open(&live.source, &SourceOptions::default()).unwrap();
    let mut indexer = Indexer::open(&live).unwrap();
    indexer.index_files(&files).unwrap();
    for op in ops {
        match op {
            Op::Upsert { doc, paras: chosen } => {
                let text: Vec<&str> = chosen.iter().map(|&p| paras[p].as_str()).collect();
                std::fs::write(doc_path(&source, *doc), text.join("\n\n")).unwrap();
            }
            Op::Delete { doc } => {
                let _ = std::fs::remove_file(doc_path(&source, *doc));
            }
            Op::UpsertRecord { id, para } => {
                records.insert(*id, *para);
                write_records(&source, &records, &paras);
            }
            Op::DeleteRecord { id } => {
                records.remove(id);
                write_records(&source, &records, &paras);
            }
            Op::Restart { workers } => {
                drop(indexer);
                let restarted = IndexOptions {
                    workers: *workers,
                    ..live.clone()
                };
                indexer = Indexer::open(&restarted).unwrap();
            }
        }
        indexer.index_files(&files).unwrap();
    }
    drop(indexer);
    run_index(&options(&source, &scratch)).unwrap();
    let (incremental, scratch) = (read_tables(&tables), read_tables(&scratch));
    assert!(!scratch.documents.is_empty());
    // The lexicon each commit kept counts exactly the texts the tables hold
    // (the equality below carries it over to the incremental one).
    assert!(!scratch.lexicon.is_empty());
    assert_eq!(
        scratch.lexicon,
        scratch.recounted_lexicon(),
        "after {ops:?}"
    );
    assert_eq!(
        comparable(&incremental),
        comparable(&scratch),
        "after {ops:?}"
    );
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 16,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// Any sequence of upserts and deletes (of files and of JSON Lines
    /// records), absorbed one round at a time by a live indexer or by one
    /// restarted on the tables (with one worker or two: a new process
    /// restores the cross-document stages from the documents' states,
    /// whatever its workers), leaves the tables a from-scratch build writes.
    #[test]
    fn incremental_rounds_equal_a_build_from_scratch(
        ops in proptest::collection::vec(op(), 1..8)
    ) {
        incremental_equals_scratch(&ops);
    }
}

/// A new process reads back which entity each name became from the
/// entities rather than resolving the names again: its first round asks the
/// model (or its cache) only about the names the round's edit changed, and
/// about their new mentions only, where a process that never stopped
/// resolves each such name's old mentions again to retract what they made.
#[test]
fn a_new_process_resolves_only_the_names_that_changed() {
    let (dir, source) =
        super::shared::archive_of(&["gap.txt", "founders.txt", "want.txt", "hubs.txt"]);
    let resolutions_of_last_round = |tables: &Path| -> u64 {
        let epoch = read_tables(tables).checkpoint.epoch;
        let stats: Vec<CallStatRow> = read_every_row(tables);
        (stats.iter())
            .filter(|s| s.epoch == epoch && s.task == "same_entity")
            .map(|s| s.calls + s.cache_hits)
            .sum()
    };
    let (live, restarted) = (dir.path().join("live"), dir.path().join("restarted"));
    let files = Source::open(&source.to_string_lossy(), &SourceOptions::default()).unwrap();
    let mut indexer = Indexer::open(&options(&source, &live)).unwrap();
    indexer.index_files(&files).unwrap();
    run_index(&options(&source, &restarted)).unwrap();
    assert!(
        resolutions_of_last_round(&live) > 0,
        "the names were resolved"
    );

    // A paragraph that mentions names of the other essays.
    let edited = format!(
        "{}\n\nLater Paul Graham wrote to Jessica Livingston about Y Combinator, Viaweb and Yahoo.\n",
        essay("gap.txt")
    );
    std::fs::write(source.join("gap.txt"), edited).unwrap();
    indexer.index_files(&files).unwrap();
    drop(indexer);
    let run = run_index(&options(&source, &restarted)).unwrap();
    assert!(run.restored_bytes > 0, "{run:?}");
    assert!(
        resolutions_of_last_round(&live) > 0,
        "the edit changed names"
    );
    let (restarted_asked, live_asked) = (
        resolutions_of_last_round(&restarted),
        resolutions_of_last_round(&live),
    );
    assert!(
        0 < restarted_asked && restarted_asked < live_asked,
        "a new process asked {restarted_asked} times, a live one {live_asked}"
    );
    assert_eq!(
        comparable(&read_tables(&restarted)),
        comparable(&read_tables(&live))
    );
}

/// A file touched but not changed (copied again, checked out again) changes
/// nothing: a new process reads it, finds its text as indexed, and neither
/// restores the dataflow nor writes a row.
#[test]
fn a_new_process_over_touched_files_restores_nothing() {
    let (dir, source) = super::shared::archive_of(&["gap.txt", "founders.txt"]);
    let tables = dir.path().join("memory");
    run_index(&options(&source, &tables)).unwrap();
    let before = comparable(&read_tables(&tables));
    let touched = std::fs::File::options()
        .append(true)
        .open(source.join("gap.txt"))
        .unwrap();
    let later = touched.metadata().unwrap().modified().unwrap() + Duration::from_secs(60);
    touched.set_modified(later).unwrap();
    let run = run_index(&options(&source, &tables)).unwrap();
    assert_eq!((run.restored_bytes, run.rows_written), (0, 0), "{run:?}");
    assert_eq!(comparable(&read_tables(&tables)), before);

    // The next change restores as ever, and is built.
    let edited = essay("gap.txt").replacen("money", "a great deal of money", 1);
    std::fs::write(source.join("gap.txt"), edited).unwrap();
    let run = run_index(&options(&source, &tables)).unwrap();
    assert!(run.restored_bytes > 0 && run.rows_written > 0, "{run:?}");
}

/// Editing one paragraph of one essay makes model calls for that essay alone
/// (its changed segments, their ancestors, its pages from the edit on, its
/// entities), plus the graph's cross-document merges; the other essays' rows
/// are untouched and cost nothing.
#[test]
fn an_edit_costs_only_the_calls_of_what_changed() {
    let (dir, archive) = super::shared::archive_of(&["gap.txt", "founders.txt", "want.txt"]);
    let tables = dir.path().join("memory");
    index(&archive, &tables, &["--segment-tokens", "200"]);
    let before = read_tables(&tables);
    let calls_before: HashSet<String> = read_calls(&tables)
        .into_iter()
        .map(|c| c.call_key)
        .collect();
    let text = essay("gap.txt");
    let edited = text.replacen("money", "a great deal of money, as it happens,", 1);
    assert_ne!(edited, text);
    std::fs::write(archive.join("gap.txt"), edited).unwrap();
    let run = index(&archive, &tables, &["--segment-tokens", "200"]);
    assert!(
        stdout(&run).contains("(1 new or changed, 2 unchanged, 0 deleted)"),
        "{}",
        stdout(&run)
    );
    let after = read_tables(&tables);
    let gap = &after
        .documents
        .iter()
        .find(|d| d.source_uri.ends_with("gap.txt"))
        .unwrap()
        .doc_id;
    let new_calls: Vec<_> = read_calls(&tables)
        .into_iter()
        .filter(|c| !calls_before.contains(&c.call_key))
        .collect();
    assert!(!new_calls.is_empty(), "the edit made no model call");
    for call in &new_calls {
        assert!(
            call.doc_id.as_ref().is_none_or(|d| d == gap),
            "a call for an unedited document: {} {:?}",
            call.task,
            call.doc_id
        );
    }
    let gap_segments = before.segments.iter().filter(|s| &s.doc_id == gap).count();
    let per_doc_calls = new_calls.iter().filter(|c| c.doc_id.is_some()).count();
    assert!(
        per_doc_calls < gap_segments,
        "{per_doc_calls} calls for the edit, {gap_segments} segments in the essay"
    );
    // The other essays' rows are the same rows.
    let others = |t: &Tables| -> Vec<memweave_schemas::SegmentRow> {
        t.segments
            .iter()
            .filter(|s| &s.doc_id != gap)
            .cloned()
            .collect()
    };
    assert_eq!(others(&before), others(&after));
}

fn rows_written(run: &std::process::Output) -> u64 {
    let out = stdout(run);
    let line = out
        .lines()
        .find_map(|l| l.trim_start().strip_prefix("written"))
        .unwrap_or_else(|| panic!("no written line in {out}"));
    line.split_whitespace().next().unwrap().parse().unwrap()
}

/// A new process over a memory restores what the cross-document stages held
/// from the documents' states instead of building every document again: with
/// nothing changed it asks the model (and the call cache) nothing and writes
/// nothing; with one essay of five edited it builds that essay, writes a
/// fraction of the rows, and the tables equal a from-scratch build.
#[test]
fn a_new_process_builds_only_what_changed() {
    let essays = [
        "gap.txt",
        "founders.txt",
        "want.txt",
        "love.txt",
        "hubs.txt",
    ];
    let (dir, archive) = super::shared::archive_of(&essays);
    let tables = dir.path().join("memory");
    // Every two mentions of a name are asked about (the vectors settle none),
    // and some names become several entities.
    let flags = [
        "--segment-tokens",
        "200",
        "--same-entity-above",
        "1",
        "--different-entity-below",
        "-1",
    ];
    let first = index(&archive, &tables, &flags);
    let (first_calls, first_hits) = model_calls(&first);
    let built = read_tables(&tables);
    assert_eq!(built.doc_states.len(), essays.len(), "a state per document");

    let again = index(&archive, &tables, &flags);
    assert!(
        stdout(&again).contains("(0 new or changed, 5 unchanged, 0 deleted)"),
        "{}",
        stdout(&again)
    );
    assert_eq!(model_calls(&again), (0, 0), "{}", stdout(&again));
    assert_eq!(rows_written(&again), 0);
    assert!(
        !stdout(&again).contains("restored"),
        "nothing to restore for"
    );
    assert_eq!(comparable(&read_tables(&tables)), comparable(&built));

    let text = essay("gap.txt");
    let edited = text.replacen("money", "a great deal of money, as it happens,", 1);
    assert_ne!(edited, text);
    std::fs::write(archive.join("gap.txt"), edited).unwrap();
    let run = index(&archive, &tables, &flags);
    assert!(
        stdout(&run).contains("(1 new or changed, 4 unchanged, 0 deleted)"),
        "{}",
        stdout(&run)
    );
    assert!(stdout(&run).contains("restored"), "{}", stdout(&run));
    // The four unedited essays are neither built (their steps are not even
    // looked up in the call cache: a rebuild looks up every step the build
    // made) nor written again.
    let (calls, hits) = model_calls(&run);
    assert!(
        calls + hits < first_calls + first_hits,
        "{calls} calls and {hits} cache hits after one edit; {first_calls} and {first_hits} for the build"
    );
    assert!(rows_written(&run) < rows_written(&first) / 2);

    let scratch = dir.path().join("scratch");
    index(&archive, &scratch, &flags);
    assert_eq!(
        comparable(&read_tables(&tables)),
        comparable(&read_tables(&scratch))
    );
}

/// A name whose resolution met an error at the checkpoint is resolved again
/// when a new process retracts it, not read back from its entities: the
/// entities do not tell of the error's row, which must go when the name no
/// longer needs the model. Here every same_entity reply is unparsable, and
/// all but one essay are then deleted: no name is left to ask about, so the
/// tables, like a build of that essay alone, hold no graph error.
#[test]
fn a_restart_retracts_the_errors_of_names_whose_resolution_failed() {
    let server = SimServer::start(SimConfig {
        fault_rate: 1.0,
        faults: vec![Fault::Unparsable],
        fault_tasks: vec!["same_entity".to_string()],
        seed: 5,
        ..SimConfig::new(32, 2.0)
    });
    let mut flags = openai_flags(&server.url);
    flags.extend(["--same-entity-above", "1", "--different-entity-below", "-1"].map(String::from));
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let essays = ["gap.txt", "founders.txt", "want.txt"];
    let (dir, source) = super::shared::archive_of(&essays);
    let (restarted, scratch) = (dir.path().join("restarted"), dir.path().join("scratch"));
    let graph_errors = |tables: &Path| {
        (read_tables(tables).errors.iter())
            .filter(|e| e.stage == "graph")
            .count()
    };
    index(&source, &restarted, &flags);
    assert!(graph_errors(&restarted) > 0, "no resolution failed");

    for name in &essays[1..] {
        std::fs::remove_file(source.join(name)).unwrap();
    }
    index(&source, &restarted, &flags);
    index(&source, &scratch, &flags);
    assert_eq!(graph_errors(&scratch), 0);
    assert_eq!(
        comparable(&read_tables(&restarted)),
        comparable(&read_tables(&scratch))
    );
}
