//! The flush scheduler: how `advance_clock` moves the entries of due lists on, a chunk at a
//! time, most urgent first. Kafka flushes each due bucket whole under its write lock; this is
//! that work, cut up so that a million timers expiring together hold up neither the threads
//! that add nor the tasks that are due.
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
//!   may be due. Once a call has re-added [`FLUSH_BUDGET`] entries of flushes still far
//!   from due, it leaves them in `unfinished` for the next call, which first waits up to
//!   [`FLUSH_PAUSE_MS`] for a due list: Linux tends to queue a woken thread on its waker's
//!   processor, and the pause lets an executor just woken run before the driver goes on.
//!   Lowest-level lists, and flushes past half of their lead, finish within the call.
//! - `unfinished` is a leaf mutex: taken with no lock held at the start and the end of a
//!   call, and under the write lock by `close` and `stop`; nothing is taken under it.
//! - Every entry that comes due under a shard's lock — in a flush, an `add` or a
//!   `reschedule` — goes through [`Expiring`]: out of the store into a batch for the
//!   executor, or, on a timer with `max_in_flight`, into the shard's backlog.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use parking_lot::Mutex;

use crate::delay_queue::{Due, deadline_after};
use crate::executor::Executor;
use crate::store::shard::{Count, Entry, ReadGuard, ShardState, StripedRwLock};
use crate::task::Expired;
use crate::time::Time;
use crate::timer_task_list::TimerTaskList;
use crate::timing_wheel::{BucketQueue, TimingWheel};

/// Entries a flush re-adds per lock hold, so that an `add` or `cancel` on the same stripe
/// waits for at most one chunk; 512 and 32 were measured worse
/// (runs of an earlier design, in git's history of `docs/performance.md`).
const FLUSH_CHUNK: usize = 64;

/// Entries of flushes not yet urgent that one `advance_clock` call re-adds.
const FLUSH_BUDGET: usize = 8 * 1024;

/// How long a call waits for a due list before it goes on with an unfinished flush.
const FLUSH_PAUSE_MS: i64 = 1;

/// The parts of a `SystemTimer` a flush works on.
pub(super) struct Parts<'a> {
    pub(super) queue: &'a BucketQueue,
    pub(super) wheel: &'a StripedRwLock<TimingWheel>,
    pub(super) executor: &'a Executor,
    pub(super) closed: &'a AtomicBool,
    pub(super) time: &'a dyn Time,
}

impl Parts<'_> {
    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }
}

/// The flush scheduler's state: how it cuts flushes up, and what an earlier call left.
#[derive(Debug)]
pub(super) struct Flusher {
    chunk: usize,
    budget: usize,
    /// Flushes an earlier `advance_clock` call left for the next one.
    unfinished: Mutex<Vec<Flush>>,
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

impl Default for Flusher {
    fn default() -> Flusher {
        Flusher::new(FLUSH_CHUNK, FLUSH_BUDGET)
    }
}

impl Flusher {
    /// Chunks of `chunk` entries, `budget` entries of flushes not yet urgent per call.
    pub(super) fn new(chunk: usize, budget: usize) -> Flusher {
        assert!(chunk > 0 && budget > 0);
        let unfinished = Mutex::new(Vec::new());
        Flusher {
            chunk,
            budget,
            unfinished,
        }
    }

    /// Appends, for every flush an earlier call left unfinished, the earliest expiration
    /// its entries can have and its list's id.
    pub(super) fn unfinished_lists(&self, out: &mut Vec<(i64, u32)>) {
        let unfinished = self.unfinished.lock();
        out.extend(unfinished.iter().map(|f| (f.deadline_ms, f.list.id())));
    }

    /// True if an earlier call left flushes unfinished.
    pub(super) fn has_unfinished(&self) -> bool {
        !self.unfinished.lock().is_empty()
    }

