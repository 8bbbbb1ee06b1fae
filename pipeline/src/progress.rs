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
    /// Documents of the files read so far that the round is to build: a
    /// file of many (a dataset) counts for its documents, not as one file.
    expected_documents: AtomicU64,
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
            expected_documents: AtomicU64::new(0),
            started: Instant::now(),
            last_log: Mutex::new(Instant::now()),
        })
    }

    /// The files read hold `documents` more documents to build.
    pub fn expect(&self, documents: u64) {
        self.expected_documents
            .fetch_add(documents, Ordering::Relaxed);
    }

    /// `files` more files, holding `documents` documents, are fully processed.
    pub fn advance(&self, files: u64, documents: u64) {
        let done = self.files.fetch_add(files, Ordering::Relaxed) + files;
        let docs = self.documents.fetch_add(documents, Ordering::Relaxed) + documents;
        let expected = self.expected_documents.load(Ordering::Relaxed).max(docs);
        let seconds = self.started.elapsed().as_secs_f64().max(1e-3);
        let rate = docs as f64 / seconds;
        if let Some(bar) = &self.bar {
            bar.set_position(done);
            bar.set_message(format!("{docs}/{expected} docs · {rate:.1} docs/s"));
            return;
        }
        let mut last = self.last_log.lock().unwrap_or_else(|e| e.into_inner());
        // Every few seconds, and when the last file's epoch is done (once:
        // a dataset's documents go on after its file's epoch).
        let last_file = files > 0 && done == self.total_files;
        if last.elapsed() >= LOG_EVERY || last_file {
            *last = Instant::now();
            // By files, or by the documents of the files read where that is
            // longer: one big dataset is one file until its last row.
            let remaining = |total: u64, done: u64| {
                let rate = done as f64 / seconds;
                if rate > 0.0 {
                    total.saturating_sub(done) as f64 / rate
                } else {
                    0.0
                }
            };
            let eta_secs = remaining(self.total_files, done).max(remaining(expected, docs));
            tracing::info!(
                files_done = done,
                files_total = self.total_files,
                documents = docs,
                documents_read = expected,
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

/// How often a round's stages are reported while any has work pending: well
/// inside the minute a long run may go without a progress line.
const STAGES_EVERY: Duration = Duration::from_secs(10);

/// The work of a round's stages as done of started: each asynchronous stage
/// of the dataflow (`BuildMemory`, `ResolveEntities`, `MergeRelations`, the
/// corpus trees), the writes of output batches and the commit of each table.
/// A stage's total grows as work reaches it; once its input is complete (the
/// cross-document stages see a round at once) it is the real total.
#[derive(Debug, Default)]
pub struct StageProgress {
    stages: Mutex<Vec<(&'static str, StageCount)>>,
}

#[derive(Debug, Clone, Copy)]
struct StageCount {
    started: u64,
    done: u64,
    since: Instant,
}

/// One stage's counts at a moment.
#[derive(Debug, Clone, PartialEq)]
pub struct StageState {
    pub stage: &'static str,
    pub done: u64,
    pub total: u64,
    /// Seconds to finish at the stage's rate so far, once it has one.
    pub eta_secs: Option<f64>,
}

impl StageProgress {
    pub fn new() -> Arc<Self> {
        Arc::default()
    }

    /// `n` more units of work reached `stage`.
    pub fn started(&self, stage: &'static str, n: u64) {
        self.update(stage, |c| c.started += n);
    }

    /// `n` units of `stage`'s work are done.
    pub fn done(&self, stage: &'static str, n: u64) {
        self.update(stage, |c| c.done += n);
    }

    fn update(&self, stage: &'static str, change: impl FnOnce(&mut StageCount)) {
        let mut stages = self.stages.lock().unwrap_or_else(|e| e.into_inner());
        let index = match stages.iter().position(|(s, _)| *s == stage) {
            Some(index) => index,
            None => {
                let count = StageCount {
                    started: 0,
                    done: 0,
                    since: Instant::now(),
                };
                stages.push((stage, count));
                stages.len() - 1
            }
        };
        change(&mut stages[index].1);
    }

    /// Forgets the last round's counts.
    pub fn reset(&self) {
        self.stages
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }

    /// Every stage's counts, in the order work first reached them.
    pub fn states(&self) -> Vec<StageState> {
        let stages = self.stages.lock().unwrap_or_else(|e| e.into_inner());
        stages
            .iter()
            .map(|(stage, c)| {
                let rate = c.done as f64 / c.since.elapsed().as_secs_f64().max(1e-3);
                StageState {
                    stage,
                    done: c.done,
                    total: c.started,
                    eta_secs: (c.done > 0).then(|| (c.started - c.done) as f64 / rate),
                }
            })
            .collect()
    }

    /// Logs each stage with work pending every [`STAGES_EVERY`], until the
    /// runtime stops.
    pub fn spawn_reporter(self: &Arc<Self>, runtime: &tokio::runtime::Handle) {
        let stages = Arc::clone(self);
        memweave_process::task::spawn_on(runtime, "stage_reporter", async move {
            let mut every = tokio::time::interval(STAGES_EVERY);
            every.tick().await;
            loop {
                every.tick().await;
                for state in stages.states() {
                    if state.done < state.total {
                        tracing::info!(
                            stage = state.stage,
                            done = state.done,
                            total = state.total,
                            eta_secs = state.eta_secs.map(|s| format!("{s:.0}")),
                            "round progress"
                        );
                    }
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stages_count_done_of_started_in_the_order_they_began() {
        let stages = StageProgress::new();
        stages.started("BuildMemory", 4);
        stages.started("write", 1);
        stages.done("BuildMemory", 3);
        stages.started("BuildMemory", 2);
        let states = stages.states();
        let counts: Vec<(&str, u64, u64)> =
            states.iter().map(|s| (s.stage, s.done, s.total)).collect();
        assert_eq!(counts, vec![("BuildMemory", 3, 6), ("write", 0, 1)]);
        assert!(states[0].eta_secs.is_some_and(|s| s >= 0.0));
        assert_eq!(states[1].eta_secs, None, "no rate before anything is done");
        stages.reset();
        assert!(stages.states().is_empty());
    }
}
