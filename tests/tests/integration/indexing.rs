//! `memweave index` end to end over pg-essays: table invariants, determinism,
//! idempotence, formats.

use std::collections::HashSet;
use std::path::Path;

use memweave_pipeline::index::{IndexOptions, Indexer};
use memweave_pipeline::source::{Source, SourceOptions};
use memweave_schemas::Table;
use memweave_tests::{Tables, calls_made, index, read_calls, read_tables, shared_data, stdout};

use super::shared::{PG_ESSAYS_FLAGS, archive_of, essay, pg_essays};

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

/// The call cache appends its calls a flush (a second) at a time; the
/// build's commit merges them, with no retention policy too: left as they
/// came, a first build of 1M short documents kept 3,878 fragments of
/// `llm_calls`, each a look-up of the next round plans over.
#[test]
fn a_build_leaves_its_calls_in_one_fragment() {
    let built = pg_essays();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let fragments = runtime.block_on(async {
        let store = memweave_schemas::store::TableStore::local(&built.tables).unwrap();
        let calls = store.dataset(Table::LlmCalls, None).await.unwrap();
        calls.expect("the build made calls").count_fragments()
    });
    assert_eq!(fragments, 1);
    assert!(read_calls(&built.tables).len() > 1000);
}

/// MemWalker's shape (the invariants of every table are in `memories`): at most
/// Mt children, one leaf per 400-token segment, and long essays two levels deep.
#[test]
fn memwalker_trees_have_the_configured_shape() {
    let t = &pg_essays().read;
    let memwalker: Vec<_> = t
        .tree_nodes
        .iter()
        .filter(|n| n.tree == "memwalker")
        .collect();
    assert!(memwalker.iter().all(|n| n.child_ids.len() <= 8));
    assert!(
        memwalker.iter().any(|n| n.level >= 2),
        "400-token segments give some essays a tree of depth 2"
    );
    let leaves = memwalker.iter().filter(|n| n.level == 0).count();
    let segments = t.segments.iter().filter(|s| s.target_tokens == 400).count();
    assert_eq!(leaves, segments, "one leaf per segment");
    let docs: HashSet<&str> = t.documents.iter().map(|d| d.doc_id.as_str()).collect();
    assert_eq!(docs.len(), 49);
    // The checkpoint names every data table.
    for table in Table::data_tables() {
        assert!(
            t.checkpoint.version_of(table).is_some(),
            "checkpoint lacks {table}"
        );
    }
}

/// Tables compared row by row, ignoring only ingestion times.
pub fn comparable(t: &Tables) -> Tables {
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
fn one_worker_and_two_workers_write_identical_tables() {
    let dir = tempfile::tempdir().unwrap();
    let (one, three) = (dir.path().join("w1"), dir.path().join("w2"));
    let source = shared_data("pg-essays");
    let flags = |workers: &'static str| [&["-w", workers][..], &PG_ESSAYS_FLAGS[..]].concat();
    index(&source, &one, &flags("1"));
    index(&source, &three, &flags("2"));
    let (a, b) = (read_tables(&one), read_tables(&three));
    assert!(!a.segments.is_empty());
    assert_eq!(a.lexicon, a.recounted_lexicon());
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
        stdout(&second_run).contains("(0 new or changed, 49 unchanged, 0 deleted)"),
        "{}",
        stdout(&second_run)
    );
    // Unchanged documents keep versions and ingestion times: the tables are equal.
    assert_eq!(first.documents, second.documents);
    assert_eq!(comparable(&first), comparable(&second));
    let ids: HashSet<&str> = second.segments.iter().map(|s| s.seg_id.as_str()).collect();
    assert_eq!(ids.len(), second.segments.len(), "no duplicate rows");
}

