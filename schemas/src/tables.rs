//! Every table memweave writes: its name, key, row type and Arrow schema.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_schema::{DataType, Field, FieldRef, Fields, Schema, SchemaRef, TimeUnit};

use crate::rows::*;

/// The column of a searched text's terms ([`crate::search`]).
pub const TERMS: &str = "terms";
/// The column of an entity's normalised name and aliases.
pub const NAME_KEYS: &str = "name_keys";

/// The columns `table` has beyond its row type's, derived from them for
/// search ([`crate::search`] fills them).
fn derived_fields(table: Table) -> Vec<Field> {
    match table {
        // Nullable: an older memory's entities gain it as nulls, then are
        // rebuilt (`STATE_FORMAT` 5).
        Table::Entities => vec![utf8_list(NAME_KEYS), zstd(utf8_null(TERMS))],
        _ => Vec::new(),
    }
}

/// A memory table's row: every one carries the label set of the documents
/// it was derived from ([`crate::acl`]).
pub trait Labelled: Sized {
    fn acl_mut(&mut self) -> &mut Vec<String>;

    /// The row, labelled `acl`.
    fn labelled(mut self, acl: &[String]) -> Self {
        acl.clone_into(self.acl_mut());
        self
    }
}

/// Something done to each memory table's rows, whatever their type
/// ([`MemoryTables::each_table`]): made into batches, read in.
pub trait EachTable {
    type Error;
    fn rows<R: TableRow>(&mut self, rows: &mut Vec<R>) -> Result<(), Self::Error>;
}

/// The one list of tables: each line gives a table's `Table` variant, name,
/// key column (its row type's key field) and row type; a memory table (one
/// the indexing dataflow fills) also names its [`MemoryRow`] variant and its
/// [`MemoryTables`] field. Adding a table is a line here, its row type and its
/// Arrow fields in [`Table::fields`].
macro_rules! tables {
    (
        memory { $( $mt:ident($mname:literal, $mkey:ident: $mrow:ident) as $mvar:ident in $mfield:ident, )* }
        ledger { $( $(#[$ldoc:meta])* $lt:ident($lname:literal, $lkey:ident: $lrow:ident), )* }
    ) => {
        /// Every table memweave writes under a root URL, in the order a commit
        /// writes them: `checkpoints` last, because a checkpoint names the
        /// versions of all the others.
        #[derive(
            Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize,
            serde::Deserialize,
        )]
        pub enum Table {
            $( $mt, )*
            $( $(#[$ldoc])* $lt, )*
        }

        impl Table {
            pub const ALL: &'static [Table] = &[$( Table::$mt, )* $( Table::$lt, )*];

            /// The tables the indexing dataflow fills, rows derived from the
            /// source: everything but the model's calls, their counts and the
            /// checkpoints.
            pub const MEMORY: &'static [Table] = &[$( Table::$mt, )*];

            pub fn name(self) -> &'static str {
                match self {
                    $( Table::$mt => $mname, )*
                    $( Table::$lt => $lname, )*
                }
            }

            /// The column that identifies a row (each row type's `key`).
            pub fn key_column(self) -> &'static str {
                match self {
                    $( Table::$mt => stringify!($mkey), )*
                    $( Table::$lt => stringify!($lkey), )*
                }
            }
        }

        $(
            impl TableRow for $mrow {
                const TABLE: Table = Table::$mt;
                fn key(&self) -> String {
                    self.$mkey.to_string()
                }
            }

            impl Labelled for $mrow {
                fn acl_mut(&mut self) -> &mut Vec<String> {
                    &mut self.acl
                }
            }
        )*
        $(
            impl TableRow for $lrow {
                const TABLE: Table = Table::$lt;
                fn key(&self) -> String {
                    self.$lkey.to_string()
                }
            }
        )*

        /// A row of any memory table: what the indexing dataflow outputs.
        #[derive(
            Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize,
            serde::Deserialize,
        )]
        pub enum MemoryRow {
            $( $mvar($mrow), )*
        }

        impl MemoryRow {
            pub fn table(&self) -> Table {
                match self {
                    $( MemoryRow::$mvar(_) => Table::$mt, )*
                }
            }

            /// The row's key in its table.
            pub fn key(&self) -> String {
                match self {
                    $( MemoryRow::$mvar(row) => row.key(), )*
                }
            }
        }

        /// Rows of every memory table, a list per table.
        #[derive(Debug, Clone, Default, PartialEq)]
        pub struct MemoryTables {
            $( pub $mfield: Vec<$mrow>, )*
        }

        impl MemoryTables {
            pub fn push(&mut self, row: MemoryRow) {
                match row {
                    $( MemoryRow::$mvar(row) => self.$mfield.push(row), )*
                }
            }

            /// Every row, table by table.
            pub fn rows(&self) -> impl Iterator<Item = MemoryRow> + '_ {
                std::iter::empty()
                    $( .chain(self.$mfield.iter().cloned().map(MemoryRow::$mvar)) )*
            }

            /// Sorts each table by its key (the order a table's rows are
            /// written in).
            pub fn sort_by_key(&mut self) {
                $( self.$mfield.sort_by_cached_key(TableRow::key); )*
            }

            /// `each` applied to every table's rows in turn, in
            /// [`Table::MEMORY`]'s order.
            pub fn each_table<E: EachTable>(&mut self, each: &mut E) -> Result<(), E::Error> {
                $( each.rows(&mut self.$mfield)?; )*
                Ok(())
            }
        }
    };
}

