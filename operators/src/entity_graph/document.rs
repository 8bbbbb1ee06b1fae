//! Per-document extraction: a document's entities and relations from its
//! segments, names folded into the entity they abbreviate.

use std::cell::OnceCell;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use memweave_schemas::Segment;

use super::relations::merge_descriptions;
use super::{DocEntity, DocRelation, EVIDENCE_WORDS, GraphConfig, STAGE, normalise};
use crate::extract::{collapse_whitespace, head_words, key_words, sentence_list};
use crate::model::{CallContext, MemoryModel, Relation, StepResult, all_in_order};

/// Key words of the document shown as the background of entity extraction
/// (what the document is about) and with an entity when its name collides.
/// The paper shows the document's summary; but the background is part of
/// every segment's extraction prompt, and a summary changes with most edits,
/// which would re-extract the whole document. The document's heaviest terms
/// (rare and repeated) stay the same under an edit that is not about them.
const ABOUT_WORDS: usize = 16;

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
    segments: &[Segment],
    model: &dyn MemoryModel,
    config: &GraphConfig,
) -> StepResult<(Vec<DocEntity>, Vec<DocRelation>)> {
    let cx = CallContext::build(STAGE, doc_id);
    // One copy per document, shared by its entities.
    let text: Vec<&str> = segments.iter().map(|s| s.text.as_str()).collect();
    let about: Arc<str> = Arc::from(key_words(&text.join("\n"), ABOUT_WORDS));
    let extracted: Vec<(Vec<String>, Vec<Relation>)> =
        all_in_order(segments.iter().map(|segment| {
            let (cx, about) = (&cx, &about);
            async move {
                let names = model.extract_entities(cx, about, &segment.text).await?;
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

    // A segment is split into sentences once, however many entities it
    // introduces.
    let sentences_of: Vec<OnceCell<Vec<&str>>> = segments.iter().map(|_| OnceCell::new()).collect();
    let doc_entities = entities
        .into_iter()
        .map(|(key, (counts, segs))| {
            let mut names: Vec<(String, usize)> = counts.into_iter().collect();
            names.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
            let names: Vec<String> = names.into_iter().map(|(n, _)| n).collect();
            let sentences =
                sentences_of[segs[0]].get_or_init(|| sentence_list(&segments[segs[0]].text));
            let context = first_mention(sentences, &names).unwrap_or_else(|| names[0].clone());
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

    // What a merge shows of the summary: all its relations keep, and carry
    // across documents.
    let background: Arc<str> = Arc::from(head_words(background, EVIDENCE_WORDS));
    // A segment's head is the evidence of every relation found in it.
    let with_relations: BTreeSet<usize> = relations.values().flatten().map(|(i, _)| *i).collect();
    let heads: HashMap<usize, Arc<str>> = with_relations
        .into_iter()
        .map(|i| (i, Arc::from(head_words(&segments[i].text, EVIDENCE_WORDS))))
        .collect();
    let doc_relations = all_in_order(relations.into_iter().map(|((source, target), found)| {
        let (cx, background, heads) = (&cx, &background, &heads);
        async move {
            let evidence: Vec<(Arc<str>, String)> = found
                .iter()
                .map(|(i, d)| (Arc::clone(&heads[i]), d.clone()))
                .collect();
            let description = merge_descriptions(
                model,
                cx,
                || Arc::clone(background),
                evidence,
                Arc::clone,
                config.description_budget,
            )
            .await?;
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

/// The first of `sentences` that mentions any of `names`.
fn first_mention(sentences: &[&str], names: &[String]) -> Option<String> {
    sentences
        .iter()
        .find(|s| names.iter().any(|n| s.contains(n.as_str())))
        .map(|s| collapse_whitespace(s))
}
