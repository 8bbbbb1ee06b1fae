//! A document's built rows, split once by where they go.

use differential_dataflow::{AsCollection, VecCollection};
use memweave_operators::build::BuiltRow;
use memweave_operators::entity_graph::{DocEntity, DocRelation};
use memweave_schemas::{EmbeddingRow, MemoryRow, TreeNodeRow};
use timely::container::CapacityContainerBuilder;
use timely::dataflow::channels::pact::Pipeline;
use timely::dataflow::operators::generic::OutputBuilder;
use timely::dataflow::operators::generic::builder_rc::OperatorBuilder;

use super::Built;

/// Where the rows of documents' builds go.
pub(super) struct BuiltParts<'scope> {
    /// To the tables as they are: segments, tree nodes, pages, gist memories,
    /// vectors, errors, states.
    pub rows: VecCollection<'scope, u64, MemoryRow, isize>,
    /// To the graph stages.
    pub entities: VecCollection<'scope, u64, DocEntity, isize>,
    pub relations: VecCollection<'scope, u64, DocRelation, isize>,
    /// To the corpus trees (empty unless `corpus_tree`): each document's
    /// MemWalker root, and its RAPTOR root with its vector.
    pub memwalker_roots: VecCollection<'scope, u64, TreeNodeRow, isize>,
    pub raptor_roots: VecCollection<'scope, u64, (TreeNodeRow, EmbeddingRow), isize>,
}

type Output<D> = OutputBuilder<u64, CapacityContainerBuilder<Vec<(D, u64, isize)>>>;

/// Splits `built` by where each row goes, in one pass.
pub(super) fn split_built<'scope>(
    built: VecCollection<'scope, u64, Built, isize>,
    corpus_tree: bool,
) -> BuiltParts<'scope> {
    let mut builder = OperatorBuilder::new("SplitBuilt".to_owned(), built.inner.scope());
    let mut input = builder.new_input(built.inner, Pipeline);
    let (rows, rows_stream) = builder.new_output();
    let (entities, entities_stream) = builder.new_output();
    let (relations, relations_stream) = builder.new_output();
    let (memwalker, memwalker_stream) = builder.new_output();
    let (raptor, raptor_stream) = builder.new_output();
    let mut rows: Output<MemoryRow> = OutputBuilder::from(rows);
    let mut entities: Output<DocEntity> = OutputBuilder::from(entities);
    let mut relations: Output<DocRelation> = OutputBuilder::from(relations);
    let mut memwalker: Output<TreeNodeRow> = OutputBuilder::from(memwalker);
    let mut raptor: Output<(TreeNodeRow, EmbeddingRow)> = OutputBuilder::from(raptor);
    builder.build(move |_capabilities| {
        move |_frontiers| {
            let (mut rows, mut entities, mut relations) =
                (rows.activate(), entities.activate(), relations.activate());
            let (mut memwalker, mut raptor) = (memwalker.activate(), raptor.activate());
            input.for_each_stamp(|stamp, data| {
                let mut rows = rows.session(&stamp);
                let mut entities = entities.session(&stamp);
                let mut relations = relations.session(&stamp);
                let mut memwalker = memwalker.session(&stamp);
                let mut raptor = raptor.session(&stamp);
                for (built, time, diff) in data.flat_map(|batch| batch.drain(..)) {
                    let row = match built {
                        Built::Row(row) => row,
                        Built::State(state) => {
                            rows.give((MemoryRow::DocState(state), time, diff));
                            continue;
                        }
                    };
                    let row = match row {
                        BuiltRow::Segment(s) => MemoryRow::Segment(s),
                        BuiltRow::TreeNode(n) => MemoryRow::TreeNode(n),
                        BuiltRow::Page(p) => MemoryRow::Page(p),
                        BuiltRow::GistMemory(g) => MemoryRow::GistMemory(g),
                        BuiltRow::Embedding(e) => MemoryRow::Embedding(e),
                        BuiltRow::Error(e) => MemoryRow::Error(e),
                        BuiltRow::Entity(e) => {
                            entities.give((e, time, diff));
                            continue;
                        }
                        BuiltRow::Relation(r) => {
                            relations.give((r, time, diff));
                            continue;
                        }
                        BuiltRow::MemWalkerRoot(root) => {
                            if corpus_tree {
                                memwalker.give((root, time, diff));
                            }
                            continue;
                        }
                        BuiltRow::RaptorRoot(root, vector) => {
                            if corpus_tree {
                                raptor.give(((root, vector), time, diff));
                            }
                            continue;
                        }
                    };
                    rows.give((row, time, diff));
                }
            });
        }
    });
    BuiltParts {
        rows: rows_stream.as_collection(),
        entities: entities_stream.as_collection(),
        relations: relations_stream.as_collection(),
        memwalker_roots: memwalker_stream.as_collection(),
        raptor_roots: raptor_stream.as_collection(),
    }
}
