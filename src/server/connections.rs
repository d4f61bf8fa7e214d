//! Open connections, and which of them may be closed to make room.
//!
//! The server holds at most [`super::MAX_CONNECTIONS`]. Before this table, connections that
//! never sent a request held their place until the header timeout (10 s), and a client that
//! reopened each one as it closed kept the server full: with 600 of them real scrapes waited 4
//! to 10 s, with 2,000 none was answered in 12 s (issue 15). Now, when a new connection arrives
//! at the cap, the connection that has been idle longest (no request in progress: a TLS
//! handshake, headers not yet complete, or keep-alive between requests) is closed for it. A
//! connection serving a request, its response body included, is never closed this way, nor is
//! one whose socket holds bytes the server has not read yet: a scrape accepted while the
//! workers were busy is idle in the table until its task first runs, and under 2,000 reopened
//! connections one lives a few hundred milliseconds. With two CPUs busy beside the test, 12 of
//! 213 scrapes failed in six runs of `attacks::idle_connections_…` before, none of 61 in five
//! after. What this cannot save: when the listen queue overflows the kernel drops the
//! handshake's last ACK (`ListenOverflows` in nstat), the server accepts the connection when the
//! client retransmits, and the request follows after its retransmission timeout, looking
//! meanwhile like one of the silent connections.

use std::collections::HashMap;
use std::os::fd::RawFd;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use tokio::sync::Notify;

#[derive(Default)]
pub struct Connections {
    table: Mutex<Table>,
}

#[derive(Default)]
struct Table {
    next_id: u64,
    open: HashMap<u64, Entry>,
}

struct Entry {
    /// Requests in progress (hyper serves one at a time on HTTP/1; pipelined ones follow).
    busy: usize,
    /// When the last request finished, or the connection was accepted.
    idle_since: Instant,
    close: Arc<Notify>,
    /// Already told to close: not chosen again.
    closing: bool,
    socket: Option<RawFd>,
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
    close: Arc<Notify>,
    /// The TCP socket, to ask how much of what was written the client has not acknowledged.
    socket: Option<RawFd>,
}

impl Progress {
    /// Bytes written that the client has acknowledged: what it has really read. The kernel
    /// takes up to `tcp_wmem`'s maximum (4 MiB here) into the send buffer at once, so the bytes
    /// written alone make every reader look fast for its first megabytes. `SIOCOUTQ` is the
    /// send queue's unacknowledged bytes (tcp(7)).
    pub fn delivered(&self) -> u64 {
        let written = self.written.load(std::sync::atomic::Ordering::Relaxed);
        let Some(fd) = self.socket else { return written };
        let mut queued: libc::c_int = 0;
        // SAFETY: the descriptor is the connection's socket, open while a response holds this
        // (the connection owns it); the ioctl writes one int we own.
        if unsafe { libc::ioctl(fd, libc::TIOCOUTQ, &mut queued) } != 0 {
            return written;
        }
        written.saturating_sub(u64::try_from(queued).unwrap_or(0))
    }

    /// Ends the connection, whatever it is doing (its task drops it at its next poll), and
    /// discards what the kernel still holds for it: a socket closed normally goes on sending
    /// its send buffer (up to 4 MiB) to the client, however slowly it reads; with `SO_LINGER`
    /// at 0 the close resets the connection and frees the buffer at once (socket(7)).
    pub fn abort(&self) {
        if let Some(fd) = self.socket {
            let linger = libc::linger { l_onoff: 1, l_linger: 0 };
            let len = std::mem::size_of::<libc::linger>() as libc::socklen_t;
            // SAFETY: the connection's socket, open while a response holds this; the option
            // struct lives across the call.
            unsafe {
                libc::setsockopt(fd, libc::SOL_SOCKET, libc::SO_LINGER, (&linger as *const libc::linger).cast(), len)
            };
        }
        self.close.notify_one();
    }
}

/// Marks a request in progress on its connection until dropped (with the response body).
pub struct InProgress {
    connections: Arc<Connections>,
    id: u64,
}

impl Connections {
    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Adds a connection, idle from now.
    pub fn open(self: &Arc<Self>, socket: Option<RawFd>) -> Connection {
        let close = Arc::new(Notify::new());
        let mut table = self.table();
        let id = table.next_id;
        table.next_id += 1;
        table
            .open
            .insert(id, Entry { busy: 0, idle_since: Instant::now(), close: close.clone(), closing: false, socket });
        Connection { connections: self.clone(), id, progress: Progress { written: Arc::default(), close, socket } }
    }

    /// Tells up to `count` connections, those idle longest, to close; returns how many. None
    /// when every connection is busy or has bytes waiting to be read (a request, a TLS record).
    pub fn close_idlest(&self, count: usize) -> usize {
        let mut table = self.table();
        let mut idle: Vec<(Instant, u64)> =
            table.open.iter().filter(|(_, e)| e.busy == 0 && !e.closing).map(|(id, e)| (e.idle_since, *id)).collect();
        idle.sort_unstable();
        let mut closed = 0;
        for (_, id) in idle {
            if closed == count {
                break;
            }
            let Some(entry) = table.open.get_mut(&id) else { continue };
            if entry.socket.is_some_and(has_unread_bytes) {
                continue;
            }
            entry.closing = true;
            entry.close.notify_one();
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
    // SAFETY: the ioctl only reads the descriptor's state and writes one int we own. The
    // descriptor is the connection's socket while its entry is in the table, but for the instant
    // between the socket's close and the entry's removal (the task drops its connection, then
    // its place, then its permit): a number reused meanwhile only misinforms this choice.
    (unsafe { libc::ioctl(socket, libc::FIONREAD, &mut unread) }) == 0 && unread > 0
}

impl Connection {
    /// Resolves when the server wants this connection closed to make room.
    pub async fn closed(&self) {
        self.progress.close.notified().await
    }

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
        self.connections.table().open.remove(&self.id);
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
}
