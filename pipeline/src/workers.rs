//! The dataflow's worker threads, kept alive across rounds: the main thread sends
//! each worker its share of a round's input changes, then seals the round; each
//! worker answers with the changes of its share of every table.
//!
//! In a cluster only process 0 feeds input (the dataflow spreads documents over
//! every process's workers by document id) and gathers the output; the workers
//! of the other processes close their inputs and compute until process 0 closes
//! its own, reporting each round they see finished.

use std::collections::VecDeque;
use std::sync::mpsc::{self, Receiver, Sender, SyncSender, TryRecvError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use memweave_operators::build::BuildConfig;
use timely::worker::Worker;

use crate::IndexError;
use crate::cluster::Cluster;
use crate::dataflow::{self, Fed, Services, restore_time, round_start, round_time};
use crate::progress::Progress;
use crate::write::StagedPart;

/// Input epochs a worker may have in flight (fed, memory not yet built): enough
/// documents to keep a model pool busy, few enough to bound memory.
const EPOCHS_IN_FLIGHT: usize = 8;
/// Longest a worker sleeps waiting for model replies or input before looking again.
const PARK: Duration = Duration::from_millis(20);

/// A change to the input collection: a document version (with the time it was
/// first seen) inserted (+1) or retracted (-1), or a state restored (+1).
pub type InputChange = (Fed, isize);

enum ToWorker {
    /// Changes for one input epoch; with them `origins` files or messages
    /// are all sent (progress counts them done once the epoch is built).
    Changes {
        time: u64,
        origins: usize,
        changes: Vec<InputChange>,
    },
    /// Every change of the round is sent: finish it and report.
    Seal { time: u64 },
}

/// The running workers of one process.
pub struct Workers {
    /// Empty in a process other than 0: it takes no input.
    senders: Vec<SyncSender<ToWorker>>,
    /// One message per worker per round it finished: what was staged (all
    /// workers' parts, at worker 0), or its failure.
    outputs: Receiver<Result<Vec<StagedPart>, IndexError>>,
    guards: Option<timely::communication::initialize::WorkerGuards<()>>,
    /// This process's workers.
    local: usize,
}

impl std::fmt::Debug for Workers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Workers")
            .field("peers", &self.senders.len())
            .finish_non_exhaustive()
    }
}

impl Workers {
    /// Starts `cluster`'s workers (`local` in this process), each building the
    /// indexing dataflow on `services`; process 0's report each epoch to
    /// `progress`.
    pub fn start(
        cluster: &Cluster,
        local: usize,
        services: Services,
        build: BuildConfig,
        progress: Arc<Mutex<Arc<Progress>>>,
    ) -> Result<Workers, IndexError> {
        let process = cluster.process;
        let feeds = if process == 0 { local } else { 0 };
        let (senders, receivers): (Vec<_>, Vec<_>) =
            (0..feeds).map(|_| mpsc::sync_channel(1)).unzip();
        let receivers: Mutex<Vec<Option<Receiver<ToWorker>>>> =
            Mutex::new(receivers.into_iter().map(Some).collect());
        let (output_sender, outputs) = mpsc::channel();
        let output_sender = Mutex::new(output_sender);
        let (builders, network) = cluster.communication(local)?;
        let config = timely::WorkerConfig::default();
        let guards = timely::execute::execute_from(builders, network, config, move |worker| {
            let outbox = output_sender
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
            let handles = dataflow::build(worker, &services, build);
            if process != 0 {
                return compute(worker, handles, &outbox);
            }
            // Global worker indices; process 0's are 0..local.
            let inbox = receivers.lock().unwrap_or_else(|e| e.into_inner())[worker.index()].take();
            if let Some(inbox) = inbox {
                serve(worker, handles, &inbox, &outbox, &progress);
            }
        })
        .map_err(IndexError::StartWorkers)?;
        Ok(Workers {
            local,
            senders,
            outputs,
            guards: Some(guards),
        })
    }

    /// Workers that take input (this process's, in process 0).
    pub fn feeds(&self) -> usize {
        self.senders.len()
    }

    /// In a process other than 0: waits for the rounds process 0 feeds, calling
    /// `finished` once per round this process's workers have all seen end, and
    /// returns when process 0 closes the input (or a worker fails).
    pub fn follow_rounds(&self, mut finished: impl FnMut()) -> Result<(), IndexError> {
        let mut reports = 0;
        // Each worker drops its sender when its dataflow completes.
        while let Ok(report) = self.outputs.recv() {
            report?;
            reports += 1;
            if reports % self.local == 0 {
                finished();
            }
        }
        Ok(())
    }

    /// Sends input epoch `epoch` of `round` to `worker`, with its changes (maybe
    /// none: every worker's input must pass every epoch for any of them to
    /// complete). Blocks while the worker has too much in flight (backpressure
    /// on reading).
    pub fn send(
        &self,
        round: u64,
        epoch: u64,
        worker: usize,
        origins: usize,
        changes: Vec<InputChange>,
    ) -> Result<(), IndexError> {
        self.senders[worker]
            .send(ToWorker::Changes {
                time: round_time(round, epoch),
                origins,
                changes,
            })
            .map_err(|_| IndexError::WorkerStopped)
    }

