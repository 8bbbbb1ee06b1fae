//! Reads by what they are about: a row by its id (one generic read for
//! every row type, [`ById`]), a page of the documents, a document's trees,
//! pages and text, entities by name, relations by their ends.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use futures::future::BoxFuture;
use lance::dataset::scanner::ColumnOrdering;
use memweave_schemas::search::NAME_KEYS;
use memweave_schemas::store::{KEYS_PER_PREDICATE, rows_of, sql_string, sql_strings};
use memweave_schemas::text::normalise;
use memweave_schemas::{
    EntityRow, PageRow, RelationRow, Section, SegmentRow, TREE_MEMWALKER, Table, TreeNodeRow,
};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::{Read, Snapshot};
use crate::cache::rows_bytes;

/// A row read by its id ([`Snapshot::row`], [`Snapshot::rows`],
/// [`Snapshot::rows_by_id`]): its table, its id column, the columns read and
/// the rows a reader may see.
pub trait ById: DeserializeOwned + Serialize + Send + Sync + 'static {
    const TABLE: Table;
    const ID_COLUMN: &'static str;
    /// The columns read; the row type's when empty.
    const COLUMNS: &'static [&'static str] = &[];
    /// Only rows meeting this condition are found.
    const VISIBLE: Option<&'static str> = None;
    fn id(&self) -> &String;
    /// The rows read, with what their table keeps elsewhere filled in (a
    /// leaf's own text): what is cached and answered.
    fn completed(snapshot: &Snapshot, rows: Vec<Self>) -> BoxFuture<'_, Read<Vec<Self>>> {
        as_read(snapshot, rows)
    }
}

/// What fills in rows as they are read ([`ById::completed`]).
pub(super) type Completion<R> = for<'a> fn(&'a Snapshot, Vec<R>) -> BoxFuture<'a, Read<Vec<R>>>;

/// Rows complete as read ([`ById::completed`] for most rows).
pub(super) fn as_read<R: Send + 'static>(
    _: &Snapshot,
    rows: Vec<R>,
) -> BoxFuture<'_, Read<Vec<R>>> {
    Box::pin(std::future::ready(Ok(rows)))
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Document {
    pub doc_id: String,
    pub source_uri: String,
    pub title: String,
    pub version: u64,
    pub n_tokens: u64,
    /// Where its text's parts came from: what citations name.
    pub sections: Vec<Section>,
}

const DOCUMENT_COLUMNS: &[&str] = &[
    "doc_id",
    "source_uri",
    "title",
    "version",
    "n_tokens",
    "sections",
];
/// The documents a reader sees: rows not marked deleted.
const NOT_DELETED: &str = "deleted = false";

/// One page of the documents, in id order.
#[derive(Debug, Clone, PartialEq)]
pub struct DocumentPage {
    pub documents: Vec<Document>,
    /// The last id of this page when another page follows: the next page's
    /// `after`.
    pub next: Option<String>,
    /// Documents not deleted, on every page.
    pub total: usize,
}

/// One of ReadAgent's pages with its text, cut out of its document's.
#[derive(Debug, Clone, PartialEq)]
pub struct Page {
    pub row: PageRow,
    pub text: String,
}

impl Page {
    /// The page's gist: the model's, or its text where it is its own.
    pub fn gist(&self) -> &str {
        self.row.gist.as_deref().unwrap_or(&self.text)
    }
}

/// A relation without its description and sources: what choosing among a
/// hub's relations needs.
#[derive(Debug, Serialize, Deserialize)]
struct RelationEnds {
    relation_id: String,
    source_id: String,
    target_id: String,
}

const RELATION_ENDS: &[&str] = &["relation_id", "source_id", "target_id"];

