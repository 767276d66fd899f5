//! The group's books: who stops heartbeating and when, each member's last heartbeat, and
//! the expiries the workers received.

use std::sync::atomic::AtomicU64;

use super::cli::Config;
use super::common::{Ledger, Rng};

/// The ways a member's session expires, in its ledger: it stopped heartbeating, or it is
/// live (which must never happen).
pub(crate) const STOPPED: usize = 0;
pub(crate) const LIVE: usize = 1;

/// A member that stops heartbeating does so after 0 (right after joining) to this many
/// heartbeats.
pub(crate) const LAST_BEAT_MAX: u32 = 2;

/// The books of the run, shared by the heartbeating thread and the workers.
pub(crate) struct Group {
    members: u32,
    heartbeat_ms: u32,
    seed: u64,
    /// Members whose hash falls below this stop heartbeating.
    stop_below: u64,
    /// Each member's expiry: a stopped one's exactly once, with how late it was handled in
    /// µs (the instant a worker handled it minus the instant of the member's last
    /// heartbeat plus the session timeout; negative means early, which only a tick above
    /// 1 ms allows, by up to a tick); a live one's never.
    pub(crate) expiries: Ledger,
    /// Per member: when its last heartbeat started, in µs since the start of the run.
    pub(crate) last_beat_us: Vec<AtomicU64>,
    /// Heartbeats so far (joins included).
    pub(crate) beats: AtomicU64,
}

impl Group {
    pub(crate) fn new(config: &Config) -> Group {
        let stop_below = (config.stop_ratio * 2f64.powi(64)).min(u64::MAX as f64) as u64;
        Group {
            members: config.members,
            heartbeat_ms: config.heartbeat_ms,
            seed: config.seed,
            stop_below,
            expiries: Ledger::new(config.members as usize),
            last_beat_us: (0..config.members).map(|_| AtomicU64::new(0)).collect(),
            beats: AtomicU64::new(0),
        }
    }

    /// The heartbeat after which `member` stops, if it is one that stops.
    pub(crate) fn stops_after(&self, member: u32) -> Option<u32> {
        let hash = Rng::nth(self.seed, u64::from(member));
        (hash < self.stop_below).then(|| (hash % u64::from(LAST_BEAT_MAX + 1)) as u32)
    }

    /// Members that stop heartbeating.
    pub(crate) fn stopping(&self) -> u64 {
        (0..self.members)
            .filter(|&m| self.stops_after(m).is_some())
            .count() as u64
    }

    /// The members whose heartbeats fall on millisecond `phase` of each interval: member
    /// `m` heartbeats at `m * heartbeat_ms / members` ms into every interval, so that the
    /// heartbeats spread evenly.
    pub(crate) fn beating_at(&self, phase: u32) -> std::ops::Range<u32> {
        let first = |phase: u32| {
            (u64::from(phase) * u64::from(self.members)).div_ceil(u64::from(self.heartbeat_ms))
                as u32
        };
        first(phase)..first(phase + 1)
    }
}