tables! {
    memory {
        Documents("documents", doc_id: DocumentRow) as Document in documents,
        Segments("segments", seg_id: SegmentRow) as Segment in segments,
        TreeNodes("tree_nodes", node_id: TreeNodeRow) as TreeNode in tree_nodes,
        Pages("pages", page_id: PageRow) as Page in pages,
        GistMemories("gist_memories", doc_id: GistMemoryRow) as GistMemory in gist_memories,
        Entities("entities", entity_id: EntityRow) as Entity in entities,
        NameStates("name_states", name: NameStateRow) as NameState in name_states,
        Relations("relations", relation_id: RelationRow) as Relation in relations,
        Embeddings("embeddings", owner_id: EmbeddingRow) as Embedding in embeddings,
        Errors("errors", error_id: ErrorRow) as Error in errors,
        DocStates("doc_states", doc_id: DocStateRow) as DocState in doc_states,
    }
    ledger {
        LlmCalls("llm_calls", call_key: LlmCallRow),
        /// Model calls made and answered from the cache, per round, stage and task.
        CallStats("call_stats", stat_id: CallStatRow),
        /// How many texts of each searched corpus hold each term: the
        /// statistics BM25 scores with, kept by every commit.
        /// Keyed by term: a commit replaces every corpus's row of a term
        /// it changes (a key the rows of a term share, which the lookups go by).
        Lexicon("lexicon", term: LexiconRow),
        Checkpoints("checkpoints", epoch: CheckpointRow),
    }
}

/// The width of vectors by default: the offline hashing embedder's, and the
/// one a table's schema is given where no vector says otherwise (the
/// embeddings table of a store holds vectors of one width). Every term of a
/// text lands in one of these slots, and a 1,000-token segment has some 300
/// distinct terms: at 256 slots a question's rare word shared a slot with
/// another term of the segment more often than not, at random sign, and that
/// noise outweighed the match. At 1024, dense found every M-NIAH needle at
/// 16k and 64k tokens (18 of 24 at 256); the measurements are in
/// docs/internals.md.
pub const DEFAULT_VECTOR_WIDTH: usize = 1024;

impl Table {
    /// The data tables: everything but `checkpoints`.
    pub fn data_tables() -> impl Iterator<Item = Table> {
        Self::ALL
            .iter()
            .copied()
            .filter(|t| *t != Table::Checkpoints)
    }

