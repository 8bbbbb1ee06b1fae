//! Permissions: access labels given to documents by a dataset's column, a
//! map of path prefixes and a default, kept in the documents table and on
//! every row derived from them; the cross-document stages run per label
//! set; a change of labels alone rebuilds a document from the call cache.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use memweave_schemas::{TREE_MEMWALKER_CORPUS, TREE_RAPTOR_CORPUS, TreeNodeRow};
use memweave_tests::{Tables, index, memweave, model_calls, read_tables, stdout};

use super::incremental::comparable;
use super::shared::essay;

/// Every document's labels, by the key its source gives it (the path under
/// the archive, or a row's id), and its version.
fn labels(tables: &Tables) -> BTreeMap<String, (Vec<String>, u64)> {
    (tables.documents.iter())
        .map(|d| {
            let key = match d.sections.first() {
                Some(section) if section.kind == "row" => section.label.clone(),
                _ => (d.source_uri.rsplit_once("archive/"))
                    .map_or(d.source_uri.clone(), |(_, key)| key.to_string()),
            };
            (key, (d.acl.clone(), d.version))
        })
        .collect()
}

fn strings(labels: &[&str]) -> Vec<String> {
    labels.iter().map(|l| l.to_string()).collect()
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// Files take the labels of the longest prefix of their path the map names
/// (a TOML map here), dataset rows their own column's (a list or a
/// comma-separated string) or else their file's, and what nothing labels the
/// default; a row with a label that cannot be one is a `bad_record` error
/// naming it. Editing the map then relabels what it names, and only that:
/// those documents become new versions built from the call cache, without a
/// model call, and the tables equal a fresh build's under the new map.
#[test]
fn documents_carry_the_labels_their_source_gives_and_a_relabel_costs_no_call() {
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("archive");
    write(&archive.join("hr/policy.txt"), &essay("gap.txt"));
    write(&archive.join("hr/payroll/2026.txt"), &essay("want.txt"));
    write(&archive.join("hrx/notes.txt"), &essay("love.txt"));
    write(&archive.join("public/faq.txt"), &essay("hubs.txt"));
    let founders = essay("founders.txt");
    let paragraph = |n: usize| founders.split(". ").nth(n).unwrap().to_string();
    let rows = [
        serde_json::json!({"id": "r1", "text": paragraph(1), "acl": ["tenant-a", " shared"]}),
        serde_json::json!({"id": "r2", "text": paragraph(2), "acl": "tenant-b,shared,tenant-b"}),
        serde_json::json!({"id": "r3", "text": paragraph(3)}),
        serde_json::json!({"id": "r4", "text": paragraph(4), "acl": ["bad\u{7}label"]}),
        serde_json::json!({"id": "r5", "text": paragraph(5), "acl": 7}),
    ];
    let lines: Vec<String> = rows.iter().map(|r| r.to_string()).collect();
    write(
        &archive.join("public/rows.jsonl"),
        &(lines.join("\n") + "\n"),
    );
    let map = dir.path().join("acl.toml");
    let write_map = |hr: &str| {
        let toml =
            format!("hr = {hr}\n\"hr/payroll/\" = \"payroll, hr\"\npublic = [\"everyone\"]\n");
        std::fs::write(&map, toml).unwrap();
    };
    write_map("[\"hr\"]");
    let map_flag = map.display().to_string();
    let flags = [
        "--acl-column",
        "acl",
        "--acl-map",
        map_flag.as_str(),
        "--acl-default",
        "staff",
    ];
    let tables = dir.path().join("memory");
    index(&archive, &tables, &flags);
    let built = read_tables(&tables);
    let expected = |hr: &[&str]| -> BTreeMap<String, (Vec<String>, u64)> {
        [
            ("hr/policy.txt", strings(hr)),
            ("hr/payroll/2026.txt", strings(&["hr", "payroll"])),
            ("hrx/notes.txt", strings(&["staff"])),
            ("public/faq.txt", strings(&["everyone"])),
            ("r1", strings(&["shared", "tenant-a"])),
            ("r2", strings(&["shared", "tenant-b"])),
            ("r3", strings(&["everyone"])),
        ]
        .into_iter()
        .map(|(key, acl)| (key.to_string(), (acl, 1)))
        .collect()
    };
    assert_eq!(labels(&built), expected(&["hr"]));
    for (row, said) in [("rows.jsonl:4", "bad\\u{7}label"), ("rows.jsonl:5", "r5")] {
        let error = (built.errors.iter())
            .find(|e| e.source.ends_with(row))
            .unwrap_or_else(|| panic!("no error for {row}: {:?}", built.errors));
        assert_eq!(error.kind, "bad_record");
        assert!(error.message.contains(said), "{error:?}");
    }

    // The map's `hr` entry gains a label: the policy file is relabelled,
    // the payroll file (under a longer prefix) is not.
    write_map("[\"hr\", \"legal\"]");
    let run = index(&archive, &tables, &flags);
    assert!(
        stdout(&run).contains("(1 new or changed, 6 unchanged, 0 deleted)"),
        "{}",
        stdout(&run)
    );
    let (calls, hits) = model_calls(&run);
    assert_eq!(calls, 0, "a relabel made model calls: {}", stdout(&run));
    assert!(hits > 0, "the relabelled document was not rebuilt");
    let relabelled = read_tables(&tables);
    let mut now = expected(&["hr", "legal"]);
    now.get_mut("hr/policy.txt").unwrap().1 = 2;
    assert_eq!(labels(&relabelled), now);

    let scratch = dir.path().join("scratch");
    index(&archive, &scratch, &flags);
    assert_eq!(comparable(&relabelled), comparable(&read_tables(&scratch)));
}

/// A map or default that cannot label is refused before anything is read,
/// naming the file and the prefix.
#[test]
fn a_bad_map_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("archive");
    write(&archive.join("a.txt"), &essay("gap.txt"));
    let map = dir.path().join("acl.json");
    std::fs::write(&map, r#"{"team/": ["ok", "no,comma"]}"#).unwrap();
    let tables = dir.path().join("memory");
    let refused = |flags: &[&str]| -> String {
        let mut args = vec![
            "index",
            archive.to_str().unwrap(),
            "--out",
            tables.to_str().unwrap(),
        ];
        args.extend(flags);
        let out = memweave(args);
        assert!(!out.status.success(), "{flags:?} was not refused");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let said = refused(&["--acl-map", map.to_str().unwrap()]);
    assert!(said.contains("acl.json") && said.contains("team"), "{said}");
    assert!(refused(&["--acl-default", "a\tb"]).contains("--acl-default"));
    assert!(!tables.join("checkpoints.lance").exists());
}

/// Each document's labels, by id.
fn document_labels(tables: &Tables) -> BTreeMap<&str, &[String]> {
    (tables.documents.iter())
        .map(|d| (d.doc_id.as_str(), d.acl.as_slice()))
        .collect()
}

/// The label sets of the documents each of `seg_ids` is of.
fn sets_of<'t>(tables: &'t Tables, seg_ids: &[String]) -> BTreeSet<&'t [String]> {
    let labels = document_labels(tables);
    let doc_of: BTreeMap<&str, &str> = (tables.segments.iter())
        .map(|s| (s.seg_id.as_str(), s.doc_id.as_str()))
        .collect();
    (seg_ids.iter())
        .map(|s| labels[doc_of[s.as_str()]])
        .collect()
}

