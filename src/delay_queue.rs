//! A blocking queue of items that become due at a time (Java's `DelayQueue`).
//!
//! # Ground rules
//!
//! - One [`Mutex`] guards the heap, the sequence counter and the closed flag; one
//!   [`Condvar`] wakes pollers. It is a leaf, offered to under a shard's mutex (see
//!   `crate::lock_order`). No user code runs under the lock but the queue's `Time`, which
//!   a timer may have been given by its caller.
//! - Waiting is never busy: a poller sleeps until the head item is due, its timeout passes,
//!   an earlier item is offered, or the queue is closed. An item is due once the clock's
//!   `hi_res_clock_ms()` reaches its due time, and the wait until then comes from one place,
//!   `time::time_until_ms`, exact over the whole `i64` millisecond range.
//! - An item can go stale (its owner was queued again for an earlier time, or flushed by
//!   another item): the owner says so through the queue's `is_stale` function. A poll
//!   drops stale items as they come due and goes on waiting, so it returns only live ones
//!   (an item can still go stale after it was taken: its taker checks again). Stale items
//!   are also pruned once they could make up half the queue, so the queue stays as large
//!   as the number of live items, not the number of offers ever made.
//! - The heap's buffer is allocated whole when the queue is made ([`MIN_PRUNE_AT`] items,
//!   24 KiB for a timer's lists), grows only with the live items, and shrinks only once
//!   they fall to a quarter of it. An offer is made by the driver in the middle of a
//!   flush, under a shard's lock, where an allocation may cost glibc a consolidation of
//!   the arena's freed chunks: 29 ms, measured on an earlier design (git's history of
//!   docs/performance.md).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fmt;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::time::{Time, time_until_ms};

/// A condvar-based delay queue: items ordered by due time, taken only once due.
pub(crate) struct DelayQueue<T> {
    time: Arc<dyn Time>,
    /// True for an item that no longer stands for anything (see the ground rules).
    is_stale: fn(&T, i64) -> bool,
    state: Mutex<State<T>>,
    available: Condvar,
    /// Called, besides waking the pollers, when an offer makes a new head: the wake-up of a
    /// shared driver that does not poll this queue (see `system_timer_reaper`).
    waker: OnceLock<Box<dyn Fn() + Send + Sync>>,
}

struct State<T> {
    heap: BinaryHeap<Reverse<Item<T>>>,
    /// Breaks ties between equal due times in offer order.
    next_seq: u64,
    /// The heap is pruned of stale items when it reaches this length.
    prune_at: usize,
    closed: bool,
}

/// An item taken out of the queue: the value, the due time it was offered with, and the
/// clock's reading that found it due.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Due<T> {
    pub(crate) value: T,
    pub(crate) due_ms: i64,
    pub(crate) now_ms: i64,
}

/// The queue is never pruned below this length.
const MIN_PRUNE_AT: usize = 1024;

struct Item<T> {
    due_ms: i64,
    seq: u64,
    value: T,
}

impl<T> PartialEq for Item<T> {
    fn eq(&self, other: &Self) -> bool {
        (self.due_ms, self.seq) == (other.due_ms, other.seq)
    }
}
impl<T> Eq for Item<T> {}
impl<T> PartialOrd for Item<T> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl<T> Ord for Item<T> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.due_ms, self.seq).cmp(&(other.due_ms, other.seq))
    }
}

impl<T> DelayQueue<T> {
    /// Creates an empty queue whose items go stale when `is_stale(value, due_ms)` says so.
    pub(crate) fn pruning(time: Arc<dyn Time>, is_stale: fn(&T, i64) -> bool) -> Self {
        DelayQueue {
            time,
            is_stale,
            state: Mutex::new(State {
                heap: BinaryHeap::with_capacity(MIN_PRUNE_AT),
                next_seq: 0,
                prune_at: MIN_PRUNE_AT,
                closed: false,
            }),
            available: Condvar::new(),
            waker: OnceLock::new(),
        }
    }

    /// Sets what an offer that makes a new head calls, once.
    pub(crate) fn set_waker(&self, waker: impl Fn() + Send + Sync + 'static) {
        let _ = self.waker.set(Box::new(waker));
    }

