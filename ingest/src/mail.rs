//! Mail: an mbox file is one document per message, an `.eml` file one
//! message; each keyed by its Message-ID, titled by its subject, its text
//! the sender, date and subject over the body (the plain-text part, else
//! the HTML part read as a page).

use mailparse::{DispositionType, MailHeaderMap, ParsedMail};
use memweave_schemas::Section;

use crate::{FirstOfEachId, IngestError, Parsed, SourceFile, clip, html, kind};

pub(crate) fn read_mbox(file: &SourceFile, bytes: &[u8]) -> Parsed {
    let messages = split_mbox(bytes);
    if messages.is_empty() {
        return vec![Err(IngestError::new(
            &file.uri,
            kind::EMPTY,
            "no messages (an mbox file starts each with a \"From \" line)",
        ))];
    }
    let located = messages.iter().enumerate().map(|(index, raw)| {
        let place = format!("{}:{}", file.uri, index + 1);
        let message = message(file, &place, index + 1, raw);
        (place, message)
    });
    FirstOfEachId::new(located).collect()
}

pub(crate) fn read_eml(file: &SourceFile, bytes: &[u8]) -> Parsed {
    vec![message(file, &file.uri, 0, bytes)]
}

/// The messages of an mbox file: each starts after a line beginning with
/// "From " (at the file's start or after a newline); mboxrd's quoting of
/// such lines in bodies (">From ") is undone.
fn split_mbox(bytes: &[u8]) -> Vec<Vec<u8>> {
    let mut starts: Vec<usize> = Vec::new();
    if bytes.starts_with(b"From ") {
        starts.push(0);
    }
    starts.extend(
        bytes
            .windows(6)
            .enumerate()
            .filter(|(_, w)| w == b"\nFrom ")
            .map(|(i, _)| i + 1),
    );
    starts
        .iter()
        .enumerate()
        .map(|(n, &start)| {
            let end = starts.get(n + 1).copied().unwrap_or(bytes.len());
            let message = &bytes[start..end];
            // The separator line is mbox's, not the message's.
            let body = message
                .iter()
                .position(|&b| b == b'\n')
                .map_or(&[][..], |nl| &message[nl + 1..]);
            unquote_from(body)
        })
        .collect()
}

fn unquote_from(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(body.len());
    for line in body.split_inclusive(|&b| b == b'\n') {
        let quotes = line.iter().take_while(|&&b| b == b'>').count();
        if quotes > 0 && line[quotes..].starts_with(b"From ") {
            out.extend_from_slice(&line[1..]);
        } else {
            out.extend_from_slice(line);
        }
    }
    out
}

/// One message as a document (`number` from 1 in an mbox; 0 for an `.eml`
/// file), or why it is not one. `at` names it in errors.
fn message(
    file: &SourceFile,
    at: &str,
    number: usize,
    raw: &[u8],
) -> Result<memweave_operators::build::RawDocument, IngestError> {
    let mail = mailparse::parse_mail(raw)
        .map_err(|e| IngestError::new(at, kind::BAD_RECORD, format!("not a mail message: {e}")))?;
    let header = |name: &str| {
        mail.headers
            .get_first_value(name)
            .map(|v| v.split_whitespace().collect::<Vec<_>>().join(" "))
            .filter(|v| !v.is_empty())
    };
    let subject = header("Subject");
    let body = body_text(&mail);
    if body.trim().is_empty() && subject.is_none() {
        return Err(IngestError::new(
            at,
            kind::EMPTY,
            "a message with no subject and no text",
        ));
    }
    let id = header("Message-ID").map(|id| id.trim_matches(['<', '>', ' ']).to_string());
    let key = match (&id, number) {
        (Some(id), _) if !id.is_empty() => id.clone(),
        (_, 0) => file.key.clone(),
        (_, n) => format!("{}#{n}", file.key),
    };
    let mut text = String::new();
    for (name, value) in [
        ("From", header("From")),
        ("Date", header("Date")),
        ("Subject", subject.clone()),
    ] {
        if let Some(value) = value {
            text.push_str(&format!("{name}: {value}\n"));
        }
    }
    text.push('\n');
    text.push_str(body.trim());
    Ok(memweave_operators::build::RawDocument {
        title: clip(subject.as_deref().unwrap_or(&key), 120),
        source_uri: file.uri.clone(),
        sections: vec![Section {
            start_char: 0,
            kind: "message".into(),
            label: id.map_or_else(|| key.clone(), |id| format!("<{id}>")),
        }],
        key,
        text,
        acl: Vec::new(),
    })
}

/// A message's readable text: its plain-text parts that are not
/// attachments, else its HTML parts read as pages.
fn body_text(mail: &ParsedMail<'_>) -> String {
    let mut leaves = Vec::new();
    let mut stack = vec![mail];
    while let Some(part) = stack.pop() {
        if part.subparts.is_empty() {
            let attachment =
                part.get_content_disposition().disposition == DispositionType::Attachment;
            if !attachment {
                leaves.push(part);
            }
        } else {
            stack.extend(part.subparts.iter().rev());
        }
    }
    let of_type = |mime: &str| -> Vec<String> {
        leaves
            .iter()
            .filter(|p| p.ctype.mimetype.eq_ignore_ascii_case(mime))
            .filter_map(|p| p.get_body().ok())
            .collect()
    };
    let plain = of_type("text/plain");
    if !plain.is_empty() {
        return plain.join("\n\n");
    }
    of_type("text/html")
        .iter()
        .map(|page| html::extract(page).text)
        .collect::<Vec<_>>()
        .join("\n\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Format;

    fn mbox() -> SourceFile {
        SourceFile {
            uri: "/m/list.mbox".into(),
            key: "list.mbox".into(),
            format: Format::Mbox,
            version: None,
        }
    }

    #[test]
    fn an_mbox_is_one_document_per_message_keyed_by_its_id() {
        let raw = b"From a@x Mon Jan  1 00:00:00 2024\nMessage-ID: <one@x>\nSubject: First\nFrom: A <a@x>\n\nHello\n>From the start.\n\nFrom b@x Mon Jan  1 00:00:00 2024\nSubject: Second\nContent-Type: text/html\n\n<p>Hi <b>there</b></p>\n\nFrom c@x Mon Jan  1 00:00:00 2024\nMessage-ID: <one@x>\nSubject: Again\n\nDup\n";
        let parsed = read_mbox(&mbox(), raw);
        assert_eq!(parsed.len(), 3);
        let first = parsed[0].as_ref().unwrap();
        assert_eq!(
            (first.key.as_str(), first.title.as_str()),
            ("one@x", "First")
        );
        assert_eq!(
            first.text,
            "From: A <a@x>\nSubject: First\n\nHello\nFrom the start."
        );
        assert_eq!(first.sections[0].label, "<one@x>");
        let second = parsed[1].as_ref().unwrap();
        assert_eq!(second.key, "list.mbox#2");
        assert!(second.text.ends_with("Hi there"), "{}", second.text);
        let third = parsed[2].as_ref().unwrap_err();
        assert_eq!(
            (third.kind, third.source.as_str()),
            (kind::DUPLICATE_ID, "/m/list.mbox:3")
        );
    }
}
