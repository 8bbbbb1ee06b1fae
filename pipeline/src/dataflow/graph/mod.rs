//! The graph across documents: entity resolution by name and relation
//! merging by pair.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::hash::Hash;
use std::sync::Arc;

use differential_dataflow::Hashable;
use differential_dataflow::VecCollection;
use memweave_operators::embed::{Embedder, embed_all};
use memweave_operators::entity_graph::{
    DocEntity, DocRelation, EntityAssignment, FoundRelation, GraphConfig, LastResolution,
    Resolution, entity_rows, merge_relations_across, relation_row, resolve_entities,
};
use memweave_operators::model::{CallContext, MemoryModel, StepError};
use memweave_schemas::{
    EmbeddingRow, EntityRow, ErrorRow, Labelled, MemoryRow, NameStateRow, RelationRow, acl, hash128,
};

mod restore;

use super::Services;
use super::spilled::{read_group_and_earlier, read_in_doc_order, spill_group, spill_where_used};
use super::time::{changes_only, is_restore};
use crate::async_map::{InFlight, MapAsync};
use crate::spill::{Spill, SpillKey, SpilledGroup};
use crate::state::StoredEntity;
use restore::{NameGroup, ReadBackGroup, RestoreHint, in_doc_order, read_back_resolutions};

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
    let mut shared_texts = SharedTextKeys::default();
    // A relation's text is spilled where its pair is merged: on the worker
    // of its target's name, whose group pairs it. Its source's name carries
    // only where that is.
    let relation_refs = spill_where_used(
        doc_relations,
        spill,
        "SpillRelations",
        relation_route,
        move |spill, relation| SpilledRelation::put(spill, relation, &mut shared_texts),
        |r, text, _| {
            let (source, target) = (tag(&r.source_key), tag(&r.target_key));
            NameMention::Relation(RelationRef {
                doc: tag(&r.doc_id),
                source,
                target,
                text,
            })
        },
    );
    // At a restore, each mention also leaves a hint of what reading its
    // name back needs, so that the restore does not read every mention back.
    let spilled = spill_where_used(
        doc_entities.map(NameMention::Entity).concat(relation_refs),
        spill,
        "SpillNames",
        |m| name_route(m.name()),
        Spill::put,
        |m, text, time| {
            let hint = is_restore(time).then(|| RestoreHint::of(m, text));
            ((m.name(), text), hint)
        },
    );
    let hints = (spilled.clone()).flat_map(|((name, _), hint)| hint.map(|hint| (name, hint)));
    let by_name = (spilled.map(|(slim, _)| slim)).reduce_named(
        "MentionsByName",
        move |_name, mentions, out| {
            out.push((spill_group(&name_spill, mentions), 1));
        },
    );
    let (read_back, to_resolve) = read_back_resolutions(by_name, stored_entities, hints, spill);
    let (model_e, embedder_e, spill_e) =
        (Arc::clone(model), Arc::clone(embedder), Arc::clone(spill));
    let resolved = to_resolve.map_async(
        tasks,
        "ResolveEntities",
        InFlight {
            weight: |name: &NameGroup| name.group.len,
            budget: MENTIONS_IN_FLIGHT,
        },
        move |name: NameGroup| {
            let (model, embedder) = (Arc::clone(&model_e), Arc::clone(&embedder_e));
            let spill = Arc::clone(&spill_e);
            async move {
                let resolved =
                    resolve_group(name, &spill, model.as_ref(), embedder.as_ref(), config).await;
                let Some(resolved) = resolved else {
                    return Vec::new();
                };
                let ResolvedName {
                    name,
                    outcome,
                    rows,
                    targets,
                } = resolved;
                let mut out = vec![outcome];
                let texts: Vec<String> = rows.iter().map(EntityRow::embedded_text).collect();
                let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
                match embed_all(embedder.as_ref(), &CallContext::corpus("embed"), &refs).await {
                    Ok(vectors) => out.extend(rows.iter().zip(vectors).map(|(r, v)| {
                        let vector = EmbeddingRow::new(&r.entity_id, "entity", embedder.model(), v);
                        GraphRow::Embedding(vector.labelled(&r.acl))
                    })),
                    Err(error) => out.push(GraphRow::Error(graph_error(
                        &name,
                        &acl::scope_of(&name),
                        &error,
                        "its entities have no vectors",
                    ))),
                }
                out.extend(rows.into_iter().map(GraphRow::Entity));
                out.extend(
                    (targets.into_iter())
                        .map(|(target, mention)| GraphRow::ToTarget(target, mention)),
                );
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
                let found: Vec<ReadRelation> =
                    read_in_doc_order(&spill, group, |r: &SpilledRelation| &*r.doc_id)
                        .into_iter()
                        .map(|relation| ReadRelation {
                            relation,
                            spill: &spill,
                        })
                        .collect();
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
                            .map(|r| r.description())
                            .collect::<Vec<_>>()
                            .join(" ");
                        vec![
                            GraphRow::Error(graph_error(
                                &format!("{source_id} -> {target_id}"),
                                &found.first().map(FoundRelation::acl).unwrap_or_default(),
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

/// What resolving a name's group gives, its entities not yet embedded.
struct ResolvedName {
    /// The name's key.
    name: String,
    /// The name's state, or the error its resolution met.
    outcome: GraphRow,
    rows: Vec<EntityRow>,
    /// What the group sends to target names (see [`to_targets`]).
    targets: Vec<(Tag, TargetMention)>,
}

/// Resolves a name's group: as read back, where it was (see
/// [`read_back_resolutions`]); otherwise its mentions, read from the spill
/// with its last group's, resolved. A step the model fails falls back to one
/// entity for the name. `None` for a group without entity mentions.
async fn resolve_group(
    group: NameGroup,
    spill: &Spill,
    model: &dyn MemoryModel,
    embedder: &dyn Embedder,
    config: GraphConfig,
) -> Option<ResolvedName> {
    let NameGroup {
        group,
        read_back,
        last,
    } = group;
    if let Some(ReadBackGroup {
        name,
        resolution,
        relations,
    }) = read_back
    {
        let Resolution {
            rows,
            asked,
            assignments,
        } = resolution;
        let targets = to_targets(tag(&name), &assignments, relations).collect();
        let outcome = GraphRow::NameState(NameStateRow {
            acl: acl::scope_of(&name),
            name: name.clone(),
            asked,
        });
        return Some(ResolvedName {
            name,
            outcome,
            rows,
            targets,
        });
    }
    let (found, last_found) = read_group_and_earlier(spill, group, last.as_ref().map(|l| l.group));
    let (mentions, relations) = split_name_mentions(found);
    // A relation's source is one of its document's entities, so a group with
    // relations has mentions; the check keeps a bad extraction from
    // panicking the worker.
    let name = mentions.first()?.key.clone();
    let mentions = in_doc_order(mentions);
    let last_mentions = last_found.map(|found| in_doc_order(split_name_mentions(found).0));
    let last =
        (last.as_ref().zip(last_mentions.as_deref())).map(|(last, mentions)| LastResolution {
            mentions,
            entity_of: &last.entity_of,
            asked: &last.asked,
        });
    let (outcome, (rows, assignments)) =
        match resolve_entities(&mentions, last, model, embedder, &config).await {
            Ok(Resolution {
                rows,
                assignments,
                asked,
            }) => {
                let state = NameStateRow {
                    acl: acl::scope_of(&name),
                    name: name.clone(),
                    asked,
                };
                (GraphRow::NameState(state), (rows, assignments))
            }
            Err(error) => {
                let fallback = "its documents' entities were merged by name alone";
                let error =
                    GraphRow::Error(graph_error(&name, &acl::scope_of(&name), &error, fallback));
                (error, entity_rows(&[mentions.iter().collect()]))
            }
        };
    let targets = to_targets(tag(&name), &assignments, relations).collect();
    Some(ResolvedName {
        name,
        outcome,
        rows,
        targets,
    })
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
    let entity_in = assignments
        .iter()
        .map(|a| (tag(&a.doc_id), entity_tag(&a.entity_id)))
        .collect();
    targets_of(name, entity_in, relations)
}

/// [`to_targets`], given the entity the name became in each document.
fn targets_of(
    name: Tag,
    entity_in: BTreeMap<Tag, Tag>,
    relations: Vec<RelationRef>,
) -> impl Iterator<Item = (Tag, TargetMention)> {
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

/// A document's relation as the worker of its target's name spills it. The
/// texts it shares with its document's other relations (the heads of its
/// summary and of its segment: 1.8 KB of its 2.2 in a generated archive) are
/// spilled apart, where the spill keeps each once, and read only when its
/// pair's merge asks the model.
#[derive(serde::Serialize, serde::Deserialize)]
struct SpilledRelation<'a> {
    doc_id: Cow<'a, str>,
    description: Cow<'a, str>,
    seg_ids: Cow<'a, [String]>,
    acl: Vec<String>,
    summary: SpillKey,
    evidence: SpillKey,
}

impl SpilledRelation<'_> {
    /// Spills `relation`'s shared texts, then the rest beside their keys.
    fn put(spill: &Spill, relation: &DocRelation, shared: &mut SharedTextKeys) -> SpillKey {
        let mut key_of = |text: &Arc<str>| shared.key(spill, &relation.doc_id, text);
        let (summary, evidence) = (key_of(&relation.summary), key_of(&relation.evidence));
        spill.put(&SpilledRelation {
            doc_id: Cow::Borrowed(&relation.doc_id),
            description: Cow::Borrowed(&relation.description),
            seg_ids: Cow::Borrowed(&relation.seg_ids),
            acl: relation.acl(),
            summary,
            evidence,
        })
    }
}

/// The spill keys of the texts the last document's relations share, by the
/// texts' addresses. A document's relations arrive together and share a
/// handful of texts: each is hashed once, not once a relation.
#[derive(Default)]
struct SharedTextKeys {
    doc_id: String,
    keys: Vec<(Arc<str>, SpillKey)>,
}

impl SharedTextKeys {
    fn key(&mut self, spill: &Spill, doc_id: &str, text: &Arc<str>) -> SpillKey {
        if self.doc_id != doc_id {
            doc_id.clone_into(&mut self.doc_id);
            self.keys.clear();
        }
        if let Some((_, key)) = self.keys.iter().find(|(t, _)| Arc::ptr_eq(t, text)) {
            return *key;
        }
        let key = spill.put(&&**text);
        self.keys.push((Arc::clone(text), key));
        key
    }
}

/// A spilled relation read back for its pair's merge.
struct ReadRelation<'s> {
    relation: SpilledRelation<'static>,
    spill: &'s Spill,
}

impl FoundRelation for ReadRelation<'_> {
    fn description(&self) -> &str {
        &self.relation.description
    }

    fn seg_ids(&self) -> &[String] {
        &self.relation.seg_ids
    }

    fn summary(&self) -> Arc<str> {
        Arc::from(self.spill.get::<String>(self.relation.summary))
    }

    fn evidence(&self) -> Arc<str> {
        Arc::from(self.spill.get::<String>(self.relation.evidence))
    }

    fn acl(&self) -> Vec<String> {
        self.relation.acl.clone()
    }
}

/// What relations are merged by: the entities at their ends.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
struct PairKey {
    source_id: Tag,
    target_id: Tag,
}

/// The error a cross-document step met about `subject`, of the label set
/// `acl` it was asked for.
fn graph_error(subject: &str, acl: &[String], error: &StepError, fallback: &str) -> ErrorRow {
    ErrorRow::new(
        "graph",
        subject,
        None,
        error.kind(),
        &format!("{error}; {fallback}"),
    )
    .labelled(acl)
}

#[cfg(test)]
mod tests {
    use memweave_operators::model::{Reply, Step, StepResult};

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

    /// Shows a merge's background and evidence: what its prompt holds.
    #[derive(Debug)]
    struct ShowsMergeTexts;

    #[async_trait::async_trait]
    impl MemoryModel for ShowsMergeTexts {
        fn backend(&self) -> &str {
            "shows-merge-texts"
        }
        fn is_remote(&self) -> bool {
            false
        }
        async fn reply(&self, _: &CallContext, step: Step) -> StepResult<Reply> {
            match step {
                Step::MergeRelations {
                    summary, segments, ..
                } => Ok(Reply::Text(format!(
                    "{summary} | {} | {}",
                    segments[0], segments[1]
                ))),
                other => panic!("only merges are asked here: {other:?}"),
            }
        }
    }

    /// A relation is spilled without the texts its document's relations share
    /// (the spill keeps those once, apart), and its pair merged from the
    /// spill shows the model the background and evidence it shows merged from
    /// the relations themselves.
    #[test]
    fn a_spilled_relation_keeps_its_shared_texts_apart_and_merges_as_itself() {
        let spill = Spill::new().unwrap();
        let summary: Arc<str> = "The harbour press and the people who ran it. "
            .repeat(30)
            .into();
        let relation = |doc: &str, evidence: &str, description: &str| DocRelation {
            doc_id: doc.to_string(),
            source_key: "ada".to_string(),
            target_key: "harbour press".to_string(),
            description: description.to_string(),
            seg_ids: vec![format!("{doc}/s1")],
            summary: Arc::clone(&summary),
            evidence: evidence.into(),
        };
        let found = vec![
            relation(
                "a.txt",
                "Ada founded the harbour press in a town by the sea.",
                "Ada founded the press.",
            ),
            relation(
                "b.txt",
                "Years later Ada sold the press to her printer.",
                "Ada sold the press.",
            ),
        ];
        let mut shared = SharedTextKeys::default();
        let read: Vec<ReadRelation> = (found.iter())
            .map(|r| ReadRelation {
                relation: spill.get(SpilledRelation::put(&spill, r, &mut shared)),
                spill: &spill,
            })
            .collect();
        for (spilled, relation) in read.iter().zip(&found) {
            let bytes = bincode::serialize(&spilled.relation).unwrap().len();
            assert!(
                bytes < summary.len(),
                "{bytes} bytes: the summary is inside"
            );
            assert_eq!(
                (spilled.description(), spilled.seg_ids()),
                (relation.description(), relation.seg_ids())
            );
        }
        assert_eq!(read[0].relation.summary, read[1].relation.summary);
        let config = GraphConfig {
            description_budget: 5,
            ..GraphConfig::DEFAULT
        };
        let from_spill = futures::executor::block_on(merge_relations_across(
            "e1",
            "e2",
            &read,
            &ShowsMergeTexts,
            &config,
        ))
        .unwrap();
        let direct = futures::executor::block_on(merge_relations_across(
            "e1",
            "e2",
            &found,
            &ShowsMergeTexts,
            &config,
        ))
        .unwrap();
        assert_eq!(from_spill, direct);
        let shown = &direct.description;
        assert!(
            shown.starts_with("The harbour press and the people"),
            "{shown}"
        );
        assert!(
            shown.ends_with("Ada sold the press to her printer."),
            "{shown}"
        );
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
