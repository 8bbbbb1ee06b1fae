//! Vector search: candidates from Lance's IVF index over every partition,
//! re-scored by exact cosine, ties broken by id. Where the memory's vectors
//! are the hashing embedder's, none is stored: candidates come from the
//! full-text index on the owners' terms (a hashing vector is near a
//! question's only through the terms they share), and each candidate's
//! vector is recomputed from its row.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::Float32Array;
use memweave_operators::embed::{HashingEmbedder, cosine};
use memweave_operators::raptor::{corpus_leaf_id, leaf_id, summary_text};
use memweave_schemas::search::{cut_condition, in_cut};
use memweave_schemas::store::{batch_rows, sql_string, sql_strings, strings};
use memweave_schemas::{
    EntityRow, SegmentRow, TREE_RAPTOR, TREE_RAPTOR_CORPUS, Table, TreeNodeRow, entity_text,
};
use serde::{Deserialize, Serialize};

use super::{Allowed, ById, Read, Snapshot};

/// An owner's vector, as the embeddings table holds it.
#[derive(Debug, Serialize, Deserialize)]
struct OwnerVector {
    owner_id: String,
    vector: Vec<f32>,
}

impl ById for OwnerVector {
    const TABLE: Table = Table::Embeddings;
    const ID_COLUMN: &'static str = "owner_id";
    const COLUMNS: &'static [&'static str] = &["owner_id", "vector"];
    fn id(&self) -> &String {
        &self.owner_id
    }
}

/// Candidates the vector index is asked for, per result wanted, and at least;
/// and the quantized candidates re-ranked with the table's own vectors per
/// candidate kept, at most 10 and within [`VECTOR_REFINE_ROWS`] vectors read
/// in all (asked for 2,048, ten times as many full vectors would be 30 MB
/// read for one question).
const VECTOR_CANDIDATES_PER_RESULT: usize = 2;
const VECTOR_CANDIDATES_AT_LEAST: usize = 32;
const VECTOR_REFINE_AT_MOST: usize = 10;
const VECTOR_REFINE_ROWS: usize = 512;

/// Candidates the full-text index is asked for where vectors are
/// recomputed, per result wanted, and at least: Lance ranks them by its
/// BM25, which weighs shared rare terms as the hashing vectors do, so most
/// of the nearest lie inside its best. Measured on python3.11-doc (the
/// `query` bench's question sets): recall@10 against exact search 0.75
/// (segments) and 0.53 (entities) at 128, 0.87 and 0.60 at 512, 0.95 and
/// 0.61 at 2,048; most of what stays missed shares no term with the
/// question, near it only by a hash collision.
const RECOMPUTED_CANDIDATES_PER_RESULT: usize = 8;
const RECOMPUTED_CANDIDATES_AT_LEAST: usize = 512;

/// What a vector search is asked with: a text's vector, and its terms.
#[derive(Debug, Clone, Copy)]
pub struct Probe<'a> {
    pub vector: &'a [f32],
    pub terms: &'a [String],
}

/// The owners of vectors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Owner {
    Segment,
    Node,
    Entity,
}

impl Owner {
    /// Its `embeddings.owner_kind`.
    fn kind(self) -> &'static str {
        match self {
            Owner::Segment => "segment",
            Owner::Node => "node",
            Owner::Entity => "entity",
        }
    }
}

/// Where vectors are recomputed: the hashing embedder that made them, and
/// the cut of the segments that have one.
#[derive(Debug, Clone)]
pub(super) struct Recomputed {
    pub(super) embedder: HashingEmbedder,
    pub(super) segment_tokens: u32,
}

/// The columns of a RAPTOR node its vector is recomputed from.
#[derive(Deserialize)]
struct NodeText {
    node_id: String,
    /// Null for a leaf that is its chunk's own text (its vector is its chunk's).
    summary: Option<String>,
    surprise: Option<String>,
    seg_id: Option<String>,
}

/// The columns of an entity its vector is recomputed from.
#[derive(Deserialize)]
struct EntityText {
    entity_id: String,
    name: String,
    description: String,
}

#[derive(Deserialize)]
struct SegmentId {
    seg_id: String,
}

#[derive(Deserialize)]
struct ChunkId {
    seg_id: String,
    doc_id: String,
}

