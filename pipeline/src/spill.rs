//! A worker's spill of the texts its cross-document stages read.
//!
//! Entity resolution and relation merging need every document's mentions of a
//! name (their passages, descriptions, evidence) at the round's end, and the
//! corpus trees every document's root; they must keep them across rounds to
//! recompute a name or a tree when one document changes. Held in differential
//! arrangements those texts grow with the archive, several copies over.
//! Instead the worker that resolves a name (or builds a tree) writes each one to
//! an anonymous local file when it arrives and the dataflow carries only its
//! [`SpillKey`] (a content hash): the groups across documents are lists of
//! ids and hashes in the file too (see `dataflow::spilled::reduce_in_spill`),
//! the file holds each text once, and the page cache, not the heap, keeps the
//! hot ones.
//!
//! Keys are content hashes, so a retraction (the same mention rebuilt from the
//! call cache) finds what its insertion wrote. The file is append-only for the
//! life of the process: a changed document adds its new mentions and keeps the
//! old ones, which a later round may still retract.
//!
//! Values are encoded with bincode (they never leave the process) and appended
//! through a buffer of [`APPEND_BUFFER`] bytes; the index of where each is
//! lives in the heap at 12 bytes a slot (see [`Places`]). A new process's
//! restore spills every mention of the archive at once, and with JSON, one
//! write per value and the index in a second file, the kernel's work on the
//! files was most of a 100M-token restart's time.

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
/// how many. A group's list would otherwise sit in the queue of the stage
/// that reads it, for every group of the archive at a round's end. A group
/// of one is its value's key: most pairs, and most names of an archive of
/// short documents, have one mention, and a list of one was a spilled value
/// (a slot in the spill's index) apiece.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct SpilledGroup {
    keys: SpillKey,
    pub len: usize,
}

impl SpilledGroup {
    /// Spills the list `keys` (a group of one, as its key).
    pub fn put(spill: &Spill, keys: &[SpillKey]) -> SpilledGroup {
        let keys_key = match keys {
            [only] => *only,
            _ => spill.put(&keys),
        };
        SpilledGroup {
            keys: keys_key,
            len: keys.len(),
        }
    }

    /// The keys of the group's values, in the order they were put.
    pub fn keys(&self, spill: &Spill) -> Vec<SpillKey> {
        match self.len {
            1 => vec![self.keys],
            _ => spill.get(self.keys),
        }
    }
}

/// An append-only file of values by content hash (see the module doc).
#[derive(Debug)]
pub struct Spill {
    values: File,
    places: Mutex<Places>,
}

/// Where each key's value is in the values file: an open-addressing hash
/// table (linear probing) of a word a slot, [`Slot`], and its value's length.
/// A table of 32-byte slots in a second file held nothing in the heap, but
/// each insert was a small write at a random place of a large file, and the
/// kernel's work on those (a 100M-token restart spills about 4M values a
/// worker) was most of the restart; 12 bytes a slot in the heap is 16 to 32
/// bytes a value.
#[derive(Debug)]
struct Places {
    /// A power of two of them; at most [`MAX_LOAD`] of them are used.
    slots: Vec<Slot>,
    /// Per slot, the length of its value, so that a value is read with its
    /// header in one read.
    lens: Vec<u32>,
    used: usize,
    /// The length of the values file, with the records appended but not yet
    /// written.
    end: u64,
    /// The records appended since the last write: the file's bytes from
    /// `end - appended.len()`.
    appended: Vec<u8>,
}

/// A record in the values file: its key, its value's length, the value, and
/// padding to a multiple of [`RECORD_ALIGN`] bytes.
const HEADER_BYTES: usize = KEY_BYTES + 4;
const KEY_BYTES: usize = 16;
const RECORD_ALIGN: u64 = 8;

/// A slot: the low [`KEY_BITS`] bits of its key (where it probes from, and a
/// first check of a match) above its record's offset in [`RECORD_ALIGN`]s
/// plus one (0: empty). 36 bits of offset address 512 GiB of values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Slot(u64);

const KEY_BITS: u32 = 28;
const OFFSET_BITS: u32 = 64 - KEY_BITS;

impl Slot {
    const EMPTY: Slot = Slot(0);

