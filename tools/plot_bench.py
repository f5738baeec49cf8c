#!/usr/bin/env python3
"""Plots and tabulates Google Benchmark JSON from sova_bench / sova_bench_torch / sova_bench_rmm.

    tools/plot_bench.py [--out DIR] [--no-png] [--replay-memory CSV ...] BENCH.json [MORE.json ...]

Reads one or more JSON files written with --benchmark_out_format=json (with
or without --benchmark_report_aggregates_only; later files add to earlier
ones, e.g. bench.json then torch.json) and writes into DIR (default: .):

    summary.md     a markdown table per workload group: median time, spread,
                   ratio to cudaMallocAsync, the cases' counters; the
                   targets; what was skipped and why
    ratios.png     bars per workload: each allocator's cost per unit of work
                   over cudaMallocAsync's (log scale; below 1 is faster)
    threads.png    threads/: aggregate pairs/s against threads (log-log)
    overheads.png  multistream/ vs_prealloc (time over the preallocated
                   floor) and random/ res_over_req (peak reserved over peak
                   requested), per allocator
    replay.png     replay/: peak reserved over peak used and over the trace's
                   peak, and operations per second, per trace and allocator
    replay_memory.png  replay/: reserved memory over time per trace, from the
                   --replay-memory CSV files: sova's default, its best
                   alternative and the peers, one color each, one legend

A PNG is only written when its data is there; with --no-png, or without
matplotlib, only summary.md. Case names are group/allocator[/args]
(replay/<trace>/<allocator>: there the trace is the argument); the
figures compare allocators within a workload (group + args, leaving out
allocs:N, which only sets how much work one iteration is).

Cost per unit of work, the basis of every ratio: 1/ops for random/ (ops per
second), 1/pairs for threads/ and burst/ (pairs per second), otherwise the
time of one iteration. Values are the median over repetitions where the JSON
has aggregates, else the mean of the repetitions.
"""
import argparse
import json
import math
import os
import sys
from collections import OrderedDict, defaultdict

REFERENCES = ("cudaMallocAsync_default", "cudaMallocAsync")  # seed/ calls it cudaMallocAsync
DECORATIONS = ("real_time", "manual_time", "process_time")
DECORATION_PREFIXES = ("iterations:", "min_time:", "min_warmup_time:", "repeats:")
STANDARD_KEYS = {
    "name", "run_name", "run_type", "repetitions", "repetition_index", "threads", "iterations",
    "real_time", "cpu_time", "time_unit", "family_index", "per_family_instance_index",
    "aggregate_name", "aggregate_unit", "label", "error_occurred", "error_message", "skipped",
    "skip_message", "items_per_second", "bytes_per_second",
}
TIME_UNITS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}
GROUP_ORDER = ("pair", "pair_cold", "threads", "burst", "seed", "multistream", "random", "growth")
GROUP_TITLES = {
    "pair": "pair/: one allocate + free, warm (time per pair)",
    "pair_cold": "pair_cold/: one allocate + free with nothing cached (time per pair)",
    "threads": "threads/: T threads, own stream each (time per pair and thread)",
    "burst": "burst/: 10,000 live small blocks, then all freed (time per burst)",
    "seed": "seed/: 100 x (allocate 4 MiB, kernel, free), one stream (time per loop)",
    "multistream": "multistream/: 4 streams x 25 rounds of (2 temporaries, 200 us kernel) (time per loop)",
    "random": "random/: RMM's random_allocations shape (time per replay of the trace)",
    "growth": "growth/: one buffer grown by 64 equal steps, copying at each (time per growth)",
}
# Counters shown in the tables, per group (others are left out to keep them narrow).
TABLE_COUNTERS = {
    "threads": ("pairs",),
    "burst": ("pairs", "s_per_pair"),
    "multistream": ("vs_prealloc", "floor_ms", "waits", "xreuse", "syncs"),
    "random": ("ops", "peak_req_MiB", "peak_res_MiB", "res_over_req"),
}


