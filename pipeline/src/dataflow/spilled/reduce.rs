//! A reduce whose groups live in the worker's spill, not in arrangements.
//!
//! Differential's `reduce` keeps its input arranged in the heap: a sealed
//! batch holding every mention of every name (each an id and a spill key,
//! about 48 bytes an update), besides the batcher that held them until the
//! round's end and the replay of both when the round is reduced. At a
//! million short documents that was the largest part of the indexer's peak,
//! and it grew with every document. Here a key's group is one list in the
//! spill (its values and their counts, in value order) and the heap holds
//! only the list's key per key; a round's changes wait in the heap up to
//! [`CHANGES_IN_MEMORY`] and past that in the spill, in runs by a bucket of
//! their key's hash, so that reducing a large round reads back one bucket at
//! a time. What a group gave before a change is its logic over the group's
//! last list: the logic must be a function of the list alone.
//!
//! Times are the dataflow's `u64`s, totally ordered: a time's changes are
//! reduced once the input's frontier has passed it, in time order, and what
//! changed is given at that time, as differential's reduce does.

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;
use std::sync::Arc;

use differential_dataflow::consolidation::consolidate;
use differential_dataflow::{AsCollection, Data, ExchangeData, Hashable, VecCollection};
use serde::Serialize;
use serde::de::DeserializeOwned;
use timely::container::CapacityContainerBuilder;
use timely::dataflow::channels::pact::Exchange as ExchangePact;
use timely::dataflow::operators::Capability;
use timely::dataflow::operators::generic::operator::Operator;

use crate::spill::{Spill, SpillKey};

/// Changes held in the heap before a time's are spilled in runs: about 3 MB
/// of a name's id and a spill key each.
const CHANGES_IN_MEMORY: usize = 1 << 16;

/// Buckets a time's spilled changes are split into by their key's hash: a
/// large round is reduced a bucket at a time, so the heap holds about
/// 1/256 of its changes at once (a million short documents' round, about 20
/// million changes, 80,000 a bucket).
const BUCKETS: usize = 256;

/// A key's group as the spill holds it: its values with their counts, in
/// value order, none zero.
type Group<V> = Vec<(V, isize)>;

/// `collection` grouped by key and each changed group's `logic` given, as
/// differential's `reduce_named` gives it, the groups held in `spill` (see
/// the module doc). Keys go to workers by their hash, as an arrangement's do.
pub(in crate::dataflow) fn reduce_in_spill<'scope, K, V, O>(
    collection: VecCollection<'scope, u64, (K, V), isize>,
    spill: &Arc<Spill>,
    name: &str,
    logic: impl Fn(&K, &[(V, isize)]) -> Vec<O> + 'static,
) -> VecCollection<'scope, u64, (K, O), isize>
where
    K: ExchangeData + Hash + Serialize + DeserializeOwned,
    V: ExchangeData + Serialize + DeserializeOwned,
    O: Data,
{
    reduce_with(collection, spill, name, CHANGES_IN_MEMORY, logic)
}

fn reduce_with<'scope, K, V, O>(
    collection: VecCollection<'scope, u64, (K, V), isize>,
    spill: &Arc<Spill>,
    name: &str,
    in_memory: usize,
    logic: impl Fn(&K, &[(V, isize)]) -> Vec<O> + 'static,
) -> VecCollection<'scope, u64, (K, O), isize>
where
    K: ExchangeData + Hash + Serialize + DeserializeOwned,
    V: ExchangeData + Serialize + DeserializeOwned,
    O: Data,
{
    let spill = Arc::clone(spill);
    collection
        .inner
        .unary_frontier::<CapacityContainerBuilder<Vec<((K, O), u64, isize)>>, _, _, _>(
            ExchangePact::new(|((key, _), _, _): &((K, V), u64, isize)| key.hashed()),
            name,
            move |_, _| {
                let mut groups = Groups {
                    held: HashMap::new(),
                    spill,
                    logic,
                };
                // Each time's changes, until the input's frontier passes it.
                let mut waiting: BTreeMap<u64, (Capability<u64>, Changes<K, V>)> = BTreeMap::new();
                move |(input, frontier), output| {
                    input.for_each(|capability, updates| {
                        for (update, time, diff) in updates.drain(..) {
                            let (_, changes) = waiting.entry(time).or_insert_with(|| {
                                (capability.delayed(&time, 0), Changes::default())
                            });
                            changes.in_heap.push((update, diff));
                            if changes.in_heap.len() >= in_memory {
                                changes.spill_heaps(&groups.spill);
                            }
                        }
                    });
                    while let Some(entry) = waiting.first_entry()
                        && !frontier.less_equal(entry.key())
                    {
                        let (time, (capability, changes)) = entry.remove_entry();
                        let mut session = output.session(&capability);
                        changes.reduce(&mut groups, |(update, diff)| {
                            session.give((update, time, diff));
                        });
                    }
                }
            },
        )
        .as_collection()
}

