//! HTTP endpoints: `/metrics` (configurable), `/`, `/-/healthy`, `/-/ready`.
//!
//! A scrape renders nothing new: it serves the latest snapshot's cached text plus a few series
//! that depend on the moment of the scrape, so concurrent scrapers cost a copy each.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use prometheus::{Encoder, Registry, TextEncoder};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::snapshot::Snapshot;

/// How long a client may take to send its request headers.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

pub const METRICS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

pub struct AppState {
    pub snapshots: watch::Receiver<Arc<Snapshot>>,
    pub registry: Registry,
    pub telemetry_path: String,
    /// Enabled collectors, in order, for readiness and the landing page.
    pub collectors: Vec<&'static str>,
}

/// Splits a Go-style listen address: `:9478` (all interfaces), `host:port`, `[v6]:port`.
pub fn split_listen_address(address: &str) -> Result<(Option<String>, u16), String> {
    let (host, port) = address
        .rsplit_once(':')
        .ok_or_else(|| format!("{address:?} has no port (expected host:port or :port)"))?;
    let port: u16 = port.parse().map_err(|_| format!("{address:?}: port {port:?} is not a number from 0 to 65535"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    Ok(((!host.is_empty()).then(|| host.to_owned()), port))
}

/// Binds the listen address; `:port` means every interface, IPv6 and IPv4 when available.
pub async fn bind(address: &str) -> std::io::Result<TcpListener> {
    let (host, port) = split_listen_address(address).map_err(|m| std::io::Error::new(std::io::ErrorKind::InvalidInput, m))?;
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
pub async fn serve(listener: TcpListener, state: Arc<AppState>, shutdown: impl std::future::Future<Output = ()>, drain: Duration) {
    let graceful = GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(conn) => conn,
                    Err(err) => {
                        // EMFILE and friends: back off instead of spinning.
                        tracing::warn!(error = %err, "accept failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                let state = state.clone();
                let service = service_fn(move |req| handle(req, state.clone()));
                let conn = http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(HEADER_READ_TIMEOUT)
                    .serve_connection(TokioIo::new(stream), service);
                let conn = graceful.watch(conn);
                tokio::spawn(async move {
                    if let Err(err) = conn.await {
                        tracing::debug!(%peer, error = %err, "connection ended with an error");
                    }
                });
            }
            () = &mut shutdown => break,
        }
    }
    drop(listener);
    tokio::select! {
        () = graceful.shutdown() => tracing::debug!("all connections drained"),
        () = tokio::time::sleep(drain) => tracing::warn!(?drain, "connections still open after the drain period; closing"),
    }
}

async fn handle(req: Request<Incoming>, state: Arc<AppState>) -> Result<Response<Full<Bytes>>, Infallible> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return Ok(plain(StatusCode::METHOD_NOT_ALLOWED, "Only GET and HEAD are supported.\n"));
    }
    let path = req.uri().path();
    let response = if path == state.telemetry_path {
        metrics(&state)
    } else {
        match path {
            "/" => landing(&state),
            "/-/healthy" => plain(StatusCode::OK, "Healthy\n"),
            "/-/ready" => ready(&state),
            _ => plain(StatusCode::NOT_FOUND, "Not found. See / for the available endpoints.\n"),
        }
    };
    Ok(response)
}

fn metrics(state: &AppState) -> Response<Full<Bytes>> {
    let snapshot = state.snapshots.borrow().clone();
    let mut body = String::with_capacity(snapshot.text().len() + 4096);
    body.push_str(snapshot.text());
    body.push_str(&snapshot.render_ages(Instant::now()));
    let mut own = Vec::new();
    if let Err(err) = TextEncoder::new().encode(&state.registry.gather(), &mut own) {
        tracing::warn!(error = %err, "encoding the exporter's own metrics failed");
    }
    body.push_str(&String::from_utf8_lossy(&own));
    let mut response = Response::new(Full::new(Bytes::from(body)));
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static(METRICS_CONTENT_TYPE));
    response
}

fn ready(state: &AppState) -> Response<Full<Bytes>> {
    let snapshot = state.snapshots.borrow().clone();
    let missing: Vec<&str> = state.collectors.iter().copied().filter(|c| snapshot.report(c).is_none()).collect();
    if missing.is_empty() {
        plain(StatusCode::OK, "Ready\n")
    } else {
        plain(StatusCode::SERVICE_UNAVAILABLE, &format!("Not ready: waiting for the first run of {}\n", missing.join(", ")))
    }
}

fn landing(state: &AppState) -> Response<Full<Bytes>> {
    let snapshot = state.snapshots.borrow().clone();
    let now = Instant::now();
    let mut rows = String::new();
    for name in &state.collectors {
        let (status, age) = match snapshot.report(name) {
            Some(r) => (if r.success { "ok" } else { "failing" }, format!("{:.1}s ago", now.saturating_duration_since(r.finished).as_secs_f64())),
            None => ("not run yet", "-".to_owned()),
        };
        rows.push_str(&format!("<tr><td>{}</td><td>{status}</td><td>{age}</td></tr>\n", html_escape(name)));
    }
    let path = html_escape(&state.telemetry_path);
    let page = format!(
        "<!DOCTYPE html>\n<html><head><title>memlock-exporter</title></head><body>\n\
         <h1>memlock-exporter {version}</h1>\n\
         <p>Locked and pinned memory against the limits that stop RDMA registration.</p>\n\
         <ul><li><a href=\"{path}\">Metrics</a></li><li><a href=\"/-/healthy\">Health</a></li><li><a href=\"/-/ready\">Readiness</a></li></ul>\n\
         <h2>Collectors</h2>\n<table><tr><th>collector</th><th>last run</th><th>finished</th></tr>\n{rows}</table>\n</body></html>\n",
        version = env!("CARGO_PKG_VERSION"),
    );
    let mut response = Response::new(Full::new(Bytes::from(page)));
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8"));
    response
}

fn plain(status: StatusCode, text: &str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(text.to_owned())));
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

    #[test]
    fn listen_addresses() {
        assert_eq!(split_listen_address(":9478"), Ok((None, 9478)));
        assert_eq!(split_listen_address("127.0.0.1:1"), Ok((Some("127.0.0.1".into()), 1)));
        assert_eq!(split_listen_address("[::1]:9478"), Ok((Some("::1".into()), 9478)));
        assert!(split_listen_address("9478").is_err());
        assert!(split_listen_address(":99999").is_err());
        assert!(split_listen_address("host:http").is_err());
    }
}
