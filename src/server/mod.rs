//! HTTP endpoints: `/metrics` (configurable), `/`, `/-/healthy`, `/-/ready`, over plain HTTP
//! or TLS, with optional basic auth (see [`crate::web`]).
//!
//! A scrape serves the latest snapshot's text, rendered once and shared (never copied), plus a
//! few series that depend on the moment of the scrape; a new snapshot is rendered at most once
//! a second ([`Renders`]).
//!
//! Limits, so that a slow or hostile client cannot exhaust the daemon:
//! - at most [`MAX_CONNECTIONS`] open connections, fewer at a low descriptor limit ([`connection_cap`]);
//! - request headers must arrive within [`HEADER_READ_TIMEOUT`] (this also closes idle
//!   keep-alive connections, as Go's servers do) and fit in [`MAX_HEADER_BYTES`];
//! - a TLS handshake must finish within [`HEADER_READ_TIMEOUT`];
//! - a response write that makes no progress for [`WRITE_STALL_TIMEOUT`] ends the connection;
//! - at most `web.max_requests` requests are handled at once, bcrypt checks included; more
//!   get 503 at once (like Prometheus' `--web.max-requests`), so scrapers retry instead of
//!   queueing behind a flood;
//! - basic auth checks (bcrypt) run on a small bounded pool, failures are limited per client
//!   address, new credentials of an address out of allowance wait their turn in its line
//!   (holding no request slot), and credentials verified or refused before are answered from
//!   memory (`auth.rs`);
//! - at the connection cap, the connections idle or stalled longest are closed for new ones,
//!   and one client address holds at most a quarter of the table (`connections.rs`);
//! - a request pipelined behind a response waits until the client has acknowledged that
//!   response, and the kernel's buffers of each connection are bounded ([`SEND_BUFFER_BYTES`]);
//! - the snapshot texts that responses in flight keep alive are bounded by
//!   `web.max_response_bytes` (`budget.rs`).

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, Instant};

use hyper::body::{Bytes, Incoming};
use hyper::header::{
    HeaderValue, ALLOW, AUTHORIZATION, CONTENT_ENCODING, CONTENT_TYPE, RETRY_AFTER, VARY, WWW_AUTHENTICATE,
};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use prometheus::{Encoder, Registry, TextEncoder};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};

mod auth;
mod body;
mod budget;
mod connections;
mod guard;
mod render;

use crate::config::split_listen_address;
use crate::gzip;
use crate::snapshot::Snapshot;
use crate::web::WebConfig;
use auth::{AuthGate, Entry, Verdict};
use budget::ResponseBudget;
use connections::{Connections, OpenStream, Progress, Requests};
use guard::{http2_refusal, read_preface, Rewind, WriteDeadline};
use render::Renderer;

pub use body::{held, Chunks};
pub use render::{Encoding, Renders, RENDER_INTERVAL};

/// How long a client may take to send its request headers (or finish a TLS handshake).
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// The request line and headers together; a scrape request needs a few hundred bytes.
pub const MAX_HEADER_BYTES: usize = 16 * 1024;
const MAX_HEADERS: usize = 64;
/// hyper's read buffer per connection (its minimum is 8 KiB).
const MAX_BUF_BYTES: usize = 64 * 1024;
/// How long a response write may make no progress (a client that stopped reading).
pub const WRITE_STALL_TIMEOUT: Duration = Duration::from_secs(30);
/// Open connections at once; each costs a file descriptor (the default soft limit is 1024), and
/// fewer when the descriptor limit is low ([`connection_cap`]).
pub const MAX_CONNECTIONS: usize = 512;
/// Descriptors kept for everything but connections: the collectors (a file or a directory or
/// two open at a time each, a cgroup walk one per level), reloads, the renderer, netlink.
const RESERVED_DESCRIPTORS: u64 = 64;

