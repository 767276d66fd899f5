#!/usr/bin/env bash
# Instructions per operation under callgrind (see benches/instructions.rs): stable on a
# noisy machine. Prints, per operation, the instructions of the timed function divided by
# its operations, and the harness's share (box, Arc, delay) that add and add_cancel include.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --profile bench -q -p timingwheel-benches --bench instructions
bin=$(ls -t target/release/deps/instructions-* | grep -v '\.d$' | head -n 1)
ops=100000
for f in harness add cancel add_cancel reschedule add_due tokio_add_cancel nexus_add_cancel; do
  out=$(mktemp)
  valgrind --tool=callgrind --collect-atstart=no --toggle-collect="instructions::$f" \
    --callgrind-out-file="$out" "$bin" 2>&1 | grep -o 'Collected : [0-9]*' | awk -v f="$f" -v ops="$ops" '{printf "%-11s %7.1f instructions per operation\n", f, $3 / ops}'
  rm -f "$out"
done
