#!/usr/bin/env python3
"""Plots and tabulates Google Benchmark JSON from sova_bench / sova_bench_torch / sova_bench_rmm.

    tools/plot_bench.py [--out DIR] [--prefix NAME] [--no-png] [--replay-memory CSV ...] BENCH.json [MORE.json ...]

Reads one or more JSON files written with --benchmark_out_format=json (with
or without --benchmark_report_aggregates_only; later files add to earlier
ones, e.g. bench.json then torch.json) and writes into DIR (default: .),
each name starting with NAME_ when --prefix NAME is given (micro_summary.md,
micro_ratios.png, ...: two result sets in one folder keep apart):

    summary.md     a markdown table per workload group: median time, spread,
                   ratio to cudaMallocAsync, the cases' counters; the
                   targets; what was skipped and why; the command that made
                   it; the figures, each with what it shows
    ratios.png     bars per workload: each allocator's cost per unit of work
                   over cudaMallocAsync's (log scale; the dashed line at 1,
                   beneath the bars, is cudaMallocAsync; lower is better)
    threads.png    threads/ and threads_mixed/: aggregate pairs/s against
                   threads (log-log), a panel per workload
    overheads.png  multistream/ vs_prealloc (time over the preallocated
                   floor) and random/ res_over_req (peak reserved over peak
                   requested), per allocator
    traces.png     replay/: peak reserved over peak used and over the trace's
                   peak, and operations per second, per trace and allocator
    memory.png     replay/: reserved memory over time per trace, from the
                   --replay-memory CSV files: sova's default, its best
                   alternative and the peers

Every figure names the device and the day of the run at its top (the
JSON's context: gpu, date), has one legend, below its panels, and draws an
allocator in the same color and with the same marker as every other figure
(ALLOCATOR_STYLES). Every series stays visible when two have equal values:
no two lines of a figure share both dash and marker, and each later line is
thinner and above the earlier (line_looks); reference lines lie beneath the
bars;
a panel's title names the series whose values are all equal ("equal values:
sova_capi = sova_pool").

A PNG is only written when its data is there; with --no-png, or without
matplotlib, only the summary. Case names are group/allocator[/args]
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
    "seed": "seed/: 100 x (allocate mib:N MiB, 4 without it, kernel, free), one stream (time per loop)",
    "multistream": "multistream/: 4 streams x 25 rounds of (2 temporaries, 200 us kernel) (time per loop)",
    "random": "random/: RMM's random_allocations shape (time per replay of the trace)",
    "growth": "growth/: one buffer grown by 64 equal steps, copying at each (time per growth)",
    "threads_mixed": "threads_mixed/: T threads, own stream each, 8 live blocks of mixed sizes each "
                     "(time per pair and thread)",
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


def workload_cell(case, by_threads):
    """A table row's workload: its arguments, and its thread count where the
    group runs at several (threads_mixed/'s rows told only the classes)."""
    args = pretty_args(case.args)
    if not by_threads:
        return args or "-"
    return "/".join(a for a in (args, "threads:%d" % case.threads) if a)


def write_summary(path, cases, failed, contexts, pngs, command):
    """The tables; pngs: [(file name, what it shows, its panels)] of the figures written;
    command: the plot_bench command line that made the summary."""
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
    lines.append("- made by `%s`" % command)
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
    # seed/<variant>/threshold_max:T, and /mib:N since the block size is a case argument.
    for workload in sorted({c.workload for c in cases if c.group == "seed"}):
        floor = by_name.get((workload, "preallocated"))
        sova = by_name.get((workload, "sova"))
        if floor and sova and floor.get("real_time") and sova.get("real_time"):
            ratio = sova.get("real_time") / floor.get("real_time")
            targets.append("seed loop (%s): sova %+.1f%% vs preallocated (target: within 5%%)" %
                           (workload[len("seed/"):], (ratio - 1) * 100))
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
                name = workload_cell(c, group in THREAD_GROUPS)
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
        lines.append("Each figure names at its top the device (%s) and the day of the run (%s)." % (
            " / ".join(run_devices(contexts)), run_dates(contexts)))
        lines.append("")
        for png, shows, panels in pngs:
            lines.append("`%s`: %s; panels: %s." % (png, shows, ", ".join(panels)))
            lines.append("")
            lines.append("![%s](%s)" % (shows, png))
            lines.append("")
    with open(path, "w") as f:
        f.write("\n".join(lines))


# ---- figures: one look for every figure ------------------------------------
# An allocator is drawn in the same color and with the same marker in every
# figure and every run, so that a reader who learnt one figure reads the
# next without its legend. Families share hues where colors allow it: sova's
# in blues, greens and cyans, CUDA's in reds and browns, PyTorch's orange and
# purple, RMM's in magenta, olive and gold. Every allocator a program in
# bench/ registers is here (test_plot_bench.py checks it); a host-simulation
# case (name with _sim) is drawn as its GPU twin.
ALLOCATOR_STYLES = {
    "sova_pool": ("#1f77b4", "o"),
    "sova_capi": ("#17becf", "D"),
    "sova_thorough": ("#2ca02c", "P"),
    "sova_pool_unchecked": ("#000080", "h"),
    "sova_pool_logged": ("#e377c2", "p"),
    "sova_capi_unchecked": ("#6baed6", "d"),
    "sova_capi_from_pool": ("#9edae5", "8"),
    "sova_pool_noremap": ("#98df8a", "H"),
    "sova_size_classes": ("#1b9e77", "<"),
    "sova_buddy": ("#bcbd22", ">"),
    "sova_best_fit": ("#637939", "*"),
    "sova_rmm": ("#393b79", "X"),
    "cudaMallocAsync_default": ("#d62728", "s"),
    "cudaMallocAsync_pool": ("#ff9896", "s"),
    "cudaMalloc": ("#8c564b", "v"),
    "preallocated": ("#7f7f7f", "_"),
    "torch_caching": ("#ff7f0e", "^"),
    "torch_expandable": ("#9467bd", "v"),
    "rmm_pool": ("#e7298a", "<"),
    "rmm_arena": ("#66a61e", ">"),
    "rmm_binning": ("#a6761d", "d"),
    "rmm_cuda_async": ("#e6ab02", "D"),
}
# seed/ names its variants in sova_seed's words.
STYLE_ALIASES = {"sova": "sova_pool", "cudaMallocAsync": "cudaMallocAsync_default"}
# Allocators no table above knows (a case added since) take these, in order,
# skipping colors the figure already uses, so that two never share one.
EXTRA_COLORS = ("#c49c94", "#c5b0d5", "#f7b6d2", "#dbdb8d", "#ffbb78", "#c7c7c7", "#aec7e8", "#7570b3",
                "#e41a1c", "#4daf4a", "#984ea3", "#a65628")
EXTRA_MARKERS = ("o", "s", "^", "v", "D", "P", "X", "h")
BASELINE = "cudaMallocAsync_default"


def style_name(allocator):
    """The name whose style an allocator takes: its GPU twin for a _sim case,
    the bench's name for seed/'s."""
    base = allocator.replace("_sim", "")
    return STYLE_ALIASES.get(base, base)


def known_style(allocator):
    return ALLOCATOR_STYLES.get(style_name(allocator))


def styles_for(allocators):
    """allocator -> (color, marker): the fixed ones, and for the others the
    extra colors no known allocator of this figure has."""
    styles = {a: known_style(a) for a in allocators if known_style(a)}
    used = {color for color, _ in styles.values()}
    free = [c for c in EXTRA_COLORS if c not in used] or list(EXTRA_COLORS)
    others = [a for a in allocator_order(allocators) if a not in styles]
    for i, name in enumerate(others):
        styles[name] = (free[i % len(free)], EXTRA_MARKERS[i % len(EXTRA_MARKERS)])
    return styles


def colors_for(allocators):
    return {a: color for a, (color, _) in styles_for(allocators).items()}


def markers_for(allocators):
    return {a: marker for a, (_, marker) in styles_for(allocators).items()}


# Two series with equal values draw one line exactly over the other, and a
# reader must still see both. So each line of a figure takes, in drawing
# order, a dash no earlier line with its marker has, and is thinner, with a
# smaller marker, and above the lines drawn before it: where lines coincide,
# the wider one beneath shows on both sides of the one above and through its
# gaps, and each marker rings the one above it.
DASHES = ("-", "--", "-.", ":")
REFERENCE_ZORDER = 0.9  # reference lines (1 = the baseline, a target) lie beneath the bars (zorder 1)


def line_looks(names, styles):
    """name -> Axes.plot keyword arguments, for lines drawn in the order of
    `names`; styles: name -> (color, marker), as styles_for gives."""
    looks = {}
    taken = set()
    for i, name in enumerate(names):
        color, marker = styles[name]
        order = DASHES[i % len(DASHES):] + DASHES[:i % len(DASHES)]
        dash = next((d for d in order if (d, marker) not in taken), order[0])
        taken.add((dash, marker))
        looks[name] = {"color": color, "marker": marker, "linestyle": dash, "zorder": 2 + i,
                       "linewidth": max(2.4 - 0.3 * i, 1.0), "markersize": max(8.5 - 0.7 * i, 4.5)}
    return looks


def coinciding(series):
    """Groups of names (two or more, in the order given) whose series are
    equal: series is name -> {x: value}."""
    groups = []
    for name, values in series.items():
        group = next((g for g in groups if values and series[g[0]] == values), None)
        if group:
            group.append(name)
        else:
            groups.append([name])
    return [g for g in groups if len(g) > 1]


def coincidence_note(groups):
    """What a panel says of its equal series, so that a reader knows a line
    or bar stands for more than one: '' when none are equal."""
    if not groups:
        return ""
    return "equal values: " + "; ".join(" = ".join(g) for g in groups)


def titled(title, groups):
    """A panel's title with its coincidence note on a line of its own."""
    note = coincidence_note(groups)
    return title + ("\n" + note if note else "")


def output_name(prefix, name):
    """A file's name in the output folder: prefix_name, so that two result
    sets written to one folder (--prefix micro, --prefix replay) never
    overwrite each other's summary or figures."""
    return "%s_%s" % (prefix, name) if prefix else name


def run_devices(contexts):
    devices = []
    for _, ctx in contexts:
        gpu = ctx.get("gpu") or "device not recorded"
        if gpu == "no GPU":
            gpu = "no GPU: host simulation, not GPU figures"
        if gpu not in devices:
            devices.append(gpu)
    return devices


def run_dates(contexts):
    """The days the JSON files were written (Google Benchmark's context date,
    the host's local time), first and last."""
    days = sorted({ctx["date"][:10] for _, ctx in contexts if ctx.get("date")})
    if not days:
        return "date not recorded"
    return days[0] if len(days) == 1 else "%s to %s" % (days[0], days[-1])


def run_caption(contexts):
    """What every figure says at its top: the device, the day of the run and
    the files it was drawn from, so that a figure copied out of its page still
    says what it measured."""
    files = ", ".join(os.path.basename(path) for path, _ in contexts)
    return "%s  ·  run of %s  ·  %s" % (" / ".join(run_devices(contexts)) or "device not recorded",
                                         run_dates(contexts), files)


def figure_legend(fig, axes, columns):
    """One legend for the whole figure, below its panels: every label of
    every panel once, in the order first drawn (a legend per panel repeated
    the same allocators beside each, and one inside a panel covered data)."""
    handles = OrderedDict()
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, handle)
    if not handles:
        return 0
    fig.legend(list(handles.values()), list(handles), loc="lower center", ncol=columns, fontsize=8.5,
               frameon=False, bbox_to_anchor=(0.5, 0.0))
    return -(-len(handles) // columns)


def finish_figure(fig, axes, path, caption, columns=4):
    """The caption on top, one legend below, the panels between; writes the PNG."""
    fig.suptitle(caption, fontsize=10, fontweight="bold")
    legend_rows = figure_legend(fig, axes, columns)
    height = fig.get_size_inches()[1]
    bottom = min(0.02 + 0.2 * legend_rows / height, 0.4)
    fig.tight_layout(rect=(0, bottom, 1, 1))  # tight_layout leaves the suptitle its room
    fig.savefig(path, dpi=110)


def bar_coincidences(rows, data):
    """Groups of allocators whose bars are equal in every row: such bars stand
    side by side at one height, and the panel's title says they are equal."""
    present = allocator_order({a for r in rows for a in data[r]})
    return coinciding(OrderedDict((a, {r: data[r][a] for r in rows if a in data[r]}) for a in present))


def draw_bars(ax, rows, data, styles, clip=None, fmt="%.3g"):
    """Grouped bars: one group per row (workload), one bar per allocator, each
    labelled with its value; bars above `clip` are cut there (the label
    gives the value, with a '>' so the cut is seen)."""
    present = allocator_order({a for r in rows for a in data[r]})
    width = 0.8 / max(len(present), 1)
    for i, allocator in enumerate(present):
        xs = [x + (i - (len(present) - 1) / 2) * width for x, r in enumerate(rows) if allocator in data[r]]
        ys = [data[r][allocator] for r in rows if allocator in data[r]]
        shown = [min(y, clip) if clip else y for y in ys]
        bars = ax.bar(xs, shown, width, label=allocator, color=styles[allocator][0], edgecolor="white",
                      linewidth=0.4)
        for bar, y in zip(bars, ys):
            text = (">" if clip and y > clip else "") + fmt_value(fmt, y)
            ax.annotate(text, (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center",
                        va="bottom", fontsize=7, rotation=90, xytext=(0, 2), textcoords="offset points")
    ax.set_xticks(range(len(rows)))
    ax.set_xlim(-0.6, len(rows) - 0.4)


def fmt_value(fmt, value):
    return fmt(value) if callable(fmt) else fmt % value


def plain_log_axis(ax, fmt="%g"):
    """Log scale with ticks written as numbers (0.01, 1M), not powers of ten."""
    from matplotlib.ticker import FuncFormatter, NullFormatter  # noqa: PLC0415
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: fmt_value(fmt, v)))
    ax.yaxis.set_minor_formatter(NullFormatter())


