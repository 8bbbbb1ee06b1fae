//! The four memories as tables: the invariants every build must hold, the
//! memories a build may leave out, and the embedders.

use std::collections::{HashMap, HashSet};

use memweave_operators::embed::{Embedder, HashingEmbedder};
use memweave_schemas::DEFAULT_VECTOR_WIDTH;
use memweave_schemas::{
    SegmentRow, TREE_MEMWALKER, TREE_MEMWALKER_CORPUS, TREE_RAPTOR, TREE_RAPTOR_CORPUS, TreeNodeRow,
};
use memweave_tests::{
    SimServer, Tables, index, memweave, read_calls, read_tables, shared_data, stderr,
};

use super::shared::pg_essays;

/// Everything the tables must hold whatever was built: references resolve,
/// segmentations and pages tile their documents, every tree has one root per
/// document and no cycle, every cluster member exists, every entity and
/// relation has sources, every vector has an owner and one width.
pub fn assert_invariants(t: &Tables) {
    let docs: HashMap<&str, u64> = t
        .documents
        .iter()
        .map(|d| (d.doc_id.as_str(), d.n_chars))
        .collect();
    let segments: HashMap<&str, &SegmentRow> =
        t.segments.iter().map(|s| (s.seg_id.as_str(), s)).collect();
    assert_eq!(segments.len(), t.segments.len(), "segment ids are unique");

    // Each segmentation of a document tiles it.
    // (document, segment size) → (ordinal, start, end) of each segment.
    type Spans = Vec<(u32, u64, u64)>;
    let mut cuts: HashMap<(&str, u32), Spans> = HashMap::new();
    for s in &t.segments {
        assert!(
            docs.contains_key(s.doc_id.as_str()),
            "segment {} has no document",
            s.seg_id
        );
        cuts.entry((s.doc_id.as_str(), s.target_tokens))
            .or_default()
            .push((s.ordinal, s.start_char, s.end_char));
    }
    for ((doc, target), mut spans) in cuts {
        spans.sort();
        assert_eq!(spans[0].1, 0);
        assert_eq!(spans.last().expect("a span").2, docs[doc]);
        for (i, pair) in spans.windows(2).enumerate() {
            assert_eq!(
                pair[0].2, pair[1].1,
                "gap or overlap in {doc} at {target} tokens"
            );
            assert_eq!(pair[0].0 as usize, i);
        }
    }

    assert_trees(t, &docs, &segments);

    // Pages tile their document; a gist is shorter than its page, or (a
    // page too short to shorten) the page itself, kept as no gist.
    let mut pages: HashMap<&str, Vec<(u64, u64)>> = HashMap::new();
    for p in &t.pages {
        let text = t.page_text(p);
        let gist = t.page_gist(p);
        assert!(
            !gist.is_empty() && (gist.len() < text.len() || (p.gist.is_none() && gist == text)),
            "gist of {}",
            p.page_id
        );
        pages
            .entry(p.doc_id.as_str())
            .or_default()
            .push((p.start_char, p.end_char));
    }
    for (doc, mut spans) in pages {
        spans.sort();
        assert_eq!(
            (spans[0].0, spans.last().expect("a page").1),
            (0, docs[doc])
        );
        assert!(spans.windows(2).all(|p| p[0].1 == p[1].0), "pages of {doc}");
    }

    // Entities come from segments; relations join two entities and come from segments.
    let entities: HashSet<&str> = t.entities.iter().map(|e| e.entity_id.as_str()).collect();
    assert_eq!(entities.len(), t.entities.len(), "entity ids are unique");
    for e in &t.entities {
        assert!(
            !e.seg_ids.is_empty(),
            "entity {} has no source segment",
            e.name
        );
        assert!(!e.name.is_empty() && !e.description.is_empty());
        for s in &e.seg_ids {
            assert!(
                segments.contains_key(s.as_str()),
                "entity {} names segment {s}",
                e.name
            );
        }
    }
    let relations: HashSet<&str> = t.relations.iter().map(|r| r.relation_id.as_str()).collect();
    assert_eq!(
        relations.len(),
        t.relations.len(),
        "relation ids are unique"
    );
    for r in &t.relations {
        assert!(entities.contains(r.source_id.as_str()) && entities.contains(r.target_id.as_str()));
        assert_ne!(r.source_id, r.target_id);
        assert!(!r.seg_ids.is_empty() && !r.description.is_empty());
        assert!(r.seg_ids.iter().all(|s| segments.contains_key(s.as_str())));
    }

    // Vectors: one width, unit length, each with its owner; every RAPTOR node
    // and entity has one.
    let nodes: HashSet<&str> = t.tree_nodes.iter().map(|n| n.node_id.as_str()).collect();
    let mut owners = HashSet::new();
    let vectors = t.vectors();
    for e in &vectors {
        assert_eq!(e.vector.len(), vectors[0].vector.len());
        let norm: f32 = e.vector.iter().map(|v| v * v).sum::<f32>().sqrt();
        assert!(
            (norm - 1.0).abs() < 1e-3 || norm == 0.0,
            "|{}| = {norm}",
            e.owner_id
        );
        let known = match e.owner_kind.as_str() {
            "segment" => segments.contains_key(e.owner_id.as_str()),
            "node" => nodes.contains(e.owner_id.as_str()),
            "entity" => entities.contains(e.owner_id.as_str()),
            other => panic!("unknown owner kind {other}"),
        };
        assert!(known, "the {} {} has no row", e.owner_kind, e.owner_id);
        assert!(
            owners.insert(e.owner_id.as_str()),
            "{} has two vectors",
            e.owner_id
        );
    }
    for n in t.tree_nodes.iter().filter(|n| n.tree == TREE_RAPTOR) {
        assert!(
            owners.contains(n.node_id.as_str()),
            "RAPTOR node {} has no vector",
            n.node_id
        );
    }
    for e in &t.entities {
        assert!(
            owners.contains(e.entity_id.as_str()),
            "entity {} has no vector",
            e.name
        );
    }
}

