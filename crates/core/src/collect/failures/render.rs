//! The failures collector's series.

use crate::budget::{Claim, Grants, Tier};
use crate::exposition::{Exposition, Kind};

use super::cause::SeriesKey;
use super::series::{Book, Series, MAX_SERIES};
use super::FailuresStats;

/// The budget's class of the per-process failure series.
pub const CLASS: &str = "registration_failures";

impl FailuresStats {
    /// The series in the order they are granted: the latest failure first.
    pub fn ordered(&self) -> Vec<(&SeriesKey, &Series)> {
        let mut series: Vec<_> = self.book.series.iter().collect();
        series.sort_by(|a, b| b.1.last_at.cmp(&a.1.last_at).then_with(|| a.0.cmp(b.0)));
        series
    }

    pub fn render(&self, out: &mut Exposition, grants: &Grants) {
        out.family(
            "memlock_failures_supported",
            "1 when the failures collector traces refused registrations and locks; 0 with the reason it cannot: \
                no_tracefs (not mounted), no_kprobe_events (kernel without CONFIG_KPROBE_EVENTS), no_permission \
                (tracefs is root's: run as root, no capability needed), no_such_function (none of the probed \
                functions in available_filter_functions), setup_failed (see the log), starting (setting up, the \
                first second).",
            Kind::Gauge,
        );
        match self.unsupported {
            None => out.sample(&[("reason", "")], 1u64),
            Some(reason) => out.sample(&[("reason", reason.as_str())], 0u64),
        };
        out.family(
            "memlock_failures_probed",
            "1 for each kernel function the failures collector probes, 0 for one the running kernel does not have \
                (ib_umem_get: ibv_reg_mr, in ib_uverbs or ib_core, loaded; do_mlock: mlock/mlock2; \
                __io_account_mem: io_uring buffers; user_shm_lock: SHM_LOCK).",
            Kind::Gauge,
        );
        for (call, probed) in &self.probed {
            out.sample(&[("call", call)], u64::from(*probed));
        }
        out.family(
            "memlock_failures_pairing",
            "1 with the way the failures collector learns a refused call's size: kernel (hist triggers and a synthetic \
                event pair each entry with its return in the kernel; nothing but failures is traced), userspace \
                (a kernel without CONFIG_HIST_TRIGGERS or CONFIG_SYNTH_EVENTS: every entry is traced and read).",
            Kind::Gauge,
        );
        if let Some(mode) = self.mode {
            out.sample(&[("mode", mode.as_str())], 1u64);
        }
        out.family(
            "memlock_node_registration_failures_total",
            "Refused registrations and locks on the node, every one (no per-process bound): call is the kernel \
                function, errno its error, cause memlock (the request passed the soft RLIMIT_MEMLOCK), cgroup_memory \
                (the memory cgroup at its limit) or other.",
            Kind::Counter,
        );
        for ((call, errno, cause), count) in &self.book.totals {
            out.sample(&[("call", call), ("errno", errno), ("cause", cause.as_str())], *count);
        }
        let granted = grants.get(CLASS);
        let ordered = self.ordered();
        let shown = &ordered[..granted.min(ordered.len())];
        out.family(
            "memlock_registration_failures_total",
            "Refused registrations and locks per process, traced in the kernel (kprobes on ib_umem_get, do_mlock, \
                __io_account_mem, user_shm_lock): pid, comm and cgroup of the process, call the kernel function, \
                errno its error, cause memlock, cgroup_memory or other. At most 64 series; later ones are counted \
                in memlock_registration_failures_overflow_total.",
            Kind::Counter,
        );
        let mut pids = Vec::with_capacity(shown.len());
        for (key, _) in shown {
            pids.push(key.pid.to_string());
        }
        for ((key, series), pid) in shown.iter().zip(&pids) {
            out.sample(&labels(key, pid), series.count);
        }
        out.family(
            "memlock_registration_failure_requested_bytes",
            "The size the last refused request of the series asked for, in bytes (0 when its entry event was not \
                seen).",
            Kind::Gauge,
        );
        for ((key, series), pid) in shown.iter().zip(&pids) {
            out.sample(&labels(key, pid), series.requested_bytes);
        }
        out.family(
            "memlock_registration_failure_last_timestamp_seconds",
            "Unix time of the series' last refusal. The rule MemlockKernelRefusedRegistration pages while it is \
                less than 10 minutes old.",
            Kind::Gauge,
        );
        for ((key, series), pid) in shown.iter().zip(&pids) {
            out.sample(&labels(key, pid), (series.last_unix_seconds * 1000.0).round() / 1000.0);
        }
        out.family(
            "memlock_registration_failures_overflow_total",
            "Refusals not given a series of their own (past the 64 kept); the node total still counts them.",
            Kind::Counter,
        );
        out.sample(&[], self.book.overflow);
        out.family(
            "memlock_failures_trace_lost_events_total",
            "Events the kernel's ring buffer overwrote before the collector read them (trace_pipe's LOST EVENTS \
                markers): refusals may have been missed.",
            Kind::Counter,
        );
        out.sample(&[], self.book.lost_events);
        out.family(
            "memlock_failures_trace_unparsed_lines_total",
            "trace_pipe lines the collector could not read (a comm with a newline splits its event in two).",
            Kind::Counter,
        );
        out.sample(&[], self.book.unparsed_lines);
        out.family(
            "memlock_failures_forgotten_entries_total",
            "Entry events dropped unpaired because the table of calls in progress was full (tasks that exited \
                between entry and return).",
            Kind::Counter,
        );
        out.sample(&[], self.book.forgotten_entries);
        out.family(
            "memlock_failures_pending_tasks",
            "Tasks whose latest entry events wait for a return (at most 4,096; a successful return is filtered out \
                in the kernel, so the tasks that called recently stay here until forgotten).",
            Kind::Gauge,
        );
        out.sample(&[], self.book.pending);
    }
}

