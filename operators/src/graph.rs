//! QRMeM's graph memory: entities and open relations over the original segments.
//!
//! Per document ([`document_graph`]): entities of each segment (the
//! document's key words as background, where the paper's prompt has its
//! summary), relations between
//! them, names normalised and short aliases folded into the one longer name they
//! abbreviate, and a pair's relations from several segments kept together.
//! Across documents ([`resolve_entities`], [`merge_relations_across`]):
//! entities of the same normalised name are one entity where their passages'
//! vectors are near, or the model says so when the vectors cannot tell, and a
//! pair's relations from several documents are kept together again.
//!
//! What bounds the model's work ([`GraphConfig`]): a pair's descriptions are
//! concatenated (duplicates dropped) while they fit a token budget, and the
//! paper's merge prompt is asked at most once per pair, to fold the next
//! budget's worth into them, with every text it is shown capped; so a pair's
//! merges do not grow with how often its names recur.

use crate::config::BuildConfigError;
use std::cell::OnceCell;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use memweave_schemas::{EntityRow, RelationRow, Segment, content_id};
use serde::{Deserialize, Serialize};

use crate::embed::{Embedder, cosine, embed_all};
use crate::extract::{collapse_whitespace, head_words, key_words, sentence_list};
use crate::model::{
    CallContext, MemoryModel, Relation, RelationEvidence, StepResult, all_in_order,
};
use crate::tokens::count_tokens;

/// Stage name of graph calls in `llm_calls.stage`.
pub const STAGE: &str = "qrmem";
/// Words of a segment shown as a relation's evidence, and of a document's
/// summary shown as a merge's background: a merge reads what it needs to word
/// the relation, not whole segments.
const EVIDENCE_WORDS: usize = 150;
/// Between two descriptions kept side by side.
const DESCRIPTION_SEPARATOR: &str = "\n";

/// When the graph asks the model: the budget past which descriptions are
/// merged, and the band of vector similarity in which two mentions of one name
/// are an open question. The band's defaults suit the default hashing
/// embedder, whose passages that share only the name come out near 0 and
/// passages that share a few words past the name above 0.1 (measured on
/// pg-essays and the scale archive); a neural embedder's cosines run higher.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct GraphConfig {
    /// Longest relation description kept by concatenating what was found, in
    /// tokens; one that would be longer is merged by the model.
    pub description_budget: usize,
    /// Cosine of two mentions' passages at or above which they are one entity
    /// without asking.
    pub same_above: f32,
    /// Cosine below which they are different entities without asking.
    pub apart_below: f32,
}

impl GraphConfig {
    pub const DEFAULT: GraphConfig = GraphConfig {
        description_budget: 300,
        same_above: 0.1,
        apart_below: 0.0,
    };

    pub fn validate(&self) -> Result<(), BuildConfigError> {
        if self.description_budget == 0 {
            return Err(BuildConfigError::NoDescriptionBudget);
        }
        if !(-1.0..=1.0).contains(&self.apart_below)
            || !(-1.0..=1.0).contains(&self.same_above)
            || self.apart_below > self.same_above
        {
            return Err(BuildConfigError::SameEntityBand {
                apart_below: self.apart_below,
                same_above: self.same_above,
            });
        }
        Ok(())
    }
}

impl Default for GraphConfig {
    fn default() -> Self {
        Self::DEFAULT
    }
}
/// Passages compared with an entity's first mention in one disambiguation call.
const SAME_ENTITY_BATCH: usize = 16;
/// Key words of the document shown as the background of entity extraction
/// (what the document is about) and with an entity when its name collides.
/// The paper shows the document's summary; but the background is part of
/// every segment's extraction prompt, and a summary changes with most edits,
/// which would re-extract the whole document. The document's heaviest terms
/// (rare and repeated) stay the same under an edit that is not about them.
const ABOUT_WORDS: usize = 16;

/// An entity as one document knows it, before disambiguation across documents.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct DocEntity {
    /// The normalised name: the key entities are matched by.
    pub key: String,
    pub doc_id: String,
    /// The names the document calls it, most used first.
    pub names: Vec<String>,
    /// The first sentence that mentions it: its description, and the passage the
    /// model compares when another document has an entity of the same name.
    pub context: String,
    /// The document's key words: what it is about, for the same comparison.
    #[serde(with = "shared_text")]
    pub document: Arc<str>,
    /// The segments it was found in, in document order.
    pub seg_ids: Vec<String>,
}

impl DocEntity {
    /// The passage the model is shown when this entity's name collides with
    /// another document's.
    fn passage(&self) -> String {
        if self.document.is_empty() {
            self.context.clone()
        } else {
            format!(
                "{}\n\nFrom a document about: {}",
                self.context, self.document
            )
        }
    }

    /// What its vector is made of when its name collides: the passage the
    /// model would be shown, without the words every passage has.
    fn compared_text(&self) -> String {
        format!("{}\n{}", self.context, self.document)
    }
}

/// A relation as one document knows it, merged across that document's segments.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct DocRelation {
    pub doc_id: String,
    pub source_key: String,
    pub target_key: String,
    pub description: String,
    pub seg_ids: Vec<String>,
    /// The head of the document's summary: the merge prompt's background.
    /// Shared by the document's relations while they are built and sent to
    /// the worker that spills them (the cross-document stages keep no texts
    /// in memory).
    #[serde(with = "shared_text")]
    pub summary: Arc<str>,
    /// The head of the first segment it came from: its evidence in a merge.
    #[serde(with = "shared_text")]
    pub evidence: Arc<str>,
}

/// Serde for a text shared by several records (`Arc<str>`), as a plain string.
mod shared_text {
    use std::sync::Arc;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(text: &Arc<str>, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(text)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Arc<str>, D::Error> {
        String::deserialize(deserializer).map(Arc::from)
    }
}

/// Which entity a document's entity became.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct EntityAssignment {
    pub doc_id: String,
    pub key: String,
    pub entity_id: String,
}

pub use memweave_schemas::text::normalise;

/// Keys that are one word of exactly one longer key of the same document, as its
/// first or last word ("Graham" for "Paul Graham", "Viaweb" for "Viaweb Store"),
/// mapped to that longer key: within one document they name the same entity.
fn alias_targets(keys: &BTreeSet<String>) -> HashMap<String, String> {
    let mut candidates: HashMap<&str, BTreeSet<&str>> = HashMap::new();
    for key in keys {
        let words: Vec<&str> = key.split(' ').collect();
        if words.len() > 1 {
            for end in [words[0], words[words.len() - 1]] {
                candidates.entry(end).or_default().insert(key);
            }
        }
    }
    keys.iter()
        .filter(|k| !k.contains(' '))
        .filter_map(|k| {
            match candidates
                .get(k.as_str())?
                .iter()
                .collect::<Vec<_>>()
                .as_slice()
            {
                [only] => Some((k.clone(), only.to_string())),
                _ => None,
            }
        })
        .collect()
}

