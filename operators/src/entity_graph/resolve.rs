//! Cross-document resolution: the mentions of one normalised name become
//! entities, by their passages' vectors or the model's answer.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use memweave_schemas::{EntityRow, acl, content_id};
use serde::{Deserialize, Serialize};

use super::{DocEntity, EntityAssignment, GraphConfig, STAGE};
use crate::embed::{EMBED_BATCH, Embedder, HeldVector, embed_all};
use crate::model::{CallContext, MemoryModel, StepResult, all_in_order};

/// Passages compared with an entity's first mention in one disambiguation call.
const SAME_ENTITY_BATCH: usize = 16;

/// Mentions embedded at once: bounds the dense vectors alive before they are
/// held sparse, a megabyte with the hashing embedder's 1,024 components.
const EMBEDDED_AT_ONCE: usize = 4 * EMBED_BATCH;

/// What a name's resolution gave: its entities' rows (in the order of their
/// first mentions), which entity each mention became, and how many of each
/// round's other mentions were asked about (one count per entity, in the
/// same order). The counts are what the rows do not tell of how the
/// resolution went; with them a changed name is resolved again from this
/// one (see [`LastResolution`]).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Resolution {
    pub rows: Vec<EntityRow>,
    pub assignments: Vec<EntityAssignment>,
    pub asked: Vec<u32>,
}

/// A name's last resolution, which [`resolve_entities`] resolves the name's
/// new mentions from: its mentions (in doc_id order), the entity each became
/// (its index among the entities, which are in the order of their first
/// mentions) and [`Resolution::asked`].
#[derive(Debug, Clone, Copy)]
pub struct LastResolution<'a> {
    pub mentions: &'a [DocEntity],
    pub entity_of: &'a [u32],
    pub asked: &'a [u32],
}

/// Where a mention stands against a round's first mention: the same entity
/// or another by their vectors, or a question for the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Likeness {
    Same,
    Apart,
    Asked,
}

/// Mentions' vectors, embedded when first needed.
struct Vectors<'m> {
    mentions: &'m [DocEntity],
    vectors: Vec<Option<HeldVector>>,
}

impl<'m> Vectors<'m> {
    fn new(mentions: &'m [DocEntity]) -> Self {
        Vectors {
            mentions,
            vectors: vec![None; mentions.len()],
        }
    }

    /// Embeds those of `wanted` not embedded yet.
    async fn embed(
        &mut self,
        embedder: &dyn Embedder,
        wanted: impl IntoIterator<Item = usize>,
    ) -> StepResult<()> {
        let mut missing: Vec<usize> = wanted
            .into_iter()
            .filter(|&i| self.vectors[i].is_none())
            .collect();
        missing.sort_unstable();
        missing.dedup();
        if missing.is_empty() {
            return Ok(());
        }
        // Whole batches at a time, so an embedder is sent the batches that
        // embedding them all at once would send it.
        for missing in missing.chunks(EMBEDDED_AT_ONCE) {
            let texts: Vec<String> = (missing.iter())
                .map(|&i| self.mentions[i].compared_text())
                .collect();
            let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
            let vectors = embed_all(embedder, &CallContext::corpus("embed"), &texts).await?;
            for (&i, vector) in missing.iter().zip(vectors) {
                self.vectors[i] = Some(HeldVector::new(vector));
            }
        }
        Ok(())
    }

    /// How mention `i` stands against `leader`'s vector (both embedded).
    fn likeness(&self, leader: &HeldVector, i: usize, config: &GraphConfig) -> Likeness {
        let similarity = leader.cosine(self.vector(i));
        if similarity >= f64::from(config.same_above) {
            Likeness::Same
        } else if similarity >= f64::from(config.apart_below) {
            Likeness::Asked
        } else {
            Likeness::Apart
        }
    }

    fn vector(&self, i: usize) -> &HeldVector {
        self.vectors[i].as_ref().expect("embedded before compared")
    }
}

/// How many same-entity calls a round's asked passages take: about
/// [`SAME_ENTITY_BATCH`] a call, the number of calls a power of two so that
/// it changes only when the questions double.
fn batches_for(asked: usize) -> usize {
    asked.div_ceil(SAME_ENTITY_BATCH).next_power_of_two()
}

