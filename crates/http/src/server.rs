//! The HTTP server: a listener, one task per connection (at most
//! `max_connections`), HTTPS when given a certificate (read again on
//! SIGHUP), timeouts for slow and idle clients, and a clean stop on SIGINT
//! or SIGTERM (no new connections; those open finish their requests).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use retagfs_core::View;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::auth::AuthFile;
use crate::progress::{LastProgress, Watched};
use crate::route::{self, Shared};
use crate::tls::{Tls, TlsFiles};

/// How the server listens.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    pub listen: SocketAddr,
    /// Connections served at once; more wait in the listen queue.
    pub max_connections: usize,
    /// How long a client may take to send a request's headers.
    pub header_timeout: Duration,
    /// An htpasswd file of bcrypt hashes: every request must name one of
    /// its users (HTTP Basic).
    pub auth_file: Option<PathBuf>,
    /// Serve HTTPS with this certificate and key.
    pub tls: Option<TlsFiles>,
}

impl HttpOptions {
    pub fn new(listen: SocketAddr) -> HttpOptions {
        HttpOptions {
            listen,
            max_connections: 256,
            header_timeout: Duration::from_secs(30),
            auth_file: None,
            tls: None,
        }
    }
}

/// Serves `view` until SIGINT or SIGTERM. Returns once the listener is
/// closed and open connections have ended (or after a grace period).
pub fn serve(view: Arc<View>, options: HttpOptions) -> anyhow::Result<()> {
    let server = Server::prepare(view, options)?;
    server.run_until_stopped()
}

/// Serves `view` from a thread of its own, beside a mount of the same view;
/// the listener is bound before this returns, so that a port in use is an
/// error of the caller's.
pub fn spawn(view: Arc<View>, options: HttpOptions) -> anyhow::Result<std::thread::JoinHandle<()>> {
    let server = Server::prepare(view, options)?;
    Ok(std::thread::Builder::new()
        .name("retagfs-http".into())
        .spawn(move || {
            if let Err(e) = server.run_until_stopped() {
                tracing::error!("HTTP: {e:#}");
            }
        })?)
}

/// Everything a server needs, made (and its errors said) before serving.
struct Server {
    listener: std::net::TcpListener,
    shared: Arc<Shared>,
    tls: Option<Arc<Tls>>,
    options: HttpOptions,
}

impl Server {
    fn prepare(view: Arc<View>, options: HttpOptions) -> anyhow::Result<Server> {
        let auth = options.auth_file.as_deref().map(AuthFile::load).transpose()?;
        let tls = options.tls.clone().map(Tls::load).transpose()?.map(Arc::new);
        let listener = bind(&options)?;
        Ok(Server {
            listener,
            shared: Arc::new(Shared::new(view, auth)),
            tls,
            options,
        })
    }

    fn run_until_stopped(self) -> anyhow::Result<()> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .thread_name("retagfs-http")
            .build()?;
        runtime.block_on(run(self))
    }
}

fn bind(options: &HttpOptions) -> anyhow::Result<std::net::TcpListener> {
    let listener = std::net::TcpListener::bind(options.listen)
        .map_err(|e| anyhow::anyhow!("listening on {}: {e} (another --listen port?)", options.listen))?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

async fn run(server: Server) -> anyhow::Result<()> {
    let Server {
        listener,
        shared,
        tls,
        options,
    } = server;
    let listener = TcpListener::from_std(listener)?;
    let local = listener.local_addr()?;
    let scheme = if tls.is_some() { "https" } else { "http" };
    tracing::info!("serving the view at {scheme}://{local}/");
    eprintln!("retagfs: serving the view at {scheme}://{local}/ (Ctrl-C to stop)");
    tokio::spawn(reread_on_hangup(tls.clone(), shared.clone()));
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
        let acceptor = tls.as_ref().map(|tls| tls.acceptor());
        tokio::spawn(async move {
            match acceptor {
                None => serve_connection(stream, peer, shared, header_timeout).await,
                Some(acceptor) => match tokio::time::timeout(header_timeout, acceptor.accept(stream)).await {
                    Ok(Ok(stream)) => serve_connection(stream, peer, shared, header_timeout).await,
                    Ok(Err(e)) => tracing::info!("HTTPS: handshake with {peer}: {e}"),
                    Err(_) => {
                        tracing::info!("HTTPS: {peer} did not finish its handshake in {header_timeout:?}")
                    }
                },
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

/// One client's requests, one after another, until it goes, idles past
/// the header timeout, or stops reading an answer.
async fn serve_connection<S>(stream: S, peer: SocketAddr, shared: Arc<Shared>, header_timeout: Duration)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
        let shared = shared.clone();
        async move {
            let (arrived, method) = (std::time::Instant::now(), req.method().clone());
            let reply = route::handle(shared, req).await;
            retagfs_metrics::count(|m| {
                m.http_request(method.as_str(), reply.status().as_u16(), arrived.elapsed())
            });
            Ok::<_, std::convert::Infallible>(reply)
        }
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
}

/// SIGHUP (`systemctl reload`) reads the certificate and the auth file
/// again; without either it changes nothing, and never stops the server.
async fn reread_on_hangup(tls: Option<Arc<Tls>>, shared: Arc<Shared>) {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut hangups) = signal(SignalKind::hangup()) else {
        tracing::warn!("HTTP: SIGHUP cannot be caught; files are read again only as they change");
        return;
    };
    while hangups.recv().await.is_some() {
        let (tls, shared) = (tls.clone(), shared.clone());
        let _ = tokio::task::spawn_blocking(move || {
            if let Some(tls) = tls {
                tls.reload();
            }
            if let Some(auth) = &shared.auth {
                auth.reread_now();
            }
        })
        .await;
    }
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