/// The graph of one document: its entities and relations (merged within the
/// document), from its segments in order. `background` is the document's summary.
pub async fn document_graph(
    doc_id: &str,
    background: &str,
    segments: &[Segment],
    model: &dyn MemoryModel,
    config: &GraphConfig,
) -> StepResult<(Vec<DocEntity>, Vec<DocRelation>)> {
    let cx = CallContext::build(STAGE, doc_id);
    // One copy per document, shared by its entities.
    let text: Vec<&str> = segments.iter().map(|s| s.text.as_str()).collect();
    let about: Arc<str> = Arc::from(key_words(&text.join("\n"), ABOUT_WORDS));
    let extracted: Vec<(Vec<String>, Vec<Relation>)> =
        all_in_order(segments.iter().map(|segment| {
            let (cx, about) = (&cx, &about);
            async move {
                let names = model.extract_entities(cx, about, &segment.text).await?;
                let relations = if names.len() < 2 {
                    Vec::new()
                } else {
                    let shown: Vec<&str> = names.iter().map(String::as_str).collect();
                    model.extract_relations(cx, &segment.text, &shown).await?
                };
                Ok((names, relations))
            }
        }))
        .await?;

    // Every name the document uses, including relation ends the model did not
    // list as entities: a relation never points at nothing.
    let mut keys = BTreeSet::new();
    for (names, relations) in &extracted {
        let ends = relations.iter().flat_map(|r| [&r.source, &r.target]);
        keys.extend(names.iter().chain(ends).map(|n| normalise(n)));
    }
    keys.remove("");
    let aliases = alias_targets(&keys);
    let key_of = |name: &str| {
        let key = normalise(name);
        aliases.get(&key).cloned().unwrap_or(key)
    };

    let mut entities: BTreeMap<String, (BTreeMap<String, usize>, Vec<usize>)> = BTreeMap::new();
    let mut relations: BTreeMap<(String, String), Vec<(usize, String)>> = BTreeMap::new();
    for (index, (names, found)) in extracted.iter().enumerate() {
        let ends = found.iter().flat_map(|r| [&r.source, &r.target]);
        for name in names.iter().chain(ends) {
            let key = key_of(name);
            if key.is_empty() {
                continue;
            }
            let (counts, segs) = entities.entry(key).or_default();
            *counts.entry(name.trim().to_string()).or_default() += 1;
            if segs.last() != Some(&index) {
                segs.push(index);
            }
        }
        for relation in found {
            let (source, target) = (key_of(&relation.source), key_of(&relation.target));
            // Two names of one entity (an alias and its full name) are not a relation.
            if source != target && !source.is_empty() && !target.is_empty() {
                relations
                    .entry((source, target))
                    .or_default()
                    .push((index, relation.description.clone()));
            }
        }
    }

    // A segment is split into sentences once, however many entities it
    // introduces.
    let sentences_of: Vec<OnceCell<Vec<&str>>> = segments.iter().map(|_| OnceCell::new()).collect();
    let doc_entities = entities
        .into_iter()
        .map(|(key, (counts, segs))| {
            let mut names: Vec<(String, usize)> = counts.into_iter().collect();
            names.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
            let names: Vec<String> = names.into_iter().map(|(n, _)| n).collect();
            let sentences =
                sentences_of[segs[0]].get_or_init(|| sentence_list(&segments[segs[0]].text));
            let context = first_mention(sentences, &names).unwrap_or_else(|| names[0].clone());
            DocEntity {
                key,
                doc_id: doc_id.to_string(),
                names,
                context,
                document: Arc::clone(&about),
                seg_ids: segs.iter().map(|&i| segments[i].seg_id.clone()).collect(),
            }
        })
        .collect();

    // What a merge shows of the summary: all its relations keep, and carry
    // across documents.
    let background: Arc<str> = Arc::from(head_words(background, EVIDENCE_WORDS));
    // A segment's head is the evidence of every relation found in it.
    let with_relations: BTreeSet<usize> = relations.values().flatten().map(|(i, _)| *i).collect();
    let heads: HashMap<usize, Arc<str>> = with_relations
        .into_iter()
        .map(|i| (i, Arc::from(head_words(&segments[i].text, EVIDENCE_WORDS))))
        .collect();
    let doc_relations = all_in_order(relations.into_iter().map(|((source, target), found)| {
        let (cx, background, heads) = (&cx, &background, &heads);
        async move {
            let evidence: Vec<(Arc<str>, String)> = found
                .iter()
                .map(|(i, d)| (Arc::clone(&heads[i]), d.clone()))
                .collect();
            let description = merge_descriptions(
                model,
                cx,
                || Arc::clone(background),
                evidence,
                Arc::clone,
                config.description_budget,
            )
            .await?;
            let mut seg_ids: Vec<String> = Vec::new();
            for (i, _) in &found {
                if !seg_ids.contains(&segments[*i].seg_id) {
                    seg_ids.push(segments[*i].seg_id.clone());
                }
            }
            Ok(DocRelation {
                doc_id: doc_id.to_string(),
                source_key: source,
                target_key: target,
                description,
                seg_ids,
                summary: Arc::clone(background),
                evidence: Arc::clone(&heads[&found[0].0]),
            })
        }
    }))
    .await?;
    Ok((doc_entities, doc_relations))
}

/// The first of `sentences` that mentions any of `names`.
fn first_mention(sentences: &[&str], names: &[String]) -> Option<String> {
    sentences
        .iter()
        .find(|s| names.iter().any(|n| s.contains(n.as_str())))
        .map(|s| collapse_whitespace(s))
}

/// One description from several (evidence text, description) pairs, in order:
/// duplicates dropped, the rest kept side by side while they fit `budget`
/// tokens. When some do not fit, the next budget's worth of them is folded into
/// what is kept by one call of the paper's merge prompt, every text it is shown
/// capped (the evidence is a segment's head of [`EVIDENCE_WORDS`] already);
/// descriptions past those two budgets are not read. One merge at most, however
/// often the pair recurs, keeps the cost per corpus token flat as an archive
/// grows (the relation still names every segment it was found in). A
/// description added later past both budgets costs no call, and one that
/// leaves the two selections as they were is answered from the call cache.
async fn merge_descriptions<E>(
    model: &dyn MemoryModel,
    cx: &CallContext,
    summary: impl FnOnce() -> Arc<str>,
    items: Vec<(E, String)>,
    evidence: impl Fn(&E) -> Arc<str>,
    budget: usize,
) -> StepResult<String> {
    let mut seen = BTreeSet::new();
    let mut items = items
        .into_iter()
        .filter(|(_, d)| !d.trim().is_empty() && seen.insert(collapse_whitespace(d)))
        .peekable();
    let Some((first, kept)) = take_fitting(&mut items, budget) else {
        return Ok(String::new());
    };
    let Some((next, overflow)) = take_fitting(&mut items, budget) else {
        return Ok(kept);
    };
    model
        .merge_relations(
            cx,
            &head_words(&summary(), EVIDENCE_WORDS),
            RelationEvidence {
                segment: &evidence(&first),
                relation: &head_tokens(&kept, budget),
            },
            RelationEvidence {
                segment: &evidence(&next),
                relation: &head_tokens(&overflow, budget),
            },
        )
        .await
}

/// The next description and those after it that fit `budget` tokens with it,
/// side by side, with the first one's evidence; `None` when none is left.
fn take_fitting<E>(
    items: &mut std::iter::Peekable<impl Iterator<Item = (E, String)>>,
    budget: usize,
) -> Option<(E, String)> {
    let (evidence, mut joined) = items.next()?;
    let mut tokens = count_tokens(&joined);
    while let Some((_, next)) = items.peek() {
        let next_tokens = count_tokens(next);
        if tokens + 1 + next_tokens > budget {
            break;
        }
        joined.push_str(DESCRIPTION_SEPARATOR);
        joined.push_str(next);
        tokens += next_tokens + 1;
        items.next();
    }
    Some((evidence, joined))
}

