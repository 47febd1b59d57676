//! `retagfs doctor [--db DB] [--json]`: what a first mount needs, checked
//! one by one, each problem with what to do about it. Exit 0 when a mount
//! would work, 1 when something would stop it; optional kernel features
//! are notes and change nothing.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::args::DoctorArgs;
use crate::fuse_access::{FuseAccess, DEV_FUSE};

#[derive(Serialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum Status {
    Ok,
    /// Something a mount would fail on.
    Fail,
    /// Worth knowing; a mount works either way.
    Note,
}

#[derive(Serialize)]
struct Check {
    check: &'static str,
    status: Status,
    detail: String,
}

/// The room the store's folder should have free: its write-ahead log grows
/// with each write transaction until SQLite folds it back.
const WAL_ROOM_MIN: u64 = 64 << 20;

pub fn run(a: DoctorArgs) -> anyhow::Result<()> {
    let mut checks = fuse_checks();
    if let Some(db) = &a.db {
        checks.extend(store_checks(db));
    }
    checks.extend(kernel_notes());
    let ok = checks.iter().all(|c| c.status != Status::Fail);
    let mut out = std::io::stdout().lock();
    if a.json {
        serde_json::to_writer_pretty(&mut out, &serde_json::json!({ "ok": ok, "checks": checks }))?;
        writeln!(out)?;
    } else {
        for c in &checks {
            let status = match c.status {
                Status::Ok => "ok",
                Status::Fail => "FAIL",
                Status::Note => "note",
            };
            writeln!(out, "{status:<5} {:<15} {}", c.check, c.detail)?;
        }
        if ok {
            writeln!(out, "a mount would work")?;
        }
    }
    if !ok {
        anyhow::bail!("a mount would fail: see the checks marked FAIL");
    }
    Ok(())
}

fn check(check: &'static str, status: Status, detail: impl Into<String>) -> Check {
    Check {
        check,
        status,
        detail: detail.into(),
    }
}

fn fuse_checks() -> Vec<Check> {
    let access = FuseAccess::of_this_user();
    let device = match &access.device {
        Ok(()) => check(
            "fuse device",
            Status::Ok,
            format!("{DEV_FUSE} opens for reading and writing"),
        ),
        Err(_) => check("fuse device", Status::Fail, access.hint()),
    };
    let mounting = match (access.root, access.fusermount) {
        (true, _) => check("mounting", Status::Ok, "as root"),
        (false, true) => check("mounting", Status::Ok, "through fusermount3"),
        (false, false) => check("mounting", Status::Fail, access.hint()),
    };
    vec![device, mounting]
}

fn store_checks(db: &Path) -> Vec<Check> {
    if !db.exists() {
        return vec![check(
            "store",
            Status::Fail,
            format!(
                "no store at {}: create it with `retagfs scan <MUSIC_DIR> --db {}`",
                db.display(),
                db.display()
            ),
        )];
    }
    let store = match retagfs_store::Store::open_read_only(db) {
        Ok(store) => store,
        Err(e) => return vec![check("store", Status::Fail, e.to_string())],
    };
    let mut checks = vec![integrity(&store, db)];
    checks.push(match retagfs_store::ScanLock::held(db) {
        Ok(true) => check(
            "scan",
            Status::Note,
            "a scan of this store is running now: a mount serves the store as it was until the scan ends",
        ),
        Ok(false) => check("scan", Status::Ok, "no scan running"),
        Err(e) => check(
            "scan",
            Status::Fail,
            format!("cannot read {}: {e}", retagfs_store::ScanLock::path(db).display()),
        ),
    });
    checks.extend(library_checks(&store));
    checks.push(free_space(db));
    checks
}

