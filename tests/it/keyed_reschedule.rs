//! `KeyedTimer::reschedule`: the session heartbeat, which moves the task scheduled under a
//! key and keeps it.
//!
//! Logic tests step a `MockTimer` (or a `SystemTimer` on a `MockTime`). The window between
//! the keyed timer's read of the key and the timer's move is opened on purpose by a timer
//! that runs a hook first: a cancel, a replacement, an expiry or an `add` in that window.
//! A model test checks every operation (schedule, schedule_if_absent, cancel, reschedule,
//! clock steps) against a `BTreeMap` reference, return values, run times and drops
//! included. Counting stress tests on a real-clock `SystemTimer` race reschedules with
//! expiry, cancels and replacements, on keys a thread owns (every return value and every
//! run time checked: never before the last move's instant plus its delay) and on keys all
//! threads share (every task runs at most once and is dropped once). That it allocates
//! nothing is shown in `tests/keyed_reschedule_alloc.rs`, a binary of its own.

use crate::common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::thread;
use std::time::Duration;

use common::PATIENCE;
use common::bounds::Bounds;
use common::ledger::Ledger;
use common::rng::Rng;
use common::sync::{ExecutorGate, driven, eventually};
use timingwheel::{
    AddError, KeyedTimer, MockTime, MockTimer, SystemTimer, Timer, TimerTask, TimerTaskEntry,
};

fn mock() -> (Arc<MockTimer>, KeyedTimer<u32>) {
    let timer = Arc::new(MockTimer::new());
    let keyed = KeyedTimer::new(timer.clone());
    (timer, keyed)
}

// ---- Logic

#[test]
fn reschedule_moves_the_task_to_its_new_time_and_keeps_it() {
    let (timer, keyed) = mock();
    let ledger = Ledger::new(1);
    keyed.schedule(1, ledger.task(0, 100));
    timer.advance_clock(90);
    assert!(keyed.reschedule(&1, 100));
    assert_eq!(ledger.drops(0), 0, "the same task, not a new one");
    assert_eq!((keyed.len(), timer.size()), (1, 1));
    timer.advance_clock(10);
    assert_eq!(ledger.runs(0), 0, "not at its old time");
    assert!(
        keyed.reschedule(&1, Duration::from_millis(50)),
        "a Duration too"
    );
    timer.advance_clock(49);
    assert_eq!(ledger.runs(0), 0);
    timer.advance_clock(1);
    assert_eq!((ledger.runs(0), ledger.drops(0)), (1, 1));
    assert!(!keyed.is_scheduled(&1));
    assert_eq!((keyed.len(), timer.size()), (0, 0));
}

#[test]
fn reschedule_returns_false_and_changes_nothing_unless_a_task_is_scheduled() {
    let (timer, keyed) = mock();
    let ledger = Ledger::new(4);
    assert!(!keyed.reschedule(&1, 10), "never scheduled");
    keyed.schedule(1, ledger.task(0, 10));
    timer.advance_clock(10);
    assert!(!keyed.reschedule(&1, 10), "it ran");
    keyed.schedule(2, ledger.task(1, 10));
    assert!(keyed.cancel(&2));
    assert!(!keyed.reschedule(&2, 10), "cancelled");
    keyed.schedule(3, ledger.task(2, 0));
    assert_eq!(ledger.runs(2), 1, "due at once: ran inside schedule");
    assert!(!keyed.reschedule(&3, 10), "it ran inside schedule");
    keyed.schedule(4, ledger.task(3, 10));
    timer.close();
    assert!(!keyed.reschedule(&4, 10), "its timer closed");
    assert_eq!(
        (ledger.runs(3), ledger.drops(3)),
        (0, 1),
        "dropped by the close"
    );
    assert!(keyed.is_empty());
}

#[test]
fn reschedule_to_a_delay_of_zero_or_less_runs_the_task_inside_the_call_on_a_mock_timer() {
    for delay in [0, -1, i64::MIN] {
        let (timer, keyed) = mock();
        let ledger = Ledger::new(1);
        keyed.schedule(1, ledger.task(0, 100));
        assert!(keyed.reschedule(&1, delay), "{delay}");
        assert_eq!((ledger.runs(0), ledger.drops(0)), (1, 1), "{delay}");
        assert!(!keyed.is_scheduled(&1));
        assert_eq!(timer.size(), 0);
    }
}