/// The lookups whose answers are cached: a row by its id, and the rest by
/// what they are about.
const BY_ID: &str = "id";
const ROOT_OF: &str = "root";
const TREE_OF: &str = "tree";
const PAGES_OF: &str = "pages";
const TEXT_OF: &str = "text";
#[cfg(test)]
const RELATIONS_OF: &str = "relations";
const RELATION_ENDS_OF: &str = "relation ends";
const NAMED: &str = "named";

impl ById for Document {
    const TABLE: Table = Table::Documents;
    const ID_COLUMN: &'static str = "doc_id";
    const COLUMNS: &'static [&'static str] = DOCUMENT_COLUMNS;
    const VISIBLE: Option<&'static str> = Some(NOT_DELETED);
    fn id(&self) -> &String {
        &self.doc_id
    }
}

/// A node's columns but its terms, which only the full-text index reads.
const NODE_COLUMNS: &[&str] = &[
    "node_id",
    "tree",
    "doc_id",
    "level",
    "ordinal",
    "parent_id",
    "child_ids",
    "seg_id",
    "summary",
    "surprise",
    "n_tokens",
];

impl ById for TreeNodeRow {
    const TABLE: Table = Table::TreeNodes;
    const ID_COLUMN: &'static str = "node_id";
    const COLUMNS: &'static [&'static str] = NODE_COLUMNS;
    const VISIBLE: Option<&'static str> = Some(DOCUMENT_TREES);
    fn id(&self) -> &String {
        &self.node_id
    }
    fn completed(snapshot: &Snapshot, rows: Vec<Self>) -> BoxFuture<'_, Read<Vec<Self>>> {
        Box::pin(snapshot.with_own_texts(rows))
    }
}

impl ById for SegmentRow {
    const TABLE: Table = Table::Segments;
    const ID_COLUMN: &'static str = "seg_id";
    fn id(&self) -> &String {
        &self.seg_id
    }
}

impl ById for EntityRow {
    const TABLE: Table = Table::Entities;
    const ID_COLUMN: &'static str = "entity_id";
    fn id(&self) -> &String {
        &self.entity_id
    }
}

impl ById for RelationRow {
    const TABLE: Table = Table::Relations;
    const ID_COLUMN: &'static str = "relation_id";
    fn id(&self) -> &String {
        &self.relation_id
    }
}

impl Snapshot {
    /// The documents not deleted whose ids follow `after` (all, without it), in
    /// id order, at most `limit`, and, with `matching`, only those whose id or
    /// title holds it in any case: the ids are sorted, the other columns read
    /// for the page's rows only.
    pub async fn documents_page(
        &self,
        after: Option<&str>,
        limit: usize,
        matching: Option<&str>,
    ) -> Read<DocumentPage> {
        let mut listed = NOT_DELETED.to_string();
        if let Some(text) = matching.map(str::to_lowercase).filter(|t| !t.is_empty()) {
            let text = sql_string(&text);
            listed.push_str(&format!(
                " AND (strpos(lower(doc_id), {text}) > 0 OR strpos(lower(title), {text}) > 0)"
            ));
        }
        let mut filter = listed.clone();
        if let Some(after) = after {
            filter.push_str(&format!(" AND doc_id > {}", sql_string(after)));
        }
        // One more than the page: whether another page follows.
        let batches = self
            .scan(Table::Documents, DOCUMENT_COLUMNS, &filter, |scan| {
                scan.order_by(Some(vec![ColumnOrdering::asc_nulls_last("doc_id".into())]))?
                    .limit(Some(limit as i64 + 1), None)?;
                Ok(())
            })
            .await?;
        let mut documents: Vec<Document> = rows_of(Table::Documents, &batches)?;
        let more = documents.len() > limit;
        documents.truncate(limit);
        let next = more
            .then(|| documents.last().map(|d| d.doc_id.clone()))
            .flatten();
        let total = self.count(Table::Documents, &listed).await?;
        Ok(DocumentPage {
            documents,
            next,
            total,
        })
    }

