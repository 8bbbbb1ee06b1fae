//! The archives the build benchmarks read: a generated one of any size (a
//! Markov chain over pg-essays, with names that recur across documents as in a
//! real archive) and a real one the project did not write (the Python 3.11
//! documentation's sources, from Debian), and the `memweave` binary they run.

// A benchmark helper: a failure to write an archive ends the bench.
#![allow(clippy::print_stdout, clippy::unwrap_used)]

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Where a real corpus the project did not write lives once installed.
pub const PYTHON_DOCS: &str = "/usr/share/doc/python3.11/html/_sources";
/// cl100k tokens per word of the generated English, measured on pg-essays.
pub const TOKENS_PER_WORD: f64 = 1.3;

/// The `memweave` binary: the one the environment variable `variable` names
/// (another commit's build, to compare), else the release build beside the
/// running bench.
pub fn memweave_binary(variable: &str) -> PathBuf {
    if let Some(path) = std::env::var_os(variable) {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().unwrap();
    let release = exe
        .parent()
        .and_then(Path::parent)
        .unwrap()
        .join("memweave");
    assert!(
        release.exists(),
        "{} is missing: run `cargo build --release -p memweave-cli` first, or set {variable}",
        release.display()
    );
    release
}

/// A size like 1M, 10M, 500k, in tokens.
pub fn parse_size(size: &str) -> u64 {
    let (number, unit) = size.split_at(size.len() - 1);
    let scale = match unit {
        "M" => 1_000_000,
        "k" => 1_000,
        _ => panic!("sizes are written like 1M, 10M, 100M, 500k; got {size}"),
    };
    number.parse::<u64>().unwrap() * scale
}

/// Whether the real corpus is there, installing it when missing (as root).
pub fn python_docs_installed() -> bool {
    if Path::new(PYTHON_DOCS).exists() {
        return true;
    }
    let installed = Command::new("apt-get")
        .args(["install", "-y", "-qq", "python3.11-doc"])
        .env("DEBIAN_FRONTEND", "noninteractive")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !installed {
        println!("python3.11-doc is not installed (apt-get install python3.11-doc); skipping it");
    }
    installed && Path::new(PYTHON_DOCS).exists()
}

/// Words a passage of [`write_passages`] reaches before it ends: about 100
/// tokens, the short end of a mail, a ticket or a forum post.
pub const PASSAGE_MIN_WORDS: usize = 75;

/// The Python documentation as an archive of short documents: each file's
/// paragraphs, consecutive ones joined until a passage has
/// [`PASSAGE_MIN_WORDS`] words (a file's last passage may have fewer), one
/// JSON Lines record each (`id`: the
/// file's path and the passage's number) in `out`. Returns the passages
/// and their bytes of text.
pub fn write_passages(source: &Path, out: &Path) -> (usize, u64) {
    let mut files = Vec::new();
    let mut pending = vec![source.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                pending.push(path);
            } else {
                files.push(path);
            }
        }
    }
    files.sort();
    let (mut lines, mut count, mut bytes) = (String::new(), 0, 0);
    for file in files {
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        let key = file.strip_prefix(source).unwrap().display().to_string();
        let mut passage = String::new();
        let paragraphs: Vec<&str> = (text.split("\n\n").map(str::trim))
            .filter(|p| !p.is_empty())
            .collect();
        for (i, paragraph) in paragraphs.iter().enumerate() {
            if !passage.is_empty() {
                passage.push_str("\n\n");
            }
            passage.push_str(paragraph);
            // A file's last passage is kept however short.
            let last = i + 1 == paragraphs.len();
            if passage.split_whitespace().count() >= PASSAGE_MIN_WORDS || last {
                let record = serde_json::json!({"id": format!("{key}#{i}"), "text": passage});
                writeln!(lines, "{record}").unwrap();
                (count, bytes) = (count + 1, bytes + passage.len() as u64);
                passage.clear();
            }
        }
    }
    std::fs::write(out, lines).unwrap();
    (count, bytes)
}

/// Bytes of the files under `dir`.
pub fn dir_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| {
            let meta = e.metadata().unwrap();
            if meta.is_dir() {
                dir_bytes(&e.path())
            } else {
                meta.len()
            }
        })
        .sum()
}

/// A word-level Markov chain of order two: enough to write prose whose
/// vocabulary, sentence lengths and paragraphing look like essays, never the
/// same twice.
#[derive(Debug)]
pub struct Markov {
    words: Vec<String>,
    /// (word, word) → the indices of the words that followed that pair.
    next: HashMap<(u32, u32), Vec<u32>>,
    starts: Vec<(u32, u32)>,
}

