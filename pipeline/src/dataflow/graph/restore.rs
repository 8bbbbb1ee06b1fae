//! What a new process reads back of the graph instead of resolving it
//! again: which entity each restored name's mentions became, from the
//! checkpoint's entities, and a name's last resolution, which its changed
//! group is resolved from.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use differential_dataflow::{AsCollection, VecCollection};
use memweave_operators::entity_graph::{
    DocEntity, Resolution, resolution_from_entities, stored_groups,
};
use memweave_schemas::content_id;
use timely::container::CapacityContainerBuilder;
use timely::dataflow::channels::pact::Pipeline;
use timely::dataflow::operators::generic::operator::Operator;
use timely::dataflow::operators::vec::Broadcast;
use timely::dataflow::operators::{Capability, Concat};

use super::names::{NameMention, RelationRef, split_name_mentions, targets_of};
use super::pairs::TargetMention;
use super::{Tag, entity_id, entity_tag, tag};
use crate::dataflow::spilled::read_group;
use crate::dataflow::time::{self, is_restore};
use crate::spill::{Spill, SpillKey, SpilledGroup};
use crate::state::{EntitiesByHash, StoredEntity, entity_hash, segment_hash};

/// What reading a restored mention's name back takes from it (see
/// [`targets_from_hints`]): for an entity mention, its document, the
/// entity its name's first group and its document's own group would be
/// (as numbers) and its first segment's hash; a relation as its name's
/// group holds it. Each with its spill key, which tells mentions apart as
/// the name's group does.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub(super) enum RestoreHint {
    Entity {
        text: SpillKey,
        doc: Tag,
        first_group: Tag,
        own_group: Tag,
        first_segment: Option<u64>,
    },
    Relation(RelationRef),
}

impl RestoreHint {
    pub(super) fn of(mention: &NameMention, text: SpillKey) -> RestoreHint {
        match mention {
            NameMention::Entity(e) => {
                let key = e.key.as_bytes();
                RestoreHint::Entity {
                    text,
                    doc: tag(&e.doc_id),
                    first_group: entity_tag(&content_id("entity", &[key])),
                    own_group: entity_tag(&content_id("entity", &[key, e.doc_id.as_bytes()])),
                    first_segment: e.seg_ids.first().map(|s| segment_hash(s)),
                }
            }
            NameMention::Relation(r) => RestoreHint::Relation(r.clone()),
        }
    }
}

/// What a restored name's group sends to target names, which entity the name
/// became in each document read back from the checkpoint's entities, given
/// its mentions' hints: the mentions are not read back from the spill.
/// `None` where the entities do not account for the mentions.
fn targets_from_hints(
    name: Tag,
    mut hints: Vec<RestoreHint>,
    entities: &EntitiesByHash,
) -> Option<Vec<(Tag, TargetMention)>> {
    // One of each, as the group holds each distinct mention once.
    hints.sort_unstable();
    hints.dedup();
    // Each entity id beside its hash, hashed once: the rule looks the first
    // group up for every mention, and every later group for every mention.
    let with_hash = |id: Tag| (id, entity_hash(&entity_id(id)));
    let (mut docs, mut candidates, mut relations) = (Vec::new(), Vec::new(), Vec::new());
    let mut first = None;
    for hint in hints {
        match hint {
            RestoreHint::Entity {
                doc,
                first_group,
                own_group,
                first_segment,
                ..
            } => {
                first = Some(first_group);
                docs.push(doc);
                candidates.push((with_hash(own_group), first_segment));
            }
            RestoreHint::Relation(r) => relations.push(r),
        }
    }
    let Some(first_group) = first else {
        return Some(Vec::new());
    };
    let groups = stored_groups(
        with_hash(first_group),
        &candidates,
        |(_, hash)| entities.holds_hashed(*hash),
        |(_, hash), segment| entities.found_in_hashed(*hash, *segment),
    )?;
    let entity_in = docs.into_iter().zip(groups.into_iter().map(|(id, _)| id));
    Some(targets_of(name, entity_in.collect(), relations).collect())
}

/// A name's group on its way to be resolved, with what its resolution gave
/// where that is read back instead, or the name's last resolution where it
/// is resolved from that (see [`read_back_resolutions`]).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub(super) struct NameGroup {
    pub(super) group: SpilledGroup,
    pub(super) read_back: Option<ReadBackGroup>,
    pub(super) last: Option<LastGroup>,
}

/// What a restored name's group gave, read back from the checkpoint's
/// entities where the group is retracted: its resolution, with the relations
/// it starts (what it sent to target names follows from the two). The
/// group's mentions are read once, where it is read back, not again where
/// its rows are retracted.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub(super) struct ReadBackGroup {
    pub(super) name: String,
    pub(super) resolution: Resolution,
    pub(super) relations: Vec<RelationRef>,
}

