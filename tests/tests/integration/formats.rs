//! Real files, in the formats archives come in, read as the tools those
//! formats come from read them: each reader's text against an independent
//! extractor's (pdftotext, pandoc, pyarrow, Python's email), at least 95% of
//! its words in order; sections naming the right page, heading path,
//! message or row; bad files as errors of the right kind; and an archive of
//! several formats indexed and asked, its citations naming where they are.

use std::path::{Path, PathBuf};
use std::process::Command;

use memweave_ingest::{Format, IngestError, ReadOptions, SourceFile, kind, parse, read_rows};
use memweave_operators::build::RawDocument;
use memweave_schemas::Section;
use memweave_tests::{
    S3_SECRET_KEY, S3Server, index, memweave_ok, python, read_tables, shared_data, stdout,
};

/// The words of `text`, lower-cased: runs of letters and digits.
fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// How many of `reference`'s words `ours` has in the same order: the
/// longest common subsequence's length.
fn common_in_order(reference: &[String], ours: &[String]) -> usize {
    let mut row = vec![0usize; ours.len() + 1];
    for word in reference {
        let mut diagonal = 0;
        for (j, other) in ours.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = if word == other {
                diagonal + 1
            } else {
                above.max(row[j])
            };
            diagonal = above;
        }
    }
    row[ours.len()]
}

fn share_in_order(reference: &str, ours: &str) -> f64 {
    let reference = words(reference);
    common_in_order(&reference, &words(ours)) as f64 / reference.len().max(1) as f64
}

