//! HTML (and EPUB's XHTML) as readable text, through html5ever's parser (as
//! `scraper` wraps it): headings, paragraphs, lists and tables kept as
//! blocks; scripts, styles, forms and navigation dropped; entities decoded;
//! each heading a section named by its path.

use ego_tree::NodeRef;
use memweave_schemas::Section;
use scraper::{Html, Node};

use crate::outline::Outline;

/// A page's text, its sections and its `<title>`.
#[derive(Debug)]
pub(crate) struct Page {
    pub title: Option<String>,
    pub text: String,
    pub sections: Vec<Section>,
}

/// Elements whose content is not the page's text.
const DROPPED: &[&str] = &[
    "head", "script", "style", "noscript", "template", "nav", "iframe", "object", "svg", "math",
    "canvas", "select", "button", "form", "input", "textarea",
];

/// Elements that stand on lines of their own.
const BLOCKS: &[&str] = &[
    "p",
    "div",
    "section",
    "article",
    "main",
    "header",
    "footer",
    "aside",
    "blockquote",
    "figure",
    "figcaption",
    "address",
    "ul",
    "ol",
    "dl",
    "dt",
    "dd",
    "table",
    "caption",
    "thead",
    "tbody",
    "tfoot",
    "hr",
    "details",
    "summary",
    "body",
    "html",
];

pub(crate) fn extract(html: &str) -> Page {
    let document = Html::parse_document(html);
    let mut outline = Outline::default();
    walk(document.tree.root(), &mut outline);
    let title = (document.tree.root().descendants())
        .find(|n| n.value().as_element().is_some_and(|e| e.name() == "title"))
        .map(|title| words_under(title, ""));
    let (text, sections) = outline.finish();
    let title = title.filter(|t: &String| !t.is_empty()).or_else(|| {
        sections
            .iter()
            .find(|s| s.kind == "heading")
            .map(|s| s.label.clone())
    });
    Page {
        title,
        text,
        sections,
    }
}

/// Adds the text of the tree under `root` to `outline`; an explicit stack,
/// so that no nesting depth can overflow the thread's.
fn walk(root: NodeRef<'_, Node>, outline: &mut Outline) {
    enum Visit<'a> {
        Enter(NodeRef<'a, Node>),
        Leave(&'a str),
    }
    let mut stack = vec![Visit::Enter(root)];
    // Open <pre> elements, and the item numbers of open lists (None: bullets).
    let mut preformatted = 0usize;
    let mut lists: Vec<Option<u32>> = Vec::new();
    while let Some(visit) = stack.pop() {
        let node = match visit {
            Visit::Enter(node) => node,
            Visit::Leave(name) => {
                match name {
                    "pre" => preformatted = preformatted.saturating_sub(1),
                    "ul" | "ol" => {
                        lists.pop();
                    }
                    _ => {}
                }
                if BLOCKS.contains(&name) || name == "pre" {
                    outline.paragraph_break();
                } else if matches!(name, "li" | "tr") {
                    outline.line_break();
                }
                continue;
            }
        };
        match node.value() {
            Node::Text(text) => {
                if preformatted > 0 {
                    outline.verbatim(text);
                } else {
                    outline.inline(text);
                }
            }
            Node::Element(element) => {
                let name = element.name();
                let hidden = element.attr("hidden").is_some()
                    || element.attr("aria-hidden") == Some("true")
                    || element.attr("role") == Some("navigation");
                if DROPPED.contains(&name) || hidden {
                    continue;
                }
                if let Some(level) = heading_level(name) {
                    // Without the permalink marks documentation generators
                    // append (Sphinx's ¶, MkDocs' #).
                    let title = words_under(node, "¶§#");
                    outline.heading(level, &title);
                    continue;
                }
                match name {
                    "br" => outline.line_break(),
                    "pre" => {
                        preformatted += 1;
                        outline.paragraph_break();
                    }
                    "ul" => lists.push(None),
                    "ol" => lists.push(Some(0)),
                    "li" => {
                        outline.line_break();
                        match lists.last_mut() {
                            Some(Some(n)) => {
                                *n += 1;
                                outline.marker(&format!("{n}."));
                            }
                            _ => outline.marker("-"),
                        }
                    }
                    "tr" => outline.line_break(),
                    "td" | "th" => outline.separator(" | "),
                    "img" => {
                        if let Some(alt) = element.attr("alt") {
                            outline.inline(alt);
                        }
                    }
                    _ if BLOCKS.contains(&name) => outline.paragraph_break(),
                    _ => {}
                }
                stack.push(Visit::Leave(name));
                let children: Vec<_> = node.children().collect();
                stack.extend(children.into_iter().rev().map(Visit::Enter));
            }
            Node::Document | Node::Fragment => {
                let children: Vec<_> = node.children().collect();
                stack.extend(children.into_iter().rev().map(Visit::Enter));
            }
            _ => {}
        }
    }
}

/// The words of the text under `node`, one space apart, without the
/// `trailing` marks at the end.
fn words_under(node: NodeRef<'_, Node>, trailing: &str) -> String {
    let text: String = (node.descendants())
        .filter_map(|n| n.value().as_text().map(|t| format!("{} ", &**t)))
        .collect();
    let words = text.split_whitespace().collect::<Vec<_>>().join(" ");
    words
        .trim_end_matches(|c: char| trailing.contains(c) || c.is_whitespace())
        .to_string()
}

fn heading_level(name: &str) -> Option<u8> {
    match name.as_bytes() {
        [b'h', level @ b'1'..=b'6'] => Some(level - b'0'),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_keeps_blocks_lists_and_tables_and_drops_scripts_and_navigation() {
        let page = extract(
            "<html><head><title>My &amp; Page</title><style>p{}</style></head><body>\
             <nav><a href=x>Home</a></nav><div role=navigation>Prev | Next</div>\
             <h1>Guide<a class=headerlink href=#g>¶</a></h1><p>First &lt;para&gt;.</p><script>var x = '<p>';</script>\
             <h2>Lists</h2><ul><li>one</li><li>two <b>bold</b></li></ul><ol><li>a</li><li>b</li></ol>\
             <table><tr><th>k</th><th>v</th></tr><tr><td>1</td><td>2</td></tr></table>\
             <pre>  keep\n    this</pre><p>Second&#33;</p><!-- note --></body></html>",
        );
        assert_eq!(page.title.as_deref(), Some("My & Page"));
        assert_eq!(
            page.text,
            "Guide\n\nFirst <para>.\n\nLists\n\n- one\n- two bold\n\n1. a\n2. b\n\n\
             k | v\n1 | 2\n\n  keep\n    this\n\nSecond!"
        );
        let labels: Vec<&str> = page.sections.iter().map(|s| s.label.as_str()).collect();
        assert_eq!(labels, ["Guide", "Guide › Lists"]);
    }

    #[test]
    fn deep_nesting_does_not_overflow() {
        let html = "<div>".repeat(5_000) + "deep" + &"</div>".repeat(5_000);
        assert_eq!(extract(&html).text, "deep");
    }
}