#[test]
fn reschedule_at_the_extremes_of_the_clock_neither_overflows_nor_panics() {
    let (timer, keyed) = mock();
    let ledger = Ledger::new(1);
    keyed.schedule(1, ledger.task(0, 100));
    assert!(keyed.reschedule(&1, i64::MAX));
    timer.advance_clock(1 << 50);
    assert_eq!(ledger.runs(0), 0);
    assert!(keyed.reschedule(&1, 5));
    timer.advance_clock(5);
    assert_eq!(ledger.runs(0), 1);
}

#[test]
fn a_task_handed_to_the_executor_is_not_moved_and_runs_once() {
    let time = MockTime::new();
    let timer = Arc::new(
        SystemTimer::builder("keyed-moved")
            .time(time.clone())
            .build(),
    );
    let keyed = KeyedTimer::new(timer.clone());
    let ledger = Ledger::new(1);
    let gate = ExecutorGate::shut(&*timer, 1);
    keyed.schedule("session", ledger.task(0, 10));
    time.sleep(10);
    while timer.advance_clock(0) {}
    assert_eq!(timer.size(), 0, "handed to the busy executor");
    assert!(keyed.is_scheduled(&"session"), "waiting, not yet running");
    assert!(!keyed.reschedule(&"session", 1_000), "too late to move it");
    gate.open();
    eventually(PATIENCE, "the executor reaches it", || ledger.drops(0) == 1);
    assert_eq!(ledger.runs(0), 1);
    assert!(keyed.is_empty());
    timer.close();
}

/// A `MockTimer` that runs a hook (once) at the start of `add` or of `reschedule`: the
/// window between the keyed timer's read of a key and its call to the timer, opened on
/// purpose.
struct HookTimer {
    inner: MockTimer,
    before_add: Mutex<Option<Box<dyn FnOnce() + Send>>>,
    before_reschedule: Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

impl HookTimer {
    fn new() -> Arc<HookTimer> {
        Arc::new(HookTimer {
            inner: MockTimer::new(),
            before_add: Mutex::new(None),
            before_reschedule: Mutex::new(None),
        })
    }

