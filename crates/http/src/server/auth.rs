//! Basic auth that a flood of wrong passwords cannot turn against the daemon or its scraper.
//!
//! bcrypt costs tens of milliseconds of CPU per check by design, so a flood of wrong passwords
//! could take every core and lock the real scraper out, and checks left running for clients that
//! hung up would pile up threads on tokio's blocking pool. Hence:
//! - credentials once verified are answered from memory until the users file changes, before
//!   any limit below, and so is a wrong password sent again (`webconfig::BasicAuth`): a repeated wrong
//!   password costs one bcrypt check in all and nothing of its address's allowance. A running
//!   scraper is thus not sent back into the queue below, where an attack can hold every place;
//! - at most [`BCRYPT_WORKERS`] checks run at once, and [`BCRYPT_WAITING`] more may wait. The
//!   waiting places are shared fairly by address: an address with no failed check in
//!   [`FAILED_RANKS_LOWER`] goes ahead of, and when the queue is full takes the place of, one
//!   with a failure; then an address holding fewer places goes first. A request that cannot
//!   take a place is answered 503 at once. First come first served would let wrong passwords
//!   rotated over many addresses hold every place, and a scraper whose credentials were not yet
//!   verified (after the exporter restarted) would get no scrape. An address never seen
//!   before ranks as a scraper's does until its first failure;
//! - a request whose client is gone is dropped by hyper (its HTTP/1 dispatcher reads the
//!   connection while the service runs and ends it at end of file: `proto/h1/conn.rs`,
//!   `mid_message_detect_eof`), so its place in the queue is given back and its check never
//!   starts; a check already running finishes, but only [`BCRYPT_WORKERS`] can;
//! - each client address may fail [`FAILURE_BURST`] times, then once every
//!   [`FAILURE_REFILL`]. A check is paid for when it is let in and refunded when it succeeds,
//!   so abandoned checks count as failures; one that finds no place in the bcrypt queue is
//!   refunded too, unless its address failed lately: knocking on a full queue after failing
//!   spends the allowance as failing does;
//! - an address whose allowance is spent does not turn new credentials away at once: they wait
//!   in the address's line, first come first checked, one per [`FAILURE_REFILL`], at most
//!   [`LINE_PLACES`] of them (the ones that can be checked within [`LINE_WAIT`]); beyond, 429
//!   without a check. Waiting costs no CPU and holds no `web.max_requests` slot. Without the
//!   line, a flood of wrong passwords from the scraper's own address would keep the address at
//!   429, and a scraper whose credentials were not yet verified (after a restart) would never
//!   get its check. It is checked within a second for each request of its address waiting ahead
//!   of it; credentials verified before (longer ago than the TTL) skip the line and the
//!   allowance altogether, as only right passwords can be among them;
//! - an IPv6 /64's line is shared fairly by its hosts (start-time fair queueing by full
//!   address): a newcomer from a host with nobody waiting goes ahead of a flooding neighbour's
//!   second and later requests, and takes the place of its last one when the line is full.
//!   From one address the line is first come first checked, as before: the same host's
//!   guesses and right credentials cannot be told apart before bcrypt has looked at them. A
//!   scraper that shares its address with an attacker (a NAT, a proxy, the same host) is told
//!   apart only by a client certificate (`tls_server_config.client_auth_type` in the web
//!   configuration): with `RequireAndVerifyClientCert`, a client without one never reaches
//!   basic auth.

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use hyper::header::HeaderValue;
use tokio::sync::Notify;

use crate::webconfig::{self, WebConfig};

/// bcrypt checks running at once: one core's worth, so the other keeps serving and sampling.
pub(crate) const BCRYPT_WORKERS: usize = 1;
/// Checks that may wait for a worker; more are refused (503) rather than queued.
pub(crate) const BCRYPT_WAITING: usize = 4;
/// Failed attempts an address may make at once...
pub const FAILURE_BURST: u32 = 10;
/// ...and then one more per this interval.
pub(crate) const FAILURE_REFILL: Duration = Duration::from_secs(1);
/// How long a request may wait in its address's line for a check: Prometheus' default
/// `scrape_timeout`, after which the scraper has given up anyway.
pub(crate) const LINE_WAIT: Duration = Duration::from_secs(10);
/// Places in an address's line: as many as can be checked within [`LINE_WAIT`]; a request
/// beyond would only wait to be turned away.
pub(crate) const LINE_PLACES: usize = 10;
/// Addresses whose failures are tracked; beyond this the one that failed longest ago is forgotten.
const TRACKED_ADDRESSES: usize = 4096;
/// How long an address with a failed check ranks below the others in the bcrypt queue.
pub(crate) const FAILED_RANKS_LOWER: Duration = Duration::from_secs(10 * 60);

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