def draw_baseline(ax, label):
    """The ratio-1 line, in the baseline allocator's color, dashed, with a
    legend entry saying what 1 means; beneath the bars, so that it never
    hides the top of a bar at 1."""
    ax.axhline(1.0, color=ALLOCATOR_STYLES[BASELINE][0], linewidth=1.2, linestyle="--", label=label,
               zorder=REFERENCE_ZORDER)


def ratio_panels(cases):
    """group -> [(workload, {allocator: cost over the baseline's})], the
    baseline itself left out (it is the line at 1). threads_mixed/ is drawn in
    the threads figure, against its thread counts."""
    groups = OrderedDict()
    for workload, by_alloc in workloads(cases).items():
        group = workload.split("/")[0]
        ref_name, ref = reference_cost(by_alloc)
        if not ref or group in THREAD_GROUPS:
            continue
        ratios = {a: c.cost() / ref for a, c in by_alloc.items() if a != ref_name and c.cost()}
        if ratios:
            groups.setdefault(group, []).append((workload, ratios))
    return groups


def plot_ratios(path, cases, caption):
    import matplotlib.pyplot as plt  # noqa: PLC0415
    groups = ratio_panels(cases)
    if not groups:
        return []
    styles = styles_for({a for rows in groups.values() for _, r in rows for a in r})
    fig, axes = plt.subplots(len(groups), 1, figsize=(13, 3.6 * len(groups) + 1.2), squeeze=False)
    for ax, (group, rows) in zip(axes[:, 0], groups.items()):
        data = OrderedDict(rows)
        draw_bars(ax, list(data), data, styles)
        draw_baseline(ax, "%s = 1 (the baseline)" % BASELINE)
        plain_log_axis(ax)
        values = [v for r in data.values() for v in r.values() if v > 0]
        ax.set_ylim(min(min(values), 1.0) / 2, max(max(values), 1.0) * 5)
        ax.set_xticklabels([pretty_args(w.split("/")[1:]) or group for w in data], fontsize=8.5)
        ax.set_title(titled(GROUP_TITLES.get(group, group + "/") + "\ncost per unit of work over cudaMallocAsync's: "
                            "lower is better", bar_coincidences(list(data), data)), fontsize=9.5)
        ax.set_ylabel("x cudaMallocAsync (log)")
        ax.grid(axis="y", which="major", alpha=0.3)
    finish_figure(fig, axes[:, 0], path, caption)
    plt.close(fig)
    return [group + "/" for group in groups]


