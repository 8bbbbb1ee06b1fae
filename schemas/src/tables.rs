//! The memory tables: their names and Arrow schemas.

use std::sync::Arc;

use arrow_schema::{DataType, Field, FieldRef, Fields, Schema, SchemaRef, TimeUnit};

/// Every table memweave writes under a root URL, in the order a commit writes them:
/// `checkpoints` last, because a checkpoint names the versions of all the others.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub enum Table {
    Documents,
    Segments,
    TreeNodes,
    Pages,
    Entities,
    Relations,
    Embeddings,
    LlmCalls,
    /// Model calls made and answered from the cache, per round, stage and task.
    CallStats,
    Errors,
    Checkpoints,
}

/// Width of the vectors of the default (hashing) embedder; the embeddings table of a
/// store holds vectors of one width.
pub const DEFAULT_EMBEDDING_DIM: i32 = 256;

impl Table {
    pub const ALL: [Table; 11] = [
        Table::Documents,
        Table::Segments,
        Table::TreeNodes,
        Table::Pages,
        Table::Entities,
        Table::Relations,
        Table::Embeddings,
        Table::LlmCalls,
        Table::CallStats,
        Table::Errors,
        Table::Checkpoints,
    ];

    /// The tables the indexing dataflow fills, rows derived from the source:
    /// everything but the model's calls, their counts and the checkpoints.
    pub fn memory_tables() -> impl Iterator<Item = Table> {
        Self::ALL
            .into_iter()
            .filter(|t| !matches!(t, Table::LlmCalls | Table::CallStats | Table::Checkpoints))
    }

    /// The data tables: everything but `checkpoints`.
    pub fn data_tables() -> impl Iterator<Item = Table> {
        Self::ALL.into_iter().filter(|t| *t != Table::Checkpoints)
    }

    pub fn name(self) -> &'static str {
        match self {
            Table::Documents => "documents",
            Table::Segments => "segments",
            Table::TreeNodes => "tree_nodes",
            Table::Pages => "pages",
            Table::Entities => "entities",
            Table::Relations => "relations",
            Table::Embeddings => "embeddings",
            Table::LlmCalls => "llm_calls",
            Table::CallStats => "call_stats",
            Table::Errors => "errors",
            Table::Checkpoints => "checkpoints",
        }
    }

    /// The column that identifies a row (each row type's `key`).
    pub fn key_column(self) -> &'static str {
        match self {
            Table::Documents => "doc_id",
            Table::Segments => "seg_id",
            Table::TreeNodes => "node_id",
            Table::Pages => "page_id",
            Table::Entities => "entity_id",
            Table::Relations => "relation_id",
            Table::Embeddings => "owner_id",
            Table::LlmCalls => "call_key",
            Table::CallStats => "stat_id",
            Table::Errors => "error_id",
            Table::Checkpoints => "epoch",
        }
    }

    pub fn from_name(name: &str) -> Option<Table> {
        Self::ALL.into_iter().find(|t| t.name() == name)
    }

    pub fn schema(self) -> SchemaRef {
        Arc::new(Schema::new(self.fields()))
    }

    pub fn fields(self) -> Vec<FieldRef> {
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
            ],
            Table::Segments => vec![
                utf8("seg_id"),
                utf8("doc_id"),
                Field::new("ordinal", DataType::UInt32, false),
                Field::new("start_char", DataType::UInt64, false),
                Field::new("end_char", DataType::UInt64, false),
                utf8("text"),
                Field::new("n_tokens", DataType::UInt32, false),
                Field::new("target_tokens", DataType::UInt32, false),
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
                utf8("summary"),
                utf8_null("surprise"),
                Field::new("n_tokens", DataType::UInt32, false),
            ],
            Table::Pages => vec![
                utf8("page_id"),
                utf8("doc_id"),
                Field::new("ordinal", DataType::UInt32, false),
                Field::new("start_char", DataType::UInt64, false),
                Field::new("end_char", DataType::UInt64, false),
                utf8("text"),
                utf8("gist"),
            ],
            Table::Entities => vec![
                utf8("entity_id"),
                utf8("name"),
                utf8("type"),
                utf8("description"),
                utf8_list("aliases"),
                utf8_list("seg_ids"),
            ],
            Table::Relations => vec![
                utf8("relation_id"),
                utf8("source_id"),
                utf8("target_id"),
                utf8("description"),
                utf8_list("seg_ids"),
            ],
            Table::Embeddings => return embeddings_fields(DEFAULT_EMBEDDING_DIM),
            Table::LlmCalls => vec![
                utf8("call_key"),
                utf8("backend"),
                utf8("model"),
                utf8("task"),
                utf8("stage"),
                utf8_null("doc_id"),
                utf8("inputs"),
                utf8("reply"),
                Field::new("tokens_in", DataType::UInt32, false),
                Field::new("tokens_out", DataType::UInt32, false),
                Field::new("latency_ms", DataType::UInt32, false),
                timestamp("created_at"),
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
            Table::Errors => vec![
                utf8("error_id"),
                utf8("stage"),
                utf8("source"),
                utf8_null("doc_id"),
                utf8("kind"),
                utf8("message"),
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
            ],
        };
        fields.into_iter().map(Arc::new).collect()
    }
}

/// Fields of an embeddings table whose vectors have `dim` components.
pub fn embeddings_fields(dim: i32) -> Vec<FieldRef> {
    vec![
        utf8("owner_id"),
        utf8("model"),
        utf8("owner_kind"),
        Field::new(
            "vector",
            DataType::FixedSizeList(
                Arc::new(Field::new_list_field(DataType::Float32, false)),
                dim,
            ),
            false,
        ),
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

fn utf8(name: &str) -> Field {
    Field::new(name, DataType::Utf8, false)
}

fn utf8_null(name: &str) -> Field {
    Field::new(name, DataType::Utf8, true)
}

fn utf8_list(name: &str) -> Field {
    Field::new(
        name,
        DataType::List(Arc::new(Field::new_list_field(DataType::Utf8, false))),
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
