//! `retagfs mount`.

use std::path::Path;
use std::sync::Arc;

use anyhow::{bail, Context};
use retagfs_core::{Mode, View};
use retagfs_formats::Id3Version;
use retagfs_fuse::{Mount, MountConfig, Ownership, Unmounted, Unmounter};
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};

use crate::args::{IoUringArg, MountArgs};
use crate::fuse_access::FuseAccess;
use crate::UsageError;

/// The fuse module parameter that lets FUSE servers ask for io_uring.
const ENABLE_URING: &str = "/sys/module/fuse/parameters/enable_uring";

/// Whether to ask the kernel for io_uring. `auto` and `on` first make sure
/// the kernel offers it (as root, by turning the module parameter on:
/// it only lets FUSE servers ask for io_uring, and none does unless built
/// to); `auto` falls back to /dev/fuse where that cannot be done, `on`
/// fails and says why.
fn io_uring_wanted(arg: IoUringArg) -> anyhow::Result<bool> {
    if let IoUringArg::Off = arg {
        return Ok(false);
    }
    match offer_io_uring() {
        Ok(true) => eprintln!(
            "retagfs: turned on FUSE over io_uring in this kernel ({ENABLE_URING}=Y); \
             mount with --io-uring off to leave it off"
        ),
        Ok(false) => {}
        Err(e) if matches!(arg, IoUringArg::Auto) => {
            tracing::info!("requests through /dev/fuse: {e:#}");
        }
        Err(e) => return Err(e.context("--io-uring on")),
    }
    Ok(true)
}

/// Makes the kernel offer FUSE over io_uring; true when this turned it on.
fn offer_io_uring() -> anyhow::Result<bool> {
    let current = std::fs::read_to_string(ENABLE_URING).with_context(|| {
        format!("this kernel has no FUSE over io_uring ({ENABLE_URING} is missing; it needs Linux 6.14+)")
    })?;
    if current.trim() == "Y" {
        return Ok(false);
    }
    std::fs::write(ENABLE_URING, "Y").with_context(|| {
        format!("turning on {ENABLE_URING} needs root; run as root, or have it set once with `echo Y | sudo tee {ENABLE_URING}`")
    })?;
    Ok(true)
}

/// Paths shown by `--dry-run`.
const SAMPLE: usize = 20;

/// The mountpoint must be an empty directory; a stale FUSE mount, and a
/// mount in use there, are recognised and explained.
fn check_mountpoint(p: &Path) -> anyhow::Result<()> {
    match std::fs::read_dir(p) {
        Ok(mut entries) => {
            if entries.next().is_none() {
                // An empty mountpoint may well be a mount itself (a
                // container's bind-mounted volume).
                return Ok(());
            }
            if let Some(what) = retagfs_fuse::mounted::mounted_at(p) {
                bail!(
                    "mountpoint {} is in use: {what} is mounted there; unmount it first (`fusermount3 -u {}` for a FUSE mount) or mount somewhere else",
                    p.display(),
                    p.display()
                );
            }
            bail!("mountpoint {} is not empty: mount on an empty directory", p.display());
        }
        // ECONNABORTED: a server that took requests through io_uring died.
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOTCONN | libc::ECONNABORTED)) => bail!(
            "mountpoint {} is a stale mount left by a process that died; clear it with `fusermount3 -u {}` (or `umount {}` as root)",
            p.display(),
            p.display(),
            p.display()
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            bail!("mountpoint {} does not exist: create it with `mkdir -p {}`", p.display(), p.display())
        }
        Err(e) => Err(e).with_context(|| format!("mountpoint {} is not a readable directory", p.display())),
    }
}

/// Owner, group and modes of the served entries, names resolved to ids.
fn ownership(a: &MountArgs) -> anyhow::Result<Ownership> {
    use nix::unistd::{Group, User};
    let mut own = Ownership::of_current_user();
    if let Some(owner) = &a.owner {
        own.uid = numeric_or(owner, "--owner", "user", |n| {
            Ok(User::from_name(n)?.map(|u| u.uid.as_raw()))
        })?;
    }
    if let Some(group) = &a.group {
        own.gid = numeric_or(group, "--group", "group", |n| {
            Ok(Group::from_name(n)?.map(|g| g.gid.as_raw()))
        })?;
    }
    own.file_mode = a.file_mode;
    own.dir_mode = a.dir_mode;
    Ok(own)
}

/// A numeric id as given, or the id `lookup` finds for a name.
fn numeric_or(
    value: &str,
    option: &str,
    what: &str,
    lookup: impl Fn(&str) -> nix::Result<Option<u32>>,
) -> anyhow::Result<u32> {
    if let Ok(id) = value.parse() {
        return Ok(id);
    }
    lookup(value)?.ok_or_else(|| UsageError(format!("{option} {value}: no such {what}")).into())
}

