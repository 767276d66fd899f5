//! Order reconciliation, the job this crate exists for.
//!
//! A shop reserves stock for every new order and schedules a reconciliation check at the
//! order's payment deadline, under the order's id: `checks.schedule(order, ...)` on a
//! [`KeyedTimer`]. An order paid in time cancels its check: `checks.cancel(&order)`, and
//! the check is freed at once. An unpaid order's check runs and returns the stock. A
//! payment races with its check: if the check fired first, `cancel` returns false and the
//! order counts as expired ("paid too late").
//!
//! One thread creates the orders as fast as it can, a second pays 90 % of them at random
//! moments before their deadline, and a [`SystemTimerReaper`] drives the checks. A progress
//! line goes to stderr while it runs; at the end a table goes to stdout (`report.rs`), with
//! the invariant checked per order: every order paid or expired exactly once, no stock left
//! reserved. The exit code is 1 if it fails.
//!
//! A restart: with `--state FILE --stop-after SECS` the service stops after SECS seconds
//! and writes its books, its pending checks (`checks.pending()`: each order with its
//! deadline as wall-clock time) and the payments not made yet to FILE (`state.rs`); the
//! next run with the same `--state FILE` reads them back, restores the checks
//! (`checks.restore(...)`, those that lapsed meanwhile spread over `--spread-ms`),
//! creates the orders still to come, and finishes. Across the runs every order still ends
//! exactly one way; the file is removed once a run finishes.
//!
//! ```text
//! cargo run --release --example reconcile
//! cargo run --release --example reconcile -- --orders 200000 --pay-ratio 0.5 --seed 7
//! cargo run --release --example reconcile -- --help
//! cargo run --release --example reconcile -- --state /tmp/shop --stop-after 1.5
//! cargo run --release --example reconcile -- --state /tmp/shop
//! ```
//!
//! This file holds the timer's part; `books.rs` the shop's counters, `state.rs` the file a
//! stopped run leaves, `cli.rs` the command line, `report.rs` the table.

#![allow(clippy::print_stdout)]

mod books;
pub(crate) mod cli;
#[path = "../common/mod.rs"]
pub(crate) mod common;
pub(crate) mod report;
pub(crate) mod state;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use timingwheel::{
    KeyedTimer, Lapsed, SystemTimer, SystemTimerReaper, Timer, TimerTask, timer_task,
};

use books::Shop;
use cli::Config;
use common::{Progress, Rng};
use report::{Carried, CreateStats, PayStats, Report, Restored};
use state::State;

fn main() {
    common::example_main("reconcile", cli::parse_args, |config| {
        run(config).table(config)
    });
}

/// The orders' checks: at most one per order, under its id.
type Checks = KeyedTimer<u32>;

/// Creates the orders `first..`, each with its check; hands those that will be paid to
/// the payer. Stops early once `stop` is set.
fn create_orders(
    config: &Config,
    shop: &Arc<Shop>,
    checks: &Checks,
    (start, first): (Instant, u32),
    payments: mpsc::Sender<Payment>,
    stop: &AtomicBool,
) -> CreateStats {
    let mut rng = Rng::new(config.seed.wrapping_add(u64::from(first)));
    let spread = u64::from(config.deadline_max_ms - config.deadline_min_ms) + 1;
    let begin = Instant::now();
    let (mut created, mut add_time) = (0, Duration::ZERO);
    for order in first..config.orders {
        if stop.load(Ordering::Acquire) {
            break;
        }
        let deadline_ms = config.deadline_min_ms as u64 + rng.below(spread);
        let qty = 1 + rng.below(3) as u8;
        let pays = rng.unit() < config.pay_ratio;
        let pay_after_ms = rng.below(deadline_ms);
        shop.reserve(order, qty);

        // Schedule the check: if it runs, the order was not paid in time.
        let added_at = Instant::now();
        let due = added_at + Duration::from_millis(deadline_ms);
        checks.schedule(order, check(shop, order, qty, due, deadline_ms as i64));
        add_time += added_at.elapsed();
        created += 1;

        if pays {
            let pay_ms = (added_at - start).as_millis() as u64 + pay_after_ms;
            let pay_ms = u32::try_from(pay_ms).unwrap_or(u32::MAX);
            if payments.send(Payment { pay_ms, order, qty }).is_err() {
                break;
            }
        }
    }
    CreateStats {
        created,
        create_time: begin.elapsed(),
        add_time,
    }
}

