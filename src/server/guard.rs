//! Connection I/O guards: a deadline on writes that make no progress, and a count of the bytes
//! written (how fast a client reads its response).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

/// Fails a write (or flush) that has made no progress for `limit`: a client that stops reading
/// must not hold its connection, buffers and request slot forever.
pub struct WriteDeadline<I> {
    io: I,
    limit: Duration,
    stalled: Option<Pin<Box<Sleep>>>,
    written: Arc<AtomicU64>,
}

impl<I> WriteDeadline<I> {
    #[cfg(test)]
    pub fn new(io: I, limit: Duration) -> Self {
        Self::counting(io, limit, Arc::default())
    }

    /// The same, adding every byte written to `written`.
    pub fn counting(io: I, limit: Duration, written: Arc<AtomicU64>) -> Self {
        Self { io, limit, stalled: None, written }
    }

    fn count(&self, poll: Poll<io::Result<usize>>) -> Poll<io::Result<usize>> {
        if let Poll::Ready(Ok(n)) = poll {
            self.written.fetch_add(n as u64, Ordering::Relaxed);
        }
        poll
    }

    fn track<T>(&mut self, cx: &mut Context<'_>, poll: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        match poll {
            Poll::Pending => {
                let limit = self.limit;
                let timer = self.stalled.get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
                if timer.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "the client stopped reading the response",
                    )));
                }
                Poll::Pending
            }
            ready => {
                self.stalled = None;
                ready
            }
        }
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for WriteDeadline<I> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for WriteDeadline<I> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.io).poll_write(cx, buf);
        let poll = self.track(cx, poll);
        self.count(poll)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        let poll = self.track(cx, poll);
        self.count(poll)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let poll = Pin::new(&mut self.io).poll_flush(cx);
        self.track(cx, poll)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let poll = Pin::new(&mut self.io).poll_shutdown(cx);
        self.track(cx, poll)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;
    use tokio::io::AsyncWriteExt;

    #[tokio::test]
    async fn a_write_the_peer_never_reads_times_out() {
        use tokio::io::AsyncReadExt;
        // A 64-byte pipe whose other end never reads: the second write blocks for good.
        let (ours, mut theirs) = tokio::io::duplex(64);
        let mut guarded = WriteDeadline::new(ours, Duration::from_millis(200));
        guarded.write_all(&[0u8; 64]).await.unwrap();
        let started = Instant::now();
        let err = guarded.write_all(&[0u8; 64]).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert!(started.elapsed() >= Duration::from_millis(200));

        // A reader that keeps up, even slowly, never trips it: the timer restarts on progress.
        let (ours, mut reader) = tokio::io::duplex(64);
        let mut guarded = WriteDeadline::new(ours, Duration::from_millis(300));
        let drain = tokio::spawn(async move {
            let mut buf = [0u8; 64];
            let mut total = 0;
            while total < 640 {
                tokio::time::sleep(Duration::from_millis(100)).await;
                total += reader.read(&mut buf).await.unwrap();
            }
            total
        });
        guarded.write_all(&[1u8; 640]).await.unwrap();
        assert_eq!(drain.await.unwrap(), 640);
        let mut buf = [0u8; 64];
        assert_eq!(theirs.read(&mut buf).await.unwrap(), 64, "the first write went through");
    }
}