/// A tool's standard output, which must succeed.
fn run(program: &str, args: &[&str]) -> String {
    let output = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program} (the test command installs it): {e}"));
    assert!(
        output.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn read(path: &Path) -> Vec<Result<RawDocument, IngestError>> {
    read_with(path, &ReadOptions::default())
}

fn read_with(path: &Path, options: &ReadOptions) -> Vec<Result<RawDocument, IngestError>> {
    let file = SourceFile {
        uri: path.display().to_string(),
        key: path.file_name().unwrap().to_string_lossy().into_owned(),
        format: Format::of(path).expect("a known format"),
        version: None,
    };
    let bytes = std::fs::read(path).map_err(|e| IngestError::unreadable(&file.uri, e));
    parse(&file, bytes, options)
}

fn one_document(path: &Path) -> RawDocument {
    let mut parsed = read(path);
    assert_eq!(parsed.len(), 1, "{}: {parsed:?}", path.display());
    parsed.remove(0).unwrap()
}

/// The text of `doc` from character `start` to `end`.
fn chars(doc: &RawDocument, start: u64, end: u64) -> String {
    doc.text
        .chars()
        .skip(start as usize)
        .take((end - start) as usize)
        .collect()
}

/// Where `needle` starts in `doc`'s text, in characters.
fn char_offset(doc: &RawDocument, needle: &str) -> u64 {
    let byte = doc
        .text
        .find(needle)
        .unwrap_or_else(|| panic!("{needle:?} not in {}", doc.key));
    doc.text[..byte].chars().count() as u64
}

#[test]
fn a_pdf_reads_page_by_page_as_pdftotext_reads_it() {
    // gnuplot's manual, as Debian's gnuplot-doc ships it: 311 pages of text.
    let pdf = Path::new("/usr/share/doc/gnuplot/gnuplot.pdf");
    let doc = one_document(pdf);
    let reference = run("pdftotext", &["-enc", "UTF-8", pdf.to_str().unwrap(), "-"]);
    let reference_pages: Vec<&str> = reference.split('\u{c}').collect();
    let pages = &doc.sections;
    assert!(pages.iter().all(|s| s.kind == "page"));
    assert!(pages.len() > 300, "{} pages", pages.len());
    let (mut common, mut total) = (0, 0);
    for (i, page) in pages.iter().enumerate() {
        let end = pages
            .get(i + 1)
            .map_or(doc.text.chars().count() as u64, |s| s.start_char);
        let number: usize = page.label.parse().unwrap();
        // Our page N against pdftotext's page N: a page cited by the wrong
        // number would share few words with the page it names.
        let theirs = words(reference_pages[number - 1]);
        let ours = words(&chars(&doc, page.start_char, end));
        common += common_in_order(&theirs, &ours);
        total += theirs.len();
    }
    let share = common as f64 / total as f64;
    assert!(share >= 0.95, "{share:.3} of pdftotext's words in order");
    assert!(doc.title.contains("gnuplot"), "{}", doc.title);
}

#[test]
fn html_pages_read_as_pandoc_reads_them_with_their_heading_paths() {
    // Python's documentation as python3.11-doc ships it (Sphinx's HTML).
    let html = Path::new("/usr/share/doc/python3.11/html/tutorial");
    let dir = tempfile::tempdir().unwrap();
    let filter = dir.path().join("no-navigation.lua");
    std::fs::write(
        &filter,
        "function Div(div) if div.attributes.role == 'navigation' then return {} end end\n",
    )
    .unwrap();
    for page in ["classes.html", "controlflow.html", "datastructures.html"] {
        let path = html.join(page);
        let doc = one_document(&path);
        // pandoc's reading without the navigation, which memweave drops.
        let reference = run(
            "pandoc",
            &[
                "-f",
                "html",
                "-t",
                "plain",
                "--wrap=none",
                "--lua-filter",
                filter.to_str().unwrap(),
                path.to_str().unwrap(),
            ],
        );
        let share = share_in_order(&reference, &doc.text);
        assert!(
            share >= 0.95,
            "{page}: {share:.3} of pandoc's words in order"
        );
        assert!(
            !doc.text.contains("var DOCUMENTATION_OPTIONS"),
            "{page}: a script"
        );
    }
    let doc = one_document(&html.join("classes.html"));
    let at = char_offset(
        &doc,
        "The simplest form of class definition looks like this",
    );
    let section = Section::at(&doc.sections, at).unwrap();
    assert_eq!(section.kind, "heading");
    assert!(
        section
            .label
            .starts_with("9. Classes › 9.3. A First Look at Classes › ")
            && section.label.ends_with("Class Definition Syntax"),
        "{}",
        section.label
    );
    assert!(doc.title.starts_with("9. Classes"), "{}", doc.title);
}

/// Three essays as one Markdown book: each a chapter (`#`) in parts of four
/// paragraphs (`## Part N`); returns its path and the essays' paragraphs.
fn essay_book(dir: &Path) -> (PathBuf, Vec<(String, Vec<String>)>) {
    let mut book = String::new();
    let mut essays = Vec::new();
    for name in ["avg.txt", "copy.txt", "boss.txt"] {
        let text = std::fs::read_to_string(shared_data("pg-essays").join(name)).unwrap();
        // The essays wrap their lines and have no blank ones: a paragraph
        // here runs to a line that ends a sentence.
        let paragraphs: Vec<String> = text
            .split(".\n")
            .map(|p| format!("{}.", p.split_whitespace().collect::<Vec<_>>().join(" ")))
            .filter(|p| p.len() > 80)
            .take(12)
            .collect();
        let title = name.trim_end_matches(".txt").to_uppercase();
        book.push_str(&format!("# {title}\n\n"));
        for (i, part) in paragraphs.chunks(4).enumerate() {
            book.push_str(&format!("## Part {}\n\n", i + 1));
            for p in part {
                book.push_str(p);
                book.push_str("\n\n");
            }
        }
        essays.push((title, paragraphs));
    }
    let path = dir.join("book.md");
    std::fs::write(&path, book).unwrap();
    (path, essays)
}

#[test]
fn docx_and_epub_from_pandoc_read_as_pandoc_reads_them() {
    let dir = tempfile::tempdir().unwrap();
    let (markdown, essays) = essay_book(dir.path());
    for format in ["docx", "epub"] {
        let path = dir.path().join(format!("book.{format}"));
        run(
            "pandoc",
            &[
                markdown.to_str().unwrap(),
                "--metadata",
                "title=Three Essays",
                "-o",
                path.to_str().unwrap(),
            ],
        );
        let doc = one_document(&path);
        let reference = run(
            "pandoc",
            &[path.to_str().unwrap(), "-t", "plain", "--wrap=none"],
        );
        let share = share_in_order(&reference, &doc.text);
        assert!(
            share >= 0.95,
            "{format}: {share:.3} of pandoc's words in order"
        );
        assert_eq!(doc.title, "Three Essays", "{format}");
        // The fifth paragraph of the second essay is in its part 2.
        let (title, paragraphs) = &essays[1];
        let words_of_it: String = paragraphs[4]
            .split(' ')
            .take(8)
            .collect::<Vec<_>>()
            .join(" ");
        let section = Section::at(&doc.sections, char_offset(&doc, &words_of_it)).unwrap();
        assert_eq!(section.label, format!("{title} › Part 2"), "{format}");
    }
}

/// Writes `script` to run with the tests' Python (pyarrow comes with pylance).
fn python_script(script: &str, args: &[&str]) -> String {
    let output = Command::new(python())
        .arg("-c")
        .arg(script)
        .args(args)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

const WRITE_DATASETS: &str = r#"
import gzip, io, json, os, sys
import pyarrow as pa, pyarrow.parquet as pq, pyarrow.feather as feather
essays, out = sys.argv[1], sys.argv[2]
names = sorted(os.listdir(essays))[:20]
rows = [{"doc": i, "name": n.removesuffix(".txt"), "body": open(os.path.join(essays, n)).read(),
         "groups": [f"g{i % 3}", "all", f"g{i % 3}"] if i % 4 else None}
        for i, n in enumerate(names)]
table = pa.Table.from_pylist(rows)
pq.write_table(table, os.path.join(out, "essays.parquet"), row_group_size=7)
feather.write_feather(table, os.path.join(out, "essays.arrow"))
lines = "".join(json.dumps({"id": r["doc"], "title": r["name"], "text": r["body"],
                            "groups": ", ".join(r["groups"] or [])}) + "\n" for r in rows)
with gzip.open(os.path.join(out, "essays.jsonl.gz"), "wt") as f:
    f.write(lines)
with pa.CompressedOutputStream(os.path.join(out, "essays.jsonl.zst"), "zstd") as f:
    f.write(lines.encode())
for r in pq.read_table(os.path.join(out, "essays.parquet")).to_pylist():
    print(json.dumps([str(r["doc"]), r["name"], r["body"], sorted(set(r["groups"] or []))]))
"#;

#[test]
fn datasets_give_a_document_per_row_keyed_by_its_id() {
    let dir = tempfile::tempdir().unwrap();
    let essays = shared_data("pg-essays");
    let written = python_script(
        WRITE_DATASETS,
        &[essays.to_str().unwrap(), dir.path().to_str().unwrap()],
    );
    // pyarrow's reading of the rows: id, title, text, labels (a list in
    // Parquet and Arrow, a comma-separated string in JSON Lines).
    let expected: Vec<(String, String, String, Vec<String>)> = written
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(expected.len(), 20);
    let columns = memweave_ingest::Columns {
        id: "doc".into(),
        text: "body".into(),
        title: "name".into(),
        acl: Some("groups".into()),
    };
    let named = ReadOptions {
        columns,
        ..ReadOptions::default()
    };
    let labelled = ReadOptions {
        columns: memweave_ingest::Columns {
            acl: Some("groups".into()),
            ..memweave_ingest::Columns::default()
        },
        ..ReadOptions::default()
    };
    for (file, options) in [
        ("essays.parquet", &named),
        ("essays.arrow", &named),
        ("essays.jsonl.gz", &labelled),
        ("essays.jsonl.zst", &labelled),
    ] {
        let docs: Vec<RawDocument> = read_with(&dir.path().join(file), options)
            .into_iter()
            .map(Result::unwrap)
            .collect();
        let got: Vec<(String, String, String, Vec<String>)> = docs
            .iter()
            .map(|d| {
                (
                    d.key.clone(),
                    d.title.clone(),
                    d.text.clone(),
                    d.acl.clone(),
                )
            })
            .collect();
        assert_eq!(got, expected, "{file}");
        assert!(docs.iter().all(|d| d.sections.len() == 1
            && d.sections[0].kind == "row"
            && d.sections[0].label == d.key));
    }
    // Without the flags, a dataset whose columns are named otherwise is one
    // error naming the columns it has.
    let parsed = read(&dir.path().join("essays.parquet"));
    let error = parsed[0].as_ref().unwrap_err();
    assert_eq!((parsed.len(), error.kind), (1, kind::BAD_RECORD));
    assert!(
        error.message.contains("doc, name, body"),
        "{}",
        error.message
    );
}

const WRITE_MBOX: &str = r#"
import json, mailbox, os, sys
from email.message import EmailMessage
essays, out = sys.argv[1], sys.argv[2]
box = mailbox.mbox(out)
for i, name in enumerate(sorted(os.listdir(essays))[:6]):
    body = open(os.path.join(essays, name)).read()
    m = EmailMessage()
    m["From"] = f"Writer {i} <w{i}@example.org>"
    m["Subject"] = f"Essay: {name}"
    m["Message-ID"] = f"<essay-{i}@example.org>"
    m["Date"] = "Mon, 1 Jan 2024 10:00:00 +0000"
    if i % 2:
        m.set_content(body)
    else:
        m.set_content(body)
        m.add_alternative("<html><body><p>" + body.replace("\n\n", "</p><p>") + "</p></body></html>", subtype="html")
    box.add(m)
box.flush()
import email, email.policy
for m in mailbox.mbox(out):
    m = email.message_from_bytes(m.as_bytes(), policy=email.policy.default)
    print(json.dumps([m["Message-ID"].strip("<>"), m["Subject"], m.get_body(("plain",)).get_content()]))
"#;

#[test]
fn an_mbox_from_python_is_a_document_per_message() {
    let dir = tempfile::tempdir().unwrap();
    let mbox = dir.path().join("essays.mbox");
    let written = python_script(
        WRITE_MBOX,
        &[
            shared_data("pg-essays").to_str().unwrap(),
            mbox.to_str().unwrap(),
        ],
    );
    let expected: Vec<(String, String, String)> = written
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let docs: Vec<RawDocument> = read(&mbox).into_iter().map(Result::unwrap).collect();
    assert_eq!(docs.len(), expected.len());
    for (doc, (id, subject, body)) in docs.iter().zip(&expected) {
        assert_eq!((&doc.key, &doc.title), (id, subject));
        assert_eq!(doc.sections[0].label, format!("<{id}>"));
        let share = share_in_order(body, &doc.text);
        assert!(share >= 0.95, "{id}: {share:.3}");
        assert!(doc.text.starts_with("From: Writer"), "{}", &doc.text[..40]);
    }
}

/// A one-page PDF whose page is an image (gray noise) and nothing else.
const SCANNED_PDF: &str = r#"
import random, sys
random.seed(7)
pixels = bytes(random.randrange(256) for _ in range(64 * 64))
content = b"q 400 0 0 400 100 200 cm BI /W 64 /H 64 /CS /G /BPC 8 ID " + pixels + b" EI Q"
objects = [
    b"<< /Type /Catalog /Pages 2 0 R >>",
    b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
    b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R >>",
    b"<< /Length %d >>\nstream\n" % len(content) + content + b"\nendstream",
]
out = bytearray(b"%PDF-1.4\n")
offsets = []
for n, body in enumerate(objects, 1):
    offsets.append(len(out))
    out += b"%d 0 obj\n" % n + body + b"\nendobj\n"
xref = len(out)
out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
open(sys.argv[1], "wb").write(out)
"#;

#[test]
fn bad_files_are_errors_of_their_kind_and_the_rest_is_indexed() {
    let dir = tempfile::tempdir().unwrap();
    let (source, tables) = (dir.path().join("in"), dir.path().join("memory"));
    std::fs::create_dir(&source).unwrap();
    let manual = Path::new("/usr/share/doc/shared-mime-info/shared-mime-info-spec.pdf");
    std::fs::copy(manual, source.join("spec.pdf")).unwrap();
    let bytes = std::fs::read(manual).unwrap();
    std::fs::write(source.join("truncated.pdf"), &bytes[..bytes.len() / 3]).unwrap();
    run(
        "qpdf",
        &[
            "--encrypt",
            "secret",
            "owner",
            "256",
            "--",
            manual.to_str().unwrap(),
            source.join("locked.pdf").to_str().unwrap(),
        ],
    );
    // A page that is only an image: what a scanner makes.
    python_script(SCANNED_PDF, &[source.join("scan.pdf").to_str().unwrap()]);
    // A Word document whose text inflates to 64 MiB from a few hundred KB.
    python_script(
        r#"
import sys, zipfile
with zipfile.ZipFile(sys.argv[1], "w", zipfile.ZIP_DEFLATED) as z:
    z.writestr("[Content_Types].xml", "<Types/>")
    z.writestr("word/document.xml", "<w:document xmlns:w='x'><w:body><w:p><w:r><w:t>" + " " * (64 << 20) + "</w:t></w:r></w:p></w:body></w:document>")
"#,
        &[source.join("bomb.docx").to_str().unwrap()],
    );
    std::fs::write(source.join("notzip.epub"), b"PK\x03\x04 not really").unwrap();
    std::fs::write(
        source.join("rows.jsonl"),
        "{\"id\": 1, \"text\": \"A row about harbours and their guilds.\"}\n\
         {\"id\": 2}\n{\"id\": 3, \"text\": 42}\n",
    )
    .unwrap();

    index(&source, &tables, &["--max-inflated-mib", "16"]);
    let t = read_tables(&tables);
    let kinds: Vec<(String, String)> = t
        .errors
        .iter()
        .map(|e| {
            (
                e.source.rsplit('/').next().unwrap().to_string(),
                e.kind.clone(),
            )
        })
        .collect();
    for (file, kind) in [
        ("locked.pdf", "encrypted"),
        ("scan.pdf", "no_text_layer"),
        ("bomb.docx", "too_large"),
        ("notzip.epub", "corrupt"),
        ("rows.jsonl:2", "bad_record"),
        ("rows.jsonl:3", "bad_record"),
    ] {
        assert!(
            kinds.contains(&(file.to_string(), kind.to_string())),
            "{file} {kind} not in {kinds:?}"
        );
    }
    assert!(
        kinds
            .iter()
            .any(|(f, k)| f.starts_with("truncated.pdf") && k == "corrupt")
            || t.documents
                .iter()
                .any(|d| d.source_uri.ends_with("truncated.pdf")),
        "a truncated PDF is an error or what of it could be read: {kinds:?}"
    );
    let spec = t
        .documents
        .iter()
        .find(|d| d.source_uri.ends_with("spec.pdf"))
        .expect("the readable PDF is indexed");
    assert_eq!(spec.sections.len(), 17, "a section per page");
    assert!(
        t.documents
            .iter()
            .any(|d| d.title == "1" && d.source_uri.ends_with("rows.jsonl"))
    );
}

#[test]
fn answers_cite_the_page_heading_message_or_row_they_come_from() {
    let dir = tempfile::tempdir().unwrap();
    let (source, tables) = (dir.path().join("in"), dir.path().join("memory"));
    std::fs::create_dir(&source).unwrap();
    let (markdown, _) = essay_book(dir.path());
    run(
        "pandoc",
        &[
            markdown.to_str().unwrap(),
            "-o",
            source.join("book.docx").to_str().unwrap(),
        ],
    );
    let manual = Path::new("/usr/share/doc/shared-mime-info/shared-mime-info-spec.pdf");
    std::fs::copy(manual, source.join("spec.pdf")).unwrap();
    python_script(
        WRITE_MBOX,
        &[
            shared_data("pg-essays").to_str().unwrap(),
            source.join("essays.mbox").to_str().unwrap(),
        ],
    );
    std::fs::write(
        source.join("facts.jsonl"),
        "{\"id\": \"harbour-7\", \"text\": \"The harbour master of Port Ellis keeps the tide tables in a blue ledger.\"}\n",
    )
    .unwrap();
    index(&source, &tables, &["--memories", "memwalker"]);
    let t = read_tables(&tables);
    let doc_of = |suffix: &str| {
        t.documents
            .iter()
            .find(|d| d.source_uri.ends_with(suffix))
            .unwrap_or_else(|| panic!("no document from {suffix}"))
            .doc_id
            .clone()
    };
    for (suffix, question, kind) in [
        ("spec.pdf", "What is the shared MIME-info database?", "page"),
        (
            "book.docx",
            "What does the essay say about copying?",
            "heading",
        ),
        ("essays.mbox", "What did the writers send?", "message"),
        ("facts.jsonl", "Where are the tide tables kept?", "row"),
    ] {
        let answer = memweave_ok([
            "ask",
            question,
            "--tables",
            tables.to_str().unwrap(),
            "--strategy",
            "bm25",
            "--document",
            &doc_of(suffix),
            "--json",
        ]);
        let answer: serde_json::Value = serde_json::from_str(&stdout(&answer)).unwrap();
        let supporting = answer["supporting"].as_array().unwrap();
        assert!(!supporting.is_empty(), "{suffix}: nothing cited");
        for passage in supporting {
            assert_eq!(passage["section"]["kind"], kind, "{suffix}: {passage}");
        }
    }
    // A PDF passage's page is the page pdftotext finds its words on.
    let spec = doc_of("spec.pdf");
    let ask_spec = |extra: &[&str]| {
        let mut args = vec![
            "ask",
            "How are glob patterns matched?",
            "--tables",
            tables.to_str().unwrap(),
            "--strategy",
            "bm25",
            "--document",
            &spec,
        ];
        args.extend_from_slice(extra);
        stdout(&memweave_ok(args))
    };
    let printed = ask_spec(&[]);
    let page: usize = printed
        .split(", page ")
        .nth(1)
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no page cited:\n{printed}"));
    let answer = ask_spec(&["--json"]);
    let answer: serde_json::Value = serde_json::from_str(&answer).unwrap();
    let first = &answer["supporting"][0];
    assert_eq!(first["section"]["label"], page.to_string());
    let on_page = run(
        "pdftotext",
        &[
            "-f",
            &page.to_string(),
            "-l",
            &page.to_string(),
            manual.to_str().unwrap(),
            "-",
        ],
    );
    let passage = first["text"].as_str().unwrap();
    let head: String = words(passage)
        .into_iter()
        .take(8)
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        words(&on_page).join(" ").contains(&head),
        "page {page} does not hold {head:?}"
    );
}

/// Real files of every format, as the other tests make them: what the fuzzer
/// mutates (name, bytes).
fn fuzz_seeds() -> &'static [(String, Vec<u8>)] {
    static SEEDS: std::sync::OnceLock<Vec<(String, Vec<u8>)>> = std::sync::OnceLock::new();
    SEEDS.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let (markdown, _) = essay_book(dir.path());
        for format in ["docx", "epub"] {
            let out = dir.path().join(format!("book.{format}"));
            run(
                "pandoc",
                &[markdown.to_str().unwrap(), "-o", out.to_str().unwrap()],
            );
        }
        let essays = shared_data("pg-essays");
        python_script(
            WRITE_DATASETS,
            &[essays.to_str().unwrap(), dir.path().to_str().unwrap()],
        );
        let mbox = dir.path().join("essays.mbox");
        python_script(
            WRITE_MBOX,
            &[essays.to_str().unwrap(), mbox.to_str().unwrap()],
        );
        let mut seeds: Vec<(String, Vec<u8>)> = [
            "book.docx",
            "book.epub",
            "essays.parquet",
            "essays.arrow",
            "essays.jsonl.gz",
            "essays.jsonl.zst",
            "essays.mbox",
            "book.md",
        ]
        .iter()
        .map(|name| {
            (
                name.to_string(),
                std::fs::read(dir.path().join(name)).unwrap(),
            )
        })
        .collect();
        for (name, path) in [
            (
                "spec.pdf",
                "/usr/share/doc/shared-mime-info/shared-mime-info-spec.pdf",
            ),
            (
                "classes.html",
                "/usr/share/doc/python3.11/html/tutorial/classes.html",
            ),
        ] {
            seeds.push((name.to_string(), std::fs::read(path).unwrap()));
        }
        seeds
    })
}

