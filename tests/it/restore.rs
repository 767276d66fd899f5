//! `KeyedTimer`'s pending timeouts out and back in: `pending`, `schedule_at`, `restore` and
//! its `Lapsed` policies.
//!
//! Logic tests step a `MockTimer`, whose wall clock and monotonic clock move together, so
//! that every deadline is exact. A `SystemTimer` on a clock whose wall reading can jump
//! shows that a deadline is converted once, at the call. On real timers: a counting stress
//! test races `pending` against adds, cancels, replacements and expiries and checks each
//! listing key by key, and a restored deadline is never early on the real clock.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use timingwheel::{
    KeyedTimer, Lapsed, MockTime, MockTimer, SystemTimer, Time, Timer, TimerTask, timer_task,
};

use crate::common;
use common::ledger::Ledger;
use common::rng::Rng;
use common::sync::{barrier, driven, eventually};
use common::{NEVER_MS, PATIENCE};

/// A keyed timer on a new `MockTimer`, and that timer.
fn mock() -> (Arc<MockTimer>, KeyedTimer<u32>) {
    let timer = Arc::new(MockTimer::new());
    let keyed = KeyedTimer::new(timer.clone());
    (timer, keyed)
}

/// The wall-clock time `ms` milliseconds from `timer`'s wall clock now.
fn wall(timer: &dyn Timer, ms: i64) -> SystemTime {
    let now = UNIX_EPOCH + Duration::from_millis(timer.clock().milliseconds() as u64);
    match ms < 0 {
        true => now - Duration::from_millis(ms.unsigned_abs()),
        false => now + Duration::from_millis(ms as u64),
    }
}

/// Tasks that record, per key, the monotonic ms of each of their runs.
#[derive(Clone, Default)]
struct Runs(Arc<Mutex<HashMap<u32, Vec<i64>>>>);

impl Runs {
    fn task(&self, key: u32, time: &MockTime) -> Box<dyn TimerTask> {
        let (runs, time) = (self.clone(), time.clone());
        // Its own delay is never read by `schedule_at` and `restore`.
        timer_task(i64::MIN, move || {
            runs.0
                .lock()
                .unwrap()
                .entry(key)
                .or_default()
                .push(time.hi_res_clock_ms())
        })
    }

    fn of(&self, key: u32) -> Vec<i64> {
        self.0
            .lock()
            .unwrap()
            .get(&key)
            .cloned()
            .unwrap_or_default()
    }

    fn total(&self) -> usize {
        self.0.lock().unwrap().values().map(Vec::len).sum()
    }
}

/// Moves `timer` 1 ms at a time, `ms` times.
fn step(timer: &MockTimer, ms: i64) {
    for _ in 0..ms {
        timer.advance_clock(1);
    }
}

#[test]
fn pending_lists_each_pending_key_with_its_deadline_as_wall_clock_time() {
    let (timer, keyed) = mock();
    for (key, delay_ms) in [(1, 100), (2, 200), (3, 300), (4, 400), (5, 50)] {
        keyed.schedule(key, timer_task(delay_ms, || {}));
    }
    timer.advance_clock(60); // key 5 ran
    assert!(keyed.cancel(&4));
    keyed.schedule(3, timer_task(1_000, || {})); // replaced: its new deadline
    assert!(keyed.reschedule(&2, 500)); // moved: its new deadline
    let mut listed = keyed.pending();
    listed.sort();
    assert_eq!(
        listed,
        [
            (1, wall(&*timer, 40)),
            (2, wall(&*timer, 500)),
            (3, wall(&*timer, 1_000))
        ]
    );
    timer.advance_clock(10_000);
    assert!(keyed.pending().is_empty());
}

#[test]
fn pending_lists_a_task_handed_to_the_executor_as_lapsed_until_it_runs() {
    // On a `SystemTimer` a delay of 0 goes to the executor inside `add`: the key stays
    // scheduled, with no entry, until the task claims it. Listed or not, as the contract
    // allows for a task handed to the executor; if listed, then as lapsed.
    let timer = Arc::new(
        SystemTimer::builder("restore-handed")
            .executor_threads(1)
            .build(),
    );
    let keyed = KeyedTimer::new(timer.clone());
    let (release, wait) = std::sync::mpsc::channel::<()>();
    timer.add(timer_task(0, move || _ = wait.recv()));
    keyed.schedule(1, timer_task(0, || {}));
    assert!(keyed.is_scheduled(&1), "the executor is busy");
    let listed = keyed.pending();
    assert_eq!(listed.len(), 1);
    assert!(listed[0].1 <= SystemTime::now());
    release.send(()).unwrap();
    barrier(&*timer);
    assert!(keyed.pending().is_empty());
    timer.close();
}