class Case:
    """One benchmark case (all its repetitions) from one file."""

    def __init__(self, run_name, source):
        self.run_name = run_name
        self.source = source
        parts = replay_parts(run_name.split("/"))
        self.group = parts[0]
        self.allocator = parts[1] if len(parts) > 1 else ""
        self.threads = 1
        args = []
        for part in parts[2:]:
            if part in DECORATIONS or part.startswith(DECORATION_PREFIXES):
                continue
            if part.startswith("threads:"):
                self.threads = int(part.split(":", 1)[1])
                continue
            args.append(part)
        self.args = args
        # The workload the allocators are compared on: allocs:N only scales the work.
        self.workload = "/".join([self.group] + [a for a in args if not a.startswith("allocs:")])
        self.label = ""
        self.error = None
        self.aggregates = {}  # aggregate name -> entry
        self.iterations = []  # per-repetition entries

    def _value(self, key, entry):
        value = entry.get(key)
        if key in ("real_time", "cpu_time") and value is not None:
            value = value * TIME_UNITS.get(entry.get("time_unit", "ns"), 1e-9)
        return value

    def get(self, key):
        """Median (or mean of repetitions) of a time (in seconds) or counter."""
        for name in ("median", "mean"):
            if name in self.aggregates:
                return self._value(key, self.aggregates[name])
        values = [self._value(key, e) for e in self.iterations]
        values = [v for v in values if v is not None]
        return sum(values) / len(values) if values else None

    def cv(self, key="real_time"):
        """Coefficient of variation over repetitions, if known."""
        if "cv" in self.aggregates and key in self.aggregates["cv"]:
            return self.aggregates["cv"][key]
        values = [self._value(key, e) for e in self.iterations]
        values = [v for v in values if v is not None]
        if len(values) < 2:
            return None
        mean = sum(values) / len(values)
        var = sum((v - mean) ** 2 for v in values) / (len(values) - 1)
        return math.sqrt(var) / mean if mean else None

    def repetitions(self):
        if self.aggregates:
            any_entry = next(iter(self.aggregates.values()))
            return any_entry.get("repetitions", 0)
        return len(self.iterations)

    def counters(self):
        entry = self.aggregates.get("median") or self.aggregates.get("mean") or (
            self.iterations[0] if self.iterations else {})
        return [k for k, v in entry.items() if k not in STANDARD_KEYS and isinstance(v, (int, float))]

    def cost(self):
        """Seconds per unit of work (see the module docstring)."""
        if self.group == "random" and self.get("ops"):
            return 1.0 / self.get("ops")
        if self.group in ("threads", "burst") and self.get("pairs"):
            return 1.0 / self.get("pairs")
        return self.get("real_time")


def load(paths):
    cases = OrderedDict()
    contexts = []
    for path in paths:
        with open(path) as f:
            data = json.load(f)
        contexts.append((path, data.get("context", {})))
        for entry in data.get("benchmarks", []):
            run_name = entry.get("run_name") or entry["name"]
            key = (run_name, path)
            case = cases.get(key)
            if case is None:
                case = cases[key] = Case(run_name, path)
            case.label = entry.get("label", case.label)
            if entry.get("error_occurred") or entry.get("skipped"):
                case.error = entry.get("error_message") or entry.get("skip_message") or "skipped"
                continue
            if entry.get("run_type") == "aggregate":
                case.aggregates[entry.get("aggregate_name", "")] = entry
            else:
                case.iterations.append(entry)
    ok = [c for c in cases.values() if c.error is None and (c.aggregates or c.iterations)]
    failed = [c for c in cases.values() if c.error is not None and not (c.aggregates or c.iterations)]
    return ok, failed, contexts


def group_rank(group):
    return GROUP_ORDER.index(group) if group in GROUP_ORDER else len(GROUP_ORDER)


def arg_sort_key(args):
    key = []
    for a in args:
        value = a.split(":", 1)[-1]
        try:
            key.append((0, float(value), a))
        except ValueError:
            key.append((1, 0.0, a))
    return key


def reference_cost(cases_by_allocator):
    for ref in REFERENCES:
        if ref in cases_by_allocator:
            return ref, cases_by_allocator[ref].cost()
    return None, None


def workloads(cases):
    """workload -> {allocator: Case}, ordered by group, then by arguments."""
    table = defaultdict(OrderedDict)
    for c in cases:
        if c.group == "threads":
            continue
        table[c.workload][c.allocator] = c
    order = sorted(table, key=lambda w: (group_rank(w.split("/")[0]), arg_sort_key(w.split("/")[1:])))
    return OrderedDict((w, table[w]) for w in order)


