//! The `reconcile` example's core, run small: every order paid or expired exactly once, no
//! stock left reserved, and sane lateness figures; also across a restart, in two runs
//! that hand over through a state file.

mod common;

#[allow(dead_code)]
#[path = "../examples/reconcile/main.rs"]
mod reconcile;

use reconcile::cli::{Command, Config, parse_args};
use reconcile::common::{Ledger, Percentiles as Lateness, Table};
use reconcile::report::Report;
use reconcile::run;
use reconcile::state::State;

use common::args;

/// A run small enough for a debug build on a shared 2-core machine.
fn small(orders: u32, pay_ratio: f64) -> Config {
    Config {
        orders,
        deadline_min_ms: 50,
        deadline_max_ms: 200,
        pay_ratio,
        progress: false,
        ..Config::default()
    }
}

/// Checks what every run must satisfy, whatever its parameters.
fn assert_books_balance(report: &Report, config: &Config) {
    let table = report.table(config);
    let holds = table.holds();
    let summary = table.render();
    assert!(holds, "invariant failed:\n{summary}");
    assert!(summary.contains("result: OK"), "{summary}");
    let [paid, expired] = report.orders.settled;
    assert_eq!(report.orders.items, u64::from(config.orders));
    assert_eq!(paid + expired, report.orders.items, "{summary}");
    assert_eq!((report.orders.twice, report.orders.never), (0, 0));
    assert_eq!(report.stock_reserved_left, 0, "{summary}");
    assert_eq!(
        report.stock_sold + report.stock_returned,
        report.stock_reserved_total
    );
    assert!(
        report.stock_reserved_total >= report.orders.items,
        "1-3 units per order"
    );
    assert_eq!(report.timer_size_at_end, 0);
    assert_eq!(
        report.pay.cancels,
        paid + report.pay.paid_too_late,
        "every payment is one cancel, won or lost"
    );
    assert!(report.pay.paid_too_late <= expired);
    assert!(report.create.add_time > std::time::Duration::ZERO);
    assert!(report.create.create_time >= report.create.add_time);
}

/// Lateness must be ordered, never earlier than the tick allows, and not absurd.
fn assert_lateness_sane(lateness: Lateness, tick_ms: i64) {
    let Lateness {
        min_us,
        p50_us,
        p99_us,
        max_us,
        ..
    } = lateness;
    assert!(
        min_us <= p50_us && p50_us <= p99_us && p99_us <= max_us,
        "{lateness:?}"
    );
    // With a 1 ms tick no check runs before the instant of its add plus its delay; with a
    // coarser tick, up to one tick earlier.
    let earliest_us = if tick_ms == 1 { 0 } else { -tick_ms * 1_000 };
    assert!(min_us >= earliest_us, "a check fired early: {lateness:?}");
    assert!(max_us < 2_000_000, "a check fired 2 s late: {lateness:?}");
}

#[test]
fn every_order_is_paid_or_expired_exactly_once() {
    let config = small(20_000, 0.9);
    let report = run(&config);
    assert_books_balance(&report, &config);
    let [paid, expired] = report.orders.settled;
    assert!(paid > 0 && expired > 0, "{report:?}");
    // About 10 % are never paid (2,000 of 20,000; the seed is fixed); a payer slowed down
    // by a busy machine loses more races (11,071 seen at a load of 6), so the upper bound
    // is loose: what the test holds the example to is that every order ends once.
    assert!((1_000..=16_000).contains(&expired), "expired {expired}");
    assert_lateness_sane(report.lateness(), config.tick_ms);
}

#[test]
fn nobody_pays_so_every_check_returns_its_stock() {
    let config = small(5_000, 0.0);
    let report = run(&config);
    assert_books_balance(&report, &config);
    assert_eq!(report.orders.settled, [0, 5_000]);
    assert_eq!(report.pay.cancels, 0);
    assert_eq!(report.stock_returned, report.stock_reserved_total);
    assert_lateness_sane(report.lateness(), config.tick_ms);
}

