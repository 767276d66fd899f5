//! A hierarchical timing wheel (Kafka's `TimingWheel`; Varghese & Lauck, 1987).
//!
//! A wheel has `wheel_size` buckets, each one tick (`tick_ms`) wide, so it spans
//! `interval_ms = tick_ms * wheel_size`. Its current time is always a multiple of its tick.
//! An entry whose expiration is inside `[current_time_ms + tick_ms, current_time_ms +
//! interval_ms)` goes into bucket `(expiration_ms / tick_ms) % wheel_size` of this wheel;
//! an earlier one is expired (it goes to the executor); a later one goes to the overflow
//! wheel, whose tick is this wheel's interval. Overflow wheels are created on demand.
//!
//! When a bucket comes due, the timer advances every wheel and re-adds each of the bucket's
//! entries: an entry of a higher wheel moves down to a finer one, or, once within one tick
//! of the current time, expires.
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
//! # Two lists per bucket above the lowest level
//!
//! In Kafka a bucket is one list, flushed when the bucket's range begins. All of its
//! entries must then move down before the earliest of them is due, and with a million
//! timers a 400 ms bucket of the default wheel holds 400,000 entries: the driver is busy
//! for milliseconds while entries wait. Here a bucket above the lowest level keeps two
//! lists ([`Geometry`] says which entry goes where):
//!
//! - the *early* list holds the first `wheel_size - wheel_size / 2` lower ticks of the
//!   bucket's range, and is due `wheel_size / 2` lower ticks before the range begins;
//! - the *late* list holds the rest, and is due when the range begins.
//!
//! At the early list's due time the wheel below has already turned far enough to hold all
//! of its entries, and the earliest of them is still half a bucket away; the late list's
//! earliest entry is half a bucket away from its due time too. So each flush has half a
//! bucket (10 ms for the default wheel's 20 ms buckets, 200 ms for its 400 ms ones) to
//! re-add its entries,
//! a chunk at a time, before any of them is due. In the example above (n = 3), level 2's
//! bucket `[c+3, c+5]` has an early list for `[c+3, c+4]`, due at `c+2`, and a late list
//! for `[c+5, c+5]`, due at `c+3`. The buckets, their ranges and the levels an entry passes
//! through are Kafka's; only the times at which entries move down are earlier.
//!
//! # Ground rules
//!
//! The lock order is in `crate::lock_order`. Here:
//!
//! - The hierarchy sits behind the timer's reader-writer lock
//!   (`store::StripedRwLock`): `add` runs under a read lock (its thread's
//!   stripe, whose shard it adds to), [`TimingWheel::advance_clock`] under the write lock,
//!   which it takes as proof. So an add never sees a level's clock
//!   move. The read side is striped, so the wheel is reached through `&self` only, and
//!   `current_time_ms` is an atomic; the lock orders its accesses (`Relaxed` suffices).
//! - The overflow wheel is a [`OnceLock`]: two adds under read locks may race to create
//!   it; one wins, both use it.
//! - Arithmetic saturates. The level whose interval saturates, or whose range reaches
//!   `i64::MAX`, or a wheel of size 1 (whose overflow would never grow), keeps every later
//!   entry itself: it is the top, and no wheel is created above it. Entries of several
//!   rounds may then share a list; that costs an extra flush, never a late or lost entry,
//!   because a flush re-adds what is not yet due.
//!
//! # Differences from Kafka
//!
//! Bucket numbers use floor division (`div_euclid`/`rem_euclid`), so negative clock values
//! work; Kafka's `/` and `%` would index a negative bucket. Buckets above the lowest level
//! are flushed in two lists, the first ahead of time (above).
//!
//! # Geometry: where an expiration goes
//!
//! The shape of a hierarchy of wheels: every level's tick and interval, its lists and when
//! each list is due. The one home of the rule that maps an expiration to a list, used by
//! `add` to place an entry; pure arithmetic, every step saturating.

use std::fmt;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, OnceLock};

use crate::delay_queue::DelayQueue;
use crate::store::shard::WriteGuard;
use crate::timer_task_list::{NO_EXPIRATION, TimerTaskList};

/// The queue every wheel of a hierarchy offers its lists to.
pub(crate) type BucketQueue = DelayQueue<Arc<TimerTaskList>>;

/// Where an entry goes: its list, and when that list is due.
pub(crate) struct Placement<'a> {
    pub(crate) list: &'a Arc<TimerTaskList>,
    due_ms: i64,
    queue: &'a BucketQueue,
}

impl Placement<'_> {
    /// Records that an entry joined the list: offers the list to the delay queue if that
    /// changed its expiration (Kafka's `setExpiration` and `offer`).
    #[inline]
    pub(crate) fn joined(self) {
        if self.list.set_expiration(self.due_ms) {
            self.queue.offer(Arc::clone(self.list), self.due_ms);
        }
    }
}

