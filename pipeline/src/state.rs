//! What the cross-document stages hold, kept in the tables so that a new
//! process restores it instead of rebuilding every document.
//!
//! Every input of those stages (entity resolution, relation merging, the
//! corpus trees) is a per-document output of `build_document`: the document's
//! entity mentions and relations, and its trees' roots. Each document's are
//! written as its `doc_states` row, in the same commit as its other rows, so a
//! checkpoint names them, time travel reads them and a stopped run's are rolled
//! back with the rest. A new process feeds every row at its first round's
//! restore time (see [`crate::dataflow`]): the stages' arrangements become what
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
use memweave_operators::graph::{DocEntity, DocRelation, StoredEntities};
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
/// description, all of them its id and its segments' ids: repeated in every
/// record, they were most of a state's bytes.
#[derive(Debug, Default, Serialize, Deserialize)]
struct KeptState {
    texts: Vec<String>,
    entities: Vec<KeptEntity>,
    relations: Vec<KeptRelation>,
    memwalker_roots: Vec<TreeNodeRow>,
    /// Each vector a [`StateVector`].
    #[serde(with = "root_vectors")]
    raptor_roots: Vec<(TreeNodeRow, EmbeddingRow)>,
}

/// A [`DocEntity`], each text its number in [`KeptState::texts`].
#[derive(Debug, Serialize, Deserialize)]
struct KeptEntity {
    key: u32,
    doc_id: u32,
    names: Vec<u32>,
    context: u32,
    document: u32,
    seg_ids: Vec<u32>,
}

/// A [`DocRelation`], each text its number in [`KeptState::texts`].
#[derive(Debug, Serialize, Deserialize)]
struct KeptRelation {
    doc_id: u32,
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
    use memweave_schemas::{EmbeddingRow, TreeNodeRow};
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
                Ok((root, row))
            })
            .collect()
    }
}

/// Numbers texts in the order first seen, borrowing them from the rows the
/// state is made of (a state is made for every document built).
#[derive(Default)]
struct Numbering<'a> {
    numbers: HashMap<&'a str, u32>,
    texts: Vec<&'a str>,
}

impl<'a> Numbering<'a> {
    fn number(&mut self, text: &'a str) -> u32 {
        let texts = &mut self.texts;
        *self.numbers.entry(text).or_insert_with(|| {
            texts.push(text);
            (texts.len() - 1) as u32
        })
    }

    fn numbers(&mut self, texts: &'a [String]) -> Vec<u32> {
        texts.iter().map(|text| self.number(text)).collect()
    }
}

/// A kept state's texts, read back by number.
struct Texts(Vec<Arc<str>>);

impl Texts {
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
    /// The state `rows` (one document's memory) give the cross-document
    /// stages, as that document's row; its roots only where the corpus trees
    /// are built (`corpus_tree`).
    pub fn row(doc_id: &str, build: &str, rows: &[BuiltRow], corpus_tree: bool) -> DocStateRow {
        let mut numbering = Numbering::default();
        let mut kept = KeptState::default();
        for row in rows {
            match row {
                BuiltRow::Entity(e) => kept.entities.push(KeptEntity {
                    key: numbering.number(&e.key),
                    doc_id: numbering.number(&e.doc_id),
                    names: numbering.numbers(&e.names),
                    context: numbering.number(&e.context),
                    document: numbering.number(&e.document),
                    seg_ids: numbering.numbers(&e.seg_ids),
                }),
                BuiltRow::Relation(r) => kept.relations.push(KeptRelation {
                    doc_id: numbering.number(&r.doc_id),
                    source_key: numbering.number(&r.source_key),
                    target_key: numbering.number(&r.target_key),
                    description: numbering.number(&r.description),
                    seg_ids: numbering.numbers(&r.seg_ids),
                    summary: numbering.number(&r.summary),
                    evidence: numbering.number(&r.evidence),
                }),
                BuiltRow::MemWalkerRoot(root) if corpus_tree => {
                    kept.memwalker_roots.push(root.clone());
                }
                BuiltRow::RaptorRoot(root, vector) if corpus_tree => {
                    kept.raptor_roots.push((root.clone(), vector.clone()));
                }
                _ => {}
            }
        }
        kept.texts = numbering.texts.into_iter().map(str::to_string).collect();
        DocStateRow {
            doc_id: doc_id.to_string(),
            build: build.to_string(),
            state: serde_json::to_string(&kept).expect("a document's state serialises"),
        }
    }

    /// The state a row holds.
    pub fn of_row(row: &DocStateRow) -> Result<DocState, serde_json::Error> {
        let kept: KeptState = serde_json::from_str(&row.state)?;
        DocState::of_kept(kept).map_err(serde::de::Error::custom)
    }

    fn of_kept(kept: KeptState) -> Result<DocState, String> {
        let texts = Texts(kept.texts.into_iter().map(Arc::from).collect());
        let entities = (kept.entities.iter())
            .map(|e| {
                Ok(DocEntity {
                    key: texts.text(e.key)?,
                    doc_id: texts.text(e.doc_id)?,
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
                    doc_id: texts.text(r.doc_id)?,
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
/// memory row): a memory of another format
/// (older, or newer) restores nothing and is rebuilt.
const STATE_FORMAT: u32 = 7;

/// What makes a document's state: its format, the build's sizes and
/// memories, the kind of model and the embedder. A memory continued with
/// another restores nothing and is rebuilt, as a from-scratch build would be.
pub fn fingerprint(
    config: &BuildConfig,
    model: &dyn MemoryModel,
    embedder: &dyn Embedder,
) -> String {
    let made_by = serde_json::json!({
        "state_format": STATE_FORMAT,
        "build": config,
        "backend": model.backend(),
        "embedder": embedder.model(),
        "width": embedder.dim(),
    });
    format!("{:032x}", hash128(made_by.to_string().as_bytes()))
}

/// An entity of the checkpoint a new process restores from, as much of it as
/// tells which entity each of a name's mentions became (see
/// [`memweave_operators::graph::assignments_from_entities`]): its id, and the
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
    use super::*;

    /// A document's entities share its key words and their sentences, its
    /// relations its summary's head and their segments' heads, all of them
    /// its id and its segments' ids: its row keeps each text once, and reads
    /// back the records whole.
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
        let row = DocState::row("a.txt", "build", &rows, false);
        for text in [&*about, &*summary, &*head, sentence, segment, "a.txt"] {
            assert_eq!(row.state.matches(text).count(), 1, "{}", row.state);
        }
        let state = DocState::of_row(&row).expect("the row reads");
        assert_eq!(state.into_built_rows(), rows);
        // A number with no text is refused, not read as another text.
        let broken = DocStateRow {
            state: row.state.replacen("\"context\":", "\"context\":99", 1),
            ..row
        };
        let error = DocState::of_row(&broken).expect_err("a number past the texts");
        assert!(error.to_string().contains("no text"), "{error}");
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
        };
        let mut components = vec![0.0f32; 1024];
        components[3] = 0.25;
        components[700] = -0.5;
        components[1023] = -0.0;
        components[12] = 1e-3;
        let vector = EmbeddingRow::new("n1", "node", "hashing-weighted-1024", components);
        let rows = vec![BuiltRow::RaptorRoot(root.clone(), vector.clone())];
        let row = DocState::row("a.txt", "build", &rows, true);
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
