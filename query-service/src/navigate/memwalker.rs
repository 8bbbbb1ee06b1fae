//! MemWalker (Chen et al. 2023): walk a document's summary tree from the root,
//! the model choosing a child at each node (triage) and answering from a leaf
//! or reverting to its parent; over a corpus, the best-matching documents in
//! turn.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use memweave_operators::embed::cosine;
use memweave_operators::lexical::{Bm25, CorpusStats, rarest, terms};
use memweave_operators::text::{CharOffsets, sentences};
use memweave_schemas::{SegmentRow, TREE_MEMWALKER, TreeNodeRow};

use super::{Navigation, Navigator, Passage, Signal, Walked, navigator_over_context};

/// Leaves MemWalker may read before it answers with the best passage seen.
const MAX_LEAF_READS: usize = 8;
/// Documents MemWalker may walk, best match first, before it gives up on a corpus.
const MAX_DOCUMENTS: usize = 3;
/// MemWalker's working memory: the summaries on the path, the nearest the leaf
/// kept when they are longer than this (characters, about 1000 tokens).
const WORKING_MEMORY_CHARS: usize = 4000;

/// The children whose summaries match the question best (BM25 over the
/// summaries, terms weighted by rarity as the extractive triage weighs them):
/// one when the summaries decide; otherwise the candidates, with why the
/// summaries could not decide. All of them when no summary holds the
/// question's rarest word (a match on its common words alone is a guess, as
/// in the leaf judge) or any word of it; the best when they tie.
fn lexical_choice(query: &[String], summaries: &[&str]) -> Result<usize, (Vec<usize>, String)> {
    let all = || (0..summaries.len()).collect();
    let ranked = Bm25::new(summaries.iter().copied()).rank_by_rarity(query);
    let best = ranked.first().map_or(0.0, |r| r.1);
    if best <= 0.0 {
        return Err((
            all(),
            "no child's summary holds a word of the question".into(),
        ));
    }
    if let Some(rarest) = rarest(query)
        && !summaries
            .iter()
            .any(|s| terms(s).iter().any(|t| t == rarest))
    {
        return Err((
            all(),
            format!("no child's summary holds \"{rarest}\", the question's rarest word"),
        ));
    }
    let mut tied: Vec<usize> = ranked
        .iter()
        .take_while(|r| r.1 >= best)
        .map(|r| r.0)
        .collect();
    if let [one] = tied[..] {
        return Ok(one);
    }
    tied.sort_unstable();
    Err((tied, "the best summaries match the question equally".into()))
}

/// The segments of the leaves under `node` in its tree (`by_id`), in order.
fn segments_under(node: &TreeNodeRow, by_id: &HashMap<&str, &TreeNodeRow>) -> Vec<String> {
    let mut segments = Vec::new();
    let mut stack = vec![node];
    while let Some(current) = stack.pop() {
        if let Some(seg_id) = &current.seg_id {
            segments.push(seg_id.clone());
        }
        stack.extend(
            current
                .child_ids
                .iter()
                .rev()
                .filter_map(|id| by_id.get(id.as_str()).copied()),
        );
    }
    segments
}

/// A passage with how well it covers the question.
#[derive(Debug, Clone)]
pub(super) struct Candidate {
    pub(super) passage: Passage,
    pub(super) coverage: f64,
    pub(super) score: f64,
}

/// MemWalker: its best passage so far and the node summaries' statistics,
/// over the shared context.
pub(super) struct MemWalker<'n, 'a> {
    nav: &'n mut Navigation<'a>,
    /// The passage cited when no leaf answers (the best covering one read).
    best: Option<Candidate>,
    /// The node summaries' BM25 statistics for the question's terms (the
    /// windows it cites are weighed and scored with them).
    node_stats: Option<Arc<CorpusStats>>,
}

navigator_over_context!(MemWalker);

impl<'n, 'a> MemWalker<'n, 'a> {
    pub(super) fn over(nav: &'n mut Navigation<'a>) -> Self {
        MemWalker {
            nav,
            best: None,
            node_stats: None,
        }
    }
}

