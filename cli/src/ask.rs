//! `memweave ask`: one question answered from the tables, with its trace.

use std::collections::HashMap;
use std::sync::Arc;

use memweave_llm::{CallCache, ModelArgs};
use memweave_pipeline::UsageError;
use memweave_process::StorageArgs;
use memweave_query::cache::ReadCache;
use memweave_query::request::RequestError;
use memweave_query::{Answer, AskOptions, AskRequest, Models, Snapshot, Strategy};
use memweave_schemas::{StoreError, TableStore};

/// `memweave ask` reads one question's rows once: small read caches do.
const ASK_CACHE_MIB: u64 = 64;

#[derive(clap::Args)]
pub struct AskArgs {
    /// The question.
    question: String,
    /// Root of the memory tables.
    #[arg(long, env = "MEMWEAVE_TABLES")]
    tables: String,
    /// How to navigate the memory: memwalker (summary tree, model triage),
    /// readagent-p / readagent-s (gists, pages looked up at once / one at a
    /// time), qrmem-trial / qrmem-expand / qrmem (entity graph: the question's
    /// entities / and their neighbours / reflection loop), ilmtr (collapsed
    /// tree + short-term memory), raptor (collapsed tree), bm25 and dense
    /// (top segments, baselines).
    #[arg(long, default_value = "memwalker", value_parser = strategy_names())]
    strategy: String,
    /// Tokens of context the retrieval strategies gather.
    #[arg(long)]
    budget: Option<usize>,
    #[command(flatten)]
    options: AskOptions,
    /// Only consider this document (id); repeatable.
    #[arg(long = "document")]
    documents: Vec<String>,
    /// Print the answer and its trace as JSON (the same body the query service returns).
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    storage: StorageArgs,
    /// The model that navigates (the extractive backend by default) and the
    /// embedder the index used (questions are embedded by it too).
    #[command(flatten)]
    model: ModelArgs,
}

fn strategy_names() -> Vec<&'static str> {
    Strategy::ALL.iter().map(|s| s.name()).collect()
}

impl AskArgs {
    pub fn run(self) -> anyhow::Result<()> {
        let AskArgs {
            question,
            tables,
            strategy,
            budget,
            options,
            documents,
            json,
            storage,
            model,
        } = self;
        let request = strategy.parse().map(|strategy| AskRequest {
            question,
            strategy,
            documents: (!documents.is_empty()).then_some(documents),
            budget,
            options,
            epoch: None,
        });
        request
            .map_err(|e: RequestError| UsageError::of(e).into())
            .and_then(|request| ask(&request, &tables, json, storage.into_map(), &model))
    }
}

fn ask(
    request: &AskRequest,
    tables: &str,
    json: bool,
    storage_options: HashMap<String, String>,
    flags: &ModelArgs,
) -> anyhow::Result<()> {
    if flags.llm.cache_only {
        return Err(UsageError(
            "--cache-only replays a build's model calls; questions are not kept in the tables, so there is nothing to replay them from".into(),
        )
        .into());
    }
    let (llm, embed) = flags.config().map_err(UsageError::of)?;
    // Calls are cached for this question only: asking writes nothing to the tables.
    let model = llm.model(CallCache::in_memory()).map_err(UsageError::of)?;
    let store = TableStore::new(tables, storage_options).map_err(UsageError::of)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let embedder = runtime
        .block_on(embed.embedder(CallCache::in_memory()))
        .map_err(UsageError::of)?;
    let snapshot = runtime
        .block_on(Snapshot::load_latest(
            &store,
            Arc::new(ReadCache::new(ASK_CACHE_MIB)),
        ))
        .map_err(|e| match e {
            older @ StoreError::OlderMemory { .. } => UsageError::of(older).into(),
            other => anyhow::Error::from(other),
        })?
        .ok_or_else(|| {
            UsageError(format!(
                "no memory under {tables}: run `memweave index SOURCE --out {tables}` first"
            ))
        })?;
    runtime
        .block_on(snapshot.validate(request))?
        .map_err(UsageError::of)?;
    let models = Models {
        model: &model,
        embedder: &*embedder,
    };
    let answer = runtime.block_on(memweave_query::ask(&snapshot, request, models))?;
    if json {
        print_json(&answer)?;
    } else {
        print_answer(&answer);
    }
    Ok(())
}

#[allow(clippy::print_stdout)]
fn print_json(answer: &Answer) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(answer)?);
    Ok(())
}

#[allow(clippy::print_stdout)]
fn print_answer(answer: &Answer) {
    println!(
        "Answer ({}, epoch {}):",
        answer.strategy.name(),
        answer.epoch
    );
    print_wrapped(&answer.answer, "  ");
    if !answer.supporting.is_empty() {
        println!("\nSupporting passages:");
    }
    for (n, passage) in answer.supporting.iter().enumerate() {
        let section = (passage.section.as_ref())
            .map(|s| format!(", {}", s.cited()))
            .unwrap_or_default();
        println!(
            "  [{}] \"{}\" ({}){section}, characters {}–{}",
            n + 1,
            passage.title,
            passage.source_uri,
            passage.start_char,
            passage.end_char
        );
        let excerpt: String = passage.text.chars().take(240).collect();
        let more = if excerpt.len() < passage.text.len() {
            "…"
        } else {
            ""
        };
        print_wrapped(&format!("\"{excerpt}{more}\""), "      ");
    }
    let usage = &answer.usage;
    println!(
        "\nTrace ({} steps; {} model calls, {} tokens in, {} out, {} ms waiting on the model):",
        answer.trace.len(),
        usage.model_calls,
        usage.tokens_in,
        usage.tokens_out,
        usage.model_ms
    );
    for step in &answer.trace {
        let indent = "  ".repeat(step.depth as usize + 1);
        let level = step.level.map(|l| format!(" L{l}")).unwrap_or_default();
        let target = if step.target.is_empty() {
            String::new()
        } else {
            format!(" {}", short(&step.target))
        };
        let chosen = step
            .signal
            .map(|s| format!(" by {}", s.name()))
            .unwrap_or_default();
        println!(
            "{:>3} {indent}{}{target}{level}  score {:.2}{chosen}",
            step.step, step.action, step.score
        );
        let detail = format!("    {indent}");
        print_wrapped(&step.reasoning, &detail);
        if !step.calls.is_empty() {
            let calls: Vec<String> = step
                .calls
                .iter()
                .map(|c| {
                    if c.cached {
                        format!("{} (answered by an identical call)", c.task)
                    } else {
                        format!(
                            "{} {}→{} tokens {} ms",
                            c.task, c.tokens_in, c.tokens_out, c.latency_ms
                        )
                    }
                })
                .collect();
            print_wrapped(&format!("model: {}", calls.join("; ")), &detail);
        }
    }
}

/// Prints `text` in lines of at most about 100 characters, each after `indent`.
#[allow(clippy::print_stdout)]
fn print_wrapped(text: &str, indent: &str) {
    const WIDTH: usize = 100;
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && indent.len() + line.len() + 1 + word.len() > WIDTH {
            println!("{indent}{line}");
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        println!("{indent}{line}");
    }
}

fn short(id: &str) -> &str {
    &id[..id.len().min(12)]
}
