//! The object stores a process reads from: listings and ranged reads of
//! one version, each within a deadline, run on threads of the remote's
//! own so that a caller's wait is bounded and killable by the deadline
//! alone, whatever the network does.

use std::cell::RefCell;
use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::ops::Range;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use opendal::{ErrorKind, Operator};
use parking_lot::Mutex;

use crate::block_cache::BlockCache;
use crate::connection::{self, endpoint_for_logs, Limits};
use crate::health::{Admission, Health};
use crate::{ListedObject, ObjectUrl, ObjectVersion};

/// How a process talks to object stores.
#[derive(Debug, Clone)]
pub struct RemoteSettings {
    /// The longest a read (with its retries) may take before it fails.
    pub deadline: Duration,
    /// Where remote bytes are kept on disk (None: nowhere).
    pub cache_dir: Option<PathBuf>,
    /// The most bytes the disk cache holds.
    pub cache_size: u64,
}

/// The default deadline of one read.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(10);

impl Default for RemoteSettings {
    fn default() -> RemoteSettings {
        RemoteSettings {
            deadline: DEFAULT_DEADLINE,
            cache_dir: Some(crate::default_cache_dir()),
            cache_size: 4 << 30,
        }
    }
}

/// Listings run at once when a root is listed prefix by prefix.
const LISTINGS_IN_FLIGHT: usize = 8;
/// The most top-level folders listed each on its own: past it, a root
/// is one listing (a thousand objects per request beats a request per
/// folder of ten).
const FOLDERS_LISTED_APART: usize = 4 * LISTINGS_IN_FLIGHT;

pub struct Remote {
    runtime: tokio::runtime::Runtime,
    operators: Mutex<HashMap<String, Operator>>,
    limits: Limits,
    deadline: Duration,
    health: Health,
    cache: Option<BlockCache>,
    /// The endpoint's host, for log lines.
    host: String,
}

tokio::task_local! {
    /// The retries of the request the current task is making, for its log
    /// line.
    static RETRIES: RefCell<Retries>;
}

/// How often a request was retried, and why the last time.
#[derive(Default, Clone)]
struct Retries {
    count: u32,
    last_error: Option<String>,
}

impl std::fmt::Display for Retries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} retries", self.count)?;
        if let Some(why) = &self.last_error {
            write!(f, " (the last after: {why})")?;
        }
        Ok(())
    }
}