fn assert_trees(t: &Tables, docs: &HashMap<&str, u64>, segments: &HashMap<&str, &SegmentRow>) {
    let nodes: HashMap<&str, &TreeNodeRow> = t
        .tree_nodes
        .iter()
        .map(|n| (n.node_id.as_str(), n))
        .collect();
    assert_eq!(nodes.len(), t.tree_nodes.len(), "node ids are unique");
    let corpus_tree = |tree: &str| tree == TREE_MEMWALKER_CORPUS || tree == TREE_RAPTOR_CORPUS;
    // Roots per (tree, document); corpus trees count under no document.
    let mut roots: HashMap<(&str, Option<&str>), usize> = HashMap::new();
    for n in &t.tree_nodes {
        let corpus = corpus_tree(&n.tree);
        if !corpus {
            let doc = n
                .doc_id
                .as_deref()
                .expect("document trees name their document");
            assert!(docs.contains_key(doc));
        }
        match &n.parent_id {
            None => {
                let doc = if corpus { None } else { n.doc_id.as_deref() };
                *roots.entry((n.tree.as_str(), doc)).or_default() += 1
            }
            Some(p) => {
                let parent = nodes
                    .get(p.as_str())
                    .unwrap_or_else(|| panic!("parent {p} missing"));
                assert!(
                    parent.child_ids.contains(&n.node_id),
                    "{p} does not list {}",
                    n.node_id
                );
                assert_eq!((&parent.tree, parent.level), (&n.tree, n.level + 1));
            }
        }
        for c in &n.child_ids {
            let child = nodes
                .get(c.as_str())
                .unwrap_or_else(|| panic!("member {c} missing"));
            if corpus && n.level == 0 {
                // A corpus leaf stands for its document's root.
                assert_eq!(child.parent_id, None);
                assert_eq!(
                    (&child.doc_id, t.node_text(child)),
                    (&n.doc_id, t.node_text(n))
                );
                continue;
            }
            assert_eq!((&child.tree, child.level + 1), (&n.tree, n.level));
            if !corpus {
                assert_eq!(child.doc_id, n.doc_id);
            }
            if n.tree == TREE_MEMWALKER {
                assert_eq!(child.parent_id.as_deref(), Some(n.node_id.as_str()));
            }
        }
        // Walking up ends at a root without meeting a node twice.
        let mut seen = HashSet::new();
        let mut at = n;
        while let Some(p) = &at.parent_id {
            assert!(seen.insert(p.as_str()), "a cycle through {p}");
            at = nodes[p.as_str()];
        }
        if n.level == 0 && !corpus {
            let seg = n.seg_id.as_deref().expect("a leaf names its segment");
            assert!(
                segments.contains_key(seg),
                "leaf {} names segment {seg}",
                n.node_id
            );
        } else {
            assert!(
                !n.child_ids.is_empty(),
                "inner node {} has no members",
                n.node_id
            );
        }
        let text = t.node_text(n);
        assert!(!text.is_empty());
        // What the lexicon and the full-text index count: the text's terms,
        // kept once, on the segment, for a leaf that is its segment's text.
        let terms = memweave_schemas::text::searched_terms([text.as_str()]);
        if n.is_own_text() {
            let seg = n
                .seg_id
                .as_deref()
                .expect("an own-text leaf names its segment");
            assert!(
                n.terms.is_empty(),
                "{} keeps its segment's terms",
                n.node_id
            );
            assert_eq!(segments[seg].terms, terms, "{}", n.node_id);
        } else {
            assert_eq!(n.terms, terms);
        }
    }
    for tree in [TREE_MEMWALKER, TREE_RAPTOR] {
        let built: HashSet<&str> = t
            .tree_nodes
            .iter()
            .filter(|n| n.tree == tree)
            .filter_map(|n| n.doc_id.as_deref())
            .collect();
        for doc in &built {
            assert_eq!(
                roots.get(&(tree, Some(*doc))),
                Some(&1),
                "{tree} roots of {doc}"
            );
        }
    }
    for tree in [TREE_MEMWALKER_CORPUS, TREE_RAPTOR_CORPUS] {
        if t.tree_nodes.iter().any(|n| n.tree == tree) {
            assert_eq!(roots.get(&(tree, None)), Some(&1), "{tree} has one root");
        }
    }
}