/// A name's last resolution as a group carries it: the last group (its
/// mentions are in the spill), and what [`LastResolution`] takes besides.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub(super) struct LastGroup {
    pub(super) group: SpilledGroup,
    pub(super) entity_of: Vec<u32>,
    pub(super) asked: Vec<u32>,
}

/// What [`read_back_resolutions`] hands on: a restored name's mentions to
/// target names, or a name's group to resolve, boxed (a restore hands on a
/// target per mention of the archive, each the size of the larger variant).
type ReadBack = Result<(Tag, TargetMention), Box<NameGroup>>;

/// What a name's group is read back beside: the checkpoint's entities, and
/// the hints of the name's restored mentions.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
enum Beside {
    Entity(StoredEntity),
    Hint(Tag, RestoreHint),
}

/// Name groups, with what a new process reads back from the checkpoint's
/// entities (`stored`, which every worker is given whole) instead of
/// resolving: at the restore, what a group sends to target names, where
/// those entities account for its mentions (see [`assignments_from_entities`]);
/// in the round's changes, the retraction of a group read back so, whose
/// entity rows are those the checkpoint holds (see
/// [`resolution_from_entities`]), and that resolution as the last one of
/// the name's new group, which is resolved from it. Every other group is
/// resolved whole.
#[allow(clippy::type_complexity)]
pub(super) fn read_back_resolutions<'scope>(
    groups: VecCollection<'scope, u64, (Tag, SpilledGroup), isize>,
    stored: VecCollection<'scope, u64, StoredEntity, isize>,
    hints: VecCollection<'scope, u64, (Tag, RestoreHint), isize>,
    spill: &Arc<Spill>,
) -> (
    VecCollection<'scope, u64, (Tag, TargetMention), isize>,
    VecCollection<'scope, u64, NameGroup, isize>,
) {
    let spill = Arc::clone(spill);
    // Every worker is given every entity; a name's hints come where its
    // group does.
    let beside = (stored.map(Beside::Entity).inner.broadcast())
        .concat(hints.map(|(name, hint)| Beside::Hint(name, hint)).inner);
    let read = groups
        .inner
        .binary_frontier::<_, CapacityContainerBuilder<Vec<(ReadBack, u64, isize)>>, _, _, _, _>(
            beside,
            Pipeline,
            Pipeline,
            "ReadBackResolutions",
            move |_, _| {
                let mut entities = EntitiesByHash::default();
                // The restored mentions' hints, by name.
                let mut hints: HashMap<Tag, Vec<RestoreHint>> = HashMap::new();
                // The groups read back at the restore: the entities tell
                // what retracting one in the round's changes takes away.
                let mut restored = HashSet::new();
                // The round the entities are for: past it, none is needed
                // again.
                let mut round_end = None;
                // Groups by time, until every entity at or before it is here.
                let mut waiting: BTreeMap<
                    u64,
                    (Capability<u64>, Vec<((Tag, SpilledGroup), isize)>),
                > = BTreeMap::new();
                move |(groups, groups_frontier), (beside, stored_frontier), output| {
                    beside.for_each(|_, data| {
                        for (found, time, _) in data.drain(..) {
                            match found {
                                Beside::Entity(entity) => {
                                    entities.insert(entity);
                                    round_end = Some(time::round_end(&time));
                                }
                                Beside::Hint(name, hint) => {
                                    hints.entry(name).or_default().push(hint);
                                }
                            }
                        }
                    });
                    groups.for_each(|capability, data| {
                        for (group, time, diff) in data.drain(..) {
                            let (_, found) = waiting
                                .entry(time)
                                .or_insert_with(|| (capability.delayed(&time, 0), Vec::new()));
                            found.push((group, diff));
                        }
                    });
                    let ready: Vec<u64> = (waiting.keys().copied())
                        .filter(|time| !stored_frontier.less_equal(time))
                        .collect();
                    for time in ready {
                        let (capability, mut found) = waiting.remove(&time).expect("waiting");
                        let mut session = output.session(&capability);
                        if is_restore(&time) {
                            for ((name, group), diff) in found {
                                let hints = hints.remove(&name).unwrap_or_default();
                                match targets_from_hints(name, hints, &entities) {
                                    Some(targets) => {
                                        restored.insert(group);
                                        for target in targets {
                                            session.give((Ok(target), time, diff));
                                        }
                                    }
                                    None => {
                                        let group = NameGroup {
                                            group,
                                            read_back: None,
                                            last: None,
                                        };
                                        session.give((Err(Box::new(group)), time, diff));
                                    }
                                }
                            }
                            hints = HashMap::new();
                            continue;
                        }
                        // Retractions first: a name's new group is resolved
                        // from the old one's resolution.
                        found.sort_by_key(|(_, diff)| *diff);
                        let mut last_of = HashMap::new();
                        for ((name, group), diff) in found {
                            let read_back = (diff < 0 && restored.remove(&group))
                                .then(|| read_back_group(&spill, group, &entities))
                                .flatten()
                                .map(|(read_back, entity_of)| {
                                    let last = LastGroup {
                                        group,
                                        entity_of,
                                        asked: read_back.resolution.asked.clone(),
                                    };
                                    last_of.insert(name, last);
                                    read_back
                                });
                            let last = if diff > 0 {
                                last_of.remove(&name)
                            } else {
                                None
                            };
                            let group = NameGroup {
                                group,
                                read_back,
                                last,
                            };
                            session.give((Err(Box::new(group)), time, diff));
                        }
                    }
                    if let Some(end) = round_end
                        && waiting.is_empty()
                        && !groups_frontier.less_equal(&end)
                    {
                        entities = EntitiesByHash::default();
                        restored = HashSet::new();
                        round_end = None;
                    }
                }
            },
        )
        .as_collection();
    (
        read.clone().flat_map(Result::ok),
        read.flat_map(|read| read.err().map(|group| *group)),
    )
}