/// One level of the hierarchy, owning the levels above it.
pub(crate) struct TimingWheel {
    level: usize,
    /// Nothing can be above this level: the last level the geometry has.
    last: bool,
    shape: LevelShape,
    geometry: Arc<Geometry>,
    /// Written only under the write lock; read under a read lock.
    current_time_ms: AtomicI64,
    /// `current_time_ms + interval_ms`, saturating: entries expiring before it belong to
    /// this level, and a level whose limit is `i64::MAX` keeps every later one too (its
    /// range reaches the end of time). Written with `current_time_ms`.
    limit_ms: AtomicI64,
    /// Where bucket numbers count from (see `geometry::next_epoch`). Written with
    /// `current_time_ms`.
    epoch_ms: AtomicI64,
    /// This level's lists, by `id - shape.first_list`.
    lists: Box<[Arc<TimerTaskList>]>,
    queue: Arc<BucketQueue>,
    overflow_wheel: OnceLock<Box<TimingWheel>>,
}

impl TimingWheel {
    /// Creates the lowest level of a hierarchy of shape `geometry`, started at `start_ms`.
    pub(crate) fn new(geometry: Arc<Geometry>, start_ms: i64, queue: Arc<BucketQueue>) -> Self {
        TimingWheel::level(geometry, 0, clamp_start(start_ms), queue)
    }

    fn level(
        geometry: Arc<Geometry>,
        level: usize,
        start_ms: i64,
        queue: Arc<BucketQueue>,
    ) -> TimingWheel {
        let shape = geometry.levels[level];
        let lists = (0..geometry.wheel_size as u32 * shape.lists_per_bucket)
            .map(|i| {
                let early = shape.lists_per_bucket == 2 && i % 2 == 0;
                // The earliest entry of a late list is `early_ms` after its due time; of an
                // early list, `lead_ms`; of a lowest-level list, at its due time.
                let slack_ms = match shape.lists_per_bucket {
                    1 => 0,
                    _ if early => shape.lead_ms,
                    _ => shape.early_ms,
                };
                Arc::new(TimerTaskList::new(shape.first_list + i, slack_ms))
            })
            .collect();
        let current_time_ms = round_down(start_ms, shape.tick_ms);
        TimingWheel {
            last: geometry.wheel_size == 1
                || level + 1 == geometry.level_count()
                || shape.interval_ms == i64::MAX,
            level,
            shape,
            current_time_ms: AtomicI64::new(current_time_ms),
            limit_ms: AtomicI64::new(current_time_ms.saturating_add(shape.interval_ms)),
            epoch_ms: AtomicI64::new(
                next_epoch(&shape, shape.epoch_ms, current_time_ms).unwrap_or(shape.epoch_ms),
            ),
            geometry,
            lists,
            queue,
            overflow_wheel: OnceLock::new(),
        }
    }

    fn overflow_wheel(&self) -> &TimingWheel {
        self.overflow_wheel.get_or_init(|| {
            Box::new(TimingWheel::level(
                Arc::clone(&self.geometry),
                self.level + 1,
                self.current_time_ms(),
                Arc::clone(&self.queue),
            ))
        })
    }

    /// Puts an entry expiring at `expiration_ms` into its list, at this level or above:
    /// `link` appends it to the list whose id it is given. Returns false, calling nothing,
    /// if it is already expired. The caller holds a read lock. (Kafka also returns false for
    /// a cancelled entry; here a cancelled entry is no longer in the store, so it cannot be
    /// added.)
    pub(crate) fn add(&self, expiration_ms: i64, link: impl FnOnce(u32)) -> bool {
        let Some(placement) = self.place(expiration_ms) else {
            return false;
        };
        link(placement.list.id());
        placement.joined();
        true
    }