#[test]
fn schedule_at_runs_the_task_at_its_deadline_never_before() {
    let (timer, keyed) = mock();
    let runs = Runs::default();
    let start = timer.time().hi_res_clock_ms();
    keyed.schedule_at(1, wall(&*timer, 250), runs.task(1, timer.time()));
    // Within a millisecond: rounded up.
    keyed.schedule_at(
        2,
        wall(&*timer, 100) + Duration::from_micros(1),
        runs.task(2, timer.time()),
    );
    step(&timer, 300);
    assert_eq!(runs.of(1), [start + 250]);
    assert_eq!(runs.of(2), [start + 101]);
}

#[test]
fn schedule_at_a_past_deadline_runs_the_task_at_the_next_advance_clock() {
    let (timer, keyed) = mock();
    let runs = Runs::default();
    let start = timer.time().hi_res_clock_ms();
    keyed.schedule_at(1, wall(&*timer, -5_000), runs.task(1, timer.time()));
    keyed.schedule_at(2, wall(&*timer, 0), runs.task(2, timer.time()));
    keyed.schedule_at(3, UNIX_EPOCH, runs.task(3, timer.time()));
    assert_eq!(runs.total(), 0, "none runs inside the call");
    assert_eq!(keyed.len(), 3);
    timer.advance_clock(1);
    for key in 1..=3 {
        assert_eq!(runs.of(key), [start + 1]);
    }
}

/// A clock whose wall reading can jump (an NTP step) while its monotonic one does not.
#[derive(Debug, Clone)]
struct JumpyTime {
    time: MockTime,
    jump_ms: Arc<AtomicI64>,
}

impl Time for JumpyTime {
    fn milliseconds(&self) -> i64 {
        self.time.milliseconds() + self.jump_ms.load(Ordering::SeqCst)
    }
    fn nanoseconds(&self) -> i64 {
        self.time.nanoseconds()
    }
    fn sleep(&self, ms: i64) {
        self.time.sleep(ms)
    }
}

#[test]
fn a_deadline_is_converted_once_so_a_later_jump_of_the_wall_clock_does_not_move_it() {
    let time = JumpyTime {
        time: MockTime::new(),
        jump_ms: Arc::default(),
    };
    let timer = Arc::new(
        SystemTimer::builder("restore-jump")
            .time(time.clone())
            .build(),
    );
    let keyed = KeyedTimer::new(timer.clone());
    let ran = Arc::new(AtomicBool::new(false));
    let flag = ran.clone();
    keyed.schedule_at(
        1,
        wall(&*timer, 1_000),
        timer_task(0, move || flag.store(true, Ordering::SeqCst)),
    );
    time.jump_ms.store(3_600_000, Ordering::SeqCst); // the wall clock jumps an hour ahead
    let due = |ms| {
        time.time.sleep(ms);
        while timer.advance_clock(0) {}
        barrier(&*timer);
        ran.load(Ordering::SeqCst)
    };
    assert!(!due(999), "moved by the jump");
    assert!(due(1), "at its deadline on the monotonic clock");
    timer.close();
}

#[test]
fn across_a_restart_a_deadline_is_honoured_as_wall_clock_time() {
    // The first process lists its timeouts; in the second, with a monotonic clock of its
    // own, the wall clock reads 3 s later (downtime and a jump of the clock alike): the
    // deadlines are where that wall clock puts them.
    let (first, keyed) = mock();
    for (key, delay_ms) in [(1, 1_000), (2, 2_500), (3, 4_000), (4, 10_000)] {
        keyed.schedule(key, timer_task(delay_ms, || {}));
    }
    let saved = keyed.pending();
    let time = MockTime::new();
    time.sleep(first.time().milliseconds() - time.milliseconds() + 3_000);
    let second = Arc::new(MockTimer::with_time(time.clone()));
    let restored = KeyedTimer::new(second.clone());
    let runs = Runs::default();
    let start = time.hi_res_clock_ms();
    let mut skipped = restored.restore(saved, Lapsed::Skip, |key| runs.task(*key, &time));
    skipped.sort();
    assert_eq!(skipped, [1, 2], "lapsed, by the wall clock");
    step(&second, 10_000);
    assert_eq!(
        (runs.of(3), runs.of(4)),
        (vec![start + 1_000], vec![start + 7_000])
    );
}

