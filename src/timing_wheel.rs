//! A hierarchical timing wheel (Kafka's `TimingWheel`; Varghese & Lauck, 1987).
//!
//! A wheel has `wheel_size` buckets, each one tick (`tick_ms`) wide, so it spans
//! `interval_ms = tick_ms * wheel_size`. Its current time is always a multiple of its tick.
//! An entry whose expiration is inside `[current_time_ms + tick_ms, current_time_ms +
//! interval_ms)` goes into bucket `(expiration_ms / tick_ms) % wheel_size` of this wheel;
//! an earlier one is expired (it goes to the executor); a later one goes to the overflow
//! wheel, whose tick is this wheel's interval. Overflow wheels are created on demand.
//!
//! Each bucket is offered to the shared delay queue when its expiration changes. When the
//! queue hands out a due bucket, the timer advances every wheel to the bucket's
//! expiration and re-adds each of the bucket's entries: an entry of a higher wheel moves
//! down to a finer one, or, once within one tick of the current time, expires.
//!
//! # An example (u = 1 ms, n = 3), after Kafka's javadoc
//!
//! Let the current time be `c`. The buckets of the levels hold:
//!
//! ```text
//! level  tick  interval  buckets (expiration ranges)
//!   1      1       3     [c, c]       [c+1, c+1]   [c+2, c+2]
//!   2      3       9     [c, c+2]     [c+3, c+5]   [c+6, c+8]
//!   3      9      27     [c, c+8]     [c+9, c+17]  [c+18, c+26]
//! ```
//!
//! The buckets of level 1 expire at `c+1`, `c+2`, `c+3`. An entry due at `c+5` sits in
//! level 2's bucket `[c+3, c+5]`. At `c+3` level 2's bucket expires: its entries move to
//! level 1 (the `c+5` one into bucket `[c+5, c+5]`), and level 2's current time moves to
//! `c+3`. At `c+9` level 3's bucket `[c+9, c+17]` expires and its entries move down to
//! level 2 and 1 the same way. A level's current time only moves in steps of its own tick.
//!
//! # Ground rules
//!
//! - The whole hierarchy sits behind the timer's reader-writer lock (a
//!   [`ShardedRwLock`](crate::sharded_rw_lock::ShardedRwLock)): `add` runs under the read
//!   lock, [`advance_clock`](TimingWheel::advance_clock) under the write lock, which it
//!   proves with a [`WriteProof`]. So a flush never sees a concurrent add. The read side
//!   is striped, so the wheel is reached through `&self` only, and `current_time_ms` is an
//!   atomic; the lock orders its accesses (`Relaxed` suffices).
//! - The overflow wheel is a [`OnceLock`]: two adds under the read lock may race to create
//!   it; one wins, both use it.
//! - Arithmetic saturates. The level whose interval saturates, or whose range reaches
//!   `i64::MAX`, or a wheel of size 1 (whose overflow would never grow), keeps every later
//!   entry itself: it is the top, and no wheel is created above it. Two virtual ids may then
//!   share a bucket; that costs an extra flush, never a late or lost entry, because the
//!   timer advances to the due time the bucket was queued with and re-adds what is not yet
//!   due.
//!
//! # Differences from Kafka
//!
//! Bucket numbers use floor division (`div_euclid`/`rem_euclid`), so negative clock values
//! work; Kafka's `/` and `%` would index a negative bucket.

use std::fmt;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, OnceLock};

use crate::delay_queue::DelayQueue;
use crate::entry_store::{MAX_LIST_ID, Slab};
use crate::sharded_rw_lock::WriteProof;
use crate::timer_task_list::TimerTaskList;

/// The queue every wheel of a hierarchy offers its buckets to.
pub(crate) type BucketQueue = DelayQueue<Arc<TimerTaskList>>;

/// One level of the hierarchy, owning the levels above it.
pub(crate) struct TimingWheel {
    tick_ms: i64,
    wheel_size: usize,
    interval_ms: i64,
    /// Written only under the write lock; read under the read lock.
    current_time_ms: AtomicI64,
    buckets: Box<[Arc<TimerTaskList>]>,
    /// The first bucket id of this level; level `k` uses ids `k * wheel_size ..`.
    first_bucket_id: u32,
    queue: Arc<BucketQueue>,
    overflow_wheel: OnceLock<Box<TimingWheel>>,
}

