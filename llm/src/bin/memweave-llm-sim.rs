//! `memweave-llm-sim`: a simulated OpenAI-compatible model server.

use std::net::SocketAddr;
use std::process::ExitCode;

use clap::Parser;
use memweave_llm::sim::{self, Fault, Sim, SimConfig};
use memweave_operators::model::Task;

/// A SIMULATOR of an OpenAI-compatible model server, for tests and benchmarks.
/// It is not a language model: it answers memweave's prompts with extractive
/// replies (sentences chosen from the prompt), formatted as the papers' prompts
/// ask and with the formatting drift real models show.
///
/// It models a GPU server: --slots sequences run at once, the rest wait in a
/// queue; a request holds its slot for --latency-ms plus prompt tokens /
/// --prefill-tokens-per-s plus output tokens / --decode-tokens-per-s. With
/// --fault-rate it misbehaves on that share of requests, spread evenly over
/// --faults, drawn from a generator seeded by --seed.
///
/// Serves /v1/chat/completions, /v1/embeddings (hashing vectors), /v1/models,
/// /metrics (Prometheus: queue depth, busy slots, busy slot-seconds, faults, and
/// vLLM's vllm:num_requests_waiting), /sim/stats (JSON) and /sim/config (GET, or
/// POST a new config to change faults and latency while it runs).
#[derive(Parser)]
#[command(
    name = "memweave-llm-sim",
    version,
    after_help = "Example:\n  memweave-llm-sim --listen 127.0.0.1:8000 --slots 64 --latency-ms 200 --fault-rate 0.2 --seed 7\n  memweave index docs --out mem --backend openai --llm-url http://127.0.0.1:8000/v1 --llm-model memweave-sim"
)]
struct Cli {
    /// Address to listen on (port 0 picks a free port; the address is printed).
    #[arg(long, default_value = "127.0.0.1:8000")]
    listen: SocketAddr,
    /// Requests served at once; the rest queue.
    #[arg(long, default_value_t = 64)]
    slots: usize,
    /// Fixed time a request holds its slot, in milliseconds.
    #[arg(long, default_value_t = 200.0)]
    latency_ms: f64,
    /// Prompt tokens per second per slot (0: prefill is free).
    #[arg(long, default_value_t = 0.0)]
    prefill_tokens_per_s: f64,
    /// Output tokens per second per slot (0: decoding is free).
    #[arg(long, default_value_t = 0.0)]
    decode_tokens_per_s: f64,
    /// Share of requests that meet a fault (0 to 1).
    #[arg(long, default_value_t = 0.0)]
    fault_rate: f64,
    /// Fault kinds the rate is spread over.
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = Fault::DEFAULT.to_vec())]
    faults: Vec<Fault>,
    /// Only requests of these tasks meet faults (names as in `llm_calls.task`,
    /// e.g. same_entity,merge_relations); every request when not given.
    #[arg(long, value_delimiter = ',')]
    fault_tasks: Vec<String>,
    /// Seed of the fault and drift draws.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Share of replies dressed in formatting drift (0 to 1).
    #[arg(long, default_value_t = 0.5)]
    drift: f64,
    /// Queue length beyond which requests get 503.
    #[arg(long, default_value_t = 100_000)]
    max_queue: usize,
    /// A provider-style quota: requests in flight beyond it get 429.
    #[arg(long)]
    max_in_flight: Option<usize>,
    /// Model name listed by /v1/models.
    #[arg(long, default_value = "memweave-sim")]
    model: String,
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    memweave_process::init_logging(memweave_process::LogFormat::Text);
    if !(0.0..=1.0).contains(&cli.fault_rate) || !(0.0..=1.0).contains(&cli.drift) {
        tracing::error!("--fault-rate and --drift are shares between 0 and 1");
        return ExitCode::from(2);
    }
    let tasks: Vec<&str> = Task::ALL.iter().map(|t| t.name()).collect();
    if let Some(unknown) = (cli.fault_tasks.iter()).find(|t| !tasks.contains(&t.as_str())) {
        tracing::error!(
            "--fault-tasks: {unknown:?} is no task; the tasks are {}",
            tasks.join(", ")
        );
        return ExitCode::from(2);
    }
    let config = SimConfig {
        model: cli.model,
        slots: cli.slots.max(1),
        latency_ms: cli.latency_ms,
        prefill_tokens_per_s: cli.prefill_tokens_per_s,
        decode_tokens_per_s: cli.decode_tokens_per_s,
        fault_rate: cli.fault_rate,
        faults: cli.faults,
        fault_tasks: cli.fault_tasks,
        seed: cli.seed,
        drift: cli.drift,
        max_queue: cli.max_queue,
        max_in_flight: cli.max_in_flight,
    };
    let listener = match tokio::net::TcpListener::bind(cli.listen).await {
        Ok(listener) => listener,
        Err(e) => {
            tracing::error!("cannot listen on {}: {e}", cli.listen);
            return ExitCode::from(2);
        }
    };
    let address = listener
        .local_addr()
        .map_or_else(|_| cli.listen.to_string(), |a| a.to_string());
    // The first stdout line names the address, for scripts that asked for port 0.
    #[allow(clippy::print_stdout)]
    {
        println!("listening on {address}");
    }
    tracing::info!(
        address,
        slots = config.slots,
        latency_ms = config.latency_ms,
        fault_rate = config.fault_rate,
        "simulated model server listening (a simulator, not a language model)"
    );
    match sim::serve(listener, Sim::new(config)).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("serving: {e}");
            ExitCode::FAILURE
        }
    }
}
