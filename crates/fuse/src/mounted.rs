//! Which store and track a file of a mounted view is, for commands given
//! a path through the mount (what a user browsing it has at hand).
//!
//! A mount names its store in its source (`retagfs:/path/to/music.db`, as
//! `findmnt` and `df` show it), and a served file's inode number is derived
//! from its track id, so neither needs a request to the daemon.

use std::fs::Metadata;
use std::io;
use std::os::unix::fs::{DirEntryExt, MetadataExt};
use std::path::{Path, PathBuf};

use retagfs_core::view::tree::track_of_file_ino;

/// The source of every retagfs mount starts with this.
const SOURCE: &str = "retagfs";
/// ... followed by the store's path when the mount names it.
const SOURCE_WITH_STORE: &str = "retagfs:";

/// A mounted view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountedView {
    pub mount_point: PathBuf,
    /// The store it serves; `None` when the mount does not say (a store
    /// path holding `,` or `\`, which mount options cannot carry).
    pub store: Option<PathBuf>,
}

/// The source a mount of `db` carries: `retagfs:` and the store's full
/// path when mount options can carry it, else `retagfs`.
pub(crate) fn source_for(db: &Path) -> String {
    let full = std::fs::canonicalize(db).unwrap_or_else(|_| db.to_path_buf());
    match full.to_str() {
        Some(p) if !p.contains([',', '\\']) => format!("{SOURCE_WITH_STORE}{p}"),
        _ => SOURCE.to_string(),
    }
}

/// The mounted view a file or folder is in (told by its `stat`), if any.
pub fn view_of(meta: &Metadata) -> Option<MountedView> {
    let dev = meta.dev();
    // No mount table (no /proc): nothing can be told.
    let table = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let (mount_point, store) = view_on_device(&table, libc::major(dev), libc::minor(dev))?;
    Some(MountedView { mount_point, store })
}

/// The tracks a file of a view serves, or every file under a folder of
/// one (listed through the mount, which gives each entry's inode: no
/// `stat` per file). `meta` is the `stat` of `path` that found the view: a
/// second one could find another file moved there meanwhile, or none.
pub fn served_tracks(path: &Path, meta: &Metadata) -> io::Result<Vec<i64>> {
    if !meta.is_dir() {
        return Ok(track_of_file_ino(meta.ino()).into_iter().collect());
    }
    let mut tracks = Vec::new();
    let mut folders = vec![path.to_path_buf()];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder)? {
            let entry = entry?;
            if entry.file_type()?.is_dir() {
                folders.push(entry.path());
            } else if let Some(id) = track_of_file_ino(entry.ino()) {
                tracks.push(id);
            }
        }
    }
    tracks.sort_unstable();
    Ok(tracks)
}

/// The mount point and store of the retagfs view on device
/// `major:minor`, from the text of `/proc/self/mountinfo`.
fn view_on_device(mountinfo: &str, major: u32, minor: u32) -> Option<(PathBuf, Option<PathBuf>)> {
    let device = format!("{major}:{minor}");
    mountinfo.lines().filter_map(MountEntry::parse).find_map(|m| {
        let is_view = matches!(m.fs_type, "fuse" | "fuse.retagfs")
            && (m.source == SOURCE || m.source.starts_with(SOURCE_WITH_STORE));
        if m.device != device || !is_view {
            return None;
        }
        let store = m
            .source
            .strip_prefix(SOURCE_WITH_STORE)
            .filter(|p| !p.is_empty())
            .map(PathBuf::from);
        Some((PathBuf::from(m.mount_point), store))
    })
}

/// What is mounted at `path` ("source (type)") when it is a mountpoint:
/// the last mount there in `/proc/self/mountinfo`, the one that is seen.
pub fn mounted_at(path: &Path) -> Option<String> {
    let at = path.canonicalize().ok()?;
    let table = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    mounted_at_in(&table, &at)
}

fn mounted_at_in(mountinfo: &str, at: &Path) -> Option<String> {
    last_mount_at(mountinfo, at).map(|m| format!("{} ({})", m.source, m.fs_type))
}

/// The device (`major:minor`) of what is mounted at `path`, without a
/// request to it: a daemon finds its own mount's this way.
pub(crate) fn device_at(path: &Path) -> Option<String> {
    let at = path.canonicalize().ok()?;
    let table = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    last_mount_at(&table, &at).map(|m| m.device.to_string())
}

fn last_mount_at<'a>(mountinfo: &'a str, at: &Path) -> Option<MountEntry<'a>> {
    mountinfo
        .lines()
        .rev()
        .filter_map(MountEntry::parse)
        .find(|m| Path::new(&m.mount_point) == at)
}

/// The fields of a line of `/proc/self/mountinfo` used here.
struct MountEntry<'a> {
    device: &'a str,
    mount_point: String,
    fs_type: &'a str,
    source: String,
}

