//! One request answered as the server answers it, to the end of its body,
//! without a socket or a password: what the fuzz targets drive.

use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{HeaderMap, Request, StatusCode};
use retagfs_core::View;

use crate::route::{self, Shared};

/// The status, headers and whole body of the answer to `request`.
pub fn answer(view: Arc<View>, request: Request<Full<Bytes>>) -> (StatusCode, HeaderMap, Bytes) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime for one request");
    runtime.block_on(async move {
        let shared = Arc::new(Shared::new(view, None));
        let (parts, body) = route::handle(shared, request).await.into_parts();
        let body = body.collect().await.map(|c| c.to_bytes()).unwrap_or_default();
        (parts.status, parts.headers, body)
    })
}
