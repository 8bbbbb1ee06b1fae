//! QRMeM's graph memory: entities and open relations over the original segments.
//!
//! Per document ([`document_graph`]): entities of each segment (the document's
//! root summary as background, as the paper's prompt has it), relations between
//! them, names normalised and short aliases folded into the one longer name they
//! abbreviate, and a pair's relations from several segments merged with the
//! paper's merge prompt. Across documents ([`resolve_entities`],
//! [`merge_relations_across`]): entities of the same normalised name are one
//! entity where the model says the passages mention the same thing, and a pair's
//! relations from several documents are merged again.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use memweave_schemas::{EntityRow, RelationRow, SegmentRow, content_id};
use serde::{Deserialize, Serialize};

use crate::extract::{collapse_whitespace, head_words, sentence_list};
use crate::model::{
    CallContext, MemoryModel, Relation, RelationEvidence, StepResult, all_in_order,
};

/// Stage name of graph calls in `llm_calls.stage`.
pub const STAGE: &str = "qrmem";
/// Words of a segment shown as a relation's evidence when it is merged across documents.
const EVIDENCE_WORDS: usize = 150;
/// Passages compared with an entity's first mention in one disambiguation call.
const SAME_ENTITY_BATCH: usize = 16;
/// Words of the document's summary shown with an entity when its name collides.
const ABOUT_WORDS: usize = 60;

/// An entity as one document knows it, before disambiguation across documents.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct DocEntity {
    /// The normalised name: the key entities are matched by.
    pub key: String,
    pub doc_id: String,
    /// The names the document calls it, most used first.
    pub names: Vec<String>,
    /// The first sentence that mentions it: its description, and the passage the
    /// model compares when another document has an entity of the same name.
    pub context: String,
    /// The head of the document's summary: what the document is about, for the
    /// same comparison.
    #[serde(with = "shared_text")]
    pub document: Arc<str>,
    /// The segments it was found in, in document order.
    pub seg_ids: Vec<String>,
}

impl DocEntity {
    /// The passage the model is shown when this entity's name collides with
    /// another document's.
    fn passage(&self) -> String {
        if self.document.is_empty() {
            self.context.clone()
        } else {
            format!(
                "{}\n\nFrom a document about: {}",
                self.context, self.document
            )
        }
    }
}

/// A relation as one document knows it, merged across that document's segments.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct DocRelation {
    pub doc_id: String,
    pub source_key: String,
    pub target_key: String,
    pub description: String,
    pub seg_ids: Vec<String>,
    /// The document's summary: the merge prompt's background. Shared by the
    /// document's relations while they are built and sent to the worker that
    /// spills them (the cross-document stages keep no texts in memory).
    #[serde(with = "shared_text")]
    pub summary: Arc<str>,
    /// The head of the first segment it came from: its evidence in a merge.
    #[serde(with = "shared_text")]
    pub evidence: Arc<str>,
}

/// Serde for a text shared by several records (`Arc<str>`), as a plain string.
mod shared_text {
    use std::sync::Arc;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(text: &Arc<str>, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(text)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Arc<str>, D::Error> {
        String::deserialize(deserializer).map(Arc::from)
    }
}

/// Which entity a document's entity became.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct EntityAssignment {
    pub doc_id: String,
    pub key: String,
    pub entity_id: String,
}

/// A name as entities are matched by: lower case, no leading article, no
/// possessive, punctuation as spaces. "The Beatles'" and "beatles" match.
pub fn normalise(name: &str) -> String {
    let lower = name.to_lowercase().replace(['\u{2019}', '`'], "'");
    let lower = lower.strip_suffix("'s").unwrap_or(&lower);
    let cleaned: String = lower
        .chars()
        .map(|c| if c.is_alphanumeric() { c } else { ' ' })
        .collect();
    let words: Vec<&str> = cleaned.split_whitespace().collect();
    let words = match words.as_slice() {
        [first, rest @ ..] if !rest.is_empty() && matches!(*first, "the" | "a" | "an") => rest,
        all => all,
    };
    words.join(" ")
}

