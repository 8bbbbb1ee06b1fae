//! Turning source files into documents: discovery, decoding, format handling.
//!
//! Every file that cannot become a document yields an [`IngestError`] naming the
//! file and the reason; nothing is dropped silently.

use std::path::Path;

/// A document as read from a source, before ids are derived.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawDocument {
    /// What identifies the document across versions: its path relative to the
    /// source root, or the `id` of a JSON Lines record.
    pub key: String,
    pub source_uri: String,
    pub title: String,
    pub text: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IngestError {
    /// The path (and `:line` for JSON Lines) of the bad input.
    pub source: String,
    /// "not_utf8", "binary", "empty", "unreadable", "bad_record", "unsupported_type".
    pub kind: &'static str,
    pub message: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Text,
    Markdown,
    Html,
    JsonLines,
}

impl Format {
    pub fn of(path: &Path) -> Option<Format> {
        let ext = path.extension()?.to_str()?.to_ascii_lowercase();
        match ext.as_str() {
            "txt" | "text" => Some(Format::Text),
            "md" | "markdown" => Some(Format::Markdown),
            "html" | "htm" => Some(Format::Html),
            "jsonl" => Some(Format::JsonLines),
            _ => None,
        }
    }
}

/// A file or object to ingest and the key its documents are known by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceFile {
    /// Where it is read from, and what documents cite: a path or an object URL.
    pub uri: String,
    /// Relative to the source, '/'-separated: documents' ids derive from it.
    pub key: String,
    pub format: Format,
    /// Its version: an object's ETag, else size and modification time.
    pub version: Option<String>,
}

/// What a source holds: the files to read, and the files that will not be read.
#[derive(Debug, Default)]
pub struct Discovery {
    pub files: Vec<SourceFile>,
    pub rejected: Vec<IngestError>,
}

/// Lists the files under `source` (a file or a directory, recursively, hidden
/// entries skipped), sorted by key so every run and every worker sees one order.
pub fn discover(source: &Path) -> std::io::Result<Discovery> {
    let meta = std::fs::metadata(source)?;
    let mut discovery = Discovery::default();
    if meta.is_file() {
        let key = source.file_name().map_or_else(
            || source.to_string_lossy().into_owned(),
            |n| n.to_string_lossy().into_owned(),
        );
        // A file named explicitly is read as text whatever its extension.
        let format = Format::of(source).unwrap_or(Format::Text);
        discovery.files.push(SourceFile {
            uri: source.display().to_string(),
            key,
            format,
            version: Some(file_version(&meta)),
        });
        return Ok(discovery);
    }
    let walker = walkdir::WalkDir::new(source)
        .follow_links(true)
        .sort_by_file_name()
        .into_iter()
        .filter_entry(|e| e.depth() == 0 || !e.file_name().to_string_lossy().starts_with('.'));
    for entry in walker {
        let entry = match entry {
            Ok(entry) => entry,
            Err(err) => {
                let path = err
                    .path()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default();
                // A link whose target is gone shows up here; report it as unreadable.
                discovery.rejected.push(IngestError {
                    source: path,
                    kind: "unreadable",
                    message: format!("cannot read: {}", io_reason(&err)),
                });
                continue;
            }
        };
        if entry.file_type().is_dir() {
            continue;
        }
        let path = entry.path().to_path_buf();
        let key = path
            .strip_prefix(source)
            .unwrap_or(&path)
            .components()
            .map(|c| c.as_os_str().to_string_lossy())
            .collect::<Vec<_>>()
            .join("/");
        match Format::of(&path) {
            Some(format) => discovery.files.push(SourceFile {
                uri: path.display().to_string(),
                key,
                format,
                version: entry.metadata().ok().map(|m| file_version(&m)),
            }),
            None => discovery.rejected.push(IngestError {
                source: path.display().to_string(),
                kind: "unsupported_type",
                message: "not a .txt, .md, .html, .htm or .jsonl file; skipped".into(),
            }),
        }
    }
    discovery.files.sort_by(|a, b| a.key.cmp(&b.key));
    Ok(discovery)
}