impl Snapshot {
    /// The vectors of those of `seg_ids` that have one: one read for them all.
    pub async fn segment_vectors(&self, seg_ids: &[String]) -> Read<HashMap<String, Arc<[f32]>>> {
        if let Some(recomputed) = &self.recomputed {
            let segments = self.rows_by_id::<SegmentRow>(seg_ids).await?;
            return Ok(segments
                .into_iter()
                .filter(|(_, s)| in_cut(s.target_tokens, recomputed.segment_tokens))
                .map(|(id, s)| {
                    let vector = recomputed
                        .embedder
                        .stored_vector_of_terms(s.terms.split_whitespace());
                    (id, Arc::from(vector))
                })
                .collect());
        }
        let found = self.rows_by_id::<OwnerVector>(seg_ids).await?;
        Ok(found
            .into_iter()
            .map(|(id, v)| (id, Arc::from(v.vector.as_slice())))
            .collect())
    }

    /// The segments embedded from their own text nearest `probe` (cosine),
    /// at most `limit`, ties in id order.
    pub async fn nearest_segments(
        &self,
        probe: Probe<'_>,
        allowed: Allowed<'_>,
        limit: usize,
    ) -> Read<Vec<(Arc<SegmentRow>, f64)>> {
        let near = self.nearest_segment_ids(probe, allowed, limit).await?;
        if near.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<String> = near.iter().map(|(id, _)| id.clone()).collect();
        let rows = self.rows::<SegmentRow>(&ids).await?;
        Ok(in_order(near, rows))
    }

    /// The ids of the segments [`Snapshot::nearest_segments`] finds, with
    /// their similarity, without reading the segments.
    pub async fn nearest_segment_ids(
        &self,
        probe: Probe<'_>,
        allowed: Allowed<'_>,
        limit: usize,
    ) -> Read<Vec<(String, f64)>> {
        self.nearest_allowed::<SegmentRow>(Owner::Segment, probe, allowed, limit)
            .await
    }

    /// The ids of the tree nodes of the allowed documents nearest `probe`
    /// (cosine), at most `limit`, with their similarity, without reading the
    /// nodes ([`Snapshot::raptor_nodes`] reads them).
    pub async fn nearest_node_ids(
        &self,
        probe: Probe<'_>,
        allowed: Allowed<'_>,
        limit: usize,
    ) -> Read<Vec<(String, f64)>> {
        self.nearest_allowed::<TreeNodeRow>(Owner::Node, probe, allowed, limit)
            .await
    }

    /// [`Snapshot::nearest`] among the owners (rows of `R`) of the allowed
    /// documents, or [`Snapshot::nearest_recomputed`] where vectors are
    /// recomputed.
    async fn nearest_allowed<R: ById>(
        &self,
        owner: Owner,
        probe: Probe<'_>,
        allowed: Allowed<'_>,
        limit: usize,
    ) -> Read<Vec<(String, f64)>> {
        if let Some(recomputed) = &self.recomputed {
            return self
                .nearest_recomputed(recomputed, owner, probe, allowed, limit)
                .await;
        }
        let owners = match allowed.0 {
            None => None,
            Some(_) => Some(self.owners::<R>(allowed).await?),
        };
        self.nearest(owner, probe.vector, owners.as_deref(), limit)
            .await
    }

    /// The RAPTOR nodes among `ranked` (node id, score), in that order: a
    /// corpus tree's nodes have vectors of the same kind.
    pub async fn raptor_nodes(
        &self,
        ranked: &[(String, f64)],
    ) -> Read<Vec<(Arc<TreeNodeRow>, f64)>> {
        let ids: Vec<String> = ranked.iter().map(|(id, _)| id.clone()).collect();
        let mut rows = self.rows::<TreeNodeRow>(&ids).await?;
        rows.retain(|n| n.tree == TREE_RAPTOR);
        Ok(in_order(ranked.to_vec(), rows))
    }

    /// The entities nearest `probe` (cosine), at most `limit`, ties in id order.
    pub async fn nearest_entities(
        &self,
        probe: Probe<'_>,
        limit: usize,
    ) -> Read<Vec<(Arc<EntityRow>, f64)>> {
        let near = self
            .nearest_allowed::<EntityRow>(Owner::Entity, probe, Allowed(None), limit)
            .await?;
        if near.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<String> = near.iter().map(|(id, _)| id.clone()).collect();
        let rows = self.rows::<EntityRow>(&ids).await?;
        Ok(in_order(near, rows))
    }