    /// Every node of one tree (`memwalker` or `raptor`) of a document, in id order.
    pub async fn tree(&self, doc_id: &str, tree: &str) -> Read<Vec<Arc<TreeNodeRow>>> {
        let filter = format!(
            "doc_id = {} AND tree = {}",
            sql_string(doc_id),
            sql_string(tree)
        );
        let key = format!("{tree} {doc_id}");
        let read = async {
            let nodes = self.select(Table::TreeNodes, NODE_COLUMNS, &filter, None);
            let mut nodes = self.with_own_texts(nodes.await?).await?;
            nodes.sort_by(|a, b| a.node_id.cmp(&b.node_id));
            Ok(nodes.into_iter().map(Arc::new).collect::<Vec<_>>())
        };
        let nodes = self.cached(Table::TreeNodes, TREE_OF, &key, read, |rows| {
            rows_bytes(rows.iter().map(|r| &**r))
        });
        Ok(nodes.await?.as_ref().clone())
    }

    /// The root of a document's MemWalker tree.
    pub async fn root_of(&self, doc_id: &str) -> Read<Option<Arc<TreeNodeRow>>> {
        let filter = format!(
            "doc_id = {} AND tree = '{TREE_MEMWALKER}' AND parent_id IS NULL",
            sql_string(doc_id)
        );
        let read = async {
            let roots = self.select(Table::TreeNodes, NODE_COLUMNS, &filter, None);
            let roots = self.with_own_texts(roots.await?).await?;
            let root = roots.into_iter().min_by(|a, b| a.node_id.cmp(&b.node_id));
            Ok(root.map(Arc::new))
        };
        let root = self.cached(Table::TreeNodes, ROOT_OF, doc_id, read, |root| {
            rows_bytes(root.as_deref())
        });
        Ok(root.await?.as_ref().clone())
    }

    /// A document's ReadAgent pages in order, each with its text (cut out of
    /// the document's: pages point into it).
    pub async fn pages_of(&self, doc_id: &str) -> Read<Arc<[Page]>> {
        let filter = format!("doc_id = {}", sql_string(doc_id));
        let read = async {
            let mut rows: Vec<PageRow> = self.select(Table::Pages, &[], &filter, None).await?;
            rows.sort_by_key(|p| p.ordinal);
            let text = match rows.is_empty() {
                true => None,
                false => self.document_text(doc_id).await?,
            };
            let text = text.as_deref().map_or("", |t| t.as_str());
            let texts = cut_chars(text, rows.iter().map(|p| p.start_char..p.end_char));
            let pages = (rows.into_iter().zip(texts)).map(|(row, text)| Page { row, text });
            Ok(Arc::<[Page]>::from(pages.collect::<Vec<_>>()))
        };
        let pages = self.cached(Table::Pages, PAGES_OF, doc_id, read, |pages| {
            pages.iter().map(|p| p.text.len()).sum::<usize>()
                + rows_bytes(pages.iter().map(|p| &p.row))
        });
        Ok(pages.await?.as_ref().clone())
    }

    /// The texts of `segments`, in their order, cut out of their documents'
    /// (segments point into them), each document's text read once, the
    /// documents' at once; a segment of a document the snapshot does not
    /// hold has none.
    pub async fn segment_texts(&self, segments: &[Arc<SegmentRow>]) -> Read<Vec<String>> {
        let mut of_document: HashMap<&str, Vec<usize>> = HashMap::new();
        for (i, segment) in segments.iter().enumerate() {
            of_document.entry(&segment.doc_id).or_default().push(i);
        }
        let of_document: Vec<(&str, Vec<usize>)> = of_document.into_iter().collect();
        let documents = (of_document.iter()).map(|(doc_id, _)| self.document_text(doc_id));
        let documents = futures::future::try_join_all(documents).await?;
        let mut texts = vec![String::new(); segments.len()];
        for ((_, at), text) in of_document.iter().zip(documents) {
            let Some(text) = text else {
                continue;
            };
            let ranges = at
                .iter()
                .map(|&i| segments[i].start_char..segments[i].end_char);
            for (i, cut) in at.iter().zip(cut_chars(&text, ranges)) {
                texts[*i] = cut;
            }
        }
        Ok(texts)
    }

