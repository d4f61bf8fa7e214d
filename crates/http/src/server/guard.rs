//! Connection I/O guards: a deadline on writes that make no progress, a count of the bytes
//! written (how fast a client reads its response), and no reading of a client's next request
//! while it has not acknowledged the response before.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use super::connections::Progress;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

/// Fails a write (or flush) that has made no progress for `limit`: a client that stops reading
/// must not hold its connection, buffers and request slot forever.
///
/// Reads wait while the socket holds bytes the client has not acknowledged: a client
/// that pipelines requests and never reads would otherwise have each response written into the
/// kernel's send buffer and its next request read at once, parking up to the buffer's size per
/// connection. The wait looks again after 5 ms, doubling to [`READ_GATE_MAX`]; once the client
/// has been quiet for [`super::connections::STALLED`] the socket is set to close with a reset
/// (set back if it reads after all). A client that never reads meets hyper's header timeout
/// for its next request.
pub(crate) struct WriteDeadline<I> {
    io: I,
    limit: Duration,
    stalled: Option<Pin<Box<Sleep>>>,
    progress: Progress,
    gate: Option<(Pin<Box<Sleep>>, Duration)>,
    reset_set: bool,
}

/// The longest a read waits before looking again whether the client has read what it was sent.
const READ_GATE_MAX: Duration = Duration::from_millis(250);

impl<I> WriteDeadline<I> {
    #[cfg(test)]
    pub fn new(io: I, limit: Duration) -> Self {
        Self::counting(io, limit, Progress::detached())
    }

    /// The same, counting what is written in `progress` (and asking its socket what is unsent).
    pub fn counting(io: I, limit: Duration, progress: Progress) -> Self {
        Self { io, limit, stalled: None, progress, gate: None, reset_set: false }
    }

    fn count(&self, poll: Poll<io::Result<usize>>) -> Poll<io::Result<usize>> {
        if let Poll::Ready(Ok(n)) = poll {
            self.progress.wrote(n);
        }
        poll
    }

    /// Pending while the client has not acknowledged everything written to it.
    fn poll_gate(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        loop {
            if self.progress.unsent() == 0 {
                self.gate = None;
                if self.reset_set {
                    self.progress.reset_on_close(false);
                    self.reset_set = false;
                }
                return Poll::Ready(());
            }
            if !self.reset_set && self.progress.stalled() {
                self.progress.reset_on_close(true);
                self.reset_set = true;
            }
            let (timer, delay) = self
                .gate
                .get_or_insert_with(|| (Box::pin(tokio::time::sleep(Duration::from_millis(5))), Duration::ZERO));
            if timer.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            let next = (*delay * 2).clamp(Duration::from_millis(10), READ_GATE_MAX);
            self.gate = Some((Box::pin(tokio::time::sleep(next)), next));
        }
    }