    /// Returns the list an entry expiring at `expiration_ms` goes to, at this level or
    /// above, or `None` if it is already expired: due before `current_time_ms + tick_ms`.
    /// The caller holds a read lock, puts the entry into the list and then calls
    /// [`Placement::joined`].
    #[inline]
    pub(crate) fn place(&self, expiration_ms: i64) -> Option<Placement<'_>> {
        // Kafka asks every level whether the entry is expired. Only the lowest can say yes:
        // a level's time is at or below the lowest one's, by less than its own tick, so an
        // entry past the lowest level's range is past every higher level's current tick.
        if before_next_tick(expiration_ms, self.current_time_ms(), self.shape.tick_ms) {
            return None;
        }
        // Kafka recurses into the overflow wheel; this walks up the same chain.
        let mut wheel = self;
        loop {
            let limit_ms = wheel.limit_ms.load(Ordering::Relaxed);
            if expiration_ms < limit_ms || wheel.last || limit_ms == i64::MAX {
                let epoch_ms = wheel.epoch_ms.load(Ordering::Relaxed);
                let at = wheel
                    .geometry
                    .list_at(&wheel.shape, epoch_ms, expiration_ms);
                return Some(Placement {
                    list: &wheel.lists[(at.id - wheel.shape.first_list) as usize],
                    due_ms: at.due_ms,
                    queue: &wheel.queue,
                });
            }
            wheel = wheel.overflow_wheel();
        }
    }

    /// Moves this level's current time (and its overflow's) to `time_ms`, rounded down to
    /// a tick, if that is at least one tick ahead. The caller holds the write lock.
    pub(crate) fn advance_clock(&self, time_ms: i64, _write: &WriteGuard<'_, TimingWheel>) {
        let mut time_ms = time_ms;
        let mut level = Some(self);
        // Each level moves to the time its finer neighbour moved to, as long as that is a
        // tick of its own ahead (Kafka recurses; this walks up the same chain).
        while let Some(wheel) = level {
            if before_next_tick(time_ms, wheel.current_time_ms(), wheel.shape.tick_ms) {
                break;
            }
            time_ms = round_down(time_ms, wheel.shape.tick_ms);
            wheel.set_current_time_ms(time_ms);
            level = wheel.overflow_wheel.get().map(|overflow| &**overflow);
        }
    }

    /// Moves this level's current time (under the write lock, or at creation).
    fn set_current_time_ms(&self, time_ms: i64) {
        self.current_time_ms.store(time_ms, Ordering::Relaxed);
        self.limit_ms.store(
            time_ms.saturating_add(self.shape.interval_ms),
            Ordering::Relaxed,
        );
        let epoch_ms = self.epoch_ms.load(Ordering::Relaxed);
        if let Some(next) = next_epoch(&self.shape, epoch_ms, time_ms) {
            self.epoch_ms.store(next, Ordering::Relaxed);
        }
    }

    /// Appends, for every list of this level and those above that is queued to be flushed
    /// (its expiration is set), the list's id and the earliest expiration its entries can
    /// have: its due time plus its slack. The caller holds a read lock.
    pub(crate) fn queued_lists(&self, out: &mut Vec<(i64, u32)>) {
        let mut level = Some(self);
        while let Some(wheel) = level {
            for list in wheel.lists.iter() {
                let due_ms = list.expiration_ms();
                if due_ms != NO_EXPIRATION {
                    out.push((list.earliest_expiration_ms(due_ms), list.id()));
                }
            }
            level = wheel.overflow_wheel.get().map(|overflow| &**overflow);
        }
    }

    /// Returns this level's tick.
    pub(crate) fn tick_ms(&self) -> i64 {
        self.shape.tick_ms
    }

    /// Returns this level's current time.
    #[inline]
    pub(crate) fn current_time_ms(&self) -> i64 {
        self.current_time_ms.load(Ordering::Relaxed)
    }
}

impl fmt::Debug for TimingWheel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (level, now_ms) = (self.level, self.current_time_ms());
        write!(
            f,
            "TimingWheel {{ level: {level}, current_time_ms: {now_ms}, .. }}"
        )
    }
}

/// List ids must stay below this (a shard keeps a part per id).
const MAX_LISTS: u64 = 1 << 31;

/// Division by a fixed divisor. A 32-bit dividend takes one multiplication instead of a
/// division (Lemire, Kaser & Kurz, "Faster remainder by direct computation", 2019): `add`
/// divides by its level's tick, and a 64-bit division costs a good part of an add.
#[derive(Clone, Copy, Debug)]
pub(super) struct Divisor {
    divisor: u64,
    /// `ceil(2^64 / divisor)` when the divisor is from 2 to `u32::MAX`, else 0.
    magic: u64,
}

impl Divisor {
    fn new(divisor: i64) -> Divisor {
        let divisor = divisor as u64;
        let magic = if (2..=u64::from(u32::MAX)).contains(&divisor) {
            u64::MAX / divisor + 1
        } else {
            0
        };
        Divisor { divisor, magic }
    }

    #[inline]
    fn divide(self, dividend: u64) -> u64 {
        if self.magic != 0 && dividend <= u64::from(u32::MAX) {
            ((u128::from(self.magic) * u128::from(dividend)) >> 64) as u64
        } else if self.divisor == 1 {
            dividend
        } else {
            dividend / self.divisor
        }
    }
}

/// The shape of one level.
#[derive(Clone, Copy, Debug)]
pub(super) struct LevelShape {
    pub(super) tick_ms: i64,
    pub(super) tick: Divisor,
    /// A time at which a bucket of this level starts a round: the hierarchy's start rounded
    /// down to this level's interval (`i64::MIN` if the interval saturates: no epoch). The
    /// level moves it forward by whole intervals as its clock goes on (see [`next_epoch`]).
    pub(super) epoch_ms: i64,
    pub(super) interval_ms: i64,
    /// Lists per bucket: 2 above the lowest level of a wheel larger than 1, else 1.
    pub(super) lists_per_bucket: u32,
    /// The early list holds expirations below `bucket start + early_ms`.
    pub(super) early_ms: i64,
    /// The early list is due this long before the bucket's start.
    pub(super) lead_ms: i64,
    /// The id of the first list of this level.
    pub(super) first_list: u32,
}

