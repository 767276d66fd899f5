//! The purgatory's own guarantees, one test per rule where it is stricter than Kafka, on an
//! `Arc<MockTimer>` through the builder with the reaper off unless a test needs a thread;
//! then, in `mod reaper`, its expiration reaper and shutdown on the real clock, and in
//! `mod example`, the `purgatory` example's core run small. (Kafka's own suite is
//! `delayed_operation.rs`; the counting stress, `purgatory_stress.rs`.)
//!
//! See `docs/guarantees.md` ("Purgatory") for the map from each guarantee to its tests.

use crate::common;

#[allow(dead_code)]
#[path = "../../examples/purgatory/main.rs"]
mod purgatory_example;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use common::logger;
use common::probe::{Callback, PROBE_PANIC, Probe};
use common::{NEVER_MS, PATIENCE, driven_purgatory, panic_location};
use timingwheel::{
    Delayed, DelayedOperation, DelayedOperationPurgatory, MockTime, MockTimer, SystemTimer, Timer,
};

type Purgatory<Op = Probe> = DelayedOperationPurgatory<u32, Op>;

/// A purgatory of `Op` on a mock clock nobody moves.
fn on_a_still_clock<Op: DelayedOperation>() -> DelayedOperationPurgatory<u32, Op> {
    DelayedOperationPurgatory::builder("test")
        .timer(MockTimer::new())
        .reaper_enabled(false)
        .build()
}

#[test]
fn completing_before_the_timeout_cancels_it_inside_the_call() {
    // Each way an operation can complete before its timeout.
    type Complete = fn(&Purgatory, &Delayed<Probe>) -> bool;
    let ways: [(&str, Complete); 4] = [
        ("check_and_complete", |p, op| {
            op.operation().set_completable(true);
            p.check_and_complete(&1) == 1
        }),
        ("Delayed::try_complete", |_, op| {
            op.operation().set_completable(true);
            op.try_complete()
        }),
        ("force_complete", |_, op| op.force_complete()),
        ("try_complete_else_watch again", |p, op| {
            op.operation().set_completable(true);
            p.try_complete_else_watch(op, &[2])
        }),
    ];
    for (way, complete) in ways {
        let timer = Arc::new(MockTimer::new());
        let purgatory = driven_purgatory("test", &timer);
        let op = Probe::delayed(1_000);
        assert!(!purgatory.try_complete_else_watch(&op, &[1]));
        assert_eq!(purgatory.num_delayed(), 1, "{way}");
        assert!(complete(&purgatory, &op), "{way}");
        assert_eq!(
            purgatory.num_delayed(),
            0,
            "{way}: cancelled inside the call"
        );
        assert_eq!(timer.size(), 0, "{way}");
        timer.advance_clock(2_000);
        assert_eq!(op.operation().completions(), 1, "{way}");
        assert_eq!(op.operation().expirations(), 0, "{way}");
    }
}

#[test]
fn a_completed_operation_is_freed_inside_the_completing_call() {
    let timer = Arc::new(MockTimer::new());
    let purgatory = driven_purgatory("test", &timer);
    let op = Probe::delayed(1_000);
    let drops = Arc::clone(&op.operation().drops);
    assert!(!purgatory.try_complete_else_watch(&op, &[1]));
    op.operation().set_completable(true);
    drop(op);
    // Only the watch list and the timer's task hold it now; completing lets go of both.
    assert_eq!(drops.load(Ordering::SeqCst), 0);
    assert_eq!(purgatory.check_and_complete(&1), 1);
    assert_eq!(
        drops.load(Ordering::SeqCst),
        1,
        "freed inside check_and_complete"
    );
    assert_eq!(purgatory.watched(), 0);
}

#[test]
fn on_complete_runs_once_whichever_ways_try_to_complete() {
    let timer = Arc::new(MockTimer::new());
    let purgatory = driven_purgatory("test", &timer);
    let op = Probe::delayed(10);
    assert!(!purgatory.try_complete_else_watch(&op, &[1, 2]));
    assert!(op.force_complete());
    op.operation().set_completable(true);
    assert!(!op.force_complete());
    assert!(!op.try_complete());
    assert_eq!(purgatory.check_and_complete(&1), 0);
    assert!(!purgatory.try_complete_else_watch(&op, &[3]));
    timer.advance_clock(100);
    assert_eq!(op.operation().completions(), 1);
    assert_eq!(op.operation().expirations(), 0);
    assert_eq!(
        op.operation().tries.load(Ordering::SeqCst),
        2,
        "only the watch's two tries: a completed operation is never asked again"
    );
}

#[test]
fn expiry_runs_on_complete_then_on_expiration_once_the_delay_has_passed() {
    let timer = Arc::new(MockTimer::new());
    let purgatory = driven_purgatory("test", &timer);
    let op = Probe::delayed(100);
    assert!(!purgatory.try_complete_else_watch(&op, &[1]));
    assert!(!purgatory.advance_clock(99));
    assert_eq!(op.operation().completions(), 0);
    assert!(purgatory.advance_clock(1));
    assert_eq!(
        op.operation().callbacks(),
        [Callback::OnComplete, Callback::OnExpiration]
    );
    assert!(op.is_completed());
    assert_eq!(purgatory.num_delayed(), 0);
    // Still in the watch list until a check or a purge, then gone.
    assert_eq!(purgatory.watched(), 1);
    assert_eq!(purgatory.check_and_complete(&1), 0);
    assert_eq!(purgatory.watched(), 0);
}

