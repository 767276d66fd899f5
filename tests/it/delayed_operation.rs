//! Kafka's `DelayedOperationTest`, ported.
//!
//! Source: apache/kafka,
//! `server-common/src/test/java/org/apache/kafka/server/purgatory/DelayedOperationTest.java`
//! (checked against commit 2fb8b98: no test added since the port), and
//! `core/src/test/scala/unit/kafka/cluster/PartitionTest.scala` (commit 98cdf97, KAFKA-17240).
//! Licensed to the Apache Software Foundation (ASF) under the Apache License, Version 2.0;
//! see <http://www.apache.org/licenses/LICENSE-2.0>.
//!
//! Every test runs on `DelayedOperationPurgatory::new("mock", 0)` (a `SystemTimer` and a
//! reaper thread), as the Java `setUp` does, and shuts it down at the end (`tearDown`).
//!
//! Deviations from the Java suite:
//!
//! - Keys are `&str` instead of a `MockKey` record.
//! - `MockDelayedOperation.tryComplete` returns its `completable` flag instead of calling
//!   `forceComplete`: in this port, returning true is how an operation completes itself.
//!   Its `onComplete` counts calls and reports on a channel instead of `notify()`.
//! - `testLockInTryCompleteElseWatch`: the lock check uses
//!   `Delayed::is_locked_by_current_thread` (the operation reaches its own `Delayed`
//!   through a thread-local) instead of `ReentrantLock.isHeldByCurrentThread`. Java's
//!   failing override of the package-private `safeTryComplete` has no counterpart (it is
//!   not overridable here); instead the test checks that `try_complete` is asked twice,
//!   before and after watching, both times under the lock.
//! - `testSafeTryCompleteOrElse`: `safeTryCompleteOrElse` is internal here; its effect is
//!   checked through `try_complete_else_watch`: the "else" action (watching) runs for the
//!   operation that cannot complete and not for the one that can.
//! - `testRequestExpiry`: waits for the completion on a channel with a loose upper bound
//!   (20 s) instead of an unbounded `wait()`; also asserts that `on_expiration` ran for r1
//!   and not for r2.
//! - `testRequestPurge`: `r2.tryComplete()` is `Delayed::try_complete`; also asserts the
//!   timeouts are cancelled at once (the Java comments say so; it checks `numDelayed`).
//! - `shouldCancelForKeyReturningCancelledOperations`: also asserts that the cancelled
//!   operations are the ones watched under the key, and not completed.
//! - `testTryCompleteWithMultipleThreads`: 20 scoped threads take the 2,000 completion
//!   attempts from a shuffled queue, each after a random 0-9 ms pause, instead of a
//!   `ScheduledExecutorService`; a seeded xorshift replaces `java.util.Random`. Also
//!   asserts each operation's `on_complete` ran exactly once.
//! - `PartitionTest.tryCompleteDelayedRequestsCatchesExceptions` mocks three purgatories
//!   that all throw and checks that `Partition` swallows it; this port has no `Partition`:
//!   three real purgatories, one of whose operations panics in `try_complete`, checked by a
//!   caller that catches each panic. It asserts that the other two complete their operation
//!   and that the one that panicked still watches its operation and completes it later.
//! - KAFKA-18027 (an operation completed before it is watched under all its keys is not
//!   watched under the rest) changed the purgatory without a test; one is added here.

use crate::common;

use std::cell::RefCell;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, mpsc};
use std::thread;
use std::time::Duration;

use common::PATIENCE;
use common::rng::Rng;
use timingwheel::{Delayed, DelayedOperation, DelayedOperationPurgatory, hi_res_clock_ms};

/// The purgatory of `setUp`, shut down on drop (`tearDown`).
struct Fixture<Op: DelayedOperation> {
    purgatory: DelayedOperationPurgatory<&'static str, Op>,
}