# Groups whose cases run at several thread counts: drawn as rate against threads.
THREAD_GROUPS = ("threads", "threads_mixed")


def thread_panels(cases):
    """(workload, {allocator: [(threads, pairs/s)]}) per workload of THREAD_GROUPS."""
    panels = OrderedDict()
    for c in cases:
        if c.group in THREAD_GROUPS and c.get("pairs"):
            panels.setdefault(c.workload, defaultdict(list))[c.allocator].append((c.threads, c.get("pairs")))
    order = sorted(panels, key=lambda w: (w.split("/")[0] != "threads", arg_sort_key(w.split("/")[1:])))
    return [(w, panels[w]) for w in order]


THREAD_TITLES = {
    "threads": "threads/: one block at a time, 256 B to 64 KiB",
    "threads_mixed": "threads_mixed/: 8 live blocks a thread,",
}


def thread_panel_title(workload):
    group, _, args = workload.partition("/")
    classes = " %s size classes" % args.split(":", 1)[1] if args.startswith("classes:") else args
    return THREAD_TITLES.get(group, group + "/") + classes + "\naggregate rate: higher is better"


def dodge(points, index, count, spread=0.05):
    """The x of an allocator's points moved a little to its own side (in
    log2 units), so that lines through the same values stay visible."""
    shift = 2 ** ((index - (count - 1) / 2) * spread)
    return [x * shift for x, _ in points]


