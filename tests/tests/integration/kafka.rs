//! Kafka sources, through a real Kafka-protocol broker (tansu).

use std::collections::HashSet;
use std::path::Path;

use memweave_tests::{
    KafkaBroker, Tables, calls_made, index, index_cluster, memweave, read_calls, read_tables,
    stderr, stdout, try_read_tables,
};

use super::indexing::comparable;
use super::shared::essay;

fn upsert(doc_id: &str, text: &str) -> (String, String) {
    let message = serde_json::json!({
        "doc_id": doc_id, "op": "upsert", "text": text, "metadata": {"title": doc_id}
    });
    (doc_id.to_string(), message.to_string())
}

fn delete(doc_id: &str) -> (String, String) {
    let message = serde_json::json!({"doc_id": doc_id, "op": "delete"});
    (doc_id.to_string(), message.to_string())
}

fn produce(broker: &KafkaBroker, messages: &[(String, String)]) {
    let refs: Vec<(&str, String)> = messages
        .iter()
        .map(|(k, m)| (k.as_str(), m.clone()))
        .collect();
    broker.produce("docs", &refs);
}

fn index_topic(broker: &KafkaBroker, tables: &Path) -> std::process::Output {
    let url = format!("kafka://{}/docs", broker.brokers);
    // The uri messages point into the tables' folder.
    let allowed = tables.parent().unwrap().to_string_lossy().into_owned();
    let args = ["index", &url, "--group", "indexer", "--allow-uri", &allowed];
    let output = memweave(
        args.iter()
            .map(|a| a.to_string())
            .chain(["--out".to_string(), tables.to_string_lossy().into_owned()]),
    );
    assert!(output.status.success(), "{}", stderr(&output));
    output
}

/// The per-document memories, which depend on the documents' ids and texts
/// alone (not on where they came from).
fn memories(t: &Tables) -> impl PartialEq + std::fmt::Debug {
    (
        t.segments.clone(),
        t.tree_nodes.clone(),
        t.pages.clone(),
        t.entities.clone(),
        t.relations.clone(),
        t.name_states.clone(),
        t.doc_states.clone(),
    )
}

