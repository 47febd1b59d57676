//! One request to one answer: the method, the path in the view's tree,
//! then a file or a folder.

use std::io;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Empty, Full};
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use retagfs_core::view::tree::Entry;
use retagfs_core::View;

use crate::open_files::OpenFiles;
use crate::request_path::{resolve, PathError};
use crate::{file_response, listing};

/// What every request is answered from.
pub(crate) struct Shared {
    pub(crate) view: Arc<View>,
    pub(crate) open_files: OpenFiles,
}

pub(crate) type ReplyBody = BoxBody<Bytes, io::Error>;
pub(crate) type Reply = Response<ReplyBody>;

/// What the server allows: it only reads.
const ALLOW: &str = "GET, HEAD, OPTIONS";

pub(crate) fn empty() -> ReplyBody {
    Empty::new().map_err(|never| match never {}).boxed()
}

pub(crate) fn full(bytes: impl Into<Bytes>) -> ReplyBody {
    Full::new(bytes.into()).map_err(|never| match never {}).boxed()
}

/// A short text answer.
pub(crate) fn plain(status: StatusCode, text: &str) -> Reply {
    let mut response = Response::new(full(format!("{text}\n")));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// What a request path names, read from the tree under its lock.
enum Found {
    File(u64, retagfs_core::view::tree::FileEntry),
    Folder(u64),
    /// A folder asked for without its closing `/`: relative links in its
    /// listing need it.
    FolderWithoutSlash,
}

pub(crate) async fn handle<B>(shared: Arc<Shared>, req: Request<B>) -> Reply {
    let view = &shared.view;
    let head = match *req.method() {
        Method::GET => false,
        Method::HEAD => true,
        Method::OPTIONS => return allow(StatusCode::NO_CONTENT),
        _ => return allow(StatusCode::METHOD_NOT_ALLOWED),
    };
    let path = req.uri().path().to_string();
    let found = {
        let tree = view.tree();
        match resolve(&tree, &path) {
            Err(PathError::Invalid(why)) => {
                tracing::info!("HTTP: 400 for {path:?}: {why}");
                return plain(StatusCode::BAD_REQUEST, why);
            }
            Err(PathError::NotFound) => return plain(StatusCode::NOT_FOUND, "not found"),
            Ok((ino, slash)) => match tree.get(ino).map(|n| &n.entry) {
                Some(Entry::File(file)) if !slash => Found::File(ino, file.clone()),
                Some(Entry::File(_)) => return plain(StatusCode::NOT_FOUND, "not found"),
                Some(Entry::Dir { .. }) if slash => Found::Folder(ino),
                Some(Entry::Dir { .. }) => Found::FolderWithoutSlash,
                None => return plain(StatusCode::NOT_FOUND, "not found"),
            },
        }
    };
    match found {
        Found::File(ino, entry) => file_response::respond(&shared, ino, entry, req.headers(), head).await,
        Found::Folder(ino) => {
            let mut response = listing::respond(view, ino, &path, req.uri().query(), req.headers());
            if head {
                *response.body_mut() = empty();
            }
            response
        }
        Found::FolderWithoutSlash => {
            let mut response = plain(StatusCode::MOVED_PERMANENTLY, "a folder: its path ends with /");
            if let Ok(location) = HeaderValue::from_str(&format!("{path}/")) {
                response.headers_mut().insert(header::LOCATION, location);
            }
            response
        }
    }
}

fn allow(status: StatusCode) -> Reply {
    let mut response = if status == StatusCode::NO_CONTENT {
        let mut r = Response::new(empty());
        *r.status_mut() = status;
        r
    } else {
        plain(status, "this server only reads: GET, HEAD and OPTIONS")
    };
    response
        .headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static(ALLOW));
    response
}
