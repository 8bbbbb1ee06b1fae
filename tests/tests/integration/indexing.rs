//! `memweave index` end to end over pg-essays: table invariants, determinism,
//! idempotence, formats.

use std::collections::{HashMap, HashSet};

use memweave_schemas::{DocumentRow, Table};
use memweave_tests::{Tables, index, read_tables, shared_data, stdout};

use super::shared::pg_essays;

#[test]
fn summary_names_every_count() {
    let built = pg_essays();
    let summary = &built.summary;
    for needle in [
        "documents   49",
        "segments",
        "tree nodes",
        "pages",
        "errors      0",
        "done in",
    ] {
        assert!(
            summary.contains(needle),
            "summary lacks {needle:?}:\n{summary}"
        );
    }
    assert!(summary.contains(&format!("segments    {}", built.read.segments.len())));
    assert!(summary.contains(&format!("pages       {}", built.read.pages.len())));
}

#[test]
fn every_row_hangs_together() {
    let t = &pg_essays().read;
    assert_eq!(t.documents.len(), 49);
    let docs: HashMap<&str, &DocumentRow> =
        t.documents.iter().map(|d| (d.doc_id.as_str(), d)).collect();

    // Every segment's document exists; segments tile their document.
    let mut by_doc: HashMap<&str, Vec<_>> = HashMap::new();
    for s in &t.segments {
        assert!(
            docs.contains_key(s.doc_id.as_str()),
            "segment {} has no document",
            s.seg_id
        );
        by_doc
            .entry(s.doc_id.as_str())
            .or_default()
            .push((s.ordinal, s.start_char, s.end_char));
    }
    for (doc, mut spans) in by_doc {
        spans.sort();
        assert_eq!(spans[0].1, 0);
        assert_eq!(spans.last().unwrap().2, docs[doc].n_chars);
        for (i, pair) in spans.windows(2).enumerate() {
            assert_eq!(pair[0].2, pair[1].1, "gap or overlap in {doc}");
            assert_eq!(pair[0].0 as usize, i);
        }
    }

    // Exactly one root per document; parents exist and list their children.
    let nodes: HashMap<&str, _> = t
        .tree_nodes
        .iter()
        .map(|n| (n.node_id.as_str(), n))
        .collect();
    let mut roots: HashMap<&str, usize> = HashMap::new();
    let mut deeper = 0;
    for n in &t.tree_nodes {
        let doc = n.doc_id.as_deref().expect("per-document trees");
        match &n.parent_id {
            None => *roots.entry(doc).or_insert(0) += 1,
            Some(p) => {
                let parent = nodes
                    .get(p.as_str())
                    .unwrap_or_else(|| panic!("parent {p} missing"));
                assert!(
                    parent.child_ids.contains(&n.node_id),
                    "{p} does not list {}",
                    n.node_id
                );
                assert_eq!(parent.doc_id, n.doc_id);
                assert_eq!(parent.level, n.level + 1);
            }
        }
        assert!(n.child_ids.len() <= 8);
        for c in &n.child_ids {
            assert_eq!(
                nodes[c.as_str()].parent_id.as_deref(),
                Some(n.node_id.as_str())
            );
        }
        if n.level >= 2 {
            deeper += 1;
        }
        assert!(!n.summary.is_empty());
    }
    assert_eq!(roots.len(), 49);
    assert!(roots.values().all(|&c| c == 1), "{roots:?}");
    assert!(
        deeper > 0,
        "400-token segments give some essays a tree of depth 2"
    );
    let leaves = t.tree_nodes.iter().filter(|n| n.level == 0).count();
    assert_eq!(leaves, t.segments.len(), "one leaf per segment");

    // Pages cover each document without gaps or overlaps; gists are shorter.
    let mut pages: HashMap<&str, Vec<_>> = HashMap::new();
    for p in &t.pages {
        assert!(
            p.gist.len() < p.text.len(),
            "gist of {} is not shorter",
            p.page_id
        );
        assert!(!p.gist.is_empty());
        pages
            .entry(p.doc_id.as_str())
            .or_default()
            .push((p.ordinal, p.start_char, p.end_char));
    }
    assert_eq!(pages.len(), 49);
    for (doc, mut spans) in pages {
        spans.sort();
        assert_eq!(spans[0].1, 0);
        assert_eq!(spans.last().unwrap().2, docs[doc].n_chars);
        for pair in spans.windows(2) {
            assert_eq!(pair[0].2, pair[1].1, "gap or overlap in pages of {doc}");
        }
    }

    // The checkpoint names every data table.
    for table in Table::data_tables() {
        assert!(
            t.checkpoint.version_of(table).is_some(),
            "checkpoint lacks {table}"
        );
    }
}