/// Every open served file holds its backing file open: allow as many as
/// the hard limit lets this process have (the soft limit is often 1024).
fn raise_open_file_limit() {
    // SAFETY: getrlimit/setrlimit only read and write the struct passed.
    unsafe {
        let mut limit = std::mem::zeroed::<libc::rlimit>();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && limit.rlim_cur < limit.rlim_max {
            limit.rlim_cur = limit.rlim_max;
            if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                tracing::debug!("could not raise the open file limit");
            }
        }
    }
}

pub fn run(a: MountArgs) -> anyhow::Result<()> {
    let mode: Mode = a.mode.into();
    a.remote.apply();
    let mut config = a.view.config(mode)?;
    config.synthesis.id3_version = match a.id3v2_version {
        3 => Id3Version::V23,
        _ => Id3Version::V24,
    };
    crate::check_has_tracks(&a.db)?;
    let ownership = ownership(&a)?;
    if !a.dry_run {
        check_mountpoint(&a.mountpoint)?;
        a.metrics.start()?;
    }
    let lib = Arc::new(View::load(&a.db, config)?);
    crate::release_free_memory();
    lib.set_read_ahead(a.read_ahead.into());
    lib.searches().set_enabled(!a.no_search);
    if a.dry_run {
        let tree = lib.tree();
        for path in tree.file_paths().iter().take(SAMPLE) {
            println!("{path}");
        }
        println!("{} files, {} directories", tree.file_count(), tree.dir_count());
        return Ok(());
    }
    raise_open_file_limit();
    let files = lib.tree().file_count();
    let mount_config = MountConfig {
        threads: a.threads.unwrap_or_else(|| default_threads(&a.db)),
        allow_other: a.allow_other,
        // Registering a backing file with the kernel needs CAP_SYS_ADMIN.
        // SAFETY: geteuid cannot fail and touches no memory.
        kernel_passthrough: !a.no_kernel_passthrough && unsafe { libc::geteuid() } == 0,
        io_uring: io_uring_wanted(a.io_uring)?,
        ownership,
    };
    let http_view = lib.clone();
    // Caught from before the kernel mounts: a signal while the mount
    // starts (its threads, the store's watcher) unmounts once it is up,
    // instead of killing the daemon and leaving a dead mount behind.
    let signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP])?;
    let mut mount = Mount::new(lib, &a.mountpoint, &mount_config).with_context(|| {
        let hint = FuseAccess::of_this_user().hint();
        format!("mounting on {} ({hint})", a.mountpoint.display())
    })?;
    if let Some(listen) = a.serve {
        let options = retagfs_http::HttpOptions::new(listen);
        crate::serve::warn_if_exposed(&options);
        retagfs_http::spawn(http_view, options)?;
    }
    let unmounter = mount.unmounter();
    let mountpoint = a.mountpoint.clone();
    std::thread::spawn(move || stop_on_signals(signals, unmounter, &mountpoint));
    eprintln!(
        "retagfs: serving {files} files at {} (Ctrl-C to unmount)",
        a.mountpoint.display()
    );
    mount.run().context("serving the mount")?;
    eprintln!("retagfs: unmounted {}", a.mountpoint.display());
    Ok(())
}

/// The first signal unmounts (detaching the mount while files are open, so
/// that they are served until closed); a second one stops at once, and
/// reads of files still open then fail with ENOTCONN.
fn stop_on_signals(mut signals: signal_hook::iterator::Signals, mut unmounter: Unmounter, mountpoint: &Path) {
    let mut signals = signals.forever();
    let Some(sig) = signals.next() else { return };
    tracing::info!("signal {sig}: unmounting");
    match unmounter.unmount() {
        Ok(Unmounted::Done) => return,
        Ok(Unmounted::Detached) => eprintln!(
            "retagfs: files are still open in {}: it is detached and serves them until they are closed; \
             signal again to stop now",
            mountpoint.display()
        ),
        Err(e) => eprintln!(
            "retagfs: unmounting {} failed: {e}; signal again to stop now",
            mountpoint.display()
        ),
    }
    if let Some(sig) = signals.next() {
        eprintln!("retagfs: signal {sig} again: stopping now");
        // Best effort: a mount left behind would answer ENOTCONN until
        // unmounted by hand.
        let _ = unmounter.detach();
        std::process::exit(0);
    }
}

/// Threads answering the kernel when not told: more when reads may wait
/// on a remote, so that a remote that stopped answering holds some of them
/// (each until its read's deadline) and leaves others for listings and
/// local files.
fn default_threads(db: &Path) -> usize {
    let remote = crate::open_existing(db).and_then(|s| Ok(s.has_remote_tracks()?));
    if remote.unwrap_or(false) {
        32
    } else {
        8
    }
}
