//! The bytes of text that responses in flight keep alive, held within `web.max_response_bytes`.
//!
//! A scrape serves the snapshot's text without copying it, and holds it until the last byte is
//! in the socket. Each new snapshot has a new text, so readers that started on different
//! snapshots hold one text each: a few slow readers of a large host's text could hold many
//! times the unit's `MemoryMax`, and `web.max_requests` does not bound them, its slot is given
//! back when the body starts. Here every text held by a response
//! is counted once, however many responses share it, and their sum stays within
//! `web.max_response_bytes` (64 MiB by default):
//! - a response whose text is already held, or fits, is served;
//! - otherwise the responses holding other texts are reset, slowest first, to make room: a
//!   text is freed only when all its readers are gone, so texts are ordered by their fastest
//!   reader (bytes the client acknowledged per second so far, see [`Progress::delivered`]), and
//!   a reader younger than [`GRACE`] counts as fast (its rate means nothing yet). A scraper
//!   reading at network speed finishes long before it could be chosen; a client reading a few
//!   KB a second is the first to go;
//! - when even that cannot make room, the caller may serve the newest text still held
//!   ([`HeldTexts::newest_held`], free to share), or answer 503 at once.
//!
//! A snapshot's texts are counted together: the text and, once a gzip scrape asked for it, its
//! compressed form ([`Page::held_bytes`]); a response of either encoding keeps the snapshot,
//! so both. The compressed form, a fraction of the text, is added when it appears, without
//! making room for it. Snapshots are told apart by their address: a response holds its
//! snapshot, so the address cannot be reused while it is counted.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use std::sync::Weak;

use super::connections::Progress;
use crate::page::Page;

/// How long a response is left alone before its transfer rate counts.
/// Long enough to see the bytes of a reader at network speed acknowledged, short enough that a
/// new snapshot's text does not wait long for room.
pub(crate) const GRACE: Duration = Duration::from_millis(50);

pub(crate) struct HeldTexts {
    /// 0: no limit.
    limit: AtomicUsize,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    next_id: u64,
    /// By the address of the snapshot.
    texts: HashMap<usize, Text>,
    total: usize,
}

struct Text {
    len: usize,
    readers: HashMap<u64, Reader>,
    /// What it was rendered from (its responses keep it alive), and when it was first counted.
    snapshot: Weak<dyn Page>,
    order: u64,
}

struct Reader {
    started: Instant,
    /// The connection's byte count when this response started.
    base: u64,
    progress: Progress,
}

impl Reader {
    /// Bytes per second so far; infinite while too young to judge.
    fn rate(&self, now: Instant) -> f64 {
        let age = now.saturating_duration_since(self.started);
        if age < GRACE {
            return f64::INFINITY;
        }
        self.progress.delivered().saturating_sub(self.base) as f64 / age.as_secs_f64()
    }
}

/// A response's claim on its text, given back when dropped (with the text's last reference).
pub(crate) struct Reservation {
    held: Arc<HeldTexts>,
    key: usize,
    id: u64,
}

impl HeldTexts {
    pub fn new(limit: usize) -> Self {
        Self { limit: AtomicUsize::new(limit), state: Mutex::default() }
    }