#[test]
fn the_full_build_holds_every_invariant() {
    let t = &pg_essays().read;
    assert_eq!(t.documents.len(), 49);
    assert_invariants(t);
    // All four memories were built, for every document.
    for tree in [TREE_MEMWALKER, TREE_RAPTOR] {
        let roots = t
            .tree_nodes
            .iter()
            .filter(|n| n.tree == tree && n.parent_id.is_none())
            .count();
        assert_eq!(roots, 49, "{tree}");
    }
    let documents_with_pages: HashSet<&str> = t.pages.iter().map(|p| p.doc_id.as_str()).collect();
    assert_eq!(documents_with_pages.len(), 49);
    assert!(t.entities.len() > 500 && t.relations.len() > 500);
    // MemWalker leaves are the 400-token segments; RAPTOR leaves the 600-token chunks.
    let leaf_targets = |tree: &str| -> HashSet<u32> {
        let segs: HashMap<&str, u32> = t
            .segments
            .iter()
            .map(|s| (s.seg_id.as_str(), s.target_tokens))
            .collect();
        t.tree_nodes
            .iter()
            .filter(|n| n.tree == tree && n.level == 0)
            .map(|n| segs[n.seg_id.as_deref().expect("a leaf segment")])
            .collect()
    };
    assert_eq!(leaf_targets(TREE_MEMWALKER), HashSet::from([400]));
    assert_eq!(leaf_targets(TREE_RAPTOR), HashSet::from([600]));
    // Long essays cluster into several level-1 clusters; leaves carry surprising facts.
    let clustered = t
        .tree_nodes
        .iter()
        .filter(|n| n.tree == TREE_RAPTOR && n.level == 2)
        .count();
    assert!(
        clustered > 0,
        "some essay's RAPTOR tree has two levels of clusters"
    );
    assert!(
        t.tree_nodes
            .iter()
            .filter(|n| n.tree == TREE_RAPTOR && n.level == 0)
            .any(|n| n.surprise.is_some())
    );
    // Entities merged across documents keep every source.
    let multi_doc = t.entities.iter().filter(|e| {
        let docs: HashSet<&str> = e
            .seg_ids
            .iter()
            .filter_map(|s| t.segments.iter().find(|x| &x.seg_id == s))
            .map(|s| s.doc_id.as_str())
            .collect();
        docs.len() > 1
    });
    assert!(
        multi_doc.count() > 10,
        "names shared by essays become one entity"
    );
}