    /// Drops the unfinished flushes (their entries were cleared with the store).
    pub(super) fn forget_unfinished(&self) {
        self.unfinished.lock().clear();
    }

    /// Waits for the next due list, until `deadline` (`None`: none): `None` once it passed.
    /// With flushes unfinished it waits at most the pause, and then returns `Some(None)`.
    pub(super) fn poll(
        &self,
        queue: &BucketQueue,
        deadline: Option<Instant>,
    ) -> Option<Option<Due<Arc<TimerTaskList>>>> {
        if !self.has_unfinished() {
            return queue.poll_until(deadline).map(Some);
        }
        let pause = deadline_after(FLUSH_PAUSE_MS);
        Some(queue.poll_until(pause.min(deadline).or(pause)))
    }

    /// Flushes `first` (a list the caller polled), every other due list, and what an
    /// earlier call left unfinished, most urgent first, within this call's budget: of
    /// flushes not yet urgent, or, in a `turn` of a driver shared with other timers, of all
    /// (the rest waits for the next turn). Returns true if a flush moved on.
    pub(super) fn flush(
        &self,
        first: Option<Due<Arc<TimerTaskList>>>,
        parts: &Parts<'_>,
        turn: bool,
    ) -> bool {
        let mut flushes = std::mem::take(&mut *self.unfinished.lock());
        let mut due: Vec<_> = first.into_iter().collect();
        let mut flushed = false;
        let mut budget = self.budget;
        loop {
            due.extend(parts.queue.poll());
            if !due.is_empty() && !begin_flushes(&mut due, &mut flushes, parts) {
                return flushed;
            }
            let Some(next) = (0..flushes.len()).min_by_key(|&at| {
                let flush = &flushes[at];
                (flush.deadline_ms, flush.list.id())
            }) else {
                return flushed;
            };
            let urgent = !turn && parts.time.hi_res_clock_ms() >= flushes[next].urgent_ms;
            if budget == 0 && !urgent {
                self.unfinished.lock().append(&mut flushes);
                return true;
            }
            let Some((count, done)) = self.flush_chunk(&mut flushes[next], parts) else {
                return flushed;
            };
            flushed = true;
            if !urgent {
                budget = budget.saturating_sub(count);
            }
            if done {
                flushes.swap_remove(next);
            }
        }
    }

    /// Re-adds up to a chunk of entries of `flush`, one stripe at a time, handing the
    /// expired ones to the executor. Returns how many it re-added and whether the flush is
    /// done, or `None` if the timer is closed.
    fn flush_chunk(&self, flush: &mut Flush, parts: &Parts<'_>) -> Option<(usize, bool)> {
        let mut count = 0;
        while flush.stripe < parts.wheel.stripes() {
            let mut expiring = Expiring::batched(parts.executor);
            let mut read = parts.wheel.read_urgent(flush.stripe);
            if parts.is_closed() {
                return None;
            }
            let wheel = read.value();
            let id = flush.list.id();
            let flushed = read.shard().flush(id, self.chunk - count, |shard, entry| {
                add_timer_task_entry(wheel, shard, entry, &mut expiring);
            });
            read.count(Count::Cascaded, (flushed - expiring.len()) as u64);
            count += flushed;
            expiring.finish(parts.executor, read);
            if count == self.chunk {
                return Some((count, false));
            }
            flush.stripe += 1;
        }
        Some((count, true))
    }
}

/// Takes every due list out of `due` and the delay queue, moves the wheel's clocks to the
/// latest clock reading among them, and detaches each list in every shard (write lock).
/// Returns false if the timer is closed.
fn begin_flushes(
    due: &mut Vec<Due<Arc<TimerTaskList>>>,
    flushes: &mut Vec<Flush>,
    parts: &Parts<'_>,
) -> bool {
    due.extend(std::iter::from_fn(|| parts.queue.poll()));
    let mut write = parts.wheel.write();
    if parts.is_closed() {
        return false;
    }
    if let Some(now_ms) = due.iter().map(|d| d.now_ms).max() {
        // The clock's reading, not the list's expiration (Kafka): one flush then expires
        // everything due, and the wheels never run ahead of the clock.
        write.value().advance_clock(now_ms, &write);
    }
    for Due { value, due_ms, .. } in due.drain(..) {
        // Queued again for another time since, or already flushed: stale.
        if value.expiration_ms() != due_ms {
            continue;
        }
        value.reset_expiration();
        for shard in write.shards_mut() {
            shard.detach(value.id());
        }
        flushes.push(Flush {
            deadline_ms: value.earliest_expiration_ms(due_ms),
            urgent_ms: due_ms.saturating_add(value.slack_ms() / 2),
            stripe: 0,
            list: value,
        });
    }
    true
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
/// they stay pending until a refill hands them over (see `backlog`). Its methods are
/// `#[inline]` so that `add` and `reschedule`, in other codegen units, inline them.
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
        let hold = executor.is_bounded();
        Expiring {
            batch: Vec::new(),
            hold,
            held: 0,
        }
    }

