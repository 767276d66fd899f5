//! The flush scheduler: how `advance_clock` moves the entries of due lists on, a chunk at a
//! time, most urgent first. Kafka flushes each due bucket whole under its write lock; this is
//! the work it does, cut up so that a million timers expiring together hold up neither the
//! threads that add nor the tasks that are due.
//!
//! # Ground rules
//!
//! The lock order is in `crate::lock_order`. Here:
//!
//! - The write lock covers only moving the wheel's clocks and detaching the due lists in
//!   every shard (O(1) each). Re-adding the detached entries runs under one shard's lock at
//!   a time, [`FLUSH_CHUNK`] entries per hold, taken with `read_urgent` so that adds and
//!   cancels hand the lock over rather than take it straight back.
//! - Flushes run most urgent first: by the time the earliest entry of each detached list
//!   may be due. A flush whose entries are still far from due may be left unfinished in
//!   `unfinished` once a call has re-added [`FLUSH_BUDGET`] such entries; the next call
//!   goes on with it after a pause (below). Lowest-level lists, whose entries are
//!   due, and flushes past half of their lead, always finish within the call.
//! - `unfinished` is a leaf mutex: taken with no lock held at the start and the end of a
//!   call, and under the write lock by `close` and `stop`; nothing is taken under it.
//!
//! # Pausing between budgets
//!
//! A call that leaves a flush unfinished returns, and the next call waits up to
//! [`FLUSH_PAUSE_MS`] for a due list before it goes on with the flush. Linux tends to queue
//! a woken thread on its waker's processor, so a driver that re-added a large list in one
//! stretch kept the executor it had just woken waiting behind it, while tasks came due.
//! The pause lets whatever waits for the driver's processor run, and the flush still ends
//! well within its slack (`docs/performance.md`, "Pausing between flush budgets").
//!
//! # Where due entries go
//!
//! Where the entries that come due under a shard's lock go (Kafka's `addTimerTaskEntry`
//! and the hand-over of its executor): out of the store into a batch for the executor, or,
//! on a timer with `max_in_flight`, into the shard's backlog (see `backlog`). `add`,
//! `reschedule` and the flush all end here.

use std::cmp::{Ordering as CmpOrdering, Reverse};
use std::collections::BinaryHeap;
use std::sync::Arc;

use parking_lot::Mutex;

use super::SystemTimer;
use crate::delay_queue::Due;
use crate::executor::Executor;
use crate::store::shard::{Count, Entry, ReadGuard, ShardState};
use crate::task::Expired;
use crate::timer_task_list::TimerTaskList;
use crate::timing_wheel::TimingWheel;

/// Entries a flush re-adds per lock hold, so that an `add` or `cancel` on the same stripe
/// waits for at most one chunk (at most one executor batch expires per chunk). 64 keeps the
/// longest wait of an `add` shortest at the same lateness; 512 and 32 were measured worse
/// (`docs/performance.md`, "The flush chunk size").
const FLUSH_CHUNK: usize = 64;

/// Entries of flushes that are not yet urgent that one `advance_clock` call re-adds before
/// it returns, leaving the rest to the next call.
const FLUSH_BUDGET: usize = 8 * 1024;

/// How long, at most, a call waits for a due list before it goes on with a flush an
/// earlier call left unfinished (see "Pausing between budgets").
pub(super) const FLUSH_PAUSE_MS: i64 = 1;

/// How a flush is cut up: entries per lock hold, and entries of not-yet-urgent flushes per
/// `advance_clock` call.
#[derive(Clone, Copy, Debug)]
pub(super) struct Chunking {
    chunk: usize,
    budget: usize,
}

impl Chunking {
    pub(super) const DEFAULT: Chunking = Chunking {
        chunk: FLUSH_CHUNK,
        budget: FLUSH_BUDGET,
    };

    /// Chunks of `chunk` entries, `budget` entries of not-yet-urgent flushes per call; both
    /// positive, so that every call moves a flush on by a chunk at least. For tests that
    /// interleave adds and cancels with flushes.
    #[cfg(test)]
    pub(super) fn new(chunk: usize, budget: usize) -> Chunking {
        assert!(chunk > 0 && budget > 0);
        Chunking { chunk, budget }
    }
}