/// What the gate says before any CPU is spent: a verdict, or a check to run (under a request
/// slot, with [`AuthGate::verify`]).
pub enum Entry<'a> {
    Decided(Verdict),
    Check(Turn<'a>),
}

/// A check a request has been given: its attempt is paid for, and given back if the check is
/// never run (the request refused for want of a slot, or dropped).
pub(crate) struct Turn<'a> {
    gate: &'a AuthGate,
    web: Arc<WebConfig>,
    user: String,
    password: String,
    /// The address whose allowance paid, if it did (credentials verified before do not pay).
    paid_by: Option<IpAddr>,
    /// The client's address as it is limited ([`client_key`]).
    client: IpAddr,
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        if let Some(client) = self.paid_by.take() {
            self.gate.refund(client);
        }
    }
}

pub(crate) struct AuthGate {
    /// Checks running or waiting for a worker.
    queue: Arc<Mutex<BcryptQueue>>,
    /// Told whenever a worker is given or a place taken.
    queue_moved: Arc<Notify>,
    failures: Mutex<HashMap<IpAddr, Allowance>>,
    /// Told whenever a request leaves a line, so the next in it looks again.
    line_moved: Notify,
    tickets: AtomicUsize,
}

/// A token bucket of failed attempts for one address, and the requests waiting for its tokens.
#[derive(Debug, Clone)]
struct Allowance {
    tokens: f64,
    updated: Instant,
    /// The requests waiting, in the order they are checked: by round, then as they came.
    line: VecDeque<Waiting>,
    /// The round of the request let through last: a host with nobody waiting starts there.
    served_round: u64,
}

/// A request in an address's line. Each host (full address) of the line's network gets one
/// round per request it has waiting, so its `n`th waiting request comes after every other
/// host's first `n - 1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Waiting {
    round: u64,
    ticket: usize,
    host: IpAddr,
}

impl Waiting {
    fn order(&self) -> (u64, usize) {
        (self.round, self.ticket)
    }
}

impl Allowance {
    fn fresh(now: Instant) -> Allowance {
        Allowance { tokens: f64::from(FAILURE_BURST), updated: now, line: VecDeque::new(), served_round: 0 }
    }

    /// Puts a request of `host` in line, in the place its round gives it. When the line is
    /// full it takes the last place if it comes before the request there, which then leaves
    /// (returned), and is refused (`Err`) otherwise.
    fn join(&mut self, host: IpAddr, ticket: usize) -> Result<Option<Waiting>, ()> {
        let round = self.line.iter().filter(|w| w.host == host).map(|w| w.round + 1).max().unwrap_or(self.served_round);
        let newcomer = Waiting { round, ticket, host };
        let mut evicted = None;
        if self.line.len() >= LINE_PLACES {
            match self.line.back() {
                Some(last) if newcomer.order() < last.order() => evicted = self.line.pop_back(),
                _ => return Err(()),
            }
        }
        let at = self.line.partition_point(|w| w.order() < newcomer.order());
        self.line.insert(at, newcomer);
        Ok(evicted)
    }

    fn refill(&mut self, now: Instant) {
        let earned = now.saturating_duration_since(self.updated).as_secs_f64() / FAILURE_REFILL.as_secs_f64();
        self.tokens = (self.tokens + earned).min(f64::from(FAILURE_BURST));
        self.updated = now;
    }

    /// How long until the next attempt is earned.
    fn next_token(&self) -> Duration {
        FAILURE_REFILL.mul_f64((1.0 - self.tokens).max(0.0))
    }
}

impl Default for AuthGate {
    fn default() -> Self {
        Self {
            queue: Arc::default(),
            queue_moved: Arc::new(Notify::new()),
            failures: Mutex::default(),
            line_moved: Notify::new(),
            tickets: AtomicUsize::new(0),
        }
    }
}