/// An operation that cannot complete at its first try, and can at any later one: it
/// "becomes completable while being watched".
struct SecondTimeLucky {
    tries: AtomicUsize,
    completions: AtomicUsize,
}

impl DelayedOperation for SecondTimeLucky {
    fn delay_ms(&self) -> i64 {
        NEVER_MS
    }
    fn try_complete(&self) -> bool {
        self.tries.fetch_add(1, Ordering::SeqCst) > 0
    }
    fn on_complete(&self) {
        self.completions.fetch_add(1, Ordering::SeqCst);
    }
    fn on_expiration(&self) {}
}

#[test]
fn the_try_after_watching_catches_a_completion_that_became_possible_meanwhile() {
    let purgatory = on_a_still_clock::<SecondTimeLucky>();
    let op = Delayed::new(SecondTimeLucky {
        tries: AtomicUsize::new(0),
        completions: AtomicUsize::new(0),
    });
    assert!(purgatory.try_complete_else_watch(&op, &[1, 2]));
    assert_eq!(op.operation().tries.load(Ordering::SeqCst), 2);
    assert_eq!(op.operation().completions.load(Ordering::SeqCst), 1);
    assert_eq!(purgatory.num_delayed(), 0, "completed: no timeout added");
}

/// An operation whose `try_complete` can be made to stop, with the lock held, until the
/// test lets it go.
struct Gated {
    completable: std::sync::atomic::AtomicBool,
    /// When set, the next `try_complete` reports on `inside` and waits on `release`.
    gate: Mutex<Option<(mpsc::Sender<()>, mpsc::Receiver<()>)>>,
    completions: AtomicUsize,
}

impl DelayedOperation for Gated {
    fn delay_ms(&self) -> i64 {
        NEVER_MS
    }
    fn try_complete(&self) -> bool {
        let completable = self.completable.load(Ordering::SeqCst);
        if let Some((inside, release)) = self.gate.lock().unwrap().take() {
            inside.send(()).unwrap();
            release.recv().unwrap();
        }
        completable
    }
    fn on_complete(&self) {
        self.completions.fetch_add(1, Ordering::SeqCst);
    }
    fn on_expiration(&self) {}
}