/// The words of `text` that fit in about `tokens` tokens (at least 1.3 tokens
/// a word, as English runs; shorter texts whole).
fn head_tokens(text: &str, tokens: usize) -> String {
    if count_tokens(text) <= tokens {
        text.to_string()
    } else {
        head_words(text, tokens * 10 / 13)
    }
}

/// What a name's resolution gave: its entities' rows (in the order of their
/// first mentions), which entity each mention became, and how many of each
/// round's other mentions were asked about (one count per entity, in the
/// same order). The counts are what the rows do not tell of how the
/// resolution went; with them a changed name is resolved again from this
/// one (see [`LastResolution`]).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Resolution {
    pub rows: Vec<EntityRow>,
    pub assignments: Vec<EntityAssignment>,
    pub asked: Vec<u32>,
}

/// A name's last resolution, which [`resolve_entities`] resolves the name's
/// new mentions from: its mentions (in doc_id order), the entity each became
/// (its index among the entities, which are in the order of their first
/// mentions) and [`Resolution::asked`].
#[derive(Debug, Clone, Copy)]
pub struct LastResolution<'a> {
    pub mentions: &'a [DocEntity],
    pub entity_of: &'a [u32],
    pub asked: &'a [u32],
}

/// Where a mention stands against a round's first mention: the same entity
/// or another by their vectors, or a question for the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Likeness {
    Same,
    Apart,
    Asked,
}

/// Mentions' vectors, embedded when first needed.
struct Vectors<'m> {
    mentions: &'m [DocEntity],
    vectors: Vec<Option<Vec<f32>>>,
}

impl<'m> Vectors<'m> {
    fn new(mentions: &'m [DocEntity]) -> Self {
        Vectors {
            mentions,
            vectors: vec![None; mentions.len()],
        }
    }

    /// Embeds those of `wanted` not embedded yet.
    async fn embed(
        &mut self,
        embedder: &dyn Embedder,
        wanted: impl IntoIterator<Item = usize>,
    ) -> StepResult<()> {
        let mut missing: Vec<usize> = wanted
            .into_iter()
            .filter(|&i| self.vectors[i].is_none())
            .collect();
        missing.sort_unstable();
        missing.dedup();
        if missing.is_empty() {
            return Ok(());
        }
        let texts: Vec<String> = (missing.iter())
            .map(|&i| self.mentions[i].compared_text())
            .collect();
        let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
        let vectors = embed_all(embedder, &CallContext::corpus("embed"), &texts).await?;
        for (i, vector) in missing.into_iter().zip(vectors) {
            self.vectors[i] = Some(vector);
        }
        Ok(())
    }

    /// How mention `i` stands against `leader`'s vector (both embedded).
    fn likeness(&self, leader: &[f32], i: usize, config: &GraphConfig) -> Likeness {
        let similarity = cosine(leader, self.vector(i));
        if similarity >= f64::from(config.same_above) {
            Likeness::Same
        } else if similarity >= f64::from(config.apart_below) {
            Likeness::Asked
        } else {
            Likeness::Apart
        }
    }

    fn vector(&self, i: usize) -> &[f32] {
        self.vectors[i]
            .as_deref()
            .expect("embedded before compared")
    }
}

/// How many same-entity calls a round's asked passages take: about
/// [`SAME_ENTITY_BATCH`] a call, the number of calls a power of two so that
/// it changes only when the questions double.
fn batches_for(asked: usize) -> usize {
    asked.div_ceil(SAME_ENTITY_BATCH).next_power_of_two()
}

/// The entities that the documents' entities of one normalised name (`mentions`,
/// in doc_id order) become: each document's entity joins the first entity whose
/// first document it is the same as, or starts a new one. Whether it is the
/// same is read from the cosine of their passages' vectors where that is
/// outside `config`'s band, and asked of the model inside it.
///
/// With the name's `last` resolution (and an embedder whose vectors do not
/// depend on the texts embedded beside them), a round whose first mention is
/// unchanged is worked out from how it went last time: only the mentions
/// that changed, and those that share a same-entity call with one, are
/// compared again; the others went as they went. The result is what
/// resolving every mention gives (see the round's comments for why).
pub async fn resolve_entities(
    mentions: &[DocEntity],
    last: Option<LastResolution<'_>>,
    model: &dyn MemoryModel,
    embedder: &dyn Embedder,
    config: &GraphConfig,
) -> StepResult<Resolution> {
    let cx = CallContext::corpus(STAGE);
    let mut vectors = Vectors::new(mentions);
    let mut last = last
        .filter(|_| embedder.vectors_stand_alone())
        .and_then(|last| Replay::new(last, mentions));
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let mut asked_counts = Vec::new();
    let mut unplaced: Vec<usize> = (0..mentions.len()).collect();
    // Each round, every unplaced mention is compared with the next group's first
    // mention; those the vectors cannot settle are asked about, about
    // SAME_ENTITY_BATCH passages to a call, the calls at once; the ones turned
    // away form later groups. A passage's batch is drawn from its document id,
    // and the number of batches only changes when the questions double, so a
    // document arriving in a later epoch changes one batch's prompt: the others
    // are answered from the call cache.
    while let Some((&first, rest)) = unplaced.split_first() {
        let round = Round {
            mentions,
            first,
            rest,
            model,
            embedder,
            config,
            cx: &cx,
        };
        let replayed = match last.as_mut().and_then(|l| l.round_led_by(first)) {
            Some(old_round) => {
                let replay = last.as_mut().expect("a round to replay");
                round.replay(&mut vectors, replay, old_round).await?
            }
            None => None,
        };
        let (joined, asked) = match replayed {
            Some(replayed) => replayed,
            None => round.compare_all(&mut vectors).await?,
        };
        let mut group = vec![first];
        let mut apart = Vec::new();
        for (&m, joined) in rest.iter().zip(joined) {
            if joined { group.push(m) } else { apart.push(m) }
        }
        groups.push(group);
        asked_counts.push(u32::try_from(asked).expect("under 2^32 mentions"));
        unplaced = apart;
    }
    let groups: Vec<Vec<&DocEntity>> = groups
        .iter()
        .map(|g| g.iter().map(|&i| &mentions[i]).collect())
        .collect();
    let (rows, assignments) = entity_rows(&groups);
    Ok(Resolution {
        rows,
        assignments,
        asked: asked_counts,
    })
}

/// One round of [`resolve_entities`]: `first` against every mention of `rest`.
struct Round<'a> {
    mentions: &'a [DocEntity],
    first: usize,
    rest: &'a [usize],
    model: &'a dyn MemoryModel,
    embedder: &'a dyn Embedder,
    config: &'a GraphConfig,
    cx: &'a CallContext,
}

