//! Retrieval strategies: the BM25 and dense baselines over segments, RAPTOR's
//! collapsed tree (Sarthi et al. 2024) and ILM-TR's inner loop over it (Tang et
//! al. 2024): retrieve with the question and the short-term memory, let the model
//! rewrite the memory, stop when it stops changing.

use std::collections::HashMap;
use std::sync::Arc;

use memweave_operators::tokens::count_tokens;
use memweave_schemas::text::terms;
use memweave_schemas::{SegmentRow, TreeNodeRow};
use serde::{Deserialize, Serialize};

use super::{
    Failure, Models, Navigation, Navigator, Passage, SearchError, Signal, Walked,
    navigator_over_context,
};
use crate::request::{AskRequest, Strategy};
use crate::snapshot::{Document, Probe, Snapshot};

/// Passages the baselines return when a request does not say.
const DEFAULT_TOP_K: usize = 5;
/// RAPTOR nodes the collapsed tree reads first; four times as many each time
/// the budget is not full yet.
const NEAREST_NODES_FIRST: usize = 64;
/// ILM-TR stops when the new memory keeps this share of the last one (longest
/// common subsequence of words).
const CONVERGED: f64 = 0.9;

/// A passage a search found, and its score (BM25, or cosine).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hit {
    #[serde(flatten)]
    pub passage: Passage,
    pub score: f64,
}

/// The passages the baseline `request` names (bm25, or dense) ranks highest
/// for its question, with their scores, in rank order: the ranking of the
/// strategy's answer, without asking the model.
pub async fn search(
    snapshot: &Snapshot,
    request: &AskRequest,
    models: Models<'_>,
) -> Result<Vec<Hit>, SearchError> {
    let mut nav = Navigation::new(snapshot, request, models);
    let ranking = match request.strategy {
        Strategy::Dense => Ranking::Dense,
        _ => Ranking::Bm25,
    };
    if ranking == Ranking::Dense
        && let Some(wrong) = nav.other_embedder()
    {
        return Err(SearchError::OtherEmbedder(wrong));
    }
    let Some(ranked) = Baseline::over(&mut nav, ranking).ranked().await? else {
        return Ok(Vec::new());
    };
    let segments: Vec<Arc<SegmentRow>> = ranked.iter().map(|(s, _)| s.clone()).collect();
    let passages = super::segment_passages(snapshot, &segments).await?;
    Ok(passages
        .into_iter()
        .zip(&ranked)
        .map(|(passage, (_, score))| Hit {
            passage,
            score: *score,
        })
        .collect())
}

/// How a baseline ranks segments: by BM25, or by the cosine of their
/// vectors to the question's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ranking {
    Bm25,
    Dense,
}

/// The baselines: the top segments by their ranking, over the shared context.
pub(super) struct Baseline<'n, 'a> {
    nav: &'n mut Navigation<'a>,
    ranking: Ranking,
}

navigator_over_context!(Baseline);

impl<'n, 'a> Baseline<'n, 'a> {
    pub(super) fn over(nav: &'n mut Navigation<'a>, ranking: Ranking) -> Self {
        Baseline { nav, ranking }
    }
}

impl Navigator for Baseline<'_, '_> {
    async fn navigate(&mut self) -> Walked {
        match self.ranking {
            Ranking::Bm25 => self.bm25().await,
            Ranking::Dense => self.dense().await,
        }
    }
}

impl Baseline<'_, '_> {
    fn top_k(&self) -> usize {
        self.request.options.top_k.unwrap_or(DEFAULT_TOP_K).max(1)
    }

    /// The segments the request's baseline ranks highest, with their scores:
    /// BM25's, or for `dense` those whose vectors (of their own text) are
    /// nearest the question's (none without a question vector).
    async fn ranked(&mut self) -> Walked<Option<Vec<(Arc<SegmentRow>, f64)>>> {
        let ranked = if self.ranking == Ranking::Dense {
            let Some(question) = self.question_vector().await? else {
                return Ok(None);
            };
            self.snapshot
                .nearest_segments(
                    Probe {
                        vector: &question,
                        terms: &self.query,
                    },
                    self.documents(),
                    self.top_k(),
                )
                .await?
        } else {
            self.snapshot
                .passages_by_bm25(&self.query, self.documents(), self.top_k())
                .await?
        };
        Ok(Some(ranked))
    }

    /// Baseline: the segments BM25 ranks highest.
    async fn bm25(&mut self) -> Walked {
        let ranked = self.ranked().await?.unwrap_or_default();
        let passages = self.retrieved(&ranked, Signal::Text).await?;
        self.answer_from(passages, "from the top segments by BM25")
            .await
    }