/// A change to a file's bytes: at a fraction of its length, flip a byte,
/// cut the file there, insert bytes, or repeat a stretch.
#[derive(Debug, Clone)]
enum Mutation {
    Flip(f64, u8),
    Truncate(f64),
    Insert(f64, Vec<u8>),
    Repeat(f64, usize, usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        4 => (0.0..1.0f64, any::<u8>()).prop_map(|(at, b)| Mutation::Flip(at, b)),
        1 => (0.0..1.0f64).prop_map(Mutation::Truncate),
        2 => (0.0..1.0f64, proptest::collection::vec(any::<u8>(), 1..16))
            .prop_map(|(at, bytes)| Mutation::Insert(at, bytes)),
        1 => (0.0..1.0f64, 1..4096usize, 2..64usize)
            .prop_map(|(at, len, times)| Mutation::Repeat(at, len, times)),
    ]
}

fn mutate(bytes: &mut Vec<u8>, mutation: &Mutation) {
    let at = |f: f64| ((bytes.len() as f64 * f) as usize).min(bytes.len().saturating_sub(1));
    match mutation {
        Mutation::Flip(f, b) => {
            let i = at(*f);
            bytes[i] ^= b | 1;
        }
        Mutation::Truncate(f) => bytes.truncate(at(*f)),
        Mutation::Insert(f, new) => {
            let i = at(*f);
            bytes.splice(i..i, new.iter().copied());
        }
        Mutation::Repeat(f, len, times) => {
            let i = at(*f);
            let stretch = bytes[i..(i + len).min(bytes.len())].to_vec();
            for _ in 0..*times {
                bytes.splice(i..i, stretch.iter().copied());
            }
        }
    }
}