def pretty_args(args):
    """pair/'s byte counts as sizes (4194304 -> 4 MiB); other arguments as they are."""
    out = []
    for a in args:
        if a.isdigit():
            n = int(a)
            for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
                if n >= scale and n % scale == 0:
                    a = "%d %s" % (n // scale, unit)
                    break
            else:
                a = "%d B" % n
        out.append(a)
    return "/".join(out)


def fmt_time(seconds):
    if seconds is None:
        return "-"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return "%.3g %s" % (seconds / scale, unit)
    return "%.3g ns" % (seconds / 1e-9)


def fmt_number(value):
    if value is None:
        return "-"
    if value == 0:
        return "0"
    magnitude = abs(value)
    for suffix, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if magnitude >= scale:
            return "%.3g%s" % (value / scale, suffix)
    return "%.3g" % value


def fmt_counter(name, value):
    if value is None:
        return "-"
    if name in ("pairs", "ops"):
        return fmt_number(value) + "/s"
    if name == "s_per_pair":
        return fmt_time(value)
    return fmt_number(value)


def allocator_order(names):
    """References first, then sova, then the rest, each alphabetically."""
    def key(name):
        if name in REFERENCES:
            return (0, name)
        if name.startswith("preallocated"):
            return (1, name)
        if name.startswith("sova"):
            return (2, name)
        return (3, name)
    return sorted(names, key=key)


def table_lines(header, rows):
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + [
        "| " + " | ".join(row) + " |" for row in rows]


def fmt_mib(value):
    if value is None:
        return "-"
    return "%.3g GiB" % (value / 1024) if value >= 1024 else "%.3g MiB" % value


def cold_pair_table(members, cases):
    """pair_cold/: each cold pair beside the warm pair/ of the same allocator and
    size, and their difference (what mapping costs); the ratio is to
    cudaMallocAsync_default's cold pair of the same size."""
    warm = {(c.allocator, tuple(c.args)): c for c in cases if c.group == "pair"}
    by_size = defaultdict(dict)
    for c in members:
        by_size[tuple(c.args)][c.allocator] = c
    rows = []
    for args in sorted(by_size, key=arg_sort_key):
        row_cases = by_size[args]
        _, ref = reference_cost(row_cases)
        for allocator in allocator_order(row_cases):
            c = row_cases[allocator]
            cold = c.get("real_time")
            w = warm.get((allocator, args))
            warm_time = w.get("real_time") if w else None
            cv = c.cv()
            rows.append([pretty_args(c.args) or "-", allocator, fmt_time(cold),
                         "%.1f%%" % (cv * 100) if cv is not None else "-", fmt_time(warm_time),
                         fmt_time(cold - warm_time) if cold is not None and warm_time is not None else "-",
                         "%.3g" % (cold / ref) if ref and cold else "-", c.label or "-"])
    header = ["size", "allocator", "cold pair", "cv", "warm pair (pair/)", "cold - warm", "vs cudaMallocAsync",
              "label"]
    return table_lines(header, rows)


def growth_table(members, cases):
    """growth/: time per growth and per step, the allocator's share of a step,
    and its peak reserved over peak used memory (where it reports them)."""
    _, ref = reference_cost({c.allocator: c for c in members})
    rows = []
    for c in sorted(members, key=lambda c: allocator_order([m.allocator for m in members]).index(c.allocator)):
        cv = c.cv()
        ratio = c.get("res_over_used")
        rows.append([c.allocator, fmt_time(c.get("real_time")), "%.1f%%" % (cv * 100) if cv is not None else "-",
                     fmt_time(c.get("s_per_step")), fmt_time(c.get("alloc_s_per_step")),
                     fmt_mib(c.get("peak_used_MiB")), fmt_mib(c.get("peak_res_MiB")),
                     "%.3g" % ratio if ratio is not None else "-",
                     "%.3g" % (c.cost() / ref) if ref and c.cost() else "-", c.label or "-"])
    header = ["allocator", "per growth", "cv", "per step", "in allocator per step", "peak used", "peak reserved",
              "reserved / used", "vs cudaMallocAsync", "label"]
    return table_lines(header, rows)


# Groups whose table is not the generic one of write_summary.
OWN_TABLES = {"pair_cold": cold_pair_table, "growth": growth_table}


def write_summary(path, cases, failed, contexts, pngs):
    lines = []
    ctx = contexts[0][1] if contexts else {}
    lines.append("# sova benchmarks: %s" % ctx.get("gpu", "(no gpu in context)"))
    lines.append("")
    for source, c in contexts:
        extra = ", ".join("%s %s" % (k, c[k]) for k in ("torch_version", "torch_allocator", "rmm_version") if k in c)
        lines.append("- `%s`: %s on %s (%s CPUs), %s, Google Benchmark library build %s%s" % (
            os.path.basename(source), os.path.basename(c.get("executable", "?")), c.get("host_name", "?"),
            c.get("num_cpus", "?"), c.get("date", "?"), c.get("library_build_type", "?"),
            ", " + extra if extra else ""))
    if ctx.get("note"):
        lines.append("- note: %s" % ctx["note"])
    reps = sorted({c.repetitions() for c in cases})
    lines.append("")
    lines.append("Figures are host wall time; each is the median over %s repetitions (cv: their spread, "
                 "stddev / mean). \"vs cudaMallocAsync\" is the allocator's cost per unit of work over "
                 "cudaMallocAsync's on the default pool (seed/: the same); below 1 is faster. A label "
                 "`sim` marks host-simulation timings, which are smoke tests, not GPU figures." %
                 ("/".join(str(r) for r in reps) if reps else "?"))
    lines.append("")

    # Targets the project has set, as far as this data speaks to them.
    targets = []
    by_name = {(c.workload, c.allocator): c for c in cases}
    for args in ("threshold_max:0", "threshold_max:1"):
        floor = by_name.get(("seed/" + args, "preallocated"))
        sova = by_name.get(("seed/" + args, "sova"))
        if floor and sova and floor.get("real_time") and sova.get("real_time"):
            ratio = sova.get("real_time") / floor.get("real_time")
            targets.append("seed loop (%s): sova %+.1f%% vs preallocated (target: within 5%%)" %
                           (args, (ratio - 1) * 100))
    for c in cases:
        if c.group == "multistream" and c.allocator.startswith("sova") and c.get("vs_prealloc"):
            targets.append("multistream/%s/%s: %.3fx preallocated (target: within 1.10x)%s" % (
                c.allocator, "/".join(c.args), c.get("vs_prealloc"),
                "" if c.label in ("cuda", "") else " [%s]" % c.label))
    if targets:
        lines.append("## Targets")
        lines.append("")
        lines.extend("- " + t for t in targets)
        lines.append("")

    groups = OrderedDict()
    for c in sorted(cases, key=lambda c: (group_rank(c.group), c.group)):
        groups.setdefault(c.group, []).append(c)
    for group, members in groups.items():
        lines.append("## " + GROUP_TITLES.get(group, group + "/"))
        lines.append("")
        if group in OWN_TABLES:
            lines.extend(OWN_TABLES[group](members, cases))
            lines.append("")
            continue
        counters = TABLE_COUNTERS.get(group, ())
        present = [k for k in counters if any(c.get(k) is not None for c in members)]
        header = ["workload", "allocator", "median", "cv", "vs cudaMallocAsync"] + present + ["label"]
        lines.append("| " + " | ".join(header) + " |")
        lines.append("|" + "---|" * len(header))
        by_workload = defaultdict(dict)
        for c in members:
            by_workload[(c.workload, c.threads)][c.allocator] = c
        for (workload, threads) in sorted(by_workload, key=lambda k: (arg_sort_key(k[0].split("/")[1:]), k[1])):
            row_cases = by_workload[(workload, threads)]
            _, ref = reference_cost(row_cases)
            for allocator in allocator_order(row_cases):
                c = row_cases[allocator]
                name = pretty_args(c.args) or "-"
                if group == "threads":
                    name = "threads:%d" % c.threads
                cv = c.cv()
                cost = c.cost()
                ratio = "%.3g" % (cost / ref) if ref and cost else "-"
                row = [name, allocator, fmt_time(c.get("real_time")), "%.1f%%" % (cv * 100) if cv is not None else "-",
                       ratio] + [fmt_counter(k, c.get(k)) for k in present] + [c.label or "-"]
                lines.append("| " + " | ".join(row) + " |")
        lines.append("")

    if failed:
        lines.append("## Skipped or failed")
        lines.append("")
        for c in failed:
            lines.append("- `%s`: %s" % (c.run_name, c.error))
        lines.append("")
    if pngs:
        lines.append("## Figures")
        lines.append("")
        for png in pngs:
            lines.append("![%s](%s)" % (png, png))
        lines.append("")
    with open(path, "w") as f:
        f.write("\n".join(lines))


# One color per allocator in every figure and every run: the known ones have
# their own; the others take, in order, the colors of EXTRA_COLORS that the
# figure does not use yet (hues apart from the known ones', then lighter
# shades), so that no two allocators of a figure share a color.
KNOWN_COLORS = {
    "sova_pool": "#1f77b4", "sova": "#1f77b4", "sova_capi": "#17becf", "sova_thorough": "#2ca02c",
    "cudaMallocAsync_default": "#d62728", "cudaMallocAsync": "#d62728", "cudaMallocAsync_pool": "#ff9896",
    "torch_caching": "#ff7f0e", "torch_expandable": "#9467bd", "preallocated": "#7f7f7f",
    "cudaMalloc": "#8c564b", "rmm_pool": "#e7298a", "rmm_arena": "#66a61e", "rmm_binning": "#a6761d",
    "rmm_cuda_async": "#7570b3",
}
EXTRA_COLORS = ("#e377c2", "#bcbd22", "#000080", "#e6ab02", "#1b9e77", "#8c564b", "#7f7f7f", "#e7298a",
                "#66a61e", "#a6761d", "#7570b3", "#aec7e8", "#98df8a", "#c5b0d5", "#c49c94", "#f7b6d2",
                "#dbdb8d", "#9edae5", "#ffbb78", "#c7c7c7")


def colors_for(allocators):
    colors = {}
    for name in allocators:
        base = name[:-4] if name.endswith("_sim") else name
        if base in KNOWN_COLORS:
            colors[name] = KNOWN_COLORS[base]
    free = [c for c in EXTRA_COLORS if c not in colors.values()] or list(EXTRA_COLORS)
    others = [a for a in allocator_order(allocators) if a not in colors]
    for i, name in enumerate(others):
        colors[name] = free[i % len(free)]
    return colors


def figure_legend(fig, axes, columns=None):
    """One legend for the whole figure, below its panels: every label of
    every panel once, in the order first drawn (a legend per panel repeated
    the same allocators beside each)."""
    handles = OrderedDict()
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, handle)
    if not handles:
        return None
    columns = columns or min(len(handles), 4)
    return fig.legend(list(handles.values()), list(handles), loc="lower center", ncol=columns, fontsize=8,
                      frameon=False, bbox_to_anchor=(0.5, 0.0))


