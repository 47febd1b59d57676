//! What the last scan saw in each folder (`scanned_dirs`), so that a
//! re-scan lists only the folders that changed since.
//!
//! A folder's entries are one blob: for each entry a kind byte, for files
//! their stamps (size, mtime, ctime as little-endian 64-bit integers), then
//! the name and a NUL. Loading 4,000 folders this way costs a fraction of
//! loading 20,000 track rows.

use std::borrow::Cow;
use std::ffi::CStr;

use crate::model::Stamps;
use crate::path_table::PathTable;

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

/// A folder as a scan left it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScannedDir<'a> {
    pub stamp: DirStamp,
    /// When the scan that saw it started (ns since the Unix epoch).
    pub scanned_ns: i64,
    /// Files skipped by their name (not audio).
    pub skipped_by_name: u64,
    pub(crate) entries: Cow<'a, [u8]>,
}

/// The record of every scanned folder, found by path: one buffer of
/// paths and one of entries rather than two allocations per folder.
pub struct ScannedDirs {
    /// Each folder's stamp, scan time, skipped count and where its
    /// entries end in `entries` (they start where the previous folder's end).
    table: PathTable<(DirStamp, i64, u64, usize)>,
    entries: Vec<u8>,
}

impl Default for ScannedDirs {
    fn default() -> ScannedDirs {
        ScannedDirs {
            table: PathTable::with_capacity(0, 0),
            entries: Vec::new(),
        }
    }
}

impl ScannedDirs {
    pub(crate) fn push(&mut self, path: &str, dir: &ScannedDir<'_>) {
        self.entries.extend_from_slice(&dir.entries);
        let row = (dir.stamp, dir.scanned_ns, dir.skipped_by_name, self.entries.len());
        self.table.push(path, row);
    }

    /// The folder at `path`, as the last scan left it.
    pub fn get(&self, path: &str) -> Option<ScannedDir<'_>> {
        let row = self.table.find(path)?;
        let &(stamp, scanned_ns, skipped_by_name, end) = self.table.value(row);
        let start = row
            .checked_sub(1)
            .map_or(0, |previous| self.table.value(previous).3);
        Some(ScannedDir {
            stamp,
            scanned_ns,
            skipped_by_name,
            entries: Cow::Borrowed(&self.entries[start..end]),
        })
    }

    pub fn len(&self) -> usize {
        self.table.len()
    }

    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    /// Every recorded folder's path.
    pub fn paths(&self) -> impl Iterator<Item = &str> {
        (0..self.table.len()).map(|row| self.table.path(row))
    }
}

const STAMPS_LEN: usize = 24;

impl ScannedDir<'_> {
    pub fn new<'e>(
        stamp: DirStamp,
        scanned_ns: i64,
        skipped_by_name: u64,
        entries: impl IntoIterator<Item = DirEntry<'e>>,
    ) -> ScannedDir<'static> {
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
            scanned_ns,
            skipped_by_name,
            entries: Cow::Owned(blob),
        }
    }

    /// Whether the folder's times can be trusted to show any later change:
    /// its ctime is older than the scan that saw it by more than a tick of
    /// the clock that stamps it (a change within the tick the scan saw
    /// would leave the ctime as it was). The kernel's coarse clock ticks
    /// every 1-10 ms; a ctime of a whole second comes from a file system
    /// that keeps whole seconds (ext4 with small inodes), or by chance.
    pub fn settled(&self) -> bool {
        const NS: i64 = 1_000_000_000;
        let ctime = self.stamp.ctime_ns;
        let tick = if ctime % NS == 0 { NS } else { NS / 10 };
        ctime < self.scanned_ns.saturating_sub(tick)
    }

    /// The entries, or None when the blob is not a valid encoding (a row
    /// written by something else: the folder is then listed again).
    pub fn entries(&self) -> Option<Vec<DirEntry<'_>>> {
        self.entry_iter().collect::<Result<_, _>>().ok()
    }

    /// The entries one at a time, without collecting them; an error
    /// where the blob stops being a valid encoding, and nothing after it.
    pub fn entry_iter(&self) -> Entries<'_> {
        Entries { rest: &self.entries }
    }

    /// Whether the folder held files (or its record cannot be read, so
    /// it may): a folder of folders alone need not be opened.
    pub fn holds_files(&self) -> bool {
        self.entry_iter()
            .any(|e| e.map_or(true, |e| e.kind != EntryKind::Dir))
    }
}

/// A folder's record that is not a valid encoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InvalidRecord;

/// [`ScannedDir::entry_iter`].
pub struct Entries<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for Entries<'a> {
    type Item = Result<DirEntry<'a>, InvalidRecord>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let entry = self.decode();
        if entry.is_err() {
            self.rest = &[];
        }
        Some(entry)
    }
}