/// Which list an entry of some level goes to, and when that list is due.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ListFor {
    /// The list's id (the same in every shard).
    pub(crate) id: u32,
    /// When the list is due to be flushed.
    pub(crate) due_ms: i64,
}

/// The shape of a whole hierarchy: every level's tick, its lists and their due times. The one
/// home of the rule that maps an expiration to a list, used by `add` to place an entry (a
/// cancel finds its entry through the slot's `Loc` instead).
#[derive(Debug)]
pub(crate) struct Geometry {
    pub(super) wheel_size: usize,
    size: Divisor,
    pub(super) levels: Box<[LevelShape]>,
}

/// Returns how long after `epoch_ms` `time_ms` is, if that is from 0 to `u32::MAX` ms (49
/// days): the range where [`Divisor`] multiplies.
#[inline]
fn since_epoch(epoch_ms: i64, time_ms: i64) -> Option<u64> {
    if epoch_ms == i64::MIN {
        return None;
    }
    let since = time_ms.checked_sub(epoch_ms)?;
    u32::try_from(since).ok().map(u64::from)
}

/// Returns the epoch a level of shape `shape` whose clock reads `time_ms` should use instead
/// of `epoch_ms`, if `time_ms` is far enough past it that its entries' expirations could
/// leave the range where [`Divisor`] multiplies (then an add would divide). A whole number
/// of the level's intervals later, so every bucket keeps its number.
pub(super) fn next_epoch(shape: &LevelShape, epoch_ms: i64, time_ms: i64) -> Option<i64> {
    let far = epoch_ms != i64::MIN && time_ms.saturating_sub(epoch_ms) >= 1 << 31;
    far.then(|| round_down(time_ms, shape.interval_ms))
}

impl Geometry {
    /// Computes every level a hierarchy of `tick_ms` and `wheel_size`, started at
    /// `start_ms`, can grow to.
    ///
    /// # Panics
    ///
    /// Panics, naming the argument, if `tick_ms <= 0`, `wheel_size == 0`, or the lists of all
    /// levels would not fit the id space (2^31).
    #[track_caller]
    pub(crate) fn new(tick_ms: i64, wheel_size: usize, start_ms: i64) -> Geometry {
        assert!(tick_ms > 0, "tick_ms must be positive, got {tick_ms}");
        assert!(
            wheel_size > 0,
            "wheel_size must be positive, got {wheel_size}"
        );
        let count = level_count(tick_ms, wheel_size);
        let size = i64::try_from(wheel_size).unwrap_or(i64::MAX);
        let split = wheel_size > 1;
        let start_ms = clamp_start(start_ms);
        let mut levels = Vec::with_capacity(count as usize);
        let mut tick_ms = tick_ms;
        let mut first_list = 0u64;
        for level in 0..count {
            let lists_per_bucket = if level > 0 && split { 2 } else { 1 };
            let lower_tick_ms = levels.last().map_or(0, |l: &LevelShape| l.tick_ms);
            let lead_ms = lower_tick_ms.saturating_mul(size / 2);
            let interval_ms = tick_ms.saturating_mul(size);
            levels.push(LevelShape {
                tick_ms,
                tick: Divisor::new(tick_ms),
                epoch_ms: if interval_ms == i64::MAX {
                    i64::MIN
                } else {
                    round_down(start_ms, interval_ms)
                },
                interval_ms,
                lists_per_bucket,
                early_ms: tick_ms.saturating_sub(lead_ms),
                lead_ms,
                first_list: first_list as u32,
            });
            first_list = first_list
                .saturating_add((wheel_size as u64).saturating_mul(u64::from(lists_per_bucket)));
            assert!(
                first_list < MAX_LISTS,
                "wheel_size {wheel_size} needs more than {MAX_LISTS} lists in all"
            );
            tick_ms = tick_ms.saturating_mul(size);
        }
        Geometry {
            wheel_size,
            size: Divisor::new(size),
            levels: levels.into_boxed_slice(),
        }
    }

    /// Returns the list an entry expiring at `expiration_ms` belongs to at `level`.
    /// Returns the list an entry expiring at `expiration_ms` belongs to at the level of
    /// shape `shape` (one of this geometry's), whose epoch is now `epoch_ms`.
    #[inline]
    pub(super) fn list_at(&self, shape: &LevelShape, epoch_ms: i64, expiration_ms: i64) -> ListFor {
        // The bucket's range starts within one tick below the expiration.
        let (bucket, start_ms) = match since_epoch(epoch_ms, expiration_ms) {
            // Two multiplications instead of two divisions (see `Divisor`).
            Some(since_epoch) => {
                let ticks = shape.tick.divide(since_epoch);
                let rounds = self.size.divide(ticks);
                let bucket = (ticks - rounds * self.wheel_size as u64) as u32;
                (bucket, epoch_ms + (ticks as i64) * shape.tick_ms)
            }
            None => {
                let virtual_id = expiration_ms.div_euclid(shape.tick_ms);
                let bucket = virtual_id.rem_euclid(self.wheel_size as i64) as u32;
                (bucket, virtual_id.saturating_mul(shape.tick_ms))
            }
        };
        Geometry::list_in(shape, bucket, start_ms, expiration_ms)
    }