/// A file's version as a watcher compares it: size and modification time.
fn file_version(meta: &std::fs::Metadata) -> String {
    let modified = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .unwrap_or_default();
    format!("{}@{}", meta.len(), modified.as_nanos())
}

fn io_reason(err: &walkdir::Error) -> String {
    err.io_error()
        .map_or_else(|| err.to_string(), ToString::to_string)
}

/// One file's documents from its bytes (or the error reading them), or the
/// reasons there are none.
pub fn parse(
    file: &SourceFile,
    bytes: Result<Vec<u8>, impl std::fmt::Display>,
) -> Vec<Result<RawDocument, IngestError>> {
    let source = file.uri.clone();
    let fail = |kind, message: String| {
        vec![Err(IngestError {
            source: source.clone(),
            kind,
            message,
        })]
    };
    let bytes = match bytes {
        Ok(bytes) => bytes,
        Err(err) => return fail("unreadable", format!("cannot read: {err}")),
    };
    if bytes.contains(&0) {
        return fail(
            "binary",
            "binary content (NUL bytes); not a text document".into(),
        );
    }
    let text = match String::from_utf8(bytes) {
        Ok(text) => text,
        Err(err) => {
            let at = err.utf8_error().valid_up_to();
            return fail(
                "not_utf8",
                format!("not valid UTF-8 (first bad byte at offset {at})"),
            );
        }
    };
    let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
    if text.trim().is_empty() {
        return fail("empty", "no text".into());
    }
    match file.format {
        Format::Text | Format::Markdown => vec![Ok(RawDocument {
            key: file.key.clone(),
            source_uri: source.clone(),
            title: first_line_title(text, file.format),
            text: text.to_string(),
        })],
        Format::Html => {
            let (title, body) = strip_html(text);
            if body.trim().is_empty() {
                return fail("empty", "no text outside markup".into());
            }
            vec![Ok(RawDocument {
                key: file.key.clone(),
                source_uri: source.clone(),
                title: title.unwrap_or_else(|| first_line_title(&body, Format::Text)),
                text: body,
            })]
        }
        Format::JsonLines => load_json_lines(&source, text),
    }
}

fn load_json_lines(source: &str, text: &str) -> Vec<Result<RawDocument, IngestError>> {
    #[derive(serde::Deserialize)]
    struct Record {
        id: serde_json::Value,
        text: String,
    }
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(i, line)| {
            let at = format!("{source}:{}", i + 1);
            let record: Record = serde_json::from_str(line).map_err(|e| IngestError {
                source: at.clone(),
                kind: "bad_record",
                message: format!("expected {{\"id\", \"text\"}}: {e}"),
            })?;
            let id = match record.id {
                serde_json::Value::String(s) => s,
                serde_json::Value::Number(n) => n.to_string(),
                other => {
                    return Err(IngestError {
                        source: at,
                        kind: "bad_record",
                        message: format!("id must be a string or number, got {other}"),
                    });
                }
            };
            if record.text.trim().is_empty() {
                return Err(IngestError {
                    source: at,
                    kind: "empty",
                    message: format!("record {id} has no text"),
                });
            }
            Ok(RawDocument {
                title: id.clone(),
                key: id,
                source_uri: at,
                text: record.text,
            })
        })
        .collect()
}

fn first_line_title(text: &str, format: Format) -> String {
    let line = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    let line = if format == Format::Markdown {
        line.trim_start_matches('#').trim()
    } else {
        line
    };
    line.chars().take(120).collect()
}