/// An archive copied elsewhere with its memory (its files' times kept, as
/// `cp -a`, `rsync -a` or a restore keep them) is the same archive: its
/// files are known by their keys, so only what changed is read again, even
/// two moves later, while documents still cite the first place.
#[test]
fn an_archive_that_moves_is_read_again_only_where_it_changed() {
    let (dir, _) = archive_of(&["gap.txt", "founders.txt", "apple.txt"]);
    let place = |name: &str| dir.path().join(name);
    std::fs::create_dir(place("first")).unwrap();
    std::fs::rename(place("archive"), place("first/archive")).unwrap();
    let built = index(&place("first/archive"), &place("first/memory"), &[]);
    assert!(calls_made(&built) > 0);
    let copy = |from: &str, to: &str| copy_keeping_times(&place(from), &place(to));
    // Indexes the archive at `place` into the memory beside it, which
    // counts `documents` as new or changed, unchanged and deleted.
    let index_at = |place_name: &str, documents: &str| {
        let output = index(
            &place(&format!("{place_name}/archive")),
            &place(&format!("{place_name}/memory")),
            &[],
        );
        assert!(stdout(&output).contains(documents), "{}", stdout(&output));
        output
    };
    copy("first", "second");
    let moved = index_at("second", "(0 new or changed, 3 unchanged, 0 deleted)");
    assert_eq!(calls_made(&moved), 0);
    // Moved again, and one file edited there.
    copy("second", "third");
    let edited = place("third/archive/gap.txt");
    let text = std::fs::read_to_string(&edited).unwrap();
    std::fs::write(&edited, text + "\nOne more sentence after the move.\n").unwrap();
    index_at("third", "(1 new or changed, 2 unchanged, 0 deleted)");
    let documents = read_tables(&place("third/memory")).rows.documents;
    let cited: Vec<&str> = documents.iter().map(|d| d.source_uri.as_str()).collect();
    assert!(
        cited
            .iter()
            .any(|uri| uri.contains("/third/archive/gap.txt")),
        "{cited:?}"
    );
    // A file gone at the new place is gone from the memory.
    std::fs::remove_file(place("third/archive/apple.txt")).unwrap();
    copy("third", "fourth");
    index_at("fourth", "(0 new or changed, 2 unchanged, 1 deleted)");
}

/// A source of one file (rows of JSON Lines) copied elsewhere with its
/// memory is the same source: the file is its own root, keyed the same
/// wherever it is. Changed there, it is read again, and only its changed
/// rows are built; the others keep citing the first place.
#[test]
fn a_file_that_moves_is_read_again_only_where_it_changed() {
    let dir = tempfile::tempdir().unwrap();
    let place = |name: &str| dir.path().join(name);
    std::fs::create_dir(place("first")).unwrap();
    let rows = |edited: &str| -> String {
        (["gap.txt", "founders.txt"].iter())
            .map(|name| {
                let text = essay(name) + if *name == "gap.txt" { edited } else { "" };
                format!("{}\n", serde_json::json!({"id": name, "text": text}))
            })
            .collect()
    };
    std::fs::write(place("first/rows.jsonl"), rows("")).unwrap();
    let built = index(&place("first/rows.jsonl"), &place("first/memory"), &[]);
    assert!(calls_made(&built) > 0);
    copy_keeping_times(&place("first"), &place("second"));
    let index_second = |documents: &str| {
        let output = index(&place("second/rows.jsonl"), &place("second/memory"), &[]);
        assert!(stdout(&output).contains(documents), "{}", stdout(&output));
    };
    index_second("(0 new or changed, 2 unchanged, 0 deleted)");
    std::fs::write(place("second/rows.jsonl"), rows("\nOne more sentence.")).unwrap();
    index_second("(1 new or changed, 1 unchanged, 0 deleted)");
    let documents = read_tables(&place("second/memory")).rows.documents;
    let cited = |id: &str| {
        let document = documents.iter().find(|d| d.title == id).expect(id);
        document.source_uri.clone()
    };
    assert!(
        cited("gap.txt").contains("/second/"),
        "{}",
        cited("gap.txt")
    );
    assert!(
        cited("founders.txt").contains("/first/"),
        "{}",
        cited("founders.txt")
    );
}

/// Copies `from` to `to` as `cp -a` does, the files' times kept.
fn copy_keeping_times(from: &Path, to: &Path) {
    let status = std::process::Command::new("cp")
        .arg("-a")
        .args([from, to])
        .status()
        .unwrap();
    assert!(status.success());
}

