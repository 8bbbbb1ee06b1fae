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

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::Mutex;

use memweave_schemas::hash128;
use serde::Serialize;
use serde::de::DeserializeOwned;

/// Where a spilled value is: the first 16 bytes of its encoding's BLAKE3 hash.
pub type SpillKey = u128;

/// An append-only file of values by content hash (see the module doc).
#[derive(Debug)]
pub struct Spill {
    file: File,
    index: Mutex<Places>,
}

/// Where each key's value is in the file (offset, length), and the file's
/// length.
#[derive(Debug, Default)]
struct Places {
    by_key: HashMap<SpillKey, (u64, u32)>,
    end: u64,
}

impl Spill {
    /// An empty spill in a file under the system's temporary directory
    /// (`TMPDIR`), gone when the process ends.
    pub fn new() -> std::io::Result<Spill> {
        Ok(Spill {
            file: tempfile::tempfile()?,
            index: Mutex::new(Places::default()),
        })
    }

    /// Writes `value` (once: an equal value already written is not written
    /// again) and returns its key.
    pub fn put<T: Serialize>(&self, value: &T) -> SpillKey {
        let bytes = serde_json::to_vec(value).expect("spilled values serialize");
        let key = hash128(&bytes);
        let mut places = self
            .index
            .lock()
            .expect("the spill's index is never poisoned");
        let Places { by_key, end } = &mut *places;
        by_key.entry(key).or_insert_with(|| {
            self.file
                .write_all_at(&bytes, *end)
                .unwrap_or_else(|error| panic!("writing the spill file (TMPDIR): {error}"));
            let len = u32::try_from(bytes.len()).expect("a spilled value is under 4 GiB");
            let at = *end;
            *end += u64::from(len);
            (at, len)
        });
        key
    }

    /// The value written under `key`.
    pub fn get<T: DeserializeOwned>(&self, key: SpillKey) -> T {
        let (offset, len) = *self
            .index
            .lock()
            .expect("the spill's index is never poisoned")
            .by_key
            .get(&key)
            .expect("every spill key read was written by this worker");
        let mut bytes = vec![0; len as usize];
        self.file
            .read_exact_at(&mut bytes, offset)
            .unwrap_or_else(|error| panic!("reading the spill file (TMPDIR): {error}"));
        serde_json::from_slice(&bytes).expect("a spilled value reads back as written")
    }
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
        let written = spill.file.metadata().unwrap().len();
        assert_eq!(written, spill.index.lock().unwrap().end);
        assert_eq!(
            written as usize,
            serde_json::to_vec(&("alpha", [1, 2, 3])).unwrap().len()
                + serde_json::to_vec(&("beta", [4])).unwrap().len()
        );
    }
}