def save_with_legend(fig, axes, path, columns=None):
    """Lays the panels out above one figure legend and writes the PNG."""
    legend = figure_legend(fig, axes, columns)
    rows = 0
    if legend is not None:
        n = len(legend.get_texts())
        rows = -(-n // (columns or min(n, 4)))
    fig.tight_layout(rect=(0, min(0.01 + 0.22 * rows / fig.get_size_inches()[1], 0.3), 1, 1))
    fig.savefig(path, dpi=110)


def draw_bars(ax, rows, data, colors, clip=None):
    """Grouped bars: one group per row (workload), one bar per allocator, each
    labelled with its value; bars above `clip` are cut there (label shows the value)."""
    present = allocator_order({a for r in rows for a in data[r]})
    width = 0.8 / max(len(present), 1)
    for i, allocator in enumerate(present):
        xs = [x + (i - (len(present) - 1) / 2) * width for x, r in enumerate(rows) if allocator in data[r]]
        ys = [data[r][allocator] for r in rows if allocator in data[r]]
        shown = [min(y, clip) if clip else y for y in ys]
        bars = ax.bar(xs, shown, width, label=allocator, color=colors[allocator])
        for bar, y in zip(bars, ys):
            ax.annotate("%.3g" % y, (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center",
                        va="bottom", fontsize=6, rotation=90, xytext=(0, 2), textcoords="offset points")
    ax.set_xticks(range(len(rows)))
    ax.set_xlim(-0.6, len(rows) - 0.4)


def plain_log_axis(ax):
    from matplotlib.ticker import FuncFormatter, NullFormatter  # noqa: PLC0415
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: "%g" % v))
    ax.yaxis.set_minor_formatter(NullFormatter())