#[test]
fn a_completion_is_never_missed_while_another_thread_holds_the_lock() {
    let purgatory = on_a_still_clock::<Gated>();
    let op = Delayed::new(Gated {
        completable: false.into(),
        gate: Mutex::new(None),
        completions: AtomicUsize::new(0),
    });
    assert!(!purgatory.try_complete_else_watch(&op, &[1]));

    let (inside_tx, inside_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel();
    *op.operation().gate.lock().unwrap() = Some((inside_tx, release_rx));
    thread::scope(|s| {
        // A: asks while the operation cannot complete yet, and keeps its lock.
        let a = s.spawn(|| purgatory.check_and_complete(&1));
        inside_rx.recv_timeout(PATIENCE).expect("A holds the lock");
        // Now it can complete; B's check comes while A still holds the lock.
        op.operation().completable.store(true, Ordering::SeqCst);
        let b = s.spawn(|| purgatory.check_and_complete(&1));
        // Give B time to reach the lock (if it comes later, the test proves less, but
        // still holds).
        thread::sleep(Duration::from_millis(50));
        release_tx.send(()).unwrap();
        assert_eq!(a.join().unwrap(), 0, "A saw it not completable");
        assert_eq!(
            b.join().unwrap(),
            1,
            "B waited for the lock and completed it"
        );
    });
    assert_eq!(op.operation().completions.load(Ordering::SeqCst), 1);
    assert_eq!(purgatory.watched(), 0);
}

#[test]
#[should_panic(expected = "watch_keys must not be empty")]
fn empty_watch_keys_panic_naming_the_argument() {
    let purgatory = driven_purgatory("test", &Arc::new(MockTimer::new()));
    purgatory.try_complete_else_watch(&Probe::delayed(10), &[]);
}

#[test]
fn the_empty_watch_keys_panic_points_at_the_caller() {
    let purgatory = driven_purgatory("test", &Arc::new(MockTimer::new()));
    let location = panic_location("watch_keys", || {
        purgatory.try_complete_else_watch(&Probe::delayed(10), &[])
    });
    assert_eq!(location.as_deref(), Some(file!()));
}

#[test]
#[should_panic(expected = "reaper_poll_ms must be positive, got 0")]
fn a_zero_reaper_poll_panics_naming_the_argument() {
    let _ = <Purgatory>::builder("test").reaper_poll_ms(0);
}

#[test]
fn a_panic_in_try_complete_reaches_the_caller_and_leaves_the_purgatory_usable() {
    let purgatory = driven_purgatory("test", &Arc::new(MockTimer::new()));
    let op = Probe::delayed(1_000);
    assert!(!purgatory.try_complete_else_watch(&op, &[1]));
    op.operation().panic_in(Some(Callback::TryComplete));
    let checked = catch_unwind(AssertUnwindSafe(|| purgatory.check_and_complete(&1)));
    assert!(checked.is_err(), "the panic reached the caller");
    assert_eq!(purgatory.watched(), 1, "still watched");

    op.operation().panic_in(None);
    op.operation().set_completable(true);
    let other = thread::scope(|s| s.spawn(|| purgatory.check_and_complete(&1)).join());
    assert_eq!(other.unwrap(), 1, "the lock was released by the unwinding");
    assert_eq!((purgatory.watched(), purgatory.num_delayed()), (0, 0));
}

#[test]
fn a_panic_in_on_complete_reaches_the_caller_and_the_operation_stays_completed() {
    let purgatory = driven_purgatory("test", &Arc::new(MockTimer::new()));
    let op = Probe::delayed(1_000);
    assert!(!purgatory.try_complete_else_watch(&op, &[1]));
    op.operation().panic_in(Some(Callback::OnComplete));
    assert!(catch_unwind(AssertUnwindSafe(|| op.force_complete())).is_err());
    assert!(op.is_completed());
    assert_eq!(
        purgatory.num_delayed(),
        0,
        "the timeout was cancelled before on_complete"
    );
    assert!(!op.force_complete());
    assert_eq!(purgatory.check_and_complete(&1), 0);
    assert_eq!(purgatory.watched(), 0);
    assert_eq!(op.operation().completions(), 1);
}

#[test]
fn a_panic_in_on_expiration_reaches_the_caller_of_advance_clock_and_later_expiries_run() {
    let timer = Arc::new(MockTimer::new());
    let purgatory = driven_purgatory("test", &timer);
    let first = Probe::delayed(10);
    let second = Probe::delayed(20);
    first.operation().panic_in(Some(Callback::OnExpiration));
    purgatory.try_complete_else_watch(&first, &[1]);
    purgatory.try_complete_else_watch(&second, &[1]);
    assert!(catch_unwind(AssertUnwindSafe(|| purgatory.advance_clock(20))).is_err());
    assert_eq!(first.operation().expirations(), 1);
    assert_eq!(
        second.operation().expirations(),
        0,
        "interrupted by the panic"
    );
    assert!(
        purgatory.advance_clock(0),
        "the next step runs what was left"
    );
    assert_eq!(second.operation().expirations(), 1);
    assert_eq!(purgatory.num_delayed(), 0);
}

/// Installs the capturing logger (once) and returns the errors logged so far that contain
/// `needle`.
fn logged_errors_containing(needle: &str) -> Vec<String> {
    logger::install();
    logger::errors_containing(needle)
}

#[test]
fn a_panic_on_the_reaper_thread_is_logged_and_the_reaper_goes_on() {
    logged_errors_containing("");
    let timer = Arc::new(MockTimer::new());
    let purgatory = <Purgatory>::builder("panicky")
        .timer(Arc::clone(&timer))
        .broker_id(7)
        .reaper_poll_ms(5)
        .build();
    let first = Probe::delayed(1);
    first.operation().panic_in(Some(Callback::OnExpiration));
    let first_events = first.operation().subscribe();
    purgatory.try_complete_else_watch(&first, &[1]);
    first_events.recv_timeout(PATIENCE).unwrap();
    first_events.recv_timeout(PATIENCE).unwrap();

    // The reaper still expires operations after the panic.
    let second = Probe::delayed(1);
    let second_events = second.operation().subscribe();
    purgatory.try_complete_else_watch(&second, &[1]);
    let complete = second_events.recv_timeout(PATIENCE).unwrap();
    let expire = second_events.recv_timeout(PATIENCE).unwrap();
    assert_eq!(expire.callback, Callback::OnExpiration);
    let reaper = Some("ExpirationReaper-7-panicky".to_owned());
    assert_eq!((complete.thread, expire.thread), (reaper.clone(), reaper));
    purgatory.shutdown();
    // Filtered by this reaper's name: other tests of the binary log probe panics too.
    let logged = logged_errors_containing("ExpirationReaper-7-panicky");
    assert_eq!(logged.len(), 1, "{logged:?}");
    assert!(logged[0].contains(PROBE_PANIC), "{logged:?}");
}

#[test]
fn a_panic_on_the_timer_executor_is_logged_and_the_purgatory_goes_on() {
    logged_errors_containing("");
    let purgatory = <Purgatory>::new("executor-panics", 0);
    let first = Probe::delayed(5);
    let needle = format!("{PROBE_PANIC} in {:?}", Callback::OnComplete);
    first.operation().panic_in(Some(Callback::OnComplete));
    let first_events = first.operation().subscribe();
    purgatory.try_complete_else_watch(&first, &[1]);
    first_events.recv_timeout(PATIENCE).unwrap();

    let second = Probe::delayed(5);
    let second_events = second.operation().subscribe();
    purgatory.try_complete_else_watch(&second, &[1]);
    second_events.recv_timeout(PATIENCE).unwrap();
    let expired = second_events.recv_timeout(PATIENCE).unwrap();
    assert_eq!(expired.callback, Callback::OnExpiration);
    assert_eq!(
        first.operation().expirations(),
        0,
        "on_complete panicked before it"
    );
    purgatory.shutdown();
    assert_eq!(logged_errors_containing(&needle).len(), 1);
}

#[test]
fn the_reaper_step_purges_only_past_the_purge_interval() {
    const PURGE_INTERVAL: usize = 3;
    let purgatory = <Purgatory>::builder("test")
        .timer(MockTimer::new())
        .purge_interval(PURGE_INTERVAL)
        .reaper_enabled(false)
        .build();
    let watch_and_force = |n: usize| {
        for _ in 0..n {
            let op = Probe::delayed(NEVER_MS);
            purgatory.try_complete_else_watch(&op, &[1, 2]);
            op.force_complete();
        }
    };
    // Kafka's rule: purge when (watched since the last purge) - (pending) > interval.
    watch_and_force(PURGE_INTERVAL);
    purgatory.try_complete_else_watch(&Probe::delayed(NEVER_MS), &[1]);
    purgatory.advance_clock(0);
    assert_eq!(purgatory.watched(), 7, "4 - 1 = 3 is not more than 3");
    watch_and_force(1);
    purgatory.advance_clock(0);
    assert_eq!(
        purgatory.watched(),
        1,
        "5 - 1 = 4 > 3: purged, the pending one stays"
    );
    watch_and_force(PURGE_INTERVAL);
    purgatory.advance_clock(0);
    assert_eq!(
        purgatory.watched(),
        7,
        "counted afresh since the purge: 3 + 1 - 1"
    );
}

#[test]
fn the_purge_interval_counts_operations_whatever_shards_their_keys_fall_in() {
    // Distinct first keys spread the operations over many watch-list shards, each of which
    // counts its own; the purge must still see their sum.
    const PURGE_INTERVAL: usize = 500;
    let purgatory = <Purgatory>::builder("test")
        .timer(MockTimer::new())
        .purge_interval(PURGE_INTERVAL)
        .reaper_enabled(false)
        .build();
    let watch_and_force = |keys: std::ops::Range<u32>| {
        for key in keys {
            let op = Probe::delayed(NEVER_MS);
            purgatory.try_complete_else_watch(&op, &[key]);
            op.force_complete();
        }
    };
    watch_and_force(0..PURGE_INTERVAL as u32);
    purgatory.advance_clock(0);
    assert_eq!(
        purgatory.watched(),
        PURGE_INTERVAL,
        "500 is not more than 500"
    );
    watch_and_force(10_000..10_001);
    purgatory.advance_clock(0);
    assert_eq!(purgatory.watched(), 0, "501 > 500: every list purged");
}

#[test]
fn purged_operations_are_freed() {
    const OPERATIONS: usize = 1_000;
    let purgatory = <Purgatory>::builder("test")
        .timer(MockTimer::new())
        .purge_interval(0)
        .reaper_enabled(false)
        .build();
    let drops = Arc::new(AtomicUsize::new(0));
    for key in 0..OPERATIONS as u32 {
        let mut probe = Probe::new(NEVER_MS);
        probe.drops = Arc::clone(&drops);
        let op = Delayed::new(probe);
        purgatory.try_complete_else_watch(&op, &[key, key + 1]);
        op.force_complete();
    }
    assert_eq!(drops.load(Ordering::SeqCst), 0, "held by the watch lists");
    assert_eq!(purgatory.watched(), 2 * OPERATIONS);
    purgatory.advance_clock(0);
    assert_eq!(purgatory.watched(), 0);
    assert_eq!(drops.load(Ordering::SeqCst), OPERATIONS);
}

#[test]
fn cancel_for_key_returns_only_pending_operations_which_stay_watched_elsewhere() {
    let timer = Arc::new(MockTimer::new());
    let purgatory = driven_purgatory("test", &timer);
    let (done, pending) = (Probe::delayed(100), Probe::delayed(100));
    purgatory.try_complete_else_watch(&done, &[1, 2]);
    purgatory.try_complete_else_watch(&pending, &[1, 2]);
    done.force_complete();

    let cancelled = purgatory.cancel_for_key(&1);
    assert_eq!(cancelled.len(), 1);
    assert!(cancelled[0].ptr_eq(&pending) && !pending.is_completed());
    assert_eq!(purgatory.num_delayed(), 0, "its timeout was cancelled");
    assert_eq!(purgatory.watched(), 2, "both still in the list of key 2");
    timer.advance_clock(1_000);
    assert_eq!(
        pending.operation().completions(),
        0,
        "cancelled, never expires"
    );

    pending.operation().set_completable(true);
    assert_eq!(
        purgatory.check_and_complete(&2),
        1,
        "completes through its other key"
    );
    assert_eq!(purgatory.watched(), 0);
}

#[test]
fn without_the_timer_operations_get_no_timeout() {
    let timer = Arc::new(MockTimer::new());
    let purgatory = <Purgatory>::builder("test")
        .timer(Arc::clone(&timer))
        .timer_enabled(false)
        .reaper_enabled(false)
        .build();
    let op = Probe::delayed(10);
    assert!(!purgatory.try_complete_else_watch(&op, &[1]));
    assert_eq!(timer.size(), 0);
    purgatory.advance_clock(1_000);
    assert!(!op.is_completed());
    op.operation().set_completable(true);
    assert_eq!(purgatory.check_and_complete(&1), 1);
}

#[test]
fn expired_count_counts_the_operations_completed_by_expiring_and_no_others() {
    let timer = Arc::new(MockTimer::new());
    let purgatory = driven_purgatory("test", &timer);
    let ops: Vec<Delayed<Probe>> = (0..6).map(|_| Probe::delayed(100)).collect();
    for (key, op) in (0..).zip(&ops) {
        assert!(!purgatory.try_complete_else_watch(op, &[key]));
    }
    // Two complete by a check, one by force; three expire.
    ops[0].operation().set_completable(true);
    ops[1].operation().set_completable(true);
    assert_eq!(
        purgatory.check_and_complete(&0) + purgatory.check_and_complete(&1),
        2
    );
    assert!(ops[2].force_complete());
    assert_eq!(purgatory.expired_count(), 0);
    assert!(purgatory.advance_clock(100));
    assert_eq!(purgatory.expired_count(), 3);
    let expirations: usize = ops.iter().map(|op| op.operation().expirations()).sum();
    assert_eq!(expirations, 3);
    // An expiry that finds its operation completed counts nothing.
    assert!(!ops[3].force_complete());
    assert_eq!(purgatory.expired_count(), 3);
}

/// A purgatory on a mock clock that nobody moves, shut down, named `name`.
fn shut_down(name: &str) -> Purgatory {
    let purgatory = <Purgatory>::builder(name)
        .timer(MockTimer::new())
        .reaper_enabled(false)
        .build();
    purgatory.shutdown();
    purgatory
}

#[test]
fn an_operation_given_after_shutdown_is_completed_at_once_as_expired() {
    let purgatory = shut_down("after-shutdown");
    let op = Probe::delayed(NEVER_MS);
    assert!(!purgatory.try_complete_else_watch(&op, &[1, 2]));
    assert!(op.is_completed());
    assert_eq!(
        op.operation().callbacks(),
        [Callback::OnComplete, Callback::OnExpiration]
    );
    let this_thread = thread::current().name().map(str::to_owned);
    let events = op.operation().events.lock().unwrap().clone();
    assert!(
        events.iter().all(|event| event.thread == this_thread),
        "{events:?}"
    );
    assert_eq!(
        op.operation().tries.load(Ordering::SeqCst),
        1,
        "asked once first"
    );
    assert_eq!(
        (purgatory.watched(), purgatory.num_delayed()),
        (0, 0),
        "not watched"
    );
    assert_eq!(purgatory.expired_count(), 1);
}

#[test]
fn an_operation_that_can_complete_after_shutdown_is_completed_by_try_complete() {
    let purgatory = shut_down("after-shutdown-completable");
    let op = Probe::delayed(NEVER_MS);
    op.operation().set_completable(true);
    assert!(purgatory.try_complete_else_watch(&op, &[1]));
    assert_eq!(op.operation().callbacks(), [Callback::OnComplete]);
    assert_eq!(purgatory.expired_count(), 0);
    // Already completed: answered by nobody again.
    assert!(!purgatory.try_complete_else_watch(&op, &[1]));
    assert_eq!(op.operation().callbacks(), [Callback::OnComplete]);
}

#[test]
fn answering_operations_after_shutdown_warns_once_per_purgatory() {
    logger::install();
    let names = ["warns-once-a", "warns-once-b"];
    for name in names {
        let purgatory = shut_down(name);
        for _ in 0..3 {
            purgatory.try_complete_else_watch(&Probe::delayed(NEVER_MS), &[1]);
        }
    }
    for name in names {
        let warned = logger::warnings_containing(&format!("purgatory {name} is shut down"));
        assert_eq!(warned.len(), 1, "{name}: {warned:?}");
    }
}

#[test]
fn an_operation_whose_timeout_a_full_timer_refuses_is_completed_at_once_as_expired() {
    logger::install();
    let time = MockTime::new();
    let timer = SystemTimer::builder("full")
        .time(time)
        .max_pending(1)
        .build();
    let purgatory = <Purgatory>::builder("full-timer")
        .timer(timer)
        .reaper_enabled(false)
        .build();
    let first = Probe::delayed(NEVER_MS);
    assert!(!purgatory.try_complete_else_watch(&first, &[1]));
    assert_eq!(purgatory.num_delayed(), 1, "the timer is full now");
    for _ in 0..2 {
        let refused = Probe::delayed(NEVER_MS);
        assert!(!purgatory.try_complete_else_watch(&refused, &[1]));
        assert_eq!(
            refused.operation().callbacks(),
            [Callback::OnComplete, Callback::OnExpiration]
        );
    }
    assert!(!first.is_completed());
    assert_eq!(purgatory.expired_count(), 2);
    // Watched again under another key, the first one's new timeout is refused too: it is
    // answered, and its earlier timeout cancelled.
    assert!(!purgatory.try_complete_else_watch(&first, &[2]));
    assert!(first.is_completed());
    assert_eq!(
        purgatory.num_delayed(),
        0,
        "its earlier timeout was cancelled"
    );
    assert_eq!(purgatory.expired_count(), 3);
    let warned = logger::warnings_containing("purgatory full-timer has a full timer");
    assert_eq!(warned.len(), 1, "{warned:?}");
}

/// How the scripted scenario ends for one operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    /// Completed by a `check_and_complete` at this mock time (ms since the start).
    Acked(i64),
    /// Expired at this mock time.
    Expired(i64),
}

