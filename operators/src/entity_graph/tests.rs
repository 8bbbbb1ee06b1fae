use std::collections::HashMap;
use std::sync::Arc;

use memweave_schemas::{EntityRow, Segment, SegmentRow};

use super::relations::merge_descriptions;
use super::*;
use crate::embed::{Embedder, HashingEmbedder};
use crate::model::{CallContext, MemoryModel, StepResult};
use crate::testing::FirstSentence;

/// A band that settles nothing: the model is asked about every two mentions.
const ASK_ALWAYS: GraphConfig = GraphConfig {
    same_above: 1.0,
    apart_below: -1.0,
    ..GraphConfig::DEFAULT
};

fn segment(doc: &str, ordinal: u32, text: &str) -> Segment {
    let row = SegmentRow {
        seg_id: format!("{doc}-{ordinal}"),
        doc_id: doc.to_string(),
        ordinal,
        start_char: 0,
        end_char: text.chars().count() as u64,
        n_tokens: 1,
        target_tokens: 1000,
        terms: String::new(),
        acl: Vec::new(),
    };
    Segment::new(row, text.to_string())
}

fn graph(doc: &str, texts: &[&str], model: &FirstSentence) -> (Vec<DocEntity>, Vec<DocRelation>) {
    let segments: Vec<Segment> = texts
        .iter()
        .enumerate()
        .map(|(i, t)| segment(doc, i as u32, t))
        .collect();
    futures::executor::block_on(document_graph(
        doc,
        "background",
        &segments,
        model,
        &GraphConfig::DEFAULT,
    ))
    .expect("the stub answers")
}

#[test]
fn names_normalise_past_case_articles_and_possessives() {
    assert_eq!(normalise("The Beatles'"), "beatles");
    assert_eq!(normalise("  the   BEATLES "), "beatles");
    assert_eq!(normalise("Graham's"), "graham");
    assert_eq!(normalise("Y Combinator"), "y combinator");
    assert_eq!(normalise("The"), "the");
}

#[test]
fn a_surname_is_an_alias_of_the_one_full_name_it_ends() {
    let model = FirstSentence::default();
    let (entities, relations) = graph(
        "d",
        &[
            "Then Paul Graham met Jessica Livingston in Boston. They talked.",
            "Then Graham wrote about Boston and Lisp. Lisp was old.",
        ],
        &model,
    );
    let keys: Vec<&str> = entities.iter().map(|e| e.key.as_str()).collect();
    assert_eq!(
        keys,
        ["boston", "jessica livingston", "lisp", "paul graham"]
    );
    let paul = &entities[3];
    assert_eq!(paul.names, ["Graham", "Paul Graham"]);
    assert_eq!(paul.seg_ids, ["d-0", "d-1"]);
    assert!(paul.context.starts_with("Then Paul Graham met"));
    // Every relation joins two entities of the document.
    for r in &relations {
        assert!(keys.contains(&r.source_key.as_str()) && keys.contains(&r.target_key.as_str()));
        assert_ne!(r.source_key, r.target_key);
    }
    // Paul Graham and Boston are related in both segments: one relation, two sources.
    let merged = relations
        .iter()
        .find(|r| r.source_key == "paul graham" && r.target_key == "boston")
        .expect("the relation of both segments");
    assert_eq!(merged.seg_ids, ["d-0", "d-1"]);
}

#[test]
fn entities_of_one_name_stay_apart_when_the_model_says_so() {
    let texts_a = ["Apple sold phones in Cupertino. Apple grew."];
    let texts_b = ["Apple trees grew in Kent. Apple pie followed."];
    let merging = FirstSentence::default();
    let separating = FirstSentence::separating(&["Apple"]);
    let mentions = |model: &FirstSentence| {
        let (a, _) = graph("a", &texts_a, model);
        let (b, _) = graph("b", &texts_b, model);
        let apple: Vec<DocEntity> = a
            .into_iter()
            .chain(b)
            .filter(|e| e.key == "apple")
            .collect();
        assert_eq!(apple.len(), 2);
        let embedder = HashingEmbedder::new(256);
        let resolved = futures::executor::block_on(resolve_entities(
            &apple,
            None,
            model,
            &embedder,
            &ASK_ALWAYS,
        ))
        .expect("answers");
        assert_eq!(resolved.asked.len(), resolved.rows.len());
        (resolved.rows, resolved.assignments)
    };
    let (one, assigned) = mentions(&merging);
    assert_eq!(one.len(), 1);
    assert_eq!(one[0].seg_ids, ["a-0", "b-0"]);
    assert!(assigned.iter().all(|a| a.entity_id == one[0].entity_id));
    let (two, assigned) = mentions(&separating);
    assert_eq!(two.len(), 2);
    assert_ne!(two[0].entity_id, two[1].entity_id);
    assert_eq!(assigned[1].entity_id, two[1].entity_id);
    assert_eq!(
        (two[0].seg_ids.as_slice(), two[1].seg_ids.as_slice()),
        (&["a-0".to_string()][..], &["b-0".to_string()][..])
    );
}

