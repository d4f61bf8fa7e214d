//! Runs each collector on its own thread and interval, and publishes a new [`Snapshot`] after
//! every run. A slow or stuck collector delays only itself: the others keep sampling and
//! scrapes keep being served (its age metric shows it is stale).

use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use prometheus::IntCounterVec;
use tokio::sync::watch;

use crate::collect::Collector;
use crate::snapshot::{Report, SeriesLimit, Snapshot, TrackerStats};
use crate::stop::Stop;
use crate::trend::{Tracker, TrendConfig};

/// Publishes snapshots; shared by the collector threads.
struct Board {
    slots: Mutex<Slots>,
    publish: watch::Sender<Arc<Snapshot>>,
    epoch: Instant,
    series_limit: SeriesLimit,
}

struct Slots {
    reports: Vec<Option<Report>>,
    tracker: Tracker,
}

/// One run of a collector, before the trend analysis that completes it into a [`Report`].
struct Run {
    collector: &'static str,
    success: bool,
    duration: Duration,
    finished: Instant,
    data: Option<crate::collect::Data>,
    interval: Duration,
}

impl Board {
    /// Analyses the run's trend scopes and publishes it: the report is made whole here, under
    /// the lock that orders the tracker's observations.
    fn post(&self, index: usize, run: Run) {
        let at = run.finished.saturating_duration_since(self.epoch).as_secs_f64();
        let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
        let mut trends = Vec::new();
        if let Some(data) = &run.data {
            let observations = data.observations_read(at, self.epoch);
            // A scope observed at an older reading's time is still seen by this run.
            let seen_since = observations.iter().map(|o| o.at).fold(at, f64::min);
            trends = observations.into_iter().map(|o| slots.tracker.observe(o)).collect();
            for &scope in data.trend_scopes() {
                slots.tracker.forget_unseen(scope, seen_since);
            }
        }
        let report = Report {
            collector: run.collector,
            success: run.success,
            duration: run.duration,
            finished: run.finished,
            data: run.data,
            interval: run.interval,
            trends: Arc::new(trends),
        };
        let slots = &mut *slots;
        slots.reports[index] = Some(report);
        let reports = slots.reports.iter().flatten().cloned().collect();
        let tracker = TrackerStats { scopes: slots.tracker.len(), evicted_total: slots.tracker.evicted_total() };
        self.publish.send_replace(Arc::new(
            Snapshot::with_series_limit(reports, self.series_limit.clone()).with_tracker(tracker),
        ));
    }
}

pub struct Sampler {
    threads: Vec<JoinHandle<()>>,
    stop: Arc<Stop>,
}

/// How often a persisting error is logged again.
const LOG_REPEAT: Duration = Duration::from_secs(300);

impl Sampler {
    /// Starts one thread per collector. The receiver sees a new snapshot after every run.
    pub fn start(
        collectors: Vec<(Box<dyn Collector>, Duration)>,
        trend: TrendConfig,
        errors_total: IntCounterVec,
        series_limit: SeriesLimit,
    ) -> std::io::Result<(Self, watch::Receiver<Arc<Snapshot>>)> {
        let (publish, receiver) = watch::channel(Arc::new(Snapshot::empty()));
        let slots = Slots { reports: vec![None; collectors.len()], tracker: Tracker::new(trend) };
        let board = Arc::new(Board { slots: Mutex::new(slots), publish, epoch: Instant::now(), series_limit });
        let stop = Arc::new(Stop::default());
        let mut threads = Vec::new();
        for (index, (collector, interval)) in collectors.into_iter().enumerate() {
            let (board, stop, errors_total) = (board.clone(), stop.clone(), errors_total.clone());
            let name = format!("collect-{}", collector.name());
            threads.push(
                std::thread::Builder::new()
                    .name(name)
                    .spawn(move || run(collector, interval, index, &board, &stop, &errors_total))?,
            );
        }
        Ok((Self { threads, stop }, receiver))
    }

    /// Stops the threads, waiting for runs in progress to finish.
    pub fn shutdown(self) {
        self.stop.stop();
        for thread in self.threads {
            let _ = thread.join();
        }
    }
}

