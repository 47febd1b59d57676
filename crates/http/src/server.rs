//! The HTTP server: a listener, one task per connection (at most
//! `max_connections`), timeouts for slow and idle clients, and a clean stop
//! on SIGINT or SIGTERM (no new connections; those open finish their
//! requests).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use retagfs_core::View;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::progress::{LastProgress, Watched};
use crate::route::{self, Shared};

/// How the server listens.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    pub listen: SocketAddr,
    /// Connections served at once; more wait in the listen queue.
    pub max_connections: usize,
    /// How long a client may take to send a request's headers.
    pub header_timeout: Duration,
}

impl HttpOptions {
    pub fn new(listen: SocketAddr) -> HttpOptions {
        HttpOptions {
            listen,
            max_connections: 256,
            header_timeout: Duration::from_secs(30),
        }
    }
}

/// Serves `view` until SIGINT or SIGTERM. Returns once the listener is
/// closed and open connections have ended (or after a grace period).
pub fn serve(view: Arc<View>, options: HttpOptions) -> anyhow::Result<()> {
    let listener = bind(&options)?;
    run_until_stopped(view, listener, options)
}

/// Serves `view` from a thread of its own, beside a mount of the same view;
/// the listener is bound before this returns, so that a port in use is an
/// error of the caller's.
pub fn spawn(view: Arc<View>, options: HttpOptions) -> anyhow::Result<std::thread::JoinHandle<()>> {
    let listener = bind(&options)?;
    Ok(std::thread::Builder::new()
        .name("retagfs-http".into())
        .spawn(move || {
            if let Err(e) = run_until_stopped(view, listener, options) {
                tracing::error!("HTTP: {e:#}");
            }
        })?)
}

fn bind(options: &HttpOptions) -> anyhow::Result<std::net::TcpListener> {
    let listener = std::net::TcpListener::bind(options.listen)
        .map_err(|e| anyhow::anyhow!("listening on {}: {e} (another --listen port?)", options.listen))?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

fn run_until_stopped(
    view: Arc<View>,
    listener: std::net::TcpListener,
    options: HttpOptions,
) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("retagfs-http")
        .build()?;
    runtime.block_on(run(view, listener, options))
}

async fn run(view: Arc<View>, listener: std::net::TcpListener, options: HttpOptions) -> anyhow::Result<()> {
    let listener = TcpListener::from_std(listener)?;
    let local = listener.local_addr()?;
    tracing::info!("serving the view over HTTP at http://{local}/");
    eprintln!("retagfs: serving the view at http://{local}/ (Ctrl-C to stop)");
    let shared = Arc::new(Shared::new(view));
    let slots = Arc::new(Semaphore::new(options.max_connections.max(1)));
    let stop = stop_signal();
    tokio::pin!(stop);
    loop {
        let permit = tokio::select! {
            _ = &mut stop => break,
            permit = slots.clone().acquire_owned() => permit?,
        };
        let (stream, peer) = tokio::select! {
            _ = &mut stop => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    tracing::warn!("HTTP: accepting a connection: {e}");
                    continue;
                }
            },
        };
        // An answer's headers and body go out as written, not held back
        // for the client's delayed acknowledgement.
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!("HTTP: TCP_NODELAY for {peer}: {e}");
        }
        let shared = shared.clone();
        let header_timeout = options.header_timeout;
        tokio::spawn(async move {
            let service = service_fn(move |req| {
                let shared = shared.clone();
                async move { Ok::<_, std::convert::Infallible>(route::handle(shared, req).await) }
            });
            let progress = LastProgress::new();
            let connection = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(header_timeout)
                .max_buf_size(64 << 10)
                .serve_connection(TokioIo::new(Watched::new(stream, progress.clone())), service);
            tokio::pin!(connection);
            loop {
                tokio::select! {
                    served = &mut connection => {
                        if let Err(e) = served {
                            tracing::debug!("HTTP: connection from {peer}: {e}");
                        }
                        break;
                    }
                    _ = tokio::time::sleep(header_timeout / 2) => {
                        // Idle between requests is the header timeout's to
                        // end; this catches a client that stopped reading
                        // an answer (dropping the connection closes it).
                        if progress.idle() > header_timeout {
                            tracing::info!("HTTP: {peer} moved no byte for {header_timeout:?}: connection cut");
                            break;
                        }
                    }
                }
            }
            drop(permit);
        });
    }
    tracing::info!("HTTP: stopping");
    // Requests in flight get a moment to finish.
    let all = u32::try_from(options.max_connections.max(1)).unwrap_or(u32::MAX);
    let _ = tokio::time::timeout(Duration::from_secs(5), slots.acquire_many(all)).await;
    Ok(())
}

async fn stop_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut int), Ok(mut term)) = (signal(SignalKind::interrupt()), signal(SignalKind::terminate()))
    else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = int.recv() => {}
        _ = term.recv() => {}
    }
}
