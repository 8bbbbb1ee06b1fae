//! QRMeM (Wang et al. 2024) over the entity/relation graph: start from the
//! question's entities (Entity Trial), optionally widen to their neighbours
//! (Graph Expansion Search), or reflect: ask whether the gathered segments answer
//! the question, and if not, why, then follow the adjacent relation most similar
//! to the question, the reason and the entities, add its segments, and keep the
//! context within the window by similarity to the question.

use std::collections::BTreeSet;

use memweave_operators::embed::embed_all;
use memweave_operators::model::StepError;

use super::{Navigation, Passage};
use memweave_operators::embed::cosine;

/// Entities taken by similarity when none of the question's names is in the graph.
const NEAREST_ENTITIES: usize = 3;

impl Navigation<'_> {
    /// The graph entities the question names (the model extracts them, as it did
    /// from every segment); the nearest entity vectors when none matches.
    async fn question_entities(&mut self) -> Result<Vec<usize>, StepError> {
        let names = self
            .model
            .extract_entities(&self.cx, "", &self.request.question)
            .await?;
        let mut found: Vec<usize> = Vec::new();
        for name in &names {
            for &entity in self.snapshot.entities_named(name) {
                if !found.contains(&entity) {
                    found.push(entity);
                }
            }
        }
        let how = if found.is_empty() {
            let Some(question) = self.question_vector().await? else {
                return Ok(Vec::new());
            };
            let mut ranked: Vec<(usize, f64)> = (0..self.snapshot.entities.len())
                .filter_map(|i| {
                    let vector = self.snapshot.vector(&self.snapshot.entities[i].entity_id)?;
                    Some((i, cosine(&question, vector)))
                })
                .collect();
            ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
            found = ranked.iter().take(NEAREST_ENTITIES).map(|r| r.0).collect();
            "none is in the graph; the entities nearest the question instead"
        } else {
            "matched by name or alias"
        };
        let listed: Vec<&str> = found
            .iter()
            .map(|&e| self.snapshot.entities[e].name.as_str())
            .collect();
        self.record(
            "entities",
            &listed.join(", "),
            None,
            found.len() as f64,
            format!("the question names [{}]; {how}", names.join(", ")),
        );
        Ok(found)
    }

    /// QRMeM's Entity Trial: the segments the question's entities came from.
    pub(super) async fn qrmem_trial(&mut self) -> Result<(), StepError> {
        let entities = self.question_entities().await?;
        let segments = self.segments_of(&entities, &[]);
        let passages = self.within_window(segments).await?;
        self.answer_from(passages, "from the segments of the question's entities")
            .await
    }

    /// QRMeM's Graph Expansion Search: the entities, their neighbours, and the
    /// relations between them.
    pub(super) async fn qrmem_expand(&mut self) -> Result<(), StepError> {
        let mut entities = self.question_entities().await?;
        let relations = self.adjacent_relations(&entities, &[]);
        for &r in &relations {
            self.add_ends(&mut entities, r);
            let relation = &self.snapshot.relations[r];
            let (id, description) = (relation.relation_id.clone(), relation.description.clone());
            self.record("expand", &id, None, 0.0, description);
        }
        let segments = self.segments_of(&entities, &relations);
        let passages = self.within_window(segments).await?;
        self.answer_from(
            passages,
            "from the entities, their neighbours and relations",
        )
        .await
    }

    /// QRMeM's reflection loop (Algorithm 1).
    pub(super) async fn qrmem(&mut self) -> Result<(), StepError> {
        let mut entities = self.question_entities().await?;
        let mut followed: Vec<usize> = Vec::new();
        let mut passages = self
            .within_window(self.segments_of(&entities, &followed))
            .await?;
        for round in 1..=self.max_rounds() {
            let judgement = self
                .model
                .judge_answerable(
                    &self.cx,
                    &self.request.question,
                    &super::context_of(&passages),
                )
                .await?;
            if judgement.answer.is_some() {
                self.record(
                    "answerable",
                    "",
                    None,
                    round as f64,
                    format!("round {round}: {}", judgement.reasoning),
                );
                break;
            }
            // The relations at the edge of what was gathered, not followed yet.
            let candidates = self.adjacent_relations(&entities, &followed);
            if candidates.is_empty() {
                self.record(
                    "unanswerable",
                    "",
                    None,
                    round as f64,
                    format!(
                        "round {round}: {}; no relation is left to follow",
                        judgement.reasoning
                    ),
                );
                break;
            }
            let names: Vec<&str> = entities
                .iter()
                .map(|&e| self.snapshot.entities[e].name.as_str())
                .collect();
            let probe = format!(
                "{}\n{}\n{}",
                self.request.question,
                judgement.reasoning,
                names.join(", ")
            );
            let mut texts: Vec<String> = vec![probe];
            texts.extend(candidates.iter().map(|&r| self.relation_text(r)));
            let text_refs: Vec<&str> = texts.iter().map(String::as_str).collect();
            let vectors = embed_all(self.embedder, &self.cx, &text_refs).await?;
            let (best, similarity) = candidates
                .iter()
                .zip(&vectors[1..])
                .map(|(&r, v)| (r, cosine(&vectors[0], v)))
                .max_by(|a, b| a.1.total_cmp(&b.1).then(b.0.cmp(&a.0)))
                .expect("candidates is not empty");
            followed.push(best);
            self.add_ends(&mut entities, best);
            let id = self.snapshot.relations[best].relation_id.clone();
            self.record(
                "expand",
                &id,
                None,
                similarity,
                format!(
                    "round {round}: not answerable yet ({}); follow \"{}\"",
                    judgement.reasoning,
                    self.relation_text(best)
                ),
            );
            passages = self
                .within_window(self.segments_of(&entities, &followed))
                .await?;
        }
        self.answer_from(passages, "from the segments gathered on the graph")
            .await
    }

    /// Relations touching any of `entities`, except those in `skip`, each once,
    /// in id order.
    fn adjacent_relations(&self, entities: &[usize], skip: &[usize]) -> Vec<usize> {
        entities
            .iter()
            .flat_map(|&e| {
                self.snapshot
                    .relations_of(&self.snapshot.entities[e].entity_id)
            })
            .copied()
            .filter(|r| !skip.contains(r))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect()
    }

    /// Adds the entities at both ends of `relation` to `entities`.
    fn add_ends(&self, entities: &mut Vec<usize>, relation: usize) {
        let relation = &self.snapshot.relations[relation];
        for end in [&relation.source_id, &relation.target_id] {
            if let Some(e) = self.snapshot.entity_position(end)
                && !entities.contains(&e)
            {
                entities.push(e);
            }
        }
    }

    fn relation_text(&self, relation: usize) -> String {
        let r = &self.snapshot.relations[relation];
        let name = |id: &str| {
            self.snapshot
                .entity(id)
                .map_or(id, |e| e.name.as_str())
                .to_string()
        };
        format!(
            "{} — {} — {}",
            name(&r.source_id),
            r.description,
            name(&r.target_id)
        )
    }

    /// The source segments of entities and relations, each once, in the allowed
    /// documents.
    fn segments_of(&self, entities: &[usize], relations: &[usize]) -> Vec<String> {
        let ids = entities
            .iter()
            .flat_map(|&e| &self.snapshot.entities[e].seg_ids)
            .chain(
                relations
                    .iter()
                    .flat_map(|&r| &self.snapshot.relations[r].seg_ids),
            );
        let mut seen = BTreeSet::new();
        ids.filter(|id| {
            self.snapshot
                .segment(id)
                .is_some_and(|s| self.allowed(&s.doc_id))
        })
        .filter(|id| seen.insert(id.as_str()))
        .cloned()
        .collect()
    }

    /// The segments most similar to the question that fit the context window
    /// (the budget), most similar first.
    async fn within_window(&mut self, segments: Vec<String>) -> Result<Vec<Passage>, StepError> {
        let question = self.question_vector().await?;
        let mut ranked: Vec<(String, f64)> = segments
            .into_iter()
            .map(|id| {
                let score = match (&question, self.snapshot.vector(&id)) {
                    (Some(q), Some(v)) => cosine(q, v),
                    _ => self.snapshot.segment(&id).map_or(0.0, |s| {
                        self.snapshot.passage_bm25.score_text(&self.query, &s.text)
                    }),
                };
                (id, score)
            })
            .collect();
        ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        let mut used = 0;
        let mut passages = Vec::new();
        for (id, _) in ranked {
            let Some(segment) = self.snapshot.segment(&id) else {
                continue;
            };
            let tokens = segment.n_tokens as usize;
            if used + tokens > self.budget() && !passages.is_empty() {
                break;
            }
            used += tokens;
            passages.push(self.segment_passage(segment));
        }
        Ok(passages)
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixture::{answer, memory, request};
    use crate::request::Strategy;

    #[tokio::test]
    async fn an_alias_in_the_question_finds_its_entity_and_its_segments() {
        let snapshot = memory();
        let answer = answer(
            &snapshot,
            &request("What was The Atelier like?", Strategy::QrmemTrial),
        )
        .await;
        let entities = &answer.trace[0];
        assert_eq!(entities.action, "entities");
        assert_eq!(entities.target, "Studio");
        assert!(entities.reasoning.contains("matched by name or alias"));
        let cited: Vec<&str> = answer
            .supporting
            .iter()
            .map(|p| p.from_id.as_str())
            .collect();
        assert_eq!(cited, ["s-p1"]);
    }

    #[tokio::test]
    async fn expansion_follows_relations_to_the_neighbours_segments() {
        let snapshot = memory();
        let answer = answer(
            &snapshot,
            &request("What was The Atelier like?", Strategy::QrmemExpand),
        )
        .await;
        let mut cited: Vec<&str> = answer
            .supporting
            .iter()
            .map(|p| p.from_id.as_str())
            .collect();
        cited.sort();
        assert_eq!(cited, ["s-p1", "s-s1"]);
    }
}
