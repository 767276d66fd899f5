//! The `purgatory` example's core, run small so that CI exercises it: every request is
//! answered exactly once, none expires before its timeout, both outcomes occur, and the
//! purgatory is empty at the end.

#[allow(dead_code)]
#[path = "../examples/purgatory/main.rs"]
mod purgatory_example;

use purgatory_example::cli::{Command, Config, parse_args};
use purgatory_example::run;

/// A run small enough for a debug build on a shared 2-core machine, with both outcomes:
/// the slow replica fetches its partitions less often than the timeout.
fn small() -> Config {
    Config {
        requests: 3_000,
        rate: 30_000,
        partitions: 8,
        timeout_ms: 100,
        slow_every: 4,
        slow_fetch_ms: 150,
        seed: 7,
        progress: false,
    }
}

#[test]
fn a_small_run_answers_every_request_exactly_once() {
    let config = small();
    let report = run(&config);
    let summary = report.summary(&config);
    assert!(report.invariant_holds(&config), "{summary}");
    assert!(summary.contains("result: OK"), "{summary}");
    assert_eq!(report.requests, config.requests);
    assert_eq!(
        report.completed_by_acks + report.expired,
        config.requests,
        "{summary}"
    );
    assert_eq!((report.answered_twice, report.never_answered), (0, 0));
    assert!(
        report.completed_by_acks > 0 && report.expired > 0,
        "{summary}"
    );
    assert!(report.timed_out.min_us >= 100_000, "{summary}");
    assert!(report.acked.p50_us <= report.acked.p99_us);
    assert!(report.check_and_complete_calls > 0);
    assert_eq!((report.watched_at_end, report.delayed_at_end), (0, 0));
}

#[test]
fn the_command_line_sets_every_field_and_refuses_nonsense() {
    let args = |s: &str| s.split_whitespace().map(str::to_owned).collect::<Vec<_>>();
    let parsed = parse_args(args(
        "--requests 10 --rate=20 --partitions 3 --timeout-ms 40 --slow-every 5 \
         --slow-fetch-ms 60 --seed 9 --no-progress",
    ));
    let expected = Config {
        requests: 10,
        rate: 20,
        partitions: 3,
        timeout_ms: 40,
        slow_every: 5,
        slow_fetch_ms: 60,
        seed: 9,
        progress: false,
    };
    assert_eq!(parsed, Ok(Command::Run(expected)));
    assert_eq!(parse_args(args("--help")), Ok(Command::Help));
    assert_eq!(parse_args(args("")), Ok(Command::Run(Config::default())));
    for bad in [
        "--rate 0",
        "--partitions 0",
        "--timeout-ms 0",
        "--requests",
        "--x 1",
    ] {
        assert!(parse_args(args(bad)).is_err(), "{bad}");
    }
}
