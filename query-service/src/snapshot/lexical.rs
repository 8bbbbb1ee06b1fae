//! Lexical ranking: BM25 over the memory's terms with the lexicon's
//! statistics, candidates found by Lance's full-text index and scored
//! exactly, ties broken by id.

use std::collections::HashMap;
use std::sync::Arc;

use lance_index::scalar::FullTextSearchQuery;
use memweave_operators::lexical::CorpusStats;
use memweave_schemas::search::{
    GIST_CORPUS, OWN_GIST_CUT, TERMS, cut_condition, cut_corpora, gist_corpora, segments_corpus,
    tree_corpus,
};
use memweave_schemas::store::{batch_rows, strings};
use memweave_schemas::{LexiconRow, SegmentRow, StoreError, TREE_MEMWALKER, Table};
use serde::Deserialize;
use serde::de::DeserializeOwned;

use super::lookup::{KeyedRead, as_read};
use super::{Allowed, Read, Snapshot};
use crate::cache::rows_bytes;

/// Candidates Lance's full-text index is asked for, per result wanted, and at
/// least: the exact BM25 order of the best results lies well inside Lance's
/// own (measured: the exact top 10 within Lance's top 40 on the scale
/// benchmark's memories, 10M and 100M tokens).
const TEXT_CANDIDATES_PER_RESULT: usize = 4;
const TEXT_CANDIDATES_AT_LEAST: usize = 64;

/// A passage the full-text search found: what ranking and grouping by
/// document need before its row is read.
#[derive(Deserialize)]
struct PassageMatch {
    seg_id: String,
    doc_id: String,
    ordinal: u32,
}

/// The cached lookup of a term's lexicon rows.
const TERM_ROWS: &str = "term";

impl Snapshot {
    /// The documents whose best passage matches `query` best (BM25 over the
    /// memory's finest cut: the documents' own words, which no summary has
    /// dropped), at most `limit`, each with that score and passage; only those
    /// with a positive score, ties in document id order.
    pub async fn documents_by_passages(
        &self,
        query: &[String],
        allowed: Allowed<'_>,
        limit: usize,
    ) -> Read<Vec<(String, f64, Arc<SegmentRow>)>> {
        let scored = self.scored_passages(query, allowed, limit).await?;
        let ranked = best_per_document(scored, limit);
        let ids: Vec<String> = ranked.iter().map(|r| r.2.clone()).collect();
        let segments = self.rows::<SegmentRow>(&ids).await?;
        Ok(ranked
            .into_iter()
            .zip(segments)
            .map(|((d, s, _), segment)| (d, s, segment))
            .collect())
    }

    /// The BM25 statistics of the MemWalker node summaries for `query`'s terms.
    pub async fn node_stats(&self, query: &[String]) -> Read<CorpusStats> {
        self.corpus_stats(&[tree_corpus(TREE_MEMWALKER)], query)
            .await
    }

    /// The BM25 statistics of the passages for `query`'s terms.
    pub async fn passage_stats(&self, query: &[String]) -> Read<CorpusStats> {
        match self.passage_cut {
            Some(cut) => self.corpus_stats(&cut_corpora(cut), query).await,
            None => Ok(CorpusStats::default()),
        }
    }

    /// ReadAgent's document: the one whose gist memory matches `query` best,
    /// with its score (none when no gist shares a term), and how many allowed
    /// documents have gists. A gist memory is a row of its own, or a whole
    /// document's segment where the document is its own gist
    /// ([`OWN_GIST_CUT`]): both are searched, with their statistics as one.
    pub async fn document_by_gists(
        &self,
        query: &[String],
        allowed: Allowed<'_>,
    ) -> Read<(Option<(String, f64)>, usize)> {
        let own_gists = format!("target_tokens = {OWN_GIST_CUT}");
        let kept_rows = self.totals.contains_key(GIST_CORPUS);
        let own_rows = (self.totals).contains_key(&segments_corpus(OWN_GIST_CUT));
        let candidates = match allowed.condition("doc_id") {
            None => (gist_corpora().iter())
                .filter_map(|corpus| self.totals.get(corpus))
                .map(|t| t.0 as usize)
                .sum(),
            Some(condition) => {
                let kept = match kept_rows {
                    true => self.count(Table::GistMemories, &condition).await?,
                    false => 0,
                };
                let own = match own_rows {
                    true => {
                        let condition = format!("{own_gists} AND {condition}");
                        self.count(Table::Segments, &condition).await?
                    }
                    false => 0,
                };
                kept + own
            }
        };
        #[derive(Deserialize)]
        struct Gists {
            doc_id: String,
        }
        let stats = self.corpus_stats(&gist_corpora(), query).await?;
        let mut scored: Vec<(Gists, f64)> = Vec::new();
        if kept_rows {
            let conditions = [allowed.condition("doc_id")];
            scored.extend(
                self.best_texts(
                    Table::GistMemories,
                    &["doc_id"],
                    query,
                    &stats,
                    &conditions,
                    1,
                )
                .await?,
            );
        }
        if own_rows {
            let conditions = [Some(own_gists), allowed.condition("doc_id")];
            scored.extend(
                self.best_texts(Table::Segments, &["doc_id"], query, &stats, &conditions, 1)
                    .await?,
            );
        }
        let best = scored
            .into_iter()
            .map(|(g, score)| (g.doc_id, score))
            .min_by(best_first);
        Ok((best, candidates))
    }

