//! Helpers of the end-to-end tests: where the binaries and the shared data are,
//! running the commands, and reading the tables back.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use memweave_schemas::{
    CheckpointRow, DocumentRow, EmbeddingRow, EntityRow, ErrorRow, PageRow, RelationRow,
    SegmentRow, TableStore, TreeNodeRow,
};

pub fn workspace_root() -> PathBuf {
    // Cargo sets the variable when it runs the tests too; prefer that over the
    // value compiled in, which is stale when a build from another checkout of the
    // repository (sharing the target directory) is reused.
    let manifest_dir = std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from);
    manifest_dir
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
    pub entities: Vec<EntityRow>,
    pub relations: Vec<RelationRow>,
    pub embeddings: Vec<EmbeddingRow>,
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
            entities: store.read_at(&checkpoint).await.expect("entities"),
            relations: store.read_at(&checkpoint).await.expect("relations"),
            embeddings: store.read_at(&checkpoint).await.expect("embeddings"),
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

/// Every row of `llm_calls` (the call cache and cost ledger) under `root`.
pub fn read_calls(root: &Path) -> Vec<memweave_schemas::LlmCallRow> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        TableStore::local(root)
            .expect("a store")
            .read_rows(None)
            .await
            .expect("llm_calls reads")
    })
}

/// The model-server simulator, served over real HTTP on a loopback port from a
/// runtime of its own, for as long as this value lives.
#[derive(Debug)]
pub struct SimServer {
    pub sim: std::sync::Arc<memweave_llm::sim::Sim>,
    pub url: String,
    runtime: tokio::runtime::Runtime,
}

impl SimServer {
    pub fn start(config: memweave_llm::sim::SimConfig) -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime");
        let sim = memweave_llm::sim::Sim::new(config);
        let url =
            memweave_llm::sim::serve_on_loopback(runtime.handle(), &sim).expect("a loopback port");
        SimServer { sim, url, runtime }
    }

    pub fn stats(&self) -> memweave_llm::sim::SimStats {
        self.sim.stats()
    }

    pub fn runtime(&self) -> &tokio::runtime::Runtime {
        &self.runtime
    }
}

/// The flags that point `memweave index` at a simulator.
pub fn openai_flags(url: &str) -> Vec<String> {
    [
        "--backend",
        "openai",
        "--llm-url",
        url,
        "--llm-model",
        "memweave-sim",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// Access key and secret the S3 server accepts.
pub const S3_ACCESS_KEY: &str = "memweave-test";
pub const S3_SECRET_KEY: &str = "memweave-test-secret";

/// A real S3-protocol server (s3s-fs, installed by `scripts/test`) over a
/// temporary folder, on a loopback port, stopped on drop. Each bucket is a
/// folder of `root`.
#[derive(Debug)]
pub struct S3Server {
    child: std::process::Child,
    pub endpoint: String,
    pub root: tempfile::TempDir,
}

impl S3Server {
    pub fn start(buckets: &[&str]) -> Self {
        let root = tempfile::tempdir().expect("a temp dir");
        for bucket in buckets {
            std::fs::create_dir(root.path().join(bucket)).expect("a bucket folder");
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let child = Command::new("s3s-fs")
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args(["--access-key", S3_ACCESS_KEY, "--secret-key", S3_SECRET_KEY])
            .arg(root.path())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("s3s-fs runs (scripts/test installs it: cargo install s3s-fs)");
        let server = S3Server {
            child,
            endpoint: format!("http://127.0.0.1:{port}"),
            root,
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "s3s-fs did not listen"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        server
    }

    /// The folder behind `bucket/key`, for arranging a test's objects.
    pub fn object_path(&self, bucket: &str, key: &str) -> PathBuf {
        self.root.path().join(bucket).join(key)
    }

    /// Runs `memweave index URL --out TABLES --s3-endpoint …` with `secret` as
    /// the credentials' secret key (AWS_* in the environment, as users pass them).
    pub fn index(&self, url: &str, tables: &Path, secret: &str) -> Output {
        Command::new(binary("memweave"))
            .args(["--log-format", "json", "index", url, "--out"])
            .arg(tables)
            .args(["--s3-endpoint", &self.endpoint])
            .env("AWS_ACCESS_KEY_ID", S3_ACCESS_KEY)
            .env("AWS_SECRET_ACCESS_KEY", secret)
            .env("AWS_REGION", "us-east-1")
            .output()
            .expect("memweave runs")
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
