//! QRMeM (Wang et al. 2024) over the entity/relation graph: start from the
//! question's entities (Entity Trial), optionally widen to their neighbours
//! (Graph Expansion Search), or reflect: ask whether the gathered segments answer
//! the question, and if not, why, then follow the adjacent relation most similar
//! to the question, the reason and the entities, add its segments, and keep the
//! context within the window by similarity to the question.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use memweave_operators::embed::{cosine, embed_all};
use memweave_schemas::{EntityRow, RelationRow, SegmentRow};

use super::{Navigation, Navigator, Passage, Signal, Walked, navigator_over_context};
use crate::snapshot::Probe;

/// Entities taken by similarity when none of the question's names is in the graph.
const NEAREST_ENTITIES: usize = 3;

/// Candidate segments a context is chosen from by reading each one's vector.
/// A hub entity's segments (thousands at 10M tokens, growing with the
/// archive) are instead those the vector index finds nearest the question.
const EXACT_SEGMENTS_AT_MOST: usize = 512;
/// How far the vector index is asked for a hub's segments: the nearest this
/// many of the whole memory, at most (asked for 512, then four times more).
const NEAREST_FOR_HUBS_AT_MOST: usize = 2048;
/// Relations one expansion follows, or one reflection round weighs, from the
/// entities gathered: the first in id order (ids are hashes, so a fair
/// sample of a hub's thousands, and the same one every time).
const RELATIONS_AT_MOST: usize = 64;

/// How QRMeM searches the graph: the question's entities alone (Entity
/// Trial), with their neighbours (Graph Expansion Search), or reflecting
/// round by round (Algorithm 1).
#[derive(Debug, Clone, Copy)]
pub(super) enum QrmemSearch {
    Trial,
    Expand,
    Reflect,
}

/// QRMeM: its search, and the segments nearest the question by how many
/// were asked for (a hub's segments are narrowed with them every round),
/// over the shared context.
pub(super) struct Qrmem<'n, 'a> {
    nav: &'n mut Navigation<'a>,
    search: QrmemSearch,
    nearest_to_question: HashMap<usize, Arc<[(String, f64)]>>,
}

navigator_over_context!(Qrmem);

impl<'n, 'a> Qrmem<'n, 'a> {
    pub(super) fn over(nav: &'n mut Navigation<'a>, search: QrmemSearch) -> Self {
        Qrmem {
            nav,
            search,
            nearest_to_question: HashMap::new(),
        }
    }
}

impl Navigator for Qrmem<'_, '_> {
    async fn navigate(&mut self) -> Walked {
        match self.search {
            QrmemSearch::Trial => self.trial().await,
            QrmemSearch::Expand => self.expand().await,
            QrmemSearch::Reflect => self.reflect().await,
        }
    }
}

impl Qrmem<'_, '_> {
    /// The graph entities the question names (the model extracts them, as it did
    /// from every segment); the nearest entity vectors when none matches.
    async fn question_entities(&mut self) -> Walked<Vec<Arc<EntityRow>>> {
        let names = self
            .model
            .extract_entities(&self.cx, "", &self.request.question)
            .await?;
        let mut found: Vec<Arc<EntityRow>> = Vec::new();
        for name in &names {
            for entity in self.snapshot.entities_named(name).await? {
                if !found.iter().any(|e| e.entity_id == entity.entity_id) {
                    found.push(entity);
                }
            }
        }
        let (how, signal) = if found.is_empty() {
            let Some(question) = self.question_vector().await? else {
                return Ok(Vec::new());
            };
            found = self
                .snapshot
                .nearest_entities(
                    Probe {
                        vector: &question,
                        terms: &self.query,
                    },
                    NEAREST_ENTITIES,
                )
                .await?
                .into_iter()
                .map(|(entity, _)| entity)
                .collect();
            (
                "none is in the graph; the entities nearest the question instead",
                Signal::Vectors,
            )
        } else {
            ("matched by name or alias", Signal::Text)
        };
        let listed: Vec<&str> = found.iter().map(|e| e.name.as_str()).collect();
        self.by(signal).record(
            "entities",
            &listed.join(", "),
            None,
            found.len() as f64,
            format!("the question names [{}]; {how}", names.join(", ")),
        );
        Ok(found)
    }

    /// QRMeM's Entity Trial: the segments the question's entities came from.
    async fn trial(&mut self) -> Walked {
        let entities = self.question_entities().await?;
        let segments = self.segments_of(&entities, &[]).await?;
        let passages = self.within_window(segments).await?;
        self.answer_from(passages, "from the segments of the question's entities")
            .await
    }