impl<Op: DelayedOperation> Fixture<Op> {
    fn new() -> Self {
        Fixture {
            purgatory: DelayedOperationPurgatory::new("mock", 0),
        }
    }
}

impl<Op: DelayedOperation> Drop for Fixture<Op> {
    fn drop(&mut self) {
        self.purgatory.shutdown();
    }
}

/// Kafka's `MockDelayedOperation`.
struct MockOp {
    delay_ms: i64,
    completable: AtomicBool,
    /// `try_complete` panics (Kafka's mocked `checkAndComplete` that throws).
    panics: AtomicBool,
    completions: AtomicUsize,
    expirations: AtomicUsize,
    completed_tx: Mutex<Option<mpsc::Sender<()>>>,
}

impl MockOp {
    fn new(delay_ms: i64) -> Delayed<MockOp> {
        Delayed::new(MockOp {
            delay_ms,
            completable: AtomicBool::new(false),
            panics: AtomicBool::new(false),
            completions: AtomicUsize::new(0),
            expirations: AtomicUsize::new(0),
            completed_tx: Mutex::new(None),
        })
    }

    /// A receiver that gets one message when the operation completes (`awaitExpiration`).
    fn on_completion(&self) -> mpsc::Receiver<()> {
        let (tx, rx) = mpsc::channel();
        *self.completed_tx.lock().unwrap() = Some(tx);
        rx
    }
}

impl DelayedOperation for MockOp {
    fn delay_ms(&self) -> i64 {
        self.delay_ms
    }
    fn try_complete(&self) -> bool {
        assert!(!self.panics.load(Ordering::SeqCst), "uh oh");
        self.completable.load(Ordering::SeqCst)
    }
    fn on_complete(&self) {
        self.completions.fetch_add(1, Ordering::SeqCst);
        if let Some(tx) = self.completed_tx.lock().unwrap().take() {
            let _ = tx.send(());
        }
    }
    fn on_expiration(&self) {
        self.expirations.fetch_add(1, Ordering::SeqCst);
    }
}

/// An operation that checks, in `try_complete`, that it holds its own lock.
struct LockCheckingOp {
    completable: bool,
    tries: AtomicUsize,
}

thread_local! {
    /// The operation under test, so that its `try_complete` can reach its own `Delayed`.
    static UNDER_TEST: RefCell<Option<Delayed<LockCheckingOp>>> = const { RefCell::new(None) };
}

impl DelayedOperation for LockCheckingOp {
    fn delay_ms(&self) -> i64 {
        100_000
    }
    fn try_complete(&self) -> bool {
        let locked = UNDER_TEST.with(|op| {
            op.borrow()
                .as_ref()
                .expect("the test sets UNDER_TEST")
                .is_locked_by_current_thread()
        });
        assert!(locked, "try_complete runs under the operation's lock");
        self.tries.fetch_add(1, Ordering::SeqCst);
        self.completable
    }
    fn on_complete(&self) {}
    fn on_expiration(&self) {}
}

fn lock_checking_op(completable: bool) -> Delayed<LockCheckingOp> {
    let op = Delayed::new(LockCheckingOp {
        completable,
        tries: AtomicUsize::new(0),
    });
    UNDER_TEST.with(|slot| *slot.borrow_mut() = Some(op.clone()));
    op
}

fn forget_lock_checking_op() {
    UNDER_TEST.with(|slot| slot.borrow_mut().take());
}

#[test]
fn try_complete_else_watch_asks_under_the_lock_before_and_after_watching() {
    let fixture = Fixture::new();
    let op = lock_checking_op(false);
    assert!(!fixture.purgatory.try_complete_else_watch(&op, &["key"]));
    assert_eq!(op.operation().tries.load(Ordering::SeqCst), 2);
    assert!(!op.is_locked_by_current_thread(), "released after watching");
    forget_lock_checking_op();
}

