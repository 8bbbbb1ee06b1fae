//! The graph across documents: entity resolution by name and relation
//! merging by pair.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::Hash;
use std::sync::Arc;

use differential_dataflow::VecCollection;
use differential_dataflow::{AsCollection, Hashable};
use memweave_operators::embed::embed_all;
use memweave_operators::graph::{
    DocEntity, DocRelation, EntityAssignment, GraphConfig, LastResolution, Resolution,
    assignments_from_entities, entity_rows, merge_relations_across, relation_row,
    resolution_from_entities, resolve_entities,
};
use memweave_operators::model::{CallContext, StepError};
use memweave_schemas::{
    EmbeddingRow, EntityRow, ErrorRow, MemoryRow, NameStateRow, RelationRow, hash128,
};
use timely::container::CapacityContainerBuilder;
use timely::dataflow::channels::pact::Pipeline;
use timely::dataflow::operators::Capability;
use timely::dataflow::operators::generic::operator::Operator;
use timely::dataflow::operators::vec::Broadcast;

use super::Services;
use super::spilled::{read_group, read_in_doc_order, spill_group, spill_where_used};
use super::time::{self, changes_only, is_restore};
use crate::async_map::{InFlight, MapAsync};
use crate::spill::{Spill, SpillKey, SpilledGroup};
use crate::state::{EntitiesByHash, StoredEntity};

/// What the cross-document graph stages produce.
#[derive(
    Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
enum GraphRow {
    Entity(EntityRow),
    NameState(NameStateRow),
    /// On its way to a target name's group (see [`graph_stages`]), not a row.
    ToTarget(Tag, TargetMention),
    Relation(RelationRow),
    Embedding(EmbeddingRow),
    Error(ErrorRow),
}

impl GraphRow {
    /// The table row it is, if it is one.
    fn into_row(self) -> Option<MemoryRow> {
        match self {
            GraphRow::Entity(e) => Some(MemoryRow::Entity(e)),
            GraphRow::NameState(n) => Some(MemoryRow::NameState(n)),
            GraphRow::Relation(r) => Some(MemoryRow::Relation(r)),
            GraphRow::Embedding(e) => Some(MemoryRow::Embedding(e)),
            GraphRow::Error(e) => Some(MemoryRow::Error(e)),
            GraphRow::ToTarget(..) => None,
        }
    }
}