/// Keys that are one word of exactly one longer key of the same document, as its
/// first or last word ("Graham" for "Paul Graham", "Viaweb" for "Viaweb Store"),
/// mapped to that longer key: within one document they name the same entity.
fn alias_targets(keys: &BTreeSet<String>) -> HashMap<String, String> {
    let mut candidates: HashMap<&str, BTreeSet<&str>> = HashMap::new();
    for key in keys {
        let words: Vec<&str> = key.split(' ').collect();
        if words.len() > 1 {
            for end in [words[0], words[words.len() - 1]] {
                candidates.entry(end).or_default().insert(key);
            }
        }
    }
    keys.iter()
        .filter(|k| !k.contains(' '))
        .filter_map(|k| {
            match candidates
                .get(k.as_str())?
                .iter()
                .collect::<Vec<_>>()
                .as_slice()
            {
                [only] => Some((k.clone(), only.to_string())),
                _ => None,
            }
        })
        .collect()
}

/// The graph of one document: its entities and relations (merged within the
/// document), from its segments in order. `background` is the document's summary.
pub async fn document_graph(
    doc_id: &str,
    background: &str,
    segments: &[SegmentRow],
    model: &dyn MemoryModel,
) -> StepResult<(Vec<DocEntity>, Vec<DocRelation>)> {
    let cx = CallContext::build(STAGE, doc_id);
    let extracted: Vec<(Vec<String>, Vec<Relation>)> =
        all_in_order(segments.iter().map(|segment| {
            let cx = &cx;
            async move {
                let names = model
                    .extract_entities(cx, background, &segment.text)
                    .await?;
                let relations = if names.len() < 2 {
                    Vec::new()
                } else {
                    let shown: Vec<&str> = names.iter().map(String::as_str).collect();
                    model.extract_relations(cx, &segment.text, &shown).await?
                };
                Ok((names, relations))
            }
        }))
        .await?;

    // Every name the document uses, including relation ends the model did not
    // list as entities: a relation never points at nothing.
    let mut keys = BTreeSet::new();
    for (names, relations) in &extracted {
        let ends = relations.iter().flat_map(|r| [&r.source, &r.target]);
        keys.extend(names.iter().chain(ends).map(|n| normalise(n)));
    }
    keys.remove("");
    let aliases = alias_targets(&keys);
    let key_of = |name: &str| {
        let key = normalise(name);
        aliases.get(&key).cloned().unwrap_or(key)
    };

    let mut entities: BTreeMap<String, (BTreeMap<String, usize>, Vec<usize>)> = BTreeMap::new();
    let mut relations: BTreeMap<(String, String), Vec<(usize, String)>> = BTreeMap::new();
    for (index, (names, found)) in extracted.iter().enumerate() {
        let ends = found.iter().flat_map(|r| [&r.source, &r.target]);
        for name in names.iter().chain(ends) {
            let key = key_of(name);
            if key.is_empty() {
                continue;
            }
            let (counts, segs) = entities.entry(key).or_default();
            *counts.entry(name.trim().to_string()).or_default() += 1;
            if segs.last() != Some(&index) {
                segs.push(index);
            }
        }
        for relation in found {
            let (source, target) = (key_of(&relation.source), key_of(&relation.target));
            // Two names of one entity (an alias and its full name) are not a relation.
            if source != target && !source.is_empty() && !target.is_empty() {
                relations
                    .entry((source, target))
                    .or_default()
                    .push((index, relation.description.clone()));
            }
        }
    }

    // One copy per document, shared by its entities.
    let about: Arc<str> = Arc::from(head_words(background, ABOUT_WORDS));
    let doc_entities = entities
        .into_iter()
        .map(|(key, (counts, segs))| {
            let mut names: Vec<(String, usize)> = counts.into_iter().collect();
            names.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
            let names: Vec<String> = names.into_iter().map(|(n, _)| n).collect();
            let context =
                first_mention(&segments[segs[0]].text, &names).unwrap_or_else(|| names[0].clone());
            DocEntity {
                key,
                doc_id: doc_id.to_string(),
                names,
                context,
                document: Arc::clone(&about),
                seg_ids: segs.iter().map(|&i| segments[i].seg_id.clone()).collect(),
            }
        })
        .collect();

    let background: Arc<str> = Arc::from(background);
    // A segment's head is the evidence of every relation first found in it.
    let heads: HashMap<usize, Arc<str>> = relations
        .values()
        .map(|found| found[0].0)
        .map(|i| (i, Arc::from(head_words(&segments[i].text, EVIDENCE_WORDS))))
        .collect();
    let doc_relations = all_in_order(relations.into_iter().map(|((source, target), found)| {
        let (cx, background, heads) = (&cx, &background, &heads);
        async move {
            let evidence: Vec<(String, String)> = found
                .iter()
                .map(|(i, d)| (segments[*i].text.clone(), d.clone()))
                .collect();
            let description = merge_balanced(model, cx, background, evidence).await?;
            let mut seg_ids: Vec<String> = Vec::new();
            for (i, _) in &found {
                if !seg_ids.contains(&segments[*i].seg_id) {
                    seg_ids.push(segments[*i].seg_id.clone());
                }
            }
            Ok(DocRelation {
                doc_id: doc_id.to_string(),
                source_key: source,
                target_key: target,
                description,
                seg_ids,
                summary: Arc::clone(background),
                evidence: Arc::clone(&heads[&found[0].0]),
            })
        }
    }))
    .await?;
    Ok((doc_entities, doc_relations))
}

