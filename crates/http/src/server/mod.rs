//! HTTP endpoints: `/metrics` (configurable), `/`, `/-/healthy`, `/-/ready`, over plain HTTP
//! or TLS, with optional basic auth (see [`crate::webconfig`]).
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
//!   response, and the kernel's buffers of each connection are bounded (`listen.rs`);
//! - the snapshot texts that responses in flight keep alive are bounded by
//!   `web.max_response_bytes` (`held.rs`).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, Instant};

use hyper::body::{Bytes, Incoming};
use hyper::header::{
    HeaderValue, ALLOW, AUTHORIZATION, CONTENT_ENCODING, CONTENT_TYPE, RETRY_AFTER, VARY, WWW_AUTHENTICATE,
};
use hyper::{Method, Request, Response, StatusCode};
use prometheus::{Encoder, Registry, TextEncoder};

mod auth;
mod body;
mod connections;
mod guard;
mod held;
mod listen;
mod render;

use crate::gzip;
use crate::page::Pages;
use crate::webconfig::WebConfig;
use auth::{AuthGate, Entry, Verdict};
use connections::{Progress, Requests};
use held::HeldTexts;
use render::Renderer;

pub use body::held;
pub(crate) use body::Chunks;
pub use listen::{bind, local_address, serve};
pub use render::{Encoding, Renders};

/// How long a client may take to send its request headers (or finish a TLS handshake).
pub(crate) const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// The request line and headers together; a scrape request needs a few hundred bytes.
pub(crate) const MAX_HEADER_BYTES: usize = 16 * 1024;
/// How long a response write may make no progress (a client that stopped reading).
pub(crate) const WRITE_STALL_TIMEOUT: Duration = Duration::from_secs(30);
/// Open connections at once; each costs a file descriptor (the default soft limit is 1024), and
/// fewer when the descriptor limit is low ([`connection_cap`]).
pub const MAX_CONNECTIONS: usize = 512;
pub(crate) const METRICS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// What requests are served from. Replaced as a whole when the configuration is reloaded.
pub struct Site {
    /// The page to serve at the telemetry path.
    pub pages: Pages,
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
    held: Arc<HeldTexts>,
    renderer: Renderer,
}

