#!/usr/bin/env python3
"""tools/plot_bench.py (meson test plot_bench): what the memory figure draws,
each allocator's color and marker, the output names --prefix gives, the
caption naming the device and day of the run, and the summary's command line,
figure embeds and thread counts; with matplotlib, that every figure shows
every series when two have equal values (skipped without it).

    test_plot_bench.py TOOLS_DIR
"""
import glob
import importlib.util
import json
import os
import re
import sys
import tempfile
import unittest

TOOLS = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..", "tools")
spec = importlib.util.spec_from_file_location("plot_bench", os.path.join(TOOLS, "plot_bench.py"))
plot_bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(plot_bench)


def columns(requested, reserved):
    return {"op": list(range(len(requested))), "requested": requested, "used": requested, "reserved": reserved}


LIVE = [0, 100, 50, 100]


class ReplayMemoryLines(unittest.TestCase):
    def series(self):
        by_alloc = {
            "sova_pool": columns(LIVE, [0, 110, 110, 110]),
            "sova_capi": columns(LIVE, [0, 110, 110, 110]),        # the default's memory: left out
            "sova_size_classes": columns(LIVE, [0, 150, 150, 150]),
            "sova_thorough": columns(LIVE, [0, 101, 101, 102]),    # the lowest peak: the alternative
            "cudaMallocAsync_default": columns(LIVE, [0, 120, 120, 130]),
            "torch_caching": columns(LIVE, [0, 200, 200, 200]),
        }
        return {"trace_a": by_alloc, "trace_b": dict(by_alloc)}

    def test_default_best_alternative_and_peers(self):
        lines = plot_bench.replay_memory_lines(self.series())
        self.assertEqual(lines[0], ("sova_pool", "sova's default"))
        self.assertEqual(lines[1], ("sova_thorough", "sova's best alternative"))
        self.assertEqual(sorted(a for a, role in lines if role == "peer"), ["cudaMallocAsync_default", "torch_caching"])
        self.assertEqual(len(lines), 4)  # sova_capi and sova_size_classes are not drawn

    def test_only_the_default_and_peers(self):
        series = {"t": {"sova_pool": columns(LIVE, LIVE), "torch_caching": columns(LIVE, LIVE)}}
        self.assertEqual(plot_bench.replay_memory_lines(series),
                         [("sova_pool", "sova's default"), ("torch_caching", "peer")])


def registered_allocators(bench_dir):
    """The allocator names the benchmark programs register (kName, and the
    seed's variants), test doubles under bench/tests/ left out."""
    names = set()
    for path in glob.glob(os.path.join(bench_dir, "**", "*.*"), recursive=True):
        if os.sep + "tests" + os.sep in path or not path.endswith((".hpp", ".cpp", ".cu")):
            continue
        with open(path, errors="replace") as f:
            text = f.read()
        names.update(re.findall(r'kName\s*=\s*"([^"]+)"', text))
        if os.path.basename(path) == "seed.cpp":
            names.update(re.findall(r'return "([A-Za-z_]+)";', text))
    return names


class Styles(unittest.TestCase):
    def test_every_registered_allocator_has_a_fixed_style(self):
        bench = os.path.join(TOOLS, "..", "bench")
        names = registered_allocators(bench)
        if not names:
            self.skipTest("no bench/ sources beside %s" % TOOLS)
        self.assertIn("sova_pool", names)
        missing = sorted(n for n in names if plot_bench.known_style(n) is None)
        self.assertEqual(missing, [], "add them to ALLOCATOR_STYLES")

    def test_fixed_colors_are_distinct(self):
        colors = [color for color, _ in plot_bench.ALLOCATOR_STYLES.values()]
        self.assertEqual(len(set(colors)), len(colors))

    def test_a_sim_case_and_a_seed_name_look_like_their_twin(self):
        self.assertEqual(plot_bench.known_style("sova_pool_sim_logged"), plot_bench.known_style("sova_pool_logged"))
        self.assertEqual(plot_bench.known_style("preallocated_sim"), plot_bench.known_style("preallocated"))
        self.assertEqual(plot_bench.known_style("sova"), plot_bench.known_style("sova_pool"))
        self.assertEqual(plot_bench.known_style("cudaMallocAsync"), plot_bench.known_style("cudaMallocAsync_default"))

    def test_the_same_in_every_figure(self):
        micro = plot_bench.styles_for(["sova_pool", "sova_pool_unchecked", "cudaMallocAsync_default"])
        replay = plot_bench.styles_for(["sova_thorough", "sova_pool", "torch_expandable", "cudaMallocAsync_default"])
        for name in ("sova_pool", "cudaMallocAsync_default"):
            self.assertEqual(micro[name], replay[name])
        self.assertEqual(plot_bench.markers_for(["torch_caching"])["torch_caching"],
                         plot_bench.ALLOCATOR_STYLES["torch_caching"][1])

    def test_an_unknown_allocator_takes_a_color_no_other_has(self):
        colors = plot_bench.colors_for(["sova_pool", "new_one", "newer_one"])
        self.assertEqual(len(set(colors.values())), 3)


