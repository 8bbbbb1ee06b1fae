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
//! through a buffer of [`APPEND_BUFFER`] bytes; where each is, is found through
//! [`places`], whose older part is in files too. A new process's restore spills
//! every mention of the archive at once, and with JSON, one write per value and
//! the index in a second file, the kernel's work on the files was most of a
//! 100M-token restart's time.

mod places;

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::Mutex;

use memweave_schemas::hash128;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use places::{Place, Places, find_in};

/// Where a spilled value is: the first 16 bytes of its encoding's BLAKE3 hash.
pub type SpillKey = u128;

/// A group of spilled values (a name's mentions, a pair's relations, a
/// corpus's roots) as a reduce hands it on: the key of its list of keys, and
/// how many. A group's list would otherwise sit in the queue of the stage
/// that reads it, for every group of the archive at a round's end. A group
/// of one is its value's key: most pairs, and most names of an archive of
/// short documents, have one mention, and a list of one was a spilled value
/// (a place in the spill's index) apiece.
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
    index: Mutex<Index>,
}

/// What the spill knows of its values file: where each value is, and the
/// records appended but not yet written.
#[derive(Debug, Default)]
struct Index {
    places: Places,
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

/// Bytes of records appended in memory before they are written to the file
/// in one write.
const APPEND_BUFFER: usize = 1 << 20;

impl Spill {
    /// An empty spill in a file under the system's temporary directory
    /// (`TMPDIR`), gone when the process ends.
    pub fn new() -> std::io::Result<Spill> {
        Ok(Spill {
            values: tempfile::tempfile()?,
            index: Mutex::default(),
        })
    }

    /// Writes `value` (once: an equal value already written is not written
    /// again) and returns its key.
    pub fn put<T: Serialize>(&self, value: &T) -> SpillKey {
        let bytes = bincode::serialize(value).expect("spilled values serialize");
        let key = hash128(&bytes);
        let mut index = self.index();
        if index.places.find(key).is_none() {
            index.append(&self.values, key, &bytes);
        }
        key
    }

    /// The value written under `key`: its record read whole, in one read
    /// of the file (a restart reads millions; reading the key first, then
    /// the value, was half the kernel's work on them).
    pub fn get<T: DeserializeOwned>(&self, key: SpillKey) -> T {
        // The runs, and a written record, are read without the lock: other
        // stages' futures on this worker read their groups at the same time.
        let found = self.index().places.recent_or_runs(key);
        let place = found
            .or_else(|runs| find_in(&runs, key).ok_or(()))
            .expect("every spill key read was written by this worker");
        let buffered = self.index().buffered(place);
        let record = buffered.unwrap_or_else(|| read_file(&self.values, place));
        let value = value_of(&record, key).expect("a spill record holds its own key");
        bincode::deserialize(value).expect("a spilled value reads back as written")
    }

    fn index(&self) -> std::sync::MutexGuard<'_, Index> {
        self.index
            .lock()
            .expect("the spill's index is never poisoned")
    }
}

impl Index {
    /// Appends `key`'s record to the values and notes its place.
    fn append(&mut self, values: &File, key: SpillKey, bytes: &[u8]) {
        let offset = self.end;
        let value_len = u32::try_from(bytes.len()).expect("a spilled value is under 4 GiB");
        self.appended.extend_from_slice(&key.to_le_bytes());
        self.appended.extend_from_slice(&value_len.to_le_bytes());
        self.appended.extend_from_slice(bytes);
        let len = HEADER_BYTES + bytes.len();
        let padded = len.next_multiple_of(RECORD_ALIGN as usize);
        self.appended.resize(self.appended.len() + padded - len, 0);
        self.end += padded as u64;
        if self.appended.len() >= APPEND_BUFFER {
            let at = self.end - self.appended.len() as u64;
            values
                .write_all_at(&self.appended, at)
                .unwrap_or_else(|error| panic!("writing the spill file (TMPDIR): {error}"));
            self.appended.clear();
        }
        let len = u32::try_from(len).expect("a spilled record is under 4 GiB");
        self.places.insert(key, Place { offset, len });
    }

    /// The record at `place`, if it is still in the append buffer.
    fn buffered(&self, place: Place) -> Option<Vec<u8>> {
        let written = self.end - self.appended.len() as u64;
        let at = usize::try_from(place.offset.checked_sub(written)?).ok()?;
        Some(self.appended[at..at + place.len as usize].to_vec())
    }
}

/// The value a record holds, if it is `key`'s.
fn value_of(record: &[u8], key: SpillKey) -> Option<&[u8]> {
    let held = u128::from_le_bytes(record[..KEY_BYTES].try_into().expect("16 bytes"));
    (held == key).then(|| &record[HEADER_BYTES..])
}

/// The record at `place`, written to the values file.
fn read_file(values: &File, place: Place) -> Vec<u8> {
    let mut bytes = vec![0; place.len as usize];
    values
        .read_exact_at(&mut bytes, place.offset)
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
            spill.index().end as usize,
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
            let index = spill.index();
            (index.end, index.appended.len() as u64)
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
        let written = spill.index().places.len();
        let group = SpilledGroup::put(&spill, &[key]);
        assert_eq!(spill.index().places.len(), written);
        assert_eq!((group.len, group.keys(&spill)), (1, vec![key]));
        assert_ne!(SpilledGroup::put(&spill, &[key + 1]), group);
    }

    /// Past the index's recent places (see `places`), values read back
    /// whether their places are in the heap or in runs; values put again are
    /// found, not written again.
    #[test]
    fn values_read_back_through_every_part_of_the_index() {
        let spill = Spill::new().unwrap();
        let values: Vec<String> = (0..200_000).map(|i| format!("mention {i}")).collect();
        let keys: Vec<SpillKey> = values.iter().map(|v| spill.put(v)).collect();
        let length = spill.index().end;
        for (value, key) in values.iter().zip(keys) {
            assert_eq!(&spill.get::<String>(key), value);
            assert_eq!(spill.put(value), key);
        }
        assert_eq!(spill.index().end, length);
        assert_eq!(spill.index().places.len(), 200_000);
    }
}
