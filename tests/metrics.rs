//! The `metrics` feature: the timer's and the purgatory's gauges and counters, read back from
//! a small hand-written `metrics::Recorder` (no recorder crate to build). Each test installs
//! its recorder only while it builds the timer or purgatory (`with_local_recorder`): the
//! handles registered then keep reporting to it from any thread.
//!
//! Run with `cargo test --features metrics --test metrics` (or with every test:
//! `cargo test --features metrics`).

#![cfg(feature = "metrics")]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use metrics::{
    Counter, CounterFn, Gauge, GaugeFn, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder,
    SharedString, Unit,
};
use timingwheel::{
    Delayed, DelayedOperation, DelayedOperationPurgatory, MockTime, MockTimer, SystemTimer, Timer,
    timer_task,
};

/// One metric's value: a counter's count, or a gauge's `f64` bits.
#[derive(Default)]
struct Cell(AtomicU64);

impl CounterFn for Cell {
    fn increment(&self, value: u64) {
        self.0.fetch_add(value, Ordering::SeqCst);
    }
    fn absolute(&self, value: u64) {
        self.0.store(value, Ordering::SeqCst);
    }
}

impl GaugeFn for Cell {
    fn increment(&self, value: f64) {
        GaugeFn::set(self, f64::from_bits(self.0.load(Ordering::SeqCst)) + value);
    }
    fn decrement(&self, value: f64) {
        GaugeFn::increment(self, -value);
    }
    fn set(&self, value: f64) {
        self.0.store(value.to_bits(), Ordering::SeqCst);
    }
}

/// One histogram's samples, in the order recorded.
#[derive(Default)]
struct Samples(Mutex<Vec<f64>>);

impl HistogramFn for Samples {
    fn record(&self, value: f64) {
        self.0.lock().unwrap().push(value);
    }
}

/// Keeps every metric registered with it, by `name{label=value,...}`.
#[derive(Default)]
struct Capture {
    cells: Mutex<BTreeMap<String, Arc<Cell>>>,
    histograms: Mutex<BTreeMap<String, Arc<Samples>>>,
    /// `register_*` calls, to prove the handles are registered once, not per task.
    registrations: AtomicUsize,
}

/// `name{label=value,...}` of `key`.
fn full_name(key: &Key) -> String {
    let labels: Vec<String> = key
        .labels()
        .map(|label| format!("{}={}", label.key(), label.value()))
        .collect();
    format!("{}{{{}}}", key.name(), labels.join(","))
}

impl Capture {
    fn cell(&self, key: &Key) -> Arc<Cell> {
        self.registrations.fetch_add(1, Ordering::SeqCst);
        let name = full_name(key);
        Arc::clone(self.cells.lock().unwrap().entry(name).or_default())
    }

    fn samples(&self, key: &Key) -> Arc<Samples> {
        self.registrations.fetch_add(1, Ordering::SeqCst);
        let name = full_name(key);
        Arc::clone(self.histograms.lock().unwrap().entry(name).or_default())
    }

    /// The samples recorded so far in the histogram `name{label}`.
    fn histogram(&self, name: &str, label: &str) -> Vec<f64> {
        let key = format!("{name}{{{label}}}");
        let histograms = self.histograms.lock().unwrap();
        let samples = histograms
            .get(&key)
            .unwrap_or_else(|| panic!("{key} not registered: {:?}", histograms.keys()));
        samples.0.lock().unwrap().clone()
    }

    /// The counter or gauge `name{label}`, as its raw `u64`.
    fn raw(&self, name: &str, label: &str) -> u64 {
        let key = format!("{name}{{{label}}}");
        let cells = self.cells.lock().unwrap();
        let cell = cells
            .get(&key)
            .unwrap_or_else(|| panic!("{key} not registered; registered: {:?}", cells.keys()));
        cell.0.load(Ordering::SeqCst)
    }

    fn counter(&self, name: &str, label: &str) -> u64 {
        self.raw(name, label)
    }

    fn gauge(&self, name: &str, label: &str) -> f64 {
        f64::from_bits(self.raw(name, label))
    }

    fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.cells.lock().unwrap().keys().cloned().collect();
        names.extend(self.histograms.lock().unwrap().keys().cloned());
        names.sort();
        names
    }
}