/// Upserts (inline text and by uri), deletes and malformed messages flow from
/// the topic into the tables; a second run resumes at the checkpoint's offsets,
/// absorbs an edit and a delete, and leaves the memories a build of the same
/// texts from files gives. The consumer group's offsets follow each commit.
#[test]
fn kafka_upserts_deletes_and_bad_messages_reach_the_tables() {
    let broker = KafkaBroker::start();
    broker.create_topic("docs", 3);
    let dir = tempfile::tempdir().unwrap();
    let tables = dir.path().join("memory");
    let want = dir.path().join("want.md");
    std::fs::write(&want, essay("want.txt")).unwrap();
    let by_uri = serde_json::json!({
        "doc_id": "want.md", "op": "upsert", "uri": want.to_string_lossy()
    });
    produce(
        &broker,
        &[
            upsert("gap.txt", &essay("gap.txt")),
            upsert("founders.txt", &essay("founders.txt")),
            ("want.md".into(), by_uri.to_string()),
            ("junk".into(), "this is not JSON".into()),
            ("x".into(), r#"{"doc_id": "x", "op": "rename"}"#.into()),
            upsert("short-lived", "A document deleted right after it arrived."),
            delete("short-lived"),
        ],
    );
    index_topic(&broker, &tables);
    let first = read_tables(&tables);
    let mut titles: Vec<&str> = first.documents.iter().map(|d| d.title.as_str()).collect();
    titles.sort();
    assert_eq!(titles, ["founders.txt", "gap.txt", "want.md"]);
    assert!(
        first
            .documents
            .iter()
            .all(|d| d.source_uri.starts_with("kafka:docs/"))
    );
    let bad: Vec<(&str, &str)> = first
        .errors
        .iter()
        .map(|e| (e.kind.as_str(), e.source.as_str()))
        .collect();
    assert_eq!(bad.len(), 2, "{bad:?}");
    assert!(bad.iter().all(|(kind, source)| *kind == "bad_message"
        && source.starts_with("kafka:docs/")
        && source.split('/').count() == 3));
    let positions: serde_json::Value =
        serde_json::from_str(&first.checkpoint.source_positions).unwrap();
    let offsets = positions["offsets"].as_object().unwrap();
    let consumed: i64 = offsets.values().map(|o| o.as_i64().unwrap()).sum();
    assert_eq!(consumed, 7, "{positions}");
    let committed = broker.committed("indexer", "docs", 3);
    for (p, o) in offsets {
        let p: i32 = p.parse().unwrap();
        let at = committed.get(&p).copied().unwrap_or(0);
        assert_eq!(at, o.as_i64().unwrap(), "partition {p}");
    }
    let calls_before: HashSet<String> = read_calls(&tables)
        .into_iter()
        .map(|c| c.call_key)
        .collect();

    // An edit and a delete; the run reads only the new messages.
    let edited = essay("gap.txt").replacen("money", "a great deal of money", 1);
    produce(
        &broker,
        &[upsert("gap.txt", &edited), delete("founders.txt")],
    );
    let run = index_topic(&broker, &tables);
    assert!(stdout(&run).contains("(2 messages)"), "{}", stdout(&run));
    // A new process: the unchanged document's state is restored, not rebuilt.
    assert!(stdout(&run).contains("restored"), "{}", stdout(&run));
    let second = read_tables(&tables);
    let docs: Vec<(&str, u64)> = {
        let mut d: Vec<(&str, u64)> = second
            .documents
            .iter()
            .map(|d| (d.title.as_str(), d.version))
            .collect();
        d.sort();
        d
    };
    assert_eq!(docs, [("gap.txt", 2), ("want.md", 1)]);
    assert_eq!(
        second.errors, first.errors,
        "the bad messages stay reported"
    );
    let want_id = &second
        .documents
        .iter()
        .find(|d| d.title == "want.md")
        .unwrap()
        .doc_id;
    assert!(
        read_calls(&tables)
            .iter()
            .filter(|c| !calls_before.contains(&c.call_key))
            .all(|c| c.doc_id.as_ref() != Some(want_id)),
        "the unchanged document cost model calls"
    );

    // The same texts as files: the same ids, so the same memories.
    let files = dir.path().join("files");
    std::fs::create_dir(&files).unwrap();
    std::fs::write(files.join("gap.txt"), &edited).unwrap();
    std::fs::write(files.join("want.md"), essay("want.txt")).unwrap();
    let scratch = dir.path().join("scratch");
    index(&files, &scratch, &[]);
    let scratch = read_tables(&scratch);
    assert_eq!(memories(&second), memories(&scratch));

    // Nothing new on the topic: a new process reads no message, writes no
    // row, and the memories stay as they were.
    let idle = index_topic(&broker, &tables);
    assert!(stdout(&idle).contains("(0 messages)"), "{}", stdout(&idle));
    assert!(
        stdout(&idle).contains("written     0 rows"),
        "{}",
        stdout(&idle)
    );
    assert_eq!(memories(&read_tables(&tables)), memories(&second));
}

/// A folder and a topic share one memory under their names: each run keeps
/// the other source's documents (it neither retracts nor rebuilds them),
/// the same key in both is two documents, and the checkpoint records where
/// each source stands.
#[test]
fn named_sources_share_a_memory_and_leave_each_other_alone() {
    let broker = KafkaBroker::start();
    broker.create_topic("docs", 2);
    let dir = tempfile::tempdir().unwrap();
    let (wiki, tables) = (dir.path().join("wiki"), dir.path().join("memory"));
    std::fs::create_dir(&wiki).unwrap();
    for name in ["gap.txt", "founders.txt"] {
        std::fs::write(wiki.join(name), essay(name)).unwrap();
    }
    let run = |source: &str, name: &str, counts: &str| {
        let output = index(Path::new(source), &tables, &["--source-name", name]);
        assert!(stdout(&output).contains(counts), "{}", stdout(&output));
        output
    };
    let topic = format!("kafka://{}/docs", broker.brokers);
    let wiki = wiki.to_string_lossy().into_owned();
    run(&wiki, "wiki", "(2 new or changed, 0 unchanged, 0 deleted)");
    // The topic holds a document under a key the folder holds too.
    produce(
        &broker,
        &[
            upsert("gap.txt", &essay("apple.txt")),
            upsert("want.txt", &essay("want.txt")),
        ],
    );
    run(&topic, "mail", "(2 messages)");
    let both = read_tables(&tables);
    assert_eq!(
        keys(&both),
        [
            ("founders.txt", false),
            ("gap.txt", false),
            ("gap.txt", true),
            ("want.txt", true)
        ]
    );
    let positions: serde_json::Value =
        serde_json::from_str(&both.checkpoint.source_positions).unwrap();
    assert_eq!(positions["sources"]["wiki"]["source"], wiki.as_str());
    assert_eq!(positions["sources"]["mail"]["source"], "kafka:docs");

    // The folder again, unchanged: nothing of the topic's is touched.
    let again = run(&wiki, "wiki", "(0 new or changed, 4 unchanged, 0 deleted)");
    assert_eq!(calls_made(&again), 0);
    assert_eq!(read_tables(&tables).documents, both.documents);
    // A file removed from the folder is one document gone, not three.
    std::fs::remove_file(Path::new(&wiki).join("gap.txt")).unwrap();
    run(&wiki, "wiki", "(0 new or changed, 3 unchanged, 1 deleted)");
    // The topic deletes its own gap.txt and no other.
    produce(&broker, &[delete("gap.txt")]);
    run(&topic, "mail", "(1 messages)");
    let last = read_tables(&tables);
    assert_eq!(keys(&last), [("founders.txt", false), ("want.txt", true)]);
    let documents: HashSet<&str> = last.documents.iter().map(|d| d.doc_id.as_str()).collect();
    let built: HashSet<&str> = (last.segments.iter().map(|s| s.doc_id.as_str()))
        .chain(last.pages.iter().map(|p| p.doc_id.as_str()))
        .collect();
    assert_eq!(built, documents, "each document's rows, and no other's");
    // The topic under another name would key its documents anew: refused.
    let tables = tables.to_string_lossy();
    let renamed = memweave([
        "index",
        &topic,
        "--out",
        &tables,
        "--source-name",
        "letters",
    ]);
    assert_eq!(renamed.status.code(), Some(2), "{}", stderr(&renamed));
    assert!(
        stderr(&renamed).contains("under another source name"),
        "{}",
        stderr(&renamed)
    );
}

/// A message's `acl` field (a list, or a comma-separated string) labels
/// its document, one without gets `--acl-default`, and a bad one is a
/// `bad_message` error; the same text sent again with other labels is a new
/// version built from the call cache, without a model call.
#[test]
fn messages_carry_their_labels_and_a_relabel_costs_no_call() {
    let broker = KafkaBroker::start();
    broker.create_topic("docs", 1);
    let dir = tempfile::tempdir().unwrap();
    let tables = dir.path().join("memory");
    let labelled = |doc_id: &str, text: &str, acl: serde_json::Value| {
        let message =
            serde_json::json!({"doc_id": doc_id, "op": "upsert", "text": text, "acl": acl});
        (doc_id.to_string(), message.to_string())
    };
    produce(
        &broker,
        &[
            labelled(
                "a",
                &essay("gap.txt"),
                serde_json::json!(["tenant-a", "shared"]),
            ),
            labelled(
                "b",
                &essay("want.txt"),
                serde_json::json!("tenant-b, shared"),
            ),
            upsert("c", &essay("love.txt")),
            labelled("d", "A short note.", serde_json::json!([["nested"]])),
        ],
    );
    let topic = format!("kafka://{}/docs", broker.brokers);
    let run = || index(Path::new(&topic), &tables, &["--acl-default", "staff"]);
    run();
    let acl = |t: &Tables| -> Vec<(String, Vec<String>, u64)> {
        let mut acl: Vec<_> = (t.documents.iter())
            .map(|d| (d.title.clone(), d.acl.clone(), d.version))
            .collect();
        acl.sort();
        acl
    };
    let strings =
        |labels: &[&str]| -> Vec<String> { labels.iter().map(|l| l.to_string()).collect() };
    let first = read_tables(&tables);
    assert_eq!(
        acl(&first),
        [
            ("a".into(), strings(&["shared", "tenant-a"]), 1),
            ("b".into(), strings(&["shared", "tenant-b"]), 1),
            ("c".into(), strings(&["staff"]), 1),
        ]
    );
    let error = (first.errors.iter())
        .find(|e| e.doc_id.is_some() && e.message.contains("\"acl\""))
        .unwrap_or_else(|| panic!("no error for d: {:?}", first.errors));
    assert_eq!(error.kind, "bad_message");

    produce(
        &broker,
        &[labelled(
            "a",
            &essay("gap.txt"),
            serde_json::json!(["tenant-a"]),
        )],
    );
    let again = run();
    assert_eq!(calls_made(&again), 0, "{}", stdout(&again));
    let relabelled = read_tables(&tables);
    assert_eq!(acl(&relabelled)[0], ("a".into(), strings(&["tenant-a"]), 2));
    assert_eq!(acl(&relabelled)[1..], acl(&first)[1..]);
}

/// Each document's key (a file's name, a message's title, which is its
/// `doc_id` here) and whether it came from the topic, in order.
fn keys(t: &Tables) -> Vec<(&str, bool)> {
    let mut keys: Vec<(&str, bool)> = (t.documents.iter())
        .map(|d| match d.source_uri.starts_with("kafka:") {
            true => (d.title.as_str(), true),
            false => (d.source_uri.rsplit('/').next().unwrap(), false),
        })
        .collect();
    keys.sort();
    keys
}

/// A topic that does not exist is a one-line usage error.
#[test]
fn a_missing_topic_is_a_clear_error() {
    let broker = KafkaBroker::start();
    let dir = tempfile::tempdir().unwrap();
    let url = format!("kafka://{}/nowhere", broker.brokers);
    let output = memweave([
        "index",
        &url,
        "--out",
        dir.path().join("m").to_str().unwrap(),
    ]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("topic nowhere does not exist"),
        "{}",
        stderr(&output)
    );
}

/// `--follow` keeps consuming: a message produced while it runs reaches a
/// checkpoint, and SIGTERM stops it with 130.
#[test]
fn follow_absorbs_messages_as_they_arrive_and_stops_on_sigterm() {
    let broker = KafkaBroker::start();
    broker.create_topic("docs", 1);
    produce(&broker, &[upsert("gap.txt", &essay("gap.txt"))]);
    let dir = tempfile::tempdir().unwrap();
    let tables = dir.path().join("memory");
    let url = format!("kafka://{}/docs", broker.brokers);
    let mut child = std::process::Command::new(memweave_tests::binary("memweave"))
        .args(["--log-format", "json", "index", &url, "--follow", "--out"])
        .arg(&tables)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let documents =
        |tables: &Path| -> usize { try_read_tables(tables).map_or(0, |t| t.documents.len()) };
    let wait_for = |count: usize| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
        while documents(&tables) != count {
            assert!(
                std::time::Instant::now() < deadline,
                "never saw {count} documents"
            );
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
    };
    wait_for(1);
    produce(&broker, &[upsert("founders.txt", &essay("founders.txt"))]);
    wait_for(2);
    let pid = child.id().to_string();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(killed.success());
    assert_eq!(child.wait().unwrap().code(), Some(130));
}

/// Two processes consume a topic as one does, in rounds of at most two
/// messages against the one's thousand: the same tables after a first run and
/// after a second that absorbs an edit and a delete.
#[test]
fn a_cluster_consumes_a_topic_as_one_process_does() {
    let broker = KafkaBroker::start();
    broker.create_topic("docs", 2);
    let dir = tempfile::tempdir().unwrap();
    let (one, two) = (dir.path().join("one"), dir.path().join("two"));
    let url = format!("kafka://{}/docs", broker.brokers);
    // `rounds`: how many rounds of two messages the cluster's run takes.
    let run_both = |rounds: usize| {
        index_topic(&broker, &one);
        let args: Vec<String> = [url.as_str(), "--group", "cluster", "--out"]
            .iter()
            .map(|a| a.to_string())
            .chain([two.display().to_string(), "-w".into(), "1".into()])
            .chain(["--round-messages".into(), "2".into()])
            .collect();
        let outputs = index_cluster(dir.path(), 2, &args);
        assert!(calls_made(&outputs[1]) > 0, "{}", stdout(&outputs[1]));
        let printed = stdout(&outputs[0]);
        assert_eq!(printed.matches("(2 messages)").count(), rounds, "{printed}");
        let (a, b) = (read_tables(&one), read_tables(&two));
        assert_eq!(comparable(&a), comparable(&b));
        b
    };
    produce(
        &broker,
        &[
            upsert("gap.txt", &essay("gap.txt")),
            upsert("founders.txt", &essay("founders.txt")),
            upsert("want.txt", &essay("want.txt")),
            ("junk".into(), "this is not JSON".into()),
        ],
    );
    let first = run_both(2);
    assert_eq!(first.documents.len(), 3);
    assert_eq!(first.errors.len(), 1);
    let edited = essay("gap.txt").replacen("money", "a great deal of money", 1);
    produce(
        &broker,
        &[upsert("gap.txt", &edited), delete("founders.txt")],
    );
    let second = run_both(1);
    let mut docs: Vec<(&str, u64)> = second
        .documents
        .iter()
        .map(|d| (d.title.as_str(), d.version))
        .collect();
    docs.sort();
    assert_eq!(docs, [("gap.txt", 2), ("want.txt", 1)]);
}