    /// `nodes` with the text of each leaf that is its segment's own text
    /// (kept once, in `documents`) filled in as its summary.
    async fn with_own_texts(&self, mut nodes: Vec<TreeNodeRow>) -> Read<Vec<TreeNodeRow>> {
        let own: Vec<String> = (nodes.iter())
            .filter(|n| n.summary.is_none())
            .filter_map(|n| n.seg_id.clone())
            .collect();
        if own.is_empty() {
            return Ok(nodes);
        }
        let segments = self.rows::<SegmentRow>(&own).await?;
        let texts = self.segment_texts(&segments).await?;
        let text_of: HashMap<&str, String> = (segments.iter().map(|s| s.seg_id.as_str()))
            .zip(texts)
            .collect();
        for node in nodes.iter_mut().filter(|n| n.summary.is_none()) {
            let text = node.seg_id.as_deref().and_then(|s| text_of.get(s));
            node.summary = Some(text.cloned().unwrap_or_default());
        }
        Ok(nodes)
    }

    /// A document's text, read once: `None` for a document the snapshot
    /// does not hold.
    async fn document_text(&self, doc_id: &str) -> Read<Option<Arc<String>>> {
        #[derive(Deserialize)]
        struct Text {
            text: String,
        }
        let filter = format!("doc_id = {}", sql_string(doc_id));
        let read = async {
            let texts: Vec<Text> = self
                .select(Table::Documents, &["text"], &filter, Some(1))
                .await?;
            Ok(texts.into_iter().next().map(|t| Arc::new(t.text)))
        };
        let text = self.cached(Table::Documents, TEXT_OF, doc_id, read, |text| {
            text.as_ref().map_or(0, |t| t.len())
        });
        Ok(text.await?.as_ref().clone())
    }

    /// The characters `chars` of a document's text, as far as its text goes,
    /// and where they start; `None` for a document the snapshot does not hold.
    pub async fn text_of(
        &self,
        doc_id: &str,
        chars: std::ops::Range<u64>,
    ) -> Read<Option<(u64, String)>> {
        let Some(text) = self.document_text(doc_id).await? else {
            return Ok(None);
        };
        Ok(Some(text_within(&text, chars)))
    }

    /// Entities whose name or an alias normalises to `name`'s normal form, in
    /// id order.
    pub async fn entities_named(&self, name: &str) -> Read<Vec<Arc<EntityRow>>> {
        let key = normalise(name);
        let filter = format!("array_has_any({NAME_KEYS}, [{}])", sql_string(&key));
        let read = async {
            let mut found: Vec<EntityRow> =
                self.select(Table::Entities, &[], &filter, None).await?;
            found.sort_by(|a, b| a.entity_id.cmp(&b.entity_id));
            Ok(found.into_iter().map(Arc::new).collect::<Vec<_>>())
        };
        let found = self.cached(Table::Entities, NAMED, &key, read, |rows| {
            rows_bytes(rows.iter().map(|r| &**r))
        });
        Ok(found.await?.as_ref().clone())
    }

    /// Relations with any of `entity_ids` at either end, each once, in id
    /// order, read whole: what the tests check the reads through the ends
    /// against.
    #[cfg(test)]
    pub async fn relations_touching(&self, entity_ids: &[String]) -> Read<Vec<Arc<RelationRow>>> {
        self.touching(entity_ids, RELATIONS_OF, &[], |r: &RelationRow| {
            [&r.relation_id, &r.source_id, &r.target_id]
        })
        .await
    }

