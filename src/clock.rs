//! The system clock's readings: nanoseconds from `Instant` ([`now_ns`]), and the
//! millisecond ceiling `add` needs ([`ms_ceil`]), without reading the clock on most calls:
//! the processor's time-stamp counter tells whether the millisecond last read is still the
//! current one.
//!
//! `add` needs `ceil(now)` in milliseconds. Reading `Instant::now` costs more than a fifth
//! of an `add` (`docs/performance.md`, "The clock read"); the counter costs a third of it.
//! Each thread keeps the millisecond it last read, `C = ceil(N)` for a reading `N` in
//! nanoseconds, and the counter value up to which `C` is still the ceiling: `ceil(T) = C`
//! for every later instant `T` before `C` ms. A call that finds the counter below that
//! value returns `C`, the very value a clock read would give; any other call reads the clock
//! and starts over. So the result is always the clock's own ceiling (never early, never
//! late, monotonic as the clock is), and the counter only decides when to read it.
//!
//! # Ground rules
//!
//! - The counter is used only where the kernel keeps its own clock on it (Linux's
//!   clocksource `tsc`): then it is invariant and synchronised across processors, as
//!   `Instant` itself relies on. Elsewhere every call reads the clock.
//! - A counter value `t` taken before a clock reading `N` comes no later than `N`; from it,
//!   `T <= N + (t' - t) * ns_per_tick` for a later counter value `t'`. The budget in ticks
//!   is computed with a tick rate known to be too low (so `ns_per_tick` too high), and ends
//!   [`SAFETY_NS`] before the millisecond does, which covers a counter read a little out
//!   of order and processors whose counters differ by a little.
//! - The tick rate is measured once per process, against the clock, over at least
//!   [`CALIBRATION_NS`]; until then every call reads the clock.
//! - Each thread's cache is its own (`thread_local!`): no atomic, no shared cache line.

use std::cell::Cell;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// How long before the end of a millisecond a thread reads the clock again anyway.
const SAFETY_NS: u64 = 10_000;

/// The shortest interval over which the tick rate is measured.
const CALIBRATION_NS: u64 = 20_000_000;

/// The counter ticks a clock reading may take for the pair (ticks, reading) to be kept:
/// a longer read was interrupted, and its reading may come long after the counter value.
const READ_TICKS: u64 = 20_000;

/// An offset so that readings are large and positive from the start, as Java's are; code
/// that subtracts a delay from "now" then stays far from `i64::MIN`.
const ORIGIN_OFFSET_NANOS: u64 = 1_000_000_000_000_000;

/// Returns the system clock's monotonic reading, in nanoseconds: the time since the first
/// reading of the process, plus [`ORIGIN_OFFSET_NANOS`]. Good for 584 years.
pub(crate) fn now_ns() -> u64 {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    let since = ORIGIN.get_or_init(Instant::now).elapsed();
    let nanos = since.as_secs() * 1_000_000_000 + u64::from(since.subsec_nanos());
    nanos.saturating_add(ORIGIN_OFFSET_NANOS)
}

/// Returns [`now_ns`] rounded up to a millisecond, reading the clock only when the thread's
/// last millisecond may have ended.
#[inline]
pub(crate) fn ms_ceil() -> u64 {
    let Some(ticks) = counter() else {
        return now_ns().div_ceil(NANOS_PER_MS);
    };
    let (until, ms) = LAST.get();
    if ticks < until {
        return ms;
    }
    read(ticks)
}

const NANOS_PER_MS: u64 = 1_000_000;

thread_local! {
    /// The counter value before which the millisecond is still the one beside it.
    static LAST: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
}

/// Reads the clock (the counter was at `before` just before) and keeps its millisecond for
/// as long as the tick rate allows.
#[cold]
fn read(before: u64) -> u64 {
    let ns = now_ns();
    let after = counter().unwrap_or(before);
    let ms = ns.div_ceil(NANOS_PER_MS);
    if after.wrapping_sub(before) > READ_TICKS {
        // Interrupted between the two: `before` may be long before `ns`; keep nothing.
        return ms;
    }
    if let Some(rate) = ticks_per_ns(before, ns) {
        let left_ns = (ms * NANOS_PER_MS).saturating_sub(ns + SAFETY_NS);
        let budget = ((u128::from(left_ns) * u128::from(rate)) >> RATE_SHIFT) as u64;
        LAST.set((before.saturating_add(budget), ms));
    }
    ms
}

/// Fixed-point shift of the tick rate.
const RATE_SHIFT: u32 = 32;

/// The first (counter, reading) pair of the process, and the tick rate, once measured.
static BASE: OnceLock<(u64, u64)> = OnceLock::new();
/// Ticks per nanosecond, times 2^32, a thousandth below the measured rate; 0 until
/// measured.
static RATE: AtomicU64 = AtomicU64::new(0);

/// Returns the tick rate, measuring it from the first pair and `(ticks, ns)` once they are
/// far enough apart.
fn ticks_per_ns(ticks: u64, ns: u64) -> Option<u64> {
    let rate = RATE.load(Ordering::Relaxed);
    if rate != 0 {
        return Some(rate);
    }
    let &(base_ticks, base_ns) = BASE.get_or_init(|| (ticks, ns));
    let span_ns = ns.checked_sub(base_ns)?;
    if span_ns < CALIBRATION_NS || ticks <= base_ticks {
        return None;
    }
    let measured = (u128::from(ticks - base_ticks) << RATE_SHIFT) / u128::from(span_ns);
    let rate = u64::try_from(measured - measured / 1_000).ok()?;
    RATE.store(rate, Ordering::Relaxed);
    Some(rate)
}

/// Returns the counter, if the kernel keeps the clock on it.
#[inline]
fn counter() -> Option<u64> {
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    if usable() {
        // SAFETY: `rdtsc` reads the time-stamp counter: it takes no operand, touches no
        // memory, and every x86-64 processor has it. The kernel keeps its own clock on
        // this counter (`usable`), so it does not fault (`PR_TSC_SIGSEGV` is a process's own
        // choice, and such a process cannot read its clock through the vDSO either).
        #[allow(unsafe_code)]
        return Some(unsafe { std::arch::x86_64::_rdtsc() });
    }
    None
}

/// True if the kernel keeps its clock on the time-stamp counter (read once).
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn usable() -> bool {
    static USABLE: OnceLock<bool> = OnceLock::new();
    *USABLE.get_or_init(|| {
        std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource")
            .is_ok_and(|source| source.trim() == "tsc")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Every result lies between the ceilings of clock readings taken just before and just
    /// after it, on each of several threads, for long enough that the rate is measured and
    /// most calls take the counter's path.
    #[test]
    fn the_ceiling_is_the_clocks_own() {
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    let start = Instant::now();
                    while start.elapsed() < Duration::from_millis(200) {
                        let before = now_ns().div_ceil(NANOS_PER_MS);
                        let ms = ms_ceil();
                        let after = now_ns().div_ceil(NANOS_PER_MS);
                        assert!(before <= ms && ms <= after, "{before} <= {ms} <= {after}");
                    }
                });
            }
        });
    }

    /// A reading published by one thread is never above a reading another thread takes
    /// after it saw the publication.
    #[test]
    fn the_ceiling_never_runs_backwards_across_threads() {
        let published = AtomicU64::new(0);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    let start = Instant::now();
                    while start.elapsed() < Duration::from_millis(200) {
                        let seen = published.load(Ordering::Acquire);
                        let ms = ms_ceil();
                        assert!(ms >= seen, "{ms} after {seen} was published");
                        published.fetch_max(ms, Ordering::Release);
                    }
                });
            }
        });
    }
}
