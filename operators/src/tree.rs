//! MemWalker summary trees: leaves summarise segments, parents summarise at most
//! `max_children` children, up to one root per document.
//!
//! Children are grouped by content-defined breaks (a draw from the child's id), so a
//! changed leaf changes one group and its ancestors, not every group after it.

use memweave_schemas::ids::content_draw;
use memweave_schemas::{
    Segment, TREE_MEMWALKER, TREE_MEMWALKER_CORPUS, TREE_RAPTOR, TreeNodeRow, content_id,
};

use crate::model::{CallContext, MemoryModel, StepResult, all_in_order};
use crate::tokens::count_tokens;

/// MemWalker's Mt: the most children a node may have.
pub const DEFAULT_MAX_CHILDREN: usize = 8;

/// Smallest group a break may close, so trees do not degenerate into chains.
const MIN_GROUP: usize = 2;
/// Chance that a group closes after a child once it has `MIN_GROUP` children.
const BREAK_PROBABILITY: f64 = 0.3;

/// Splits `ids` (the children of one level, in order) into consecutive groups of at
/// most `max_children`; returns each group's length.
pub fn group_sizes(ids: &[String], max_children: usize) -> Vec<usize> {
    let max_children = max_children.max(MIN_GROUP);
    if ids.len() <= max_children {
        return vec![ids.len()];
    }
    let mut sizes = Vec::new();
    let mut current = 0;
    for id in ids {
        current += 1;
        let closes = current >= max_children
            || (current >= MIN_GROUP && content_draw(id.as_bytes()) < BREAK_PROBABILITY);
        if closes {
            sizes.push(current);
            current = 0;
        }
    }
    if current > 0 {
        match sizes.last_mut() {
            // A lone trailing child joins the group before it when there is room.
            Some(last) if current == 1 && *last < max_children => *last += 1,
            _ => sizes.push(current),
        }
    }
    sizes
}

/// Longest parent summary, in tokens, kept as the plain concatenation of its
/// children's summaries; a longer concatenation is compressed by the model
/// (MemWalker's "predetermined length").
pub const DEFAULT_PARENT_MAX_TOKENS: usize = 600;

/// Which call summarises a MemWalker leaf.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeafSummaries {
    /// MemWalker's own prompt.
    Own,
    /// The summary part of ILM-TR's call over the same segment, asked in the
    /// RAPTOR tree's name: when the RAPTOR chunks are the segments, one call
    /// reads each segment for both trees (the call cache makes the two asks
    /// one), rather than two calls reading the same text.
    SharedWithRaptor,
}

/// The MemWalker tree of one document over its segments (in order). Leaves are
/// summarised concurrently (a segment under `own_summary_below` tokens is its
/// own summary), then each level's parents concurrently.
pub async fn memwalker_tree(
    doc_id: &str,
    segments: &[Segment],
    model: &dyn MemoryModel,
    leaves: LeafSummaries,
    own_summary_below: usize,
    max_children: usize,
    parent_max_tokens: usize,
) -> StepResult<Vec<TreeNodeRow>> {
    let cx = CallContext::build(TREE_MEMWALKER, doc_id);
    let raptor = CallContext::build(TREE_RAPTOR, doc_id);
    let summaries = all_in_order(segments.iter().map(|s| {
        let (cx, raptor) = (&cx, &raptor);
        async move {
            if (s.n_tokens as usize) < own_summary_below {
                return Ok(s.text.clone());
            }
            match leaves {
                LeafSummaries::Own => model.summarize_segment(cx, &s.text).await,
                LeafSummaries::SharedWithRaptor => {
                    Ok(model.summarize_with_facts(raptor, &s.text).await?.summary)
                }
            }
        }
    }))
    .await?;
    let level: Vec<TreeNodeRow> = segments
        .iter()
        .zip(summaries)
        .enumerate()
        .map(|(ordinal, (segment, summary))| {
            TreeNodeRow {
                node_id: content_id(
                    "node",
                    &[
                        TREE_MEMWALKER.as_bytes(),
                        doc_id.as_bytes(),
                        b"leaf",
                        segment.seg_id.as_bytes(),
                    ],
                ),
                tree: TREE_MEMWALKER.to_string(),
                doc_id: Some(doc_id.to_string()),
                level: 0,
                ordinal: ordinal as u32,
                parent_id: None,
                child_ids: Vec::new(),
                seg_id: Some(segment.seg_id.clone()),
                n_tokens: count_tokens(&summary) as u32,
                summary: Some(summary),
                surprise: None,
                terms: String::new(),
                acl: Vec::new(),
            }
            .with_terms()
        })
        .collect();
    build_levels(
        level,
        TREE_MEMWALKER,
        Some(doc_id),
        &cx,
        model,
        max_children,
        parent_max_tokens,
    )
    .await
}