impl TimingWheel {
    /// Creates the lowest level of a hierarchy.
    ///
    /// # Panics
    ///
    /// Panics if `tick_ms <= 0`, `wheel_size == 0`, or the hierarchy's bucket count
    /// (`wheel_size` times its number of levels) would not fit the entry store's ids.
    #[track_caller]
    pub(crate) fn new(
        tick_ms: i64,
        wheel_size: usize,
        start_ms: i64,
        queue: Arc<BucketQueue>,
    ) -> TimingWheel {
        assert!(tick_ms > 0, "tick_ms must be positive, got {tick_ms}");
        assert!(
            wheel_size > 0,
            "wheel_size must be positive, got {wheel_size}"
        );
        let levels = level_count(tick_ms, wheel_size);
        assert!(
            (levels as u128) * (wheel_size as u128) < u128::from(MAX_LIST_ID),
            "wheel_size {wheel_size} needs {levels} levels of buckets: more than {MAX_LIST_ID} in all"
        );
        TimingWheel::level(tick_ms, wheel_size, clamp_start(start_ms), queue, 0)
    }

    fn level(
        tick_ms: i64,
        wheel_size: usize,
        start_ms: i64,
        queue: Arc<BucketQueue>,
        first_bucket_id: u32,
    ) -> TimingWheel {
        let size = i64::try_from(wheel_size).unwrap_or(i64::MAX);
        TimingWheel {
            tick_ms,
            wheel_size,
            interval_ms: tick_ms.saturating_mul(size),
            current_time_ms: AtomicI64::new(round_down(start_ms, tick_ms)),
            buckets: (0..wheel_size)
                .map(|i| Arc::new(TimerTaskList::new(first_bucket_id + i as u32)))
                .collect(),
            first_bucket_id,
            queue,
            overflow_wheel: OnceLock::new(),
        }
    }

    fn overflow_wheel(&self) -> &TimingWheel {
        self.overflow_wheel.get_or_init(|| {
            Box::new(TimingWheel::level(
                self.interval_ms,
                self.wheel_size,
                self.current_time_ms(),
                Arc::clone(&self.queue),
                self.first_bucket_id + self.wheel_size as u32,
            ))
        })
    }

    /// True if this level keeps every entry past its own range (nothing above it).
    fn is_top(&self) -> bool {
        self.wheel_size == 1
            || self.interval_ms == i64::MAX
            || self.current_time_ms().saturating_add(self.interval_ms) == i64::MAX
    }

    /// Puts the entry in slot `index` of `slab` into its bucket, at this level or above.
    /// Returns false, touching nothing, if it is already expired: due before
    /// `current_time_ms + tick_ms`.
    ///
    /// The bucket is offered to the delay queue only when its expiration changes. (Kafka
    /// also returns false for a cancelled entry; here a cancelled entry is no longer in
    /// the store, so it cannot be added.)
    pub(crate) fn add(&self, slab: &mut Slab, index: u32) -> bool {
        let expiration_ms = slab.expiration_ms(index);
        // Kafka recurses into the overflow wheel; this walks up the same chain.
        let mut wheel = self;
        loop {
            let current_time_ms = wheel.current_time_ms();
            if expiration_ms < current_time_ms.saturating_add(wheel.tick_ms) {
                return false;
            }
            if expiration_ms < current_time_ms.saturating_add(wheel.interval_ms) || wheel.is_top() {
                wheel.add_to_bucket(slab, index, expiration_ms);
                return true;
            }
            wheel = wheel.overflow_wheel();
        }
    }

    /// Links the entry into this level's bucket for `expiration_ms`, and offers the bucket
    /// to the delay queue if its expiration changed.
    fn add_to_bucket(&self, slab: &mut Slab, index: u32, expiration_ms: i64) {
        let virtual_id = expiration_ms.div_euclid(self.tick_ms);
        let bucket = &self.buckets[virtual_id.rem_euclid(self.wheel_size as i64) as usize];
        bucket.add(slab, index);
        // virtual_id * tick_ms is within [expiration_ms - tick_ms, expiration_ms].
        let bucket_expiration_ms = virtual_id * self.tick_ms;
        if bucket.set_expiration(bucket_expiration_ms) {
            self.queue.offer(Arc::clone(bucket), bucket_expiration_ms);
        }
    }