/// The bcrypt checks running and waiting, and which addresses failed lately.
#[derive(Default)]
struct BcryptQueue {
    running: usize,
    waiting: Vec<QueuedCheck>,
    /// Waiting checks given a worker that have not taken it yet.
    granted: HashSet<usize>,
    /// Addresses by their latest failed check.
    failed: HashMap<IpAddr, Instant>,
    /// Checks running per address.
    running_by: HashMap<IpAddr, usize>,
    next_ticket: usize,
}

#[derive(Debug, Clone, Copy)]
struct QueuedCheck {
    ticket: usize,
    client: IpAddr,
}

impl BcryptQueue {
    fn failed_lately(&self, client: IpAddr, now: Instant) -> bool {
        self.failed.get(&client).is_some_and(|at| now.saturating_duration_since(*at) < FAILED_RANKS_LOWER)
    }

    /// Places (running or waiting) `client` holds.
    fn places(&self, client: IpAddr) -> usize {
        self.running_by.get(&client).copied().unwrap_or(0) + self.waiting.iter().filter(|w| w.client == client).count()
    }

    /// The order in which waiting checks are served, the least first: an address without a
    /// recent failure, then one holding fewer places, then the earlier.
    fn rank(&self, check: &QueuedCheck, now: Instant) -> (bool, usize, usize) {
        (self.failed_lately(check.client, now), self.places(check.client), check.ticket)
    }

    /// Gives free workers to the best-ranked waiting checks.
    fn dispatch(&mut self, now: Instant) {
        while self.running < BCRYPT_WORKERS && !self.waiting.is_empty() {
            let best = (0..self.waiting.len()).min_by_key(|&i| self.rank(&self.waiting[i], now));
            let Some(best) = best else { break };
            let check = self.waiting.remove(best);
            self.start(check.client);
            self.granted.insert(check.ticket);
        }
    }

    fn start(&mut self, client: IpAddr) {
        self.running += 1;
        *self.running_by.entry(client).or_default() += 1;
    }

    fn finish(&mut self, client: IpAddr) {
        self.running = self.running.saturating_sub(1);
        if let Some(n) = self.running_by.get_mut(&client) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.running_by.remove(&client);
            }
        }
    }

    fn record_failure(&mut self, client: IpAddr, now: Instant) {
        if self.failed.len() >= TRACKED_ADDRESSES && !self.failed.contains_key(&client) {
            self.failed.retain(|_, at| now.saturating_duration_since(*at) < FAILED_RANKS_LOWER);
            if self.failed.len() >= TRACKED_ADDRESSES {
                if let Some(oldest) = self.failed.iter().min_by_key(|(_, at)| **at).map(|(ip, _)| *ip) {
                    self.failed.remove(&oldest);
                }
            }
        }
        self.failed.insert(client, now);
    }

    /// Takes a place for a check of `client`: a worker at once, a waiting place, or the place
    /// of the worst-ranked waiting check when this one ranks better (that one is refused).
    fn join(&mut self, client: IpAddr, now: Instant) -> Option<Joined> {
        let ticket = self.next_ticket;
        self.next_ticket += 1;
        if self.running < BCRYPT_WORKERS && self.waiting.is_empty() {
            self.start(client);
            return Some(Joined::Running);
        }
        let newcomer = QueuedCheck { ticket, client };
        if self.waiting.len() >= BCRYPT_WAITING {
            let (lately, places) = (self.failed_lately(client, now), self.places(client) + 1);
            let worst = (0..self.waiting.len()).max_by_key(|&i| self.rank(&self.waiting[i], now))?;
            let victim = self.waiting[worst];
            let victim_rank = (self.failed_lately(victim.client, now), self.places(victim.client));
            if (lately, places) >= victim_rank {
                return None;
            }
            self.waiting.remove(worst);
        }
        self.waiting.push(newcomer);
        Some(Joined::Waiting(ticket))
    }
}

enum Joined {
    Running,
    Waiting(usize),
}

/// A check's hold on the queue: its waiting place or its worker, given back when dropped (a
/// client gone while it waits, or bcrypt done).
struct QueueHold {
    queue: Arc<Mutex<BcryptQueue>>,
    moved: Arc<Notify>,
    client: IpAddr,
    /// Waiting (its ticket) or running (`None`).
    ticket: Option<usize>,
}