/// The first sentence of `text` that mentions any of `names`.
fn first_mention(text: &str, names: &[String]) -> Option<String> {
    sentence_list(text)
        .into_iter()
        .find(|s| names.iter().any(|n| s.contains(n.as_str())))
        .map(collapse_whitespace)
}

/// One description from several (evidence text, description) pairs, merged two
/// at a time with the paper's merge prompt, as a balanced tree: each merge waits
/// on log₂(n) before it rather than on n - 1.
async fn merge_balanced(
    model: &dyn MemoryModel,
    cx: &CallContext,
    summary: &str,
    mut items: Vec<(String, String)>,
) -> StepResult<String> {
    while items.len() > 1 {
        let mut pairs = Vec::with_capacity(items.len().div_ceil(2));
        let mut rest = items.into_iter();
        while let Some(first) = rest.next() {
            pairs.push((first, rest.next()));
        }
        items = all_in_order(pairs.into_iter().map(|(first, second)| async move {
            let Some(second) = second else {
                return Ok(first);
            };
            if first.1 == second.1 {
                return Ok(first);
            }
            let merged = model
                .merge_relations(
                    cx,
                    summary,
                    RelationEvidence {
                        segment: &first.0,
                        relation: &first.1,
                    },
                    RelationEvidence {
                        segment: &second.0,
                        relation: &second.1,
                    },
                )
                .await?;
            Ok((first.0, merged))
        }))
        .await?;
    }
    Ok(items.pop().map(|(_, d)| d).unwrap_or_default())
}

/// The entities that the documents' entities of one normalised name (`mentions`,
/// in doc_id order) become: each document's entity joins the first entity whose
/// first document the model says it is the same as, or starts a new one. Also
/// what each document's entity became.
pub async fn resolve_entities(
    mentions: &[DocEntity],
    model: &dyn MemoryModel,
) -> StepResult<(Vec<EntityRow>, Vec<EntityAssignment>)> {
    let cx = CallContext::corpus(STAGE);
    let mut groups: Vec<Vec<&DocEntity>> = Vec::new();
    let mut unplaced: Vec<&DocEntity> = mentions.iter().collect();
    // Each round, every unplaced mention is compared with the next group's first
    // mention, about SAME_ENTITY_BATCH passages to a call, the calls at once; the
    // ones the model turns away form later groups. A passage's batch is drawn
    // from its document id, and the number of batches only changes when the
    // candidates double, so a document arriving in a later epoch changes one
    // batch's prompt: the others are answered from the call cache.
    while let Some((&first, rest)) = unplaced.split_first() {
        let first_passage = first.passage();
        let batches = rest.len().div_ceil(SAME_ENTITY_BATCH).next_power_of_two();
        let mut members: Vec<Vec<usize>> = vec![Vec::new(); batches];
        for (i, m) in rest.iter().enumerate() {
            members[batch_of(&m.doc_id, batches)].push(i);
        }
        let answers = all_in_order(members.iter().filter(|b| !b.is_empty()).map(|batch| {
            let passages: Vec<String> = batch.iter().map(|&i| rest[i].passage()).collect();
            let (cx, name, first) = (&cx, &first.names[0], &first_passage);
            async move {
                let passages: Vec<&str> = passages.iter().map(String::as_str).collect();
                model.same_entity(cx, name, first, &passages).await
            }
        }))
        .await?;
        let mut same = vec![false; rest.len()];
        for (batch, answer) in members.iter().filter(|b| !b.is_empty()).zip(answers) {
            for (&i, yes) in batch.iter().zip(answer) {
                same[i] = yes;
            }
        }
        let mut group = vec![first];
        let mut apart = Vec::new();
        for (m, same) in rest.iter().zip(same) {
            if same { group.push(m) } else { apart.push(*m) }
        }
        groups.push(group);
        unplaced = apart;
    }
    Ok(entity_rows(&groups))
}