/// The graph across documents: each normalised name's entities, one per
/// document, resolved into entities (and embedded); relations re-keyed by the
/// entities their ends became, and one pair's relations from several documents
/// merged. A step the model fails falls back to the name alone (one entity per
/// name; relation descriptions joined) and reports an error: nothing is lost.
///
/// The mentions' texts are spilled (see [`crate::spill`]) by the worker that
/// resolves their name or merges their pair; the arrangements hold ids, names
/// and spill keys, and a group's texts are read back when its future runs.
///
/// A new process's restore does not resolve the names again: which entity
/// each became is read back from the checkpoint's entities (`stored_entities`,
/// at the restore's first epoch), which the restored mentions were resolved
/// into. Nor does its first round resolve again a restored name whose
/// mentions changed, to retract what it made: that too is read back.
///
/// A relation takes its ends' entities on its way through the names: it is
/// grouped with its source's name, whose resolution gives it the source's
/// entity in its document, then with its target's name beside that name's
/// entities, which gives it the target's and so its pair; every relation of
/// a pair ends at that name, so the name's group hands on whole pairs. The
/// source's arrangement holds a relation as a name and a spill key, the
/// target's as a name and ids (its document, its source's entity, its text's
/// spill key).
pub(super) fn graph_stages<'scope>(
    doc_entities: VecCollection<'scope, u64, DocEntity, isize>,
    doc_relations: VecCollection<'scope, u64, DocRelation, isize>,
    stored_entities: VecCollection<'scope, u64, StoredEntity, isize>,
    services: &Services,
    spill: &Arc<Spill>,
    config: GraphConfig,
) -> VecCollection<'scope, u64, MemoryRow, isize> {
    let Services {
        model,
        embedder,
        tasks,
        ..
    } = services;
    let (name_spill, target_spill) = (Arc::clone(spill), Arc::clone(spill));
    // A relation's text is spilled where its pair is merged: on the worker
    // of its target's name, whose group pairs it. Its source's name carries
    // only where that is.
    let relation_refs = spill_where_used(
        doc_relations,
        spill,
        "SpillRelations",
        relation_route,
        |r, text| {
            let (source, target) = (tag(&r.source_key), tag(&r.target_key));
            NameMention::Relation(RelationRef {
                doc: tag(&r.doc_id),
                source,
                target,
                text,
            })
        },
    );
    let by_name = spill_where_used(
        doc_entities.map(NameMention::Entity).concat(relation_refs),
        spill,
        "SpillNames",
        |m| name_route(m.name()),
        |m, text| (m.name(), text),
    )
    .reduce_named("MentionsByName", move |_name, mentions, out| {
        out.push((spill_group(&name_spill, mentions), 1));
    });
    let (read_back, to_resolve) = read_back_resolutions(by_name, stored_entities, spill);
    let (model_e, embedder_e, spill_e) =
        (Arc::clone(model), Arc::clone(embedder), Arc::clone(spill));
    let resolved = to_resolve.map_async(
        tasks,
        "ResolveEntities",
        InFlight {
            weight: |name: &NameGroup| name.group.len,
            budget: MENTIONS_IN_FLIGHT,
        },
        move |NameGroup {
                  group,
                  read_back,
                  last,
              }| {
            let (model, embedder) = (Arc::clone(&model_e), Arc::clone(&embedder_e));
            let spill = Arc::clone(&spill_e);
            async move {
                let (mut mentions, relations): (Vec<DocEntity>, Vec<RelationRef>) =
                    split_name_mentions(read_group(&spill, group));
                let mut out = Vec::new();
                // A relation's source is one of its document's entities, so a
                // group with relations has mentions; the check keeps a bad
                // extraction from panicking the worker.
                if mentions.is_empty() {
                    return out;
                }
                mentions.sort_by(|a, b| a.doc_id.cmp(&b.doc_id));
                let resolved = match read_back {
                    Some(read_back) => Ok(read_back),
                    None => {
                        let last_mentions = last.as_ref().map(|l| sorted_mentions(&spill, l.group));
                        let last = (last.as_ref().zip(last_mentions.as_deref())).map(
                            |(last, mentions)| LastResolution {
                                mentions,
                                entity_of: &last.entity_of,
                                asked: &last.asked,
                            },
                        );
                        let (model, embedder) = (model.as_ref(), embedder.as_ref());
                        resolve_entities(&mentions, last, model, embedder, &config).await
                    }
                };
                let (rows, assignments) = match resolved {
                    Ok(Resolution {
                        rows,
                        assignments,
                        asked,
                    }) => {
                        let name = mentions[0].key.clone();
                        out.push(GraphRow::NameState(NameStateRow { name, asked }));
                        (rows, assignments)
                    }
                    Err(error) => {
                        out.push(GraphRow::Error(graph_error(
                            &mentions[0].key,
                            &error,
                            "its documents' entities were merged by name alone",
                        )));
                        entity_rows(&[mentions.iter().collect()])
                    }
                };
                let texts: Vec<String> = rows
                    .iter()
                    .map(|r| format!("{}: {}", r.name, r.description))
                    .collect();
                let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
                match embed_all(embedder.as_ref(), &CallContext::corpus("embed"), &refs).await {
                    Ok(vectors) => out.extend(rows.iter().zip(vectors).map(|(r, v)| {
                        GraphRow::Embedding(EmbeddingRow::new(
                            &r.entity_id,
                            "entity",
                            embedder.model(),
                            v,
                        ))
                    })),
                    Err(error) => out.push(GraphRow::Error(graph_error(
                        &mentions[0].key,
                        &error,
                        "its entities have no vectors",
                    ))),
                }
                out.extend(rows.into_iter().map(GraphRow::Entity));
                let name = tag(&mentions[0].key);
                let targets = to_targets(name, &assignments, relations);
                out.extend(targets.map(|(target, mention)| GraphRow::ToTarget(target, mention)));
                out
            }
        },
    );
    let to_targets = (resolved.clone())
        .flat_map(|row| match row {
            GraphRow::ToTarget(name, mention) => Some((name, mention)),
            _ => None,
        })
        .concat(read_back);
    // Every relation of a pair ends at the pair's target's name (an entity
    // has one name), so the name's group holds whole pairs: no model call,
    // the target's entity in the relation's document. A target mention is
    // ids alone, held in the arrangement: spilled, a restore wrote and read
    // back millions of them at about its size again in index and header.
    // The reduce's exchange is by name, as [`name_route`], so each pair is
    // merged where its relations' texts are spilled.
    let pairs = to_targets
        .reduce_named("PairsByTarget", move |_name, found, out| {
            let found = found
                .iter()
                .map(|(mention, _)| (*mention).clone())
                .collect();
            for (pair, relations) in target_pairs(found) {
                out.push(((pair, SpilledGroup::put(&target_spill, &relations)), 1));
            }
        })
        .map(|(_name, pair)| pair);
    let (model_r, spill_r) = (Arc::clone(model), Arc::clone(spill));
    let relations = changes_only(pairs).map_async(
        tasks,
        "MergeRelations",
        InFlight {
            weight: |(_, group)| group.len,
            budget: MENTIONS_IN_FLIGHT,
        },
        move |(pair, group): (PairKey, SpilledGroup)| {
            let model = Arc::clone(&model_r);
            let spill = Arc::clone(&spill_r);
            async move {
                let found: Vec<DocRelation> =
                    read_in_doc_order(&spill, group, |r: &DocRelation| &r.doc_id);
                let (source_id, target_id) =
                    (&entity_id(pair.source_id), &entity_id(pair.target_id));
                let merged =
                    merge_relations_across(source_id, target_id, &found, model.as_ref(), &config)
                        .await;
                match merged {
                    Ok(row) => vec![GraphRow::Relation(row)],
                    Err(error) => {
                        let joined = found
                            .iter()
                            .map(|r| r.description.as_str())
                            .collect::<Vec<_>>()
                            .join(" ");
                        vec![
                            GraphRow::Error(graph_error(
                                &format!("{source_id} -> {target_id}"),
                                &error,
                                "its descriptions were joined unmerged",
                            )),
                            GraphRow::Relation(relation_row(source_id, target_id, &found, joined)),
                        ]
                    }
                }
            }
        },
    );
    resolved.concat(relations).flat_map(GraphRow::into_row)
}

