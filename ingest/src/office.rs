//! Word documents (DOCX) and books (EPUB): zip containers of XML, read with
//! `quick-xml` (DOCX's WordprocessingML) and the HTML reader (EPUB's XHTML
//! chapters, in spine order). Headings (DOCX heading styles, each chapter's
//! headings) are sections named by their path.

use std::collections::HashMap;

use quick_xml::Reader;
use quick_xml::events::{BytesStart, Event};

use crate::outline::Outline;
use crate::zipped::{Failure, Zipped};
use crate::{IngestError, Parsed, SourceFile, clip, document, html, kind, markup};

/// Reads a container's documents, or says why it cannot.
fn container(
    file: &SourceFile,
    read: impl FnOnce() -> Result<(Option<String>, Outline), Failure>,
) -> Parsed {
    let (title, outline) = match read() {
        Ok(read) => read,
        Err((kind, message)) => return vec![Err(IngestError::new(&file.uri, kind, message))],
    };
    let (text, sections) = outline.finish();
    if text.trim().is_empty() {
        return vec![Err(IngestError::new(&file.uri, kind::EMPTY, "no text"))];
    }
    let title = title
        .map(|t| t.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|t| !t.is_empty())
        .map_or_else(|| markup::first_line_title(&text), |t| clip(&t, 120));
    vec![Ok(document(file, title, text, sections))]
}

pub(crate) fn read_docx(file: &SourceFile, bytes: &[u8], limit: u64) -> Parsed {
    container(file, || {
        let mut zip = Zipped::open(bytes, limit)?;
        let body = zip.text("word/document.xml")?.ok_or_else(|| {
            (
                kind::CORRUPT,
                "no word/document.xml: not a Word document".to_string(),
            )
        })?;
        let levels = match zip.text("word/styles.xml")? {
            Some(styles) => heading_styles(&styles)?,
            None => HashMap::new(),
        };
        let title = zip
            .text("docProps/core.xml")?
            .and_then(|core| element_text(&core, b"title"));
        let mut outline = Outline::default();
        let styled_title = docx_body(&body, &levels, &mut outline)?;
        Ok((title.or(styled_title), outline))
    })
}

/// The heading level (0 for the document's title) of each paragraph style
/// that is one: by its outline level, else by its name ("heading 2", "Title").
fn heading_styles(styles: &str) -> Result<HashMap<String, u8>, Failure> {
    let mut levels = HashMap::new();
    let mut reader = Reader::from_str(styles);
    let mut style: Option<String> = None;
    loop {
        match reader
            .read_event()
            .map_err(xml_failure("word/styles.xml"))?
        {
            Event::Start(e) | Event::Empty(e) => match e.local_name().as_ref() {
                b"style" => style = attribute(&e, b"styleId"),
                b"name" | b"outlineLvl" => {
                    let (Some(id), Some(value)) = (&style, attribute(&e, b"val")) else {
                        continue;
                    };
                    let level = if e.local_name().as_ref() == b"outlineLvl" {
                        value.parse::<u8>().ok().filter(|l| *l < 9).map(|l| l + 1)
                    } else if value.eq_ignore_ascii_case("title") {
                        Some(0)
                    } else {
                        (value.to_ascii_lowercase().strip_prefix("heading "))
                            .and_then(|n| n.trim().parse::<u8>().ok())
                    };
                    if let Some(level) = level {
                        levels.insert(id.clone(), level);
                    }
                }
                _ => {}
            },
            Event::End(e) if e.local_name().as_ref() == b"style" => style = None,
            Event::Eof => return Ok(levels),
            _ => {}
        }
    }
}