    fn new(key: SpillKey, offset: u64) -> Slot {
        let units = offset / RECORD_ALIGN + 1;
        assert!(units < 1 << OFFSET_BITS, "the spill file is over 512 GiB");
        Slot((low_bits(key) << OFFSET_BITS) | units)
    }

    fn low_bits(self) -> u64 {
        self.0 >> OFFSET_BITS
    }

    fn offset(self) -> u64 {
        ((self.0 & ((1 << OFFSET_BITS) - 1)) - 1) * RECORD_ALIGN
    }
}

fn low_bits(key: SpillKey) -> u64 {
    (key as u64) & ((1 << KEY_BITS) - 1)
}

/// Slots of a new table (768 KiB).
const INITIAL_SLOTS: usize = 1 << 16;

/// The share of slots in use past which the table doubles, as (numerator,
/// denominator). At three quarters a probe for a key not there reads about
/// eight consecutive slots (two cache lines); at half, the index was a sixth
/// of the indexer's heap at the peak of 100,000 short documents (51 of 327 MB
/// sampled), most of it empty slots.
const MAX_LOAD: (usize, usize) = (3, 4);

/// Bytes of records appended in memory before they are written to the file
/// in one write.
const APPEND_BUFFER: usize = 1 << 20;

impl Spill {
    /// An empty spill in a file under the system's temporary directory
    /// (`TMPDIR`), gone when the process ends.
    pub fn new() -> std::io::Result<Spill> {
        Spill::with_slots(INITIAL_SLOTS)
    }

    fn with_slots(capacity: usize) -> std::io::Result<Spill> {
        Ok(Spill {
            values: tempfile::tempfile()?,
            places: Mutex::new(Places {
                slots: vec![Slot::EMPTY; capacity],
                lens: vec![0; capacity],
                used: 0,
                end: 0,
                appended: Vec::new(),
            }),
        })
    }

    /// Writes `value` (once: an equal value already written is not written
    /// again) and returns its key.
    pub fn put<T: Serialize>(&self, value: &T) -> SpillKey {
        let bytes = bincode::serialize(value).expect("spilled values serialize");
        let key = hash128(&bytes);
        let mut places = self.places();
        if let Some(slot) = places.vacancy(&self.values, key) {
            places.append(&self.values, slot, key, &bytes);
        }
        key
    }

    /// The value written under `key`: its record read whole, in one read
    /// of the file (a restart reads millions; reading the key first, then
    /// the value, was half the kernel's work on them).
    pub fn get<T: DeserializeOwned>(&self, key: SpillKey) -> T {
        let places = self.places();
        let mut written = Vec::new();
        for (offset, len) in places.matching(key) {
            match places.buffered(offset, len) {
                Some(record) => {
                    if let Some(value) = value_of(&record, key) {
                        return decode(value);
                    }
                }
                None => written.push((offset, len)),
            }
        }
        // A written record is read without the lock: other stages' futures
        // on this worker read their groups at the same time.
        drop(places);
        for (offset, len) in written {
            let record = read_file(&self.values, offset, len);
            if let Some(value) = value_of(&record, key) {
                return decode(value);
            }
        }
        panic!("every spill key read was written by this worker")
    }

    fn places(&self) -> std::sync::MutexGuard<'_, Places> {
        self.places
            .lock()
            .expect("the spill's index is never poisoned")
    }
}

impl Places {
    fn mask(&self) -> u64 {
        self.slots.len() as u64 - 1
    }

    /// The empty slot `key` would go to, or `None` where it is written.
    fn vacancy(&self, values: &File, key: SpillKey) -> Option<usize> {
        let mut at = low_bits(key) & self.mask();
        loop {
            let slot = self.slots[at as usize];
            if slot == Slot::EMPTY {
                return Some(at as usize);
            }
            if slot.low_bits() == low_bits(key) {
                let header = (self.buffered(slot.offset(), KEY_BYTES))
                    .unwrap_or_else(|| read_file(values, slot.offset(), KEY_BYTES));
                if key_of(&header) == key {
                    return None;
                }
            }
            at = (at + 1) & self.mask();
        }
    }