    fn run(hook: &Mutex<Option<Box<dyn FnOnce() + Send>>>) {
        let hook = hook.lock().unwrap().take();
        if let Some(hook) = hook {
            hook();
        }
    }
}

impl Timer for HookTimer {
    fn add(&self, task: Box<dyn TimerTask>) -> TimerTaskEntry {
        HookTimer::run(&self.before_add);
        self.inner.add(task)
    }
    fn try_add(&self, task: Box<dyn TimerTask>) -> Result<TimerTaskEntry, AddError> {
        self.inner.try_add(task)
    }
    fn reschedule(&self, entry: &TimerTaskEntry, delay_ms: i64) -> bool {
        HookTimer::run(&self.before_reschedule);
        self.inner.reschedule(entry, delay_ms)
    }
    fn advance_clock(&self, timeout_ms: i64) -> bool {
        self.inner.advance_clock(timeout_ms)
    }
    fn size(&self) -> usize {
        self.inner.size()
    }
    fn close(&self) {
        self.inner.close()
    }
    fn stop(&self) -> Vec<Box<dyn TimerTask>> {
        self.inner.stop()
    }
}

/// A keyed timer on a [`HookTimer`], with task 0 of a new ledger scheduled under key 1,
/// due in 100 ms.
fn hooked() -> (Arc<HookTimer>, Arc<KeyedTimer<u32>>, Arc<Ledger>) {
    let timer = HookTimer::new();
    let keyed = Arc::new(KeyedTimer::new(timer.clone()));
    let ledger = Ledger::new(2);
    keyed.schedule(1, ledger.task(0, 100));
    (timer, keyed, ledger)
}

#[test]
fn a_cancel_between_the_read_and_the_move_wins_and_the_task_never_runs() {
    let (timer, keyed, ledger) = hooked();
    let other = keyed.clone();
    *timer.before_reschedule.lock().unwrap() = Some(Box::new(move || {
        assert!(other.cancel(&1));
    }));
    assert!(!keyed.reschedule(&1, 500));
    timer.advance_clock(1_000);
    assert_eq!((ledger.runs(0), ledger.drops(0)), (0, 1));
    assert!(keyed.is_empty());
}

#[test]
fn a_replacement_between_the_read_and_the_move_wins_and_its_task_keeps_its_delay() {
    let (timer, keyed, ledger) = hooked();
    let (other, task) = (keyed.clone(), ledger.task(1, 300));
    *timer.before_reschedule.lock().unwrap() = Some(Box::new(move || {
        assert!(other.schedule_replacing(1, task));
    }));
    assert!(!keyed.reschedule(&1, 50), "the task it read was replaced");
    assert_eq!((ledger.runs(0), ledger.drops(0)), (0, 1), "replaced");
    timer.advance_clock(299);
    assert_eq!(ledger.runs(1), 0, "not moved to 50");
    timer.advance_clock(1);
    assert_eq!(ledger.runs(1), 1);
}

#[test]
fn an_expiry_between_the_read_and_the_move_wins_and_the_task_runs_once_at_its_old_time() {
    let (timer, keyed, ledger) = hooked();
    let clock = Arc::new(AtomicI64::new(0));
    let (inner, seen) = (Arc::clone(&timer), Arc::clone(&clock));
    *timer.before_reschedule.lock().unwrap() = Some(Box::new(move || {
        inner.advance_clock(100);
        seen.store(inner.inner.time().hi_res_clock_ms(), Ordering::SeqCst);
    }));
    let start = timer.inner.time().hi_res_clock_ms();
    assert!(!keyed.reschedule(&1, 500));
    assert_eq!(clock.load(Ordering::SeqCst), start + 100);
    assert_eq!((ledger.runs(0), ledger.drops(0)), (1, 1), "ran at 100");
    timer.advance_clock(1_000);
    assert_eq!(ledger.runs(0), 1, "once");
    assert!(keyed.is_empty());
}

#[test]
fn a_reschedule_while_the_add_of_its_key_has_not_returned_changes_nothing() {
    let timer = HookTimer::new();
    let keyed = Arc::new(KeyedTimer::new(timer.clone()));
    let ledger = Ledger::new(1);
    let other = keyed.clone();
    *timer.before_add.lock().unwrap() = Some(Box::new(move || {
        assert!(other.is_scheduled(&1), "the key is taken before the add");
        assert!(
            !other.reschedule(&1, 500),
            "but its task is not in the timer yet"
        );
    }));
    keyed.schedule(1, ledger.task(0, 100));
    timer.advance_clock(100);
    assert_eq!(ledger.runs(0), 1, "at its own delay");
}

// ---- Model

/// The reference: per key, the task scheduled under it, when it is due and the order of
/// its last add or move (a `MockTimer` runs tasks due together in that order); per task,
/// whether it ran, at what time, and whether it was dropped.
#[derive(Default)]
struct Model {
    scheduled: BTreeMap<u32, (usize, i64, u64)>,
    moves: u64,
    ran_at: BTreeMap<usize, i64>,
    dropped: Vec<bool>,
}

impl Model {
    fn remove(&mut self, key: u32) -> bool {
        let old = self.scheduled.remove(&key);
        if let Some((id, ..)) = old {
            self.dropped[id] = true;
        }
        old.is_some()
    }

    fn place(&mut self, key: u32, id: usize, now: i64, delay: i64) {
        if delay <= 0 {
            self.ran_at.insert(id, now);
            self.dropped[id] = true;
            self.scheduled.remove(&key);
        } else {
            self.moves += 1;
            self.scheduled.insert(key, (id, now + delay, self.moves));
        }
    }

    fn reschedule(&mut self, key: u32, now: i64, delay: i64) -> bool {
        match self.scheduled.get(&key) {
            Some(&(id, ..)) => {
                self.place(key, id, now, delay);
                true
            }
            None => false,
        }
    }