#[test]
fn restore_run_now_runs_each_lapsed_deadline_once_at_once_and_the_others_at_theirs() {
    let (timer, keyed) = mock();
    let runs = Runs::default();
    let start = timer.time().hi_res_clock_ms();
    let entries = [(1, -60_000), (2, 500), (3, -1), (4, 0), (5, 20)];
    let entries = entries.map(|(key, ms)| (key, wall(&*timer, ms)));
    let skipped = keyed.restore(entries, Lapsed::RunNow, |key| runs.task(*key, timer.time()));
    assert!(skipped.is_empty());
    assert_eq!(runs.total(), 0, "none runs inside the call");
    step(&timer, 1_000);
    for (key, at) in [(1, 1), (2, 500), (3, 1), (4, 1), (5, 20)] {
        assert_eq!(runs.of(key), [start + at], "key {key}");
    }
}

#[test]
fn restore_skip_returns_the_lapsed_keys_and_leaves_their_tasks_as_they_are() {
    let (timer, keyed) = mock();
    let runs = Runs::default();
    let start = timer.time().hi_res_clock_ms();
    let ledger = Ledger::new(1);
    keyed.schedule(2, ledger.task(0, 100));
    assert!(keyed.reschedule(&2, 300));
    let entries = [(1, -10), (2, -20), (3, 50), (4, 0)].map(|(k, ms)| (k, wall(&*timer, ms)));
    let skipped = keyed.restore(entries, Lapsed::Skip, |key| runs.task(*key, timer.time()));
    assert_eq!(skipped, [1, 2, 4], "in the order given");
    assert_eq!(keyed.len(), 2, "key 2's own task, and key 3");
    step(&timer, 299);
    assert_eq!(ledger.runs(0), 0);
    step(&timer, 1);
    assert_eq!(ledger.runs(0), 1, "key 2's own task, at its own time");
    step(&timer, 1_000);
    assert_eq!(runs.of(3), [start + 50]);
    assert_eq!(runs.total(), 1);
}

#[test]
fn restore_spreads_lapsed_deadlines_evenly_over_the_window_never_before_their_place() {
    const LAPSED: u32 = 1_000;
    const WINDOW_MS: i64 = 500;
    let (timer, keyed) = mock();
    let runs = Runs::default();
    let start = timer.time().hi_res_clock_ms();
    // Lapsed by different amounts, most overdue last: they are taken in the order given.
    let lapsed = (0..LAPSED).map(|key| (key, wall(&*timer, -1 - i64::from(key))));
    let future = [(LAPSED, wall(&*timer, 200))];
    let window = Lapsed::Spread(Duration::from_millis(WINDOW_MS as u64));
    keyed.restore(lapsed.chain(future), window, |key| {
        runs.task(*key, timer.time())
    });
    step(&timer, WINDOW_MS + 10);
    let mut per_ms = HashMap::<i64, u32>::new();
    for key in 0..LAPSED {
        let place = i64::from(key) * WINDOW_MS / i64::from(LAPSED);
        let ran = runs.of(key);
        assert_eq!(ran.len(), 1, "key {key} ran once");
        assert_eq!(
            ran[0] - start,
            place.max(1),
            "key {key}: at its place, not before"
        );
        *per_ms.entry(ran[0]).or_default() += 1;
    }
    let first = per_ms.remove(&(start + 1));
    assert_eq!(first, Some(4), "places 0 and 1 ms run at 1 ms");
    assert!(per_ms.values().all(|&n| n == 2), "2 a ms: {per_ms:?}");
    assert_eq!(
        runs.of(LAPSED),
        [start + 200],
        "a deadline not past keeps it"
    );
}