impl AppState {
    pub fn new(site: Site, registry: Registry) -> Self {
        Self {
            held: Arc::new(HeldTexts::new(site.max_response_bytes)),
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
        self.held.set_limit(site.max_response_bytes);
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

pub(super) async fn handle(
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
    let current = (site.pages)();
    let mut page = site.rendered.serve(current, &state.renderer).await;
    if encoding == Encoding::Gzip && page.compressed_if_ready().is_none() {
        // Once per page served: a page is served at most once a render interval.
        state.renderer.render(page.clone(), Encoding::Gzip).await;
    }
    // The sampled text (or its compressed form) is shared with the page, not copied: a
    // request in flight costs a reference, however large the page and however many
    // scrapers. Texts of older pages that responses still hold are bounded (`held.rs`).
    let mut reservation = state.held.reserve(&page, page.held_bytes(), progress);
    if reservation.is_none() {
        // No room for the new text while young responses hold an older one: that one is held
        // already and free to share (a render or two older), in the form it has.
        if let Some(held) = state.held.newest_held() {
            reservation = state.held.reserve(&held, held.held_bytes(), progress);
            page = held;
        }
    }
    let Some(reservation) = reservation else {
        return plain(StatusCode::SERVICE_UNAVAILABLE, "Too many large responses in flight; try again.\n");
    };
    // The series of the moment: sample ages, then the exporter's own metrics.
    let mut tail = page.moment(Instant::now()).into_bytes();
    if let Err(err) = TextEncoder::new().encode(&state.registry.gather(), &mut tail) {
        tracing::warn!(error = %err, "encoding the exporter's own metrics failed");
    }
    let compressed = match encoding {
        Encoding::Gzip => page.compressed_if_ready().cloned(),
        Encoding::Identity => None,
    };
    // The response keeps its page too (a vector of shared reports, cheap beside the text),
    // so that a later scrape can fall back to it while it is in flight.
    let (body, gzipped) = match compressed.as_deref().and_then(|prefix| prefix.member(&tail)) {
        Some([header, shared, end]) => (Chunks::new([header, held(shared, (reservation, page)), end]), true),
        None => {
            let text = page.text_bytes();
            (Chunks::new([held(text, (reservation, page)), Bytes::from(tail)]), false)
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
    let page = (site.pages)();
    let missing: Vec<&str> = site.collectors.iter().map(|(c, _)| *c).filter(|c| page.last_run(c).is_none()).collect();
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
    let page = (site.pages)();
    let now = Instant::now();
    let mut rows = String::new();
    for (name, _) in &site.collectors {
        let (status, age) = match page.last_run(name) {
            Some((success, finished)) => (
                if success { "ok" } else { "failing" },
                format!("{:.1}s ago", now.saturating_duration_since(finished).as_secs_f64()),
            ),
            None => ("not run yet", "-".to_owned()),
        };
        rows.push_str(&format!("<tr><td>{}</td><td>{status}</td><td>{age}</td></tr>\n", html_escape(name)));
    }
    let path = html_escape(&site.telemetry_path);
    let html = format!(
        "<!DOCTYPE html>\n<html><head><title>memlock-exporter</title></head><body>\n\
         <h1>memlock-exporter {version}</h1>\n\
         <p>Locked and pinned memory against the limits that stop RDMA registration.</p>\n\
         <ul><li><a href=\"{path}\">Metrics</a></li><li><a href=\"/-/healthy\">Health</a></li><li><a \
         href=\"/-/ready\">Readiness</a></li></ul>\n\
         <h2>Collectors</h2>\n<table><tr><th>collector</th><th>last \
         run</th><th>finished</th></tr>\n{rows}</table>\n{status}</body></html>\n",
        version = env!("CARGO_PKG_VERSION"),
        status = status_list(&page.status()),
    );
    let mut response = Response::new(Chunks::new([Bytes::from(html)]));
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8"));
    response
}

/// The landing page's status list, each line escaped; nothing when the page has none.
fn status_list(lines: &[(String, String)]) -> String {
    if lines.is_empty() {
        return String::new();
    }
    let items: String =
        lines.iter().map(|(what, state)| format!("<li>{}: {}</li>\n", html_escape(what), html_escape(state))).collect();
    format!("<h2>Status</h2>\n<ul>{items}</ul>\n")
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::page::{Page, StaticPage};
    use connections::Connections;
    use hyper::body::Body;

    /// A site serving `page` at /metrics, without TLS or auth.
    fn test_site(page: &Arc<dyn Page>, max_requests: usize) -> Site {
        let page = page.clone();
        Site {
            pages: Box::new(move || page.clone()),
            telemetry_path: "/metrics".into(),
            collectors: vec![],
            web: Arc::default(),
            max_requests,
            max_response_bytes: 0,
            rendered: Renders::default(),
        }
    }

    /// Found by the scale tests: every scrape copied the whole page text (tens of MB with 10,000
    /// cgroups), so 40 concurrent scrapes (the default web.max_requests) needed more than a GB,
    /// far over the unit's MemoryMax. A response holds a reference to the page's text.
    #[tokio::test]
    async fn scrapes_share_the_page_text_instead_of_copying_it() {
        use http_body_util::BodyExt;
        let moment = "memlock_exporter_collector_sample_age_seconds{collector=\"node\"} 0.1\n";
        let page: Arc<dyn Page> = Arc::new(StaticPage::new("memlock_node_mlocked_bytes 0\n").with_moment(moment));
        let (a, b) = (page.text_bytes(), page.text_bytes());
        assert!(!a.is_empty());
        assert_eq!(a.as_ptr(), b.as_ptr(), "two scrapes, one copy");
        assert_eq!(a.as_ptr(), page.text().as_ptr());
        let site = test_site(&page, 0);
        let registry = Registry::new();
        let gauge = prometheus::IntGauge::new("memlock_exporter_test", "A test gauge.").unwrap();
        registry.register(Box::new(gauge)).unwrap();
        let state = AppState::new(test_site(&page, 0), registry);
        let place = Arc::new(Connections::default()).open(None);
        let response = metrics(&state, &site, place.progress(), Encoding::Identity).await;
        let exact = response.body().size_hint().exact().expect("an exact length, so Content-Length is sent");
        let body = response.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(body.len() as u64, exact);
        let text = std::str::from_utf8(&body).unwrap();
        assert!(text.starts_with(page.text().as_str()));
        assert!(text.contains(moment) && text.ends_with("memlock_exporter_test 0\n"), "{text}");
    }

    /// A gzip scrape is the page's text compressed once, shared by every gzip scrape of that
    /// page, followed by the series of the moment.
    #[tokio::test]
    async fn gzip_scrapes_share_one_compressed_text() {
        use http_body_util::BodyExt;
        use std::io::Read;
        let moment = "memlock_exporter_collector_sample_age_seconds{collector=\"node\"} 0.1\n";
        let page: Arc<dyn Page> = Arc::new(StaticPage::new("memlock_node_mlocked_bytes 0\n").with_moment(moment));
        let (state, site) = (AppState::new(test_site(&page, 0), Registry::new()), test_site(&page, 0));
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
        assert_eq!(bodies[0][1].as_ptr(), page.compressed().unwrap().shared().as_ptr());
        let joined: Vec<u8> = bodies[0].iter().flat_map(|c| c.iter().copied()).collect();
        let mut text = String::new();
        flate2::read::GzDecoder::new(&joined[..]).read_to_string(&mut text).unwrap();
        assert!(text.starts_with(page.text().as_str()), "{text}");
        assert!(text.contains(moment), "{text}");
        let identity = metrics(&state, &site, place.progress(), Encoding::Identity).await;
        assert!(identity.headers().get(CONTENT_ENCODING).is_none());
        let plain = identity.into_body().collect().await.unwrap().to_bytes();
        assert!(plain.starts_with(page.text().as_bytes()));
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
    fn the_status_list_is_escaped_and_absent_when_empty() {
        assert_eq!(status_list(&[]), "");
        let list = status_list(&[("Fast path".into(), "on, to http://am:9093/<x>".into())]);
        assert_eq!(list, "<h2>Status</h2>\n<ul><li>Fast path: on, to http://am:9093/&lt;x&gt;</li>\n</ul>\n");
    }

    #[test]
    fn request_slots_are_bounded_and_released() {
        let page: Arc<dyn Page> = Arc::new(StaticPage::new(""));
        let state = AppState::new(test_site(&page, 2), Registry::new());
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
