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


def plot_bench():
    """tools/plot_bench.py, whose line looks and coincidence notes keep two
    methods holding the same memory visible (one line drawn over the other)."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
    import plot_bench as pb  # noqa: PLC0415
    return pb


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
    pb = plot_bench()
    looks = pb.line_looks(list(shown), pb.styles_for(list(shown)))
    for name, points in shown.items():
        left.plot([p[0] / gib for p in points], [p[1] / gib for p in points], label=name, **looks[name])
    left.set_xscale("log", base=2)
    left.set_yscale("log", base=2)
    left.set_xlabel("vector size (GiB)")
    left.set_ylabel("device memory held (GiB)")
    left.set_title(pb.titled("memory held while growing 1 MiB -> 8 GiB (+12.5% a step)", pb.coinciding(shown)))
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
