//! `--metrics ADDR:PORT`: the process's metrics at `/metrics`, in the
//! Prometheus text format, on a listener of its own (so that the port a
//! view is served on need not be the one monitoring scrapes, nor the
//! other way round). It answers GET and HEAD of `/metrics`, 404 for any
//! other path and 405 for any other method.

use std::net::SocketAddr;

use hyper::header::{HeaderValue, ALLOW, CONTENT_TYPE};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;

use crate::route::{full, plain, Reply};

/// A scraper that sends no request for this long is dropped.
const HEADER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Connections served at once; more wait in the listen queue (a scraper
/// needs one: a client opening many must not take the process's files).
const MOST_CONNECTIONS: usize = 16;

/// How long one connection is served at most (a client that sends
/// requests and never reads the answers must give its place back).
const CONNECTION_LIFETIME: std::time::Duration = std::time::Duration::from_secs(60);

/// Listens on `listen` (bound before this returns: a port in use is the
/// caller's error) and answers scrapes from a thread of its own.
pub fn spawn_metrics(listen: SocketAddr) -> anyhow::Result<std::thread::JoinHandle<()>> {
    let listener = std::net::TcpListener::bind(listen)
        .map_err(|e| anyhow::anyhow!("--metrics: listening on {listen}: {e} (another port?)"))?;
    listener.set_nonblocking(true)?;
    let local = listener.local_addr()?;
    eprintln!("retagfs: metrics at http://{local}/metrics");
    Ok(std::thread::Builder::new()
        .name("retagfs-metrics".into())
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build();
            match runtime {
                Ok(runtime) => runtime.block_on(serve(listener)),
                Err(e) => tracing::error!("--metrics: {e}"),
            }
        })?)
}

async fn serve(listener: std::net::TcpListener) {
    let listener = match TcpListener::from_std(listener) {
        Ok(listener) => listener,
        Err(e) => return tracing::error!("--metrics: {e}"),
    };
    let slots = std::sync::Arc::new(tokio::sync::Semaphore::new(MOST_CONNECTIONS));
    loop {
        let Ok(permit) = slots.clone().acquire_owned().await else {
            return;
        };
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                tracing::warn!("--metrics: accepting a connection: {e}");
                continue;
            }
        };
        tokio::spawn(async move {
            let connection = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .serve_connection(
                    TokioIo::new(stream),
                    service_fn(|req| async move { Ok::<_, std::convert::Infallible>(answer(&req)) }),
                );
            match tokio::time::timeout(CONNECTION_LIFETIME, connection).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::debug!("--metrics: connection from {peer}: {e}"),
                Err(_) => {
                    tracing::debug!("--metrics: connection from {peer} cut after {CONNECTION_LIFETIME:?}")
                }
            }
            drop(permit);
        });
    }
}

fn answer<B>(req: &Request<B>) -> Reply {
    if req.uri().path() != "/metrics" {
        return plain(StatusCode::NOT_FOUND, "not found: the metrics are at /metrics");
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let mut reply = plain(StatusCode::METHOD_NOT_ALLOWED, "only GET and HEAD");
        reply
            .headers_mut()
            .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
        return reply;
    }
    let mut reply = hyper::Response::new(full(retagfs_metrics::render()));
    reply.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static(retagfs_metrics::CONTENT_TYPE),
    );
    reply
}