    /// The passages (the memory's finest cut) BM25 ranks highest for `query`,
    /// at most `limit`, only those with a positive score; ties in document
    /// order.
    pub async fn passages_by_bm25(
        &self,
        query: &[String],
        allowed: Allowed<'_>,
        limit: usize,
    ) -> Read<Vec<(Arc<SegmentRow>, f64)>> {
        let scored = best_passages(self.scored_passages(query, allowed, limit).await?, limit);
        let ids: Vec<String> = scored.iter().map(|(m, _)| m.seg_id.clone()).collect();
        let segments = self.rows::<SegmentRow>(&ids).await?;
        Ok(segments
            .into_iter()
            .zip(scored)
            .map(|(segment, (_, score))| (segment, score))
            .collect())
    }

    /// The passages (the memory's finest cut) Lance's full-text index finds for
    /// `query`, enough for `limit` results, each scored by our BM25 (positive
    /// scores only); none when the memory has no segments.
    async fn scored_passages(
        &self,
        query: &[String],
        allowed: Allowed<'_>,
        limit: usize,
    ) -> Read<Vec<(PassageMatch, f64)>> {
        let Some(cut) = self.passage_cut else {
            return Ok(Vec::new());
        };
        let stats = self.passage_stats(query).await?;
        let condition = [Some(cut_condition(cut)), allowed.condition("doc_id")];
        self.best_texts(
            Table::Segments,
            &["seg_id", "doc_id", "ordinal"],
            query,
            &stats,
            &condition,
            limit,
        )
        .await
    }

    /// The BM25 statistics of `corpora` taken as one corpus for `query`'s
    /// terms, from the lexicon.
    async fn corpus_stats(&self, corpora: &[String], query: &[String]) -> Read<CorpusStats> {
        let (texts, terms) = (corpora.iter())
            .filter_map(|corpus| self.totals.get(corpus))
            .fold((0, 0), |(texts, terms), t| (texts + t.0, terms + t.1));
        let mut stats = CorpusStats {
            texts: texts as f64,
            average_length: if texts == 0 {
                0.0
            } else {
                terms as f64 / texts as f64
            },
            document_frequency: HashMap::new(),
        };
        if query.is_empty() || texts == 0 {
            return Ok(stats);
        }
        let found = self.lexicon_rows(query).await?;
        for row in
            (found.values().flat_map(|rows| rows.iter())).filter(|r| corpora.contains(&r.corpus))
        {
            *stats
                .document_frequency
                .entry(row.term.clone())
                .or_default() += row.rows as f64;
        }
        Ok(stats)
    }

    /// The lexicon's rows of each of `terms`, every corpus's (a term's rows
    /// share its key), by term: those not cached read together.
    async fn lexicon_rows(&self, terms: &[String]) -> Read<HashMap<String, Arc<Vec<LexiconRow>>>> {
        let read = KeyedRead {
            table: Table::Lexicon,
            lookup: TERM_ROWS,
            column: "term",
            columns: &[],
            condition: None,
        };
        self.by_keys::<LexiconRow, Vec<LexiconRow>>(
            read,
            terms,
            as_read,
            |row| row.term.clone(),
            Vec::push,
            |rows| rows_bytes(rows.iter()),
        )
        .await
    }

