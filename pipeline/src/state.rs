//! What the cross-document stages hold, kept in the tables so that a new
//! process restores it instead of rebuilding every document.
//!
//! Every input of those stages (entity resolution, relation merging, the
//! corpus trees) is a per-document output of `build_document`: the document's
//! entity mentions and relations, and its trees' roots. Each document's are
//! written as its `doc_states` row, in the same commit as its other rows, so a
//! checkpoint names them, time travel reads them and a stopped run's are rolled
//! back with the rest. A new process feeds every row at its first round's
//! restore time (see [`crate::dataflow`]): the stages' groups become what
//! the last process held, and only what changed since is built.
//!
//! What the stages made of those inputs is in the tables already; where a
//! later stage needs it, the restore reads it back from them rather than
//! doing the work again: which entity each name became is read from the
//! checkpoint's entities ([`StoredEntity`]) instead of resolving every name,
//! and a changed name is resolved again from how it was resolved last (its
//! `name_states` row), comparing only what changed.

use std::collections::HashMap;
use std::sync::Arc;

use memweave_operators::build::{BuildConfig, BuiltRow};
use memweave_operators::embed::Embedder;
use memweave_operators::entity_graph::{DocEntity, DocRelation, StoredEntities};
use memweave_operators::extract::{CUT_MARK, collapse_whitespace};
use memweave_operators::model::MemoryModel;
use memweave_schemas::{DocStateRow, EmbeddingRow, NameStateRow, TreeNodeRow, content_id, hash128};
use serde::{Deserialize, Serialize};

/// One document's share of the cross-document stages' inputs.
#[derive(Debug, Default, PartialEq)]
pub struct DocState {
    pub entities: Vec<DocEntity>,
    pub relations: Vec<DocRelation>,
    /// The document's MemWalker root (the corpus MemWalker tree's input).
    pub memwalker_roots: Vec<TreeNodeRow>,
    /// The document's RAPTOR root and its vector (the corpus RAPTOR tree's).
    pub raptor_roots: Vec<(TreeNodeRow, EmbeddingRow)>,
}

/// A [`DocState`] as its row keeps it: every text of its entities and
/// relations once, in `texts`, each record holding numbers. A short
/// document's entities share their sentence, its relations their
/// description, all of them its segments' ids: repeated in every record,
/// they were most of a state's bytes. The document's id is its row's. A text
/// its document's own text holds (a sentence, a segment's head) is kept as
/// where it is in that text ([`KeptText::Span`]), and its key words as which
/// of its words they are ([`KeptText::KeyWords`]): the `documents` table keeps
/// the text already, and the restore reads it back from there.
#[derive(Debug, Default, Serialize, Deserialize)]
struct KeptState {
    texts: Vec<KeptText>,
    /// The length in bytes of the document's text with its whitespace
    /// collapsed, which the spans are offsets into; `None` when no text is
    /// a span.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    spanned: Option<u32>,
    entities: Vec<KeptEntity>,
    relations: Vec<KeptRelation>,
    memwalker_roots: Vec<TreeNodeRow>,
    /// Each vector a [`StateVector`].
    #[serde(with = "root_vectors")]
    raptor_roots: Vec<(TreeNodeRow, EmbeddingRow)>,
}

/// One of a kept state's texts: itself, or where its document's text
/// (whitespace collapsed, as [`collapse_whitespace`] and
/// [`memweave_operators::extract::head_words`] give it) holds it, in bytes,
/// end exclusive, and for a head cut short the [`CUT_MARK`] after it; or
/// words of the document joined by commas (its key words, as
/// [`memweave_operators::extract::key_words`] gives them), each the number
/// of its first place among the document's [`words`]. The key words were a
/// quarter of a short document's state on disk.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
enum KeptText {
    Own(String),
    Span(u32, u32),
    Cut(u32, u32, String),
    KeyWords { words: Vec<u32> },
}

/// What [`KeptText::KeyWords`] joins its words with.
const KEY_WORDS_JOIN: &str = ", ";

/// A text's words as its key words are cut from it: the runs of letters and
/// digits.
fn words(text: &str) -> impl Iterator<Item = &str> {
    (text.split(|c: char| !c.is_alphanumeric())).filter(|word| !word.is_empty())
}

/// Texts shorter than this stay a state's own: a span's two numbers would
/// save little, and names and ids are not looked for at all.
const SPAN_MIN_BYTES: usize = 32;

/// Where texts are in one document's text with its whitespace collapsed,
/// each looked for only in its segment's stretch of that text: the cost is a
/// segment's length a text, whatever the document's.
struct SpanFinder<'a> {
    collapsed: String,
    /// Each word's start, in characters of the document's text, and in
    /// bytes of `collapsed`.
    words: Vec<(u64, u32)>,
    /// Each segment's characters, by id.
    segments: HashMap<&'a str, (u64, u64)>,
}

