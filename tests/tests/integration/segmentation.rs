//! Segmentation, pagination and ids on real essays.

use std::collections::HashSet;

use memweave_llm::TaskModel;
use memweave_operators::build::RawDocument;
use memweave_operators::build::{Document, segments_of};
use memweave_operators::model::CallContext;
use memweave_operators::paginate::{PageConfig, paginate};
use memweave_operators::segment::{SegmentConfig, segment};
use memweave_operators::text::sentences;

use super::shared::{essay, essays};

fn document(text: &str) -> Document {
    Document::new(
        RawDocument {
            key: "essay.txt".into(),
            source_uri: "essay.txt".into(),
            title: "essay".into(),
            text: text.into(),
            sections: Vec::new(),
            acl: Vec::new(),
        },
        1,
    )
}

/// `text` with a new paragraph inserted at the sentence boundary nearest `fraction`.
fn insert_paragraph(text: &str, fraction: f64) -> String {
    let spans = sentences(text);
    let at = spans[(spans.len() as f64 * fraction) as usize].start;
    let paragraph = "Here is an inserted paragraph about lighthouses, tides and the \
        keepers who tended the lamps through long winter nights on rocky coasts. \
        It has nothing to do with the essay around it.\n\n";
    format!("{}{}{}", &text[..at], paragraph, &text[at..])
}

#[test]
fn segments_of_real_essays_tile_them_within_the_sizes() {
    let config = SegmentConfig::around(300);
    for (name, text) in essays() {
        let segments = segment(&text, &config);
        assert_eq!(segments[0].span.start, 0, "{name}");
        assert_eq!(segments.last().unwrap().span.end, text.len(), "{name}");
        for pair in segments.windows(2) {
            assert_eq!(pair[0].span.end, pair[1].span.start, "{name}");
        }
        for s in &segments {
            assert!(
                s.n_tokens <= config.max_tokens,
                "{name}: {} tokens",
                s.n_tokens
            );
        }
        for s in &segments[..segments.len() - 1] {
            // Cuts are decided on per-sentence counts, which add up to the joined
            // count within a token or two.
            assert!(
                s.n_tokens + 3 >= config.min_tokens,
                "{name}: {} tokens",
                s.n_tokens
            );
        }
    }
}

#[test]
fn an_inserted_paragraph_changes_at_most_three_segments() {
    let config = SegmentConfig::around(200);
    let mut trials = 0;
    for (name, text) in essays().into_iter().filter(|(_, t)| t.len() > 12_000) {
        for fraction in [0.3, 0.5, 0.7] {
            let edited = insert_paragraph(&text, fraction);
            let before: HashSet<&str> = segment(&text, &config)
                .iter()
                .map(|s| s.span.of(&text))
                .collect();
            let after_spans = segment(&edited, &config);
            let after: HashSet<&str> = after_spans.iter().map(|s| s.span.of(&edited)).collect();
            let added = after.difference(&before).count();
            let removed = before.difference(&after).count();
            assert!(
                added <= 3 && removed <= 3,
                "{name} at {fraction}: {added} segments new, {removed} gone of {}",
                after_spans.len()
            );
            trials += 1;
        }
    }
    assert!(trials >= 30, "only {trials} trials");
}

#[test]
fn segment_ids_survive_an_edit_elsewhere() {
    let text = essay("worked.txt");
    let config = SegmentConfig::around(200);
    let before = segments_of(&document(&text), &config);
    let after = segments_of(&document(&insert_paragraph(&text, 0.8)), &config);
    let after_ids: HashSet<&str> = after.iter().map(|s| s.seg_id.as_str()).collect();
    let kept = before
        .iter()
        .filter(|s| after_ids.contains(s.seg_id.as_str()))
        .count();
    assert!(
        kept + 3 >= before.len(),
        "kept {kept} of {} ids",
        before.len()
    );
    // The segments before the edit keep their ids and their character offsets.
    let first = &before[0];
    assert_eq!(after[0].seg_id, first.seg_id);
    assert_eq!(
        (after[0].start_char, after[0].end_char),
        (first.start_char, first.end_char)
    );
    // Same text, same ids.
    assert_eq!(before, segments_of(&document(&text), &config));
}

#[test]
fn pages_of_real_essays_follow_the_readagent_bounds() {
    let config = PageConfig::DEFAULT;
    let model = TaskModel::extractive();
    let cx = CallContext::build("readagent", "essay");
    for (name, text) in essays() {
        let pages = futures::executor::block_on(paginate(&text, &config, &model, &cx))
            .expect("the extractive backend always answers");
        assert_eq!(pages[0].start, 0);
        assert_eq!(pages.last().unwrap().end, text.len());
        for pair in pages.windows(2) {
            assert_eq!(pair[0].end, pair[1].start, "{name}");
        }
        for page in &pages[..pages.len() - 1] {
            let words = page.of(&text).split_whitespace().count();
            assert!(words >= config.min_words, "{name}: {words} words");
            assert!(words <= config.max_words, "{name}: {words} words");
        }
    }
}
