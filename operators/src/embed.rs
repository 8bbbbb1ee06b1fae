//! Embedders: text to vectors, behind one trait, so the RAPTOR tree, dense
//! retrieval and entity search never know which model made them.

use std::fmt;

use async_trait::async_trait;

use memweave_schemas::stored_components;

use crate::lexical::{hashing_embedding, hashing_embedding_of_terms};
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
    /// Whether a text's vector is the same to the bit whatever texts are
    /// embedded beside it. A model run over padded batches need not be
    /// (its kernels tile by the batch's shape); where it is, work that
    /// compares vectors may embed only the texts it needs again.
    fn vectors_stand_alone(&self) -> bool {
        false
    }
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

/// Cosine similarity of two vectors (an embedder's vectors are unit length, but
/// a question's from another path, or a remote embedder's, may not be).
pub fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let (mut dot, mut aa, mut bb) = (0.0f64, 0.0f64, 0.0f64);
    for (x, y) in a.iter().zip(b) {
        let (x, y) = (f64::from(*x), f64::from(*y));
        dot += x * y;
        aa += x * x;
        bb += y * y;
    }
    if aa > 0.0 && bb > 0.0 {
        dot / (aa.sqrt() * bb.sqrt())
    } else {
        0.0
    }
}

/// The offline default: feature hashing of the text's stemmed terms, each
/// weighted by its rarity. Needs no model and is exactly reproducible; texts
/// that share rare words get close vectors, paraphrases do not.
#[derive(Debug, Clone)]
pub struct HashingEmbedder {
    dim: usize,
    name: String,
}

const HASHING_MODEL_PREFIX: &str = "hashing-weighted-";

impl HashingEmbedder {
    pub fn new(dim: usize) -> Self {
        HashingEmbedder {
            dim,
            name: format!("{HASHING_MODEL_PREFIX}{dim}"),
        }
    }

    /// The hashing embedder whose model name is `model`, if it is one: it has
    /// no weights, so its name is all it takes to embed as it did. A memory
    /// it embedded stores no vectors: they are recomputed from the rows' text
    /// where needed, in microseconds, instead of taking half its bytes.
    pub fn for_model(model: &str) -> Option<Self> {
        let dim = model.strip_prefix(HASHING_MODEL_PREFIX)?.parse().ok()?;
        (dim > 0).then(|| HashingEmbedder::new(dim))
    }

    /// The vector of `text` as a table would have held it.
    pub fn stored_vector(&self, text: &str) -> Vec<f32> {
        stored_components(hashing_embedding(text, self.dim))
    }

    /// The vector of a text whose terms are `terms`, as a table would have
    /// held it.
    pub fn stored_vector_of_terms<'a>(&self, terms: impl IntoIterator<Item = &'a str>) -> Vec<f32> {
        stored_components(hashing_embedding_of_terms(terms, self.dim))
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

    fn vectors_stand_alone(&self) -> bool {
        true
    }
}