/// The connection cap for this process's descriptor limit. The soft RLIMIT_NOFILE is raised to
/// the hard one first (as Go's runtime does for node_exporter); what remains below it after the
/// descriptors open now and [`RESERVED_DESCRIPTORS`] is the cap, at most [`MAX_CONNECTIONS`].
/// Before (issue 24), with a soft limit of 200 the idle connections took every descriptor:
/// the collectors failed with EMFILE (36,701 errors in 4 s) and no scrape got through.
pub fn connection_cap() -> usize {
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

pub const METRICS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// What requests are served from. Replaced as a whole when the configuration is reloaded.
pub struct Site {
    pub snapshots: watch::Receiver<Arc<Snapshot>>,
    pub telemetry_path: String,
    /// Enabled collectors and their intervals, in order, for readiness and the landing page.
    pub collectors: Vec<(&'static str, Duration)>,
    pub web: Arc<WebConfig>,
    /// 0: no limit.
    pub max_requests: usize,
    /// Bytes of snapshot text responses in flight may hold (`web.max_response_bytes`); 0: no limit.
    pub max_response_bytes: usize,
    /// The latest snapshot a scrape rendered.
    pub rendered: Renders,
}

pub struct AppState {
    site: RwLock<Arc<Site>>,
    pub registry: Registry,
    in_flight: AtomicUsize,
    /// Kept across reloads: failures are counted per client, whatever the configuration.
    auth: AuthGate,
    budget: Arc<ResponseBudget>,
    renderer: Renderer,
}

impl AppState {
    pub fn new(site: Site, registry: Registry) -> Self {
        Self {
            budget: Arc::new(ResponseBudget::new(site.max_response_bytes)),
            site: RwLock::new(Arc::new(site)),
            registry,
            in_flight: AtomicUsize::new(0),
            auth: AuthGate::default(),
            renderer: Renderer::start(),
        }
    }

    /// The current site; a request keeps the one it started with.
    pub fn site(&self) -> Arc<Site> {
        self.site.read().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Swaps in a new site: requests from now on use it, requests in progress finish on the old.
    pub fn replace_site(&self, site: Site) {
        self.budget.set_limit(site.max_response_bytes);
        let mut current = self.site.write().unwrap_or_else(PoisonError::into_inner);
        // Remembered credentials survive a reload that keeps the users file as it was.
        if let (Some(new), Some(old)) = (&site.web.users, &current.web.users) {
            new.carry_over(old);
        }
        *current = Arc::new(site);
    }

    /// A request slot, or `None` when `max` requests are already being handled.
    fn admit(&self, max: usize) -> Option<Slot<'_>> {
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        let slot = Slot(&self.in_flight);
        (max == 0 || now <= max).then_some(slot)
    }
}

struct Slot<'a>(&'a AtomicUsize);

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Binds the listen address; `:port` means every interface, IPv6 and IPv4 when available.
pub async fn bind(address: &str) -> std::io::Result<TcpListener> {
    let (host, port) =
        split_listen_address(address).map_err(|m| std::io::Error::new(std::io::ErrorKind::InvalidInput, m))?;
    match host {
        Some(host) => TcpListener::bind((host.as_str(), port)).await,
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
                // At the cap: close the connections idle longest to make room for this one and
                // the next few (one at a time, each accept would wait for a task to end, and a
                // backlog of a thousand reopened connections took a scrape seconds to get
                // through). When none can be closed (every one is serving a request or has one
                // to read), wait for one to finish, looking again every RETRY_CLOSE_IDLEST: a
                // connection whose request was unread may be idle again by then.
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

/// Bounds the kernel's buffers of an accepted connection (issue 24: 3.9 MiB a connection, and
/// none of it charged to the unit's memory on cgroup v1). A failure leaves the kernel's
/// defaults, as before.
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

/// Waits until the client has acknowledged everything written to it, looking again after 5 ms,
/// doubling to 250 ms; false when it has not for [`WRITE_STALL_TIMEOUT`]. A request pipelined
/// behind a response is answered once that response has reached the client, so that a client
/// that never reads holds one response in the kernel, not as many as the send buffer takes
/// (hyper reads pipelined requests together, so holding back reads alone would not do).
async fn delivered(progress: &Progress) -> bool {
    let started = Instant::now();
    let mut delay = Duration::from_millis(5);
    while progress.unsent() > 0 {
        if started.elapsed() >= WRITE_STALL_TIMEOUT {
            return false;
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_millis(250));
    }
    true
}

async fn handle(
    req: Request<Incoming>,
    peer: SocketAddr,
    state: Arc<AppState>,
    requests: Requests,
) -> Result<Response<Chunks>, Infallible> {
    if !delivered(&requests.progress).await {
        tracing::debug!(%peer, "the client left its last response unread; reset");
        requests.progress.abort();
        return Ok(plain(StatusCode::REQUEST_TIMEOUT, ""));
    }
    let in_progress = requests.start();
    let site = state.site();
    let mut response = respond(&req, peer, &requests.progress, &state, &site).await;
    for (name, value) in &site.web.headers {
        response.headers_mut().insert(name.clone(), value.clone());
    }
    // The connection stays busy (never closed to make room) until the body is sent.
    Ok(response.map(|body| body.holding(in_progress)))
}

async fn respond(
    req: &Request<Incoming>,
    peer: SocketAddr,
    progress: &Progress,
    state: &AppState,
    site: &Arc<Site>,
) -> Response<Chunks> {
    // What memory answers, and the wait for a turn in the address's line, hold no slot: a line
    // of waiting clients must not take the slots of everyone else.
    let turn = match &site.web.users {
        None => None,
        Some(_) => match state.auth.enter(&site.web, req.headers().get(AUTHORIZATION), peer.ip()).await {
            Entry::Decided(Verdict::Allowed) => None,
            Entry::Decided(verdict) => return refusal(verdict),
            Entry::Check(turn) => Some(turn),
        },
    };
    let Some(_slot) = state.admit(site.max_requests) else {
        return plain(StatusCode::SERVICE_UNAVAILABLE, "Too many concurrent requests (web.max_requests); try again.\n");
    };
    if let Some(turn) = turn {
        match state.auth.verify(turn).await {
            Verdict::Allowed => {}
            verdict => return refusal(verdict),
        }
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        // RFC 9110, section 15.5.6: a 405 must say which methods the resource supports.
        let mut response = plain(StatusCode::METHOD_NOT_ALLOWED, "Only GET and HEAD are supported.\n");
        response.headers_mut().insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
        return response;
    }
    let path = req.uri().path();
    if path == site.telemetry_path {
        let encoding = if gzip::accepted(req.headers()) { Encoding::Gzip } else { Encoding::Identity };
        let mut response = metrics(state, site, progress, encoding).await;
        response.headers_mut().insert(VARY, HeaderValue::from_static("Accept-Encoding"));
        return response;
    }
    match path {
        "/" => landing(site),
        "/-/healthy" => plain(StatusCode::OK, "Healthy\n"),
        "/-/ready" => ready(site),
        _ => plain(StatusCode::NOT_FOUND, "Not found. See / for the available endpoints.\n"),
    }
}

/// The answer to a request the auth gate did not let in.
fn refusal(verdict: Verdict) -> Response<Chunks> {
    match verdict {
        Verdict::Allowed | Verdict::Denied => {
            let mut response = plain(StatusCode::UNAUTHORIZED, "Unauthorized\n");
            response
                .headers_mut()
                .insert(WWW_AUTHENTICATE, HeaderValue::from_static("Basic realm=\"memlock-exporter\""));
            response
        }
        Verdict::Limited(wait) => {
            let mut response = plain(StatusCode::TOO_MANY_REQUESTS, "Too many failed logins; try again later.\n");
            response.headers_mut().insert(RETRY_AFTER, HeaderValue::from(wait.as_secs().max(1)));
            response
        }
        Verdict::Busy => plain(StatusCode::SERVICE_UNAVAILABLE, "Too many logins being checked; try again.\n"),
    }
}

async fn metrics(state: &AppState, site: &Site, progress: &Progress, encoding: Encoding) -> Response<Chunks> {
    let current = site.snapshots.borrow().clone();
    let mut snapshot = site.rendered.serve(current, &state.renderer).await;
    if encoding == Encoding::Gzip && snapshot.compressed_if_ready().is_none() {
        // Once per snapshot served: a snapshot is served at most once a render interval.
        state.renderer.render(snapshot.clone(), Encoding::Gzip).await;
    }
    // The sampled text (or its compressed form) is shared with the snapshot, not copied: a
    // request in flight costs a reference, however large the snapshot and however many
    // scrapers. Texts of older snapshots that responses still hold are bounded by the budget.
    let mut reservation = state.budget.reserve(&snapshot, snapshot.held_bytes(), progress);
    if reservation.is_none() {
        // No room for the new text while young responses hold an older one: that one is held
        // already and free to share (a render or two older), in the form it has.
        if let Some(held) = state.budget.newest_held() {
            reservation = state.budget.reserve(&held, held.held_bytes(), progress);
            snapshot = held;
        }
    }
    let Some(reservation) = reservation else {
        return plain(StatusCode::SERVICE_UNAVAILABLE, "Too many large responses in flight; try again.\n");
    };
    // The series of the moment: sample ages, then the exporter's own metrics.
    let mut tail = snapshot.render_ages(Instant::now()).into_bytes();
    if let Err(err) = TextEncoder::new().encode(&state.registry.gather(), &mut tail) {
        tracing::warn!(error = %err, "encoding the exporter's own metrics failed");
    }
    let compressed = match encoding {
        Encoding::Gzip => snapshot.compressed_if_ready().cloned(),
        Encoding::Identity => None,
    };
    // The response keeps its snapshot too (a vector of shared reports, cheap beside the text),
    // so that a later scrape can fall back to it while it is in flight.
    let (body, gzipped) = match compressed.as_deref().and_then(|prefix| prefix.member(&tail)) {
        Some([header, shared, end]) => (Chunks::new([header, held(shared, (reservation, snapshot)), end]), true),
        None => {
            let text = snapshot.text_bytes();
            (Chunks::new([held(text, (reservation, snapshot)), Bytes::from(tail)]), false)
        }
    };
    let mut response = Response::new(body);
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static(METRICS_CONTENT_TYPE));
    if gzipped {
        response.headers_mut().insert(CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    }
    response
}

fn ready(site: &Site) -> Response<Chunks> {
    let snapshot = site.snapshots.borrow().clone();
    let missing: Vec<&str> = site.collectors.iter().map(|(c, _)| *c).filter(|c| snapshot.report(c).is_none()).collect();
    if missing.is_empty() {
        plain(StatusCode::OK, "Ready\n")
    } else {
        plain(
            StatusCode::SERVICE_UNAVAILABLE,
            &format!("Not ready: waiting for the first run of {}\n", missing.join(", ")),
        )
    }
}

fn landing(site: &Site) -> Response<Chunks> {
    let snapshot = site.snapshots.borrow().clone();
    let now = Instant::now();
    let mut rows = String::new();
    for (name, _) in &site.collectors {
        let (status, age) = match snapshot.report(name) {
            Some(r) => (
                if r.success { "ok" } else { "failing" },
                format!("{:.1}s ago", now.saturating_duration_since(r.finished).as_secs_f64()),
            ),
            None => ("not run yet", "-".to_owned()),
        };
        rows.push_str(&format!("<tr><td>{}</td><td>{status}</td><td>{age}</td></tr>\n", html_escape(name)));
    }
    let path = html_escape(&site.telemetry_path);
    let page = format!(
        "<!DOCTYPE html>\n<html><head><title>memlock-exporter</title></head><body>\n\
         <h1>memlock-exporter {version}</h1>\n\
         <p>Locked and pinned memory against the limits that stop RDMA registration.</p>\n\
         <ul><li><a href=\"{path}\">Metrics</a></li><li><a href=\"/-/healthy\">Health</a></li><li><a \
         href=\"/-/ready\">Readiness</a></li></ul>\n\
         <h2>Collectors</h2>\n<table><tr><th>collector</th><th>last \
         run</th><th>finished</th></tr>\n{rows}</table>\n</body></html>\n",
        version = env!("CARGO_PKG_VERSION"),
    );
    let mut response = Response::new(Chunks::new([Bytes::from(page)]));
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8"));
    response
}

fn plain(status: StatusCode, text: &str) -> Response<Chunks> {
    let mut response = Response::new(Chunks::new([Bytes::from(text.to_owned())]));
    *response.status_mut() = status;
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    response
}

fn html_escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// The address actually bound, for logs (port 0 picks a free port).
pub fn local_address(listener: &TcpListener) -> Option<SocketAddr> {
    listener.local_addr().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::body::Body;

    /// A site serving `snapshot` at /metrics, without TLS or auth.
    fn test_site(snapshot: &Arc<Snapshot>, max_requests: usize) -> Site {
        Site {
            snapshots: watch::channel(snapshot.clone()).1,
            telemetry_path: "/metrics".into(),
            collectors: vec![],
            web: Arc::default(),
            max_requests,
            max_response_bytes: 0,
            rendered: Renders::default(),
        }
    }

    #[test]
    fn listen_addresses() {
        assert_eq!(split_listen_address(":9478"), Ok((None, 9478)));
        assert_eq!(split_listen_address("127.0.0.1:1"), Ok((Some("127.0.0.1".into()), 1)));
        assert_eq!(split_listen_address("[::1]:9478"), Ok((Some("::1".into()), 9478)));
        assert!(split_listen_address("9478").is_err());
        assert!(split_listen_address(":99999").is_err());
        assert!(split_listen_address("host:http").is_err());
    }

    /// Found by the scale tests: every scrape copied the whole snapshot text (37 MB with 10,000
    /// cgroups), so 40 concurrent scrapes (the default web.max_requests) needed 1.5 GB, far
    /// over the unit's MemoryMax. A response now holds a reference to the snapshot's text.
    #[tokio::test]
    async fn scrapes_share_the_snapshot_text_instead_of_copying_it() {
        use http_body_util::BodyExt;
        let report = crate::snapshot::Report {
            collector: "node",
            success: true,
            duration: Duration::from_millis(3),
            interval: Duration::from_secs(1),
            finished: Instant::now(),
            data: None,
            trends: Arc::default(),
        };
        let snapshot = Arc::new(Snapshot::new(vec![report]));
        let (a, b) = (snapshot.text_bytes(), snapshot.text_bytes());
        assert!(!a.is_empty());
        assert_eq!(a.as_ptr(), b.as_ptr(), "two scrapes, one copy");
        assert_eq!(a.as_ptr(), snapshot.text().as_ptr());
        let site = test_site(&snapshot, 0);
        let registry = Registry::new();
        let gauge = prometheus::IntGauge::new("memlock_exporter_test", "A test gauge.").unwrap();
        registry.register(Box::new(gauge)).unwrap();
        let state = AppState::new(test_site(&snapshot, 0), registry);
        let place = Arc::new(Connections::default()).open(None);
        let response = metrics(&state, &site, place.progress(), Encoding::Identity).await;
        let exact = response.body().size_hint().exact().expect("an exact length, so Content-Length is sent");
        let body = response.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(body.len() as u64, exact);
        let text = std::str::from_utf8(&body).unwrap();
        assert!(text.starts_with(snapshot.text()));
        assert!(
            text.contains("memlock_exporter_collector_sample_age_seconds{collector=\"node\"}")
                && text.ends_with("memlock_exporter_test 0\n"),
            "{text}"
        );
    }

    /// Issue 17: a gzip scrape is the snapshot's text compressed once, shared by every gzip
    /// scrape of that snapshot, followed by the series of the moment.
    #[tokio::test]
    async fn gzip_scrapes_share_one_compressed_text() {
        use http_body_util::BodyExt;
        use std::io::Read;
        let snapshot = Arc::new(Snapshot::empty());
        let (state, site) = (AppState::new(test_site(&snapshot, 0), Registry::new()), test_site(&snapshot, 0));
        let place = Arc::new(Connections::default()).open(None);
        let mut bodies = Vec::new();
        for _ in 0..2 {
            let response = metrics(&state, &site, place.progress(), Encoding::Gzip).await;
            assert_eq!(response.headers().get(CONTENT_ENCODING).unwrap(), "gzip");
            let exact = response.body().size_hint().exact().unwrap();
            let chunks: Vec<Bytes> = response.into_body().chunks.into_iter().collect();
            assert_eq!(chunks.iter().map(|c| c.len() as u64).sum::<u64>(), exact);
            bodies.push(chunks);
        }
        assert_eq!(bodies[0][1].as_ptr(), bodies[1][1].as_ptr(), "two gzip scrapes, one compressed text");
        assert_eq!(bodies[0][1].as_ptr(), snapshot.compressed().unwrap().shared().as_ptr());
        let joined: Vec<u8> = bodies[0].iter().flat_map(|c| c.iter().copied()).collect();
        let mut text = String::new();
        flate2::read::GzDecoder::new(&joined[..]).read_to_string(&mut text).unwrap();
        assert!(text.starts_with(snapshot.text()), "{text}");
        assert!(text.contains("memlock_exporter_collector_sample_age_seconds") || snapshot.reports.is_empty());
        let identity = metrics(&state, &site, place.progress(), Encoding::Identity).await;
        assert!(identity.headers().get(CONTENT_ENCODING).is_none());
        let plain = identity.into_body().collect().await.unwrap().to_bytes();
        assert!(plain.starts_with(snapshot.text().as_bytes()));
    }

    /// hyper drops a response body at its last frame, while that frame may still be queued for
    /// the socket: a guard on the body would be released early, one on the chunk is not.
    #[test]
    fn a_guard_lives_as_long_as_the_last_byte_of_the_body() {
        struct Flag(Arc<AtomicUsize>);
        impl Drop for Flag {
            fn drop(&mut self) {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }
        let dropped = Arc::new(AtomicUsize::new(0));
        let mut body =
            Chunks::new([Bytes::from_static(b"first"), Bytes::from_static(b"last")]).holding(Flag(dropped.clone()));
        let mut frames = Vec::new();
        while let Some(chunk) = body.chunks.pop_front() {
            frames.push(chunk.slice(1..));
        }
        drop(body);
        assert_eq!(dropped.load(Ordering::SeqCst), 0, "hyper still holds the last frame");
        assert_eq!(&frames[1][..], b"ast");
        drop(frames);
        assert_eq!(dropped.load(Ordering::SeqCst), 1);
        drop(Chunks::new([]).holding(Flag(dropped.clone())));
        assert_eq!(dropped.load(Ordering::SeqCst), 2, "an empty body holds it itself");
    }

    #[test]
    fn request_slots_are_bounded_and_released() {
        let state = AppState::new(test_site(&Arc::new(Snapshot::empty()), 2), Registry::new());
        let first = state.admit(2).unwrap();
        let second = state.admit(2).unwrap();
        assert!(state.admit(2).is_none());
        drop(first);
        assert!(state.admit(2).is_some());
        drop(second);
        assert_eq!(state.in_flight.load(Ordering::SeqCst), 0, "refused requests give their count back too");
        let _many: Vec<_> = (0..100).map(|_| state.admit(0).unwrap()).collect();
    }
}
