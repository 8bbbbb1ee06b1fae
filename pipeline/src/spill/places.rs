//! Where each spilled value is in the values file: a log-structured index.
//!
//! The newest [`RECENT`] places are held in the heap; older ones are in runs,
//! each a file of places sorted by key, in the page cache, not the heap. A run
//! keeps in the heap only the first key of each of its pages (a page is read
//! to find a key) and a blocked Bloom filter (most keys a put looks up are not
//! there, and the filter says so without a read). So a value costs about 1.4
//! bytes of heap instead of an open-addressing table's 16 to 32, and the index
//! never doubles: for the 6M values a worker a million short documents would
//! spill (on paper, from 12 a document at 100k), a table of 12-byte slots
//! would be 100 MB, and 300 MB while it doubled.
//!
//! Runs merge as a binary counter does: a run is merged with the one before it
//! while that one is less than twice its size, so there are about
//! log2(values / [`RECENT`]) runs, and each place is rewritten that many times,
//! sequentially. A key is written once (a put looks it up first), so runs never
//! disagree. The put that fills the recent places writes them and does the
//! merges, under the spill's lock; readers holding a snapshot of the runs go on.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use super::SpillKey;

/// Where a value's record is in the values file, and its length (header and
/// value), so that it is read in one read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Place {
    pub offset: u64,
    pub len: u32,
}

/// Places held in the heap before they are written as a run (about 3.5 MB).
const RECENT: usize = 1 << 16;

/// A place in a run: its key, offset and length, little-endian.
const ENTRY_BYTES: usize = 16 + 8 + 4;

/// Places in a run's page: the unit a look-up reads (3.5 KiB).
const PAGE_ENTRIES: usize = 128;

/// Places read at a time while runs merge (112 KiB).
const MERGE_READ_ENTRIES: usize = 4096;

/// The index (see the module doc).
#[derive(Debug, Default)]
pub(super) struct Places {
    recent: BTreeMap<SpillKey, Place>,
    /// Oldest first; shared, so that a reader looks through them without
    /// holding the spill's lock.
    runs: Runs,
}

/// The runs as a reader takes them: a snapshot, replaced when they change.
pub(super) type Runs = Arc<Vec<Arc<Run>>>;

impl Places {
    /// `key`'s place, if it was inserted.
    pub fn find(&self, key: SpillKey) -> Option<Place> {
        self.recent
            .get(&key)
            .copied()
            .or_else(|| find_in(&self.runs, key))
    }

    /// `key`'s place if it is among the recent ones; else the runs to look
    /// in (without the lock).
    pub fn recent_or_runs(&self, key: SpillKey) -> Result<Place, Runs> {
        self.recent
            .get(&key)
            .copied()
            .ok_or_else(|| Arc::clone(&self.runs))
    }

    /// Inserts the place of a key not yet inserted (see [`Places::find`]).
    pub fn insert(&mut self, key: SpillKey, place: Place) {
        self.recent.insert(key, place);
        if self.recent.len() >= RECENT {
            let recent = std::mem::take(&mut self.recent);
            let run = Run::write(recent.len(), recent.into_iter());
            let mut runs: Vec<Arc<Run>> = self.runs.iter().cloned().collect();
            runs.push(Arc::new(run));
            while let [.., older, newer] = &runs[..]
                && older.len < 2 * newer.len
            {
                let merged = Run::merge(older, newer);
                runs.truncate(runs.len() - 2);
                runs.push(Arc::new(merged));
            }
            self.runs = Arc::new(runs);
        }
    }

    /// How many places are held.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.recent.len() + self.runs.iter().map(|run| run.len).sum::<usize>()
    }

    #[cfg(test)]
    fn run_lens(&self) -> Vec<usize> {
        self.runs.iter().map(|run| run.len).collect()
    }
}

/// `key`'s place in `runs`, if it is in one.
pub(super) fn find_in(runs: &[Arc<Run>], key: SpillKey) -> Option<Place> {
    runs.iter().rev().find_map(|run| run.find(key))
}

/// A file of places sorted by key (see the module doc).
#[derive(Debug)]
pub(super) struct Run {
    file: File,
    len: usize,
    /// The first key of each page.
    firsts: Vec<SpillKey>,
    filter: Filter,
}

