//! `KeyedTimer`: one timeout per key (Kafka's `CoordinatorTimer`).
//!
//! Logic tests step a `MockTimer`, and a model test checks every operation against a
//! `HashMap` reference. The promise Kafka's `tasks.remove(key, this)` gives — a replaced or
//! cancelled task never runs, even if it had already expired and was waiting for the
//! executor — is shown on a `SystemTimer` whose executor is held busy. Counting stress tests
//! on a `SystemTimer` with four executor threads prove that every task ends exactly one way:
//! run once, or replaced, cancelled or refused (and then never run), and dropped once.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::thread;
use std::time::Duration;

use timingwheel::{KeyedTimer, MockTime, MockTimer, SystemTimer, Timer, TimerTask, timer_task};

use crate::common;
use common::ledger::Ledger;
use common::rng::Rng;
use common::sync::{ExecutorGate, driven, eventually, within};
use common::{Counted, PATIENCE, counted};

/// A keyed timer on a new `MockTimer`, and that timer.
fn mock() -> (Arc<MockTimer>, KeyedTimer<u32>) {
    let timer = Arc::new(MockTimer::new());
    let keyed = KeyedTimer::new(timer.clone());
    (timer, keyed)
}

#[test]
fn keyed_timer_is_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<KeyedTimer<String>>();
    assert_send_sync::<KeyedTimer<u64>>();
}

#[test]
fn schedule_replaces_and_only_the_last_task_runs_at_its_own_time() {
    let (timer, keyed) = mock();
    let ledger = Ledger::new(3);
    keyed.schedule(7, ledger.task(0, 100));
    keyed.schedule(7, ledger.task(1, 50));
    assert_eq!(
        ledger.drops(0),
        1,
        "the replaced task is dropped inside schedule"
    );
    keyed.schedule(7, ledger.task(2, 300));
    assert_eq!(ledger.drops(1), 1);
    assert_eq!(
        (keyed.len(), timer.size()),
        (1, 1),
        "one entry left in the timer"
    );

    timer.advance_clock(299);
    assert_eq!(
        ledger.total_runs(),
        0,
        "neither replaced task ran at its time"
    );
    assert!(keyed.is_scheduled(&7));
    timer.advance_clock(1);
    assert_eq!((ledger.runs(0), ledger.runs(1), ledger.runs(2)), (0, 0, 1));
    assert_eq!(ledger.all_drops(), [1, 1, 1]);
    assert!(!keyed.is_scheduled(&7));
    assert!(keyed.is_empty());
}

#[test]
fn schedule_replacing_says_whether_it_replaced_a_task() {
    let (timer, keyed) = mock();
    let ledger = Ledger::new(5);
    assert!(!keyed.schedule_replacing(1, ledger.task(0, 10)));
    assert!(keyed.schedule_replacing(1, ledger.task(1, 10)));
    timer.advance_clock(10);
    assert_eq!(ledger.runs(1), 1);
    assert!(
        !keyed.schedule_replacing(1, ledger.task(2, 10)),
        "the last one ran"
    );
    assert!(keyed.cancel(&1));
    assert!(
        !keyed.schedule_replacing(1, ledger.task(3, 10)),
        "the last one was cancelled"
    );
    assert!(
        !keyed.schedule_replacing(2, ledger.task(4, 10)),
        "another key"
    );
    assert_eq!(keyed.len(), 2);
}

#[test]
fn schedule_if_absent_schedules_only_when_no_task_is_scheduled() {
    let (timer, keyed) = mock();
    let ledger = Ledger::new(5);
    assert!(keyed.schedule_if_absent(1, ledger.task(0, 100)));
    assert!(!keyed.schedule_if_absent(1, ledger.task(1, 10)));
    assert_eq!(
        (ledger.runs(1), ledger.drops(1)),
        (0, 1),
        "refused: dropped at once"
    );
    timer.advance_clock(100);
    assert_eq!(ledger.runs(0), 1);
    assert!(
        keyed.schedule_if_absent(1, ledger.task(2, 100)),
        "the last one ran"
    );
    assert!(keyed.cancel(&1));
    assert!(
        keyed.schedule_if_absent(1, ledger.task(3, 100)),
        "the last one was cancelled"
    );
    assert!(
        keyed.schedule_if_absent(2, ledger.task(4, 100)),
        "another key"
    );
    assert_eq!((keyed.len(), timer.size()), (2, 2));
}

