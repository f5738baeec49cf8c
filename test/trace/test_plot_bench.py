#!/usr/bin/env python3
"""tools/plot_bench.py's choice of what replay_memory.png draws, and its
colors (meson test plot_bench; no matplotlib needed).

    test_plot_bench.py TOOLS_DIR
"""
import importlib.util
import os
import sys
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


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0]])
