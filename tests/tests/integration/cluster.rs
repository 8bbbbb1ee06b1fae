//! Several indexing processes, one dataflow (timely's cluster mode).

use std::process::Command;

use memweave_tests::{
    Printed, binary, calls_made, index, index_cluster, read_tables, spawn_cluster, stderr, stdout,
};

use super::indexing::comparable;
use super::shared::{archive_of, essay};

fn args(source: &std::path::Path, tables: &std::path::Path, extra: &[&str]) -> Vec<String> {
    let mut args = vec![
        source.display().to_string(),
        "--out".into(),
        tables.display().to_string(),
    ];
    args.extend(extra.iter().map(|a| a.to_string()));
    args
}

/// Two processes of one worker each, connected over loopback, write the tables
/// one process with two workers writes; the second process does its share of
/// the model calls.
#[test]
fn one_process_and_two_processes_write_identical_tables() {
    let (dir, archive) = archive_of(&["gap.txt", "founders.txt", "want.txt", "submarine.txt"]);
    let (one, two) = (dir.path().join("one"), dir.path().join("two"));
    index(&archive, &one, &["-w", "2", "--corpus-tree"]);
    let outputs = index_cluster(
        dir.path(),
        2,
        &args(&archive, &two, &["--corpus-tree", "-w", "1"]),
    );
    assert!(
        stdout(&outputs[0]).contains("committed epoch 1"),
        "{}",
        stdout(&outputs[0])
    );
    assert!(
        stdout(&outputs[1]).contains("process 1 of 2"),
        "{}",
        stdout(&outputs[1])
    );
    let (calls_0, calls_1) = (calls_made(&outputs[0]), calls_made(&outputs[1]));
    assert!(
        calls_1 > 0 && calls_0 > 0,
        "both processes call the model: {calls_0} and {calls_1}"
    );
    let (a, b) = (read_tables(&one), read_tables(&two));
    assert!(
        b.tree_nodes.iter().any(|n| n.doc_id.is_none()),
        "corpus trees built"
    );
    assert_eq!(comparable(&a), comparable(&b));
}

/// A cluster keeps a watched folder's tables up to date round after round
/// (process 0 lists and reads, the dataflow spans both processes): after a file
/// arrives and another goes, the tables equal one process's build of the folder.
/// SIGTERM to process 0 stops both.
#[test]
fn a_cluster_follows_a_watched_folder() {
    let (dir, archive) = archive_of(&["gap.txt", "founders.txt", "want.txt"]);
    let tables = dir.path().join("memory");
    let mut processes = spawn_cluster(
        dir.path(),
        2,
        &args(&archive, &tables, &["-w", "1", "--watch", "1"]),
    );
    let mut printed = Printed::of(&mut processes[0]);
    printed.wait_for("committed epoch 1");
    assert_eq!(read_tables(&tables).documents.len(), 3);
    std::fs::write(archive.join("vw.txt"), essay("vw.txt")).unwrap();
    std::fs::remove_file(archive.join("founders.txt")).unwrap();
    printed.wait_for("committed epoch 2");
    let watched = read_tables(&tables);
    let fresh = dir.path().join("fresh");
    index(&archive, &fresh, &["-w", "2"]);
    assert_eq!(comparable(&watched), comparable(&read_tables(&fresh)));
    let stopped = Command::new("kill")
        .args(["-TERM", &processes[0].id().to_string()])
        .status()
        .unwrap();
    assert!(stopped.success());
    let mut processes = processes.into_iter();
    let first = processes.next().unwrap().wait_with_output().unwrap();
    assert_eq!(first.status.code(), Some(130), "{}", stderr(&first));
    let second = processes.next().unwrap().wait_with_output().unwrap();
    assert!(second.status.success(), "{}", stderr(&second));
    assert!(calls_made(&second) > 0, "{}", stdout(&second));
}

/// A process index outside the cluster is a usage error naming it.
#[test]
fn a_process_outside_the_cluster_is_refused() {
    let (dir, archive) = archive_of(&["gap.txt"]);
    let output = Command::new(binary("memweave"))
        .arg("index")
        .arg(&archive)
        .arg("--out")
        .arg(dir.path().join("m"))
        .args(["-n", "2", "-p", "5"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("process 5 is not among the 2 processes"),
        "{}",
        stderr(&output)
    );
}