/// Two folders under names share a memory: the same key in both is two
/// documents, a run of one keeps the other's, and a memory built from one
/// unnamed folder takes a name for it by rebuilding from the call cache.
#[test]
fn named_folders_share_a_memory() {
    let (dir, first) = archive_of(&["gap.txt", "founders.txt"]);
    let (tables, second) = (dir.path().join("memory"), dir.path().join("second"));
    std::fs::create_dir(&second).unwrap();
    std::fs::write(second.join("gap.txt"), essay("apple.txt")).unwrap();
    let run = |source: &Path, name: &[&str], counts: &str| {
        let output = index(source, &tables, name);
        assert!(stdout(&output).contains(counts), "{}", stdout(&output));
        output
    };
    // Built without a name, then named: the documents are keyed anew (new
    // ids, the old retracted) and rebuilt from the cache, but for MemWalker
    // parents whose groups (cut where node ids, and so document ids, hash
    // to a boundary) changed.
    let built = run(&first, &[], "(2 new or changed, 0 unchanged, 0 deleted)");
    let unnamed = read_tables(&tables).rows.documents;
    let cached: HashSet<String> = read_calls(&tables)
        .into_iter()
        .map(|c| c.call_key)
        .collect();
    let named = run(
        &first,
        &["--source-name", "first"],
        "(2 new or changed, 0 unchanged, 2 deleted)",
    );
    let asked: Vec<String> = (read_calls(&tables).into_iter())
        .filter(|c| !cached.contains(&c.call_key))
        .map(|c| c.task)
        .collect();
    assert_eq!(asked.len() as u64, calls_made(&named));
    assert!(asked.len() * 10 < calls_made(&built) as usize, "{asked:?}");
    assert!(
        asked.iter().all(|task| task == "compress_summaries"),
        "{asked:?}"
    );
    let renamed = read_tables(&tables).rows.documents;
    assert_eq!(renamed.len(), 2);
    assert!(
        renamed
            .iter()
            .all(|d| unnamed.iter().all(|u| u.doc_id != d.doc_id))
    );
    run(
        &second,
        &["--source-name", "second"],
        "(1 new or changed, 2 unchanged, 0 deleted)",
    );
    let both = read_tables(&tables).rows.documents;
    assert_eq!(both.len(), 3, "gap.txt of each folder, and founders.txt");
    let again = run(
        &first,
        &["--source-name", "first"],
        "(0 new or changed, 3 unchanged, 0 deleted)",
    );
    assert_eq!(calls_made(&again), 0);
    assert_eq!(read_tables(&tables).rows.documents, both);
    // A long-lived indexer (as `--watch` runs one) keeps the other folder's
    // documents through its later rounds too.
    let options = IndexOptions {
        source_name: "first".into(),
        ..IndexOptions::new(first.to_string_lossy(), tables.to_string_lossy())
    };
    let source = Source::open(&options.source, &SourceOptions::default()).unwrap();
    let mut indexer = Indexer::open(&options).unwrap();
    indexer.index_files(&source).unwrap();
    let edited = essay("founders.txt") + "\nOne more line, read by a later round.\n";
    std::fs::write(first.join("founders.txt"), edited).unwrap();
    let later = indexer.index_files(&source).unwrap();
    assert_eq!((later.changed, later.deleted, later.documents), (1, 0, 3));
    drop(indexer);
    // Each folder retracts only its own.
    std::fs::remove_file(second.join("gap.txt")).unwrap();
    run(
        &second,
        &["--source-name", "second"],
        "(0 new or changed, 2 unchanged, 1 deleted)",
    );
    let left = read_tables(&tables).rows.documents;
    assert_eq!(left.len(), 2);
    assert!(
        left.iter()
            .all(|d| d.source_uri.starts_with(&*first.to_string_lossy()))
    );
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
    let before = read_tables(&tables).rows.documents;
    std::fs::write(
        source.join("a.md"),
        "# Notes\n\nThe second version of the notes.\n",
    )
    .unwrap();
    index(&source, &tables, &[]);
    let after = read_tables(&tables).rows.documents;
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
    let html = (t.segments.iter())
        .map(|s| t.segment_text(s))
        .find(|text| text.contains("Keepers trimmed"))
        .expect("html text");
    assert!(html.contains("wicks & wound"));
    assert!(!html.contains('<') && !html.contains("hidden"));
    assert!(t.errors.is_empty(), "{:?}", t.errors);
}

/// Many changed files, all held by one worker (every other file of the
/// listing): the other worker's input keeps pace epoch by epoch, so the busy
/// one's flow control never waits on it forever.
#[test]
fn many_changes_on_one_worker_finish() {
    let dir = tempfile::tempdir().unwrap();
    let (source, tables) = (dir.path().join("src"), dir.path().join("memory"));
    std::fs::create_dir(&source).unwrap();
    let write = |i: usize, word: &str| {
        let text = format!("Note {i} is about the {word} harbour and its lighthouse keepers.");
        std::fs::write(source.join(format!("note{i:03}.txt")), text).unwrap();
    };
    for i in 0..200 {
        write(i, "old");
    }
    let run = |expected: &str| {
        let mut child = std::process::Command::new(memweave_tests::binary("memweave"))
            .args(["--log-format", "json", "index"])
            .arg(&source)
            .arg("--out")
            .arg(&tables)
            .args(["-w", "2", "--memories", "memwalker"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(300);
        while child.try_wait().unwrap().is_none() {
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                panic!("the build did not finish: a worker waits forever");
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        let output = child.wait_with_output().unwrap();
        assert!(output.status.success());
        assert!(stdout(&output).contains(expected), "{}", stdout(&output));
    };
    run("(200 new or changed, 0 unchanged, 0 deleted)");
    for i in (0..200).step_by(2) {
        write(i, "new");
    }
    run("(100 new or changed, 100 unchanged, 0 deleted)");
}