impl Run {
    /// A run of the `len` places `sorted` yields, in key order.
    fn write(len: usize, sorted: impl Iterator<Item = (SpillKey, Place)>) -> Run {
        let file = tempfile::tempfile()
            .unwrap_or_else(|error| panic!("creating a spill index file (TMPDIR): {error}"));
        let mut out = BufWriter::with_capacity(1 << 16, &file);
        let mut filter = Filter::new(len);
        let mut firsts = Vec::with_capacity(len.div_ceil(PAGE_ENTRIES));
        let mut written = 0;
        for (key, place) in sorted {
            if written % PAGE_ENTRIES == 0 {
                firsts.push(key);
            }
            filter.insert(key);
            out.write_all(&encode(key, place))
                .unwrap_or_else(|error| panic!("writing a spill index file (TMPDIR): {error}"));
            written += 1;
        }
        out.flush()
            .unwrap_or_else(|error| panic!("writing a spill index file (TMPDIR): {error}"));
        drop(out);
        assert_eq!(written, len, "a run holds the places it was given");
        Run {
            file,
            len,
            firsts,
            filter,
        }
    }

    /// One run of the places of `older` and `newer`, read a block at a time.
    fn merge(older: &Run, newer: &Run) -> Run {
        let mut a = older.entries().peekable();
        let mut b = newer.entries().peekable();
        let merged = std::iter::from_fn(|| match (a.peek(), b.peek()) {
            (Some(x), Some(y)) if x.0 < y.0 => a.next(),
            (Some(_), Some(_)) | (None, Some(_)) => b.next(),
            (Some(_), None) => a.next(),
            (None, None) => None,
        });
        Run::write(older.len + newer.len, merged)
    }

    /// Its places in key order.
    fn entries(&self) -> impl Iterator<Item = (SpillKey, Place)> + '_ {
        (0..self.len)
            .step_by(MERGE_READ_ENTRIES)
            .flat_map(move |from| {
                let count = MERGE_READ_ENTRIES.min(self.len - from);
                let bytes = self.read(from, count);
                (0..count)
                    .map(|i| decode(&bytes[i * ENTRY_BYTES..][..ENTRY_BYTES]))
                    .collect::<Vec<_>>()
            })
    }

    fn find(&self, key: SpillKey) -> Option<Place> {
        if !self.filter.may_hold(key) {
            return None;
        }
        let page = self
            .firsts
            .partition_point(|first| *first <= key)
            .checked_sub(1)?;
        let from = page * PAGE_ENTRIES;
        let count = PAGE_ENTRIES.min(self.len - from);
        let bytes = self.read(from, count);
        let (mut low, mut high) = (0, count);
        while low < high {
            let middle = (low + high) / 2;
            let (held, place) = decode(&bytes[middle * ENTRY_BYTES..][..ENTRY_BYTES]);
            match held.cmp(&key) {
                Ordering::Less => low = middle + 1,
                Ordering::Greater => high = middle,
                Ordering::Equal => return Some(place),
            }
        }
        None
    }

    /// `count` places from the `from`th, as written.
    fn read(&self, from: usize, count: usize) -> Vec<u8> {
        let mut bytes = vec![0; count * ENTRY_BYTES];
        self.file
            .read_exact_at(&mut bytes, (from * ENTRY_BYTES) as u64)
            .unwrap_or_else(|error| panic!("reading a spill index file (TMPDIR): {error}"));
        bytes
    }
}

fn encode(key: SpillKey, place: Place) -> [u8; ENTRY_BYTES] {
    let mut entry = [0; ENTRY_BYTES];
    entry[..16].copy_from_slice(&key.to_le_bytes());
    entry[16..24].copy_from_slice(&place.offset.to_le_bytes());
    entry[24..].copy_from_slice(&place.len.to_le_bytes());
    entry
}

fn decode(entry: &[u8]) -> (SpillKey, Place) {
    let field = |range: std::ops::Range<usize>| &entry[range];
    let key = u128::from_le_bytes(field(0..16).try_into().expect("16 bytes"));
    let offset = u64::from_le_bytes(field(16..24).try_into().expect("8 bytes"));
    let len = u32::from_le_bytes(field(24..28).try_into().expect("4 bytes"));
    (key, Place { offset, len })
}