    /// The rows of `table` (one with a [`TERMS`] column; read: `columns`)
    /// meeting every `condition` that Lance's full-text index ranks best for
    /// `query`, enough of them that the `limit` best by exact BM25 (`stats`)
    /// are among them, each with that score; only those with a positive one,
    /// best first.
    async fn best_texts<R: DeserializeOwned>(
        &self,
        table: Table,
        columns: &[&str],
        query: &[String],
        stats: &CorpusStats,
        conditions: &[Option<String>],
        limit: usize,
    ) -> Read<Vec<(R, f64)>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let candidates = (limit * TEXT_CANDIDATES_PER_RESULT).max(TEXT_CANDIDATES_AT_LEAST);
        let found: Vec<(R, String)> = self
            .text_candidates(table, columns, query, conditions, candidates)
            .await?;
        let mut scored: Vec<(R, f64)> = found
            .into_iter()
            .map(|(row, terms)| {
                let score = stats.score_terms(query, terms.split(' '));
                (row, score)
            })
            .filter(|(_, score)| *score > 0.0)
            .collect();
        scored.sort_by(|a, b| b.1.total_cmp(&a.1));
        Ok(scored)
    }

    /// At most `candidates` rows of `table` (one with a [`TERMS`] column;
    /// read: `columns`) meeting every `condition` that Lance's full-text index
    /// finds for `query`, each with its terms; none for no query or none
    /// wanted. The caller scores them exactly: Lance's own score depends on
    /// how its index is split.
    pub(super) async fn text_candidates<R: DeserializeOwned>(
        &self,
        table: Table,
        columns: &[&str],
        query: &[String],
        conditions: &[Option<String>],
        candidates: usize,
    ) -> Read<Vec<(R, String)>> {
        if query.is_empty() || candidates == 0 {
            return Ok(Vec::new());
        }
        let filter: Vec<&str> = conditions.iter().flatten().map(String::as_str).collect();
        let filter = if filter.is_empty() {
            "true".to_string()
        } else {
            filter.join(" AND ")
        };
        let search = FullTextSearchQuery::new(query.join(" "))
            .with_column(TERMS.to_string())
            .map_err(|e| self.store.lance_error(table, e))?
            .limit(Some(candidates as i64));
        // Only what ranking needs: the candidates' full rows are read after,
        // and only for the results kept.
        let projected: Vec<&str> = columns.iter().copied().chain([TERMS]).collect();
        let batches = self
            .scan(table, &projected, &filter, |scan| {
                scan.full_text_search(search.clone())?
                    .prefilter(true)
                    .disable_scoring_autoprojection();
                Ok(())
            })
            .await?;
        let mut found = Vec::new();
        for batch in &batches {
            let rows: Vec<R> = batch_rows(table, batch)?;
            let terms = strings(batch, TERMS).ok_or_else(|| StoreError::Invalid {
                table,
                message: format!("no {TERMS} column"),
            })?;
            found.extend(
                rows.into_iter()
                    .zip(terms.iter())
                    .map(|(row, terms)| (row, terms.unwrap_or_default().to_string())),
            );
        }
        Ok(found)
    }
}

/// `a` before `b`: the higher score, then the smaller id.
fn best_first<Id: Ord>(a: &(Id, f64), b: &(Id, f64)) -> std::cmp::Ordering {
    b.1.total_cmp(&a.1).then(a.0.cmp(&b.0))
}

/// Each document's best passage (the highest score, then the earliest), the
/// documents best first, ties in document id order, at most `limit`: the
/// document, the score, the passage's id.
fn best_per_document(scored: Vec<(PassageMatch, f64)>, limit: usize) -> Vec<(String, f64, String)> {
    let mut best: HashMap<String, (f64, PassageMatch)> = HashMap::new();
    for (passage, score) in scored {
        let better = |(s, m): &(f64, PassageMatch)| {
            score
                .total_cmp(s)
                .then(m.ordinal.cmp(&passage.ordinal))
                .is_gt()
        };
        if best.get(&passage.doc_id).is_none_or(better) {
            best.insert(passage.doc_id.clone(), (score, passage));
        }
    }
    let mut ranked: Vec<(String, f64, String)> = best
        .into_iter()
        .map(|(d, (s, m))| (d, s, m.seg_id))
        .collect();
    ranked.sort_by(|a, b| best_first(&(&a.0, a.1), &(&b.0, b.1)));
    ranked.truncate(limit);
    ranked
}

/// The `limit` best passages, ties in document order.
fn best_passages(mut scored: Vec<(PassageMatch, f64)>, limit: usize) -> Vec<(PassageMatch, f64)> {
    scored.sort_by(|(a, x), (b, y)| {
        best_first(&((&a.doc_id, a.ordinal), *x), &((&b.doc_id, b.ordinal), *y))
    });
    scored.truncate(limit);
    scored
}

#[cfg(test)]
mod tests {
    use super::*;

    fn passage(seg_id: &str, doc_id: &str, ordinal: u32, score: f64) -> (PassageMatch, f64) {
        let (seg_id, doc_id) = (seg_id.to_string(), doc_id.to_string());
        let found = PassageMatch {
            seg_id,
            doc_id,
            ordinal,
        };
        (found, score)
    }