/// The flush scheduler's state: how it cuts flushes up, and what an earlier call left.
#[derive(Debug)]
pub(super) struct Flusher {
    chunking: Chunking,
    /// Flushes an earlier `advance_clock` call left for the next one.
    unfinished: Mutex<Vec<Flush>>,
}

impl Flusher {
    pub(super) fn new(chunking: Chunking) -> Flusher {
        Flusher {
            chunking,
            unfinished: Mutex::new(Vec::new()),
        }
    }

    /// True if an earlier call left flushes unfinished.
    pub(super) fn has_unfinished(&self) -> bool {
        !self.unfinished.lock().is_empty()
    }

    /// Appends, for every flush an earlier call left unfinished, its list's id and the
    /// earliest expiration its entries can have.
    pub(super) fn unfinished_lists(&self, out: &mut Vec<(i64, u32)>) {
        let unfinished = self.unfinished.lock();
        out.extend(
            unfinished
                .iter()
                .map(|flush| (flush.deadline_ms, flush.list.id())),
        );
    }

    /// Drops the unfinished flushes (their entries were cleared with the store).
    pub(super) fn forget_unfinished(&self) {
        self.unfinished.lock().clear();
    }
}

/// A list being flushed: detached in every shard, its entries re-added a chunk at a time.
#[derive(Debug)]
struct Flush {
    list: Arc<TimerTaskList>,
    /// When the list's earliest entry may be due: flushes run in this order.
    deadline_ms: i64,
    /// From then on the flush finishes within the call that works on it.
    urgent_ms: i64,
    /// The next stripe to take entries from.
    stripe: usize,
}

impl Flush {
    fn new(list: Arc<TimerTaskList>, due_ms: i64) -> Flush {
        Flush {
            deadline_ms: list.earliest_expiration_ms(due_ms),
            urgent_ms: due_ms.saturating_add(list.slack_ms() / 2),
            stripe: 0,
            list,
        }
    }
}

impl PartialEq for Flush {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == CmpOrdering::Equal
    }
}
impl Eq for Flush {}
impl PartialOrd for Flush {
    fn partial_cmp(&self, other: &Self) -> Option<CmpOrdering> {
        Some(self.cmp(other))
    }
}
impl Ord for Flush {
    fn cmp(&self, other: &Self) -> CmpOrdering {
        (self.deadline_ms, self.list.id()).cmp(&(other.deadline_ms, other.list.id()))
    }
}

impl SystemTimer {
    /// Flushes `first` (a list the caller polled), every other due list, and what an
    /// earlier call left unfinished, most urgent first, within this call's budget. Returns
    /// true if a flush moved on.
    pub(super) fn flush(&self, first: Option<Due<Arc<TimerTaskList>>>) -> bool {
        let flusher = &self.flusher;
        let mut flushes: BinaryHeap<Reverse<Flush>> =
            flusher.unfinished.lock().drain(..).map(Reverse).collect();
        let mut due: Vec<_> = first.into_iter().collect();
        let mut flushed = false;
        let mut budget = flusher.chunking.budget;
        loop {
            if due.is_empty() {
                due.extend(self.delay_queue.poll());
            }
            if !due.is_empty() && !self.begin_flushes(&mut due, &mut flushes) {
                return flushed;
            }
            let Some(Reverse(mut flush)) = flushes.pop() else {
                return flushed;
            };
            let urgent = self.time.hi_res_clock_ms() >= flush.urgent_ms;
            if budget == 0 && !urgent {
                flushes.push(Reverse(flush));
                flusher
                    .unfinished
                    .lock()
                    .extend(flushes.into_iter().map(|Reverse(f)| f));
                return true;
            }
            let Some((count, done)) = self.flush_chunk(&mut flush) else {
                return flushed;
            };
            flushed = true;
            if !urgent {
                budget = budget.saturating_sub(count);
            }
            if !done {
                flushes.push(Reverse(flush));
            }
        }
    }