def plot_ratios(path, cases):
    import matplotlib.pyplot as plt  # noqa: PLC0415
    table = workloads(cases)
    groups = OrderedDict()
    for workload, by_alloc in table.items():
        ref_name, ref = reference_cost(by_alloc)
        if not ref:
            continue
        ratios = {a: c.cost() / ref for a, c in by_alloc.items() if a != ref_name and c.cost()}
        if ratios:
            groups.setdefault(workload.split("/")[0], []).append((workload, ratios))
    if not groups:
        return False
    allocators = {a for rows in groups.values() for _, r in rows for a in r}
    colors = colors_for(allocators)
    fig, axes = plt.subplots(len(groups), 1, figsize=(13, 3.4 * len(groups)), squeeze=False)
    for ax, (group, rows) in zip(axes[:, 0], groups.items()):
        data = OrderedDict((w, r) for w, r in rows)
        draw_bars(ax, list(data), data, colors)
        ax.axhline(1.0, color="black", linewidth=0.8)
        plain_log_axis(ax)
        values = [v for r in data.values() for v in r.values() if v > 0]
        ax.set_ylim(min(min(values), 1.0) / 2, max(max(values), 1.0) * 5)
        ax.set_xticklabels([pretty_args(w.split("/")[1:]) or group for w in data], fontsize=8)
        ax.set_title(GROUP_TITLES.get(group, group) + ": cost over cudaMallocAsync's", fontsize=9)
        ax.set_ylabel("ratio (log)")
        ax.grid(axis="y", which="major", alpha=0.3)
    save_with_legend(fig, axes[:, 0], path)
    plt.close(fig)
    return True


