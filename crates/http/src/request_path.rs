//! A request's path, matched against the view's tree: percent-decoded one
//! component at a time, so that an encoded `/` or NUL can never split or
//! end a name, and only names the tree holds are reached (no `.`, `..`,
//! or anything outside the view). A name is matched exactly first, then
//! in Unicode normalization form C when exactly one name of the folder
//! matches so (a client that sends NFD where the tree holds NFC, or the
//! reverse).

use percent_encoding::percent_decode_str;
use retagfs_core::view::tree::{Tree, ROOT_INO};
use unicode_normalization::UnicodeNormalization;

/// The longest request path taken (a path of the view is far shorter:
/// names are at most 255 bytes).
const MAX_PATH: usize = 8192;

/// Why a request path names nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathError {
    /// Not a path any view could hold: answered 400.
    Invalid(&'static str),
    /// A path the view does not hold: answered 404.
    NotFound,
}

/// The node a request path names, and whether the path ends with `/`.
pub fn resolve(tree: &Tree, path: &str) -> Result<(u64, bool), PathError> {
    if path.len() > MAX_PATH {
        return Err(PathError::Invalid("request path too long"));
    }
    let rest = path
        .strip_prefix('/')
        .ok_or(PathError::Invalid("request path must start with /"))?;
    let ends_with_slash = rest.is_empty() || rest.ends_with('/');
    let mut ino = ROOT_INO;
    let components: Vec<&str> = rest.split('/').collect();
    for (i, raw) in components.iter().enumerate() {
        let last = i + 1 == components.len();
        if raw.is_empty() {
            if last {
                break;
            }
            return Err(PathError::Invalid("empty path component"));
        }
        let name = component(raw)?;
        ino = tree
            .child(ino, &name)
            .or_else(|| child_by_normal_form(tree, ino, &name))
            .ok_or(PathError::NotFound)?;
    }
    Ok((ino, ends_with_slash))
}

/// The one child of `dir` whose name equals `name` in normalization form
/// C, if exactly one does.
fn child_by_normal_form(tree: &Tree, dir: u64, name: &str) -> Option<u64> {
    let wanted: String = name.nfc().collect();
    let mut matches = tree
        .listing(dir, 2)
        .ok()?
        .filter(|(_, child, _)| child.nfc().eq(wanted.chars()))
        .map(|(ino, _, _)| ino);
    let first = matches.next()?;
    matches.next().is_none().then_some(first)
}

/// One decoded path component, refused if it could step out of its folder.
fn component(raw: &str) -> Result<String, PathError> {
    let name = percent_decode_str(raw)
        .decode_utf8()
        .map_err(|_| PathError::Invalid("path component is not UTF-8"))?;
    if name.contains(['/', '\0']) {
        return Err(PathError::Invalid("encoded / or NUL in a path component"));
    }
    if name == "." || name == ".." {
        return Err(PathError::Invalid(". or .. in the path"));
    }
    Ok(name.into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use retagfs_core::view::tree::{FileEntry, NameExtension, Placement};
    use retagfs_store::Format;

    fn tree_of(paths: &[&str]) -> Tree {
        let mut tree = Tree::new();
        for (i, p) in paths.iter().enumerate() {
            tree.place(Placement {
                path: p.to_string(),
                file: FileEntry {
                    track_id: i as i64 + 1,
                    format: Format::Flac,
                    name_extension: NameExtension::OfFormat,
                    size: 10,
                    mtime_ns: 0,
                    content_version: 1,
                    cover: None,
                },
            });
        }
        tree
    }

    #[test]
    fn names_that_need_escaping_resolve_and_traversal_never_does() {
        let tree = tree_of(&["A b/Caf\u{e9} #1?/100% sure"]);
        let (dir, slash) = resolve(&tree, "/A%20b/Caf%C3%A9%20%231%3F/").unwrap();
        assert!(slash);
        let (file, _) = resolve(&tree, "/A%20b/Caf%C3%A9%20%231%3F/100%25%20sure.flac").unwrap();
        assert_ne!(dir, file);
        assert_eq!(resolve(&tree, "/").unwrap(), (ROOT_INO, true));
        for bad in [
            "/..",
            "/A%20b/..",
            "/%2e%2e",
            "/A%20b%2F..",
            "/a%00b",
            "//etc",
            "relative",
        ] {
            assert!(matches!(resolve(&tree, bad), Err(PathError::Invalid(_))), "{bad}");
        }
        assert_eq!(resolve(&tree, "/etc/passwd"), Err(PathError::NotFound));
        // NFD in the request, NFC in the tree.
        assert_eq!(resolve(&tree, "/A%20b/Cafe%CC%81%20%231%3F/").unwrap().0, dir);
        assert!(resolve(&tree, &format!("/{}", "a".repeat(MAX_PATH))).is_err());
    }
}