    /// Where each record whose slot has `key`'s low bits is, and its length
    /// (header and value), in probe order: nearly always one, `key`'s own.
    fn matching(&self, key: SpillKey) -> impl Iterator<Item = (u64, usize)> + '_ {
        let start = low_bits(key) & self.mask();
        let probed = std::iter::successors(Some(start), |at| Some((at + 1) & self.mask()));
        // A length is read only for a slot that matches: each read of the
        // table is likely a cache miss.
        probed
            .map(|at| (at as usize, self.slots[at as usize]))
            .take_while(|(_, slot)| *slot != Slot::EMPTY)
            .filter(move |(_, slot)| slot.low_bits() == low_bits(key))
            .map(|(at, slot)| (slot.offset(), HEADER_BYTES + self.lens[at] as usize))
    }

    /// Appends `key`'s record to the values and fills the empty `slot` (from
    /// [`Places::vacancy`]), doubling the table first when it would be more
    /// than [`MAX_LOAD`] full.
    fn append(&mut self, values: &File, slot: usize, key: SpillKey, bytes: &[u8]) {
        let offset = self.end;
        let len = u32::try_from(bytes.len()).expect("a spilled value is under 4 GiB");
        self.appended.extend_from_slice(&key.to_le_bytes());
        self.appended.extend_from_slice(&len.to_le_bytes());
        self.appended.extend_from_slice(bytes);
        let padded = (HEADER_BYTES + bytes.len()).next_multiple_of(RECORD_ALIGN as usize);
        self.appended
            .resize(self.appended.len() + padded - HEADER_BYTES - bytes.len(), 0);
        self.end += padded as u64;
        if self.appended.len() >= APPEND_BUFFER {
            let at = self.end - self.appended.len() as u64;
            values
                .write_all_at(&self.appended, at)
                .unwrap_or_else(|error| panic!("writing the spill file (TMPDIR): {error}"));
            self.appended.clear();
        }
        let (numerator, denominator) = MAX_LOAD;
        let slot = if (self.used + 1) * denominator > self.slots.len() * numerator {
            self.grow();
            self.empty_slot(low_bits(key))
        } else {
            slot
        };
        (self.slots[slot], self.lens[slot]) = (Slot::new(key, offset), len);
        self.used += 1;
    }

    /// Moves every slot to a table of twice as many: a slot's low key bits
    /// say where it probes from.
    fn grow(&mut self) {
        assert!(
            self.slots.len() * 2 <= 1 << KEY_BITS,
            "the spill holds over 3 * 2^26 values"
        );
        let size = self.slots.len() * 2;
        let slots = std::mem::replace(&mut self.slots, vec![Slot::EMPTY; size]);
        let lens = std::mem::replace(&mut self.lens, vec![0; size]);
        for (slot, len) in slots.into_iter().zip(lens) {
            if slot != Slot::EMPTY {
                let at = self.empty_slot(slot.low_bits());
                (self.slots[at], self.lens[at]) = (slot, len);
            }
        }
    }

    /// The empty slot a key with these low bits, not in the table, goes to.
    fn empty_slot(&self, low_bits: u64) -> usize {
        let mut at = low_bits & self.mask();
        while self.slots[at as usize] != Slot::EMPTY {
            at = (at + 1) & self.mask();
        }
        at as usize
    }

    /// `len` bytes of the values file from `offset`, if they are still in
    /// the append buffer.
    fn buffered(&self, offset: u64, len: usize) -> Option<Vec<u8>> {
        let written = self.end - self.appended.len() as u64;
        let at = usize::try_from(offset.checked_sub(written)?).ok()?;
        Some(self.appended[at..at + len].to_vec())
    }
}

/// The key a record (or its header) starts with.
fn key_of(record: &[u8]) -> SpillKey {
    u128::from_le_bytes(record[..KEY_BYTES].try_into().expect("16 bytes"))
}

/// The value a record holds, if it is `key`'s.
fn value_of(record: &[u8], key: SpillKey) -> Option<&[u8]> {
    (key_of(record) == key).then(|| &record[HEADER_BYTES..])
}

fn decode<T: DeserializeOwned>(value: &[u8]) -> T {
    bincode::deserialize(value).expect("a spilled value reads back as written")
}

