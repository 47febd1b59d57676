//! HTTP Basic authentication against an htpasswd file of bcrypt hashes
//! (`htpasswd -B`), re-read when it changes: every request, files,
//! listings, playlists and PROPFIND alike, names a user of the file and
//! that user's password, or is answered 401.
//!
//! bcrypt is slow by design, and a player asks for ranges of a track
//! many times: credentials once verified are remembered (by a digest,
//! never the password) until the file changes.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use base64::Engine;
use hyper::header::{HeaderMap, AUTHORIZATION};
use parking_lot::Mutex;
use sha2::{Digest, Sha256};

/// How often the file is looked at for a change.
const RECHECK: Duration = Duration::from_secs(1);
/// Verified credentials remembered at most (then forgotten all at once).
const REMEMBERED: usize = 4096;

pub(crate) const CHALLENGE: &str = "Basic realm=\"retagfs\", charset=\"UTF-8\"";

pub(crate) struct AuthFile {
    path: PathBuf,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// What the file was when read: its time, size and inode.
    stamp: Option<(SystemTime, u64, u64)>,
    checked_at: Option<Instant>,
    /// User name to bcrypt hash.
    users: HashMap<String, String>,
    /// Digests of `Authorization` values found right since the last read.
    verified: HashSet<[u8; 32]>,
}

impl AuthFile {
    /// Reads the file; an unreadable file, or one naming no user with a
    /// bcrypt hash, is an error (a server that lets no one in is a
    /// mistake to say at start).
    pub(crate) fn load(path: &Path) -> anyhow::Result<AuthFile> {
        let auth = AuthFile {
            path: path.to_path_buf(),
            state: Mutex::new(State::default()),
        };
        let mut state = auth.state.lock();
        auth.reread(&mut state)
            .map_err(|e| anyhow::anyhow!("--auth-file {}: {e}", path.display()))?;
        if state.users.is_empty() {
            anyhow::bail!(
                "--auth-file {}: no user with a bcrypt password; add one with `htpasswd -B {} USER`",
                path.display(),
                path.display()
            );
        }
        drop(state);
        Ok(auth)
    }

    /// Whether the request's credentials are a user's of the file.
    pub(crate) async fn allows(&self, headers: &HeaderMap) -> bool {
        let Some(value) = headers.get(AUTHORIZATION).map(|v| v.as_bytes()) else {
            return false;
        };
        let digest: [u8; 32] = Sha256::digest(value).into();
        let (user, password, hash) = {
            let mut state = self.state.lock();
            self.reread_if_changed(&mut state);
            if state.verified.contains(&digest) {
                return true;
            }
            let Some((user, password)) = basic_credentials(value) else {
                return false;
            };
            match state.users.get(&user) {
                Some(hash) => (user, password, hash.clone()),
                None => {
                    tracing::warn!("HTTP: 401: no user {user:?} in the auth file");
                    return false;
                }
            }
        };
        let verified =
            tokio::task::spawn_blocking(move || bcrypt::verify(password, &hash).unwrap_or(false)).await;
        if !matches!(verified, Ok(true)) {
            tracing::warn!("HTTP: 401: wrong password for {user:?}");
            return false;
        }
        let mut state = self.state.lock();
        if state.verified.len() >= REMEMBERED {
            state.verified.clear();
        }
        state.verified.insert(digest);
        true
    }

    /// Reads the file again at once (SIGHUP), changed or not.
    pub(crate) fn reread_now(&self) {
        let mut state = self.state.lock();
        state.checked_at = Some(Instant::now());
        self.reread_logged(&mut state);
    }

    fn reread_if_changed(&self, state: &mut State) {
        if state.checked_at.is_some_and(|at| at.elapsed() < RECHECK) {
            return;
        }
        state.checked_at = Some(Instant::now());
        if stamp_of(&self.path).ok() != state.stamp {
            self.reread_logged(state);
        }
    }

    fn reread_logged(&self, state: &mut State) {
        match self.reread(state) {
            Ok(()) => tracing::info!(
                "HTTP: {} re-read: {} user(s)",
                self.path.display(),
                state.users.len()
            ),
            Err(e) => tracing::warn!(
                "HTTP: {} cannot be read ({e}): every request is refused until it can",
                self.path.display()
            ),
        }
    }

    /// Reads the file anew, forgetting every verified credential. On an
    /// error no one is let in.
    fn reread(&self, state: &mut State) -> std::io::Result<()> {
        state.verified.clear();
        state.users.clear();
        state.stamp = None;
        let stamp = stamp_of(&self.path)?;
        let text = std::fs::read_to_string(&self.path)?;
        state.users = parse(&self.path, &text);
        state.stamp = Some(stamp);
        Ok(())
    }
}

fn stamp_of(path: &Path) -> std::io::Result<(SystemTime, u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path)?;
    Ok((meta.modified()?, meta.len(), meta.ino()))
}

/// `user:hash` lines; blank lines and `#` comments skipped. A line whose
/// hash is not bcrypt is skipped with a warning naming it.
fn parse(path: &Path, text: &str) -> HashMap<String, String> {
    let mut users = HashMap::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        match line.split_once(':') {
            Some((user, hash)) if is_bcrypt(hash) && !user.is_empty() => {
                users.insert(user.to_string(), hash.to_string());
            }
            _ => tracing::warn!(
                "{}:{}: not `user:bcrypt-hash` (make it with `htpasswd -B`): skipped",
                path.display(),
                n + 1
            ),
        }
    }
    users
}

fn is_bcrypt(hash: &str) -> bool {
    ["$2a$", "$2b$", "$2x$", "$2y$"]
        .iter()
        .any(|prefix| hash.starts_with(prefix))
}

/// The user and password of a `Basic` `Authorization` value.
fn basic_credentials(value: &[u8]) -> Option<(String, String)> {
    let text = std::str::from_utf8(value).ok()?;
    let (scheme, encoded) = text.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let decoded = String::from_utf8(decoded).ok()?;
    let (user, password) = decoded.split_once(':')?;
    Some((user.to_string(), password.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basic_credentials_are_read_and_anything_else_is_not() {
        let v = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode("ann:p:w ü")
        );
        assert_eq!(
            basic_credentials(v.as_bytes()),
            Some(("ann".into(), "p:w ü".into()))
        );
        assert_eq!(basic_credentials(b"Bearer abc"), None);
        assert_eq!(basic_credentials(b"Basic !!!"), None);
        assert_eq!(basic_credentials(b"Basic"), None);
        assert_eq!(basic_credentials(&[0xff, 0xfe]), None);
    }

    #[test]
    fn only_bcrypt_lines_are_users() {
        let text = "# users\nann:$2y$05$abcdefghijklmnopqrstuuQ\nbob:$apr1$xyz\n:$2y$05$x\nbroken\n\n";
        let users = parse(Path::new("f"), text);
        assert_eq!(users.len(), 1);
        assert!(users.contains_key("ann"));
    }
}
