//! Helpers of the end-to-end tests: where the binaries and the shared data are,
//! running the commands, and reading the tables back.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use memweave_schemas::search::{LexiconDelta, RankedCorpora, in_cut};
use memweave_schemas::{CheckpointRow, LexiconRow, MemoryTables, TableStore, TreeNodeRow};

pub mod browser;

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

/// Runs `command` to its end in a cgroup of the v1 memory controller capped
/// at `bytes` (the process and whatever it starts): past the cap the kernel
/// kills it. The cgroup is removed afterwards. The command joins the cgroup
/// before it starts (a shell moves itself, then execs it), so that every
/// process it starts is inside.
pub fn output_within_memory(command: &Command, bytes: u64) -> Output {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let group = Path::new("/sys/fs/cgroup/memory")
        .join(format!("memweave-test-{}-{n}", std::process::id()));
    std::fs::create_dir(&group).unwrap_or_else(|e| {
        panic!(
            "{}: the memory cgroup is written as root: {e}",
            group.display()
        )
    });
    std::fs::write(group.join("memory.limit_in_bytes"), bytes.to_string()).expect("the limit");
    let mut inside = Command::new("sh");
    inside
        .args(["-c", "echo $$ > \"$0\" && exec \"$@\""])
        .arg(group.join("cgroup.procs"))
        .arg(command.get_program())
        .args(command.get_args())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    for (key, value) in command.get_envs() {
        match value {
            Some(value) => inside.env(key, value),
            None => inside.env_remove(key),
        };
    }
    if let Some(dir) = command.get_current_dir() {
        inside.current_dir(dir);
    }
    let output = inside.output().expect("the command ends");
    let _ = std::fs::remove_dir(&group);
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

/// A cluster of `processes` indexing processes over loopback: every one runs
/// `memweave index ARGS -n N -p P -h HOSTFILE` (the hostfile written under
/// `dir`), spawned with piped output; returns them in process order.
pub fn spawn_cluster(dir: &Path, processes: usize, args: &[String]) -> Vec<std::process::Child> {
    let hostfile = dir.join(format!("hosts-{}", free_port()));
    let hosts: String = (0..processes)
        .map(|_| format!("127.0.0.1:{}\n", free_port()))
        .collect();
    std::fs::write(&hostfile, hosts).expect("the hostfile is written");
    (0..processes)
        .map(|p| {
            Command::new(binary("memweave"))
                .args(["--log-format", "json", "index"])
                .args(args)
                .args(["-n", &processes.to_string(), "-p", &p.to_string(), "-h"])
                .arg(&hostfile)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("memweave starts")
        })
        .collect()
}

/// Runs [`spawn_cluster`] to the end; insists every process succeeds.
pub fn index_cluster(dir: &Path, processes: usize, args: &[String]) -> Vec<Output> {
    spawn_cluster(dir, processes, args)
        .into_iter()
        .map(|child| {
            let output = child.wait_with_output().expect("memweave runs");
            assert!(output.status.success(), "{}", stderr(&output));
            output
        })
        .collect()
}

/// What a running child prints, line by line.
#[derive(Debug)]
pub struct Printed(std::io::Lines<std::io::BufReader<std::process::ChildStdout>>);

impl Printed {
    /// Takes `child`'s piped stdout.
    pub fn of(child: &mut std::process::Child) -> Self {
        use std::io::BufRead;
        let stdout = child.stdout.take().expect("stdout is piped");
        Printed(std::io::BufReader::new(stdout).lines())
    }

    /// Reads until a line containing `text`; panics if the child exits first.
    pub fn wait_for(&mut self, text: &str) {
        for line in self.0.by_ref() {
            if line.expect("stdout reads").contains(text) {
                return;
            }
        }
        panic!("the child exited before printing {text:?}");
    }
}

/// The value of one sample (`NAME{LABELS}` exactly as exposed) in Prometheus
/// text.
pub fn metric(text: &str, sample: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(sample)?.strip_prefix(' ')?.parse().ok())
}