fn run(
    mut collector: Box<dyn Collector>,
    interval: Duration,
    index: usize,
    board: &Board,
    stop: &Stop,
    errors_total: &IntCounterVec,
) {
    let name = collector.name();
    let mut next = Instant::now();
    let mut errors = Vec::new();
    let mut last_logged: Option<(String, Instant)> = None;
    let mut current = interval;
    loop {
        let started = Instant::now();
        let cpu_started = thread_cpu_time();
        errors.clear();
        let data = collector.collect(&mut errors);
        let finished = Instant::now();
        let cpu = thread_cpu_time().zip(cpu_started).map(|(end, start)| end.saturating_sub(start));
        for error in &errors {
            errors_total.with_label_values(&[name, error.kind()]).inc();
        }
        let success = data.is_some() && errors.is_empty();
        log_outcome(name, &errors, &mut last_logged, finished);
        let duration = finished - started;
        // The run's own cost: on a machine whose other work leaves this thread a fraction of a
        // core, wall time stretches every run, and backing off for it would halve the sampling
        // (of a job ramping to its ENOMEM too) exactly when the node is busy.
        let effective = adapted_interval(interval, cpu.unwrap_or(duration));
        if effective != current {
            if effective > interval {
                tracing::warn!(
                    collector = name,
                    run_seconds = duration.as_secs_f64(),
                    run_cpu_seconds = cpu.unwrap_or(duration).as_secs_f64(),
                    interval_seconds = interval.as_secs_f64(),
                    sampling_every_seconds = effective.as_secs_f64(),
                    "a run took more CPU time than the collector's interval: sampling less often until runs are \
                        cheaper (see memlock_exporter_collector_interval_seconds)"
                );
            } else {
                tracing::info!(collector = name, interval_seconds = interval.as_secs_f64(), "back to its interval");
            }
            current = effective;
        }
        board.post(index, Run { collector: name, success, duration, finished, data, interval: current });

        // Keep a steady cadence; after an overrun, start again one interval from now rather
        // than running back to back to catch up.
        next += current;
        if next <= Instant::now() {
            next = Instant::now() + current;
        }
        if stop.sleep_until(next) {
            return;
        }
    }
}

/// The calling thread's CPU time (user and system: the kernel's formatting of procfs files
/// counts); `None` when the clock cannot be read.
fn thread_cpu_time() -> Option<Duration> {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes into the timespec we own and reads nothing else.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return None;
    }
    Some(Duration::new(u64::try_from(ts.tv_sec).ok()?, u32::try_from(ts.tv_nsec).ok()?))
}

/// The interval a collector runs at after a run that cost `duration` of CPU time: its own, or
/// twice the run when the run cost more than that, so a collector on a host too large for its
/// interval (100,000 cgroups read every second) takes at most half of a core instead of running
/// back to back.
fn adapted_interval(interval: Duration, duration: Duration) -> Duration {
    if duration > interval {
        duration.saturating_mul(2)
    } else {
        interval
    }
}