#[test]
fn watching_happens_only_when_the_first_try_fails() {
    let fixture = Fixture::new();
    let waiting = lock_checking_op(false);
    assert!(!fixture.purgatory.try_complete_else_watch(&waiting, &["a"]));
    assert_eq!(
        fixture.purgatory.watched(),
        1,
        "the else action (watch) ran"
    );

    let ready = lock_checking_op(true);
    assert!(fixture.purgatory.try_complete_else_watch(&ready, &["b"]));
    assert_eq!(ready.operation().tries.load(Ordering::SeqCst), 1);
    assert_eq!(
        fixture.purgatory.watched(),
        1,
        "the else action did not run"
    );
    assert_eq!(fixture.purgatory.num_delayed(), 1);
    forget_lock_checking_op();
}

#[test]
fn request_satisfaction() {
    let fixture = Fixture::new();
    let purgatory = &fixture.purgatory;
    let r1 = MockOp::new(100_000);
    let r2 = MockOp::new(100_000);
    assert_eq!(
        purgatory.check_and_complete(&"test1"),
        0,
        "with no waiting requests, nothing is satisfied"
    );
    assert!(
        !purgatory.try_complete_else_watch(&r1, &["test1"]),
        "r1 not satisfied and hence watched"
    );
    assert_eq!(
        purgatory.check_and_complete(&"test1"),
        0,
        "still nothing satisfied"
    );
    assert!(
        !purgatory.try_complete_else_watch(&r2, &["test2"]),
        "r2 not satisfied and hence watched"
    );
    assert_eq!(
        purgatory.check_and_complete(&"test2"),
        0,
        "still nothing satisfied"
    );
    r1.operation().completable.store(true, Ordering::SeqCst);
    assert_eq!(purgatory.check_and_complete(&"test1"), 1, "r1 satisfied");
    assert_eq!(
        purgatory.check_and_complete(&"test1"),
        0,
        "nothing satisfied"
    );
    r2.operation().completable.store(true, Ordering::SeqCst);
    assert_eq!(purgatory.check_and_complete(&"test2"), 1, "r2 satisfied");
    assert_eq!(
        purgatory.check_and_complete(&"test2"),
        0,
        "nothing satisfied"
    );
}

#[test]
fn request_expiry() {
    let fixture = Fixture::new();
    let purgatory = &fixture.purgatory;
    let expiration_ms = 20;
    let start = hi_res_clock_ms();
    let r1 = MockOp::new(expiration_ms);
    let r2 = MockOp::new(200_000);
    let r1_completed = r1.operation().on_completion();
    assert!(
        !purgatory.try_complete_else_watch(&r1, &["test1"]),
        "r1 not satisfied and hence watched"
    );
    assert!(
        !purgatory.try_complete_else_watch(&r2, &["test2"]),
        "r2 not satisfied and hence watched"
    );
    r1_completed
        .recv_timeout(PATIENCE)
        .expect("r1 completed by expiration");
    let elapsed = hi_res_clock_ms() - start;
    assert!(r1.is_completed(), "r1 completed due to expiration");
    assert!(!r2.is_completed(), "r2 hasn't completed");
    assert!(
        elapsed >= expiration_ms,
        "time for expiration {elapsed} should be at least {expiration_ms}"
    );
    // on_expiration runs right after on_complete, on the same thread, under the lock.
    let _wait_for_the_expiry_to_finish = r1.try_complete();
    assert_eq!(r1.operation().expirations.load(Ordering::SeqCst), 1);
    assert_eq!(r2.operation().expirations.load(Ordering::SeqCst), 0);
}