/// The entities that the documents' entities of one normalised name (`mentions`,
/// in doc_id order) become: each document's entity joins the first entity whose
/// first document it is the same as, or starts a new one. Whether it is the
/// same is read from the cosine of their passages' vectors where that is
/// outside `config`'s band, and asked of the model inside it.
///
/// With the name's `last` resolution (and an embedder whose vectors do not
/// depend on the texts embedded beside them), a round whose first mention is
/// unchanged is worked out from how it went last time: only the mentions
/// that changed, and those that share a same-entity call with one, are
/// compared again; the others went as they went. The result is what
/// resolving every mention gives (see the round's comments for why).
pub async fn resolve_entities(
    mentions: &[DocEntity],
    last: Option<LastResolution<'_>>,
    model: &dyn MemoryModel,
    embedder: &dyn Embedder,
    config: &GraphConfig,
) -> StepResult<Resolution> {
    let cx = CallContext::corpus(STAGE);
    let mut vectors = Vectors::new(mentions);
    let mut last = last
        .filter(|_| embedder.vectors_stand_alone())
        .and_then(|last| Replay::new(last, mentions));
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let mut asked_counts = Vec::new();
    let mut unplaced: Vec<usize> = (0..mentions.len()).collect();
    // Each round, every unplaced mention is compared with the next group's first
    // mention; those the vectors cannot settle are asked about, about
    // SAME_ENTITY_BATCH passages to a call, the calls at once; the ones turned
    // away form later groups. A passage's batch is drawn from its document id,
    // and the number of batches only changes when the questions double, so a
    // document arriving in a later epoch changes one batch's prompt: the others
    // are answered from the call cache.
    while let Some((&first, rest)) = unplaced.split_first() {
        let round = Round {
            mentions,
            first,
            rest,
            model,
            embedder,
            config,
            cx: &cx,
        };
        let replayed = match last.as_mut().and_then(|l| l.round_led_by(first)) {
            Some(old_round) => {
                let replay = last.as_mut().expect("a round to replay");
                round.replay(&mut vectors, replay, old_round).await?
            }
            None => None,
        };
        let (joined, asked) = match replayed {
            Some(replayed) => replayed,
            None => round.compare_all(&mut vectors).await?,
        };
        let mut group = vec![first];
        let mut apart = Vec::new();
        for (&m, joined) in rest.iter().zip(joined) {
            if joined { group.push(m) } else { apart.push(m) }
        }
        groups.push(group);
        asked_counts.push(u32::try_from(asked).expect("under 2^32 mentions"));
        unplaced = apart;
    }
    let groups: Vec<Vec<&DocEntity>> = groups
        .iter()
        .map(|g| g.iter().map(|&i| &mentions[i]).collect())
        .collect();
    let (rows, assignments) = entity_rows(&groups);
    Ok(Resolution {
        rows,
        assignments,
        asked: asked_counts,
    })
}

/// One round of [`resolve_entities`]: `first` against every mention of `rest`.
struct Round<'a> {
    mentions: &'a [DocEntity],
    first: usize,
    rest: &'a [usize],
    model: &'a dyn MemoryModel,
    embedder: &'a dyn Embedder,
    config: &'a GraphConfig,
    cx: &'a CallContext,
}

