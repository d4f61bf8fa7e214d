//! Entry and return events of trace_pipe paired per task into refusals. Pure: no I/O, no clock.

use std::collections::{HashMap, VecDeque};

use memlock_kernel::trace_pipe::{self, Line};

use super::calls::{Call, CALLS};
use super::probes::SYNTHETIC_SUFFIX;

/// Tasks whose entries wait for a return, at most (tasks in a call, and those whose last call
/// succeeded: their return was filtered out in the kernel).
pub const MAX_PENDING: usize = 4096;

/// A refused call as the trace showed it, before attribution.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub call: Call,
    /// The task (thread) id.
    pub tid: u32,
    /// `$comm` at the return, else the trace's.
    pub comm: String,
    pub errno: i32,
    /// The size asked for, in bytes; `None` when the entry was not seen (lost, or before start).
    pub requested: Option<u64>,
}

/// Entries kept per task: a task's last calls, so that a return pairs with the entry of its
/// own call even when the task called again before the entries were read.
const ENTRIES_PER_TASK: usize = 4;

/// Pairs entries with returns, from trace_pipe lines. Pure: no I/O, no clock. Entries must be
/// fed before the returns they pair with (the reader drains the entry instance first); the
/// trace timestamps (`mono` clock, the same on every CPU) pick the entry of the returning call.
#[derive(Debug)]
pub(crate) struct Pairing {
    page_size: u64,
    /// tid -> its latest entries: (timestamp, call index, size in bytes), oldest first.
    pending: HashMap<u32, Vec<(u64, usize, u64)>>,
    /// Insertion order of the tids, for forgetting the oldest when full (may hold stale tids).
    order: VecDeque<u32>,
    pub(crate) lost_events: u64,
    pub(crate) unparsed_lines: u64,
    pub(crate) forgotten_entries: u64,
}

impl Pairing {
    pub fn new(page_size: u64) -> Self {
        Self {
            page_size,
            pending: HashMap::new(),
            order: VecDeque::new(),
            lost_events: 0,
            unparsed_lines: 0,
            forgotten_entries: 0,
        }
    }

    /// Tasks with entries waiting.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// One line of trace_pipe; a refusal when it is a failed return.
    pub fn line(&mut self, line: &[u8]) -> Option<Refusal> {
        let event = match trace_pipe::parse_line(line) {
            Ok(Line::Event(e)) => e,
            Ok(Line::Lost { events, .. }) => {
                self.lost_events = self.lost_events.saturating_add(events.unwrap_or(1));
                return None;
            }
            Err(_) => {
                self.unparsed_lines += 1;
                return None;
            }
        };
        let Some((index, call, entry)) = CALLS.iter().enumerate().find_map(|(i, c)| {
            // The kernel's pairing: `GROUP_STEM_fail`, the size of a failed call, just before
            // its return (see `synthetic_name`); to the pairing here it is that call's entry.
            let synthetic = event.name.strip_suffix(SYNTHETIC_SUFFIX).and_then(|n| n.strip_suffix(c.stem()));
            if synthetic.is_some_and(|group| group.ends_with('_')) {
                return Some((i, c, true));
            }
            let rest = event.name.strip_prefix(c.stem())?;
            match rest {
                "_entry" => Some((i, c, true)),
                "_return" => Some((i, c, false)),
                _ => None,
            }
        }) else {
            self.unparsed_lines += 1;
            return None;
        };
        if entry {
            let Some(size) = event.number("size").and_then(|s| u64::try_from(s).ok()) else {
                self.unparsed_lines += 1;
                return None;
            };
            let unit = if call.size_unit == 0 { self.page_size } else { call.size_unit };
            self.remember(event.pid, event.timestamp, index, size.saturating_mul(unit));
            return None;
        }
        let errno = event.number("ret").and_then(|r| call.errno(r))?;
        let requested = self.take(event.pid, event.timestamp, index);
        let comm = event.string("comm").unwrap_or(event.comm);
        Some(Refusal {
            call: *call,
            tid: event.pid,
            comm: String::from_utf8_lossy(comm).into_owned(),
            errno,
            requested,
        })
    }

