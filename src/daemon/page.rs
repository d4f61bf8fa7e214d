//! The sampler's snapshots as the HTTP server's pages.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use memlock_core::snapshot::Snapshot;
use memlock_http::page::{Compressed, Page, Pages};
use tokio::sync::watch;

/// A snapshot served at the telemetry path, with the compressed form of its text beside it.
struct SnapshotPage {
    snapshot: Arc<Snapshot>,
    compressed: Compressed,
}

impl Page for SnapshotPage {
    fn text(&self) -> &Arc<String> {
        self.snapshot.shared_text()
    }

    fn is_rendered(&self) -> bool {
        self.snapshot.is_rendered()
    }

    fn compressed_cache(&self) -> &Compressed {
        &self.compressed
    }

    fn moment(&self, now: Instant) -> String {
        self.snapshot.render_ages(now)
    }

    fn last_run(&self, name: &str) -> Option<(bool, Instant)> {
        self.snapshot.report(name).map(|r| (r.success, r.finished))
    }
}

/// The latest snapshot as a page: one page per snapshot, so that its text is rendered and
/// compressed once however many requests serve it.
pub fn pages(snapshots: watch::Receiver<Arc<Snapshot>>) -> Pages {
    let last: Mutex<Option<Arc<SnapshotPage>>> = Mutex::new(None);
    Box::new(move || {
        let current = snapshots.borrow().clone();
        let mut last = last.lock().unwrap_or_else(PoisonError::into_inner);
        match &*last {
            Some(page) if Arc::ptr_eq(&page.snapshot, &current) => page.clone(),
            _ => {
                let page = Arc::new(SnapshotPage { snapshot: current, compressed: Compressed::default() });
                *last = Some(page.clone());
                page
            }
        }
    })
}
