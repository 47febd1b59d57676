//! What kind of file system a folder or an open file is on, told by its file
//! system's `statfs` magic number. It decides whether a folder's times can
//! stand for its entries (local file systems) and whether work waits on
//! round trips rather than on the CPU (network file systems and FUSE).

use std::fs::File;
use std::path::Path;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FsKind {
    /// Adding, removing or renaming an entry always changes its folder's
    /// ctime, read from the local kernel's own inode: ext2/3/4, XFS, Btrfs,
    /// tmpfs, F2FS, ZFS, bcachefs.
    Local,
    /// Every request is a round trip to another machine or process: NFS,
    /// SMB/CIFS, 9p, Ceph, AFS and FUSE.
    Network,
    /// Anything else (FAT's 2-second times, overlays, unknown types), or
    /// a file system that could not be asked.
    Other,
}

const LOCAL: &[i64] = &[
    0xEF53,      // ext2/3/4
    0x5846_5342, // XFS
    0x9123_683E, // Btrfs
    0x0102_1994, // tmpfs
    0xF2F5_2010, // F2FS
    0x2FC1_2FC1, // ZFS
    0xCA45_1A4E, // bcachefs
];

const NETWORK: &[i64] = &[
    0x6969,      // NFS
    0x517B,      // SMB
    0xFF53_4D42, // CIFS
    0xFE53_4D42, // SMB2
    0x6573_5546, // FUSE
    0x0102_1997, // 9p
    0x00C3_6400, // Ceph
    0x5346_414F, // AFS
];

/// The storage `path` is on.
pub fn of_path(path: &Path) -> FsKind {
    kind(rustix::fs::statfs(path).ok())
}

/// The storage an open file is on.
pub fn of_file(file: &File) -> FsKind {
    kind(rustix::fs::fstatfs(file).ok())
}

fn kind(fs: Option<rustix::fs::StatFs>) -> FsKind {
    // `f_type` is a different integer type on other architectures.
    #[allow(clippy::unnecessary_cast)]
    let Some(magic) = fs.map(|fs| fs.f_type as i64) else {
        return FsKind::Other;
    };
    if LOCAL.contains(&magic) {
        FsKind::Local
    } else if NETWORK.contains(&magic) {
        FsKind::Network
    } else {
        FsKind::Other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_is_neither_local_nor_network() {
        assert_eq!(of_path(Path::new("/proc")), FsKind::Other);
    }

    #[test]
    fn a_missing_path_is_other() {
        assert_eq!(of_path(Path::new("/no/such/folder/anywhere")), FsKind::Other);
    }

    #[test]
    fn a_file_and_its_folder_agree() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"x").unwrap();
        assert_eq!(of_file(&File::open(&path).unwrap()), of_path(dir.path()));
    }
}