/// Logs a failure once, again only when it changes or every [`LOG_REPEAT`], and a recovery.
fn log_outcome(
    name: &str,
    errors: &[memlock_kernel::fsroot::SourceError],
    last: &mut Option<(String, Instant)>,
    now: Instant,
) {
    match errors.first() {
        None => {
            if last.take().is_some() {
                tracing::info!(collector = name, "collector recovered");
            }
        }
        Some(first) => {
            let message = first.to_string();
            let repeat = match last {
                Some((previous, at)) => *previous != message || now.duration_since(*at) >= LOG_REPEAT,
                None => true,
            };
            if repeat {
                tracing::warn!(collector = name, errors = errors.len(), error = %message, "collector failed");
                *last = Some((message, now));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collect::Data;
    use memlock_kernel::fsroot::SourceError;
    use prometheus::Opts;

    struct Flaky {
        runs: u32,
    }

    impl Collector for Flaky {
        fn name(&self) -> &'static str {
            "flaky"
        }
        fn collect(&mut self, errors: &mut Vec<SourceError>) -> Option<Data> {
            self.runs += 1;
            if self.runs % 2 == 0 {
                errors.push(SourceError::Io {
                    path: "/proc/nothing".into(),
                    source: std::io::Error::from(std::io::ErrorKind::PermissionDenied),
                });
            }
            None
        }
    }

    #[test]
    fn publishes_reports_and_counts_errors_and_stops_promptly() {
        let errors_total = IntCounterVec::new(Opts::new("e", "e"), &["collector", "kind"]).unwrap();
        let (sampler, mut rx) = Sampler::start(
            vec![(Box::new(Flaky { runs: 0 }), Duration::from_millis(20))],
            TrendConfig::default(),
            errors_total.clone(),
            SeriesLimit::unlimited(),
        )
        .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while errors_total.with_label_values(&["flaky", "permission"]).get() < 2 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(errors_total.with_label_values(&["flaky", "permission"]).get() >= 2);
        let snapshot = rx.borrow_and_update().clone();
        let report = snapshot.report("flaky").unwrap();
        assert!(!report.success, "a collector that returns no data has not succeeded");
        let started = Instant::now();
        sampler.shutdown();
        assert!(started.elapsed() < Duration::from_secs(1));
    }

    /// Costs 60 ms of CPU time a run.
    struct Slow;

    impl Collector for Slow {
        fn name(&self) -> &'static str {
            "slow"
        }
        fn collect(&mut self, _: &mut Vec<SourceError>) -> Option<Data> {
            let start = thread_cpu_time().unwrap();
            while thread_cpu_time().unwrap() - start < Duration::from_millis(60) {
                std::hint::black_box(0u64);
            }
            None
        }
    }

    /// Sleeps 60 ms a run: waiting (or being left no CPU by other work) is not the run's cost.
    struct Waits;

    impl Collector for Waits {
        fn name(&self) -> &'static str {
            "waits"
        }
        fn collect(&mut self, _: &mut Vec<SourceError>) -> Option<Data> {
            std::thread::sleep(Duration::from_millis(60));
            None
        }
    }

    /// Samples `collector` alone every 20 ms until its first report: the interval it reports is
    /// then its own.
    fn first_report(collector: Box<dyn Collector>) -> Report {
        let name = collector.name();
        let errors_total = IntCounterVec::new(Opts::new("e", "e"), &["collector", "kind"]).unwrap();
        let (sampler, rx) = Sampler::start(
            vec![(collector, Duration::from_millis(20))],
            TrendConfig::default(),
            errors_total,
            SeriesLimit::unlimited(),
        )
        .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        let report = loop {
            if let Some(report) = rx.borrow().report(name).cloned() {
                break report;
            }
            assert!(Instant::now() < deadline, "no report");
            std::thread::sleep(Duration::from_millis(10));
        };
        sampler.shutdown();
        report
    }

    #[test]
    fn a_run_that_waits_keeps_the_interval() {
        assert_eq!(first_report(Box::new(Waits)).interval, Duration::from_millis(20));
    }

    /// A collector on a host too large for its interval must not run back to back; it runs at
    /// twice its run time, and the snapshot says so.
    #[test]
    fn a_collector_slower_than_its_interval_is_sampled_less_often_and_says_so() {
        let report = first_report(Box::new(Slow));
        assert!(report.interval >= Duration::from_millis(120), "{:?}", report.interval);
        let expected = format!(
            "memlock_exporter_collector_interval_seconds{{collector=\"slow\"}} {}",
            report.interval.as_secs_f64()
        );
        let text = Snapshot::new(vec![report]).text().to_owned();
        assert!(text.contains(&expected), "{expected}\n{text}");
    }

    #[test]
    fn a_run_longer_than_the_interval_stretches_it_to_twice_the_run() {
        let second = Duration::from_secs(1);
        assert_eq!(adapted_interval(second, Duration::from_millis(300)), second);
        assert_eq!(adapted_interval(second, second), second);
        assert_eq!(adapted_interval(second, Duration::from_millis(1500)), Duration::from_secs(3));
    }

    #[test]
    fn stop_wakes_sleepers() {
        let stop = Arc::new(Stop::default());
        let s = stop.clone();
        let t = std::thread::spawn(move || s.sleep_until(Instant::now() + Duration::from_secs(60)));
        std::thread::sleep(Duration::from_millis(20));
        stop.stop();
        assert!(t.join().unwrap());
    }
}