/// The entities a resolution made tell which entity each mention
/// became, whether the name stayed one entity or was split; entities
/// made of other mentions tell nothing.
#[test]
fn a_names_assignments_read_back_from_its_entities() {
    struct Rows(Vec<EntityRow>, Option<Vec<u32>>);
    impl StoredEntities for Rows {
        fn holds(&self, entity_id: &str) -> bool {
            self.0.iter().any(|r| r.entity_id == entity_id)
        }
        fn found_in(&self, entity_id: &str, seg_id: &str) -> bool {
            (self.0.iter())
                .any(|r| r.entity_id == entity_id && r.seg_ids.iter().any(|s| s == seg_id))
        }
        fn asked(&self, entity_id: &str) -> Option<Vec<u32>> {
            self.1.clone().filter(|_| entity_id == self.0[0].entity_id)
        }
    }
    let texts = [
        ("a", "Apple sold phones in Cupertino. Apple grew."),
        ("b", "Apple trees grew in Kent. Apple pie followed."),
        ("c", "Apple opened a store in Cupertino. Apple sold."),
    ];
    let mentions: Vec<DocEntity> = texts
        .iter()
        .flat_map(|(doc, text)| graph(doc, &[text], &FirstSentence::default()).0)
        .filter(|e| e.key == "apple")
        .collect();
    let embedder = HashingEmbedder::new(256);
    let resolved = |model: FirstSentence| {
        futures::executor::block_on(resolve_entities(
            &mentions,
            None,
            &model,
            &embedder,
            &ASK_ALWAYS,
        ))
        .expect("answers")
    };
    let made = |groups: &[Vec<&DocEntity>]| {
        let (rows, assignments) = entity_rows(groups);
        let asked = vec![0; rows.len()];
        Resolution {
            rows,
            assignments,
            asked,
        }
    };
    let (a, b, c) = (&mentions[0], &mentions[1], &mentions[2]);
    for resolution in [
        resolved(FirstSentence::default()),
        resolved(FirstSentence::separating(&["Apple"])),
        // A later group of two: its second mention is placed by segment.
        made(&[vec![a], vec![b, c]]),
        // Groups whose mentions interleave.
        made(&[vec![a, c], vec![b]]),
    ] {
        let rows = &resolution.rows;
        let stored = Rows(rows.clone(), Some(resolution.asked.clone()));
        // What each mention became (the resolution lists them by group).
        let mut sorted = resolution.assignments.clone();
        sorted.sort();
        let mut read_back = assignments_from_entities(&mentions, &stored);
        read_back.iter_mut().for_each(|r| r.sort());
        assert_eq!(read_back, Some(sorted.clone()), "{} entities", rows.len());
        // The resolution read back is the one made, and each mention's
        // entity is the row that holds its assignment.
        let entity_of: Vec<u32> = (sorted.iter())
            .map(|a| {
                rows.iter()
                    .position(|r| r.entity_id == a.entity_id)
                    .unwrap() as u32
            })
            .collect();
        let expected = Resolution {
            assignments: sorted,
            ..resolution.clone()
        };
        assert_eq!(
            resolution_from_entities(&mentions, &stored),
            Some((expected, entity_of))
        );
        // Without one of the entities, the mentions are not accounted for.
        let fewer = Rows(rows[..rows.len() - 1].to_vec(), stored.1.clone());
        assert_eq!(assignments_from_entities(&mentions, &fewer), None);
        assert_eq!(resolution_from_entities(&mentions, &fewer), None);
        // A resolution that met an error leaves no counts (and a row the
        // entities do not tell of): it is not read back.
        let failed = Rows(rows.clone(), None);
        assert_eq!(resolution_from_entities(&mentions, &failed), None);
    }
}

/// A model whose every same-entity answer depends on its whole prompt
/// (one in eight a no): a batch whose passages change may answer
/// otherwise for each of them.
#[derive(Debug, Default)]
struct Fickle {
    asked: std::sync::atomic::AtomicUsize,
}