/// An operation of the scripted scenario: completes once `acked`, records the mock time of
/// its completion.
struct Scripted {
    delay_ms: i64,
    acked: std::sync::atomic::AtomicBool,
    time: MockTime,
    start_ms: i64,
    outcome: Mutex<Vec<Outcome>>,
}

impl DelayedOperation for Scripted {
    fn delay_ms(&self) -> i64 {
        self.delay_ms
    }
    fn try_complete(&self) -> bool {
        self.acked.load(Ordering::SeqCst)
    }
    fn on_complete(&self) {
        let at = self.time.hi_res_clock_ms() - self.start_ms;
        self.outcome.lock().unwrap().push(Outcome::Acked(at));
    }
    fn on_expiration(&self) {
        let mut outcome = self.outcome.lock().unwrap();
        let Some(Outcome::Acked(at)) = outcome.pop() else {
            panic!("on_expiration without on_complete first");
        };
        outcome.push(Outcome::Expired(at));
    }
}

#[test]
fn a_scripted_run_on_a_mock_clock_matches_the_model_step_by_step() {
    const OPERATIONS: usize = 300;
    const STEP_MS: i64 = 10;
    const END_MS: i64 = 700;
    let timer = Arc::new(MockTimer::new());
    let purgatory = DelayedOperationPurgatory::<u32, Scripted>::builder("scripted")
        .timer(Arc::clone(&timer))
        .purge_interval(5)
        .reaper_enabled(false)
        .build();
    let start_ms = timer.time().hi_res_clock_ms();

    // Operation i waits 10..=500 ms, is watched under two keys, and is acknowledged at a
    // step time (a third never are): before its timeout, at it, or after it.
    let delay = |i: usize| STEP_MS * (1 + (i * 7 % 50) as i64);
    let ack_at = |i: usize| (i % 3 != 0).then(|| STEP_MS * (i * 13 % 60) as i64);
    let keys = |i: usize| [(i % 7) as u32, 100 + (i % 11) as u32];
    let model = |i: usize| match ack_at(i) {
        // At a step, acknowledgements come before the clock moves past it.
        Some(at) if at < delay(i) => Outcome::Acked(at),
        _ => Outcome::Expired(delay(i)),
    };

    let ops: Vec<Delayed<Scripted>> = (0..OPERATIONS)
        .map(|i| {
            let op = Delayed::new(Scripted {
                delay_ms: delay(i),
                acked: false.into(),
                time: timer.time().clone(),
                start_ms,
                outcome: Mutex::new(Vec::new()),
            });
            assert!(!purgatory.try_complete_else_watch(&op, &keys(i)));
            op
        })
        .collect();
    assert_eq!(purgatory.num_delayed(), OPERATIONS);

    let mut now_ms = 0;
    while now_ms <= END_MS {
        let acked_now: Vec<usize> = (0..OPERATIONS)
            .filter(|&i| ack_at(i) == Some(now_ms))
            .collect();
        for &i in &acked_now {
            ops[i].operation().acked.store(true, Ordering::SeqCst);
        }
        let completed: usize = (0..7)
            .chain(100..111)
            .map(|k| purgatory.check_and_complete(&k))
            .sum();
        let expected = acked_now
            .iter()
            .filter(|&&i| model(i) == Outcome::Acked(now_ms))
            .count();
        assert_eq!(completed, expected, "completed by acks at {now_ms} ms");

        purgatory.advance_clock(STEP_MS);
        now_ms += STEP_MS;
        let pending = (0..OPERATIONS)
            .filter(|&i| match model(i) {
                Outcome::Acked(at) => at >= now_ms,
                Outcome::Expired(at) => at > now_ms,
            })
            .count();
        assert_eq!(purgatory.num_delayed(), pending, "pending at {now_ms} ms");
    }
    for (i, op) in ops.iter().enumerate() {
        assert_eq!(
            *op.operation().outcome.lock().unwrap(),
            [model(i)],
            "operation {i}"
        );
    }
    let acked = (0..OPERATIONS)
        .filter(|&i| matches!(model(i), Outcome::Acked(_)))
        .count();
    assert!(
        acked > OPERATIONS / 4 && acked < OPERATIONS * 3 / 4,
        "both outcomes: {acked}"
    );
    assert_eq!(
        purgatory.watched(),
        0,
        "every key was checked after its last completion"
    );
}