/// Adds a WordprocessingML body's paragraphs, lists and tables to `outline`;
/// returns the text of its first paragraph in the Title style, if any.
fn docx_body(
    body: &str,
    levels: &HashMap<String, u8>,
    outline: &mut Outline,
) -> Result<Option<String>, Failure> {
    let mut reader = Reader::from_str(body);
    let mut title = None;
    let mut paragraph = String::new();
    let (mut style, mut listed, mut in_text, mut cells) = (None::<String>, false, false, 0usize);
    loop {
        match reader
            .read_event()
            .map_err(xml_failure("word/document.xml"))?
        {
            Event::Start(e) => match e.local_name().as_ref() {
                b"p" => {
                    paragraph.clear();
                    (style, listed) = (None, false);
                }
                b"t" => in_text = true,
                b"tbl" => {
                    cells += 1;
                    outline.paragraph_break();
                }
                b"tr" => outline.line_break(),
                b"tc" => outline.separator(" | "),
                b"pStyle" => style = attribute(&e, b"val"),
                b"numPr" => listed = true,
                _ => {}
            },
            Event::Empty(e) => match e.local_name().as_ref() {
                b"pStyle" => style = attribute(&e, b"val"),
                b"numPr" => listed = true,
                b"tab" => paragraph.push('\t'),
                b"br" | b"cr" => paragraph.push('\n'),
                _ => {}
            },
            Event::Text(t) if in_text => {
                paragraph.push_str(
                    &t.xml10_content()
                        .map_err(|e| (kind::CORRUPT, e.to_string()))?,
                );
            }
            Event::GeneralRef(r) if in_text => paragraph.push_str(&resolve(&r)),
            Event::End(e) => match e.local_name().as_ref() {
                b"t" => in_text = false,
                b"tbl" => {
                    cells = cells.saturating_sub(1);
                    outline.paragraph_break();
                }
                b"tr" => outline.line_break(),
                b"p" => {
                    let level = style.as_ref().and_then(|s| levels.get(s)).copied();
                    match level {
                        Some(0) if title.is_none() => title = Some(paragraph.clone()),
                        Some(level) if cells == 0 => outline.heading(level.max(1), &paragraph),
                        _ if cells > 0 => outline.inline(&format!(" {paragraph} ")),
                        _ => {
                            if listed {
                                outline.line_break();
                                outline.marker("-");
                            } else {
                                outline.paragraph_break();
                            }
                            for (i, line) in paragraph.split('\n').enumerate() {
                                if i > 0 {
                                    outline.line_break();
                                }
                                outline.inline(line);
                            }
                            if !listed {
                                outline.paragraph_break();
                            }
                        }
                    }
                }
                _ => {}
            },
            Event::Eof => return Ok(title),
            _ => {}
        }
    }
}

pub(crate) fn read_epub(file: &SourceFile, bytes: &[u8], limit: u64) -> Parsed {
    container(file, || {
        let mut zip = Zipped::open(bytes, limit)?;
        let missing = |what: &str| (kind::CORRUPT, format!("no {what}: not an EPUB book"));
        let container = zip
            .text("META-INF/container.xml")?
            .ok_or_else(|| missing("META-INF/container.xml"))?;
        let opf_path = first_attribute(&container, b"rootfile", b"full-path")?
            .ok_or_else(|| missing("rootfile in META-INF/container.xml"))?;
        let opf = zip.text(&opf_path)?.ok_or_else(|| missing(&opf_path))?;
        let package = Package::read(&opf)?;
        let base = opf_path.rsplit_once('/').map_or("", |(dir, _)| dir);
        let mut outline = Outline::default();
        for (number, href) in package.chapters().enumerate() {
            let path = resolve_href(base, href);
            let Some(xhtml) = zip.text(&path)? else {
                return Err(missing(&path));
            };
            let page = html::extract(&xhtml);
            let label = page
                .title
                .unwrap_or_else(|| format!("chapter {}", number + 1));
            outline.append(&page.text, page.sections, &label);
        }
        Ok((package.title, outline))
    })
}

/// What an EPUB's package document says: its title, its files by id, and
/// the order they are read in.
#[derive(Default)]
struct Package {
    title: Option<String>,
    /// Manifest id → (href, media type).
    manifest: HashMap<String, (String, String)>,
    spine: Vec<String>,
}