    /// Returns how long until the head is due (zero once it is), or `None` when the queue
    /// is empty or closed.
    pub(crate) fn time_until_head(&self) -> Option<Duration> {
        let state = self.state.lock();
        let head = state.heap.peek().filter(|_| !state.closed)?;
        Some(time_until_ms(&*self.time, head.0.due_ms))
    }

    /// Adds `value`, due at `due_ms`. Wakes the pollers if it is the new head. Dropped at
    /// once if the queue is closed.
    pub(crate) fn offer(&self, value: T, due_ms: i64) {
        let mut state = self.state.lock();
        if state.closed {
            return;
        }
        let seq = state.next_seq;
        state.next_seq += 1;
        state.heap.push(Reverse(Item { due_ms, seq, value }));
        let is_head = state.heap.peek().is_some_and(|head| head.0.seq == seq);
        if state.heap.len() >= state.prune_at {
            let is_stale = self.is_stale;
            state
                .heap
                .retain(|Reverse(item)| !is_stale(&item.value, item.due_ms));
            state.prune_at = (state.heap.len() * 2).max(MIN_PRUNE_AT);
            let wanted = state.prune_at;
            if state.heap.capacity() > 4 * wanted {
                state.heap.shrink_to(wanted);
            }
        }
        drop(state);
        if is_head {
            self.available.notify_all();
            if let Some(waker) = self.waker.get() {
                waker();
            }
        }
    }

    /// Removes and returns the head if it is due now; never waits.
    pub(crate) fn poll(&self) -> Option<Due<T>> {
        let mut state = self.state.lock();
        let now_ms = self.time.hi_res_clock_ms();
        self.take_due(&mut state, now_ms)
    }

    /// Removes and returns the head and its due time once it is due, waiting until
    /// `deadline` at most (`None`: no deadline). Returns `None` once the deadline passed, or
    /// at once when the queue is closed.
    pub(crate) fn poll_until(&self, deadline: Option<Instant>) -> Option<Due<T>> {
        let mut state = self.state.lock();
        loop {
            if state.closed {
                return None;
            }
            let now_ms = self.time.hi_res_clock_ms();
            if let Some(due) = self.take_due(&mut state, now_ms) {
                return Some(due);
            }
            let real_now = Instant::now();
            let left = match deadline {
                Some(deadline) if deadline <= real_now => return None,
                Some(deadline) => deadline - real_now,
                None => Duration::MAX,
            };
            // Zero only if the head became due since `now_ms` was read: then loop once more.
            // Past the end of the nanosecond range a saturating wait would be zero while
            // nothing is due, and the poll would spin.
            let wait = match state.heap.peek() {
                Some(head) => left.min(time_until_ms(&*self.time, head.0.due_ms)),
                None => left,
            };
            match Instant::now().checked_add(wait) {
                Some(until) => {
                    self.available.wait_until(&mut state, until);
                }
                None => self.available.wait(&mut state),
            }
        }
    }

    /// Removes and returns the head if it is due at `now_ms`, dropping the stale items due
    /// before it.
    fn take_due(&self, state: &mut State<T>, now_ms: i64) -> Option<Due<T>> {
        loop {
            if state.heap.peek()?.0.due_ms > now_ms {
                return None;
            }
            let Reverse(item) = state.heap.pop()?;
            if !(self.is_stale)(&item.value, item.due_ms) {
                return Some(Due {
                    value: item.value,
                    due_ms: item.due_ms,
                    now_ms,
                });
            }
        }
    }

    /// Drops every item, refuses later offers and makes every poll, current or future,
    /// return `None` at once.
    pub(crate) fn close(&self) {
        let items = {
            let mut state = self.state.lock();
            state.closed = true;
            std::mem::take(&mut state.heap)
        };
        self.available.notify_all();
        drop(items);
    }
}

/// The instant `timeout_ms` from now (zero or negative: now), or `None` past the end of
/// `Instant`'s range: the deadline of a poll that waits `timeout_ms`.
pub(crate) fn deadline_after(timeout_ms: i64) -> Option<Instant> {
    Instant::now().checked_add(Duration::from_millis(timeout_ms.max(0) as u64))
}

