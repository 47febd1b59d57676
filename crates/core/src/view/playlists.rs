//! Smart playlists: each `[[playlist]]` of the configuration is
//! `Playlists/NAME.m3u8` at the mount's root, an extended M3U of the
//! tracks its query matches, with their durations and titles, each entry
//! the track's raw UTF-8 path relative to the playlist into the first view
//! (no percent-encoding: MPD and most players read entries as paths).
//!
//! A playlist's bytes are made when the view loads and made again after a
//! refresh that changed one of its tracks or a track its query now
//! matches ([`View::remake_playlists`]); an open reads the bytes made
//! last, whole, so a reader never sees two versions mixed. They are kept
//! compressed (a playlist's paths repeat their folders: a tenth of the
//! size), and each open unpacks its own copy.

use std::cmp::Ordering;
use std::time::SystemTime;

use super::*;
use crate::query::{Query, QueryTrack};
use crate::view::found_tracks::FoundTracks;
use crate::view::served_file::ServedFile;

/// The folder at the root that holds the playlists.
pub const PLAYLISTS_FOLDER: &str = "Playlists";

/// A playlist as the configuration defines it.
#[derive(Debug, Clone)]
pub struct PlaylistSpec {
    /// Its file's name, without `.m3u8`.
    pub name: String,
    pub query: Arc<Query>,
    /// Its order: by these fields, each ascending unless `descending`;
    /// none: the order of the tracks' paths in the first view.
    pub sort: Vec<SortKey>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SortKey {
    /// A tag (`artist`), or `added`, `duration` or `path`.
    pub field: String,
    pub descending: bool,
}

impl SortKey {
    /// `field`, or `-field` for descending.
    pub fn parse(word: &str) -> Option<SortKey> {
        let (field, descending) = match word.strip_prefix('-') {
            Some(field) => (field, true),
            None => (word, false),
        };
        let field = field.trim().to_lowercase();
        (!field.is_empty() && !field.contains(char::is_whitespace)).then_some(SortKey { field, descending })
    }
}

/// The playlists of a view: their bytes as made last, and which tracks
/// they hold.
pub(super) struct Playlists {
    made: Mutex<Vec<MadePlaylist>>,
}

impl Playlists {
    /// `count` playlists, empty until made (one whose query fails stays
    /// so: a file, never a folder).
    pub(super) fn new(count: usize) -> Playlists {
        Playlists {
            made: Mutex::new(
                (0..count)
                    .map(|_| MadePlaylist::of_bytes(b"#EXTM3U\n".to_vec()))
                    .collect(),
            ),
        }
    }
}

struct MadePlaylist {
    /// Its bytes, as every open serves them, compressed (LZ4, their size
    /// before them).
    packed: Arc<[u8]>,
    /// Their size.
    len: u64,
    members: HashSet<i64>,
    /// A hash of the bytes: the version clients see, the same for the same
    /// bytes whenever and wherever they were made (an entity tag a client
    /// keeps across remounts names these bytes only).
    version: i64,
    changed: SystemTime,
}

impl MadePlaylist {
    fn of_bytes(bytes: Vec<u8>) -> MadePlaylist {
        MadePlaylist {
            packed: lz4_flex::compress_prepend_size(&bytes).into(),
            len: bytes.len() as u64,
            members: HashSet::new(),
            version: version_of(&bytes),
            changed: SystemTime::now(),
        }
    }
}

/// The version of a playlist's bytes: 63 bits of their sha256.
fn version_of(bytes: &[u8]) -> i64 {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(bytes);
    (u64::from_le_bytes(digest[..8].try_into().expect("8 bytes")) >> 1) as i64
}

/// One entry of a playlist, before it is sorted and written: a track
/// found (its place among them) and its path.
struct PlaylistEntry {
    track: usize,
    path: String,
}

impl View {
    /// What clients see of playlist `index` (the bytes made last).
    pub fn playlist_file(&self, index: usize) -> Option<ServedFile> {
        let made = self.playlists.made.lock();
        made.get(index).map(|made| served_playlist(index, made))
    }

    /// Makes every playlist's bytes when the view loads, from their
    /// tracks found as the tree was built ([`super::render::load_view`]).
    pub(super) fn make_playlists(&self, found: Vec<FoundTracks>) {
        // One thread a core, each making one playlist after another.
        let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
        let waiting = Mutex::new(found.into_iter().enumerate());
        std::thread::scope(|s| {
            for _ in 0..workers.min(self.config.playlists.len()) {
                s.spawn(|| loop {
                    let Some((index, found)) = waiting.lock().next() else {
                        return;
                    };
                    self.keep_made(index, Ok(found));
                });
            }
        });
    }