#[test]
fn restore_replaces_a_scheduled_task_and_of_a_key_given_twice_the_later_entry_wins() {
    let (timer, keyed) = mock();
    let ledger = Ledger::new(1);
    keyed.schedule(1, ledger.task(0, 100));
    let runs = Runs::default();
    let start = timer.time().hi_res_clock_ms();
    let entries = [(1, 300), (2, 50), (1, 200), (2, -5), (3, 10), (3, 400)];
    let entries = entries.map(|(key, ms)| (key, wall(&*timer, ms)));
    keyed.restore(entries, Lapsed::RunNow, |key| runs.task(*key, timer.time()));
    assert_eq!(
        ledger.drops(0),
        1,
        "the replaced task is dropped inside restore"
    );
    assert_eq!(keyed.len(), 3);
    step(&timer, 1_000);
    assert_eq!(
        (runs.of(1), runs.of(2), runs.of(3)),
        (vec![start + 200], vec![start + 1], vec![start + 400])
    );
    assert_eq!(ledger.runs(0), 0);

    // In bulk, keys in every map, each given twice: the later entry wins, earlier or later.
    let (keys, start) = (20_000, timer.time().hi_res_clock_ms());
    let first = (0..keys).map(|key| (key, 1_000 + key as i64 % 50));
    let then = (0..keys).map(|key| (key, if key % 2 == 0 { 2_000 } else { 500 }));
    let entries: Vec<_> = first
        .chain(then)
        .map(|(k, ms)| (k, wall(&*timer, ms)))
        .collect();
    let runs = Runs::default();
    keyed.restore(entries, Lapsed::RunNow, |key| runs.task(*key, timer.time()));
    assert_eq!(keyed.len(), keys as usize);
    step(&timer, 3_000);
    for key in 0..keys {
        let at = start + if key % 2 == 0 { 2_000 } else { 500 };
        assert_eq!(runs.of(key), [at], "key {key}");
    }
}

#[test]
fn restore_on_a_closed_timer_schedules_nothing() {
    let (timer, keyed) = mock();
    timer.close();
    let entries = [(1, wall(&*timer, 10)), (2, wall(&*timer, -10))];
    let skipped = keyed.restore(entries, Lapsed::RunNow, |_| {
        timer_task(0, || unreachable!())
    });
    assert!(skipped.is_empty() && keyed.is_empty() && keyed.pending().is_empty());
}

/// Keys of the stress test, by what their tasks do.
const EXPIRING: u32 = 0; // scheduled once, due in 0-5 ms: runs
const CANCELLED: u32 = 1; // scheduled once, due much later, then cancelled
const REPLACED: u32 = 2; // scheduled again and again, due much later each time
const KEYS_PER_THREAD: u32 = 20_000;

/// The stress test's logical clock, and each key's events on it (`u64::MAX`: not yet).
struct Events {
    clock: AtomicU64,
    /// Its first `schedule` returned.
    scheduled: Vec<AtomicU64>,
    /// Its `cancel` was called.
    cancelling: Vec<AtomicU64>,
    /// Its task ended: `cancel` returned true, or its run finished.
    ended: Vec<AtomicU64>,
}

impl Events {
    fn new(keys: usize) -> Events {
        let never = || (0..keys).map(|_| AtomicU64::new(u64::MAX)).collect();
        Events {
            clock: AtomicU64::new(0),
            scheduled: never(),
            cancelling: never(),
            ended: never(),
        }
    }

    fn now(&self) -> u64 {
        self.clock.fetch_add(1, Ordering::SeqCst)
    }

    fn mark(&self, of: &[AtomicU64], key: u32) {
        of[key as usize].store(self.now(), Ordering::SeqCst);
    }

    fn at(of: &[AtomicU64], key: u32) -> u64 {
        of[key as usize].load(Ordering::SeqCst)
    }
}

/// One thread's keys, `first..first + KEYS_PER_THREAD`, each given its kind by `key % 3`.
fn churn(keyed: &KeyedTimer<u32>, events: &Arc<Events>, first: u32, seed: u64) {
    let mut rng = Rng::new(seed);
    let keys: Vec<u32> = (first..first + KEYS_PER_THREAD).collect();
    for &key in &keys {
        let delay_ms = match key % 3 {
            EXPIRING => rng.below(6) as i64,
            _ => NEVER_MS,
        };
        let ended = events.clone();
        keyed.schedule(
            key,
            timer_task(delay_ms, move || ended.mark(&ended.ended, key)),
        );
        events.mark(&events.scheduled, key);
        // Now and then, act on an earlier key of this thread.
        let earlier = keys[rng.below(u64::from(key - first + 1)) as usize];
        match earlier % 3 {
            CANCELLED if Events::at(&events.cancelling, earlier) == u64::MAX => {
                events.mark(&events.cancelling, earlier);
                if keyed.cancel(&earlier) {
                    events.mark(&events.ended, earlier);
                }
            }
            REPLACED => keyed.schedule(earlier, timer_task(NEVER_MS, || {})),
            _ => {}
        }
    }
}