impl Round<'_> {
    /// Which of `rest` join `first`, comparing every one; and how many were
    /// asked about.
    async fn compare_all(&self, vectors: &mut Vectors<'_>) -> StepResult<(Vec<bool>, usize)> {
        if self.rest.is_empty() {
            return Ok((Vec::new(), 0));
        }
        let all = std::iter::once(self.first).chain(self.rest.iter().copied());
        vectors.embed(self.embedder, all).await?;
        let likeness: Vec<Likeness> = (self.rest.iter())
            .map(|&m| vectors.likeness(vectors.vector(self.first), m, self.config))
            .collect();
        let asked = likeness.iter().filter(|l| **l == Likeness::Asked).count();
        let batches = batches_for(asked);
        let answers = self.ask(&likeness, batches, |_| true).await?;
        let joined = (likeness.iter().zip(answers))
            .map(|(l, answer)| *l == Likeness::Same || answer == Some(true))
            .collect();
        Ok((joined, asked))
    }

    /// The model's answers for the asked mentions of `rest` (by `likeness`)
    /// in the batches `in_batch` keeps, `batches` batches in all; `None`
    /// for every other mention.
    async fn ask(
        &self,
        likeness: &[Likeness],
        batches: usize,
        in_batch: impl Fn(usize) -> bool,
    ) -> StepResult<Vec<Option<bool>>> {
        let mut members: Vec<Vec<usize>> = vec![Vec::new(); batches];
        for (r, l) in likeness.iter().enumerate() {
            if *l == Likeness::Asked {
                let batch = batch_of(&self.mentions[self.rest[r]].doc_id, batches);
                if in_batch(batch) {
                    members[batch].push(r);
                }
            }
        }
        let first = &self.mentions[self.first];
        let first_passage = first.passage();
        let asked = members.iter().enumerate().filter(|(_, b)| !b.is_empty());
        let answers = all_in_order(asked.map(|(b, batch)| {
            let passages: Vec<String> = (batch.iter())
                .map(|&r| self.mentions[self.rest[r]].passage())
                .collect();
            // A batch is asked again, whole, whenever one of its members
            // changes: the batch is the subject of its calls.
            let cx = self.cx.about(format!(
                "same_entity {} {} {b}/{batches}",
                first.key, first.doc_id
            ));
            let (name, first) = (&first.names[0], &first_passage);
            async move {
                let passages: Vec<&str> = passages.iter().map(String::as_str).collect();
                self.model.same_entity(&cx, name, first, &passages).await
            }
        }))
        .await?;
        let mut found = vec![None; self.rest.len()];
        for (batch, answer) in members.iter().filter(|b| !b.is_empty()).zip(answers) {
            for (&r, yes) in batch.iter().zip(answer) {
                found[r] = Some(yes);
            }
        }
        Ok(found)
    }

    /// Which of `rest` join `first` and how many were asked about, worked
    /// out from `old_round` of the last resolution, whose first mention was
    /// this same one; `None` where the number of calls changed, and every
    /// mention must be compared.
    ///
    /// A mention unchanged since, that was in the old round too, stands as it
    /// stood against the same first mention; its answer, if it was asked,
    /// came from a call whose prompt is its batch's passages. So only the
    /// batches of the mentions that changed (new here, gone from there, or
    /// edited) can answer otherwise: their members are compared and asked
    /// again, and every other mention joins where it joined last time.
    async fn replay(
        &self,
        vectors: &mut Vectors<'_>,
        last: &mut Replay<'_>,
        old_round: usize,
    ) -> StepResult<Option<(Vec<bool>, usize)>> {
        last.advance_to(old_round);
        let old_first = last.leaders[old_round];
        // Each mention of `rest` as it was in the old round, where it was.
        let was: Vec<Option<usize>> = (self.rest.iter())
            .map(|&m| last.same_as[m].filter(|&o| last.unplaced[o] && o != old_first))
            .collect();
        let mut kept = vec![false; last.mentions.len()];
        for o in was.iter().flatten() {
            kept[*o] = true;
        }
        let gone: Vec<usize> = (0..last.mentions.len())
            .filter(|&o| last.unplaced[o] && o != old_first && !kept[o])
            .collect();
        let new: Vec<usize> = (0..self.rest.len()).filter(|&r| was[r].is_none()).collect();
        vectors
            .embed(
                self.embedder,
                std::iter::once(self.first).chain(new.iter().map(|&r| self.rest[r])),
            )
            .await?;
        last.vectors
            .embed(self.embedder, gone.iter().copied())
            .await?;
        let leader = vectors.vector(self.first).clone();
        let new_likeness: Vec<(usize, Likeness)> = (new.iter())
            .map(|&r| (r, vectors.likeness(&leader, self.rest[r], self.config)))
            .collect();
        let gone_asked: Vec<usize> = (gone.iter().copied())
            .filter(|&o| last.vectors.likeness(&leader, o, self.config) == Likeness::Asked)
            .collect();
        let old_asked = last.asked[old_round] as usize;
        let new_asked = new_likeness
            .iter()
            .filter(|(_, l)| *l == Likeness::Asked)
            .count();
        let Some(asked) = (old_asked + new_asked).checked_sub(gone_asked.len()) else {
            return Ok(None);
        };
        let batches = batches_for(old_asked);
        if batches_for(asked) != batches {
            return Ok(None);
        }
        let changed: BTreeSet<usize> = (new_likeness.iter())
            .filter(|(_, l)| *l == Likeness::Asked)
            .map(|(r, _)| &self.mentions[self.rest[*r]].doc_id)
            .chain(gone_asked.iter().map(|&o| &last.mentions[o].doc_id))
            .map(|doc_id| batch_of(doc_id, batches))
            .collect();
        // The changed batches' members, compared again (the mentions new
        // here already are).
        let in_changed: Vec<bool> = if changed.is_empty() {
            vec![false; self.rest.len()]
        } else {
            (self.rest.iter())
                .map(|&m| changed.contains(&batch_of(&self.mentions[m].doc_id, batches)))
                .collect()
        };
        let recompared = (0..self.rest.len()).filter(|&r| in_changed[r] && was[r].is_some());
        vectors
            .embed(self.embedder, recompared.map(|r| self.rest[r]))
            .await?;
        let mut likeness = vec![Likeness::Apart; self.rest.len()];
        for (r, l) in likeness.iter_mut().enumerate() {
            if in_changed[r] || was[r].is_none() {
                *l = vectors.likeness(&leader, self.rest[r], self.config);
            }
        }
        let answers = self
            .ask(&likeness, batches, |b| changed.contains(&b))
            .await?;
        let joined = (0..self.rest.len())
            .map(|r| match was[r] {
                Some(o) if !in_changed[r] => last.entity_of[o] as usize == old_round,
                _ => likeness[r] == Likeness::Same || answers[r] == Some(true),
            })
            .collect();
        Ok(Some((joined, asked)))
    }
}