/// Every key's group, as the key of its list in the spill, and the logic
/// that reduces a group.
struct Groups<K, L> {
    held: HashMap<K, SpillKey>,
    spill: Arc<Spill>,
    logic: L,
}

impl<K: Data + Hash, L> Groups<K, L> {
    /// Applies a key's changes (consolidated, in value order) to its group;
    /// gives what its logic gives now that it did not before, and takes back
    /// what it gave before and does not now.
    fn change<V, O>(&mut self, key: &K, changes: Group<V>, give: &mut impl FnMut(((K, O), isize)))
    where
        V: Data + Serialize + DeserializeOwned,
        O: Data,
        L: Fn(&K, &[(V, isize)]) -> Vec<O>,
    {
        let last: Group<V> =
            (self.held.get(key)).map_or_else(Vec::new, |&list| self.spill.get(list));
        let now = merged(&last, changes);
        match now.is_empty() {
            true => self.held.remove(key),
            false => self.held.insert(key.clone(), self.spill.put(&now)),
        };
        let before = (!last.is_empty()).then(|| (self.logic)(key, &last));
        let after = (!now.is_empty()).then(|| (self.logic)(key, &now));
        let mut given: Vec<(O, isize)> = (before.into_iter().flatten().map(|o| (o, -1)))
            .chain(after.into_iter().flatten().map(|o| (o, 1)))
            .collect();
        consolidate(&mut given);
        for (out, diff) in given {
            give(((key.clone(), out), diff));
        }
    }
}

/// A group with `changes` (in value order) applied: counts added, values
/// whose count is zero left out.
fn merged<V: Ord + Clone>(group: &[(V, isize)], changes: Group<V>) -> Group<V> {
    let mut changes = changes.into_iter().peekable();
    let mut out = Vec::with_capacity(group.len());
    let mut push = |value: V, count: isize| {
        if count != 0 {
            out.push((value, count));
        }
    };
    for (value, count) in group {
        while let Some((changed, change)) = changes.next_if(|(changed, _)| changed < value) {
            push(changed, change);
        }
        let mut count = *count;
        while let Some((_, change)) = changes.next_if(|(changed, _)| changed == value) {
            count += change;
        }
        push(value.clone(), count);
    }
    for (value, change) in changes {
        push(value, change);
    }
    out
}

/// One time's changes: the last (up to [`CHANGES_IN_MEMORY`]) in the heap,
/// the rest spilled as runs, each run a list per bucket (see [`BUCKETS`]).
struct Changes<K, V> {
    in_heap: Vec<((K, V), isize)>,
    runs: Vec<Vec<Option<SpillKey>>>,
}

impl<K, V> Default for Changes<K, V> {
    fn default() -> Self {
        Changes {
            in_heap: Vec::new(),
            runs: Vec::new(),
        }
    }
}

/// The bucket of a key's changes: the hash's high bits, as its low bits chose
/// its worker.
fn bucket<K: Hash>(key: &K) -> usize {
    (key.hashed() >> 56) as usize % BUCKETS
}