    /// Takes every due list out of `due` and the delay queue, moves the wheel's clocks to the
    /// latest clock reading among them, and detaches each list in every shard (write lock).
    /// Returns false if the timer is closed.
    fn begin_flushes(
        &self,
        due: &mut Vec<Due<Arc<TimerTaskList>>>,
        flushes: &mut BinaryHeap<Reverse<Flush>>,
    ) -> bool {
        while let Some(next) = self.delay_queue.poll() {
            due.push(next);
        }
        let mut write = self.timing_wheel.write();
        if self.is_closed() {
            return false;
        }
        if let Some(now_ms) = due.iter().map(|d| d.now_ms).max() {
            // The clock's reading, not the list's expiration (Kafka): one flush then
            // expires everything due, and the wheels never run ahead of the clock.
            write.value().advance_clock(now_ms, &write);
        }
        for Due {
            value: list,
            due_ms,
            ..
        } in due.drain(..)
        {
            // Queued again for another time since, or already flushed: stale.
            if list.expiration_ms() != due_ms {
                continue;
            }
            list.reset_expiration();
            for shard in write.shards_mut() {
                shard.detach(list.id());
            }
            flushes.push(Reverse(Flush::new(list, due_ms)));
        }
        true
    }

    /// Re-adds up to a chunk of entries of `flush`, one stripe at a time, handing the
    /// expired ones to the executor. Returns how many it re-added and whether the flush is
    /// done, or `None` if the timer is closed.
    fn flush_chunk(&self, flush: &mut Flush) -> Option<(usize, bool)> {
        let chunk = self.flusher.chunking.chunk;
        let mut count = 0;
        while flush.stripe < self.timing_wheel.stripes() {
            let mut expiring = Expiring::batched(&self.executor);
            let mut read = self.timing_wheel.read_urgent(flush.stripe);
            if self.is_closed() {
                return None;
            }
            let timing_wheel = read.value();
            let id = flush.list.id();
            count += read.shard().flush(id, chunk - count, |shard, entry| {
                add_timer_task_entry(timing_wheel, shard, entry, &mut expiring);
            });
            expiring.finish(&self.executor, read);
            if count == chunk {
                return Some((count, false));
            }
            flush.stripe += 1;
        }
        Some((count, true))
    }
}

/// Kafka's `addTimerTaskEntry`: puts `entry` of `shard` into the wheel, or, if the wheel
/// says it is expired, hands it to `expiring`.
#[inline]
pub(super) fn add_timer_task_entry(
    wheel: &TimingWheel,
    shard: &mut ShardState,
    entry: Entry,
    expiring: &mut Expiring,
) {
    if !wheel.add(entry.expiration_ms, |id| shard.link(id, entry.index)) {
        expiring.expire(shard, entry);
    }
}

/// Where the entries that come due under a shard's lock go: out of the store into a batch
/// for the executor, or, on a timer with `max_in_flight`, into the shard's backlog, where
/// they stay pending until a refill hands them over (see `backlog`).
///
/// Its methods are `#[inline]`: `add`, `reschedule` and the flush live in other codegen
/// units, and without it `reschedule` took 12 more instructions (`benches/instructions.sh`).
pub(super) struct Expiring {
    batch: Vec<Expired>,
    /// True on a timer with `max_in_flight`.
    hold: bool,
    held: usize,
}

impl Expiring {
    /// For a few entries at most: a batch buffer is allocated only if one expires.
    #[inline]
    pub(super) fn unbatched(executor: &Executor) -> Expiring {
        Expiring {
            batch: Vec::new(),
            hold: executor.is_bounded(),
            held: 0,
        }
    }

    /// For a flush chunk: a batch buffer taken before the shard is locked (a new one is an
    /// allocation, which with glibc may consolidate an arena; see `threads::delay_queue`).
    pub(super) fn batched(executor: &Executor) -> Expiring {
        let hold = executor.is_bounded();
        Expiring {
            batch: if hold { Vec::new() } else { executor.batch() },
            hold,
            held: 0,
        }
    }

    /// Takes the due `entry` of `shard`, unlisted, out of the store into the batch, or holds
    /// it in the backlog.
    #[inline]
    pub(super) fn expire(&mut self, shard: &mut ShardState, entry: Entry) {
        if self.hold {
            shard.hold(entry.index);
            self.held += 1;
        } else {
            self.batch.push(Expired {
                task: shard.remove(entry.index),
                expiration_ms: entry.expiration_ms,
            });
        }
    }

    /// True if an entry came due.
    #[inline]
    pub(super) fn is_empty(&self) -> bool {
        self.batch.is_empty() && self.held == 0
    }

