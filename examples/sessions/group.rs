//! The group's books: who stops heartbeating and when, each member's last heartbeat, and
//! the expiries the workers received.

use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};

use super::Config;

/// A member that stops heartbeating does so after 0 (right after joining) to this many
/// heartbeats.
pub(crate) const LAST_BEAT_MAX: u32 = 2;

/// The books of the run, shared by the heartbeating thread and the workers.
pub(crate) struct Group {
    members: u32,
    heartbeat_ms: u32,
    tick_ms: i64,
    seed: u64,
    /// Members whose hash falls below this stop heartbeating.
    stop_below: u64,
    /// Per member: expiries handled for it.
    pub(crate) expiries: Vec<AtomicU8>,
    /// Per member: when its last heartbeat started, in µs since the start of the run.
    pub(crate) last_beat_us: Vec<AtomicU64>,
    /// Heartbeats so far (joins included).
    pub(crate) beats: AtomicU64,
    /// Expiries handled so far.
    pub(crate) expired: AtomicU64,
}

impl Group {
    pub(crate) fn new(config: &Config) -> Group {
        let stop_below = (config.stop_ratio * 2f64.powi(64)).min(u64::MAX as f64) as u64;
        Group {
            members: config.members,
            heartbeat_ms: config.heartbeat_ms,
            tick_ms: config.tick_ms,
            seed: config.seed,
            stop_below,
            expiries: (0..config.members).map(|_| AtomicU8::new(0)).collect(),
            last_beat_us: (0..config.members).map(|_| AtomicU64::new(0)).collect(),
            beats: AtomicU64::new(0),
            expired: AtomicU64::new(0),
        }
    }

    /// The heartbeat after which `member` stops, if it is one that stops.
    pub(crate) fn stops_after(&self, member: u32) -> Option<u32> {
        let hash = mix(self.seed ^ u64::from(member).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        (hash < self.stop_below).then(|| (mix(hash) % u64::from(LAST_BEAT_MAX + 1)) as u32)
    }

    /// The timer's tick.
    pub(crate) fn tick_ms(&self) -> i64 {
        self.tick_ms
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

    /// Records that a worker handled an expiry of `member`.
    pub(crate) fn expire(&self, member: u32) {
        self.expiries[member as usize].fetch_add(1, Ordering::AcqRel);
        self.expired.fetch_add(1, Ordering::Relaxed);
    }
}

/// SplitMix64's finalizer: a well-spread hash of `x`.
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}