impl<'a> SpanFinder<'a> {
    fn new(text: &str, rows: &'a [BuiltRow]) -> SpanFinder<'a> {
        let mut collapsed = String::with_capacity(text.len());
        let mut words = Vec::new();
        let mut in_word = false;
        for (at, c) in text.chars().enumerate() {
            if c.is_whitespace() {
                in_word = false;
                continue;
            }
            if !in_word {
                if !collapsed.is_empty() {
                    collapsed.push(' ');
                }
                words.push((at as u64, collapsed.len() as u32));
                in_word = true;
            }
            collapsed.push(c);
        }
        let segments = (rows.iter())
            .filter_map(|row| match row {
                BuiltRow::Segment(s) => Some((s.seg_id.as_str(), (s.start_char, s.end_char))),
                _ => None,
            })
            .collect();
        SpanFinder {
            collapsed,
            words,
            segments,
        }
    }

    /// The bytes of `collapsed` that segment `seg_id`'s text covers, with
    /// the words it cuts through whole.
    fn window(&self, seg_id: &str) -> Option<(usize, usize)> {
        let &(start, end) = self.segments.get(seg_id)?;
        let first = self.words.partition_point(|&(at, _)| at <= start);
        let after = self.words.partition_point(|&(at, _)| at < end);
        let from = first.checked_sub(1).map_or(0, |w| self.words[w].1 as usize);
        let to = (self.words.get(after)).map_or(self.collapsed.len(), |&(_, at)| at as usize);
        Some((from, to))
    }

    /// `text` as a span of segment `seg_id`'s stretch, if it is one there.
    fn span(&self, text: &str, seg_id: &str) -> Option<KeptText> {
        let (from, to) = self.window(seg_id)?;
        let stretch = &self.collapsed[from..to];
        let at = |found: &str| stretch.find(found).map(|i| (from + i) as u32);
        if let Some(start) = at(text) {
            return Some(KeptText::Span(start, start + text.len() as u32));
        }
        let head = text.strip_suffix(CUT_MARK)?;
        let start = at(head)?;
        Some(KeptText::Cut(
            start,
            start + head.len() as u32,
            CUT_MARK.into(),
        ))
    }
}

/// A [`DocEntity`], each text its number in [`KeptState::texts`]; its
/// document's id only where it is not its row's (a state of format 8 kept
/// it).
#[derive(Debug, Serialize, Deserialize)]
struct KeptEntity {
    key: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    doc_id: Option<u32>,
    names: Vec<u32>,
    context: u32,
    document: u32,
    seg_ids: Vec<u32>,
}

/// A [`DocRelation`], each text its number in [`KeptState::texts`]; its
/// document's id as a [`KeptEntity`]'s.
#[derive(Debug, Serialize, Deserialize)]
struct KeptRelation {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    doc_id: Option<u32>,
    source_key: u32,
    target_key: u32,
    description: u32,
    seg_ids: Vec<u32>,
    summary: u32,
    evidence: u32,
}

/// A root's vector as its state keeps it: the model, the width, and the
/// nonzero components, each its position and the bits of its half float
/// (the table's precision) in eight hex digits. As a JSON list of floats a
/// hashing vector (a few hundred nonzero of 1,024) was most of a short
/// document's state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct StateVector {
    model: String,
    width: u32,
    nonzero: String,
}

impl StateVector {
    fn of(vector: &EmbeddingRow) -> StateVector {
        let mut nonzero = String::new();
        for (position, value) in vector.vector.iter().enumerate() {
            let bits = half::f16::from_f32(*value).to_bits();
            if bits != 0 {
                nonzero.push_str(&format!("{position:04x}{bits:04x}"));
            }
        }
        StateVector {
            model: vector.model.clone(),
            width: vector.vector.len() as u32,
            nonzero,
        }
    }

    /// The vector of node `owner_id`, as its row held it.
    fn row(&self, owner_id: &str) -> Result<EmbeddingRow, String> {
        let bad = || format!("its vector of {owner_id} is not valid");
        let mut vector = vec![0f32; self.width as usize];
        let digits = self.nonzero.as_bytes();
        if !digits.len().is_multiple_of(8) {
            return Err(bad());
        }
        for entry in digits.chunks(8) {
            let entry = std::str::from_utf8(entry).map_err(|_| bad())?;
            let position = usize::from_str_radix(&entry[..4], 16).map_err(|_| bad())?;
            let bits = u16::from_str_radix(&entry[4..], 16).map_err(|_| bad())?;
            *vector.get_mut(position).ok_or_else(bad)? = half::f16::from_bits(bits).to_f32();
        }
        Ok(EmbeddingRow::new(owner_id, "node", &self.model, vector))
    }
}

/// [`KeptState::raptor_roots`] as a row keeps them: each vector a
/// [`StateVector`], decoded (and checked) once, as the state is read.
mod root_vectors {
    use memweave_schemas::{EmbeddingRow, Labelled, TreeNodeRow};
    use serde::de::Error as _;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use super::StateVector;

