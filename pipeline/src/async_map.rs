//! An asynchronous map for differential collections: each update's future runs on
//! a tokio runtime, and its outputs are emitted at the update's time once it
//! resolves. The operator holds a capability for every time with work in flight,
//! so the frontier (and everything downstream) waits for the model calls, while
//! the worker thread stays free to feed more input and the pool stays busy.
//!
//! At most [`FUTURES_IN_FLIGHT`] futures run at once per operator and worker,
//! and at most [`InFlight::budget`] units of their weight; the rest wait as
//! their inputs. A spawned future holds its whole state machine and what it
//! reads (for a relation merge, several kilobytes; for a name mentioned in
//! thousands of documents, megabytes), so spawning every group a round's end
//! makes ready at once cost memory in proportion to the archive. Weighing a
//! group by its mentions keeps what runs at once bounded as groups grow.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, mpsc};

use differential_dataflow::{AsCollection, Data, VecCollection};
use timely::dataflow::channels::pact::Pipeline;
use timely::dataflow::operators::Capability;
use timely::dataflow::operators::generic::operator::Operator;

use crate::progress::StageProgress;

/// Futures one operator runs at once on one worker: more than a large model
/// pool takes concurrently.
pub const FUTURES_IN_FLIGHT: usize = 1024;

/// What an asynchronous stage may run at once on one worker, besides
/// [`FUTURES_IN_FLIGHT`]: futures whose inputs weigh at most `budget` in all
/// (one heavier than the budget runs alone).
#[derive(Clone, Copy, Debug)]
pub struct InFlight<D> {
    pub weight: fn(&D) -> usize,
    pub budget: usize,
}

impl<D> InFlight<D> {
    /// Futures counted alone: every input weighs one.
    pub fn futures() -> Self {
        InFlight {
            weight: |_| 1,
            budget: FUTURES_IN_FLIGHT,
        }
    }

    /// Whether a future of `weight` may start beside `running` futures that
    /// weigh `running_weight` in all.
    fn admits(&self, running: usize, running_weight: usize, weight: usize) -> bool {
        running == 0 || (running < FUTURES_IN_FLIGHT && running_weight + weight <= self.budget)
    }
}

/// A finished future, sent back to the operator.
struct Finished<O> {
    /// Its update's time and multiplicity, which its outputs take.
    time: u64,
    diff: isize,
    /// What it counted against [`InFlight::budget`].
    weight: usize,
    /// Its outputs, or the panic message of a future that panicked.
    outputs: Result<Vec<O>, String>,
}

/// Where asynchronous stages run their futures, and where they report them.
#[derive(Clone, Debug)]
pub struct Tasks {
    pub runtime: tokio::runtime::Handle,
    pub stages: Arc<StageProgress>,
}

/// The asynchronous map, as an operator on a collection.
///
/// ```
/// use differential_dataflow::input::Input;
/// use memweave_pipeline::async_map::{InFlight, MapAsync, Tasks};
/// use memweave_pipeline::progress::StageProgress;
///
/// let runtime = tokio::runtime::Runtime::new().unwrap();
/// let tasks = Tasks { runtime: runtime.handle().clone(), stages: StageProgress::new() };
/// let doubled = timely::execute_directly(move |worker| {
///     let (seen, out) = (std::rc::Rc::new(std::cell::RefCell::new(Vec::new())), tasks.clone());
///     let collected = std::rc::Rc::clone(&seen);
///     let (mut input, probe) = worker.dataflow::<u64, _, _>(|scope| {
///         let (input, numbers) = scope.new_collection::<u64, isize>();
///         let (probe, _) = numbers
///             .map_async(&out, "Double", InFlight::futures(), |n| async move { vec![2 * n] })
///             .inspect(move |(n, _, diff)| collected.borrow_mut().push((*n, *diff)))
///             .probe();
///         (input, probe)
///     });
///     input.insert(21);
///     input.advance_to(1);
///     input.flush();
///     // The worker waits on the futures, which run on the runtime.
///     while probe.less_than(input.time()) {
///         worker.step();
///     }
///     seen.take()
/// });
/// assert_eq!(doubled, vec![(42, 1)]);
/// ```
pub trait MapAsync<'scope, D: Data> {
    /// Maps every update `(d, t, r)` to `(o, t, r)` for each `o` in
    /// `logic(d).await`. `logic` must be a function of `d` alone (retractions
    /// call it again and must get the same outputs; the call cache makes model
    /// calls so). Each update's future runs on `tasks`' runtime and counts as
    /// one unit of the stage `name`; `in_flight` bounds how many run at once.
    fn map_async<O, F, Fut>(
        self,
        tasks: &Tasks,
        name: &'static str,
        in_flight: InFlight<D>,
        logic: F,
    ) -> VecCollection<'scope, u64, O, isize>
    where
        O: Data + Send,
        F: Fn(D) -> Fut + 'static,
        Fut: Future<Output = Vec<O>> + Send + 'static;
}

