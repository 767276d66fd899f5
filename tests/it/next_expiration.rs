//! `next_expiration_ms` of `SystemTimer` and `MockTimer` against a `BTreeMap` model: after
//! every add, cancel, reschedule and clock step (with the flushes it starts), the earliest
//! expiration among the pending tasks, exact — a task's own `expiration_ms`, not its
//! bucket's start — or `None` when none is pending. Random ticks and wheel sizes, delays
//! from due-at-once to far up the levels, and the end of the clock's range.
//!
//! The timers run tasks inline (`SystemTimer` on an inline executor), so a task that is
//! handed over has run when the call returns, and "pending" is "neither run nor
//! cancelled". Which tasks run when is `model.rs`'s to prove; this file reads it off
//! the tasks and holds `next_expiration_ms` to it.
//!
//! Run more cases with `PROPTEST_CASES=10000 cargo test --release --test next_expiration`.

use crate::common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::counted;
use common::sync::ExecutorGate;
use proptest::prelude::*;
use timingwheel::{MockTime, MockTimer, SystemTimer, Timer, TimerTaskEntry};

/// Proptest cases per property unless `PROPTEST_CASES` says otherwise.
const DEFAULT_CASES: u32 = 256;

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|cases| cases.parse().ok())
        .unwrap_or(DEFAULT_CASES)
}

#[derive(Clone, Debug)]
enum Op {
    Add(i64),
    Cancel(usize),
    Reschedule(usize, i64),
    /// Move the clock, then drive the timer until it has nothing left to flush.
    Step(i64),
}

fn delay() -> impl Strategy<Value = i64> {
    prop_oneof![
        2 => 1..=40i64,
        2 => 1..=3_000i64,
        2 => 1..=500_000i64,
        1 => -5..=0i64,
        1 => prop_oneof![Just(i64::MAX), Just(i64::MAX / 2), 1i64 << 40..1i64 << 50],
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => delay().prop_map(Op::Add),
        2 => any::<usize>().prop_map(Op::Cancel),
        2 => (any::<usize>(), delay()).prop_map(|(k, d)| Op::Reschedule(k, d)),
        3 => prop_oneof![0..=30i64, 0..=3_000i64, 0..=600_000i64].prop_map(Op::Step),
    ]
}

/// One task of a run: its handle, its run count, and its expiration while it is pending.
struct Task {
    entry: TimerTaskEntry,
    runs: Arc<AtomicUsize>,
    pending_at: Option<i64>,
}

/// The timer under test, as far as this file needs it.
trait Subject: Timer {
    fn next_expiration(&self) -> Option<i64>;
    /// Moves the clock by `ms` and drives the timer until nothing is left to flush.
    fn step(&self, time: &MockTime, ms: i64);
}

impl Subject for SystemTimer {
    fn next_expiration(&self) -> Option<i64> {
        self.next_expiration_ms()
    }
    fn step(&self, time: &MockTime, ms: i64) {
        time.sleep(ms);
        while self.advance_clock(0) {}
    }
}

impl Subject for MockTimer {
    fn next_expiration(&self) -> Option<i64> {
        self.next_expiration_ms()
    }
    fn step(&self, _time: &MockTime, ms: i64) {
        self.advance_clock(ms);
    }
}

/// The model: every pending task by (expiration, id).
#[derive(Default)]
struct Model {
    pending: BTreeMap<(i64, usize), ()>,
}

impl Model {
    /// Reads task `id`'s state off the task: pending at `expiration_ms` unless it ran.
    fn settle(&mut self, tasks: &mut [Task], id: usize, expiration_ms: i64) {
        if let Some(old) = tasks[id].pending_at.take() {
            self.pending.remove(&(old, id));
        }
        if tasks[id].runs.load(Ordering::SeqCst) == 0 {
            tasks[id].pending_at = Some(expiration_ms);
            self.pending.insert((expiration_ms, id), ());
        }
    }

    fn earliest(&self) -> Option<i64> {
        self.pending
            .keys()
            .next()
            .map(|&(expiration_ms, _)| expiration_ms)
    }
}

