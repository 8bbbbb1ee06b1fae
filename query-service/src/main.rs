//! `memweave-query`: the stateless query service.

// A binary's edge: errors become messages here, with anyhow (clippy.toml keeps
// it out of the libraries).
#![allow(clippy::disallowed_types, clippy::disallowed_macros)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};
use memweave_llm::{CallCache, ModelArgs};
use memweave_process::{LogFormat, StorageArgs, init_logging, stop_requested};
use memweave_query::auth::{TokenRules, TokenSources};
use memweave_query::cache::{DEFAULT_CACHE_MIB, ReadCache};
use memweave_query::http::router;
use memweave_query::mcp::{AllowedHosts, serve_stdio};
use memweave_query::service::{DEFAULT_EXPENSIVE_IN_FLIGHT, Limits, ServiceState};
use memweave_schemas::TableStore;

/// jemalloc, not glibc's malloc: Lance's reads allocate and free per
/// question on many threads, where glibc's arenas keep freed pages.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[derive(Parser)]
#[command(
    name = "memweave-query",
    version,
    about = "Answer questions over memweave memory tables, over HTTP and as MCP tools"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the query API and the web explorer (at /) over the newest
    /// checkpoint of TABLES: POST /v1/ask
    /// (every strategy), POST /v1/search, GET /v1/documents (a page at a
    /// time: ?limit=, and ?after= the page's `next`),
    /// /v1/documents/{id}/tree, /v1/documents/{id}/pages/{page},
    /// /v1/documents/{id}/text, /v1/segments/{id}, /v1/nodes/{id},
    /// /v1/entities/{id}, /v1/checkpoints, /v1/overview (every one takes
    /// ?epoch= for an earlier checkpoint), the same as MCP tools at /mcp
    /// (streamable HTTP), /healthz, /readyz, /metrics and /openapi.json.
    ///
    /// The service reads only the table versions a checkpoint names and picks up
    /// newer checkpoints without restarting; it writes nothing, so replicas can be
    /// added and removed freely.
    Serve {
        #[command(flatten)]
        memory: MemoryArgs,
        /// Address to listen on.
        #[arg(long, env = "MEMWEAVE_LISTEN", default_value = "127.0.0.1:8080")]
        listen: SocketAddr,
        /// File holding a bearer token /v1/* and /mcp requests must present
        /// (Authorization: Bearer TOKEN); without it the API is open.
        #[arg(long, env = "MEMWEAVE_AUTH_TOKEN_FILE")]
        auth_token_file: Option<std::path::PathBuf>,
        #[command(flatten)]
        tokens: Box<TokenArgs>,
        /// A Host (name, or name:port) the service answers besides
        /// loopback's, such as its name in a cluster; repeatable. Other hosts
        /// get 403 on every route but /healthz and /readyz, so a web page
        /// cannot reach an open service through DNS rebinding. With
        /// --auth-token-file or a JWT key every host is answered: the tokens guard it. The
        /// variable takes a comma-separated list.
        #[arg(
            long = "allowed-host",
            alias = "mcp-allowed-host",
            env = "MEMWEAVE_ALLOWED_HOSTS",
            value_delimiter = ','
        )]
        allowed_hosts: Vec<String>,
        /// Do not serve the web explorer at / (the API is served either way).
        #[arg(long, env = "MEMWEAVE_NO_UI")]
        no_ui: bool,
    },
    /// Serve the MCP tools (ask, search, list_documents, document_tree, node,
    /// page, entity) over stdin and stdout, for desktop agents that start
    /// their servers themselves; logs go to stderr.
    ///
    /// A client configuration: {"command": "memweave-query", "args": ["mcp",
    /// "--tables", "/path/to/tables"]}.
    Mcp {
        #[command(flatten)]
        memory: MemoryArgs,
    },
}

/// Readers' JSON Web Tokens: with a key given, a request may present a
/// token instead of the bearer token, and is answered from the rows whose
/// labels share one of its groups, as if no other row were there.
#[derive(clap::Args)]
struct TokenArgs {
    /// File holding the HS256 secret tokens are signed with (at least 32 bytes).
    #[arg(long, env = "MEMWEAVE_JWT_HS256_SECRET_FILE")]
    jwt_hs256_secret_file: Option<std::path::PathBuf>,
    /// A JWK Set (JSON) of the RS256 (RSA) and ES256 (EC P-256) public keys
    /// tokens are signed with; a token's `kid` picks its key.
    #[arg(long, env = "MEMWEAVE_JWKS_FILE")]
    jwks_file: Option<std::path::PathBuf>,
    /// The `iss` every token must name.
    #[arg(long, env = "MEMWEAVE_JWT_ISSUER")]
    jwt_issuer: Option<String>,
    /// The `aud` every token must name.
    #[arg(long, env = "MEMWEAVE_JWT_AUDIENCE")]
    jwt_audience: Option<String>,
    /// The claim holding the principal's groups: a list of strings, or one.
    #[arg(long, env = "MEMWEAVE_JWT_GROUPS_CLAIM", default_value = memweave_query::auth::DEFAULT_GROUPS_CLAIM)]
    jwt_groups_claim: String,
}

impl TokenArgs {
    fn rules(&self) -> anyhow::Result<Option<TokenRules>> {
        let rules = TokenRules::from_sources(TokenSources {
            hs256_secret_file: self.jwt_hs256_secret_file.as_deref(),
            jwks_file: self.jwks_file.as_deref(),
            issuer: self.jwt_issuer.clone(),
            audience: self.jwt_audience.clone(),
            groups_claim: Some(self.jwt_groups_claim.clone()),
        })?;
        anyhow::ensure!(
            rules.is_some() || (self.jwt_issuer.is_none() && self.jwt_audience.is_none()),
            "--jwt-issuer and --jwt-audience need a key: --jwt-hs256-secret-file or --jwks-file"
        );
        Ok(rules)
    }
}