    pub fn serialize<S: Serializer>(
        roots: &[(TreeNodeRow, EmbeddingRow)],
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        let kept: Vec<(&TreeNodeRow, StateVector)> = (roots.iter())
            .map(|(root, vector)| (root, StateVector::of(vector)))
            .collect();
        kept.serialize(serializer)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Vec<(TreeNodeRow, EmbeddingRow)>, D::Error> {
        let kept: Vec<(TreeNodeRow, StateVector)> = Vec::deserialize(deserializer)?;
        (kept.into_iter())
            .map(|(root, vector)| {
                let row = vector.row(&root.node_id).map_err(D::Error::custom)?;
                // The vector's labels are its root's, as the build gave them.
                let row = row.labelled(&root.acl);
                Ok((root, row))
            })
            .collect()
    }
}

/// Where a state's text may be found again, given its document's text.
#[derive(Clone, Copy)]
enum Source<'a> {
    /// Nowhere: the state keeps it.
    Own,
    /// In this segment's stretch of the text.
    Segment(&'a str),
    /// It may be words of the text joined by commas: its key words.
    KeyWords,
}

/// Numbers texts in the order first seen, borrowing them from the rows the
/// state is made of (a state is made for every document built); with, for
/// a text that its document's text may give again, where.
#[derive(Default)]
struct Numbering<'a> {
    numbers: HashMap<&'a str, u32>,
    texts: Vec<(&'a str, Source<'a>)>,
}

impl<'a> Numbering<'a> {
    fn number(&mut self, text: &'a str) -> u32 {
        self.number_with(text, Source::Own)
    }

    /// `text`'s number; it came from segment `from` where one is given.
    fn number_from(&mut self, text: &'a str, from: Option<&'a String>) -> u32 {
        let source = from.map_or(Source::Own, |seg_id| Source::Segment(seg_id));
        self.number_with(text, source)
    }

    /// `text`'s number: the first source given for it that is not
    /// [`Source::Own`] stays.
    fn number_with(&mut self, text: &'a str, source: Source<'a>) -> u32 {
        let texts = &mut self.texts;
        let number = *self.numbers.entry(text).or_insert_with(|| {
            texts.push((text, Source::Own));
            (texts.len() - 1) as u32
        });
        let kept = &mut texts[number as usize].1;
        if matches!(kept, Source::Own) && text.len() >= SPAN_MIN_BYTES {
            *kept = source;
        }
        number
    }

    fn numbers(&mut self, texts: &'a [String]) -> Vec<u32> {
        texts.iter().map(|text| self.number(text)).collect()
    }

    /// The texts in number order, each a span where it is in its segment's
    /// stretch of `document` (whose segments `rows` give), or the numbers
    /// of its words where it is key words; and the length of the text spans
    /// are offsets into, if any is one.
    fn kept(self, document: &str, rows: &[BuiltRow]) -> (Vec<KeptText>, Option<u32>) {
        // A state with nothing to look for (no entity, no relation) makes no
        // collapsed copy of its document's text.
        let finder = (self.texts.iter())
            .any(|(_, source)| matches!(source, Source::Segment(_)))
            .then(|| SpanFinder::new(document, rows));
        let texts: Vec<KeptText> = (self.texts.into_iter())
            .map(|(text, source)| {
                let found = match source {
                    Source::Own => None,
                    Source::Segment(seg_id) => finder.as_ref().and_then(|f| f.span(text, seg_id)),
                    Source::KeyWords => key_words_numbers(text, document),
                };
                found.unwrap_or_else(|| KeptText::Own(text.to_string()))
            })
            .collect();
        let spanned = (texts.iter()).any(|t| matches!(t, KeptText::Span(..) | KeptText::Cut(..)));
        let length = finder.filter(|_| spanned).map(|f| f.collapsed.len() as u32);
        (texts, length)
    }
}

/// `key_words` as the numbers of its words among `document`'s, where it is
/// words of it joined by [`KEY_WORDS_JOIN`] and shorter kept so. Each number
/// is its word's first place, so [`key_words_of`] gives `key_words` back.
fn key_words_numbers(key_words: &str, document: &str) -> Option<KeptText> {
    let mut first: HashMap<&str, u32> = HashMap::new();
    for (number, word) in words(document).enumerate() {
        first.entry(word).or_insert(u32::try_from(number).ok()?);
    }
    let numbers = (key_words.split(KEY_WORDS_JOIN))
        .map(|word| first.get(word).copied())
        .collect::<Option<Vec<u32>>>()?;
    let kept = KeptText::KeyWords { words: numbers };
    let shorter = serde_json::to_string(&kept).ok()?.len() < key_words.len();
    shorter.then_some(kept)
}

/// The words of `document` a [`KeptText::KeyWords`] numbers, joined; `None`
/// where a number is past its words.
fn key_words_of(document: &str, kept: &KeptText) -> Option<String> {
    let KeptText::KeyWords { words: numbers } = kept else {
        return None;
    };
    let needed = numbers.iter().max().map_or(0, |&last| last as usize + 1);
    let read: Vec<&str> = words(document).take(needed).collect();
    let chosen = (numbers.iter())
        .map(|&n| read.get(n as usize).copied())
        .collect::<Option<Vec<&str>>>()?;
    Some(chosen.join(KEY_WORDS_JOIN))
}

/// A kept state's texts, read back by number.
struct Texts(Vec<Arc<str>>);

impl Texts {
    /// The texts of a state whose spans are filled in.
    fn of(kept: Vec<KeptText>) -> Result<Texts, String> {
        let texts = (kept.into_iter())
            .map(|text| match text {
                KeptText::Own(text) => Ok(Arc::from(text)),
                KeptText::Span(..) | KeptText::Cut(..) | KeptText::KeyWords { .. } => {
                    Err("its spans of its document's text are not filled in".to_string())
                }
            })
            .collect::<Result<_, String>>()?;
        Ok(Texts(texts))
    }