def plot_threads(path, cases, caption):
    import matplotlib.pyplot as plt  # noqa: PLC0415
    panels = thread_panels(cases)
    if not panels:
        return []
    names = allocator_order({a for _, lines in panels for a in lines})
    looks = line_looks(names, styles_for(names))
    columns = len(panels)
    # One y scale for all panels, so that their rates compare at a glance.
    fig, axes = plt.subplots(1, columns, figsize=(5.2 * columns + 1, 5.4), squeeze=False, sharey=True)
    for ax, (workload, lines) in zip(axes[0], panels):
        drawn = [a for a in names if a in lines]
        for i, allocator in enumerate(drawn):
            points = sorted(lines[allocator])
            ax.plot(dodge(points, i, len(drawn)), [p[1] for p in points], label=allocator,
                    markeredgecolor="white", markeredgewidth=0.6, **looks[allocator])
        ax.set_xscale("log", base=2)
        plain_log_axis(ax, fmt_number)
        ticks = sorted({t for pts in lines.values() for t, _ in pts})
        ax.set_xticks(ticks)
        ax.set_xticklabels([str(t) for t in ticks])
        ax.minorticks_off()
        ax.set_xlabel("threads (each with its own stream)")
        ax.set_title(titled(thread_panel_title(workload),
                            coinciding(OrderedDict((a, dict(lines[a])) for a in drawn))), fontsize=9.5)
        ax.grid(which="major", alpha=0.3)
    axes[0][0].set_ylabel("allocate + free pairs per second, all threads (log)")
    finish_figure(fig, axes[0], path, caption, columns=3)
    plt.close(fig)
    return [workload if "/" in workload else workload + "/" for workload, _ in panels]