use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 48,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// Real files of every format, mutated, never make a reader panic or
    /// hang, and what comes out is bounded by the input: a document's text
    /// is never more than the limit on inflating containers, and every
    /// failure is an error naming the file.
    #[test]
    fn mutated_real_files_are_read_or_named_as_bad(
        seed in 0..10usize,
        mutations in proptest::collection::vec(mutation(), 1..6),
    ) {
        let (name, original) = &fuzz_seeds()[seed];
        let mut bytes = original.clone();
        for m in &mutations {
            if !bytes.is_empty() {
                mutate(&mut bytes, m);
            }
        }
        let file = SourceFile {
            uri: format!("/fuzz/{name}"),
            key: name.clone(),
            format: Format::of(Path::new(name)).unwrap(),
            version: None,
        };
        let options = ReadOptions { max_inflated_bytes: 64 << 20, ..ReadOptions::default() };
        let (done, parsed) = std::sync::mpsc::channel();
        let bound = (bytes.len() as u64).max(options.max_inflated_bytes) * 4;
        std::thread::spawn(move || {
            // A dataset is also read a batch at a time from its file, as
            // the indexer reads it: the same documents and errors.
            let streamed = file.format.is_dataset().then(|| {
                let copy = tempfile::NamedTempFile::new().unwrap();
                std::fs::write(copy.path(), &bytes).unwrap();
                read_rows(&file, copy.path(), &options).collect::<Vec<_>>()
            });
            let _ = done.send((parse(&file, Ok(bytes), &options), streamed));
        });
        // A mutated file that keeps a reader busy this long is a hang.
        let parsed = parsed.recv_timeout(std::time::Duration::from_secs(120));
        prop_assert!(parsed.is_ok(), "{name} after {mutations:?}: no answer in 120 s");
        let (parsed, streamed) = parsed.unwrap();
        prop_assert!(!parsed.is_empty());
        prop_assert!(streamed.is_none_or(|streamed| streamed == parsed), "{name} after {mutations:?}");
        for item in &parsed {
            match item {
                Ok(doc) => prop_assert!((doc.text.len() as u64) < bound, "{} bytes of text", doc.text.len()),
                Err(e) => {
                    prop_assert!(e.source.starts_with("/fuzz/"), "{e:?}");
                    prop_assert!(!e.message.is_empty());
                }
            }
        }
    }
}

