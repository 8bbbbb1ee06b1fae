//! The zip containers DOCX and EPUB are: members read with a cap on what
//! they inflate to, so a small file cannot make the reader take gigabytes.

use std::io::{Cursor, Read};

use zip::ZipArchive;

use crate::kind;

/// Why a container's member could not be read: an `errors` kind and reason.
pub(crate) type Failure = (&'static str, String);

pub(crate) struct Zipped<'a> {
    archive: ZipArchive<Cursor<&'a [u8]>>,
    /// Bytes members may still inflate to.
    budget: u64,
    limit: u64,
}

impl<'a> Zipped<'a> {
    pub(crate) fn open(bytes: &'a [u8], limit: u64) -> Result<Self, Failure> {
        let archive = ZipArchive::new(Cursor::new(bytes))
            .map_err(|e| (kind::CORRUPT, format!("not a readable zip container: {e}")))?;
        Ok(Zipped {
            archive,
            budget: limit,
            limit,
        })
    }

    /// The member `name` as text (`None`: there is none).
    pub(crate) fn text(&mut self, name: &str) -> Result<Option<String>, Failure> {
        let mut member = match self.archive.by_name(name) {
            Ok(member) => member,
            Err(zip::result::ZipError::FileNotFound) => return Ok(None),
            Err(e) => return Err((kind::CORRUPT, format!("{name}: {e}"))),
        };
        let too_large = || {
            (
                kind::TOO_LARGE,
                format!(
                    "inflates past {} MiB (the limit); not read",
                    self.limit >> 20
                ),
            )
        };
        if member.size() > self.budget {
            return Err(too_large());
        }
        let mut bytes = Vec::new();
        (&mut member)
            .take(self.budget + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| (kind::CORRUPT, format!("{name}: {e}")))?;
        if bytes.len() as u64 > self.budget {
            return Err(too_large());
        }
        self.budget -= bytes.len() as u64;
        String::from_utf8(bytes)
            .map(Some)
            .map_err(|_| (kind::CORRUPT, format!("{name} is not UTF-8")))
    }
}