class OutputNames(unittest.TestCase):
    def names(self, prefix):
        return {plot_bench.output_name(prefix, n) for n, _, _ in plot_bench.FIGURES} | {
            plot_bench.output_name(prefix, "summary.md")}

    def test_prefix(self):
        self.assertEqual(plot_bench.output_name("micro", "ratios.png"), "micro_ratios.png")
        self.assertEqual(plot_bench.output_name("", "ratios.png"), "ratios.png")
        self.assertIn("replay_memory.png", self.names("replay"))

    def test_two_result_sets_never_share_a_file(self):
        self.assertEqual(self.names("micro") & self.names("replay"), set())
        self.assertEqual(len(self.names("micro")), len(plot_bench.FIGURES) + 1)


def context(gpu, date, path="run.json"):
    return (path, {"gpu": gpu, "date": date})


class Caption(unittest.TestCase):
    def test_device_day_and_files(self):
        caption = plot_bench.run_caption([context("NVIDIA H100 80GB HBM3", "2026-11-24T20:57:38+00:00", "d/micro.json"),
                                          context("NVIDIA H100 80GB HBM3", "2026-11-24T20:59:59+00:00", "torch.json")])
        self.assertIn("NVIDIA H100 80GB HBM3", caption)
        self.assertEqual(caption.count("H100"), 1)
        self.assertIn("run of 2026-11-24", caption)
        self.assertIn("micro.json, torch.json", caption)

    def test_runs_over_two_days_and_the_simulation(self):
        contexts = [context("no GPU", "2026-11-24T23:59:00+00:00"), context("no GPU", "2026-11-25T00:01:00+00:00")]
        self.assertEqual(plot_bench.run_dates(contexts), "2026-11-24 to 2026-11-25")
        self.assertIn("host simulation", plot_bench.run_caption(contexts))

    def test_nothing_recorded(self):
        self.assertIn("date not recorded", plot_bench.run_caption([("x.json", {})]))
        self.assertIn("device not recorded", plot_bench.run_caption([("x.json", {})]))


def mixed_case(allocator, threads, ns):
    name = "threads_mixed/%s/classes:16/real_time/threads:%d" % (allocator, threads)
    return {"name": name, "run_name": name, "run_type": "iteration", "threads": threads, "iterations": 10,
            "real_time": ns, "cpu_time": ns, "time_unit": "ns", "pairs": 1e9 / ns * threads, "label": "sim"}