def plot_threads(path, cases):
    import matplotlib.pyplot as plt  # noqa: PLC0415
    lines = defaultdict(list)
    for c in cases:
        if c.group == "threads" and c.get("pairs"):
            lines[c.allocator].append((c.threads, c.get("pairs")))
    if not lines:
        return False
    colors = colors_for(lines)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for allocator in allocator_order(lines):
        points = sorted(lines[allocator])
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=allocator,
                color=colors[allocator])
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ticks = sorted({t for pts in lines.values() for t, _ in pts})
    ax.set_xticks(ticks)
    ax.set_xticklabels([str(t) for t in ticks])
    ax.set_xlabel("threads (each with its own stream)")
    ax.set_ylabel("allocate+free pairs per second, all threads")
    ax.set_title("threads/: aggregate rate (higher is better)", fontsize=10)
    ax.grid(which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def plot_overheads(path, cases):
    import matplotlib.pyplot as plt  # noqa: PLC0415
    panels = []
    ms = defaultdict(dict)
    for c in cases:
        if c.group == "multistream" and c.get("vs_prealloc") is not None:
            ms["/".join(c.args)][c.allocator] = c.get("vs_prealloc")
    if ms:
        panels.append(("multistream/: loop time / preallocated floor (target: 1.10)", ms, 1.10))
    rnd = defaultdict(dict)
    for c in cases:
        if c.group == "random" and c.get("res_over_req") is not None:
            rnd["/".join(a for a in c.args if not a.startswith("allocs:"))][c.allocator] = c.get("res_over_req")
    if rnd:
        panels.append(("random/: peak reserved / peak requested (memory overhead)", rnd, None))
    if not panels:
        return False
    colors = colors_for({a for _, data, _ in panels for row in data.values() for a in row})
    fig, axes = plt.subplots(len(panels), 1, figsize=(12, 3.8 * len(panels)), squeeze=False)
    for ax, (title, data, target) in zip(axes[:, 0], panels):
        rows = sorted(data, key=lambda w: arg_sort_key(w.split("/")))
        clip = 3.0
        draw_bars(ax, rows, data, colors, clip=clip)
        ax.axhline(1.0, color="black", linewidth=0.8)
        if target:
            ax.axhline(target, color="red", linewidth=0.8, linestyle="--", label="target %.2f" % target)
        top = max(v for r in data.values() for v in r.values())
        ax.set_ylim(0, min(top, clip) * 1.3)
        ax.set_xticklabels(rows, fontsize=8)
        ax.set_title(title + ("; bars cut at %g, labels give the value" % clip if top > clip else ""), fontsize=9)
        ax.grid(axis="y", alpha=0.3)
    save_with_legend(fig, axes[:, 0], path)
    plt.close(fig)
    return True


# ---- replay/: recorded allocation traces (bench/replay/replay.hpp) ----------
# Everything the replay cases need here is in this block: their names
# (replay/<trace>/<allocator>: the trace is the workload), their group's
# title and table counters, and their figures, replay.png and
# replay_memory.png (memory over time, from the CSV files sova_bench and
# sova_bench_torch write with --replay_memory_out, given with --replay-memory).

GROUP_ORDER = GROUP_ORDER + ("replay",)
GROUP_TITLES["replay"] = "replay/: recorded allocation traces, every allocation and free in order (time per replay)"
TABLE_COUNTERS["replay"] = ("ops", "events", "peak_req_MiB", "peak_used_MiB", "peak_res_MiB", "res_over_used",
                            "res_over_req")


def replay_parts(parts):
    """replay/<trace>/<allocator>[/...] reordered as group/allocator/args, the
    trace being the one argument (so the workload); other names unchanged."""
    if len(parts) > 2 and parts[0] == "replay":
        return [parts[0], parts[2], parts[1]] + parts[3:]
    return parts


def read_replay_memory(paths):
    """The --replay_memory_out CSV files: trace -> allocator -> columns (op,
    requested, used, reserved: lists of ints). Later files add to earlier ones;
    a missing or unreadable file is named on stderr and skipped."""
    import csv  # noqa: PLC0415
    series = OrderedDict()
    for path in paths:
        try:
            with open(path, newline="") as f:
                for row in csv.DictReader(f):
                    columns = series.setdefault(row["trace"], OrderedDict()).setdefault(
                        row["allocator"], {"op": [], "requested": [], "used": [], "reserved": []})
                    for key, name in (("op", "op"), ("requested", "requested_bytes"), ("used", "used_bytes"),
                                      ("reserved", "reserved_bytes")):
                        columns[key].append(int(row[name]))
        except (OSError, KeyError, ValueError) as e:
            sys.stderr.write("plot_bench: skipping replay memory %s (%s)\n" % (path, e))
    return series


def plot_replay_figures(path, cases):
    """replay.png: per trace, each allocator's peak reserved over its own peak
    used and over the trace's peak (1 = nothing held beyond what was handed
    out; bars cut at 3, labels give the value), and its operations per
    second (log scale)."""
    import matplotlib.pyplot as plt  # noqa: PLC0415
    panels = []
    for counter, title, log in (
            ("res_over_used", "replay/: peak reserved / the allocator's peak used (lower is better)", False),
            ("res_over_req", "replay/: peak reserved / the trace's peak live bytes (lower is better)", False),
            ("ops", "replay/: allocations + frees per second (higher is better)", True)):
        data = defaultdict(dict)
        for c in cases:
            if c.group == "replay" and c.args and c.get(counter) is not None:
                data[c.args[0]][c.allocator] = c.get(counter)
        if data:
            panels.append((title, data, log))
    if not panels:
        return False
    colors = colors_for({a for _, data, _ in panels for row in data.values() for a in row})
    fig, axes = plt.subplots(len(panels), 1, figsize=(12, 3.8 * len(panels)), squeeze=False)
    for ax, (title, data, log) in zip(axes[:, 0], panels):
        rows = sorted(data)
        clip = None if log else 3.0
        draw_bars(ax, rows, data, colors, clip=clip)
        values = [v for r in data.values() for v in r.values() if v > 0]
        if log:
            plain_log_axis(ax)
            ax.set_ylim(min(values) / 2, max(values) * 5)
        else:
            ax.axhline(1.0, color="black", linewidth=0.8)
            ax.set_ylim(0, min(max(values), clip) * 1.3)
        ax.set_xticklabels(rows, fontsize=8)
        ax.set_title(title, fontsize=9)
        ax.grid(axis="y", alpha=0.3)
    save_with_legend(fig, axes[:, 0], path)
    plt.close(fig)
    return True


def is_sova(allocator):
    return allocator.startswith("sova")


def replay_memory_lines(series):
    """The allocators replay_memory.png draws, as (allocator, role): sova's
    default, sova's best alternative, then the peers. Chosen so that the
    figure stays readable however many cases the run had:
      * sova's default is sova_pool (sova in the seed's naming);
      * a sova variant whose reserved memory is the default's, sample for
        sample, on every trace is the same allocator through another
        interface (sova_capi, the unchecked variants): left out;
      * of the other sova variants, the best alternative is the one with the
        lowest peak reserved over the trace's peak live bytes (geometric mean
        over the traces); the others are in replay.png's bars;
      * every allocator that is not sova's (cudaMallocAsync, PyTorch's, RMM's)
        is a peer, and drawn."""
    names = allocator_order({a for by_alloc in series.values() for a in by_alloc})
    default = next((a for a in ("sova_pool", "sova") if a in names), None)
    if default is None:
        default = next((a for a in names if is_sova(a)), None)

    def same_as_default(allocator):
        return all(by_alloc.get(allocator, {}).get("reserved") == by_alloc.get(default, {}).get("reserved")
                   for by_alloc in series.values() if allocator in by_alloc)

    def overhead(allocator):
        logs = []
        for by_alloc in series.values():
            c = by_alloc.get(allocator)
            if c and max(c["requested"], default=0) > 0 and max(c["reserved"], default=0) > 0:
                logs.append(math.log(max(c["reserved"]) / max(c["requested"])))
        return math.exp(sum(logs) / len(logs)) if logs else float("inf")

    alternatives = [a for a in names if is_sova(a) and a != default and not same_as_default(a)]
    best = min(alternatives, key=overhead) if alternatives else None
    lines = []
    if default:
        lines.append((default, "sova's default"))
    if best:
        lines.append((best, "sova's best alternative"))
    lines += [(a, "peer") for a in names if not is_sova(a)]
    return lines


def plot_replay_memory(path, series):
    """replay_memory.png: one panel per trace, reserved memory against
    operations replayed for sova's default, its best alternative and the
    peers (replay_memory_lines), each in its own color, and the bytes live in
    the trace (black: the floor every allocator must hold); one legend for
    all panels."""
    import matplotlib.pyplot as plt  # noqa: PLC0415
    if not series:
        return False
    lines = replay_memory_lines(series)
    colors = colors_for([a for a, _ in lines])
    # The roles' colors are fixed, whatever the allocators' names: blue for
    # sova's default, green for its alternative (no peer has either).
    role_colors = {"sova's default": KNOWN_COLORS["sova_pool"], "sova's best alternative": KNOWN_COLORS["sova_thorough"]}
    colors.update({a: role_colors[role] for a, role in lines if role in role_colors})
    fig, axes = plt.subplots(len(series), 1, figsize=(12, 3.2 * len(series) + 0.8), squeeze=False)
    for ax, (trace, by_alloc) in zip(axes[:, 0], series.items()):
        top = max(max(c["reserved"] + c["requested"]) for c in by_alloc.values())
        unit, scale = ("GiB", float(1 << 30)) if top >= (1 << 30) else ("MiB", float(1 << 20))
        first = next(iter(by_alloc.values()))
        ax.plot(first["op"], [v / scale for v in first["requested"]], color="black", linewidth=0.9,
                label="live in the trace")
        for allocator, role in lines:
            c = by_alloc.get(allocator)
            if c is None:
                continue
            label = allocator + (" (%s)" % role if role != "peer" else "")
            # sova's default on top: the others' lines often run over it.
            ax.plot(c["op"], [v / scale for v in c["reserved"]], color=colors[allocator], linewidth=1.3,
                    label=label, zorder=3 if role == "sova's default" else 2)
        ax.set_title("replay/%s: reserved memory over the first replay (from an empty pool)" % trace, fontsize=9)
        ax.set_xlabel("operations replayed", fontsize=8)
        ax.set_ylabel(unit)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    save_with_legend(fig, axes[:, 0], path, columns=3)
    plt.close(fig)
    return True


def plot_replay(out_dir, cases, memory_paths):
    """Writes the replay figures that have data into out_dir; returns their names."""
    written = []
    if plot_replay_figures(os.path.join(out_dir, "replay.png"), cases):
        written.append("replay.png")
    if plot_replay_memory(os.path.join(out_dir, "replay_memory.png"), read_replay_memory(memory_paths)):
        written.append("replay_memory.png")
    return written


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("json", nargs="+", help="Google Benchmark JSON file(s)")
    parser.add_argument("--out", default=".", help="directory for summary.md and the PNGs (default: .)")
    parser.add_argument("--no-png", action="store_true", help="write summary.md only")
    parser.add_argument("--replay-memory", action="append", default=[], metavar="CSV",
                        help="memory over time of the replay/ cases (--replay_memory_out), for replay_memory.png; "
                             "repeatable")
    args = parser.parse_args(argv)

    paths = [p for p in args.json if os.path.isfile(p) and os.path.getsize(p) > 0]
    for p in args.json:
        if p not in paths:
            sys.stderr.write("plot_bench: skipping %s (missing or empty)\n" % p)
    if not paths:
        sys.stderr.write("plot_bench: no JSON to read\n")
        return 1
    cases, failed, contexts = load(paths)
    os.makedirs(args.out, exist_ok=True)

    pngs = []
    if not args.no_png:
        try:
            import matplotlib  # noqa: PLC0415
            matplotlib.use("Agg")
        except ImportError:
            sys.stderr.write("plot_bench: matplotlib not found: writing summary.md only\n")
        else:
            for name, plot in (("ratios.png", plot_ratios), ("threads.png", plot_threads),
                               ("overheads.png", plot_overheads)):
                if plot(os.path.join(args.out, name), cases):
                    pngs.append(name)
            pngs += plot_replay(args.out, cases, args.replay_memory)
    write_summary(os.path.join(args.out, "summary.md"), cases, failed, contexts, pngs)
    print("plot_bench: wrote %s" % ", ".join(["summary.md"] + pngs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