def overhead_panels(cases):
    """(group, title, {workload: {allocator: value}}, target) for multistream/'s time
    over the preallocated floor and random/'s peak reserved over requested."""
    panels = []
    ms = defaultdict(dict)
    rnd = defaultdict(dict)
    for c in cases:
        if c.group == "multistream" and c.get("vs_prealloc") is not None:
            ms["/".join(c.args)][c.allocator] = c.get("vs_prealloc")
        if c.group == "random" and c.get("res_over_req") is not None:
            rnd["/".join(a for a in c.args if not a.startswith("allocs:"))][c.allocator] = c.get("res_over_req")
    if ms:
        panels.append(("multistream/", "multistream/: loop time / the preallocated floor's (lower is better; target 1.10)", ms, 1.10))
    if rnd:
        panels.append(("random/", "random/: peak reserved / peak requested, memory overhead (lower is better)", rnd, None))
    return panels


def plot_overheads(path, cases, caption):
    import matplotlib.pyplot as plt  # noqa: PLC0415
    panels = overhead_panels(cases)
    if not panels:
        return []
    styles = styles_for({a for _, _, data, _ in panels for row in data.values() for a in row})
    fig, axes = plt.subplots(len(panels), 1, figsize=(12, 3.8 * len(panels) + 1.2), squeeze=False)
    for ax, (_, title, data, target) in zip(axes[:, 0], panels):
        rows = sorted(data, key=lambda w: arg_sort_key(w.split("/")))
        clip = 3.0
        draw_bars(ax, rows, data, styles, clip=clip)
        ax.axhline(1.0, color="black", linewidth=0.8, label="1 = no overhead", zorder=REFERENCE_ZORDER)
        if target:
            ax.axhline(target, color="black", linewidth=1.0, linestyle=":", label="target %.2f" % target,
                       zorder=REFERENCE_ZORDER)
        top = max(v for r in data.values() for v in r.values())
        ax.set_ylim(0, min(top, clip) * 1.3)
        ax.set_xticklabels(rows, fontsize=8.5)
        ax.set_title(titled(title + ("; bars cut at %g, labels give the value" % clip if top > clip else ""),
                            bar_coincidences(rows, data)), fontsize=9.5)
        ax.set_ylabel("ratio")
        ax.grid(axis="y", alpha=0.3)
    finish_figure(fig, axes[:, 0], path, caption)
    plt.close(fig)
    return [group for group, _, _, _ in panels]