/// Which of `batches` disambiguation batches a document's passage goes to: a
/// function of its id alone, so batches stay put as documents come and go.
fn batch_of(doc_id: &str, batches: usize) -> usize {
    let hash = blake3::hash(doc_id.as_bytes());
    let bytes: [u8; 8] = hash.as_bytes()[..8].try_into().expect("8 bytes");
    (u64::from_le_bytes(bytes) % batches as u64) as usize
}

/// The rows of resolved groups: the first group takes the plain id of the name,
/// later ones add their first document to it.
pub fn entity_rows(groups: &[Vec<&DocEntity>]) -> (Vec<EntityRow>, Vec<EntityAssignment>) {
    let mut rows = Vec::new();
    let mut assignments = Vec::new();
    for (index, group) in groups.iter().enumerate() {
        let first = group[0];
        let entity_id = if index == 0 {
            content_id("entity", &[first.key.as_bytes()])
        } else {
            content_id("entity", &[first.key.as_bytes(), first.doc_id.as_bytes()])
        };
        let mut name_counts: BTreeMap<&str, usize> = BTreeMap::new();
        for m in group {
            *name_counts.entry(m.names[0].as_str()).or_default() += 1;
        }
        let name = name_counts
            .iter()
            .max_by(|a, b| a.1.cmp(b.1).then_with(|| b.0.cmp(a.0)))
            .map(|(n, _)| n.to_string())
            .unwrap_or_default();
        let aliases: BTreeSet<String> = group
            .iter()
            .flat_map(|m| m.names.iter())
            .filter(|n| **n != name)
            .cloned()
            .collect();
        let seg_ids: BTreeSet<String> = group.iter().flat_map(|m| m.seg_ids.clone()).collect();
        assignments.extend(group.iter().map(|m| EntityAssignment {
            doc_id: m.doc_id.clone(),
            key: m.key.clone(),
            entity_id: entity_id.clone(),
        }));
        rows.push(EntityRow {
            entity_id,
            name,
            entity_type: String::new(),
            description: first.context.clone(),
            aliases: aliases.into_iter().collect(),
            seg_ids: seg_ids.into_iter().collect(),
        });
    }
    (rows, assignments)
}

/// One relation from the documents' relations between the same two entities (in
/// doc_id order), their descriptions merged with the paper's merge prompt.
pub async fn merge_relations_across(
    source_id: &str,
    target_id: &str,
    found: &[DocRelation],
    model: &dyn MemoryModel,
) -> StepResult<RelationRow> {
    let cx = CallContext::corpus(STAGE);
    let summary = found.first().map_or("", |r| &*r.summary);
    let evidence = found
        .iter()
        .map(|r| (r.evidence.to_string(), r.description.clone()))
        .collect();
    let description = merge_balanced(model, &cx, summary, evidence).await?;
    Ok(relation_row(source_id, target_id, found, description))
}