impl<'a> MountEntry<'a> {
    fn parse(line: &'a str) -> Option<MountEntry<'a>> {
        let fields: Vec<&str> = line.split(' ').collect();
        // id, parent, major:minor, root, mount point, options, optional
        // fields up to "-", then type, source, super options.
        let dash = fields.iter().position(|&f| f == "-")?;
        Some(MountEntry {
            device: fields.get(2)?,
            mount_point: unescape(fields.get(4)?),
            fs_type: fields.get(dash + 1)?,
            source: unescape(fields.get(dash + 2)?),
        })
    }
}

/// A mountinfo field with its octal escapes (`\040` for a space) undone.
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|b| (b'0'..=b'7').contains(b)));
        match octal {
            Some(d) if bytes[i] == b'\\' => {
                out.push(
                    d.iter()
                        .fold(0u8, |n, b| n.wrapping_mul(8).wrapping_add(b - b'0')),
                );
                i += 4;
            }
            _ => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &str = "\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
44 22 0:39 / /home/me/clean\\040view ro,nosuid,nodev,relatime - fuse retagfs:/home/me/my\\040music.db ro,user_id=0
45 22 0:40 / /mnt/other ro,nosuid - fuse.sshfs me@host:/music rw
46 22 0:41 / /mnt/old ro,nosuid - fuse.retagfs retagfs rw
47 22 0:42 / /mnt/look-alike ro - fuse retagfsx:/a.db rw
";

    #[test]
    fn a_view_is_found_by_its_device_with_its_store() {
        assert_eq!(
            view_on_device(TABLE, 0, 39),
            Some((
                PathBuf::from("/home/me/clean view"),
                Some(PathBuf::from("/home/me/my music.db"))
            ))
        );
    }

    #[test]
    fn a_view_that_does_not_name_its_store_is_still_a_view() {
        assert_eq!(
            view_on_device(TABLE, 0, 41),
            Some((PathBuf::from("/mnt/old"), None))
        );
    }

    #[test]
    fn other_file_systems_are_not_views() {
        assert_eq!(view_on_device(TABLE, 8, 1), None);
        assert_eq!(view_on_device(TABLE, 0, 40), None);
        assert_eq!(view_on_device(TABLE, 0, 42), None);
        assert_eq!(view_on_device(TABLE, 0, 99), None);
        assert_eq!(view_on_device("garbage\n\n- -\n", 0, 39), None);
    }

    #[test]
    fn what_is_mounted_at_a_mountpoint_is_its_last_mount() {
        let at = |p| mounted_at_in(TABLE, Path::new(p));
        assert_eq!(
            at("/home/me/clean view").as_deref(),
            Some("retagfs:/home/me/my music.db (fuse)")
        );
        assert_eq!(at("/").as_deref(), Some("/dev/sda1 (ext4)"));
        assert_eq!(at("/home/me"), None);
        let stacked = format!("{TABLE}48 46 0:43 / /mnt/old rw - tmpfs tmpfs rw\n");
        assert_eq!(
            mounted_at_in(&stacked, Path::new("/mnt/old")).as_deref(),
            Some("tmpfs (tmpfs)")
        );
        // The root is a mountpoint everywhere.
        assert!(mounted_at(Path::new("/")).is_some());
    }

    #[test]
    fn the_source_names_the_full_store_path_when_options_can_carry_it() {
        let dir = std::env::temp_dir();
        let full = std::fs::canonicalize(&dir).unwrap().join("x.db");
        assert_eq!(source_for(&full), format!("retagfs:{}", full.display()));
        assert_eq!(source_for(Path::new("/a,b/x.db")), "retagfs");
        assert_eq!(source_for(Path::new("/a\\b/x.db")), "retagfs");
    }

    /// What the kernel does to a mountinfo field (`mangle` in
    /// fs/proc_namespace.c).
    fn escape(s: &str) -> String {
        let mut out = String::new();
        for c in s.chars() {
            match c {
                ' ' | '\t' | '\n' | '\\' => out.push_str(&format!("\\{:03o}", c as u32)),
                c => out.push(c),
            }
        }
        out
    }

    proptest::proptest! {
        #[test]
        fn any_store_path_is_read_back_from_the_mount_table(path in "/[^\\x00]{0,40}") {
            let line = format!(
                "50 22 0:77 / {} ro - fuse {} ro\n",
                escape("/mnt/a view"),
                escape(&format!("retagfs:{path}"))
            );
            let (mount_point, store) = view_on_device(&line, 0, 77).unwrap();
            proptest::prop_assert_eq!(mount_point, PathBuf::from("/mnt/a view"));
            proptest::prop_assert_eq!(store, Some(PathBuf::from(path)));
        }
    }

    #[test]
    fn unescape_undoes_octal_escapes_only() {
        assert_eq!(unescape("a\\040b\\011c\\134d"), "a b\tc\\d");
        assert_eq!(unescape("a\\09b\\"), "a\\09b\\");
    }
}
