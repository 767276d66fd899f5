//! What the run measured, the table at the end, and the progress line while it runs.

use std::fmt::Write as _;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::Config;
use super::common::{Percentiles, ProgressLine, group, mib, peak_rss_kib};
use super::group::Group;

/// What the heartbeating thread measured.
#[derive(Clone, Debug, Default)]
pub(crate) struct BeatStats {
    /// Heartbeats sent, joins included: one `KeyedTimer::reschedule` each (and a
    /// `schedule` for a join).
    pub(crate) beats: u64,
    /// Time spent sending them (making the task and scheduling it), summed.
    pub(crate) schedule_time: Duration,
    /// The most the heartbeats ran behind their schedule.
    pub(crate) worst_lag_ms: u64,
}

/// What one worker handled.
#[derive(Debug, Default)]
pub(crate) struct WorkerStats {
    pub(crate) handled: u64,
    /// How late each expiry of a member that stopped was, in µs.
    pub(crate) lateness_us: Vec<i64>,
}

/// Percentiles of how late the expiries were handled, in microseconds: the instant a
/// worker handled one minus (the instant of the member's last heartbeat + the session
/// timeout). Negative means early, which only a tick above 1 ms allows (by up to a tick).
pub(crate) type Lateness = Percentiles;

/// What happened.
#[derive(Clone, Debug)]
pub(crate) struct Report {
    pub(crate) members: u64,
    /// Members that stopped heartbeating.
    pub(crate) stopped: u64,
    pub(crate) beats: BeatStats,
    /// Expiries handled by each worker.
    pub(crate) handled_by_worker: Vec<u64>,
    /// Stopped members whose session expired exactly once, more than once, never.
    pub(crate) expired_once: u64,
    pub(crate) expired_twice: u64,
    pub(crate) never_expired: u64,
    /// Expiries of members that never stopped heartbeating (must be 0).
    pub(crate) live_expired: u64,
    pub(crate) lateness: Lateness,
    /// The timer's tick: with a tick above 1 ms an expiry may come up to a tick early.
    pub(crate) tick_ms: i64,
    /// Expiries handled within one tick of their deadline.
    pub(crate) within_a_tick: u64,
    /// `KeyedTimer::len` and the timer's `size()` once the heartbeats ended: both must be
    /// the number of live members.
    pub(crate) len_at_end: usize,
    pub(crate) size_at_end: usize,
    /// Peak resident set size (`VmHWM`), if `/proc/self/status` has it.
    pub(crate) peak_rss_kib: Option<u64>,
    pub(crate) elapsed: Duration,
}

impl Report {
    /// Reads the books once the run is over.
    pub(crate) fn collect(
        group: &Group,
        stopped: u64,
        beats: BeatStats,
        workers: Vec<WorkerStats>,
        len_at_end: usize,
        size_at_end: usize,
        elapsed: Duration,
    ) -> Report {
        let (mut expired_once, mut expired_twice, mut never_expired, mut live_expired) =
            (0, 0, 0, 0);
        for (member, expiries) in group.expiries.iter().enumerate() {
            let expiries = u64::from(expiries.load(Ordering::Acquire));
            match (group.stops_after(member as u32).is_some(), expiries) {
                (true, 0) => never_expired += 1,
                (true, 1) => expired_once += 1,
                (true, _) => expired_twice += 1,
                (false, n) => live_expired += n,
            }
        }
        let handled_by_worker = workers.iter().map(|w| w.handled).collect();
        let lateness_us: Vec<i64> = workers.into_iter().flat_map(|w| w.lateness_us).collect();
        let tick_us = group.tick_ms() * 1_000;
        let within_a_tick = lateness_us.iter().filter(|&&us| us <= tick_us).count() as u64;
        Report {
            members: group.expiries.len() as u64,
            stopped,
            beats,
            handled_by_worker,
            expired_once,
            expired_twice,
            never_expired,
            live_expired,
            lateness: Lateness::of(lateness_us),
            tick_ms: group.tick_ms(),
            within_a_tick,
            len_at_end,
            size_at_end,
            peak_rss_kib: peak_rss_kib(),
            elapsed,
        }
    }

    /// Live members: those that never stopped.
    pub(crate) fn live(&self) -> u64 {
        self.members - self.stopped
    }

    fn each_stopped_member_expired_once(&self) -> bool {
        self.expired_once == self.stopped && self.expired_twice == 0 && self.never_expired == 0
    }

    /// The earliest an expiry may come, in µs after its deadline: with a 1 ms tick, never
    /// before it; with a coarser one, up to a tick before (`expiration_ms - tick_ms`).
    pub(crate) fn earliest_allowed_us(&self) -> i64 {
        if self.tick_ms == 1 {
            0
        } else {
            -self.tick_ms * 1_000
        }
    }

    fn none_early(&self) -> bool {
        self.lateness.count == 0 || self.lateness.min_us >= self.earliest_allowed_us()
    }

    fn live_timeouts_left(&self) -> bool {
        self.len_at_end as u64 == self.live() && self.size_at_end as u64 == self.live()
    }

    /// The invariant: every member that stopped expired exactly once, no live member ever
    /// did, none before its deadline, and exactly one timeout per live member is left.
    pub(crate) fn invariant_holds(&self) -> bool {
        self.each_stopped_member_expired_once()
            && self.live_expired == 0
            && self.none_early()
            && self.live_timeouts_left()
    }

