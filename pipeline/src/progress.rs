//! Progress of a long run: a bar with documents/s and ETA on a terminal, and
//! periodic structured log lines otherwise.

use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// How often a non-terminal run logs its progress.
const LOG_EVERY: Duration = Duration::from_secs(5);

#[derive(Debug)]
pub struct Progress {
    bar: Option<ProgressBar>,
    total_files: u64,
    files: AtomicU64,
    documents: AtomicU64,
    started: Instant,
    last_log: Mutex<Instant>,
}

impl Progress {
    /// A bar when stderr is a terminal and `interactive` allows it, else log lines.
    pub fn new(total_files: u64, interactive: bool) -> Arc<Self> {
        let bar = (interactive && std::io::stderr().is_terminal()).then(|| {
            let bar =
                ProgressBar::with_draw_target(Some(total_files), ProgressDrawTarget::stderr());
            bar.set_style(
                ProgressStyle::with_template(
                    "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} files · {msg} · ETA {eta}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            bar.set_message("0 docs");
            bar.enable_steady_tick(Duration::from_millis(200));
            bar
        });
        Arc::new(Progress {
            bar,
            total_files,
            files: AtomicU64::new(0),
            documents: AtomicU64::new(0),
            started: Instant::now(),
            last_log: Mutex::new(Instant::now()),
        })
    }

    /// `files` more files, holding `documents` documents, are fully processed.
    pub fn advance(&self, files: u64, documents: u64) {
        let done = self.files.fetch_add(files, Ordering::Relaxed) + files;
        let docs = self.documents.fetch_add(documents, Ordering::Relaxed) + documents;
        let rate = docs as f64 / self.started.elapsed().as_secs_f64().max(1e-3);
        if let Some(bar) = &self.bar {
            bar.set_position(done);
            bar.set_message(format!("{docs} docs · {rate:.1} docs/s"));
            return;
        }
        let mut last = self.last_log.lock().unwrap_or_else(|e| e.into_inner());
        if last.elapsed() >= LOG_EVERY || done == self.total_files {
            *last = Instant::now();
            let file_rate = done as f64 / self.started.elapsed().as_secs_f64().max(1e-3);
            let eta_secs = if file_rate > 0.0 {
                (self.total_files.saturating_sub(done)) as f64 / file_rate
            } else {
                0.0
            };
            tracing::info!(
                files_done = done,
                files_total = self.total_files,
                documents = docs,
                docs_per_sec = format!("{rate:.1}"),
                eta_secs = format!("{eta_secs:.0}"),
                "indexing"
            );
        }
    }

    /// Files (or messages) of the round done, of them all, and documents built.
    pub fn counts(&self) -> (u64, u64, u64) {
        (
            self.files.load(Ordering::Relaxed),
            self.total_files,
            self.documents.load(Ordering::Relaxed),
        )
    }

    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}