    /// Baseline: the segments whose vectors are nearest the question's.
    async fn dense(&mut self) -> Walked {
        let Some(ranked) = self.ranked().await? else {
            return Ok(());
        };
        let passages = self.retrieved(&ranked, Signal::Vectors).await?;
        self.answer_from(passages, "from the segments nearest the question")
            .await
    }

    /// Records one retrieval step per ranked segment and returns them as passages.
    async fn retrieved(
        &mut self,
        ranked: &[(Arc<SegmentRow>, f64)],
        signal: Signal,
    ) -> Walked<Vec<Passage>> {
        let segments: Vec<Arc<SegmentRow>> = ranked.iter().map(|(s, _)| s.clone()).collect();
        let mut passages = Vec::new();
        let read = super::segment_passages(self.snapshot, &segments).await?;
        for (rank, (passage, (_, score))) in read.into_iter().zip(ranked).enumerate() {
            let by = match signal {
                Signal::Vectors => "cosine",
                _ => "BM25",
            };
            self.by(signal).record(
                "retrieve",
                &passage.from_id,
                None,
                *score,
                format!("rank {} by {by} in \"{}\"", rank + 1, passage.title),
            );
            passages.push(passage);
        }
        Ok(passages)
    }
}

/// How the collapsed tree is searched: once with the question (RAPTOR), or
/// round by round with a short-term memory (ILM-TR).
#[derive(Debug, Clone, Copy)]
pub(super) enum TreeSearch {
    Raptor,
    Ilmtr,
}

/// RAPTOR and ILM-TR over the collapsed tree, over the shared context.
pub(super) struct CollapsedTree<'n, 'a> {
    nav: &'n mut Navigation<'a>,
    search: TreeSearch,
}

navigator_over_context!(CollapsedTree);

impl<'n, 'a> CollapsedTree<'n, 'a> {
    pub(super) fn over(nav: &'n mut Navigation<'a>, search: TreeSearch) -> Self {
        CollapsedTree { nav, search }
    }
}

impl Navigator for CollapsedTree<'_, '_> {
    async fn navigate(&mut self) -> Walked {
        match self.search {
            TreeSearch::Raptor => self.raptor().await,
            TreeSearch::Ilmtr => self.ilmtr().await,
        }
    }
}

impl CollapsedTree<'_, '_> {
    /// RAPTOR: every node of every allowed tree ranked by similarity to the
    /// question, leaves and summaries alike, taken until the token budget is full.
    async fn raptor(&mut self) -> Walked {
        let Some(question) = self.question_vector().await? else {
            return Ok(());
        };
        let query = self.query.clone();
        let probe = Probe {
            vector: &question,
            terms: &query,
        };
        let passages = self.collapsed_tree(probe, false, "collapsed tree").await?;
        self.answer_from(passages, "from the collapsed tree's nearest nodes")
            .await
    }

    /// ILM-TR: retrieve from the collapsed tree (summaries with their surprising
    /// facts) with the question and the short-term memory, let the model write the
    /// next memory, until it converges or the rounds run out; answer from it.
    async fn ilmtr(&mut self) -> Walked {
        if self.embedder_mismatch() {
            return Ok(());
        }
        let mut memory = String::new();
        let mut passages = Vec::new();
        for round in 1..=self.max_rounds() {
            let probe = if memory.is_empty() {
                self.request.question.clone()
            } else {
                format!("{}\n{memory}", self.request.question)
            };
            let mut vectors = self.embedder().embed(&self.cx, &[probe.as_str()]).await?;
            let Some(vector) = vectors.pop() else { break };
            self.recorder.depth = 0;
            self.record(
                "round",
                "",
                None,
                round as f64,
                format!(
                    "round {round}: retrieve with the question{}",
                    if memory.is_empty() {
                        ""
                    } else {
                        " and the short-term memory"
                    }
                ),
            );
            self.recorder.depth = 1;
            let terms = terms(&probe);
            let probe = Probe {
                vector: &vector,
                terms: &terms,
            };
            passages = self
                .collapsed_tree(probe, true, &format!("round {round}"))
                .await?;
            let retrieved = super::context_of(&passages);
            let next = self
                .model
                .update_memory(&self.cx, &self.request.question, &retrieved, &memory)
                .await?;
            let kept = lcs_share(&memory, &next);
            self.by(Signal::Model).record(
                "update_memory",
                "",
                None,
                kept,
                format!("round {round}: short-term memory is now: {next}"),
            );
            let converged = kept >= CONVERGED;
            memory = next;
            if converged {
                self.record(
                    "converged",
                    "",
                    None,
                    kept,
                    format!("the memory kept {:.0}% of the last one", kept * 100.0),
                );
                break;
            }
        }
        let context = format!("{memory}\n\n{}", super::context_of(&passages));
        self.answer_with_context(context, passages, "from the short-term memory")
            .await
    }