/// The check of `order`, due `delay_ms` from now (or when `restore` says), at `due`: if it
/// runs, the order was not paid in time, and its stock goes back.
fn check(shop: &Arc<Shop>, order: u32, qty: u8, due: Instant, delay_ms: i64) -> Box<dyn TimerTask> {
    let books = Arc::clone(shop);
    timer_task(delay_ms, move || books.expire(order, qty, due))
}

/// An order to pay, handed from the creator to the payer.
struct Payment {
    /// When to pay, in ms since the start of the run.
    pay_ms: u32,
    order: u32,
    qty: u8,
}

/// Pays each order at its `pay_ms`: cancels its check, and if that won the race, books the
/// order as paid. Ends once the creator is done and every payment is made, or once `stop`
/// is set: then with the payments not made.
fn pay_orders(
    shop: &Shop,
    checks: &Checks,
    start: Instant,
    payments: mpsc::Receiver<Payment>,
    stop: &AtomicBool,
) -> (PayStats, Vec<Payment>) {
    let mut stats = PayStats::default();
    let mut pay = |payment: Payment| {
        let begin = Instant::now();
        let won = checks.cancel(&payment.order);
        stats.cancel_time += begin.elapsed();
        stats.cancels += 1;
        if won {
            shop.pay(payment.order, payment.qty);
        } else {
            // The check fired first: the order expired, the payment is refused.
            stats.paid_too_late += 1;
        }
    };
    let unpaid = books::pay_on_time(start, payments, |payment| payment.pay_ms, &mut pay, stop);
    (stats, unpaid)
}

/// Restores the checks a stopped run left in `state`, those that lapsed meanwhile spread
/// over `--spread-ms` (at once for 0).
fn restore_checks(checks: &Checks, shop: &Arc<Shop>, state: &State, config: &Config) -> Restored {
    let (now, wall) = (Instant::now(), SystemTime::now());
    // Each check's due instant, for its lateness: its deadline, or now if it lapsed.
    let due: HashMap<u32, (u8, Instant)> = state
        .checks
        .iter()
        .map(|&(order, qty, deadline)| {
            (
                order,
                (qty, now + deadline.duration_since(wall).unwrap_or_default()),
            )
        })
        .collect();
    let lapsed = match config.spread_ms {
        0 => Lapsed::RunNow,
        ms => Lapsed::Spread(Duration::from_millis(u64::from(ms))),
    };
    let entries = state
        .checks
        .iter()
        .map(|&(order, _, deadline)| (order, deadline));
    checks.restore(entries, lapsed, |&order| {
        let (qty, due) = due[&order];
        check(shop, order, qty, due, 0)
    });
    Restored {
        checks: state.checks.len() as u64,
        lapsed: state.checks.iter().filter(|check| check.2 <= wall).count() as u64,
        payments: state.payments.len() as u64,
    }
}

/// Stops the service and writes to `--state` what the next run needs: the books, the
/// pending checks of the orders still open, the payments not made. The listing races
/// with expiries: a check it lists may still run before the timer is closed (after
/// `close`, none runs), and its order is then settled in the books written, its check
/// left out. So every order is settled, or carried over, once.
fn carry_over(
    (checks, timer): (&Checks, &dyn Timer),
    shop: &Shop,
    unpaid: Vec<Payment>,
    (config, start): (&Config, SystemTime),
) -> Carried {
    let pending = checks.pending();
    timer.close();
    let open = |order: u32| shop.orders.way(order as usize).is_none();
    let qty = |order: u32| shop.qty[order as usize].load(Ordering::Relaxed);
    let mut state = shop.state();
    let carried = pending.into_iter().filter(|&(order, _)| open(order));
    state.checks = carried
        .map(|(order, deadline)| (order, qty(order), deadline))
        .collect();
    let at = |pay_ms| start + Duration::from_millis(pay_ms);
    let unpaid = unpaid
        .into_iter()
        .map(|p| (p.order, p.qty, at(u64::from(p.pay_ms))));
    state.payments = unpaid.collect();
    state.write(&config.state).expect("write the --state file");
    let open_orders = (0..state.created).filter(|&order| open(order)).count();
    Carried {
        checks: state.checks.len() as u64,
        payments: state.payments.len() as u64,
        lost: open_orders.saturating_sub(state.checks.len()) as u64,
        stock_held: state.checks.iter().map(|check| i64::from(check.1)).sum(),
        to_create: u64::from(config.orders - state.created),
    }
}