fn run_model(timer: &dyn Subject, time: &MockTime, ops: &[Op]) {
    let mut tasks: Vec<Task> = Vec::new();
    let mut model = Model::default();
    let drops = Arc::new(AtomicUsize::new(0));
    for op in ops {
        match *op {
            Op::Add(delay_ms) => {
                let runs = Arc::new(AtomicUsize::new(0));
                let entry = timer.add(counted(delay_ms, &runs, &drops));
                let expiration_ms = entry.expiration_ms();
                tasks.push(Task {
                    entry,
                    runs,
                    pending_at: None,
                });
                let id = tasks.len() - 1;
                model.settle(&mut tasks, id, expiration_ms);
            }
            Op::Cancel(k) if !tasks.is_empty() => {
                let id = k % tasks.len();
                let was_pending = tasks[id].pending_at.is_some();
                assert_eq!(tasks[id].entry.cancel(), was_pending, "cancel of task {id}");
                if let Some(at) = tasks[id].pending_at.take() {
                    model.pending.remove(&(at, id));
                }
            }
            Op::Reschedule(k, delay_ms) if !tasks.is_empty() => {
                let id = k % tasks.len();
                let was_pending = tasks[id].pending_at.is_some();
                let moved = timer.reschedule(&tasks[id].entry, delay_ms);
                assert_eq!(moved, was_pending, "reschedule of task {id}");
                if moved {
                    let expiration_ms = tasks[id].entry.expiration_ms();
                    model.settle(&mut tasks, id, expiration_ms);
                }
            }
            Op::Cancel(_) | Op::Reschedule(..) => {}
            Op::Step(ms) => {
                timer.step(time, ms);
                for id in 0..tasks.len() {
                    if let Some(at) = tasks[id].pending_at {
                        model.settle(&mut tasks, id, at);
                    }
                }
            }
        }
        assert_eq!(
            timer.next_expiration(),
            model.earliest(),
            "after {op:?}, with {} pending",
            model.pending.len()
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn system_timer_next_expiration_agrees_with_the_model(
        (tick_ms, wheel_size) in prop_oneof![
            Just((1, 20)), Just((1, 3)), Just((3, 2)), Just((2, 1)), Just((7, 64))
        ],
        start_ms in prop_oneof![Just(None), Just(Some(i64::MAX - 2_000_000))],
        ops in proptest::collection::vec(op(), 1..120),
    ) {
        let time = MockTime::new();
        if let Some(start_ms) = start_ms {
            time.sleep(start_ms - time.hi_res_clock_ms());
        }
        let timer = SystemTimer::builder("next")
            .time(time.clone())
            .tick_ms(tick_ms)
            .wheel_size(wheel_size)
            .executor(|job| job())
            .build();
        run_model(&timer, &time, &ops);
    }

    #[test]
    fn mock_timer_next_expiration_agrees_with_the_model(
        ops in proptest::collection::vec(op(), 1..120),
    ) {
        let time = MockTime::new();
        let timer = MockTimer::with_time(time.clone());
        run_model(&timer, &time, &ops);
    }
}

/// Tasks held back by `max_in_flight` are pending and due: the earliest of them is the
/// next expiration, exactly, until it is cancelled or handed over.
#[test]
fn held_tasks_are_the_earliest_pending() {
    let time = MockTime::new();
    let timer = SystemTimer::builder("next-held")
        .time(time.clone())
        .max_in_flight(1)
        .build();
    let gate = ExecutorGate::shut(&timer, 1);
    let (runs, drops) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let entries: Vec<TimerTaskEntry> = [5, 7, 60_000]
        .into_iter()
        .map(|delay| timer.add(counted(delay, &runs, &drops)))
        .collect();
    time.sleep(10);
    while timer.advance_clock(0) {}
    assert_eq!(timer.size(), 3, "two held, one in the wheel");
    assert_eq!(timer.next_expiration_ms(), Some(entries[0].expiration_ms()));
    assert!(entries[0].cancel());
    assert_eq!(timer.next_expiration_ms(), Some(entries[1].expiration_ms()));
    gate.open();
    common::sync::eventually(common::PATIENCE, "the held task ran", || {
        runs.load(Ordering::SeqCst) == 1
    });
    assert_eq!(timer.next_expiration_ms(), Some(entries[2].expiration_ms()));
    assert!(entries[2].cancel());
    assert_eq!(timer.next_expiration_ms(), None);
}