# ---- replay/: recorded allocation traces (bench/replay/replay.hpp) ----------
# Everything the replay cases need here is in this block: their names
# (replay/<trace>/<allocator>: the trace is the workload), their group's
# title and table counters, and their figures, traces.png and memory.png
# (memory over time, from the CSV files sova_bench and sova_bench_torch write
# with --replay_memory_out, given with --replay-memory).

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


def plot_replay_traces(path, cases, caption):
    """traces.png: per trace, each allocator's peak reserved over its own peak
    used and over the trace's peak (1 = nothing held beyond what was handed
    out; bars cut at 3, labels give the value), and its operations per
    second (log scale)."""
    import matplotlib.pyplot as plt  # noqa: PLC0415
    panels = []
    for counter, title, ylabel, log in (
            ("res_over_used", "peak reserved / the allocator's own peak used: lower is better",
             "reserved / used", False),
            ("res_over_req", "peak reserved / the trace's peak live bytes: lower is better",
             "reserved / live", False),
            ("ops", "allocations + frees per second: higher is better", "operations/s (log)", True)):
        data = defaultdict(dict)
        for c in cases:
            if c.group == "replay" and c.args and c.get(counter) is not None:
                data[c.args[0]][c.allocator] = c.get(counter)
        if data:
            panels.append((counter, "replay/: " + title, ylabel, data, log))
    if not panels:
        return []
    styles = styles_for({a for _, _, _, data, _ in panels for row in data.values() for a in row})
    fig, axes = plt.subplots(len(panels), 1, figsize=(12, 3.8 * len(panels) + 1.2), squeeze=False)
    for ax, (_, title, ylabel, data, log) in zip(axes[:, 0], panels):
        rows = sorted(data)
        values = [v for r in data.values() for v in r.values() if v > 0]
        if log:
            draw_bars(ax, rows, data, styles, fmt=fmt_number)
            plain_log_axis(ax, fmt_number)
            ax.set_ylim(min(values) / 2, max(values) * 5)
        else:
            clip = 3.0
            draw_bars(ax, rows, data, styles, clip=clip)
            ax.axhline(1.0, color="black", linewidth=0.8, label="1 = nothing held beyond what was handed out",
                       zorder=REFERENCE_ZORDER)
            ax.set_ylim(0, min(max(values), clip) * 1.3)
        ax.set_xticklabels(rows, fontsize=8.5)
        ax.set_title(titled(title, bar_coincidences(rows, data)), fontsize=9.5)
        ax.set_ylabel(ylabel)
        ax.grid(axis="y", alpha=0.3)
    finish_figure(fig, axes[:, 0], path, caption)
    plt.close(fig)
    return [counter for counter, _, _, _, _ in panels]


def is_sova(allocator):
    return allocator.startswith("sova")


