//! Order reconciliation, the job this crate exists for.
//!
//! A shop reserves stock for every new order and schedules a reconciliation check at the
//! order's payment deadline: `timer.add(...)`. An order paid in time cancels its check:
//! `check.cancel()`, O(1), and the check is freed at once. An unpaid order's check runs
//! and returns the stock. A payment races with its check: if the check fired first,
//! `cancel()` returns false and the order counts as expired ("paid too late").
//!
//! One thread creates the orders as fast as it can, a second pays 90 % of them at random
//! moments before their deadline, and a [`SystemTimerReaper`] drives the checks. A progress
//! line goes to stderr while it runs; at the end a table goes to stdout (`report.rs`), with
//! the invariant checked per order: every order paid or expired exactly once, no stock left
//! reserved. The exit code is 1 if it fails.
//!
//! ```text
//! cargo run --release --example reconcile
//! cargo run --release --example reconcile -- --orders 200000 --pay-ratio 0.5 --seed 7
//! cargo run --release --example reconcile -- --help
//! ```
//!
//! This file holds the timer's part; `books.rs` the shop's counters, `cli.rs` the command
//! line, `report.rs` the table.

#![allow(clippy::print_stdout)]

mod books;
pub(crate) mod cli;
#[path = "../common/mod.rs"]
pub(crate) mod common;
pub(crate) mod report;

use std::sync::atomic::Ordering;
use std::sync::{Arc, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use timingwheel::{SystemTimer, SystemTimerReaper, Timer, TimerTaskEntry, timer_task};

use books::Shop;
use cli::Config;
use common::{Progress, Rng};
use report::{CreateStats, PayStats, Report};

fn main() {
    common::example_main("reconcile", cli::parse_args, |config| {
        run(config).table(config)
    });
}

/// Creates the orders, each with its check on the timer; hands those that will be paid to
/// the payer.
fn create_orders(
    config: &Config,
    shop: &Arc<Shop>,
    timer: &dyn Timer,
    start: Instant,
    payments: mpsc::Sender<Payment>,
) -> CreateStats {
    let mut rng = Rng::new(config.seed);
    let spread = u64::from(config.deadline_max_ms - config.deadline_min_ms) + 1;
    let begin = Instant::now();
    let mut add_time = Duration::ZERO;
    for order in 0..config.orders {
        let deadline_ms = config.deadline_min_ms as u64 + rng.below(spread);
        let qty = 1 + rng.below(3) as u8;
        let pays = rng.unit() < config.pay_ratio;
        let pay_after_ms = rng.below(deadline_ms);
        shop.reserve(qty);

        // Schedule the check: if it runs, the order was not paid in time.
        let added_at = Instant::now();
        let due = added_at + Duration::from_millis(deadline_ms);
        let books = Arc::clone(shop);
        let check = timer.add(timer_task(deadline_ms as i64, move || {
            books.expire(order, qty, due)
        }));
        add_time += added_at.elapsed();

        if pays {
            let pay_ms = (added_at - start).as_millis() as u64 + pay_after_ms;
            let payment = Payment {
                pay_ms: u32::try_from(pay_ms).unwrap_or(u32::MAX),
                order,
                qty,
                check,
            };
            if payments.send(payment).is_err() {
                break;
            }
        }
    }
    CreateStats {
        create_time: begin.elapsed(),
        add_time,
    }
}

/// An order to pay, handed from the creator to the payer, with the handle of its check.
struct Payment {
    /// When to pay, in ms since the start of the run.
    pay_ms: u32,
    order: u32,
    qty: u8,
    check: TimerTaskEntry,
}

/// Pays each order at its `pay_ms`: cancels its check, and if that won the race, books the
/// order as paid. Ends once the creator is done and every payment is made.
fn pay_orders(shop: &Shop, start: Instant, payments: mpsc::Receiver<Payment>) -> PayStats {
    let mut stats = PayStats::default();
    let mut pay = |payment: Payment| {
        let begin = Instant::now();
        let won = payment.check.cancel();
        stats.cancel_time += begin.elapsed();
        stats.cancels += 1;
        if won {
            shop.pay(payment.order, payment.qty);
        } else {
            // The check fired first: the order expired, the payment is refused.
            stats.paid_too_late += 1;
        }
    };
    books::pay_on_time(start, payments, |payment| payment.pay_ms, &mut pay);
    stats
}

/// Runs the simulation and returns what happened.
pub(crate) fn run(config: &Config) -> Report {
    let start = Instant::now();
    let timer = SystemTimerReaper::new(
        "reconcile-reaper",
        SystemTimer::with_config(
            "reconcile",
            config.tick_ms,
            config.wheel_size,
            timingwheel::hi_res_clock_ms(),
        ),
    );
    let shop = Arc::new(Shop::new(config.orders));
    // How long to wait for the last outcomes once every order exists.
    let patience = Duration::from_millis(u64::from(config.deadline_max_ms) + 10_000);

    let (create, pay) = thread::scope(|s| {
        let (tx, rx) = mpsc::channel();
        let creator = thread::Builder::new()
            .name("creator".into())
            .spawn_scoped(s, || create_orders(config, &shop, &timer, start, tx))
            .expect("spawn the creator");
        let payer = thread::Builder::new()
            .name("payer".into())
            .spawn_scoped(s, || pay_orders(&shop, start, rx))
            .expect("spawn the payer");
        let all_settled = || {
            let [paid, expired] = shop.orders.settled();
            payer.is_finished() && paid + expired >= u64::from(config.orders)
        };
        Progress::new(config.progress, start).wait(
            patience,
            || creator.is_finished(),
            all_settled,
            || report::progress(&shop),
        );
        let create = creator.join().expect("the creator panicked");
        let pay = payer.join().expect("the payer panicked");
        (create, pay)
    });

    let timer_size_at_end = timer.size();
    timer.close();
    Report {
        orders: shop.orders.tally(),
        stock_reserved_total: shop.stock_reserved_total.load(Ordering::Acquire),
        stock_sold: shop.stock_sold.load(Ordering::Acquire),
        stock_returned: shop.stock_returned.load(Ordering::Acquire),
        stock_reserved_left: shop.stock_reserved.load(Ordering::Acquire),
        timer_size_at_end,
        create,
        pay,
        last_expiry_lateness_us: shop.last_lateness_us.load(Ordering::Acquire),
        elapsed: start.elapsed(),
    }
}
