//! Accepting connections: the connection cap and each address's share of it, TLS, the
//! HTTP/1 connection and its limits (see the list in [`super`]).

use std::future::Future;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

use super::connections::{Connections, OpenStream, Requests};
use super::guard::{http2_refusal, read_preface, Rewind, WriteDeadline};
use super::{auth, handle, AppState, HEADER_READ_TIMEOUT, MAX_CONNECTIONS, MAX_HEADER_BYTES, WRITE_STALL_TIMEOUT};

const MAX_HEADERS: usize = 64;
/// hyper's read buffer per connection (its minimum is 8 KiB).
const MAX_BUF_BYTES: usize = 64 * 1024;
/// Descriptors kept for everything but connections: the collectors (a file or a directory or
/// two open at a time each, a cgroup walk one per level), reloads, the renderer, netlink.
const RESERVED_DESCRIPTORS: u64 = 64;

/// The connection cap for this process's descriptor limit. The soft RLIMIT_NOFILE is raised to
/// the hard one first (as Go's runtime does for node_exporter); what remains below it after the
/// descriptors open now and [`RESERVED_DESCRIPTORS`] is the cap, at most [`MAX_CONNECTIONS`].
/// Without it, idle connections under a low soft limit would take every descriptor: the
/// collectors would fail with EMFILE and no scrape would get through.
pub(crate) fn connection_cap() -> usize {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit and setrlimit read and write the struct we own.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return MAX_CONNECTIONS;
        }
        if limit.rlim_cur < limit.rlim_max {
            let raised = libc::rlimit { rlim_cur: limit.rlim_max, rlim_max: limit.rlim_max };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                limit.rlim_cur = limit.rlim_max;
            }
        }
    }
    let open_now = std::fs::read_dir("/proc/self/fd").map_or(32, |d| d.count() as u64);
    let room = limit.rlim_cur.saturating_sub(open_now + RESERVED_DESCRIPTORS);
    let cap = usize::try_from(room).unwrap_or(usize::MAX).clamp(1, MAX_CONNECTIONS);
    if cap < MAX_CONNECTIONS {
        tracing::warn!(
            cap,
            nofile = limit.rlim_cur,
            reserved = RESERVED_DESCRIPTORS,
            "the descriptor limit \
            (RLIMIT_NOFILE) is low: connection cap lowered, descriptors kept for the collectors"
        );
    }
    cap
}
/// How many idle connections are closed at once when a new one arrives at the cap.
const CLOSE_AT_CAP: usize = 32;
/// How often the accept loop at the cap looks again for a connection to close when it found
/// none (each was serving a request or had one not yet read).
const RETRY_CLOSE_IDLEST: Duration = Duration::from_millis(20);

/// Binds the listen address, a host (or every interface, IPv6 and IPv4 when available) and a port.
pub async fn bind(host: Option<&str>, port: u16) -> std::io::Result<TcpListener> {
    match host {
        Some(host) => TcpListener::bind((host, port)).await,
        None => match TcpListener::bind(("::", port)).await {
            Ok(listener) => Ok(listener),
            // Hosts with IPv6 disabled: fall back to every IPv4 interface.
            Err(_) => TcpListener::bind(("0.0.0.0", port)).await,
        },
    }
}

