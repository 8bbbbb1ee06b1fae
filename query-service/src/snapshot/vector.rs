//! Vector search: candidates from Lance's IVF index over every partition,
//! re-scored by exact cosine, ties broken by id.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::Float32Array;
use memweave_operators::embed::cosine;
use memweave_schemas::store::{batch_rows, sql_string, sql_strings, strings};
use memweave_schemas::{EntityRow, SegmentRow, TREE_RAPTOR, Table, TreeNodeRow};
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

impl Snapshot {
    /// The vectors of those of `owner_ids` that have one: one read for them all.
    pub async fn vectors(&self, owner_ids: &[String]) -> Read<HashMap<String, Arc<[f32]>>> {
        let found = self.rows_by_id::<OwnerVector>(owner_ids).await?;
        Ok(found
            .into_iter()
            .map(|(id, v)| (id, Arc::from(v.vector.as_slice())))
            .collect())
    }

    /// The segments embedded from their own text nearest `vector` (cosine),
    /// at most `limit`, ties in id order.
    pub async fn nearest_segments(
        &self,
        vector: &[f32],
        allowed: Allowed<'_>,
        limit: usize,
    ) -> Read<Vec<(Arc<SegmentRow>, f64)>> {
        let near = self.nearest_segment_ids(vector, allowed, limit).await?;
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
        vector: &[f32],
        allowed: Allowed<'_>,
        limit: usize,
    ) -> Read<Vec<(String, f64)>> {
        self.nearest_allowed::<SegmentRow>("segment", vector, allowed, limit)
            .await
    }

    /// The ids of the tree nodes of the allowed documents nearest `vector`
    /// (cosine), at most `limit`, with their similarity, without reading the
    /// nodes ([`Snapshot::raptor_nodes`] reads them).
    pub async fn nearest_node_ids(
        &self,
        vector: &[f32],
        allowed: Allowed<'_>,
        limit: usize,
    ) -> Read<Vec<(String, f64)>> {
        self.nearest_allowed::<TreeNodeRow>("node", vector, allowed, limit)
            .await
    }

    /// [`Snapshot::nearest`] among the owners (rows of `R`) of the allowed
    /// documents.
    async fn nearest_allowed<R: ById>(
        &self,
        owner_kind: &str,
        vector: &[f32],
        allowed: Allowed<'_>,
        limit: usize,
    ) -> Read<Vec<(String, f64)>> {
        let owners = match allowed.0 {
            None => None,
            Some(_) => Some(self.owners::<R>(allowed).await?),
        };
        self.nearest(owner_kind, vector, owners.as_deref(), limit)
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

    /// The entities nearest `vector` (cosine), at most `limit`, ties in id order.
    pub async fn nearest_entities(
        &self,
        vector: &[f32],
        limit: usize,
    ) -> Read<Vec<(Arc<EntityRow>, f64)>> {
        let near = self.nearest("entity", vector, None, limit).await?;
        if near.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<String> = near.iter().map(|(id, _)| id.clone()).collect();
        let rows = self.rows::<EntityRow>(&ids).await?;
        Ok(in_order(near, rows))
    }

    /// The owners (of `owner_kind`) whose vectors are nearest `vector`, at
    /// most `limit`, with their exact cosine, most similar first, ties in id
    /// order; only `owners` where given.
    async fn nearest(
        &self,
        owner_kind: &str,
        vector: &[f32],
        owners: Option<&[String]>,
        limit: usize,
    ) -> Read<Vec<(String, f64)>> {
        if limit == 0 || owners.is_some_and(<[String]>::is_empty) {
            return Ok(Vec::new());
        }
        let mut filter = format!("owner_kind = {}", sql_string(owner_kind));
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
