//! What the last scan saw in each folder (`scanned_dirs`), so that a
//! re-scan lists only the folders that changed since.
//!
//! A folder's entries are one blob: for each entry a kind byte, for files
//! their stamps (size, mtime, ctime as little-endian 64-bit integers), then
//! the name and a NUL. Loading 4,000 folders this way costs a fraction of
//! loading 20,000 track rows.

use std::ffi::CStr;

use crate::model::Stamps;

/// A folder's identity and change times, from `statx`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirStamp {
    pub device: u64,
    pub inode: u64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
}

/// What an entry of a folder was to the last scan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    /// A folder (walked in turn).
    Dir,
    /// A file with a row in `tracks` that has these stamps.
    Track,
    /// A file with a row in `scan_failures` that has these stamps.
    Failure,
    /// A file probed and found not to be audio.
    NotAudio,
}

impl EntryKind {
    fn code(self) -> u8 {
        match self {
            EntryKind::Dir => 0,
            EntryKind::Track => 1,
            EntryKind::Failure => 2,
            EntryKind::NotAudio => 3,
        }
    }

    fn from_code(code: u8) -> Option<EntryKind> {
        Some(match code {
            0 => EntryKind::Dir,
            1 => EntryKind::Track,
            2 => EntryKind::Failure,
            3 => EntryKind::NotAudio,
            _ => return None,
        })
    }
}

/// One entry of a scanned folder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirEntry<'a> {
    pub name: &'a CStr,
    pub kind: EntryKind,
    /// The file's stamps when it was scanned (zero for a folder).
    pub stamps: Stamps,
}

/// A folder as the last scan left it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScannedDir {
    pub stamp: DirStamp,
    /// Files skipped by their name (not audio).
    pub skipped_by_name: u64,
    pub(crate) entries: Vec<u8>,
}

const STAMPS_LEN: usize = 24;

impl ScannedDir {
    pub fn new<'a>(
        stamp: DirStamp,
        skipped_by_name: u64,
        entries: impl IntoIterator<Item = DirEntry<'a>>,
    ) -> ScannedDir {
        let mut blob = Vec::new();
        for e in entries {
            blob.push(e.kind.code());
            if e.kind != EntryKind::Dir {
                blob.extend_from_slice(&e.stamps.size.to_le_bytes());
                blob.extend_from_slice(&e.stamps.mtime_ns.to_le_bytes());
                blob.extend_from_slice(&e.stamps.ctime_ns.to_le_bytes());
            }
            blob.extend_from_slice(e.name.to_bytes_with_nul());
        }
        ScannedDir {
            stamp,
            skipped_by_name,
            entries: blob,
        }
    }

    /// The entries, or None when the blob is not a valid encoding (a row
    /// written by something else: the folder is then listed again).
    pub fn entries(&self) -> Option<Vec<DirEntry<'_>>> {
        let mut out = Vec::new();
        let mut rest = self.entries.as_slice();
        while let Some((&code, after)) = rest.split_first() {
            let kind = EntryKind::from_code(code)?;
            let mut stamps = Stamps {
                size: 0,
                mtime_ns: 0,
                ctime_ns: 0,
            };
            rest = after;
            if kind != EntryKind::Dir {
                let (raw, after) = rest.split_at_checked(STAMPS_LEN)?;
                let word = |i: usize| <[u8; 8]>::try_from(&raw[i * 8..i * 8 + 8]).expect("8 bytes");
                stamps = Stamps {
                    size: u64::from_le_bytes(word(0)),
                    mtime_ns: i64::from_le_bytes(word(1)),
                    ctime_ns: i64::from_le_bytes(word(2)),
                };
                rest = after;
            }
            let name = CStr::from_bytes_until_nul(rest).ok()?;
            let bytes = name.to_bytes();
            if bytes.is_empty() || bytes.contains(&b'/') || bytes == b"." || bytes == b".." {
                return None;
            }
            rest = &rest[bytes.len() + 1..];
            out.push(DirEntry { name, kind, stamps });
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamp() -> DirStamp {
        DirStamp {
            device: u64::MAX,
            inode: 7,
            mtime_ns: -1,
            ctime_ns: 1_700_000_000_000_000_000,
        }
    }

    #[test]
    fn entries_read_back_as_written() {
        let file = |n, k, s: u64| DirEntry {
            name: n,
            kind: k,
            stamps: Stamps {
                size: s,
                mtime_ns: s as i64 * 3,
                ctime_ns: -(s as i64),
            },
        };
        let entries = vec![
            DirEntry {
                name: c"Album",
                kind: EntryKind::Dir,
                stamps: Stamps {
                    size: 0,
                    mtime_ns: 0,
                    ctime_ns: 0,
                },
            },
            file(c"01 caf\xc3\xa9.flac", EntryKind::Track, 1 << 40),
            file(c"broken.mp3", EntryKind::Failure, 0),
            file(c"x.bin", EntryKind::NotAudio, 12),
        ];
        let dir = ScannedDir::new(stamp(), 3, entries.clone());
        assert_eq!(dir.entries().unwrap(), entries);
        assert_eq!(ScannedDir::new(stamp(), 0, []).entries().unwrap(), []);
    }

    #[test]
    fn a_damaged_blob_is_refused_not_misread() {
        let dir = ScannedDir::new(
            stamp(),
            0,
            [DirEntry {
                name: c"a.flac",
                kind: EntryKind::Track,
                stamps: Stamps {
                    size: 1,
                    mtime_ns: 2,
                    ctime_ns: 3,
                },
            }],
        );
        let good = dir.entries.clone();
        // Every truncation, and every byte flipped to a kind, NUL or slash.
        for cut in 0..good.len() {
            let d = ScannedDir {
                entries: good[..cut].to_vec(),
                ..dir.clone()
            };
            assert!(d.entries().is_none() || cut == 0, "cut {cut}");
        }
        for bad in [
            vec![9u8],
            vec![0, 0],
            vec![0, b'/', 0],
            vec![0, b'.', 0],
            vec![0, b'a'],
        ] {
            let d = ScannedDir {
                entries: bad.clone(),
                ..dir.clone()
            };
            assert!(d.entries().is_none(), "{bad:?}");
        }
    }
}
