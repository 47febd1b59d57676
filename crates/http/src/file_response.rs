//! GET and HEAD of a served file: the version opened once per request, its
//! validators, the ranges asked for, and the bytes streamed from the view
//! in large chunks off the async threads. A download keeps the version it
//! opened (as an open file in the mount does); a read that fails once the
//! body has started cuts the connection, never pads or mixes bytes.

use std::io;
use std::ops::RangeInclusive;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::SystemTime;

use bytes::Bytes;
use hyper::body::{Body, Frame};
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::{Response, StatusCode};
use retagfs_core::view::served_file::ServedFile;
use retagfs_core::{OpenFile, View};
use tokio::sync::mpsc;

use crate::conditional::{evaluate, Precondition, Validators};
use crate::route::{plain, Reply, Shared};

/// Bytes read from the view per chunk of a body.
const CHUNK: usize = 256 << 10;
/// Chunks read ahead of a slow client.
const CHUNKS_AHEAD: usize = 4;
/// Separates the parts of a multi-range answer.
const BOUNDARY: &str = "retagfs-byteranges-7c1f3a";

/// Answers a GET (or, with `head`, a HEAD) of the file at `ino`, off the
/// async threads: opening a file and reading a small body whole are
/// blocking work, done in one go.
pub(crate) async fn respond(
    shared: Arc<Shared>,
    ino: u64,
    served: ServedFile,
    headers: HeaderMap,
    head: bool,
) -> Reply {
    tokio::task::spawn_blocking(move || answer(&shared, ino, served, &headers, head))
        .await
        .unwrap_or_else(|_| plain(StatusCode::INTERNAL_SERVER_ERROR, "the answer failed"))
}

/// The file of `ino` at the version the tree names: held from a recent
/// request while its backing file is as the scan saw it, else opened.
fn open(shared: &Shared, ino: u64, served: &ServedFile) -> io::Result<Arc<OpenFile>> {
    let held = shared.open_files.get(ino, served.version);
    if let Some(file) = held.filter(|f| f.backing_unchanged()) {
        return Ok(file);
    }
    let file = Arc::new(shared.view.open(ino)?);
    // Held under the version it opened (a refresh may have come between
    // the tree's look and the open).
    shared.open_files.put(ino, file.served.version, file.clone());
    Ok(file)
}

fn answer(shared: &Shared, ino: u64, served: ServedFile, headers: &HeaderMap, head: bool) -> Reply {
    let file = match open(shared, ino, &served) {
        Ok(file) => file,
        Err(e) => return open_failed(&e),
    };
    let now = SystemTime::now();
    // As of the version opened (a refresh may have come since the tree
    // was read).
    let opened = &file.served;
    let validators = Validators::new(opened.id, opened.version, opened.mtime_ns, now);
    let size = file.layout.len();
    let ranges_allowed = match evaluate(headers, &validators) {
        Precondition::NotModified => return with_validators(StatusCode::NOT_MODIFIED, &validators, now, 0),
        Precondition::Failed => return plain(StatusCode::PRECONDITION_FAILED, "precondition failed"),
        Precondition::Serve { ranges_allowed } => ranges_allowed,
    };
    let ranges = match headers.get(header::RANGE).filter(|_| ranges_allowed) {
        None => None,
        Some(value) => match asked_ranges(value, size) {
            Asked::Whole => None,
            Asked::Ranges(ranges) => Some(ranges),
            Asked::Unsatisfiable => return unsatisfiable(size),
        },
    };
    let kind = opened.content_type;
    let (status, parts, length, body_type) = match ranges.as_deref() {
        None => (
            StatusCode::OK,
            vec![Part::Bytes(0..=size.saturating_sub(1))],
            size,
            kind.to_string(),
        ),
        Some([one]) => (
            StatusCode::PARTIAL_CONTENT,
            vec![Part::Bytes(one.clone())],
            one_len(one),
            kind.to_string(),
        ),
        Some(many) => {
            let parts = multipart(many, size, kind);
            let length = parts.iter().map(Part::len).sum();
            (
                StatusCode::PARTIAL_CONTENT,
                parts,
                length,
                format!("multipart/byteranges; boundary={BOUNDARY}"),
            )
        }
    };
    let mut response = with_validators(status, &validators, now, length);
    let h = response.headers_mut();
    h.insert(header::CONTENT_TYPE, value(&body_type));
    if let (StatusCode::PARTIAL_CONTENT, [Part::Bytes(range)]) = (status, parts.as_slice()) {
        h.insert(header::CONTENT_RANGE, value(&content_range(range, size)));
    }
    // An empty file has no byte to send (its one part names none).
    if head || size == 0 {
        return response;
    }
    *response.body_mut() = match parts.as_slice() {
        [Part::Bytes(range)] if one_len(range) <= CHUNK as u64 => {
            match read_whole(&shared.view, &file, range) {
                Some(bytes) => crate::route::full(bytes),
                None => {
                    return plain(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        "the file cannot be read (see the server's log)",
                    )
                }
            }
        }
        _ => stream(shared.view.clone(), file, parts),
    };
    response
}