/// Where the memory is and how it is read: what `serve` and `mcp` share.
#[derive(clap::Args)]
struct MemoryArgs {
    /// Root of the memory tables: a path or an object-store URL.
    #[arg(long, env = "MEMWEAVE_TABLES")]
    tables: String,
    /// Seconds between checks for a newer checkpoint (serving one opens
    /// its table versions; nothing is reloaded).
    #[arg(long, default_value_t = 1)]
    refresh_secs: u64,
    #[command(flatten)]
    storage: StorageArgs,
    /// Seconds one answer may take, model calls included (then 504, or a
    /// tool error).
    #[arg(long, default_value_t = 120)]
    request_timeout_secs: u64,
    /// Expensive requests (ask, search, overview, MCP calls, reads at an
    /// earlier epoch) served at once; more are answered 429 with
    /// Retry-After.
    #[arg(long, default_value_t = DEFAULT_EXPENSIVE_IN_FLIGHT)]
    max_expensive_requests: usize,
    /// MiB of memory the replica keeps between questions: half for
    /// Lance's index pages (posting lists, B-tree pages, vector
    /// partitions), an eighth for file metadata, the rest for the rows
    /// walks read most. The replica's memory is about this plus the
    /// questions in flight; 0 reads everything from the tables each time.
    #[arg(long, env = "MEMWEAVE_CACHE_MIB", default_value_t = DEFAULT_CACHE_MIB)]
    cache_mib: u64,
    /// The model navigators ask (the extractive backend by default) and the
    /// embedder the index used (questions are embedded by it too).
    #[command(flatten)]
    model: ModelArgs,
}

impl MemoryArgs {
    /// The service's state over the newest checkpoint (or none yet), kept
    /// fresh in the background.
    async fn open(
        self,
        auth_token: Option<String>,
        tokens: Option<TokenRules>,
    ) -> anyhow::Result<Arc<ServiceState>> {
        let MemoryArgs {
            tables,
            refresh_secs,
            storage,
            request_timeout_secs,
            max_expensive_requests,
            cache_mib,
            model,
        } = self;
        anyhow::ensure!(
            !model.llm.cache_only,
            "--cache-only replays a build's model calls; the query service keeps no calls to replay"
        );
        // The service writes nothing and keeps no replies: its memory does not grow
        // with the questions it answers.
        let (llm, embed) = model.config()?;
        let model = llm.model(CallCache::transient())?;
        let store = TableStore::new(&tables, storage.into_map())?;
        let embedder = embed.embedder(CallCache::transient()).await?;
        let limits = Limits {
            request_timeout: Duration::from_secs(request_timeout_secs.max(1)),
            auth_token,
            tokens: tokens.map(Arc::new),
            expensive_in_flight: max_expensive_requests,
        };
        let cache = Arc::new(ReadCache::new(cache_mib));
        let state = ServiceState::new(store, cache, Arc::new(model), embedder, limits);
        match state.refresh().await {
            Ok(Some(epoch)) => tracing::info!(epoch, "loaded tables"),
            Ok(None) => {
                tracing::warn!(tables = %tables, "no checkpoint yet; /readyz answers 503 until one is committed")
            }
            Err(err) => tracing::warn!(error = %err, "could not load tables yet"),
        }
        let every = Duration::from_secs(refresh_secs.max(1));
        memweave_process::task::spawn("keep_fresh", state.clone().keep_fresh(every));
        Ok(state)
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    init_logging(LogFormat::Text);
    match Cli::parse().command {
        Command::Serve {
            memory,
            listen,
            auth_token_file,
            tokens,
            allowed_hosts,
            no_ui,
        } => {
            serve(
                memory,
                listen,
                auth_token_file,
                tokens,
                allowed_hosts,
                !no_ui,
            )
            .await
        }
        Command::Mcp { memory } => Ok(serve_stdio(memory.open(None, None).await?).await?),
    }
}

async fn serve(
    memory: MemoryArgs,
    listen: SocketAddr,
    auth_token_file: Option<std::path::PathBuf>,
    tokens: Box<TokenArgs>,
    allowed_hosts: Vec<String>,
    explorer: bool,
) -> anyhow::Result<()> {
    let tokens = tokens.rules()?;
    let auth_token = match &auth_token_file {
        Some(path) => {
            let token = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read --auth-token-file {}", path.display()))?
                .trim()
                .to_string();
            anyhow::ensure!(
                !token.is_empty(),
                "--auth-token-file {} is empty",
                path.display()
            );
            Some(token)
        }
        None => None,
    };
    // A guarded service answers every host: the tokens guard it.
    let hosts = if auth_token.is_some() || tokens.is_some() {
        AllowedHosts::Any
    } else {
        AllowedHosts::loopback_and(allowed_hosts)
    };
    let state = memory.open(auth_token, tokens).await?;
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("cannot listen on {listen}"))?;
    let address = listener.local_addr()?;
    tracing::info!(%address, "memweave-query listening");
    if explorer {
        tracing::info!("the web explorer: http://{address}/");
    }
    axum::serve(listener, router(state, hosts, explorer))
        .with_graceful_shutdown(shutdown_signal())
        .await?;
    Ok(())
}

/// SIGINT or SIGTERM (what Kubernetes sends): stop accepting, finish what is in
/// flight, exit.
async fn shutdown_signal() {
    stop_requested().await;
    tracing::info!("shutting down: finishing requests in flight");
}
