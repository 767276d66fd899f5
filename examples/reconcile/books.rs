//! The shop's books (per-order states and stock counters), the payer's schedule, and the
//! seeded random numbers of the run.

use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, AtomicU8, AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

pub(crate) const PENDING: u8 = 0;
pub(crate) const PAID: u8 = 1;
pub(crate) const EXPIRED: u8 = 2;

/// The shop's books, shared by the creator, the payer and the expiry checks.
pub(crate) struct Shop {
    /// One state per order: `PENDING`, then `PAID` or `EXPIRED`, set once by
    /// compare-exchange, so a second outcome is caught.
    pub(crate) state: Vec<AtomicU8>,
    pub(crate) created: AtomicU64,
    pub(crate) paid: AtomicU64,
    pub(crate) expired: AtomicU64,
    pub(crate) double_outcomes: AtomicU64,
    pub(crate) stock_reserved: AtomicI64,
    pub(crate) stock_reserved_total: AtomicU64,
    pub(crate) stock_sold: AtomicU64,
    pub(crate) stock_returned: AtomicU64,
    /// Lateness of each expiry, in µs, in the order they ran (the timer has one executor
    /// thread).
    pub(crate) lateness_us: Mutex<Vec<i64>>,
}

impl Shop {
    pub(crate) fn new(orders: u32) -> Shop {
        Shop {
            state: (0..orders).map(|_| AtomicU8::new(PENDING)).collect(),
            created: AtomicU64::new(0),
            paid: AtomicU64::new(0),
            expired: AtomicU64::new(0),
            double_outcomes: AtomicU64::new(0),
            stock_reserved: AtomicI64::new(0),
            stock_reserved_total: AtomicU64::new(0),
            stock_sold: AtomicU64::new(0),
            stock_returned: AtomicU64::new(0),
            lateness_us: Mutex::new(Vec::new()),
        }
    }

    /// A new order reserves `qty` units.
    pub(crate) fn reserve(&self, qty: u8) {
        self.stock_reserved
            .fetch_add(i64::from(qty), Ordering::Relaxed);
        self.stock_reserved_total
            .fetch_add(u64::from(qty), Ordering::Relaxed);
    }

    pub(crate) fn count_created(&self) {
        self.created.fetch_add(1, Ordering::Relaxed);
    }

    /// Records `outcome` for `order`; false (and a double outcome) if it already had one.
    fn settle(&self, order: u32, outcome: u8) -> bool {
        let settled = self.state[order as usize]
            .compare_exchange(PENDING, outcome, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        if !settled {
            self.double_outcomes.fetch_add(1, Ordering::Relaxed);
        }
        settled
    }

    /// The order was paid: its reserved stock is sold.
    pub(crate) fn pay(&self, order: u32, qty: u8) {
        if self.settle(order, PAID) {
            self.stock_reserved
                .fetch_sub(i64::from(qty), Ordering::Relaxed);
            self.stock_sold.fetch_add(u64::from(qty), Ordering::Relaxed);
            self.paid.fetch_add(1, Ordering::Release);
        }
    }

    /// The order's check ran: it was not paid in time, its reserved stock goes back.
    pub(crate) fn expire(&self, order: u32, qty: u8, due: Instant) {
        let now = Instant::now();
        let late_us = match now.checked_duration_since(due) {
            Some(late) => late.as_micros() as i64,
            None => -(due.duration_since(now).as_micros() as i64),
        };
        if self.settle(order, EXPIRED) {
            self.stock_reserved
                .fetch_sub(i64::from(qty), Ordering::Relaxed);
            self.stock_returned
                .fetch_add(u64::from(qty), Ordering::Relaxed);
            self.lateness_us.lock().unwrap().push(late_us);
            self.expired.fetch_add(1, Ordering::Release);
        }
    }

    /// Orders paid or expired so far.
    pub(crate) fn settled(&self) -> u64 {
        self.paid.load(Ordering::Acquire) + self.expired.load(Ordering::Acquire)
    }
}

/// Receives items from `incoming` and hands each to `pay` once the millisecond `due_ms`
/// gives it (counted from `start`) has come; returns when `incoming` is closed and every
/// item is paid.
pub(crate) fn pay_on_time<T>(
    start: Instant,
    incoming: mpsc::Receiver<T>,
    due_ms: impl Fn(&T) -> u32,
    pay: &mut impl FnMut(T),
) {
    /// Items drained from the channel before paying what is due again.
    const DRAIN_BATCH: usize = 8_192;
    // Items by the millisecond they are due; all before `next_ms` are paid.
    let mut buckets: Vec<Vec<T>> = Vec::new();
    let mut next_ms = 0usize;
    let mut waiting = 0usize;
    let mut closed = false;
    loop {
        let now_ms = start.elapsed().as_millis() as usize;
        while next_ms <= now_ms && next_ms < buckets.len() {
            for item in std::mem::take(&mut buckets[next_ms]) {
                waiting -= 1;
                pay(item);
            }
            next_ms += 1;
        }
        if closed && waiting == 0 {
            return;
        }
        let first = match incoming.recv_timeout(Duration::from_millis(1)) {
            Ok(item) => Some(item),
            Err(mpsc::RecvTimeoutError::Timeout) => None,
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                closed = true;
                None
            }
        };
        for item in first
            .into_iter()
            .chain(incoming.try_iter().take(DRAIN_BATCH))
        {
            let at = due_ms(&item) as usize;
            if at < next_ms {
                pay(item);
                continue;
            }
            if at >= buckets.len() {
                buckets.resize_with(at + 1, Vec::new);
            }
            buckets[at].push(item);
            waiting += 1;
        }
    }
}

/// SplitMix64: small, fast, and good enough to spread deadlines.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// Uniform in `[0, 1)`.
    pub(crate) fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}