/// A body of at most a chunk, read before the answer's headers go: a
/// failed read (logged) is then an error status, not a cut connection.
fn read_whole(view: &View, file: &OpenFile, range: &RangeInclusive<u64>) -> Option<Bytes> {
    let want = one_len(range) as usize;
    let mut buf = vec![0u8; want];
    let at = *range.start();
    match view.read_into(file, at, &mut buf) {
        Ok(n) if n == want => {
            retagfs_metrics::count(|m| m.http_sent_bytes.inc_by(n as u64));
            return Some(Bytes::from(buf));
        }
        Ok(n) => tracing::warn!("HTTP: track {}: read {n} of {want} bytes at {at}", file.track.id),
        Err(e) => tracing::warn!("HTTP: track {}: reading at {at}: {e}", file.track.id),
    }
    None
}

/// The answer's status and the headers every answer about the file has.
fn with_validators(status: StatusCode, v: &Validators, now: SystemTime, length: u64) -> Reply {
    let mut response = Response::new(crate::route::empty());
    *response.status_mut() = status;
    let h = response.headers_mut();
    h.insert(header::ETAG, value(&v.etag));
    h.insert(header::LAST_MODIFIED, value(&v.last_modified(now)));
    h.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    if status != StatusCode::NOT_MODIFIED {
        h.insert(header::CONTENT_LENGTH, HeaderValue::from(length));
    }
    response
}