    fn shared(&self, number: u32) -> Result<Arc<str>, String> {
        (self.0.get(number as usize).cloned()).ok_or_else(|| format!("it has no text {number}"))
    }

    fn text(&self, number: u32) -> Result<String, String> {
        self.shared(number).map(|text| text.to_string())
    }

    fn texts(&self, numbers: &[u32]) -> Result<Vec<String>, String> {
        numbers.iter().map(|number| self.text(*number)).collect()
    }
}

impl DocState {
    /// The state `rows` (one document's memory, of `text`) give the
    /// cross-document stages, as that document's row; its roots only where
    /// the corpus trees are built (`corpus_tree`).
    pub fn row(
        doc_id: &str,
        build: &str,
        rows: &[BuiltRow],
        corpus_tree: bool,
        text: &str,
    ) -> DocStateRow {
        let mut numbering = Numbering::default();
        let mut kept = KeptState::default();
        for row in rows {
            match row {
                BuiltRow::Entity(e) => kept.entities.push(KeptEntity {
                    key: numbering.number(&e.key),
                    doc_id: (e.doc_id != doc_id).then(|| numbering.number(&e.doc_id)),
                    names: numbering.numbers(&e.names),
                    context: numbering.number_from(&e.context, e.seg_ids.first()),
                    document: numbering.number_with(&e.document, Source::KeyWords),
                    seg_ids: numbering.numbers(&e.seg_ids),
                }),
                BuiltRow::Relation(r) => {
                    let from = r.seg_ids.first();
                    kept.relations.push(KeptRelation {
                        doc_id: (r.doc_id != doc_id).then(|| numbering.number(&r.doc_id)),
                        source_key: numbering.number(&r.source_key),
                        target_key: numbering.number(&r.target_key),
                        description: numbering.number_from(&r.description, from),
                        seg_ids: numbering.numbers(&r.seg_ids),
                        summary: numbering.number_from(&r.summary, from),
                        evidence: numbering.number_from(&r.evidence, from),
                    })
                }
                BuiltRow::MemWalkerRoot(root) if corpus_tree => {
                    kept.memwalker_roots.push(root.clone());
                }
                BuiltRow::RaptorRoot(root, vector) if corpus_tree => {
                    kept.raptor_roots.push((root.clone(), vector.clone()));
                }
                _ => {}
            }
        }
        (kept.texts, kept.spanned) = numbering.kept(text, rows);
        DocStateRow {
            doc_id: doc_id.to_string(),
            build: build.to_string(),
            state: serde_json::to_string(&kept).expect("a document's state serialises"),
            // Its document's, given where the document is at hand.
            acl: Vec::new(),
        }
    }

    /// `row` with its spans and key words filled in from its document's
    /// `text` (as the `documents` table holds it): what [`DocState::of_row`]
    /// reads.
    pub fn with_document_text(row: &DocStateRow, text: &str) -> Result<DocStateRow, String> {
        let mut kept: KeptState = serde_json::from_str(&row.state).map_err(|e| e.to_string())?;
        if (kept.texts.iter()).all(|t| matches!(t, KeptText::Own(_))) {
            return Ok(row.clone());
        }
        let collapsed = match kept.spanned.take() {
            Some(spanned) => {
                let collapsed = collapse_whitespace(text);
                if collapsed.len() != spanned as usize {
                    return Err(format!(
                        "its spans are of a text of {spanned} bytes, its document's is of {}",
                        collapsed.len()
                    ));
                }
                collapsed
            }
            None => String::new(),
        };
        let stretch = |start: u32, end: u32| {
            (collapsed.get(start as usize..end as usize))
                .ok_or_else(|| format!("its span {start}..{end} is not of its document's text"))
        };
        for kept_text in &mut kept.texts {
            let filled = match kept_text {
                KeptText::Own(_) => continue,
                KeptText::Span(start, end) => stretch(*start, *end)?.to_string(),
                KeptText::Cut(start, end, mark) => format!("{}{mark}", stretch(*start, *end)?),
                KeptText::KeyWords { .. } => key_words_of(text, kept_text)
                    .ok_or_else(|| "its key words are not of its document's text".to_string())?,
            };
            *kept_text = KeptText::Own(filled);
        }
        Ok(DocStateRow {
            state: serde_json::to_string(&kept).expect("a document's state serialises"),
            ..row.clone()
        })
    }

    /// The state a row holds, its spans filled in
    /// ([`DocState::with_document_text`]).
    pub fn of_row(row: &DocStateRow) -> Result<DocState, serde_json::Error> {
        let kept: KeptState = serde_json::from_str(&row.state)?;
        DocState::of_kept(kept, &row.doc_id).map_err(serde::de::Error::custom)
    }