impl Markov {
    pub fn train(essays: &Path) -> Markov {
        let paths = crate::files_in(essays);
        let mut index: HashMap<String, u32> = HashMap::new();
        let mut words: Vec<String> = Vec::new();
        let mut next: HashMap<(u32, u32), Vec<u32>> = HashMap::new();
        let mut starts = Vec::new();
        for path in paths {
            let text = std::fs::read_to_string(path).unwrap();
            let ids: Vec<u32> = text
                .split_whitespace()
                .map(|w| {
                    *index.entry(w.to_string()).or_insert_with(|| {
                        words.push(w.to_string());
                        (words.len() - 1) as u32
                    })
                })
                .collect();
            for w in ids.windows(3) {
                next.entry((w[0], w[1])).or_default().push(w[2]);
                if words[w[0] as usize].ends_with('.') {
                    starts.push((w[1], w[2]));
                }
            }
        }
        Markov {
            words,
            next,
            starts,
        }
    }

    /// About `words` words of prose, with `names` mixed in as subjects.
    pub fn write(&self, rng: &mut fastrand::Rng, words: usize, names: &[String]) -> String {
        let mut out = String::new();
        let mut written = 0;
        let mut pair = self.starts[rng.usize(..self.starts.len())];
        let mut sentence_words = 0;
        let mut sentences_in_paragraph = 0;
        while written < words {
            let word = &self.words[pair.1 as usize];
            out.push_str(word);
            written += 1;
            sentence_words += 1;
            let followers = self.next.get(&pair);
            let ends_sentence = word.ends_with('.') || word.ends_with('?');
            match followers {
                Some(f) if !(ends_sentence && sentence_words > 8) || rng.u8(..4) == 0 => {
                    pair = (pair.1, f[rng.usize(..f.len())]);
                    out.push(' ');
                    if ends_sentence {
                        sentence_words = 0;
                    }
                }
                _ => {
                    if !ends_sentence {
                        out.push('.');
                    }
                    sentences_in_paragraph += 1;
                    sentence_words = 0;
                    if sentences_in_paragraph > 3 + rng.usize(..5) {
                        out.push_str("\n\n");
                        sentences_in_paragraph = 0;
                    } else {
                        out.push(' ');
                    }
                    // A new sentence, often about one of the document's names.
                    if !names.is_empty() && rng.u8(..3) == 0 {
                        let name = &names[rng.usize(..names.len())];
                        let verb = ["said", "wrote", "argued", "noticed", "found"][rng.usize(..5)];
                        let _ = write!(out, "{name} {verb} that ");
                        written += 3;
                    }
                    pair = self.starts[rng.usize(..self.starts.len())];
                }
            }
        }
        out
    }
}

/// The pool of people and places a generated archive of `documents` mentions:
/// it grows with the archive, so names recur across documents at every size.
pub fn name_pool(documents: usize) -> Vec<String> {
    const FIRST: &[&str] = &[
        "Ada", "Bram", "Cleo", "Dmitri", "Esme", "Farid", "Greta", "Hugo", "Ines", "Jonas", "Kiri",
        "Lars", "Mira", "Nils", "Oona", "Pavel", "Quinn", "Rosa", "Soren", "Tamsin",
    ];
    const SYLLABLES: &[&str] = &[
        "ber", "cal", "dor", "fen", "gar", "hol", "kes", "lin", "mor", "nav", "pel", "quon", "ras",
        "sel", "tav", "ul", "vor", "wen", "yar", "zel",
    ];
    let size = (documents * 4).max(40);
    (0..size)
        .map(|i| {
            let a = SYLLABLES[i % SYLLABLES.len()];
            let b = SYLLABLES[(i / SYLLABLES.len()) % SYLLABLES.len()];
            let c = SYLLABLES[(i / 400) % SYLLABLES.len()];
            let mut surname = format!("{a}{b}{c}");
            surname[..1].make_ascii_uppercase();
            if i % 3 == 0 {
                format!("{surname} Harbour")
            } else {
                format!("{} {surname}", FIRST[(i / 7) % FIRST.len()])
            }
        })
        .collect()
}

/// Document `n` of a generated archive: its words and names follow from `n`.
pub fn document(model: &Markov, pool: &[String], n: usize, edit: u32) -> String {
    let mut rng = fastrand::Rng::with_seed(n as u64 * 7919 + u64::from(edit));
    // Sizes log-uniform from 400 to 6,000 words.
    let words = (400.0 * 15f64.powf(rng.f64())) as usize;
    let names = 2 + rng.usize(..5);
    titled_text(model, &mut rng, pool, names, 6, words)
}

/// A title of `title_words` words over `words` words of prose naming
/// `names` people of `pool`, drawn skewed towards its front: a generated
/// document's text, drawn from `rng` in that order.
fn titled_text(
    model: &Markov,
    rng: &mut fastrand::Rng,
    pool: &[String],
    names: usize,
    title_words: usize,
    words: usize,
) -> String {
    let names: Vec<String> = (0..names)
        .map(|_| {
            let skew = rng.f64() * rng.f64();
            pool[(skew * pool.len() as f64) as usize].clone()
        })
        .collect();
    let title = model.write(rng, title_words, &[]);
    let body = model.write(rng, words, &names);
    format!("{}\n\n{body}\n", title.trim_end_matches('.'))
}