    /// The first `limit` relations in id order with any of `entity_ids` at
    /// either end, other than those in `skip`: a hub's thousands are read as
    /// ids and ends only, and whole rows only for the relations kept.
    pub async fn first_relations_touching(
        &self,
        entity_ids: &[String],
        skip: &HashSet<&str>,
        limit: usize,
    ) -> Read<Vec<Arc<RelationRow>>> {
        let ends = self.relation_ends(entity_ids).await?;
        self.first_whole(&ends, skip, limit).await
    }

    /// The first `limit` relations of `entity_id` in id order, and how many
    /// it has: its relations' ends read once for both.
    pub async fn relations_page(
        &self,
        entity_id: &str,
        offset: usize,
        limit: usize,
    ) -> Read<(Vec<Arc<RelationRow>>, usize)> {
        let ends = self.relation_ends(&[entity_id.to_string()]).await?;
        let page = ends.get(offset..).unwrap_or_default();
        let first = self.first_whole(page, &HashSet::new(), limit).await?;
        Ok((first, ends.len()))
    }

    /// The ids and ends of the relations with any of `entity_ids` at either
    /// end, each once, in id order.
    async fn relation_ends(&self, entity_ids: &[String]) -> Read<Vec<Arc<RelationEnds>>> {
        self.touching(
            entity_ids,
            RELATION_ENDS_OF,
            RELATION_ENDS,
            |r: &RelationEnds| [&r.relation_id, &r.source_id, &r.target_id],
        )
        .await
    }

    /// The first `limit` of `ends` not in `skip`, read whole, in their order.
    async fn first_whole(
        &self,
        ends: &[Arc<RelationEnds>],
        skip: &HashSet<&str>,
        limit: usize,
    ) -> Read<Vec<Arc<RelationRow>>> {
        let kept: Vec<String> = ends
            .iter()
            .map(|r| r.relation_id.clone())
            .filter(|id| !skip.contains(id.as_str()))
            .take(limit)
            .collect();
        let mut rows = self.rows_by_id::<RelationRow>(&kept).await?;
        Ok(kept.iter().filter_map(|id| rows.remove(id)).collect())
    }

    /// `R`s (relation rows, or their ends) with any of `entity_ids` at
    /// either end (`ends`: id, source, target), each once, in id order: one
    /// read for the entities whose answer to `lookup` is not cached.
    async fn touching<R>(
        &self,
        entity_ids: &[String],
        lookup: &'static str,
        columns: &[&str],
        ends: fn(&R) -> [&String; 3],
    ) -> Read<Vec<Arc<R>>>
    where
        R: DeserializeOwned + Serialize + Send + Sync + 'static,
    {
        let version = self.version(Table::Relations);
        let mut touching: HashMap<String, Arc<R>> = HashMap::new();
        let mut missing: Vec<String> = Vec::new();
        for id in entity_ids {
            match self
                .cache
                .get::<Vec<Arc<R>>>(Table::Relations, version, lookup, id)
            {
                Some(hit) => touching.extend(hit.iter().map(|r| (ends(r)[0].clone(), r.clone()))),
                None => missing.push(id.clone()),
            }
        }
        missing.sort();
        missing.dedup();
        for chunk in missing.chunks(KEYS_PER_PREDICATE) {
            let ids = sql_strings(chunk);
            let filter = format!("source_id IN ({ids}) OR target_id IN ({ids})");
            let found: Vec<R> = self
                .select(Table::Relations, columns, &filter, None)
                .await?;
            let mut found: Vec<Arc<R>> = found.into_iter().map(Arc::new).collect();
            found.sort_by(|a, b| ends(a)[0].cmp(ends(b)[0]));
            for id in chunk {
                let of: Vec<Arc<R>> = found
                    .iter()
                    .filter(|r| ends(r)[1] == id || ends(r)[2] == id)
                    .cloned()
                    .collect();
                let bytes = rows_bytes(of.iter().map(|r| &**r));
                self.cache.put(
                    Table::Relations,
                    version,
                    lookup,
                    id.clone(),
                    Arc::new(of),
                    bytes,
                );
            }
            touching.extend(found.into_iter().map(|r| (ends(&r)[0].clone(), r)));
        }
        let mut touching: Vec<(String, Arc<R>)> = touching.into_iter().collect();
        touching.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(touching.into_iter().map(|(_, r)| r).collect())
    }