    fn of_kept(kept: KeptState, doc_id: &str) -> Result<DocState, String> {
        let texts = Texts::of(kept.texts)?;
        let doc_id_of =
            |number: Option<u32>| number.map_or(Ok(doc_id.to_string()), |n| texts.text(n));
        let entities = (kept.entities.iter())
            .map(|e| {
                Ok(DocEntity {
                    key: texts.text(e.key)?,
                    doc_id: doc_id_of(e.doc_id)?,
                    names: texts.texts(&e.names)?,
                    context: texts.text(e.context)?,
                    document: texts.shared(e.document)?,
                    seg_ids: texts.texts(&e.seg_ids)?,
                })
            })
            .collect::<Result<_, String>>()?;
        let relations = (kept.relations.iter())
            .map(|r| {
                Ok(DocRelation {
                    doc_id: doc_id_of(r.doc_id)?,
                    source_key: texts.text(r.source_key)?,
                    target_key: texts.text(r.target_key)?,
                    description: texts.text(r.description)?,
                    seg_ids: texts.texts(&r.seg_ids)?,
                    summary: texts.shared(r.summary)?,
                    evidence: texts.shared(r.evidence)?,
                })
            })
            .collect::<Result<_, String>>()?;
        Ok(DocState {
            entities,
            relations,
            memwalker_roots: kept.memwalker_roots,
            raptor_roots: kept.raptor_roots,
        })
    }

    /// The rows of the document's build that the state keeps.
    pub fn into_built_rows(self) -> Vec<BuiltRow> {
        let entities = self.entities.into_iter().map(BuiltRow::Entity);
        let relations = self.relations.into_iter().map(BuiltRow::Relation);
        let memwalker_roots = self
            .memwalker_roots
            .into_iter()
            .map(BuiltRow::MemWalkerRoot);
        let raptor_roots = (self.raptor_roots.into_iter())
            .map(|(root, vector)| BuiltRow::RaptorRoot(root, vector));
        entities
            .chain(relations)
            .chain(memwalker_roots)
            .chain(raptor_roots)
            .collect()
    }
}

/// What a state holds and how its row keeps it, and what else a restore
/// reads (3: `name_states`; 4: vectors rounded to half floats; 5: roots'
/// vectors as nonzero half floats, and the hashing embedder's vectors
/// recomputed, not stored, so an older memory's stored ones go with the
/// rebuild; 6: a document too short to cut keeps one segment for both its
/// cuts, under another id, so that an older memory's document retracted by
/// building it again would leave its two rows; 7: every text of a state's
/// records kept once, and a document that is its own gist keeps no gist
/// memory row; 8: texts its document's text holds kept as spans of it; 9:
/// the document's id left to its row, and its key words kept as the
/// numbers of its words): a memory of another format (older, or newer) that
/// [`STATE_FORMATS_READ`] does not name restores nothing and is rebuilt.
const STATE_FORMAT: u32 = 9;

/// The older formats whose states this build reads as they are: a state of
/// format 8 keeps what 9 leaves out, and reads the same.
const STATE_FORMATS_READ: [u32; 1] = [8];

/// What makes a document's state: its format, the build's sizes and
/// memories, the kind of model and the embedder. A memory continued with
/// another restores nothing and is rebuilt, as a from-scratch build would be.
pub fn fingerprint(
    config: &BuildConfig,
    model: &dyn MemoryModel,
    embedder: &dyn Embedder,
) -> String {
    fingerprint_of(STATE_FORMAT, config, model, embedder)
}

/// The fingerprints of the states a build restores: its own
/// ([`fingerprint`]), and those the same build made in the older formats it
/// reads.
pub fn fingerprints_read(
    config: &BuildConfig,
    model: &dyn MemoryModel,
    embedder: &dyn Embedder,
) -> Vec<String> {
    (std::iter::once(STATE_FORMAT).chain(STATE_FORMATS_READ))
        .map(|format| fingerprint_of(format, config, model, embedder))
        .collect()
}

fn fingerprint_of(
    format: u32,
    config: &BuildConfig,
    model: &dyn MemoryModel,
    embedder: &dyn Embedder,
) -> String {
    let made_by = serde_json::json!({
        "state_format": format,
        "build": config,
        "backend": model.backend(),
        "embedder": embedder.model(),
        "width": embedder.dim(),
    });
    format!("{:032x}", hash128(made_by.to_string().as_bytes()))
}

/// An entity of the checkpoint a new process restores from, as much of it as
/// tells which entity each of a name's mentions became (see
/// [`memweave_operators::entity_graph::assignments_from_entities`]): its id, and the
/// segments it was found in, both as hashes; and, for a name's first entity,
/// the name's `name_states` counts, if it has them.
#[derive(
    Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct StoredEntity {
    entity: u128,
    /// Sorted.
    segments: Vec<u64>,
    asked: Option<Vec<u32>>,
}

impl StoredEntity {
    /// The stored entity of a row's `entity_id` and `seg_ids`, given the
    /// checkpoint's name states.
    pub fn new(entity_id: &str, seg_ids: &[String], names: &NameStates) -> StoredEntity {
        let mut segments: Vec<u64> = seg_ids.iter().map(|s| segment_hash(s)).collect();
        segments.sort_unstable();
        let entity = entity_hash(entity_id);
        StoredEntity {
            entity,
            segments,
            asked: names.0.get(&entity).cloned(),
        }
    }
}

/// The checkpoint's `name_states`, by the hash of each name's first entity's
/// id (the id a name's entities start from is its own). A name without one
/// met an error when it was resolved.
#[derive(Debug, Default)]
pub struct NameStates(HashMap<u128, Vec<u32>>);

impl NameStates {
    pub fn insert(&mut self, row: NameStateRow) {
        let first_entity = content_id("entity", &[row.name.as_bytes()]);
        self.0.insert(entity_hash(&first_entity), row.asked);
    }
}

