//! The shape of a hierarchy of wheels: every level's tick and interval, its lists and when
//! each list is due. The one home of the rule that maps an expiration to a list, used by
//! `add` to place an entry; pure arithmetic, every step saturating.

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
    #[cfg(test)]
    pub(crate) fn list_for(&self, level: usize, expiration_ms: i64) -> ListFor {
        let shape = &self.levels[level];
        self.list_at(shape, shape.epoch_ms, expiration_ms)
    }

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