    /// The `R`s of `ids` that exist (and a reader may see), in that order.
    pub async fn rows<R: ById>(&self, ids: &[String]) -> Read<Vec<Arc<R>>> {
        let by_id = self.rows_by_id::<R>(ids).await?;
        Ok(ids.iter().filter_map(|id| by_id.get(id).cloned()).collect())
    }

    /// The `R` whose id is `id`, if it exists.
    pub async fn row<R: ById>(&self, id: &str) -> Read<Option<Arc<R>>> {
        Ok(self.rows_by_id::<R>(&[id.to_string()]).await?.remove(id))
    }

    /// The `R`s of `ids` that exist, by id: cached ones, and one read for
    /// the rest (absent ones are cached as absent too).
    pub async fn rows_by_id<R: ById>(&self, ids: &[String]) -> Read<HashMap<String, Arc<R>>> {
        let read = KeyedRead {
            table: R::TABLE,
            // Each table is looked up by id under one condition; it names the lookup.
            lookup: R::VISIBLE.unwrap_or(BY_ID),
            column: R::ID_COLUMN,
            columns: R::COLUMNS,
            condition: R::VISIBLE,
        };
        let found = self
            .by_keys::<R, Option<Arc<R>>>(
                read,
                ids,
                R::completed,
                |row| row.id().clone(),
                |slot, row| *slot = Some(Arc::new(row)),
                |row| rows_bytes(row.as_deref()),
            )
            .await?;
        Ok((found.into_iter())
            .filter_map(|(id, row)| Some((id, row.as_ref().clone()?)))
            .collect())
    }

    /// What `read` finds for each of `keys`, by key: cached ones, and one
    /// read a chunk of keys for the rest, each row `completed` and
    /// `gather`ed into the value of its key (`key_of`). A key no row has
    /// gets the default value, and is cached with it: absent ones are cached
    /// as absent too.
    pub(super) async fn by_keys<R, T>(
        &self,
        read: KeyedRead<'_>,
        keys: &[String],
        completed: Completion<R>,
        key_of: impl Fn(&R) -> String,
        gather: impl Fn(&mut T, R),
        bytes: impl Fn(&T) -> usize,
    ) -> Read<HashMap<String, Arc<T>>>
    where
        R: DeserializeOwned,
        T: Default + Send + Sync + 'static,
    {
        let KeyedRead {
            table,
            lookup,
            column,
            columns,
            condition,
        } = read;
        let version = self.version(table);
        let mut found = HashMap::new();
        let mut missing = Vec::new();
        for key in keys {
            match (self.cache).get::<T>(table, version, lookup, &self.reader.cache_key(key)) {
                Some(hit) => {
                    found.insert(key.clone(), hit);
                }
                None => missing.push(key.clone()),
            }
        }
        missing.sort();
        missing.dedup();
        for chunk in missing.chunks(KEYS_PER_PREDICATE) {
            let mut filter = format!("{column} IN ({})", sql_strings(chunk));
            if let Some(condition) = condition {
                filter = format!("{filter} AND {condition}");
            }
            let mut values: HashMap<String, T> = HashMap::new();
            let rows = self.select::<R>(table, columns, &filter, None).await?;
            for row in completed(self, rows).await? {
                gather(values.entry(key_of(&row)).or_default(), row);
            }
            for key in chunk {
                let value = Arc::new(values.remove(key).unwrap_or_default());
                let size = bytes(&value);
                self.cache.put(
                    table,
                    version,
                    lookup,
                    self.reader.cache_key(key).into_owned(),
                    Arc::clone(&value),
                    size,
                );
                found.insert(key.clone(), value);
            }
        }
        Ok(found)
    }
}