    fn advance(&mut self, now: i64) {
        let due: Vec<u32> = self
            .scheduled
            .iter()
            .filter(|(_, (_, at, _))| *at <= now)
            .map(|(key, _)| *key)
            .collect();
        for key in due {
            let (id, ..) = self.scheduled.remove(&key).unwrap();
            self.ran_at.insert(id, now);
            self.dropped[id] = true;
        }
    }
}

/// A ledger task that also records the clock when it runs.
struct Clocked {
    inner: Option<Box<common::ledger::LedgerTask>>,
    delay_ms: i64,
    time: MockTime,
    ran_at: Arc<Vec<AtomicI64>>,
    id: usize,
}

impl TimerTask for Clocked {
    fn delay_ms(&self) -> i64 {
        self.delay_ms
    }
    fn run(mut self: Box<Self>) {
        self.ran_at[self.id].store(self.time.hi_res_clock_ms(), Ordering::SeqCst);
        if let Some(inner) = self.inner.take() {
            inner.run();
        }
    }
}

#[test]
fn every_operation_follows_a_model_of_the_keyed_timer() {
    const KEYS: u32 = 6;
    const OPS: usize = 3_000;
    /// Every task's runs, drops and run time are compared this often (and at the end).
    const CHECK_EVERY: usize = 10;
    for seed in 1..=5 {
        let mut rng = Rng::new(seed);
        let time = MockTime::new();
        let timer = Arc::new(MockTimer::with_time(time.clone()));
        let keyed = KeyedTimer::new(timer.clone());
        let ledger = Ledger::new(OPS);
        let ran_at: Arc<Vec<AtomicI64>> = Arc::new((0..OPS).map(|_| AtomicI64::new(0)).collect());
        let mut model = Model {
            dropped: vec![false; OPS],
            ..Model::default()
        };
        for id in 0..OPS {
            let key = rng.below(u64::from(KEYS)) as u32;
            let delay = rng.below(70) as i64 - 8;
            let now = time.hi_res_clock_ms();
            let at = format!("seed {seed} op {id}");
            let task = || {
                Box::new(Clocked {
                    inner: Some(ledger.task(id, delay)),
                    delay_ms: delay,
                    time: time.clone(),
                    ran_at: Arc::clone(&ran_at),
                    id,
                })
            };
            match rng.below(12) {
                0..=2 => {
                    let replaced = keyed.schedule_replacing(key, task());
                    assert_eq!(replaced, model.remove(key), "{at}");
                    model.place(key, id, now, delay);
                }
                3 => {
                    let scheduled = keyed.schedule_if_absent(key, task());
                    assert_eq!(scheduled, !model.scheduled.contains_key(&key), "{at}");
                    if scheduled {
                        model.place(key, id, now, delay);
                    } else {
                        model.dropped[id] = true;
                    }
                }
                4 => assert_eq!(keyed.cancel(&key), model.remove(key), "{at}"),
                5..=8 => {
                    let moved = keyed.reschedule(&key, delay);
                    assert_eq!(moved, model.reschedule(key, now, delay), "{at}");
                }
                _ => {
                    timer.advance_clock(rng.below(30) as i64);
                    model.advance(time.hi_res_clock_ms());
                }
            }
            assert_eq!(keyed.len(), model.scheduled.len(), "{at}");
            assert_eq!(timer.size(), model.scheduled.len(), "{at}: an entry left");
            for k in 0..KEYS {
                let expected = model.scheduled.contains_key(&k);
                assert_eq!(keyed.is_scheduled(&k), expected, "{at} key {k}");
            }
            if id % CHECK_EVERY != 0 && id != OPS - 1 {
                continue;
            }
            for t in 0..=id {
                let ran = model.ran_at.get(&t);
                let expected = (usize::from(ran.is_some()), usize::from(model.dropped[t]));
                assert_eq!(
                    (ledger.runs(t), ledger.drops(t)),
                    expected,
                    "{at}: task {t}"
                );
                if let Some(&ran) = ran {
                    assert_eq!(ran_at[t].load(Ordering::SeqCst), ran, "{at}: task {t}");
                }
            }
        }
        assert!(model.ran_at.len() > OPS / 10, "seed {seed}: tasks ran");
    }
}

// ---- Stress

const THREADS: usize = 3;
const OWN_KEYS: usize = 16;
const SHARED_KEYS: usize = 8;
const OPS_PER_THREAD: usize = 12_000;
/// Operations between two pauses of 1 ms, so that tasks (delays 0-10 ms) also expire.
const OPS_PER_PAUSE: usize = 24;

/// What the stress threads share.
struct Race<'a> {
    keyed: &'a KeyedTimer<usize>,
    /// Tasks on owned keys, with their bounds.
    own: &'a Arc<Ledger>,
    bounds: &'a Arc<Bounds>,
    /// Tasks on shared keys.
    shared: &'a Arc<Ledger>,
    next_shared: &'a AtomicUsize,
    moved_shared: &'a AtomicUsize,
}

