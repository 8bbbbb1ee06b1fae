//! Entity resolution by name: a name's mentions across documents resolved
//! into entities and embedded, and what the name became in each document
//! handed on to the names its relations end at (see [`super::pairs`]).

use std::collections::BTreeMap;

use differential_dataflow::Hashable;
use memweave_operators::embed::{Embedder, embed_all};
use memweave_operators::entity_graph::{
    DocEntity, EntityAssignment, GraphConfig, LastResolution, Resolution, entity_rows,
    resolve_entities,
};
use memweave_operators::model::{CallContext, MemoryModel};
use memweave_schemas::{EmbeddingRow, EntityRow, Labelled, NameStateRow, acl};

use super::pairs::TargetMention;
use super::restore::{NameGroup, ReadBackGroup, in_doc_order};
use super::{GraphRow, Tag, entity_tag, graph_error, tag};
use crate::dataflow::spilled::read_group_and_earlier;
use crate::spill::{Spill, SpillKey};

/// What a name's group holds: the documents' mentions of the name, and the
/// relations whose source it is.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub(super) enum NameMention {
    Entity(DocEntity),
    Relation(RelationRef),
}

impl NameMention {
    /// The name it is grouped by.
    pub(super) fn name(&self) -> Tag {
        match self {
            NameMention::Entity(e) => tag(&e.key),
            NameMention::Relation(r) => r.source,
        }
    }
}

/// A relation as the names at its ends see it; its text stays spilled on its
/// target name's worker ([`super::pairs::relation_route`]), which merges its
/// pair.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub(super) struct RelationRef {
    pub(super) doc: Tag,
    pub(super) source: Tag,
    pub(super) target: Tag,
    pub(super) text: SpillKey,
}

/// A name's group's mentions (in key order) and relations.
pub(super) fn split_name_mentions(found: Vec<NameMention>) -> (Vec<DocEntity>, Vec<RelationRef>) {
    let (mut mentions, mut relations) = (Vec::new(), Vec::new());
    for mention in found {
        match mention {
            NameMention::Entity(e) => mentions.push(e),
            NameMention::Relation(r) => relations.push(r),
        }
    }
    (mentions, relations)
}

/// The worker that groups a name's mentions (and spills them).
pub(super) fn name_route(name: Tag) -> u64 {
    name.hashed()
}

/// What a name's group gives: its state (or the error its resolution met),
/// its entities and their vectors (or the error embedding them met), and its
/// mentions on their way to target names.
pub(super) async fn resolve_and_embed(
    name: NameGroup,
    spill: &Spill,
    model: &dyn MemoryModel,
    embedder: &dyn Embedder,
    config: GraphConfig,
) -> Vec<GraphRow> {
    let Some(ResolvedName {
        name,
        outcome,
        rows,
        targets,
    }) = resolve_group(name, spill, model, embedder, config).await
    else {
        return Vec::new();
    };
    let mut out = vec![outcome];
    let texts: Vec<String> = rows.iter().map(EntityRow::embedded_text).collect();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    match embed_all(embedder, &CallContext::corpus("embed"), &refs).await {
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
    out.extend((targets.into_iter()).map(|(target, mention)| GraphRow::ToTarget(target, mention)));
    out
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
/// [`super::restore::read_back_resolutions`]); otherwise its mentions, read
/// from the spill with its last group's, resolved. A step the model fails
/// falls back to one entity for the name. `None` for a group without entity
/// mentions.
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
pub(super) fn to_targets(
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
pub(super) fn targets_of(
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