impl<K, V> Changes<K, V>
where
    K: Data + Hash + Serialize + DeserializeOwned,
    V: Data + Serialize + DeserializeOwned,
{
    /// Writes the changes in the heap to the spill as a run: consolidated,
    /// each bucket's as one list.
    fn spill_heaps(&mut self, spill: &Spill) {
        let mut changes = std::mem::take(&mut self.in_heap);
        consolidate(&mut changes);
        let mut by_bucket: Vec<Vec<((K, V), isize)>> = (0..BUCKETS).map(|_| Vec::new()).collect();
        for change in changes {
            by_bucket[bucket(&change.0.0)].push(change);
        }
        let run = (by_bucket.iter())
            .map(|changes| (!changes.is_empty()).then(|| spill.put(changes)))
            .collect();
        self.runs.push(run);
    }

    /// Reduces the time's changes: all at once where they are in the heap,
    /// a bucket at a time where some were spilled.
    fn reduce<L, O>(mut self, groups: &mut Groups<K, L>, mut give: impl FnMut(((K, O), isize)))
    where
        O: Data,
        L: Fn(&K, &[(V, isize)]) -> Vec<O>,
    {
        if self.runs.is_empty() {
            reduce_changes(groups, self.in_heap, &mut give);
            return;
        }
        self.spill_heaps(&groups.spill);
        for bucket in 0..BUCKETS {
            let mut changes = Vec::new();
            for run in &self.runs {
                if let Some(list) = run[bucket] {
                    changes.extend(groups.spill.get::<Vec<((K, V), isize)>>(list));
                }
            }
            reduce_changes(groups, changes, &mut give);
        }
    }
}