impl Recorder for Capture {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        Counter::from_arc(self.cell(key))
    }
    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::from_arc(self.cell(key))
    }
    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::from_arc(self.samples(key))
    }
}

#[test]
fn the_timer_reports_its_stats_after_each_advance_and_at_close() {
    const LABEL: &str = "timer=orders";
    let capture = Capture::default();
    let time = MockTime::new();
    let timer = metrics::with_local_recorder(&capture, || {
        SystemTimer::builder("orders").time(time.clone()).build()
    });
    assert_eq!(
        capture.names(),
        [
            "timer_added_total{timer=orders}",
            "timer_cancelled_total{timer=orders}",
            "timer_expired_total{timer=orders}",
            "timer_lateness_seconds{timer=orders}",
            "timer_pending{timer=orders}",
        ]
    );
    let tasks: Vec<_> = (1..=4)
        .map(|i| timer.add(timer_task(i * 10, || {})))
        .collect();
    assert!(tasks[3].cancel());
    time.sleep(20);
    while timer.advance_clock(0) {}
    let stats = timer.stats();
    assert_eq!(
        (stats.added, stats.expired, stats.cancelled, stats.pending),
        (4, 2, 1, 1)
    );
    assert_eq!(capture.counter("timer_added_total", LABEL), 4);
    assert_eq!(capture.counter("timer_expired_total", LABEL), 2);
    assert_eq!(capture.counter("timer_cancelled_total", LABEL), 1);
    assert_eq!(capture.gauge("timer_pending", LABEL), 1.0);

    // Reported at the next step, not per add.
    timer.add(timer_task(1_000, || {}));
    assert_eq!(capture.counter("timer_added_total", LABEL), 4);
    timer.close();
    assert_eq!(capture.counter("timer_added_total", LABEL), 5);
    assert_eq!(
        capture.gauge("timer_pending", LABEL),
        0.0,
        "closing dropped the rest"
    );
}

#[test]
fn the_handles_are_registered_once_per_timer_not_per_task() {
    let capture = Capture::default();
    let time = MockTime::new();
    let timer = metrics::with_local_recorder(&capture, || {
        SystemTimer::builder("registered-once")
            .time(time.clone())
            .build()
    });
    let registered = capture.registrations.load(Ordering::SeqCst);
    assert_eq!(registered, 5);
    metrics::with_local_recorder(&capture, || {
        for i in 0..1_000 {
            timer.add(timer_task(i % 50, || {}));
        }
        time.sleep(50);
        while timer.advance_clock(0) {}
    });
    assert_eq!(capture.registrations.load(Ordering::SeqCst), registered);
    assert_eq!(
        capture.counter("timer_added_total", "timer=registered-once"),
        1_000
    );
}

/// An operation that never completes by itself.
struct Waiting;

impl DelayedOperation for Waiting {
    fn delay_ms(&self) -> i64 {
        100
    }
    fn try_complete(&self) -> bool {
        false
    }
    fn on_complete(&self) {}
    fn on_expiration(&self) {}
}

#[test]
fn the_purgatory_reports_its_size_its_delayed_operations_and_its_expiries() {
    const LABEL: &str = "delayed_operation=Produce";
    let capture = Capture::default();
    let timer = Arc::new(MockTimer::new());
    let purgatory = metrics::with_local_recorder(&capture, || {
        DelayedOperationPurgatory::<u32, Waiting>::builder("Produce")
            .timer(Arc::clone(&timer))
            .reaper_enabled(false)
            .build()
    });
    let ops: Vec<_> = (0..3).map(|_| Delayed::new(Waiting)).collect();
    for (key, op) in (0..).zip(&ops) {
        purgatory.try_complete_else_watch(op, &[key, 100 + key]);
    }
    ops[0].force_complete();
    purgatory.advance_clock(0);
    assert_eq!(capture.gauge("purgatory_size", LABEL), 6.0);
    assert_eq!(
        capture.gauge("purgatory_num_delayed_operations", LABEL),
        2.0
    );
    assert_eq!(capture.counter("purgatory_expires_total", LABEL), 0);

    purgatory.advance_clock(100);
    assert_eq!(purgatory.expired_count(), 2);
    assert_eq!(
        capture.gauge("purgatory_num_delayed_operations", LABEL),
        0.0
    );
    assert_eq!(capture.counter("purgatory_expires_total", LABEL), 2);

    // Reported at shutdown, and when an operation is answered at once after it.
    assert_eq!(purgatory.check_and_complete(&0), 0);
    assert_eq!(
        capture.gauge("purgatory_size", LABEL),
        6.0,
        "until the next report"
    );
    purgatory.shutdown();
    assert_eq!(capture.gauge("purgatory_size", LABEL), 5.0);
    purgatory.try_complete_else_watch(&Delayed::new(Waiting), &[7]);
    assert_eq!(capture.counter("purgatory_expires_total", LABEL), 3);
}