#[test]
fn memories_can_be_left_out() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let source = dir.path().join("essays");
    std::fs::create_dir(&source).expect("mkdir");
    for name in ["addiction.txt", "gh.txt", "wisdom.txt"] {
        std::fs::copy(shared_data("pg-essays").join(name), source.join(name)).expect("copy");
    }
    let graph_only = dir.path().join("graph");
    index(
        &source,
        &graph_only,
        &["--memories", "graph", "--passage-tokens", "0"],
    );
    let t = read_tables(&graph_only);
    assert_invariants(&t);
    assert!(t.segments.iter().all(|s| s.target_tokens == 1000));
    assert!(t.tree_nodes.is_empty() && t.pages.is_empty());
    assert!(!t.entities.is_empty() && !t.relations.is_empty());
    // No RAPTOR nodes, so no node vectors; the hashing embedder's are
    // recomputed, none stored.
    assert!(t.embeddings.is_empty());
    let vectors = t.vectors();
    let kinds: HashSet<&str> = vectors.iter().map(|e| e.owner_kind.as_str()).collect();
    assert_eq!(kinds, HashSet::from(["segment", "entity"]));

    let walker_reader = dir.path().join("walker-reader");
    index(
        &source,
        &walker_reader,
        &["--memories", "memwalker,readagent"],
    );
    let t = read_tables(&walker_reader);
    assert_invariants(&t);
    assert!(t.tree_nodes.iter().all(|n| n.tree == TREE_MEMWALKER) && !t.tree_nodes.is_empty());
    assert!(!t.pages.is_empty());
    assert!(t.entities.is_empty() && t.relations.is_empty() && t.embeddings.is_empty());
    // The MemWalker segments and the baselines' finer passages; no RAPTOR chunks.
    let cuts: HashSet<u32> = t.segments.iter().map(|s| s.target_tokens).collect();
    assert_eq!(cuts, HashSet::from([1000, 600]));

    let wrong = memweave([
        "index",
        source.to_str().expect("utf-8"),
        "--out",
        dir.path().join("x").to_str().expect("utf-8"),
        "--memories",
        "memwalker,raptr",
    ]);
    assert_eq!(wrong.status.code(), Some(2));
    assert!(
        stderr(&wrong).contains("unknown memory \"raptr\""),
        "{}",
        stderr(&wrong)
    );
}