/// The numbers of a summary's model line: calls made, and calls answered
/// from the cache.
pub fn model_calls(output: &Output) -> (u64, u64) {
    let out = stdout(output);
    let line = (out.lines())
        .find(|l| l.trim_start().starts_with("model"))
        .unwrap_or_else(|| panic!("no model line in {out}"));
    let number_before = |word: &str| -> u64 {
        (line.split_once(word))
            .and_then(|(head, _)| head.split_whitespace().last()?.parse().ok())
            .unwrap_or_else(|| panic!("no number before {word:?} in {line}"))
    };
    (number_before(" calls"), number_before(" answered"))
}

/// The model calls a summary printed (`model  BACKEND: N calls, …`).
pub fn calls_made(output: &Output) -> u64 {
    let text = stdout(output);
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("model "))
        .unwrap_or_else(|| panic!("no model line in {text}"));
    let (_, after) = line.split_once(": ").expect("model line has a colon");
    after
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no call count in {line}"))
}

/// The tables of one checkpoint, read back with the project's own store; a
/// test reads them as the memory tables they are (`t.segments`).
#[derive(Debug, Clone, PartialEq)]
pub struct Tables {
    pub checkpoint: CheckpointRow,
    pub rows: MemoryTables,
    /// The lexicon the commits kept, by entry.
    pub lexicon: Vec<LexiconRow>,
}

impl Tables {
    /// A page's text, cut out of its document's.
    pub fn page_text(&self, page: &memweave_schemas::PageRow) -> String {
        page.text_in(self.document_text(&page.doc_id))
    }

    /// A page's gist, its text where it is its own.
    pub fn page_gist(&self, page: &memweave_schemas::PageRow) -> String {
        page.gist_in(self.document_text(&page.doc_id))
    }

    /// A segment's text, cut out of its document's.
    pub fn segment_text(&self, segment: &memweave_schemas::SegmentRow) -> String {
        segment.text_in(self.document_text(&segment.doc_id))
    }

    /// A tree node's text: its summary, or, for a leaf that is its
    /// segment's own text (kept without it), that segment's text.
    pub fn node_text(&self, node: &TreeNodeRow) -> String {
        if let Some(summary) = &node.summary {
            return summary.clone();
        }
        let seg_id = node
            .seg_id
            .as_deref()
            .expect("a node without a summary is a leaf");
        let segment = (self.rows.segments.iter())
            .find(|s| s.seg_id == seg_id)
            .unwrap_or_else(|| panic!("leaf {} names segment {seg_id}", node.node_id));
        self.segment_text(segment)
    }

    fn document_text(&self, doc_id: &str) -> &str {
        let document = self.rows.documents.iter().find(|d| d.doc_id == doc_id);
        document.map_or("", |d| d.text.as_str())
    }

    /// Every owner's vector: the stored ones, or where the memory's vectors
    /// are the hashing embedder's (none stored), each one recomputed from
    /// the text [`Tables::vector_texts`] gives. Sorted by owner, as the table
    /// is.
    pub fn vectors(&self) -> Vec<memweave_schemas::EmbeddingRow> {
        use memweave_operators::embed::HashingEmbedder;
        let Some(spec) = self.checkpoint.vectors() else {
            return self.rows.embeddings.clone();
        };
        let Some(hashing) = HashingEmbedder::for_model(&spec.model) else {
            return self.rows.embeddings.clone();
        };
        (self.vector_texts().into_iter())
            .map(|(owner, kind, text)| {
                let vector = hashing.stored_vector(&text);
                memweave_schemas::EmbeddingRow::new(&owner, kind, &spec.model, vector)
            })
            .collect()
    }