#[async_trait::async_trait]
impl MemoryModel for Fickle {
    fn backend(&self) -> &str {
        "fickle"
    }
    fn is_remote(&self) -> bool {
        false
    }
    async fn reply(
        &self,
        _: &CallContext,
        step: crate::model::Step,
    ) -> StepResult<crate::model::Reply> {
        let crate::model::Step::SameEntity {
            name,
            first,
            others,
        } = step
        else {
            unreachable!("only same-entity questions are asked")
        };
        self.asked
            .fetch_add(others.len(), std::sync::atomic::Ordering::SeqCst);
        let prompt = format!("{name}|{first}|{}", others.join("|"));
        let answers = (0..others.len())
            .map(|k| {
                !blake3::hash(format!("{prompt}|{k}").as_bytes()).as_bytes()[0].is_multiple_of(8)
            })
            .collect();
        Ok(crate::model::Reply::SameEntity(answers))
    }
}

/// The hashing embedder, counting the texts it embeds.
#[derive(Debug)]
struct Counting(HashingEmbedder, std::sync::atomic::AtomicUsize);

#[async_trait::async_trait]
impl Embedder for Counting {
    fn model(&self) -> &str {
        self.0.model()
    }
    fn dim(&self) -> usize {
        self.0.dim()
    }
    async fn embed(&self, cx: &CallContext, texts: &[&str]) -> StepResult<Vec<Vec<f32>>> {
        (self.1).fetch_add(texts.len(), std::sync::atomic::Ordering::SeqCst);
        self.0.embed(cx, texts).await
    }
    fn vectors_stand_alone(&self) -> bool {
        true
    }
}

/// A name resolved again from its last resolution gives what resolving
/// every mention gives, over random archives and random edits (mentions
/// changed, gone, new; the first mention among them), with a model whose
/// answers change with any passage of their batch; and it embeds and
/// asks less than resolving every mention.
#[test]
fn a_name_resolved_from_its_last_resolution_equals_resolving_it_whole() {
    let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = move |below: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % below
    };
    let words = [
        "harbour", "press", "ledger", "vote", "grain", "mill", "river", "bank", "school", "court",
        "ship", "wool", "coal", "rail", "song", "field",
    ];
    let mention = |doc: u64, next: &mut dyn FnMut(u64) -> u64| {
        let context: Vec<&str> = (0..3).map(|_| words[next(16) as usize]).collect();
        let document: Vec<&str> = (0..2).map(|_| words[next(16) as usize]).collect();
        DocEntity {
            key: "ada".to_string(),
            doc_id: format!("doc-{doc:03}"),
            names: vec!["Ada".to_string()],
            context: format!("Ada and the {}.", context.join(" ")),
            document: Arc::from(document.join(" ")),
            seg_ids: vec![format!("doc-{doc:03}-0")],
        }
    };
    let config = GraphConfig {
        same_above: 0.45,
        apart_below: 0.1,
        ..GraphConfig::DEFAULT
    };
    let resolve = |mentions: &[DocEntity], last: Option<LastResolution<'_>>| {
        let (model, embedder) = (
            Fickle::default(),
            Counting(HashingEmbedder::new(32), Default::default()),
        );
        let resolved = futures::executor::block_on(resolve_entities(
            mentions, last, &model, &embedder, &config,
        ))
        .expect("answers");
        let work = model.asked.into_inner() + embedder.1.into_inner();
        (resolved, work)
    };
    // Which entity each mention became, by its index among the rows.
    let entity_of = |resolved: &Resolution, mentions: &[DocEntity]| -> Vec<u32> {
        let row: HashMap<&str, u32> = (resolved.rows.iter().enumerate())
            .map(|(i, r)| (r.entity_id.as_str(), i as u32))
            .collect();
        let by_doc: HashMap<&str, u32> = (resolved.assignments.iter())
            .map(|a| (a.doc_id.as_str(), row[a.entity_id.as_str()]))
            .collect();
        mentions.iter().map(|m| by_doc[m.doc_id.as_str()]).collect()
    };
    // `new` resolved whole and from `last`, the resolution of `old`:
    // the same, and what each cost.
    let again = |old: &[DocEntity], last: &Resolution, new: &[DocEntity]| {
        let old_entity_of = entity_of(last, old);
        let last = LastResolution {
            mentions: old,
            entity_of: &old_entity_of,
            asked: &last.asked,
        };
        let (whole, work) = resolve(new, None);
        let (replayed, replay_work) = resolve(new, Some(last));
        assert_eq!(replayed, whole);
        (whole, work, replay_work)
    };
    let (mut whole_work, mut replayed_work, mut rounds) = (0, 0, 0);
    for _ in 0..100 {
        let docs = 20 + next(400);
        let mut old: Vec<DocEntity> = (0..docs).map(|d| mention(d, &mut next)).collect();
        old.sort_by(|a, b| a.doc_id.cmp(&b.doc_id));
        let (last, _) = resolve(&old, None);
        let mut new = old.clone();
        for _ in 0..1 + next(3) {
            match next(4) {
                0 if new.len() > 2 => {
                    new.remove(next(new.len() as u64) as usize);
                }
                1 => new.push(mention(docs + next(1000), &mut next)),
                2 => new[0] = mention(0, &mut next),
                _ => {
                    let at = next(new.len() as u64) as usize;
                    let doc = new[at].doc_id[4..].parse().unwrap();
                    new[at] = mention(doc, &mut next);
                }
            }
        }
        new.sort_by(|a, b| a.doc_id.cmp(&b.doc_id));
        new.dedup_by(|a, b| a.doc_id == b.doc_id);
        let (whole, work, replay_work) = again(&old, &last, &new);
        whole_work += work;
        replayed_work += replay_work;
        rounds += whole.rows.len();
    }
    assert!(rounds > 400, "names split into several entities: {rounds}");
    assert!(
        replayed_work < whole_work,
        "resolving again costs less: {replayed_work} of {whole_work}"
    );
    // A name of 4,000 mentions, one of them edited (not its first): a
    // few of its batches are compared and asked again.
    let mut old: Vec<DocEntity> = (0..4_000).map(|d| mention(d, &mut next)).collect();
    old.sort_by(|a, b| a.doc_id.cmp(&b.doc_id));
    let (last, _) = resolve(&old, None);
    let mut new = old.clone();
    new[2_500] = mention(new[2_500].doc_id[4..].parse().unwrap(), &mut next);
    let (_, work, replay_work) = again(&old, &last, &new);
    assert!(
        replay_work * 10 < work,
        "one edit of a large name: {replay_work} of {work}"
    );
}