/// A blocked Bloom filter of a run's keys: a key sets one bit in each of the
/// eight words of one 32-byte block, so a look-up is one cache miss. At 10
/// bits a key about 1% of the keys not in the run read a page anyway. Keys
/// are content hashes: their own bits choose the block and the bits.
#[derive(Debug)]
struct Filter {
    blocks: Vec<[u32; 8]>,
}

const FILTER_BITS_PER_KEY: usize = 10;

impl Filter {
    fn new(keys: usize) -> Filter {
        let blocks = (keys * FILTER_BITS_PER_KEY).div_ceil(256).max(1);
        Filter {
            blocks: vec![[0; 8]; blocks],
        }
    }

    /// The block `key` falls in, and its bit in each of the block's words.
    fn bits(&self, key: SpillKey) -> (usize, [u32; 8]) {
        let high = (key >> 64) as u64;
        let block = ((u128::from(high) * self.blocks.len() as u128) >> 64) as usize;
        let bits = std::array::from_fn(|word| 1 << ((key >> (5 * word)) & 31) as u32);
        (block, bits)
    }

    fn insert(&mut self, key: SpillKey) {
        let (block, bits) = self.bits(key);
        for (word, bit) in self.blocks[block].iter_mut().zip(bits) {
            *word |= bit;
        }
    }

    fn may_hold(&self, key: SpillKey) -> bool {
        let (block, bits) = self.bits(key);
        (self.blocks[block].iter().zip(bits)).all(|(word, bit)| word & bit != 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use memweave_schemas::hash128;

    fn key(i: u64) -> SpillKey {
        hash128(&i.to_le_bytes())
    }

    fn place(i: u64) -> Place {
        Place {
            offset: i * 8,
            len: (i % 1000) as u32 + 20,
        }
    }

    /// Past the recent places, runs are written and merged as a binary
    /// counter; every place is found, in the heap or a run, and keys never
    /// inserted are not.
    #[test]
    fn places_are_found_in_the_heap_and_in_merged_runs() {
        let mut places = Places::default();
        let count = 5 * RECENT as u64 + 123;
        for i in 0..count {
            places.insert(key(i), place(i));
        }
        assert_eq!(places.len(), count as usize);
        assert_eq!(places.run_lens(), vec![4 * RECENT, RECENT]);
        assert_eq!(places.recent.len(), 123);
        for i in 0..count {
            assert_eq!(places.find(key(i)), Some(place(i)), "key {i}");
        }
        for i in count..count + 10_000 {
            assert_eq!(places.find(key(i)), None);
        }
        let runs = match places.recent_or_runs(key(0)) {
            Err(runs) => runs,
            Ok(_) => panic!("the first key is in a run"),
        };
        assert_eq!(find_in(&runs, key(0)), Some(place(0)));
        assert_eq!(
            places.recent_or_runs(key(count - 1)).ok(),
            Some(place(count - 1))
        );
    }

    /// A merged run is in key order and holds both runs' places.
    #[test]
    fn a_merged_run_holds_both_runs_in_key_order() {
        let run_of = |range: std::ops::Range<u64>| {
            let sorted: BTreeMap<SpillKey, Place> = range.map(|i| (key(i), place(i))).collect();
            Run::write(sorted.len(), sorted.into_iter())
        };
        let (older, newer) = (run_of(0..5000), run_of(5000..7000));
        let merged = Run::merge(&older, &newer);
        let entries: Vec<(SpillKey, Place)> = merged.entries().collect();
        assert_eq!(entries.len(), 7000);
        assert!(entries.windows(2).all(|pair| pair[0].0 < pair[1].0));
        let mut expected: Vec<(SpillKey, Place)> = (0..7000).map(|i| (key(i), place(i))).collect();
        expected.sort_by_key(|(key, _)| *key);
        assert_eq!(entries, expected);
    }

    /// The filter holds every key inserted and turns away about 1% of others.
    #[test]
    fn the_filter_holds_its_keys_and_few_others() {
        let mut filter = Filter::new(100_000);
        (0..100_000).for_each(|i| filter.insert(key(i)));
        assert!((0..100_000).all(|i| filter.may_hold(key(i))));
        let false_positives = (100_000..200_000)
            .filter(|&i| filter.may_hold(key(i)))
            .count();
        assert!(false_positives < 2_000, "{false_positives} of 100,000");
    }
}
