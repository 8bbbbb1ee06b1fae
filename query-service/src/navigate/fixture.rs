//! A two-document memory small enough to reason about by hand, and the
//! extractive model and hashing embedder to navigate it with: the navigators'
//! unit tests ask it questions and check each step.

use memweave_llm::TaskModel;
use memweave_operators::build::gist_memory;
use memweave_operators::embed::HashingEmbedder;
use memweave_operators::lexical::hashing_embedding;
use memweave_schemas::{
    DocumentRow, EmbeddingRow, EntityRow, MemoryTables, PageRow, RelationRow, Segment, SegmentRow,
    TREE_MEMWALKER, TREE_RAPTOR, TableStore, TreeNodeRow,
};

use std::sync::Arc;

use crate::cache::ReadCache;
use crate::request::{AskOptions, AskRequest, Strategy};
#[cfg(feature = "server")]
use crate::service::{Limits, ServiceState};
use crate::{Answer, Models, Snapshot, ask};

const DIM: usize = 64;
/// The fixture's read caches: enough for all of it.
pub(crate) const FIXTURE_CACHE_MIB: u64 = 8;

/// "paint": two segments; the first leaf's summary promises what only the
/// second segment says, so a walk must revert from it. "startup": one segment.
pub(crate) const SEGMENTS: [(&str, &str, &str); 3] = [
    (
        "paint",
        "s-p1",
        "I spent a winter painting still lifes. The studio was cold and quiet. Paint dried slowly on the canvas.",
    ),
    (
        "paint",
        "s-p2",
        "Painting taught me to look closely at light. Looking at paint every day taught me patience.",
    ),
    (
        "startup",
        "s-s1",
        "Startups should grow fast. Investors fund founders whose companies grow.",
    ),
];

/// The fixture's memory, written as the indexer writes one (tables, lexicon,
/// indexes, a checkpoint) into a directory that lives as long as it does.
pub(crate) struct Memory {
    snapshot: Snapshot,
    _dir: tempfile::TempDir,
}

impl std::ops::Deref for Memory {
    type Target = Snapshot;
    fn deref(&self) -> &Snapshot {
        &self.snapshot
    }
}

pub(crate) async fn memory() -> Memory {
    memory_with_cache(FIXTURE_CACHE_MIB).await
}

/// The fixture's memory read through caches of `cache_mib` MiB.
pub(super) async fn memory_with_cache(cache_mib: u64) -> Memory {
    written(rows(), cache_mib).await
}

/// The fixture plus a document of `HUB_SEGMENTS` segments that are all one
/// entity's ("Harbour Guild"): a hub, as common names become in a large
/// archive. Two of its segments are about the guild's murals.
pub(crate) async fn memory_with_hub() -> Memory {
    written(rows_with_hub(), FIXTURE_CACHE_MIB).await
}

/// The hub fixture as a service serves it (the state the HTTP API and the
/// MCP tools share), with the directory its tables live in.
#[cfg(feature = "server")]
pub(crate) async fn served_with_hub() -> (Arc<ServiceState>, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let store = TableStore::local(dir.path()).expect("a store");
    store
        .commit_memory(&rows_with_hub(), true)
        .await
        .expect("the fixture writes");
    let (model, embedder) = models();
    let cache = Arc::new(ReadCache::new(FIXTURE_CACHE_MIB));
    let state = ServiceState::new(
        store,
        cache,
        Arc::new(model),
        Arc::new(embedder),
        Limits::default(),
    );
    state.refresh().await.expect("the fixture reads");
    (state, dir)
}

