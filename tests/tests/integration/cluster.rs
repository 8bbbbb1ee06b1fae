//! Several indexing processes, one dataflow (timely's cluster mode).

use std::process::{Command, Stdio};

use memweave_tests::{binary, free_port, index, read_tables, stderr, stdout};

use super::indexing::comparable;
use super::shared::archive_of;

/// Two processes of one worker each, connected over loopback, write the tables
/// one process with two workers writes.
#[test]
fn one_process_and_two_processes_write_identical_tables() {
    let (dir, archive) = archive_of(&["gap.txt", "founders.txt", "want.txt", "submarine.txt"]);
    let (one, two) = (dir.path().join("one"), dir.path().join("two"));
    index(&archive, &one, &["-w", "2", "--corpus-tree"]);
    let hostfile = dir.path().join("hosts");
    let hosts = format!("127.0.0.1:{}\n127.0.0.1:{}\n", free_port(), free_port());
    std::fs::write(&hostfile, hosts).unwrap();
    let process = |p: &str| {
        Command::new(binary("memweave"))
            .args(["--log-format", "json", "index"])
            .arg(&archive)
            .arg("--out")
            .arg(&two)
            .args(["--corpus-tree", "-w", "1", "-n", "2", "-p", p, "-h"])
            .arg(&hostfile)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (first, second) = (process("0"), process("1"));
    let (first, second) = (
        first.wait_with_output().unwrap(),
        second.wait_with_output().unwrap(),
    );
    assert!(first.status.success(), "{}", stderr(&first));
    assert!(second.status.success(), "{}", stderr(&second));
    assert!(
        stdout(&first).contains("committed epoch 1"),
        "{}",
        stdout(&first)
    );
    assert!(
        stdout(&second).contains("process 0 commits"),
        "{}",
        stdout(&second)
    );
    let (a, b) = (read_tables(&one), read_tables(&two));
    assert!(
        b.tree_nodes.iter().any(|n| n.doc_id.is_none()),
        "corpus trees built"
    );
    assert_eq!(comparable(&a), comparable(&b));
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