    /// A document too short to cut keeps one segment for every cut
    /// (`WHOLE_DOCUMENT_CUT`): the passages the baselines rank include it,
    /// beside the finest cut's, and in a memory of such documents only it is
    /// the passages.
    #[tokio::test]
    async fn a_whole_document_is_a_passage_of_every_cut() {
        use crate::navigate::fixture::{FIXTURE_CACHE_MIB, rows, written};
        use memweave_schemas::search::WHOLE_DOCUMENT_CUT;
        async fn found(memory: &Snapshot) -> Vec<String> {
            let query = memweave_schemas::text::terms("Which investors fund founders?");
            let found = memory.passages_by_bm25(&query, Allowed(None), 3).await;
            let found = found.expect("the passages read");
            found.iter().map(|(s, _)| s.seg_id.clone()).collect()
        }
        let mut tables = rows();
        for segment in &mut tables.segments {
            if segment.doc_id == "startup" {
                segment.target_tokens = WHOLE_DOCUMENT_CUT;
            }
        }
        let mixed = written(tables.clone(), FIXTURE_CACHE_MIB).await;
        assert_eq!(mixed.passage_cut, Some(400));
        assert_eq!(found(&mixed).await, ["s-s1"]);
        tables.segments.retain(|s| s.doc_id == "startup");
        let whole = written(tables, FIXTURE_CACHE_MIB).await;
        assert_eq!(whole.passage_cut, Some(WHOLE_DOCUMENT_CUT));
        assert_eq!(found(&whole).await, ["s-s1"]);
    }

    /// A document that is its own gist keeps no gist memory row: its whole
    /// document's segment (`OWN_GIST_CUT`) stands in, chosen and counted
    /// with the gist memories, and stays a passage of every cut.
    #[tokio::test]
    async fn a_document_that_is_its_own_gist_is_chosen_by_its_segment() {
        use crate::navigate::fixture::{FIXTURE_CACHE_MIB, rows, written};
        use memweave_schemas::search::WHOLE_DOCUMENT_CUT;
        async fn chosen(memory: &Snapshot, allowed: Option<&[String]>) -> (Option<String>, usize) {
            let query = memweave_schemas::text::terms("Which investors fund founders?");
            let (best, candidates) = (memory.document_by_gists(&query, Allowed(allowed)))
                .await
                .expect("the gists read");
            (best.map(|(doc, _)| doc), candidates)
        }
        let query = memweave_schemas::text::terms("Which investors fund founders?");
        let mut tables = rows();
        tables.gist_memories.retain(|g| g.doc_id != "startup");
        for segment in &mut tables.segments {
            if segment.doc_id == "startup" {
                segment.target_tokens = OWN_GIST_CUT;
            }
        }
        let own = written(tables.clone(), FIXTURE_CACHE_MIB).await;
        assert_eq!(chosen(&own, None).await, (Some("startup".into()), 2));
        let startup = ["startup".to_string()];
        assert_eq!(
            chosen(&own, Some(&startup[..])).await,
            (Some("startup".into()), 1)
        );
        let paint = ["paint".to_string()];
        assert_eq!(chosen(&own, Some(&paint[..])).await, (None, 1));
        let passages = own.passages_by_bm25(&query, Allowed(None), 3).await;
        let passages = passages.expect("the passages read");
        assert_eq!(passages[0].0.seg_id, "s-s1");
        // A whole document with no gist memory row is not one of the gists.
        for segment in &mut tables.segments {
            if segment.doc_id == "startup" {
                segment.target_tokens = WHOLE_DOCUMENT_CUT;
            }
        }
        let not_own = written(tables, FIXTURE_CACHE_MIB).await;
        assert_eq!(chosen(&not_own, None).await, (None, 1));
    }

    /// Equal scores never leave the order to a hash map or to the order
    /// Lance found the candidates in: documents by id, passages by place.
    #[test]
    fn ties_are_broken_by_document_id_then_place() {
        let scored = || {
            vec![
                passage("c-2", "c", 2, 1.5),
                passage("b-4", "b", 4, 2.0),
                passage("a-9", "a", 9, 1.5),
                passage("b-1", "b", 1, 2.0),
                passage("a-3", "a", 3, 0.5),
                passage("d-0", "d", 0, 1.5),
            ]
        };
        let documents = |limit| {
            best_per_document(scored(), limit)
                .into_iter()
                .map(|(d, s, p)| format!("{d} {s} {p}"))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            documents(10),
            ["b 2 b-1", "a 1.5 a-9", "c 1.5 c-2", "d 1.5 d-0"]
        );
        assert_eq!(documents(2), ["b 2 b-1", "a 1.5 a-9"]);
        let mut reversed = scored();
        reversed.reverse();
        let passages = |scored, limit| {
            best_passages(scored, limit)
                .into_iter()
                .map(|(m, _)| m.seg_id)
                .collect::<Vec<_>>()
        };
        let expected = ["b-1", "b-4", "a-9", "c-2", "d-0"];
        assert_eq!(passages(scored(), 5), expected);
        assert_eq!(passages(reversed, 5), expected);
        assert_eq!(passages(scored(), 0), Vec::<String>::new());
    }
}