    /// The size of the latest entry of `index` at or before `at`; entries up to `at` are done.
    fn take(&mut self, tid: u32, at: u64, index: usize) -> Option<u64> {
        let entries = self.pending.get_mut(&tid)?;
        let size = entries.iter().rev().find(|(t, i, _)| *t <= at && *i == index).map(|(_, _, s)| *s);
        entries.retain(|(t, _, _)| *t > at);
        if entries.is_empty() {
            self.pending.remove(&tid);
        }
        size
    }

    fn remember(&mut self, tid: u32, at: u64, index: usize, size: u64) {
        let entries = self.pending.entry(tid).or_default();
        if entries.is_empty() {
            self.order.push_back(tid);
        }
        if entries.len() == ENTRIES_PER_TASK {
            entries.remove(0);
        }
        entries.push((at, index, size));
        while self.pending.len() > MAX_PENDING {
            let Some(oldest) = self.order.pop_front() else { break };
            if self.pending.remove(&oldest).is_some() {
                self.forgotten_entries += 1;
            }
        }
        // Returns remove from `pending` but not from `order`: compact when it has grown stale.
        if self.order.len() > 2 * MAX_PENDING {
            let pending = &self.pending;
            let mut seen = std::collections::HashSet::new();
            self.order.retain(|tid| pending.contains_key(tid) && seen.insert(*tid));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: u64 = 4096;

    fn entry(tid: u32, stem: &str, size: u64) -> String {
        format!("{:>16}-{tid:<7} [000] ..... 1.000000: {stem}_entry: ({stem}+0x0/0x10) size={size}\n", "t")
    }

    fn ret(tid: u32, stem: &str, ret: i64, comm: &str) -> String {
        format!(
            "{comm:>16}-{tid:<7} [001] ..... 1.000100: {stem}_return: (caller+0x1/0x2 <- {stem}) ret={ret} \
             comm=\"{comm}\"\n"
        )
    }

    #[test]
    fn an_entry_and_its_failed_return_make_one_refusal() {
        let mut p = Pairing::new(PAGE);
        assert_eq!(p.line(entry(7, "ib_umem_get", 1 << 20).as_bytes()), None);
        let r = p.line(ret(7, "ib_umem_get", -12, "nccl [ib]: x-1").as_bytes()).unwrap();
        assert_eq!((r.call.function, r.tid, r.errno, r.requested), ("ib_umem_get", 7, libc::ENOMEM, Some(1 << 20)));
        assert_eq!(r.comm, "nccl [ib]: x-1");
        assert_eq!(p.pending(), 0);
        // A second return of the same task without an entry: refused, size unknown.
        let r = p.line(ret(7, "ib_umem_get", -12, "x").as_bytes()).unwrap();
        assert_eq!(r.requested, None);
    }

    #[test]
    fn a_return_pairs_with_its_own_entry_when_the_task_called_again_before_the_read() {
        let mut p = Pairing::new(PAGE);
        let at = |t: &str, line: String| line.replace("1.000000", t).replace("1.000100", t);
        // The entries instance is drained first: both entries, then the return between them.
        p.line(at("1.000000", entry(7, "ib_umem_get", 1 << 20)).as_bytes());
        p.line(at("1.000300", entry(7, "ib_umem_get", 2 << 20)).as_bytes());
        let r = p.line(at("1.000200", ret(7, "ib_umem_get", -12, "x")).as_bytes()).unwrap();
        assert_eq!(r.requested, Some(1 << 20));
        // The later entry still waits for its own return.
        let r = p.line(at("1.000400", ret(7, "ib_umem_get", -12, "x")).as_bytes()).unwrap();
        assert_eq!(r.requested, Some(2 << 20));
        assert_eq!(p.pending(), 0);
    }

    #[test]
    fn the_kernels_pairing_gives_the_size_in_a_synthetic_event_before_the_return() {
        let mut p = Pairing::new(PAGE);
        // As the 6.1 guest printed them (the synthetic event's comm not yet in saved-cmdlines).
        let synthetic = "           <...>-144     [001] ...2.    17.052414: memlock_exporter_9_0_do_mlock_fail: \
            size=1048576 ret=-12\n";
        let returned =
            "           <...>-144     [001] .....    17.064313: do_mlock_return: (__x64_sys_mlock+0x17/0x20 <- \
            do_mlock) ret=-12 comm=\"failures-mlock-\"\n";
        assert_eq!(p.line(synthetic.as_bytes()), None);
        let r = p.line(returned.as_bytes()).unwrap();
        assert_eq!((r.call.function, r.tid, r.requested), ("do_mlock", 144, Some(1 << 20)));
        assert_eq!(r.comm, "failures-mlock-");
        assert_eq!(p.pending(), 0);
        // io_uring's in pages; a name that only ends like one is not ours.
        let synthetic =
            "               x-9       [000] ..... 1.000000: memlock_exporter_1_0_io_account_mem_fail: size=3";
        p.line(format!("{synthetic} ret=-12\n").as_bytes());
        assert_eq!(p.line(ret(9, "io_account_mem", -12, "x").as_bytes()).unwrap().requested, Some(3 * PAGE));
        p.line(b"               x-9       [000] ..... 1.000000: memlock_exporter_1_0xdo_mlock_fail: size=3 ret=-12\n");
        assert_eq!(p.unparsed_lines, 1);
        // A failure whose entry the kernel's map could not hold: counted, size unknown.
        assert_eq!(p.line(ret(10, "ib_umem_get", -12, "x").as_bytes()).unwrap().requested, None);
    }

    #[test]
    fn successes_are_not_refusals() {
        let mut p = Pairing::new(PAGE);
        p.line(entry(7, "ib_umem_get", 4096).as_bytes());
        // A pointer (kernel addresses are negative as s64) and NULL are not errors.
        assert_eq!(p.line(ret(7, "ib_umem_get", -0x7a00_0000_0000, "x").as_bytes()), None);
        assert_eq!(p.line(ret(7, "do_mlock", 0, "x").as_bytes()), None);
        assert_eq!(p.line(ret(7, "user_shm_lock", 1, "x").as_bytes()), None);
        let r = p.line(ret(7, "user_shm_lock", 0, "x").as_bytes()).unwrap();
        assert_eq!(r.errno, libc::ENOMEM);
    }

    #[test]
    fn io_uring_sizes_are_pages_and_entries_pair_by_call() {
        let mut p = Pairing::new(PAGE);
        p.line(entry(9, "io_account_mem", 3).as_bytes());
        let r = p.line(ret(9, "io_account_mem", -12, "x").as_bytes()).unwrap();
        assert_eq!((r.call.function, r.requested), ("__io_account_mem", Some(3 * PAGE)));
        // An entry of another call is not this return's size.
        p.line(entry(9, "do_mlock", 100).as_bytes());
        assert_eq!(p.line(ret(9, "ib_umem_get", -12, "x").as_bytes()).unwrap().requested, None);
    }

    #[test]
    fn pending_entries_are_bounded() {
        let mut p = Pairing::new(PAGE);
        for tid in 0..(MAX_PENDING as u32 * 3) {
            p.line(entry(tid, "do_mlock", 1).as_bytes());
        }
        assert_eq!(p.pending(), MAX_PENDING);
        assert_eq!(p.forgotten_entries, 2 * MAX_PENDING as u64);
        assert!(p.order.len() <= 2 * MAX_PENDING + 1);
        // The newest are kept.
        let last = MAX_PENDING as u32 * 3 - 1;
        assert_eq!(p.line(ret(last, "do_mlock", -12, "x").as_bytes()).unwrap().requested, Some(1));
    }

    #[test]
    fn lost_events_and_bad_lines_are_counted() {
        let mut p = Pairing::new(PAGE);
        p.line(b"CPU:1 [LOST 17 EVENTS]\n");
        p.line(b"CPU:0 [LOST EVENTS]\n");
        p.line(b"garbage\n");
        p.line(entry(1, "not_ours", 1).as_bytes());
        assert_eq!((p.lost_events, p.unparsed_lines), (18, 2));
    }
}