    /// Makes again the playlists a refresh touched (all of them after a
    /// rebuild): the inodes of those whose bytes changed.
    pub fn remake_playlists(&self, refresh: &Refresh) -> Vec<u64> {
        if self.config.playlists.is_empty() || (refresh.changed.is_empty() && !refresh.rebuilt) {
            return Vec::new();
        }
        let touched: Vec<usize> = if refresh.rebuilt {
            (0..self.config.playlists.len()).collect()
        } else {
            self.touched_playlists(&refresh.changed, &refresh.playlists_matched)
        };
        let remade = self.remake(&touched);
        let tree = self.tree();
        remade
            .into_iter()
            .filter_map(|index| tree.playlist_ino(index))
            .collect()
    }

    /// Notes in `matched` the playlists a track read by a refresh matches.
    pub(super) fn note_matching_playlists(&self, track: &TrackBundle, matched: &mut Vec<usize>) {
        for index in playlists_matching(&self.config.playlists, track) {
            if !matched.contains(&index) {
                matched.push(index);
            }
        }
    }

    /// The playlists a changed track was in, or one matches now.
    fn touched_playlists(&self, changed: &[i64], matched: &[usize]) -> Vec<usize> {
        let made = self.playlists.made.lock();
        (0..self.config.playlists.len())
            .filter(|index| {
                matched.contains(index)
                    || made
                        .get(*index)
                        .is_some_and(|m| changed.iter().any(|id| m.members.contains(id)))
            })
            .collect()
    }

    /// Makes playlists `indices` again: those whose bytes changed.
    fn remake(&self, indices: &[usize]) -> Vec<usize> {
        let mut changed = Vec::new();
        for &index in indices {
            let Some(spec) = self.config.playlists.get(index) else {
                continue;
            };
            let found = self
                .pool
                .with(|store| tracks_of(spec, store).map_err(|e| io::Error::other(format!("{e:#}"))))
                .map_err(anyhow::Error::from);
            if self.keep_made(index, found) {
                changed.push(index);
            }
        }
        changed
    }

    /// Keeps the bytes of playlist `index` made from its tracks `found`:
    /// whether they changed.
    fn keep_made(&self, index: usize, found: anyhow::Result<FoundTracks>) -> bool {
        let Some(spec) = self.config.playlists.get(index) else {
            return false;
        };
        let (bytes, members) = match found {
            Ok(found) => self.playlist_bytes(spec, found),
            Err(e) => {
                tracing::error!("playlist {:?}: {e:#}", spec.name);
                return false;
            }
        };
        let mut made = self.playlists.made.lock();
        let Some(slot) = made.get_mut(index) else {
            return false;
        };
        slot.members = members;
        if slot.version == version_of(&bytes) {
            return false;
        }
        let members = std::mem::take(&mut slot.members);
        *slot = MadePlaylist {
            members,
            ..MadePlaylist::of_bytes(bytes)
        };
        true
    }

    /// A playlist's bytes and its tracks, its tracks' places in the tree now.
    fn playlist_bytes(&self, spec: &PlaylistSpec, found: FoundTracks) -> (Vec<u8>, HashSet<i64>) {
        let members = found.tracks().iter().map(|t| t.id).collect();
        let windows_names = self.config.windows_names;
        let first_view = (self.config.views.first()).and_then(|v| v.folder_name(windows_names));
        let entries: Vec<PlaylistEntry> = {
            let tree = self.tree();
            (found.tracks().iter().enumerate())
                .filter_map(|(track, t)| {
                    let path = tree.path_of_place(file_ino(t.id), first_view.as_deref())?;
                    Some(PlaylistEntry { track, path })
                })
                .collect()
        };
        // Each entry's sort values worked out once, not at every comparison.
        let keys = spec.sort.len();
        let mut keyed: Vec<(Vec<SortValue>, PlaylistEntry)> = (entries.into_iter())
            .map(|e| {
                let values = (found.values(e.track, keys))
                    .map(|value| SortValue::of(value.unwrap_or(&e.path)))
                    .collect();
                (values, e)
            })
            .collect();
        keyed.sort_by(|(a_values, a), (b_values, b)| {
            compare(a_values, b_values, &spec.sort).then_with(|| a.path.cmp(&b.path))
        });
        let entries: Vec<PlaylistEntry> = keyed.into_iter().map(|(_, e)| e).collect();
        (m3u8(&found, &entries).into_bytes(), members)
    }