    /// Each owner of a vector (id and kind), with the text it is embedded
    /// from, as the build embeds them: a segment of the vectors' cut its own
    /// text, an entity its name and description, a RAPTOR leaf (one with a
    /// segment) its chunk, any other RAPTOR node its summary and surprise.
    /// Sorted by owner.
    pub fn vector_texts(&self) -> Vec<(String, &'static str, String)> {
        use memweave_schemas::{TREE_RAPTOR, TREE_RAPTOR_CORPUS};
        let cut = self.checkpoint.vector_segment_tokens;
        let segments: BTreeMap<&str, &memweave_schemas::SegmentRow> = (self.rows.segments.iter())
            .map(|s| (s.seg_id.as_str(), s))
            .collect();
        let mut texts: Vec<(String, &'static str, String)> = (self.rows.segments.iter())
            .filter(|s| cut.is_some_and(|cut| in_cut(s.target_tokens, cut)))
            .map(|s| (s.seg_id.clone(), "segment", self.segment_text(s)))
            .collect();
        for node in &self.rows.tree_nodes {
            if node.tree != TREE_RAPTOR && node.tree != TREE_RAPTOR_CORPUS {
                continue;
            }
            let text = match &node.seg_id {
                Some(seg_id) => self.segment_text(segments[seg_id.as_str()]),
                None => memweave_operators::raptor::node_text(node),
            };
            texts.push((node.node_id.clone(), "node", text));
        }
        for entity in &self.rows.entities {
            texts.push((entity.entity_id.clone(), "entity", entity.embedded_text()));
        }
        texts.sort_by(|a, b| a.0.cmp(&b.0));
        texts
    }

    /// The lexicon counted afresh from the rows (each own-text leaf by its
    /// segment's terms, which the table keeps for both): what the kept one
    /// must equal.
    pub fn recounted_lexicon(&self) -> Vec<LexiconRow> {
        let mut counted = self.rows.clone();
        TreeNodeRow::fill_own_text_terms(&mut counted.tree_nodes, &counted.segments);
        let ranked = RankedCorpora::of_cuts(counted.segments.iter().map(|s| s.target_tokens));
        let mut delta = LexiconDelta::default();
        for row in counted.rows() {
            delta.count(&row, 1, ranked);
        }
        let mut lexicon = delta.apply(&[]).expect("counts only add");
        lexicon.sort();
        lexicon
    }
}

impl std::ops::Deref for Tables {
    type Target = MemoryTables;
    fn deref(&self) -> &MemoryTables {
        &self.rows
    }
}

impl std::ops::DerefMut for Tables {
    fn deref_mut(&mut self) -> &mut MemoryTables {
        &mut self.rows
    }
}

/// The tables of the newest checkpoint, each sorted by its key: after
/// incremental rounds (deletes, then appends) a table's physical order reflects
/// its history, not its content.
pub fn read_tables(root: &Path) -> Tables {
    try_read_tables(root).expect("a checkpoint was committed")
}

/// [`read_tables`], or `None` before the first checkpoint (the tables of a
/// first build may exist, being written, before it commits).
pub fn try_read_tables(root: &Path) -> Option<Tables> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let store = TableStore::local(root).expect("a store");
        let checkpoint = store.latest_checkpoint().await.expect("checkpoints read")?;
        let mut rows = MemoryTables::read_at(&store, &checkpoint)
            .await
            .expect("the memory tables read");
        rows.sort_by_key();
        let mut lexicon: Vec<LexiconRow> =
            store.read_at(&checkpoint).await.expect("the lexicon reads");
        lexicon.sort();
        Some(Tables {
            checkpoint,
            rows,
            lexicon,
        })
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
    read_every_row(root)
}

/// Every row of a table under `root`, whatever the checkpoint.
pub fn read_every_row<R: memweave_schemas::TableRow>(root: &Path) -> Vec<R> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        TableStore::local(root)
            .expect("a store")
            .read_rows(None)
            .await
            .unwrap_or_else(|e| panic!("{} reads: {e}", R::TABLE.name()))
    })
}

