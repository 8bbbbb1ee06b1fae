//! Helpers of the end-to-end tests: where the binaries and the shared data are,
//! running the commands, and reading the tables back.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use memweave_schemas::{
    CheckpointRow, DocumentRow, ErrorRow, PageRow, SegmentRow, TableStore, TreeNodeRow,
};

pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate sits in the workspace")
        .to_path_buf()
}

/// A corpus under `../shared/data` beside the checkout; never copied into the repo.
pub fn shared_data(name: &str) -> PathBuf {
    let path = workspace_root().join("../shared/data").join(name);
    assert!(
        path.exists(),
        "{} is missing: the tests read the shared corpora beside the checkout",
        path.display()
    );
    path
}

/// A binary of the workspace, built next to the test executable.
pub fn binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test knows its own path");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("test executables live in target/PROFILE/deps");
    let path = dir.join(name);
    assert!(
        path.exists(),
        "{} is missing: build the binaries first (cargo build --workspace --bins)",
        path.display()
    );
    path
}

/// Runs `memweave` with `args`; logs as JSON so tests can read them.
pub fn memweave<I, S>(args: I) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    Command::new(binary("memweave"))
        .arg("--log-format")
        .arg("json")
        .args(args)
        .output()
        .expect("memweave runs")
}

/// Runs `memweave` and insists it succeeds.
pub fn memweave_ok<I, S>(args: I) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    let output = memweave(args);
    assert!(
        output.status.success(),
        "memweave failed: {}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// Indexes `source` into `tables` with `extra` arguments.
pub fn index(source: &Path, tables: &Path, extra: &[&str]) -> Output {
    let mut args: Vec<String> = vec![
        "index".into(),
        source.display().to_string(),
        "--out".into(),
        tables.display().to_string(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    memweave_ok(args)
}

/// The tables of one checkpoint, read back with the project's own store.
#[derive(Debug, Clone, PartialEq)]
pub struct Tables {
    pub checkpoint: CheckpointRow,
    pub documents: Vec<DocumentRow>,
    pub segments: Vec<SegmentRow>,
    pub tree_nodes: Vec<TreeNodeRow>,
    pub pages: Vec<PageRow>,
    pub errors: Vec<ErrorRow>,
}

pub fn read_tables(root: &Path) -> Tables {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let store = TableStore::local(root).expect("a store");
        let checkpoint = store
            .latest_checkpoint()
            .await
            .expect("checkpoints read")
            .expect("a checkpoint was committed");
        Tables {
            documents: store.read_at(&checkpoint).await.expect("documents"),
            segments: store.read_at(&checkpoint).await.expect("segments"),
            tree_nodes: store.read_at(&checkpoint).await.expect("tree_nodes"),
            pages: store.read_at(&checkpoint).await.expect("pages"),
            errors: store.read_at(&checkpoint).await.expect("errors"),
            checkpoint,
        }
    })
}

/// The Python that has the external readers (pylance, duckdb) installed: the
/// test command sets MEMWEAVE_PYTHON to its virtual environment.
pub fn python() -> String {
    std::env::var("MEMWEAVE_PYTHON").unwrap_or_else(|_| "python3".to_string())
}

pub fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}