impl Round<'_> {
    /// Which of `rest` join `first`, comparing every one; and how many were
    /// asked about.
    async fn compare_all(&self, vectors: &mut Vectors<'_>) -> StepResult<(Vec<bool>, usize)> {
        if self.rest.is_empty() {
            return Ok((Vec::new(), 0));
        }
        let all = std::iter::once(self.first).chain(self.rest.iter().copied());
        vectors.embed(self.embedder, all).await?;
        let likeness: Vec<Likeness> = (self.rest.iter())
            .map(|&m| vectors.likeness(vectors.vector(self.first), m, self.config))
            .collect();
        let asked = likeness.iter().filter(|l| **l == Likeness::Asked).count();
        let batches = batches_for(asked);
        let answers = self.ask(&likeness, batches, |_| true).await?;
        let joined = (likeness.iter().zip(answers))
            .map(|(l, answer)| *l == Likeness::Same || answer == Some(true))
            .collect();
        Ok((joined, asked))
    }

    /// The model's answers for the asked mentions of `rest` (by `likeness`)
    /// in the batches `in_batch` keeps, `batches` batches in all; `None`
    /// for every other mention.
    async fn ask(
        &self,
        likeness: &[Likeness],
        batches: usize,
        in_batch: impl Fn(usize) -> bool,
    ) -> StepResult<Vec<Option<bool>>> {
        let mut members: Vec<Vec<usize>> = vec![Vec::new(); batches];
        for (r, l) in likeness.iter().enumerate() {
            if *l == Likeness::Asked {
                let batch = batch_of(&self.mentions[self.rest[r]].doc_id, batches);
                if in_batch(batch) {
                    members[batch].push(r);
                }
            }
        }
        let first = &self.mentions[self.first];
        let first_passage = first.passage();
        let asked = members.iter().enumerate().filter(|(_, b)| !b.is_empty());
        let answers = all_in_order(asked.map(|(b, batch)| {
            let passages: Vec<String> = (batch.iter())
                .map(|&r| self.mentions[self.rest[r]].passage())
                .collect();
            // A batch is asked again, whole, whenever one of its members
            // changes: the batch is the subject of its calls.
            let cx = self.cx.about(format!(
                "same_entity {} {} {b}/{batches}",
                first.key, first.doc_id
            ));
            let (name, first) = (&first.names[0], &first_passage);
            async move {
                let passages: Vec<&str> = passages.iter().map(String::as_str).collect();
                self.model.same_entity(&cx, name, first, &passages).await
            }
        }))
        .await?;
        let mut found = vec![None; self.rest.len()];
        for (batch, answer) in members.iter().filter(|b| !b.is_empty()).zip(answers) {
            for (&r, yes) in batch.iter().zip(answer) {
                found[r] = Some(yes);
            }
        }
        Ok(found)
    }

    /// Which of `rest` join `first` and how many were asked about, worked
    /// out from `old_round` of the last resolution, whose first mention was
    /// this same one; `None` where the number of calls changed, and every
    /// mention must be compared.
    ///
    /// A mention unchanged since, that was in the old round too, stands as it
    /// stood against the same first mention; its answer, if it was asked,
    /// came from a call whose prompt is its batch's passages. So only the
    /// batches of the mentions that changed (new here, gone from there, or
    /// edited) can answer otherwise: their members are compared and asked
    /// again, and every other mention joins where it joined last time.
    async fn replay(
        &self,
        vectors: &mut Vectors<'_>,
        last: &mut Replay<'_>,
        old_round: usize,
    ) -> StepResult<Option<(Vec<bool>, usize)>> {
        last.advance_to(old_round);
        let old_first = last.leaders[old_round];
        // Each mention of `rest` as it was in the old round, where it was.
        let was: Vec<Option<usize>> = (self.rest.iter())
            .map(|&m| last.same_as[m].filter(|&o| last.unplaced[o] && o != old_first))
            .collect();
        let mut kept = vec![false; last.mentions.len()];
        for o in was.iter().flatten() {
            kept[*o] = true;
        }
        let gone: Vec<usize> = (0..last.mentions.len())
            .filter(|&o| last.unplaced[o] && o != old_first && !kept[o])
            .collect();
        let new: Vec<usize> = (0..self.rest.len()).filter(|&r| was[r].is_none()).collect();
        vectors
            .embed(
                self.embedder,
                std::iter::once(self.first).chain(new.iter().map(|&r| self.rest[r])),
            )
            .await?;
        last.vectors
            .embed(self.embedder, gone.iter().copied())
            .await?;
        let leader = vectors.vector(self.first).to_vec();
        let new_likeness: Vec<(usize, Likeness)> = (new.iter())
            .map(|&r| (r, vectors.likeness(&leader, self.rest[r], self.config)))
            .collect();
        let gone_asked: Vec<usize> = (gone.iter().copied())
            .filter(|&o| last.vectors.likeness(&leader, o, self.config) == Likeness::Asked)
            .collect();
        let old_asked = last.asked[old_round] as usize;
        let new_asked = new_likeness
            .iter()
            .filter(|(_, l)| *l == Likeness::Asked)
            .count();
        let Some(asked) = (old_asked + new_asked).checked_sub(gone_asked.len()) else {
            return Ok(None);
        };
        let batches = batches_for(old_asked);
        if batches_for(asked) != batches {
            return Ok(None);
        }
        let changed: BTreeSet<usize> = (new_likeness.iter())
            .filter(|(_, l)| *l == Likeness::Asked)
            .map(|(r, _)| &self.mentions[self.rest[*r]].doc_id)
            .chain(gone_asked.iter().map(|&o| &last.mentions[o].doc_id))
            .map(|doc_id| batch_of(doc_id, batches))
            .collect();
        // The changed batches' members, compared again (the mentions new
        // here already are).
        let in_changed: Vec<bool> = if changed.is_empty() {
            vec![false; self.rest.len()]
        } else {
            (self.rest.iter())
                .map(|&m| changed.contains(&batch_of(&self.mentions[m].doc_id, batches)))
                .collect()
        };
        let recompared = (0..self.rest.len()).filter(|&r| in_changed[r] && was[r].is_some());
        vectors
            .embed(self.embedder, recompared.map(|r| self.rest[r]))
            .await?;
        let mut likeness = vec![Likeness::Apart; self.rest.len()];
        for (r, l) in likeness.iter_mut().enumerate() {
            if in_changed[r] || was[r].is_none() {
                *l = vectors.likeness(&leader, self.rest[r], self.config);
            }
        }
        let answers = self
            .ask(&likeness, batches, |b| changed.contains(&b))
            .await?;
        let joined = (0..self.rest.len())
            .map(|r| match was[r] {
                Some(o) if !in_changed[r] => last.entity_of[o] as usize == old_round,
                _ => likeness[r] == Likeness::Same || answers[r] == Some(true),
            })
            .collect();
        Ok(Some((joined, asked)))
    }
}

/// A name's last resolution as [`Round::replay`] walks it: which of its
/// rounds the new one has reached, and which of its mentions were still
/// unplaced there.
struct Replay<'a> {
    mentions: &'a [DocEntity],
    entity_of: &'a [u32],
    asked: &'a [u32],
    vectors: Vectors<'a>,
    /// Each round's first mention.
    leaders: Vec<usize>,
    /// The old mention each new one is, unchanged, where there is one.
    same_as: Vec<Option<usize>>,
    /// The old round whose first mention each old mention was.
    round_of_leader: HashMap<usize, usize>,
    /// The old mentions not placed before round `next`.
    unplaced: Vec<bool>,
    next: usize,
}