impl Package {
    fn read(opf: &str) -> Result<Package, Failure> {
        let mut package = Package {
            title: element_text(opf, b"title"),
            ..Package::default()
        };
        let mut reader = Reader::from_str(opf);
        loop {
            match reader
                .read_event()
                .map_err(xml_failure("the package document"))?
            {
                Event::Start(e) | Event::Empty(e) => match e.local_name().as_ref() {
                    b"item" => {
                        if let (Some(id), Some(href)) =
                            (attribute(&e, b"id"), attribute(&e, b"href"))
                        {
                            let media = attribute(&e, b"media-type").unwrap_or_default();
                            package.manifest.insert(id, (href, media));
                        }
                    }
                    b"itemref" => package.spine.extend(attribute(&e, b"idref")),
                    _ => {}
                },
                Event::Eof => return Ok(package),
                _ => {}
            }
        }
    }

    /// The hrefs of the spine's (X)HTML documents, in reading order.
    fn chapters(&self) -> impl Iterator<Item = &str> {
        self.spine
            .iter()
            .filter_map(|id| self.manifest.get(id))
            .filter(|(_, media)| media.contains("html"))
            .map(|(href, _)| href.as_str())
    }
}

/// A member's path from an href relative to the package document's folder.
fn resolve_href(base: &str, href: &str) -> String {
    let href = href.split('#').next().unwrap_or("");
    let mut parts: Vec<String> = base
        .split('/')
        .filter(|p| !p.is_empty())
        .map(String::from)
        .collect();
    for part in href.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            part => parts.push(percent_decode(part)),
        }
    }
    parts.join("/")
}

fn percent_decode(part: &str) -> String {
    let bytes = part.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The value of `name` on `element` (matched by local name), unescaped.
fn attribute(element: &BytesStart<'_>, name: &[u8]) -> Option<String> {
    element
        .attributes()
        .flatten()
        .find(|a| a.key.local_name().as_ref() == name)
        .and_then(|a| {
            (a.normalized_value(quick_xml::XmlVersion::default()).ok()).map(|v| v.into_owned())
        })
}

/// The first `element`'s `name` attribute in `xml`.
fn first_attribute(xml: &str, element: &[u8], name: &[u8]) -> Result<Option<String>, Failure> {
    let mut reader = Reader::from_str(xml);
    loop {
        match reader
            .read_event()
            .map_err(xml_failure("META-INF/container.xml"))?
        {
            Event::Start(e) | Event::Empty(e) if e.local_name().as_ref() == element => {
                return Ok(attribute(&e, name));
            }
            Event::Eof => return Ok(None),
            _ => {}
        }
    }
}

/// The text of the first element named `name` (by local name), if any.
fn element_text(xml: &str, name: &[u8]) -> Option<String> {
    let mut reader = Reader::from_str(xml);
    let mut inside = false;
    let mut text = String::new();
    loop {
        match reader.read_event().ok()? {
            Event::Start(e) if e.local_name().as_ref() == name => inside = true,
            Event::Text(t) if inside => text.push_str(&t.xml10_content().ok()?),
            Event::GeneralRef(r) if inside => text.push_str(&resolve(&r)),
            Event::End(e) if inside && e.local_name().as_ref() == name => {
                return Some(text.trim().to_string()).filter(|t| !t.is_empty());
            }
            Event::Eof => return None,
            _ => {}
        }
    }
}

/// An entity or character reference's text (an unknown entity stays as
/// written).
fn resolve(reference: &quick_xml::events::BytesRef<'_>) -> String {
    if let Ok(Some(c)) = reference.resolve_char_ref() {
        return c.to_string();
    }
    let name = reference.decode().unwrap_or_default();
    quick_xml::escape::resolve_xml_entity(&name).map_or_else(|| format!("&{name};"), String::from)
}

fn xml_failure(what: &str) -> impl Fn(quick_xml::Error) -> Failure + '_ {
    move |e| (kind::CORRUPT, format!("{what} is not well-formed XML: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hrefs_resolve_against_the_package_folder() {
        assert_eq!(
            resolve_href("OEBPS", "text/ch%201.xhtml#top"),
            "OEBPS/text/ch 1.xhtml"
        );
        assert_eq!(resolve_href("OEBPS/a", "../b.xhtml"), "OEBPS/b.xhtml");
        assert_eq!(resolve_href("", "c.xhtml"), "c.xhtml");
    }
}
