#!/usr/bin/env python3
"""The table of tools/device/perf-gate.sh: each figure of two trees, their
ratio and the noise, from the raw outputs of the rounds.

    tools/perf_gate_table.py RAW_DIR --base LABEL --head LABEL [--floor F]
                             [--json FILE] [--markdown FILE]

RAW_DIR holds one file per run, named r<round>-<slot>-<tree>-<step>[-<name>].<ext>
(round from 1, slot 1 or 2: the order within the round, tree base or head):

    <step> seed, pair, threads   .json   sova_bench --benchmark_out_format=json
    <step> replay, <name> TRACE  .txt    sova_driver_time's output
    <step> sleep                 .jsonl  sova_sleep_wake --json's records

Other files (the programs' console output, build logs) are left alone.

A figure is a time, lower is better, one value per run: the median over the
run's repetitions (Google Benchmark), the run's steady passes or first pass
(sova_driver_time: us a pass), a sleep's seconds (the first cycle's; the
median of the later cycles'). threads_mixed/ gives ns a pair of all threads
together (1e9 / its pairs counter). A round whose two slots ran different
trees is an A/B round and gives head / base; one that ran one tree twice is
an A/A round and gives second / first, the noise. Per figure:

    A, B       the median of base's and of head's values over the A/B rounds
               (each shown where only one tree has the figure)
    B/A        the median of the A/B rounds' ratios
    A/A noise  the largest |1 - ratio| of the A/A rounds
    verdict    WORSE when B/A > 1 + max(noise, floor), better when
               B/A < 1 - max(noise, floor), else ok; n/a without an A/B ratio

Prints lines naming what failed or is missing (a case's error, a run without
its output), then one Markdown table, last. --json writes every value and
ratio by round; --markdown writes the same text as printed. Exit status: 1
when a figure is WORSE, 0 otherwise, 2 when RAW_DIR holds no run.
"""
import argparse
import json
import os
import re
import statistics
import sys

RUN_FILE = re.compile(r"^r(\d+)-([12])-(base|head)-(seed|pair|threads|replay|sleep)(?:-(.+?))?\.(json|txt|jsonl)$")
TIME_UNITS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}
GROUP_RANK = {"seed": 0, "pair": 1, "threads_mixed": 2, "replay": 3, "sleep": 4}
DEFAULT_FLOOR = 0.01


class Figure:
    """A figure's identity: its label (with its unit) and where it sorts."""

    def __init__(self, label, group, order):
        self.label = label
        self.sort_key = (GROUP_RANK.get(group, len(GROUP_RANK)), group, order, label)


def size_name(n):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return "%d %s" % (n >> shift, unit)
    return "%d B" % n


def bench_case_figure(run_name):
    """(Figure, unit in seconds, per-pair) for a sova_bench case name."""
    parts = [p for p in run_name.split("/") if p not in ("real_time", "manual_time", "process_time")]
    group = parts[0]
    args = {}
    for p in parts[2:]:
        key, sep, value = p.partition(":")
        args[key if sep else "_arg"] = value if sep else key
    if group == "seed" and len(parts) > 1:
        variant = parts[1]
        mib = int(args.get("mib", "4"))  # a harness from before mib:N ran 4 MiB
        threshold = "max" if args.get("threshold_max", "0") != "0" else "0"
        if variant == "sova":
            label = "seed loop %d MiB, threshold %s (ms)" % (mib, threshold)
        else:
            label = "seed loop %d MiB, %s%s: control (ms)" % (
                mib, variant, ", threshold max" if threshold == "max" else "")
        order = (mib, variant != "sova", variant, threshold)
        return Figure(label, group, order), 1e-3, False
    if group == "pair" and len(parts) > 1 and args.get("_arg", "").isdigit():
        size = int(args["_arg"])
        return Figure("pair %s, %s (ns)" % (size_name(size), parts[1]), group, (size, parts[1])), 1e-9, False
    if group == "threads_mixed" and len(parts) > 1:
        threads = int(args.get("threads", "1"))
        classes = int(args.get("classes", "0"))
        label = "threads_mixed %d threads, %d sizes, %s (ns a pair)" % (threads, classes, parts[1])
        return Figure(label, group, (threads, classes, parts[1])), 1e-9, True
    return Figure("%s (s)" % run_name, group, ()), 1.0, False