impl<'a> Replay<'a> {
    /// `None` where `last` does not hold together (an entity without a
    /// count, or out of the order of first mentions): then every round is
    /// compared whole.
    fn new(last: LastResolution<'a>, mentions: &[DocEntity]) -> Option<Replay<'a>> {
        if last.entity_of.len() != last.mentions.len() {
            return None;
        }
        let mut leaders = Vec::new();
        for (o, &entity) in last.entity_of.iter().enumerate() {
            match (entity as usize).cmp(&leaders.len()) {
                std::cmp::Ordering::Equal => leaders.push(o),
                std::cmp::Ordering::Greater => return None,
                std::cmp::Ordering::Less => {}
            }
        }
        if leaders.len() != last.asked.len() {
            return None;
        }
        let by_doc: HashMap<&str, usize> = (last.mentions.iter().enumerate())
            .map(|(o, m)| (m.doc_id.as_str(), o))
            .collect();
        let same_as = mentions
            .iter()
            .map(|m| {
                let o = *by_doc.get(m.doc_id.as_str())?;
                (last.mentions[o] == *m).then_some(o)
            })
            .collect();
        Some(Replay {
            mentions: last.mentions,
            entity_of: last.entity_of,
            asked: last.asked,
            vectors: Vectors::new(last.mentions),
            round_of_leader: leaders.iter().enumerate().map(|(j, &o)| (o, j)).collect(),
            leaders,
            same_as,
            unplaced: vec![true; last.mentions.len()],
            next: 0,
        })
    }

    /// The old round a new round led by mention `first` replays: the one
    /// the same mention led, if the walk has not passed it.
    fn round_led_by(&self, first: usize) -> Option<usize> {
        let old = self.same_as[first]?;
        let round = *self.round_of_leader.get(&old)?;
        (round >= self.next).then_some(round)
    }

    /// Places the old rounds before `round`: their mentions were not in it.
    fn advance_to(&mut self, round: usize) {
        for (o, &entity) in self.entity_of.iter().enumerate() {
            if (self.next..round).contains(&(entity as usize)) {
                self.unplaced[o] = false;
            }
        }
        self.next = round;
    }
}

/// The entities a memory holds, as a new process reads back what a name's
/// resolution gave (see [`assignments_from_entities`]).
pub trait StoredEntities {
    /// Whether the memory holds the entity.
    fn holds(&self, entity_id: &str) -> bool;
    /// Whether the entity was found in the segment.
    fn found_in(&self, entity_id: &str, seg_id: &str) -> bool;
    /// [`Resolution::asked`] of the name whose first entity this is; `None`
    /// where its resolution met an error (whose row stands in the memory
    /// beside the entities, which do not tell of it).
    fn asked(&self, entity_id: &str) -> Option<Vec<u32>>;
}

/// Which entity each of a name's mentions (in document order) became, read
/// back from the entities [`entity_rows`] made of them instead of resolving
/// the name again: its first group has the name's plain id, each later group
/// the id of the name with its first document, and each group the segments
/// of its mentions (a mention's are its document's alone). `None` where the stored
/// entities do not account for every mention: the name must be resolved.
pub fn assignments_from_entities(
    mentions: &[DocEntity],
    stored: &impl StoredEntities,
) -> Option<Vec<EntityAssignment>> {
    let key = &mentions.first()?.key;
    let first_group = content_id("entity", &[key.as_bytes()]);
    let candidates: Vec<(String, Option<&str>)> = mentions
        .iter()
        .map(|m| {
            let own = content_id("entity", &[key.as_bytes(), m.doc_id.as_bytes()]);
            (own, m.seg_ids.first().map(String::as_str))
        })
        .collect();
    let groups = stored_groups(
        first_group,
        &candidates,
        |id| stored.holds(id),
        |id, seg_id| stored.found_in(id, seg_id),
    )?;
    let assignments = (mentions.iter().zip(groups)).map(|(m, entity_id)| EntityAssignment {
        doc_id: m.doc_id.clone(),
        key: m.key.clone(),
        entity_id,
    });
    Some(assignments.collect())
}

/// The rule of [`assignments_from_entities`], over ids and segments in any
/// form (a new process reads names back from hashes): given the name's
/// first group and, per mention, the group its document would have led and
/// its first segment, the stored group each mention joined. `None` where
/// the stored groups do not account for every mention.
pub fn stored_groups<I: Clone, S>(
    first_group: I,
    mentions: &[(I, Option<S>)],
    holds: impl Fn(&I) -> bool,
    found_in: impl Fn(&I, &S) -> bool,
) -> Option<Vec<I>> {
    if !holds(&first_group) {
        return None;
    }
    let later_groups: Vec<&I> = (mentions.iter().map(|(own, _)| own))
        .filter(|id| holds(id))
        .collect();
    mentions
        .iter()
        .map(|(_, first_segment)| match first_segment {
            None if later_groups.is_empty() => Some(first_group.clone()),
            None => None,
            Some(segment) => {
                let mut holding = (later_groups.iter().copied().chain([&first_group]))
                    .filter(|id| found_in(id, segment));
                match (holding.next(), holding.next()) {
                    (Some(id), None) => Some(id.clone()),
                    _ => None,
                }
            }
        })
        .collect()
}

/// What resolving a name's mentions (in document order) gave, read back
/// from the stored entities it made: the rows of [`entity_rows`] over the
/// groups [`assignments_from_entities`] finds, what each mention became and
/// the stored counts; and the index of each mention's entity among the rows
/// (see [`LastResolution`]). `None` where those do not account for every
/// mention, where the groups do not give the ids they were read back by, or
/// where the resolution met an error: the name must be resolved again.
pub fn resolution_from_entities(
    mentions: &[DocEntity],
    stored: &impl StoredEntities,
) -> Option<(Resolution, Vec<u32>)> {
    let assigned = assignments_from_entities(mentions, stored)?;
    let asked = stored.asked(&assigned.first()?.entity_id)?;
    // A resolution's groups are in the order of their first mentions.
    let mut groups: Vec<(&str, Vec<&DocEntity>)> = Vec::new();
    let mut entity_of = Vec::with_capacity(mentions.len());
    for (mention, assignment) in mentions.iter().zip(&assigned) {
        let found = (groups.iter()).position(|(id, _)| *id == assignment.entity_id);
        let index = found.unwrap_or_else(|| {
            groups.push((&assignment.entity_id, Vec::new()));
            groups.len() - 1
        });
        groups[index].1.push(mention);
        entity_of.push(u32::try_from(index).expect("under 2^32 entities"));
    }
    let groups: Vec<Vec<&DocEntity>> = groups.into_iter().map(|(_, g)| g).collect();
    let (rows, mut assignments) = entity_rows(&groups);
    // The same ids, mention by mention: [`entity_rows`] lists them by group.
    assignments.sort();
    let mut assigned = assigned;
    assigned.sort();
    let resolution = Resolution {
        rows,
        assignments,
        asked,
    };
    (resolution.assignments == assigned && resolution.asked.len() == resolution.rows.len())
        .then_some((resolution, entity_of))
}

/// Which of `batches` disambiguation batches a document's passage goes to: a
/// function of its id alone, so batches stay put as documents come and go.
fn batch_of(doc_id: &str, batches: usize) -> usize {
    let hash = blake3::hash(doc_id.as_bytes());
    let bytes: [u8; 8] = hash.as_bytes()[..8].try_into().expect("8 bytes");
    (u64::from_le_bytes(bytes) % batches as u64) as usize
}

/// The rows of resolved groups: the first group takes the plain id of the name,
/// later ones add their first document to it.
pub fn entity_rows(groups: &[Vec<&DocEntity>]) -> (Vec<EntityRow>, Vec<EntityAssignment>) {
    let mut rows = Vec::new();
    let mut assignments = Vec::new();
    for (index, group) in groups.iter().enumerate() {
        let first = group[0];
        let entity_id = if index == 0 {
            content_id("entity", &[first.key.as_bytes()])
        } else {
            content_id("entity", &[first.key.as_bytes(), first.doc_id.as_bytes()])
        };
        let mut name_counts: BTreeMap<&str, usize> = BTreeMap::new();
        for m in group {
            *name_counts.entry(m.names[0].as_str()).or_default() += 1;
        }
        let name = name_counts
            .iter()
            .max_by(|a, b| a.1.cmp(b.1).then_with(|| b.0.cmp(a.0)))
            .map(|(n, _)| n.to_string())
            .unwrap_or_default();
        let aliases: BTreeSet<String> = group
            .iter()
            .flat_map(|m| m.names.iter())
            .filter(|n| **n != name)
            .cloned()
            .collect();
        let seg_ids: BTreeSet<String> = group.iter().flat_map(|m| m.seg_ids.clone()).collect();
        assignments.extend(group.iter().map(|m| EntityAssignment {
            doc_id: m.doc_id.clone(),
            key: m.key.clone(),
            entity_id: entity_id.clone(),
        }));
        rows.push(EntityRow {
            entity_id,
            name,
            entity_type: String::new(),
            description: first.context.clone(),
            aliases: aliases.into_iter().collect(),
            seg_ids: seg_ids.into_iter().collect(),
        });
    }
    (rows, assignments)
}

/// A document's relation as a merge across documents reads it. The texts it
/// shares with its document's other relations are asked for only when the
/// model is: a restart hands the merges millions of relations, and few of
/// their pairs call the model.
pub trait FoundRelation {
    fn description(&self) -> &str;
    fn seg_ids(&self) -> &[String];
    /// The head of its document's summary: the merge prompt's background.
    fn summary(&self) -> Arc<str>;
    /// The head of the first segment it came from: its evidence in a merge.
    fn evidence(&self) -> Arc<str>;
}

impl FoundRelation for DocRelation {
    fn description(&self) -> &str {
        &self.description
    }