#[test]
fn everybody_pays_and_only_lost_races_expire() {
    let config = small(5_000, 1.0);
    let report = run(&config);
    assert_books_balance(&report, &config);
    let [paid, expired] = report.orders.settled;
    assert!(paid > 0);
    assert_eq!(report.pay.cancels, 5_000);
    assert_eq!(
        expired, report.pay.paid_too_late,
        "an order that was paid in time expired"
    );
}

#[test]
fn coarse_multi_level_wheel_keeps_the_books() {
    // Levels span 40 ms, 160 ms, 640 ms: deadlines of 50-200 ms start on upper wheels.
    let config = Config {
        tick_ms: 10,
        wheel_size: 4,
        seed: 7,
        ..small(10_000, 0.5)
    };
    let report = run(&config);
    assert_books_balance(&report, &config);
    let [paid, expired] = report.orders.settled;
    assert!(paid > 0 && expired > 0, "{report:?}");
    assert_lateness_sane(report.lateness(), config.tick_ms);
}

#[test]
fn invariant_check_can_fail() {
    let config = small(1_000, 0.5);
    let good = run(&config);
    assert!(good.table(&config).holds());

    let mut bad = good.clone();
    bad.orders.twice = 1;
    assert!(!bad.table(&config).holds());
    assert!(bad.table(&config).render().contains("result: FAILED"));

    let mut bad = good.clone();
    bad.stock_reserved_left = 2;
    assert!(!bad.table(&config).holds());

    let mut bad = good.clone();
    bad.orders.never = 1;
    bad.orders.settled[1] -= 1;
    assert!(!bad.table(&config).holds());

    let mut bad = good.clone();
    bad.stock_sold += 1;
    assert!(
        !bad.table(&config).holds(),
        "stock sold that was never reserved"
    );

    let mut bad = good;
    bad.timer_size_at_end = 1;
    assert!(!bad.table(&config).holds(), "a check left in the timer");

    let path = state_file("invariant");
    let stopped = Config {
        state: path.clone(),
        stop_after: 0.05,
        deadline_min_ms: 500,
        deadline_max_ms: 800,
        ..config
    };
    let good = run(&stopped);
    let _ = std::fs::remove_file(&path);
    let summary = good.table(&stopped).render();
    assert!(
        good.carried.is_some() && good.table(&stopped).holds(),
        "{summary}"
    );
    let mut bad = good.clone();
    bad.carried.as_mut().unwrap().lost = 1;
    assert!(
        !bad.table(&stopped).holds(),
        "an open order left without its check"
    );
    let mut bad = good;
    bad.stock_reserved_left += 1;
    assert!(
        !bad.table(&stopped).holds(),
        "stock reserved beyond the open orders'"
    );
}

/// A state file of this test process's own, named `name`.
fn state_file(name: &str) -> String {
    let file = format!("timingwheel-reconcile-{name}-{}.state", std::process::id());
    std::env::temp_dir()
        .join(file)
        .to_string_lossy()
        .into_owned()
}