    /// Opens playlist node `ino`: the bytes made last.
    pub(super) fn open_playlist(&self, index: usize, store_generation: u64) -> io::Result<OpenFile> {
        let (packed, served) = {
            let made = self.playlists.made.lock();
            let made = made
                .get(index)
                .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOENT))?;
            (made.packed.clone(), served_playlist(index, made))
        };
        let bytes = lz4_flex::decompress_size_prepended(&packed)
            .map_err(|e| io::Error::other(format!("playlist {index}: its bytes do not unpack: {e}")))?;
        let mut layout = Layout::default();
        layout.push_bytes(&bytes);
        Ok(OpenFile::from_store(
            no_track(),
            Arc::new(layout),
            served,
            store_generation,
        ))
    }
}

/// What clients see of playlist `index` as `made`: its id is its place,
/// negative (no track's), its version that of its bytes.
fn served_playlist(index: usize, made: &MadePlaylist) -> ServedFile {
    ServedFile {
        size: made.len,
        mtime_ns: time_ns(made.changed),
        id: -(index as i64) - 1,
        version: made.version,
        content_type: "audio/x-mpegurl",
        track_id: None,
    }
}

/// The playlists (by place in `specs`) whose query `track` matches.
pub(super) fn playlists_matching(specs: &[PlaylistSpec], track: &TrackBundle) -> Vec<usize> {
    if specs.is_empty() {
        return Vec::new();
    }
    let track = QueryTrack::of(track);
    (specs.iter().enumerate())
        .filter(|(_, spec)| spec.query.matches(&track))
        .map(|(index, _)| index)
        .collect()
}

/// The tracks playlist `spec`'s query matches in `store`.
fn tracks_of(spec: &PlaylistSpec, store: &Store) -> anyhow::Result<FoundTracks> {
    let mut found = FoundTracks::default();
    store.read_snapshot(|s| spec.query.for_each_match(s, |b| found.push(spec, &b)))?;
    Ok(found)
}

fn time_ns(t: SystemTime) -> i64 {
    t.duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

/// Orders two entries by their values of the sort keys.
fn compare(a: &[SortValue], b: &[SortValue], keys: &[SortKey]) -> Ordering {
    for ((a, b), key) in a.iter().zip(b).zip(keys) {
        let order = a.natural_cmp(b);
        let order = if key.descending { order.reverse() } else { order };
        if order != Ordering::Equal {
            return order;
        }
    }
    Ordering::Equal
}

/// A value sorted naturally: numbers as numbers (`2` before `10`),
/// anything else without case.
struct SortValue {
    number: Option<f64>,
    folded: String,
}

impl SortValue {
    fn of(text: &str) -> SortValue {
        SortValue {
            number: text.trim().parse::<f64>().ok(),
            folded: text.to_lowercase(),
        }
    }

    fn natural_cmp(&self, other: &SortValue) -> Ordering {
        match (self.number, other.number) {
            (Some(x), Some(y)) => x.partial_cmp(&y).unwrap_or(Ordering::Equal),
            _ => self.folded.cmp(&other.folded),
        }
    }
}

/// The extended M3U: `#EXTINF:<seconds>,<artist> - <title>` and the path
/// of each entry, relative to the playlist's folder.
fn m3u8(found: &FoundTracks, entries: &[PlaylistEntry]) -> String {
    let mut out = String::from("#EXTM3U\n");
    for e in entries {
        let track = &found.tracks()[e.track];
        let seconds = track.duration_ms.map_or(-1, |ms| ((ms + 500) / 1000) as i64);
        let title = (found.title(track).map(str::to_string))
            .unwrap_or_else(|| e.path.rsplit('/').next().unwrap_or_default().to_string());
        let artist = found.artist(track);
        let label = match artist {
            Some(artist) => format!("{artist} - {title}"),
            None => title,
        };
        out.push_str(&format!(
            "#EXTINF:{seconds},{}\n../{}\n",
            one_line(&label),
            e.path
        ));
    }
    out
}

fn one_line(text: &str) -> String {
    text.replace(['\r', '\n'], " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sort_keys_read_a_minus_as_descending() {
        assert_eq!(
            SortKey::parse("-Added"),
            Some(SortKey {
                field: "added".into(),
                descending: true
            })
        );
        assert_eq!(SortKey::parse("-"), None);
        let natural = |a: &str, b: &str| SortValue::of(a).natural_cmp(&SortValue::of(b));
        assert_eq!(natural("2", "10"), Ordering::Less);
        assert_eq!(natural("b", "A"), Ordering::Greater);
    }
}