    fn seg_ids(&self) -> &[String] {
        &self.seg_ids
    }

    fn summary(&self) -> Arc<str> {
        Arc::clone(&self.summary)
    }

    fn evidence(&self) -> Arc<str> {
        Arc::clone(&self.evidence)
    }
}

/// One relation from the documents' relations between the same two entities (in
/// doc_id order), their descriptions kept together within the budget.
pub async fn merge_relations_across<R: FoundRelation>(
    source_id: &str,
    target_id: &str,
    found: &[R],
    model: &dyn MemoryModel,
    config: &GraphConfig,
) -> StepResult<RelationRow> {
    let cx = CallContext::corpus(STAGE).about(format!("relation {source_id} {target_id}"));
    let summary = || found.first().map_or_else(|| Arc::from(""), R::summary);
    let items = found
        .iter()
        .map(|r| (r, r.description().to_string()))
        .collect();
    let description = merge_descriptions(
        model,
        &cx,
        summary,
        items,
        |r: &&R| r.evidence(),
        config.description_budget,
    )
    .await?;
    Ok(relation_row(source_id, target_id, found, description))
}

/// The relation between two entities with `description`, from the segments of
/// every document's relation between them.
pub fn relation_row<R: FoundRelation>(
    source_id: &str,
    target_id: &str,
    found: &[R],
    description: String,
) -> RelationRow {
    let seg_ids: BTreeSet<String> = found.iter().flat_map(|r| r.seg_ids()).cloned().collect();
    RelationRow {
        relation_id: content_id("relation", &[source_id.as_bytes(), target_id.as_bytes()]),
        source_id: source_id.to_string(),
        target_id: target_id.to_string(),
        description,
        seg_ids: seg_ids.into_iter().collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::embed::HashingEmbedder;
    use crate::testing::FirstSentence;
    use memweave_schemas::SegmentRow;

    /// A band that settles nothing: the model is asked about every two mentions.
    const ASK_ALWAYS: GraphConfig = GraphConfig {
        same_above: 1.0,
        apart_below: -1.0,
        ..GraphConfig::DEFAULT
    };

    fn segment(doc: &str, ordinal: u32, text: &str) -> Segment {
        let row = SegmentRow {
            seg_id: format!("{doc}-{ordinal}"),
            doc_id: doc.to_string(),
            ordinal,
            start_char: 0,
            end_char: text.chars().count() as u64,
            n_tokens: 1,
            target_tokens: 1000,
            terms: String::new(),
        };
        Segment::new(row, text.to_string())
    }

    fn graph(
        doc: &str,
        texts: &[&str],
        model: &FirstSentence,
    ) -> (Vec<DocEntity>, Vec<DocRelation>) {
        let segments: Vec<Segment> = texts
            .iter()
            .enumerate()
            .map(|(i, t)| segment(doc, i as u32, t))
            .collect();
        futures::executor::block_on(document_graph(
            doc,
            "background",
            &segments,
            model,
            &GraphConfig::DEFAULT,
        ))
        .expect("the stub answers")
    }

    #[test]
    fn names_normalise_past_case_articles_and_possessives() {
        assert_eq!(normalise("The Beatles'"), "beatles");
        assert_eq!(normalise("  the   BEATLES "), "beatles");
        assert_eq!(normalise("Graham's"), "graham");
        assert_eq!(normalise("Y Combinator"), "y combinator");
        assert_eq!(normalise("The"), "the");
    }

    #[test]
    fn a_surname_is_an_alias_of_the_one_full_name_it_ends() {
        let model = FirstSentence::default();
        let (entities, relations) = graph(
            "d",
            &[
                "Then Paul Graham met Jessica Livingston in Boston. They talked.",
                "Then Graham wrote about Boston and Lisp. Lisp was old.",
            ],
            &model,
        );
        let keys: Vec<&str> = entities.iter().map(|e| e.key.as_str()).collect();
        assert_eq!(
            keys,
            ["boston", "jessica livingston", "lisp", "paul graham"]
        );
        let paul = &entities[3];
        assert_eq!(paul.names, ["Graham", "Paul Graham"]);
        assert_eq!(paul.seg_ids, ["d-0", "d-1"]);
        assert!(paul.context.starts_with("Then Paul Graham met"));
        // Every relation joins two entities of the document.
        for r in &relations {
            assert!(keys.contains(&r.source_key.as_str()) && keys.contains(&r.target_key.as_str()));
            assert_ne!(r.source_key, r.target_key);
        }
        // Paul Graham and Boston are related in both segments: one relation, two sources.
        let merged = relations
            .iter()
            .find(|r| r.source_key == "paul graham" && r.target_key == "boston")
            .expect("the relation of both segments");
        assert_eq!(merged.seg_ids, ["d-0", "d-1"]);
    }

    #[test]
    fn entities_of_one_name_stay_apart_when_the_model_says_so() {
        let texts_a = ["Apple sold phones in Cupertino. Apple grew."];
        let texts_b = ["Apple trees grew in Kent. Apple pie followed."];
        let merging = FirstSentence::default();
        let separating = FirstSentence::separating(&["Apple"]);
        let mentions = |model: &FirstSentence| {
            let (a, _) = graph("a", &texts_a, model);
            let (b, _) = graph("b", &texts_b, model);
            let apple: Vec<DocEntity> = a
                .into_iter()
                .chain(b)
                .filter(|e| e.key == "apple")
                .collect();
            assert_eq!(apple.len(), 2);
            let embedder = HashingEmbedder::new(256);
            let resolved = futures::executor::block_on(resolve_entities(
                &apple,
                None,
                model,
                &embedder,
                &ASK_ALWAYS,
            ))
            .expect("answers");
            assert_eq!(resolved.asked.len(), resolved.rows.len());
            (resolved.rows, resolved.assignments)
        };
        let (one, assigned) = mentions(&merging);
        assert_eq!(one.len(), 1);
        assert_eq!(one[0].seg_ids, ["a-0", "b-0"]);
        assert!(assigned.iter().all(|a| a.entity_id == one[0].entity_id));
        let (two, assigned) = mentions(&separating);
        assert_eq!(two.len(), 2);
        assert_ne!(two[0].entity_id, two[1].entity_id);
        assert_eq!(assigned[1].entity_id, two[1].entity_id);
        assert_eq!(
            (two[0].seg_ids.as_slice(), two[1].seg_ids.as_slice()),
            (&["a-0".to_string()][..], &["b-0".to_string()][..])
        );
    }

    /// The entities a resolution made tell which entity each mention
    /// became, whether the name stayed one entity or was split; entities
    /// made of other mentions tell nothing.
    #[test]
    fn a_names_assignments_read_back_from_its_entities() {
        struct Rows(Vec<EntityRow>, Option<Vec<u32>>);
        impl StoredEntities for Rows {
            fn holds(&self, entity_id: &str) -> bool {
                self.0.iter().any(|r| r.entity_id == entity_id)
            }
            fn found_in(&self, entity_id: &str, seg_id: &str) -> bool {
                (self.0.iter())
                    .any(|r| r.entity_id == entity_id && r.seg_ids.iter().any(|s| s == seg_id))
            }
            fn asked(&self, entity_id: &str) -> Option<Vec<u32>> {
                self.1.clone().filter(|_| entity_id == self.0[0].entity_id)
            }
        }
        let texts = [
            ("a", "Apple sold phones in Cupertino. Apple grew."),
            ("b", "Apple trees grew in Kent. Apple pie followed."),
            ("c", "Apple opened a store in Cupertino. Apple sold."),
        ];
        let mentions: Vec<DocEntity> = texts
            .iter()
            .flat_map(|(doc, text)| graph(doc, &[text], &FirstSentence::default()).0)
            .filter(|e| e.key == "apple")
            .collect();
        let embedder = HashingEmbedder::new(256);
        let resolved = |model: FirstSentence| {
            futures::executor::block_on(resolve_entities(
                &mentions,
                None,
                &model,
                &embedder,
                &ASK_ALWAYS,
            ))
            .expect("answers")
        };
        let made = |groups: &[Vec<&DocEntity>]| {
            let (rows, assignments) = entity_rows(groups);
            let asked = vec![0; rows.len()];
            Resolution {
                rows,
                assignments,
                asked,
            }
        };
        let (a, b, c) = (&mentions[0], &mentions[1], &mentions[2]);
        for resolution in [
            resolved(FirstSentence::default()),
            resolved(FirstSentence::separating(&["Apple"])),
            // A later group of two: its second mention is placed by segment.
            made(&[vec![a], vec![b, c]]),
            // Groups whose mentions interleave.
            made(&[vec![a, c], vec![b]]),
        ] {
            let rows = &resolution.rows;
            let stored = Rows(rows.clone(), Some(resolution.asked.clone()));
            // What each mention became (the resolution lists them by group).
            let mut sorted = resolution.assignments.clone();
            sorted.sort();
            let mut read_back = assignments_from_entities(&mentions, &stored);
            read_back.iter_mut().for_each(|r| r.sort());
            assert_eq!(read_back, Some(sorted.clone()), "{} entities", rows.len());
            // The resolution read back is the one made, and each mention's
            // entity is the row that holds its assignment.
            let entity_of: Vec<u32> = (sorted.iter())
                .map(|a| {
                    rows.iter()
                        .position(|r| r.entity_id == a.entity_id)
                        .unwrap() as u32
                })
                .collect();
            let expected = Resolution {
                assignments: sorted,
                ..resolution.clone()
            };
            assert_eq!(
                resolution_from_entities(&mentions, &stored),
                Some((expected, entity_of))
            );
            // Without one of the entities, the mentions are not accounted for.
            let fewer = Rows(rows[..rows.len() - 1].to_vec(), stored.1.clone());
            assert_eq!(assignments_from_entities(&mentions, &fewer), None);
            assert_eq!(resolution_from_entities(&mentions, &fewer), None);
            // A resolution that met an error leaves no counts (and a row the
            // entities do not tell of): it is not read back.
            let failed = Rows(rows.clone(), None);
            assert_eq!(resolution_from_entities(&mentions, &failed), None);
        }
    }

    /// A model whose every same-entity answer depends on its whole prompt
    /// (one in eight a no): a batch whose passages change may answer
    /// otherwise for each of them.
    #[derive(Debug, Default)]
    struct Fickle {
        asked: std::sync::atomic::AtomicUsize,
    }

    #[async_trait::async_trait]
    impl MemoryModel for Fickle {
        fn backend(&self) -> &str {
            "fickle"
        }
        fn is_remote(&self) -> bool {
            false
        }
        async fn reply(
            &self,
            _: &CallContext,
            step: crate::model::Step,
        ) -> StepResult<crate::model::Reply> {
            let crate::model::Step::SameEntity {
                name,
                first,
                others,
            } = step
            else {
                unreachable!("only same-entity questions are asked")
            };
            self.asked
                .fetch_add(others.len(), std::sync::atomic::Ordering::SeqCst);
            let prompt = format!("{name}|{first}|{}", others.join("|"));
            let answers = (0..others.len())
                .map(|k| {
                    !blake3::hash(format!("{prompt}|{k}").as_bytes()).as_bytes()[0]
                        .is_multiple_of(8)
                })
                .collect();
            Ok(crate::model::Reply::SameEntity(answers))
        }
    }

    /// The hashing embedder, counting the texts it embeds.
    #[derive(Debug)]
    struct Counting(HashingEmbedder, std::sync::atomic::AtomicUsize);

    #[async_trait::async_trait]
    impl Embedder for Counting {
        fn model(&self) -> &str {
            self.0.model()
        }
        fn dim(&self) -> usize {
            self.0.dim()
        }
        async fn embed(&self, cx: &CallContext, texts: &[&str]) -> StepResult<Vec<Vec<f32>>> {
            (self.1).fetch_add(texts.len(), std::sync::atomic::Ordering::SeqCst);
            self.0.embed(cx, texts).await
        }
        fn vectors_stand_alone(&self) -> bool {
            true
        }
    }

    /// A name resolved again from its last resolution gives what resolving
    /// every mention gives, over random archives and random edits (mentions
    /// changed, gone, new; the first mention among them), with a model whose
    /// answers change with any passage of their batch; and it embeds and
    /// asks less than resolving every mention.
    #[test]
    fn a_name_resolved_from_its_last_resolution_equals_resolving_it_whole() {
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = move |below: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % below
        };
        let words = [
            "harbour", "press", "ledger", "vote", "grain", "mill", "river", "bank", "school",
            "court", "ship", "wool", "coal", "rail", "song", "field",
        ];
        let mention = |doc: u64, next: &mut dyn FnMut(u64) -> u64| {
            let context: Vec<&str> = (0..3).map(|_| words[next(16) as usize]).collect();
            let document: Vec<&str> = (0..2).map(|_| words[next(16) as usize]).collect();
            DocEntity {
                key: "ada".to_string(),
                doc_id: format!("doc-{doc:03}"),
                names: vec!["Ada".to_string()],
                context: format!("Ada and the {}.", context.join(" ")),
                document: Arc::from(document.join(" ")),
                seg_ids: vec![format!("doc-{doc:03}-0")],
            }
        };
        let config = GraphConfig {
            same_above: 0.45,
            apart_below: 0.1,
            ..GraphConfig::DEFAULT
        };
        let resolve = |mentions: &[DocEntity], last: Option<LastResolution<'_>>| {
            let (model, embedder) = (
                Fickle::default(),
                Counting(HashingEmbedder::new(32), Default::default()),
            );
            let resolved = futures::executor::block_on(resolve_entities(
                mentions, last, &model, &embedder, &config,
            ))
            .expect("answers");
            let work = model.asked.into_inner() + embedder.1.into_inner();
            (resolved, work)
        };
        // Which entity each mention became, by its index among the rows.
        let entity_of = |resolved: &Resolution, mentions: &[DocEntity]| -> Vec<u32> {
            let row: HashMap<&str, u32> = (resolved.rows.iter().enumerate())
                .map(|(i, r)| (r.entity_id.as_str(), i as u32))
                .collect();
            let by_doc: HashMap<&str, u32> = (resolved.assignments.iter())
                .map(|a| (a.doc_id.as_str(), row[a.entity_id.as_str()]))
                .collect();
            mentions.iter().map(|m| by_doc[m.doc_id.as_str()]).collect()
        };
        // `new` resolved whole and from `last`, the resolution of `old`:
        // the same, and what each cost.
        let again = |old: &[DocEntity], last: &Resolution, new: &[DocEntity]| {
            let old_entity_of = entity_of(last, old);
            let last = LastResolution {
                mentions: old,
                entity_of: &old_entity_of,
                asked: &last.asked,
            };
            let (whole, work) = resolve(new, None);
            let (replayed, replay_work) = resolve(new, Some(last));
            assert_eq!(replayed, whole);
            (whole, work, replay_work)
        };
        let (mut whole_work, mut replayed_work, mut rounds) = (0, 0, 0);
        for _ in 0..100 {
            let docs = 20 + next(400);
            let mut old: Vec<DocEntity> = (0..docs).map(|d| mention(d, &mut next)).collect();
            old.sort_by(|a, b| a.doc_id.cmp(&b.doc_id));
            let (last, _) = resolve(&old, None);
            let mut new = old.clone();
            for _ in 0..1 + next(3) {
                match next(4) {
                    0 if new.len() > 2 => {
                        new.remove(next(new.len() as u64) as usize);
                    }
                    1 => new.push(mention(docs + next(1000), &mut next)),
                    2 => new[0] = mention(0, &mut next),
                    _ => {
                        let at = next(new.len() as u64) as usize;
                        let doc = new[at].doc_id[4..].parse().unwrap();
                        new[at] = mention(doc, &mut next);
                    }
                }
            }
            new.sort_by(|a, b| a.doc_id.cmp(&b.doc_id));
            new.dedup_by(|a, b| a.doc_id == b.doc_id);
            let (whole, work, replay_work) = again(&old, &last, &new);
            whole_work += work;
            replayed_work += replay_work;
            rounds += whole.rows.len();
        }
        assert!(rounds > 400, "names split into several entities: {rounds}");
        assert!(
            replayed_work < whole_work,
            "resolving again costs less: {replayed_work} of {whole_work}"
        );
        // A name of 4,000 mentions, one of them edited (not its first): a
        // few of its batches are compared and asked again.
        let mut old: Vec<DocEntity> = (0..4_000).map(|d| mention(d, &mut next)).collect();
        old.sort_by(|a, b| a.doc_id.cmp(&b.doc_id));
        let (last, _) = resolve(&old, None);
        let mut new = old.clone();
        new[2_500] = mention(new[2_500].doc_id[4..].parse().unwrap(), &mut next);
        let (_, work, replay_work) = again(&old, &last, &new);
        assert!(
            replay_work * 10 < work,
            "one edit of a large name: {replay_work} of {work}"
        );
    }