    /// Returns the list of `bucket` (whose range starts at `start_ms`) at a level of shape
    /// `shape` that an entry expiring at `expiration_ms` belongs to.
    #[inline]
    fn list_in(shape: &LevelShape, bucket: u32, start_ms: i64, expiration_ms: i64) -> ListFor {
        let early =
            shape.lists_per_bucket == 2 && expiration_ms.saturating_sub(start_ms) < shape.early_ms;
        let (half, due_ms) = match shape.lists_per_bucket {
            1 => (0, start_ms),
            _ if early => (0, start_ms.saturating_sub(shape.lead_ms)),
            _ => (1, start_ms),
        };
        ListFor {
            id: shape.first_list + bucket * shape.lists_per_bucket + half,
            due_ms,
        }
    }

    /// Returns the number of levels a hierarchy can have.
    pub(super) fn level_count(&self) -> usize {
        self.levels.len()
    }
}

/// True if `time_ms` comes before `current_time_ms + span_ms` (`span_ms > 0`), exactly.
///
/// A saturating sum is not exact: a wheel whose time is within a tick of `i64::MAX` would
/// never expire an entry due at `i64::MAX`, and would re-add it to a due list forever. A
/// saturating difference is: where the true difference leaves the `i64` range, it is beyond
/// every span on the same side of zero.
#[inline]
pub(super) fn before_next_tick(time_ms: i64, current_time_ms: i64, span_ms: i64) -> bool {
    time_ms.saturating_sub(current_time_ms) < span_ms
}

/// Rounds `time_ms` down to a multiple of `tick_ms` (> 0), without overflow.
pub(super) fn round_down(time_ms: i64, tick_ms: i64) -> i64 {
    time_ms - time_ms.rem_euclid(tick_ms)
}

