//! Open connections, and which of them may be closed to make room.
//!
//! The server holds at most [`super::MAX_CONNECTIONS`]. Connections that never send a request
//! would hold their place until the header timeout, and a client that reopens each one as it
//! closes would keep the server full and real scrapes waiting. So when a new connection arrives
//! at the cap, the connection that has been idle longest (no request in progress: a TLS
//! handshake, headers not yet complete, or keep-alive between requests) is closed for it. A
//! connection serving a request, its response body included, is never closed this way, nor is
//! one whose socket holds bytes the server has not read yet: a scrape accepted while the
//! workers were busy is idle in the table until its task first runs, and under a flood of
//! reopened connections one lives only briefly. What this cannot save: when the listen queue
//! overflows the kernel drops the handshake's last ACK (`ListenOverflows` in nstat), the server
//! accepts the connection when the client retransmits, and the request follows after its
//! retransmission timeout, looking meanwhile like one of the silent connections.
//!
//! Clients that pipeline requests and never read would keep every connection "busy": each
//! response would go into the kernel's send buffer (autotuned to megabytes), the next request
//! would be read at once, and none could be closed at the cap, starving the scraper and filling
//! the host's TCP memory. So the server reads a connection's next request only once
//! its client has acknowledged the response before (`guard.rs`), a connection whose client has
//! left a response unacknowledged for [`STALLED`] is closed at the cap like an idle one, with a
//! reset (what it holds in the kernel goes at once, no orphan), and once fewer places than a
//! quarter of the table are free, one client address (an IPv6 /64) holds at most a quarter of
//! its connections: a new one from an address at its share closes that address's own idlest or
//! stalled connection, or is refused. Below that the table is not contested and an address may
//! hold more (a share enforced at all times would refuse most scrapers that share an address).

use std::collections::HashMap;
use std::net::IpAddr;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, RwLock};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

pub struct Connections {
    table: Mutex<Table>,
    per_address_max: usize,
}

impl Default for Connections {
    fn default() -> Self {
        Self::with_cap(super::MAX_CONNECTIONS)
    }
}

/// How long a client may leave a response unacknowledged, with nothing more written to it,
/// before its connection counts as stalled: closable at the cap, and reset when it ends.
pub(crate) const STALLED: Duration = Duration::from_secs(2);
/// The most connections one client address (an IPv6 /64) holds: a quarter of the table.
const ADDRESS_SHARE: usize = 4;

#[derive(Default)]
struct Table {
    next_id: u64,
    open: HashMap<u64, Entry>,
    per_address: HashMap<IpAddr, usize>,
}

struct Entry {
    /// Requests in progress (hyper serves one at a time on HTTP/1; pipelined ones follow).
    busy: usize,
    /// When the last request finished, or the connection was accepted.
    idle_since: Instant,
    close: Arc<Notify>,
    /// Already told to close: not chosen again.
    closing: bool,
    progress: Progress,
    address: Option<IpAddr>,
}

