//! One request to one answer: the method, the path in the view's tree,
//! then a file, a folder, or (PROPFIND) the WebDAV properties of either.

use std::io;
use std::sync::Arc;

use bytes::{Buf, Bytes};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Body;
use hyper::header::{self, HeaderValue};
use hyper::{Request, Response, StatusCode};
use retagfs_core::view::served_file::ServedFile;
use retagfs_core::view::tree::Entry;
use retagfs_core::View;

use crate::auth::{AuthFile, CHALLENGE};
use crate::open_files::OpenFiles;
use crate::request_path::{resolve, PathError};
use crate::webdav::{WebDav, DAV_CLASSES};
use crate::{file_response, listing};

/// What every request is answered from.
pub(crate) struct Shared {
    pub(crate) view: Arc<View>,
    pub(crate) open_files: OpenFiles,
    pub(crate) webdav: WebDav,
    pub(crate) auth: Option<AuthFile>,
}

impl Shared {
    pub(crate) fn new(view: Arc<View>, auth: Option<AuthFile>) -> Shared {
        Shared {
            webdav: WebDav::new(view.clone()),
            view,
            open_files: OpenFiles::default(),
            auth,
        }
    }
}

pub(crate) type ReplyBody = UnsyncBoxBody<Bytes, io::Error>;
pub(crate) type Reply = Response<ReplyBody>;

/// What the server allows: it only reads.
const ALLOW: &str = "OPTIONS, GET, HEAD, PROPFIND";

pub(crate) fn empty() -> ReplyBody {
    Empty::new().map_err(|never| match never {}).boxed_unsync()
}

pub(crate) fn full(bytes: impl Into<Bytes>) -> ReplyBody {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed_unsync()
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
    File(u64, ServedFile),
    Folder(u64),
    /// A folder asked for without its closing `/`: relative links in its
    /// listing need it.
    FolderWithoutSlash,
    /// A node whose WebDAV properties are asked for.
    Properties,
}

/// How a request reads the view.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Reading {
    Get,
    Head,
    PropFind,
}

pub(crate) async fn handle<B>(shared: Arc<Shared>, req: Request<B>) -> Reply
where
    B: Body + Send + 'static,
    B::Data: Buf + Send + 'static,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    if let Some(auth) = &shared.auth {
        if !auth.allows(req.headers()).await {
            return unauthorized();
        }
    }
    let view = &shared.view;
    let reading = match req.method().as_str() {
        "GET" => Reading::Get,
        "HEAD" => Reading::Head,
        "PROPFIND" => Reading::PropFind,
        "OPTIONS" => return allow(StatusCode::OK),
        _ => return allow(StatusCode::METHOD_NOT_ALLOWED),
    };
    let head = reading == Reading::Head;
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
                None => return plain(StatusCode::NOT_FOUND, "not found"),
                Some(Entry::Dir { .. }) if reading == Reading::PropFind => Found::Properties,
                Some(Entry::Dir { .. }) if slash => Found::Folder(ino),
                Some(Entry::Dir { .. }) => Found::FolderWithoutSlash,
                // A file's path ends with no `/`.
                Some(_) if slash => return plain(StatusCode::NOT_FOUND, "not found"),
                Some(_) if reading == Reading::PropFind => Found::Properties,
                Some(entry) => match view.served_file_of(entry) {
                    Some(served) => Found::File(ino, served),
                    None => return plain(StatusCode::NOT_FOUND, "not found"),
                },
            },
        }
    };
    match found {
        Found::Properties => shared.webdav.propfind(req).await,
        Found::File(ino, entry) => {
            let headers = req.into_parts().0.headers;
            file_response::respond(shared.clone(), ino, entry, headers, head).await
        }
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

fn unauthorized() -> Reply {
    let mut response = plain(
        StatusCode::UNAUTHORIZED,
        "a user name and password of the server's --auth-file",
    );
    response
        .headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static(CHALLENGE));
    response
}

/// OPTIONS (`status` 200), or a method that would write (405): what the
/// server allows, and that it speaks WebDAV class 1, read-only.
fn allow(status: StatusCode) -> Reply {
    let mut response = if status == StatusCode::OK {
        let mut r = Response::new(empty());
        r.headers_mut()
            .insert(header::CONTENT_LENGTH, HeaderValue::from_static("0"));
        r
    } else {
        let mut r = plain(status, "this server only reads: OPTIONS, GET, HEAD and PROPFIND");
        *r.status_mut() = status;
        r
    };
    let headers = response.headers_mut();
    headers.insert(header::ALLOW, HeaderValue::from_static(ALLOW));
    headers.insert("dav", HeaderValue::from_static(DAV_CLASSES));
    // Windows' WebDAV redirector looks for it before it speaks WebDAV.
    headers.insert("ms-author-via", HeaderValue::from_static("DAV"));
    response
}