impl Navigator for MemWalker<'_, '_> {
    /// Walks the documents' trees, then cites the passage that answered, or
    /// the best one read (MemWalker gathers no other passages).
    async fn navigate(&mut self) -> Walked {
        self.walk_documents().await?;
        let best = self.best.iter().filter(|b| b.coverage > 0.0);
        self.nav.outcome.supporting = best.map(|b| b.passage.clone()).collect();
        Ok(())
    }
}

impl MemWalker<'_, '_> {
    /// MemWalker over a corpus: walk the tree of the document whose passage
    /// matches the question best; when the walk finds no leaf that answers, go
    /// back up to the corpus and try the next document. The tree walks one
    /// document as the paper's does; which document holds the question is read
    /// from the documents' own words, since a summary keeps a few sentences of
    /// each and a passage's common words can outscore a summary's one rare one.
    async fn walk_documents(&mut self) -> Walked {
        let ranked = self
            .snapshot
            .documents_by_passages(&self.query, self.documents(), MAX_DOCUMENTS)
            .await?;
        if ranked.is_empty() {
            self.record(
                "no_answer",
                "",
                None,
                0.0,
                "no document's memory mentions the question's terms".into(),
            );
            return Ok(());
        }
        let mut leaf_reads = 0;
        for (rank, (doc_id, score, passage)) in ranked.iter().enumerate() {
            let Some(root) = self.snapshot.root_of(doc_id).await? else {
                continue;
            };
            let title = self.title_of(doc_id).await?;
            self.recorder.depth = 0;
            let why = if rank == 0 {
                "matches the question best".to_string()
            } else {
                format!("is the next best match ({} of {})", rank + 1, ranked.len())
            };
            self.by(Signal::Text).record(
                "choose_document",
                doc_id,
                None,
                *score,
                format!("\"{title}\": its passage {} {why}", passage.seg_id),
            );
            if self.walk(root, &mut leaf_reads).await? {
                self.outcome.answered = true;
                return Ok(());
            }
            if leaf_reads >= MAX_LEAF_READS {
                self.answer_with_best("read the leaf budget; answering with the best passage seen");
                return Ok(());
            }
        }
        self.answer_with_best(
            "every branch was read or reverted from; answering with the best passage seen",
        );
        Ok(())
    }

    /// Walks one tree from its root; true when a leaf answered.
    async fn walk(&mut self, root: Arc<TreeNodeRow>, leaf_reads: &mut usize) -> Walked<bool> {
        let mut visited: HashSet<String> = HashSet::new();
        self.recorder.depth = 1;
        self.record_descend(&root, None, "start at the root".into());
        let mut path = vec![root];
        while let Some(current) = path.last().cloned() {
            visited.insert(current.node_id.clone());
            self.recorder.depth = path.len() as u32;
            if current.child_ids.is_empty() {
                *leaf_reads += 1;
                if self.read_leaf(&current, &path).await? {
                    return Ok(true);
                }
                if *leaf_reads >= MAX_LEAF_READS {
                    return Ok(false);
                }
                self.revert(
                    &mut path,
                    "the leaf cannot answer; back to its parent (action -1)",
                );
                continue;
            }
            match self.triage(&current, &visited).await? {
                Some((child, signal, reasoning)) => {
                    self.recorder.depth = path.len() as u32 + 1;
                    self.record_descend(&child, Some(signal), reasoning);
                    path.push(child);
                }
                None => self.revert(&mut path, "every child has been read"),
            }
        }
        Ok(false)
    }

    /// MemWalker's revert: leave the current node for its parent.
    fn revert(&mut self, path: &mut Vec<Arc<TreeNodeRow>>, reasoning: &str) {
        path.pop();
        self.recorder.depth = path.len() as u32;
        if let Some(parent) = path.last() {
            let (id, level) = (parent.node_id.clone(), parent.level);
            self.record("revert", &id, Some(level), 0.0, reasoning.to_string());
        }
    }