/// Serves until `shutdown` resolves, then lets in-flight requests finish for up to `drain`.
pub async fn serve(listener: TcpListener, state: Arc<AppState>, shutdown: impl Future<Output = ()>, drain: Duration) {
    let graceful = GracefulShutdown::new();
    let cap = connection_cap();
    let permits = Arc::new(Semaphore::new(cap));
    let open = Arc::new(Connections::with_cap(cap));
    let per_address = open.per_address_max();
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        let (stream, peer) = match accepted {
            Ok(conn) => conn,
            Err(err) => {
                // EMFILE and friends: back off instead of spinning.
                tracing::warn!(error = %err, "accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        bound_socket_buffers(&stream);
        let address = auth::client_key(peer.ip());
        // The share applies once the table is contested: fewer free places than one share.
        let contested = permits.available_permits() < per_address;
        if contested && open.held_by(address) >= per_address && open.close_idlest_of(address, 1) == 0 {
            // Its share is serving clients that read, or requests not yet read: this one waits
            // for nothing, refused at once.
            tracing::debug!(%peer, "this address holds its share of connections, each busy; refused");
            continue;
        }
        let permit = match permits.clone().try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => {
                // At the cap: close the connections idle longest to make room for this one and the
                // next few (one at a time, each accept would wait for a task to end, and behind a
                // backlog of reopened connections a scrape would wait seconds). When none can be
                // closed (every one is serving a request or has one to read), wait for one to
                // finish, looking again every RETRY_CLOSE_IDLEST: a connection whose request was
                // unread may be idle again by then.
                let permit = loop {
                    let closed = open.close_idlest(CLOSE_AT_CAP);
                    tracing::debug!(%peer, closed, "at the connection cap: closing the connections idle longest");
                    tokio::select! {
                        permit = permits.clone().acquire_owned() => break Some(permit),
                        () = tokio::time::sleep(RETRY_CLOSE_IDLEST), if closed == 0 => {}
                        () = &mut shutdown => break None,
                    }
                };
                // The semaphore is never closed; an error would mean it was, so stop serving.
                let Some(Ok(permit)) = permit else { break };
                permit
            }
        };
        let place = open.open_from(Some(stream.as_raw_fd()), Some(address));
        let requests = place.requests();
        let (state, watcher, stream) = (state.clone(), graceful.watcher(), OpenStream::new(place, stream));
        tokio::spawn(async move {
            // The stream, and its place in the table with it, ends with the select.
            tokio::select! {
                () = connection(stream, peer, state, watcher, requests.clone()) => {}
                () = requests.progress.closed() => tracing::debug!(%peer, "closed to make room for a new connection"),
            }
            // Out of the table before the permit lets another in.
            drop(permit);
        });
    }
    drop(listener);
    tokio::select! {
        () = graceful.shutdown() => tracing::debug!("all connections drained"),
        () = tokio::time::sleep(drain) => tracing::warn!(?drain, "connections still open after the drain period; \
            closing"),
    }
}

/// The kernel's send buffer of a connection, asked for with `SO_SNDBUF` (the kernel doubles it
/// for its bookkeeping, socket(7)); autotuned, it grew to 4 MiB (`tcp_wmem`'s maximum) for a
/// client that never read. 256 KiB in flight still moves 500 MB/s at a 1 ms round trip, and a
/// 37 MB scrape in under 4 s at 50 ms.
const SEND_BUFFER_BYTES: libc::c_int = 256 << 10;
/// The receive buffer: requests are a few hundred bytes, pipelined ones wait in it unread.
const RECEIVE_BUFFER_BYTES: libc::c_int = 64 << 10;

/// Bounds the kernel's buffers of an accepted connection: autotuned, they grow to megabytes a
/// connection, none of it charged to the unit's memory on cgroup v1. A failure leaves the
/// kernel's defaults.
fn bound_socket_buffers(stream: &TcpStream) {
    let fd = stream.as_raw_fd();
    let len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    for (option, bytes) in [(libc::SO_SNDBUF, SEND_BUFFER_BYTES), (libc::SO_RCVBUF, RECEIVE_BUFFER_BYTES)] {
        // SAFETY: the accepted socket we own; the int lives across the call.
        unsafe { libc::setsockopt(fd, libc::SOL_SOCKET, option, (&bytes as *const libc::c_int).cast(), len) };
    }
}

/// What a plain HTTP client gets from a TLS port (the words Go's servers use).
const PLAIN_HTTP_ON_TLS: &[u8] = b"HTTP/1.0 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: \
    close\r\n\r\nClient sent an HTTP request to an HTTPS server.\n";

/// The first byte of every TLS connection: a handshake record.
const TLS_HANDSHAKE_RECORD: u8 = 0x16;

async fn connection(
    mut stream: OpenStream<TcpStream>,
    peer: SocketAddr,
    state: Arc<AppState>,
    watcher: Watcher,
    requests: Requests,
) {
    let Some(tls) = state.site().web.tls.clone() else {
        serve_http(stream, peer, state, watcher, requests).await;
        return;
    };
    let mut first = [0u8; 1];
    match tokio::time::timeout(HEADER_READ_TIMEOUT, stream.get_ref().peek(&mut first)).await {
        Ok(Ok(1)) if first[0] == TLS_HANDSHAKE_RECORD => {}
        Ok(Ok(1)) => {
            tracing::debug!(%peer, "plain HTTP on the TLS port; refused");
            let _ = tokio::time::timeout(HEADER_READ_TIMEOUT, async {
                let _ = stream.write_all(PLAIN_HTTP_ON_TLS).await;
                let _ = stream.shutdown().await;
            })
            .await;
            return;
        }
        _ => return,
    }
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    match tokio::time::timeout(HEADER_READ_TIMEOUT, acceptor.accept(stream)).await {
        Ok(Ok(tls_stream)) => serve_http(tls_stream, peer, state, watcher, requests).await,
        Ok(Err(err)) => tracing::debug!(%peer, error = %err, "TLS handshake failed"),
        Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
    }
}

async fn serve_http<I>(io: I, peer: SocketAddr, state: Arc<AppState>, watcher: Watcher, requests: Requests)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let mut io = io;
    // HTTP/2 with prior knowledge gets a GOAWAY saying HTTP/1.1 is required, not a silent close;
    // the bytes read to tell are replayed to hyper. The header timeout covers both.
    let started = Instant::now();
    let first = match tokio::time::timeout(HEADER_READ_TIMEOUT, read_preface(&mut io)).await {
        Ok(Ok((_, true))) => {
            tracing::debug!(%peer, "HTTP/2 with prior knowledge; refused with GOAWAY HTTP_1_1_REQUIRED");
            let _ = tokio::time::timeout(HEADER_READ_TIMEOUT, async {
                let _ = io.write_all(&http2_refusal()).await;
                let _ = io.shutdown().await;
                // Closing with the client's frames unread would reset the connection, and the
                // client could lose the GOAWAY with it: read what it sent until it closes.
                let mut sink = [0u8; 4096];
                let mut left: usize = 64 * 1024;
                while left > 0 {
                    match io.read(&mut sink).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => left = left.saturating_sub(n),
                    }
                }
            })
            .await;
            return;
        }
        Ok(Ok((first, false))) => first,
        Ok(Err(_)) | Err(_) => return,
    };
    let io = Rewind::new(first, io);
    let header_timeout = HEADER_READ_TIMEOUT.saturating_sub(started.elapsed()).max(Duration::from_millis(100));
    let progress = requests.progress.clone();
    let service = service_fn(move |req| handle(req, peer, state.clone(), requests.clone()));
    let conn = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout)
        .max_header_size(MAX_HEADER_BYTES)
        .max_headers(MAX_HEADERS)
        .max_buf_size(MAX_BUF_BYTES)
        .serve_connection(TokioIo::new(WriteDeadline::counting(io, WRITE_STALL_TIMEOUT, progress)), service);
    if let Err(err) = watcher.watch(conn).await {
        tracing::debug!(%peer, error = %err, "connection ended with an error");
    }
}

/// The address actually bound, for logs (port 0 picks a free port).
pub fn local_address(listener: &TcpListener) -> Option<SocketAddr> {
    listener.local_addr().ok()
}