impl Remote {
    pub fn new(settings: &RemoteSettings) -> anyhow::Result<Remote> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("remote")
            .enable_all()
            .build()?;
        // Making the HTTP client loads the system's CA certificates (tens
        // of milliseconds): done now, in the background, so that a first
        // read does not wait for it.
        runtime.spawn_blocking(|| drop(opendal_http_transport_reqwest::ReqwestTransport::default()));
        let cache = match &settings.cache_dir {
            Some(dir) if settings.cache_size > 0 => Some(BlockCache::open(dir, settings.cache_size)?),
            _ => None,
        };
        Ok(Remote {
            runtime,
            operators: Mutex::new(HashMap::new()),
            limits: Limits {
                request_timeout: (settings.deadline / 2)
                    .clamp(Duration::from_millis(200), Duration::from_secs(30)),
                retries: 6,
            },
            deadline: settings.deadline,
            health: Health::default(),
            cache,
            host: endpoint_for_logs(),
        })
    }

    pub fn cache(&self) -> Option<&BlockCache> {
        self.cache.as_ref()
    }

    pub fn deadline(&self) -> Duration {
        self.deadline
    }

    fn operator(&self, bucket: &str) -> io::Result<Operator> {
        let mut operators = self.operators.lock();
        if let Some(op) = operators.get(bucket) {
            return Ok(op.clone());
        }
        let op = connection::operator(bucket, self.limits).map_err(|e| {
            tracing::error!("{e}");
            io::Error::from_raw_os_error(libc::EIO)
        })?;
        operators.insert(bucket.to_string(), op.clone());
        Ok(op)
    }

    /// Runs `work` on the remote's threads and waits for it, at most
    /// `deadline` (and a second for the answer to come back).
    fn run<T: Send + 'static>(
        &self,
        deadline: Duration,
        work: impl Future<Output = Result<T, opendal::Error>> + Send + 'static,
    ) -> Result<(Result<T, Failure>, Retries), Failure> {
        let (send, receive) = std::sync::mpsc::sync_channel(1);
        self.runtime.spawn(RETRIES.scope(RefCell::default(), async move {
            let outcome = match tokio::time::timeout(deadline, work).await {
                Ok(Ok(v)) => Ok(v),
                Ok(Err(e)) => Err(Failure::from(e)),
                Err(_) => Err(Failure::Deadline),
            };
            let _ = send.send((outcome, RETRIES.with(|r| r.borrow().clone())));
        }));
        receive
            .recv_timeout(deadline + Duration::from_secs(1))
            .map_err(|_| Failure::Deadline)
    }

    /// Reads `range` of `version` of `url` from the remote (not the cache):
    /// exactly those bytes, or an error logged with what failed.
    pub fn fetch(&self, url: &ObjectUrl, version: &ObjectVersion, range: Range<u64>) -> io::Result<Vec<u8>> {
        if let Admission::FailFast(down_for) = self.health.admit() {
            tracing::debug!("{url}: not read: {} has not answered for {down_for:?}", self.host);
            return Err(eio());
        }
        let op = self.operator(&url.bucket)?;
        let (key, etag, want) = (url.key.clone(), version.etag.clone(), range.end - range.start);
        let started = Instant::now();
        let read = self.run(self.deadline, async move {
            let buffer = op.read_with(&key).range(range.clone()).if_match(&etag).await?;
            Ok(buffer.to_vec())
        });
        let (outcome, retries) = match read {
            Ok(done) => done,
            Err(failure) => (Err(failure), Retries::default()),
        };
        let outcome = outcome.and_then(|bytes| {
            if bytes.len() as u64 == want {
                Ok(bytes)
            } else {
                Err(Failure::Short(bytes.len() as u64, want))
            }
        });
        match outcome {
            Ok(bytes) => {
                if self.health.answered() {
                    tracing::warn!("{} answers again", self.host);
                }
                Ok(bytes)
            }
            Err(failure) => Err(self.failed(url, &failure, &retries, started)),
        }
    }

    /// Logs a failed read and gives the caller its errno.
    fn failed(&self, url: &ObjectUrl, failure: &Failure, retries: &Retries, started: Instant) -> io::Error {
        let took = started.elapsed().as_secs_f64();
        match failure {
            Failure::Changed => {
                self.health.answered();
                tracing::warn!(
                    "{url}: the object changed since it was scanned (its ETag no longer matches); run `retagfs scan` again"
                );
            }
            Failure::Gone => {
                self.health.answered();
                tracing::warn!("{url}: the object is gone since it was scanned; run `retagfs scan` again");
                return io::Error::from_raw_os_error(libc::ENOENT);
            }
            Failure::Short(got, want) => {
                tracing::warn!(
                    "{url}: {} sent {got} bytes where {want} were asked for",
                    self.host
                );
            }
            Failure::Deadline | Failure::Other(_) => {
                if self.health.unreachable() {
                    tracing::warn!(
                        "{}: not answering; reads that need it fail at once until it answers again",
                        self.host
                    );
                }
                tracing::warn!(
                    "{url}: read from {} failed in {took:.1} s after {retries}: {failure}",
                    self.host
                );
            }
        }
        eio()
    }

    /// Every object under `root`, listed prefix by prefix, several at
    /// once; `found` is told each time objects are found. Any failure
    /// fails the whole listing: a partial one must not look like deletions.
    pub fn list(
        &self,
        root: &ObjectUrl,
        found: Arc<dyn Fn(usize) + Send + Sync>,
    ) -> anyhow::Result<Vec<ListedObject>> {
        let op = self.operator(&root.bucket)?;
        let prefix = root.folder_prefix();
        let bucket = root.bucket.clone();
        // Listings take as long as the bucket is big: no deadline but the
        // per-request timeouts and retries.
        let (outcome, _) = self
            .run(
                Duration::from_secs(365 * 24 * 3600),
                list_by_prefix(op, prefix, bucket, found),
            )
            .map_err(|f| anyhow::anyhow!("listing {root} at {}: {f}", self.host))?;
        outcome.map_err(|f| anyhow::anyhow!("listing {root} at {}: {f}", self.host))
    }

    /// Runs `reads` on the remote's threads, many at once, and waits for
    /// all: for a scan's probes, each of which reads a few ranges.
    pub fn spawn_blocking<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> tokio::task::JoinHandle<T> {
        self.runtime.spawn_blocking(work)
    }
}

