//! Bad input: every bad file becomes an errors row and a warning, the run goes
//! on; a missing source or an unwritable tables root is a one-line error, exit 2.

use std::collections::HashMap;

use memweave_tests::{index, memweave, read_tables, stderr};

#[test]
fn bad_files_become_error_rows_and_the_rest_is_indexed() {
    let dir = tempfile::tempdir().unwrap();
    let (source, tables) = (dir.path().join("src"), dir.path().join("memory"));
    std::fs::create_dir(&source).unwrap();
    std::fs::write(
        source.join("good.txt"),
        "A good document about harbours. It has two sentences.",
    )
    .unwrap();
    std::fs::write(source.join("latin1.txt"), b"caf\xe9 au lait, not UTF-8").unwrap();
    std::fs::write(
        source.join("binary.txt"),
        b"\x7fELF\x02\x01\x01\x00\x00\x00binary",
    )
    .unwrap();
    std::fs::write(source.join("empty.md"), "  \n\n").unwrap();
    std::os::unix::fs::symlink(dir.path().join("nowhere"), source.join("broken.txt")).unwrap();
    std::fs::write(source.join("photo.png"), b"\x89PNG\r\n").unwrap();
    std::fs::write(
        source.join("bad.jsonl"),
        "{\"id\": \"ok\", \"text\": \"fine\"}\n{broken\n",
    )
    .unwrap();

    let output = index(&source, &tables, &[]);
    let t = read_tables(&tables);
    assert_eq!(t.documents.len(), 2, "good.txt and the good JSON line");

    let kinds: HashMap<String, String> = t
        .errors
        .iter()
        .map(|e| {
            let file = e.source.rsplit('/').next().unwrap().to_string();
            (file, e.kind.clone())
        })
        .collect();
    let expected = [
        ("latin1.txt", "not_utf8"),
        ("binary.txt", "binary"),
        ("empty.md", "empty"),
        ("broken.txt", "unreadable"),
        ("photo.png", "unsupported_type"),
        ("bad.jsonl:2", "bad_record"),
    ];
    for (file, kind) in expected {
        assert_eq!(
            kinds.get(file).map(String::as_str),
            Some(kind),
            "{file} in {kinds:?}"
        );
    }
    assert_eq!(t.errors.len(), expected.len());
    assert!(
        t.errors
            .iter()
            .all(|e| e.stage == "ingest" && !e.message.is_empty())
    );

    let log = stderr(&output);
    for (file, _) in expected {
        let name = file.split(':').next().unwrap();
        assert!(
            log.lines().any(|l| l.contains("WARN") && l.contains(name)),
            "no warning names {name}:\n{log}"
        );
    }
    let summary = String::from_utf8_lossy(&output.stdout);
    assert!(summary.contains("errors      6"), "{summary}");
}

#[test]
fn a_missing_source_is_a_one_line_error_with_exit_code_2() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-dir");
    let output = memweave([
        "index",
        missing.to_str().unwrap(),
        "--out",
        dir.path().join("m").to_str().unwrap(),
    ]);
    assert_eq!(output.status.code(), Some(2));
    let err = stderr(&output);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.contains("no-such-dir") && err.contains("does not exist"),
        "{err}"
    );
    assert!(
        !dir.path().join("m").exists(),
        "nothing written for a bad source"
    );
}

#[test]
fn unwritable_tables_are_a_one_line_error_with_exit_code_2() {
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("a.txt");
    std::fs::write(&source, "Some text.").unwrap();
    let blocker = dir.path().join("blocker");
    std::fs::write(&blocker, "a file where a directory should be").unwrap();
    let output = memweave([
        "index",
        source.to_str().unwrap(),
        "--out",
        blocker.join("tables").to_str().unwrap(),
    ]);
    assert_eq!(output.status.code(), Some(2));
    let err = stderr(&output);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("blocker"), "{err}");
}

#[test]
fn asking_before_indexing_says_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let output = memweave(["ask", "anything?", "--tables", dir.path().to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("memweave index"),
        "{}",
        stderr(&output)
    );
}

/// A memory an older memweave wrote (its checkpoint names no lexicon) is
/// neither appended to nor read: both say to index into a new directory,
/// exit 2, and leave its tables as they were.
#[test]
fn an_older_memory_is_refused_untouched_with_exit_code_2() {
    let dir = tempfile::tempdir().unwrap();
    let (source, tables) = (dir.path().join("src"), dir.path().join("memory"));
    std::fs::create_dir(&source).unwrap();
    std::fs::write(source.join("a.txt"), "Harbours shelter boats. Tides rise.").unwrap();
    index(&source, &tables, &[]);
    let store = memweave_schemas::TableStore::local(&tables).unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let older = runtime.block_on(async {
        let current = store.latest_checkpoint().await.unwrap().unwrap();
        let versions = current
            .table_versions
            .iter()
            .filter(|v| v.table != memweave_schemas::Table::Lexicon.name())
            .cloned()
            .collect();
        store
            .commit_checkpoint(
                current.source_positions.clone(),
                versions,
                current.vectors(),
            )
            .await
            .unwrap()
    });
    std::fs::write(source.join("b.txt"), "Lighthouses warn ships.").unwrap();

    let tables_arg = tables.to_str().unwrap();
    let indexed = memweave(["index", source.to_str().unwrap(), "--out", tables_arg]);
    let asked = memweave(["ask", "Why do tides rise?", "--tables", tables_arg]);
    for (command, output) in [("index", &indexed), ("ask", &asked)] {
        assert_eq!(
            output.status.code(),
            Some(2),
            "{command}: {}",
            stderr(output)
        );
        let err = stderr(output);
        assert!(
            err.contains("older memweave") && err.contains("--out NEW_TABLES"),
            "{command}: {err}"
        );
    }
    let latest = runtime
        .block_on(store.latest_checkpoint())
        .unwrap()
        .unwrap();
    assert_eq!(latest, older, "the older memory was left as it was");
}