/// What a name's group sends to target names' groups, given which entity the
/// name became in each document: the relations it starts, each with its
/// source's entity, to their targets' names; and the entity it became in
/// each document, to its own name, whose group pairs the relations ending
/// there.
fn to_targets(
    name: Tag,
    assignments: &[EntityAssignment],
    relations: Vec<RelationRef>,
) -> impl Iterator<Item = (Tag, TargetMention)> {
    let entity_in: BTreeMap<Tag, Tag> = assignments
        .iter()
        .map(|a| (tag(&a.doc_id), entity_tag(&a.entity_id)))
        .collect();
    let started: Vec<(Tag, TargetMention)> = relations
        .into_iter()
        .filter_map(|r| {
            let source_id = *entity_in.get(&r.doc)?;
            let mention = TargetMention::Relation {
                doc: r.doc,
                source_id,
                text: r.text,
            };
            Some((r.target, mention))
        })
        .collect();
    let became = (entity_in.into_iter())
        .map(move |(doc, entity_id)| (name, TargetMention::Entity { doc, entity_id }));
    started.into_iter().chain(became)
}

/// A name's group on its way to be resolved, with what its resolution gave
/// where that is read back instead, or the name's last resolution where it
/// is resolved from that (see [`read_back_resolutions`]).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
struct NameGroup {
    group: SpilledGroup,
    read_back: Option<Resolution>,
    last: Option<LastGroup>,
}

/// A name's last resolution as a group carries it: the last group (its
/// mentions are in the spill), and what [`LastResolution`] takes besides.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
struct LastGroup {
    group: SpilledGroup,
    entity_of: Vec<u32>,
    asked: Vec<u32>,
}