/// A name's last resolution as [`Round::replay`] walks it: which of its
/// rounds the new one has reached, and which of its mentions were still
/// unplaced there.
struct Replay<'a> {
    mentions: &'a [DocEntity],
    entity_of: &'a [u32],
    asked: &'a [u32],
    vectors: Vectors<'a>,
    /// Each round's first mention.
    leaders: Vec<usize>,
    /// The old mention each new one is, unchanged, where there is one.
    same_as: Vec<Option<usize>>,
    /// The old round whose first mention each old mention was.
    round_of_leader: HashMap<usize, usize>,
    /// The old mentions not placed before round `next`.
    unplaced: Vec<bool>,
    next: usize,
}

impl<'a> Replay<'a> {
    /// `None` where `last` does not hold together (an entity without a
    /// count, or out of the order of first mentions): then every round is
    /// compared whole.
    fn new(last: LastResolution<'a>, mentions: &[DocEntity]) -> Option<Replay<'a>> {
        if last.entity_of.len() != last.mentions.len() {
            return None;
        }
        let mut leaders = Vec::new();
        for (o, &entity) in last.entity_of.iter().enumerate() {
            match (entity as usize).cmp(&leaders.len()) {
                std::cmp::Ordering::Equal => leaders.push(o),
                std::cmp::Ordering::Greater => return None,
                std::cmp::Ordering::Less => {}
            }
        }
        if leaders.len() != last.asked.len() {
            return None;
        }
        let by_doc: HashMap<&str, usize> = (last.mentions.iter().enumerate())
            .map(|(o, m)| (m.doc_id.as_str(), o))
            .collect();
        let same_as = mentions
            .iter()
            .map(|m| {
                let o = *by_doc.get(m.doc_id.as_str())?;
                (last.mentions[o] == *m).then_some(o)
            })
            .collect();
        Some(Replay {
            mentions: last.mentions,
            entity_of: last.entity_of,
            asked: last.asked,
            vectors: Vectors::new(last.mentions),
            round_of_leader: leaders.iter().enumerate().map(|(j, &o)| (o, j)).collect(),
            leaders,
            same_as,
            unplaced: vec![true; last.mentions.len()],
            next: 0,
        })
    }

    /// The old round a new round led by mention `first` replays: the one
    /// the same mention led, if the walk has not passed it.
    fn round_led_by(&self, first: usize) -> Option<usize> {
        let old = self.same_as[first]?;
        let round = *self.round_of_leader.get(&old)?;
        (round >= self.next).then_some(round)
    }

    /// Places the old rounds before `round`: their mentions were not in it.
    fn advance_to(&mut self, round: usize) {
        for (o, &entity) in self.entity_of.iter().enumerate() {
            if (self.next..round).contains(&(entity as usize)) {
                self.unplaced[o] = false;
            }
        }
        self.next = round;
    }
}

/// The entities a memory holds, as a new process reads back what a name's
/// resolution gave (see [`assignments_from_entities`]).
pub trait StoredEntities {
    /// Whether the memory holds the entity.
    fn holds(&self, entity_id: &str) -> bool;
    /// Whether the entity was found in the segment.
    fn found_in(&self, entity_id: &str, seg_id: &str) -> bool;
    /// [`Resolution::asked`] of the name whose first entity this is; `None`
    /// where its resolution met an error (whose row stands in the memory
    /// beside the entities, which do not tell of it).
    fn asked(&self, entity_id: &str) -> Option<Vec<u32>>;
}

/// Which entity each of a name's mentions (in document order) became, read
/// back from the entities [`entity_rows`] made of them instead of resolving
/// the name again: its first group has the name's plain id, each later group
/// the id of the name with its first document, and each group the segments
/// of its mentions (a mention's are its document's alone). `None` where the stored
/// entities do not account for every mention: the name must be resolved.
pub fn assignments_from_entities(
    mentions: &[DocEntity],
    stored: &impl StoredEntities,
) -> Option<Vec<EntityAssignment>> {
    let key = &mentions.first()?.key;
    let first_group = content_id("entity", &[key.as_bytes()]);
    let candidates: Vec<(String, Option<&str>)> = mentions
        .iter()
        .map(|m| {
            let own = content_id("entity", &[key.as_bytes(), m.doc_id.as_bytes()]);
            (own, m.seg_ids.first().map(String::as_str))
        })
        .collect();
    let groups = stored_groups(
        first_group,
        &candidates,
        |id| stored.holds(id),
        |id, seg_id| stored.found_in(id, seg_id),
    )?;
    let assignments = (mentions.iter().zip(groups)).map(|(m, entity_id)| EntityAssignment {
        doc_id: m.doc_id.clone(),
        key: m.key.clone(),
        entity_id,
    });
    Some(assignments.collect())
}

/// The rule of [`assignments_from_entities`], over ids and segments in any
/// form (a new process reads names back from hashes): given the name's
/// first group and, per mention, the group its document would have led and
/// its first segment, the stored group each mention joined. `None` where
/// the stored groups do not account for every mention.
pub fn stored_groups<I: Clone, S>(
    first_group: I,
    mentions: &[(I, Option<S>)],
    holds: impl Fn(&I) -> bool,
    found_in: impl Fn(&I, &S) -> bool,
) -> Option<Vec<I>> {
    if !holds(&first_group) {
        return None;
    }
    let later_groups: Vec<&I> = (mentions.iter().map(|(own, _)| own))
        .filter(|id| holds(id))
        .collect();
    mentions
        .iter()
        .map(|(_, first_segment)| match first_segment {
            None if later_groups.is_empty() => Some(first_group.clone()),
            None => None,
            Some(segment) => {
                let mut holding = (later_groups.iter().copied().chain([&first_group]))
                    .filter(|id| found_in(id, segment));
                match (holding.next(), holding.next()) {
                    (Some(id), None) => Some(id.clone()),
                    _ => None,
                }
            }
        })
        .collect()
}

/// What resolving a name's mentions (in document order) gave, read back
/// from the stored entities it made: the rows of [`entity_rows`] over the
/// groups [`assignments_from_entities`] finds, what each mention became and
/// the stored counts; and the index of each mention's entity among the rows
/// (see [`LastResolution`]). `None` where those do not account for every
/// mention, where the groups do not give the ids they were read back by, or
/// where the resolution met an error: the name must be resolved again.
pub fn resolution_from_entities(
    mentions: &[DocEntity],
    stored: &impl StoredEntities,
) -> Option<(Resolution, Vec<u32>)> {
    let assigned = assignments_from_entities(mentions, stored)?;
    let asked = stored.asked(&assigned.first()?.entity_id)?;
    // A resolution's groups are in the order of their first mentions.
    let mut groups: Vec<(&str, Vec<&DocEntity>)> = Vec::new();
    let mut entity_of = Vec::with_capacity(mentions.len());
    for (mention, assignment) in mentions.iter().zip(&assigned) {
        let found = (groups.iter()).position(|(id, _)| *id == assignment.entity_id);
        let index = found.unwrap_or_else(|| {
            groups.push((&assignment.entity_id, Vec::new()));
            groups.len() - 1
        });
        groups[index].1.push(mention);
        entity_of.push(u32::try_from(index).expect("under 2^32 entities"));
    }
    let groups: Vec<Vec<&DocEntity>> = groups.into_iter().map(|(_, g)| g).collect();
    let (rows, mut assignments) = entity_rows(&groups);
    // The same ids, mention by mention: [`entity_rows`] lists them by group.
    assignments.sort();
    let mut assigned = assigned;
    assigned.sort();
    let resolution = Resolution {
        rows,
        assignments,
        asked,
    };
    (resolution.assignments == assigned && resolution.asked.len() == resolution.rows.len())
        .then_some((resolution, entity_of))
}

/// Which of `batches` disambiguation batches a document's passage goes to: a
/// function of its id alone, so batches stay put as documents come and go.
fn batch_of(doc_id: &str, batches: usize) -> usize {
    let hash = blake3::hash(doc_id.as_bytes());
    let bytes: [u8; 8] = hash.as_bytes()[..8].try_into().expect("8 bytes");
    (u64::from_le_bytes(bytes) % batches as u64) as usize
}

/// The rows of resolved groups: the first group takes the plain id of the name,
/// later ones add their first document to it.
pub fn entity_rows(groups: &[Vec<&DocEntity>]) -> (Vec<EntityRow>, Vec<EntityAssignment>) {
    let mut rows = Vec::new();
    let mut assignments = Vec::new();
    for (index, group) in groups.iter().enumerate() {
        let first = group[0];
        let entity_id = if index == 0 {
            content_id("entity", &[first.key.as_bytes()])
        } else {
            content_id("entity", &[first.key.as_bytes(), first.doc_id.as_bytes()])
        };
        let mut name_counts: BTreeMap<&str, usize> = BTreeMap::new();
        for m in group {
            *name_counts.entry(m.names[0].as_str()).or_default() += 1;
        }
        let name = name_counts
            .iter()
            .max_by(|a, b| a.1.cmp(b.1).then_with(|| b.0.cmp(a.0)))
            .map(|(n, _)| n.to_string())
            .unwrap_or_default();
        let aliases: BTreeSet<String> = group
            .iter()
            .flat_map(|m| m.names.iter())
            .filter(|n| **n != name)
            .cloned()
            .collect();
        let seg_ids: BTreeSet<String> = group.iter().flat_map(|m| m.seg_ids.clone()).collect();
        assignments.extend(group.iter().map(|m| EntityAssignment {
            doc_id: m.doc_id.clone(),
            key: m.key.clone(),
            entity_id: entity_id.clone(),
        }));
        rows.push(EntityRow {
            entity_id,
            name,
            entity_type: String::new(),
            description: first.context.clone(),
            aliases: aliases.into_iter().collect(),
            seg_ids: seg_ids.into_iter().collect(),
            acl: acl::scope_of(&first.key),
        });
    }
    (rows, assignments)
}