#[test]
fn shutdown_from_an_operation_on_the_reaper_thread_does_not_wait_for_itself() {
    struct ShutsDown(Mutex<Option<mpsc::Sender<()>>>);
    static PURGATORY: Mutex<Option<Arc<DelayedOperationPurgatory<u32, ShutsDown>>>> =
        Mutex::new(None);
    impl DelayedOperation for ShutsDown {
        fn delay_ms(&self) -> i64 {
            1
        }
        fn try_complete(&self) -> bool {
            false
        }
        fn on_complete(&self) {}
        fn on_expiration(&self) {
            let purgatory = PURGATORY.lock().unwrap().clone().unwrap();
            purgatory.shutdown();
            self.0.lock().unwrap().take().unwrap().send(()).unwrap();
        }
    }
    let purgatory = Arc::new(
        DelayedOperationPurgatory::<u32, ShutsDown>::builder("self")
            .timer(MockTimer::new())
            .reaper_poll_ms(5)
            .build(),
    );
    *PURGATORY.lock().unwrap() = Some(Arc::clone(&purgatory));
    let (tx, rx) = mpsc::channel();
    let started = Instant::now();
    purgatory.try_complete_else_watch(&Delayed::new(ShutsDown(Mutex::new(Some(tx)))), &[1]);
    rx.recv_timeout(PATIENCE)
        .expect("shutdown on the reaper thread returned");
    PURGATORY.lock().unwrap().take();
    purgatory.shutdown();
    assert!(started.elapsed() < PATIENCE);
}