#[test]
fn a_restart_hands_every_pending_check_over_and_every_order_still_ends_once() {
    let path = state_file("restart");
    let _ = std::fs::remove_file(&path);
    // Deadlines of 50-400 ms; the first run stops after 100 ms, with checks expiring as
    // it lists them: the snapshot races with expiries.
    let config = Config {
        state: path.clone(),
        spread_ms: 100,
        deadline_min_ms: 50,
        deadline_max_ms: 400,
        ..small(20_000, 0.5)
    };
    let first = run(&Config {
        stop_after: 0.1,
        ..config.clone()
    });
    let summary = first.table(&config).render();
    // What decides the exit code: 0 iff every check of the table holds.
    assert!(
        first.table(&config).holds(),
        "the first run exits 1:\n{summary}"
    );
    let carried = first.carried.clone().expect("it stopped early");
    let [paid, expired] = first.orders.settled;
    assert!(carried.checks > 0 && carried.lost == 0, "{summary}");
    assert_eq!(
        paid + expired + carried.checks + carried.to_create,
        u64::from(config.orders),
        "every order settled, carried over or still to create: {summary}"
    );
    let state = State::read(&path).unwrap().expect("the state file");
    assert_eq!(state.checks.len() as u64, carried.checks);
    assert_eq!(state.settled.len() as u64, paid + expired);

    // Down for a while: some deadlines lapse.
    std::thread::sleep(std::time::Duration::from_millis(200));
    let second = run(&config);
    let summary = second.table(&config).render();
    assert!(
        second.table(&config).holds(),
        "the second run exits 1:\n{summary}"
    );
    let restored = second.restored.as_ref().expect("it restored the state");
    assert_eq!(
        (restored.checks, restored.payments),
        (carried.checks, carried.payments)
    );
    assert!(restored.lapsed > 0, "{summary}");
    // Exactly once across both runs.
    let [paid, expired] = second.orders.settled;
    assert_eq!(paid + expired, u64::from(config.orders), "{summary}");
    assert_eq!((second.orders.twice, second.orders.never), (0, 0));
    assert_eq!(second.stock_reserved_left, 0);
    assert_eq!(
        second.stock_sold + second.stock_returned,
        second.stock_reserved_total
    );
    assert_eq!(second.timer_size_at_end, 0);
    assert!(
        !std::path::Path::new(&path).exists(),
        "a finished run removes its state"
    );
    // Restored checks never ran early either; lapsed ones ran within their window.
    let lateness = second.lateness();
    assert!(lateness.min_us >= 0, "a check fired early: {lateness:?}");
    assert!(lateness.max_us < 2_000_000, "{lateness:?}");
}

#[test]
fn the_state_file_reads_back_what_was_written() {
    use std::time::{Duration, UNIX_EPOCH};
    let path = state_file("round-trip");
    let at = |ms| UNIX_EPOCH + Duration::from_millis(ms);
    let state = State {
        orders: 10,
        created: 7,
        stock: [14, 5, 3],
        settled: vec![(0, 0, 0), (3, 1, 1_250), (4, 1, -3)],
        checks: vec![(1, 2, at(1_700_000_000_123)), (6, 3, at(5))],
        payments: vec![(1, 2, at(1_700_000_000_999))],
    };
    state.write(&path).unwrap();
    assert_eq!(State::read(&path).unwrap(), Some(state));
    std::fs::write(&path, "reconcile-state 1 10 7\nstock 1 2\n").unwrap();
    assert!(State::read(&path).is_err(), "a short line");
    std::fs::write(&path, "something else\n").unwrap();
    assert!(State::read(&path).is_err(), "not a state file");
    std::fs::remove_file(&path).unwrap();
    assert_eq!(State::read(&path).unwrap(), None, "no file: a first run");
}

#[test]
fn lateness_percentiles_are_nearest_rank() {
    let lateness = Lateness::of((1..=100).rev().collect());
    assert_eq!(
        lateness,
        Lateness {
            count: 100,
            min_us: 1,
            p50_us: 50,
            p99_us: 99,
            max_us: 100,
        }
    );
    assert_eq!(Lateness::of(vec![7]).p99_us, 7);
    assert_eq!(Lateness::of(Vec::new()), Lateness::default());
}

#[test]
fn command_line_defaults_and_flags() {
    assert_eq!(parse_args(args("")), Ok(Command::Run(Config::default())));
    let defaults = Config::default();
    assert_eq!(
        (
            defaults.orders,
            defaults.deadline_min_ms,
            defaults.deadline_max_ms
        ),
        (1_000_000, 1_000, 3_000)
    );
    assert_eq!(
        (defaults.pay_ratio, defaults.tick_ms, defaults.wheel_size),
        (0.9, 1, 20)
    );

    let parsed = parse_args(args(
        "--orders 500 --deadline-min-ms=10 --no-progress --deadline-max-ms 20 \
         --pay-ratio 0.25 --tick-ms 2 --wheel-size=8 --seed 9 --state /tmp/s \
         --stop-after 1.5 --spread-ms 0",
    ));
    assert_eq!(
        parsed,
        Ok(Command::Run(Config {
            orders: 500,
            deadline_min_ms: 10,
            deadline_max_ms: 20,
            pay_ratio: 0.25,
            tick_ms: 2,
            wheel_size: 8,
            seed: 9,
            state: "/tmp/s".into(),
            stop_after: 1.5,
            spread_ms: 0,
            progress: false,
        }))
    );
    assert_eq!(parse_args(args("--orders 5 --help")), Ok(Command::Help));
    assert_eq!(parse_args(args("-h")), Ok(Command::Help));
    let usage = reconcile::common::usage::<Config>("reconcile");
    assert!(usage.starts_with("Simulates a shop:"), "{usage}");
    let row = "  --pay-ratio R         share of orders paid before their deadline   [0.9]\n";
    assert!(usage.contains(row), "{usage}");
    assert!(usage.contains("  --no-progress "), "{usage}");
    assert!(usage.ends_with("2 on a bad command line."), "{usage}");
}

