//! Content-derived ids.
//!
//! An id is the blake3 hash of what defines the thing, so an unchanged thing keeps
//! its id across re-runs and updates, and a replayed write is idempotent.

/// Hex characters kept from the 256-bit hash: 128 bits is collision-free at any
/// archive size we serve, and half the width keeps tables and traces readable.
const ID_HEX_LEN: usize = 32;

/// Id of a thing of `kind` defined by `parts`.
///
/// Parts are length-prefixed, so `["ab", "c"]` and `["a", "bc"]` differ.
///
/// ```
/// use memweave_schemas::content_id;
/// let a = content_id("seg", &[b"doc-1", b"hello"]);
/// assert_eq!(a, content_id("seg", &[b"doc-1", b"hello"]));
/// assert_ne!(a, content_id("seg", &[b"doc-1h", b"ello"]));
/// assert_eq!(a.len(), 32);
/// ```
pub fn content_id(kind: &str, parts: &[&[u8]]) -> String {
    let mut hasher = blake3::Hasher::new();
    hasher.update(kind.as_bytes());
    hasher.update(&[0]);
    for part in parts {
        hasher.update(&(part.len() as u64).to_le_bytes());
        hasher.update(part);
    }
    let hex = hasher.finalize().to_hex();
    hex[..ID_HEX_LEN].to_string()
}

/// The first 16 bytes of the BLAKE3 hash of `bytes`, as a number: a key no
/// two different values of one archive share, where a hex id would be text.
pub fn hash128(bytes: &[u8]) -> u128 {
    let hash = blake3::hash(bytes);
    u128::from_le_bytes(hash.as_bytes()[..16].try_into().expect("16 bytes"))
}

/// Full-width content hash of a document's text, stored as `documents.content_hash`.
pub fn content_hash(text: &str) -> String {
    blake3::hash(text.as_bytes()).to_hex().to_string()
}

/// A document version's hash, stored as `documents.content_hash`: its
/// text's, or with sections (where its parts came from) or access labels
/// the text's and theirs, so that a document whose pages or headings moved,
/// or whose readers changed, is a new version. A document of neither keeps
/// its text's hash, as memories built before labels have it.
pub fn document_hash(text: &str, sections: &[crate::Section], acl: &[String]) -> String {
    if sections.is_empty() && acl.is_empty() {
        return content_hash(text);
    }
    let mut hasher = blake3::Hasher::new();
    hasher.update(text.as_bytes());
    for section in sections {
        hasher.update(&[0]);
        hasher.update(&section.start_char.to_le_bytes());
        hasher.update(section.kind.as_bytes());
        hasher.update(&[0]);
        hasher.update(section.label.as_bytes());
    }
    if !acl.is_empty() {
        // After a byte no section begins with: labels never read as one.
        hasher.update(&[1]);
        for label in acl {
            hasher.update(label.as_bytes());
            hasher.update(&[0]);
        }
    }
    hasher.finalize().to_hex().to_string()
}

/// A number in `[0, 1)` drawn from the bytes of `content`: the same content always
/// draws the same number. Content-defined boundaries compare it with a probability.
pub fn content_draw(content: &[u8]) -> f64 {
    let hash = blake3::hash(content);
    let mut head = [0u8; 8];
    head.copy_from_slice(&hash.as_bytes()[..8]);
    (u64::from_le_bytes(head) >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_depend_on_kind_and_every_part() {
        let base = content_id("node", &[b"a", b"b"]);
        assert_ne!(base, content_id("page", &[b"a", b"b"]));
        assert_ne!(base, content_id("node", &[b"a", b"c"]));
        assert_ne!(base, content_id("node", &[b"a", b"b", b""]));
    }

    #[test]
    fn labels_make_a_version_and_no_labels_keep_the_texts_hash() {
        let text = "a memo";
        assert_eq!(document_hash(text, &[], &[]), content_hash(text));
        let hr = document_hash(text, &[], &["hr".to_string()]);
        assert_ne!(hr, content_hash(text));
        assert_ne!(hr, document_hash(text, &[], &["finance".to_string()]));
        let two = ["finance".to_string(), "hr".to_string()];
        assert_ne!(document_hash(text, &[], &two), hr);
    }

    #[test]
    fn draws_are_uniform_enough_and_stable() {
        let draws: Vec<f64> = (0..4000u32)
            .map(|i| content_draw(&i.to_le_bytes()))
            .collect();
        assert!(draws.iter().all(|d| (0.0..1.0).contains(d)));
        let mean = draws.iter().sum::<f64>() / draws.len() as f64;
        assert!((mean - 0.5).abs() < 0.03, "mean {mean}");
        assert_eq!(content_draw(b"x"), content_draw(b"x"));
    }
}