    /// The summary table.
    pub(crate) fn summary(&self, config: &Config) -> String {
        let ok = |good: bool| if good { "ok" } else { "FAILED" };
        let ms = |us: i64| us as f64 / 1e3;
        let beats = &self.beats;
        let mut out = String::new();
        let w = &mut out;
        let _ = writeln!(
            w,
            "sessions: {} members, heartbeat every {} ms, session timeout {} ms, {} % stop, \
             {} workers, tick {} ms, wheel size {}, seed {}",
            group(self.members),
            config.heartbeat_ms,
            config.session_timeout_ms,
            config.stop_ratio * 100.0,
            config.workers,
            config.tick_ms,
            config.wheel_size,
            config.seed
        );
        let _ = writeln!(w);
        let _ = writeln!(w, "{}count  rate", " ".repeat(32 + 1 + 12 - 5));
        let _ = writeln!(
            w,
            "{:<32} {:>12}  {:.2} M/s ({:.0} ns per heartbeat, joins' new tasks included)",
            "heartbeats (KeyedTimer::reschedule)",
            group(beats.beats),
            beats.beats as f64 / beats.schedule_time.as_secs_f64().max(1e-9) / 1e6,
            beats.schedule_time.as_nanos() as f64 / beats.beats.max(1) as f64
        );
        let _ = writeln!(
            w,
            "{:<32} {:>12}  (most behind schedule: {} ms)",
            "", "", beats.worst_lag_ms
        );
        let _ = writeln!(
            w,
            "{:<32} {:>12}",
            "members that stopped",
            group(self.stopped)
        );
        let per_worker: Vec<String> = self.handled_by_worker.iter().map(group).collect();
        let _ = writeln!(
            w,
            "{:<32} {:>12}  by {} workers: {}",
            "session expiries handled",
            group(self.handled_by_worker.iter().sum::<u64>()),
            self.handled_by_worker.len(),
            per_worker.join(" / ")
        );
        let _ = writeln!(
            w,
            "{:<32} {:>12}  {}",
            "lateness of expiries",
            "",
            self.lateness.describe()
        );
        let share = self.within_a_tick as f64 * 100.0 / self.lateness.count.max(1) as f64;
        let _ = writeln!(
            w,
            "{:<32} {:>12}  {share:.1} % ({} of {})",
            format!("  within a tick ({} ms)", config.tick_ms),
            "",
            group(self.within_a_tick),
            group(self.lateness.count)
        );
        let _ = writeln!(
            w,
            "{:<32} {:>12}  (KeyedTimer::len {}, timer size {})",
            "live sessions at the end",
            group(self.live()),
            group(self.len_at_end),
            group(self.size_at_end)
        );
        let rss = mib(self.peak_rss_kib);
        let _ = writeln!(w, "{:<32} {:>12}", "peak memory of the process", rss);
        let _ = writeln!(
            w,
            "{:<32} {:>12}",
            "wall time",
            format!("{:.2} s", self.elapsed.as_secs_f64())
        );
        let _ = writeln!(w);
        let _ = writeln!(
            w,
            "lateness: when a worker handled the expiry, minus (the member's last heartbeat +"
        );
        let _ = writeln!(
            w,
            "  the session timeout): the timer fires at the tick after the deadline, then the"
        );
        let _ = writeln!(
            w,
            "  message waits for a worker. Never below 0 (with a tick above 1 ms, never below"
        );
        let _ = writeln!(w, "  minus a tick).");
        let _ = writeln!(w);
        let _ = writeln!(w, "invariant");
        let _ = writeln!(
            w,
            "  every member that stopped expired exactly once: {} of {}; {} more than once, {} never  {}",
            group(self.expired_once),
            group(self.stopped),
            self.expired_twice,
            self.never_expired,
            ok(self.each_stopped_member_expired_once())
        );
        let _ = writeln!(
            w,
            "  no live member expired: {}  {}",
            self.live_expired,
            ok(self.live_expired == 0)
        );
        let _ = writeln!(
            w,
            "  no expiry before its deadline: earliest {:.2} ms after it (allowed {:.0} ms)  {}",
            ms(self.lateness.min_us),
            ms(self.earliest_allowed_us()),
            ok(self.none_early())
        );
        let _ = writeln!(
            w,
            "  one timeout per live member left: {} live, len {}, size {}  {}",
            group(self.live()),
            group(self.len_at_end),
            group(self.size_at_end),
            ok(self.live_timeouts_left())
        );
        let _ = writeln!(
            w,
            "  result: {}",
            if self.invariant_holds() {
                "OK"
            } else {
                "FAILED"
            }
        );
        out
    }
}

/// The progress line on stderr, at most five times a second.
pub(crate) struct Progress {
    enabled: bool,
    line: ProgressLine,
    last: Option<Instant>,
}

impl Progress {
    /// Time between two updates: five a second.
    const EVERY: Duration = Duration::from_millis(200);

    pub(crate) fn new(enabled: bool) -> Progress {
        Progress {
            enabled,
            line: ProgressLine::new(),
            last: None,
        }
    }

    pub(crate) fn tick(&mut self, group: &Group, stopping: u64, start: Instant, last: bool) {
        if !self.enabled || (!last && self.last.is_some_and(|at| at.elapsed() < Self::EVERY)) {
            return;
        }
        self.last = Some(Instant::now());
        self.line.show(&format!(
            "heartbeats {:>10}  expired {:>7} of {:>7} stopping  elapsed {:>6.2} s",
            group.beats.load(Ordering::Relaxed),
            group.expired.load(Ordering::Relaxed),
            stopping,
            start.elapsed().as_secs_f64()
        ));
        if last {
            self.line.finish();
        }
    }
}