/// The top level of `prefix` first, then each folder below it listed
/// whole, [`LISTINGS_IN_FLIGHT`] at once.
async fn list_by_prefix(
    op: Operator,
    prefix: String,
    bucket: String,
    found: Arc<dyn Fn(usize) + Send + Sync>,
) -> Result<Vec<ListedObject>, opendal::Error> {
    let mut objects = Vec::new();
    let mut folders = Vec::new();
    let mut top = op.lister_with(&prefix).await?;
    while let Some(entry) = top.next().await {
        let entry = entry?;
        if entry.metadata().is_dir() {
            if entry.path() != prefix {
                folders.push(entry.path().to_string());
            }
        } else if let Some(object) = listed(&bucket, &entry) {
            objects.push(object);
        }
    }
    if folders.len() > FOLDERS_LISTED_APART {
        // Many small folders (an artist each): one listing of the whole
        // prefix, a thousand objects a page, takes fewer round trips.
        return list_whole(&op, &prefix, &bucket, found.as_ref()).await;
    }
    found(objects.len());
    let mut below = futures_util::stream::iter(folders.into_iter().map(|folder| {
        let op = op.clone();
        let bucket = bucket.clone();
        async move {
            let mut objects = Vec::new();
            let mut lister = op.lister_with(&folder).recursive(true).await?;
            while let Some(entry) = lister.next().await {
                if let Some(object) = listed(&bucket, &entry?) {
                    objects.push(object);
                }
            }
            Ok::<_, opendal::Error>(objects)
        }
    }))
    .buffer_unordered(LISTINGS_IN_FLIGHT);
    while let Some(more) = below.next().await {
        let more = more?;
        found(more.len());
        objects.extend(more);
    }
    objects.sort_by(|a, b| a.url.key.cmp(&b.url.key));
    Ok(objects)
}

/// Every object under `prefix`, in one paginated listing.
async fn list_whole(
    op: &Operator,
    prefix: &str,
    bucket: &str,
    found: &(dyn Fn(usize) + Send + Sync),
) -> Result<Vec<ListedObject>, opendal::Error> {
    let mut objects = Vec::new();
    let mut lister = op.lister_with(prefix).recursive(true).await?;
    while let Some(entry) = lister.next().await {
        if let Some(object) = listed(bucket, &entry?) {
            objects.push(object);
            if objects.len() % 1000 == 0 {
                found(1000);
            }
        }
    }
    found(objects.len() % 1000);
    objects.sort_by(|a, b| a.url.key.cmp(&b.url.key));
    Ok(objects)
}

/// An entry of a listing as an object (None for folders and folder
/// markers).
fn listed(bucket: &str, entry: &opendal::Entry) -> Option<ListedObject> {
    let meta = entry.metadata();
    if !meta.is_file() || entry.path().ends_with('/') {
        return None;
    }
    let mtime_ns = meta.last_modified().map_or(0, |t| {
        t.into_inner().as_nanosecond().clamp(0, i64::MAX as i128) as i64
    });
    Some(ListedObject {
        url: ObjectUrl {
            bucket: bucket.to_string(),
            key: entry.path().to_string(),
        },
        version: ObjectVersion {
            etag: meta.etag().unwrap_or_default().to_string(),
            size: meta.content_length(),
            mtime_ns,
        },
    })
}

/// Why a request failed.
#[derive(Debug)]
enum Failure {
    /// The object's ETag is not the recorded one.
    Changed,
    Gone,
    /// The deadline passed (with every retry).
    Deadline,
    /// Fewer bytes came than asked for.
    Short(u64, u64),
    Other(opendal::Error),
}

impl From<opendal::Error> for Failure {
    fn from(e: opendal::Error) -> Failure {
        match e.kind() {
            ErrorKind::ConditionNotMatch => Failure::Changed,
            ErrorKind::NotFound => Failure::Gone,
            _ => Failure::Other(e),
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Changed => write!(f, "the object changed (ETag)"),
            Failure::Gone => write!(f, "no such object"),
            Failure::Deadline => write!(f, "no answer within the deadline"),
            Failure::Short(got, want) => write!(f, "{got} bytes where {want} were asked for"),
            Failure::Other(e) => write!(f, "{e}"),
        }
    }
}

fn eio() -> io::Error {
    io::Error::from_raw_os_error(libc::EIO)
}

/// Counts a retry of the current task's request, and why (see [`RETRIES`]).
pub(crate) fn count_retry(why: &opendal::Error) {
    let _ = RETRIES.try_with(|r| {
        let mut r = r.borrow_mut();
        r.count += 1;
        r.last_error = Some(short_error(why));
    });
}

/// An error of the S3 client in a few words: its kind, and the S3 error
/// code the server sent (`SlowDown`, `InternalError`) or the start of its
/// message, without the request's details.
fn short_error(e: &opendal::Error) -> String {
    let message = e.message();
    let brief = match message
        .split("code: \"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
    {
        Some(code) => format!("S3 error {code}"),
        None => message.chars().take(120).collect(),
    };
    format!("{}: {brief}", e.kind())
}