/// Checks one listing taken between the logical times `begin` and `end`, key by key.
fn check_listing(listed: &[(u32, SystemTime)], events: &Events, keys: u32, begin: u64, end: u64) {
    let mut seen = HashSet::new();
    for (key, _) in listed {
        assert!(seen.insert(*key), "key {key} listed twice");
        let ended = Events::at(&events.ended, *key);
        assert!(
            ended > begin,
            "key {key}: its task ended at {ended}, before the listing ({begin})"
        );
    }
    for key in (0..keys).filter(|key| key % 3 != EXPIRING) {
        let scheduled = Events::at(&events.scheduled, key) < begin;
        let not_cancelled = Events::at(&events.cancelling, key) > end;
        if scheduled && not_cancelled {
            assert!(
                seen.contains(&key),
                "key {key}, pending throughout the listing, missing"
            );
        }
    }
}

#[test]
fn pending_racing_adds_cancels_replacements_and_expiries_lists_exactly_what_it_promises() {
    const THREADS: u32 = 3;
    let timer = Arc::new(
        SystemTimer::builder("restore-stress")
            .executor_threads(2)
            .build(),
    );
    let keyed = KeyedTimer::new(timer.clone());
    let events = Arc::new(Events::new((THREADS * KEYS_PER_THREAD) as usize));
    let (mut listings, mut most) = (0, 0);
    driven(&*timer, 1, || {
        thread::scope(|s| {
            let workers: Vec<_> = (0..THREADS)
                .map(|t| {
                    let (keyed, events) = (&keyed, &events);
                    s.spawn(move || churn(keyed, events, t * KEYS_PER_THREAD, u64::from(t) + 5))
                })
                .collect();
            while workers.iter().any(|worker| !worker.is_finished()) || listings < 3 {
                let begin = events.now();
                let listed = keyed.pending();
                let end = events.now();
                check_listing(&listed, &events, THREADS * KEYS_PER_THREAD, begin, end);
                (listings, most) = (listings + 1, most.max(listed.len()));
            }
        });
        // Quiescent: exactly the keys scheduled and neither cancelled nor run.
        let expired = |key: u32| Events::at(&events.ended, key) != u64::MAX;
        eventually(PATIENCE, "every expiring key ran", || {
            (0..THREADS * KEYS_PER_THREAD)
                .filter(|k| k % 3 == EXPIRING)
                .all(expired)
        });
    });
    let mut listed: Vec<u32> = keyed.pending().into_iter().map(|(key, _)| key).collect();
    listed.sort();
    let expected: Vec<u32> = (0..THREADS * KEYS_PER_THREAD)
        .filter(|&key| key % 3 != EXPIRING && Events::at(&events.ended, key) == u64::MAX)
        .collect();
    assert_eq!(listed, expected);
    eprintln!(
        "{listings} listings, the longest {most} keys; {} left",
        expected.len()
    );
    assert!(listings >= 3 && most > 0);
    timer.close();
}

#[test]
fn a_restored_deadline_is_never_early_on_the_real_clock() {
    let timer = Arc::new(SystemTimer::new("restore-real"));
    let keyed = KeyedTimer::new(timer.clone());
    let (tx, rx) = std::sync::mpsc::channel();
    let deadlines: Vec<(u32, SystemTime)> = (0..20)
        .map(|key| {
            (
                key,
                SystemTime::now() + Duration::from_millis(5 + 3 * u64::from(key)),
            )
        })
        .collect();
    keyed.restore(deadlines.clone(), Lapsed::RunNow, |&key| {
        let tx = tx.clone();
        timer_task(0, move || tx.send((key, SystemTime::now())).unwrap())
    });
    driven(&*timer, 1, || {
        for _ in 0..deadlines.len() {
            let (key, ran) = rx.recv_timeout(PATIENCE).expect("every deadline ran");
            let deadline = deadlines[key as usize].1;
            assert!(
                ran >= deadline,
                "key {key} ran {:?} early",
                deadline.duration_since(ran)
            );
            let late = ran.duration_since(deadline).unwrap();
            assert!(late < Duration::from_secs(2), "key {key} ran {late:?} late");
        }
    });
    timer.close();
}