    /// The indexes every commit keeps over the rows it adds
    /// (`TableStore::index_lookups`): a B-tree on each column rows are
    /// looked up by (the key a commit deletes by, and the ids a walk follows:
    /// a document's segments, nodes and pages, an entity's relations, an
    /// owner's vector), a full-text index on each search column (and on
    /// entities' terms, which find the entities nearest a question where vectors
    /// are recomputed), a label-list
    /// index on entities' name keys, a bitmap on the vectors' owner kind (every
    /// vector search is filtered by it).
    pub fn column_indexes(self) -> &'static [(&'static str, ColumnIndex)] {
        use ColumnIndex::*;
        match self {
            Table::Documents => &[("doc_id", BTree)],
            Table::Segments => &[("seg_id", BTree), ("doc_id", BTree), (TERMS, FullText)],
            Table::TreeNodes => &[("node_id", BTree), ("doc_id", BTree), (TERMS, FullText)],
            Table::Pages => &[("page_id", BTree), ("doc_id", BTree)],
            Table::GistMemories => &[("doc_id", BTree), (TERMS, FullText)],
            Table::Entities => &[("entity_id", BTree), (NAME_KEYS, Labels), (TERMS, FullText)],
            Table::NameStates => &[("name", BTree)],
            Table::Relations => &[
                ("relation_id", BTree),
                ("source_id", BTree),
                ("target_id", BTree),
            ],
            Table::Embeddings => &[("owner_id", BTree), ("owner_kind", Bitmap)],
            Table::Errors => &[("error_id", BTree)],
            Table::DocStates => &[("doc_id", BTree)],
            // doc_id, subject: the calls a document or a subject asked
            // about again no longer needs, found to evict.
            Table::LlmCalls => &[("call_key", BTree), ("doc_id", BTree), ("subject", BTree)],
            Table::Lexicon => &[("term", BTree)],
            Table::CallStats | Table::Checkpoints => &[],
        }
    }

    pub fn from_name(name: &str) -> Option<Table> {
        Self::ALL.iter().copied().find(|t| t.name() == name)
    }

    pub fn schema(self) -> SchemaRef {
        Arc::new(Schema::new(self.fields()))
    }

    /// The table's Arrow fields, an embeddings table's vectors of the default
    /// width.
    pub fn fields(self) -> Vec<FieldRef> {
        self.fields_of_width(DEFAULT_VECTOR_WIDTH)
    }

    /// The table's Arrow fields, an embeddings table's vectors of
    /// `vector_width` components: its row type's, then the columns derived
    /// from them for search ([`crate::search`]).
    pub fn fields_of_width(self, vector_width: usize) -> Vec<FieldRef> {
        let mut fields = self.row_fields(vector_width);
        fields.extend(derived_fields(self).into_iter().map(Arc::new));
        fields
    }

    /// The names of the columns of the table's row type: what a reader of rows
    /// reads, without the columns derived for search.
    pub fn row_columns(self) -> Vec<String> {
        self.row_fields(DEFAULT_VECTOR_WIDTH)
            .iter()
            .map(|f| f.name().clone())
            .collect()
    }

    /// The fields of the table's row type.
    pub(crate) fn row_fields(self, vector_width: usize) -> Vec<FieldRef> {
        let fields = match self {
            Table::Documents => vec![
                utf8("doc_id"),
                utf8("source_uri"),
                utf8("content_hash"),
                Field::new("version", DataType::UInt64, false),
                utf8("title"),
                Field::new("n_chars", DataType::UInt64, false),
                Field::new("n_tokens", DataType::UInt64, false),
                timestamp("ingested_at"),
                Field::new("deleted", DataType::Boolean, false),
                utf8("text"),
                sections("sections"),
                // Nullable: an older memory's documents gain it as nulls.
                labels("acl"),
            ],
            Table::Segments => vec![
                utf8("seg_id"),
                utf8("doc_id"),
                Field::new("ordinal", DataType::UInt32, false),
                Field::new("start_char", DataType::UInt64, false),
                Field::new("end_char", DataType::UInt64, false),
                Field::new("n_tokens", DataType::UInt32, false),
                Field::new("target_tokens", DataType::UInt32, false),
                // Last, where it was when it was derived from a text column.
                zstd(utf8(TERMS)),
                labels("acl"),
            ],
            Table::TreeNodes => vec![
                utf8("node_id"),
                utf8("tree"),
                utf8_null("doc_id"),
                Field::new("level", DataType::UInt32, false),
                Field::new("ordinal", DataType::UInt32, false),
                utf8_null("parent_id"),
                utf8_list("child_ids"),
                utf8_null("seg_id"),
                // Null where a leaf is its segment's own text.
                utf8_null("summary"),
                utf8_null("surprise"),
                Field::new("n_tokens", DataType::UInt32, false),
                // Last, where it was when it was derived from the summary.
                zstd(utf8(TERMS)),
                labels("acl"),
            ],
            Table::Pages => vec![
                utf8("page_id"),
                utf8("doc_id"),
                Field::new("ordinal", DataType::UInt32, false),
                Field::new("start_char", DataType::UInt64, false),
                Field::new("end_char", DataType::UInt64, false),
                utf8_null("gist"),
                labels("acl"),
            ],
            // `terms` last, where it was when it was derived from the gists.
            Table::GistMemories => vec![utf8("doc_id"), zstd(utf8(TERMS)), labels("acl")],
            Table::Lexicon => vec![
                utf8("corpus"),
                utf8("term"),
                Field::new("rows", DataType::UInt64, false),
                Field::new("occurrences", DataType::UInt64, false),
                labels("acl"),
            ],
            Table::Entities => vec![
                utf8("entity_id"),
                utf8("name"),
                utf8("type"),
                utf8("description"),
                utf8_list("aliases"),
                utf8_list("seg_ids"),
                labels("acl"),
            ],
            Table::Relations => vec![
                utf8("relation_id"),
                utf8("source_id"),
                utf8("target_id"),
                utf8("description"),
                utf8_list("seg_ids"),
                labels("acl"),
            ],
            Table::Embeddings => return embeddings_fields(vector_width as i32),
            Table::LlmCalls => vec![
                utf8("call_key"),
                utf8("backend"),
                utf8("model"),
                utf8("task"),
                utf8("stage"),
                utf8_null("doc_id"),
                utf8_null("inputs"),
                zstd(utf8("reply")),
                Field::new("tokens_in", DataType::UInt32, false),
                Field::new("tokens_out", DataType::UInt32, false),
                Field::new("latency_ms", DataType::UInt32, false),
                timestamp("created_at"),
                utf8_null("subject"),
            ],
            Table::CallStats => vec![
                utf8("stat_id"),
                Field::new("epoch", DataType::UInt64, false),
                utf8("stage"),
                utf8("task"),
                Field::new("calls", DataType::UInt64, false),
                Field::new("cache_hits", DataType::UInt64, false),
                Field::new("tokens_in", DataType::UInt64, false),
                Field::new("tokens_out", DataType::UInt64, false),
            ],
            Table::DocStates => vec![
                utf8("doc_id"),
                utf8("build"),
                zstd(utf8("state")),
                labels("acl"),
            ],
            Table::NameStates => vec![
                utf8("name"),
                Field::new(
                    "asked",
                    DataType::List(Arc::new(Field::new_list_field(DataType::UInt32, false))),
                    false,
                ),
                labels("acl"),
            ],
            Table::Errors => vec![
                utf8("error_id"),
                utf8("stage"),
                utf8("source"),
                utf8_null("doc_id"),
                utf8("kind"),
                utf8("message"),
                labels("acl"),
            ],
            Table::Checkpoints => vec![
                Field::new("epoch", DataType::UInt64, false),
                timestamp("created_at"),
                utf8("source_positions"),
                Field::new(
                    "table_versions",
                    DataType::List(Arc::new(Field::new_list_field(
                        DataType::Struct(Fields::from(vec![
                            utf8("table"),
                            Field::new("version", DataType::UInt64, false),
                        ])),
                        false,
                    ))),
                    false,
                ),
                utf8_null("vector_model"),
                Field::new("vector_segment_tokens", DataType::UInt32, true),
            ],
        };
        fields.into_iter().map(Arc::new).collect()
    }
}

