//! Connection I/O guards: a deadline on writes that make no progress.

use std::future::Future;
use std::io;
use std::pin::Pin;
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
}

impl<I> WriteDeadline<I> {
    pub fn new(io: I, limit: Duration) -> Self {
        Self { io, limit, stalled: None }
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
        self.track(cx, poll)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.track(cx, poll)
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
