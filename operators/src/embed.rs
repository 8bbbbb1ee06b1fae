//! Embedders: text to vectors, behind one trait, so the RAPTOR tree, dense
//! retrieval and entity search never know which model made them.

use std::fmt;

use async_trait::async_trait;
use memweave_schemas::EmbeddingRow;
use serde::{Deserialize, Serialize};

use crate::lexical::hashing_embedding;
use crate::model::{CallContext, StepResult};

/// Texts sent to an embedder in one request: big enough to amortise a round
/// trip, small enough that one slow batch does not hold a document back.
pub const EMBED_BATCH: usize = 64;

#[async_trait]
pub trait Embedder: Send + Sync + fmt::Debug {
    /// The name recorded in `embeddings.model`: vectors of different models are
    /// never compared.
    fn model(&self) -> &str;
    /// Components of every vector.
    fn dim(&self) -> usize;
    /// One unit-length vector per text, in order.
    async fn embed(&self, cx: &CallContext, texts: &[&str]) -> StepResult<Vec<Vec<f32>>>;
}

/// Vectors of `texts`, asked for in batches of [`EMBED_BATCH`], all batches at once.
pub async fn embed_all(
    embedder: &dyn Embedder,
    cx: &CallContext,
    texts: &[&str],
) -> StepResult<Vec<Vec<f32>>> {
    let batches = crate::model::all_in_order(
        texts
            .chunks(EMBED_BATCH)
            .map(|batch| embedder.embed(cx, batch)),
    )
    .await?;
    Ok(batches.into_iter().flatten().collect())
}

/// The offline default: feature hashing of the text's stemmed terms. Needs no
/// weights and is exactly reproducible; texts that share words get close
/// vectors, paraphrases do not.
#[derive(Debug, Clone)]
pub struct HashingEmbedder {
    dim: usize,
    name: String,
}

impl HashingEmbedder {
    pub fn new(dim: usize) -> Self {
        HashingEmbedder {
            dim,
            name: format!("hashing-{dim}"),
        }
    }
}

#[async_trait]
impl Embedder for HashingEmbedder {
    fn model(&self) -> &str {
        &self.name
    }

    fn dim(&self) -> usize {
        self.dim
    }

    async fn embed(&self, _: &CallContext, texts: &[&str]) -> StepResult<Vec<Vec<f32>>> {
        Ok(texts
            .iter()
            .map(|t| hashing_embedding(t, self.dim))
            .collect())
    }
}

/// A vector as a dataflow record holds it: its bits, which order and hash (an
/// `f32` does neither).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct EmbeddingRecord {
    pub owner_id: String,
    /// "segment", "node" or "entity".
    pub owner_kind: String,
    bits: Vec<u32>,
}

impl EmbeddingRecord {
    pub fn new(owner_id: &str, owner_kind: &str, vector: &[f32]) -> Self {
        EmbeddingRecord {
            owner_id: owner_id.to_string(),
            owner_kind: owner_kind.to_string(),
            bits: vector.iter().map(|v| v.to_bits()).collect(),
        }
    }

    pub fn vector(&self) -> Vec<f32> {
        self.bits.iter().map(|&b| f32::from_bits(b)).collect()
    }

    /// The `embeddings` row, made by `model`.
    pub fn row(&self, model: &str) -> EmbeddingRow {
        EmbeddingRow {
            owner_id: self.owner_id.clone(),
            model: model.to_string(),
            owner_kind: self.owner_kind.clone(),
            vector: self.vector(),
        }
    }
}
