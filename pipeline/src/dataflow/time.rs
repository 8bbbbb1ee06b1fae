//! The dataflow's timestamps: rounds, and within a round its restore and its
//! changes, each in epochs.

use differential_dataflow::VecCollection;
use differential_dataflow::{AsCollection, Data};
use timely::dataflow::operators::vec::Filter;

/// Bits of a timestamp that number the input epochs within one phase of a
/// round.
const EPOCH_BITS: u32 = 32;
/// The bit above them: set in a round's changes, clear in its restore.
const CHANGES: u64 = 1 << EPOCH_BITS;

/// The first time of round `round`: its restore's first epoch. A round is one
/// batch of changes committed together (a bulk build, one `--watch` poll, one
/// batch of Kafka messages).
pub fn round_start(round: u64) -> u64 {
    round << (EPOCH_BITS + 1)
}

/// The time of input epoch `epoch` of round `round`'s changes; the epochs
/// pace the per-document stages.
pub fn round_time(round: u64, epoch: u64) -> u64 {
    round_start(round) | CHANGES | epoch
}

/// The time of epoch `epoch` of round `round`'s restore: a new process feeds
/// the documents' states there, before the round's changes, so that the
/// cross-document stages hold what the last process held. What the restore
/// makes is what the tables hold already: it is not written.
pub fn restore_time(round: u64, epoch: u64) -> u64 {
    round_start(round) | epoch
}

pub(super) fn is_restore(time: &u64) -> bool {
    time & CHANGES == 0
}

/// The last time of the phase (restore or changes) of the round `time`
/// belongs to: where the cross-document stages see it.
pub(super) fn phase_end(time: &u64) -> u64 {
    time | (CHANGES - 1)
}

/// The last time of the round `time` belongs to: the end of its changes.
pub(super) fn round_end(time: &u64) -> u64 {
    time | ((CHANGES << 1) - 1)
}

/// `collection` without its updates at restore times: a stage that only
/// makes rows (a merge, a corpus tree) has nothing to do there.
pub(super) fn changes_only<'scope, D: Data>(
    collection: VecCollection<'scope, u64, D, isize>,
) -> VecCollection<'scope, u64, D, isize> {
    collection
        .inner
        .filter(|(_, time, _)| !is_restore(time))
        .as_collection()
}