    /// For a flush chunk: a batch buffer taken before the shard is locked (a new one is an
    /// allocation, and none is made under the lock).
    fn batched(executor: &Executor) -> Expiring {
        let mut expiring = Expiring::unbatched(executor);
        if !expiring.hold {
            expiring.batch = executor.batch();
        }
        expiring
    }

    /// Takes the due `entry` of `shard`, unlisted, out of the store into the batch, or holds
    /// it in the backlog.
    #[inline]
    pub(super) fn expire(&mut self, shard: &mut ShardState, entry: Entry) {
        if self.hold {
            shard.hold(entry.index);
            self.held += 1;
        } else {
            let task = shard.remove(entry.index);
            let expiration_ms = entry.expiration_ms;
            self.batch.push(Expired {
                task,
                expiration_ms,
            });
        }
    }

    /// Returns how many entries came due.
    #[inline]
    pub(super) fn len(&self) -> usize {
        self.batch.len() + self.held
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

    /// The earliest expiration of list `id` over the timer's shards.
    fn list_min(timer: &SystemTimer, id: u32) -> Option<i64> {
        let stripes = timer.timing_wheel.stripes();
        let reads =
            (0..stripes).map(|stripe| timer.timing_wheel.read(stripe).shard().min_expiration(id));
        reads.flatten().min()
    }

    /// A reschedule to a later deadline stores it in the slot and leaves the entry in its
    /// list; the list's flush moves it on, once, by its own expiration. An earlier deadline
    /// moves it at once.
    #[test]
    fn a_later_deadline_leaves_the_entry_in_its_list_until_the_list_comes_due() {
        let time = MockTime::new();
        let timer = SystemTimer::builder("lazy").time(time.clone()).build();
        let now = time.hi_res_clock_ms();
        let id_of = |expiration_ms| {
            let read = timer.timing_wheel.read(0);
            read.value().place(expiration_ms).unwrap().list.id()
        };
        let (first, later) = (id_of(now + 10), id_of(now + 15_000));
        let entry = timer.add(timer_task(10, || {}));
        for delay in [100, 5_000, 15_000] {
            assert!(timer.reschedule(&entry, delay));
            assert_eq!(
                list_min(&timer, first),
                Some(now + delay),
                "still in its first list"
            );
        }
        assert_eq!(list_min(&timer, later), None);
        time.sleep(10);
        assert!(timer.advance_clock(0), "its first list came due");
        assert_eq!(list_min(&timer, first), None);
        assert_eq!(timer.cascades(), 1, "moved on once");
        assert_eq!(timer.next_expiration_ms(), Some(now + 15_000));
        assert!(timer.reschedule(&entry, 1), "earlier: moved at once");
        assert_eq!(timer.next_expiration_ms(), Some(now + 11));
        assert_eq!(timer.cascades(), 1, "a move is not a flush's");
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