class Summary(unittest.TestCase):
    def test_command_thread_counts_and_no_figures_without_png(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "micro.json")
            with open(path, "w") as f:
                json.dump({"context": {"gpu": "no GPU", "date": "2026-11-24T20:57:38+00:00"},
                           "benchmarks": [mixed_case("sova_pool", 1, 50), mixed_case("cudaMallocAsync_default", 1, 900),
                                          mixed_case("sova_pool", 2, 40)]}, f)
            self.assertEqual(plot_bench.main(["--no-png", "--out", tmp, "--prefix", "micro", path]), 0)
            self.assertEqual(sorted(os.listdir(tmp)), ["micro.json", "micro_summary.md"])
            with open(os.path.join(tmp, "micro_summary.md")) as f:
                text = f.read()
        self.assertIn("- made by `tools/plot_bench.py --no-png --out %s --prefix micro %s`" % (tmp, path), text)
        self.assertIn("| classes:16/threads:1 | sova_pool |", text)
        self.assertIn("| classes:16/threads:2 | sova_pool |", text)
        self.assertNotIn("## Figures", text)

    def test_figures_are_embedded_by_the_names_written(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "summary.md")
            plot_bench.write_summary(path, [], [], [context("NVIDIA H100 80GB HBM3", "2026-11-24T20:57:38+00:00")],
                                     [("micro_ratios.png", "what it shows", ["pair/"])], "tools/plot_bench.py x.json")
            with open(path) as f:
                text = f.read()
        self.assertIn("![what it shows](micro_ratios.png)", text)
        self.assertIn("device (NVIDIA H100 80GB HBM3) and the day of the run (2026-11-24)", text)


class Colors(unittest.TestCase):
    def test_no_two_allocators_share_a_color(self):
        names = ["sova_pool", "sova_capi", "sova_thorough", "sova_size_classes", "sova_buddy", "sova_best_fit",
                 "sova_pool_unchecked", "sova_pool_noremap", "sova_granule_chunks", "sova_capi_unchecked",
                 "cudaMallocAsync_default", "torch_caching", "torch_expandable", "rmm_pool", "preallocated"]
        colors = plot_bench.colors_for(names)
        self.assertEqual(len(set(colors.values())), len(names), colors)

    def test_known_allocators_keep_their_color(self):
        self.assertEqual(plot_bench.colors_for(["sova_pool", "x"])["sova_pool"],
                         plot_bench.colors_for(["sova_pool", "torch_caching"])["sova_pool"])


class LineLooks(unittest.TestCase):
    def test_every_allocator_of_a_figure_has_its_own_dash_and_marker(self):
        names = plot_bench.allocator_order(plot_bench.ALLOCATOR_STYLES)
        looks = plot_bench.line_looks(names, plot_bench.styles_for(names))
        pairs = [(looks[n]["linestyle"], looks[n]["marker"]) for n in names]
        self.assertEqual(len(set(pairs)), len(names), pairs)

    def test_each_later_line_is_thinner_and_above(self):
        names = ["cudaMallocAsync_default", "cudaMallocAsync_pool", "sova_pool"]
        looks = plot_bench.line_looks(names, plot_bench.styles_for(names))
        for below, above in zip(names, names[1:]):
            self.assertLess(looks[below]["zorder"], looks[above]["zorder"])
            self.assertGreater(looks[below]["linewidth"], looks[above]["linewidth"])
            self.assertGreater(looks[below]["markersize"], looks[above]["markersize"])

    def test_equal_series_are_named_together(self):
        series = {"a": {1: 2.0, 2: 3.0}, "b": {1: 2.0, 2: 3.0}, "c": {1: 2.0, 2: 4.0}, "d": {1: 2.0}}
        self.assertEqual(plot_bench.coinciding(series), [["a", "b"]])
        self.assertEqual(plot_bench.coincidence_note([["a", "b"]]), "equal values: a = b")
        self.assertEqual(plot_bench.coincidence_note([]), "")


def drawn_axes(plot, *args):
    """The Axes a plot_bench figure function drew, caught where it closes the
    figure; skips the test without matplotlib."""
    try:
        import matplotlib  # noqa: PLC0415
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError:
        raise unittest.SkipTest("matplotlib is not installed") from None
    figures = []
    close = plt.close
    plt.close = figures.append
    try:
        with tempfile.TemporaryDirectory() as tmp:
            plot(os.path.join(tmp, "figure.png"), *args)
    finally:
        plt.close = close
    for fig in figures:
        close(fig)
    return [ax for fig in figures for ax in fig.axes]