fn rows_with_hub() -> MemoryTables {
    let mut rows = rows();
    let mut seg_ids = Vec::new();
    let mut start = 0;
    // The hub's text: its segments one space apart.
    let mut hub_text: Vec<String> = Vec::new();
    for ordinal in 0..HUB_SEGMENTS {
        let text = if HUB_MURALS.contains(&ordinal) {
            format!("The Harbour Guild painted murals of lighthouses at dawn, mural {ordinal}.")
        } else {
            format!("Harbour Guild ledger entry {ordinal}: tides, ropes and cargo weighed.")
        };
        let seg_id = format!("s-h{ordinal:03}");
        let end = start + text.chars().count() as u64;
        rows.embeddings.push(embedding(&seg_id, "segment", &text));
        let row = SegmentRow {
            seg_id: seg_id.clone(),
            doc_id: "hub".into(),
            ordinal: ordinal as u32,
            start_char: start,
            end_char: end,
            n_tokens: 20,
            target_tokens: 400,
            terms: String::new(),
            acl: Vec::new(),
        };
        rows.segments.push(Segment::new(row, text.clone()).row);
        hub_text.push(text);
        seg_ids.push(seg_id);
        start = end + 1;
    }
    rows.documents.push(DocumentRow {
        doc_id: "hub".into(),
        source_uri: "file:///hub.txt".into(),
        content_hash: String::new(),
        version: 1,
        title: "HUB".into(),
        n_chars: start,
        n_tokens: 0,
        ingested_at: 0,
        deleted: false,
        text: hub_text.join(" "),
        sections: Vec::new(),
        acl: Vec::new(),
    });
    rows.embeddings
        .push(embedding("e-guild", "entity", "Harbour Guild"));
    rows.entities.push(EntityRow {
        entity_id: "e-guild".into(),
        name: "Harbour Guild".into(),
        entity_type: "organisation".into(),
        description: String::new(),
        aliases: vec![],
        seg_ids,
        acl: Vec::new(),
    });
    for ordinal in 0..HUB_RELATIONS {
        rows.relations.push(RelationRow {
            relation_id: format!("r-guild-{ordinal:03}"),
            source_id: "e-guild".into(),
            target_id: "e-studio".into(),
            description: format!("The guild hired the studio, job {ordinal}. ").repeat(12),
            seg_ids: vec![format!("s-h{ordinal:03}")],
            acl: Vec::new(),
        });
    }
    rows
}

/// The hub document's segments, and which of them are about murals.
pub(crate) const HUB_SEGMENTS: usize = 600;
pub(super) const HUB_MURALS: [usize; 2] = [137, 421];
/// Relations between the hub and the studio, each with a long description.
pub(crate) const HUB_RELATIONS: usize = 200;