    /// QRMeM's Graph Expansion Search: the entities, their neighbours, and the
    /// relations between them.
    async fn expand(&mut self) -> Walked {
        let mut entities = self.question_entities().await?;
        let relations = self.adjacent_relations(&entities, &[]).await?;
        self.read_ends(&relations).await?;
        for relation in &relations {
            self.add_ends(&mut entities, relation).await?;
            self.record(
                "expand",
                &relation.relation_id,
                None,
                0.0,
                relation.description.clone(),
            );
        }
        let segments = self.segments_of(&entities, &relations).await?;
        let passages = self.within_window(segments).await?;
        self.answer_from(
            passages,
            "from the entities, their neighbours and relations",
        )
        .await
    }

    /// QRMeM's reflection loop (Algorithm 1).
    async fn reflect(&mut self) -> Walked {
        let mut entities = self.question_entities().await?;
        let mut followed: Vec<Arc<RelationRow>> = Vec::new();
        let mut passages = self
            .within_window(self.segments_of(&entities, &followed).await?)
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
                self.by(Signal::Model).record(
                    "answerable",
                    "",
                    None,
                    round as f64,
                    format!("round {round}: {}", judgement.reasoning),
                );
                break;
            }
            // The relations at the edge of what was gathered, not followed yet.
            let candidates = self.adjacent_relations(&entities, &followed).await?;
            if candidates.is_empty() {
                self.by(Signal::Model).record(
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
            let names: Vec<&str> = entities.iter().map(|e| e.name.as_str()).collect();
            let probe = format!(
                "{}\n{}\n{}",
                self.request.question,
                judgement.reasoning,
                names.join(", ")
            );
            let mut texts: Vec<String> = vec![probe];
            self.read_ends(&candidates).await?;
            for relation in &candidates {
                texts.push(self.relation_text(relation).await?);
            }
            let text_refs: Vec<&str> = texts.iter().map(String::as_str).collect();
            let vectors = embed_all(self.embedder(), &self.cx, &text_refs).await?;
            // Ties go to the relation first in id order.
            let (best, similarity) = candidates
                .iter()
                .zip(&vectors[1..])
                .enumerate()
                .map(|(i, (r, v))| (i, r, cosine(&vectors[0], v)))
                .max_by(|a, b| a.2.total_cmp(&b.2).then(b.0.cmp(&a.0)))
                .map(|(_, r, similarity)| (r.clone(), similarity))
                .expect("candidates is not empty");
            self.add_ends(&mut entities, &best).await?;
            let followed_text = self.relation_text(&best).await?;
            self.by(Signal::Vectors).record(
                "expand",
                &best.relation_id,
                None,
                similarity,
                format!(
                    "round {round}: not answerable yet ({}); follow \"{followed_text}\"",
                    judgement.reasoning,
                ),
            );
            followed.push(best);
            passages = self
                .within_window(self.segments_of(&entities, &followed).await?)
                .await?;
        }
        self.answer_from(passages, "from the segments gathered on the graph")
            .await
    }

    /// Relations touching any of `entities`, except those in `skip`, each once,
    /// in id order, at most [`RELATIONS_AT_MOST`].
    async fn adjacent_relations(
        &self,
        entities: &[Arc<EntityRow>],
        skip: &[Arc<RelationRow>],
    ) -> Walked<Vec<Arc<RelationRow>>> {
        let ids: Vec<String> = entities.iter().map(|e| e.entity_id.clone()).collect();
        let skipped: HashSet<&str> = skip.iter().map(|s| s.relation_id.as_str()).collect();
        Ok(self
            .snapshot
            .first_relations_touching(&ids, &skipped, RELATIONS_AT_MOST)
            .await?)
    }

    /// Reads the entities at the ends of `relations` in one read, so naming
    /// and adding them reads none.
    async fn read_ends(&self, relations: &[Arc<RelationRow>]) -> Walked {
        let ends: Vec<String> = relations
            .iter()
            .flat_map(|r| [r.source_id.clone(), r.target_id.clone()])
            .collect();
        self.snapshot.rows::<EntityRow>(&ends).await?;
        Ok(())
    }

    /// Adds the entities at both ends of `relation` to `entities`.
    async fn add_ends(&self, entities: &mut Vec<Arc<EntityRow>>, relation: &RelationRow) -> Walked {
        for end in [&relation.source_id, &relation.target_id] {
            if entities.iter().any(|e| &e.entity_id == end) {
                continue;
            }
            if let Some(entity) = self.snapshot.row::<EntityRow>(end).await? {
                entities.push(entity);
            }
        }
        Ok(())
    }