    /// Moves this level's current time (and its overflow's) to `time_ms`, rounded down to
    /// a tick, if that is at least one tick ahead. The caller holds the write lock.
    pub(crate) fn advance_clock(&self, time_ms: i64, _write: &WriteProof<'_>) {
        let mut time_ms = time_ms;
        let mut level = Some(self);
        // Each level moves to the time its finer neighbour moved to, as long as that is a
        // tick of its own ahead (Kafka recurses; this walks up the same chain).
        while let Some(wheel) = level {
            if time_ms < wheel.current_time_ms().saturating_add(wheel.tick_ms) {
                break;
            }
            time_ms = round_down(time_ms, wheel.tick_ms);
            wheel.current_time_ms.store(time_ms, Ordering::Relaxed);
            level = wheel.overflow_wheel.get().map(|overflow| &**overflow);
        }
    }

    /// Returns this level's tick.
    pub(crate) fn tick_ms(&self) -> i64 {
        self.tick_ms
    }

    /// Returns this level's current time.
    pub(crate) fn current_time_ms(&self) -> i64 {
        self.current_time_ms.load(Ordering::Relaxed)
    }

    /// Returns the levels created so far, this one first.
    #[cfg(test)]
    pub(crate) fn levels(&self) -> Vec<&TimingWheel> {
        let mut levels = vec![self];
        while let Some(next) = levels.last().and_then(|w| w.overflow_wheel.get()) {
            levels.push(next);
        }
        levels
    }

    /// Returns bucket `i` of this level.
    #[cfg(test)]
    pub(crate) fn bucket(&self, i: usize) -> &Arc<TimerTaskList> {
        &self.buckets[i]
    }
}

/// Rounds `time_ms` down to a multiple of `tick_ms` (> 0), without overflow.
fn round_down(time_ms: i64, tick_ms: i64) -> i64 {
    time_ms - time_ms.rem_euclid(tick_ms)
}

/// Keeps start times away from `i64::MIN`, so that every bucket expiration (a multiple of
/// a tick at or below an entry's expiration) has room below it.
fn clamp_start(start_ms: i64) -> i64 {
    start_ms.max(i64::MIN / 2)
}

/// Returns how many levels a hierarchy can grow to before one level covers all of `i64`.
fn level_count(tick_ms: i64, wheel_size: usize) -> u32 {
    if wheel_size == 1 {
        return 1;
    }
    let size = i64::try_from(wheel_size).unwrap_or(i64::MAX);
    let mut tick = tick_ms;
    let mut levels = 1;
    while tick < i64::MAX / size {
        tick *= size;
        levels += 1;
    }
    levels + 1
}

