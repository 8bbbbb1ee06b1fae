//! What the dataflow's outputs add up to, table by table, and how each round
//! changes it: the rows to delete from and append to the Lance tables.

use std::collections::{HashMap, HashSet};
use std::hash::Hash;

use memweave_operators::embed::EmbeddingRecord;
use memweave_schemas::{
    DocumentRow, EntityRow, ErrorRow, PageRow, RelationRow, SegmentRow, TreeNodeRow,
};

use crate::dataflow::WorkerOutput;

/// Rows with their multiplicities: a row is in the table while its count is
/// positive.
#[derive(Debug)]
pub struct Counts<R>(HashMap<R, isize>);

impl<R> Default for Counts<R> {
    fn default() -> Self {
        Counts(HashMap::new())
    }
}

/// The rows a round removed from one table and the rows it added; a row whose
/// content changed is in both (its old content removed, its new added).
#[derive(Debug)]
pub struct RowChanges<R> {
    pub removed: Vec<R>,
    pub added: Vec<R>,
}

impl<R> Default for RowChanges<R> {
    fn default() -> Self {
        RowChanges {
            removed: Vec::new(),
            added: Vec::new(),
        }
    }
}

impl<R: Clone + Eq + Hash> Counts<R> {
    /// Adds `diffs`; returns the rows that entered or left the table.
    fn apply(&mut self, diffs: HashMap<R, isize>) -> RowChanges<R> {
        let mut changes = RowChanges::default();
        for (row, diff) in diffs {
            let before = self.0.get(&row).copied().unwrap_or(0);
            let after = before + diff;
            match (before > 0, after > 0) {
                (false, true) => changes.added.push(row.clone()),
                (true, false) => changes.removed.push(row.clone()),
                _ => {}
            }
            if after == 0 {
                self.0.remove(&row);
            } else {
                self.0.insert(row, after);
            }
        }
        changes
    }

    /// The rows in the table, each once.
    pub fn rows(&self) -> impl Iterator<Item = &R> {
        self.0.iter().filter(|(_, c)| **c > 0).map(|(r, _)| r)
    }

    pub fn len(&self) -> usize {
        self.rows().count()
    }
}

impl<R: Clone + Eq + Hash> RowChanges<R> {
    /// Makes the changes of a process's first round, whose dataflow started
    /// empty, relative to `previous`, what the tables held: rows the tables
    /// already have are not added again, and rows they have that the new state
    /// lacks are removed.
    fn relative_to(&mut self, previous: Vec<R>, now: &Counts<R>) {
        let previous: HashSet<R> = previous.into_iter().collect();
        self.added.retain(|row| !previous.contains(row));
        self.removed = previous
            .into_iter()
            .filter(|row| now.0.get(row).is_none_or(|c| *c <= 0))
            .collect();
    }
}

/// Every table's rows as the dataflow (and, for ingestion errors, the main
/// thread) has produced them so far.
#[derive(Debug, Default)]
pub struct TableState {
    pub documents: Counts<DocumentRow>,
    pub segments: Counts<SegmentRow>,
    pub tree_nodes: Counts<TreeNodeRow>,
    pub pages: Counts<PageRow>,
    pub entities: Counts<EntityRow>,
    pub relations: Counts<RelationRow>,
    pub embeddings: Counts<EmbeddingRecord>,
    pub errors: Counts<ErrorRow>,
}

/// One round's changes to every table.
#[derive(Debug, Default)]
pub struct TableChanges {
    pub documents: RowChanges<DocumentRow>,
    pub segments: RowChanges<SegmentRow>,
    pub tree_nodes: RowChanges<TreeNodeRow>,
    pub pages: RowChanges<PageRow>,
    pub entities: RowChanges<EntityRow>,
    pub relations: RowChanges<RelationRow>,
    pub embeddings: RowChanges<EmbeddingRecord>,
    pub errors: RowChanges<ErrorRow>,
}