/// A read of rows by the values of one column ([`Snapshot::by_keys`]): the
/// table, the column, the columns read, a condition every row meets too,
/// and the name the cache keeps the answers under.
pub(super) struct KeyedRead<'a> {
    pub table: Table,
    pub lookup: &'static str,
    pub column: &'a str,
    pub columns: &'a [&'a str],
    pub condition: Option<&'a str>,
}

/// The characters `chars` of `text`, clipped to its end, and where they start.
fn text_within(text: &str, chars: std::ops::Range<u64>) -> (u64, String) {
    let at = byte_offsets(text, [chars.start, chars.end.max(chars.start)]);
    let start = text[..at[0]].chars().count() as u64;
    (start, text[at[0]..at[1]].to_string())
}

/// The characters `ranges` of `text`, each clipped to its end, in one pass
/// over it.
fn cut_chars(
    text: &str,
    ranges: impl Iterator<Item = std::ops::Range<u64>> + Clone,
) -> Vec<String> {
    let mut bounds: Vec<u64> = ranges.clone().flat_map(|r| [r.start, r.end]).collect();
    bounds.sort_unstable();
    bounds.dedup();
    let bytes = byte_offsets(text, bounds.iter().copied());
    let byte_at = |char: u64| bytes[bounds.binary_search(&char).unwrap_or_default()];
    ranges
        .map(|r| {
            let start = byte_at(r.start);
            text[start..byte_at(r.end).max(start)].to_string()
        })
        .collect()
}

/// The byte offsets in `text` of the character offsets `chars` (in
/// ascending order), each clipped to the text's end: one pass for them all.
fn byte_offsets(text: &str, chars: impl IntoIterator<Item = u64>) -> Vec<usize> {
    let ends = std::iter::once(text.len());
    let mut bytes = (text.char_indices().map(|(byte, _)| byte).chain(ends)).peekable();
    let mut at = 0;
    chars
        .into_iter()
        .map(|wanted| {
            while at < wanted && bytes.peek().is_some() {
                bytes.next();
                at += 1;
            }
            bytes.peek().copied().unwrap_or(text.len())
        })
        .collect()
}

