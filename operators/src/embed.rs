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
    cosine_of(a.iter().copied().zip(b.iter().copied()))
}

/// [`cosine`] of the component pairs `pairs`, summed in their order. A pair
/// of zeros adds nothing to any sum, so leaving such pairs out gives the
/// same result to the bit.
fn cosine_of(pairs: impl Iterator<Item = (f32, f32)>) -> f64 {
    let (mut dot, mut aa, mut bb) = (0.0f64, 0.0f64, 0.0f64);
    for (x, y) in pairs {
        let (x, y) = (f64::from(x), f64::from(y));
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

/// A vector as work that compares many of them holds it: its nonzero
/// components and their places where that is smaller, else every component.
/// A hashing embedder's vector of a passage has tens of nonzero components
/// among its 1,024, so the thousands of mentions of a common name are held
/// in a tenth of the bytes; a model's vector stays as it is.
#[derive(Debug, Clone, PartialEq)]
pub enum HeldVector {
    Sparse(Box<[(u32, f32)]>),
    Dense(Box<[f32]>),
}

impl HeldVector {
    pub fn new(vector: Vec<f32>) -> Self {
        let nonzero = vector.iter().filter(|v| **v != 0.0).count();
        // A sparse component takes twice a dense one's bytes.
        if nonzero * 2 < vector.len() && u32::try_from(vector.len()).is_ok() {
            HeldVector::Sparse((0u32..).zip(vector).filter(|(_, v)| *v != 0.0).collect())
        } else {
            HeldVector::Dense(vector.into_boxed_slice())
        }
    }

    /// [`cosine`] of the two vectors this and `other` hold, to the bit where
    /// they are of one length, as one embedder's are.
    pub fn cosine(&self, other: &HeldVector) -> f64 {
        if let (HeldVector::Dense(a), HeldVector::Dense(b)) = (self, other) {
            return cosine(a, b);
        }
        let (mut a, mut b) = (self.nonzero().peekable(), other.nonzero().peekable());
        // The places either vector has a component at, in order, so each
        // sum adds what the dense sum adds, in the same order.
        cosine_of(std::iter::from_fn(|| match (a.peek(), b.peek()) {
            (Some(&(i, _)), Some(&(j, _))) if i < j => a.next().map(|(_, x)| (x, 0.0)),
            (Some(&(i, _)), Some(&(j, _))) if i > j => b.next().map(|(_, y)| (0.0, y)),
            (Some(_), Some(_)) => Some((a.next()?.1, b.next()?.1)),
            (Some(_), None) => a.next().map(|(_, x)| (x, 0.0)),
            (None, _) => b.next().map(|(_, y)| (0.0, y)),
        }))
    }

    /// The nonzero components and their places, in order.
    fn nonzero(&self) -> Box<dyn Iterator<Item = (u32, f32)> + '_> {
        match self {
            HeldVector::Sparse(components) => Box::new(components.iter().copied()),
            HeldVector::Dense(components) => Box::new(
                (0u32..)
                    .zip(components.iter().copied())
                    .filter(|(_, v)| *v != 0.0),
            ),
        }
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

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// Components that are mostly zero, as a hashing embedder's are, or
    /// mostly not, as a model's are.
    fn components(dim: usize) -> impl Strategy<Value = Vec<f32>> {
        let component = prop_oneof![
            3 => Just(0.0f32),
            1 => Just(-0.0f32),
            2 => -1.0f32..1.0,
        ];
        prop::collection::vec(component, dim)
    }

    proptest! {
        /// Held sparse or dense, two vectors' cosine is their dense cosine
        /// to the bit: the entities a name resolves to must not move.
        #[test]
        fn a_held_vectors_cosine_is_the_dense_cosine(
            (a, b) in (1usize..64).prop_flat_map(|dim| (components(dim), components(dim)))
        ) {
            let (held_a, held_b) = (HeldVector::new(a.clone()), HeldVector::new(b.clone()));
            prop_assert_eq!(held_a.cosine(&held_b).to_bits(), cosine(&a, &b).to_bits());
            let dense_a = HeldVector::Dense(a.clone().into_boxed_slice());
            prop_assert_eq!(dense_a.cosine(&held_b).to_bits(), cosine(&a, &b).to_bits());
        }
    }

    /// A passage's hashing vector is held in its nonzero places, and
    /// compares as its dense vector does.
    #[test]
    fn a_passages_hashing_vector_is_held_sparse() {
        let embed = |text| hashing_embedding(text, 1024);
        let (a, b) = (
            embed("Paul Graham wrote about startups, painting and Lisp in Cambridge."),
            embed("Startups in Cambridge: Lisp hackers and painters, said Graham."),
        );
        let held_a = HeldVector::new(a.clone());
        let HeldVector::Sparse(nonzero) = &held_a else {
            panic!("a passage's vector held dense");
        };
        assert!(nonzero.len() < 20, "{} places", nonzero.len());
        let similarity = held_a.cosine(&HeldVector::new(b.clone()));
        assert!(similarity > 0.1, "{similarity}");
        assert_eq!(similarity.to_bits(), cosine(&a, &b).to_bits());
    }
}
