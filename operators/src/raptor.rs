//! The RAPTOR / ILM-TR tree: chunks summarised with their surprising facts
//! (ILM-TR), embedded, reduced, clustered with Gaussian mixtures (BIC picks k,
//! soft membership), each cluster summarised the same way, level by level up to
//! one root.

use crate::config::BuildConfigError;
use memweave_schemas::{Segment, TREE_RAPTOR, TREE_RAPTOR_CORPUS, TreeNodeRow, content_id};
use serde::{Deserialize, Serialize};

use crate::embed::{Embedder, embed_all};
use crate::mixture::{MixtureConfig, Points, cluster};
use crate::model::{CallContext, FactSummary, MemoryModel, StepResult, all_in_order};
use crate::reduce::principal_components;
use crate::tokens::count_tokens;
use crate::tree::corpus_subject;

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RaptorConfig {
    /// Chunk size in tokens (RAPTOR: 100, ILM-TR: 600); `None`, or the MemWalker
    /// segment size, makes the chunks the segments, and then one ILM-TR call
    /// per segment summarises it for both trees.
    pub chunk_tokens: Option<usize>,
    /// Most levels above the chunks; the last level is one cluster, the root
    /// (RAPTOR builds 5 layers).
    pub max_levels: u32,
    /// A cluster whose members' texts total more tokens than this is clustered
    /// again on its own (RAPTOR's max_length_in_cluster).
    pub cluster_max_tokens: usize,
    /// Dimensions the vectors are reduced to before clustering (RAPTOR: 10).
    pub reduced_dim: usize,
    /// Most clusters BIC may choose per level (RAPTOR: 50).
    pub max_clusters: usize,
    /// A node belongs to every cluster whose posterior exceeds this (RAPTOR: 0.1).
    pub threshold: f64,
}

impl RaptorConfig {
    pub const DEFAULT: RaptorConfig = RaptorConfig {
        chunk_tokens: None,
        max_levels: 5,
        cluster_max_tokens: 3500,
        reduced_dim: 10,
        max_clusters: 50,
        threshold: 0.1,
    };

    pub fn validate(&self) -> Result<(), BuildConfigError> {
        if self.chunk_tokens == Some(0) {
            return Err(BuildConfigError::EmptyChunks);
        }
        if self.max_levels == 0 {
            return Err(BuildConfigError::NoRaptorLevel);
        }
        if self.reduced_dim == 0 || self.max_clusters == 0 {
            return Err(BuildConfigError::NoClustering);
        }
        if !(self.threshold > 0.0 && self.threshold < 1.0) {
            return Err(BuildConfigError::MembershipThreshold(self.threshold));
        }
        Ok(())
    }

    fn mixture(&self) -> MixtureConfig {
        MixtureConfig {
            max_components: self.max_clusters,
            threshold: self.threshold,
            ..MixtureConfig::default()
        }
    }
}