pub(crate) fn rows() -> MemoryTables {
    let mut rows = MemoryTables::default();
    for doc_id in ["paint", "startup"] {
        let text: Vec<&str> = SEGMENTS
            .iter()
            .filter(|s| s.0 == doc_id)
            .map(|s| s.2)
            .collect();
        let text = text.join(" ");
        rows.documents.push(DocumentRow {
            doc_id: doc_id.into(),
            source_uri: format!("file:///{doc_id}.txt"),
            content_hash: String::new(),
            version: 1,
            title: doc_id.to_uppercase(),
            n_chars: text.chars().count() as u64,
            n_tokens: 0,
            ingested_at: 0,
            deleted: false,
            text,
            sections: Vec::new(),
            acl: Vec::new(),
        });
    }
    let mut offsets = std::collections::HashMap::new();
    for (ordinal, (doc_id, seg_id, text)) in SEGMENTS.iter().enumerate() {
        let start: &mut u64 = offsets.entry(*doc_id).or_default();
        let row = SegmentRow {
            seg_id: (*seg_id).into(),
            doc_id: (*doc_id).into(),
            ordinal: ordinal as u32,
            start_char: *start,
            end_char: *start + text.chars().count() as u64,
            n_tokens: 20,
            target_tokens: 400,
            terms: String::new(),
            acl: Vec::new(),
        };
        rows.segments.push(Segment::new(row, (*text).into()).row);
        *start += text.chars().count() as u64 + 1;
        rows.embeddings.push(embedding(seg_id, "segment", text));
        // RAPTOR's leaves are the segments too, summarised as themselves.
        let raptor_id = format!("r-{seg_id}");
        rows.tree_nodes.push(node(
            TREE_RAPTOR,
            doc_id,
            &raptor_id,
            None,
            &[],
            Some(seg_id),
            text,
        ));
        rows.embeddings.push(embedding(&raptor_id, "node", text));
    }
    let memwalker = [
        (
            "paint",
            "n-p",
            None,
            &["n-p1", "n-p2"][..],
            None,
            "Painting still lifes, and what painting taught.",
        ),
        (
            "paint",
            "n-p1",
            Some("n-p"),
            &[][..],
            Some("s-p1"),
            "What painting taught about patience.",
        ),
        (
            "paint",
            "n-p2",
            Some("n-p"),
            &[][..],
            Some("s-p2"),
            "A cold studio.",
        ),
        (
            "startup",
            "n-s",
            None,
            &["n-s1"][..],
            None,
            "Startups grow fast; investors fund them.",
        ),
        // A leaf that is its segment's own text, kept without it, as the
        // indexer keeps a short document's.
        (
            "startup",
            "n-s1",
            Some("n-s"),
            &[][..],
            Some("s-s1"),
            SEGMENTS[2].2,
        ),
    ];
    for (doc_id, id, parent, children, seg_id, summary) in memwalker {
        let mut node = node(
            TREE_MEMWALKER,
            doc_id,
            id,
            parent,
            children,
            seg_id,
            summary,
        );
        if let Some((_, _, text)) = SEGMENTS.iter().find(|(_, s, _)| Some(*s) == seg_id) {
            node.forget_own_text(text);
        }
        rows.tree_nodes.push(node);
    }
    // Each page is one segment's stretch of text (by its place in SEGMENTS) with a gist.
    for (doc_id, page_id, ordinal, gist, segment) in [
        (
            "paint",
            "g-p1",
            0,
            "A winter of painting in a cold studio.",
            0,
        ),
        (
            "paint",
            "g-p2",
            1,
            "Painting taught looking and patience.",
            1,
        ),
        ("startup", "g-s1", 0, "Startups, growth and investors.", 2),
    ] {
        let segment = &rows.segments[segment];
        rows.pages.push(PageRow {
            page_id: page_id.into(),
            doc_id: doc_id.into(),
            ordinal,
            start_char: segment.start_char,
            end_char: segment.end_char,
            gist: Some(gist.into()),
            acl: Vec::new(),
        });
    }
    for (entity_id, name, aliases, seg_ids) in [
        (
            "e-studio",
            "Studio",
            vec!["The Atelier".to_string()],
            vec!["s-p1".to_string()],
        ),
        ("e-investors", "Investors", vec![], vec!["s-s1".to_string()]),
    ] {
        rows.embeddings.push(embedding(entity_id, "entity", name));
        rows.entities.push(EntityRow {
            entity_id: entity_id.into(),
            name: name.into(),
            entity_type: "concept".into(),
            description: String::new(),
            aliases,
            seg_ids,
            acl: Vec::new(),
        });
    }
    rows.relations.push(RelationRow {
        relation_id: "r-studio-investors".into(),
        source_id: "e-studio".into(),
        target_id: "e-investors".into(),
        description: "unrelated, for the expansion".into(),
        seg_ids: vec!["s-s1".into()],
        acl: Vec::new(),
    });
    for doc_id in ["paint", "startup"] {
        let pages: Vec<PageRow> = rows
            .pages
            .iter()
            .filter(|p| p.doc_id == doc_id)
            .cloned()
            .collect();
        let text = &rows
            .documents
            .iter()
            .find(|d| d.doc_id == doc_id)
            .unwrap()
            .text;
        rows.gist_memories.push(gist_memory(doc_id, text, &pages));
    }
    rows
}

