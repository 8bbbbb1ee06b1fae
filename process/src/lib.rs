//! What every memweave binary (`memweave`, `memweave-query`,
//! `memweave-llm-sim`) does alike, in one place: logging to stderr, waiting
//! for the signal to stop, and reading `KEY=VALUE` settings off a command line;
//! and what every crate does one way: catching a panic ([`panics`]) and
//! starting a task ([`task`]).

pub mod panics;
pub mod task;

use std::collections::HashMap;

/// Log filter unless RUST_LOG says otherwise: Lance logs every scan at info,
/// and warns of every empty partition when a vector index takes a round's few
/// new vectors (hundreds of lines a commit).
pub const DEFAULT_LOG_FILTER: &str = "info,lance=warn,lance::index::vector::builder=error,lance_core=warn,lance_io=warn,lance_file=warn,lance_encoding=warn,lance_table=warn";

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// One line of text per event, for a terminal.
    Text,
    /// One JSON object per event, for a log collector.
    Json,
}

/// Logs to stderr, filtered by RUST_LOG or else [`DEFAULT_LOG_FILTER`].
pub fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| DEFAULT_LOG_FILTER.into());
    let builder = tracing_subscriber::fmt()
        // With its stderr closed (`| head`) the subscriber would report the failed
        // write with eprintln!, which panics the logging task.
        .log_internal_errors(false)
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.with_target(false).init(),
        LogFormat::Json => builder.json().init(),
    }
}

/// Returns when Ctrl-C (SIGINT) or SIGTERM (what Kubernetes sends) arrives.
/// Installing the handlers replaces the default action, so a caller that
/// waits on this decides how the process ends.
pub async fn stop_requested() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut terminate =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                .expect("a SIGTERM handler can be installed");
        tokio::select! {
            _ = interrupt => {},
            _ = terminate.recv() => {},
        }
    }
    #[cfg(not(unix))]
    {
        let _ = interrupt.await;
    }
}

/// The tables' object-store settings, as every command that reads or writes
/// them takes them.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct StorageArgs {
    /// Object-store setting of the tables, KEY=VALUE (endpoint, region,
    /// credentials, as object_store names them); repeatable.
    #[arg(long = "storage-option", value_parser = parse_key_value)]
    pub storage_options: Vec<(String, String)>,
}

impl StorageArgs {
    pub fn into_map(self) -> HashMap<String, String> {
        self.storage_options.into_iter().collect()
    }
}

/// Parses `KEY=VALUE` object-store settings given on a command line.
pub fn parse_key_value(option: &str) -> Result<(String, String), String> {
    option
        .split_once('=')
        .map(|(k, v)| (k.trim().to_string(), v.to_string()))
        .filter(|(k, _)| !k.is_empty())
        .ok_or_else(|| format!("expected KEY=VALUE, got {option:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_setting_is_split_at_its_first_equals_sign() {
        assert_eq!(
            parse_key_value(" aws_region=eu=1"),
            Ok(("aws_region".to_string(), "eu=1".to_string()))
        );
        assert!(parse_key_value("=x").unwrap_err().contains("KEY=VALUE"));
        assert!(parse_key_value("novalue").is_err());
    }
}