/// Tables compared row by row, ignoring only ingestion times.
fn comparable(t: &Tables) -> Tables {
    let mut t = t.clone();
    for d in &mut t.documents {
        d.ingested_at = 0;
    }
    t.checkpoint.created_at = 0;
    t.checkpoint.epoch = 0;
    t.checkpoint.table_versions.clear();
    t.checkpoint.source_positions.clear();
    t
}

#[test]
fn one_worker_and_three_workers_write_identical_tables() {
    let dir = tempfile::tempdir().unwrap();
    let (one, three) = (dir.path().join("w1"), dir.path().join("w3"));
    let source = shared_data("pg-essays");
    index(&source, &one, &["-w", "1", "--segment-tokens", "400"]);
    index(&source, &three, &["-w", "3", "--segment-tokens", "400"]);
    let (a, b) = (read_tables(&one), read_tables(&three));
    assert!(!a.segments.is_empty());
    assert_eq!(comparable(&a), comparable(&b));
    assert_eq!(
        comparable(&a),
        comparable(&pg_essays().read),
        "matches the shared build (default workers)"
    );
}

#[test]
fn reindexing_the_same_source_is_idempotent() {
    let dir = tempfile::tempdir().unwrap();
    let tables = dir.path().join("memory");
    let source = shared_data("pg-essays");
    index(&source, &tables, &[]);
    let first = read_tables(&tables);
    let second_run = index(&source, &tables, &[]);
    let second = read_tables(&tables);
    assert_eq!(second.checkpoint.epoch, first.checkpoint.epoch + 1);
    assert!(
        stdout(&second_run).contains("(0 new or changed, 49 unchanged)"),
        "{}",
        stdout(&second_run)
    );
    // Unchanged documents keep versions and ingestion times: the tables are equal.
    assert_eq!(first.documents, second.documents);
    assert_eq!(comparable(&first), comparable(&second));
    let ids: HashSet<&str> = second.segments.iter().map(|s| s.seg_id.as_str()).collect();
    assert_eq!(ids.len(), second.segments.len(), "no duplicate rows");
}

#[test]
fn an_edited_document_gets_the_next_version_and_keeps_its_id() {
    let dir = tempfile::tempdir().unwrap();
    let (source, tables) = (dir.path().join("src"), dir.path().join("memory"));
    std::fs::create_dir(&source).unwrap();
    std::fs::write(
        source.join("a.md"),
        "# Notes\n\nThe first version of the notes.\n",
    )
    .unwrap();
    index(&source, &tables, &[]);
    let before = read_tables(&tables).documents;
    std::fs::write(
        source.join("a.md"),
        "# Notes\n\nThe second version of the notes.\n",
    )
    .unwrap();
    index(&source, &tables, &[]);
    let after = read_tables(&tables).documents;
    assert_eq!(before.len(), 1);
    assert_eq!(after.len(), 1);
    assert_eq!(before[0].doc_id, after[0].doc_id);
    assert_eq!((before[0].version, after[0].version), (1, 2));
    assert_ne!(before[0].content_hash, after[0].content_hash);
    assert_eq!(after[0].title, "Notes");
}

#[test]
fn html_markdown_and_json_lines_become_documents() {
    let dir = tempfile::tempdir().unwrap();
    let (source, tables) = (dir.path().join("src"), dir.path().join("memory"));
    std::fs::create_dir_all(source.join("nested")).unwrap();
    std::fs::write(
        source.join("page.html"),
        "<html><head><title>Lighthouses</title><script>var hidden = 1;</script></head>\
         <body><h1>Keepers</h1><p>Keepers trimmed the wicks &amp; wound the clockwork.</p></body></html>",
    )
    .unwrap();
    std::fs::write(
        source.join("nested/notes.md"),
        "# Tides\n\nTides follow the moon.\n",
    )
    .unwrap();
    std::fs::write(
        source.join("records.jsonl"),
        "{\"id\": \"r1\", \"text\": \"Record one speaks of harbours.\"}\n{\"id\": 2, \"text\": \"Record two speaks of ships.\"}\n",
    )
    .unwrap();
    index(&source, &tables, &[]);
    let t = read_tables(&tables);
    let titles: HashSet<&str> = t.documents.iter().map(|d| d.title.as_str()).collect();
    assert_eq!(titles, HashSet::from(["Lighthouses", "Tides", "r1", "2"]));
    let html = t
        .segments
        .iter()
        .find(|s| s.text.contains("Keepers trimmed"))
        .expect("html text");
    assert!(html.text.contains("wicks & wound"));
    assert!(!html.text.contains('<') && !html.text.contains("hidden"));
    assert!(t.errors.is_empty(), "{:?}", t.errors);
}