// The purgatory's expiration reaper and its shutdown, on the real clock: shutdown is
// prompt (it wakes the reaper instead of waiting out its poll), idempotent, also on drop;
// the reaper purges, and does not spin on a timer closed by someone else.
//
// Real-clock bounds are a strict lower bound or a loose upper one, never a narrow window.
mod reaper {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Barrier};
    use std::thread;
    use std::time::{Duration, Instant};

    use super::common::probe::Probe;
    use timingwheel::{
        AddError, DelayedOperationPurgatory, SystemTimer, Timer, TimerTask, TimerTaskEntry,
        timer_task,
    };

    use super::common::{NEVER_MS, PATIENCE};
    /// A reaper poll far longer than any test: a shutdown that waited for it would be caught.
    const LONG_POLL_MS: i64 = 60_000;

    type Purgatory = DelayedOperationPurgatory<u32, Probe>;

    /// A `SystemTimer` that counts the calls to `advance_clock`, and those still running.
    struct Counting {
        timer: SystemTimer,
        advances: AtomicUsize,
        in_flight: AtomicUsize,
    }

    impl Counting {
        fn new() -> Arc<Counting> {
            Arc::new(Counting {
                timer: SystemTimer::new("counted"),
                advances: AtomicUsize::new(0),
                in_flight: AtomicUsize::new(0),
            })
        }

        fn advances(&self) -> usize {
            self.advances.load(Ordering::SeqCst)
        }

        fn in_flight(&self) -> usize {
            self.in_flight.load(Ordering::SeqCst)
        }
    }

    impl Timer for Counting {
        fn add(&self, task: Box<dyn TimerTask>) -> TimerTaskEntry {
            self.timer.add(task)
        }
        fn try_add(&self, task: Box<dyn TimerTask>) -> Result<TimerTaskEntry, AddError> {
            self.timer.try_add(task)
        }
        fn reschedule(&self, entry: &TimerTaskEntry, delay_ms: i64) -> bool {
            self.timer.reschedule(entry, delay_ms)
        }
        fn advance_clock(&self, timeout_ms: i64) -> bool {
            self.in_flight.fetch_add(1, Ordering::SeqCst);
            self.advances.fetch_add(1, Ordering::SeqCst);
            let flushed = self.timer.advance_clock(timeout_ms);
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
            flushed
        }
        fn size(&self) -> usize {
            self.timer.size()
        }
        fn close(&self) {
            self.timer.close()
        }
        fn stop(&self) -> Vec<Box<dyn TimerTask>> {
            self.timer.stop()
        }
    }

    /// Waits until `done()` holds; panics after [`PATIENCE`].
    fn eventually(what: &str, done: impl Fn() -> bool) {
        super::common::sync::eventually(PATIENCE, what, done);
    }

    /// A purgatory whose reaper polls `timer` every `poll_ms`.
    fn reaped(timer: &Arc<Counting>, poll_ms: i64) -> Purgatory {
        Purgatory::builder("reaped")
            .timer(Arc::clone(timer))
            .reaper_poll_ms(poll_ms)
            .build()
    }

    #[test]
    fn shutdown_wakes_the_reaper_instead_of_waiting_out_its_poll() {
        let timer = Counting::new();
        let purgatory = reaped(&timer, LONG_POLL_MS);
        eventually("the reaper polls", || timer.in_flight() == 1);
        let start = Instant::now();
        purgatory.shutdown();
        let took = start.elapsed();
        assert!(
            took < PATIENCE,
            "shutdown took {took:?}: it waited for the {LONG_POLL_MS} ms poll"
        );
        assert_eq!(
            timer.in_flight(),
            0,
            "the reaper left its poll before shutdown returned"
        );
        assert!(
            timer.add(timer_task(1, || {})).cancelled(),
            "the timer is closed"
        );
    }

    #[test]
    fn shutdown_is_idempotent_and_concurrent_callers_all_return_after_the_reaper_ended() {
        const CALLERS: usize = 4;
        let timer = Counting::new();
        let purgatory = reaped(&timer, LONG_POLL_MS);
        eventually("the reaper polls", || timer.in_flight() == 1);
        let barrier = Barrier::new(CALLERS);
        let advances = thread::scope(|s| {
            let callers: Vec<_> = (0..CALLERS)
                .map(|_| {
                    s.spawn(|| {
                        barrier.wait();
                        purgatory.shutdown();
                        assert_eq!(timer.in_flight(), 0);
                        timer.advances()
                    })
                })
                .collect();
            let seen: Vec<usize> = callers.into_iter().map(|c| c.join().unwrap()).collect();
            seen
        });
        purgatory.shutdown();
        thread::sleep(Duration::from_millis(50));
        assert!(
            advances.iter().all(|&seen| seen == timer.advances()),
            "no advance_clock after any shutdown returned: {advances:?} then {}",
            timer.advances()
        );
    }

    #[test]
    fn dropping_the_purgatory_shuts_it_down_and_lets_go_of_the_timer() {
        let timer = Counting::new();
        let purgatory = reaped(&timer, LONG_POLL_MS);
        eventually("the reaper polls", || timer.in_flight() == 1);
        drop(purgatory);
        assert_eq!(
            Arc::strong_count(&timer),
            1,
            "the reaper thread ended and dropped its share"
        );
        assert!(
            timer.add(timer_task(1, || {})).cancelled(),
            "the timer is closed"
        );
    }

    #[test]
    fn shutdown_leaves_pending_operations_neither_completed_nor_expired() {
        let purgatory = Purgatory::new("pending", 0);
        let op = Probe::delayed(50);
        let drops = Arc::clone(&op.operation().drops);
        assert!(!purgatory.try_complete_else_watch(&op, &[1]));
        purgatory.shutdown();
        assert_eq!(
            purgatory.num_delayed(),
            0,
            "the closed timer dropped the timeout"
        );
        assert!(!op.is_completed());
        drop(purgatory);
        assert_eq!(op.operation().completions(), 0);
        drop(op);
        assert_eq!(drops.load(Ordering::SeqCst), 1, "nothing kept it alive");
    }

    #[test]
    fn a_reaper_whose_timer_was_closed_elsewhere_does_not_spin() {
        const POLL_MS: i64 = 20;
        const WATCH: Duration = Duration::from_millis(400);
        let timer = Counting::new();
        let purgatory = reaped(&timer, POLL_MS);
        timer.close();
        let before = timer.advances();
        thread::sleep(WATCH);
        let polls = timer.advances() - before;
        // One poll per POLL_MS at most, with room to spare; a spinning reaper makes thousands.
        let bound = (WATCH.as_millis() as usize) / (POLL_MS as usize) * 3;
        assert!(polls <= bound, "{polls} polls in {WATCH:?} (bound {bound})");
        let start = Instant::now();
        purgatory.shutdown();
        assert!(start.elapsed() < PATIENCE);
    }

    #[test]
    fn the_reaper_purges_completed_operations_from_the_watch_lists() {
        const OPERATIONS: usize = 200;
        let purgatory = Purgatory::builder("purged")
            .purge_interval(10)
            .reaper_poll_ms(5)
            .build();
        let drops = Arc::new(AtomicUsize::new(0));
        for i in 0..OPERATIONS as u32 {
            let mut probe = Probe::new(NEVER_MS);
            probe.drops = Arc::clone(&drops);
            let op = timingwheel::Delayed::new(probe);
            assert!(!purgatory.try_complete_else_watch(&op, &[i % 16, 100 + i]));
            assert!(op.force_complete());
        }
        assert_eq!(purgatory.num_delayed(), 0);
        eventually("the reaper purges", || purgatory.watched() == 0);
        assert_eq!(
            drops.load(Ordering::SeqCst),
            OPERATIONS,
            "and the operations are freed"
        );
        purgatory.shutdown();
    }
}