/// The documents under a corpus tree's node: its leaves' documents.
fn documents_under<'t>(
    node: &'t TreeNodeRow,
    nodes: &BTreeMap<&str, &'t TreeNodeRow>,
) -> BTreeSet<&'t str> {
    if node.level == 0 {
        return node.doc_id.as_deref().into_iter().collect();
    }
    (node.child_ids.iter())
        .flat_map(|child| documents_under(nodes[child.as_str()], nodes))
        .collect()
}

/// Checks that every entity, relation, name state and tree node holds the
/// labels of the documents it was derived from, one set each; returns how
/// many corpus roots each label set has.
fn assert_one_set_a_row(tables: &Tables) -> BTreeMap<Vec<String>, usize> {
    for entity in &tables.entities {
        let sets = sets_of(tables, &entity.seg_ids);
        assert_eq!(sets, BTreeSet::from([entity.acl.as_slice()]), "{entity:?}");
    }
    let entity_labels: BTreeMap<&str, &[String]> = (tables.entities.iter())
        .map(|e| (e.entity_id.as_str(), e.acl.as_slice()))
        .collect();
    for relation in &tables.relations {
        let sets = sets_of(tables, &relation.seg_ids);
        assert_eq!(
            sets,
            BTreeSet::from([relation.acl.as_slice()]),
            "{relation:?}"
        );
        assert_eq!(entity_labels[relation.source_id.as_str()], relation.acl);
        assert_eq!(entity_labels[relation.target_id.as_str()], relation.acl);
    }
    let labels = document_labels(tables);
    let mut corpus_roots = BTreeMap::new();
    for tree in [TREE_MEMWALKER_CORPUS, TREE_RAPTOR_CORPUS] {
        let nodes: BTreeMap<&str, &TreeNodeRow> = (tables.tree_nodes.iter())
            .filter(|n| n.tree == tree)
            .map(|n| (n.node_id.as_str(), n))
            .collect();
        for node in nodes.values() {
            let sets: BTreeSet<&[String]> = (documents_under(node, &nodes).into_iter())
                .map(|doc| labels[doc])
                .collect();
            assert_eq!(sets, BTreeSet::from([node.acl.as_slice()]), "{node:?}");
            if node.parent_id.is_none() {
                *corpus_roots.entry(node.acl.clone()).or_default() += 1;
            }
        }
    }
    for node in tables.tree_nodes.iter().filter(|n| n.doc_id.is_some()) {
        assert_eq!(
            node.acl,
            labels[node.doc_id.as_deref().unwrap()],
            "{node:?}"
        );
    }
    corpus_roots
}

