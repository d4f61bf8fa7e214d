//! Rendering snapshot texts for scrapes: on a thread of its own, and a new snapshot at most once
//! a [`RENDER_INTERVAL`].

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::page::Page;

/// How a `/metrics` body is sent: gzip when the client accepts it (Prometheus always does).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    Identity,
    Gzip,
}

/// Which snapshot's text scrapes are served, so that clients cannot make the daemon render every
/// snapshot. One is published after every collector run, several a second, and its text is
/// rendered at its first scrape: with 10,000 cgroups that is tens of MB, and a client that
/// connected a few times a second would keep both workers rendering. A scrape gets the latest
/// snapshot when it is rendered already, or when the last
/// render is at least [`RENDER_INTERVAL`] old (it then renders it, off the async workers);
/// otherwise the snapshot rendered last, at most that much older than the latest. Reset with
/// the site on reload.
#[derive(Default)]
pub struct Renders {
    state: Mutex<RenderState>,
}

#[derive(Default)]
struct RenderState {
    latest: Option<(Arc<dyn Page>, Instant)>,
    rendering: bool,
}

/// A thread that renders snapshot texts: a large one takes a good part of a second, not to be
/// spent on an async worker. One for the life of the server, started with it (tokio's blocking
/// pool would start and retire threads as scrapes come and go).
pub(crate) struct Renderer {
    jobs: Mutex<std::sync::mpsc::Sender<RenderJob>>,
}

/// A snapshot to render, whether to compress its text too, and who waits for it.
type RenderJob = (Arc<dyn Page>, Encoding, tokio::sync::oneshot::Sender<()>);

impl Renderer {
    pub(super) fn start() -> Renderer {
        let (jobs, queue) = std::sync::mpsc::channel::<RenderJob>();
        let spawned = std::thread::Builder::new().name("memlock-render".into()).spawn(move || {
            for (snapshot, encoding, done) in queue {
                match encoding {
                    Encoding::Identity => drop(snapshot.text()),
                    Encoding::Gzip => drop(snapshot.compressed()),
                }
                let _ = done.send(());
            }
        });
        if let Err(err) = spawned {
            // Renders then happen where the text is first asked for (the page's text_bytes).
            tracing::warn!(error = %err, "cannot start the render thread; scrapes render on the async workers");
        }
        Renderer { jobs: Mutex::new(jobs) }
    }

    /// Renders `snapshot`'s text (and compresses it for `Encoding::Gzip`), waiting without
    /// holding the async worker.
    pub(super) async fn render(&self, snapshot: Arc<dyn Page>, encoding: Encoding) {
        let (done, rendered) = tokio::sync::oneshot::channel();
        let sent = self.jobs.lock().unwrap_or_else(PoisonError::into_inner).send((snapshot, encoding, done));
        if sent.is_ok() {
            let _ = rendered.await;
        }
    }
}

/// At most one snapshot text is rendered per interval: the samples are 1 s apart anyway.
pub(crate) const RENDER_INTERVAL: Duration = Duration::from_secs(1);

impl Renders {
    fn state(&self) -> std::sync::MutexGuard<'_, RenderState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The snapshot to serve now, with its text rendered (by `renderer`).
    pub(super) async fn serve(&self, current: Arc<dyn Page>, renderer: &Renderer) -> Arc<dyn Page> {
        if current.is_rendered() {
            return current;
        }
        {
            let mut state = self.state();
            if let Some((latest, at)) = &state.latest {
                if state.rendering || at.elapsed() < RENDER_INTERVAL {
                    return latest.clone();
                }
            }
            state.rendering = true;
        }
        struct Rendering<'a>(&'a Renders);
        impl Drop for Rendering<'_> {
            fn drop(&mut self) {
                self.0.state().rendering = false;
            }
        }
        let _rendering = Rendering(self);
        tracing::debug!("rendering the latest snapshot for a scrape");
        renderer.render(current.clone(), Encoding::Identity).await;
        self.state().latest = Some((current.clone(), Instant::now()));
        current
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::page::StaticPage;

    fn page() -> Arc<dyn Page> {
        Arc::new(StaticPage::new("# a page\n"))
    }

    #[tokio::test]
    async fn a_new_snapshot_is_rendered_at_most_once_a_render_interval() {
        let (renders, renderer) = (Renders::default(), Renderer::start());
        let first = page();
        assert!(Arc::ptr_eq(&renders.serve(first.clone(), &renderer).await, &first), "nothing rendered yet: render it");
        assert!(first.is_rendered());
        let second = page();
        assert!(
            Arc::ptr_eq(&renders.serve(second.clone(), &renderer).await, &first),
            "the last render is recent: serve it"
        );
        assert!(!second.is_rendered(), "and render nothing");
        renders.state().latest.as_mut().unwrap().1 -= RENDER_INTERVAL;
        assert!(
            Arc::ptr_eq(&renders.serve(second.clone(), &renderer).await, &second),
            "a render interval later: the latest"
        );
        let third = page();
        let _ = third.text();
        assert!(Arc::ptr_eq(&renders.serve(third.clone(), &renderer).await, &third), "rendered already: free to serve");
    }
}