#[test]
fn a_purgatory_on_its_own_system_timer_reports_both() {
    let capture = Capture::default();
    let purgatory = metrics::with_local_recorder(&capture, || {
        DelayedOperationPurgatory::<u32, Waiting>::new("Fetch", 1)
    });
    purgatory.shutdown();
    let names = capture.names();
    for name in [
        "purgatory_size{delayed_operation=Fetch}",
        "purgatory_num_delayed_operations{delayed_operation=Fetch}",
        "purgatory_expires_total{delayed_operation=Fetch}",
        "purgatory_expiration_lateness_seconds{delayed_operation=Fetch}",
        "timer_pending{timer=Fetch}",
        "timer_added_total{timer=Fetch}",
        "timer_expired_total{timer=Fetch}",
        "timer_cancelled_total{timer=Fetch}",
        "timer_lateness_seconds{timer=Fetch}",
    ] {
        assert!(names.iter().any(|n| n == name), "{name} missing: {names:?}");
    }
    assert_eq!(names.len(), 9, "{names:?}");
}

/// True if `got` is within 1.6 % (a bucket's midpoint) of `want`.
fn close_to(got: f64, want: f64) -> bool {
    (got - want).abs() <= want / 64.0
}

#[test]
fn the_timer_reports_how_late_its_tasks_started_at_the_next_step() {
    const LABEL: &str = "timer=late";
    let capture = Capture::default();
    let time = MockTime::new();
    let timer = metrics::with_local_recorder(&capture, || {
        SystemTimer::builder("late")
            .time(time.clone())
            .executor(|job| job())
            .build()
    });
    timer.add(timer_task(10, || {}));
    timer.add(timer_task(20, || {}));
    // The first list comes due 30 ms late, the second 20 ms late: run inline, at once.
    time.sleep(40);
    while timer.advance_clock(0) {}
    let mut seconds = capture.histogram("timer_lateness_seconds", LABEL);
    seconds.sort_by(f64::total_cmp);
    assert_eq!(seconds.len(), 2, "{seconds:?}");
    assert!(
        close_to(seconds[0], 0.020) && close_to(seconds[1], 0.030),
        "{seconds:?}"
    );
    let lateness = timer.lateness();
    assert_eq!((lateness.count, lateness.max_us), (2, 30_000));
    // Reported once: the next step adds nothing new.
    timer.advance_clock(0);
    assert_eq!(capture.histogram("timer_lateness_seconds", LABEL).len(), 2);
}

#[test]
fn a_purgatory_reports_how_late_its_operations_expired() {
    const LABEL: &str = "delayed_operation=Late";
    let capture = Capture::default();
    let timer = Arc::new(MockTimer::new());
    let purgatory = metrics::with_local_recorder(&capture, || {
        DelayedOperationPurgatory::<u32, Waiting>::builder("Late")
            .timer(Arc::clone(&timer))
            .reaper_enabled(false)
            .build()
    });
    let (expiring, completed) = (Delayed::new(Waiting), Delayed::new(Waiting));
    purgatory.try_complete_else_watch(&expiring, &[1]);
    purgatory.try_complete_else_watch(&completed, &[2]);
    completed.force_complete();
    // Its 100 ms delay passes, and the timer runs its expiry 25 ms after that.
    purgatory.advance_clock(125);
    assert_eq!(purgatory.expired_count(), 1);
    let seconds = capture.histogram("purgatory_expiration_lateness_seconds", LABEL);
    assert_eq!(
        seconds.len(),
        1,
        "completed operations do not count: {seconds:?}"
    );
    assert!(close_to(seconds[0], 0.025), "{seconds:?}");
}