    /// Sends epoch `epoch` of `round`'s restore to `worker`: what the last
    /// process held, which goes before every change of the round.
    pub fn restore(
        &self,
        round: u64,
        epoch: u64,
        worker: usize,
        restored: Vec<Fed>,
    ) -> Result<(), IndexError> {
        self.senders[worker]
            .send(ToWorker::Changes {
                time: restore_time(round, epoch),
                origins: 0,
                changes: restored.into_iter().map(|fed| (fed, 1)).collect(),
            })
            .map_err(|_| IndexError::WorkerStopped)
    }

    /// Seals `round` on every worker and returns what every worker of every
    /// process staged, once all of it is.
    pub fn finish_round(&self, round: u64) -> Result<Vec<StagedPart>, IndexError> {
        let time = round_start(round + 1);
        for sender in &self.senders {
            sender
                .send(ToWorker::Seal { time })
                .map_err(|_| IndexError::WorkerStopped)?;
        }
        let mut parts = Vec::new();
        for _ in 0..self.senders.len() {
            let report = self.outputs.recv().map_err(|_| IndexError::WorkerStopped)?;
            parts.extend(report?);
        }
        Ok(parts)
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        // Closing the inboxes lets every worker drain its dataflow and return.
        self.senders.clear();
        if let Some(guards) = self.guards.take() {
            for result in guards.join() {
                if let Err(e) = result {
                    tracing::error!("a dataflow worker failed: {e}");
                }
            }
        }
    }
}

/// One worker's loop: feed changes (at most `EPOCHS_IN_FLIGHT` epochs unbuilt),
/// step the dataflow, and at each seal, once every row of the round is
/// staged, report what was (worker 0 collects every worker's).
fn serve(
    worker: &mut Worker,
    handles: dataflow::Handles,
    inbox: &Receiver<ToWorker>,
    outbox: &Sender<Result<Vec<StagedPart>, IndexError>>,
    progress: &Mutex<Arc<Progress>>,
) {
    let dataflow::Handles {
        mut input,
        documents,
        everything,
        staged,
    } = handles;
    // Epochs fed but not yet built: (end time, origins, documents).
    let mut in_flight: VecDeque<(u64, usize, usize)> = VecDeque::new();
    let report_built = |in_flight: &mut VecDeque<(u64, usize, usize)>| {
        while let Some(&(end, origins, documents_in)) = in_flight.front() {
            if documents.less_than(&end) {
                break;
            }
            let progress = Arc::clone(&progress.lock().unwrap_or_else(|e| e.into_inner()));
            progress.advance(origins as u64, documents_in as u64);
            in_flight.pop_front();
        }
    };
    loop {
        if in_flight.len() >= EPOCHS_IN_FLIGHT {
            worker.step_or_park(Some(PARK));
            report_built(&mut in_flight);
            continue;
        }
        match inbox.try_recv() {
            Ok(ToWorker::Changes {
                time,
                origins,
                changes,
            }) => {
                input.advance_to(time);
                let inserted = changes
                    .iter()
                    .filter(|(fed, diff)| matches!(fed, Fed::Document(..)) && *diff > 0)
                    .count();
                for (record, diff) in changes {
                    input.update(record, diff);
                }
                input.advance_to(time + 1);
                input.flush();
                in_flight.push_back((time + 1, origins, inserted));
                worker.step();
                report_built(&mut in_flight);
            }
            Ok(ToWorker::Seal { time }) => {
                input.advance_to(time);
                input.flush();
                while documents.less_than(&time) || everything.less_than(&time) {
                    worker.step_or_park(Some(PARK));
                    report_built(&mut in_flight);
                }
                report_built(&mut in_flight);
                let report: Result<Vec<StagedPart>, IndexError> =
                    std::mem::take(&mut *staged.borrow_mut())
                        .into_iter()
                        .collect::<Result<_, _>>()
                        .map_err(IndexError::Staging);
                if outbox.send(report).is_err() {
                    break;
                }
            }
            Err(TryRecvError::Empty) => {
                worker.step_or_park(Some(PARK));
                report_built(&mut in_flight);
            }
            Err(TryRecvError::Disconnected) => break,
        }
    }
    input.close();
    while worker.step_or_park(Some(PARK)) {}
}

/// The loop of a worker of a process other than 0: no input of its own, it
/// computes its share (documents hashed to it) and reports each round that
/// ends, until process 0 closes its input and the dataflow completes.
fn compute(
    worker: &mut Worker,
    handles: dataflow::Handles,
    outbox: &Sender<Result<Vec<StagedPart>, IndexError>>,
) {
    let dataflow::Handles {
        input, everything, ..
    } = handles;
    input.close();
    let mut round = 0;
    while worker.step_or_park(Some(PARK)) {
        // The first time no update of `round` can still arrive.
        while !everything.less_than(&round_start(round + 1)) && !everything.done() {
            round += 1;
            if outbox.send(Ok(Vec::new())).is_err() {
                return;
            }
        }
    }
}