impl<'a> Entries<'a> {
    fn decode(&mut self) -> Result<DirEntry<'a>, InvalidRecord> {
        let (&code, after) = self.rest.split_first().ok_or(InvalidRecord)?;
        let kind = EntryKind::from_code(code).ok_or(InvalidRecord)?;
        let mut stamps = Stamps {
            size: 0,
            mtime_ns: 0,
            ctime_ns: 0,
        };
        let mut rest = after;
        if kind != EntryKind::Dir {
            let (raw, after) = rest.split_at_checked(STAMPS_LEN).ok_or(InvalidRecord)?;
            let word = |i: usize| <[u8; 8]>::try_from(&raw[i * 8..i * 8 + 8]).expect("8 bytes");
            stamps = Stamps {
                size: u64::from_le_bytes(word(0)),
                mtime_ns: i64::from_le_bytes(word(1)),
                ctime_ns: i64::from_le_bytes(word(2)),
            };
            rest = after;
        }
        let name = CStr::from_bytes_until_nul(rest).map_err(|_| InvalidRecord)?;
        let bytes = name.to_bytes();
        if bytes.is_empty() || bytes.contains(&b'/') || bytes == b"." || bytes == b".." {
            return Err(InvalidRecord);
        }
        self.rest = &rest[bytes.len() + 1..];
        Ok(DirEntry { name, kind, stamps })
    }
}

impl<'a> ScannedDir<'a> {
    /// The same entries, as a folder with another stamp seen by another scan.
    pub fn seen_again(self, stamp: DirStamp, scanned_ns: i64) -> ScannedDir<'a> {
        ScannedDir {
            stamp,
            scanned_ns,
            ..self
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Any bytes decode without panicking, and what decodes encodes
        /// back to the same bytes.
        #[test]
        fn any_blob_decodes_to_what_it_encodes(blob in proptest::collection::vec(any::<u8>(), 0..200)) {
            let dir = ScannedDir {
                entries: Cow::Borrowed(&blob),
                ..ScannedDir::new(stamp(), 0, 0, [])
            };
            if let Some(entries) = dir.entries() {
                let again = ScannedDir::new(stamp(), 0, 0, entries);
                prop_assert_eq!(&again.entries[..], &blob[..]);
            }
        }
    }

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
        let dir = ScannedDir::new(stamp(), 5, 3, entries.clone());
        assert_eq!(dir.entries().unwrap(), entries);
        let mut all = ScannedDirs::default();
        all.push("/a", &ScannedDir::new(stamp(), 1, 0, []));
        all.push("/a/b", &dir);
        let c = ScannedDir {
            entries: Cow::Borrowed(&[0, b'x', 0]),
            ..ScannedDir::new(stamp(), 2, 1, [])
        };
        all.push("/a/c", &c);
        assert_eq!(all.get("/a/b"), Some(dir.clone()));
        assert_eq!(all.get("/a/c"), Some(c));
        assert_eq!(all.get("/a").unwrap().entries().unwrap(), []);
        assert_eq!(all.get("/a/c").unwrap().entries().unwrap()[0].name, c"x");
        assert_eq!(all.get("/a/d"), None);
        assert_eq!(all.paths().collect::<Vec<_>>(), ["/a", "/a/b", "/a/c"]);
        assert_eq!(ScannedDir::new(stamp(), 0, 0, []).entries().unwrap(), []);
    }

    #[test]
    fn folders_changed_within_a_tick_of_their_scan_are_not_settled() {
        let at = |ctime_ns, scanned_ns| {
            let stamp = DirStamp { ctime_ns, ..stamp() };
            ScannedDir::new(stamp, scanned_ns, 0, []).settled()
        };
        let start = 1_700_000_000_123_456_789;
        assert!(at(start - 200_000_000, start));
        assert!(!at(start - 50_000_000, start));
        assert!(!at(start + 1, start));
        // Whole seconds: the file system may keep nothing finer.
        let whole = 1_700_000_000_000_000_000;
        assert!(!at(whole, whole + 500_000_000));
        assert!(at(whole, whole + 1_500_000_000));
        assert!(!at(i64::MIN + 5, i64::MIN));
    }

    #[test]
    fn a_damaged_blob_is_refused_not_misread() {
        let dir = ScannedDir::new(
            stamp(),
            0,
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
                entries: Cow::Borrowed(&good[..cut]),
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
                entries: Cow::Borrowed(&bad),
                ..dir.clone()
            };
            assert!(d.entries().is_none(), "{bad:?}");
        }
    }

    #[test]
    fn a_folder_holds_files_unless_its_record_shows_only_folders() {
        let entry = |name, kind| DirEntry {
            name,
            kind,
            stamps: Stamps {
                size: 0,
                mtime_ns: 0,
                ctime_ns: 0,
            },
        };
        let dirs_only = ScannedDir::new(
            stamp(),
            0,
            0,
            [entry(c"A", EntryKind::Dir), entry(c"B", EntryKind::Dir)],
        );
        assert!(!dirs_only.holds_files());
        assert!(!ScannedDir::new(stamp(), 0, 0, []).holds_files());
        for kind in [EntryKind::Track, EntryKind::Failure, EntryKind::NotAudio] {
            let mixed = ScannedDir::new(stamp(), 0, 0, [entry(c"A", EntryKind::Dir), entry(c"x", kind)]);
            assert!(mixed.holds_files(), "{kind:?}");
        }
        // A record that cannot be read may hold anything.
        let damaged = ScannedDir {
            entries: Cow::Borrowed(&[0, b'A', 0, 9]),
            ..dirs_only.clone()
        };
        assert!(damaged.holds_files());
        // One at a time: the entries before the damage, then one error.
        let read: Vec<_> = damaged.entry_iter().collect();
        assert_eq!(read, [Ok(entry(c"A", EntryKind::Dir)), Err(InvalidRecord)]);
    }
}