impl fmt::Debug for TimingWheel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TimingWheel")
            .field("tick_ms", &self.tick_ms)
            .field("wheel_size", &self.wheel_size)
            .field("interval_ms", &self.interval_ms)
            .field("current_time_ms", &self.current_time_ms())
            .field("overflow_wheel", &self.overflow_wheel.get())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entry_store::EntryStore;
    use crate::{MockTime, TimerTask};

    struct Nop;
    impl TimerTask for Nop {
        fn delay_ms(&self) -> i64 {
            0
        }
        fn run(self: Box<Self>) {}
    }

    /// A wheel of Kafka's javadoc example (u = 1, n = 3) on a mock clock, with the drive
    /// loop of `SystemTimer::advance_clock` reduced to its steps.
    struct Example {
        time: MockTime,
        queue: Arc<BucketQueue>,
        store: EntryStore,
        wheel: TimingWheel,
        c: i64,
    }

    impl Example {
        fn new() -> Example {
            let time = MockTime::new();
            // A multiple of 27, so every level's buckets start at c.
            let c = time.hi_res_clock_ms() - time.hi_res_clock_ms().rem_euclid(27) + 27;
            time.sleep(c - time.hi_res_clock_ms());
            let queue = Arc::new(DelayQueue::new(Arc::new(time.clone())));
            let wheel = TimingWheel::new(1, 3, c, Arc::clone(&queue));
            Example {
                time,
                queue,
                store: EntryStore::with_shards(1),
                wheel,
                c,
            }
        }

        /// Adds an entry due at `c + offset`; returns false if it is already expired.
        fn add(&self, offset: i64) -> bool {
            let mut slab = self.store.shards()[0].lock();
            let key = slab.insert(Box::new(Nop), self.c + offset);
            let added = self.wheel.add(&mut slab, key.index);
            if !added {
                drop(slab.remove(key.index));
            }
            added
        }

        /// (level, bucket, bucket expiration - c) of every non-empty bucket.
        fn layout(&self) -> Vec<(usize, usize, i64)> {
            let mut out = Vec::new();
            for (level, wheel) in self.wheel.levels().into_iter().enumerate() {
                for i in 0..wheel.wheel_size {
                    let bucket = wheel.bucket(i);
                    let mut n = 0;
                    bucket.for_each(&self.store, |_, _| n += 1);
                    if n > 0 {
                        out.push((level + 1, i, bucket.expiration_ms() - self.c));
                    }
                }
            }
            out.sort();
            out
        }

        /// Moves the clock one ms and returns the expirations (- c) that fired.
        fn step(&mut self) -> Vec<i64> {
            self.time.sleep(1);
            let mut fired = Vec::new();
            while let Some((bucket, due_ms)) = self.queue.poll() {
                self.wheel.advance_clock(due_ms, &WriteProof::for_tests());
                let wheel = &self.wheel;
                drop(bucket.flush(&self.store, |slab, index| {
                    if !wheel.add(slab, index) {
                        fired.push(slab.expiration_ms(index) - self.c);
                        drop(slab.remove(index));
                    }
                }));
            }
            fired
        }
    }

    #[test]
    fn kafka_javadoc_example_layout_and_cascade() {
        let mut ex = Example::new();
        assert!(!ex.add(0), "due before c + u: already expired");
        for offset in [1, 2, 3, 5, 8, 9, 17, 26] {
            assert!(ex.add(offset));
        }
        // Level 1 holds c+1 and c+2; level 2 buckets [c+3, c+5] and [c+6, c+8]; level 3
        // buckets [c+9, c+17] and [c+18, c+26]. Bucket index = (expiration / tick) % 3.
        assert_eq!(
            ex.layout(),
            [
                (1, 1, 1),
                (1, 2, 2),
                (2, 1, 3),
                (2, 2, 6),
                (3, 1, 9),
                (3, 2, 18)
            ]
        );
        assert_eq!(ex.step(), [1]);
        assert_eq!(ex.step(), [2]);
        // At c+3 level 2's bucket expires: c+3 fires, c+5 moves down to level 1.
        assert_eq!(ex.step(), [3]);
        assert_eq!(ex.wheel.levels()[1].current_time_ms() - ex.c, 3);
        assert_eq!(ex.wheel.levels()[2].current_time_ms() - ex.c, 0);
        assert!(ex.layout().contains(&(1, 2, 5)));
        assert_eq!(ex.step(), []);
        assert_eq!(ex.step(), [5]);
        for _ in 6..8 {
            assert_eq!(ex.step(), []);
        }
        assert_eq!(ex.step(), [8]);
        // At c+9 level 3's bucket [c+9, c+17] expires and moves down.
        assert_eq!(ex.step(), [9]);
        assert_eq!(ex.wheel.levels()[2].current_time_ms() - ex.c, 9);
        // c+17 now sits in level 2's bucket [c+15, c+17]; c+26 still in level 3.
        assert_eq!(ex.layout(), [(2, 2, 15), (3, 2, 18)]);
        let mut fired = Vec::new();
        for _ in 10..=26 {
            fired.extend(ex.step());
        }
        assert_eq!(fired, [17, 26]);
        assert!(ex.layout().is_empty());
    }

    #[test]
    fn round_down_is_floor_for_negative_times() {
        assert_eq!(round_down(7, 3), 6);
        assert_eq!(round_down(-7, 3), -9);
        assert_eq!(round_down(i64::MAX, 1), i64::MAX);
        assert_eq!(
            round_down(i64::MIN / 2, 7),
            i64::MIN / 2 - (i64::MIN / 2).rem_euclid(7)
        );
    }

    #[test]
    fn level_count_stops_where_the_interval_saturates() {
        assert_eq!(level_count(1, 1), 1);
        // 20^k <= i64::MAX for k <= 14; one more level saturates.
        assert_eq!(level_count(1, 20), 16);
        assert_eq!(level_count(1, 2), 64);
        assert_eq!(level_count(i64::MAX, 2), 2);
    }
}