/// By default the RAPTOR chunks are the MemWalker segments, and one ILM-TR call
/// per segment gives both trees their leaf: MemWalker's tree is the one it
/// builds alone with its own prompt, without that prompt's calls.
#[test]
fn raptor_and_memwalker_share_segments_and_leaf_calls() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let source = dir.path().join("essays");
    std::fs::create_dir(&source).expect("mkdir");
    std::fs::copy(
        shared_data("pg-essays").join("worked.txt"),
        source.join("worked.txt"),
    )
    .expect("copy");
    let tables = dir.path().join("memory");
    index(&source, &tables, &["--segment-tokens", "500"]);
    let t = read_tables(&tables);
    assert_invariants(&t);
    let leaves = |t: &Tables, tree: &str| -> Vec<(String, String)> {
        let mut leaves: Vec<(String, String)> = t
            .tree_nodes
            .iter()
            .filter(|n| n.tree == tree && n.level == 0)
            .map(|n| (n.seg_id.clone().expect("a leaf's segment"), t.node_text(n)))
            .collect();
        leaves.sort();
        leaves
    };
    let raptor = leaves(&t, TREE_RAPTOR);
    assert_eq!(leaves(&t, TREE_MEMWALKER), raptor);
    assert_eq!(raptor.len(), t.segments.len());
    let calls_of = |tables: &std::path::Path, task: &str| {
        read_calls(tables)
            .into_iter()
            .filter(|c| c.task == task)
            .count()
    };
    assert_eq!(calls_of(&tables, "summarize_segment"), 0);
    // One ILM-TR call for each RAPTOR node but the leaves whose segments,
    // shorter than the segmenter's minimum, are their own summaries.
    let segment_text: HashMap<&str, String> = (t.segments.iter())
        .map(|s| (s.seg_id.as_str(), t.segment_text(s)))
        .collect();
    let own = raptor
        .iter()
        .filter(|(seg, summary)| &segment_text[seg.as_str()] == summary)
        .count();
    let raptor_nodes = t
        .tree_nodes
        .iter()
        .filter(|n| n.tree == TREE_RAPTOR)
        .count();
    assert_eq!(
        calls_of(&tables, "summarize_with_facts"),
        raptor_nodes - own
    );

    let alone = dir.path().join("memwalker-alone");
    index(
        &source,
        &alone,
        &["--segment-tokens", "500", "--memories", "memwalker"],
    );
    let walker = |t: &Tables| -> Vec<TreeNodeRow> {
        let mut nodes: Vec<TreeNodeRow> = t
            .tree_nodes
            .iter()
            .filter(|n| n.tree == TREE_MEMWALKER)
            .cloned()
            .collect();
        nodes.sort_by(|a, b| a.node_id.cmp(&b.node_id));
        nodes
    };
    assert_eq!(walker(&read_tables(&alone)), walker(&t));
    assert_eq!(
        calls_of(&alone, "summarize_segment"),
        t.segments.len() - own
    );

    let apart = dir.path().join("apart");
    index(
        &source,
        &apart,
        &["--segment-tokens", "500", "--chunk-tokens", "300"],
    );
    assert!(calls_of(&apart, "summarize_segment") > 0);
}

/// The openai embedder through the simulator, whose /v1/embeddings hashes as
/// the offline embedder does: the same vectors, under the server's model name,
/// each batch asked once and then answered from the call cache.
#[test]
fn the_openai_embedder_gives_the_vectors_of_its_server() {
    let sim = SimServer::start(memweave_llm::sim::SimConfig {
        seed: 3,
        ..memweave_llm::sim::SimConfig::new(16, 1.0)
    });
    let dir = tempfile::tempdir().expect("a temp dir");
    let source = dir.path().join("essays");
    std::fs::create_dir(&source).expect("mkdir");
    for name in ["addiction.txt", "wisdom.txt"] {
        std::fs::copy(shared_data("pg-essays").join(name), source.join(name)).expect("copy");
    }
    let (hashing, remote) = (dir.path().join("hashing"), dir.path().join("remote"));
    index(&source, &hashing, &[]);
    let flags = memweave_tests::sim_embedder_flags(&sim.url);
    index(&source, &remote, &flags);
    let (a, b) = (read_tables(&hashing), read_tables(&remote));
    assert_invariants(&b);
    assert!(b.embeddings.iter().all(|e| e.model == "openai:sim-embed"));
    let offline = HashingEmbedder::new(DEFAULT_VECTOR_WIDTH);
    assert!(a.vectors().iter().all(|e| e.model == offline.model()));
    // The hashing memory stores none: each one recomputed from its row is
    // the one the server made of the same text.
    assert!(a.embeddings.is_empty() && !b.embeddings.is_empty());
    let vectors = |vectors: Vec<memweave_schemas::EmbeddingRow>| -> Vec<(String, Vec<f32>)> {
        vectors
            .into_iter()
            .map(|e| (e.owner_id, e.vector))
            .collect()
    };
    assert_eq!(vectors(a.vectors()), vectors(b.embeddings.clone()));
    assert_eq!(
        (a.tree_nodes.len(), a.entities.len()),
        (b.tree_nodes.len(), b.entities.len())
    );
    let embed_calls = |t: &std::path::Path| {
        read_calls(t)
            .into_iter()
            .filter(|c| c.task == "embed")
            .count()
    };
    let asked = embed_calls(&remote);
    assert!(asked > 0);
    assert_eq!(
        embed_calls(&hashing),
        0,
        "the hashing embedder calls nothing"
    );
    index(&source, &remote, &flags);
    // A re-run, the probe that learns the width included, is answered by the cache.
    assert_eq!(embed_calls(&remote), asked, "a re-run embeds nothing again");
}