    /// The owners whose stored vectors are nearest `vector`, at most `limit`,
    /// with their exact cosine, most similar first, ties in id order; only
    /// `owners` where given.
    async fn nearest(
        &self,
        owner: Owner,
        vector: &[f32],
        owners: Option<&[String]>,
        limit: usize,
    ) -> Read<Vec<(String, f64)>> {
        if limit == 0 || owners.is_some_and(<[String]>::is_empty) {
            return Ok(Vec::new());
        }
        let mut filter = format!("owner_kind = {}", sql_string(owner.kind()));
        if let Some(owners) = owners {
            filter.push_str(&format!(" AND owner_id IN ({})", sql_strings(owners)));
        }
        let candidates = (limit * VECTOR_CANDIDATES_PER_RESULT).max(VECTOR_CANDIDATES_AT_LEAST);
        let refine = (VECTOR_REFINE_ROWS / candidates).clamp(1, VECTOR_REFINE_AT_MOST) as u32;
        let query = Float32Array::from(vector.to_vec());
        let batches = self
            .scan(Table::Embeddings, OwnerVector::COLUMNS, &filter, |scan| {
                scan.nearest("vector", &query, candidates)?
                    .distance_metric(lance_linalg::distance::DistanceType::Cosine)
                    .nprobes(self.vector_probes.max(1))
                    .refine(refine)
                    .prefilter(true)
                    // Re-scored by exact cosine, not by Lance's `_distance`.
                    .disable_scoring_autoprojection();
                Ok(())
            })
            .await?;
        let mut scored = Vec::new();
        for batch in &batches {
            let found: Vec<OwnerVector> = batch_rows(Table::Embeddings, batch)?;
            scored.extend(
                found
                    .into_iter()
                    .map(|v| (v.owner_id, cosine(vector, &v.vector))),
            );
        }
        Ok(most_similar(scored, limit))
    }

    /// [`Snapshot::nearest`] where vectors are recomputed: the owners of the
    /// allowed documents the full-text index finds for `probe`'s terms, each
    /// scored by the exact cosine of the vector its row gives.
    async fn nearest_recomputed(
        &self,
        recomputed: &Recomputed,
        owner: Owner,
        probe: Probe<'_>,
        allowed: Allowed<'_>,
        limit: usize,
    ) -> Read<Vec<(String, f64)>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let candidates =
            (limit * RECOMPUTED_CANDIDATES_PER_RESULT).max(RECOMPUTED_CANDIDATES_AT_LEAST);
        let embedder = &recomputed.embedder;
        let scored = match owner {
            Owner::Segment => {
                let conditions = [
                    Some(cut_condition(recomputed.segment_tokens)),
                    allowed.condition("doc_id"),
                ];
                let found: Vec<(SegmentId, String)> = self
                    .text_candidates(
                        Table::Segments,
                        &["seg_id"],
                        probe.terms,
                        &conditions,
                        candidates,
                    )
                    .await?;
                (found.into_iter())
                    .map(|(s, terms)| {
                        let vector = embedder.stored_vector_of_terms(terms.split_whitespace());
                        (s.seg_id, cosine(probe.vector, &vector))
                    })
                    .collect()
            }
            Owner::Node => {
                self.nodes_recomputed(embedder, probe, allowed, candidates)
                    .await?
            }
            Owner::Entity => {
                let columns = ["entity_id", "name", "description"];
                let found: Vec<(EntityText, String)> = self
                    .text_candidates(Table::Entities, &columns, probe.terms, &[], candidates)
                    .await?;
                (found.into_iter())
                    .map(|(e, _)| {
                        let vector = embedder.stored_vector(&entity_text(&e.name, &e.description));
                        (e.entity_id, cosine(probe.vector, &vector))
                    })
                    .collect()
            }
        };
        Ok(most_similar(scored, limit))
    }

    /// The RAPTOR nodes of the allowed documents with the vector each one's
    /// row gives, scored against `probe`: a summary found by its own terms,
    /// a leaf, embedded from its chunk, found by its chunk's (a leaf's
    /// summary may be the model's, without the words its vector has).
    async fn nodes_recomputed(
        &self,
        embedder: &HashingEmbedder,
        probe: Probe<'_>,
        allowed: Allowed<'_>,
        candidates: usize,
    ) -> Read<Vec<(String, f64)>> {
        let trees = sql_strings(&[TREE_RAPTOR.to_string(), TREE_RAPTOR_CORPUS.to_string()]);
        let conditions = [
            Some(format!("tree IN ({trees})")),
            allowed.condition("doc_id"),
        ];
        let columns = ["node_id", "summary", "surprise", "seg_id"];
        let summaries: Vec<(NodeText, String)> = self
            .text_candidates(
                Table::TreeNodes,
                &columns,
                probe.terms,
                &conditions,
                candidates,
            )
            .await?;
        let chunks: Vec<(ChunkId, String)> = self
            .text_candidates(
                Table::Segments,
                &["seg_id", "doc_id"],
                probe.terms,
                &[allowed.condition("doc_id")],
                candidates,
            )
            .await?;
        // A chunk's leaf, and the corpus tree's leaf over it where that
        // document's root is the leaf, share its vector.
        let chunk_terms: HashMap<String, &str> = (chunks.iter())
            .map(|(c, terms)| (c.seg_id.clone(), terms.as_str()))
            .collect();
        let mut leaf_ids: Vec<String> = Vec::new();
        for (chunk, _) in &chunks {
            let leaf = leaf_id(&chunk.doc_id, &chunk.seg_id);
            leaf_ids.push(corpus_leaf_id(&leaf));
            leaf_ids.push(leaf);
        }
        let leaves = self.rows_by_id::<TreeNodeRow>(&leaf_ids).await?;
        // The chunks of the leaves found by their summaries.
        let unread: Vec<String> = (summaries.iter())
            .filter_map(|(n, _)| n.seg_id.clone())
            .filter(|s| !chunk_terms.contains_key(s))
            .collect();
        let more_chunks = self.rows_by_id::<SegmentRow>(&unread).await?;
        let terms_of = |seg_id: &str| {
            (chunk_terms.get(seg_id).copied())
                .or_else(|| more_chunks.get(seg_id).map(|s| s.terms.as_str()))
        };
        let mut scored: HashMap<String, f64> = HashMap::new();
        let found = (summaries.iter())
            .map(|(n, _)| (&n.node_id, &n.seg_id, &n.summary, &n.surprise))
            .chain((leaves.values()).map(|n| (&n.node_id, &n.seg_id, &n.summary, &n.surprise)));
        for (node_id, seg_id, summary, surprise) in found {
            if scored.contains_key(node_id) {
                continue;
            }
            let vector = match seg_id {
                Some(seg_id) => match terms_of(seg_id) {
                    Some(terms) => embedder.stored_vector_of_terms(terms.split_whitespace()),
                    None => continue,
                },
                None => {
                    let summary = summary.as_deref().unwrap_or_default();
                    embedder.stored_vector(&summary_text(summary, surprise.as_deref()))
                }
            };
            scored.insert(node_id.clone(), cosine(probe.vector, &vector));
        }
        Ok(scored.into_iter().collect())
    }

    /// The ids of the rows of `R` of the allowed documents.
    async fn owners<R: ById>(&self, allowed: Allowed<'_>) -> Read<Vec<String>> {
        let filter = allowed.condition("doc_id").unwrap_or_else(|| "true".into());
        let column = R::ID_COLUMN;
        let batches = self.scan(R::TABLE, &[column], &filter, |_| Ok(())).await?;
        Ok(batches
            .iter()
            .filter_map(|b| strings(b, column))
            .flat_map(|ids| ids.iter().flatten().map(str::to_string))
            .collect())
    }
}

