//! The memory from agents and Python frameworks, with the real libraries: the
//! official MCP Python SDK calls every tool over streamable HTTP (behind the
//! bearer token) and over stdio, and the `memweave` package from the checkout
//! (installed with pip) serves the LangChain and LlamaIndex retrievers; every
//! result is checked against the HTTP API's (`clients/python/tests/check_agents.py`).

use std::path::Path;
use std::process::Command;

use memweave_tests::{binary, python};

use super::query::serve_with;
use super::shared::pg_essays;

#[test]
fn agents_and_python_frameworks_reach_the_memory_as_the_http_api_serves_it() {
    let built = pg_essays();
    let tables = built.tables.to_str().unwrap();
    // An entity with relations, so its relations and sources are compared too.
    let entity = &built.read.relations[0].source_id;
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "agents-token\n").unwrap();
    let (_server, base) = serve_with(tables, &["--auth-token-file", token_file.to_str().unwrap()]);

    // The package as a user installs it: pip, from the checkout (a copy of
    // it, so the build pip leaves behind lands outside the clone).
    let package = Path::new(env!("CARGO_MANIFEST_DIR")).join("../clients/python");
    let copy = dir.path().join("package");
    copy_tree(&package, &copy);
    let site = dir.path().join("site");
    let installed = Command::new(python())
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
        ])
        .args(["--disable-pip-version-check", "--target"])
        .arg(&site)
        .arg(&copy)
        .output()
        .expect("pip runs");
    assert!(
        installed.status.success(),
        "pip install clients/python: {}",
        String::from_utf8_lossy(&installed.stderr)
    );
    // Run from elsewhere, so the checkout's sources are not what is imported.
    let checked = Command::new(python())
        .arg(package.join("tests/check_agents.py"))
        .args([
            "--base",
            &base,
            "--token",
            "agents-token",
            "--tables",
            tables,
        ])
        .arg("--binary")
        .arg(binary("memweave-query"))
        .args(["--entity", entity])
        .env("PYTHONPATH", &site)
        .env("NO_COLOR", "1")
        .current_dir(dir.path())
        .output()
        .expect("the checks run");
    let said = format!(
        "{}\n{}",
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );
    assert!(checked.status.success(), "{said}");
    assert!(said.contains("all checks passed"), "{said}");
}

/// `from` copied to `to`, folders and files.
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}
