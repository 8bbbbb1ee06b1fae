//! Stages that keep texts, and the groups across documents, in the worker's
//! spill rather than in the heap.

use std::collections::HashMap;
use std::sync::Arc;

use differential_dataflow::VecCollection;
use differential_dataflow::{AsCollection, Data, ExchangeData};
use timely::container::CapacityContainerBuilder;
use timely::dataflow::channels::pact::Exchange as ExchangePact;
use timely::dataflow::operators::generic::operator::Operator;

use crate::spill::{Spill, SpillKey, SpilledGroup};

mod reduce;

pub(super) use reduce::reduce_in_spill;

/// A reduce's group: its values' spill keys (in key order), spilled as one list.
pub(super) fn spill_group(spill: &Spill, values: &[(SpillKey, isize)]) -> SpilledGroup {
    let keys: Vec<SpillKey> = values.iter().map(|(key, _)| *key).collect();
    SpilledGroup::put(spill, &keys)
}

/// The spilled values of `group`, in its keys' order.
pub(super) fn read_group<T: serde::de::DeserializeOwned>(
    spill: &Spill,
    group: SpilledGroup,
) -> Vec<T> {
    group
        .keys(spill)
        .into_iter()
        .map(|text| spill.get(text))
        .collect()
}

/// The spilled values of `group`, and those of `earlier`, a group that
/// shares most of them (a name's last group shares all but its changed
/// mentions with its new one): each value is read from the spill once.
pub(super) fn read_group_and_earlier<T: serde::de::DeserializeOwned + Clone>(
    spill: &Spill,
    group: SpilledGroup,
    earlier: Option<SpilledGroup>,
) -> (Vec<T>, Option<Vec<T>>) {
    let keys = group.keys(spill);
    let values: Vec<T> = keys.iter().map(|key| spill.get(*key)).collect();
    let earlier = earlier.map(|earlier| {
        let read: HashMap<SpillKey, &T> = keys.iter().copied().zip(&values).collect();
        (earlier.keys(spill).into_iter())
            .map(|key| {
                read.get(&key)
                    .map_or_else(|| spill.get(key), |&value| value.clone())
            })
            .collect()
    });
    (values, earlier)
}

/// The spilled values of `group`, in the order of their documents' ids (ties
/// in key order): the order resolution and merging expect.
pub(super) fn read_in_doc_order<T: serde::de::DeserializeOwned, K: Ord + ?Sized>(
    spill: &Spill,
    group: SpilledGroup,
    doc_id: impl Fn(&T) -> &K,
) -> Vec<T> {
    let mut values: Vec<T> = read_group(spill, group);
    values.sort_by(|a, b| doc_id(a).cmp(doc_id(b)));
    values
}

/// Sends each update to the worker `route` names, spills it there as `put`
/// writes it, and passes on `slim(update, its spill key, its time)` in its
/// place.
pub(super) fn spill_where_used<'scope, D, O>(
    collection: VecCollection<'scope, u64, D, isize>,
    spill: &Arc<Spill>,
    name: &str,
    route: impl Fn(&D) -> u64 + 'static,
    mut put: impl FnMut(&Spill, &D) -> SpillKey + 'static,
    slim: impl Fn(&D, SpillKey, &u64) -> O + 'static,
) -> VecCollection<'scope, u64, O, isize>
where
    D: ExchangeData,
    O: Data,
{
    let spill = Arc::clone(spill);
    collection
        .inner
        .unary::<CapacityContainerBuilder<Vec<(O, u64, isize)>>, _, _, _>(
            ExchangePact::new(move |(update, _, _): &(D, u64, isize)| route(update)),
            name,
            move |_, _| {
                move |input, output| {
                    input.for_each(|capability, updates| {
                        let mut session = output.session(&capability);
                        for (update, time, diff) in updates.drain(..) {
                            let text = put(&spill, &update);
                            session.give((slim(&update, text, &time), time, diff));
                        }
                    });
                }
            },
        )
        .as_collection()
}