/// One stress thread: on its own keys, schedules, replaces, cancels and reschedules,
/// checking every return value and recording each task's bound; on the shared keys, does
/// the same without knowing what the others did.
fn heartbeat(race: &Race<'_>, t: usize) {
    let mut rng = Rng::new(t as u64 + 3);
    let mut current: Vec<Option<usize>> = vec![None; OWN_KEYS];
    let mut next_own = t;
    for op in 0..OPS_PER_THREAD {
        if op % OPS_PER_PAUSE == 0 {
            thread::sleep(Duration::from_millis(1));
        }
        let delay = rng.below(12) as i64 - 1;
        if rng.below(3) == 0 {
            let key = OWN_KEYS * THREADS + rng.below(SHARED_KEYS as u64) as usize;
            match rng.below(4) {
                0 => {
                    let id = race.next_shared.fetch_add(1, Ordering::Relaxed);
                    race.keyed.schedule(key, race.shared.task(id, delay));
                }
                1 => {
                    race.keyed.cancel(&key);
                }
                _ => {
                    if race.keyed.reschedule(&key, delay) {
                        race.moved_shared.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            continue;
        }
        let slot = rng.below(OWN_KEYS as u64) as usize;
        let key = t * OWN_KEYS + slot;
        let called_ns = race.bounds.now_ns();
        match rng.below(5) {
            0 => {
                let id = next_own;
                next_own += THREADS;
                race.bounds.not_before_ns[id]
                    .store(called_ns + delay * 1_000_000, Ordering::SeqCst);
                let task = race.bounds.task(race.own, id, delay);
                if race.keyed.schedule_replacing(key, task) {
                    race.own
                        .ended_unrun(current[slot].expect("replaced a known task"));
                }
                current[slot] = Some(id);
            }
            1 => {
                if race.keyed.cancel(&key) {
                    race.own
                        .ended_unrun(current[slot].expect("cancelled a known task"));
                }
                current[slot] = None;
            }
            _ => {
                if race.keyed.reschedule(&key, delay) {
                    let id = current[slot].expect("moved a known task");
                    race.bounds.not_before_ns[id]
                        .store(called_ns + delay * 1_000_000, Ordering::SeqCst);
                }
            }
        }
    }
}

#[test]
fn reschedules_racing_expiry_cancels_and_replacements_are_exactly_once_and_never_early() {
    let timer = Arc::new(
        SystemTimer::builder("keyed-heartbeats")
            .executor_threads(2)
            .build(),
    );
    let keyed = KeyedTimer::new(timer.clone());
    let own_tasks = THREADS * OPS_PER_THREAD;
    let (own, bounds) = (Ledger::new(own_tasks), Bounds::new(own_tasks));
    let shared = Ledger::new(THREADS * OPS_PER_THREAD);
    let (next_shared, moved_shared) = (AtomicUsize::new(0), AtomicUsize::new(0));
    let start = Barrier::new(THREADS);
    let race = Race {
        keyed: &keyed,
        own: &own,
        bounds: &bounds,
        shared: &shared,
        next_shared: &next_shared,
        moved_shared: &moved_shared,
    };
    driven(&*timer, 1, || {
        thread::scope(|s| {
            for t in 0..THREADS {
                let (race, start) = (&race, &start);
                s.spawn(move || {
                    start.wait();
                    heartbeat(race, t);
                });
            }
        });
        eventually(PATIENCE, "every task ran or was dropped", || {
            keyed.is_empty() && timer.size() == 0
        });
    });
    // A task claims its key before it runs, and leaves the timer's count when handed over:
    // the last ones may still be running. Closing waits for them.
    timer.close();
    // Own keys: every task made ran once or ended unrun once, never both; none early.
    let made = (0..own_tasks).filter(|&id| bounds.not_before_ns[id].load(Ordering::SeqCst) >= 0);
    let (mut ran, mut unrun) = (0, 0);
    for id in made {
        let (runs, cancels, drops) = (own.runs(id), own.cancels(id), own.drops(id));
        assert_eq!(
            (runs + cancels, drops),
            (1, 1),
            "task {id}: ran {runs}, ended unrun {cancels}, dropped {drops}"
        );
        ran += runs;
        unrun += cancels;
    }
    bounds.assert_never_early(&own);
    // Shared keys: whatever raced, every task ran at most once and was dropped once.
    let shared_made = next_shared.load(Ordering::SeqCst);
    for id in 0..shared_made {
        let (runs, drops) = (shared.runs(id), shared.drops(id));
        assert!(
            runs <= 1 && drops == 1,
            "shared task {id}: ran {runs}, dropped {drops}"
        );
    }
    let moved = moved_shared.load(Ordering::SeqCst);
    eprintln!(
        "own keys: ran {ran}, unrun {unrun}; shared keys: {shared_made} tasks, {moved} moved"
    );
    assert!(
        ran > 1_000 && unrun > 1_000,
        "both outcomes: ran {ran}, unrun {unrun}"
    );
    assert!(
        moved > 100,
        "shared keys were moved while others raced: {moved}"
    );
}