#[test]
fn cancel_returns_true_once_drops_the_task_and_its_entry() {
    let (timer, keyed) = mock();
    let ledger = Ledger::new(1);
    keyed.schedule(3, ledger.task(0, 1_000));
    assert!(keyed.cancel(&3));
    assert_eq!(ledger.drops(0), 1, "dropped inside cancel");
    assert_eq!(timer.size(), 0, "its timer entry is gone");
    assert!(!keyed.cancel(&3));
    assert!(!keyed.cancel(&4), "never scheduled");
    timer.advance_clock(10_000);
    assert_eq!(ledger.runs(0), 0);
    assert!(keyed.is_empty());
}

#[test]
fn a_task_due_now_runs_inside_schedule_on_a_mock_timer() {
    let (_timer, keyed) = mock();
    let ledger = Ledger::new(2);
    keyed.schedule(1, ledger.task(0, 0));
    assert_eq!(ledger.runs(0), 1);
    assert!(!keyed.is_scheduled(&1) && keyed.is_empty());
    keyed.schedule(1, ledger.task(1, -5));
    assert_eq!(ledger.runs(1), 1);
}

#[test]
fn a_running_task_can_schedule_cancel_and_query_its_own_key() {
    let (timer, keyed) = mock();
    let keyed = Arc::new(keyed);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (k, s) = (keyed.clone(), seen.clone());
    keyed.schedule(
        9,
        timer_task(10, move || {
            // It claimed its key before it started: nothing is scheduled under it.
            s.lock().unwrap().push(k.is_scheduled(&9));
            let again = s.clone();
            k.schedule(9, timer_task(10, move || again.lock().unwrap().push(true)));
            s.lock().unwrap().push(k.is_scheduled(&9));
            s.lock().unwrap().push(!k.cancel(&9));
            k.schedule(9, timer_task(0, || {}));
        }),
    );
    within(PATIENCE, "a re-entrant keyed task", move || {
        timer.advance_clock(100);
    });
    assert_eq!(*seen.lock().unwrap(), [false, true, false]);
    assert!(keyed.is_empty());
}

/// A task whose `Drop` calls back into the keyed timer that drops it.
struct CallsBackOnDrop {
    keyed: Arc<Mutex<Option<Arc<KeyedTimer<u32>>>>>,
    dropped: Arc<AtomicUsize>,
}

impl TimerTask for CallsBackOnDrop {
    fn delay_ms(&self) -> i64 {
        1_000
    }
    fn run(self: Box<Self>) {}
}

