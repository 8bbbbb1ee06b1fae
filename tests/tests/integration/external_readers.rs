//! Other programs read the tables: pylance and DuckDB see the rows memweave wrote.

use std::process::Command;

use memweave_schemas::store::IndexFloor;
use memweave_schemas::{ColumnIndex, Table, TableStore};
use memweave_tests::{SimServer, index, python, read_calls, read_tables, shared_data};

use super::shared::pg_essays;

const COUNT_ROWS: &str = r#"
import json, sys, lance, duckdb
root, tables = sys.argv[1], sys.argv[2].split(",")
counts, scalar_indices = {}, {}
for name in tables:
    ds = lance.dataset(f"{root}/{name}.lance")
    counts[name] = ds.count_rows()
    scalar_indices[name] = sorted(
        i["name"] for i in ds.list_indices() if i["fields"] != ["vector"]
    )
docs = lance.dataset(f"{root}/documents.lance").to_table(columns=["doc_id", "n_chars"]).to_pylist()
segments = lance.dataset(f"{root}/segments.lance").to_table(columns=["doc_id", "n_tokens"])
per_doc = duckdb.sql("SELECT count(DISTINCT doc_id), sum(n_tokens) FROM segments").fetchall()[0]
first = lance.dataset(f"{root}/segments.lance").to_table(columns=["seg_id", "terms"], limit=1).to_pylist()[0]
term = first["terms"].split()[0]
found = lance.dataset(f"{root}/segments.lance").to_table(
    columns=["seg_id", "terms"], full_text_query={"columns": ["terms"], "query": term}
).to_pylist()
print(json.dumps({
    "full_text_finds_the_term": bool(found)
        and any(r["seg_id"] == first["seg_id"] for r in found)
        and all(term in r["terms"].split() for r in found),
    "counts": counts,
    "scalar_indices": scalar_indices,
    "chars": sum(d["n_chars"] for d in docs),
    "duckdb_docs_with_segments": per_doc[0],
    "duckdb_segment_tokens": int(per_doc[1]),
}))
"#;

const SEARCH_VECTORS: &str = r#"
import json, sys, lance
embeddings = lance.dataset(f"{sys.argv[1]}/embeddings.lance")
probe = embeddings.to_table(limit=1).to_pylist()[0]
nearest = embeddings.to_table(
    columns=["owner_id"], nearest={"column": "vector", "q": probe["vector"], "k": 3, "nprobes": 4}
).to_pylist()
print(json.dumps({
    "rows": embeddings.count_rows(),
    "vector_indices": [i["type"] for i in embeddings.list_indices() if i["fields"] == ["vector"]],
    "nearest_is_itself": nearest[0]["owner_id"] == probe["owner_id"],
    "vector_covers": (embeddings.schema.field("vector").metadata or {}).get(b"covers", b"").decode(),
}))
"#;

/// An embedder with weights (here the simulator's, over HTTP) has its
/// vectors stored: pylance finds the vector index and searches through it.
#[test]
fn pylance_searches_the_stored_vectors() {
    let sim = SimServer::start(memweave_llm::sim::SimConfig::new(16, 1.0));
    let dir = tempfile::tempdir().unwrap();
    let tables = dir.path().join("memory");
    let flags = memweave_tests::sim_embedder_flags(&sim.url);
    index(&shared_data("pg-essays"), &tables, &flags);
    let output = Command::new(python())
        .args(["-c", SEARCH_VECTORS, tables.to_str().unwrap()])
        .output()
        .expect("python runs");
    assert!(
        output.status.success(),
        "pylance could not search the vectors: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let seen: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    // Enough vectors for an index: pylance finds it and searches through it.
    let stored = read_tables(&tables).embeddings.len();
    assert!(stored >= memweave_schemas::store::VECTOR_INDEX_MIN_ROWS);
    assert_eq!(seen["rows"], stored);
    assert_eq!(seen["vector_indices"], serde_json::json!(["IVF_RQ"]));
    assert_eq!(seen["nearest_is_itself"], true);
    // The schema says what a vector stands for.
    assert_eq!(
        seen["vector_covers"],
        memweave_schemas::tables::VECTOR_COVERS
    );
}

#[test]
fn pylance_and_duckdb_read_the_same_counts() {
    let built = pg_essays();
    let names: Vec<&str> = Table::ALL.iter().map(|t| t.name()).collect();
    let output = Command::new(python())
        .args([
            "-c",
            COUNT_ROWS,
            built.tables.to_str().unwrap(),
            &names.join(","),
        ])
        .output()
        .expect("python runs (the test command installs pylance in a virtual environment)");
    assert!(
        output.status.success(),
        "pylance could not read the tables: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let seen: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let t = &built.read;
    let expected = [
        ("documents", t.documents.len()),
        ("segments", t.segments.len()),
        ("tree_nodes", t.tree_nodes.len()),
        ("pages", t.pages.len()),
        ("gist_memories", t.gist_memories.len()),
        ("errors", t.errors.len()),
        ("entities", t.entities.len()),
        ("relations", t.relations.len()),
        ("embeddings", t.embeddings.len()),
        ("llm_calls", read_calls(&built.tables).len()),
        ("checkpoints", 1),
    ];
    for (table, count) in expected {
        assert_eq!(seen["counts"][table], count, "{table}");
    }
    // The hashing embedder's vectors are recomputed, not stored.
    assert_eq!(seen["counts"]["embeddings"], 0);
    // Every column a walk or a commit looks rows up by has a B-tree index,
    // every searched text a full-text index pylance searches through, once
    // the table holds what that kind waits for; below, pylance's search
    // scans.
    assert_eq!(seen["full_text_finds_the_term"], true);
    let floor = IndexFloor::default();
    let store = TableStore::local(&built.tables).unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    for &table in Table::ALL {
        let rows = seen["counts"][table.name()].as_u64().unwrap();
        let mut expected = Vec::new();
        for &(column, kind) in table.column_indexes() {
            let reached = match kind {
                ColumnIndex::FullText => {
                    let bytes = runtime.block_on(store.column_bytes(table, column));
                    bytes.unwrap() >= floor.full_text_bytes
                }
                _ => rows >= floor.lookup_rows,
            };
            if rows > 0 && reached {
                expected.push(kind.name(column));
            }
        }
        expected.sort();
        assert_eq!(
            seen["scalar_indices"][table.name()],
            serde_json::json!(expected),
            "{table}"
        );
    }
    let chars: u64 = t.documents.iter().map(|d| d.n_chars).sum();
    assert_eq!(seen["chars"], chars);
    assert_eq!(seen["duckdb_docs_with_segments"], t.documents.len());
    let tokens: u64 = t.segments.iter().map(|s| u64::from(s.n_tokens)).sum();
    assert_eq!(seen["duckdb_segment_tokens"], tokens);
}