impl<'scope, D: Data> MapAsync<'scope, D> for VecCollection<'scope, u64, D, isize> {
    fn map_async<O, F, Fut>(
        self,
        tasks: &Tasks,
        name: &'static str,
        in_flight: InFlight<D>,
        logic: F,
    ) -> VecCollection<'scope, u64, O, isize>
    where
        O: Data + Send,
        F: Fn(D) -> Fut + 'static,
        Fut: Future<Output = Vec<O>> + Send + 'static,
    {
        map_async(self, tasks.clone(), name, in_flight, logic)
    }
}

fn map_async<'scope, D, O, F, Fut>(
    collection: VecCollection<'scope, u64, D, isize>,
    tasks: Tasks,
    name: &'static str,
    in_flight: InFlight<D>,
    logic: F,
) -> VecCollection<'scope, u64, O, isize>
where
    D: Data,
    O: Data + Send,
    F: Fn(D) -> Fut + 'static,
    Fut: Future<Output = Vec<O>> + Send + 'static,
{
    let worker = collection.inner.scope().worker();
    let Tasks { runtime, stages } = tasks;
    collection
        .inner
        .unary_frontier::<timely::container::CapacityContainerBuilder<Vec<(O, u64, isize)>>, _, _, _>(
            Pipeline,
            name,
            move |_initial, info| {
                let activator = worker.sync_activator_for(info.address.to_vec());
                let (done_tx, done_rx) = mpsc::channel::<Finished<O>>();
                // Per time: the capability to emit at it and its futures not yet
                // finished (waiting or running).
                let mut pending: BTreeMap<u64, (Capability<u64>, usize)> = BTreeMap::new();
                // The updates waiting, in the messages they came in: a round's
                // end brings a whole archive's groups at once, and one queue
                // of them, grown by doubling, held up to twice their bytes.
                let mut waiting: VecDeque<std::vec::IntoIter<(D, u64, isize)>> = VecDeque::new();
                let (mut running, mut running_weight) = (0, 0);
                move |(input, _frontier), output| {
                    input.for_each(|capability, updates| {
                        for (_, time, _) in updates.iter() {
                            pending
                                .entry(*time)
                                .or_insert_with(|| (capability.delayed(time, output.output_index()), 0))
                                .1 += 1;
                        }
                        stages.started(name, updates.len() as u64);
                        waiting.push_back(std::mem::take(updates).into_iter());
                    });
                    let mut finished = Vec::new();
                    while let Ok(done) = done_rx.try_recv() {
                        running -= 1;
                        running_weight -= done.weight;
                        finished.push(done);
                    }
                    while let Some(message) = waiting.front_mut() {
                        let Some((data, _, _)) = message.as_slice().first() else {
                            waiting.pop_front();
                            continue;
                        };
                        let weight = (in_flight.weight)(data);
                        if !in_flight.admits(running, running_weight, weight) {
                            break;
                        }
                        let (data, time, diff) = message.next().expect("a first update");
                        running += 1;
                        running_weight += weight;
                        let future = memweave_process::panics::caught_async(logic(data));
                        let done = done_tx.clone();
                        let activator = activator.clone();
                        memweave_process::task::spawn_on(&runtime, "map_async", async move {
                            let outputs = future.await;
                            // The operator is gone only when the dataflow is.
                            let _ = done.send(Finished {
                                time,
                                diff,
                                weight,
                                outputs,
                            });
                            let _ = activator.activate();
                        });
                    }
                    for Finished {
                        time,
                        diff,
                        outputs,
                        ..
                    } in finished
                    {
                        let outputs = outputs.unwrap_or_else(|message| {
                            panic!("a future of the asynchronous map panicked: {message}")
                        });
                        stages.done(name, 1);
                        let entry = pending
                            .get_mut(&time)
                            .expect("every finished future was registered at its time");
                        output
                            .session(&entry.0)
                            .give_iterator(outputs.into_iter().map(|o| (o, time, diff)));
                        entry.1 -= 1;
                        if entry.1 == 0 {
                            pending.remove(&time);
                        }
                    }
                }
            },
        )
        .as_collection()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn futures_start_while_their_weight_fits_and_a_heavy_one_runs_alone() {
        let mentions = InFlight::<Vec<u8>> {
            weight: Vec::len,
            budget: 100,
        };
        assert!(mentions.admits(3, 60, 40));
        assert!(!mentions.admits(3, 60, 41));
        // Heavier than the whole budget: waits for the others, then runs.
        assert!(!mentions.admits(1, 1, 500));
        assert!(mentions.admits(0, 0, 500));
        // The count bounds light futures too.
        let futures = InFlight::<()>::futures();
        assert!(futures.admits(FUTURES_IN_FLIGHT - 1, FUTURES_IN_FLIGHT - 1, 1));
        assert!(!futures.admits(FUTURES_IN_FLIGHT, 0, 0));
    }
}