#[test]
fn request_purge() {
    let fixture = Fixture::new();
    let purgatory = &fixture.purgatory;
    let r1 = MockOp::new(100_000);
    let r2 = MockOp::new(100_000);
    let r3 = MockOp::new(100_000);
    purgatory.try_complete_else_watch(&r1, &["test1"]);
    purgatory.try_complete_else_watch(&r2, &["test1", "test2"]);
    purgatory.try_complete_else_watch(&r3, &["test1", "test2", "test3"]);

    assert_eq!(purgatory.num_delayed(), 3, "3 total delayed operations");
    assert_eq!(purgatory.watched(), 6, "6 watched elements");

    // Completing an operation removes it from the delayed operations at once.
    r2.operation().completable.store(true, Ordering::SeqCst);
    assert!(r2.try_complete());
    assert_eq!(purgatory.num_delayed(), 2, "2 total delayed operations");

    r3.operation().completable.store(true, Ordering::SeqCst);
    assert!(r3.try_complete());
    assert_eq!(purgatory.num_delayed(), 1, "1 total delayed operation");

    // Checking a watch purges its watch list.
    purgatory.check_and_complete(&"test1");
    assert_eq!(purgatory.watched(), 4, "4 watched elements");

    purgatory.check_and_complete(&"test2");
    assert_eq!(purgatory.watched(), 2, "2 watched elements");

    purgatory.check_and_complete(&"test3");
    assert_eq!(purgatory.watched(), 1, "1 watched element");
}

#[test]
fn cancel_for_key_returns_the_cancelled_operations() {
    let fixture = Fixture::new();
    let purgatory = &fixture.purgatory;
    let (a, b, c) = (
        MockOp::new(10_000),
        MockOp::new(10_000),
        MockOp::new(10_000),
    );
    purgatory.try_complete_else_watch(&a, &["test1"]);
    purgatory.try_complete_else_watch(&b, &["test1"]);
    purgatory.try_complete_else_watch(&c, &["test2"]);

    let cancelled = purgatory.cancel_for_key(&"test1");
    assert_eq!(cancelled.len(), 2);
    assert!(cancelled[0].ptr_eq(&a) && cancelled[1].ptr_eq(&b));
    assert!(cancelled.iter().all(|op| !op.is_completed()));
    assert_eq!(purgatory.num_delayed(), 1);
    assert_eq!(purgatory.watched(), 1);
}

#[test]
fn cancel_for_key_of_an_unknown_key_returns_nothing() {
    let fixture = Fixture::<MockOp>::new();
    assert!(fixture.purgatory.cancel_for_key(&"test1").is_empty());
}

/// Kafka's purgatory, as corrected since the port: an operation completed before it is
/// watched under every key is not watched under the remaining ones, nor timed.
#[test]
fn a_completed_operation_is_not_watched_under_its_remaining_keys() {
    let fixture = Fixture::new();
    let op = MockOp::new(100_000);
    assert!(op.force_complete());
    assert!(
        !fixture
            .purgatory
            .try_complete_else_watch(&op, &["a", "b", "c"])
    );
    assert_eq!(fixture.purgatory.watched(), 0);
    assert_eq!(fixture.purgatory.num_delayed(), 0);
    assert_eq!(op.operation().completions.load(Ordering::SeqCst), 1);
}

/// `PartitionTest.tryCompleteDelayedRequestsCatchesExceptions`: a partition checks its
/// fetch, produce and delete-records purgatories in turn, catching a failure in each, so
/// one that fails does not keep the others from completing.
#[test]
fn try_complete_delayed_requests_catches_exceptions() {
    let purgatories = [Fixture::new(), Fixture::new(), Fixture::new()];
    let ops = [(); 3].map(|()| MockOp::new(100_000));
    for (fixture, op) in purgatories.iter().zip(&ops) {
        assert!(!fixture.purgatory.try_complete_else_watch(op, &["tp"]));
        op.operation().completable.store(true, Ordering::SeqCst);
    }
    ops[1].operation().panics.store(true, Ordering::SeqCst);
    let completed = purgatories.each_ref().map(|fixture| {
        catch_unwind(AssertUnwindSafe(|| {
            fixture.purgatory.check_and_complete(&"tp")
        }))
        .ok()
    });
    assert_eq!(completed, [Some(1), None, Some(1)]);
    // The purgatory that panicked goes on: its operation is still watched, and completes.
    assert_eq!(purgatories[1].purgatory.watched(), 1);
    ops[1].operation().panics.store(false, Ordering::SeqCst);
    assert_eq!(purgatories[1].purgatory.check_and_complete(&"tp"), 1);
}