/// The relation between two entities with `description`, from the segments of
/// every document's relation between them.
pub fn relation_row(
    source_id: &str,
    target_id: &str,
    found: &[DocRelation],
    description: String,
) -> RelationRow {
    let seg_ids: BTreeSet<String> = found.iter().flat_map(|r| r.seg_ids.clone()).collect();
    RelationRow {
        relation_id: content_id("relation", &[source_id.as_bytes(), target_id.as_bytes()]),
        source_id: source_id.to_string(),
        target_id: target_id.to_string(),
        description,
        seg_ids: seg_ids.into_iter().collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::FirstSentence;

    fn segment(doc: &str, ordinal: u32, text: &str) -> SegmentRow {
        SegmentRow {
            seg_id: format!("{doc}-{ordinal}"),
            doc_id: doc.to_string(),
            ordinal,
            start_char: 0,
            end_char: text.chars().count() as u64,
            text: text.to_string(),
            n_tokens: 1,
            target_tokens: 1000,
        }
    }

    fn graph(
        doc: &str,
        texts: &[&str],
        model: &FirstSentence,
    ) -> (Vec<DocEntity>, Vec<DocRelation>) {
        let segments: Vec<SegmentRow> = texts
            .iter()
            .enumerate()
            .map(|(i, t)| segment(doc, i as u32, t))
            .collect();
        futures::executor::block_on(document_graph(doc, "background", &segments, model))
            .expect("the stub answers")
    }

    #[test]
    fn names_normalise_past_case_articles_and_possessives() {
        assert_eq!(normalise("The Beatles'"), "beatles");
        assert_eq!(normalise("  the   BEATLES "), "beatles");
        assert_eq!(normalise("Graham's"), "graham");
        assert_eq!(normalise("Y Combinator"), "y combinator");
        assert_eq!(normalise("The"), "the");
    }

    #[test]
    fn a_surname_is_an_alias_of_the_one_full_name_it_ends() {
        let model = FirstSentence::default();
        let (entities, relations) = graph(
            "d",
            &[
                "Then Paul Graham met Jessica Livingston in Boston. They talked.",
                "Then Graham wrote about Boston and Lisp. Lisp was old.",
            ],
            &model,
        );
        let keys: Vec<&str> = entities.iter().map(|e| e.key.as_str()).collect();
        assert_eq!(
            keys,
            ["boston", "jessica livingston", "lisp", "paul graham"]
        );
        let paul = &entities[3];
        assert_eq!(paul.names, ["Graham", "Paul Graham"]);
        assert_eq!(paul.seg_ids, ["d-0", "d-1"]);
        assert!(paul.context.starts_with("Then Paul Graham met"));
        // Every relation joins two entities of the document.
        for r in &relations {
            assert!(keys.contains(&r.source_key.as_str()) && keys.contains(&r.target_key.as_str()));
            assert_ne!(r.source_key, r.target_key);
        }
        // Paul Graham and Boston are related in both segments: one relation, two sources.
        let merged = relations
            .iter()
            .find(|r| r.source_key == "paul graham" && r.target_key == "boston")
            .expect("the relation of both segments");
        assert_eq!(merged.seg_ids, ["d-0", "d-1"]);
    }

    #[test]
    fn entities_of_one_name_stay_apart_when_the_model_says_so() {
        let texts_a = ["Apple sold phones in Cupertino. Apple grew."];
        let texts_b = ["Apple trees grew in Kent. Apple pie followed."];
        let merging = FirstSentence::default();
        let separating = FirstSentence::separating(&["Apple"]);
        let mentions = |model: &FirstSentence| {
            let (a, _) = graph("a", &texts_a, model);
            let (b, _) = graph("b", &texts_b, model);
            let apple: Vec<DocEntity> = a
                .into_iter()
                .chain(b)
                .filter(|e| e.key == "apple")
                .collect();
            assert_eq!(apple.len(), 2);
            futures::executor::block_on(resolve_entities(&apple, model)).expect("answers")
        };
        let (one, assigned) = mentions(&merging);
        assert_eq!(one.len(), 1);
        assert_eq!(one[0].seg_ids, ["a-0", "b-0"]);
        assert!(assigned.iter().all(|a| a.entity_id == one[0].entity_id));
        let (two, assigned) = mentions(&separating);
        assert_eq!(two.len(), 2);
        assert_ne!(two[0].entity_id, two[1].entity_id);
        assert_eq!(assigned[1].entity_id, two[1].entity_id);
        assert_eq!(
            (two[0].seg_ids.as_slice(), two[1].seg_ids.as_slice()),
            (&["a-0".to_string()][..], &["b-0".to_string()][..])
        );
    }
}
