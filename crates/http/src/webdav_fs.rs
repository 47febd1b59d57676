//! The view's tree as a read-only filesystem for dav-server: names, sizes
//! and times straight from the tree, as the FUSE mount's `readdir` and
//! `stat` give them, without opening a file. Only PROPFIND reaches it
//! (GET and HEAD are [`crate::file_response`]'s, with our ranges and
//! validators), so opening a file or writing is refused.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use dav_server::davpath::DavPath;
use dav_server::fs::{
    DavDirEntry, DavFile, DavFileSystem, DavMetaData, DavProp, FsError, FsFuture, FsResult, FsStream,
    OpenOptions, ReadDirMeta,
};
use futures_util::{future, stream, FutureExt};
use retagfs_core::view::served_file::ServedFile;
use retagfs_core::view::tree::Tree;
use retagfs_core::View;

use crate::conditional::entity_tag;
use crate::request_path::resolve;

#[derive(Clone)]
pub(crate) struct ViewFs {
    view: Arc<View>,
    /// A folder's time when its listing has not changed since: the
    /// server's start, as a mount's folders take the mount's.
    started: SystemTime,
}

impl ViewFs {
    pub(crate) fn new(view: Arc<View>, started: SystemTime) -> ViewFs {
        ViewFs { view, started }
    }

    fn attributes(&self, tree: &Tree, ino: u64) -> FsResult<Attributes> {
        let entry = &tree.get(ino).ok_or(FsError::NotFound)?.entry;
        match self.view.served_file_of(entry) {
            Some(file) => Ok(Attributes::File(file)),
            None => Ok(Attributes::Folder(
                tree.listing_changed_at(ino).unwrap_or(self.started),
            )),
        }
    }

    /// The node `path` names; dav-server hands paths decoded, so they are
    /// encoded again for the one resolver requests go through.
    fn find(&self, tree: &Tree, path: &DavPath) -> FsResult<u64> {
        resolve(tree, &path.as_url_string())
            .map(|(ino, _)| ino)
            .map_err(|_| FsError::NotFound)
    }
}

/// What PROPFIND says of one node.
#[derive(Debug, Clone)]
enum Attributes {
    File(ServedFile),
    /// A folder, with the time its listing last changed.
    Folder(SystemTime),
}

impl DavMetaData for Attributes {
    fn len(&self) -> u64 {
        match self {
            Attributes::File(file) => file.size,
            Attributes::Folder(_) => 0,
        }
    }

    fn modified(&self) -> FsResult<SystemTime> {
        Ok(match self {
            Attributes::File(file) => time_of_ns(file.mtime_ns),
            Attributes::Folder(changed) => *changed,
        })
    }

    fn is_dir(&self) -> bool {
        matches!(self, Attributes::Folder(_))
    }

    /// The same tag GET answers with, quoted as `getetag` wants it
    /// (dav-server writes this value as it is).
    fn etag(&self) -> Option<String> {
        match self {
            Attributes::File(file) => Some(entity_tag(file.id, file.version)),
            Attributes::Folder(_) => None,
        }
    }

    /// The mount's ctime is its mtime; `creationdate` is taken from it.
    fn status_changed(&self) -> FsResult<SystemTime> {
        self.modified()
    }

    fn executable(&self) -> FsResult<bool> {
        Ok(false)
    }
}

fn time_of_ns(ns: i64) -> SystemTime {
    match u64::try_from(ns) {
        Ok(ns) => UNIX_EPOCH + Duration::from_nanos(ns),
        Err(_) => UNIX_EPOCH,
    }
}

struct Child {
    name: String,
    attributes: Attributes,
}

impl DavDirEntry for Child {
    fn name(&self) -> Vec<u8> {
        self.name.as_bytes().to_vec()
    }

    fn metadata(&self) -> FsFuture<'_, Box<dyn DavMetaData>> {
        future::ready(Ok(Box::new(self.attributes.clone()) as Box<dyn DavMetaData>)).boxed()
    }
}

impl DavFileSystem for ViewFs {
    fn open<'a>(&'a self, _path: &'a DavPath, _options: OpenOptions) -> FsFuture<'a, Box<dyn DavFile>> {
        future::ready(Err(FsError::Forbidden)).boxed()
    }

    fn read_dir<'a>(
        &'a self,
        path: &'a DavPath,
        _meta: ReadDirMeta,
    ) -> FsFuture<'a, FsStream<Box<dyn DavDirEntry>>> {
        let children = self.children(path);
        future::ready(children.map(|children| {
            let entries = children
                .into_iter()
                .map(|child| Ok(Box::new(child) as Box<dyn DavDirEntry>));
            Box::pin(stream::iter(entries)) as FsStream<Box<dyn DavDirEntry>>
        }))
        .boxed()
    }

    fn metadata<'a>(&'a self, path: &'a DavPath) -> FsFuture<'a, Box<dyn DavMetaData>> {
        let tree = self.view.tree();
        let found = self
            .find(&tree, path)
            .and_then(|ino| self.attributes(&tree, ino))
            .map(|a| Box::new(a) as Box<dyn DavMetaData>);
        future::ready(found).boxed()
    }

    /// `displayname` is the only property beyond the live ones dav-server
    /// computes, and dav-server takes it from the filesystem's list of
    /// properties, which it adds to every answer (asking for it alone as
    /// well would name it twice).
    fn have_props<'a>(&'a self, _path: &'a DavPath) -> Pin<Box<dyn Future<Output = bool> + Send + 'a>> {
        future::ready(true).boxed()
    }

    fn get_props<'a>(&'a self, path: &'a DavPath, _do_content: bool) -> FsFuture<'a, Vec<DavProp>> {
        future::ready(Ok(vec![display_name(path)])).boxed()
    }
}

impl ViewFs {
    /// A folder's entries in the tree's order, each with its attributes,
    /// read under one lock.
    fn children(&self, path: &DavPath) -> FsResult<Vec<Child>> {
        let tree = self.view.tree();
        let dir = self.find(&tree, path)?;
        let listing = tree.listing(dir, 2).map_err(|_| FsError::Forbidden)?;
        Ok(listing
            .filter_map(|(ino, name, _)| {
                let attributes = self.attributes(&tree, ino).ok()?;
                Some(Child {
                    name: name.to_string(),
                    attributes,
                })
            })
            .collect())
    }
}

/// `displayname`: the node's name as the tree holds it (empty for the
/// root).
fn display_name(path: &DavPath) -> DavProp {
    let name = String::from_utf8_lossy(path.file_name_bytes());
    DavProp::new("displayname".into(), "D".into(), "DAV:".into(), xml_escape(&name))
}

fn xml_escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