/// The trees a walk reads nodes of.
const DOCUMENT_TREES: &str = "tree IN ('memwalker', 'raptor')";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::navigate::fixture::{HUB_RELATIONS, memory, memory_with_hub};

    /// One read for any row type: rows come back in the order asked, an id
    /// asked twice twice, an unknown id left out; a second read of the same
    /// ids is answered from the cache.
    #[tokio::test]
    async fn rows_are_read_by_id_in_the_order_asked() {
        let memory = memory().await;
        let ids = |names: &[&str]| -> Vec<String> { names.iter().map(|n| n.to_string()).collect() };
        let asked = ids(&["s-s1", "s-unknown", "s-p1", "s-s1"]);
        let segments = memory.rows::<SegmentRow>(&asked).await.unwrap();
        let found: Vec<&str> = segments.iter().map(|s| s.seg_id.as_str()).collect();
        assert_eq!(found, ["s-s1", "s-p1", "s-s1"]);
        let before = memory.cache_stats();
        let again = memory.rows_by_id::<SegmentRow>(&asked).await.unwrap();
        assert_eq!(again.len(), 2);
        assert_eq!(memory.cache_stats().misses, before.misses);
        let document = memory.row::<Document>("paint").await.unwrap().unwrap();
        assert_eq!(
            (document.doc_id.as_str(), document.title.as_str()),
            ("paint", "PAINT")
        );
        assert!(memory.row::<Document>("s-p1").await.unwrap().is_none());
        assert!(memory.rows::<EntityRow>(&[]).await.unwrap().is_empty());
    }

    /// A leaf kept without its text (its segment's own) is read with that
    /// text, by id and in its document's tree alike; a leaf with a summary
    /// of its own keeps it.
    #[tokio::test]
    async fn a_leaf_that_is_its_segments_text_is_read_with_it() {
        use crate::navigate::fixture::SEGMENTS;
        let memory = memory().await;
        let text = Some(SEGMENTS[2].2.to_string());
        let leaf = memory.row::<TreeNodeRow>("n-s1").await.unwrap().unwrap();
        assert_eq!(leaf.summary, text);
        let tree = memory.tree("startup", TREE_MEMWALKER).await.unwrap();
        let in_tree = tree.iter().find(|n| n.node_id == "n-s1").unwrap();
        assert_eq!(in_tree.summary, text);
        let own = memory.row::<TreeNodeRow>("n-p2").await.unwrap().unwrap();
        assert_eq!(own.summary.as_deref(), Some("A cold studio."));
    }

    /// An entity's relations are paged by offset: the pages tile them in id
    /// order, the count is the same on every page, and a page past the end is
    /// empty, not an error.
    #[tokio::test]
    async fn relations_are_paged_within_their_bounds() {
        let memory = memory_with_hub().await;
        let mut seen = Vec::new();
        let mut offset = 0;
        loop {
            let (page, total) = memory.relations_page("e-guild", offset, 64).await.unwrap();
            assert_eq!(total, HUB_RELATIONS);
            if page.is_empty() {
                break;
            }
            assert!(page.len() <= 64);
            offset += page.len();
            seen.extend(page.iter().map(|r| r.relation_id.clone()));
        }
        assert_eq!(seen.len(), HUB_RELATIONS);
        assert!(seen.is_sorted(), "relations in id order");
        let (past, total) = memory
            .relations_page("e-guild", HUB_RELATIONS + 5, 10)
            .await
            .unwrap();
        assert!(past.is_empty());
        assert_eq!(total, HUB_RELATIONS);
        let (none, total) = memory.relations_page("e-guild", 0, 0).await.unwrap();
        assert_eq!((none.len(), total), (0, HUB_RELATIONS));
        let (unknown, total) = memory.relations_page("e-nobody", 0, 10).await.unwrap();
        assert_eq!((unknown.len(), total), (0, 0));
    }

    /// A stretch of a document's text is counted in characters (not
    /// bytes), clipped to the text's end.
    #[test]
    fn a_stretch_of_text_is_cut_by_character() {
        let whole = "Très bien. Ça va — oui. Fin.";
        let chars = |range: std::ops::Range<usize>| -> String {
            whole.chars().skip(range.start).take(range.len()).collect()
        };
        assert_eq!(text_within(whole, 8..14), (8, chars(8..14)));
        assert_eq!(text_within(whole, 5..27), (5, chars(5..27)));
        assert_eq!(text_within(whole, 0..100), (0, whole.to_string()));
        assert_eq!(text_within(whole, 26..90), (26, chars(26..28)));
        assert_eq!(text_within(whole, 90..95), (28, String::new()));
        assert_eq!(text_within("", 0..5), (0, String::new()));
        let page = PageRow {
            page_id: "p".into(),
            doc_id: "d".into(),
            ordinal: 1,
            start_char: 11,
            end_char: 24,
            gist: None,
            acl: Vec::new(),
        };
        assert_eq!(page.text_in(whole), chars(11..24));
        // A document's segments of two sizes overlap, in any order, and are
        // cut in one pass as each would be alone.
        let ranges = [11..24, 0..11, 5..27, 26..90, 90..95];
        let cut = cut_chars(whole, ranges.iter().cloned());
        let alone: Vec<String> = ranges
            .iter()
            .map(|r| text_within(whole, r.clone()).1)
            .collect();
        assert_eq!(cut, alone);
    }
}
