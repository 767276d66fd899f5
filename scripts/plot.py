#!/usr/bin/env python3
"""Collects criterion medians and plots ns/op against N (Python stdlib only).

Usage:
    python3 scripts/plot.py collect [CRITERION_DIR] > run1.csv
    python3 scripts/plot.py merge run1.csv run2.csv run3.csv > docs/bench-results.csv
    python3 scripts/plot.py table   docs/bench-results.csv      # markdown tables
    python3 scripts/plot.py svg     docs/bench-results.csv docs/bench-add.svg
    python3 scripts/plot.py lateness load.csv docs/lateness.svg   # rows from benches/load.rs

`collect` reads target/criterion/<group>/<timer>/<param>/new/estimates.json (the median
point estimate, in ns per iteration) into CSV rows: group,timer,param,median_ns.
`merge` takes, per row, the median over several collected runs (the machine is shared, so
one criterion run can be off; each run's figure is itself a criterion median).
`svg` draws add and add+cancel ns/op against N (log scale) for every timer in the CSV.
`lateness` draws p99 and max lateness against N from the rows `benches/load.rs` appends to
the file named by TIMINGWHEEL_LOAD_CSV.
"""

import csv
import html
import glob
import json
import math
import os
import sys

TIMERS = ["wheel", "heap", "btree", "tokio-util"]
COLORS = {"wheel": "#d62728", "heap": "#1f77b4", "btree": "#2ca02c", "tokio-util": "#9467bd"}
LABELS = {
    "wheel": "SystemTimer (this crate)",
    "heap": "Mutex<BinaryHeap>, lazy cancel",
    "btree": "Mutex<BTreeMap>",
    "tokio-util": "tokio-util DelayQueue (1 thread)",
}


def collect(root):
    out = csv.writer(sys.stdout, lineterminator="\n")
    out.writerow(["group", "timer", "param", "median_ns"])
    rows = []
    for path in glob.glob(os.path.join(root, "*", "*", "*", "new", "estimates.json")):
        group, timer, param = path.split(os.sep)[-5:-2]
        with open(path) as f:
            median = json.load(f)["median"]["point_estimate"]
        rows.append((group, timer, int(param), median))
    order = {t: i for i, t in enumerate(TIMERS)}
    for group, timer, param, median in sorted(rows, key=lambda r: (r[0], order.get(r[1], 9), r[2])):
        out.writerow([group, timer, param, f"{median:.1f}"])


def load(path):
    data = {}
    with open(path) as f:
        for row in csv.DictReader(f):
            data[(row["group"], row["timer"], int(row["param"]))] = float(row["median_ns"])
    return data


def merge(paths):
    runs = [load(p) for p in paths]
    out = csv.writer(sys.stdout, lineterminator="\n")
    out.writerow(["group", "timer", "param", "median_ns", "runs"])
    order = {t: i for i, t in enumerate(TIMERS)}
    for key in sorted(set().union(*runs), key=lambda k: (k[0], order.get(k[1], 9), k[2])):
        # Run order is kept ("-" for a run without this row), so ratios can be taken
        # within each run.
        each = [r.get(key) for r in runs]
        out.writerow([*key, f"{median([v for v in each if v is not None]):.1f}",
                      " ".join("-" if v is None else f"{v:.1f}" for v in each)])


def median(values):
    values = sorted(values)
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


def load_runs(path):
    """Per-run values of each row, in run order (a collected file is one run)."""
    runs = {}
    with open(path) as f:
        for row in csv.DictReader(f):
            key = (row["group"], row["timer"], int(row["param"]))
            if row.get("runs"):
                runs[key] = [None if v == "-" else float(v) for v in row["runs"].split()]
            else:
                runs[key] = [float(row["median_ns"])]
    return runs