    /// Descriptions are kept side by side, duplicates dropped, while they fit
    /// the budget: no call. Past it, the next budget's worth is folded into
    /// what is kept by one merge call, and the rest is not read.
    #[test]
    fn descriptions_are_merged_only_past_the_budget() {
        let items = |descriptions: &[&str]| -> Vec<(Arc<str>, String)> {
            descriptions
                .iter()
                .map(|d| (Arc::from("evidence"), d.to_string()))
                .collect()
        };
        let found = items(&[
            "Ada founded the Harbour press.",
            "Ada  founded the Harbour press.",
            "Ada sold the press in 1901.",
            "Ada wrote about the press.",
        ]);
        let merge = |budget: usize| {
            let model = FirstSentence::default();
            let cx = CallContext::corpus(STAGE);
            let merged = futures::executor::block_on(merge_descriptions(
                &model,
                &cx,
                || Arc::from("summary"),
                found.clone(),
                Arc::clone,
                budget,
            ))
            .expect("the stub answers");
            (merged, model.merges())
        };
        let (joined, calls) = merge(100);
        assert_eq!(
            joined,
            "Ada founded the Harbour press.\nAda sold the press in 1901.\nAda wrote about the press."
        );
        assert_eq!(calls, 0);
        // Each description is 7 or 8 tokens: two fit in 16, the third does not.
        let (folded, calls) = merge(16);
        assert_eq!(calls, 1);
        assert_eq!(
            folded,
            "Ada founded the Harbour press.\nAda sold the press in 1901."
        );
        // However many do not fit, a pair is merged once: the first description
        // with the second, the third not read.
        assert_eq!(merge(1).1, 1);
    }