/// Descriptions are kept side by side, duplicates dropped, while they fit
/// the budget: no call. Past it, the next budget's worth is folded into
/// what is kept by one merge call, and the rest is not read.
#[test]
fn descriptions_are_merged_only_past_the_budget() {
    let items = |descriptions: &[&str]| -> Vec<(Arc<str>, String)> {
        descriptions
            .iter()
            .map(|d| (Arc::from("evidence"), d.to_string()))
            .collect()
    };
    let found = items(&[
        "Ada founded the Harbour press.",
        "Ada  founded the Harbour press.",
        "Ada sold the press in 1901.",
        "Ada wrote about the press.",
    ]);
    let merge = |budget: usize| {
        let model = FirstSentence::default();
        let cx = CallContext::corpus(STAGE);
        let merged = futures::executor::block_on(merge_descriptions(
            &model,
            &cx,
            || Arc::from("summary"),
            found.clone(),
            Arc::clone,
            budget,
        ))
        .expect("the stub answers");
        (merged, model.merges())
    };
    let (joined, calls) = merge(100);
    assert_eq!(
        joined,
        "Ada founded the Harbour press.\nAda sold the press in 1901.\nAda wrote about the press."
    );
    assert_eq!(calls, 0);
    // Each description is 7 or 8 tokens: two fit in 16, the third does not.
    let (folded, calls) = merge(16);
    assert_eq!(calls, 1);
    assert_eq!(
        folded,
        "Ada founded the Harbour press.\nAda sold the press in 1901."
    );
    // However many do not fit, a pair is merged once: the first description
    // with the second, the third not read.
    assert_eq!(merge(1).1, 1);
}

/// Vectors settle what they can: above the band the mentions are one
/// entity and below it apart, without a call; inside it the model decides.
#[test]
fn the_model_is_asked_only_inside_the_band() {
    let mentions: Vec<DocEntity> = [("a", "pears"), ("b", "plums"), ("c", "figs")]
        .iter()
        .map(|(doc, fruit)| {
            let texts = [format!("Apple grew beside {fruit}. Apple was sold.")];
            let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
            let model = FirstSentence::default();
            let (entities, _) = graph(doc, &texts, &model);
            entities.into_iter().find(|e| e.key == "apple").unwrap()
        })
        .collect();
    let embedder = HashingEmbedder::new(256);
    let resolve = |config: GraphConfig| {
        let model = FirstSentence::separating(&["Apple"]);
        let resolved = futures::executor::block_on(resolve_entities(
            &mentions, None, &model, &embedder, &config,
        ))
        .expect("answers");
        (resolved.rows.len(), model.compared())
    };
    let near = GraphConfig {
        same_above: -1.0,
        apart_below: -1.0,
        ..GraphConfig::DEFAULT
    };
    assert_eq!(resolve(near), (1, 0), "near vectors merge without a call");
    let far = GraphConfig {
        same_above: 1.0,
        apart_below: 1.0,
        ..GraphConfig::DEFAULT
    };
    assert_eq!(
        resolve(far),
        (3, 0),
        "far vectors stay apart without a call"
    );
    // Inside the band the separating model is asked: first about b and c
    // against a, then about c against b.
    assert_eq!(resolve(ASK_ALWAYS), (3, 3));
}