def cases_of(entries):
    """plot_bench's cases from Google Benchmark entries, as it reads them from a file."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "bench.json")
        with open(path, "w") as f:
            json.dump({"context": {"gpu": "no GPU"}, "benchmarks": entries}, f)
        cases, _, _ = plot_bench.load([path])
    return cases


def entry(name, ns=100.0, **counters):
    return dict({"name": name, "run_name": name, "run_type": "iteration", "iterations": 10, "real_time": ns,
                 "cpu_time": ns, "time_unit": "ns"}, **counters)


def thread_entries(allocator, rates):
    return [entry("threads/%s/real_time/threads:%d" % (allocator, t), pairs=rate) for t, rate in rates]


# Two allocators with the same marker ('s') and equal values: the case where
# one line hid the other.
EQUAL_PAIR = ("cudaMallocAsync_default", "cudaMallocAsync_pool")


class EverySeriesShows(unittest.TestCase):
    def assert_lines_show(self, ax, names):
        # A line's label is its allocator's name, or the name and its role: "sova_pool (sova's default)".
        lines = {line.get_label().split(" (")[0]: line for line in ax.get_lines()}
        for name in names:
            self.assertIn(name, lines, "%s is not drawn" % name)
            self.assertGreater(len(lines[name].get_xdata()), 0, "%s has no points" % name)
        looks = [(lines[n].get_linestyle(), lines[n].get_marker()) for n in names]
        self.assertEqual(len(set(looks)), len(names), "two series share a line style and marker: %s" % looks)
        below, above = sorted((lines[n] for n in EQUAL_PAIR), key=lambda line: line.get_zorder())
        self.assertLess(above.get_linewidth(), below.get_linewidth(), "the upper of two equal lines covers the other")

    def test_threads(self):
        same = [(1, 1e6), (2, 2e6), (4, 3e6)]
        cases = cases_of(thread_entries(EQUAL_PAIR[0], same) + thread_entries(EQUAL_PAIR[1], same) +
                         thread_entries("sova_pool", [(1, 5e6), (2, 9e6), (4, 1.5e7)]))
        (ax,) = drawn_axes(plot_bench.plot_threads, cases, "caption")
        self.assert_lines_show(ax, EQUAL_PAIR + ("sova_pool",))
        self.assertIn(" = ".join(EQUAL_PAIR), ax.get_title())

    def test_replay_memory(self):
        equal = [0, 120, 120, 130]
        series = {"trace_a": {"sova_pool": columns(LIVE, [0, 110, 110, 110]),
                              EQUAL_PAIR[0]: columns(LIVE, equal), EQUAL_PAIR[1]: columns(LIVE, list(equal))}}
        (ax,) = drawn_axes(plot_bench.plot_replay_memory, series, "caption")
        self.assert_lines_show(ax, EQUAL_PAIR + ("sova_pool",))
        self.assertIn(" = ".join(EQUAL_PAIR), ax.get_title())

    def assert_bars_show(self, ax, names):
        bars = {c.get_label(): c for c in ax.containers}
        for name in names:
            self.assertIn(name, bars, "%s has no bars" % name)
            self.assertTrue(all(bar.get_height() > 0 for bar in bars[name]))
        top_line = max(line.get_zorder() for line in ax.get_lines())
        lowest_bar = min(bar.get_zorder() for c in bars.values() for bar in c)
        self.assertLess(top_line, lowest_bar, "a reference line is drawn over the bars' tops")

    def test_overheads(self):
        cases = cases_of([entry("random/%s/max_mib:1/allocs:10" % a, ops=1e6, res_over_req=r)
                          for a, r in (("sova_pool", 1.04), ("sova_capi", 1.04), ("cudaMallocAsync_default", 1.03))])
        (ax,) = drawn_axes(plot_bench.plot_overheads, cases, "caption")
        self.assert_bars_show(ax, ("sova_pool", "sova_capi", "cudaMallocAsync_default"))
        self.assertIn("sova_capi = sova_pool", ax.get_title())

    def test_ratios(self):
        cases = cases_of([entry("pair/%s/4096" % a, ns) for a, ns in
                          (("cudaMallocAsync_default", 100.0), ("torch_caching", 100.0), ("sova_pool", 20.0))])
        (ax,) = drawn_axes(plot_bench.plot_ratios, cases, "caption")
        self.assert_bars_show(ax, ("torch_caching", "sova_pool"))


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0]])