def same_run_ratio(runs, num, den):
    """Median over runs of num / den, each ratio taken within one run."""
    pairs = [(a, b) for a, b in zip(runs.get(num, []), runs.get(den, [])) if a and b]
    return median([a / b for a, b in pairs]) if pairs else None


def table(path):
    data = load(path)
    runs = load_runs(path)
    for group, title in [("add", "add"), ("add_cancel", "add + cancel")]:
        ns = sorted({p for (g, _, p) in data if g == group})
        print(f"**{title}**, ns per op (median), by N pending\n")
        print("| timer | " + " | ".join(f"{n:,}" for n in ns) + " | 10^7 / 10^3 |")
        print("|---|" + "---:|" * (len(ns) + 1))
        for t in TIMERS:
            cells = [data.get((group, t, n)) for n in ns]
            if all(c is None for c in cells):
                continue
            ratio = ""
            if cells[0] and cells[-1]:
                ratio = f"{cells[-1] / cells[0]:.2f}x"
            print(f"| {t} | " + " | ".join("" if c is None else f"{c:.1f}" for c in cells) + f" | {ratio} |")
        print()
        print(f"ratio to the wheel ({title}; > 1 means slower than the wheel; median of "
              "the ratios taken within each run)\n")
        print("| timer | " + " | ".join(f"{n:,}" for n in ns) + " |")
        print("|---|" + "---:|" * len(ns))
        for t in TIMERS[1:]:
            cells = [data.get((group, t, n)) for n in ns]
            if all(c is None for c in cells):
                continue
            ratios = [same_run_ratio(runs, (group, t, n), (group, "wheel", n)) for n in ns]
            print(f"| {t} | " + " | ".join("" if r is None else f"{r:.2f}" for r in ratios) + " |")
        print()
    threads = {(t, p): v for (g, t, p), v in data.items() if g == "add_cancel_threads"}
    if threads:
        counts = sorted({p for (_, p) in threads})
        print("**add + cancel pairs from several threads** (10^5 pending), million pairs per "
              "second (criterion's time per iteration is one pair on each thread)\n")
        print("| timer | " + " | ".join(f"{c} thread{'s' if c > 1 else ''}" for c in counts) + " |")
        print("|---|" + "---:|" * len(counts))
        for t in TIMERS:
            cells = [threads.get((t, c)) for c in counts]
            if all(c is None for c in cells):
                continue
            print(f"| {t} | " + " | ".join(
                "" if v is None else f"{c * 1e3 / v:.1f}" for c, v in zip(counts, cells)) + " |")
        print()