impl QueueHold {
    fn lock(&self) -> std::sync::MutexGuard<'_, BcryptQueue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for QueueHold {
    fn drop(&mut self) {
        let mut queue = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
        match self.ticket {
            Some(ticket) => {
                queue.waiting.retain(|w| w.ticket != ticket);
                // Given a worker it never took: the worker goes to the next.
                if queue.granted.remove(&ticket) {
                    queue.finish(self.client);
                }
            }
            None => queue.finish(self.client),
        }
        queue.dispatch(Instant::now());
        drop(queue);
        self.moved.notify_waiters();
    }
}

/// A place in an address's line, left when dropped (a client gone while it waits).
struct Place<'a> {
    gate: &'a AuthGate,
    client: IpAddr,
    ticket: usize,
}

impl Drop for Place<'_> {
    fn drop(&mut self) {
        let mut failures = self.gate.failures.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(allowance) = failures.get_mut(&self.client) {
            allowance.line.retain(|w| w.ticket != self.ticket);
        }
        drop(failures);
        self.gate.line_moved.notify_waiters();
    }
}

impl AuthGate {
    /// Checks an `Authorization` header against `web`'s users (which must be set), from
    /// memory, or with bcrypt once the request has its turn. For callers that need no slot in
    /// between ([`Self::enter`] and [`Self::verify`] apart).
    #[cfg(test)]
    pub async fn check(&self, web: &Arc<WebConfig>, header: Option<&HeaderValue>, peer: IpAddr) -> Verdict {
        match self.enter(web, header, peer).await {
            Entry::Decided(verdict) => verdict,
            Entry::Check(turn) => self.verify(turn).await,
        }
    }