/// Two tenants whose essays share names: built without labels, some of
/// their entities merge across them; labelled, no entity, relation or
/// corpus-tree node is written from both, each tenant has its own corpus
/// trees, and moving an essay from one tenant to the other (a map edit)
/// leaves the tables a fresh build under the new map gives.
#[test]
fn no_row_is_written_from_two_label_sets() {
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("archive");
    for (tenant, names) in [
        ("a", ["gap.txt", "founders.txt", "hubs.txt"]),
        ("b", ["want.txt", "love.txt", "apple.txt"]),
    ] {
        for name in names {
            write(&archive.join(tenant).join(name), &essay(name));
        }
    }
    let map = dir.path().join("acl.json");
    let write_map = |map_text: &str| std::fs::write(&map, map_text).unwrap();
    write_map(r#"{"a": ["tenant-a"], "b": ["tenant-b"]}"#);
    let map_flag = map.display().to_string();
    let labelled = ["--corpus-tree", "--acl-map", map_flag.as_str()];

    let unlabelled = dir.path().join("unlabelled");
    index(&archive, &unlabelled, &["--corpus-tree"]);
    let mixed = read_tables(&unlabelled);
    let tenant_of = |t: &Tables, seg_ids: &[String]| -> BTreeSet<String> {
        let doc_of: BTreeMap<&str, &str> = (t.segments.iter())
            .map(|s| (s.seg_id.as_str(), s.doc_id.as_str()))
            .collect();
        let uri_of: BTreeMap<&str, &str> = (t.documents.iter())
            .map(|d| (d.doc_id.as_str(), d.source_uri.as_str()))
            .collect();
        (seg_ids.iter())
            .map(|s| {
                let uri = uri_of[doc_of[s.as_str()]];
                let (_, key) = uri.rsplit_once("archive/").unwrap();
                key[..1].to_string()
            })
            .collect()
    };
    let merged_across = (mixed.entities.iter())
        .filter(|e| tenant_of(&mixed, &e.seg_ids).len() == 2)
        .count();
    assert!(merged_across > 0, "no entity of both tenants to keep apart");

    let tables = dir.path().join("memory");
    index(&archive, &tables, &labelled);
    let built = read_tables(&tables);
    let roots = assert_one_set_a_row(&built);
    let tenant = |t: &str| vec![format!("tenant-{t}")];
    assert_eq!(roots, BTreeMap::from([(tenant("a"), 2), (tenant("b"), 2)]));
    assert!(
        built.entities.len() > mixed.entities.len(),
        "names kept apart"
    );

    // hubs.txt moves to tenant b.
    write_map(r#"{"a": ["tenant-a"], "a/hubs.txt": ["tenant-b"], "b": ["tenant-b"]}"#);
    let run = index(&archive, &tables, &labelled);
    assert!(
        stdout(&run).contains("(1 new or changed, 5 unchanged, 0 deleted)"),
        "{}",
        stdout(&run)
    );
    let moved = read_tables(&tables);
    assert_one_set_a_row(&moved);
    let scratch = dir.path().join("scratch");
    index(&archive, &scratch, &labelled);
    assert_eq!(comparable(&moved), comparable(&read_tables(&scratch)));
}

/// Each tenant's codename: a phrase only its own documents hold.
const CODENAMES: [(&str, &str); 2] = [
    ("a", "The codename is Marigold Falcon."),
    ("b", "The codename is Copper Heron."),
];

/// What `check_readers.py` is to find for a reader of `groups` in `t`:
/// the documents it sees, some of its own ids, every id of what it may not
/// see, the entity names it shares with others, and the codenames it
/// must and must not be told.
fn reader_expected(t: &Tables, groups: &[&str]) -> serde_json::Value {
    let sees = |acl: &[String]| acl.iter().any(|l| groups.contains(&l.as_str()));
    let docs: BTreeMap<&str, bool> = (t.documents.iter())
        .map(|d| (d.doc_id.as_str(), sees(&d.acl)))
        .collect();
    let split = |rows: Vec<(&str, &[String])>| {
        let (own, hidden): (Vec<_>, Vec<_>) = rows.into_iter().partition(|(_, acl)| sees(acl));
        let ids = |rows: Vec<(&str, &[String])>| -> Vec<String> {
            rows.into_iter().map(|(id, _)| id.to_string()).collect()
        };
        (ids(own), ids(hidden))
    };
    let (own_segments, hidden_segments) = split(
        (t.segments.iter())
            .map(|s| (s.seg_id.as_str(), &s.acl[..]))
            .collect(),
    );
    let (own_nodes, hidden_nodes) = split(
        (t.tree_nodes.iter())
            .map(|n| (n.node_id.as_str(), &n.acl[..]))
            .collect(),
    );
    let (own_entities, hidden_entities) = split(
        (t.entities.iter())
            .map(|e| (e.entity_id.as_str(), &e.acl[..]))
            .collect(),
    );
    let names_of = |seen: bool| -> BTreeSet<&str> {
        (t.entities.iter())
            .filter(|e| sees(&e.acl) == seen)
            .map(|e| e.name.as_str())
            .collect()
    };
    let shared_names: Vec<&str> = names_of(true)
        .intersection(&names_of(false))
        .copied()
        .take(5)
        .collect();
    let tenant_of = |d: &memweave_schemas::DocumentRow| d.acl.first().cloned();
    let phrase_of = |tenant: &str| CODENAMES.iter().find(|(t, _)| *t == tenant).map(|c| c.1);
    let (mut phrases, mut hidden_phrases) = (Vec::new(), Vec::new());
    for d in &t.documents {
        let Some(tenant) = tenant_of(d).and_then(|l| l.strip_prefix("tenant-").map(String::from))
        else {
            continue;
        };
        if let Some(phrase) = phrase_of(&tenant) {
            match sees(&d.acl) {
                true => phrases.push(phrase),
                false => hidden_phrases.push(phrase),
            }
        }
    }
    let visible = |seen: bool| -> Vec<&str> {
        (docs.iter())
            .filter(|(_, s)| **s == seen)
            .map(|(d, _)| *d)
            .collect()
    };
    serde_json::json!({
        "groups": groups,
        "documents": visible(true),
        "own": {"segments": own_segments, "nodes": own_nodes, "entities": own_entities},
        "hidden": {
            "documents": visible(false), "segments": hidden_segments,
            "nodes": hidden_nodes, "entities": hidden_entities,
        },
        "names": shared_names,
        "phrases": phrases,
        "hidden_phrases": hidden_phrases,
    })
}

/// Runs `check_readers.py` against a query service over `tables` that
/// verifies the tokens of `keys` (and the administrator's `admin` token
/// file), for the readers `groups` name.
fn check_readers(
    dir: &Path,
    tables: &Path,
    keys: &Path,
    admin: &Path,
    readers: &[(&str, &[&str])],
) {
    let t = read_tables(tables);
    let readers: serde_json::Map<String, serde_json::Value> = (readers.iter())
        .map(|(name, groups)| (name.to_string(), reader_expected(&t, groups)))
        .collect();
    let strategies: Vec<&str> = memweave_query::Strategy::ALL
        .iter()
        .map(|s| s.name())
        .collect();
    let expect = serde_json::json!({
        "issuer": "https://id.example", "audience": "memweave",
        "admin_token": std::fs::read_to_string(admin).unwrap().trim(),
        "readers": readers, "strategies": strategies, "all_documents": t.documents.len(),
    });
    let expect_file = dir.join("expect.json");
    std::fs::write(&expect_file, expect.to_string()).unwrap();
    let flag = |name: &str| keys.join(name).display().to_string();
    let (secret, jwks, admin) = (
        flag("hs256.secret"),
        flag("jwks.json"),
        admin.display().to_string(),
    );
    let (_server, base) = super::query::serve_with(
        tables.to_str().unwrap(),
        &[
            "--jwt-hs256-secret-file",
            &secret,
            "--jwks-file",
            &jwks,
            "--jwt-issuer",
            "https://id.example",
            "--jwt-audience",
            "memweave",
            "--auth-token-file",
            &admin,
        ],
    );
    let checked = std::process::Command::new(memweave_tests::python())
        .arg(readers_script())
        .args(["check", "--base", &base, "--keys"])
        .arg(keys)
        .arg("--expect")
        .arg(&expect_file)
        .output()
        .expect("python runs");
    assert!(
        checked.status.success(),
        "check_readers.py failed:\n{}\n{}",
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );
}

fn readers_script() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../clients/python/tests/check_readers.py")
}

/// Two tenants whose documents share entity names (unlabelled, their
/// entities would merge and their documents share corpus-tree nodes), each
/// holding a codename, and a shared set. Over every route, every strategy
/// and every MCP tool, with HS256 and RS256 tokens minted by PyJWT, a
/// tenant's reader is never shown the other's codename or ids and finds its
/// own; a reader of both sees both; bad tokens are 401. The same holds for
/// a memory built across a restart, for one built by two processes (and the
/// two are the same tables), and after a relabel that gives the shared
/// document to tenant B's readers too, which costs no model call.
#[test]
fn readers_see_only_what_their_documents_say_on_every_route() {
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("archive");
    for (tenant, names) in [
        ("a", ["gap.txt", "founders.txt"]),
        ("b", ["want.txt", "love.txt"]),
    ] {
        for (n, name) in names.into_iter().enumerate() {
            let mut text = essay(name);
            if n == 0 {
                let phrase = CODENAMES.iter().find(|c| c.0 == tenant).unwrap().1;
                text = format!("{phrase}\n\n{text}\n\n{phrase}\n");
            }
            write(&archive.join(tenant).join(name), &text);
        }
    }
    write(&archive.join("shared/hubs.txt"), &essay("hubs.txt"));
    let map = dir.path().join("acl.json");
    let map_to = |shared: &str| {
        let text = format!(r#"{{"a": ["tenant-a"], "b": ["tenant-b"], "shared": {shared}}}"#);
        std::fs::write(&map, text).unwrap();
    };
    map_to(r#"["shared"]"#);
    let map_flag = map.display().to_string();
    let flags = ["--corpus-tree", "--acl-map", map_flag.as_str()];
    let keys = dir.path().join("keys");
    let made = std::process::Command::new(memweave_tests::python())
        .arg(readers_script())
        .args(["keys", "--dir"])
        .arg(&keys)
        .output()
        .expect("python runs");
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let admin = dir.path().join("admin-token");
    std::fs::write(&admin, "the-administrator\n").unwrap();
    let a: &[&str] = &["tenant-a", "shared"];
    let b: &[&str] = &["tenant-b"];
    let both: &[&str] = &["tenant-a", "tenant-b"];
    let readers = [("tenant A", a), ("tenant B", b), ("both tenants", both)];

    // Built across a restart: tenant B's second document arrives in a
    // second run.
    let tables = dir.path().join("memory");
    let later = archive.join("b/love.txt");
    let held = dir.path().join("love.txt");
    std::fs::rename(&later, &held).unwrap();
    index(&archive, &tables, &flags);
    std::fs::rename(&held, &later).unwrap();
    index(&archive, &tables, &flags);
    let built = read_tables(&tables);
    assert_one_set_a_row(&built);
    check_readers(dir.path(), &tables, &keys, &admin, &readers);

    // Built by two processes: the same tables, read the same.
    let cluster = dir.path().join("cluster");
    let mut args: Vec<String> = vec![archive.display().to_string(), "--out".into()];
    args.push(cluster.display().to_string());
    args.extend(flags.iter().map(|f| f.to_string()));
    memweave_tests::index_cluster(dir.path(), 2, &args);
    assert_eq!(comparable(&built), comparable(&read_tables(&cluster)));
    check_readers(dir.path(), &cluster, &keys, &admin, &readers);

    // The shared document given to tenant B's readers too: rebuilt from the
    // call cache, and now theirs as well as A's.
    map_to(r#"["shared", "tenant-b"]"#);
    let run = index(&archive, &tables, &flags);
    assert_eq!(
        model_calls(&run).0,
        0,
        "a relabel made model calls: {}",
        stdout(&run)
    );
    let moved = read_tables(&tables);
    let hubs = (moved.documents.iter())
        .find(|d| d.source_uri.ends_with("shared/hubs.txt"))
        .unwrap();
    assert_eq!(hubs.acl, strings(&["shared", "tenant-b"]));
    assert!(
        reader_expected(&moved, b)["documents"]
            .as_array()
            .unwrap()
            .contains(&serde_json::json!(hubs.doc_id))
    );
    check_readers(dir.path(), &tables, &keys, &admin, &readers);
}
