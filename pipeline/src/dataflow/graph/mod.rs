//! The graph across documents: entity resolution by name ([`names`]) and
//! relation merging by pair ([`pairs`]), wired here into the dataflow; what a
//! new process reads back instead of resolving again is [`restore`].

use std::sync::Arc;

use differential_dataflow::VecCollection;
use memweave_operators::entity_graph::{DocEntity, DocRelation, GraphConfig};
use memweave_operators::model::StepError;
use memweave_schemas::{
    EmbeddingRow, EntityRow, ErrorRow, Labelled, MemoryRow, NameStateRow, RelationRow, hash128,
};

mod names;
mod pairs;
mod restore;

use super::Services;
use super::spilled::{reduce_in_spill, spill_group, spill_where_used};
use super::time::{changes_only, is_restore};
use crate::async_map::{InFlight, MapAsync};
use crate::spill::{Spill, SpilledGroup};
use crate::state::StoredEntity;
use names::{NameMention, RelationRef, name_route, resolve_and_embed};
use pairs::{PairKey, TargetMention, merge_pair, relation_route, relation_spiller, target_pairs};
use restore::{NameGroup, RestoreHint, read_back_resolutions};

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
/// resolves their name or merges their pair; a name's group is a list of
/// ids and spill keys in the spill too ([`reduce_in_spill`]), and its texts
/// are read back when its future runs.
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
/// source's group holds a relation as a spill key, the target's as ids (its
/// document, its source's entity, its text's spill key).
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
        relation_spiller(),
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
    let by_name = reduce_in_spill(
        spilled.map(|(slim, _)| slim),
        spill,
        "MentionsByName",
        move |_name, mentions| vec![spill_group(&name_spill, mentions)],
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
                resolve_and_embed(name, &spill, model.as_ref(), embedder.as_ref(), config).await
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
    // ids alone, kept in its name's group's list: spilled one by one, a
    // restore wrote and read back millions of them at about its size again
    // in index and header. The reduce's exchange is by name, as
    // [`name_route`], so each pair is merged where its relations' texts are
    // spilled.
    let pairs = reduce_in_spill(to_targets, spill, "PairsByTarget", move |_name, found| {
        let found = found.iter().map(|(mention, _)| mention.clone()).collect();
        (target_pairs(found).into_iter())
            .map(|(pair, relations)| (pair, SpilledGroup::put(&target_spill, &relations)))
            .collect()
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
            async move { merge_pair(pair, group, &spill, model.as_ref(), &config).await }
        },
    );
    resolved.concat(relations).flat_map(GraphRow::into_row)
}

/// Mentions one worker resolves or merges at once: a name's or a pair's
/// mentions are read back from the spill while its future runs, and a popular
/// name has thousands. A relation mention carries its evidence segment, and
/// its merges' prompts and replies are held until the group is merged: about
/// 15 KiB a mention at a round's end (jemalloc's heap profile at 10M tokens).
/// Still enough for hundreds of model calls in flight.
const MENTIONS_IN_FLIGHT: usize = 2_048;

/// A string (a document id, a name key) as the graph's groups hold it: 128
/// bits of its hash, where the string cost a heap block in every copy of
/// every arrangement.
pub(super) type Tag = u128;

fn tag(text: &str) -> Tag {
    hash128(text.as_bytes())
}

/// An entity id (32 hex digits, a [`memweave_schemas::content_id`]) as 128
/// bits, and back: the groups hold the number, the rows the text.
fn entity_tag(entity_id: &str) -> Tag {
    Tag::from_str_radix(entity_id, 16)
        .unwrap_or_else(|_| panic!("entity id {entity_id:?} is 32 hex digits"))
}

fn entity_id(tag: Tag) -> String {
    format!("{tag:032x}")
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