    /// A reload's new limit applies to responses from now on.
    pub(crate) fn set_limit(&self, limit: usize) {
        self.limit.store(limit, Ordering::Relaxed);
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Counts `snapshot`'s texts, `len` bytes ([`Page::held_bytes`]), as held by a response
    /// on the connection of `progress`, closing slower responses to make room if needed; `None`
    /// when there is no room.
    pub fn reserve(self: &Arc<Self>, snapshot: &Arc<dyn Page>, len: usize, progress: &Progress) -> Option<Reservation> {
        let (key, now) = (Arc::as_ptr(snapshot) as *const () as usize, Instant::now());
        let limit = match self.limit.load(Ordering::Relaxed) {
            0 => usize::MAX,
            limit => limit,
        };
        let mut state = self.state();
        let mut grown = 0;
        if let Some(text) = state.texts.get_mut(&key) {
            // Its compressed form appeared since it was counted.
            grown = len.saturating_sub(text.len);
            text.len += grown;
        }
        state.total += grown;
        if !state.texts.contains_key(&key) {
            if state.total > 0 && state.total.saturating_add(len) > limit {
                let mut candidates: Vec<(f64, usize, usize)> = state
                    .texts
                    .iter()
                    .map(|(key, text)| (text.readers.values().map(|r| r.rate(now)).fold(0.0, f64::max), *key, text.len))
                    .filter(|(fastest, _, _)| fastest.is_finite())
                    .collect();
                candidates.sort_by(|a, b| a.0.total_cmp(&b.0));
                let (mut freed, mut chosen) = (0, Vec::new());
                // A text larger than the whole limit is served alone.
                let fits = |freed: usize| state.total - freed == 0 || state.total - freed + len <= limit;
                for (_, key, held) in candidates {
                    if fits(freed) {
                        break;
                    }
                    freed += held;
                    chosen.push(key);
                }
                if !fits(freed) {
                    tracing::debug!(bytes = len, held = state.total, "no room for another response text");
                    return None;
                }
                for key in chosen {
                    if let Some(text) = state.texts.remove(&key) {
                        state.total -= text.len;
                        tracing::debug!(
                            bytes = text.len,
                            readers = text.readers.len(),
                            "closing the slowest \
                            responses in flight to make room for a new one"
                        );
                        for reader in text.readers.values() {
                            reader.progress.abort();
                        }
                    }
                }
            }
            state.total += len;
            let order = state.next_id;
            state.texts.insert(key, Text { len, readers: HashMap::new(), snapshot: Arc::downgrade(snapshot), order });
        }
        let id = state.next_id;
        state.next_id += 1;
        let reader =
            Reader { started: now, base: progress.written.load(Ordering::Relaxed), progress: progress.clone() };
        if let Some(text) = state.texts.get_mut(&key) {
            text.readers.insert(id, reader);
        }
        Some(Reservation { held: self.clone(), key, id })
    }

    /// The snapshot of the text counted last that responses still hold: free to serve again.
    pub(crate) fn newest_held(&self) -> Option<Arc<dyn Page>> {
        let state = self.state();
        state
            .texts
            .values()
            .filter(|t| !t.readers.is_empty())
            .max_by_key(|t| t.order)
            .and_then(|t| t.snapshot.upgrade())
    }

    #[cfg(test)]
    fn held(&self) -> usize {
        self.state().total
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let mut state = self.held.state();
        let Some(text) = state.texts.get_mut(&self.key) else { return };
        // Closed to make room, the text was already given back (another with its address may
        // have been counted since, without this reader).
        if text.readers.remove(&self.id).is_some() && text.readers.is_empty() {
            let len = text.len;
            state.texts.remove(&self.key);
            state.total -= len;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::page::StaticPage;
    use crate::server::connections::Connections;

    #[tokio::test]
    async fn shared_texts_count_once_and_the_slowest_make_room() {
        let held = Arc::new(HeldTexts::new(250));
        let connections = Arc::new(Connections::default());
        let (slow, fast, shared, scraper) =
            (connections.open(None), connections.open(None), connections.open(None), connections.open(None));
        let page = || Arc::new(StaticPage::new("")) as Arc<dyn Page>;
        let (old, older, new) = (page(), page(), page());
        let on_old = held.reserve(&old, 100, slow.progress()).unwrap();
        let sharing = held.reserve(&old, 100, shared.progress()).unwrap();
        assert_eq!(held.held(), 100, "two readers of one text hold it once");
        let on_older = held.reserve(&older, 100, fast.progress()).unwrap();
        assert_eq!(held.held(), 200);
        // Both too young to judge: no room for a third text.
        assert!(held.reserve(&new, 100, scraper.progress()).is_none());
        tokio::time::sleep(GRACE * 2).await;
        fast.progress().written.fetch_add(1 << 20, Ordering::Relaxed);
        slow.progress().written.fetch_add(10, Ordering::Relaxed);
        let on_new = held.reserve(&new, 100, scraper.progress()).expect("room made");
        // `old`'s fastest reader wrote nothing: its readers are told to close, `older` stays.
        tokio::time::timeout(Duration::from_secs(1), slow.closed()).await.expect("the slow reader is closed");
        tokio::time::timeout(Duration::from_secs(1), shared.closed()).await.expect("and the one sharing its text");
        assert!(tokio::time::timeout(Duration::from_millis(50), fast.closed()).await.is_err(), "the fast one stays");
        assert_eq!(held.held(), 200);
        drop((on_old, sharing));
        assert_eq!(held.held(), 200, "already given back");
        drop((on_older, on_new));
        assert_eq!(held.held(), 0);
        let whole = held.reserve(&page(), 1000, scraper.progress());
        assert!(whole.is_some(), "a text larger than the budget is served when nothing else is held");
        tokio::time::sleep(GRACE * 2).await;
        let other = held.reserve(&page(), 1000, fast.progress());
        assert!(other.is_some(), "and in place of another one that large, once it is slow enough");
        tokio::time::timeout(Duration::from_secs(1), scraper.closed()).await.expect("the one it replaces is closed");
    }

    #[test]
    fn a_compressed_form_that_appears_later_is_added_to_its_snapshot() {
        let held = Arc::new(HeldTexts::new(1000));
        let connections = Arc::new(Connections::default());
        let (plain, gzip) = (connections.open(None), connections.open(None));
        let snapshot = Arc::new(StaticPage::new("")) as Arc<dyn Page>;
        let first = held.reserve(&snapshot, 100, plain.progress()).unwrap();
        let second = held.reserve(&snapshot, 120, gzip.progress()).unwrap();
        assert_eq!(held.held(), 120, "one snapshot, counted once with both its forms");
        drop(first);
        assert_eq!(held.held(), 120);
        drop(second);
        assert_eq!(held.held(), 0);
    }
}