/// What the tables held at the last checkpoint, for a process's first round.
#[derive(Debug, Default)]
pub struct PreviousTables {
    pub documents: Vec<DocumentRow>,
    pub segments: Vec<SegmentRow>,
    pub tree_nodes: Vec<TreeNodeRow>,
    pub pages: Vec<PageRow>,
    pub entities: Vec<EntityRow>,
    pub relations: Vec<RelationRow>,
    pub embeddings: Vec<EmbeddingRecord>,
    pub errors: Vec<ErrorRow>,
}

impl TableState {
    /// Adds the workers' outputs and the main thread's ingestion-error changes.
    pub fn apply(
        &mut self,
        outputs: Vec<WorkerOutput>,
        ingest_errors: HashMap<ErrorRow, isize>,
    ) -> TableChanges {
        let mut merged = WorkerOutput {
            errors: ingest_errors,
            ..WorkerOutput::default()
        };
        for output in outputs {
            merge(&mut merged.documents, output.documents);
            merge(&mut merged.segments, output.segments);
            merge(&mut merged.tree_nodes, output.tree_nodes);
            merge(&mut merged.pages, output.pages);
            merge(&mut merged.entities, output.entities);
            merge(&mut merged.relations, output.relations);
            merge(&mut merged.embeddings, output.embeddings);
            merge(&mut merged.errors, output.errors);
        }
        TableChanges {
            documents: self.documents.apply(merged.documents),
            segments: self.segments.apply(merged.segments),
            tree_nodes: self.tree_nodes.apply(merged.tree_nodes),
            pages: self.pages.apply(merged.pages),
            entities: self.entities.apply(merged.entities),
            relations: self.relations.apply(merged.relations),
            embeddings: self.embeddings.apply(merged.embeddings),
            errors: self.errors.apply(merged.errors),
        }
    }
}

impl TableChanges {
    /// See [`RowChanges::relative_to`].
    pub fn relative_to(&mut self, previous: PreviousTables, now: &TableState) {
        self.documents
            .relative_to(previous.documents, &now.documents);
        self.segments.relative_to(previous.segments, &now.segments);
        self.tree_nodes
            .relative_to(previous.tree_nodes, &now.tree_nodes);
        self.pages.relative_to(previous.pages, &now.pages);
        self.entities.relative_to(previous.entities, &now.entities);
        self.relations
            .relative_to(previous.relations, &now.relations);
        self.embeddings
            .relative_to(previous.embeddings, &now.embeddings);
        self.errors.relative_to(previous.errors, &now.errors);
    }
}

fn merge<D: Eq + Hash>(into: &mut HashMap<D, isize>, from: HashMap<D, isize>) {
    for (row, count) in from {
        *into.entry(row).or_insert(0) += count;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn diffs(pairs: &[(&'static str, isize)]) -> HashMap<&'static str, isize> {
        pairs.iter().copied().collect()
    }

    #[test]
    fn rows_enter_and_leave_when_their_count_crosses_zero() {
        let mut counts = Counts::default();
        let first = counts.apply(diffs(&[("a", 1), ("b", 2)]));
        let mut added = first.added.clone();
        added.sort();
        assert_eq!(added, vec!["a", "b"]);
        // b falls from 2 to 1: still there; a leaves; c arrives.
        let second = counts.apply(diffs(&[("a", -1), ("b", -1), ("c", 1)]));
        assert_eq!((second.removed, second.added), (vec!["a"], vec!["c"]));
        let mut rows: Vec<&&str> = counts.rows().collect();
        rows.sort();
        assert_eq!(rows, vec![&"b", &"c"]);
    }

    #[test]
    fn a_first_round_is_made_relative_to_the_previous_tables() {
        let mut counts = Counts::default();
        let mut changes = counts.apply(diffs(&[("kept", 1), ("new", 1)]));
        changes.relative_to(vec!["kept", "gone"], &counts);
        assert_eq!(
            (changes.removed, changes.added),
            (vec!["gone"], vec!["new"])
        );
    }
}