    fn record_descend(&mut self, node: &TreeNodeRow, chosen: Option<Signal>, reasoning: String) {
        self.recorder.signal = chosen;
        self.record("descend", &node.node_id, Some(node.level), 0.0, reasoning);
    }

    /// MemWalker's triage prompt over the summaries of the children not read yet
    /// (after a revert the model chooses among the others); `None` when every
    /// child has been read. Where the summaries give nothing to choose by (no
    /// child's summary holds the question's rarest word, or any word of it, or
    /// the best are equal), a model would guess; the vectors of the segments
    /// under those children choose instead, and the reasoning says which
    /// signal chose.
    async fn triage(
        &mut self,
        node: &TreeNodeRow,
        visited: &HashSet<String>,
    ) -> Walked<Option<(Arc<TreeNodeRow>, Signal, String)>> {
        let mut children = self.snapshot.rows::<TreeNodeRow>(&node.child_ids).await?;
        children.retain(|c| !visited.contains(&c.node_id));
        if children.is_empty() {
            return Ok(None);
        }
        let summaries: Vec<&str> = children.iter().map(|c| c.text()).collect();
        if let Err((candidates, why)) = lexical_choice(&self.query, &summaries)
            && let Some((child, reasoning)) = self
                .nearest_child(node, &children, &candidates, &why)
                .await?
        {
            return Ok(Some((
                children.swap_remove(child),
                Signal::Vectors,
                reasoning,
            )));
        }
        let triage = self
            .model
            .triage(&self.cx, &self.request.question, &summaries)
            .await?;
        let reasoning = format!(
            "summary {} of {}: {}",
            triage.choice,
            children.len(),
            triage.reasoning
        );
        Ok(Some((
            children.swap_remove(triage.choice),
            Signal::Model,
            reasoning,
        )))
    }

    /// Among `candidates` (indices into `children`), the child above the
    /// segment nearest the question's vector, with why; `None` when there is
    /// no vector to compare (another embedder's tables, no segment vectors).
    async fn nearest_child(
        &mut self,
        node: &TreeNodeRow,
        children: &[Arc<TreeNodeRow>],
        candidates: &[usize],
        why: &str,
    ) -> Walked<Option<(usize, String)>> {
        let Some(doc_id) = node.doc_id.as_deref() else {
            return Ok(None);
        };
        if self.other_embedder().is_some() {
            return Ok(None);
        }
        let Some(question) = self.question_vector().await? else {
            return Ok(None);
        };
        let tree = self.snapshot.tree(doc_id, TREE_MEMWALKER).await?;
        let by_id: HashMap<&str, &TreeNodeRow> =
            tree.iter().map(|n| (n.node_id.as_str(), &**n)).collect();
        let leaves: Vec<Vec<String>> = candidates
            .iter()
            .map(|&c| segments_under(&children[c], &by_id))
            .collect();
        let vectors = self.snapshot.segment_vectors(&leaves.concat()).await?;
        let best = candidates
            .iter()
            .zip(&leaves)
            .flat_map(|(&c, segs)| {
                segs.iter()
                    .filter_map(|s| Some((c, s, cosine(&question, vectors.get(s)?))))
                    .collect::<Vec<_>>()
            })
            .max_by(|a, b| a.2.total_cmp(&b.2).then(b.0.cmp(&a.0)));
        Ok(best.map(|(c, seg_id, similarity)| {
            (
                c,
                format!(
                    "summary {c} of {}, chosen by vectors: {why}; its segment {seg_id} is nearest the question (cosine {similarity:.3})",
                    children.len()
                ),
            )
        }))
    }

    /// The summaries on the path to a leaf, root first, as MemWalker's working
    /// memory; the nearest the leaf are kept when they do not all fit.
    fn working_memory(path: &[Arc<TreeNodeRow>]) -> String {
        let mut kept: Vec<&str> = Vec::new();
        let mut length = 0;
        for node in path[..path.len().saturating_sub(1)].iter().rev() {
            let summary = node.text();
            if length + summary.len() > WORKING_MEMORY_CHARS {
                break;
            }
            length += summary.len();
            kept.push(summary);
        }
        kept.reverse();
        kept.join("\n\n")
    }

