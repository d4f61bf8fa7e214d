//! What the server serves at the telemetry path: any page type behind one small trait, so that
//! the server knows nothing of what the text holds.

use std::sync::{Arc, OnceLock};
use std::time::Instant;

use hyper::body::Bytes;

use crate::gzip;

/// A page whose text is rendered once and shared by every response that serves it, followed by
/// a few series of the moment of each request.
pub trait Page: Send + Sync + 'static {
    /// The shared text, rendered on first use (which may take a good part of a second: the
    /// server asks for it on a thread of its own, [`crate::server::RENDER_INTERVAL`]).
    fn text(&self) -> &Arc<String>;

    /// Whether [`Page::text`] is rendered already, so that serving it costs nothing.
    fn is_rendered(&self) -> bool;

    /// Where the page keeps its compressed text: it lives as long as the page.
    fn compressed_cache(&self) -> &Compressed;

    /// What follows the shared text in a response, as of `now`.
    fn moment(&self, now: Instant) -> String;

    /// The last run of the source `name` (a collector): whether it succeeded and when it finished;
    /// `None` until it has run. For readiness and the landing page.
    fn last_run(&self, name: &str) -> Option<(bool, Instant)>;

    /// What the landing page's status list says, as (what, its state) in plain text.
    fn status(&self) -> Vec<(String, String)> {
        Vec::new()
    }
}

/// The compressed form of a page's text, made once for every gzip response that serves it.
#[derive(Debug, Default)]
pub struct Compressed(OnceLock<Option<Arc<gzip::Prefix>>>);

/// The shared text as the owner of a `Bytes`: responses reference it instead of copying it.
struct SharedText(Arc<String>);

impl AsRef<[u8]> for SharedText {
    fn as_ref(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

impl dyn Page {
    /// The text as `Bytes` that share the page's copy: a response in flight holds a reference,
    /// not a copy (the text can be tens of MiB).
    pub(crate) fn text_bytes(&self) -> Bytes {
        Bytes::from_owner(SharedText(self.text().clone()))
    }

    /// The text compressed for gzip responses, on first use (rendering the text if needed);
    /// `None` if compression failed.
    pub fn compressed(&self) -> Option<&Arc<gzip::Prefix>> {
        self.compressed_cache().0.get_or_init(|| gzip::Prefix::compress(self.text().as_bytes()).map(Arc::new)).as_ref()
    }

    /// The compressed text if it exists already (serving it then costs nothing).
    pub(crate) fn compressed_if_ready(&self) -> Option<&Arc<gzip::Prefix>> {
        self.compressed_cache().0.get().and_then(Option::as_ref)
    }

    /// Bytes of rendered and compressed text the page holds: what a response that keeps it
    /// alive keeps in memory.
    pub fn held_bytes(&self) -> usize {
        let text = if self.is_rendered() { self.text().len() } else { 0 };
        text + self.compressed_if_ready().map_or(0, |c| c.len())
    }
}

/// The page to serve now: called once per request. It must return the same `Arc` for as long as
/// the page has not changed, so that a text is rendered and compressed once.
pub type Pages = Box<dyn Fn() -> Arc<dyn Page> + Send + Sync>;

/// A page of fixed text, for the server's tests.
#[derive(Debug, Default)]
#[cfg(test)]
pub(crate) struct StaticPage {
    text: OnceLock<Arc<String>>,
    source: String,
    moment: String,
    compressed: Compressed,
}

#[cfg(test)]
impl StaticPage {
    pub(crate) fn new(text: impl Into<String>) -> StaticPage {
        StaticPage { source: text.into(), ..StaticPage::default() }
    }

    /// What follows the text in every response.
    pub(crate) fn with_moment(mut self, moment: impl Into<String>) -> StaticPage {
        self.moment = moment.into();
        self
    }
}

#[cfg(test)]
impl Page for StaticPage {
    fn text(&self) -> &Arc<String> {
        self.text.get_or_init(|| Arc::new(self.source.clone()))
    }

    fn is_rendered(&self) -> bool {
        self.text.get().is_some()
    }

    fn compressed_cache(&self) -> &Compressed {
        &self.compressed
    }

    fn moment(&self, _now: Instant) -> String {
        self.moment.clone()
    }

    fn last_run(&self, _name: &str) -> Option<(bool, Instant)> {
        None
    }
}
