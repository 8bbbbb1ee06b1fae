//! Where the dataflow's rows are staged into the tables.

use std::collections::BTreeMap;
use std::sync::Arc;

use differential_dataflow::VecCollection;
use memweave_schemas::MemoryRow;
use timely::container::CapacityContainerBuilder;
use timely::dataflow::Stream;
use timely::dataflow::channels::pact::Pipeline;
use timely::dataflow::operators::Capability;
use timely::dataflow::operators::generic::operator::Operator;

use super::time::{is_restore, phase_end};
use crate::error::StagingError;
use crate::write::{Batch, RoundWriter, StagedPart};

/// Stages output rows where they are produced (see [`crate::write`]): each
/// round's rows are buffered and written as a batch whenever
/// [`RoundWriter::batch_rows`] have gathered, and the rest once the round's
/// input is complete. What each batch staged is emitted at the round's end
/// time, so the output's frontier passes a round only when every row of it is
/// staged.
pub(super) fn write_rows<'scope>(
    rows: VecCollection<'scope, u64, MemoryRow, isize>,
    writer: Arc<RoundWriter>,
    runtime: tokio::runtime::Handle,
) -> Stream<'scope, u64, Vec<Result<StagedPart, StagingError>>> {
    let worker = rows.inner.scope().worker();
    rows.inner
        .unary_frontier::<CapacityContainerBuilder<Vec<Result<StagedPart, StagingError>>>, _, _, _>(
            Pipeline,
            "StageRows",
            move |_initial, info| {
                let activator = worker.sync_activator_for(info.address.to_vec());
                let (done_tx, done_rx) = std::sync::mpsc::channel();
                // Per round (by its end time): the capability to emit at it, the
                // rows not yet written and the batches being written.
                let mut rounds: BTreeMap<u64, PendingRound> = BTreeMap::new();
                move |(input, frontier), output| {
                    let mut full = Vec::new();
                    input.for_each(|capability, updates| {
                        for (row, time, diff) in updates.drain(..) {
                            if is_restore(&time) {
                                continue;
                            }
                            let end = phase_end(&time);
                            let round = rounds.entry(end).or_insert_with(|| PendingRound {
                                capability: capability.delayed(&end, output.output_index()),
                                rows: Batch::new(),
                                writing: 0,
                            });
                            let count = round.rows.entry(row).or_insert(0);
                            *count += diff;
                            if round.rows.len() >= writer.batch_rows() {
                                full.push(end);
                            }
                        }
                    });
                    let complete: Vec<u64> = rounds
                        .keys()
                        .copied()
                        .filter(|end| !frontier.less_equal(end))
                        .collect();
                    for end in full.into_iter().chain(complete.iter().copied()) {
                        let Some(round) = rounds.get_mut(&end) else {
                            continue;
                        };
                        round.rows.retain(|_, diff| *diff != 0);
                        if round.rows.is_empty() {
                            continue;
                        }
                        let batch = std::mem::take(&mut round.rows);
                        round.writing += 1;
                        // Waiting here for a free write holds the worker, and so
                        // its input, back until the disk catches up.
                        let permit = runtime.block_on(writer.permit());
                        let (writer, done, activator) =
                            (Arc::clone(&writer), done_tx.clone(), activator.clone());
                        memweave_process::task::spawn_on(&runtime, "stage_rows", async move {
                            let staged = writer.stage(batch).await.map_err(StagingError::from);
                            drop(permit);
                            // The operator is gone only when the dataflow is.
                            let _ = done.send((end, staged));
                            let _ = activator.activate();
                        });
                    }
                    while let Ok((end, staged)) = done_rx.try_recv() {
                        let round = rounds.get_mut(&end).expect("a round writing is pending");
                        output.session(&round.capability).give(staged);
                        round.writing -= 1;
                    }
                    for end in complete {
                        if rounds
                            .get(&end)
                            .is_some_and(|r| r.writing == 0 && r.rows.is_empty())
                        {
                            rounds.remove(&end);
                        }
                    }
                }
            },
        )
}

/// A round's rows at one worker's [`write_rows`], until all are staged.
struct PendingRound {
    capability: Capability<u64>,
    rows: Batch,
    writing: usize,
}
