//! The `shared_pool` example's core, run small: a service's request work and its timeouts
//! on one `threadpool::ThreadPool`, each request answered once, each timeout run or
//! cancelled once, none early; with and without `max_in_flight`; and its command line.

#[allow(dead_code)]
#[path = "../examples/shared_pool/main.rs"]
mod shared_pool;

use shared_pool::cli::{Command, Config, parse_args};
use shared_pool::run;

/// A run small enough for a debug build on a shared 2-core machine.
fn small(max_in_flight: usize) -> Config {
    Config {
        requests: 400,
        rate: 1_000,
        max_in_flight,
        progress: false,
        ..Config::default()
    }
}

#[test]
fn every_request_is_answered_once_with_and_without_a_bound_on_timeouts() {
    for max_in_flight in [0, 1, 4] {
        let config = small(max_in_flight);
        let report = run(&config);
        let table = report.table(&config);
        let holds = table.holds();
        let summary = table.render();
        assert!(holds, "invariant failed:\n{summary}");
        assert!(summary.contains("result: OK"), "{summary}");
        let [responded, timed_out] = report.answers.settled;
        assert_eq!(responded + timed_out, 400, "{summary}");
        assert_eq!(
            report.timeouts.settled.iter().sum::<u64>(),
            400,
            "{summary}"
        );
        assert!(
            timed_out > 0,
            "no request outlasted its deadline:\n{summary}"
        );
        assert_eq!(
            report.stats.cancelled + report.stats.expired,
            400,
            "{summary}"
        );
    }
}

fn args(line: &str) -> Vec<String> {
    line.split_whitespace().map(str::to_owned).collect()
}

#[test]
fn the_command_line_sets_every_field_and_refuses_nonsense() {
    let parsed = parse_args(args(
        "--requests 10 --rate=20 --threads 3 --deadline-ms 7 --work-max-ms 9 \
         --max-in-flight 0 --seed 5 --no-progress",
    ));
    assert_eq!(
        parsed,
        Ok(Command::Run(Config {
            requests: 10,
            rate: 20,
            threads: 3,
            deadline_ms: 7,
            work_max_ms: 9,
            max_in_flight: 0,
            seed: 5,
            progress: false,
        }))
    );
    assert_eq!(parse_args(args("-h")), Ok(Command::Help));
    for line in [
        "--requests 0",
        "--rate 0",
        "--threads 0",
        "--deadline-ms 0",
        "--threads many",
        "--frobnicate",
    ] {
        assert!(parse_args(args(line)).is_err(), "accepted {line:?}");
    }
}
