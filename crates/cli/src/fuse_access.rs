//! What a mount needs from the machine (`/dev/fuse`, and `fusermount3`
//! for users other than root), as this user finds it: what to do when a
//! mount failed, and `retagfs doctor`'s first checks.

use std::os::unix::fs::PermissionsExt;

/// What a mount needs from the machine, as this user finds it: what to do
/// when a mount failed ([`FuseAccess::hint`]).
pub(crate) struct FuseAccess {
    /// Opening `/dev/fuse` for reading and writing: why not, if it failed.
    pub(crate) device: Result<(), std::io::ErrorKind>,
    /// `/dev/fuse`'s permission bits, if it could be stat'ed.
    mode: Option<u32>,
    pub(crate) root: bool,
    pub(crate) fusermount: bool,
}

pub(crate) const DEV_FUSE: &str = "/dev/fuse";

impl FuseAccess {
    pub(crate) fn of_this_user() -> FuseAccess {
        let device = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(DEV_FUSE)
            .map(drop)
            .map_err(|e| e.kind());
        FuseAccess {
            device,
            mode: std::fs::metadata(DEV_FUSE)
                .ok()
                .map(|m| m.permissions().mode() & 0o777),
            // SAFETY: geteuid cannot fail and touches no memory.
            root: unsafe { libc::geteuid() } == 0,
            fusermount: fusermount_installed(),
        }
    }

    pub(crate) fn hint(&self) -> String {
        use std::io::ErrorKind::{NotFound, PermissionDenied};
        match self.device {
            Err(NotFound) => format!(
                "{DEV_FUSE} does not exist: load the fuse module (`modprobe fuse`), \
                 or in a container pass the device (`--device {DEV_FUSE}`)"
            ),
            Err(PermissionDenied) => {
                let mode = self.mode.map(|m| format!(", mode {m:o}")).unwrap_or_default();
                format!(
                    "this user cannot open {DEV_FUSE}{mode}: mount as root, or let users open it \
                     as Debian's fuse3 package does (`chmod 0666 {DEV_FUSE}`)"
                )
            }
            _ if !self.root && !self.fusermount => {
                "users other than root mount through fusermount3: install fuse3".into()
            }
            _ => "is fuse3 installed, and may this user mount there?".into(),
        }
    }
}

/// Whether fusermount3 (or the older fusermount) is where the mount looks
/// for it: in `PATH`, `/sbin` or `/bin`.
fn fusermount_installed() -> bool {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let dirs = std::env::split_paths(&path).chain(["/sbin".into(), "/bin".into()]);
    dirs.flat_map(|dir| ["fusermount3", "fusermount"].map(|name| dir.join(name)))
        .any(|bin| bin.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::ErrorKind;

    fn access(device: Result<(), ErrorKind>, root: bool, fusermount: bool) -> FuseAccess {
        FuseAccess {
            device,
            mode: Some(0o600),
            root,
            fusermount,
        }
    }

    #[test]
    fn a_missing_device_asks_for_the_module_or_the_containers_device() {
        let hint = access(Err(ErrorKind::NotFound), true, true).hint();
        assert!(
            hint.contains("modprobe fuse") && hint.contains("--device /dev/fuse"),
            "{hint}"
        );
    }

    #[test]
    fn a_device_closed_to_this_user_names_its_mode_and_how_to_open_it() {
        let hint = access(Err(ErrorKind::PermissionDenied), false, true).hint();
        assert!(hint.contains("/dev/fuse, mode 600"), "{hint}");
        assert!(
            hint.contains("chmod 0666 /dev/fuse") && hint.contains("mount as root"),
            "{hint}"
        );
    }

    #[test]
    fn a_user_without_fusermount3_is_told_to_install_fuse3() {
        assert!(access(Ok(()), false, false).hint().contains("install fuse3"));
        // Root mounts without it.
        assert!(!access(Ok(()), true, false).hint().contains("install fuse3"));
    }
}