/// The fixture with each document's rows labelled as two tenants' would be:
/// "paint" [`PAINTERS`], "startup" [`FOUNDERS`], each entity and vector with
/// its document's labels, and no relation (the fixture's one joins the two).
pub(crate) fn labelled_rows() -> MemoryTables {
    use memweave_schemas::Labelled;
    let mut rows = rows();
    let labels_of = |doc_id: &str| -> Vec<String> {
        let set = if doc_id == "paint" {
            PAINTERS
        } else {
            FOUNDERS
        };
        vec![set.to_string()]
    };
    let seg_doc: std::collections::HashMap<String, String> = (SEGMENTS.iter())
        .map(|(doc, seg, _)| (seg.to_string(), doc.to_string()))
        .collect();
    let doc_of_owner = |owner: &str| -> String {
        let seg = owner.strip_prefix("r-").unwrap_or(owner);
        match (seg_doc.get(seg), owner) {
            (Some(doc), _) => doc.clone(),
            (None, "e-studio") => "paint".into(),
            _ => "startup".into(),
        }
    };
    for d in &mut rows.documents {
        d.acl = labels_of(&d.doc_id);
    }
    for s in &mut rows.segments {
        s.acl = labels_of(&s.doc_id);
    }
    for n in &mut rows.tree_nodes {
        n.acl = labels_of(n.doc_id.as_deref().unwrap_or_default());
    }
    for p in &mut rows.pages {
        p.acl = labels_of(&p.doc_id);
    }
    rows.gist_memories = (rows.gist_memories.into_iter())
        .map(|g| {
            let acl = labels_of(&g.doc_id);
            g.labelled(&acl)
        })
        .collect();
    for e in &mut rows.embeddings {
        e.acl = labels_of(&doc_of_owner(&e.owner_id));
    }
    for e in &mut rows.entities {
        e.acl = labels_of(&doc_of_owner(&e.entity_id));
    }
    rows.relations.clear();
    rows
}

/// The labels of [`labelled_rows`]' two tenants.
pub(crate) const PAINTERS: &str = "painters";
pub(crate) const FOUNDERS: &str = "founders";

/// `rows` written as the indexer writes a memory, read through caches of
/// `cache_mib` MiB.
pub(crate) async fn written(rows: MemoryTables, cache_mib: u64) -> Memory {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let store = TableStore::local(dir.path()).expect("a store");
    let checkpoint = store
        .commit_memory(&rows, true)
        .await
        .expect("the fixture writes");
    let cache = Arc::new(ReadCache::new(cache_mib));
    let snapshot = Snapshot::load(&store, &checkpoint, cache)
        .await
        .expect("the fixture reads");
    Memory {
        snapshot,
        _dir: dir,
    }
}

fn node(
    tree: &str,
    doc_id: &str,
    id: &str,
    parent: Option<&str>,
    children: &[&str],
    seg_id: Option<&str>,
    summary: &str,
) -> TreeNodeRow {
    TreeNodeRow {
        node_id: id.into(),
        tree: tree.into(),
        doc_id: Some(doc_id.into()),
        level: u32::from(!children.is_empty()),
        ordinal: 0,
        parent_id: parent.map(str::to_string),
        child_ids: children.iter().map(|c| c.to_string()).collect(),
        seg_id: seg_id.map(str::to_string),
        summary: Some(summary.into()),
        surprise: None,
        n_tokens: 10,
        terms: String::new(),
        acl: Vec::new(),
    }
    .with_terms()
}

fn embedding(owner_id: &str, kind: &str, text: &str) -> EmbeddingRow {
    let embedder = HashingEmbedder::new(DIM);
    EmbeddingRow::new(
        owner_id,
        kind,
        memweave_operators::embed::Embedder::model(&embedder),
        hashing_embedding(text, DIM),
    )
}

pub(crate) fn request(question: &str, strategy: Strategy) -> AskRequest {
    AskRequest {
        question: question.into(),
        strategy,
        documents: None,
        budget: None,
        options: AskOptions::default(),
        epoch: None,
    }
}

/// The extractive model, and the embedder that made the fixture's vectors.
pub(crate) fn models() -> (TaskModel, HashingEmbedder) {
    (TaskModel::extractive(), HashingEmbedder::new(DIM))
}

/// `request` answered over `snapshot` by the extractive model.
pub(crate) async fn answer(snapshot: &Snapshot, request: &AskRequest) -> Answer {
    let (model, embedder) = models();
    let models = Models {
        model: &model,
        embedder: &embedder,
    };
    ask(snapshot, request, models)
        .await
        .expect("an in-memory snapshot reads without failing")
}

/// The ids of the passages the answer cites, in order.
pub(crate) fn cited(answer: &Answer) -> Vec<&str> {
    answer
        .supporting
        .iter()
        .map(|p| p.from_id.as_str())
        .collect()
}

/// The trace's (action, target) pairs, in order.
pub(super) fn steps(answer: &Answer) -> Vec<(String, String)> {
    answer
        .trace
        .iter()
        .map(|s| (s.action.clone(), s.target.clone()))
        .collect()
}