    /// MemWalker's leaf prompt: the model answers from the segment and the working
    /// memory (action -2) or reverts (-1). The best matching window of the
    /// segment is kept as the passage an answer cites.
    async fn read_leaf(&mut self, node: &TreeNodeRow, path: &[Arc<TreeNodeRow>]) -> Walked<bool> {
        let level = node.level;
        let segment = match node.seg_id.as_deref() {
            Some(seg_id) => self.snapshot.row::<SegmentRow>(seg_id).await?,
            None => None,
        };
        let Some(segment) = segment else {
            self.record(
                "read_leaf",
                &node.node_id,
                Some(level),
                0.0,
                "the leaf's segment is missing".into(),
            );
            return Ok(false);
        };
        let text = (self
            .snapshot
            .segment_texts(std::slice::from_ref(&segment))
            .await?)
            .pop()
            .unwrap_or_default();
        let memory = Self::working_memory(path);
        let judgement = self
            .model
            .read_leaf(&self.cx, &self.request.question, &memory, &text)
            .await?;
        let candidate = self
            .best_window(&segment.doc_id, &segment.seg_id, &text, segment.start_char)
            .await?;
        let score = candidate.as_ref().map_or(0.0, |c| c.score);
        let answers = judgement.answer.is_some();
        self.by(Signal::Model).record(
            "read_leaf",
            &segment.seg_id,
            Some(level),
            score,
            format!(
                "{} ({})",
                judgement.reasoning,
                if answers {
                    "answer, action -2"
                } else {
                    "revert, action -1"
                }
            ),
        );
        if answers {
            // The passage this answer cites is this segment's, whatever was seen before.
            self.best = candidate.filter(|c| c.coverage > 0.0);
            self.outcome.model_answer = judgement.answer;
            self.recorder.depth = 0;
            self.by(Signal::Model).record(
                "answer",
                &segment.seg_id,
                Some(level),
                score,
                "answer from this segment".into(),
            );
        } else {
            self.offer(candidate);
        }
        Ok(answers)
    }

    fn answer_with_best(&mut self, reasoning: &str) {
        self.recorder.depth = 0;
        if let Some(best) = self.best.clone().filter(|b| b.coverage > 0.0) {
            self.outcome.answered = true;
            self.by(Signal::Text).record(
                "answer",
                &best.passage.from_id,
                None,
                best.score,
                reasoning.to_string(),
            );
        } else {
            self.record(
                "no_answer",
                "",
                None,
                0.0,
                "nothing read covers the question".into(),
            );
        }
    }

    fn offer(&mut self, candidate: Option<Candidate>) {
        let Some(candidate) = candidate else { return };
        let better = self
            .best
            .as_ref()
            .is_none_or(|b| (candidate.coverage, candidate.score) > (b.coverage, b.score));
        if better {
            self.best = Some(candidate);
        }
    }

    /// The node summaries' BM25 statistics for the question's terms, read once.
    async fn node_stats(&mut self) -> Walked<Arc<CorpusStats>> {
        if self.node_stats.is_none() {
            let stats = self.snapshot.node_stats(&self.query).await?;
            self.node_stats = Some(Arc::new(stats));
        }
        Ok(self.node_stats.clone().expect("set above"))
    }

