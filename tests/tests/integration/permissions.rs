//! Permissions: access labels given to documents by a dataset's column, a
//! map of path prefixes and a default, kept in the documents table, and a
//! change of labels alone rebuilding a document from the call cache.

use std::collections::BTreeMap;
use std::path::Path;

use memweave_tests::{Tables, index, memweave, model_calls, read_tables, stdout};

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
    let versionless = |t: &Tables| {
        let mut t = super::indexing::comparable(t);
        for d in &mut t.documents {
            d.version = 0;
        }
        t
    };
    assert_eq!(
        versionless(&relabelled),
        versionless(&read_tables(&scratch))
    );
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
