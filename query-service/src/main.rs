//! `memweave-query`: the stateless query service.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};
use memweave_llm::{CallCache, LlmArgs};
use memweave_query::http::{ServiceState, router};
use memweave_query::parse_storage_option;
use memweave_schemas::TableStore;

#[derive(Parser)]
#[command(
    name = "memweave-query",
    version,
    about = "Answer questions over memweave memory tables, over HTTP"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve POST /v1/ask, /healthz and /readyz over the newest checkpoint of TABLES.
    ///
    /// The service reads only the table versions a checkpoint names and picks up
    /// newer checkpoints without restarting.
    Serve {
        /// Root of the memory tables: a path or an object-store URL.
        #[arg(long, env = "MEMWEAVE_TABLES")]
        tables: String,
        /// Address to listen on.
        #[arg(long, env = "MEMWEAVE_LISTEN", default_value = "127.0.0.1:8080")]
        listen: SocketAddr,
        /// Seconds between checks for a newer checkpoint.
        #[arg(long, default_value_t = 5)]
        refresh_secs: u64,
        /// Object-store setting KEY=VALUE (endpoint, region, credentials); repeatable.
        #[arg(long = "storage-option", value_parser = parse_storage_option)]
        storage_options: Vec<(String, String)>,
        /// The model navigators ask (the extractive backend by default).
        #[command(flatten)]
        llm: LlmArgs,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| memweave_query::DEFAULT_LOG_FILTER.into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let Command::Serve {
        tables,
        listen,
        refresh_secs,
        storage_options,
        llm,
    } = Cli::parse().command;
    anyhow::ensure!(
        !llm.cache_only,
        "--cache-only replays a build's model calls; the query service keeps no calls to replay"
    );
    // Answers are cached in memory only: the service writes nothing.
    let model = llm
        .model(CallCache::in_memory())
        .map_err(|message| anyhow::anyhow!(message))?;
    let store = TableStore::new(
        &tables,
        storage_options.into_iter().collect::<HashMap<_, _>>(),
    )?;
    let state = ServiceState::new(store, Arc::new(model));
    match state.refresh().await {
        Ok(Some(epoch)) => tracing::info!(epoch, "loaded tables"),
        Ok(None) => {
            tracing::warn!(tables = %tables, "no checkpoint yet; /readyz answers 503 until one is committed")
        }
        Err(err) => tracing::warn!(error = %err, "could not load tables yet"),
    }
    tokio::spawn(
        state
            .clone()
            .keep_fresh(Duration::from_secs(refresh_secs.max(1))),
    );
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("cannot listen on {listen}"))?;
    tracing::info!(address = %listener.local_addr()?, "memweave-query listening");
    axum::serve(listener, router(state))
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}