    /// Hands the batch to the executor and unlocks `read`, the shard the entries came from:
    /// counted expired and in flight under the lock that took them out of the store, so that
    /// `size()` no longer counts them and a `close` waits for them; sent once the lock is
    /// released (see `Executor::hand_over`). Then, if entries were held, asks for a refill.
    #[inline]
    pub(super) fn finish<T>(self, executor: &Executor, read: ReadGuard<'_, T>) {
        read.count(Count::Expired, self.batch.len() as u64);
        let handover = executor.hand_over(self.batch);
        drop(read);
        handover.send();
        if self.held > 0 {
            executor.refill();
        }
    }
}

/// A model of the timer with its flushes cut into chunks of one to three entries and almost
/// no budget per call, so that adds, cancels, clock steps and `next_expiration_ms` land
/// between the chunks of a flush. (`tests/model.rs` checks the timer against a model with
/// full-size chunks, `tests/next_expiration.rs` `next_expiration_ms` across levels.)
#[cfg(test)]
mod tests {
    use super::super::SystemTimer;
    use crate::mock::MockTime;
    use crate::task::{TimerTask, timer_task};
    use crate::timer::Timer;
    use crate::timer_task_entry::TimerTaskEntry;
    use proptest::prelude::*;
    use std::sync::Arc;
    use std::sync::atomic::Ordering;
    use std::sync::atomic::{AtomicI64, AtomicUsize};
    use std::sync::mpsc;
    use std::time::Duration;

    #[derive(Clone, Debug)]
    enum Op {
        Add(i64),
        Cancel(usize),
        /// Move the clock, then call `advance_clock(0)` this many times (1 to 3).
        Step(i64, u8),
    }

    /// What happened to one task.
    #[derive(Default)]
    struct Record {
        runs: AtomicUsize,
        drops: AtomicUsize,
        ran_at_ms: AtomicI64,
    }

    struct Probe {
        delay_ms: i64,
        time: MockTime,
        record: Arc<Record>,
    }

    impl TimerTask for Probe {
        fn delay_ms(&self) -> i64 {
            self.delay_ms
        }
        fn run(self: Box<Self>) {
            self.record
                .ran_at_ms
                .store(self.time.hi_res_clock_ms(), Ordering::SeqCst);
            self.record.runs.fetch_add(1, Ordering::SeqCst);
        }
    }

    impl Drop for Probe {
        fn drop(&mut self) {
            self.record.drops.fetch_add(1, Ordering::SeqCst);
        }
    }

    struct Task {
        expiration_ms: i64,
        due_ms: i64,
        entry: TimerTaskEntry,
        record: Arc<Record>,
        cancelled: bool,
    }

    /// Waits until the executor has run everything handed to it so far.
    fn barrier(timer: &SystemTimer) {
        let (tx, rx) = mpsc::channel();
        timer.add(timer_task(0, move || tx.send(()).unwrap()));
        rx.recv_timeout(Duration::from_secs(10))
            .expect("executor barrier");
    }

    /// Checks every task against the clock: a task ran iff its bucket's time has come and
    /// it was not cancelled (`drained`: the timer has nothing due left), never twice, never
    /// both run and cancelled.
    fn check(tasks: &[Task], now_ms: i64, drained: bool) {
        for (id, task) in tasks.iter().enumerate() {
            let runs = task.record.runs.load(Ordering::SeqCst);
            assert!(runs <= 1, "task {id} ran {runs} times");
            if runs == 1 {
                assert!(!task.cancelled, "task {id} ran and was cancelled");
                assert!(
                    task.due_ms <= now_ms,
                    "task {id} ran before its bucket's time"
                );
                assert!(task.record.ran_at_ms.load(Ordering::SeqCst) >= task.due_ms);
            } else if drained && !task.cancelled {
                assert!(task.due_ms > now_ms, "task {id} is due and did not run");
            }
        }
    }