def chart(title, panels, ylabel, out_path):
    """Draws log-log panels of value against N, one line per timer.

    panels: [(panel title, {timer: [(n, value), ...]})].
    """
    width, height = 900, 440
    pw, ph = 340, 280  # plot area of one panel
    left0, top = 80, 60
    gap = 110
    values = [v for _, lines in panels for pts in lines.values() for _, v in pts]
    ns = sorted({n for _, lines in panels for pts in lines.values() for n, _ in pts})
    ticks = [0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000]
    ymin = max(t for t in ticks if t <= min(values))
    ymax = min(t for t in ticks if t >= max(values))
    xmin, xmax = math.log10(min(ns)), math.log10(max(ns))
    if xmax == xmin:
        xmax = xmin + 1
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="{width / 2}" y="22" text-anchor="middle" font-size="15">{html.escape(title)}</text>',
    ]
    for i, (panel_title, lines) in enumerate(panels):
        left = left0 + i * (pw + gap)

        def x(n):
            return left + (math.log10(n) - xmin) / (xmax - xmin) * pw

        def y(v):
            return top + ph - (math.log10(v) - math.log10(ymin)) / (math.log10(ymax) - math.log10(ymin)) * ph

        parts.append(f'<text x="{left + pw / 2}" y="{top - 12}" text-anchor="middle" '
                     f'font-size="13">{html.escape(panel_title)}</text>')
        parts.append(f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#444"/>')
        for v in ticks:
            if ymin <= v <= ymax:
                parts.append(f'<line x1="{left}" y1="{y(v):.1f}" x2="{left + pw}" y2="{y(v):.1f}" stroke="#ddd"/>')
                parts.append(f'<text x="{left - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{v:g}</text>')
        for n in ns:
            parts.append(f'<line x1="{x(n):.1f}" y1="{top}" x2="{x(n):.1f}" y2="{top + ph}" stroke="#eee"/>')
            parts.append(f'<text x="{x(n):.1f}" y="{top + ph + 16}" text-anchor="middle">'
                         f'10^{int(round(math.log10(n)))}</text>')
        parts.append(f'<text x="{left + pw / 2}" y="{top + ph + 34}" text-anchor="middle">N (log scale)</text>')
        parts.append(f'<text x="{left - 50}" y="{top + ph / 2}" text-anchor="middle" '
                     f'transform="rotate(-90 {left - 50} {top + ph / 2})">{html.escape(ylabel)}</text>')
        for t in TIMERS:
            pts = sorted(lines.get(t, []))
            if not pts:
                continue
            path_d = " ".join(f"{'M' if j == 0 else 'L'}{x(n):.1f},{y(v):.1f}" for j, (n, v) in enumerate(pts))
            parts.append(f'<path d="{path_d}" fill="none" stroke="{COLORS[t]}" stroke-width="2"/>')
            for n, v in pts:
                parts.append(f'<circle cx="{x(n):.1f}" cy="{y(v):.1f}" r="3" fill="{COLORS[t]}"/>')
    shown = [t for t in TIMERS if any(t in lines for _, lines in panels)]
    for j, t in enumerate(shown):
        cx = left0 + (j % 2) * 380
        cy = height - 38 + (j // 2) * 18
        parts.append(f'<line x1="{cx}" y1="{cy}" x2="{cx + 24}" y2="{cy}" stroke="{COLORS[t]}" stroke-width="3"/>')
        parts.append(f'<text x="{cx + 30}" y="{cy + 4}">{html.escape(LABELS[t])}</text>')
    parts.append("</svg>")
    with open(out_path, "w") as f:
        f.write("\n".join(parts) + "\n")


def svg(path, out_path):
    data = load(path)
    panels = []
    for group, title in [("add", "add: ns per op"), ("add_cancel", "add + cancel: ns per pair")]:
        lines = {}
        for (g, t, n), v in data.items():
            if g == group:
                lines.setdefault(t, []).append((n, v))
        panels.append((title, lines))
    chart("Cost per operation against pending timers N (criterion medians, 2-core VM, release)",
          panels, "ns (log scale)", out_path)


# Columns of the rows `benches/load.rs` appends to TIMINGWHEEL_LOAD_CSV (medians of its runs).
LOAD_COLUMNS = ["timer", "n", "p50", "p99", "max", "early", "add_driven", "add_undriven", "longest_add_us"]


def lateness(path, out_path):
    panels = [("p99 lateness, ms", {}), ("max lateness, ms", {})]
    with open(path) as f:
        for row in csv.reader(f):
            row = dict(zip(LOAD_COLUMNS, row))
            n = int(row["n"])
            for (_, lines), column in zip(panels, ["p99", "max"]):
                lines.setdefault(row["timer"], []).append((n, max(float(row[column]), 0.1)))
    chart("Lateness against N timers added over N/1000 ms while driven (benches/load.rs, 2-core VM)",
          panels, "ms (log scale)", out_path)


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    cmd = sys.argv[1]
    if cmd == "collect":
        collect(sys.argv[2] if len(sys.argv) > 2 else "target/criterion")
    elif cmd == "merge":
        merge(sys.argv[2:])
    elif cmd == "table":
        table(sys.argv[2])
    elif cmd == "svg":
        svg(sys.argv[2], sys.argv[3])
    elif cmd == "lateness":
        lateness(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
