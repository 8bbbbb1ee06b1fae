//! Cost: what the model reads and writes for each token of the archive, per
//! memory and per task, with the embedded default (the extractive backend
//! counts the papers' prompts as a model would read them and its replies as a
//! model would write them), and what an edit costs.
//!
//! Archives: pg-essays; the sources of the Python 3.11 documentation (a real
//! archive the project did not write: Debian's python3.11-doc, installed when
//! missing and run as root; COST_REAL=0 skips it); and the scale benchmark's
//! generated archive at the sizes in COST_SIZES (default `1M,10M`), written
//! under SCALE_DIR as `benches/scale` writes it (and reused from there).
//!
//! For each: one build into fresh tables, then `memweave report --json` over
//! them: calls per 1,000 corpus tokens and model tokens (in, out, both) per
//! corpus token, in total, per memory and per task. Then the largest generated
//! size against the smallest (flat is 1.00x). Then an edit of pg-essays: a
//! generated paragraph inserted at the middle paragraph (or line) break of
//! its largest essay and another essay deleted, indexed over the first build's tables: the
//! calls it made per task, and the rows it added (segments, tree nodes, pages:
//! what the model had to write at the least).
//!
//! Run: `cargo build --release -p memweave-cli && cargo bench --workspace
//! --bench cost`. COST_BIN=PATH measures another build of `memweave` (the
//! commit a change started from) with the same archives.

#![allow(clippy::print_stdout, clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use memweave_benches::archive::{
    Markov, PYTHON_DOCS, generate, memweave_binary, parse_size, python_docs_installed,
};
use memweave_benches::spend::{Cost, report};
use memweave_benches::{json_output, shared_data};
use serde_json::Value;

fn main() {
    let binary = memweave_binary("COST_BIN");
    let work = std::env::var_os("SCALE_DIR").map_or_else(
        || std::env::temp_dir().join("memweave-scale"),
        PathBuf::from,
    );
    let out = work.join("cost");
    std::fs::create_dir_all(&out).unwrap();
    println!("memweave: {}", binary.display());
    println!(
        "archives under {}, tables under {}",
        work.display(),
        out.display()
    );

    let essays = shared_data("pg-essays");
    let mut archives: Vec<(String, PathBuf)> = vec![("pg-essays".into(), essays.clone())];
    if std::env::var("COST_REAL").as_deref() != Ok("0") && python_docs_installed() {
        archives.push(("python3.11-doc".into(), PathBuf::from(PYTHON_DOCS)));
    }
    let markov = Markov::train(&essays);
    let sizes = std::env::var("COST_SIZES").unwrap_or_else(|_| "1M,10M".into());
    for size in sizes.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let dir = work.join(format!("generated-{size}"));
        generate(&markov, &dir, parse_size(size));
        archives.push((format!("generated {size}"), dir));
    }

    let mut costs: Vec<(String, Cost)> = Vec::new();
    for (name, dir) in &archives {
        let tables = out.join(format!("tables-{}", name.replace(' ', "-")));
        let _ = std::fs::remove_dir_all(&tables);
        index(&binary, dir, &tables);
        let cost = Cost::of(&report(&binary, &tables));
        cost.print(name);
        costs.push((name.clone(), cost));
    }

    let generated: Vec<&(String, Cost)> = costs
        .iter()
        .filter(|(n, _)| n.starts_with("generated"))
        .collect();
    if let [(small, base), .., (large, grown)] = generated.as_slice() {
        println!();
        println!("{large} against {small}, per corpus token (flat is 1.00x):");
        println!("  {:<22} {:>8} {:>8}", "", "calls", "tokens");
        let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { f64::NAN };
        println!(
            "  {:<22} {:>7.2}x {:>7.2}x",
            "all",
            ratio(grown.calls_per_token(), base.calls_per_token()),
            ratio(grown.tokens_per_token(), base.tokens_per_token())
        );
        for (task, row) in &grown.tasks {
            let Some(before) = base.tasks.get(task) else {
                continue;
            };
            println!(
                "  {task:<22} {:>7.2}x {:>7.2}x",
                ratio(
                    row.calls / grown.corpus_tokens,
                    before.calls / base.corpus_tokens
                ),
                ratio(
                    row.total() / grown.corpus_tokens,
                    before.total() / base.corpus_tokens
                )
            );
        }
    }

    edit_cost(&binary, &essays, &markov, &out);
}

/// `memweave index SOURCE --out TABLES`, its summary discarded.
fn index(binary: &Path, source: &Path, tables: &Path) {
    let status = Command::new(binary)
        .arg("index")
        .arg(source)
        .arg("--out")
        .arg(tables)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(
        status.success(),
        "memweave index {} failed",
        source.display()
    );
}

