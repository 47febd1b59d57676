//! A connection that notes when it last moved bytes either way, so that a
//! client that stops reading an answer (or sending a request) can be told
//! from a slow one and cut: hyper waits on the socket for as long as a
//! client leaves it full.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// When a connection last moved a byte, in milliseconds since `epoch`.
#[derive(Clone)]
pub(crate) struct LastProgress {
    epoch: Instant,
    at_ms: Arc<AtomicU64>,
}

impl LastProgress {
    pub(crate) fn new() -> LastProgress {
        LastProgress {
            epoch: Instant::now(),
            at_ms: Arc::new(AtomicU64::new(0)),
        }
    }

    fn note(&self) {
        let ms = self.epoch.elapsed().as_millis() as u64;
        self.at_ms.store(ms, Ordering::Relaxed);
    }

    /// How long since the connection last moved a byte.
    pub(crate) fn idle(&self) -> std::time::Duration {
        let now = self.epoch.elapsed().as_millis() as u64;
        std::time::Duration::from_millis(now.saturating_sub(self.at_ms.load(Ordering::Relaxed)))
    }
}

/// A stream whose reads and writes note their progress.
pub(crate) struct Watched<S> {
    inner: S,
    progress: LastProgress,
}

impl<S> Watched<S> {
    pub(crate) fn new(inner: S, progress: LastProgress) -> Watched<S> {
        Watched { inner, progress }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.progress.note();
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, data);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.progress.note();
        }
        polled
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