/// `rows` in the order of `ranked` (id, score), each with its score.
fn in_order<R: ById>(ranked: Vec<(String, f64)>, rows: Vec<Arc<R>>) -> Vec<(Arc<R>, f64)> {
    let mut by_id: HashMap<String, Arc<R>> =
        rows.into_iter().map(|r| (r.id().clone(), r)).collect();
    ranked
        .into_iter()
        .filter_map(|(owner, score)| Some((by_id.remove(&owner)?, score)))
        .collect()
}

/// The `limit` most similar, ties in id order.
fn most_similar(mut scored: Vec<(String, f64)>, limit: usize) -> Vec<(String, f64)> {
    scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    scored.truncate(limit);
    scored
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Equal similarities are ordered by id whatever order the index
    /// returned them in, and a ranked id without a row is left out.
    #[test]
    fn ties_in_similarity_are_broken_by_id() {
        let found = |ids: &[(&str, f64)]| -> Vec<(String, f64)> {
            ids.iter().map(|(id, s)| (id.to_string(), *s)).collect()
        };
        let scored = found(&[("e3", 0.5), ("e1", 0.9), ("e2", 0.5), ("e0", 0.5)]);
        let mut reversed = scored.clone();
        reversed.reverse();
        let best = found(&[("e1", 0.9), ("e0", 0.5), ("e2", 0.5)]);
        assert_eq!(most_similar(scored, 3), best);
        assert_eq!(most_similar(reversed, 3), best);

        let row = |id: &str| {
            Arc::new(OwnerVector {
                owner_id: id.into(),
                vector: vec![1.0],
            })
        };
        let kept = in_order(best, vec![row("e2"), row("e1")]);
        let ids: Vec<&str> = kept.iter().map(|(r, _)| r.owner_id.as_str()).collect();
        assert_eq!(ids, ["e1", "e2"]);
    }
}