def bench_figures(text):
    """{label: (Figure, value)} and [problem] from one sova_bench JSON file."""
    problems = []
    try:
        data = json.loads(text)
    except ValueError as e:
        return {}, ["unreadable JSON (%s)" % e]
    by_case = {}
    for entry in data.get("benchmarks", []):
        name = entry.get("run_name", entry.get("name", ""))
        case = by_case.setdefault(name, {"iterations": [], "median": None, "error": None})
        if entry.get("error_occurred") or entry.get("skipped"):
            case["error"] = entry.get("error_message") or entry.get("skip_message") or "skipped"
        elif entry.get("run_type") == "aggregate":
            if entry.get("aggregate_name") == "median":
                case["median"] = entry
        else:
            case["iterations"].append(entry)
    figures = {}
    for name, case in by_case.items():
        figure, unit, per_pair = bench_case_figure(name)
        if case["error"] is not None:
            problems.append("%s: %s" % (name, case["error"]))
            continue
        entries = case["iterations"] or ([case["median"]] if case["median"] else [])
        values = []
        for e in entries:
            if per_pair:
                if e.get("pairs"):
                    values.append(1e9 / e["pairs"])
            elif e.get("real_time") is not None:
                values.append(e["real_time"] * TIME_UNITS.get(e.get("time_unit", "ns"), 1e-9) / unit)
        if values:
            figures[figure.label] = (figure, statistics.median(values))
        else:
            problems.append("%s: no value" % name)
    return figures, problems


def replay_figures(text, trace):
    """sova_driver_time's steady replay and first pass (us) for one trace."""
    figures = {}
    m = re.search(r"^replay ([0-9.]+) us", text, re.M)
    if m:
        f = Figure("replay %s, steady (us a pass)" % trace, "replay", (trace, 0))
        figures[f.label] = (f, float(m.group(1)))
    m = re.search(r"^first pass ([0-9.]+) us", text, re.M)
    if m:
        f = Figure("replay %s, first pass (us)" % trace, "replay", (trace, 1))
        figures[f.label] = (f, float(m.group(1)))
    problems = [] if figures else ["no replay line"]
    return figures, problems


def sleep_figures(text):
    """From sova_sleep_wake --json (one record a line): per size, the backup
    mode's first sleep (cycle 0), and the median sleep and wake of the later
    cycles; the plain pinned copy device to host, when it ran, as a control."""
    problems = []
    by_gib = {}
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            r = json.loads(line)
        except ValueError:
            problems.append("unreadable record: %s" % line[:80])
            continue
        if r.get("mode") != "backup" or "cycle" not in r:
            continue
        if r.get("intact") is False:
            problems.append("%g GiB cycle %d: a block came back changed" % (r["gib"], r["cycle"]))
        by_gib.setdefault(r["gib"], []).append(r)
    figures = {}

    def add(label, order, value):
        f = Figure(label, "sleep", order)
        figures[f.label] = (f, value)

    for gib, records in sorted(by_gib.items()):
        records.sort(key=lambda r: r["cycle"])
        first = [r for r in records if r["cycle"] == 0]
        later = [r for r in records if r["cycle"] > 0]
        if first:
            add("sleep %g GiB, first (s)" % gib, (gib, 0), first[0]["sleep_s"])
        if later:
            add("sleep %g GiB, steady (s)" % gib, (gib, 1), statistics.median(r["sleep_s"] for r in later))
            add("wake %g GiB, steady (s)" % gib, (gib, 2), statistics.median(r["wake_s"] for r in later))
        d2h = records[0].get("pinned_d2h_gibs", 0)
        if d2h:
            add("pinned copy %g GiB to host: control (s)" % gib, (gib, 3), gib / d2h)
    if not figures:
        problems.append("no backup record")
    return figures, problems


def read_runs(raw_dir):
    """{(round, slot): {"tree": ..., "figures": {label: (Figure, value)}}}, [problem]."""
    runs = {}
    problems = []
    for name in sorted(os.listdir(raw_dir)):
        m = RUN_FILE.match(name)
        if not m:
            continue
        rnd, slot, tree, step, sub, ext = m.groups()
        if (step in ("seed", "pair", "threads") and ext != "json") or (step == "replay" and ext != "txt") or (
                step == "sleep" and ext != "jsonl"):
            continue  # the console beside a program's own output
        with open(os.path.join(raw_dir, name), errors="replace") as f:
            text = f.read()
        if step == "replay":
            figures, found = replay_figures(text, sub or "?")
        elif step == "sleep":
            figures, found = sleep_figures(text)
        else:
            figures, found = bench_figures(text)
        run = runs.setdefault((int(rnd), int(slot)), {"tree": tree, "figures": {}})
        if run["tree"] != tree:
            problems.append("%s: round %s slot %s ran two trees" % (name, rnd, slot))
            continue
        run["figures"].update(figures)
        problems.extend("%s: %s" % (name, p) for p in found)
    return runs, problems


def round_kind(runs, r):
    """"A/B", "A/A", or None for a round that lacks a slot's run."""
    first, second = runs.get((r, 1)), runs.get((r, 2))
    if first is None or second is None:
        return None
    return "A/A" if first["tree"] == second["tree"] else "A/B"


def median(values):
    return statistics.median(values) if values else None