/// Milliseconds since the first call: a clock that fits an atomic.
fn now_ms() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    u64::try_from(EPOCH.get_or_init(Instant::now).elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// One open connection's place in the table, given back on drop.
pub struct Connection {
    connections: Arc<Connections>,
    id: u64,
    progress: Progress,
}

/// How far a connection's writes have got, and how to close it.
#[derive(Clone)]
pub struct Progress {
    /// Bytes written to the socket so far (counted by [`super::guard::WriteDeadline`]).
    pub written: Arc<AtomicU64>,
    /// When bytes were last written ([`now_ms`]).
    last_write: Arc<AtomicU64>,
    close: Arc<Notify>,
    /// The TCP socket, to ask how much of what was written the client has not acknowledged.
    socket: SocketFd,
}

/// A connection's socket descriptor for other tasks' ioctls (what the client has not read or
/// not acknowledged, `SO_LINGER`), forgotten before the socket is closed ([`OpenStream`]): a
/// number closed and reused meanwhile (by another connection, a collector's file) would
/// otherwise be asked, or set to reset on close. Each use holds the lock for its one call, and
/// forgetting waits for those under way.
#[derive(Clone, Default)]
pub(crate) struct SocketFd(Arc<RwLock<Option<RawFd>>>);

impl SocketFd {
    fn new(fd: Option<RawFd>) -> SocketFd {
        SocketFd(Arc::new(RwLock::new(fd)))
    }

    /// `f` of the descriptor while the socket is open; `None` once it is (being) closed.
    fn with<T>(&self, f: impl FnOnce(RawFd) -> T) -> Option<T> {
        let fd = self.0.read().unwrap_or_else(PoisonError::into_inner);
        fd.map(f)
    }

    fn forget(&self) {
        *self.0.write().unwrap_or_else(PoisonError::into_inner) = None;
    }
}

impl Progress {
    /// For a connection without a table or a socket (tests).
    pub(crate) fn detached() -> Progress {
        Progress {
            written: Arc::default(),
            last_write: Arc::default(),
            close: Arc::default(),
            socket: SocketFd::default(),
        }
    }

    /// Counts `n` bytes written now.
    pub fn wrote(&self, n: usize) {
        if n > 0 {
            self.written.fetch_add(n as u64, Ordering::Relaxed);
            self.last_write.store(now_ms(), Ordering::Relaxed);
        }
    }

    /// Bytes written that the client has not acknowledged (`SIOCOUTQ`, tcp(7)); 0 without a
    /// socket.
    pub fn unsent(&self) -> u64 {
        self.outq().unwrap_or(0)
    }

    /// Whether the client has left bytes unacknowledged with nothing written for [`STALLED`]:
    /// it is not reading.
    pub fn stalled(&self) -> bool {
        self.stalled_for().is_some()
    }

    /// How long the connection has been stalled (see [`Self::stalled`]).
    fn stalled_for(&self) -> Option<Duration> {
        let quiet = Duration::from_millis(now_ms().saturating_sub(self.last_write.load(Ordering::Relaxed)));
        (quiet >= STALLED && self.unsent() > 0).then_some(quiet)
    }

    /// Makes the socket's close a reset (`SO_LINGER` 0) or a normal close again: a socket closed
    /// normally goes on sending its send buffer, however slowly (or never) the client reads,
    /// as an orphan of the kernel's; reset, the buffer goes at once (socket(7)).
    pub(crate) fn reset_on_close(&self, reset: bool) {
        self.socket.with(|fd| {
            let linger = libc::linger { l_onoff: libc::c_int::from(reset), l_linger: 0 };
            let len = std::mem::size_of::<libc::linger>() as libc::socklen_t;
            // SAFETY: the connection's socket, open while `SocketFd` has it; the option struct
            // lives across the call.
            unsafe {
                libc::setsockopt(fd, libc::SOL_SOCKET, libc::SO_LINGER, (&linger as *const libc::linger).cast(), len)
            };
        });
    }

    /// Bytes written that the client has acknowledged: what it has really read. The kernel
    /// takes up to `tcp_wmem`'s maximum (4 MiB here) into the send buffer at once, so the bytes
    /// written alone make every reader look fast for its first megabytes. `SIOCOUTQ` is the
    /// send queue's unacknowledged bytes (tcp(7)).
    pub fn delivered(&self) -> u64 {
        let written = self.written.load(std::sync::atomic::Ordering::Relaxed);
        self.outq().map_or(written, |queued| written.saturating_sub(queued))
    }

    /// Bytes in the send queue not acknowledged by the client (`SIOCOUTQ`), while the socket is open.
    fn outq(&self) -> Option<u64> {
        self.socket
            .with(|fd| {
                let mut queued: libc::c_int = 0;
                // SAFETY: the connection's socket, open while `SocketFd` has it; the ioctl writes
                // one int we own.
                (unsafe { libc::ioctl(fd, libc::TIOCOUTQ, &mut queued) } == 0)
                    .then(|| u64::try_from(queued).unwrap_or(0))
            })
            .flatten()
    }

    /// Resolves when the server wants this connection closed to make room.
    pub async fn closed(&self) {
        self.close.notified().await
    }

    /// Ends the connection, whatever it is doing (its task drops it at its next poll), and
    /// discards what the kernel still holds for it: a socket closed normally goes on sending
    /// its send buffer (up to 4 MiB) to the client, however slowly it reads; with `SO_LINGER`
    /// at 0 the close resets the connection and frees the buffer at once (socket(7)).
    pub fn abort(&self) {
        self.reset_on_close(true);
        self.close.notify_one();
    }
}

/// Marks a request in progress on its connection until dropped (with the response body).
pub(crate) struct InProgress {
    connections: Arc<Connections>,
    id: u64,
}

impl Connections {
    /// A table for at most `cap` connections (the server's semaphore holds the cap).
    pub(crate) fn with_cap(cap: usize) -> Self {
        Self { table: Mutex::default(), per_address_max: (cap / ADDRESS_SHARE).max(1) }
    }

    /// The most connections one address may hold.
    pub(crate) fn per_address_max(&self) -> usize {
        self.per_address_max
    }

    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Adds a connection, idle from now.
    #[cfg(test)]
    pub fn open(self: &Arc<Self>, socket: Option<RawFd>) -> Connection {
        self.open_from(socket, None)
    }

    /// Adds a connection from `address` (a client key: an IPv4 address or an IPv6 /64).
    pub(crate) fn open_from(self: &Arc<Self>, socket: Option<RawFd>, address: Option<IpAddr>) -> Connection {
        let close = Arc::new(Notify::new());
        let progress = Progress { socket: SocketFd::new(socket), close: close.clone(), ..Progress::detached() };
        progress.last_write.store(now_ms(), Ordering::Relaxed);
        let mut table = self.table();
        let id = table.next_id;
        table.next_id += 1;
        let entry =
            Entry { busy: 0, idle_since: Instant::now(), close, closing: false, progress: progress.clone(), address };
        table.open.insert(id, entry);
        if let Some(address) = address {
            *table.per_address.entry(address).or_default() += 1;
        }
        Connection { connections: self.clone(), id, progress }
    }

    /// Connections open from `address`.
    pub(crate) fn held_by(&self, address: IpAddr) -> usize {
        self.table().per_address.get(&address).copied().unwrap_or(0)
    }

    /// Tells up to `count` connections to close, those idle or stalled longest; returns how many.
    /// Idle: no request in progress and no bytes waiting to be read (a request, a TLS record).
    /// Stalled ([`Progress::stalled`]): the client has not read what it was sent; closed with a
    /// reset. None when every connection is serving a client that reads, or has a request to read.
    pub(crate) fn close_idlest(&self, count: usize) -> usize {
        self.close_longest(count, None)
    }

    /// The same among the connections of `address`.
    pub(crate) fn close_idlest_of(&self, address: IpAddr, count: usize) -> usize {
        self.close_longest(count, Some(address))
    }

    fn close_longest(&self, count: usize, address: Option<IpAddr>) -> usize {
        let mut table = self.table();
        let now = Instant::now();
        let mut candidates: Vec<(Instant, bool, u64)> = Vec::new();
        for (id, entry) in &table.open {
            if entry.closing || (address.is_some() && entry.address != address) {
                continue;
            }
            if let Some(quiet) = entry.progress.stalled_for() {
                candidates.push((now.checked_sub(quiet).unwrap_or(entry.idle_since), true, *id));
            } else if entry.busy == 0 && entry.progress.socket.with(has_unread_bytes) != Some(true) {
                candidates.push((entry.idle_since, false, *id));
            }
        }
        candidates.sort_unstable();
        let mut closed = 0;
        for (_, stalled, id) in candidates.into_iter().take(count) {
            let Some(entry) = table.open.get_mut(&id) else { continue };
            entry.closing = true;
            if stalled {
                entry.progress.abort();
            } else {
                entry.close.notify_one();
            }
            closed += 1;
        }
        closed
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.table().open.len()
    }
}

/// Whether the client has sent bytes the server has not read (`SIOCINQ`, tcp(7)).
fn has_unread_bytes(socket: RawFd) -> bool {
    let mut unread: libc::c_int = 0;
    // SAFETY: the ioctl only reads the descriptor's state and writes one int we own; the
    // descriptor is open (callers hold it through `SocketFd`, or own it in tests).
    (unsafe { libc::ioctl(socket, libc::FIONREAD, &mut unread) }) == 0 && unread > 0
}

impl Connection {
    /// Resolves when the server wants this connection closed to make room.
    #[cfg(test)]
    pub async fn closed(&self) {
        self.progress.closed().await
    }

    #[cfg(test)]
    pub fn progress(&self) -> &Progress {
        &self.progress
    }

    /// What the connection's service marks its requests with.
    pub fn requests(&self) -> Requests {
        Requests { connections: self.connections.clone(), id: self.id, progress: self.progress.clone() }
    }
}

/// Starts requests on one connection (owned, for hyper's service).
#[derive(Clone)]
pub struct Requests {
    connections: Arc<Connections>,
    id: u64,
    pub progress: Progress,
}

impl Requests {
    pub fn start(&self) -> InProgress {
        if let Some(entry) = self.connections.table().open.get_mut(&self.id) {
            entry.busy += 1;
        }
        InProgress { connections: self.connections.clone(), id: self.id }
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        let mut table = self.connections.table();
        let Some(entry) = table.open.remove(&self.id) else { return };
        if let Some(address) = entry.address {
            if let Some(count) = table.per_address.get_mut(&address) {
                *count = count.saturating_sub(1);
                if *count == 0 {
                    table.per_address.remove(&address);
                }
            }
        }
    }
}

impl Drop for InProgress {
    fn drop(&mut self) {
        if let Some(entry) = self.connections.table().open.get_mut(&self.id) {
            entry.busy = entry.busy.saturating_sub(1);
            entry.idle_since = Instant::now();
        }
    }
}

/// An accepted stream and its place in the table, in the order they must end: the descriptor
/// forgotten by everyone who could ask it ([`SocketFd`]), the place out of the table, then the
/// socket closed. Dropping the stream before the place would leave an instant in which another
/// worker choosing connections to close could ioctl (`FIONREAD`) a number already reused.
pub(crate) struct OpenStream<S> {
    // Fields drop in order of declaration: the place before the stream.
    place: Connection,
    stream: S,
}

impl<S> OpenStream<S> {
    pub fn new(place: Connection, stream: S) -> Self {
        Self { place, stream }
    }

    pub(crate) fn get_ref(&self) -> &S {
        &self.stream
    }
}

impl<S> Drop for OpenStream<S> {
    fn drop(&mut self) {
        self.place.progress.socket.forget();
    }
}

impl<S: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for OpenStream<S> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl<S: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for OpenStream<S> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn the_connection_idle_longest_is_closed_and_busy_ones_never() {
        let connections = Arc::new(Connections::default());
        let oldest = connections.open(None);
        tokio::time::sleep(Duration::from_millis(2)).await;
        let serving = connections.open(None);
        let request = serving.requests().start();
        tokio::time::sleep(Duration::from_millis(2)).await;
        let newest = connections.open(None);
        // `oldest` was accepted first and never sent a request: it goes first.
        let busy_one = serving.requests().start();
        assert_eq!(connections.close_idlest(1), 1);
        tokio::time::timeout(Duration::from_secs(1), oldest.closed()).await.expect("told to close");
        assert_eq!(connections.close_idlest(5), 1, "one told to close is not chosen again");
        tokio::time::timeout(Duration::from_secs(1), newest.closed()).await.expect("then the next idle one");
        drop((oldest, newest));
        assert_eq!(connections.close_idlest(1), 0, "a connection with a request in progress is never chosen");
        drop((request, busy_one));
        assert_eq!(connections.close_idlest(1), 1, "once its response is done it is idle again");
        assert_eq!(connections.len(), 1);
        drop(serving);
        assert_eq!(connections.len(), 0);
    }

    #[tokio::test]
    async fn a_connection_with_a_request_not_yet_read_is_not_chosen() {
        use std::io::Write;
        use std::os::fd::AsRawFd;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        let mut scraper = std::net::TcpStream::connect(address).unwrap();
        let (with_request, _) = listener.accept().unwrap();
        let _silent_client = std::net::TcpStream::connect(address).unwrap();
        let (silent, _) = listener.accept().unwrap();
        scraper.write_all(b"GET /metrics HTTP/1.1\r\n\r\n").unwrap();
        while !has_unread_bytes(with_request.as_raw_fd()) {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let connections = Arc::new(Connections::default());
        // Accepted first, so idle longest; but its request is waiting for its task.
        let waiting = connections.open(Some(with_request.as_raw_fd()));
        let idle = connections.open(Some(silent.as_raw_fd()));
        assert_eq!(connections.close_idlest(2), 1);
        tokio::time::timeout(Duration::from_secs(1), idle.closed()).await.expect("the silent one is told to close");
        assert_eq!(connections.close_idlest(1), 0, "not the one with a request to read");
        drop(waiting);
    }
    /// Review L1: the task dropped the stream, closing its descriptor, and then its place, so a
    /// worker choosing connections to close could ioctl a number reused in between. The stream
    /// now closes last, with its descriptor already forgotten and its place gone.
    #[tokio::test]
    async fn a_stream_closes_after_its_place_and_its_descriptor_are_gone() {
        /// Places in the table, and the descriptor others could ask, when the stream closed.
        type Seen = (usize, Option<RawFd>);
        struct Stream {
            connections: Arc<Connections>,
            progress: Progress,
            seen: Arc<Mutex<Option<Seen>>>,
        }
        impl Drop for Stream {
            fn drop(&mut self) {
                let descriptor = self.progress.socket.with(|fd| fd);
                *self.seen.lock().unwrap() = Some((self.connections.len(), descriptor));
            }
        }
        let connections = Arc::new(Connections::default());
        let place = connections.open(Some(7));
        let progress = place.progress().clone();
        assert_eq!(progress.socket.with(|fd| fd), Some(7));
        let seen = Arc::default();
        let stream = Stream { connections: connections.clone(), progress: progress.clone(), seen: Arc::clone(&seen) };
        drop(OpenStream::new(place, stream));
        assert_eq!(*seen.lock().unwrap(), Some((0, None)), "(places in the table, descriptor) as the stream closed");
        assert_eq!(progress.unsent(), 0, "a response still holding the progress asks nothing");
    }
}