/// The MiniLM weights the test command installs (scripts/bootstrap --tests).
fn minilm_dir() -> std::path::PathBuf {
    let dir = std::env::var_os("MEMWEAVE_MINILM_DIR")
        .expect("MEMWEAVE_MINILM_DIR names the MiniLM weights (scripts/test sets it)");
    std::path::PathBuf::from(dir)
}

/// all-MiniLM-L6-v2 in Rust: 384 unit-length dimensions that place a paraphrase
/// nearer than a sentence on another subject, the same vector alone or in a
/// padded batch; and a build with it.
#[test]
fn the_minilm_embedder_embeds_by_meaning() {
    let model = memweave_minilm::MiniLm::load(&minilm_dir()).expect("the weights load");
    let texts = [
        "A man is eating food.",
        "A man is eating a piece of bread.",
        "The girl is carrying a baby.",
        "A man is riding a horse on the beach while the sun sets behind the hills.",
    ];
    let vectors = model.embed_now(&texts).expect("a forward pass");
    assert!(vectors.iter().all(|v| v.len() == 384));
    let dot = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>();
    for v in &vectors {
        assert!((dot(v, v) - 1.0).abs() < 1e-4);
    }
    assert!(
        dot(&vectors[0], &vectors[1]) > 0.6,
        "{}",
        dot(&vectors[0], &vectors[1])
    );
    assert!(dot(&vectors[0], &vectors[1]) > dot(&vectors[0], &vectors[2]) + 0.3);
    // Padding a batch to its longest text changes nothing about a short one.
    let alone = model.embed_now(&texts[..1]).expect("a forward pass");
    assert!(dot(&alone[0], &vectors[0]) > 0.99999);
    // A text past the model's 256 word pieces is read whole, in windows: its
    // second half moves its vector.
    let riding = vec![texts[3]; 16].join(" ");
    let eating = vec![texts[1]; 25].join(" ");
    let long = format!("{riding} {eating}");
    let read = model.embed_now(&[&long, &riding]).expect("a forward pass");
    assert!((dot(&read[0], &read[0]) - 1.0).abs() < 1e-4);
    assert!(
        dot(&read[0], &vectors[0]) > dot(&read[1], &vectors[0]) + 0.1,
        "{} against {}",
        dot(&read[0], &vectors[0]),
        dot(&read[1], &vectors[0])
    );

    let dir = tempfile::tempdir().expect("a temp dir");
    let source = dir.path().join("essays");
    std::fs::create_dir(&source).expect("mkdir");
    std::fs::copy(
        shared_data("pg-essays").join("wisdom.txt"),
        source.join("wisdom.txt"),
    )
    .expect("copy");
    let tables = dir.path().join("memory");
    let minilm = minilm_dir();
    index(
        &source,
        &tables,
        &[
            "--embedder",
            "minilm",
            "--minilm-dir",
            minilm.to_str().expect("utf-8"),
        ],
    );
    let t = read_tables(&tables);
    assert_invariants(&t);
    assert!(!t.embeddings.is_empty());
    let models: std::collections::BTreeSet<(&str, usize)> = t
        .embeddings
        .iter()
        .map(|e| (e.model.as_str(), e.vector.len()))
        .collect();
    assert_eq!(
        models,
        std::collections::BTreeSet::from([("all-MiniLM-L6-v2-windowed", 384)])
    );
}