/// The MemWalker tree over a corpus: one leaf per document root (`roots`, in
/// doc_id order), whose only child is that root, and parents above them up to one
/// corpus root; a question can then choose its document from the top, as in a
/// document's own tree.
pub async fn corpus_tree(
    roots: &[TreeNodeRow],
    model: &dyn MemoryModel,
    max_children: usize,
    parent_max_tokens: usize,
) -> StepResult<Vec<TreeNodeRow>> {
    let acl = roots.first().map_or(&[][..], |root| &root.acl);
    let cx = CallContext::corpus(TREE_MEMWALKER).about(corpus_subject(TREE_MEMWALKER_CORPUS, acl));
    let leaves = roots
        .iter()
        .enumerate()
        .map(|(ordinal, root)| {
            TreeNodeRow {
                node_id: content_id(
                    "node",
                    &[
                        TREE_MEMWALKER_CORPUS.as_bytes(),
                        b"leaf",
                        root.node_id.as_bytes(),
                    ],
                ),
                tree: TREE_MEMWALKER_CORPUS.to_string(),
                doc_id: root.doc_id.clone(),
                level: 0,
                ordinal: ordinal as u32,
                parent_id: None,
                child_ids: vec![root.node_id.clone()],
                seg_id: None,
                summary: Some(root.text().to_string()),
                n_tokens: root.n_tokens,
                surprise: None,
                terms: String::new(),
                acl: Vec::new(),
            }
            .with_terms()
        })
        .collect();
    build_levels(
        leaves,
        TREE_MEMWALKER_CORPUS,
        None,
        &cx,
        model,
        max_children,
        parent_max_tokens,
    )
    .await
}

/// What the calls of the corpus `tree` over documents labelled `acl` are
/// about: the tree, and its label set where it has one, so that the calls
/// of one set's tree are not taken for dead when another's is rebuilt
/// (the call cache evicts by subject).
pub(crate) fn corpus_subject(tree: &str, acl: &[String]) -> String {
    if acl.is_empty() {
        tree.to_string()
    } else {
        format!("{tree} {}", acl.join(","))
    }
}

/// Parents over `level` (one tree's nodes in order), level by level, until one
/// root is left; returns every node of the tree.
async fn build_levels(
    mut level: Vec<TreeNodeRow>,
    tree: &str,
    doc_id: Option<&str>,
    cx: &CallContext,
    model: &dyn MemoryModel,
    max_children: usize,
    parent_max_tokens: usize,
) -> StepResult<Vec<TreeNodeRow>> {
    let mut nodes: Vec<TreeNodeRow> = Vec::new();
    let mut depth = 0u32;
    while level.len() > 1 {
        depth += 1;
        let ids: Vec<String> = level.iter().map(|n| n.node_id.clone()).collect();
        let mut groups = Vec::new();
        let mut offset = 0;
        for size in group_sizes(&ids, max_children) {
            groups.push(offset..offset + size);
            offset += size;
        }
        let summaries = all_in_order(groups.iter().map(|range| {
            let children: Vec<&str> = level[range.clone()].iter().map(TreeNodeRow::text).collect();
            parent_summary(model, cx, children, parent_max_tokens)
        }))
        .await?;
        let mut parents = Vec::new();
        for (ordinal, (range, summary)) in groups.into_iter().zip(summaries).enumerate() {
            let children = &mut level[range];
            let child_ids: Vec<String> = children.iter().map(|c| c.node_id.clone()).collect();
            let mut parts: Vec<&[u8]> =
                vec![tree.as_bytes(), doc_id.unwrap_or_default().as_bytes()];
            parts.extend(child_ids.iter().map(|id| id.as_bytes()));
            let node_id = content_id("node", &parts);
            for child in children.iter_mut() {
                child.parent_id = Some(node_id.clone());
            }
            parents.push(
                TreeNodeRow {
                    node_id,
                    tree: tree.to_string(),
                    doc_id: doc_id.map(str::to_string),
                    level: depth,
                    ordinal: ordinal as u32,
                    parent_id: None,
                    child_ids,
                    seg_id: None,
                    n_tokens: count_tokens(&summary) as u32,
                    summary: Some(summary),
                    surprise: None,
                    terms: String::new(),
                    acl: Vec::new(),
                }
                .with_terms(),
            );
        }
        nodes.append(&mut level);
        level = parents;
    }
    nodes.append(&mut level);
    Ok(nodes)
}

