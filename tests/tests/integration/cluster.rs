//! Several indexing processes, one dataflow (timely's cluster mode).

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use memweave_tests::{
    Printed, binary, calls_made, index, index_cluster, read_tables, spawn_cluster, stderr, stdout,
};

use super::indexing::comparable;
use super::shared::{archive_of, essay};

fn args(source: &Path, tables: &Path, extra: &[&str]) -> Vec<String> {
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

    // After an edit, each memory is continued by the other count: the one
    // built by one process by two, the one built by two by one. Both restore
    // the documents' states rather than build them again, and agree.
    let edited = essay("want.txt").replacen("want", "really want", 1);
    std::fs::write(archive.join("want.txt"), edited).unwrap();
    let outputs = index_cluster(
        dir.path(),
        2,
        &args(&archive, &one, &["--corpus-tree", "-w", "1"]),
    );
    let single = index(&archive, &two, &["-w", "2", "--corpus-tree"]);
    for run in [&outputs[0], &single] {
        assert!(
            stdout(run).contains("(1 new or changed, 3 unchanged, 0 deleted)")
                && stdout(run).contains("restored"),
            "{}",
            stdout(run)
        );
    }
    assert_eq!(
        comparable(&read_tables(&one)),
        comparable(&read_tables(&two))
    );
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

/// Every process writes its own rows' data files, and only process 0's commit
/// makes them visible: a compute process killed after it staged rows and
/// before the commit leaves the tables at their last checkpoint, and a re-run
/// ends with the tables of an uninterrupted run.
#[test]
fn a_process_killed_after_staging_its_rows_leaves_nothing_visible() {
    let (dir, archive) = archive_of(&["gap.txt", "founders.txt", "want.txt"]);
    let (tables, reference) = (dir.path().join("memory"), dir.path().join("reference"));
    index(&archive, &tables, &["-w", "2"]);
    index(&archive, &reference, &["-w", "2"]);
    let committed = read_tables(&tables);
    // The round the crash interrupts: a new document and an edited one.
    std::fs::write(archive.join("vw.txt"), essay("vw.txt")).unwrap();
    let edited = essay("want.txt").replacen("want", "really want", 1);
    std::fs::write(archive.join("want.txt"), edited).unwrap();
    index(&archive, &reference, &["-w", "2"]);
    let files_before = data_files(&tables);

    // Small batches, so process 1 stages rows long before the round ends.
    let extra = ["-w", "1", "--write-batch-rows", "8"];
    let mut processes = spawn_cluster(dir.path(), 2, &args(&archive, &tables, &extra));
    // Process 0's output is read to its end, so a full pipe never holds it up.
    let drains: Vec<_> = [
        processes[0]
            .stdout
            .take()
            .map(|o| Box::new(o) as Box<dyn std::io::Read + Send>),
        processes[0]
            .stderr
            .take()
            .map(|e| Box::new(e) as Box<dyn std::io::Read + Send>),
    ]
    .into_iter()
    .flatten()
    .map(|mut pipe| std::thread::spawn(move || std::io::copy(&mut pipe, &mut std::io::sink())))
    .collect();
    let staged = first_line_with(&mut processes[1], "staged a batch of rows");
    assert!(staged.is_some(), "process 1 staged no rows before it ended");
    processes[1].kill().unwrap();
    processes[1].wait().unwrap();
    // Without its peer, process 0 stops without committing.
    let first = wait_at_most(&mut processes[0], Duration::from_secs(120));
    for drain in drains {
        let _ = drain.join();
    }
    assert!(!first.success(), "process 0 committed without its peer");
    assert!(
        data_files(&tables) > files_before,
        "the killed run wrote data files"
    );
    let after_crash = read_tables(&tables);
    assert_eq!(after_crash.checkpoint.epoch, committed.checkpoint.epoch);
    assert_eq!(
        after_crash, committed,
        "what the crashed run wrote is not visible"
    );

    index_cluster(dir.path(), 2, &args(&archive, &tables, &extra));
    assert_eq!(
        comparable(&read_tables(&tables)),
        comparable(&read_tables(&reference))
    );
}

/// Data files of every table under `tables`, committed or not.
fn data_files(tables: &Path) -> usize {
    std::fs::read_dir(tables)
        .unwrap()
        .filter_map(|table| std::fs::read_dir(table.unwrap().path().join("data")).ok())
        .map(Iterator::count)
        .sum()
}

/// Reads `child`'s stderr until a line containing `text` (returned), or its end.
fn first_line_with(child: &mut Child, text: &str) -> Option<String> {
    let stderr = child.stderr.take().unwrap();
    BufReader::new(stderr)
        .lines()
        .map_while(Result::ok)
        .find(|line| line.contains(text))
}

fn wait_at_most(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            panic!("process 0 did not stop within {limit:?} after its peer was killed");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
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