fn labels<'a>(key: &'a SeriesKey, pid: &'a str) -> [(&'static str, &'a str); 6] {
    [
        ("pid", pid),
        ("comm", &key.comm),
        ("cgroup", &key.cgroup),
        ("call", key.call),
        ("errno", &key.errno),
        ("cause", key.cause.as_str()),
    ]
}

impl crate::collect::Stats for FailuresStats {
    fn render(&self, out: &mut Exposition, grants: &Grants) {
        FailuresStats::render(self, out, grants)
    }

    fn claims(&self) -> Vec<Claim> {
        vec![Claim {
            class: CLASS,
            tier: Tier::Page,
            floor: MAX_SERIES,
            cap: MAX_SERIES,
            entities: self.book.series.iter().map(|_| (3, 1.0)).collect(),
        }]
    }

    fn refusals(&self) -> Option<&Book> {
        Some(&self.book)
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::super::{Cause, Figures, Mode, Unsupported, CALLS};
    use super::*;

    fn key(pid: u32) -> SeriesKey {
        SeriesKey {
            pid,
            comm: "c".into(),
            cgroup: "/".into(),
            call: "ib_umem_get",
            errno: "ENOMEM".into(),
            cause: Cause::Memlock,
        }
    }

    #[test]
    fn unsupported_renders_the_reason_and_no_failure() {
        let stats = FailuresStats {
            unsupported: Some(Unsupported::NoKprobeEvents),
            mode: None,
            probed: CALLS.iter().map(|c| (c.function, false)).collect(),
            book: Book::default(),
        };
        let mut out = Exposition::new();
        stats.render(&mut out, &Grants::all());
        let text = out.finish();
        assert!(text.contains("memlock_failures_supported{reason=\"no_kprobe_events\"} 0\n"), "{text}");
        assert!(text.contains("memlock_failures_probed{call=\"ib_umem_get\"} 0\n"), "{text}");
        assert!(!text.contains("memlock_registration_failures_total{"), "{text}");
        assert!(!text.contains("memlock_failures_pairing{"), "{text}");
    }

    #[test]
    fn a_recorded_failure_renders_with_its_labels() {
        let mut book = Book::default();
        book.record(key(42), 1 << 20, Figures::default(), Instant::now());
        let stats =
            FailuresStats { unsupported: None, mode: Some(Mode::Kernel), probed: vec![("ib_umem_get", true)], book };
        let mut out = Exposition::new();
        stats.render(&mut out, &Grants::all());
        let text = out.finish();
        let labels = "{pid=\"42\",comm=\"c\",cgroup=\"/\",call=\"ib_umem_get\",errno=\"ENOMEM\",cause=\"memlock\"}";
        assert!(text.contains(&format!("memlock_registration_failures_total{labels} 1\n")), "{text}");
        assert!(text.contains(&format!("memlock_registration_failure_requested_bytes{labels} 1048576\n")), "{text}");
        let stamp = format!("memlock_registration_failure_last_timestamp_seconds{labels} ");
        let stamp: f64 = text.split(&stamp).nth(1).and_then(|t| t.lines().next()).unwrap().parse().unwrap();
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs_f64();
        // Rounded to the millisecond, possibly up.
        assert!((now - 60.0..=now + 0.001).contains(&stamp), "{stamp} against {now}");
        assert!(text.contains("memlock_failures_supported{reason=\"\"} 1\n"), "{text}");
        assert!(text.contains("memlock_failures_pairing{mode=\"kernel\"} 1\n"), "{text}");
        let mut out = Exposition::new();
        stats.render(&mut out, &Grants::none());
        assert!(!out.finish().contains("memlock_registration_failures_total{pid"));
    }
}