/// pg-essays built, then edited (a paragraph into the middle of the largest
/// essay, another essay deleted) and indexed again over the same tables: the
/// calls the edit made, per task.
fn edit_cost(binary: &Path, essays: &Path, markov: &Markov, out: &Path) {
    let source = out.join("pg-essays-edited");
    let tables = out.join("tables-pg-essays-edited");
    let _ = std::fs::remove_dir_all(&source);
    let _ = std::fs::remove_dir_all(&tables);
    std::fs::create_dir_all(&source).unwrap();
    let mut files: Vec<(u64, PathBuf)> = std::fs::read_dir(essays)
        .unwrap()
        .map(|e| e.unwrap().path())
        .map(|p| (std::fs::metadata(&p).unwrap().len(), p))
        .collect();
    files.sort();
    for (_, path) in &files {
        std::fs::copy(path, source.join(path.file_name().unwrap())).unwrap();
    }
    index(binary, &source, &tables);
    let before = Cost::of(&report(binary, &tables));

    let (_, largest) = files.last().unwrap();
    let (_, deleted) = files.first().unwrap();
    let edited = source.join(largest.file_name().unwrap());
    let text = std::fs::read_to_string(&edited).unwrap();
    // At the middle paragraph break, or the middle line break of an essay
    // written as wrapped lines without blank ones.
    let separator = if text.contains("\n\n") { "\n\n" } else { "\n" };
    let breaks: Vec<usize> = text.match_indices(separator).map(|(i, _)| i).collect();
    let middle = breaks[breaks.len() / 2];
    let paragraph = markov.write(&mut fastrand::Rng::with_seed(19), 120, &[]);
    let changed = format!("{}\n\n{paragraph}\n{}", &text[..middle], &text[middle..]);
    std::fs::write(&edited, changed).unwrap();
    std::fs::remove_file(source.join(deleted.file_name().unwrap())).unwrap();
    index(binary, &source, &tables);
    let after = Cost::of(&report(binary, &tables));

    println!();
    println!(
        "edit of pg-essays: a paragraph of {} words into the middle of {} ({} bytes), {} deleted; calls the edit made, beside the build's:",
        paragraph.split_whitespace().count(),
        largest.file_name().unwrap().to_string_lossy(),
        files.last().unwrap().0,
        deleted.file_name().unwrap().to_string_lossy()
    );
    println!("  {:<22} {:>8} {:>8}", "task", "edit", "build");
    let mut total = 0.0;
    for (task, spend) in &after.tasks {
        let built = before.tasks.get(task).map_or(0.0, |s| s.calls);
        total += spend.calls - built;
        println!("  {task:<22} {:>8.0} {:>8.0}", spend.calls - built, built);
    }
    println!("  {:<22} {total:>8.0} {:>8.0}", "all", before.all().calls);
    println!(
        "  rows the edit added (the least the model must write): {}",
        rows_added(binary, &tables)
            .iter()
            .map(|(kind, n)| format!("{kind} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
}

/// Rows of the newest checkpoint that the one before it did not hold, per
/// kind: the segments, tree nodes (leaves apart) and pages an edit made.
fn rows_added(binary: &Path, tables: &Path) -> Vec<(String, usize)> {
    const KINDS: &str = "SELECT 'segments' AS kind, seg_id AS id FROM segments \
        UNION ALL SELECT concat(tree, CASE WHEN level = 0 THEN ' leaves' ELSE ' parents' END), node_id FROM tree_nodes \
        UNION ALL SELECT 'pages', page_id FROM pages";
    let sql = |query: &str, version: Option<u64>| -> Vec<Value> {
        let mut sql = Command::new(binary);
        sql.arg("sql")
            .arg(query)
            .arg("--tables")
            .arg(tables)
            .arg("--format")
            .arg("json");
        if let Some(version) = version {
            sql.arg("--version").arg(version.to_string());
        }
        json_output(&mut sql).as_array().unwrap().clone()
    };
    let ids = |version: Option<u64>| -> Vec<(String, String)> {
        sql(KINDS, version)
            .iter()
            .map(|row| {
                (
                    row["kind"].as_str().unwrap().to_string(),
                    row["id"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    };
    let epochs = sql(
        "SELECT epoch FROM checkpoints ORDER BY epoch DESC LIMIT 2",
        None,
    );
    let previous = epochs[1]["epoch"].as_u64().unwrap();
    let old: std::collections::HashSet<(String, String)> =
        ids(Some(previous)).into_iter().collect();
    let mut added: BTreeMap<String, usize> = BTreeMap::new();
    for row in ids(None).into_iter().filter(|row| !old.contains(row)) {
        *added.entry(row.0).or_default() += 1;
    }
    added.into_iter().collect()
}