def compare(runs, floor=DEFAULT_FLOOR):
    """One row per figure (dicts, in table order) from read_runs' runs."""
    figures = {}
    for run in runs.values():
        for label, (figure, _) in run["figures"].items():
            figures.setdefault(label, figure)
    rounds = sorted({r for r, _ in runs})
    rows = []
    for label, figure in sorted(figures.items(), key=lambda kv: kv[1].sort_key):
        row = {"figure": label, "rounds": []}
        base_values, head_values, ratios, noise = [], [], [], []
        for r in rounds:
            first, second = runs.get((r, 1)), runs.get((r, 2))
            if first is None or second is None:
                continue
            v1 = first["figures"].get(label, (None, None))[1]
            v2 = second["figures"].get(label, (None, None))[1]
            if first["tree"] != second["tree"]:
                base, head = (v1, v2) if first["tree"] == "base" else (v2, v1)
                if base is not None:
                    base_values.append(base)
                if head is not None:
                    head_values.append(head)
            if v1 is None or v2 is None or v1 <= 0 or v2 <= 0:
                continue
            if first["tree"] != second["tree"]:
                ratios.append(head / base)
                row["rounds"].append({"round": r, "kind": "A/B", "base": base, "head": head, "ratio": head / base})
            else:
                noise.append(abs(1 - v2 / v1))
                row["rounds"].append({"round": r, "kind": "A/A", "tree": first["tree"], "first": v1, "second": v2,
                                      "ratio": v2 / v1})
        row["base"] = median(base_values)
        row["head"] = median(head_values)
        row["ratio"] = median(ratios)
        row["noise"] = max(noise) if noise else None
        band = max(row["noise"] or 0.0, floor)
        if row["ratio"] is None:
            row["verdict"] = "n/a"
        elif row["ratio"] > 1 + band:
            row["verdict"] = "WORSE"
        elif row["ratio"] < 1 - band:
            row["verdict"] = "better"
        else:
            row["verdict"] = "ok"
        rows.append(row)
    return rows


def number(v):
    if v is None:
        return "n/a"
    return "%.4g" % v if abs(v) < 1e4 else "%.0f" % v


def table(rows, base_label, head_label):
    lines = ["| figure | A: %s | B: %s | B/A | A/A noise | verdict |" % (base_label, head_label),
             "| --- | ---: | ---: | ---: | ---: | --- |"]
    for row in rows:
        lines.append("| %s | %s | %s | %s | %s | %s |" % (
            row["figure"], number(row["base"]), number(row["head"]),
            "n/a" if row["ratio"] is None else "%.3f" % row["ratio"],
            "n/a" if row["noise"] is None else "%.1f%%" % (row["noise"] * 100), row["verdict"]))
    return lines


def report(runs, problems, rows, base_label, head_label, floor):
    rounds = sorted({r for r, _ in runs})
    ab = [r for r in rounds if round_kind(runs, r) == "A/B"]
    aa = [r for r in rounds if round_kind(runs, r) == "A/A"]
    lines = []
    missing = [row["figure"] for row in rows if row["ratio"] is None]
    for p in problems:
        lines.append("problem: %s" % p)
    for m in missing:
        lines.append("no A/B ratio: %s" % m)
    worse = [row["figure"] for row in rows if row["verdict"] == "WORSE"]
    lines.append("")
    lines.append("A = %s (base), B = %s; %d A/B rounds (%s), %d A/A rounds (%s). B/A: the median of the A/B "
                 "rounds' ratios; A/A noise: the largest |1 - ratio| of one tree run twice in a round; WORSE: B/A "
                 "above 1 + max(noise, %.1f%%). %s" % (
                     base_label, head_label, len(ab), " ".join(map(str, ab)) or "none", len(aa),
                     " ".join(map(str, aa)) or "none", floor * 100,
                     "%d figure(s) WORSE." % len(worse) if worse else "No figure WORSE."))
    lines.append("")
    lines.extend(table(rows, base_label, head_label))
    return lines


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("raw_dir")
    parser.add_argument("--base", required=True, help="the base tree's name in the table (A)")
    parser.add_argument("--head", required=True, help="the tree under test's name in the table (B)")
    parser.add_argument("--floor", type=float, default=DEFAULT_FLOOR,
                        help="the least band a ratio must leave to be WORSE or better (default %(default)s)")
    parser.add_argument("--json", help="write the rows, with each round's values, here")
    parser.add_argument("--markdown", help="write the printed text here too")
    args = parser.parse_args(argv)
    runs, problems = read_runs(args.raw_dir)
    if not runs:
        print("perf_gate_table.py: no run's output in %s" % args.raw_dir, file=sys.stderr)
        return 2
    rows = compare(runs, args.floor)
    lines = report(runs, problems, rows, args.base, args.head, args.floor)
    text = "\n".join(lines) + "\n"
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"base": args.base, "head": args.head, "floor": args.floor, "problems": problems,
                       "rows": rows}, f, indent=1)
    sys.stdout.write(text)
    return 1 if any(row["verdict"] == "WORSE" for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
