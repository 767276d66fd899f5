//! What the run measured, the table at the end, and the progress line while it runs.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::Config;
use super::books::{EXPIRED, Shop};
use super::common::{Percentiles, Table, Tally, group, rate, secs};

/// What the creating thread measured.
#[derive(Clone, Debug)]
pub(crate) struct CreateStats {
    /// Orders this run created (a run after a stop creates those still to come).
    pub(crate) created: u64,
    /// Wall time of the whole loop (add, reserve, hand to the payer).
    pub(crate) create_time: Duration,
    /// Time spent inside `add` (allocating the task included), summed over the calls.
    pub(crate) add_time: Duration,
}

/// What the paying thread measured.
#[derive(Clone, Debug, Default)]
pub(crate) struct PayStats {
    /// `cancel()` calls, and the time spent inside them.
    pub(crate) cancels: u64,
    pub(crate) cancel_time: Duration,
    /// Payments whose `cancel()` returned false: the check had fired first.
    pub(crate) paid_too_late: u64,
}

/// What happened.
#[derive(Clone, Debug)]
pub(crate) struct Report {
    /// Orders paid and expired, each with how late its check ran (in µs: the instant it ran
    /// minus the instant of its `add` plus its delay; negative would mean early).
    pub(crate) orders: Tally,
    /// Stock units reserved over the run, sold to payers, returned by expiries.
    pub(crate) stock_reserved_total: u64,
    pub(crate) stock_sold: u64,
    pub(crate) stock_returned: u64,
    /// Units still reserved at the end (must be 0).
    pub(crate) stock_reserved_left: i64,
    /// `size()` of the timer before it was closed (must be 0).
    pub(crate) timer_size_at_end: usize,
    pub(crate) create: CreateStats,
    pub(crate) pay: PayStats,
    /// Lateness of the check that ran last, in µs (0 if none ran).
    pub(crate) last_expiry_lateness_us: i64,
    pub(crate) elapsed: Duration,
    /// A run after a stop: what it restored.
    pub(crate) restored: Option<Restored>,
    /// A run stopped early: what it carried over to the next.
    pub(crate) carried: Option<Carried>,
}

/// What a run after a stop read back: checks (those lapsed meanwhile among them) and
/// payments to make.
#[derive(Clone, Debug)]
pub(crate) struct Restored {
    pub(crate) checks: u64,
    pub(crate) lapsed: u64,
    pub(crate) payments: u64,
}

/// What a run stopped early wrote for the next one.
#[derive(Clone, Debug)]
pub(crate) struct Carried {
    /// Checks of orders still open, and payments not made yet.
    pub(crate) checks: u64,
    pub(crate) payments: u64,
    /// Orders still open without a check carried over (must be 0).
    pub(crate) lost: u64,
    /// The units the carried-over orders hold.
    pub(crate) stock_held: i64,
    /// Orders not created yet.
    pub(crate) to_create: u64,
}

impl Report {
    /// How late the expiry checks ran.
    pub(crate) fn lateness(&self) -> Percentiles {
        self.orders.figures[EXPIRED]
    }

    /// The table, and the invariant: every order paid or expired exactly once, no stock
    /// left reserved, nothing left in the timer.
    pub(crate) fn table(&self, config: &Config) -> Table {
        let (create, pay, [paid, expired]) = (&self.create, &self.pay, self.orders.settled);
        let mut t = Table::new(format!(
            "reconcile: {} orders, deadlines {}-{} ms, pay ratio {}, tick {} ms, wheel size {}, seed {}",
            group(self.orders.items),
            config.deadline_min_ms,
            config.deadline_max_ms,
            config.pay_ratio,
            config.tick_ms,
            config.wheel_size,
            config.seed
        ));
        let orders = create.created;
        t.row("", "count", "rate");
        if let Some(restored) = &self.restored {
            let lapsed = format!(
                "{} lapsed, spread over {} ms",
                group(restored.lapsed),
                config.spread_ms
            );
            t.row("checks restored (restart)", group(restored.checks), lapsed);
            t.row("payments restored", group(restored.payments), "");
        }
        let per_add = rate(orders, create.add_time, "add, incl. allocating the task");
        t.row("add (schedule a check)", group(orders), per_add);
        let per_order = "order: add, reserve, hand to the payer";
        let per_order = rate(orders, create.create_time, per_order);
        t.row("orders created", group(orders), per_order);
        let per_cancel = rate(pay.cancels, pay.cancel_time, "cancel");
        t.row("cancel (payment)", group(pay.cancels), per_cancel);
        t.row("paid", group(paid), "");
        t.row("expired", group(expired), "");
        let too_late = group(pay.paid_too_late);
        t.row("  of which paid too late", too_late, "(counted as expired)");
        t.row("lateness of expiries", "", self.lateness().describe());
        let last_ms = self.last_expiry_lateness_us as f64 / 1e3;
        t.row("  of the last check to run", "", format!("{last_ms:.2} ms"));
        t.row("wall time", secs(self.elapsed), "");
        t.note(
            "lateness: when a check ran, minus (when its order was created + its deadline);\n  \
             never below 0. The last check to run shows the timer kept up to the very end.",
        );
        t.note(
            "peak memory: the most the whole process held in RAM at once (VmHWM in\n  \
             /proc/self/status): the orders' books, their checks and every thread included.",
        );
        let stock = format!(
            "stock reserved at end: {} units (reserved {}, sold {}, returned {})",
            self.stock_reserved_left,
            group(self.stock_reserved_total),
            group(self.stock_sold),
            group(self.stock_returned),
        );
        let left = self.stock_reserved_left;
        let stock_back =
            self.stock_sold + self.stock_returned + left as u64 == self.stock_reserved_total;
        let Some(carried) = &self.carried else {
            t.check(stock, left == 0 && stock_back);
            self.orders
                .check_once(&mut t, "one outcome per order", ["paid", "expired"]);
            let left = self.timer_size_at_end;
            t.check(format!("timer empty at end: size {left}"), left == 0);
            return t;
        };
        t.row(
            "stopped: checks carried over",
            group(carried.checks),
            config.state.as_str(),
        );
        t.row("  payments carried over", group(carried.payments), "");
        t.row("  orders still to create", group(carried.to_create), "");
        t.check(
            format!("{stock}; held by open orders {}", carried.stock_held),
            left == carried.stock_held && stock_back,
        );
        let ([paid, expired], tally) = (self.orders.settled, &self.orders);
        let line = format!(
            "one outcome per order or carried over: {} paid + {} expired + {} carried + {} to create = {} of {}; {} more than once, {} lost",
            group(paid),
            group(expired),
            group(carried.checks),
            group(carried.to_create),
            group(paid + expired + carried.checks + carried.to_create),
            group(tally.items),
            tally.twice,
            carried.lost
        );
        let once = paid + expired + carried.checks + carried.to_create == tally.items;
        t.check(line, once && tally.twice == 0 && carried.lost == 0);
        t
    }
}

/// The progress line.
pub(crate) fn progress(shop: &Shop) -> String {
    let created = shop.created.load(Ordering::Relaxed);
    let [paid, expired] = shop.orders.settled();
    let pending = created.saturating_sub(paid + expired);
    format!("created {created:>9}  paid {paid:>9}  expired {expired:>9}  pending {pending:>9}")
}