    /// Everything before bcrypt: what memory says, the address's allowance and line. Costs no
    /// CPU to speak of, but may wait (up to [`LINE_WAIT`]) for the address's turn.
    pub async fn enter(&self, web: &Arc<WebConfig>, header: Option<&HeaderValue>, peer: IpAddr) -> Entry<'_> {
        let Some(users) = &web.users else { return Entry::Decided(Verdict::Allowed) };
        let Some((user, password)) = header.and_then(|h| webconfig::parse_basic_authorization(h.as_bytes())) else {
            return Entry::Decided(Verdict::Denied);
        };
        match users.cached(&user, &password) {
            Some(true) => return Entry::Decided(Verdict::Allowed),
            // Known to be wrong: nothing to check, nothing learnt, nothing to limit.
            Some(false) => return Entry::Decided(Verdict::Denied),
            None => {}
        }
        let client = client_key(peer);
        let mut turn = Turn { gate: self, web: web.clone(), user, password, paid_by: None, client };
        if users.verified_before(&turn.user, &turn.password) {
            return Entry::Check(turn);
        }
        // An attempt is paid for before its check and refunded if it succeeds (or never runs),
        // so failures and checks abandoned midway both count.
        if let Err(wait) = self.take_turn(client, peer.to_canonical()).await {
            return Entry::Decided(Verdict::Limited(wait));
        }
        turn.paid_by = Some(client);
        Entry::Check(turn)
    }

    /// Runs the check `turn` was given, on the bounded bcrypt pool.
    pub async fn verify(&self, mut turn: Turn<'_>) -> Verdict {
        let client = turn.client;
        let (joined, failed_lately) = {
            let mut queue = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
            let now = Instant::now();
            (queue.join(client, now), queue.failed_lately(client, now))
        };
        // Refused for want of a place: the attempt is refunded (dropping the turn), but not to an
        // address that failed lately, so that one knocking on a full queue spends its allowance
        // (and is then told 429) as if its checks had run.
        let Some(joined) = joined else {
            if failed_lately {
                turn.paid_by = None;
            }
            return Verdict::Busy;
        };
        let mut hold = QueueHold {
            queue: self.queue.clone(),
            moved: self.queue_moved.clone(),
            client,
            ticket: match joined {
                Joined::Running => None,
                Joined::Waiting(ticket) => Some(ticket),
            },
        };
        // A place taken from a worse-ranked check: that one looks and leaves.
        self.queue_moved.notify_waiters();
        while let Some(ticket) = hold.ticket {
            let moved = self.queue_moved.notified();
            tokio::pin!(moved);
            moved.as_mut().enable();
            {
                let mut queue = hold.lock();
                if queue.granted.remove(&ticket) {
                    drop(queue);
                    hold.ticket = None;
                    break;
                }
                if !queue.waiting.iter().any(|w| w.ticket == ticket) {
                    // Its place went to a better-ranked check: refused as above.
                    if queue.failed_lately(client, Instant::now()) {
                        turn.paid_by = None;
                    }
                    return Verdict::Busy;
                }
            }
            moved.await;
        }
        // From here a request dropped (its client gone) keeps its attempt paid for, and the
        // worker is held until bcrypt returns, wherever the request is.
        let paid_by = turn.paid_by.take();
        let (web, user, password) =
            (turn.web.clone(), std::mem::take(&mut turn.user), std::mem::take(&mut turn.password));
        let ok = tokio::task::spawn_blocking(move || {
            let _worker = hold;
            web.users.as_ref().is_some_and(|u| u.verify(&user, &password))
        })
        .await
        .unwrap_or(false);
        if !ok {
            self.queue.lock().unwrap_or_else(PoisonError::into_inner).record_failure(client, Instant::now());
            return Verdict::Denied;
        }
        if let Some(client) = paid_by {
            self.refund(client);
        }
        Verdict::Allowed
    }

    /// Checks running or waiting for a worker.
    #[cfg(test)]
    fn queued(&self) -> usize {
        let queue = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
        queue.running + queue.waiting.len()
    }

    #[cfg(test)]
    fn running(&self) -> usize {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner).running
    }

    /// Takes one attempt from `client`'s allowance now, without waiting.
    #[cfg(test)]
    fn spend(&self, client: IpAddr, now: Instant) -> Result<(), Duration> {
        let mut failures = self.failures.lock().unwrap_or_else(PoisonError::into_inner);
        let allowance = Self::allowance(&mut failures, client, now);
        if allowance.tokens < 1.0 {
            return Err(allowance.next_token());
        }
        allowance.tokens -= 1.0;
        Ok(())
    }

    /// Takes one attempt from `client`'s allowance (`host` is the full address), waiting in its
    /// line when it has none; `Err` with how long to wait when the line is full, the request
    /// lost its place to another host's or the wait ran out.
    async fn take_turn(&self, client: IpAddr, host: IpAddr) -> Result<(), Duration> {
        let joined = Instant::now();
        let ticket = {
            let mut failures = self.failures.lock().unwrap_or_else(PoisonError::into_inner);
            let allowance = Self::allowance(&mut failures, client, joined);
            if allowance.line.is_empty() && allowance.tokens >= 1.0 {
                allowance.tokens -= 1.0;
                return Ok(());
            }
            let ticket = self.tickets.fetch_add(1, Ordering::Relaxed);
            match allowance.join(host, ticket) {
                Err(()) => return Err(FAILURE_REFILL.mul_f64(allowance.line.len() as f64) + allowance.next_token()),
                Ok(Some(_evicted)) => {
                    drop(failures);
                    // The request that lost its place looks and leaves.
                    self.line_moved.notify_waiters();
                }
                Ok(None) => {}
            }
            ticket
        };
        let place = Place { gate: self, client, ticket };
        loop {
            let moved = self.line_moved.notified();
            tokio::pin!(moved);
            moved.as_mut().enable();
            let now = Instant::now();
            let wake = {
                let mut failures = self.failures.lock().unwrap_or_else(PoisonError::into_inner);
                let allowance = Self::allowance(&mut failures, client, now);
                if !allowance.line.iter().any(|w| w.ticket == ticket) {
                    let wait = FAILURE_REFILL.mul_f64(allowance.line.len() as f64);
                    drop(failures);
                    drop(place);
                    return Err(wait);
                }
                let head = allowance.line.front().is_some_and(|w| w.ticket == ticket);
                if head && allowance.tokens >= 1.0 {
                    allowance.tokens -= 1.0;
                    if let Some(served) = allowance.line.front() {
                        allowance.served_round = served.round;
                    }
                    drop(failures);
                    drop(place);
                    return Ok(());
                }
                // The first in line waits for its token (a second at most); the others give
                // up when their wait is over.
                let deadline = joined + LINE_WAIT;
                if !head && now >= deadline {
                    let wait = FAILURE_REFILL.mul_f64(allowance.line.len() as f64);
                    drop(failures);
                    drop(place);
                    return Err(wait);
                }
                if head {
                    now + allowance.next_token()
                } else {
                    deadline
                }
            };
            tokio::select! {
                () = moved => {}
                () = tokio::time::sleep_until(wake.into()) => {}
            }
        }
    }

    /// `client`'s allowance, refilled to `now`; an address not tracked yet starts full.
    fn allowance(failures: &mut HashMap<IpAddr, Allowance>, client: IpAddr, now: Instant) -> &mut Allowance {
        if failures.len() >= TRACKED_ADDRESSES && !failures.contains_key(&client) {
            // Forget addresses that have their whole allowance back and nobody waiting;
            // failing that, the one idle longest with nobody waiting.
            failures.retain(|_, a| {
                let mut a = a.clone();
                a.refill(now);
                !a.line.is_empty() || a.tokens < f64::from(FAILURE_BURST)
            });
            if failures.len() >= TRACKED_ADDRESSES {
                let oldest = failures.iter().filter(|(_, a)| a.line.is_empty()).min_by_key(|(_, a)| a.updated);
                if let Some(oldest) = oldest.map(|(ip, _)| *ip) {
                    failures.remove(&oldest);
                }
            }
        }
        let allowance = failures.entry(client).or_insert_with(|| Allowance::fresh(now));
        allowance.refill(now);
        allowance
    }

    fn refund(&self, client: IpAddr) {
        let mut failures = self.failures.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(allowance) = failures.get_mut(&client) {
            allowance.tokens = (allowance.tokens + 1.0).min(f64::from(FAILURE_BURST));
        }
        drop(failures);
        self.line_moved.notify_waiters();
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
            users: Some(webconfig::BasicAuth::new(BTreeMap::from([("prometheus".to_owned(), hash.to_owned())]))),
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
        // The eleventh waits in the address's line for the next attempt it earns.
        let started = Instant::now();
        assert_eq!(gate.check(&web, Some(&header("nobody", "x")), attacker).await, Verdict::Denied);
        assert!(started.elapsed() >= FAILURE_REFILL / 2, "checked after {:?}, before its turn", started.elapsed());
        assert_eq!(gate.check(&web, Some(&header("prometheus", "right")), attacker).await, Verdict::Allowed);
        assert_eq!(gate.check(&web, Some(&header("prometheus", "wrong")), scraper).await, Verdict::Denied);
        // The allowance comes back with time.
        assert!(gate.spend(client_key(attacker), Instant::now() + FAILURE_REFILL * 2).is_ok());
    }

    fn line_length(gate: &AuthGate, client: IpAddr) -> usize {
        gate.failures.lock().unwrap().get(&client_key(client)).map_or(0, |a| a.line.len())
    }

    fn tokens(gate: &AuthGate, client: IpAddr) -> f64 {
        gate.failures.lock().unwrap().get(&client_key(client)).map_or(f64::NAN, |a| a.tokens)
    }

    /// An address out of allowance must not answer 429 before any check: the right credentials
    /// of a scraper sharing the attacker's address would never be looked at.
    #[tokio::test]
    async fn new_credentials_wait_their_turn_and_a_repeated_wrong_password_costs_nothing() {
        let gate = Arc::new(AuthGate::default());
        let web = web(&bcrypt::hash("right", 4).unwrap());
        let shared: IpAddr = "192.0.2.9".parse().unwrap();
        assert_eq!(gate.check(&web, Some(&header("prometheus", "again")), shared).await, Verdict::Denied);
        for attempt in 1..FAILURE_BURST {
            let verdict = gate.check(&web, Some(&header("prometheus", &format!("wrong-{attempt}"))), shared).await;
            assert_eq!(verdict, Verdict::Denied, "attempt {attempt}");
        }
        // Out of allowance: the same wrong password again is refused from memory, at once,
        // and costs the address nothing (before, each counted as a failure).
        let before = tokens(&gate, shared);
        for _ in 0..100 {
            let started = Instant::now();
            assert_eq!(gate.check(&web, Some(&header("prometheus", "again")), shared).await, Verdict::Denied);
            assert!(started.elapsed() < FAILURE_REFILL / 4, "answered without waiting");
        }
        assert!(tokens(&gate, shared) >= before, "{before} -> {}", tokens(&gate, shared));
        // Ever-new wrong passwords fill the line; one more is refused at once.
        let waiting: Vec<_> = (0..LINE_PLACES)
            .map(|n| {
                let (gate, web) = (gate.clone(), web.clone());
                tokio::spawn(
                    async move { gate.check(&web, Some(&header("prometheus", &format!("new-{n}"))), shared).await },
                )
            })
            .collect();
        while line_length(&gate, shared) < LINE_PLACES {
            tokio::task::yield_now().await;
        }
        let started = Instant::now();
        let Verdict::Limited(wait) = gate.check(&web, Some(&header("prometheus", "one-more")), shared).await else {
            panic!("a full line is refused");
        };
        assert!(
            started.elapsed() < FAILURE_REFILL / 4 && wait >= FAILURE_REFILL,
            "{wait:?} after {:?}",
            started.elapsed()
        );
        // Those who leave give their places back.
        for task in &waiting {
            task.abort();
        }
        for task in waiting {
            let _ = task.await;
        }
        assert_eq!(line_length(&gate, shared), 0);
        // Right credentials never seen: checked at the address's next turn, within the second.
        let started = Instant::now();
        assert_eq!(gate.check(&web, Some(&header("prometheus", "right")), shared).await, Verdict::Allowed);
        assert!(started.elapsed() <= FAILURE_REFILL + FAILURE_REFILL / 2, "{:?}", started.elapsed());
    }

    /// The scraper behind others in line is checked one turn after those ahead of it.
    #[tokio::test]
    async fn the_line_is_first_come_first_checked() {
        let gate = Arc::new(AuthGate::default());
        let web = web(&bcrypt::hash("right", 4).unwrap());
        let shared: IpAddr = "192.0.2.10".parse().unwrap();
        for attempt in 0..FAILURE_BURST {
            let verdict = gate.check(&web, Some(&header("prometheus", &format!("wrong-{attempt}"))), shared).await;
            assert_eq!(verdict, Verdict::Denied, "attempt {attempt}");
        }
        let ahead: Vec<_> = (0..2)
            .map(|n| {
                let (gate, web) = (gate.clone(), web.clone());
                tokio::spawn(
                    async move { gate.check(&web, Some(&header("prometheus", &format!("new-{n}"))), shared).await },
                )
            })
            .collect();
        while line_length(&gate, shared) < 2 {
            tokio::task::yield_now().await;
        }
        let started = Instant::now();
        assert_eq!(gate.check(&web, Some(&header("prometheus", "right")), shared).await, Verdict::Allowed);
        let took = started.elapsed();
        assert!(took >= FAILURE_REFILL * 2, "the third in line went first: {took:?}");
        assert!(took <= FAILURE_REFILL * 4, "{took:?}");
        for task in ahead {
            assert!(task.is_finished(), "those ahead were checked first");
            assert_eq!(task.await.unwrap(), Verdict::Denied);
        }
    }

    /// A neighbour in the scraper's IPv6 /64 that keeps the network's line full does not keep
    /// the scraper's own host out of it.
    #[tokio::test]
    async fn hosts_of_one_network_share_its_line_fairly() {
        let gate = Arc::new(AuthGate::default());
        let web = web(&bcrypt::hash("right", 4).unwrap());
        let (neighbour, scraper): (IpAddr, IpAddr) =
            ("2001:db8:64::bad".parse().unwrap(), "2001:db8:64::5c".parse().unwrap());
        assert_eq!(client_key(neighbour), client_key(scraper));
        for attempt in 0..FAILURE_BURST {
            let verdict = gate.check(&web, Some(&header("prometheus", &format!("wrong-{attempt}"))), neighbour).await;
            assert_eq!(verdict, Verdict::Denied, "attempt {attempt}");
        }
        let guess = |n: usize| {
            let (gate, web) = (gate.clone(), web.clone());
            tokio::spawn(
                async move { gate.check(&web, Some(&header("prometheus", &format!("new-{n}"))), neighbour).await },
            )
        };
        let mut waiting: Vec<_> = (0..LINE_PLACES).map(guess).collect();
        while line_length(&gate, neighbour) < LINE_PLACES {
            tokio::task::yield_now().await;
        }
        // One more from the neighbour: refused, as from a single address.
        assert!(matches!(guess(LINE_PLACES).await.unwrap(), Verdict::Limited(_)));
        // The scraper's host had nobody waiting: it takes the neighbour's last place and is
        // checked second, after the neighbour's first.
        let started = Instant::now();
        assert_eq!(gate.check(&web, Some(&header("prometheus", "right")), scraper).await, Verdict::Allowed);
        let took = started.elapsed();
        assert!(took <= FAILURE_REFILL * 2 + FAILURE_REFILL / 2, "the scraper waited {took:?} behind its neighbour");
        let last = waiting.pop().unwrap();
        assert!(matches!(last.await.unwrap(), Verdict::Limited(_)), "the neighbour's last kept its place");
        assert_eq!(line_length(&gate, neighbour), LINE_PLACES - 2, "the neighbour's first was checked");
        for task in &waiting {
            task.abort();
        }
    }

    #[test]
    fn a_line_orders_by_round_then_arrival_and_keeps_the_first_places() {
        let mut allowance = Allowance::fresh(Instant::now());
        let (a, b, c): (IpAddr, IpAddr, IpAddr) =
            ("2001:db8::a".parse().unwrap(), "2001:db8::b".parse().unwrap(), "2001:db8::c".parse().unwrap());
        for ticket in 0..4 {
            assert_eq!(allowance.join(a, ticket), Ok(None));
        }
        assert_eq!(allowance.join(b, 4), Ok(None));
        assert_eq!(allowance.join(b, 5), Ok(None));
        let order = |l: &Allowance| l.line.iter().map(|w| w.ticket).collect::<Vec<_>>();
        assert_eq!(order(&allowance), [0, 4, 1, 5, 2, 3]);
        for ticket in 6..10 {
            assert_eq!(allowance.join(a, ticket), Ok(None));
        }
        assert_eq!(allowance.line.len(), LINE_PLACES);
        // Full: a's next comes last and is refused; c, with nobody waiting, takes a's last place.
        assert_eq!(allowance.join(a, 10), Err(()));
        let evicted = allowance.join(c, 11).unwrap().map(|w| (w.host, w.ticket));
        assert_eq!(evicted, Some((a, 9)));
        assert_eq!(order(&allowance)[..3], [0, 4, 11]);
        // A host served in round 5 leaves a newcomer to start there, not at 0.
        allowance.served_round = 5;
        allowance.line.clear();
        assert_eq!(allowance.join(c, 12), Ok(None));
        assert_eq!(allowance.line[0].round, 5);
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
        while gate.queued() < BCRYPT_WORKERS + BCRYPT_WAITING {
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
        assert_eq!(gate.queued(), 1, "abandoned checks give their place back, but the one running");
        assert_eq!(gate.running(), BCRYPT_WORKERS, "the running check keeps its worker until bcrypt returns");
    }

    /// Many addresses cannot hold every place: one without a recent failure takes the place of
    /// the worst-ranked waiting check and is served first; an address as bad as those waiting is
    /// refused; a failure stops counting after FAILED_RANKS_LOWER.
    #[test]
    fn the_bcrypt_queue_puts_addresses_without_failures_first() {
        let mut queue = BcryptQueue::default();
        let now = Instant::now();
        let ip = |n: u8| IpAddr::from([192, 0, 2, n]);
        assert!(matches!(queue.join(ip(1), now), Some(Joined::Running)));
        for n in 2..2 + BCRYPT_WAITING as u8 {
            queue.record_failure(ip(n), now);
            assert!(matches!(queue.join(ip(n), now), Some(Joined::Waiting(_))), "{n}");
        }
        queue.record_failure(ip(100), now);
        assert!(queue.join(ip(100), now).is_none(), "as bad as every waiting one: refused");
        let Some(Joined::Waiting(scraper)) = queue.join(ip(200), now) else { panic!("the scraper found no place") };
        assert_eq!(queue.waiting.len(), BCRYPT_WAITING);
        assert!(!queue.waiting.iter().any(|w| w.client == ip(1 + BCRYPT_WAITING as u8)), "the latest failed one left");
        queue.finish(ip(1));
        queue.dispatch(now);
        assert!(queue.granted.contains(&scraper), "served first");
        assert!(queue.failed_lately(ip(2), now) && !queue.failed_lately(ip(2), now + FAILED_RANKS_LOWER));
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