/// Keeps start times away from `i64::MIN`, so that every list's due time (a multiple of a
/// tick at or below an entry's expiration, less at most a bucket) has room below it.
pub(super) fn clamp_start(start_ms: i64) -> i64 {
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

#[cfg(test)]
mod tests {
    use super::*;

    impl TimingWheel {
        /// Returns the levels created so far, this one first.
        pub(crate) fn levels(&self) -> Vec<&TimingWheel> {
            let mut levels = vec![self];
            while let Some(next) = levels.last().and_then(|w| w.overflow_wheel.get()) {
                levels.push(next);
            }
            levels
        }

        /// Returns this level's lists.
        pub(crate) fn lists(&self) -> &[Arc<TimerTaskList>] {
            &self.lists
        }
    }

    impl Geometry {
        pub(crate) fn list_for(&self, level: usize, expiration_ms: i64) -> ListFor {
            let shape = &self.levels[level];
            self.list_at(shape, shape.epoch_ms, expiration_ms)
        }
    }
    use crate::mock::MockTime;
    use crate::store::shard::StripedRwLock;

    /// A wheel of Kafka's javadoc example (u = 1, n = 3) on a mock clock, with the drive
    /// loop of `SystemTimer::advance_clock` reduced to its steps.
    struct Example {
        time: MockTime,
        queue: Arc<BucketQueue>,
        lock: StripedRwLock<TimingWheel>,
        c: i64,
    }

    impl Example {
        fn new() -> Example {
            let time = MockTime::new();
            // A multiple of 27, so every level's buckets start at c.
            let c = time.hi_res_clock_ms() - time.hi_res_clock_ms().rem_euclid(27) + 27;
            time.sleep(c - time.hi_res_clock_ms());
            let queue = Arc::new(DelayQueue::new(Arc::new(time.clone())));
            let geometry = Arc::new(Geometry::new(1, 3, c));
            let wheel = TimingWheel::new(Arc::clone(&geometry), c, Arc::clone(&queue));
            Example {
                time,
                queue,
                lock: StripedRwLock::new(wheel, 1, None, None),
                c,
            }
        }

        /// Adds an entry due at `c + offset`; returns false if it is already expired.
        fn add(&self, offset: i64) -> bool {
            let mut read = self.lock.read(0);
            let wheel = read.value();
            let shard = read.shard();
            let expiration_ms = self.c + offset;
            let Some(placement) = wheel.place(expiration_ms) else {
                return false;
            };
            shard
                .insert(
                    crate::task::timer_task(0, || {}),
                    expiration_ms,
                    placement.list.id(),
                )
                .ok()
                .unwrap();
            placement.joined();
            true
        }

        /// (level, bucket, list's due time - c) of every non-empty list, early lists marked.
        fn layout(&self) -> Vec<(usize, usize, &'static str, i64)> {
            let mut read = self.lock.read(0);
            let mut out = Vec::new();
            let levels = read.value().levels();
            let shard = read.shard();
            for (level, wheel) in levels.into_iter().enumerate() {
                let per_bucket = wheel.shape.lists_per_bucket as usize;
                for (i, list) in wheel.lists().iter().enumerate() {
                    if shard.min_expiration(list.id()).is_some() {
                        let kind = match (per_bucket, i % 2) {
                            (1, _) => "",
                            (_, 0) => "early",
                            _ => "late",
                        };
                        out.push((
                            level + 1,
                            i / per_bucket,
                            kind,
                            list.expiration_ms() - self.c,
                        ));
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
            while let Some(due) = self.queue.poll() {
                let list = due.value;
                if list.expiration_ms() != due.due_ms {
                    continue;
                }
                {
                    let mut write = self.lock.write();
                    write.value().advance_clock(due.now_ms, &write);
                    list.reset_expiration();
                    for shard in write.shards_mut() {
                        shard.detach(list.id());
                    }
                }
                let mut read = self.lock.read(0);
                let wheel = read.value();
                read.shard().flush(list.id(), usize::MAX, |shard, entry| {
                    if !wheel.add(entry.expiration_ms, |id| shard.link(id, entry.index)) {
                        fired.push(entry.expiration_ms - self.c);
                        drop(shard.remove(entry.index));
                    }
                });
            }
            fired.sort();
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
        // Kafka's buckets: level 1 holds c+1 and c+2; level 2 buckets [c+3, c+5] and
        // [c+6, c+8]; level 3 buckets [c+9, c+17] and [c+18, c+26]. Bucket index =
        // (expiration / tick) % 3. Above level 1, each bucket's first two lower ticks are an
        // early list due one lower tick before the bucket, the last one a late list.
        assert_eq!(
            ex.layout(),
            [
                (1, 1, "", 1),
                (1, 2, "", 2),
                (2, 1, "early", 2),
                (2, 1, "late", 3),
                (2, 2, "late", 6),
                (3, 1, "early", 6),
                (3, 1, "late", 9),
                (3, 2, "late", 18),
            ]
        );
        assert_eq!(ex.step(), [1]);
        // At c+2 level 2's early list [c+3, c+4] moves down ahead of time.
        assert_eq!(ex.step(), [2]);
        assert!(ex.layout().contains(&(1, 0, "", 3)));
        // At c+3 the late list [c+5, c+5] moves down too.
        assert_eq!(ex.step(), [3]);
        assert_eq!(
            ex.lock.read(0).value().levels()[1].current_time_ms() - ex.c,
            3
        );
        assert!(ex.layout().contains(&(1, 2, "", 5)));
        assert_eq!(ex.step(), []);
        assert_eq!(ex.step(), [5]);
        // At c+6 level 3's early list [c+9, c+14] moves down, three ticks ahead.
        assert_eq!(ex.step(), []);
        assert_eq!(
            ex.layout(),
            [
                (1, 2, "", 8),
                (2, 0, "early", 8),
                (3, 1, "late", 9),
                (3, 2, "late", 18)
            ]
        );
        assert_eq!(ex.step(), []);
        assert_eq!(ex.step(), [8]);
        assert_eq!(ex.step(), [9]);
        let mut fired = Vec::new();
        for _ in 10..=26 {
            fired.extend(ex.step());
        }
        assert_eq!(fired, [17, 26]);
        assert!(ex.layout().is_empty());
    }
}

/// Kafka's `TimingWheelTest`, ported: apache/kafka
/// `server-common/src/test/java/org/apache/kafka/server/util/timer/TimingWheelTest.java`
/// (commit 088b333), licensed to the Apache Software Foundation (ASF) under the Apache
/// License, Version 2.0; see <http://www.apache.org/licenses/LICENSE-2.0>.
///
/// Deviations: Kafka's task counter is the shard's count of entries. An entry is a slot of
/// the shard that `TimingWheel::add` lists, or, refused, leaves unlisted for the caller to
/// remove. `add_cancelled_task`: here a cancel takes the entry out of the store at once, so a
/// cancelled entry cannot reach `add` at all; the test checks that the cancel left nothing
/// in the wheel's list for a flush to add again (Kafka: `add` of a cancelled entry returns
/// false). The overflow wheel is compared by address (Kafka's `assertSame`).
#[cfg(test)]
mod kafka_timing_wheel_test {
    use super::*;
    use crate::mock::MockTime;
    use crate::store::chunks::EntryKey;
    use crate::store::shard::StripedRwLock;

    const START_MS: i64 = 1000;
    const TICK_MS: i64 = 10;
    const WHEEL_SIZE: usize = 5;

    /// The wheel of Kafka's `setUp`: tick 10 ms, 5 buckets, started at 1000 ms.
    struct Fixture {
        lock: StripedRwLock<TimingWheel>,
        queue: Arc<BucketQueue>,
    }

    fn set_up() -> Fixture {
        let queue = Arc::new(DelayQueue::new(Arc::new(MockTime::new())));
        let geometry = Arc::new(Geometry::new(TICK_MS, WHEEL_SIZE, START_MS));
        let wheel = TimingWheel::new(geometry, START_MS, Arc::clone(&queue));
        Fixture {
            lock: StripedRwLock::new(wheel, 1, None, None),
            queue,
        }
    }

    impl Fixture {
        /// Kafka's `timingWheel.add(new TimerTaskEntry(task, expirationMs))`: the entry's
        /// key if the wheel took it; a refused entry is removed from the store.
        fn add(&self, expiration_ms: i64) -> Option<EntryKey> {
            let mut read = self.lock.read(0);
            let wheel = read.value();
            let shard = read.shard();
            let task = crate::task::timer_task(0, || {});
            let key = shard.insert_unlisted(task, expiration_ms).ok().unwrap();
            if wheel.add(expiration_ms, |id| shard.link(id, key.index)) {
                return Some(key);
            }
            drop(shard.remove(key.index));
            None
        }

        fn entries(&self) -> usize {
            self.lock.read(0).shard().len()
        }

        fn advance_clock(&self, time_ms: i64) {
            let write = self.lock.write();
            write.value().advance_clock(time_ms, &write);
        }

        fn levels(&self) -> Vec<&TimingWheel> {
            self.lock.read(0).value().levels()
        }
    }

    #[test]
    fn add_valid_task() {
        let fixture = set_up();
        assert!(fixture.add(START_MS + TICK_MS * 2).is_some());
        assert_eq!(fixture.queue.len(), 1, "its list was offered to the queue");
        assert_eq!(fixture.entries(), 1);
    }

    #[test]
    fn add_expired_task() {
        let fixture = set_up();
        assert!(fixture.add(START_MS - 1).is_none());
        assert_eq!((fixture.queue.len(), fixture.entries()), (0, 0));
    }

    #[test]
    fn add_cancelled_task() {
        let fixture = set_up();
        let expiration_ms = START_MS + TICK_MS * 2;
        let key = fixture.add(expiration_ms).unwrap();
        let mut read = fixture.lock.read(0);
        let list = read.value().place(expiration_ms).unwrap().list.id();
        let shard = read.shard();
        assert!(
            shard.take(key).is_some(),
            "what `TimerTaskEntry::cancel` does"
        );
        assert!(!shard.is_live(key));
        assert_eq!(
            shard.min_expiration(list),
            None,
            "nothing left for a flush to add"
        );
    }

    #[test]
    fn add_task_in_current_bucket() {
        let fixture = set_up();
        assert!(
            fixture.add(START_MS + 5).is_none(),
            "within the current tick: expired at once"
        );
    }

    #[test]
    fn advance_clock_within_tick() {
        let fixture = set_up();
        fixture.advance_clock(START_MS + 5);
        assert_eq!(fixture.levels()[0].current_time_ms(), START_MS);
    }

    #[test]
    fn advance_clock_to_next_tick() {
        let fixture = set_up();
        fixture.advance_clock(START_MS + TICK_MS);
        assert_eq!(fixture.levels()[0].current_time_ms(), START_MS + TICK_MS);
    }

    #[test]
    fn overflow_wheel_creation() {
        let fixture = set_up();
        assert_eq!(fixture.levels().len(), 1, "no overflow wheel at first");
        let overflow_ms = START_MS + TICK_MS * WHEEL_SIZE as i64 + TICK_MS;
        assert!(fixture.add(overflow_ms).is_some());
        let levels = fixture.levels();
        assert_eq!(levels.len(), 2, "the first overflowing add creates it");
        assert!(fixture.add(overflow_ms + 1).is_some());
        let again = fixture.levels();
        assert_eq!(again.len(), 2);
        assert!(std::ptr::eq(levels[1], again[1]), "the second one uses it");
    }

    #[test]
    fn advance_clock_with_overflow_wheel() {
        let fixture = set_up();
        let interval_ms = TICK_MS * WHEEL_SIZE as i64;
        assert!(fixture.add(START_MS + interval_ms + TICK_MS).is_some());
        assert_eq!(fixture.levels().len(), 2);
        let advance_ms = START_MS + interval_ms + 10;
        fixture.advance_clock(advance_ms);
        let levels = fixture.levels();
        assert_eq!(levels[0].current_time_ms(), advance_ms);
        assert_eq!(levels[1].current_time_ms(), START_MS + interval_ms);
    }
}

#[cfg(test)]
mod geometry_tests {
    use super::*;

    #[test]
    fn list_for_splits_buckets_above_the_lowest_level() {
        let geometry = Geometry::new(1, 20, 0);
        // Level 0: one list per 1 ms bucket, due at the bucket.
        assert_eq!(geometry.list_for(0, 45), ListFor { id: 5, due_ms: 45 });
        // Level 1 (20 ms buckets): [40, 50) early, due 10 ms ahead; [50, 60) late.
        let early = geometry.list_for(1, 45);
        let late = geometry.list_for(1, 55);
        assert_eq!(
            early,
            ListFor {
                id: 20 + 2 * 2,
                due_ms: 30
            }
        );
        assert_eq!(
            late,
            ListFor {
                id: 20 + 2 * 2 + 1,
                due_ms: 40
            }
        );
        assert_eq!(geometry.list_for(1, 49).id, early.id);
        assert_eq!(geometry.list_for(1, 50).id, late.id);
        // Level 2 (400 ms buckets): [800, 1000) early, due 200 ms ahead.
        assert_eq!(geometry.list_for(2, 999).due_ms, 600);
        assert_eq!(geometry.list_for(2, 1000).due_ms, 800);
        // Odd sizes: n = 3 puts two of three lower ticks in the early list.
        let odd = Geometry::new(1, 3, 0);
        assert_eq!(odd.list_for(1, 4).due_ms, 2);
        assert_eq!(odd.list_for(1, 5).due_ms, 3);
        // A wheel of size 1 never splits.
        let one = Geometry::new(7, 1, 0);
        assert_eq!(one.list_for(0, 20), ListFor { id: 0, due_ms: 14 });
    }

    #[test]
    fn divisor_agrees_with_division() {
        let dividends = [
            0,
            1,
            2,
            19,
            20,
            21,
            399,
            400,
            u64::from(u32::MAX),
            1 << 32,
            u64::MAX,
        ];
        for divisor in [
            1,
            2,
            3,
            7,
            20,
            400,
            8_000,
            1_000_003,
            i64::from(u32::MAX),
            1 << 40,
        ] {
            let fast = Divisor::new(divisor);
            for dividend in dividends {
                assert_eq!(
                    fast.divide(dividend),
                    dividend / divisor as u64,
                    "{dividend} / {divisor}"
                );
            }
            let mut x = 0x9E37_79B9_7F4A_7C15_u64;
            for _ in 0..10_000 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let dividend = x >> 32;
                assert_eq!(
                    fast.divide(dividend),
                    dividend / divisor as u64,
                    "{dividend} / {divisor}"
                );
            }
        }
    }

    #[test]
    fn list_for_is_the_same_near_its_epoch_and_far_from_it() {
        for (tick, size) in [(1, 20), (1, 3), (7, 2), (20, 64), (1, 1)] {
            let near = Geometry::new(tick, size, 1_000_000);
            let far = Geometry::new(tick, size, i64::MIN / 2);
            for level in 0..near.level_count().min(5) {
                let shape = near.levels[level];
                for from in [1_000_000, 1_000_000 + (1 << 32) - 5 * shape.tick_ms, -7] {
                    for step in 0..100 {
                        let expiration = from + step * 1.max(shape.tick_ms / 3);
                        assert_eq!(
                            near.list_for(level, expiration),
                            far.list_for(level, expiration),
                            "tick {tick} size {size} level {level} expiration {expiration}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn a_moved_epoch_names_the_same_lists_and_keeps_them_fast() {
        for (tick, size) in [(1, 20), (1, 3), (7, 2), (20, 64)] {
            let geometry = Geometry::new(tick, size, 0);
            for level in 0..geometry.level_count().min(4) {
                let shape = &geometry.levels[level];
                assert_eq!(next_epoch(shape, shape.epoch_ms, 1_000), None, "not yet");
                for now in [1_i64 << 31, 1 << 33, 5_000_000_000_123] {
                    let Some(epoch) = next_epoch(shape, shape.epoch_ms, now) else {
                        continue;
                    };
                    assert!(epoch <= now && now - epoch < shape.interval_ms);
                    assert_eq!((epoch - shape.epoch_ms) % shape.interval_ms, 0);
                    for step in 0..200 {
                        let expiration = now + step * (shape.interval_ms / 50).max(1);
                        assert_eq!(
                            geometry.list_at(shape, epoch, expiration),
                            geometry.list_at(shape, shape.epoch_ms, expiration),
                            "tick {tick} size {size} level {level} expiration {expiration}"
                        );
                        if expiration - now < 1 << 31 {
                            assert!(since_epoch(epoch, expiration).is_some(), "multiplies");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn list_for_saturates_at_the_extremes() {
        for (tick, size) in [(1, 20), (1, 2), (i64::MAX, 2), (3, 1_000), (1, 1)] {
            let geometry = Geometry::new(tick, size, 0);
            for level in 0..geometry.level_count() {
                for expiration in [i64::MAX, i64::MAX - 1, i64::MIN / 2, 0, -1] {
                    let at = geometry.list_for(level, expiration);
                    assert!(
                        at.due_ms <= expiration,
                        "{tick} {size} {level} {expiration}"
                    );
                }
            }
        }
    }

    #[test]
    fn before_next_tick_is_exact_at_the_ends_of_the_range() {
        assert!(before_next_tick(i64::MAX, i64::MAX - 1, 2));
        assert!(!before_next_tick(i64::MAX, i64::MAX - 2, 2));
        assert!(before_next_tick(i64::MIN, i64::MAX, 1), "far in the past");
        assert!(
            !before_next_tick(i64::MAX, i64::MIN, i64::MAX),
            "far in the future"
        );
        assert!(before_next_tick(5, 5, 1));
        assert!(!before_next_tick(6, 5, 1));
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