/// The checkpoint's entities, by id: what the restore reads each name's
/// resolution back from.
#[derive(Debug, Default)]
pub struct EntitiesByHash {
    segments: HashMap<u128, Vec<u64>>,
    asked: HashMap<u128, Vec<u32>>,
}

impl EntitiesByHash {
    pub fn insert(&mut self, entity: StoredEntity) {
        if let Some(asked) = entity.asked {
            self.asked.insert(entity.entity, asked);
        }
        self.segments.insert(entity.entity, entity.segments);
    }

    /// Whether it holds the entity whose id hashes to `entity` (see
    /// [`entity_hash`]).
    pub fn holds_hashed(&self, entity: u128) -> bool {
        self.segments.contains_key(&entity)
    }

    /// Whether the entity whose id hashes to `entity` was found in the
    /// segment whose id hashes to `segment` (see [`segment_hash`]).
    pub fn found_in_hashed(&self, entity: u128, segment: u64) -> bool {
        (self.segments.get(&entity))
            .is_some_and(|segments| segments.binary_search(&segment).is_ok())
    }
}

impl StoredEntities for EntitiesByHash {
    fn holds(&self, entity_id: &str) -> bool {
        self.holds_hashed(entity_hash(entity_id))
    }

    fn found_in(&self, entity_id: &str, seg_id: &str) -> bool {
        self.found_in_hashed(entity_hash(entity_id), segment_hash(seg_id))
    }

    fn asked(&self, entity_id: &str) -> Option<Vec<u32>> {
        self.asked.get(&entity_hash(entity_id)).cloned()
    }
}

pub fn entity_hash(entity_id: &str) -> u128 {
    hash128(entity_id.as_bytes())
}

pub fn segment_hash(seg_id: &str) -> u64 {
    hash128(seg_id.as_bytes()) as u64
}

#[cfg(test)]
mod tests {
    use memweave_operators::extract::head_words;

    use super::*;

    /// A document's entities share its key words and their sentences, its
    /// relations its summary's head and their segments' heads, all of them
    /// its segments' ids: its row keeps each text once, and its id not at
    /// all (the row's), and reads back the records whole.
    #[test]
    fn a_state_keeps_each_shared_text_once_and_reads_back_whole() {
        let about: Arc<str> = Arc::from("harbour press printing boston");
        let summary: Arc<str> = Arc::from("Ada founded a press and sold it.");
        let head: Arc<str> = Arc::from("In 1890 Ada founded the Harbour press");
        let sentence = "Ada founded the Harbour Press in Boston.";
        let segment = "4be28268c1d59ecb00167461650ffb64";
        let entity = |key: &str, name: &str| {
            BuiltRow::Entity(DocEntity {
                key: key.into(),
                doc_id: "a.txt".into(),
                names: vec![name.into()],
                context: sentence.into(),
                document: Arc::clone(&about),
                seg_ids: vec![segment.into()],
            })
        };
        let relation = |source: &str, target: &str| {
            BuiltRow::Relation(DocRelation {
                doc_id: "a.txt".into(),
                source_key: source.into(),
                target_key: target.into(),
                description: format!("{source} and {target}"),
                seg_ids: vec![segment.into()],
                summary: Arc::clone(&summary),
                evidence: Arc::clone(&head),
            })
        };
        let rows = vec![
            entity("ada", "Ada"),
            entity("harbour press", "Harbour Press"),
            entity("boston", "Boston"),
            relation("ada", "harbour press"),
            relation("ada", "boston"),
        ];
        let row = DocState::row("a.txt", "build", &rows, false, sentence);
        for text in [&*about, &*summary, &*head, sentence, segment] {
            assert_eq!(row.state.matches(text).count(), 1, "{}", row.state);
        }
        assert!(!row.state.contains("a.txt"), "{}", row.state);
        let state = DocState::of_row(&row).expect("the row reads");
        assert_eq!(state.into_built_rows(), rows);
        // A record of another document's keeps its id.
        let mut other = rows;
        if let BuiltRow::Relation(r) = &mut other[4] {
            r.doc_id = "b.txt".into();
        }
        let row_b = DocState::row("a.txt", "build", &other, false, sentence);
        assert_eq!(row_b.state.matches("b.txt").count(), 1, "{}", row_b.state);
        let state = DocState::of_row(&row_b).expect("the row reads");
        assert_eq!(state.into_built_rows(), other);
        // A number with no text is refused, not read as another text.
        let broken = DocStateRow {
            state: row.state.replacen("\"context\":", "\"context\":99", 1),
            ..row
        };
        let error = DocState::of_row(&broken).expect_err("a number past the texts");
        assert!(error.to_string().contains("no text"), "{error}");
    }

    fn segment(seg_id: &str, start_char: u64, end_char: u64) -> BuiltRow {
        BuiltRow::Segment(memweave_schemas::SegmentRow {
            seg_id: seg_id.into(),
            doc_id: "a.txt".into(),
            ordinal: 0,
            start_char,
            end_char,
            n_tokens: 0,
            target_tokens: 0,
            terms: String::new(),
            acl: Vec::new(),
        })
    }

