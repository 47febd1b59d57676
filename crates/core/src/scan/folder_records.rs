//! The record of folders: what the last scan saw in each, taken instead of
//! listing a folder whose times did not change.

use super::*;

/// The files of folders taken from the record that a scan refused before.
pub(super) fn recorded_failures(walked: &Walked, previous: &ScannedDirs) -> Vec<String> {
    let mut out = Vec::new();
    for dir in walked.dirs.iter().filter(|d| d.from_record) {
        let Some(recorded) = previous.get(&dir.path) else {
            continue;
        };
        let Some(entries) = recorded.entries() else {
            continue;
        };
        out.extend(
            entries
                .iter()
                .filter(|e| e.kind == EntryKind::Failure)
                .filter_map(|e| e.name.to_str().ok())
                .map(|name| format!("{}/{name}", dir.path)),
        );
    }
    out
}

/// Devices whose folders may be recorded and taken from the record: the
/// root's, if it is on local storage ([`FsKind::Local`]: elsewhere a
/// folder's times need not change with its entries).
pub(super) fn trusted_devices(root: &Path) -> Vec<u64> {
    if fs_kind::of_path(root) != FsKind::Local {
        return Vec::new();
    }
    crate::scan::walk::identity(root)
        .map(|(device, _)| vec![device])
        .unwrap_or_default()
}

/// Whether the walk took every folder from the record and found every
/// file as it was.
pub(super) fn nothing_changed(walked: &Walked) -> bool {
    walked.files.is_empty()
        && walked.failures.is_empty()
        && walked.unreadable.is_empty()
        && (walked.dirs_listed == 0 || walked.dirs.iter().all(|d| d.from_record))
}

/// Adds the files and subfolders of folders taken from the record to
/// what the walk found, as if they had been listed.
pub(super) fn add_reused_files(walked: &mut Walked, previous: &ScannedDirs) {
    let walked_dirs: HashSet<String> = walked.dirs.iter().map(|d| d.path.clone()).collect();
    for dir in walked.dirs.iter_mut().filter(|d| d.from_record) {
        let Some(recorded) = previous.get(&dir.path) else {
            continue;
        };
        let entries = recorded.entries();
        let start = walked.files.len();
        for entry in entries.into_iter().flatten() {
            let Ok(name) = entry.name.to_str() else {
                dir.recordable = false;
                continue;
            };
            if entry.kind == EntryKind::Dir {
                // A recorded subfolder the walk could not read (the record
                // lies, or it went away during the walk): list this folder
                // next time rather than record it again.
                if !walked_dirs.contains(&format!("{}/{name}", dir.path)) {
                    dir.recordable = false;
                }
                dir.subdirs.push(name.to_string());
            } else {
                walked.files.push((format!("{}/{name}", dir.path), entry.stamps));
            }
        }
        dir.files = start..walked.files.len();
        dir.skipped_by_name = recorded.skipped_by_name;
    }
}

/// Every folder above the given paths (each path's parent, its parent ...).
pub(super) fn ancestors<'a>(paths: &[&'a str]) -> HashSet<&'a str> {
    let mut out = HashSet::new();
    for path in paths {
        let mut rest = *path;
        while let Some((parent, _)) = rest.rsplit_once('/') {
            if parent.is_empty() || !out.insert(parent) {
                break;
            }
            rest = parent;
        }
    }
    out
}

/// What a scan found in each folder, to record for the next one.
pub(super) struct Folders<'a> {
    pub(super) walked: &'a Walked,
    pub(super) kinds: &'a [Option<EntryKind>],
    pub(super) previous: &'a ScannedDirs,
    pub(super) roots: &'a [PathBuf],
    pub(super) scan_started_ns: i64,
}

impl Folders<'_> {
    /// Records every folder walked whose entries are all known, except
    /// those in `relist`; forgets the others and those no longer found.
    pub(super) fn record(&self, tx: &store::Transaction, relist: &HashSet<&str>) -> anyhow::Result<()> {
        let mut walked = HashSet::new();
        for dir in &self.walked.dirs {
            walked.insert(dir.path.as_str());
            let found = (dir.recordable && !relist.contains(dir.path.as_str()))
                .then(|| self.found_in(dir))
                .flatten();
            let previous = self.previous.get(&dir.path);
            match found {
                Some(found) if outdated(previous.as_ref(), &found) => {
                    store::save_scanned_dir(tx, &dir.path, &found)?
                }
                Some(_) => {}
                None if previous.is_some() => store::forget_scanned_dir(tx, &dir.path)?,
                None => {}
            }
        }
        for path in self.previous.paths() {
            let walkable = under_roots(path, self.roots);
            if walkable && !walked.contains(path) {
                store::forget_scanned_dir(tx, path)?;
            }
        }
        Ok(())
    }

    /// The folder as this scan left it, if every file in it has a kind.
    pub(super) fn found_in(&self, dir: &crate::scan::walk::WalkedDir) -> Option<ScannedDir<'static>> {
        let no_stamps = Stamps {
            size: 0,
            mtime_ns: 0,
            ctime_ns: 0,
        };
        let mut names = Vec::new();
        let mut entries = Vec::new();
        for sub in &dir.subdirs {
            names.push((CString::new(sub.as_str()).ok()?, EntryKind::Dir, no_stamps));
        }
        for index in dir.files.clone() {
            let (path, stamps) = &self.walked.files[index];
            let name = path.get(dir.path.len() + 1..)?;
            names.push((CString::new(name).ok()?, self.kinds[index]?, *stamps));
        }
        for (name, kind, stamps) in &names {
            entries.push(DirEntry {
                name,
                kind: *kind,
                stamps: *stamps,
            });
        }
        Some(ScannedDir::new(
            dir.stamp,
            self.scan_started_ns,
            dir.skipped_by_name,
            entries,
        ))
    }
}

/// Whether a folder's record must be written again to say what this scan
/// found: it has none, another stamp or other entries, or one written too
/// soon after the folder changed to be trusted.
pub(super) fn outdated(previous: Option<&ScannedDir<'_>>, found: &ScannedDir<'_>) -> bool {
    previous.is_none_or(|p| {
        !p.settled()
            || p.stamp != found.stamp
            || p.skipped_by_name != found.skipped_by_name
            || p.entries() != found.entries()
    })
}