/// Applies `changes` to their keys' groups, a key at a time.
fn reduce_changes<K, V, L, O>(
    groups: &mut Groups<K, L>,
    mut changes: Vec<((K, V), isize)>,
    give: &mut impl FnMut(((K, O), isize)),
) where
    K: Data + Hash,
    V: Data + Serialize + DeserializeOwned,
    O: Data,
    L: Fn(&K, &[(V, isize)]) -> Vec<O>,
{
    consolidate(&mut changes);
    let mut changes = changes.into_iter().peekable();
    while let Some(((key, value), diff)) = changes.next() {
        let rest = std::iter::from_fn(|| {
            changes
                .next_if(|((next, _), _)| *next == key)
                .map(|((_, value), diff)| (value, diff))
        });
        let key_changes = std::iter::once((value, diff)).chain(rest).collect();
        groups.change(&key, key_changes, give);
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::rc::Rc;
    use std::sync::Mutex;

    use differential_dataflow::input::Input;
    use timely::dataflow::operators::Inspect;
    use timely::dataflow::operators::Probe;
    use timely::dataflow::operators::probe::Handle as ProbeHandle;

    use super::*;

    type Output = Vec<((u32, (usize, u64)), u64, isize)>;

    /// A group's size and the sum of its values (each as often as its
    /// count), and a second row for groups of more than two values: a key
    /// that gives several rows, and rows that change with the group.
    fn logic(_: &u32, values: &[(u64, isize)]) -> Vec<(usize, u64)> {
        let sum = values.iter().map(|(v, c)| v * *c as u64).sum();
        let mut out = vec![(values.len(), sum)];
        if values.len() > 2 {
            out.push((0, values[0].0));
        }
        out
    }

    /// Rounds of insertions and retractions over a few keys (each round at
    /// its own time, some rounds at two): values come and go, counts rise
    /// past one, and groups empty and fill again.
    fn rounds() -> Vec<Vec<((u32, u64), isize)>> {
        let mut state = 7u64;
        let mut next = move || {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            state >> 33
        };
        let mut held: Vec<(u32, u64)> = Vec::new();
        (0..12)
            .map(|_| {
                let mut round = Vec::new();
                for _ in 0..40 {
                    if !held.is_empty() && next() % 3 == 0 {
                        let gone = held.swap_remove(next() as usize % held.len());
                        round.push((gone, -1));
                    } else {
                        let added = ((next() % 9) as u32, next() % 6);
                        held.push(added);
                        round.push((added, 1));
                    }
                }
                round
            })
            .collect()
    }

    /// What `reduce` gives over `rounds` on `workers` workers, the spilled
    /// reduce's (with `in_memory` changes held) and differential's side by
    /// side, each consolidated by time.
    fn both(workers: usize, in_memory: usize) -> (Output, Output) {
        let gathered = Arc::new(Mutex::new((Vec::new(), Vec::new())));
        let into = Arc::clone(&gathered);
        timely::execute(timely::Config::process(workers), move |worker| {
            let spill = Arc::new(Spill::new().unwrap());
            let (spilled, arranged) = (
                Rc::new(RefCell::new(Vec::new())),
                Rc::new(RefCell::new(Vec::new())),
            );
            let (to_spilled, to_arranged) = (Rc::clone(&spilled), Rc::clone(&arranged));
            let probe = ProbeHandle::new();
            let mut input = worker.dataflow::<u64, _, _>(|scope| {
                let (input, updates) = scope.new_collection::<(u32, u64), isize>();
                reduce_with(updates.clone(), &spill, "Spilled", in_memory, logic)
                    .inner
                    .inspect(move |update| to_spilled.borrow_mut().push(*update))
                    .probe_with(&probe);
                updates
                    .reduce_named("Arranged", |key, values, out| {
                        let values: Vec<(u64, isize)> =
                            values.iter().map(|(v, c)| (**v, *c)).collect();
                        out.extend(logic(key, &values).into_iter().map(|o| (o, 1)));
                    })
                    .inner
                    .inspect(move |update| to_arranged.borrow_mut().push(*update))
                    .probe_with(&probe);
                input
            });
            for (round, changes) in rounds().into_iter().enumerate() {
                let time = round as u64 * 2;
                input.advance_to(time);
                for (i, (update, diff)) in changes.into_iter().enumerate() {
                    // Half of some rounds' changes a time later.
                    if round % 3 == 0 && i == 20 {
                        input.advance_to(time + 1);
                    }
                    if worker.index() == 0 {
                        input.update(update, diff);
                    }
                }
                input.advance_to(time + 2);
                input.flush();
                while probe.less_than(input.time()) {
                    worker.step();
                }
            }
            let mut gathered = into.lock().unwrap();
            gathered.0.extend(spilled.borrow_mut().drain(..));
            gathered.1.extend(arranged.borrow_mut().drain(..));
        })
        .unwrap()
        .join()
        .into_iter()
        .for_each(|worker| worker.unwrap());
        let (mut spilled, mut arranged) = std::mem::take(&mut *gathered.lock().unwrap());
        for updates in [&mut spilled, &mut arranged] {
            differential_dataflow::consolidation::consolidate_updates(updates);
        }
        (spilled, arranged)
    }

    /// The spilled reduce gives what differential's does, update for
    /// update at every time: with every change in the heap, with runs of
    /// three spilled (most groups read back from several runs' buckets),
    /// and on two workers.
    #[test]
    fn the_spilled_reduce_gives_what_differentials_does() {
        for (workers, in_memory) in [(1, 1 << 16), (1, 3), (2, 5)] {
            let (spilled, arranged) = both(workers, in_memory);
            assert!(
                spilled.iter().any(|(_, _, diff)| *diff < 0),
                "groups change"
            );
            assert!(spilled.iter().any(|((_, (n, _)), _, _)| *n > 2));
            assert_eq!(
                spilled, arranged,
                "{workers} workers, {in_memory} in the heap"
            );
        }
    }

    #[test]
    fn a_merge_adds_counts_and_leaves_out_zeros() {
        let group = vec![(1, 1), (3, 2), (5, 1)];
        let changes = vec![(0, 1), (3, -2), (4, 1), (5, 1), (6, -1)];
        assert_eq!(
            merged(&group, changes),
            vec![(0, 1), (1, 1), (4, 1), (5, 2), (6, -1)]
        );
    }
}