// The `purgatory` example's core, run small so that CI exercises it: every request is
// answered exactly once, none expires before its timeout, both outcomes occur, and the
// purgatory is empty at the end.
mod example {
    use super::purgatory_example::cli::{Command, Config, parse_args};
    use super::purgatory_example::run;

    /// A run small enough for a debug build on a shared 2-core machine, with both outcomes:
    /// the slow replica fetches its partitions less often than the timeout.
    fn small() -> Config {
        Config {
            requests: 3_000,
            rate: 30_000,
            partitions: 8,
            timeout_ms: 100,
            slow_every: 4,
            slow_fetch_ms: 150,
            seed: 7,
            progress: false,
        }
    }

    #[test]
    fn a_small_run_answers_every_request_exactly_once() {
        let config = small();
        let report = run(&config);
        let table = report.table(&config);
        let holds = table.holds();
        let summary = table.render();
        assert!(holds, "invariant failed:\n{summary}");
        assert!(summary.contains("result: OK"), "{summary}");
        assert_eq!(report.requests, config.requests);
        assert_eq!(
            report.completed_by_acks + report.expired,
            config.requests,
            "{summary}"
        );
        assert_eq!((report.answered_twice, report.never_answered), (0, 0));
        assert!(
            report.completed_by_acks > 0 && report.expired > 0,
            "{summary}"
        );
        assert!(report.timed_out.min_us >= 100_000, "{summary}");
        assert!(report.acked.p50_us <= report.acked.p99_us);
        assert!(report.check_and_complete_calls > 0);
        assert_eq!((report.watched_at_end, report.delayed_at_end), (0, 0));
    }