/// What an embeddings vector stands for, in the `vector` field's metadata so
/// that any reader of the table (pylance, DuckDB) can see it.
pub const VECTOR_COVERS: &str = "the owner's whole text: an embedder with an input limit \
    (all-MiniLM-L6-v2: 256 word pieces) reads it in overlapping windows and keeps their \
    mean weighted by each window's tokens";

/// Fields of an embeddings table whose vectors have `dim` components, each
/// a half float: half the bytes of single ones, which were four fifths of
/// the memory's vectors and a half of its bytes. Cosine rankings barely move
/// (`docs/internals.md` has the recall against single floats), and a search
/// re-ranks by exact cosine over these same values. Tables written before
/// keep their single floats ([`crate::TableStore::stage_batch`] casts to them).
fn embeddings_fields(dim: i32) -> Vec<FieldRef> {
    vec![
        utf8("owner_id"),
        utf8("model"),
        utf8("owner_kind"),
        Field::new(
            "vector",
            DataType::FixedSizeList(
                Arc::new(Field::new_list_field(DataType::Float16, false)),
                dim,
            ),
            false,
        )
        .with_metadata(HashMap::from([(
            "covers".to_string(),
            VECTOR_COVERS.to_string(),
        )])),
        labels("acl"),
    ]
    .into_iter()
    .map(Arc::new)
    .collect()
}

impl std::fmt::Display for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The kinds of index a column can have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnIndex {
    /// Rows by value: `column = v`, `column IN (…)`.
    BTree,
    /// BM25 over whitespace-separated terms ([`crate::search`]).
    FullText,
    /// Rows whose list holds a value: `array_has_any(column, […])`.
    Labels,
    /// Rows by value of a column with few distinct values: one bitmap each.
    Bitmap,
}

impl ColumnIndex {
    /// The index's name on `column`.
    pub fn name(self, column: &str) -> String {
        match self {
            ColumnIndex::BTree => format!("{column}_btree"),
            ColumnIndex::FullText => format!("{column}_fts"),
            ColumnIndex::Labels => format!("{column}_labels"),
            ColumnIndex::Bitmap => format!("{column}_bitmap"),
        }
    }
}