    /// The collapsed tree: RAPTOR nodes of the allowed documents by cosine to
    /// `query`, most similar first, while their text fits the budget. Nodes are
    /// ranked nearest first, a widening batch at a time, and read a few at a
    /// time (each few's rows in one read per table) until one does not fit.
    async fn collapsed_tree(
        &mut self,
        query: Probe<'_>,
        with_facts: bool,
        round: &str,
    ) -> Walked<Vec<Passage>> {
        let mut passages = Vec::new();
        let mut used = 0;
        let mut batch = NEAREST_NODES_FIRST;
        let mut seen = 0;
        loop {
            let near = self
                .snapshot
                .nearest_node_ids(query, self.documents(), batch)
                .await?;
            let exhausted = near.len() < batch;
            for few in near[seen.min(near.len())..].chunks(super::ROWS_READ_TOGETHER) {
                seen += few.len();
                let ranked = self.snapshot.raptor_nodes(few).await?;
                let nodes: Vec<&TreeNodeRow> =
                    ranked.iter().map(|(node, _)| node.as_ref()).collect();
                let read = self.raptor_passages(&nodes, with_facts).await?;
                for ((node, score), passage) in ranked.iter().zip(read) {
                    let Some(passage) = passage else { continue };
                    let tokens = count_tokens(&passage.text);
                    if used + tokens > self.budget() {
                        if passages.is_empty() {
                            continue;
                        }
                        return Ok(passages);
                    }
                    used += tokens;
                    let reasoning = format!(
                        "{round}: {} at level {} ({tokens} tokens, {used} of {} used)",
                        if node.level == 0 { "leaf" } else { "summary" },
                        node.level,
                        self.budget()
                    );
                    self.by(Signal::Vectors).record(
                        "retrieve",
                        &node.node_id,
                        Some(node.level),
                        *score,
                        reasoning,
                    );
                    passages.push(passage);
                }
            }
            if exhausted {
                return Ok(passages);
            }
            batch *= 4;
        }
    }

    /// RAPTOR nodes as passages, in their order: a leaf is its chunk; a summary
    /// (with its surprising facts for ILM-TR) spans the characters of the leaves
    /// under it. The leaves' own segments, the subtrees (a level at a time for
    /// all the nodes) and the documents (each node of a document's tree names
    /// its own) are read at once, then the segments under the summaries in
    /// one read.
    async fn raptor_passages(
        &self,
        rows: &[&TreeNodeRow],
        with_facts: bool,
    ) -> Walked<Vec<Option<Passage>>> {
        let own_ids: Vec<String> = rows.iter().filter_map(|r| r.seg_id.clone()).collect();
        let doc_ids: Vec<String> = rows.iter().filter_map(|r| r.doc_id.clone()).collect();
        let (own, leaves, documents) = futures::try_join!(
            async {
                let own = self.snapshot.rows::<SegmentRow>(&own_ids).await?;
                let texts = self.snapshot.segment_texts(&own).await?;
                Ok::<_, Failure>(
                    (own.into_iter().zip(texts))
                        .map(|(s, text)| (s.seg_id.clone(), (s, text)))
                        .collect::<HashMap<_, _>>(),
                )
            },
            self.leaves_under(rows),
            async { Ok(self.snapshot.rows_by_id::<Document>(&doc_ids).await?) },
        )?;
        let under_ids: Vec<String> = leaves.iter().flatten().cloned().collect();
        let under = by_seg_id(self.snapshot.rows::<SegmentRow>(&under_ids).await?);
        let passages = rows.iter().zip(&leaves).map(|(row, leaves)| {
            let document = |doc_id: &str| documents.get(doc_id).map(Arc::as_ref);
            if let Some((segment, text)) = row.seg_id.as_ref().and_then(|id| own.get(id)) {
                return Some(Passage::of_segment(
                    document(&segment.doc_id),
                    segment,
                    text,
                ));
            }
            let doc_id = row.doc_id.as_deref()?;
            let spans = leaves.iter().filter_map(|id| under.get(id));
            let (start, end) = spans.fold((u64::MAX, 0), |(start, end), s| {
                (start.min(s.start_char), end.max(s.end_char))
            });
            let text = match (&row.surprise, with_facts) {
                (Some(facts), true) if !facts.is_empty() => format!("{}\n{facts}", row.text()),
                _ => row.text().to_string(),
            };
            Some(Passage::of(
                document(doc_id),
                doc_id,
                &row.node_id,
                &text,
                start.min(end)..end,
            ))
        });
        Ok(passages.collect())
    }