    #[test]
    fn the_command_line_sets_every_field_and_refuses_nonsense() {
        let args = |s: &str| s.split_whitespace().map(str::to_owned).collect::<Vec<_>>();
        let parsed = parse_args(args(
            "--requests 10 --rate=20 --partitions 3 --timeout-ms 40 --slow-every 5 \
         --slow-fetch-ms 60 --seed 9 --no-progress",
        ));
        let expected = Config {
            requests: 10,
            rate: 20,
            partitions: 3,
            timeout_ms: 40,
            slow_every: 5,
            slow_fetch_ms: 60,
            seed: 9,
            progress: false,
        };
        assert_eq!(parsed, Ok(Command::Run(expected)));
        assert_eq!(parse_args(args("--help")), Ok(Command::Help));
        assert_eq!(parse_args(args("")), Ok(Command::Run(Config::default())));
        for bad in [
            "--rate 0",
            "--partitions 0",
            "--timeout-ms 0",
            "--requests",
            "--x 1",
        ] {
            assert!(parse_args(args(bad)).is_err(), "{bad}");
        }
    }
}

#[test]
fn the_purgatorys_own_timer_is_readable_and_a_given_one_is_not_lent_back() {
    let own = Purgatory::builder("own").reaper_enabled(false).build();
    assert!(!own.try_complete_else_watch(&Probe::delayed(NEVER_MS), &[1]));
    let stats = own.system_timer().expect("its own timer").stats();
    assert_eq!((stats.added, stats.pending), (1, 1));
    assert_eq!(own.system_timer().unwrap().lateness().count, 0);
    assert!(on_a_still_clock::<Probe>().system_timer().is_none());
}