/// Text of an HTML page: tags removed, script and style dropped, block elements
/// turned into paragraph breaks, entities decoded. Also the `<title>`, if any.
pub fn strip_html(html: &str) -> (Option<String>, String) {
    const BLOCKS: &[&str] = &[
        "p",
        "div",
        "br",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "li",
        "tr",
        "section",
        "article",
        "blockquote",
        "pre",
        "hr",
        "table",
        "ul",
        "ol",
        "header",
        "footer",
    ];
    let mut out = String::with_capacity(html.len());
    let mut title = None;
    let mut rest = html;
    while let Some(open) = rest.find('<') {
        out.push_str(&decode_entities(&rest[..open]));
        let after = &rest[open + 1..];
        if let Some(comment) = after.strip_prefix("!--") {
            rest = comment.find("-->").map_or("", |end| &comment[end + 3..]);
            continue;
        }
        let Some(close) = after.find('>') else {
            rest = "";
            break;
        };
        let tag = &after[..close];
        let name: String = tag
            .trim_start_matches('/')
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric())
            .collect::<String>()
            .to_ascii_lowercase();
        rest = &after[close + 1..];
        if !tag.starts_with('/') && matches!(name.as_str(), "script" | "style" | "title") {
            let end_tag = format!("</{name}");
            let lower = rest.to_ascii_lowercase();
            let end = lower.find(&end_tag).unwrap_or(rest.len());
            if name == "title" {
                let t = decode_entities(rest[..end].trim());
                title = Some(t.split_whitespace().collect::<Vec<_>>().join(" "));
            }
            rest = &rest[end..];
            rest = rest.find('>').map_or("", |gt| &rest[gt + 1..]);
            continue;
        }
        if BLOCKS.contains(&name.as_str()) {
            out.push_str("\n\n");
        }
    }
    out.push_str(&decode_entities(rest));
    (title.filter(|t| !t.is_empty()), tidy_blank_lines(&out))
}

fn tidy_blank_lines(text: &str) -> String {
    let mut lines: Vec<&str> = Vec::new();
    let mut blank = true;
    for line in text.lines().map(str::trim) {
        if line.is_empty() {
            if !blank {
                lines.push("");
            }
            blank = true;
        } else {
            lines.push(line);
            blank = false;
        }
    }
    while lines.last() == Some(&"") {
        lines.pop();
    }
    lines.join("\n")
}

fn decode_entities(text: &str) -> String {
    if !text.contains('&') {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(amp) = rest.find('&') {
        out.push_str(&rest[..amp]);
        let tail = &rest[amp..];
        let decoded = tail.find(';').filter(|&semi| semi <= 10).and_then(|semi| {
            let entity = &tail[1..semi];
            let ch = match entity {
                "amp" => Some('&'),
                "lt" => Some('<'),
                "gt" => Some('>'),
                "quot" => Some('"'),
                "apos" => Some('\''),
                "nbsp" => Some(' '),
                "mdash" => Some('—'),
                "ndash" => Some('–'),
                "hellip" => Some('…'),
                _ => entity
                    .strip_prefix("#x")
                    .or_else(|| entity.strip_prefix("#X"))
                    .and_then(|h| u32::from_str_radix(h, 16).ok())
                    .or_else(|| entity.strip_prefix('#').and_then(|d| d.parse().ok()))
                    .and_then(char::from_u32),
            }?;
            Some((ch, semi))
        });
        match decoded {
            Some((ch, semi)) => {
                out.push(ch);
                rest = &tail[semi + 1..];
            }
            None => {
                out.push('&');
                rest = &tail[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn html_loses_tags_scripts_and_entities_but_keeps_paragraphs() {
        let html = "<html><head><title>My &amp; Page</title><style>p{}</style></head>\
            <body><p>First &lt;para&gt;.</p><script>var x = '<p>';</script><p>Second&#33;</p>\
            <!-- note --></body></html>";
        let (title, text) = strip_html(html);
        assert_eq!(title.as_deref(), Some("My & Page"));
        assert_eq!(text, "First <para>.\n\nSecond!");
    }

    #[test]
    fn json_lines_give_documents_and_name_bad_lines() {
        let docs = load_json_lines(
            "in.jsonl",
            "{\"id\":\"a\",\"text\":\"hello\"}\nnot json\n{\"id\":7,\"text\":\"x\"}\n",
        );
        assert_eq!(docs.len(), 3);
        assert_eq!(docs[0].as_ref().unwrap().key, "a");
        let err = docs[1].as_ref().unwrap_err();
        assert_eq!(
            (err.source.as_str(), err.kind),
            ("in.jsonl:2", "bad_record")
        );
        assert_eq!(docs[2].as_ref().unwrap().key, "7");
    }

    #[test]
    fn markdown_titles_drop_the_heading_marks() {
        assert_eq!(
            first_line_title("\n# Hello world\ntext", Format::Markdown),
            "Hello world"
        );
    }
}