def replay_memory_lines(series):
    """The allocators memory.png draws, as (allocator, role): sova's
    default, sova's best alternative, then the peers. Chosen so that the
    figure stays readable however many cases the run had:
      * sova's default is sova_pool (sova in the seed's naming);
      * a sova variant whose reserved memory is the default's, sample for
        sample, on every trace is the same allocator through another
        interface (sova_capi, the unchecked variants): left out;
      * of the other sova variants, the best alternative is the one with the
        lowest peak reserved over the trace's peak live bytes (geometric mean
        over the traces); the others are in traces.png's bars;
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


def memory_coincidences(by_alloc, lines):
    """Groups of the drawn allocators whose reserved memory is equal at every sample of a trace."""
    return coinciding(OrderedDict((a, dict(zip(by_alloc[a]["op"], by_alloc[a]["reserved"])))
                                  for a, _ in lines if a in by_alloc))


def plot_replay_memory(path, series, caption):
    """memory.png: one panel per trace, reserved memory against operations
    replayed for sova's default, its best alternative and the peers
    (replay_memory_lines), each in its own color, dash and marker (line_looks),
    its markers every so often at its own places (lines that run together
    stay told apart), equal lines named in the title, and the bytes live in
    the trace (black: the floor every allocator must hold); one legend for
    all panels."""
    import matplotlib.pyplot as plt  # noqa: PLC0415
    if not series:
        return []
    lines = replay_memory_lines(series)
    looks = line_looks([a for a, _ in lines], styles_for([a for a, _ in lines]))
    fig, axes = plt.subplots(len(series), 1, figsize=(12, 3.2 * len(series) + 1.2), squeeze=False)
    for ax, (trace, by_alloc) in zip(axes[:, 0], series.items()):
        top = max(max(c["reserved"] + c["requested"]) for c in by_alloc.values())
        unit, scale = ("GiB", float(1 << 30)) if top >= (1 << 30) else ("MiB", float(1 << 20))
        first = next(iter(by_alloc.values()))
        ax.plot(first["op"], [v / scale for v in first["requested"]], color="black", linewidth=0.9,
                label="live in the trace")
        for i, (allocator, role) in enumerate(lines):
            c = by_alloc.get(allocator)
            if c is None:
                continue
            label = allocator + (" (%s)" % role if role != "peer" else "")
            # Markers at staggered places per line: where two lines coincide,
            # each line's markers still show.
            every = max(len(c["op"]) // 12, 1)
            ax.plot(c["op"], [v / scale for v in c["reserved"]], label=label,
                    markevery=(i * every // max(len(lines), 1), every), **looks[allocator])
        ax.set_title(titled("replay/%s: reserved memory over the first replay (from an empty pool): lower is better"
                            % trace, memory_coincidences(by_alloc, lines)), fontsize=9.5)
        ax.set_xlabel("operations replayed", fontsize=8.5)
        ax.set_ylabel(unit)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    finish_figure(fig, axes[:, 0], path, caption, columns=3)
    plt.close(fig)
    return list(series)


# The figures, in the order the summary embeds them: (name, what it shows,
# function). Each function takes (path, cases, caption) and returns the
# panels it drew (none: no data, no file); the memory figure takes the CSV
# series instead of the cases.
FIGURES = (
    ("ratios.png", "each allocator's cost per unit of work over cudaMallocAsync's, lower is better", plot_ratios),
    ("threads.png", "allocate + free pairs per second of all threads against threads, higher is better",
     plot_threads),
    ("overheads.png", "time over the preallocated floor (multistream/) or peak reserved over peak requested "
     "(random/), lower is better", plot_overheads),
    ("traces.png", "per recorded trace, each allocator's peak reserved over its peak used and over the "
     "trace's peak (lower is better) and its allocations and frees per second (higher is better)",
     plot_replay_traces),
    ("memory.png", "per recorded trace: reserved memory over the first replay", None),
)


def plot_all(out_dir, prefix, cases, memory_paths, caption):
    """Writes the figures that have data into out_dir; returns [(file name,
    what it shows, its panels)] of those written."""
    written = []
    for name, shows, plot in FIGURES:
        path = os.path.join(out_dir, output_name(prefix, name))
        if plot is None:
            panels = plot_replay_memory(path, read_replay_memory(memory_paths), caption)
        else:
            panels = plot(path, cases, caption)
        if panels:
            written.append((output_name(prefix, name), shows, panels))
    return written


def shown_command(argv):
    """The command line as run, with the script named from the repository root."""
    import shlex  # noqa: PLC0415
    return " ".join(shlex.quote(a) for a in ["tools/plot_bench.py"] + list(argv))


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("json", nargs="+", help="Google Benchmark JSON file(s)")
    parser.add_argument("--out", default=".", help="directory for the summary and the PNGs (default: .)")
    parser.add_argument("--prefix", default="",
                        help="start every output's name with PREFIX_ (micro: micro_summary.md, micro_ratios.png, "
                             "...), so that two result sets share a folder")
    parser.add_argument("--no-png", action="store_true", help="write the summary only")
    parser.add_argument("--replay-memory", action="append", default=[], metavar="CSV",
                        help="memory over time of the replay/ cases (--replay_memory_out), for memory.png; "
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
            sys.stderr.write("plot_bench: matplotlib not found: writing the summary only\n")
        else:
            pngs = plot_all(args.out, args.prefix, cases, args.replay_memory, run_caption(contexts))
    summary = output_name(args.prefix, "summary.md")
    write_summary(os.path.join(args.out, summary), cases, failed, contexts, pngs, shown_command(argv))
    print("plot_bench: wrote %s" % ", ".join([summary] + [name for name, _, _ in pngs]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
