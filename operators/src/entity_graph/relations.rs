//! Relation descriptions: kept side by side within a budget, folded by the
//! paper's merge prompt past it, within a document and across documents.

use std::collections::BTreeSet;
use std::sync::Arc;

use memweave_schemas::{RelationRow, acl, content_id};

use super::{DocRelation, EVIDENCE_WORDS, GraphConfig, STAGE};
use crate::extract::{collapse_whitespace, head_words};
use crate::model::{CallContext, MemoryModel, RelationEvidence, StepResult};
use crate::tokens::count_tokens;

/// Between two descriptions kept side by side.
const DESCRIPTION_SEPARATOR: &str = "\n";

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
pub(super) async fn merge_descriptions<E>(
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
    /// The label set of its document ([`super::DocEntity::in_scope`]).
    fn acl(&self) -> Vec<String>;
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

    fn acl(&self) -> Vec<String> {
        acl::scope_of(&self.source_key)
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
        // Every relation of a pair is of its ends' label set.
        acl: found.first().map(R::acl).unwrap_or_default(),
    }
}