    /// The sentences and segment heads a document's text holds are kept as
    /// spans of it, whatever its whitespace and a head cut short; filled in
    /// from the text they read back whole, and not without it or from
    /// another text.
    #[test]
    fn a_state_keeps_what_its_document_says_as_spans_of_it() {
        let text = "Ada  founded the\nHarbour Press in Boston.\n\n  Later she \
                    sold the Harbour Press to a printer from Salem in 1901.";
        let sentence = "Ada founded the Harbour Press in Boston.";
        let sold = "Later she sold the Harbour Press to a printer from Salem in 1901.";
        let own = "A summary the model wrote, which the text does not hold.";
        let first = text.find("Later").unwrap() as u64;
        // Segment 1 ends inside "Later"; segment 2 is the second sentence.
        let head = head_words(&text[..first as usize + 2], 6);
        assert!(head.ends_with(CUT_MARK), "{head}");
        let seg = |n: u64| format!("{n:032x}");
        let entity = BuiltRow::Entity(DocEntity {
            key: "ada".into(),
            doc_id: "a.txt".into(),
            names: vec!["Ada".into()],
            context: sentence.into(),
            document: Arc::from("harbour press boston"),
            seg_ids: vec![seg(1)],
        });
        let relation = BuiltRow::Relation(DocRelation {
            doc_id: "a.txt".into(),
            source_key: "ada".into(),
            target_key: "harbour press".into(),
            description: sold.into(),
            seg_ids: vec![seg(2), seg(1)],
            summary: Arc::from(own),
            evidence: Arc::from(head.as_str()),
        });
        let text_chars = text.chars().count() as u64;
        let rows = vec![
            segment(&seg(1), 0, first + 2),
            segment(&seg(2), first, text_chars),
            entity.clone(),
            relation.clone(),
        ];
        let row = DocState::row("a.txt", "build", &rows, false, text);
        assert!(!row.state.contains("Boston."), "{}", row.state);
        assert!(!row.state.contains("Salem"), "{}", row.state);
        assert!(row.state.contains(own), "{}", row.state);
        // The evidence was looked for in segment 2 (the relation's first),
        // which does not hold the text's head: it stays the state's own.
        assert!(row.state.contains(&head), "{}", row.state);

        let error = DocState::of_row(&row).expect_err("spans not filled in");
        assert!(error.to_string().contains("not filled in"), "{error}");
        let filled = DocState::with_document_text(&row, text).expect("the spans fill in");
        let state = DocState::of_row(&filled).expect("the row reads");
        assert_eq!(state.into_built_rows(), vec![entity, relation.clone()]);
        let other = DocState::with_document_text(&row, "Ada sold it.");
        assert!(other.expect_err("another text").contains("bytes"));

        // From its own segment, a head cut short is a span and its mark.
        let BuiltRow::Relation(mut from_first) = relation else {
            unreachable!()
        };
        from_first.seg_ids = vec![seg(1)];
        let rows = vec![
            segment(&seg(1), 0, first + 2),
            BuiltRow::Relation(from_first.clone()),
        ];
        let row = DocState::row("a.txt", "build", &rows, false, text);
        assert!(!row.state.contains("founded"), "{}", row.state);
        assert!(
            row.state.contains(&format!("\"{CUT_MARK}\"")),
            "{}",
            row.state
        );
        let filled = DocState::with_document_text(&row, text).expect("the spans fill in");
        let read = DocState::of_row(&filled).expect("the row reads");
        assert_eq!(read.relations, vec![from_first]);
    }

    /// A document's key words are kept as the numbers of their first
    /// places among its words, and read back from its text; words it does
    /// not hold stay the state's own, and numbers past its words are
    /// refused, not read.
    #[test]
    fn a_state_keeps_its_documents_key_words_as_numbers_of_its_words() {
        let text = "Übersetzung: Ada Lovelace wrote the notes on the Analytical Engine. \
                    Babbage designed the engine; Menabrea described it in Turin. \
                    The notes hold the first published program (Bernoulli numbers).";
        let key_words = "Bernoulli, Lovelace, Übersetzung, Menabrea, notes, Turin";
        let entity = |document: &str| {
            BuiltRow::Entity(DocEntity {
                key: "ada lovelace".into(),
                doc_id: "a.txt".into(),
                names: vec!["Ada Lovelace".into()],
                context: "Ada".into(),
                document: Arc::from(document),
                seg_ids: vec!["s1".into()],
            })
        };
        let row = DocState::row("a.txt", "build", &[entity(key_words)], false, text);
        assert!(
            row.state.contains(r#"{"words":[26,2,0,14,5,18]}"#),
            "{}",
            row.state
        );
        let error = DocState::of_row(&row).expect_err("key words not filled in");
        assert!(error.to_string().contains("not filled in"), "{error}");
        let filled = DocState::with_document_text(&row, text).expect("the key words fill in");
        let state = DocState::of_row(&filled).expect("the row reads");
        assert_eq!(state.into_built_rows(), vec![entity(key_words)]);

        // Words the text does not hold, or not so joined, stay the state's own.
        for own in [format!("{key_words}, Paris"), key_words.replace(", ", " ")] {
            let row = DocState::row("a.txt", "build", &[entity(&own)], false, text);
            assert!(row.state.contains(&own), "{}", row.state);
        }

        // A number past the text's words is refused.
        let broken = DocStateRow {
            state: row.state.replace("[26,", "[28,"),
            ..row
        };
        let error = DocState::with_document_text(&broken, text).expect_err("past the words");
        assert!(error.contains("not of its document's text"), "{error}");
    }

    /// A state of format 8 (each record naming its document by number, the
    /// key words kept whole) reads as it did.
    #[test]
    fn a_state_of_format_8_reads_as_it_did() {
        let state = r#"{"texts":["ada","a.txt","Ada","Ada wrote the notes.","engine, notes","s1"],
            "entities":[{"key":0,"doc_id":1,"names":[2],"context":3,"document":4,"seg_ids":[5]}],
            "relations":[],"memwalker_roots":[],"raptor_roots":[]}"#;
        let row = DocStateRow {
            doc_id: "a.txt".into(),
            build: "build".into(),
            state: state.into(),
            acl: Vec::new(),
        };
        let filled = DocState::with_document_text(&row, "any text").expect("nothing to fill in");
        let read = DocState::of_row(&filled).expect("the row reads");
        let expected = DocEntity {
            key: "ada".into(),
            doc_id: "a.txt".into(),
            names: vec!["Ada".into()],
            context: "Ada wrote the notes.".into(),
            document: Arc::from("engine, notes"),
            seg_ids: vec!["s1".into()],
        };
        assert_eq!(read.entities, vec![expected]);
    }