/// Runs the simulation and returns what happened.
pub(crate) fn run(config: &Config) -> Report {
    let (start, start_wall) = (Instant::now(), SystemTime::now());
    let timer = Arc::new(SystemTimerReaper::new(
        "reconcile-reaper",
        SystemTimer::with_config(
            "reconcile",
            config.tick_ms,
            config.wheel_size,
            timingwheel::hi_res_clock_ms(),
        ),
    ));
    let checks: Checks = KeyedTimer::new(timer.clone());
    let state = match config.state.as_str() {
        "" => None,
        path => State::read(path).expect("read the --state file"),
    };
    // A run after a stop: the books, checks and payments it left.
    let (shop, first, restored, carried_payments) = match state {
        Some(state) => {
            assert_eq!(
                state.orders, config.orders,
                "--orders differs from the --state file's"
            );
            let shop = Arc::new(Shop::restored(&state));
            let restored = restore_checks(&checks, &shop, &state, config);
            let pay_ms =
                |at: SystemTime| at.duration_since(start_wall).map_or(0, |d| d.as_millis());
            let payments = state.payments.iter().map(|&(order, qty, at)| Payment {
                pay_ms: u32::try_from(pay_ms(at)).unwrap_or(u32::MAX),
                order,
                qty,
            });
            (shop, state.created, Some(restored), payments.collect())
        }
        None => (Arc::new(Shop::new(config.orders)), 0, None, Vec::new()),
    };
    // How long to wait for the last outcomes once every order exists.
    let patience = Duration::from_millis(u64::from(config.deadline_max_ms) + 10_000);
    let stop_at =
        (config.stop_after > 0.0).then(|| start + Duration::from_secs_f64(config.stop_after));
    let stop = AtomicBool::new(false);

    let (create, (pay, unpaid)) = thread::scope(|s| {
        let (tx, rx) = mpsc::channel();
        carried_payments
            .into_iter()
            .for_each(|payment| tx.send(payment).expect("the payer's channel"));
        let (checks, stop) = (&checks, &stop);
        let creator = thread::Builder::new()
            .name("creator".into())
            .spawn_scoped(s, || {
                create_orders(config, &shop, checks, (start, first), tx, stop)
            })
            .expect("spawn the creator");
        let payer = thread::Builder::new()
            .name("payer".into())
            .spawn_scoped(s, || pay_orders(&shop, checks, start, rx, stop))
            .expect("spawn the payer");
        let all_settled = || {
            let [paid, expired] = shop.orders.settled();
            payer.is_finished() && paid + expired >= u64::from(config.orders)
        };
        let stopping = || stop_at.is_some_and(|at| Instant::now() >= at);
        Progress::new(config.progress, start).wait(
            patience,
            || creator.is_finished() || stopping(),
            || stopping() || all_settled(),
            || report::progress(&shop),
        );
        stop.store(stopping() && !all_settled(), Ordering::Release);
        let create = creator.join().expect("the creator panicked");
        let pay = payer.join().expect("the payer panicked");
        (create, pay)
    });

    let timer_size_at_end = timer.size();
    let stopped = stop.into_inner();
    let carried =
        stopped.then(|| carry_over((&checks, &*timer), &shop, unpaid, (config, start_wall)));
    timer.close();
    if !stopped && !config.state.is_empty() {
        // Finished: nothing to carry over, and nothing to restore twice.
        let _ = std::fs::remove_file(&config.state);
    }
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
        restored,
        carried,
    }
}