impl Default for RaptorConfig {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// A node of the tree and the vector of its text.
#[derive(Debug, Clone, PartialEq)]
pub struct RaptorNode {
    pub row: TreeNodeRow,
    pub vector: Vec<f32>,
}

/// What a node says, as its parent's summary and the embedder read it: the
/// summary, then the surprising facts.
pub fn node_text(row: &TreeNodeRow) -> String {
    summary_text(row.text(), row.surprise.as_deref())
}

/// [`node_text`] of a node's `summary` and `surprise`.
pub fn summary_text(summary: &str, surprise: Option<&str>) -> String {
    match surprise {
        Some(surprise) => format!("{summary}\n{surprise}"),
        None => summary.to_string(),
    }
}

/// The id of the RAPTOR leaf of document `doc_id`'s chunk `seg_id`.
pub fn leaf_id(doc_id: &str, seg_id: &str) -> String {
    content_id(
        "node",
        &[
            TREE_RAPTOR.as_bytes(),
            doc_id.as_bytes(),
            b"leaf",
            seg_id.as_bytes(),
        ],
    )
}

/// The id of the corpus RAPTOR tree's leaf over document root `root_id`.
pub fn corpus_leaf_id(root_id: &str) -> String {
    content_id(
        "node",
        &[TREE_RAPTOR_CORPUS.as_bytes(), b"leaf", root_id.as_bytes()],
    )
}

/// The RAPTOR tree of one document over its chunks (in order); a chunk under
/// `own_summary_below` tokens is its own summary, with no surprise.
pub async fn raptor_tree(
    doc_id: &str,
    chunks: &[Segment],
    own_summary_below: usize,
    model: &dyn MemoryModel,
    embedder: &dyn Embedder,
    config: &RaptorConfig,
) -> StepResult<Vec<RaptorNode>> {
    let cx = CallContext::build(TREE_RAPTOR, doc_id);
    let facts = all_in_order(chunks.iter().map(|c| {
        let cx = &cx;
        async move {
            if (c.n_tokens as usize) < own_summary_below {
                return Ok(FactSummary {
                    summary: c.text.clone(),
                    surprise: String::new(),
                });
            }
            model.summarize_with_facts(cx, &c.text).await
        }
    }))
    .await?;
    let leaves: Vec<TreeNodeRow> = chunks
        .iter()
        .zip(facts)
        .enumerate()
        .map(|(ordinal, (chunk, facts))| {
            let id = leaf_id(doc_id, &chunk.seg_id);
            let mut row = node_row(id, TREE_RAPTOR, Some(doc_id), 0, ordinal, Vec::new(), facts);
            row.seg_id = Some(chunk.seg_id.clone());
            row
        })
        .collect();
    // A leaf is embedded from its chunk, as RAPTOR embeds its leaves: the
    // whole text, not the summary of it, so a fact the summary left out can
    // still be found near the question.
    let texts: Vec<String> = chunks.iter().map(|c| c.text.clone()).collect();
    let leaves = with_vectors(leaves, texts, embedder, &cx).await?;
    build_levels(
        leaves,
        TREE_RAPTOR,
        Some(doc_id),
        &cx,
        model,
        embedder,
        config,
    )
    .await
}

/// The RAPTOR tree over a corpus: one leaf per document root (`roots`, in
/// doc_id order, with their vectors), whose only child is that root, clustered
/// up to one corpus root, so a question can find the documents that answer it.
pub async fn raptor_corpus_tree(
    roots: &[RaptorNode],
    model: &dyn MemoryModel,
    embedder: &dyn Embedder,
    config: &RaptorConfig,
) -> StepResult<Vec<RaptorNode>> {
    let acl = roots.first().map_or(&[][..], |root| &root.row.acl);
    let cx = CallContext::corpus(TREE_RAPTOR).about(corpus_subject(TREE_RAPTOR_CORPUS, acl));
    let leaves = roots
        .iter()
        .enumerate()
        .map(|(ordinal, root)| {
            let id = corpus_leaf_id(&root.row.node_id);
            let row = TreeNodeRow {
                node_id: id,
                tree: TREE_RAPTOR_CORPUS.to_string(),
                doc_id: root.row.doc_id.clone(),
                level: 0,
                ordinal: ordinal as u32,
                parent_id: None,
                child_ids: vec![root.row.node_id.clone()],
                ..root.row.clone()
            }
            .with_terms();
            RaptorNode {
                row,
                vector: root.vector.clone(),
            }
        })
        .collect();
    build_levels(
        leaves,
        TREE_RAPTOR_CORPUS,
        None,
        &cx,
        model,
        embedder,
        config,
    )
    .await
}

/// Levels above `level` until one node is left: cluster, summarise each
/// cluster, embed the summaries.
async fn build_levels(
    mut level: Vec<RaptorNode>,
    tree: &str,
    doc_id: Option<&str>,
    cx: &CallContext,
    model: &dyn MemoryModel,
    embedder: &dyn Embedder,
    config: &RaptorConfig,
) -> StepResult<Vec<RaptorNode>> {
    let mut done = Vec::new();
    let mut depth = 0;
    while level.len() > 1 {
        depth += 1;
        let everything = || vec![(0..level.len()).collect::<Vec<usize>>()];
        let clusters = if depth >= config.max_levels {
            everything()
        } else {
            let clusters = clusters_of(&level, config);
            // Clusters that do not shrink the level would never reach a root.
            if clusters.len() >= level.len() {
                everything()
            } else {
                clusters
            }
        };
        let texts: Vec<String> = clusters
            .iter()
            .map(|members| {
                members
                    .iter()
                    .map(|&m| node_text(&level[m].row))
                    .collect::<Vec<_>>()
                    .join("\n\n")
            })
            .collect();
        let chained = cx.chained(texts.iter().map(|t| t.len() as u32 / 1024).sum());
        let facts = all_in_order(
            texts
                .iter()
                .map(|t| model.summarize_with_facts(&chained, t)),
        )
        .await?;
        let parents: Vec<TreeNodeRow> = clusters
            .iter()
            .zip(facts)
            .enumerate()
            .map(|(ordinal, (members, facts))| {
                let child_ids: Vec<String> = members
                    .iter()
                    .map(|&m| level[m].row.node_id.clone())
                    .collect();
                let mut parts: Vec<&[u8]> =
                    vec![tree.as_bytes(), doc_id.unwrap_or_default().as_bytes()];
                parts.extend(child_ids.iter().map(|id| id.as_bytes()));
                let id = content_id("node", &parts);
                node_row(id, tree, doc_id, depth, ordinal, child_ids, facts)
            })
            .collect();
        // A node in several clusters is a child of each; its parent_id names the
        // first, so walking up from any node still ends at the one root.
        for (parent, members) in parents.iter().zip(&clusters) {
            for &m in members {
                level[m]
                    .row
                    .parent_id
                    .get_or_insert_with(|| parent.node_id.clone());
            }
        }
        done.append(&mut level);
        let texts = parents.iter().map(node_text).collect();
        level = with_vectors(parents, texts, embedder, cx).await?;
    }
    done.append(&mut level);
    Ok(done)
}

/// `rows` with the vectors of `texts` (one per row).
async fn with_vectors(
    rows: Vec<TreeNodeRow>,
    texts: Vec<String>,
    embedder: &dyn Embedder,
    cx: &CallContext,
) -> StepResult<Vec<RaptorNode>> {
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let vectors = embed_all(embedder, cx, &refs).await?;
    Ok(rows
        .into_iter()
        .zip(vectors)
        .map(|(row, vector)| RaptorNode { row, vector })
        .collect())
}

fn node_row(
    node_id: String,
    tree: &str,
    doc_id: Option<&str>,
    level: u32,
    ordinal: usize,
    child_ids: Vec<String>,
    facts: FactSummary,
) -> TreeNodeRow {
    let surprise = (!facts.surprise.is_empty()).then_some(facts.surprise);
    let mut row = TreeNodeRow {
        node_id,
        tree: tree.to_string(),
        doc_id: doc_id.map(str::to_string),
        level,
        ordinal: ordinal as u32,
        parent_id: None,
        child_ids,
        seg_id: None,
        summary: Some(facts.summary),
        surprise,
        n_tokens: 0,
        terms: String::new(),
        acl: Vec::new(),
    }
    .with_terms();
    row.n_tokens = count_tokens(&node_text(&row)) as u32;
    row
}

/// The clusters of a level, as lists of member indices (in order), ordered by
/// their first member; a node may be in several.
pub fn clusters_of(level: &[RaptorNode], config: &RaptorConfig) -> Vec<Vec<usize>> {
    let all: Vec<usize> = (0..level.len()).collect();
    let mut clusters = cluster_members(level, &all, config);
    clusters.sort();
    clusters.dedup();
    clusters
}

/// RAPTOR's clustering of `members`: reduce, fit mixtures, keep every cluster a
/// member's posterior passes the threshold for; a cluster over the token budget
/// is clustered again on its own.
fn cluster_members(
    level: &[RaptorNode],
    members: &[usize],
    config: &RaptorConfig,
) -> Vec<Vec<usize>> {
    // Too few points to fit even one full-covariance component in the reduced space.
    if members.len() <= config.reduced_dim + 1 {
        return vec![members.to_vec()];
    }
    let dim = level[members[0]].vector.len();
    let values: Vec<f64> = members
        .iter()
        .flat_map(|&m| level[m].vector.iter().map(|&v| f64::from(v)))
        .collect();
    let reduced = principal_components(&Points::new(values, dim), config.reduced_dim);
    let clustering = cluster(&reduced, &config.mixture());
    let mut clusters = vec![Vec::new(); clustering.components];
    for (point, memberships) in clustering.memberships.iter().enumerate() {
        for &c in memberships {
            clusters[c].push(members[point]);
        }
    }
    clusters.retain(|c| !c.is_empty());
    if clusters.len() <= 1 {
        return vec![members.to_vec()];
    }
    clusters
        .into_iter()
        .flat_map(|c| {
            let tokens: usize = c.iter().map(|&m| level[m].row.n_tokens as usize).sum();
            if tokens > config.cluster_max_tokens && c.len() > 1 {
                cluster_members(level, &c, config)
            } else {
                vec![c]
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::{HashMap, HashSet};

    use super::*;
    use crate::embed::HashingEmbedder;
    use crate::testing::FirstSentence;
    use memweave_schemas::SegmentRow;

    fn chunks(n: usize) -> Vec<Segment> {
        let topics = [
            "harbours and ships",
            "violins and music",
            "bread and ovens",
            "stars and telescopes",
        ];
        (0..n)
            .map(|i| {
                let topic = topics[i % topics.len()];
                let text = format!(
                    "Chunk {i} talks about {topic}. More on {topic} follows here, {topic} again. The end of chunk {i}."
                );
                let row = SegmentRow {
                    seg_id: format!("s{i}"),
                    doc_id: "d".into(),
                    ordinal: i as u32,
                    start_char: 0,
                    end_char: 1,
                    n_tokens: count_tokens(&text) as u32,
                    target_tokens: 100,
                    terms: String::new(),
                    acl: Vec::new(),
                };
                Segment::new(row, text)
            })
            .collect()
    }

    fn tree(n: usize, config: &RaptorConfig) -> Vec<RaptorNode> {
        futures::executor::block_on(raptor_tree(
            "d",
            &chunks(n),
            0,
            &FirstSentence::default(),
            &HashingEmbedder::new(64),
            config,
        ))
        .expect("the stub answers")
    }

    /// One root, every parent link and child id resolves, no cycles, every
    /// child's parent lists it.
    fn assert_one_rooted_tree(nodes: &[RaptorNode]) {
        let by_id: HashMap<&str, &TreeNodeRow> = nodes
            .iter()
            .map(|n| (n.row.node_id.as_str(), &n.row))
            .collect();
        assert_eq!(by_id.len(), nodes.len(), "node ids are unique");
        let roots: Vec<_> = nodes.iter().filter(|n| n.row.parent_id.is_none()).collect();
        assert_eq!(roots.len(), 1);
        for node in nodes {
            for child in &node.row.child_ids {
                assert!(by_id[child.as_str()].level < node.row.level);
            }
            let mut seen = HashSet::new();
            let mut at = &node.row;
            while let Some(parent) = &at.parent_id {
                assert!(seen.insert(parent.clone()), "a cycle through {parent}");
                let up = by_id[parent.as_str()];
                assert!(up.child_ids.contains(&at.node_id));
                at = up;
            }
        }
    }

    #[test]
    fn a_few_chunks_make_one_cluster_under_one_root() {
        let nodes = tree(5, &RaptorConfig::DEFAULT);
        assert_eq!(nodes.len(), 6);
        assert_one_rooted_tree(&nodes);
        let root = &nodes[5].row;
        assert_eq!((root.level, root.child_ids.len()), (1, 5));
        assert!(
            nodes[..5]
                .iter()
                .all(|n| n.row.seg_id.is_some() && n.vector.len() == 64)
        );
    }

    #[test]
    fn many_chunks_cluster_by_topic_level_by_level() {
        let config = RaptorConfig {
            reduced_dim: 3,
            cluster_max_tokens: 200,
            ..RaptorConfig::DEFAULT
        };
        let nodes = tree(48, &config);
        assert_one_rooted_tree(&nodes);
        let level1: Vec<&TreeNodeRow> = nodes
            .iter()
            .map(|n| &n.row)
            .filter(|r| r.level == 1)
            .collect();
        assert!(
            level1.len() > 1 && level1.len() < 48,
            "{} clusters",
            level1.len()
        );
        // The chunks of one topic share words, so a cluster is mostly one topic.
        let topic = |id: &str| {
            id.trim_start_matches('s')
                .parse::<usize>()
                .ok()
                .map(|i| i % 4)
        };
        let seg_of: HashMap<&str, &str> = nodes
            .iter()
            .filter_map(|n| Some((n.row.node_id.as_str(), n.row.seg_id.as_deref()?)))
            .collect();
        let pure = level1
            .iter()
            .filter(|c| {
                let topics: HashSet<_> = c
                    .child_ids
                    .iter()
                    .map(|id| topic(seg_of[id.as_str()]))
                    .collect();
                topics.len() == 1
            })
            .count();
        assert!(
            pure * 2 >= level1.len(),
            "{pure} of {} clusters hold one topic",
            level1.len()
        );
        // Same input, same tree.
        assert_eq!(tree(48, &config), nodes);
    }

    #[test]
    fn the_level_limit_ends_in_one_root() {
        let config = RaptorConfig {
            reduced_dim: 3,
            cluster_max_tokens: 60,
            max_levels: 2,
            ..RaptorConfig::DEFAULT
        };
        let nodes = tree(40, &config);
        assert_one_rooted_tree(&nodes);
        assert!(nodes.iter().all(|n| n.row.level <= 2));
    }
}
