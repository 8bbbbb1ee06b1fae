//! Pool utilisation: build pg-essays against the simulator (64 slots, ~200 ms a
//! call) and report how full the build kept the pool, without and with 20% faults.
//!
//! utilisation = busy slot-seconds / (slots × seconds from the first request to
//! the last reply); wall / floor = build wall time / (busy slot-seconds / slots).
//!
//! Run: `cargo bench --workspace --bench pool` (or with `--profile dev` to reuse a
//! debug build). Needs ../shared/data/pg-essays.

#![allow(clippy::print_stdout, clippy::unwrap_used)]

use std::time::{Duration, Instant};

use memweave_llm::sim::{Sim, SimConfig};
use memweave_llm::{LlmConfig, PoolConfig};
use memweave_pipeline::index::{IndexOptions, run_index};

const SLOTS: usize = 64;
const LATENCY_MS: f64 = 200.0;

fn llm(url: &str) -> LlmConfig {
    LlmConfig::openai(PoolConfig {
        timeout: Duration::from_secs(2),
        initial_concurrency: SLOTS,
        // A little over the slots: requests in transit or hung still hold a client slot.
        max_concurrency: SLOTS + SLOTS / 4,
        ..PoolConfig::new(vec![url.to_string()], "memweave-sim")
    })
}

fn run(label: &str, fault_rate: f64) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let sim = Sim::new(SimConfig {
        fault_rate,
        seed: 42,
        ..SimConfig::new(SLOTS, LATENCY_MS)
    });
    let url = memweave_llm::sim::serve_on_loopback(runtime.handle(), &sim).unwrap();

    let source = memweave_benches::shared_data("pg-essays");
    let out = tempfile::tempdir().unwrap();
    let tables = out.path().join("memory");
    let options = IndexOptions {
        workers: 2,
        llm: llm(&url),
        ..IndexOptions::new(source.display().to_string(), tables.display().to_string())
    };
    // Busy slots every 100 ms, to show where the pool idles (ramp-up, tail).
    let sampler = std::sync::Arc::clone(&sim);
    let samples = memweave_process::task::spawn_on(runtime.handle(), "sample_slots", async move {
        let mut busy = Vec::new();
        loop {
            tokio::time::sleep(Duration::from_millis(100)).await;
            busy.push(sampler.stats().busy_slots);
            if busy.len() > 600
                || (busy.len() > 5
                    && busy.iter().rev().take(5).all(|&b| b == 0)
                    && sampler.stats().completed > 0)
            {
                return busy;
            }
        }
    });
    let started = Instant::now();
    let summary = run_index(&options).unwrap();
    let wall = started.elapsed().as_secs_f64();
    let stats = sim.stats();
    let utilisation = stats.busy_slot_seconds / (SLOTS as f64 * stats.active_seconds);
    let floor = stats.busy_slot_seconds / SLOTS as f64;
    println!(
        "{label}: {} documents, {} calls ({} requests, {} faults), utilisation {:.1}% over {:.2}s of pool activity, build wall {:.2}s = {:.2}× the floor of {:.2}s",
        summary.documents,
        stats.completed,
        stats.requests,
        stats.faults.values().sum::<u64>(),
        utilisation * 100.0,
        stats.active_seconds,
        wall,
        wall / floor,
        floor,
    );
    let pool = summary.pool.clone().unwrap();
    println!(
        "  peak busy slots {}, peak requests at the server {}, client peak in flight {}, hedged copies {}, final limit {:.0}",
        stats.peak_busy_slots,
        stats.peak_in_flight,
        pool.peak_in_flight,
        pool.hedged,
        pool.limits[0]
    );
    let busy = runtime.block_on(samples).unwrap();
    println!(
        "  busy slots per 100 ms: {}",
        busy.iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(" ")
    );
    assert!(summary.errors.is_empty(), "{:?}", summary.errors);
}

fn main() {
    // `cargo bench` passes --bench; the figures are the point, not a harness.
    run("fault-free", 0.0);
    if std::env::var_os("POOL_BENCH_FAULT_FREE_ONLY").is_none() {
        run("20% faults", 0.2);
    }
}