impl<T> fmt::Debug for DelayQueue<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DelayQueue").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl<T> DelayQueue<T> {
        /// Creates an empty queue whose due times are read on `time`'s
        /// [`hi_res_clock_ms`](Time::hi_res_clock_ms).
        pub(crate) fn new(time: Arc<dyn Time>) -> Self {
            DelayQueue::pruning(time, |_, _| false)
        }

        /// Removes and returns the head and its due time once it is due, waiting at most
        /// `timeout_ms` (zero or negative: not at all). Returns `None` on timeout, or at once
        /// when the queue is closed.
        pub(crate) fn poll_timeout(&self, timeout_ms: i64) -> Option<Due<T>> {
            self.poll_until(deadline_after(timeout_ms))
        }

        /// Returns the number of items, due or not.
        pub(crate) fn len(&self) -> usize {
            self.state.lock().heap.len()
        }

        /// Returns how many items the heap's buffer holds without growing.
        fn capacity(&self) -> usize {
            self.state.lock().heap.capacity()
        }
    }
    use crate::mock::MockTime;
    use crate::time::SystemClock;
    use std::thread;

    fn mock_queue() -> (MockTime, DelayQueue<&'static str>) {
        let time = MockTime::new();
        (time.clone(), DelayQueue::new(Arc::new(time)))
    }

    /// Kafka's `TimerTaskListTest.testGetDelay`, in this port's terms: a bucket due 10 s
    /// from now is not handed out after 5 s, and is after 10 s.
    #[test]
    fn a_bucket_is_due_at_its_expiration_and_not_before() {
        let (time, queue) = mock_queue();
        queue.offer("bucket", time.hi_res_clock_ms() + 10_000);
        time.sleep(5_000);
        assert_eq!(queue.poll(), None);
        time.sleep(4_999);
        assert_eq!(queue.poll(), None);
        time.sleep(1);
        assert_eq!(queue.poll().map(|due| due.value), Some("bucket"));
    }

    /// A stale item that comes due is dropped, and the poll waits on for a live one
    /// instead of returning it (or returning empty-handed before its timeout).
    #[test]
    fn a_poll_drops_stale_items_and_waits_for_a_live_one() {
        let time = SystemClock;
        let queue = DelayQueue::pruning(Arc::new(time), |value: &&str, _| *value == "stale");
        let now = time.hi_res_clock_ms();
        queue.offer("stale", now);
        queue.offer("live", now + 30);
        let due = queue.poll_timeout(10_000).map(|due| due.value);
        assert_eq!(due, Some("live"));
        assert_eq!(queue.len(), 0, "the stale item was dropped");
    }

    #[test]
    fn due_items_come_out_in_due_order_then_offer_order() {
        let (time, queue) = mock_queue();
        let now = time.hi_res_clock_ms();
        queue.offer("c", now + 3);
        queue.offer("a", now + 1);
        queue.offer("b1", now + 2);
        queue.offer("b2", now + 2);
        time.sleep(3);
        let order: Vec<_> = std::iter::from_fn(|| queue.poll())
            .map(|due| (due.value, due.due_ms))
            .collect();
        assert_eq!(
            order,
            [
                ("a", now + 1),
                ("b1", now + 2),
                ("b2", now + 2),
                ("c", now + 3)
            ]
        );
        assert_eq!(queue.len(), 0);
    }

    #[test]
    fn poll_timeout_waits_at_least_the_timeout_when_nothing_is_due() {
        let queue: DelayQueue<u8> = DelayQueue::new(Arc::new(SystemClock));
        let start = Instant::now();
        assert_eq!(queue.poll_timeout(30), None);
        let waited = start.elapsed();
        assert!(waited >= Duration::from_millis(30), "{waited:?}");
        assert!(waited < Duration::from_secs(5), "{waited:?}");
        assert_eq!(queue.poll_timeout(0), None);
        assert_eq!(queue.poll_timeout(-5), None);
    }

    #[test]
    fn poll_timeout_returns_the_head_once_due_not_before() {
        let queue = DelayQueue::new(Arc::new(SystemClock));
        let due = SystemClock.hi_res_clock_ms() + 40;
        queue.offer(7, due);
        let got = queue.poll_timeout(10_000).map(|d| (d.value, d.due_ms));
        assert_eq!(got, Some((7, due)));
        assert!(SystemClock.hi_res_clock_ms() >= due);
    }

    #[test]
    fn an_earlier_offer_wakes_a_waiting_poller() {
        let queue = Arc::new(DelayQueue::new(Arc::new(SystemClock)));
        queue.offer("late", SystemClock.hi_res_clock_ms() + 60_000);
        let poller = {
            let queue = Arc::clone(&queue);
            thread::spawn(move || {
                let start = Instant::now();
                (queue.poll_timeout(30_000), start.elapsed())
            })
        };
        thread::sleep(Duration::from_millis(50));
        let due = SystemClock.hi_res_clock_ms() + 20;
        queue.offer("early", due);
        let (got, waited) = poller.join().unwrap();
        assert_eq!(got.map(|d| (d.value, d.due_ms)), Some(("early", due)));
        assert!(waited < Duration::from_secs(10), "{waited:?}");
    }

    #[test]
    fn close_wakes_pollers_and_refuses_offers() {
        let queue = Arc::new(DelayQueue::<u8>::new(Arc::new(SystemClock)));
        let poller = {
            let queue = Arc::clone(&queue);
            thread::spawn(move || queue.poll_timeout(60_000))
        };
        thread::sleep(Duration::from_millis(50));
        let start = Instant::now();
        queue.close();
        assert_eq!(poller.join().unwrap(), None);
        assert!(start.elapsed() < Duration::from_secs(10));
        queue.offer(1, i64::MIN);
        assert_eq!(queue.len(), 0);
        assert_eq!(queue.poll_timeout(60_000), None);
    }

    #[test]
    fn stale_items_are_pruned_so_the_queue_follows_the_live_ones() {
        use std::sync::atomic::{AtomicI64, Ordering};
        // The owner is queued again for an earlier time on every offer (a count-down), as a
        // wheel of size 1 does when each add is due before the last.
        let owner = Arc::new(AtomicI64::new(i64::MAX));
        let queue: DelayQueue<Arc<AtomicI64>> =
            DelayQueue::pruning(Arc::new(MockTime::new()), |owner, due_ms| {
                owner.load(Ordering::SeqCst) != due_ms
            });
        for due in (0..100_000).rev() {
            owner.store(due, Ordering::SeqCst);
            queue.offer(Arc::clone(&owner), due);
            assert!(
                queue.len() <= 2 * MIN_PRUNE_AT,
                "{} items queued",
                queue.len()
            );
        }
        assert_eq!(Arc::strong_count(&owner) - 1, queue.len());
    }

    #[test]
    fn the_heap_is_allocated_up_front_and_reallocated_only_as_the_live_items_change() {
        use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
        let owner = Arc::new(AtomicI64::new(i64::MAX));
        let queue: DelayQueue<Arc<AtomicI64>> =
            DelayQueue::pruning(Arc::new(MockTime::new()), |owner, due_ms| {
                owner.load(Ordering::SeqCst) != due_ms
            });
        let initial = queue.capacity();
        assert!(initial >= MIN_PRUNE_AT, "capacity {initial} up front");
        // Stale items pile up and are pruned, many times over: the buffer never moves.
        for due in (0..20 * MIN_PRUNE_AT as i64).rev() {
            owner.store(due, Ordering::SeqCst);
            queue.offer(Arc::clone(&owner), due);
            assert_eq!(queue.capacity(), initial, "after the offer due at {due}");
        }
        // Live items beyond it grow the buffer; once they have gone stale and are pruned,
        // it shrinks back.
        let gone = Arc::new(AtomicBool::new(false));
        let queue: DelayQueue<Arc<AtomicBool>> =
            DelayQueue::pruning(Arc::new(MockTime::new()), |gone, _| {
                gone.load(Ordering::SeqCst)
            });
        for due in 0..8 * MIN_PRUNE_AT as i64 {
            queue.offer(Arc::clone(&gone), due);
        }
        let grown = queue.capacity();
        assert!(
            grown >= 8 * MIN_PRUNE_AT,
            "capacity {grown} for the live items"
        );
        gone.store(true, Ordering::SeqCst);
        let mut due = 0;
        while queue.capacity() >= grown && due < 64 * MIN_PRUNE_AT as i64 {
            queue.offer(Arc::clone(&gone), due);
            due += 1;
        }
        assert!(
            queue.capacity() <= 4 * MIN_PRUNE_AT,
            "capacity {} once the items went stale (from {grown})",
            queue.capacity()
        );
    }
}
