//! What a running mount or server counts, for `--metrics`: one set of
//! counters for the whole process, named here (the catalogue that
//! docs/usage.md lists), counted where things happen, and written out in
//! the Prometheus text format when scraped.
//!
//! Nothing is counted unless `--metrics` asked for it ([`enable`]): a
//! count is then an atomic add, and without it a load of one flag.
//! Counters a request path bumps are made once, up front, so that no count
//! looks a label up.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{LazyLock, OnceLock};
use std::time::Duration;

use parking_lot::Mutex;
use prometheus_client::encoding::prometheus_text;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

mod errno_names;
mod process_memory;

pub use errno_names::errno_name;
pub use prometheus_text::CONTENT_TYPE;

/// The kinds of FUSE request counted apart; any other is `other`.
pub const FUSE_REQUEST_KINDS: [&str; 11] = [
    "lookup",
    "getattr",
    "open",
    "read",
    "release",
    "opendir",
    "readdir",
    "readdirplus",
    "releasedir",
    "statfs",
    "other",
];

type OneLabel = [(&'static str, &'static str); 1];

/// Errnos kept by number (Linux's are below 134).
const ERRNOS: usize = 134;
type HttpLabels = [(&'static str, String); 2];

/// Every metric of the process.
pub struct Metrics {
    fuse_requests: Vec<Counter>,
    fuse_errors: Family<OneLabel, Counter>,
    /// `fuse_errors`' counters by errno, each made at its first error.
    fuse_error_counters: Vec<OnceLock<Counter>>,
    /// Bytes of served files answered to the kernel's reads.
    pub fuse_read_bytes: Counter,
    /// Files open through the mount now.
    pub open_files: Gauge,
    /// Opens that found the file's layout made already, and those that
    /// made it.
    pub open_cache_hits: Counter,
    pub open_cache_misses: Counter,
    /// Reads of slow or remote backing bytes found loaded ahead, and
    /// those that waited for their own load.
    pub read_ahead_hits: Counter,
    pub read_ahead_misses: Counter,
    /// Refreshes that brought changes from the store, and how long each
    /// took.
    pub refreshes: Counter,
    pub refresh_seconds: Histogram,
    /// How many times the store file was replaced under the view.
    pub store_generation: Gauge,
    /// The store's last change the view shows.
    pub store_change: Gauge,
    /// Files in the view.
    pub view_tracks: Gauge,
    http_requests: Family<HttpLabels, Counter>,
    /// From a request's arrival to its answer's headers.
    pub http_request_seconds: Histogram,
    /// Bytes of file bodies sent over HTTP and WebDAV.
    pub http_sent_bytes: Counter,
}

impl Metrics {
    /// Counts a FUSE request of kind `FUSE_REQUEST_KINDS[kind]` (`other`
    /// past the list).
    pub fn fuse_request(&self, kind: usize) {
        self.fuse_requests[kind.min(FUSE_REQUEST_KINDS.len() - 1)].inc();
    }

    /// Counts a FUSE request answered with `errno`: its counter is looked
    /// up by name once, then kept by number (a lookup that finds nothing
    /// answers ENOENT, and they come by the thousand).
    pub fn fuse_error(&self, errno: i32) {
        let counter = || {
            self.fuse_errors
                .get_or_create(&[("errno", errno_name(errno))])
                .clone()
        };
        match usize::try_from(errno)
            .ok()
            .and_then(|n| self.fuse_error_counters.get(n))
        {
            Some(kept) => kept.get_or_init(counter).inc(),
            None => counter().inc(),
        };
    }

    /// Counts an HTTP request answered with `status` after `took`. Methods
    /// the server does not answer are `other`: a client cannot make the
    /// metrics grow by making methods up.
    pub fn http_request(&self, method: &str, status: u16, took: Duration) {
        let method = match method {
            "GET" => "GET",
            "HEAD" => "HEAD",
            "PROPFIND" => "PROPFIND",
            "OPTIONS" => "OPTIONS",
            _ => "other",
        };
        self.http_requests
            .get_or_create(&[("method", method.to_string()), ("status", status.to_string())])
            .inc();
        self.http_request_seconds.observe(took.as_secs_f64());
    }
}

struct Exposition {
    registry: Registry,
    process: process_memory::ProcessMemory,
}

/// Latencies from 50 µs to about 13 s.
fn latency_buckets() -> impl Iterator<Item = f64> {
    exponential_buckets(0.000_05, 2.0, 19)
}

static METRICS: LazyLock<Metrics> = LazyLock::new(|| {
    let fuse_errors = Family::default();
    let fuse_requests_family: Family<OneLabel, Counter> = Family::default();
    let fuse_requests = FUSE_REQUEST_KINDS
        .iter()
        .map(|kind| fuse_requests_family.get_or_create(&[("kind", *kind)]).clone())
        .collect();
    let metrics = Metrics {
        fuse_requests,
        fuse_errors,
        fuse_error_counters: (0..ERRNOS).map(|_| OnceLock::new()).collect(),
        fuse_read_bytes: Counter::default(),
        open_files: Gauge::default(),
        open_cache_hits: Counter::default(),
        open_cache_misses: Counter::default(),
        read_ahead_hits: Counter::default(),
        read_ahead_misses: Counter::default(),
        refreshes: Counter::default(),
        refresh_seconds: Histogram::new(latency_buckets()),
        store_generation: Gauge::default(),
        store_change: Gauge::default(),
        view_tracks: Gauge::default(),
        http_requests: Family::default(),
        http_request_seconds: Histogram::new(latency_buckets()),
        http_sent_bytes: Counter::default(),
    };
    *EXPOSITION.lock() = Some(exposition(&metrics, fuse_requests_family));
    metrics
});

static EXPOSITION: Mutex<Option<Exposition>> = Mutex::new(None);

static COUNTING: AtomicBool = AtomicBool::new(false);

/// Starts counting (before the view loads, so that its gauges are set).
pub fn enable() {
    LazyLock::force(&METRICS);
    COUNTING.store(true, Ordering::Relaxed);
}

/// Counts with `f` when counting was enabled.
#[inline]
pub fn count<T>(f: impl FnOnce(&'static Metrics) -> T) {
    if COUNTING.load(Ordering::Relaxed) {
        f(&METRICS);
    }
}

fn exposition(m: &Metrics, fuse_requests: Family<OneLabel, Counter>) -> Exposition {
    let mut root = Registry::default();
    let r = root.sub_registry_with_prefix("retagfs");
    r.register("fuse_requests", "FUSE requests answered, by kind", fuse_requests);
    r.register(
        "fuse_errors",
        "FUSE requests answered with an error, by errno",
        m.fuse_errors.clone(),
    );
    r.register(
        "fuse_read_bytes",
        "Bytes of served files read through the mount",
        m.fuse_read_bytes.clone(),
    );
    r.register("open_files", "Files open through the mount", m.open_files.clone());
    r.register(
        "open_cache_hits",
        "Opens that found the file's layout made already",
        m.open_cache_hits.clone(),
    );
    r.register(
        "open_cache_misses",
        "Opens that made the file's layout",
        m.open_cache_misses.clone(),
    );
    r.register(
        "read_ahead_hits",
        "Reads of slow or remote backing bytes found loaded ahead",
        m.read_ahead_hits.clone(),
    );
    r.register(
        "read_ahead_misses",
        "Reads of slow or remote backing bytes that waited for their own load",
        m.read_ahead_misses.clone(),
    );
    r.register(
        "refreshes",
        "Refreshes that brought changes from the store",
        m.refreshes.clone(),
    );
    r.register(
        "refresh_seconds",
        "How long each refresh with changes took",
        m.refresh_seconds.clone(),
    );
    r.register(
        "store_generation",
        "Times the store file was replaced under the view",
        m.store_generation.clone(),
    );
    r.register(
        "store_change",
        "The store's last change the view shows (its change log's sequence number)",
        m.store_change.clone(),
    );
    r.register("view_tracks", "Files in the view", m.view_tracks.clone());
    r.register(
        "http_requests",
        "HTTP and WebDAV requests answered, by method and status",
        m.http_requests.clone(),
    );
    r.register(
        "http_request_seconds",
        "From an HTTP request's arrival to its answer's headers",
        m.http_request_seconds.clone(),
    );
    r.register(
        "http_sent_bytes",
        "Bytes of file bodies sent over HTTP and WebDAV",
        m.http_sent_bytes.clone(),
    );
    let process = process_memory::ProcessMemory::register(&mut root);
    Exposition {
        registry: root,
        process,
    }
}

/// Every metric, in the Prometheus text format (version 0.0.4).
pub fn render() -> String {
    LazyLock::force(&METRICS);
    let exposition = EXPOSITION.lock();
    let exposition = exposition.as_ref().expect("made with the metrics");
    exposition.process.sample();
    let mut text = String::new();
    prometheus_text::encode(&mut text, &exposition.registry).expect("writing to a String cannot fail");
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_show_in_the_text_with_their_labels() {
        count(|m| m.fuse_request(3));
        assert!(
            !render().contains("kind=\"read\"} 1"),
            "nothing counted before enable()"
        );
        enable();
        count(|m| m.fuse_request(3));
        count(|m| m.fuse_error(libc::ENOENT));
        count(|m| m.http_request("GET", 206, Duration::from_millis(3)));
        let text = render();
        assert!(
            text.contains("retagfs_fuse_requests_total{kind=\"read\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("retagfs_fuse_errors_total{errno=\"ENOENT\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("retagfs_http_requests_total{method=\"GET\",status=\"206\"} 1"),
            "{text}"
        );
        assert!(text.contains("retagfs_http_request_seconds_count 1"), "{text}");
        assert!(text.contains("process_resident_memory_bytes "), "{text}");
    }
}