    /// The window of up to three sentences of `text` that best matches the question.
    async fn best_window(
        &mut self,
        doc_id: &str,
        from_id: &str,
        text: &str,
        start_char: u64,
    ) -> Walked<Option<Candidate>> {
        let spans = sentences(text);
        if spans.is_empty() || self.distinct_terms.is_empty() {
            return Ok(None);
        }
        let stats = self.node_stats().await?;
        // Every window of three sentences; the one covering most of the question's
        // terms wins, BM25 (with the corpus statistics) breaking ties.
        let best = (0..spans.len())
            .map(|center| {
                let start = spans[center.saturating_sub(1)].start;
                let end = spans[(center + 1).min(spans.len() - 1)].end;
                let window = &text[start..end];
                let window_terms: HashSet<String> = terms(window).into_iter().collect();
                let coverage = self.coverage(&stats, &window_terms);
                let score = stats.score_text(&self.query, window);
                (start, end, coverage, score)
            })
            .max_by(|a, b| {
                (a.2, a.3)
                    .partial_cmp(&(b.2, b.3))
                    .unwrap_or(std::cmp::Ordering::Equal)
                    .then(b.0.cmp(&a.0))
            });
        let Some((start, end, coverage, score)) = best else {
            return Ok(None);
        };
        let window = &text[start..end];
        let mut chars = CharOffsets::new(text);
        let passage = self
            .passage(
                doc_id,
                from_id,
                &window.split_whitespace().collect::<Vec<_>>().join(" "),
                start_char + chars.at(start),
                start_char + chars.at(end),
            )
            .await?;
        Ok(Some(Candidate {
            coverage,
            score,
            passage,
        }))
    }

    /// Share of the question's terms a passage holds, each term weighted by its
    /// rarity across the memory, so "paint" counts for more than "author".
    fn coverage(&self, bm25: &CorpusStats, passage_terms: &HashSet<String>) -> f64 {
        let total: f64 = self.distinct_terms.iter().map(|t| bm25.idf(t)).sum();
        let covered: f64 = self
            .distinct_terms
            .iter()
            .filter(|t| passage_terms.contains(*t))
            .map(|t| bm25.idf(t))
            .sum();
        if total > 0.0 { covered / total } else { 0.0 }
    }
}