    async fn relation_text(&self, relation: &RelationRow) -> Walked<String> {
        let mut names = Vec::new();
        for id in [&relation.source_id, &relation.target_id] {
            names.push(
                self.snapshot
                    .row::<EntityRow>(id)
                    .await?
                    .map_or_else(|| id.clone(), |e| e.name.clone()),
            );
        }
        Ok(format!(
            "{} — {} — {}",
            names[0], relation.description, names[1]
        ))
    }

    /// The source segments of entities and relations, each once, in order.
    async fn segments_of(
        &self,
        entities: &[Arc<EntityRow>],
        relations: &[Arc<RelationRow>],
    ) -> Walked<Vec<String>> {
        let ids = entities
            .iter()
            .flat_map(|e| &e.seg_ids)
            .chain(relations.iter().flat_map(|r| &r.seg_ids));
        let mut seen = BTreeSet::new();
        Ok(ids.filter(|id| seen.insert(id.as_str())).cloned().collect())
    }

    /// Of more than [`EXACT_SEGMENTS_AT_MOST`] candidate segments, those the
    /// vector index finds nearest the question (in the allowed documents),
    /// with their similarity; none when it finds none of them.
    async fn nearest_of(
        &mut self,
        question: &[f32],
        segments: &[String],
    ) -> Walked<Vec<(String, f64)>> {
        let candidates: HashSet<&str> = segments.iter().map(String::as_str).collect();
        let mut asked = EXACT_SEGMENTS_AT_MOST;
        let mut found = Vec::new();
        while found.is_empty() && asked <= NEAREST_FOR_HUBS_AT_MOST {
            let near = match self.nearest_to_question.get(&asked) {
                Some(near) => near.clone(),
                None => {
                    let near: Arc<[(String, f64)]> = self
                        .snapshot
                        .nearest_segment_ids(
                            Probe {
                                vector: question,
                                terms: &self.query,
                            },
                            self.documents(),
                            asked,
                        )
                        .await?
                        .into();
                    self.nearest_to_question.insert(asked, near.clone());
                    near
                }
            };
            found = near
                .iter()
                .filter(|(id, _)| candidates.contains(id.as_str()))
                .cloned()
                .collect();
            if near.len() < asked {
                break;
            }
            asked *= 4;
        }
        Ok(found)
    }

    /// The segments most similar to the question that fit the context window
    /// (the budget), most similar first, from the allowed documents. They are
    /// ranked by their vectors alone (a hub's by the vector index's search); a
    /// segment's row (its text) is read only when its turn comes, a few at a
    /// time.
    async fn within_window(&mut self, mut segments: Vec<String>) -> Walked<Vec<Passage>> {
        let question = self.question_vector().await?;
        let mut ranked = Vec::new();
        if segments.len() > EXACT_SEGMENTS_AT_MOST {
            if let Some(question) = &question {
                ranked = self.nearest_of(question, &segments).await?;
            }
            // The first ones when the index finds none of them near.
            segments = if ranked.is_empty() {
                segments[..EXACT_SEGMENTS_AT_MOST].to_vec()
            } else {
                Vec::new()
            };
        }
        let mut vectors = match &question {
            Some(_) => self.snapshot.segment_vectors(&segments).await?,
            None => HashMap::new(),
        };
        let mut unvectored = Vec::new();
        for id in segments {
            match (&question, vectors.remove(&id)) {
                (Some(q), Some(v)) => ranked.push((id, cosine(q, &v))),
                _ => unvectored.push(id),
            }
        }
        // Segments without a vector (or a question without one) rank by BM25.
        if !unvectored.is_empty() {
            let lexical = self.snapshot.passage_stats(&self.query).await?;
            for segment in self.snapshot.rows::<SegmentRow>(&unvectored).await? {
                let score = lexical.score_terms(&self.query, segment.terms.split(' '));
                ranked.push((segment.seg_id.clone(), score));
            }
        }
        ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        let mut used = 0;
        let mut passages = Vec::new();
        for few in ranked.chunks(super::ROWS_READ_TOGETHER) {
            let ids: Vec<String> = few.iter().map(|(id, _)| id.clone()).collect();
            let mut rows = self.snapshot.rows::<SegmentRow>(&ids).await?;
            rows.retain(|segment| self.allowed(&segment.doc_id));
            let read = super::segment_passages(self.snapshot, &rows).await?;
            let mut by_id: HashMap<&str, (&SegmentRow, Passage)> = rows
                .iter()
                .zip(read)
                .map(|(row, passage)| (row.seg_id.as_str(), (row.as_ref(), passage)))
                .collect();
            for (id, _) in few {
                let Some((segment, passage)) = by_id.remove(id.as_str()) else {
                    continue;
                };
                let tokens = segment.n_tokens as usize;
                if used + tokens > self.budget() && !passages.is_empty() {
                    return Ok(passages);
                }
                used += tokens;
                passages.push(passage);
            }
        }
        Ok(passages)
    }
}