/// Operations of the multi-threaded test.
const OPERATIONS: usize = 100;
/// Completion attempts per operation; the last one makes it completable.
const COMPLETION_ATTEMPTS: usize = 20;
/// Threads making the attempts (the Java test's scheduled pool).
const ATTEMPT_THREADS: usize = 20;
/// Pauses (before an attempt, and inside `try_complete`) are 0..MAX_DELAY_MS ms.
const MAX_DELAY_MS: u64 = 10;

/// Kafka's `TestDelayOperation`: reads `completable`, pauses with the lock held, then
/// answers what it read.
struct SlowOp {
    key: String,
    attempts_remaining: AtomicUsize,
    completable: AtomicBool,
    completions: AtomicUsize,
    pause_seed: AtomicUsize,
}

impl DelayedOperation for SlowOp {
    fn delay_ms(&self) -> i64 {
        10_000
    }
    fn try_complete(&self) -> bool {
        let completable = self.completable.load(Ordering::SeqCst);
        let seed = self.pause_seed.fetch_add(1, Ordering::Relaxed) as u64;
        let pause = Rng::new(seed).below(MAX_DELAY_MS);
        thread::sleep(Duration::from_millis(pause));
        completable
    }
    fn on_complete(&self) {
        self.completions.fetch_add(1, Ordering::SeqCst);
    }
    fn on_expiration(&self) {}
}

#[test]
fn try_complete_with_multiple_threads_misses_no_completion() {
    let purgatory = DelayedOperationPurgatory::<String, SlowOp>::new("mock", 0);
    let ops: Vec<Delayed<SlowOp>> = (0..OPERATIONS)
        .map(|i| {
            let op = Delayed::new(SlowOp {
                key: format!("key{i}"),
                attempts_remaining: AtomicUsize::new(COMPLETION_ATTEMPTS),
                completable: AtomicBool::new(false),
                completions: AtomicUsize::new(0),
                pause_seed: AtomicUsize::new(i * 1_000),
            });
            purgatory.try_complete_else_watch(&op, &[op.operation().key.clone()]);
            op
        })
        .collect();

    // Every (operation, attempt) pair, shuffled, each with the pause before it.
    let mut rng = Rng::new(0x5EED_1234_ABCD_0001);
    let mut attempts: Vec<(usize, u64)> = (0..COMPLETION_ATTEMPTS)
        .flat_map(|_| 0..OPERATIONS)
        .map(|op| (op, 0))
        .collect();
    for i in (1..attempts.len()).rev() {
        attempts.swap(i, rng.below(i as u64 + 1) as usize);
    }
    for attempt in &mut attempts {
        attempt.1 = rng.below(MAX_DELAY_MS);
    }

    let next = AtomicUsize::new(0);
    thread::scope(|s| {
        for _ in 0..ATTEMPT_THREADS {
            s.spawn(|| {
                while let Some(&(i, pause_ms)) = attempts.get(next.fetch_add(1, Ordering::SeqCst)) {
                    thread::sleep(Duration::from_millis(pause_ms));
                    let op = ops[i].operation();
                    if op.attempts_remaining.fetch_sub(1, Ordering::SeqCst) == 1 {
                        op.completable.store(true, Ordering::SeqCst);
                    }
                    purgatory.check_and_complete(&op.key);
                }
            });
        }
    });

    for op in &ops {
        let key = &op.operation().key;
        assert!(op.is_completed(), "operation {key} should have completed");
        assert_eq!(
            op.operation().completions.load(Ordering::SeqCst),
            1,
            "{key}"
        );
    }
    purgatory.shutdown();
}
