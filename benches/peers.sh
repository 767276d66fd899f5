#!/usr/bin/env bash
# Runs benches/peers (inside the `timers` bench) for each peer in turn, one process per run,
# RUNS rounds of (wheel, tokio-util, nexus), and prints every run, the median of each figure,
# and the wheel's ratio to each peer within each round.
#   bash benches/peers.sh            # 3 rounds, N = 10^6
#   RUNS=5 TIMINGWHEEL_PEER_N=100000 bash benches/peers.sh
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${RUNS:-3}
cargo build --profile bench -q -p timingwheel-benches --bench timers
bin=$(ls -t target/release/deps/timers-* | grep -v '\.d$' | head -n 1)
out=$(mktemp)
for round in $(seq 1 "$runs"); do
  for peer in wheel tokio-util nexus; do
    TIMINGWHEEL_PEER=$peer "$bin" | sed "s/^/round $round /" | tee -a "$out"
  done
done
python3 - "$out" <<'PY'
import sys, statistics
rows = [l.split() for l in open(sys.argv[1])]
runs = {}
for r in rows:
    f = dict(zip(r[0::2], r[1::2]))
    runs.setdefault(f['peer'], []).append(f)
print()
print('| ns per operation (median; every run) | ' + ' | '.join(runs) + ' |')
print('|---|' + '---|' * len(runs))
for op in ['add', 'add_cancel', 'reschedule']:
    cells = []
    for peer, fs in runs.items():
        vals = [float(f[op]) for f in fs if f[op] != '-']
        cells.append('—' if not vals else f"{statistics.median(vals):.1f} ({', '.join(f'{v:.1f}' for v in vals)})")
    print(f'| {op} | ' + ' | '.join(cells) + ' |')
print()
wheel = runs.get('wheel', [])
for peer, fs in runs.items():
    if peer == 'wheel':
        continue
    for op in ['add', 'add_cancel', 'reschedule']:
        ratios = [float(w[op]) / float(p[op]) for w, p in zip(wheel, fs) if p[op] != '-' and w[op] != '-']
        if ratios:
            print(f"wheel / {peer} {op}: " + ', '.join(f'{x:.2f}' for x in ratios) + f" (worst {max(ratios):.2f})")
PY
rm -f "$out"