#[cfg(test)]
mod tests {
    use super::super::ROWS_READ_TOGETHER;
    use std::collections::HashSet;

    use super::super::fixture::{
        HUB_MURALS, HUB_RELATIONS, HUB_SEGMENTS, answer, cited, memory, memory_with_hub, request,
    };
    use super::EXACT_SEGMENTS_AT_MOST;
    use crate::request::Strategy;

    /// A hub's segments (more than are ranked by reading each one) are
    /// narrowed by the vector index to those nearest the question: the
    /// murals are found, and no vector is read again nor any segment past
    /// the budget.
    #[tokio::test]
    async fn a_hub_entity_context_comes_from_its_segments_nearest_the_question() {
        const { assert!(HUB_SEGMENTS > EXACT_SEGMENTS_AT_MOST) };
        let snapshot = memory_with_hub().await;
        let before = snapshot.cache_stats();
        let answer = answer(
            &snapshot,
            &request(
                "Which murals did the Harbour Guild paint of lighthouses?",
                Strategy::QrmemTrial,
            ),
        )
        .await;
        let read = snapshot.cache_stats().misses - before.misses;
        assert_eq!(answer.trace[0].target, "Harbour Guild");
        let murals: Vec<String> = HUB_MURALS.iter().map(|m| format!("s-h{m:03}")).collect();
        assert_eq!(&cited(&answer)[..2], murals, "{:?}", cited(&answer));
        // The index's search scored the candidates: only the segments cited
        // (and the rest of the last few read together) are read, and a few
        // more look-ups are the question's entities and the documents.
        let cited = answer.supporting.len() as u64;
        assert!(
            read <= cited + 2 * ROWS_READ_TOGETHER as u64,
            "{read} look-ups read the tables for {cited} passages"
        );
    }

    /// A hub's relations are chosen from their ends alone: the first in id
    /// order, past those already followed, are the ones the whole rows give,
    /// and only they are read whole.
    #[tokio::test]
    async fn a_hubs_relations_are_read_whole_only_when_kept() {
        let ids = ["e-guild".to_string(), "e-studio".to_string()];
        let everything = memory_with_hub().await;
        let before = everything.cache_stats();
        let all = everything.relations_touching(&ids).await.expect("read");
        let whole = everything.cache_stats().bytes - before.bytes;
        assert_eq!(all.len(), HUB_RELATIONS + 1);
        let skip: HashSet<&str> = [all[1].relation_id.as_str()].into();
        let snapshot = memory_with_hub().await;
        let before = snapshot.cache_stats();
        let first = snapshot
            .first_relations_touching(&ids, &skip, 8)
            .await
            .expect("read");
        let expected: Vec<_> = all
            .iter()
            .filter(|r| !skip.contains(r.relation_id.as_str()))
            .take(8)
            .cloned()
            .collect();
        assert_eq!(first, expected);
        let cached = snapshot.cache_stats().bytes - before.bytes;
        assert!(
            cached < whole / 2,
            "{cached} bytes cached; the relations read whole are {whole}"
        );
    }

    #[tokio::test]
    async fn an_alias_in_the_question_finds_its_entity_and_its_segments() {
        let snapshot = memory().await;
        let answer = answer(
            &snapshot,
            &request("What was The Atelier like?", Strategy::QrmemTrial),
        )
        .await;
        let entities = &answer.trace[0];
        assert_eq!(entities.action, "entities");
        assert_eq!(entities.target, "Studio");
        assert!(entities.reasoning.contains("matched by name or alias"));
        assert_eq!(cited(&answer), ["s-p1"]);
    }

    #[tokio::test]
    async fn expansion_follows_relations_to_the_neighbours_segments() {
        let snapshot = memory().await;
        let answer = answer(
            &snapshot,
            &request("What was The Atelier like?", Strategy::QrmemExpand),
        )
        .await;
        let mut passages = cited(&answer);
        passages.sort();
        assert_eq!(passages, ["s-p1", "s-s1"]);
    }
}