#[cfg(test)]
mod tests {
    use super::super::Models;
    use super::super::fixture::{SEGMENTS, answer, memory, models, request, steps};
    use super::*;
    use crate::request::Strategy;

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(a, t)| (a.to_string(), t.to_string()))
            .collect()
    }

    #[tokio::test]
    async fn a_leaf_that_cannot_answer_is_reverted_from_and_its_sibling_answers() {
        let snapshot = memory().await;
        let asked = request("What taught patience when painting?", Strategy::Memwalker);
        let answer = answer(&snapshot, &asked).await;
        // Triage trusts n-p1's summary; its segment lacks "taught" and
        // "patience", so the walk goes back to the root and on to n-p2.
        assert_eq!(
            steps(&answer),
            pairs(&[
                ("choose_document", "paint"),
                ("descend", "n-p"),
                ("descend", "n-p1"),
                ("read_leaf", "s-p1"),
                ("revert", "n-p"),
                ("descend", "n-p2"),
                ("read_leaf", "s-p2"),
                ("answer", "s-p2"),
            ])
        );
        assert!(answer.answered);
        assert!(answer.answer.contains("patience"), "{}", answer.answer);
        assert_eq!(answer.supporting[0].from_id, "s-p2");
        let depths: Vec<u32> = answer.trace.iter().map(|s| s.depth).collect();
        assert_eq!(depths, [0, 1, 2, 2, 1, 2, 2, 0]);
        // The document by its words, the root by none, the first child and
        // each leaf by the model; the revert chooses nothing; the child left
        // after it by vectors (its summary alone gives nothing to compare).
        let (text, model) = (Some(Signal::Text), Some(Signal::Model));
        let signals: Vec<Option<Signal>> = answer.trace.iter().map(|s| s.signal).collect();
        assert_eq!(
            signals,
            [
                text,
                None,
                model,
                model,
                None,
                Some(Signal::Vectors),
                model,
                model
            ]
        );
        assert!(answer.trace[5].reasoning.contains("chosen by vectors"));
    }

    /// Asks `question`, whose answer is s-p2's, where the children's summaries
    /// cannot choose between n-p1 and n-p2 for the reason `why`: the segments'
    /// vectors choose n-p2, with no model call, and the trace says so.
    async fn vectors_choose_the_second_leaf(question: &str, why: &str) {
        let snapshot = memory().await;
        let answer = answer(&snapshot, &request(question, Strategy::Memwalker)).await;
        assert_eq!(
            steps(&answer),
            pairs(&[
                ("choose_document", "paint"),
                ("descend", "n-p"),
                ("descend", "n-p2"),
                ("read_leaf", "s-p2"),
                ("answer", "s-p2"),
            ])
        );
        let chose = &answer.trace[2];
        assert!(
            chose.reasoning.contains("chosen by vectors")
                && chose.reasoning.contains(why)
                && chose.reasoning.contains("s-p2")
                && chose.calls.is_empty()
                && chose.signal == Some(Signal::Vectors),
            "{chose:?}"
        );
    }

    #[tokio::test]
    async fn where_no_summary_holds_a_word_of_the_question_vectors_choose_the_child() {
        // Neither child's summary holds "still", "lifes", "light" or
        // "closely"; s-p2 holds "light" and "closely".
        vectors_choose_the_second_leaf(
            "What did still lifes show about light, looked at closely?",
            "no child's summary holds a word of the question",
        )
        .await;
    }

    #[tokio::test]
    async fn where_no_summary_holds_the_rarest_word_of_the_question_vectors_choose_the_child() {
        // n-p1's summary shares "painting" with the question, but no summary
        // holds "closely", its rarest word; s-p2 does.
        vectors_choose_the_second_leaf(
            "What did painting teach about looking closely?",
            "no child's summary holds \"closely\", the question's rarest word",
        )
        .await;
    }

    #[tokio::test]
    async fn the_documents_a_request_names_bound_the_walk() {
        let snapshot = memory().await;
        let mut asked = request("What taught patience when painting?", Strategy::Memwalker);
        asked.documents = Some(vec!["startup".into()]);
        let answer = answer(&snapshot, &asked).await;
        assert!(!answer.answered);
        assert_eq!(steps(&answer), pairs(&[("no_answer", "")]));
    }

    #[tokio::test]
    async fn the_cited_window_holds_the_rarest_question_terms_with_its_characters() {
        let snapshot = memory().await;
        let asked = request("Who fund founders?", Strategy::Memwalker);
        let (model, embedder) = models();
        let models = Models {
            model: &model,
            embedder: &embedder,
        };
        let mut navigation = Navigation::new(&snapshot, &asked, models);
        let (doc_id, seg_id, text) = SEGMENTS[2];
        let offset = 100;
        let candidate = MemWalker::over(&mut navigation)
            .best_window(doc_id, seg_id, text, offset)
            .await
            .expect("reads")
            .expect("a window");
        assert!(candidate.passage.text.contains("Investors fund founders"));
        assert!((candidate.coverage - 1.0).abs() < 1e-9, "{candidate:?}");
        let (start, end) = (
            candidate.passage.start_char - offset,
            candidate.passage.end_char - offset,
        );
        let cited: String = text
            .chars()
            .skip(start as usize)
            .take((end - start) as usize)
            .collect();
        assert_eq!(cited, candidate.passage.text);
        assert_eq!(candidate.passage.title, "STARTUP");
    }

    #[tokio::test]
    async fn working_memory_keeps_the_summaries_nearest_the_leaf() {
        let snapshot = memory().await;
        let root = snapshot.row::<TreeNodeRow>("n-p").await.unwrap().unwrap();
        let leaf = snapshot.row::<TreeNodeRow>("n-p2").await.unwrap().unwrap();
        // The leaf itself is read whole, not remembered.
        assert_eq!(
            MemWalker::working_memory(&[root.clone(), leaf.clone()]),
            root.text()
        );
        assert_eq!(MemWalker::working_memory(&[leaf]), "");
        // Past the limit the summaries farthest from the leaf go first.
        let path = vec![root.clone(); WORKING_MEMORY_CHARS / root.text().len() + 2];
        let kept = MemWalker::working_memory(&path);
        assert!(
            kept.len() <= WORKING_MEMORY_CHARS + path.len() * 2,
            "{}",
            kept.len()
        );
        assert!(kept.len() > WORKING_MEMORY_CHARS - root.text().len() * 2);
    }
}
