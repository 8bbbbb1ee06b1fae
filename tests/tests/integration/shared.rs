//! One index of pg-essays, built once and shared by the tests that only read it.

use std::path::Path;
use std::sync::OnceLock;

use memweave_tests::{Tables, index, read_tables, shared_data};

/// The flags of the shared build, for tests that build it again another way.
pub const PG_ESSAYS_FLAGS: [&str; 4] = ["--segment-tokens", "400", "--chunk-tokens", "600"];

pub struct Built {
    _dir: tempfile::TempDir,
    pub tables: std::path::PathBuf,
    pub summary: String,
    pub read: Tables,
}

/// pg-essays indexed with the default sizes but 400-token segments, so every
/// essay's tree has more than one level, and RAPTOR chunks of ILM-TR's 600
/// tokens, so two segmentations live side by side.
pub fn pg_essays() -> &'static Built {
    static BUILT: OnceLock<Built> = OnceLock::new();
    BUILT.get_or_init(|| {
        let dir = tempfile::tempdir().expect("a temp dir");
        let tables = dir.path().join("memory");
        let output = index(&shared_data("pg-essays"), &tables, &PG_ESSAYS_FLAGS);
        let read = read_tables(&tables);
        Built {
            summary: String::from_utf8_lossy(&output.stdout).into_owned(),
            tables,
            read,
            _dir: dir,
        }
    })
}

/// A temporary folder holding `archive/`, a copy of the named essays; the folder
/// (removed on drop) and the archive's path.
pub fn archive_of(names: &[&str]) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().expect("a temp dir");
    let archive = dir.path().join("archive");
    std::fs::create_dir(&archive).expect("the archive folder");
    for name in names {
        std::fs::write(archive.join(name), essay(name)).expect("the essay copies");
    }
    (dir, archive)
}

pub fn essay(name: &str) -> String {
    std::fs::read_to_string(shared_data("pg-essays").join(name)).expect("the essay reads")
}

pub fn essays() -> Vec<(String, String)> {
    let dir = shared_data("pg-essays");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .expect("pg-essays lists")
        .map(|e| {
            e.expect("an entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|n| n.ends_with(".txt"))
        .collect();
    names.sort();
    names
        .into_iter()
        .map(|n| {
            let text = std::fs::read_to_string(Path::new(&dir).join(&n)).expect("reads");
            (n, text)
        })
        .collect()
}
