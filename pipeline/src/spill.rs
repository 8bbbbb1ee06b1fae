//! A worker's spill of the texts its cross-document stages read.
//!
//! Entity resolution and relation merging need every document's mentions of a
//! name (their passages, descriptions, evidence) at the round's end, and the
//! corpus trees every document's root; they must keep them across rounds to
//! recompute a name or a tree when one document changes. Held in differential
//! arrangements those texts grow with the archive, several copies over.
//! Instead the worker that resolves a name (or builds a tree) writes each one to
//! an anonymous local file when it arrives and the dataflow carries only its
//! [`SpillKey`] (a content hash): arrangements hold ids and hashes, the file
//! holds the texts once, and the page cache, not the heap, keeps the hot ones.
//!
//! Keys are content hashes, so a retraction (the same mention rebuilt from the
//! call cache) finds what its insertion wrote. The file is append-only for the
//! life of the process: a changed document adds its new mentions and keeps the
//! old ones, which a later round may still retract.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::Mutex;

use memweave_schemas::hash128;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// Where a spilled value is: the first 16 bytes of its encoding's BLAKE3 hash.
pub type SpillKey = u128;

/// A group of spilled values (a name's mentions, a pair's relations, a
/// corpus's roots) as a reduce hands it on: the key of its list of keys, and
/// how many. A group's list would otherwise sit in the reduce's output
/// arrangement and again in the queue of the stage that reads it, for every
/// group of the archive at a round's end.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct SpilledGroup {
    keys: SpillKey,
    pub len: usize,
}

impl SpilledGroup {
    /// Spills the list `keys`.
    pub fn put(spill: &Spill, keys: &[SpillKey]) -> SpilledGroup {
        SpilledGroup {
            keys: spill.put(&keys),
            len: keys.len(),
        }
    }

    /// The keys of the group's values, in the order they were put.
    pub fn keys(&self, spill: &Spill) -> Vec<SpillKey> {
        spill.get(self.keys)
    }
}

/// An append-only file of values by content hash (see the module doc).
#[derive(Debug)]
pub struct Spill {
    values: File,
    places: Mutex<Places>,
}

/// Where each key's value is in the values file: an open-addressing hash
/// table of [`SLOT_BYTES`] slots (key, offset, length) in a second anonymous
/// file. It has an entry per mention of the archive: in a heap map it was the
/// largest thing the workers held that grew with the archive (20 MB at 10M
/// tokens); in a file a look-up reads a slot or a few, and the page cache,
/// not the process, holds it.
#[derive(Debug)]
struct Places {
    slots: File,
    /// Slots in `slots`, a power of two; at most half are used.
    capacity: u64,
    used: u64,
    /// The length of the values file.
    end: u64,
}

/// A slot: the key's two halves, the value's offset and length (0: empty; no
/// encoding is empty), little-endian.
const SLOT_BYTES: u64 = 32;

/// Slots of a new table (2 MiB of sparse file).
const INITIAL_SLOTS: u64 = 1 << 16;

/// Slots read at once while the table doubles (128 KiB).
const GROW_READ_SLOTS: u64 = 4096;

/// A slot's contents.
#[derive(Clone, Copy)]
struct Place {
    key: SpillKey,
    offset: u64,
    len: u64,
}

impl Spill {
    /// An empty spill in files under the system's temporary directory
    /// (`TMPDIR`), gone when the process ends.
    pub fn new() -> std::io::Result<Spill> {
        Spill::with_slots(INITIAL_SLOTS)
    }

    fn with_slots(capacity: u64) -> std::io::Result<Spill> {
        Ok(Spill {
            values: tempfile::tempfile()?,
            places: Mutex::new(Places::new(capacity)?),
        })
    }

    /// Writes `value` (once: an equal value already written is not written
    /// again) and returns its key.
    pub fn put<T: Serialize>(&self, value: &T) -> SpillKey {
        let bytes = serde_json::to_vec(value).expect("spilled values serialize");
        let key = hash128(&bytes);
        let mut places = self.places();
        let (slot, found) = places.find(key);
        if found.is_none() {
            let offset = places.end;
            self.values
                .write_all_at(&bytes, offset)
                .unwrap_or_else(|error| panic!("writing the spill file (TMPDIR): {error}"));
            places.end += bytes.len() as u64;
            places.insert(
                slot,
                Place {
                    key,
                    offset,
                    len: bytes.len() as u64,
                },
            );
        }
        key
    }

    /// The value written under `key`.
    pub fn get<T: DeserializeOwned>(&self, key: SpillKey) -> T {
        let place = self
            .places()
            .find(key)
            .1
            .expect("every spill key read was written by this worker");
        let mut bytes = vec![0; place.len as usize];
        self.values
            .read_exact_at(&mut bytes, place.offset)
            .unwrap_or_else(|error| panic!("reading the spill file (TMPDIR): {error}"));
        serde_json::from_slice(&bytes).expect("a spilled value reads back as written")
    }

    fn places(&self) -> std::sync::MutexGuard<'_, Places> {
        self.places
            .lock()
            .expect("the spill's index is never poisoned")
    }
}

impl Places {
    fn new(capacity: u64) -> std::io::Result<Places> {
        let slots = tempfile::tempfile()?;
        slots.set_len(capacity * SLOT_BYTES)?;
        Ok(Places {
            slots,
            capacity,
            used: 0,
            end: 0,
        })
    }