fn integrity(store: &retagfs_store::Store, db: &Path) -> Check {
    let version = store.schema_version();
    match store.quick_check() {
        Ok(ok) if ok == "ok" && version < retagfs_store::SCHEMA_VERSION => check(
            "store",
            Status::Ok,
            format!(
                "{}: schema {version}, intact; the next command that writes brings it to {}",
                db.display(),
                retagfs_store::SCHEMA_VERSION
            ),
        ),
        Ok(ok) if ok == "ok" => check(
            "store",
            Status::Ok,
            format!("{}: schema {version}, intact", db.display()),
        ),
        Ok(problem) => check(
            "store",
            Status::Fail,
            format!(
                "{}: damaged ({problem}): restore a backup, or scan into a new store",
                db.display()
            ),
        ),
        Err(e) => check("store", Status::Fail, format!("{}: {e}", db.display())),
    }
}

/// The folders the store was scanned from: those of `scanned_dirs` under
/// no other of them.
fn library_checks(store: &retagfs_store::Store) -> Vec<Check> {
    let Ok(mut folders) = store.scanned_folder_paths() else {
        return vec![check(
            "library",
            Status::Note,
            "the store records no scanned folder",
        )];
    };
    folders.sort();
    let mut roots: Vec<String> = Vec::new();
    for folder in folders {
        if !roots
            .iter()
            .any(|r| folder.starts_with(&format!("{r}/")) || folder == *r)
        {
            roots.push(folder);
        }
    }
    if roots.is_empty() {
        return vec![check(
            "library",
            Status::Note,
            "the store records no scanned folder (objects only, or an old scan)",
        )];
    }
    roots
        .into_iter()
        .map(|root| {
            let path = retagfs_store::text_to_path(&root);
            match std::fs::read_dir(&path) {
                Ok(_) => check("library", Status::Ok, format!("{} can be read", path.display())),
                Err(e) => check(
                    "library",
                    Status::Fail,
                    format!(
                        "{}: {e}: mount its share or disk, or give this user read access; the mount would serve files it cannot read",
                        path.display()
                    ),
                ),
            }
        })
        .collect()
}

fn free_space(db: &Path) -> Check {
    let folder = db
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
    let size = std::fs::metadata(db).map_or(0, |m| m.len());
    let needed = WAL_ROOM_MIN.max(size / 4);
    match nix::sys::statvfs::statvfs(&folder) {
        Ok(fs) => {
            // fsblkcnt_t and c_ulong are narrower on some targets.
            #[allow(clippy::unnecessary_cast)]
            let free = fs.blocks_available() as u64 * fs.fragment_size() as u64;
            let mib = |b: u64| b >> 20;
            if free >= needed {
                check(
                    "free space",
                    Status::Ok,
                    format!("{} MiB free beside the store", mib(free)),
                )
            } else {
                check(
                    "free space",
                    Status::Fail,
                    format!(
                        "{} MiB free in {}, {} MiB wanted for the store's write-ahead log: free some space",
                        mib(free),
                        folder.display(),
                        mib(needed)
                    ),
                )
            }
        }
        Err(e) => check("free space", Status::Fail, format!("{}: {e}", folder.display())),
    }
}

/// Kernel features a mount uses when it can: notes only.
fn kernel_notes() -> Vec<Check> {
    let uring = std::fs::read_to_string("/sys/module/fuse/parameters/enable_uring");
    let uring = match uring.as_deref().map(str::trim) {
        Ok("Y") => "FUSE over io_uring is on".to_string(),
        Ok(_) => {
            "FUSE over io_uring is off (as root: `echo Y > /sys/module/fuse/parameters/enable_uring`)".into()
        }
        Err(_) => "this kernel has no FUSE over io_uring (Linux 6.14+): requests go through /dev/fuse".into(),
    };
    // SAFETY: geteuid cannot fail and touches no memory.
    let root = unsafe { libc::geteuid() } == 0;
    let passthrough = if root {
        "kernel passthrough of byte-identical files: used where the kernel has it (Linux 6.9+)"
    } else {
        "kernel passthrough of byte-identical files needs root: files are served by the daemon"
    };
    vec![
        check("io_uring", Status::Note, uring),
        check("passthrough", Status::Note, passthrough),
    ]
}