/// Average words of a generated document (log-uniform from 400 to 6,000).
pub fn mean_words() -> f64 {
    (6000.0 - 400.0) / 15f64.ln()
}

/// Writes the generated archive of about `tokens` tokens into `dir`, unless a
/// complete one is there.
pub fn generate(model: &Markov, dir: &Path, tokens: u64) {
    let documents = (tokens as f64 / TOKENS_PER_WORD / mean_words()).ceil() as usize;
    let done = dir.join(".complete");
    if done.exists() {
        return;
    }
    println!(
        "writing {documents} generated documents into {}",
        dir.display()
    );
    std::fs::create_dir_all(dir).unwrap();
    let pool = name_pool(documents);
    for n in 0..documents {
        // A hundred documents a folder, as archives are organised.
        let folder = dir.join(format!("{:05}", n / 100));
        if n % 100 == 0 {
            std::fs::create_dir_all(&folder).unwrap();
        }
        std::fs::write(
            folder.join(format!("doc{n:07}.txt")),
            document(model, &pool, n, 0),
        )
        .unwrap();
    }
    std::fs::write(&done, documents.to_string()).unwrap();
}

/// Short document `n` of a generated archive of short documents (a mail, a
/// ticket, a forum post): a subject line and 75 to 230 words (about 100 to
/// 300 tokens), log-uniform, naming one to three of the pool's people.
pub fn short_document(model: &Markov, pool: &[String], n: usize) -> String {
    let mut rng = fastrand::Rng::with_seed(n as u64 * 104_729 + 17);
    let words = (75.0 * (230.0f64 / 75.0).powf(rng.f64())) as usize;
    let names = 1 + rng.usize(..3);
    titled_text(model, &mut rng, pool, names, 5, words)
}

/// Records of one JSON Lines file of [`generate_short`]: files of a size a
/// mail export or a dataset's shards come in.
const SHORT_DOCUMENTS_A_FILE: usize = 100_000;

/// Writes a generated archive of `documents` short documents into `dir`, as
/// JSON Lines files of [`SHORT_DOCUMENTS_A_FILE`] records (`id`, `text`),
/// unless a complete one is there. Returns its bytes of text.
pub fn generate_short(model: &Markov, dir: &Path, documents: usize) -> u64 {
    let done = dir.join(".complete");
    if let Ok(bytes) = std::fs::read_to_string(&done) {
        return bytes.trim().parse().unwrap();
    }
    println!(
        "writing {documents} generated short documents into {}",
        dir.display()
    );
    std::fs::create_dir_all(dir).unwrap();
    // Names recur across documents as in a mail archive: a pool a tenth of
    // the documents' count, so each name is in tens of them.
    let pool = name_pool(documents / 40);
    let mut bytes = 0;
    for first in (0..documents).step_by(SHORT_DOCUMENTS_A_FILE) {
        let mut lines = String::new();
        for n in first..documents.min(first + SHORT_DOCUMENTS_A_FILE) {
            let text = short_document(model, &pool, n);
            bytes += text.len() as u64;
            let record = serde_json::json!({"id": format!("msg{n:08}"), "text": text});
            writeln!(lines, "{record}").unwrap();
        }
        let file = dir.join(format!(
            "messages-{:04}.jsonl",
            first / SHORT_DOCUMENTS_A_FILE
        ));
        std::fs::write(file, lines).unwrap();
    }
    std::fs::write(&done, bytes.to_string()).unwrap();
    bytes
}

/// Documents of a generated archive written by [`generate`].
pub fn documents_in(dir: &Path) -> usize {
    std::fs::read_to_string(dir.join(".complete"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// Rewrites one document in a thousand (at least one) with new text; returns
/// how many.
pub fn change_one_in_a_thousand(model: &Markov, dir: &Path) -> usize {
    let documents = documents_in(dir);
    let pool = name_pool(documents);
    let changed: Vec<usize> = (0..documents).step_by(1000).collect();
    for &n in &changed {
        let path = dir
            .join(format!("{:05}", n / 100))
            .join(format!("doc{n:07}.txt"));
        std::fs::write(path, document(model, &pool, n, 1)).unwrap();
    }
    changed.len()
}

/// Undoes [`change_one_in_a_thousand`].
pub fn generate_again(model: &Markov, dir: &Path) {
    let documents = documents_in(dir);
    let pool = name_pool(documents);
    for n in (0..documents).step_by(1000) {
        let path = dir
            .join(format!("{:05}", n / 100))
            .join(format!("doc{n:07}.txt"));
        std::fs::write(path, document(model, &pool, n, 0)).unwrap();
    }
}