/// What [`read_back_resolutions`] hands on: a restored name's mentions to
/// target names, or a name's group to resolve, boxed (a restore hands on a
/// target per mention of the archive, each the size of the larger variant).
type ReadBack = Result<(Tag, TargetMention), Box<NameGroup>>;

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
fn read_back_resolutions<'scope>(
    groups: VecCollection<'scope, u64, (Tag, SpilledGroup), isize>,
    stored: VecCollection<'scope, u64, StoredEntity, isize>,
    spill: &Arc<Spill>,
) -> (
    VecCollection<'scope, u64, (Tag, TargetMention), isize>,
    VecCollection<'scope, u64, NameGroup, isize>,
) {
    let spill = Arc::clone(spill);
    let read = groups
        .inner
        .binary_frontier::<_, CapacityContainerBuilder<Vec<(ReadBack, u64, isize)>>, _, _, _, _>(
            stored.inner.broadcast(),
            Pipeline,
            Pipeline,
            "ReadBackResolutions",
            move |_, _| {
                let mut entities = EntitiesByHash::default();
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
                move |(groups, groups_frontier), (stored, stored_frontier), output| {
                    stored.for_each(|_, data| {
                        for (entity, time, _) in data.drain(..) {
                            entities.insert(entity);
                            round_end = Some(time::round_end(&time));
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
                            for ((_, group), diff) in found {
                                match read_back_targets(&spill, group, &entities) {
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
                            continue;
                        }
                        // Retractions first: a name's new group is resolved
                        // from the old one's resolution.
                        found.sort_by_key(|(_, diff)| *diff);
                        let mut last_of = HashMap::new();
                        for ((name, group), diff) in found {
                            let read_back = (diff < 0 && restored.remove(&group))
                                .then(|| read_back_rows(&spill, group, &entities))
                                .flatten()
                                .map(|(resolution, entity_of)| {
                                    let last = LastGroup {
                                        group,
                                        entity_of,
                                        asked: resolution.asked.clone(),
                                    };
                                    last_of.insert(name, last);
                                    resolution
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

/// What a name's group sends to target names, with which entity the name
/// became in each document read back from `entities`; `None` where they do
/// not account for its mentions.
fn read_back_targets(
    spill: &Spill,
    group: SpilledGroup,
    entities: &EntitiesByHash,
) -> Option<Vec<(Tag, TargetMention)>> {
    let (mut mentions, relations) = split_name_mentions(read_group(spill, group));
    if mentions.is_empty() {
        return Some(Vec::new());
    }
    mentions.sort_by(|a, b| a.doc_id.cmp(&b.doc_id));
    let assignments = assignments_from_entities(&mentions, entities)?;
    Some(to_targets(tag(&mentions[0].key), &assignments, relations).collect())
}

/// What resolving a name's group gave, read back from `entities`; `None`
/// where it must be resolved again.
fn read_back_rows(
    spill: &Spill,
    group: SpilledGroup,
    entities: &EntitiesByHash,
) -> Option<(Resolution, Vec<u32>)> {
    resolution_from_entities(&sorted_mentions(spill, group), entities)
}

/// The entity mentions of a name's group, in doc_id order.
fn sorted_mentions(spill: &Spill, group: SpilledGroup) -> Vec<DocEntity> {
    let (mut mentions, _) = split_name_mentions(read_group(spill, group));
    mentions.sort_by(|a, b| a.doc_id.cmp(&b.doc_id));
    mentions
}

/// Mentions one worker resolves or merges at once: a name's or a pair's
/// mentions are read back from the spill while its future runs, and a popular
/// name has thousands. A relation mention carries its evidence segment, and
/// its merges' prompts and replies are held until the group is merged: about
/// 15 KiB a mention at a round's end (jemalloc's heap profile at 10M tokens).
/// Still enough for hundreds of model calls in flight.
const MENTIONS_IN_FLIGHT: usize = 2_048;

/// A string (a document id, a name key) as the graph's arrangements hold it:
/// 128 bits of its hash, where the string cost a heap block in every copy of
/// every arrangement.
pub(super) type Tag = u128;

fn tag(text: &str) -> Tag {
    hash128(text.as_bytes())
}

/// An entity id (32 hex digits, a [`memweave_schemas::content_id`]) as 128
/// bits, and back: the arrangements hold the number, the rows the text.
fn entity_tag(entity_id: &str) -> Tag {
    Tag::from_str_radix(entity_id, 16)
        .unwrap_or_else(|_| panic!("entity id {entity_id:?} is 32 hex digits"))
}

fn entity_id(tag: Tag) -> String {
    format!("{tag:032x}")
}

/// What a name's group holds: the documents' mentions of the name, and the
/// relations whose source it is.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
enum NameMention {
    Entity(DocEntity),
    Relation(RelationRef),
}

impl NameMention {
    /// The name it is grouped by.
    fn name(&self) -> Tag {
        match self {
            NameMention::Entity(e) => tag(&e.key),
            NameMention::Relation(r) => r.source,
        }
    }
}

/// A relation as the names at its ends see it; its text stays spilled on its
/// target name's worker ([`relation_route`]), which merges its pair.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
struct RelationRef {
    doc: Tag,
    source: Tag,
    target: Tag,
    text: SpillKey,
}

/// A name's group's mentions (in key order) and relations.
fn split_name_mentions(found: Vec<NameMention>) -> (Vec<DocEntity>, Vec<RelationRef>) {
    let (mut mentions, mut relations) = (Vec::new(), Vec::new());
    for mention in found {
        match mention {
            NameMention::Entity(e) => mentions.push(e),
            NameMention::Relation(r) => relations.push(r),
        }
    }
    (mentions, relations)
}

/// What a name's group sends to a target name's group: the entity the name
/// became in one document, or a relation ending at the name, with the entity
/// its source became.
#[derive(
    Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub(super) enum TargetMention {
    Entity {
        doc: Tag,
        entity_id: Tag,
    },
    Relation {
        doc: Tag,
        source_id: Tag,
        text: SpillKey,
    },
}

/// A target name's relations by pair, each pair's in key order (the order its
/// group is spilled in): the target is the entity the name became in the
/// relation's document. A relation whose document has no entity of that name
/// has no pair (the extraction keeps only relations between the document's
/// entities).
fn target_pairs(found: Vec<TargetMention>) -> BTreeMap<PairKey, Vec<SpillKey>> {
    let entity_in: BTreeMap<Tag, Tag> = found
        .iter()
        .filter_map(|m| match m {
            TargetMention::Entity { doc, entity_id } => Some((*doc, *entity_id)),
            TargetMention::Relation { .. } => None,
        })
        .collect();
    let mut pairs: BTreeMap<PairKey, Vec<SpillKey>> = BTreeMap::new();
    for mention in found {
        if let TargetMention::Relation {
            doc,
            source_id,
            text,
        } = mention
            && let Some(&target_id) = entity_in.get(&doc)
        {
            let pair = PairKey {
                source_id,
                target_id,
            };
            pairs.entry(pair).or_default().push(text);
        }
    }
    for relations in pairs.values_mut() {
        relations.sort_unstable();
        relations.dedup();
    }
    pairs
}

/// The worker that groups a name's mentions (and spills them).
fn name_route(name: Tag) -> u64 {
    name.hashed()
}

/// The worker a relation's text is spilled on: its target name's, whose group
/// pairs it and whose worker merges the pair.
fn relation_route(relation: &DocRelation) -> u64 {
    name_route(tag(&relation.target_key))
}

/// What relations are merged by: the entities at their ends.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
struct PairKey {
    source_id: Tag,
    target_id: Tag,
}

fn graph_error(subject: &str, error: &StepError, fallback: &str) -> ErrorRow {
    ErrorRow::new(
        "graph",
        subject,
        None,
        error.kind(),
        &format!("{error}; {fallback}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A relation's text is spilled where its pair is merged: on the worker of
    /// its target's name, whose group pairs it, not its source's.
    #[test]
    fn a_relation_is_spilled_where_its_target_name_is_grouped() {
        let relation = DocRelation {
            doc_id: "a.txt".to_string(),
            source_key: "ada lovelace".to_string(),
            target_key: "charles babbage".to_string(),
            description: "worked with".to_string(),
            seg_ids: vec!["s1".to_string()],
            summary: "".into(),
            evidence: "".into(),
        };
        let (source, target) = (tag("ada lovelace"), tag("charles babbage"));
        assert_eq!(relation_route(&relation), target.hashed());
        assert_ne!(relation_route(&relation), name_route(source));
    }

    /// A relation's pair is the entity its source became (given by the
    /// source's name) and the entity the target's name became in the same
    /// document; a document without that entity gives it no pair.
    #[test]
    fn a_target_group_pairs_each_relation_with_its_documents_entity() {
        let relation = |doc: &str, source_id: Tag, text: SpillKey| TargetMention::Relation {
            doc: tag(doc),
            source_id,
            text,
        };
        let entity = |doc: &str, entity_id: Tag| TargetMention::Entity {
            doc: tag(doc),
            entity_id,
        };
        let pairs = target_pairs(vec![
            relation("a.txt", 1, 150),
            entity("b.txt", 21),
            relation("b.txt", 1, 200),
            entity("a.txt", 20),
            relation("c.txt", 1, 300),
            relation("a.txt", 1, 100),
            relation("a.txt", 2, 400),
        ]);
        let pair = |source_id: Tag, target_id: Tag| PairKey {
            source_id,
            target_id,
        };
        let expected = BTreeMap::from([
            (pair(1, 20), vec![100, 150]),
            (pair(1, 21), vec![200]),
            (pair(2, 20), vec![400]),
        ]);
        assert_eq!(pairs, expected);
    }
}
