//! The bytes the daemon has allocated and not freed: its heap in use, as Go programs export
//! `go_memstats_alloc_bytes`.
//!
//! Resident memory is the wrong measure of what the daemon keeps: glibc's malloc keeps freed
//! memory for reuse and raises its mmap threshold to the size of the large blocks freed (a
//! snapshot's text is megabytes), so VmRSS swings by 10 MiB between samples with the texts
//! alive at that moment and creeps up by a few MiB in the first minutes, more under CPU
//! contention, then stays (41 to 45 MiB over a churn test's first 100 s in CI; flat from the
//! third minute of a 400 s run here). The bytes allocated and not freed move only with what the
//! program holds: what is kept per vanished process or cgroup shows in them at once.
//!
//! The binary installs [`CountingAllocator`] as its global allocator and says so with
//! [`mark_installed`] (`main.rs`); library tests do not, and [`allocated_bytes`] is `None` there.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

static ALLOCATED: AtomicUsize = AtomicUsize::new(0);
static INSTALLED: AtomicBool = AtomicBool::new(false);

/// The system allocator, counting the bytes of the blocks it hands out and takes back: one
/// relaxed atomic add per call (two for realloc), a few nanoseconds next to malloc's own tens.
pub struct CountingAllocator;

// SAFETY: every call is passed to `System` unchanged; the counter only observes sizes.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract for `alloc`, passed on.
        let block = unsafe { System.alloc(layout) };
        if !block.is_null() {
            ALLOCATED.fetch_add(layout.size(), Ordering::Relaxed);
        }
        block
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as `alloc`.
        let block = unsafe { System.alloc_zeroed(layout) };
        if !block.is_null() {
            ALLOCATED.fetch_add(layout.size(), Ordering::Relaxed);
        }
        block
    }

    unsafe fn dealloc(&self, block: *mut u8, layout: Layout) {
        // SAFETY: `block` came from this allocator with `layout` (the caller's contract).
        unsafe { System.dealloc(block, layout) };
        ALLOCATED.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, block: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's contract for `realloc`, passed on.
        let moved = unsafe { System.realloc(block, layout, new_size) };
        if !moved.is_null() {
            // The old block is freed only when the new one exists.
            ALLOCATED.fetch_add(new_size, Ordering::Relaxed);
            ALLOCATED.fetch_sub(layout.size(), Ordering::Relaxed);
        }
        moved
    }
}

/// Says that [`CountingAllocator`] is the global allocator: called by `main` before anything
/// reads the count.
pub fn mark_installed() {
    INSTALLED.store(true, Ordering::Relaxed);
}

/// Bytes allocated and not freed, when [`CountingAllocator`] is the global allocator.
pub fn allocated_bytes() -> Option<usize> {
    INSTALLED.load(Ordering::Relaxed).then(|| ALLOCATED.load(Ordering::Relaxed))
}

/// `memlock_exporter_heap_allocated_bytes`, read at every scrape.
pub struct HeapCollector {
    gauge: prometheus::Gauge,
}

impl HeapCollector {
    /// `None` when the counting allocator is not installed (library tests).
    pub fn new() -> Option<Self> {
        allocated_bytes()?;
        let gauge = prometheus::Gauge::new(
            "memlock_exporter_heap_allocated_bytes",
            "Heap the exporter has allocated and not freed.",
        )
        .ok()?;
        Some(Self { gauge })
    }
}

impl prometheus::core::Collector for HeapCollector {
    fn desc(&self) -> Vec<&prometheus::core::Desc> {
        self.gauge.desc()
    }

    fn collect(&self) -> Vec<prometheus::proto::MetricFamily> {
        let Some(bytes) = allocated_bytes() else { return Vec::new() };
        self.gauge.set(bytes as f64);
        self.gauge.collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_what_is_allocated_and_freed_through_it() {
        let allocator = CountingAllocator;
        let layout = Layout::from_size_align(4096, 8).unwrap();
        let before = ALLOCATED.load(Ordering::Relaxed);
        // SAFETY: a non-zero layout; each block freed once with the layout it was made with.
        unsafe {
            let block = allocator.alloc(layout);
            assert!(!block.is_null());
            assert_eq!(ALLOCATED.load(Ordering::Relaxed) - before, 4096);
            let grown = allocator.realloc(block, layout, 10_000);
            assert!(!grown.is_null());
            assert_eq!(ALLOCATED.load(Ordering::Relaxed) - before, 10_000);
            allocator.dealloc(grown, Layout::from_size_align(10_000, 8).unwrap());
            let zeroed = allocator.alloc_zeroed(layout);
            assert_eq!(ALLOCATED.load(Ordering::Relaxed) - before, 4096);
            allocator.dealloc(zeroed, layout);
        }
        assert_eq!(ALLOCATED.load(Ordering::Relaxed), before);
        assert_eq!(allocated_bytes(), None, "not the global allocator of library tests");
    }
}