    proptest::proptest! {
        /// Any run of words of a segment, its whitespace collapsed, is found
        /// in that segment's stretch of the collapsed text, wherever the
        /// segment starts and ends (mid-word, in a run of spaces).
        #[test]
        fn every_run_of_a_segments_words_is_found_in_its_stretch(
            words in proptest::collection::vec(("[a-zé]{1,6}", "[ \n\t]{1,3}"), 1..40),
            cut in (0usize..200, 0usize..200),
            run in (0usize..100, 0usize..100),
        ) {
            let text: String = words.iter().map(|(w, s)| format!("{w}{s}")).collect();
            let chars: Vec<char> = text.chars().collect();
            let (a, b) = (cut.0 % chars.len(), cut.1 % chars.len());
            let (start, end) = (a.min(b), a.max(b) + 1);
            let segment_text: String = chars[start..end].iter().collect();
            let segment_words: Vec<&str> = segment_text.split_whitespace().collect();
            proptest::prop_assume!(!segment_words.is_empty());
            let (i, j) = (run.0 % segment_words.len(), run.1 % segment_words.len());
            let wanted = segment_words[i.min(j)..=i.max(j)].join(" ");
            let rows = vec![segment("s", start as u64, end as u64)];
            let finder = SpanFinder::new(&text, &rows);
            proptest::prop_assert_eq!(&finder.collapsed, &collapse_whitespace(&text));
            let Some(KeptText::Span(from, to)) = finder.span(&wanted, "s") else {
                panic!("{wanted:?} not found in {segment_text:?}");
            };
            proptest::prop_assert_eq!(&finder.collapsed[from as usize..to as usize], wanted.as_str());
        }
    }

    /// A RAPTOR root's vector is kept as its nonzero half floats and reads
    /// back to the bit (a restore re-clusters the corpus tree from it); a
    /// state whose vector is not one is refused whole.
    #[test]
    fn a_root_vector_reads_back_to_the_bit_from_its_nonzero_components() {
        let root = TreeNodeRow {
            node_id: "n1".into(),
            tree: memweave_schemas::TREE_RAPTOR.into(),
            doc_id: Some("a.txt".into()),
            level: 1,
            ordinal: 0,
            parent_id: None,
            child_ids: vec!["n0".into()],
            seg_id: None,
            summary: Some("Ada founded a press.".into()),
            surprise: None,
            n_tokens: 5,
            terms: String::new(),
            acl: Vec::new(),
        };
        let mut components = vec![0.0f32; 1024];
        components[3] = 0.25;
        components[700] = -0.5;
        components[1023] = -0.0;
        components[12] = 1e-3;
        let vector = EmbeddingRow::new("n1", "node", "hashing-weighted-1024", components);
        let rows = vec![BuiltRow::RaptorRoot(root.clone(), vector.clone())];
        let row = DocState::row("a.txt", "build", &rows, true, "");
        let back = DocState::of_row(&row)
            .expect("the row reads")
            .into_built_rows();
        // Equal to the root as built: a restored root and the same root
        // built again cancel in the corpus trees.
        let BuiltRow::RaptorRoot(read_root, read) = &back[0] else {
            panic!("a root reads back as a root: {back:?}");
        };
        let bits = |v: &EmbeddingRow| v.vector.iter().map(|c| c.to_bits()).collect::<Vec<_>>();
        assert_eq!(
            (read.model.as_str(), bits(read)),
            (vector.model.as_str(), bits(&vector))
        );
        assert_eq!(read_root, &root);
        assert!(
            row.state.len() < 420,
            "{} bytes: {}",
            row.state.len(),
            row.state
        );
        let broken = DocStateRow {
            state: row.state.replace("\"nonzero\":\"", "\"nonzero\":\"zz"),
            ..row
        };
        assert!(DocState::of_row(&broken).is_err());
    }
}
