#!/usr/bin/env python3
"""Tabulates and plots sova_bench_growable's results.

    bench/growable/plot_growable.py BENCH.json [TRACE.csv] [--out DIR]

BENCH.json: sova_bench_growable --benchmark_out=... --benchmark_out_format=json.
TRACE.csv: what SOVA_GROWABLE_CSV collected (case,step,size_bytes,held_bytes).
Writes DIR/growable.md (per growth step size: time, time over realloc's,
peak memory held, peak over the final size, bytes copied) and, with
matplotlib, DIR/growable.png (memory held against the vector's size per
method; time per method).
"""
import argparse
import csv
import json
import os
import sys
from collections import defaultdict


def load_cases(path):
    with open(path) as f:
        data = json.load(f)
    cases = {}
    for b in data.get("benchmarks", []):
        if b.get("error_occurred"):
            continue
        name = b["name"].split("/iterations")[0]
        cases[name] = b
    return data.get("context", {}), cases


def table(cases):
    lines = ["| case | time (ms) | time / realloc's | peak held (GiB) | peak / final size | copied (GiB) | steps |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for name in sorted(cases):
        b = cases[name]
        group, method, div = name.split("/")
        base = cases.get(f"{group}/realloc/{div}")
        t = b["real_time"]
        ratio = f"{t / base['real_time']:.3f}" if base else "-"
        lines.append(f"| {name} | {t:.2f} | {ratio} | {b['peak_GiB']:.2f} | {b['peak_over_final']:.3f} | "
                     f"{b['copied_GiB']:.2f} | {int(b['steps'])} |")
    return "\n".join(lines)


# Two methods holding the same memory drew one line exactly over the other,
# and a reader must see both: each line has its own dash and marker, each
# later one thinner and above the earlier, and equal lines are named in the title.
LOOKS = (("-", "o"), ("--", "s"), ("-.", "^"), (":", "D"), ("-", "v"), ("--", "P"), ("-.", "X"), (":", "*"))


def line_look(i):
    dash, marker = LOOKS[i % len(LOOKS)]
    return {"linestyle": dash, "marker": marker, "linewidth": max(2.4 - 0.3 * i, 0.8),
            "markersize": max(7.0 - 0.6 * i, 3.0), "zorder": 2 + i}


def equal_note(series):
    """'equal: a = b' for the names whose points are the same, '' when none are."""
    groups = {}
    for name, points in series.items():
        groups.setdefault(tuple(points), []).append(name)
    equal = [" = ".join(names) for names in groups.values() if len(names) > 1]
    return "equal: " + "; ".join(equal) if equal else ""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("json")
    ap.add_argument("csv", nargs="?")
    ap.add_argument("--out", default=".")
    a = ap.parse_args()
    context, cases = load_cases(a.json)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "growable.md"), "w") as f:
        f.write(f"# sova_bench_growable on {context.get('host_name', '?')}\n\n")
        f.write(table(cases) + "\n")
    print(table(cases))
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot_growable: no matplotlib, table only", file=sys.stderr)
        return 0
    traces = defaultdict(list)
    if a.csv and os.path.exists(a.csv):
        with open(a.csv) as f:
            for row in csv.reader(f):
                traces[row[0]].append((int(row[2]), int(row[3])))
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    gib = float(1 << 30)
    shown = {name: points for name, points in sorted(traces.items()) if "sim" not in name and name.endswith("div:8")}
    for i, (name, points) in enumerate(shown.items()):
        left.plot([p[0] / gib for p in points], [p[1] / gib for p in points], label=name, **line_look(i))
    left.set_xscale("log", base=2)
    left.set_yscale("log", base=2)
    left.set_xlabel("vector size (GiB)")
    left.set_ylabel("device memory held (GiB)")
    note = equal_note(shown)
    left.set_title("memory held while growing 1 MiB -> 8 GiB (+12.5% a step)" + ("\n" + note if note else ""))
    left.legend(fontsize=8)
    names = [n for n in sorted(cases) if "sim" not in n]
    right.bar(range(len(names)), [cases[n]["real_time"] for n in names])
    right.set_xticks(range(len(names)))
    right.set_xticklabels([n.replace("growable/", "") for n in names], rotation=30, ha="right", fontsize=8)
    right.set_ylabel("time to grow 1 MiB -> 8 GiB (ms)")
    for i, n in enumerate(names):
        right.annotate(f"peak {cases[n]['peak_GiB']:.1f} GiB", (i, cases[n]["real_time"]), ha="center",
                       va="bottom", fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(a.out, "growable.png"), dpi=110)
    return 0


if __name__ == "__main__":
    sys.exit(main())
