//! `s3://BUCKET/KEY`: where a remote backing file lives. The key is plain
//! UTF-8, not percent-encoded, and the URL carries no endpoint and no
//! credentials: those come from the environment of whoever reads it.

use std::fmt;

const SCHEME: &str = "s3://";

/// A bucket and a key (or a key prefix, for a scan's root).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectUrl {
    pub bucket: String,
    pub key: String,
}

/// Whether a backing path names an object rather than a local file.
pub fn is_remote_path(path: &str) -> bool {
    path.starts_with(SCHEME)
}

impl ObjectUrl {
    /// Parses `s3://BUCKET[/KEY]`; the error says what is wrong.
    pub fn parse(text: &str) -> Result<ObjectUrl, String> {
        let rest = text
            .strip_prefix(SCHEME)
            .ok_or_else(|| format!("{text:?} does not start with {SCHEME}"))?;
        let (bucket, key) = rest.split_once('/').unwrap_or((rest, ""));
        if !valid_bucket(bucket) {
            return Err(format!(
                "{text:?}: {bucket:?} is not a bucket name (3-63 lowercase letters, digits, '.' and '-')"
            ));
        }
        Ok(ObjectUrl {
            bucket: bucket.to_string(),
            key: key.to_string(),
        })
    }

    /// The object `name` under this prefix (a folder-like prefix gets its
    /// `/`).
    pub fn child(&self, name: &str) -> ObjectUrl {
        let key = if self.key.is_empty() || self.key.ends_with('/') {
            format!("{}{name}", self.key)
        } else {
            format!("{}/{name}", self.key)
        };
        ObjectUrl {
            bucket: self.bucket.clone(),
            key,
        }
    }

    /// The prefix objects under this root share: the key with a trailing
    /// `/` (a root names a folder, so `s3://b/Jazz` holds `Jazz/x.flac`,
    /// not `Jazzy.flac`), or nothing for a whole bucket.
    pub fn folder_prefix(&self) -> String {
        if self.key.is_empty() || self.key.ends_with('/') {
            self.key.clone()
        } else {
            format!("{}/", self.key)
        }
    }

    /// Whether `path` (a backing path) is this root or below it.
    pub fn holds(&self, path: &str) -> bool {
        match ObjectUrl::parse(path) {
            Ok(url) => url.bucket == self.bucket && url.key.starts_with(&self.folder_prefix()),
            Err(_) => false,
        }
    }
}

impl fmt::Display for ObjectUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{SCHEME}{}/{}", self.bucket, self.key)
    }
}

/// S3's rules for new buckets, loosened to what self-hosted servers
/// accept (underscores, upper case are refused by all of them).
fn valid_bucket(name: &str) -> bool {
    (3..=63).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_and_print_back_with_plain_utf8_keys() {
        let url = ObjectUrl::parse("s3://music/Ünder Wörld/01 a#b?c%20.flac").unwrap();
        assert_eq!(url.bucket, "music");
        assert_eq!(url.key, "Ünder Wörld/01 a#b?c%20.flac");
        assert_eq!(url.to_string(), "s3://music/Ünder Wörld/01 a#b?c%20.flac");
        assert_eq!(ObjectUrl::parse("s3://music").unwrap().key, "");
    }

    #[test]
    fn bad_urls_say_why() {
        assert!(ObjectUrl::parse("/local/path").unwrap_err().contains("s3://"));
        assert!(ObjectUrl::parse("s3://A_B/x").unwrap_err().contains("bucket"));
        assert!(ObjectUrl::parse("s3:///x").unwrap_err().contains("bucket"));
        // Keys may hold any character, as file names may.
        assert_eq!(ObjectUrl::parse("s3://ok-bucket/a\nb").unwrap().key, "a\nb");
    }

    #[test]
    fn a_root_holds_its_folder_only() {
        let root = ObjectUrl::parse("s3://music/Jazz").unwrap();
        assert!(root.holds("s3://music/Jazz/a.flac"));
        assert!(!root.holds("s3://music/Jazzy.flac"));
        assert!(!root.holds("s3://other/Jazz/a.flac"));
        assert!(ObjectUrl::parse("s3://music").unwrap().holds("s3://music/x.mp3"));
        assert_eq!(root.child("a.flac").to_string(), "s3://music/Jazz/a.flac");
    }
}