    fn run_model(tick_ms: i64, wheel_size: usize, chunk: usize, budget: usize, ops: &[Op]) {
        let time = MockTime::new();
        let timer = SystemTimer::builder("chunks")
            .time(time.clone())
            .tick_ms(tick_ms)
            .wheel_size(wheel_size)
            .chunking(chunk, budget)
            .build();
        let mut tasks: Vec<Task> = Vec::new();
        for op in ops {
            match *op {
                Op::Add(delay_ms) => {
                    let record = Arc::new(Record::default());
                    let expiration_ms = time.hi_res_clock_ms() + delay_ms;
                    let entry = timer.add(Box::new(Probe {
                        delay_ms,
                        time: time.clone(),
                        record: Arc::clone(&record),
                    }));
                    tasks.push(Task {
                        expiration_ms,
                        due_ms: expiration_ms - expiration_ms.rem_euclid(tick_ms),
                        entry,
                        record,
                        cancelled: false,
                    });
                }
                Op::Cancel(k) if !tasks.is_empty() => {
                    let at = k % tasks.len();
                    let task = &mut tasks[at];
                    if task.entry.cancel() {
                        assert!(!task.cancelled, "task {at} cancelled twice");
                        assert_eq!(task.record.drops.load(Ordering::SeqCst), 1);
                        task.cancelled = true;
                    }
                }
                Op::Cancel(_) => {}
                Op::Step(ms, calls) => {
                    time.sleep(ms);
                    for _ in 0..calls {
                        timer.advance_clock(0);
                    }
                    barrier(&timer);
                    check(&tasks, time.hi_res_clock_ms(), false);
                    // Between the chunks of a flush too: the earliest task neither run nor
                    // cancelled, wherever the flush left it.
                    let earliest = tasks
                        .iter()
                        .filter(|t| !t.cancelled && t.record.runs.load(Ordering::SeqCst) == 0)
                        .map(|t| t.expiration_ms)
                        .min();
                    assert_eq!(timer.next_expiration_ms(), earliest);
                }
            }
        }
        while timer.advance_clock(0) {}
        barrier(&timer);
        let now_ms = time.hi_res_clock_ms();
        check(&tasks, now_ms, true);
        let pending = tasks
            .iter()
            .filter(|t| !t.cancelled && t.record.runs.load(Ordering::SeqCst) == 0)
            .count();
        assert_eq!(timer.size(), pending);
        timer.close();
        for (id, task) in tasks.iter().enumerate() {
            assert_eq!(task.record.drops.load(Ordering::SeqCst), 1, "task {id}");
        }
    }

    /// The entries a call leaves in an unfinished flush are in no queued list: the next
    /// expiration is found among them. (Added newest first, so the flush re-adds the latest
    /// first and leaves the earliest behind.)
    #[test]
    fn next_expiration_sees_the_entries_a_flush_left_unfinished() {
        let time = MockTime::new();
        let start = time.hi_res_clock_ms();
        // Start on a 20 ms boundary: level 1's early list for [+40, +50) is due at +30,
        // and not urgent before +35.
        time.sleep(20 - start.rem_euclid(20));
        let start = time.hi_res_clock_ms();
        let timer = SystemTimer::builder("unfinished")
            .time(time.clone())
            .chunking(1, 1)
            .build();
        for delay in [47, 46, 45] {
            timer.add(timer_task(delay, || {}));
        }
        time.sleep(30);
        assert!(
            timer.advance_clock(0),
            "one entry of the early list moved down"
        );
        assert!(
            timer.flusher.has_unfinished(),
            "the rest is left for the next call"
        );
        assert_eq!(timer.next_expiration_ms(), Some(start + 45));
        while timer.advance_clock(0) {}
        assert!(!timer.flusher.has_unfinished());
        assert_eq!(timer.next_expiration_ms(), Some(start + 45));
    }

    /// Cases per run: 64, or `PROPTEST_CASES`.
    fn cases() -> u32 {
        std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|cases| cases.parse().ok())
            .unwrap_or(64)
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => prop_oneof![1..=40i64, 1..=3_000i64, 1..=200_000i64].prop_map(Op::Add),
            2 => any::<usize>().prop_map(Op::Cancel),
            3 => (prop_oneof![0..=30i64, 0..=3_000i64], 1..=3u8).prop_map(|(ms, calls)| Op::Step(ms, calls)),
            // Past the 49 days after which a level's bucket numbers count from a new epoch.
            1 => (Just(1_i64 << 32), 1..=3u8).prop_map(|(ms, calls)| Op::Step(ms, calls)),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(cases()))]

        #[test]
        fn adds_cancels_and_clock_steps_between_the_chunks_of_a_flush_agree_with_the_model(
            (tick_ms, wheel_size) in prop_oneof![Just((1, 20)), Just((1, 3)), Just((3, 2)), Just((2, 1))],
            chunk in 1..=3usize,
            budget in 1..=4usize,
            ops in proptest::collection::vec(op(), 1..300),
        ) {
            run_model(tick_ms, wheel_size, chunk, budget, &ops);
        }
    }
}
