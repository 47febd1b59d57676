//! WebDAV (RFC 4918) class 1, read-only, on the HTTP port: PROPFIND of
//! the view's tree for file managers and players that browse (Finder,
//! Explorer, davfs2, rclone, Kodi). dav-server reads the request's XML and
//! writes the multistatus over [`ViewFs`]; what it would answer otherwise
//! than a read-only class 1 server should is answered here: `Depth`
//! (only 0 and 1, infinity and a missing `Depth` refused with 403), and
//! OPTIONS (`DAV: 1`, never the locking classes) in [`crate::route`].

use std::sync::Arc;
use std::time::SystemTime;

use bytes::{Buf, Bytes};
use dav_server::{DavHandler, DavMethod, DavMethodSet};
use http_body_util::BodyExt;
use hyper::body::Body;
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::{Request, Response, StatusCode};
use retagfs_core::View;

use crate::route::{full, plain, Reply};
use crate::webdav_fs::ViewFs;

/// The `DAV` header of OPTIONS: class 1 alone, since nothing is locked.
pub(crate) const DAV_CLASSES: &str = "1";

pub(crate) struct WebDav {
    handler: DavHandler,
}

impl WebDav {
    pub(crate) fn new(view: Arc<View>) -> WebDav {
        let mut propfind_only = DavMethodSet::none();
        propfind_only.add(DavMethod::PropFind);
        let handler = DavHandler::builder()
            .filesystem(Box::new(ViewFs::new(view, SystemTime::now())))
            .methods(propfind_only)
            .build_handler();
        WebDav { handler }
    }

    /// Answers a PROPFIND whose path is known to name a node.
    pub(crate) async fn propfind<B>(&self, req: Request<B>) -> Reply
    where
        B: Body + Send + 'static,
        B::Data: Buf + Send + 'static,
        B::Error: std::error::Error + Send + Sync + 'static,
    {
        if let Some(refused) = refused_depth(req.headers()) {
            return refused;
        }
        // The multistatus streams as dav-server writes it, entry by entry.
        self.handler.handle(req).await.map(|body| body.boxed_unsync())
    }
}

/// Only `Depth: 0` and `Depth: 1`: a whole tree in one answer
/// (`infinity`, which a missing `Depth` means) is refused as RFC 4918
/// allows, with the precondition it names.
fn refused_depth(headers: &HeaderMap) -> Option<Reply> {
    match headers.get("depth").map(|v| v.as_bytes()) {
        Some(b"0") | Some(b"1") => None,
        Some(v) if v.eq_ignore_ascii_case(b"infinity") => Some(infinite_depth_refused()),
        None => Some(infinite_depth_refused()),
        Some(_) => Some(plain(StatusCode::BAD_REQUEST, "Depth must be 0 or 1")),
    }
}

fn infinite_depth_refused() -> Reply {
    let body = Bytes::from_static(
        b"<?xml version=\"1.0\" encoding=\"utf-8\"?>\n\
          <D:error xmlns:D=\"DAV:\"><D:propfind-finite-depth/></D:error>\n",
    );
    let mut response = Response::new(full(body));
    *response.status_mut() = StatusCode::FORBIDDEN;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/xml; charset=utf-8"),
    );
    response
}