    fn track<T>(&mut self, cx: &mut Context<'_>, poll: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        match poll {
            Poll::Pending => {
                let limit = self.limit;
                let timer = self.stalled.get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
                if timer.as_mut().poll(cx).is_ready() {
                    // The client never read what was sent: no orphan socket left sending it.
                    self.progress.reset_on_close(true);
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
        if self.poll_gate(cx).is_pending() {
            return Poll::Pending;
        }
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

/// The connection preface of an HTTP/2 client with prior knowledge (RFC 9113, section 3.4).
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// Enough of it to tell: no HTTP/1 request line starts so.
const H2_PREFACE_SIGN: usize = 14;

/// Reads the first bytes of a connection, as many as it takes to tell an HTTP/2 preface from an
/// HTTP/1 request (one read for the usual `GET`), and returns them with the verdict; the caller
/// replays them with [`Rewind`].
pub(crate) async fn read_preface<I: AsyncRead + Unpin>(io: &mut I) -> io::Result<(Vec<u8>, bool)> {
    use tokio::io::AsyncReadExt;
    let mut seen = Vec::new();
    let mut chunk = [0u8; 256];
    let matches = |seen: &[u8]| {
        let n = seen.len().min(H2_PREFACE_SIGN);
        seen[..n] == H2_PREFACE[..n]
    };
    while seen.len() < H2_PREFACE_SIGN && matches(&seen) {
        let n = io.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        seen.extend_from_slice(&chunk[..n]);
    }
    let h2 = seen.len() >= H2_PREFACE_SIGN && matches(&seen);
    Ok((seen, h2))
}

/// What an HTTP/2 client gets: the server's preface (an empty SETTINGS frame) and a GOAWAY with
/// `HTTP_1_1_REQUIRED` (0xd), the error made for this (RFC 9113, sections 3.4, 6.8 and 7);
/// curl, for one, says so and can retry with HTTP/1.1. hyper's HTTP/1 server would close the
/// connection without a word (`Parse::VersionH2` has no response in `role.rs`).
pub(crate) fn http2_refusal() -> Vec<u8> {
    const DEBUG: &[u8] = b"HTTP/2 is not served; use HTTP/1.1";
    let mut out = vec![0, 0, 0, 0x4, 0, 0, 0, 0, 0];
    let length = (8 + DEBUG.len()) as u32;
    out.extend_from_slice(&length.to_be_bytes()[1..]);
    out.extend_from_slice(&[0x7, 0]);
    out.extend_from_slice(&0u32.to_be_bytes()); // stream 0
    out.extend_from_slice(&0u32.to_be_bytes()); // last stream id: none processed
    out.extend_from_slice(&0xdu32.to_be_bytes()); // HTTP_1_1_REQUIRED
    out.extend_from_slice(DEBUG);
    out
}

/// An I/O object that first gives back bytes already read from it.
pub(crate) struct Rewind<I> {
    prefix: Vec<u8>,
    offset: usize,
    io: I,
}

impl<I> Rewind<I> {
    pub fn new(prefix: Vec<u8>, io: I) -> Self {
        Self { prefix, offset: 0, io }
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for Rewind<I> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        if self.offset < self.prefix.len() {
            let n = (self.prefix.len() - self.offset).min(buf.remaining());
            let start = self.offset;
            buf.put_slice(&self.prefix[start..start + n]);
            self.offset += n;
            if self.offset == self.prefix.len() {
                self.prefix = Vec::new();
                self.offset = 0;
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Rewind<I> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;
    use tokio::io::AsyncWriteExt;

    #[tokio::test]
    async fn http2_prefaces_are_told_from_http1_requests_and_the_bytes_replayed() {
        use tokio::io::AsyncReadExt;
        let (mut client, mut server) = tokio::io::duplex(1024);
        let request = b"GET /metrics HTTP/1.1\r\n\r\n";
        client.write_all(request).await.unwrap();
        let (seen, h2) = read_preface(&mut server).await.unwrap();
        assert!(!h2);
        let mut replayed = Rewind::new(seen, server);
        let mut text = vec![0u8; request.len()];
        replayed.read_exact(&mut text).await.unwrap();
        assert_eq!(&text, request);

        // The preface in pieces, as a slow client may send it; PUT and POST are not it.
        let (mut client, mut server) = tokio::io::duplex(1024);
        let reader = tokio::spawn(async move { (read_preface(&mut server).await.unwrap(), server) });
        for piece in H2_PREFACE.chunks(5) {
            client.write_all(piece).await.unwrap();
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let ((seen, h2), _server) = reader.await.unwrap();
        assert!(h2 && seen.len() < H2_PREFACE.len(), "told from its first bytes");
        for request in [&b"PUT / HTTP/1.1\r\n\r\n"[..], b"POST / HTTP/1.1\r\n\r\n", b"PRI / HTTP/1.1\r\n\r\n"] {
            let (mut client, mut server) = tokio::io::duplex(1024);
            client.write_all(request).await.unwrap();
            assert!(!read_preface(&mut server).await.unwrap().1, "{}", String::from_utf8_lossy(request));
        }
        let refusal = http2_refusal();
        assert_eq!(&refusal[..9], &[0, 0, 0, 4, 0, 0, 0, 0, 0], "an empty SETTINGS frame");
        assert_eq!(refusal[12], 7, "then GOAWAY");
        assert_eq!(&refusal[22..26], &[0, 0, 0, 0xd], "HTTP_1_1_REQUIRED");
        assert_eq!(u32::from_be_bytes([0, refusal[9], refusal[10], refusal[11]]) as usize, refusal.len() - 18);
    }

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
