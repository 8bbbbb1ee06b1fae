//! Object-store sources, through a real S3-protocol server.

use memweave_tests::{S3_SECRET_KEY, S3Server, index, read_tables, stderr, stdout};

use super::shared::{archive_of, essay};

/// The objects under an S3 prefix are indexed through the S3 protocol, keyed
/// relative to the prefix (the ids a local copy of the folder gets). A second
/// run after adding, changing and deleting objects leaves exactly the objects
/// there now: the changed one at its next version, the deleted one gone.
#[test]
fn an_s3_prefix_is_indexed_and_follows_new_changed_and_deleted_objects() {
    let s3 = S3Server::start(&["archive"]);
    let put = |key: &str, text: &str| {
        let path = s3.object_path("archive", key);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    };
    put("essays/gap.txt", &essay("gap.txt"));
    put("essays/2004/founders.txt", &essay("founders.txt"));
    put("essays/submarine.txt", &essay("submarine.txt"));
    put("essays/scan.bin", "\u{1}\u{2}");
    put("elsewhere/want.txt", &essay("want.txt"));
    let dir = tempfile::tempdir().unwrap();
    let tables = dir.path().join("memory");
    let url = "s3://archive/essays";

    let first = s3.index(url, &tables, S3_SECRET_KEY);
    assert!(first.status.success(), "{}", stderr(&first));
    let t = read_tables(&tables);
    let mut uris: Vec<&str> = t.documents.iter().map(|d| d.source_uri.as_str()).collect();
    uris.sort();
    assert_eq!(
        uris,
        [
            "s3://archive/essays/2004/founders.txt",
            "s3://archive/essays/gap.txt",
            "s3://archive/essays/submarine.txt"
        ]
    );
    assert!(
        t.errors
            .iter()
            .any(|e| e.kind == "unsupported_type" && e.source == "s3://archive/essays/scan.bin"),
        "{:?}",
        t.errors
    );
    let local = index(
        &s3.root.path().join("archive/essays"),
        &dir.path().join("local"),
        &[],
    );
    assert!(local.status.success());
    let ids = |docs: &[memweave_schemas::DocumentRow]| {
        let mut ids: Vec<String> = docs.iter().map(|d| d.doc_id.clone()).collect();
        ids.sort();
        ids
    };
    assert_eq!(
        ids(&t.documents),
        ids(&read_tables(&dir.path().join("local")).documents)
    );
    let version_of = |docs: &[memweave_schemas::DocumentRow], uri: &str| {
        docs.iter().find(|d| d.source_uri == uri).map(|d| d.version)
    };

    put(
        "essays/gap.txt",
        &format!("{}\nA new closing line.", essay("gap.txt")),
    );
    std::fs::remove_file(s3.object_path("archive", "essays/submarine.txt")).unwrap();
    put("essays/vw.txt", &essay("vw.txt"));
    let second = s3.index(url, &tables, S3_SECRET_KEY);
    assert!(second.status.success(), "{}", stderr(&second));
    assert!(
        stdout(&second).contains("(2 new or changed, 1 unchanged, 1 deleted)"),
        "{}",
        stdout(&second)
    );
    let after = read_tables(&tables);
    assert_eq!(after.documents.len(), 3);
    assert_eq!(
        version_of(&after.documents, "s3://archive/essays/gap.txt"),
        Some(2)
    );
    assert_eq!(
        version_of(&after.documents, "s3://archive/essays/2004/founders.txt"),
        Some(1)
    );
    assert_eq!(
        version_of(&after.documents, "s3://archive/essays/vw.txt"),
        Some(1)
    );
    assert_eq!(
        version_of(&after.documents, "s3://archive/essays/submarine.txt"),
        None
    );
    let submarine = t
        .documents
        .iter()
        .find(|d| d.source_uri.ends_with("submarine.txt"))
        .unwrap();
    assert!(
        after.segments.iter().all(|s| s.doc_id != submarine.doc_id),
        "the deleted document's segments are gone"
    );
    let positions: serde_json::Value =
        serde_json::from_str(&after.checkpoint.source_positions).unwrap();
    assert_eq!(
        positions["versions"].as_object().unwrap().len(),
        3,
        "{positions}"
    );
}

/// Credentials the server refuses: a one-line error naming the source, and
/// nothing committed.
#[test]
fn refused_credentials_are_a_clear_error() {
    let s3 = S3Server::start(&["archive"]);
    std::fs::write(s3.object_path("archive", "gap.txt"), essay("gap.txt")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let tables = dir.path().join("memory");
    let output = s3.index("s3://archive", &tables, "not-the-secret");
    assert!(!output.status.success());
    let message = stderr(&output);
    assert!(message.contains("listing s3://archive"), "{message}");
    assert!(!tables.join("checkpoints.lance").exists());
}

/// `--watch` indexes, then indexes again when the source's listing changes, and
/// stops on SIGTERM with exit code 130.
#[test]
fn watch_indexes_again_when_a_file_arrives_and_stops_on_sigterm() {
    let (dir, source) = archive_of(&["gap.txt"]);
    let tables = dir.path().join("memory");
    let mut child = std::process::Command::new(memweave_tests::binary("memweave"))
        .args(["--log-format", "json", "index"])
        .arg(&source)
        .arg("--out")
        .arg(&tables)
        .args(["--watch", "1"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut printed = memweave_tests::Printed::of(&mut child);
    printed.wait_for("committed epoch 1");
    assert_eq!(read_tables(&tables).documents.len(), 1);
    std::fs::write(source.join("vw.txt"), essay("vw.txt")).unwrap();
    printed.wait_for("committed epoch 2");
    let after = read_tables(&tables);
    assert_eq!(after.checkpoint.epoch, 2);
    assert_eq!(after.documents.len(), 2);
    let stopped = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(stopped.success());
    assert_eq!(child.wait().unwrap().code(), Some(130));
    assert_eq!(
        read_tables(&tables).checkpoint.epoch,
        2,
        "nothing more committed"
    );
}