fn utf8(name: &str) -> Field {
    repeats_shared(Field::new(name, DataType::Utf8, false))
}

/// A string column Lance may store as a dictionary of its distinct values
/// wherever any value repeats, not only where at most half are distinct
/// (its default divisor, 2); it still keeps the plain layout where the
/// dictionary would not come out smaller. Lance counts the distinct values
/// in samples of contiguous rows, and our tables are written in key order,
/// so a run of rows is distinct even where the column repeats each value
/// (a lexicon term once per corpus): at the default it never tries one.
/// Measured with pylance on
/// pg-essays' tables: the lexicon's terms (a term once per corpus, 27%
/// distinct) 191 → 106 KB, the RAPTOR nodes' surprising facts (a fact kept
/// by the nodes above it, 40%) 180 → 92 KB, the entities' descriptions
/// (77%) 90 → 75 KB; no column came out larger.
fn repeats_shared(field: Field) -> Field {
    let mut metadata = field.metadata().clone();
    metadata.insert(DICTIONARY_DIVISOR_KEY.to_string(), "1".to_string());
    field.with_metadata(metadata)
}

/// `field` with its values compressed by zstd rather than Lance's default for
/// strings of a few kilobytes (FSST over small blocks): model replies repeat
/// whole phrases of their prompts and of each other, and a document's state
/// its keys and ids, which zstd finds and FSST's symbol table of 8-byte
/// substrings cannot. Measured: the call cache's replies 0.57 → 0.30 bytes a
/// byte of text on python passages, 0.69 → 0.55 on pg-essays; the states of
/// 100,000 generated short documents 0.65 → 0.22 bytes a byte of their JSON
/// (larger states, a long document's, Lance compresses already). Text,
/// summaries and descriptions came out larger with it on some archives, and
/// keep the default. The search columns' sorted terms
/// ([`crate::text::searched_terms`]) are smaller with it, a term's repeats
/// side by side: pg-essays' segments 383 → 296 KB, 20,000 short documents'
/// 5.94 → 5.83 MB (the tree nodes', whose parents repeat their children's
/// sentences, 56 → 74 KB and 478 → 444 KB).
///
/// In mini-blocks, several values compressed together: for values past a
/// few hundred bytes Lance otherwise stores them "full zip", each value
/// compressed alone, where zstd finds no repeat between one reply or state
/// and the next. Measured with pylance on the tables of the 100k generated
/// short documents: replies 164 → 121 bytes a row, states 823 → 733; on
/// pg-essays 268 → 205 and 3,954 → 3,799.
fn zstd(field: Field) -> Field {
    let mut metadata = field.metadata().clone();
    metadata.extend([
        (COMPRESSION_KEY.to_string(), "zstd".to_string()),
        (STRUCTURAL_ENCODING_KEY.to_string(), "miniblock".to_string()),
    ]);
    field.with_metadata(metadata)
}

/// The field metadata key Lance reads a column's compression from.
pub(crate) const COMPRESSION_KEY: &str = "lance-encoding:compression";
/// The field metadata key Lance reads how a column's values are laid out
/// in its pages from: in mini-blocks of several values, or each value whole.
pub(crate) const STRUCTURAL_ENCODING_KEY: &str = "lance-encoding:structural-encoding";
/// The field metadata key Lance reads its dictionary threshold from: the
/// larger the divisor, the fewer distinct values before it tries one.
const DICTIONARY_DIVISOR_KEY: &str = "lance-encoding:dict-divisor";

fn utf8_null(name: &str) -> Field {
    repeats_shared(Field::new(name, DataType::Utf8, true))
}

fn utf8_list(name: &str) -> Field {
    Field::new(
        name,
        DataType::List(Arc::new(Field::new_list_field(DataType::Utf8, false))),
        false,
    )
}

/// A set of access labels ([`crate::acl`]), a few distinct sets in a table.
fn labels(name: &str) -> Field {
    Field::new(
        name,
        DataType::List(Arc::new(Field::new_list_field(DataType::Utf8, false))),
        true,
    )
}

/// A list of [`crate::Section`]s.
fn sections(name: &str) -> Field {
    let section = DataType::Struct(
        vec![
            Field::new("start_char", DataType::UInt64, false),
            utf8("kind"),
            utf8("label"),
        ]
        .into(),
    );
    Field::new(
        name,
        DataType::List(Arc::new(Field::new_list_field(section, false))),
        false,
    )
}

fn timestamp(name: &str) -> Field {
    Field::new(
        name,
        DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
        false,
    )
}