    /// The segment ids of the leaves under each of `rows` (none under a
    /// leaf): the subtrees are read a level at a time for all of them
    /// together.
    async fn leaves_under(&self, rows: &[&TreeNodeRow]) -> Walked<Vec<Vec<String>>> {
        let mut leaves: Vec<Vec<String>> = vec![Vec::new(); rows.len()];
        let mut frontier: Vec<(usize, String)> = rows
            .iter()
            .enumerate()
            .flat_map(|(i, row)| row.child_ids.iter().map(move |c| (i, c.clone())))
            .collect();
        while !frontier.is_empty() {
            let ids: Vec<String> = frontier.iter().map(|(_, id)| id.clone()).collect();
            let nodes: HashMap<String, Arc<TreeNodeRow>> = self
                .snapshot
                .rows::<TreeNodeRow>(&ids)
                .await?
                .into_iter()
                .map(|n| (n.node_id.clone(), n))
                .collect();
            let mut next = Vec::new();
            for (i, id) in frontier {
                let Some(node) = nodes.get(&id) else { continue };
                leaves[i].extend(node.seg_id.iter().cloned());
                next.extend(node.child_ids.iter().map(|c| (i, c.clone())));
            }
            frontier = next;
        }
        Ok(leaves)
    }
}

fn by_seg_id(segments: Vec<Arc<SegmentRow>>) -> HashMap<String, Arc<SegmentRow>> {
    segments
        .into_iter()
        .map(|s| (s.seg_id.clone(), s))
        .collect()
}

/// Share of the longer text's words that its longest common subsequence with the
/// other keeps: 1 when the memory did not change.
fn lcs_share(a: &str, b: &str) -> f64 {
    let (a, b): (Vec<&str>, Vec<&str>) = (
        a.split_whitespace().collect(),
        b.split_whitespace().collect(),
    );
    let longest = a.len().max(b.len());
    if longest == 0 {
        return 1.0;
    }
    let mut row = vec![0usize; b.len() + 1];
    for x in &a {
        let mut diagonal = 0;
        for (j, y) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = if x == y {
                diagonal + 1
            } else {
                above.max(row[j])
            };
            diagonal = above;
        }
    }
    row[b.len()] as f64 / longest as f64
}

#[cfg(test)]
mod tests {
    use memweave_llm::TaskModel;
    use memweave_operators::embed::{Embedder, HashingEmbedder};

    use super::super::fixture::{answer, cited, memory, request};
    use super::lcs_share;
    use crate::navigate::{Models, ask};
    use crate::request::Strategy;

    #[tokio::test]
    async fn bm25_ranks_the_passages_that_hold_the_question_terms_first() {
        let snapshot = memory().await;
        let mut asked = request("Who do investors fund?", Strategy::Bm25);
        asked.options.top_k = Some(2);
        let answer = answer(&snapshot, &asked).await;
        // Only one passage shares a word with the question.
        assert_eq!(cited(&answer), ["s-s1"]);
        assert_eq!(answer.trace[0].action, "retrieve");
    }

    #[tokio::test]
    async fn the_collapsed_tree_gathers_nodes_within_the_budget() {
        let snapshot = memory().await;
        let mut asked = request("What taught patience when painting?", Strategy::Raptor);
        let wide = answer(&snapshot, &asked).await;
        asked.budget = Some(25);
        let narrow = answer(&snapshot, &asked).await;
        assert!(wide.supporting.len() > narrow.supporting.len());
        assert_eq!(narrow.supporting[0].from_id, wide.supporting[0].from_id);
        assert_eq!(wide.supporting[0].doc_id, "paint");
    }

    #[tokio::test]
    async fn questions_are_hashed_at_the_width_the_tables_were() {
        let snapshot = memory().await;
        let asked = request("What taught patience when painting?", Strategy::Dense);
        let at_the_tables_width = answer(&snapshot, &asked).await;
        let (model, narrower) = (TaskModel::extractive(), HashingEmbedder::new(8));
        assert_ne!(Some(narrower.model()), snapshot.embedding_model.as_deref());
        let models = Models {
            model: &model,
            embedder: &narrower,
        };
        let asked_narrower = ask(&snapshot, &asked, models).await.expect("reads");
        assert!(asked_narrower.answered, "{:?}", asked_narrower.trace);
        assert_eq!(cited(&asked_narrower), cited(&at_the_tables_width));
        assert_eq!(cited(&at_the_tables_width)[0], "s-p2");
    }

    #[test]
    fn lcs_share_measures_how_much_of_the_memory_stayed() {
        assert_eq!(lcs_share("", ""), 1.0);
        assert_eq!(lcs_share("a b c", "a b c"), 1.0);
        assert_eq!(lcs_share("a b c d", "a c d"), 0.75);
        assert_eq!(lcs_share("a b", "c d"), 0.0);
    }
}