impl Drop for CallsBackOnDrop {
    fn drop(&mut self) {
        // Taken out first: the `Drop`s it causes take this lock too.
        let keyed = self.keyed.lock().unwrap().clone();
        if let Some(keyed) = keyed {
            keyed.is_scheduled(&1);
            keyed.schedule_if_absent(2, timer_task(1_000, || {}));
            keyed.cancel(&3);
        }
        self.dropped.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn a_task_whose_drop_calls_back_into_the_keyed_timer_does_not_deadlock() {
    let (timer, keyed) = mock();
    let keyed = Arc::new(keyed);
    let slot = Arc::new(Mutex::new(Some(keyed.clone())));
    let dropped = Arc::new(AtomicUsize::new(0));
    let (slot2, dropped2) = (slot.clone(), dropped.clone());
    within(PATIENCE, "drops that call back", move || {
        let task = || {
            Box::new(CallsBackOnDrop {
                keyed: slot2.clone(),
                dropped: dropped2.clone(),
            })
        };
        keyed.schedule(1, task());
        keyed.schedule(1, task()); // the first is replaced: dropped inside schedule
        keyed.schedule(3, task());
        keyed.cancel(&1); // dropped inside cancel; its drop cancels the one under 3
        assert!(keyed.schedule_if_absent(3, task()));
        timer.close(); // drops it
        slot2.lock().unwrap().take();
    });
    assert_eq!(dropped.load(Ordering::SeqCst), 4);
    assert!(slot.lock().unwrap().is_none());
}

/// The reference of the model test: per key, the task scheduled under it and when it is
/// due; per task, the runs and drops to expect.
struct Model {
    scheduled: HashMap<u32, (usize, i64)>,
    runs: Vec<usize>,
    drops: Vec<usize>,
}

impl Model {
    /// Takes the task scheduled under `key` out (it is dropped unrun); true if there was one.
    fn remove(&mut self, key: u32) -> bool {
        let old = self.scheduled.remove(&key);
        if let Some((id, _)) = old {
            self.drops[id] = 1;
        }
        old.is_some()
    }

    /// Task `id`, scheduled at `now` with `delay`: a task due at once runs inside the call
    /// on a `MockTimer`.
    fn schedule(&mut self, key: u32, id: usize, now: i64, delay: i64) {
        if delay <= 0 {
            self.runs[id] = 1;
            self.drops[id] = 1;
        } else {
            self.scheduled.insert(key, (id, now + delay));
        }
    }

    /// The clock reached `now`: the tasks due run.
    fn advance(&mut self, now: i64) {
        let (runs, drops) = (&mut self.runs, &mut self.drops);
        self.scheduled.retain(|_, &mut (id, due)| {
            let due_now = due <= now;
            if due_now {
                runs[id] = 1;
                drops[id] = 1;
            }
            !due_now
        });
    }
}

#[test]
fn len_and_is_scheduled_follow_a_model_of_every_operation() {
    const KEYS: u32 = 8;
    const OPS: usize = 3_000;
    for seed in 1..=4 {
        let mut rng = Rng::new(seed);
        let time = MockTime::new();
        let timer = Arc::new(MockTimer::with_time(time.clone()));
        let keyed = KeyedTimer::new(timer.clone());
        let ledger = Ledger::new(OPS);
        let mut model = Model {
            scheduled: HashMap::new(),
            runs: vec![0; OPS],
            drops: vec![0; OPS],
        };
        for id in 0..OPS {
            let key = rng.below(u64::from(KEYS)) as u32;
            let delay = rng.below(60) as i64 - 5;
            let now = time.hi_res_clock_ms();
            let at = format!("seed {seed} op {id}");
            match rng.below(10) {
                0..=3 => {
                    let replaced = keyed.schedule_replacing(key, ledger.task(id, delay));
                    assert_eq!(replaced, model.remove(key), "{at}");
                    model.schedule(key, id, now, delay);
                }
                4..=5 => {
                    let scheduled = keyed.schedule_if_absent(key, ledger.task(id, delay));
                    assert_eq!(scheduled, !model.scheduled.contains_key(&key), "{at}");
                    if scheduled {
                        model.schedule(key, id, now, delay);
                    } else {
                        model.drops[id] = 1;
                    }
                }
                6..=7 => assert_eq!(keyed.cancel(&key), model.remove(key), "{at}"),
                _ => {
                    timer.advance_clock(rng.below(40) as i64);
                    model.advance(time.hi_res_clock_ms());
                }
            }
            for k in 0..KEYS {
                let expected = model.scheduled.contains_key(&k);
                assert_eq!(keyed.is_scheduled(&k), expected, "{at} key {k}");
            }
            assert_eq!(keyed.len(), model.scheduled.len(), "{at}");
            assert_eq!(
                timer.size(),
                model.scheduled.len(),
                "{at}: an entry left behind"
            );
            for t in 0..=id {
                let expected = (model.runs[t], model.drops[t]);
                assert_eq!(
                    (ledger.runs(t), ledger.drops(t)),
                    expected,
                    "{at}: task {t}"
                );
            }
        }
    }
}

/// Kafka's promise: once `schedule` (or `cancel`) returned, the task it replaced (or
/// cancelled) never runs, even though it had already expired and was waiting for a busy
/// executor. With one executor thread and with four.
#[test]
fn a_task_already_waiting_for_the_executor_never_runs_once_replaced_or_cancelled() {
    for threads in [1, 4] {
        let time = MockTime::new();
        let timer = Arc::new(
            SystemTimer::builder("keyed-late")
                .time(time.clone())
                .executor_threads(threads)
                .build(),
        );
        let keyed = KeyedTimer::new(timer.clone());
        let ledger = Ledger::new(4);
        let gate = ExecutorGate::shut(&*timer, threads);
        keyed.schedule("replaced", ledger.task(0, 10));
        keyed.schedule("cancelled", ledger.task(1, 10));
        keyed.schedule("kept", ledger.task(2, 10));
        time.sleep(10);
        while timer.advance_clock(0) {}
        assert_eq!(timer.size(), 0, "all three were handed to the executor");
        assert_eq!(timer.stats().expired, 3 + threads as u64);
        assert!(keyed.is_scheduled(&"replaced"), "waiting, not yet running");

        assert!(keyed.schedule_replacing("replaced", ledger.task(3, 1_000)));
        assert!(keyed.cancel(&"cancelled"));
        gate.open();
        eventually(PATIENCE, "the executor reaches the three", || {
            ledger.drops(0) + ledger.drops(1) + ledger.drops(2) == 3
        });
        assert_eq!(
            (ledger.runs(0), ledger.runs(1), ledger.runs(2)),
            (0, 0, 1),
            "{threads} threads: only the task neither replaced nor cancelled ran"
        );
        assert!(keyed.is_scheduled(&"replaced"), "by its replacement");
        assert!(!keyed.is_scheduled(&"cancelled") && !keyed.is_scheduled(&"kept"));
        assert_eq!((keyed.len(), timer.size()), (1, 1));
        timer.close();
    }
}

#[test]
fn closing_the_timer_drops_the_tasks_and_the_keyed_timer_forgets_them() {
    let (timer, keyed) = mock();
    let ledger = Ledger::new(4);
    keyed.schedule(1, ledger.task(0, 100));
    keyed.schedule(2, ledger.task(1, 100));
    timer.close();
    assert_eq!(ledger.all_drops()[..2], [1, 1]);
    assert!(keyed.is_empty() && !keyed.is_scheduled(&1) && !keyed.is_scheduled(&2));
    assert!(!keyed.cancel(&1), "nothing left to cancel");

    assert!(!keyed.schedule_replacing(1, ledger.task(2, 100)));
    assert!(keyed.schedule_if_absent(3, ledger.task(3, 100)));
    assert_eq!(
        (ledger.drops(2), ledger.drops(3)),
        (1, 1),
        "a closed timer refuses them"
    );
    assert!(keyed.is_empty(), "and nothing is scheduled");
    assert_eq!(ledger.total_runs(), 0);
}

#[test]
fn dropping_the_keyed_timer_cancels_its_tasks() {
    let (timer, keyed) = mock();
    let runs = Arc::new(AtomicUsize::new(0));
    let drops = Arc::new(AtomicUsize::new(0));
    for key in 0..10 {
        keyed.schedule(key, counted(100, &runs, &drops));
    }
    assert_eq!(timer.size(), 10);
    drop(keyed);
    assert_eq!(drops.load(Ordering::SeqCst), 10, "dropped inside drop");
    assert_eq!(timer.size(), 0);
    timer.advance_clock(1_000);
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

#[test]
fn stop_hands_back_tasks_that_run_only_while_still_scheduled() {
    let (timer, keyed) = mock();
    let ledger = Ledger::new(2);
    keyed.schedule(1, ledger.task(0, 100));
    keyed.schedule(2, ledger.task(1, 100));
    let mut handed_back = timer.stop();
    assert_eq!(handed_back.len(), 2);
    assert_eq!(keyed.len(), 2, "still scheduled: the caller holds them");
    // The caller fails the first by running it, and drops the other.
    let first = handed_back.remove(0);
    first.run();
    drop(handed_back);
    assert_eq!(ledger.total_runs(), 1);
    assert_eq!(ledger.all_drops(), [1, 1]);
    assert!(keyed.is_empty());
}

/// Threads that schedule, replace and cancel, each on keys of its own.
const THREADS: usize = 4;
/// Operations per thread.
const OPS_PER_THREAD: usize = 15_000;
/// Keys per thread: few, so that the same keys are hit again while their tasks expire.
const KEYS_PER_THREAD: usize = 32;
/// Each thread pauses 1 ms every this many operations.
const OPS_PER_PAUSE: usize = 32;

/// What one stress thread knows: the task under each of its keys, if any.
struct Keys<'a> {
    /// The first key of this thread's.
    first: usize,
    current: Vec<Option<usize>>,
    rng: Rng,
    /// Hands out task ids, shared by all threads.
    next_id: &'a AtomicUsize,
}

/// `ops` random operations of one stress thread on its own keys: `schedule_replacing`,
/// `schedule_if_absent` and `cancel`, delays of 0-3 ms. Marks in `ledger` each task that
/// ended unrun (replaced, cancelled, refused). A thread that owns its keys knows which task
/// is scheduled under each, so that every return value can be checked.
fn schedule_cancel_and_replace(
    keyed: &KeyedTimer<usize>,
    ledger: &Arc<Ledger>,
    ops: usize,
    keys: &mut Keys<'_>,
) {
    for op in 0..ops {
        if op % OPS_PER_PAUSE == 0 {
            // Paced, so that tasks also expire (delays are 0-3 ms) rather than only being
            // replaced.
            thread::sleep(Duration::from_millis(1));
        }
        let slot = keys.rng.below(KEYS_PER_THREAD as u64) as usize;
        let key = keys.first + slot;
        let delay = keys.rng.below(4) as i64;
        match keys.rng.below(8) {
            0..=4 => {
                let id = keys.next_id.fetch_add(1, Ordering::Relaxed);
                if keyed.schedule_replacing(key, ledger.task(id, delay)) {
                    let old = keys.current[slot].expect("replaced a task this thread knows");
                    ledger.ended_unrun(old);
                }
                keys.current[slot] = Some(id);
            }
            5 => {
                let id = keys.next_id.fetch_add(1, Ordering::Relaxed);
                if keyed.schedule_if_absent(key, ledger.task(id, delay)) {
                    keys.current[slot] = Some(id);
                } else {
                    ledger.ended_unrun(id);
                }
            }
            _ => {
                if keyed.cancel(&key) {
                    let old = keys.current[slot].expect("cancelled a task this thread knows");
                    ledger.ended_unrun(old);
                }
                keys.current[slot] = None;
            }
        }
    }
}

/// Runs `THREADS` threads of [`schedule_cancel_and_replace`] on a `SystemTimer` with four
/// executor threads and a driver; if `close_half_way`, the timer is closed once every
/// thread is half-way. Returns the ledger and the number of tasks made, once every task
/// was dropped, and the runs counted right after `close` returned (if it was closed).
fn stress(close_half_way: bool) -> (Arc<Ledger>, usize, Option<usize>) {
    let timer = Arc::new(
        SystemTimer::builder("keyed-stress")
            .executor_threads(4)
            .build(),
    );
    let keyed = KeyedTimer::new(timer.clone());
    let ledger = Ledger::new(THREADS * OPS_PER_THREAD);
    let next_id = AtomicUsize::new(0);
    let half_way = Barrier::new(THREADS + 1);
    let mut runs_at_close = None;
    driven(&*timer, 1, || {
        thread::scope(|s| {
            let workers: Vec<_> = (0..THREADS)
                .map(|t| {
                    let (keyed, ledger, half_way, next_id) = (&keyed, &ledger, &half_way, &next_id);
                    s.spawn(move || {
                        let mut keys = Keys {
                            first: t * KEYS_PER_THREAD,
                            current: vec![None; KEYS_PER_THREAD],
                            rng: Rng::new(t as u64 + 11),
                            next_id,
                        };
                        schedule_cancel_and_replace(keyed, ledger, OPS_PER_THREAD / 2, &mut keys);
                        half_way.wait();
                        half_way.wait();
                        schedule_cancel_and_replace(keyed, ledger, OPS_PER_THREAD / 2, &mut keys);
                    })
                })
                .collect();
            half_way.wait();
            if close_half_way {
                timer.close();
                runs_at_close = Some(ledger.total_runs());
            }
            half_way.wait();
            for worker in workers {
                worker.join().unwrap();
            }
            let made = next_id.load(Ordering::SeqCst);
            eventually(PATIENCE, "every task run or dropped", || {
                (0..made).all(|id| ledger.drops(id) > 0)
            });
        })
    });
    assert_eq!(
        keyed.len(),
        0,
        "every key's task ran, or was cancelled or dropped"
    );
    assert_eq!(timer.size(), 0, "no timer entry left behind");
    timer.close();
    (ledger, next_id.into_inner(), runs_at_close)
}

#[test]
fn schedules_replacements_cancels_and_expiries_racing_end_every_task_exactly_one_way() {
    let (ledger, made, _) = stress(false);
    // Every task ran once, or ended unrun once (replaced, cancelled or refused: then it
    // never ran, so a replaced task never ran after `schedule` returned), and was dropped
    // once.
    let (ran, unrun) = ledger.assert_first_exactly_once(made);
    eprintln!("ran {ran}, ended unrun {unrun}");
    assert!(
        ran > 1_000 && unrun > 1_000,
        "both outcomes occurred: ran {ran}, unrun {unrun}"
    );
}

#[test]
fn close_racing_schedules_and_expiries_runs_nothing_twice_and_nothing_after_it_returned() {
    let (ledger, made, runs_at_close) = stress(true);
    for id in 0..made {
        let (runs, unrun, drops) = (ledger.runs(id), ledger.cancels(id), ledger.drops(id));
        assert!(
            runs + unrun <= 1,
            "task {id}: ran {runs} times, ended unrun {unrun} times"
        );
        assert_eq!(drops, 1, "task {id} dropped {drops} times");
    }
    assert_eq!(
        Some(ledger.total_runs()),
        runs_at_close,
        "nothing ran after close returned"
    );
}

#[test]
fn threads_replacing_the_same_keys_leave_one_task_per_key_and_no_entry_behind() {
    const KEYS: usize = 8;
    const PER_THREAD: usize = 5_000;
    let time = MockTime::new();
    let timer = Arc::new(SystemTimer::builder("keyed-same").time(time).build());
    let keyed = KeyedTimer::new(timer.clone());
    let runs = Arc::new(AtomicUsize::new(0));
    let drops = Arc::new(AtomicUsize::new(0));
    thread::scope(|s| {
        for t in 0..THREADS {
            let (keyed, runs, drops) = (&keyed, &runs, &drops);
            s.spawn(move || {
                for i in 0..PER_THREAD {
                    keyed.schedule(
                        (t + i) % KEYS,
                        Box::new(Counted {
                            delay_ms: 60_000,
                            runs: runs.clone(),
                            drops: drops.clone(),
                        }),
                    );
                }
            });
        }
    });
    assert_eq!(keyed.len(), KEYS);
    assert_eq!(
        timer.size(),
        KEYS,
        "every replaced task's entry was cancelled"
    );
    assert_eq!(drops.load(Ordering::SeqCst), THREADS * PER_THREAD - KEYS);
    drop(keyed);
    assert_eq!(drops.load(Ordering::SeqCst), THREADS * PER_THREAD);
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

/// A key whose clones are counted (in its second field, which its identity ignores).
struct CountedKey(u32, Arc<AtomicUsize>);

impl PartialEq for CountedKey {
    fn eq(&self, other: &Self) -> bool {
        self.0 == other.0
    }
}

impl Eq for CountedKey {}

impl std::hash::Hash for CountedKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.hash(state);
    }
}

impl Clone for CountedKey {
    fn clone(&self) -> Self {
        self.1.fetch_add(1, Ordering::SeqCst);
        CountedKey(self.0, self.1.clone())
    }
}

/// Scheduling, replacing, moving, expiring and cancelling clone no key: the map keeps the
/// caller's key and the tasks find their slots without one.
#[test]
fn no_operation_clones_a_key() {
    let clones = Arc::new(AtomicUsize::new(0));
    let key = |n| CountedKey(n, clones.clone());
    let timer = Arc::new(MockTimer::new());
    let keyed = KeyedTimer::new(timer.clone());
    let runs = Arc::new(AtomicUsize::new(0));
    let run = |delay_ms| {
        let runs = runs.clone();
        timer_task(delay_ms, move || {
            runs.fetch_add(1, Ordering::SeqCst);
        })
    };
    keyed.schedule(key(1), run(10));
    keyed.schedule(key(2), run(10));
    keyed.schedule(key(1), run(20));
    assert!(keyed.schedule_if_absent(key(3), run(30)));
    assert!(keyed.reschedule(&key(2), 40));
    assert!(keyed.cancel(&key(3)));
    timer.advance_clock(40);
    assert_eq!(runs.load(Ordering::SeqCst), 2, "keys 1 and 2 ran");
    assert!(keyed.is_empty());
    assert_eq!(clones.load(Ordering::SeqCst), 0);
}