/// `len` bytes of the values file from `offset`, written there.
fn read_file(values: &File, offset: u64, len: usize) -> Vec<u8> {
    let mut bytes = vec![0; len];
    values
        .read_exact_at(&mut bytes, offset)
        .unwrap_or_else(|error| panic!("reading the spill file (TMPDIR): {error}"));
    bytes
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
        let record = |value: &(&str, Vec<i32>)| {
            let len = HEADER_BYTES + bincode::serialize(value).unwrap().len();
            len.next_multiple_of(RECORD_ALIGN as usize)
        };
        assert_eq!(
            spill.places().end as usize,
            record(&("alpha", vec![1, 2, 3])) + record(&("beta", vec![4]))
        );
    }

    /// Values read back whether still in the append buffer or written, and
    /// across the buffer's edge; the file holds exactly what was written.
    #[test]
    fn values_read_back_from_the_buffer_and_the_file() {
        let spill = Spill::new().unwrap();
        let values: Vec<String> = (0..300).map(|i| format!("{i:>9}").repeat(1000)).collect();
        let keys: Vec<SpillKey> = values.iter().map(|v| spill.put(v)).collect();
        let (end, buffered) = {
            let places = spill.places();
            (places.end, places.appended.len() as u64)
        };
        assert!(buffered > 0, "the last values wait in the buffer");
        let on_file = spill.values.metadata().unwrap().len();
        assert!(on_file >= APPEND_BUFFER as u64, "full buffers were written");
        assert_eq!(on_file + buffered, end);
        for (value, key) in values.iter().zip(keys) {
            assert_eq!(&spill.get::<String>(key), value);
        }
    }

    /// Full 128-bit keys survive the list's encoding, in order; the same list is
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

    /// A group of one is its value's key: nothing is written for it, and it
    /// reads back as that key.
    #[test]
    fn a_group_of_one_is_its_key() {
        let spill = Spill::new().unwrap();
        let key = spill.put(&"a mention");
        let written = spill.places().used;
        let group = SpilledGroup::put(&spill, &[key]);
        assert_eq!(spill.places().used, written);
        assert_eq!((group.len, group.keys(&spill)), (1, vec![key]));
        assert_ne!(SpilledGroup::put(&spill, &[key + 1]), group);
    }

    /// A table of 4 slots takes 300 values: every insert past three quarters
    /// full doubles it (300 fit 512 slots, not 256), keys that share low bits
    /// probe past each other, and every value still reads back under its key.
    #[test]
    fn the_index_grows_and_finds_every_key_it_moved() {
        let spill = Spill::with_slots(4).unwrap();
        let keys: Vec<SpillKey> = (0..300).map(|i| spill.put(&format!("value {i}"))).collect();
        let (capacity, used) = {
            let places = spill.places();
            (places.slots.len(), places.used)
        };
        assert_eq!(used, 300);
        assert_eq!(capacity, 512);
        let length = spill.places().end;
        for (i, &key) in keys.iter().enumerate() {
            assert_eq!(spill.get::<String>(key), format!("value {i}"));
            assert_eq!(spill.put(&format!("value {i}")), key);
        }
        assert_eq!(spill.places().end, length);
        assert_eq!(spill.places().used, 300);
    }

    /// Keys whose low bits (all a slot keeps of them) are equal are told
    /// apart by the keys their records hold: among 100,000 values some pairs
    /// share them, and each still reads back as itself.
    #[test]
    fn keys_that_share_a_slots_bits_read_back_apart() {
        let spill = Spill::new().unwrap();
        let values: Vec<String> = (0..100_000).map(|i| format!("mention {i}")).collect();
        let keys: Vec<SpillKey> = values.iter().map(|v| spill.put(v)).collect();
        let mut seen = std::collections::HashSet::new();
        let shared = keys.iter().filter(|k| !seen.insert(low_bits(**k))).count();
        assert!(shared > 0, "some keys share their low bits");
        for (value, key) in values.iter().zip(keys) {
            assert_eq!(&spill.get::<String>(key), value);
            assert_eq!(spill.put(value), key);
        }
        assert_eq!(spill.places().used, 100_000);
    }
}
