//! The shop's books (each order's outcome, the stock counters), and the payer's schedule.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU8, AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::common::Ledger;
use super::state::State;

/// The ways an order settles, in its ledger.
pub(crate) const PAID: usize = 0;
pub(crate) const EXPIRED: usize = 1;

/// The shop's books, shared by the creator, the payer and the expiry checks.
pub(crate) struct Shop {
    /// Each order paid or expired, exactly once; an expiry with its lateness in µs.
    pub(crate) orders: Ledger,
    pub(crate) created: AtomicU64,
    pub(crate) stock_reserved: AtomicI64,
    pub(crate) stock_reserved_total: AtomicU64,
    pub(crate) stock_sold: AtomicU64,
    pub(crate) stock_returned: AtomicU64,
    /// Lateness of the check that ran last, in µs (the timer has one executor thread).
    pub(crate) last_lateness_us: AtomicI64,
    /// Each order's units, for the state a stopped run writes.
    pub(crate) qty: Vec<AtomicU8>,
}

impl Shop {
    pub(crate) fn new(orders: u32) -> Shop {
        Shop {
            orders: Ledger::new(orders as usize),
            created: AtomicU64::new(0),
            stock_reserved: AtomicI64::new(0),
            stock_reserved_total: AtomicU64::new(0),
            stock_sold: AtomicU64::new(0),
            stock_returned: AtomicU64::new(0),
            last_lateness_us: AtomicI64::new(0),
            qty: (0..orders).map(|_| AtomicU8::new(0)).collect(),
        }
    }

    /// The books a stopped run left in `state`.
    pub(crate) fn restored(state: &State) -> Shop {
        let shop = Shop::new(state.orders);
        for &(order, way, figure_us) in &state.settled {
            shop.orders.settle(order as usize, way, figure_us);
        }
        for &(order, qty, _) in &state.checks {
            shop.qty[order as usize].store(qty, Ordering::Relaxed);
        }
        let [total, sold, returned] = state.stock;
        shop.created
            .store(u64::from(state.created), Ordering::Relaxed);
        shop.stock_reserved_total.store(total, Ordering::Relaxed);
        shop.stock_sold.store(sold, Ordering::Relaxed);
        shop.stock_returned.store(returned, Ordering::Relaxed);
        let reserved = total as i64 - sold as i64 - returned as i64;
        shop.stock_reserved.store(reserved, Ordering::Relaxed);
        shop
    }

    /// The books for the next run: the orders created, each settled one with its figure,
    /// the stock counters (and the checks and payments the caller adds).
    pub(crate) fn state(&self) -> State {
        let mut settled = Vec::new();
        for way in [PAID, EXPIRED] {
            let orders = (0..self.qty.len()).filter(|&order| self.orders.way(order) == Some(way));
            // `figures_us` lists the figures in the same order.
            let figures = self.orders.figures_us(way).into_iter();
            settled.extend(
                orders
                    .zip(figures)
                    .map(|(order, us)| (order as u32, way, us)),
            );
        }
        let load = |counter: &AtomicU64| counter.load(Ordering::Acquire);
        State {
            orders: self.qty.len() as u32,
            created: load(&self.created) as u32,
            stock: [
                &self.stock_reserved_total,
                &self.stock_sold,
                &self.stock_returned,
            ]
            .map(load),
            settled,
            ..State::default()
        }
    }

    /// New order `order` reserves `qty` units.
    pub(crate) fn reserve(&self, order: u32, qty: u8) {
        self.qty[order as usize].store(qty, Ordering::Relaxed);
        self.stock_reserved
            .fetch_add(i64::from(qty), Ordering::Relaxed);
        self.stock_reserved_total
            .fetch_add(u64::from(qty), Ordering::Relaxed);
        self.created.fetch_add(1, Ordering::Relaxed);
    }

    /// The order was paid: its reserved stock is sold.
    pub(crate) fn pay(&self, order: u32, qty: u8) {
        if self.orders.settle(order as usize, PAID, 0) {
            self.stock_reserved
                .fetch_sub(i64::from(qty), Ordering::Relaxed);
            self.stock_sold.fetch_add(u64::from(qty), Ordering::Relaxed);
        }
    }

    /// The order's check ran: it was not paid in time, its reserved stock goes back.
    pub(crate) fn expire(&self, order: u32, qty: u8, due: Instant) {
        let now = Instant::now();
        let late_us = match now.checked_duration_since(due) {
            Some(late) => late.as_micros() as i64,
            None => -(due.duration_since(now).as_micros() as i64),
        };
        if self.orders.settle(order as usize, EXPIRED, late_us) {
            self.stock_reserved
                .fetch_sub(i64::from(qty), Ordering::Relaxed);
            self.stock_returned
                .fetch_add(u64::from(qty), Ordering::Relaxed);
            self.last_lateness_us.store(late_us, Ordering::Relaxed);
        }
    }
}

/// Receives items from `incoming` and hands each to `pay` once the millisecond `due_ms`
/// gives it (counted from `start`) has come; returns when `incoming` is closed and every
/// item is paid, or once `stop` is set (with `incoming` closed): then with the items it
/// did not pay.
pub(crate) fn pay_on_time<T>(
    start: Instant,
    incoming: mpsc::Receiver<T>,
    due_ms: impl Fn(&T) -> u32,
    pay: &mut impl FnMut(T),
    stop: &AtomicBool,
) -> Vec<T> {
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
            return Vec::new();
        }
        if stop.load(Ordering::Acquire) {
            return buckets.into_iter().flatten().chain(incoming).collect();
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
