//! Basic auth that a flood of wrong passwords cannot turn against the daemon or its scraper.
//!
//! bcrypt costs tens of milliseconds of CPU per check by design. Before this gate, 50 clients
//! sending wrong passwords took both cores and locked the real scraper out (0 of 20 scrapes),
//! and clients that hung up right after sending left their checks running on tokio's blocking
//! pool: 8 of them took the daemon from 9 to 520 threads (issue 15). Now:
//! - credentials once verified are answered from memory, before any limit below;
//! - at most [`BCRYPT_WORKERS`] checks run at once, and [`BCRYPT_WAITING`] more may wait; a
//!   request beyond that is answered 503 at once;
//! - a request whose client is gone is dropped by hyper (its HTTP/1 dispatcher reads the
//!   connection while the service runs and ends it at end of file: `proto/h1/conn.rs`,
//!   `mid_message_detect_eof`), so its place in the queue is given back and its check never
//!   starts; a check already running finishes, but only [`BCRYPT_WORKERS`] can;
//! - each client address may fail [`FAILURE_BURST`] times, then once every
//!   [`FAILURE_REFILL`]; beyond that it gets 429 without a check. A check is paid for when it
//!   enters the queue and refunded when it succeeds, so abandoned checks count as failures.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use hyper::header::HeaderValue;
use tokio::sync::Semaphore;

use crate::web::{self, WebConfig};

/// bcrypt checks running at once: one core's worth, so the other keeps serving and sampling.
pub const BCRYPT_WORKERS: usize = 1;
/// Checks that may wait for a worker; more are refused (503) rather than queued.
pub const BCRYPT_WAITING: usize = 4;
/// Failed attempts an address may make at once...
pub const FAILURE_BURST: u32 = 10;
/// ...and then one more per this interval.
pub const FAILURE_REFILL: Duration = Duration::from_secs(1);
/// Addresses whose failures are tracked; beyond this the one that failed longest ago is forgotten.
const TRACKED_ADDRESSES: usize = 4096;

/// What the gate decided for a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Allowed,
    /// Wrong, missing or malformed credentials: 401.
    Denied,
    /// Too many failures from this address: 429, retry after this long.
    Limited(Duration),
    /// Every worker busy and the queue full: 503.
    Busy,
}

pub struct AuthGate {
    workers: Arc<Semaphore>,
    /// Checks running or waiting for a worker.
    queued: AtomicUsize,
    failures: Mutex<HashMap<IpAddr, Allowance>>,
}

/// A token bucket of failed attempts for one address.
#[derive(Debug, Clone, Copy)]
struct Allowance {
    tokens: f64,
    updated: Instant,
}

impl Allowance {
    fn refilled(self, now: Instant) -> Allowance {
        let earned = now.saturating_duration_since(self.updated).as_secs_f64() / FAILURE_REFILL.as_secs_f64();
        Allowance { tokens: (self.tokens + earned).min(f64::from(FAILURE_BURST)), updated: now }
    }
}

impl Default for AuthGate {
    fn default() -> Self {
        Self {
            workers: Arc::new(Semaphore::new(BCRYPT_WORKERS)),
            queued: AtomicUsize::new(0),
            failures: Mutex::default(),
        }
    }
}

/// Gives back a place in the queue, also when the request is dropped while it waits.
struct Queued<'a>(&'a AtomicUsize);

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl AuthGate {
    /// Checks an `Authorization` header against `web`'s users (which must be set).
    pub async fn check(&self, web: &Arc<WebConfig>, header: Option<&HeaderValue>, peer: IpAddr) -> Verdict {
        let Some(users) = &web.users else { return Verdict::Allowed };
        let Some((user, password)) = header.and_then(|h| web::parse_basic_authorization(h.as_bytes())) else {
            return Verdict::Denied;
        };
        let client = client_key(peer);
        match users.cached(&user, &password) {
            Some(true) => return Verdict::Allowed,
            Some(false) => return self.failed(client),
            None => {}
        }
        // An attempt is paid for before it is let into the queue and refunded if it succeeds
        // (or is not let in), so failures and checks abandoned midway both count.
        if let Err(wait) = self.spend(client, Instant::now()) {
            return Verdict::Limited(wait);
        }
        if self.queued.fetch_add(1, Ordering::SeqCst) >= BCRYPT_WORKERS + BCRYPT_WAITING {
            self.queued.fetch_sub(1, Ordering::SeqCst);
            self.refund(client);
            return Verdict::Busy;
        }
        let _queued = Queued(&self.queued);
        // The semaphore is never closed; an error would mean it was: refuse rather than check.
        let Ok(worker) = self.workers.clone().acquire_owned().await else { return Verdict::Busy };
        let web = web.clone();
        let ok = tokio::task::spawn_blocking(move || {
            let _worker = worker;
            web.users.as_ref().is_some_and(|u| u.verify(&user, &password))
        })
        .await
        .unwrap_or(false);
        if ok {
            self.refund(client);
            Verdict::Allowed
        } else {
            Verdict::Denied
        }
    }

    /// Takes one attempt from `client`'s allowance, or says how long until it has one.
    fn spend(&self, client: IpAddr, now: Instant) -> Result<(), Duration> {
        let mut failures = self.failures.lock().unwrap_or_else(PoisonError::into_inner);
        if failures.len() >= TRACKED_ADDRESSES && !failures.contains_key(&client) {
            // Forget addresses that have their whole allowance back; failing that, the oldest.
            failures.retain(|_, a| a.refilled(now).tokens < f64::from(FAILURE_BURST));
            if failures.len() >= TRACKED_ADDRESSES {
                if let Some(oldest) = failures.iter().min_by_key(|(_, a)| a.updated).map(|(ip, _)| *ip) {
                    failures.remove(&oldest);
                }
            }
        }
        let fresh = Allowance { tokens: f64::from(FAILURE_BURST), updated: now };
        let allowance = failures.entry(client).or_insert(fresh);
        *allowance = allowance.refilled(now);
        if allowance.tokens < 1.0 {
            return Err(FAILURE_REFILL.mul_f64(1.0 - allowance.tokens));
        }
        allowance.tokens -= 1.0;
        Ok(())
    }

    fn refund(&self, client: IpAddr) {
        let mut failures = self.failures.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(allowance) = failures.get_mut(&client) {
            allowance.tokens = (allowance.tokens + 1.0).min(f64::from(FAILURE_BURST));
        }
    }

    /// Counts a failure that needed no check (a remembered wrong password, one too long).
    fn failed(&self, client: IpAddr) -> Verdict {
        match self.spend(client, Instant::now()) {
            Ok(()) => Verdict::Denied,
            Err(wait) => Verdict::Limited(wait),
        }
    }
}

