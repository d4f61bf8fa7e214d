//! The response body: shared chunks, and guards that live as long as their bytes.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use hyper::body::{Body, Bytes, Frame, SizeHint};

/// A response body made of shared chunks, sent in order, with an exact length (so hyper sends
/// `Content-Length`, not chunked encoding).
///
/// hyper hands the chunks to the socket as they are, without copying them: it queues them for
/// vectored writes when the connection supports those (`proto/h1/io.rs`: `WriteStrategy::Queue`
/// when `is_write_vectored`; tokio's `TcpStream`, `TokioIo` and tokio-rustls' server stream all
/// say yes), and drops each once written. So a chunk lives until its last byte is in the socket,
/// after the body itself has been dropped: what must last as long as a response is in flight
/// (a busy connection, bytes reserved in the budget) is tied to the chunk, see [`held`].
pub(crate) struct Chunks {
    pub(super) chunks: std::collections::VecDeque<Bytes>,
    /// For a body without chunks.
    guards: Vec<Box<dyn std::any::Any + Send>>,
}

impl Chunks {
    pub fn new(chunks: impl IntoIterator<Item = Bytes>) -> Self {
        Self { chunks: chunks.into_iter().filter(|c| !c.is_empty()).collect(), guards: Vec::new() }
    }

    /// Keeps `guard` alive until the whole body has been written (or the connection ends).
    pub fn holding(mut self, guard: impl std::any::Any + Send) -> Self {
        match self.chunks.pop_back() {
            // Chunks are written in order: the last one is dropped last.
            Some(last) => self.chunks.push_back(held(last, guard)),
            None => self.guards.push(Box::new(guard)),
        }
        self
    }
}

/// The same bytes, with `guard` dropped when the last reference to them (hyper's included) is.
pub fn held(bytes: Bytes, guard: impl std::any::Any + Send) -> Bytes {
    struct Held<G> {
        bytes: Bytes,
        _guard: G,
    }
    impl<G> AsRef<[u8]> for Held<G> {
        fn as_ref(&self) -> &[u8] {
            &self.bytes
        }
    }
    Bytes::from_owner(Held { bytes, _guard: guard })
}

impl Body for Chunks {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Poll::Ready(self.chunks.pop_front().map(|chunk| Ok(Frame::data(chunk))))
    }

    fn is_end_stream(&self) -> bool {
        self.chunks.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.chunks.iter().map(|c| c.len() as u64).sum())
    }
}
