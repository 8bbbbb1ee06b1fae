//! Gaussian mixtures side by side with scikit-learn, as RAPTOR uses them: pg-essays
//! in ~100-token chunks, hashing embeddings, reduced to 10 dimensions, a
//! full-covariance mixture for every k in 1..=50, the k of lowest BIC. Then one
//! million points, for time and peak memory.
//!
//! Run: `cargo bench --workspace --bench mixture` (release; `--profile dev` works
//! too and reports slower figures). Installs scikit-learn from PyPI into the
//! Python it finds (`MEMWEAVE_PYTHON`, else `python3`) when it is missing.

#![allow(clippy::print_stdout, clippy::unwrap_used)]

use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

use memweave_operators::lexical::hashing_embedding;
use memweave_operators::mixture::{GaussianMixture, MixtureConfig, Points, cluster};
use memweave_operators::reduce::principal_components;
use memweave_operators::text::{sentences, word_count};

/// About 100 tokens of English prose.
const CHUNK_WORDS: usize = 75;
const EMBEDDING_DIM: usize = 256;
const REDUCED_DIM: usize = 10;

const SKLEARN: &str = r#"
import json, sys, time
import numpy as np
from sklearn.mixture import GaussianMixture
points = np.loadtxt(sys.argv[1], delimiter=",")
max_k = int(sys.argv[2])
started = time.perf_counter()
fits = []
for k in range(1, min(max_k, len(points)) + 1):
    gm = GaussianMixture(n_components=k, covariance_type="full", tol=1e-3, reg_covar=1e-6,
                         max_iter=100, init_params="k-means++", random_state=224).fit(points)
    fits.append((gm.bic(points), k, gm))
bic, k, gm = min(fits, key=lambda f: (f[0], f[1]))
seconds = time.perf_counter() - started
print(json.dumps({"seconds": seconds, "k": k, "bic": bic,
                  "log_likelihood": float(gm.score(points) * len(points))}))
"#;

fn chunks(dir: &Path) -> Vec<String> {
    let files = memweave_benches::files_in(dir);
    let mut chunks = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(file).unwrap();
        let mut chunk = String::new();
        for sentence in sentences(&text) {
            chunk.push_str(sentence.of(&text));
            chunk.push(' ');
            if word_count(&chunk) >= CHUNK_WORDS {
                chunks.push(std::mem::take(&mut chunk));
            }
        }
        if !chunk.trim().is_empty() {
            chunks.push(chunk);
        }
    }
    chunks
}

fn python() -> String {
    std::env::var("MEMWEAVE_PYTHON").unwrap_or_else(|_| "python3".into())
}

fn ensure_sklearn(python: &str) {
    let present = Command::new(python)
        .args(["-c", "import sklearn"])
        .status()
        .is_ok_and(|s| s.success());
    if !present {
        let installed = Command::new(python)
            .args(["-m", "pip", "install", "-q", "scikit-learn"])
            .status()
            .unwrap();
        assert!(installed.success(), "pip could not install scikit-learn");
    }
}

fn peak_rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

fn main() {
    let config = MixtureConfig::default();
    let dir = memweave_benches::shared_data("pg-essays");
    let texts = chunks(&dir);
    let embedded: Vec<f64> = texts
        .iter()
        .flat_map(|t| {
            hashing_embedding(t, EMBEDDING_DIM)
                .into_iter()
                .map(f64::from)
        })
        .collect();
    let reduced = principal_components(&Points::new(embedded, EMBEDDING_DIM), REDUCED_DIM);

    let started = Instant::now();
    let ours = cluster(&reduced, &config);
    let our_seconds = started.elapsed().as_secs_f64();
    let best = GaussianMixture::fit(&reduced, ours.components, &config);
    let our_bic = ours.bic[ours.components - 1];

    let csv = tempfile::NamedTempFile::new().unwrap();
    {
        let mut out = std::io::BufWriter::new(csv.as_file());
        for i in 0..reduced.len() {
            let row: Vec<String> = reduced.row(i).iter().map(|v| format!("{v:e}")).collect();
            writeln!(out, "{}", row.join(",")).unwrap();
        }
    }
    let python = python();
    ensure_sklearn(&python);
    let sklearn = memweave_benches::json_output(
        Command::new(&python)
            .args(["-c", SKLEARN])
            .arg(csv.path())
            .arg(config.max_components.to_string())
            // The same two cores for both.
            .env("OMP_NUM_THREADS", "2")
            .env("OPENBLAS_NUM_THREADS", "2")
            .env("MKL_NUM_THREADS", "2"),
    );
    println!(
        "pg-essays: {} chunks of ~100 tokens, hashing embeddings ({EMBEDDING_DIM}) reduced to {REDUCED_DIM} by PCA, full covariances, k = 1..={} by BIC",
        reduced.len(),
        config.max_components
    );
    println!(
        "  memweave:     {our_seconds:>7.2} s, k = {:>2}, BIC {our_bic:.1}, log-likelihood {:.1}",
        ours.components,
        best.log_likelihood(&reduced)
    );
    let sk_seconds = sklearn["seconds"].as_f64().unwrap();
    println!(
        "  scikit-learn: {sk_seconds:>7.2} s, k = {:>2}, BIC {:.1}, log-likelihood {:.1}",
        sklearn["k"],
        sklearn["bic"].as_f64().unwrap(),
        sklearn["log_likelihood"].as_f64().unwrap()
    );
    println!(
        "  memweave is {:.1}× as fast",
        sk_seconds / our_seconds.max(1e-9)
    );

    // One million points in 10 dimensions around 40 centres.
    let n = 1_000_000;
    let mut state = 1u64;
    let mut uniform = move || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (state >> 11) as f64 / (1u64 << 53) as f64
    };
    let centres: Vec<f64> = (0..40 * REDUCED_DIM).map(|_| uniform() * 40.0).collect();
    let values: Vec<f64> = (0..n)
        .flat_map(|i| {
            let centre = (i * 7919) % 40;
            (0..REDUCED_DIM)
                .map(|j| centres[centre * REDUCED_DIM + j] + (uniform() + uniform() - 1.0) * 2.0)
                .collect::<Vec<_>>()
        })
        .collect();
    let million = Points::new(values, REDUCED_DIM);
    let started = Instant::now();
    let clustering = cluster(&million, &config);
    println!(
        "1,000,000 points, {REDUCED_DIM} dimensions, 40 true clusters: k = {} chosen on a {}-point sample, fitted on all in {:.1} s total; peak memory {:.0} MiB",
        clustering.components,
        config.selection_sample,
        started.elapsed().as_secs_f64(),
        peak_rss_mib()
    );
}