fn value(s: &str) -> HeaderValue {
    HeaderValue::from_str(s).unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// Why the view could not open the file, as a status.
fn open_failed(e: &io::Error) -> Reply {
    match e.raw_os_error() {
        Some(libc::ENOENT) => plain(StatusCode::NOT_FOUND, "not found"),
        Some(libc::EMFILE | libc::ENFILE) => plain(StatusCode::SERVICE_UNAVAILABLE, "too many open files"),
        _ => plain(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the file cannot be served (see the server's log)",
        ),
    }
}

fn unsatisfiable(size: u64) -> Reply {
    let mut response = plain(StatusCode::RANGE_NOT_SATISFIABLE, "range not satisfiable");
    response
        .headers_mut()
        .insert(header::CONTENT_RANGE, value(&format!("bytes */{size}")));
    response
}

/// What a `Range` header asks of a file of `size` bytes.
#[derive(Debug, PartialEq, Eq)]
pub enum Asked {
    /// No range that means anything (another unit, bad syntax): the
    /// whole file, as RFC 9110 has a server ignore such a header.
    Whole,
    Ranges(Vec<RangeInclusive<u64>>),
    Unsatisfiable,
}

/// What a `Range` header asks of a file of `size` bytes.
pub fn asked_ranges(value: &HeaderValue, size: u64) -> Asked {
    let Ok(text) = value.to_str() else {
        return Asked::Whole;
    };
    let Ok(parsed) = http_range_header::parse_range_header(text) else {
        return Asked::Whole;
    };
    match parsed.validate(size) {
        Ok(ranges) if !ranges.is_empty() => Asked::Ranges(ranges),
        _ => Asked::Unsatisfiable,
    }
}

fn one_len(range: &RangeInclusive<u64>) -> u64 {
    range.end() - range.start() + 1
}

fn content_range(range: &RangeInclusive<u64>, size: u64) -> String {
    format!("bytes {}-{}/{size}", range.start(), range.end())
}

/// A piece of a body: bytes of the file, or text between them.
#[derive(Debug)]
enum Part {
    Bytes(RangeInclusive<u64>),
    Text(Bytes),
}

impl Part {
    fn len(&self) -> u64 {
        match self {
            Part::Bytes(range) => one_len(range),
            Part::Text(text) => text.len() as u64,
        }
    }
}

/// The parts of a `multipart/byteranges` body.
fn multipart(ranges: &[RangeInclusive<u64>], size: u64, kind: &str) -> Vec<Part> {
    let mut parts = Vec::new();
    for range in ranges {
        let head = format!(
            "\r\n--{BOUNDARY}\r\nContent-Type: {kind}\r\nContent-Range: {}\r\n\r\n",
            content_range(range, size)
        );
        parts.push(Part::Text(Bytes::from(head)));
        parts.push(Part::Bytes(range.clone()));
    }
    parts.push(Part::Text(Bytes::from(format!("\r\n--{BOUNDARY}--\r\n"))));
    parts
}

/// A body fed by a blocking task that reads the parts from the view.
fn stream(view: Arc<View>, file: Arc<OpenFile>, parts: Vec<Part>) -> crate::route::ReplyBody {
    let (tx, rx) = mpsc::channel(CHUNKS_AHEAD);
    tokio::task::spawn_blocking(move || {
        for part in parts {
            let range = match part {
                Part::Text(text) => {
                    if tx.blocking_send(Ok(Frame::data(text))).is_err() {
                        return;
                    }
                    continue;
                }
                Part::Bytes(range) => range,
            };
            let mut at = *range.start();
            while at <= *range.end() {
                let want = (range.end() - at + 1).min(CHUNK as u64) as usize;
                let mut buf = vec![0u8; want];
                let sent = match view.read_into(&file, at, &mut buf) {
                    Ok(n) if n == want => {
                        let sent = tx.blocking_send(Ok(Frame::data(Bytes::from(buf))));
                        if sent.is_ok() {
                            retagfs_metrics::count(|m| m.http_sent_bytes.inc_by(n as u64));
                        }
                        sent
                    }
                    Ok(n) => {
                        let why = format!("read {n} of {want} bytes at {at}");
                        tracing::warn!("HTTP: track {}: {why}; connection cut", file.track.id);
                        tx.blocking_send(Err(io::Error::other(why)))
                    }
                    Err(e) => {
                        tracing::warn!(
                            "HTTP: track {}: reading at {at}: {e}; connection cut",
                            file.track.id
                        );
                        tx.blocking_send(Err(e))
                    }
                };
                if sent.is_err() {
                    return;
                }
                at += want as u64;
            }
        }
    });
    http_body_util::combinators::UnsyncBoxBody::new(ChannelBody { rx })
}

/// A body whose frames come through a channel; an error ends it and cuts
/// the connection.
struct ChannelBody {
    rx: mpsc::Receiver<io::Result<Frame<Bytes>>>,
}

impl Body for ChannelBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<io::Result<Frame<Bytes>>>> {
        self.rx.poll_recv(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asked(s: &str, size: u64) -> Asked {
        asked_ranges(&HeaderValue::from_str(s).unwrap(), size)
    }

    #[test]
    fn ranges_as_clients_send_them() {
        assert_eq!(asked("bytes=0-1", 100), Asked::Ranges(vec![0..=1]));
        assert_eq!(asked("bytes=-10", 100), Asked::Ranges(vec![90..=99]));
        assert_eq!(asked("bytes=90-", 100), Asked::Ranges(vec![90..=99]));
        assert_eq!(asked("bytes=0-1,5-6", 100), Asked::Ranges(vec![0..=1, 5..=6]));
        assert_eq!(asked("bytes=100-", 100), Asked::Unsatisfiable);
        assert_eq!(asked("items=0-1", 100), Asked::Whole);
        assert_eq!(asked("bytes=oops", 100), Asked::Whole);
    }
}
