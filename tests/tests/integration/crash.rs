//! Crash safety: an indexer killed with SIGKILL at any moment, then run again,
//! ends with the tables of an uninterrupted run.

use std::collections::HashSet;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use memweave_tests::{binary, index, read_calls, read_tables};

use super::indexing::comparable;
use super::shared::{archive_of, essay};

const ESSAYS: [&str; 5] = [
    "gap.txt",
    "founders.txt",
    "want.txt",
    "submarine.txt",
    "addiction.txt",
];

/// Starts `memweave index`, kills it (SIGKILL) after `after`, and waits for it.
fn kill_after(source: &Path, tables: &Path, after: Duration) {
    let mut child = Command::new(binary("memweave"))
        .args(["--log-format", "json", "index"])
        .arg(source)
        .arg("--out")
        .arg(tables)
        .args(["--corpus-tree", "-w", "2"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(after);
    let _ = child.kill();
    child.wait().unwrap();
}

/// Fractions of a run's length to kill at, different on every test run (the
/// failure message names them).
pub(crate) fn kill_points(trials: usize) -> Vec<f64> {
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos() as u64;
    (0..trials as u64)
        .map(|i| {
            let x = seed
                .wrapping_add(i)
                .wrapping_mul(6_364_136_223_846_793_005)
                .rotate_right(29);
            (i as f64 + (x % 1000) as f64 / 1000.0) / trials as f64
        })
        .collect()
}

fn debug<R: std::fmt::Debug>(rows: &[R]) -> Vec<String> {
    rows.iter()
        .map(|r| format!("{r:?}").chars().take(300).collect())
        .collect()
}

fn assert_sound(tables: &Path, expected: &memweave_tests::Tables, context: &str) {
    assert_same_rows(&read_tables(tables), expected, context);
    let keys: HashSet<String> = read_calls(tables).into_iter().map(|c| c.call_key).collect();
    assert_eq!(
        keys.len(),
        read_calls(tables).len(),
        "a model call was made twice ({context})"
    );
}

/// The same rows in every table (clock times and versions aside), or which
/// table differs and by what rows.
pub(crate) fn assert_same_rows(
    got: &memweave_tests::Tables,
    want: &memweave_tests::Tables,
    context: &str,
) {
    let (got, want) = (comparable(got), comparable(want));
    let differ = |name: &str, a: Vec<String>, b: Vec<String>| {
        let (a, b): (HashSet<String>, HashSet<String>) =
            (a.into_iter().collect(), b.into_iter().collect());
        assert!(
            a == b,
            "{context}: {name} has {} rows, expected {}; extra {:?}, missing {:?}",
            a.len(),
            b.len(),
            a.difference(&b).take(3).collect::<Vec<_>>(),
            b.difference(&a).take(3).collect::<Vec<_>>()
        );
    };
    differ("documents", debug(&got.documents), debug(&want.documents));
    differ("segments", debug(&got.segments), debug(&want.segments));
    differ(
        "tree_nodes",
        debug(&got.tree_nodes),
        debug(&want.tree_nodes),
    );
    differ("pages", debug(&got.pages), debug(&want.pages));
    differ("entities", debug(&got.entities), debug(&want.entities));
    differ("relations", debug(&got.relations), debug(&want.relations));
    differ("errors", debug(&got.errors), debug(&want.errors));
    differ(
        "doc_states",
        debug(&got.doc_states),
        debug(&want.doc_states),
    );
    differ("lexicon", debug(&got.lexicon), debug(&want.lexicon));
    assert!(
        got == want,
        "{context}: the embeddings or another table differ"
    );
}

/// Killed during a first build, or during a run absorbing an edit and a
/// delete, a re-run of the same command ends where an uninterrupted run does:
/// no duplicate rows, no lost documents, no model call made twice.
#[test]
fn sigkill_at_any_moment_then_rerun_ends_with_the_uninterrupted_tables() {
    let (dir, archive) = archive_of(&ESSAYS);
    let flags = ["--corpus-tree", "-w", "2"];
    let reference = dir.path().join("reference");
    let started = Instant::now();
    index(&archive, &reference, &flags);
    let full = started.elapsed();
    let built = read_tables(&reference);

    for (trial, point) in kill_points(3).into_iter().enumerate() {
        let tables = dir.path().join(format!("first-{trial}"));
        kill_after(&archive, &tables, full.mul_f64(point));
        let rerun = index(&archive, &tables, &flags);
        assert!(rerun.status.success());
        assert_sound(
            &tables,
            &built,
            &format!("killed at {point:.2} of a first build"),
        );
    }

    // An edit and a delete, absorbed by a run that is killed, then re-run.
    let edited = dir.path().join("edited");
    std::fs::create_dir(&edited).unwrap();
    for name in &ESSAYS[1..] {
        std::fs::write(edited.join(name), essay(name)).unwrap();
    }
    let changed = essay("want.txt").replacen("want", "really want", 1);
    std::fs::write(edited.join("want.txt"), changed).unwrap();
    std::fs::remove_file(edited.join("founders.txt")).unwrap();
    // Uninterrupted: the first build, then the update (the edited document at
    // its second version).
    let reference = dir.path().join("edited-reference");
    index(&archive, &reference, &flags);
    index(&edited, &reference, &flags);
    let expected = read_tables(&reference);
    for (trial, point) in kill_points(2).into_iter().enumerate() {
        let tables = dir.path().join(format!("first-{trial}"));
        kill_after(&edited, &tables, full.mul_f64(point * 0.5));
        let rerun = index(&edited, &tables, &flags);
        assert!(rerun.status.success());
        assert_sound(
            &tables,
            &expected,
            &format!("killed at {point:.2} of an update"),
        );
    }
}

/// `--max-model-tokens` stops a build once its budget is spent: the round
/// commits what was done, what was not is in the errors table, and a run
/// without the budget ends with the tables of an unlimited build, paying only
/// for the calls the first run did not make.
#[test]
fn a_token_budget_stops_the_build_and_a_rerun_finishes_it() {
    let (dir, archive) = archive_of(&ESSAYS);
    let spent = |tables: &Path| -> (usize, u64) {
        let calls = read_calls(tables);
        (calls.len(), memweave_tests::tokens_spent(&calls))
    };
    let reference = dir.path().join("reference");
    index(&archive, &reference, &[]);
    let (all_calls, all_tokens) = spent(&reference);

    let tables = dir.path().join("budgeted");
    let budget = all_tokens / 3;
    let stopped = index(
        &archive,
        &tables,
        &["--max-model-tokens", &budget.to_string()],
    );
    let summary = memweave_tests::stdout(&stopped);
    assert!(
        summary.contains("the model-token budget (--max-model-tokens) is spent"),
        "{summary}"
    );
    let partial = read_tables(&tables);
    assert!(
        partial.errors.iter().any(|e| e.kind == "llm_over_budget"),
        "{:?}",
        partial.errors
    );
    let (calls, tokens) = spent(&tables);
    assert!(
        tokens >= budget && tokens < all_tokens,
        "{tokens} tokens spent against a budget of {budget} (an unlimited build: {all_tokens})"
    );

    let rerun = index(&archive, &tables, &[]);
    assert_sound(
        &tables,
        &read_tables(&reference),
        "a run after the budget stopped a build",
    );
    assert_eq!(
        calls as u64 + memweave_tests::calls_made(&rerun),
        all_calls as u64
    );
}