#[test]
fn the_ledger_counts_a_second_settle_but_not_a_lost_race() {
    let ledger = Ledger::new(4);
    assert!(ledger.settle(0, 0, 5));
    assert!(!ledger.settle(0, 1, 7), "a second settle");
    assert!(ledger.try_settle(1, 1, 9));
    assert!(!ledger.try_settle(1, 0, 3), "a race lost");
    assert!(ledger.settle(2, 0, 4));
    ledger.reclassify(2, 1);
    assert_eq!(
        (ledger.way(0), ledger.way(2), ledger.way(3)),
        (Some(0), Some(1), None)
    );
    let tally = ledger.tally();
    assert_eq!((tally.items, tally.settled), (4, [1, 2]));
    assert_eq!(
        (tally.twice, tally.never),
        (1, 1),
        "item 0 twice, item 3 never"
    );
    let late = tally.figures[1];
    assert_eq!((late.count, late.min_us, late.max_us), (2, 4, 9));

    let mut table = Table::new("title".into());
    tally.check_once(&mut table, "once", ["a", "b"]);
    assert!(!table.holds());
    let line = "once: 1 a + 2 b = 3 of 4; 1 more than once, 1 never  FAILED";
    assert!(table.render().contains(line));
}

#[test]
fn command_line_rejects_bad_input() {
    for line in [
        "--orders",
        "--orders many",
        "--orders -1",
        "--frobnicate",
        "--pay-ratio 1.5",
        "--deadline-min-ms 0",
        "--deadline-min-ms 300 --deadline-max-ms 200",
        "--tick-ms 0",
        "--wheel-size 0",
        "--stop-after 1",
        "--state /tmp/s --stop-after -1",
    ] {
        assert!(parse_args(args(line)).is_err(), "accepted {line:?}");
    }
}

/// Regression test, found with the defaults run: the check that ran last was late by
/// 66-182 ms (it was the summary's "max") while its neighbours ran within a few ms.
///
/// Cause: when the last pending entry of an entry-store shard was removed, the shard freed
/// all its slab pages but one right there, inside `advance_clock`, under the wheel's
/// write lock, before the flushed batch went to the executor; with 1,000,000 orders from
/// one thread that is ~600-900 pages, and one `free` took up to 95 ms. The store has since
/// moved out of the allocator: a shard's chunks are mapped by the timer and unmapped by the
/// thread that empties them, after the locks are released (`src/store/chunks.rs`). It
/// runs the full defaults, too slow for a debug build: CI runs it with
/// `cargo test --release --test reconcile -- --ignored`.
#[test]
#[ignore = "the 1,000,000-order defaults: run in release (see the doc comment)"]
fn last_check_is_not_delayed_by_releasing_the_store() {
    let config = Config {
        progress: false,
        ..Config::default()
    };
    let report = run(&config);
    assert_books_balance(&report, &config);
    let late_ms = report.last_expiry_lateness_us as f64 / 1000.0;
    assert!(
        late_ms < 30.0,
        "the last check ran {late_ms:.1} ms late (p99 {:.1} ms)",
        report.lateness().p99_us as f64 / 1000.0
    );
}
