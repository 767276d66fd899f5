//! What the run measured, the table at the end, and the progress line while it runs.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::cli::Config;
use super::common::{Percentiles, Table, Tally, group, rate, secs};
use super::group::{Group, STOPPED};

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

/// What happened.
#[derive(Clone, Debug)]
pub(crate) struct Report {
    /// The members' expiries, each way (see `Group::expiries`).
    pub(crate) members: Tally,
    /// Members that stopped heartbeating.
    pub(crate) stopped: u64,
    pub(crate) beats: BeatStats,
    /// Expiries handled by each worker.
    pub(crate) handled_by_worker: Vec<u64>,
    /// The timer's tick: with a tick above 1 ms an expiry may come up to a tick early.
    pub(crate) tick_ms: i64,
    /// Expiries handled within one tick of their deadline.
    pub(crate) within_a_tick: u64,
    /// `KeyedTimer::len` and the timer's `size()` once the heartbeats ended: both must be
    /// the number of live members.
    pub(crate) len_at_end: usize,
    pub(crate) size_at_end: usize,
    pub(crate) elapsed: Duration,
}

impl Report {
    /// How late the expiries of the members that stopped were handled.
    pub(crate) fn lateness(&self) -> Percentiles {
        self.members.figures[STOPPED]
    }

    /// Live members: those that never stopped.
    pub(crate) fn live(&self) -> u64 {
        self.members.items - self.stopped
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

    /// The table, and the invariant: every member that stopped expired exactly once, no
    /// live member ever did, none before its deadline, and exactly one timeout per live
    /// member is left.
    pub(crate) fn table(&self, config: &Config) -> Table {
        let (beats, lateness) = (&self.beats, self.lateness());
        let mut t = Table::new(format!(
            "sessions: {} members, heartbeat every {} ms, session timeout {} ms, {} % stop, \
             {} workers, tick {} ms, wheel size {}, seed {}",
            group(self.members.items),
            config.heartbeat_ms,
            config.session_timeout_ms,
            config.stop_ratio * 100.0,
            config.workers,
            config.tick_ms,
            config.wheel_size,
            config.seed
        ));
        t.row("", "count", "rate");
        let per_beat = "heartbeat, joins' new tasks included";
        let per_beat = rate(beats.beats, beats.schedule_time, per_beat);
        t.row(
            "heartbeats (KeyedTimer::reschedule)",
            group(beats.beats),
            per_beat,
        );
        t.row(
            "",
            "",
            format!("(most behind schedule: {} ms)", beats.worst_lag_ms),
        );
        t.row("members that stopped", group(self.stopped), "");
        let per_worker: Vec<String> = self.handled_by_worker.iter().map(group).collect();
        let by_workers = format!(
            "by {} workers: {}",
            per_worker.len(),
            per_worker.join(" / ")
        );
        let handled = group(self.handled_by_worker.iter().sum::<u64>());
        t.row("session expiries handled", handled, by_workers);
        t.row("lateness of expiries", "", lateness.describe());
        let share = self.within_a_tick as f64 * 100.0 / lateness.count.max(1) as f64;
        let (within, count) = (group(self.within_a_tick), group(lateness.count));
        let within = format!("{share:.1} % ({within} of {count})");
        t.row(
            format!("  within a tick ({} ms)", config.tick_ms),
            "",
            within,
        );
        let (len, size) = (group(self.len_at_end), group(self.size_at_end));
        let ends = format!("(KeyedTimer::len {len}, timer size {size})");
        t.row("live sessions at the end", group(self.live()), ends);
        t.row("wall time", secs(self.elapsed), "");
        t.note(
            "lateness: when a worker handled the expiry, minus (the member's last heartbeat +\n  \
             the session timeout): the timer fires at the tick after the deadline, then the\n  \
             message waits for a worker. Never below 0 (with a tick above 1 ms, never below\n  \
             minus a tick).",
        );

        let ms = |us: i64| us as f64 / 1e3;
        let [expired, live_expired] = self.members.settled;
        let once = format!(
            "every member that stopped expired exactly once: {} of {}; {} more than once, {} never",
            group(expired),
            group(self.stopped),
            self.members.twice,
            self.stopped.saturating_sub(expired),
        );
        t.check(once, expired == self.stopped && self.members.twice == 0);
        t.check(
            format!("no live member expired: {live_expired}"),
            live_expired == 0,
        );
        let early = format!(
            "no expiry before its deadline: earliest {:.2} ms after it (allowed {:.0} ms)",
            ms(lateness.min_us),
            ms(self.earliest_allowed_us()),
        );
        t.check(
            early,
            lateness.count == 0 || lateness.min_us >= self.earliest_allowed_us(),
        );
        let left = format!(
            "one timeout per live member left: {} live, len {len}, size {size}",
            group(self.live())
        );
        let live = self.live() as usize;
        t.check(left, self.len_at_end == live && self.size_at_end == live);
        t
    }
}

/// The progress line.
pub(crate) fn progress(group: &Group, stopping: u64) -> String {
    format!(
        "heartbeats {:>10}  expired {:>7} of {:>7} stopping",
        group.beats.load(Ordering::Relaxed),
        group.expiries.settled()[STOPPED],
        stopping,
    )
}