    /// Vectors settle what they can: above the band the mentions are one
    /// entity and below it apart, without a call; inside it the model decides.
    #[test]
    fn the_model_is_asked_only_inside_the_band() {
        let mentions: Vec<DocEntity> = [("a", "pears"), ("b", "plums"), ("c", "figs")]
            .iter()
            .map(|(doc, fruit)| {
                let texts = [format!("Apple grew beside {fruit}. Apple was sold.")];
                let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
                let model = FirstSentence::default();
                let (entities, _) = graph(doc, &texts, &model);
                entities.into_iter().find(|e| e.key == "apple").unwrap()
            })
            .collect();
        let embedder = HashingEmbedder::new(256);
        let resolve = |config: GraphConfig| {
            let model = FirstSentence::separating(&["Apple"]);
            let resolved = futures::executor::block_on(resolve_entities(
                &mentions, None, &model, &embedder, &config,
            ))
            .expect("answers");
            (resolved.rows.len(), model.compared())
        };
        let near = GraphConfig {
            same_above: -1.0,
            apart_below: -1.0,
            ..GraphConfig::DEFAULT
        };
        assert_eq!(resolve(near), (1, 0), "near vectors merge without a call");
        let far = GraphConfig {
            same_above: 1.0,
            apart_below: 1.0,
            ..GraphConfig::DEFAULT
        };
        assert_eq!(
            resolve(far),
            (3, 0),
            "far vectors stay apart without a call"
        );
        // Inside the band the separating model is asked: first about b and c
        // against a, then about c against b.
        assert_eq!(resolve(ASK_ALWAYS), (3, 3));
    }
}