/// What resolving a name's group gave, read back from `entities`, with the
/// index of each mention's entity among its rows (see [`LastResolution`]);
/// `None` where it must be resolved again.
fn read_back_group(
    spill: &Spill,
    group: SpilledGroup,
    entities: &EntitiesByHash,
) -> Option<(ReadBackGroup, Vec<u32>)> {
    let (mentions, relations) = split_name_mentions(read_group(spill, group));
    let mentions = in_doc_order(mentions);
    let (resolution, entity_of) = resolution_from_entities(&mentions, entities)?;
    let name = mentions.first()?.key.clone();
    let read_back = ReadBackGroup {
        name,
        resolution,
        relations,
    };
    Some((read_back, entity_of))
}

/// Entity mentions in doc_id order: the order resolution expects.
pub(super) fn in_doc_order(mut mentions: Vec<DocEntity>) -> Vec<DocEntity> {
    mentions.sort_by(|a, b| a.doc_id.cmp(&b.doc_id));
    mentions
}

#[cfg(test)]
mod tests {
    use memweave_operators::entity_graph::entity_rows;

    use super::super::names::to_targets;
    use super::*;

    /// A restore reads a name back from its mentions' hints as from the
    /// mentions themselves: the same targets where the stored entities
    /// account for the mentions (two groups: the name's and one led by a
    /// later document), and none where they do not.
    #[test]
    fn hints_read_a_name_back_as_its_mentions_do() {
        use memweave_operators::entity_graph::assignments_from_entities;

        use crate::state::NameStates;

        let mention = |doc: &str, seg: &str| DocEntity {
            key: "ada lovelace".to_string(),
            doc_id: doc.to_string(),
            names: vec!["Ada Lovelace".to_string()],
            context: format!("Ada in {doc}."),
            document: "notes".into(),
            seg_ids: vec![seg.to_string(), format!("{seg}-2")],
        };
        let mentions = vec![
            mention("a.txt", "a1"),
            mention("b.txt", "b1"),
            mention("c.txt", "c1"),
        ];
        let relation = RelationRef {
            doc: tag("b.txt"),
            source: tag("ada lovelace"),
            target: tag("charles babbage"),
            text: 7,
        };
        let (rows, _) = entity_rows(&[vec![&mentions[0], &mentions[2]], vec![&mentions[1]]]);
        let mut entities = EntitiesByHash::default();
        for row in &rows {
            entities.insert(StoredEntity::new(
                &row.entity_id,
                &row.seg_ids,
                &NameStates::default(),
            ));
        }
        let name = tag("ada lovelace");
        let mut hints: Vec<RestoreHint> = (mentions.iter().enumerate())
            .map(|(i, m)| RestoreHint::of(&NameMention::Entity(m.clone()), i as SpillKey))
            .collect();
        hints.push(RestoreHint::of(&NameMention::Relation(relation.clone()), 9));
        let assignments = assignments_from_entities(&mentions, &entities).expect("read back");
        let mut expected: Vec<_> = to_targets(name, &assignments, vec![relation]).collect();
        let mut got = targets_from_hints(name, hints.clone(), &entities).expect("read back");
        expected.sort();
        got.sort();
        assert_eq!(got, expected);
        let entity_ids: HashSet<Tag> = (got.iter())
            .filter_map(|(_, m)| match m {
                TargetMention::Entity { entity_id, .. } => Some(*entity_id),
                TargetMention::Relation { .. } => None,
            })
            .collect();
        assert_eq!(entity_ids.len(), 2, "two entities: {got:?}");
        assert_eq!(got.len(), 4, "three documents' entities and one relation");

        let none = EntitiesByHash::default();
        assert_eq!(assignments_from_entities(&mentions, &none), None);
        assert_eq!(targets_from_hints(name, hints, &none), None);
    }
}
