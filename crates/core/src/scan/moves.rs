//! Moved files: a new file whose audio fingerprint matches a track whose
//! file is gone takes that track (its id, tags and edits).

use super::*;

/// Tracks whose file is gone, by fingerprint. Several with one
/// fingerprint (the same recording twice) go each to the new file whose
/// path ends most like its old one.
#[derive(Default)]
pub(super) struct MoveCandidates {
    /// Gone tracks under the roots scanned.
    pub(super) gone: HashMap<Fingerprint, Candidates>,
    /// Gone tracks outside the roots, looked up by fingerprint the first
    /// time a new file has it (once per fingerprint: a library of many
    /// copies of one recording, moved, must not stat every copy again for
    /// each new file).
    pub(super) gone_elsewhere: HashMap<Fingerprint, Candidates>,
    pub(super) roots: Vec<PathBuf>,
    /// Whether the store holds tracks outside the roots, which a new file
    /// may be one of, moved.
    pub(super) elsewhere: bool,
}

impl MoveCandidates {
    pub(super) fn add(&mut self, db: &Store, known: &KnownStamps, rows: &[usize]) -> anyhow::Result<()> {
        let paths: HashMap<i64, &str> = rows.iter().map(|&row| (known.id(row), known.path(row))).collect();
        let ids: Vec<i64> = paths.keys().copied().collect();
        for (id, fingerprint) in db.fingerprints(&ids)? {
            let path = paths[&id].to_string();
            self.gone.entry(fingerprint).or_default().push(id, path);
        }
        Ok(())
    }

    /// Whether a new file may be a gone track that has only the sha256
    /// fingerprint of a store from before version 5: only then is a new
    /// file's sha256 computed too.
    pub(super) fn may_want_sha256(&self, db: &Store) -> anyhow::Result<bool> {
        let gone = self.gone.keys().any(|f| matches!(f, Fingerprint::Sha256(_)));
        Ok(gone || (self.elsewhere && db.has_legacy_fingerprints()?))
    }

    /// The track (id and old path) that a new file at `path` with these
    /// fingerprints is: one gone under the roots first, else one gone
    /// elsewhere. Among the tracks of all its fingerprints (a store from
    /// before version 5 may know one recording by both), the one whose
    /// old path ends most like `path`.
    pub(super) fn take(
        &mut self,
        tx: &store::Transaction<'_>,
        fingerprints: impl Iterator<Item = Fingerprint> + Clone,
        path: &str,
    ) -> anyhow::Result<Option<(i64, String)>> {
        if let Some(found) = take_best(&mut self.gone, fingerprints.clone(), path) {
            return Ok(Some(found));
        }
        if !self.elsewhere {
            return Ok(None);
        }
        for fingerprint in fingerprints.clone() {
            if let std::collections::hash_map::Entry::Vacant(e) = self.gone_elsewhere.entry(fingerprint) {
                let mut found = Candidates::default();
                for (id, old) in store::tracks_with_fingerprint(tx, &fingerprint)? {
                    if !under_roots(&old, &self.roots) && file_is_gone(&old) {
                        found.push(id, old);
                    }
                }
                e.insert(found);
            }
        }
        Ok(take_best(&mut self.gone_elsewhere, fingerprints, path))
    }
}

/// Takes the track, among those of `fingerprints` in `gone`, whose old
/// path ends most like `path`.
pub(super) fn take_best(
    gone: &mut HashMap<Fingerprint, Candidates>,
    fingerprints: impl Iterator<Item = Fingerprint>,
    path: &str,
) -> Option<(i64, String)> {
    let best = fingerprints
        .filter_map(|f| {
            let (index, likeness) = gone.get_mut(&f)?.best(path)?;
            Some((f, index, likeness))
        })
        .max_by_key(|&(_, _, likeness)| likeness)?;
    gone.get_mut(&best.0)?.tracks[best.1].take()
}

/// Gone tracks of one fingerprint, indexed by the last two components of
/// their paths (a library moved whole keeps them) and by file name, so
/// that each new file finds its own among thousands of copies without
/// comparing with each.
#[derive(Default)]
pub(super) struct Candidates {
    /// (id, old path), None once taken.
    pub(super) tracks: Vec<Option<(i64, String)>>,
    pub(super) by_tail: HashMap<String, Vec<usize>>,
    pub(super) by_name: HashMap<String, Vec<usize>>,
    /// Tracks before this one are all taken.
    pub(super) next_left: usize,
}

impl Candidates {
    pub(super) fn push(&mut self, id: i64, path: String) {
        let i = self.tracks.len();
        self.by_tail.entry(tail(&path).to_string()).or_default().push(i);
        self.by_name
            .entry(file_name(&path).to_string())
            .or_default()
            .push(i);
        self.tracks.push(Some((id, path)));
    }

    /// The track whose old path ends most like `path` (not taken yet),
    /// with how alike: one whose last two components match (ending more
    /// like it than any other), else one of the same file name, else any.
    pub(super) fn best(&mut self, path: &str) -> Option<(usize, Likeness)> {
        let tracks = &self.tracks;
        // The last one not taken yet (taken ones are dropped from the end
        // as they come up: each at most once).
        let left = |indexes: &mut Vec<usize>| {
            while indexes.last().is_some_and(|&i| tracks[i].is_none()) {
                indexes.pop();
            }
            indexes.last().copied()
        };
        let ending = |i: usize| tracks[i].as_ref().map_or(0, |(_, old)| same_ending(old, path));
        let same_tail = self.by_tail.get_mut(tail(path)).and_then(|same_tail| {
            left(same_tail)?;
            same_tail
                .iter()
                .copied()
                .filter(|&i| tracks[i].is_some())
                .max_by_key(|&i| ending(i))
        });
        if let Some(i) = same_tail {
            return Some((i, Likeness::SameTail(ending(i))));
        }
        if let Some(i) = self.by_name.get_mut(file_name(path)).and_then(left) {
            return Some((i, Likeness::SameName));
        }
        while self.next_left < tracks.len() && tracks[self.next_left].is_none() {
            self.next_left += 1;
        }
        (self.next_left < tracks.len()).then_some((self.next_left, Likeness::Any))
    }
}

/// How much a gone track's old path is like a new file's, least first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Likeness {
    Any,
    SameName,
    /// The last two components match, and this many at the end.
    SameTail(usize),
}

pub(super) fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// The last two components of a path.
pub(super) fn tail(path: &str) -> &str {
    let mut slashes = path.rmatch_indices('/').map(|(i, _)| i);
    match (slashes.next(), slashes.next()) {
        (Some(_), Some(i)) => &path[i + 1..],
        _ => path,
    }
}

/// How many trailing path components `a` and `b` share.
pub(super) fn same_ending(a: &str, b: &str) -> usize {
    a.rsplit('/')
        .zip(b.rsplit('/'))
        .take_while(|(x, y)| x == y)
        .count()
}

pub(super) fn file_is_gone(path: &str) -> bool {
    // An object is no local file: a local scan never takes its track.
    !retagfs_remote::is_remote_path(path)
        && std::fs::symlink_metadata(text_to_path(path))
            .is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound)
}

/// Whether `path` is `prefix` or lies below it.
pub(super) fn at_or_under(path: &str, prefix: &str) -> bool {
    path.strip_prefix(prefix.trim_end_matches('/'))
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// Whether `path` is one of the (canonical) roots or under one: compared
/// as text, which is many times cheaper than by path components.
pub(super) fn under_roots(path: &str, roots: &[PathBuf]) -> bool {
    roots.iter().any(|r| at_or_under(path, &path_to_text(r)))
}