/// MemWalker's parent: the children's summaries concatenated, compressed by the
/// model only when the concatenation is over `max_tokens`.
async fn parent_summary(
    model: &dyn MemoryModel,
    cx: &CallContext,
    children: Vec<&str>,
    max_tokens: usize,
) -> StepResult<String> {
    let joined = children.join("\n\n");
    if count_tokens(&joined) <= max_tokens {
        return Ok(joined);
    }
    model.compress_summaries(&cx.chained(0), &children).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::FirstSentence;
    use memweave_schemas::SegmentRow;

    fn ids(n: usize, tag: &str) -> Vec<String> {
        (0..n)
            .map(|i| content_id("t", &[tag.as_bytes(), &i.to_le_bytes()]))
            .collect()
    }

    #[test]
    fn groups_cover_all_children_within_bounds() {
        for n in [1, 2, 8, 9, 17, 100, 1000] {
            let sizes = group_sizes(&ids(n, "a"), 8);
            assert_eq!(sizes.iter().sum::<usize>(), n);
            assert!(sizes.iter().all(|&s| (1..=8).contains(&s)), "{sizes:?}");
            if n > 8 {
                assert!(sizes.iter().all(|&s| s >= 2), "{sizes:?}");
            }
        }
    }

    #[test]
    fn changing_one_child_changes_at_most_two_groups() {
        let old = ids(300, "a");
        let mut new = old.clone();
        new[150] = "changed".to_string();
        let groups = |ids: &[String]| {
            let mut out = Vec::new();
            let mut offset = 0;
            for size in group_sizes(ids, 8) {
                out.push(ids[offset..offset + size].to_vec());
                offset += size;
            }
            out
        };
        let before = groups(&old);
        let after = groups(&new);
        let changed = after.iter().filter(|g| !before.contains(g)).count();
        assert!(changed <= 2, "{changed} groups changed");
    }

    fn segments(n: usize) -> Vec<Segment> {
        (0..n)
            .map(|i| {
                let row = SegmentRow {
                    seg_id: format!("s{i:03}"),
                    doc_id: "d".into(),
                    ordinal: i as u32,
                    start_char: i as u64 * 10,
                    end_char: i as u64 * 10 + 10,
                    n_tokens: 12,
                    target_tokens: 1000,
                    terms: String::new(),
                    acl: Vec::new(),
                };
                let text = format!(
                    "Segment {i} is about topic {}. It has two sentences.",
                    i % 5
                );
                Segment::new(row, text)
            })
            .collect()
    }

    fn tree(n: usize, parent_max_tokens: usize) -> Vec<TreeNodeRow> {
        futures::executor::block_on(memwalker_tree(
            "d",
            &segments(n),
            &FirstSentence::default(),
            LeafSummaries::Own,
            0,
            8,
            parent_max_tokens,
        ))
        .expect("the stub model always answers")
    }

    #[test]
    fn one_root_and_consistent_parent_links() {
        let nodes = tree(40, DEFAULT_PARENT_MAX_TOKENS);
        let roots: Vec<_> = nodes.iter().filter(|n| n.parent_id.is_none()).collect();
        assert_eq!(roots.len(), 1);
        assert_eq!(nodes.iter().filter(|n| n.level == 0).count(), 40);
        for node in &nodes {
            if let Some(parent) = &node.parent_id {
                let parent = nodes.iter().find(|n| &n.node_id == parent).unwrap();
                assert!(parent.child_ids.contains(&node.node_id));
                assert_eq!(parent.level, node.level + 1);
            }
            assert!(node.child_ids.len() <= 8);
        }
    }

    #[test]
    fn a_single_segment_is_its_own_root() {
        let nodes = tree(1, DEFAULT_PARENT_MAX_TOKENS);
        assert_eq!(nodes.len(), 1);
        assert!(nodes[0].parent_id.is_none());
        assert_eq!(nodes[0].seg_id.as_deref(), Some("s000"));
    }

    #[test]
    fn parents_concatenate_until_too_long_then_compress() {
        let short = tree(3, 10_000);
        let root = short
            .iter()
            .find(|n| n.parent_id.is_none())
            .expect("a root");
        let leaves: Vec<&str> = short
            .iter()
            .filter(|n| n.level == 0)
            .map(TreeNodeRow::text)
            .collect();
        assert_eq!(root.text(), leaves.join("\n\n"));
        let compressed = tree(3, 5);
        let root = compressed
            .iter()
            .find(|n| n.parent_id.is_none())
            .expect("a root");
        assert!(root.text().starts_with("compressed:"), "{}", root.text());
    }
}