/// Model tokens (prompt and reply) the calls spent.
pub fn tokens_spent<'a>(calls: impl IntoIterator<Item = &'a memweave_schemas::LlmCallRow>) -> u64 {
    calls
        .into_iter()
        .map(|c| u64::from(c.tokens_in) + u64::from(c.tokens_out))
        .sum()
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

/// The flags that embed through the simulator at `url` (its `/v1/embeddings`
/// hashes as the offline embedder does), the vectors stored.
pub fn sim_embedder_flags(url: &str) -> [&str; 6] {
    [
        "--embedder",
        "openai",
        "--embedding-url",
        url,
        "--embedding-model",
        "sim-embed",
    ]
}

/// A loopback port nothing listens on (for a server a test starts).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// Waits (up to 30 s) until `server` accepts connections on loopback `port`.
fn wait_listening(port: u16, server: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "{server} did not listen"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
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
        let port = free_port();
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
        wait_listening(port, "s3s-fs");
        server
    }

    /// The folder behind `bucket/key`, for arranging a test's objects.
    pub fn object_path(&self, bucket: &str, key: &str) -> PathBuf {
        self.root.path().join(bucket).join(key)
    }

    /// Runs `memweave index URL --out TABLES --s3-endpoint …` with `secret` as
    /// the credentials' secret key (AWS_* in the environment, as users pass them).
    pub fn index(&self, url: &str, tables: &Path, secret: &str) -> Output {
        let tables = tables.display().to_string();
        self.memweave(&["index", url, "--out", &tables], secret)
    }

    /// Runs `memweave ARGS --s3-endpoint …` with `secret` as the credentials'
    /// secret key.
    pub fn memweave(&self, args: &[&str], secret: &str) -> Output {
        Command::new(binary("memweave"))
            .args(["--log-format", "json"])
            .args(args)
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

/// A real Kafka-protocol broker (tansu, installed by `scripts/bootstrap
/// --tests`) keeping its log in SQLite under a temporary folder, on a loopback
/// port, stopped on drop.
pub struct KafkaBroker {
    child: std::process::Child,
    /// `127.0.0.1:PORT`, as clients and `kafka://` URLs name it.
    pub brokers: String,
    _dir: tempfile::TempDir,
}

impl std::fmt::Debug for KafkaBroker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaBroker")
            .field("brokers", &self.brokers)
            .finish_non_exhaustive()
    }
}

impl KafkaBroker {
    pub fn start() -> Self {
        let dir = tempfile::tempdir().expect("a temp dir");
        let port = free_port();
        let listener = format!("tcp://127.0.0.1:{port}");
        let child = Command::new("tansu")
            .args(["broker", "--listener-url", &listener])
            .args(["--advertised-listener-url", &listener])
            // tansu reads the database path relative to its working directory.
            .args(["--storage-engine", "sqlite://tansu.db"])
            .current_dir(dir.path())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("tansu runs (scripts/bootstrap --tests installs it: cargo install tansu)");
        let broker = KafkaBroker {
            child,
            brokers: format!("127.0.0.1:{port}"),
            _dir: dir,
        };
        wait_listening(port, "tansu");
        broker
    }

    /// Creates `topic` with `partitions` partitions (tansu creates none on its own).
    pub fn create_topic(&self, topic: &str, partitions: i32) {
        use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
        let admin: AdminClient<rdkafka::client::DefaultClientContext> =
            rdkafka::ClientConfig::new()
                .set("bootstrap.servers", &self.brokers)
                .create()
                .expect("an admin client");
        let new = NewTopic::new(topic, partitions, TopicReplication::Fixed(1));
        let results =
            futures::executor::block_on(admin.create_topics(&[new], &AdminOptions::new()))
                .expect("the broker answers");
        for result in results {
            result.expect("the topic is created");
        }
    }

    /// Produces `messages` (key, JSON payload) to `topic`, keyed so one
    /// document's messages share a partition, and waits until all are stored.
    pub fn produce(&self, topic: &str, messages: &[(&str, String)]) {
        use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
        let producer: BaseProducer = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", &self.brokers)
            .create()
            .expect("a producer");
        for (key, payload) in messages {
            producer
                .send(BaseRecord::to(topic).key(*key).payload(payload))
                .expect("the message is queued");
        }
        producer
            .flush(std::time::Duration::from_secs(30))
            .expect("the messages are stored");
    }

    /// The offsets `group` committed for `topic`'s partitions `0..partitions`.
    pub fn committed(&self, group: &str, topic: &str, partitions: i32) -> BTreeMap<i32, i64> {
        use rdkafka::consumer::{BaseConsumer, Consumer};
        let consumer: BaseConsumer = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", &self.brokers)
            .set("group.id", group)
            .create()
            .expect("a consumer");
        let mut wanted = rdkafka::TopicPartitionList::new();
        for p in 0..partitions {
            wanted.add_partition(topic, p);
        }
        let committed = consumer
            .committed_offsets(wanted, std::time::Duration::from_secs(10))
            .expect("committed offsets");
        committed
            .elements()
            .iter()
            .filter_map(|e| match e.offset() {
                rdkafka::Offset::Offset(o) => Some((e.partition(), o)),
                _ => None,
            })
            .collect()
    }
}

impl Drop for KafkaBroker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