const WRITE_ROWS: &str = r#"
import json, sys
import pyarrow as pa, pyarrow.parquet as pq
rows = json.loads(sys.argv[2])
pq.write_table(pa.Table.from_pylist(rows), sys.argv[1])
"#;

/// A dataset rewritten with a row added at its head, one edited and one
/// removed: the next run changes those rows' documents only; the others keep
/// their versions (a row that moved in its file is not a change).
#[test]
fn a_rewritten_dataset_changes_only_the_rows_that_changed() {
    // The same file read from a folder, and as an S3 object (copied to a
    // temporary file, then read a batch at a time like the file).
    let s3 = S3Server::start(&["archive"]);
    let dataset = s3.object_path("archive", "rows/rows.parquet");
    let folder = dataset.parent().unwrap().to_path_buf();
    std::fs::create_dir_all(&folder).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (local, from_s3) = (dir.path().join("local"), dir.path().join("s3"));
    let build = |tables: &Path| {
        let output = if tables == from_s3 {
            let tables = tables.to_str().unwrap();
            let args = ["index", "s3://archive/rows", "--out", tables];
            s3.memweave(
                &[&args[..], &["--memories", "memwalker"]].concat(),
                S3_SECRET_KEY,
            )
        } else {
            index(&folder, tables, &["--memories", "memwalker"])
        };
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        stdout(&output)
    };
    let row = |id: &str, text: &str| serde_json::json!({"id": id, "text": text});
    let first = serde_json::json!([
        row(
            "a",
            "The harbour master of Port Ellis keeps the tide tables."
        ),
        row("b", "Ships from the north bring timber and wool in spring."),
        row(
            "c",
            "The lighthouse keeper writes the weather down at dawn."
        ),
    ]);
    python_script(WRITE_ROWS, &[dataset.to_str().unwrap(), &first.to_string()]);
    build(&local);
    build(&from_s3);
    let before = read_tables(&local);
    assert_eq!(before.documents.len(), 3);
    let second = serde_json::json!([
        row("z", "A new row about the ferry that crosses at noon."),
        row(
            "a",
            "The harbour master of Port Ellis keeps the tide tables."
        ),
        row(
            "b",
            "Ships from the north bring timber, wool and salt in spring."
        ),
    ]);
    python_script(
        WRITE_ROWS,
        &[dataset.to_str().unwrap(), &second.to_string()],
    );
    for tables in [&local, &from_s3] {
        let summary = build(tables);
        assert!(
            summary.contains("(2 new or changed, 1 unchanged, 1 deleted)"),
            "{summary}"
        );
    }
    let after = read_tables(&local);
    let version = |t: &memweave_tests::Tables, title: &str| {
        t.documents
            .iter()
            .find(|d| d.title == title)
            .map(|d| (d.version, d.ingested_at))
    };
    assert_eq!(
        version(&after, "a"),
        version(&before, "a"),
        "a moved, unchanged"
    );
    assert_eq!(version(&after, "b").unwrap().0, 2, "b was edited");
    assert_eq!(version(&after, "z").unwrap().0, 1);
    assert_eq!(version(&after, "c"), None, "c was removed");
    let contents = |t: &memweave_tests::Tables| {
        let mut rows: Vec<(String, u64, String)> = (t.documents.iter())
            .map(|d| (d.title.clone(), d.version, d.text.clone()))
            .collect();
        rows.sort();
        rows
    };
    assert_eq!(contents(&read_tables(&from_s3)), contents(&after));
}