    /// The slot `key` is in, or the empty one where it would go (linear
    /// probing from its low bits), and what is there.
    fn find(&self, key: SpillKey) -> (u64, Option<Place>) {
        let mut slot = (key as u64) & (self.capacity - 1);
        loop {
            match self.read(slot) {
                Some(place) if place.key == key => return (slot, Some(place)),
                Some(_) => slot = (slot + 1) & (self.capacity - 1),
                None => return (slot, None),
            }
        }
    }

    /// Fills the empty `slot` (from [`Places::find`]); doubles the table
    /// first when it would be more than half full.
    fn insert(&mut self, slot: u64, place: Place) {
        let slot = if (self.used + 1) * 2 > self.capacity {
            self.grow();
            self.find(place.key).0
        } else {
            slot
        };
        self.write(slot, place);
        self.used += 1;
    }

    /// Moves every entry to a table of twice the slots, reading the old one
    /// [`GROW_READ_SLOTS`] at a time.
    fn grow(&mut self) {
        let bigger = Places::new(self.capacity * 2)
            .unwrap_or_else(|error| panic!("creating the spill index file (TMPDIR): {error}"));
        let mut chunk = vec![0u8; (GROW_READ_SLOTS * SLOT_BYTES) as usize];
        for first in (0..self.capacity).step_by(GROW_READ_SLOTS as usize) {
            let slots = GROW_READ_SLOTS.min(self.capacity - first);
            let bytes = &mut chunk[..(slots * SLOT_BYTES) as usize];
            self.slots
                .read_exact_at(bytes, first * SLOT_BYTES)
                .unwrap_or_else(|error| panic!("reading the spill index (TMPDIR): {error}"));
            for place in bytes.chunks_exact(SLOT_BYTES as usize).filter_map(decode) {
                let empty = bigger.find(place.key).0;
                bigger.write(empty, place);
            }
        }
        (self.slots, self.capacity) = (bigger.slots, bigger.capacity);
    }

    fn read(&self, slot: u64) -> Option<Place> {
        let mut bytes = [0u8; SLOT_BYTES as usize];
        self.slots
            .read_exact_at(&mut bytes, slot * SLOT_BYTES)
            .unwrap_or_else(|error| panic!("reading the spill index (TMPDIR): {error}"));
        decode(&bytes)
    }

    fn write(&self, slot: u64, place: Place) {
        let words = [
            place.key as u64,
            (place.key >> 64) as u64,
            place.offset,
            place.len,
        ];
        let mut bytes = [0u8; SLOT_BYTES as usize];
        for (word, at) in words.iter().zip(bytes.chunks_exact_mut(8)) {
            at.copy_from_slice(&word.to_le_bytes());
        }
        self.slots
            .write_all_at(&bytes, slot * SLOT_BYTES)
            .unwrap_or_else(|error| panic!("writing the spill index (TMPDIR): {error}"));
    }
}

/// A slot's place; `None` for an empty slot.
fn decode(slot: &[u8]) -> Option<Place> {
    let word = |i: usize| u64::from_le_bytes(slot[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
    (word(3) != 0).then(|| Place {
        key: u128::from(word(0)) | (u128::from(word(1)) << 64),
        offset: word(2),
        len: word(3),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_read_back_by_key_and_equal_values_are_written_once() {
        let spill = Spill::new().unwrap();
        let a = spill.put(&("alpha".to_string(), vec![1, 2, 3]));
        let b = spill.put(&("beta".to_string(), vec![4]));
        let again = spill.put(&("alpha".to_string(), vec![1, 2, 3]));
        assert_eq!(a, again);
        assert_ne!(a, b);
        assert_eq!(
            spill.get::<(String, Vec<i32>)>(b),
            ("beta".to_string(), vec![4])
        );
        assert_eq!(
            spill.get::<(String, Vec<i32>)>(a),
            ("alpha".to_string(), vec![1, 2, 3])
        );
        let written = spill.values.metadata().unwrap().len();
        assert_eq!(written, spill.places().end);
        assert_eq!(
            written as usize,
            serde_json::to_vec(&("alpha", [1, 2, 3])).unwrap().len()
                + serde_json::to_vec(&("beta", [4])).unwrap().len()
        );
    }

    /// Full 128-bit keys survive the list's JSON, in order; the same list is
    /// the same group.
    #[test]
    fn a_group_reads_back_its_keys_in_order() {
        let spill = Spill::new().unwrap();
        let keys: Vec<SpillKey> = vec![u128::MAX, 7, spill.put(&"a mention")];
        let group = SpilledGroup::put(&spill, &keys);
        assert_eq!(group.len, 3);
        assert_eq!(group.keys(&spill), keys);
        assert_eq!(SpilledGroup::put(&spill, &keys), group);
        assert_ne!(SpilledGroup::put(&spill, &keys[..2]), group);
    }

    /// A table of 4 slots takes 300 values: every insert past half full
    /// doubles it, keys that share low bits probe past each other, and every
    /// value still reads back under its key.
    #[test]
    fn the_index_grows_and_finds_every_key_it_moved() {
        let spill = Spill::with_slots(4).unwrap();
        let keys: Vec<SpillKey> = (0..300).map(|i| spill.put(&format!("value {i}"))).collect();
        let (capacity, used) = {
            let places = spill.places();
            (places.capacity, places.used)
        };
        assert_eq!(used, 300);
        assert_eq!(capacity, 1024);
        let length = spill.values.metadata().unwrap().len();
        for (i, &key) in keys.iter().enumerate() {
            assert_eq!(spill.get::<String>(key), format!("value {i}"));
            assert_eq!(spill.put(&format!("value {i}")), key);
        }
        assert_eq!(spill.values.metadata().unwrap().len(), length);
        assert_eq!(spill.places().used, 300);
    }
}