/// The unit a client is limited by: its IPv4 address, or the /64 network of an IPv6 address (one
/// host is commonly given a whole /64). IPv4 clients of a dual-stack socket arrive as
/// `::ffff:a.b.c.d` and count as the IPv4 address.
pub fn client_key(peer: IpAddr) -> IpAddr {
    match peer.to_canonical() {
        IpAddr::V6(v6) => {
            let network = u128::from(v6) & !((1u128 << 64) - 1);
            IpAddr::V6(network.into())
        }
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn web(hash: &str) -> Arc<WebConfig> {
        Arc::new(WebConfig {
            users: Some(web::BasicAuth::new(BTreeMap::from([("prometheus".to_owned(), hash.to_owned())]))),
            ..WebConfig::default()
        })
    }

    fn header(user: &str, password: &str) -> HeaderValue {
        const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let input = format!("{user}:{password}").into_bytes();
        let mut out = String::from("Basic ");
        for chunk in input.chunks(3) {
            let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
            let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
            for i in 0..4 {
                out.push(if i <= chunk.len() { ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char } else { '=' });
            }
        }
        HeaderValue::from_str(&out).unwrap()
    }

    #[tokio::test]
    async fn failures_are_limited_per_address_and_verified_credentials_pass_regardless() {
        let gate = AuthGate::default();
        let web = web(&bcrypt::hash("right", 4).unwrap());
        let (attacker, scraper): (IpAddr, IpAddr) = ("192.0.2.1".parse().unwrap(), "192.0.2.2".parse().unwrap());
        assert_eq!(gate.check(&web, Some(&header("prometheus", "right")), attacker).await, Verdict::Allowed);
        for attempt in 0..FAILURE_BURST {
            let verdict = gate.check(&web, Some(&header("prometheus", &format!("wrong-{attempt}"))), attacker).await;
            assert_eq!(verdict, Verdict::Denied, "attempt {attempt}");
        }
        let Verdict::Limited(wait) = gate.check(&web, Some(&header("nobody", "x")), attacker).await else {
            panic!("the eleventh failure in a row is limited");
        };
        assert!(wait <= FAILURE_REFILL, "{wait:?}");
        assert_eq!(gate.check(&web, Some(&header("prometheus", "right")), attacker).await, Verdict::Allowed);
        assert_eq!(gate.check(&web, Some(&header("prometheus", "wrong")), scraper).await, Verdict::Denied);
        // The allowance comes back with time.
        assert!(gate.spend(client_key(attacker), Instant::now() + FAILURE_REFILL * 2).is_ok());
    }

    #[tokio::test]
    async fn a_full_queue_is_refused_at_once_and_abandoned_checks_give_their_place_back() {
        let gate = Arc::new(AuthGate::default());
        let web = web(&bcrypt::hash("right", 10).unwrap());
        // Checks from distinct addresses, so the failure limit stays out of the way.
        let check = |n: u8| {
            let (gate, web) = (gate.clone(), web.clone());
            tokio::spawn(async move {
                let peer = IpAddr::from([198, 51, 100, n]);
                gate.check(&web, Some(&header("prometheus", &format!("wrong-{n}"))), peer).await
            })
        };
        let waiting: Vec<_> = (0..(BCRYPT_WORKERS + BCRYPT_WAITING) as u8).map(check).collect();
        while gate.queued.load(Ordering::SeqCst) < BCRYPT_WORKERS + BCRYPT_WAITING {
            tokio::task::yield_now().await;
        }
        let started = Instant::now();
        assert_eq!(check(200).await.unwrap(), Verdict::Busy);
        assert!(started.elapsed() < Duration::from_millis(50), "refused at once");
        for task in &waiting {
            task.abort();
        }
        for task in waiting {
            let _ = task.await;
        }
        assert_eq!(gate.queued.load(Ordering::SeqCst), 0, "abandoned checks give their place back");
        assert_eq!(gate.workers.available_permits(), 0, "the running check keeps its worker until bcrypt returns");
    }

    #[test]
    fn ipv6_clients_are_limited_by_network_and_mapped_ipv4_as_ipv4() {
        let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:bbbb::2".parse().unwrap();
        assert_eq!(client_key(a), client_key(b));
        assert_ne!(client_key(a), client_key("2001:db8:1:3::1".parse().unwrap()));
        assert_eq!(client_key("::ffff:192.0.2.7".parse().unwrap()), "192.0.2.7".parse::<IpAddr>().unwrap());
    }
}
