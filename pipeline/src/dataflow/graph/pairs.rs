//! Relation merging by pair: each relation grouped with its target's name,
//! paired with the entity that name became in the relation's document, and
//! one pair's relations from several documents merged into one.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

use memweave_operators::entity_graph::{
    DocRelation, FoundRelation, GraphConfig, merge_relations_across, relation_row,
};
use memweave_operators::model::MemoryModel;

use super::names::name_route;
use super::{GraphRow, Tag, entity_id, graph_error, tag};
use crate::dataflow::spilled::read_in_doc_order;
use crate::spill::{Spill, SpillKey, SpilledGroup};

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
pub(super) fn target_pairs(found: Vec<TargetMention>) -> BTreeMap<PairKey, Vec<SpillKey>> {
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

/// Merges a pair's relations, read back from the spill in document order. A
/// merge the model fails joins their descriptions and reports an error.
pub(super) async fn merge_pair(
    pair: PairKey,
    group: SpilledGroup,
    spill: &Spill,
    model: &dyn MemoryModel,
    config: &GraphConfig,
) -> Vec<GraphRow> {
    let found: Vec<ReadRelation> =
        read_in_doc_order(spill, group, |r: &SpilledRelation| &*r.doc_id)
            .into_iter()
            .map(|relation| ReadRelation { relation, spill })
            .collect();
    let (source_id, target_id) = (&entity_id(pair.source_id), &entity_id(pair.target_id));
    match merge_relations_across(source_id, target_id, &found, model, config).await {
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

/// What relations are merged by: the entities at their ends.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub(super) struct PairKey {
    source_id: Tag,
    target_id: Tag,
}

/// The worker a relation's text is spilled on: its target name's, whose group
/// pairs it and whose worker merges the pair.
pub(super) fn relation_route(relation: &DocRelation) -> u64 {
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

/// Spills each relation as a [`SpilledRelation`], the texts its document's
/// relations share once.
pub(super) fn relation_spiller() -> impl FnMut(&Spill, &DocRelation) -> SpillKey {
    let mut shared = SharedTextKeys::default();
    move |spill, relation| SpilledRelation::put(spill, relation, &mut shared)
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

#[cfg(test)]
mod tests {
    use differential_dataflow::Hashable;
    use memweave_operators::model::{CallContext, Reply, Step, StepResult};

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
