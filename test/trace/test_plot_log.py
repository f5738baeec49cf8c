#!/usr/bin/env python3
"""tools/plot_log.py on hand-written logs (meson tests plot_log, plot_log_png).

    test_plot_log.py TOOLS_DIR          the series and the errors, and with
                                        matplotlib both lines shown where used
                                        equals reserved (unittest)
    test_plot_log.py TOOLS_DIR --png    a PNG is written; exit 77 (meson: SKIP,
                                        reported as skipped) without matplotlib
"""
import importlib.util
import io
import os
import sys
import tempfile
import unittest

TOOLS = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..", "tools")
spec = importlib.util.spec_from_file_location("plot_log", os.path.join(TOOLS, "plot_log.py"))
plot_log = importlib.util.module_from_spec(spec)
spec.loader.exec_module(plot_log)

LOG = """Thread,Time,Action,Pointer,Size,Stream,Reserved
11,10:00:00.000000,allocate,0x7f0000000000,1000,0,0
11,10:00:00.000500,allocate,0x7f0000001000,3000,0x55aa,2097152
12,10:00:00.001000,free,0x7f0000000000,1000,0x55aa,2097152
12,10:00:00.002000,allocate failure,(nil),99999999,0,2097152
12,10:00:00.003000,free,0x7f00deadbeef,8,0,2097152
11,10:00:01.500000,allocate,0x7f0000000000,500,0,4194304
"""


def read(text):
    return plot_log.read_log(io.StringIO(text), "test.csv")


class Series(unittest.TestCase):
    def test_used_reserved_and_counts(self):
        s = read(LOG)
        self.assertEqual(s["used"], [1000, 4000, 3000, 3000, 3000, 3500])
        # The first row's sample (0) predates the growth under its block:
        # reserved reads as used there, never below it.
        self.assertEqual(s["reserved_sampled"], [0, 2097152, 2097152, 2097152, 2097152, 4194304])
        self.assertEqual(s["reserved"], [1000, 2097152, 2097152, 2097152, 2097152, 4194304])
        self.assertAlmostEqual(s["t"][-1], 1.5)
        self.assertEqual((s["allocations"], s["frees"], s["failures"], s["unknown_frees"]), (3, 1, 1, 1))
        self.assertIn("peak used 0.0 MiB, peak reserved 4.0 MiB", plot_log.summary(s))

    def test_reserved_never_reads_below_used(self):
        # Sampled every 10 ms: a burst of growth between two samples left the
        # sampled column under used for its rows, and its peak under used's.
        lagging = """Thread,Time,Action,Pointer,Size,Stream,Reserved
11,10:00:00.000000,allocate,0x7f0000000000,2097152,0,2097152
11,10:00:00.001000,allocate,0x7f0000200000,8388608,0,2097152
11,10:00:00.002000,free,0x7f0000200000,8388608,0,2097152
11,10:00:00.020000,allocate,0x7f0000a00000,1048576,0,10485760
"""
        s = read(lagging)
        self.assertEqual(s["used"], [2097152, 10485760, 2097152, 3145728])
        self.assertEqual(s["reserved"], [2097152, 10485760, 2097152, 10485760])
        self.assertTrue(all(r >= u for r, u in zip(s["reserved"], s["used"])))
        self.assertIn("peak used 10.0 MiB, peak reserved 10.0 MiB (1.000x peak used)", plot_log.summary(s))

    def test_rmm_log_without_reserved(self):
        rmm = "Thread,Time,Action,Pointer,Size,Stream\n1,23:59:59.900000,allocate,0x10,64,0\n" \
              "1,00:00:00.100000,free,0x10,64,0\n"
        s = read(rmm)
        self.assertIsNone(s["reserved"])
        self.assertIsNone(s["reserved_sampled"])
        self.assertEqual(s["used"], [64, 0])
        self.assertAlmostEqual(s["t"][1], 0.2)  # across midnight

    def test_bad_input_names_the_line(self):
        with self.assertRaisesRegex(plot_log.LogError, "no Size column"):
            read("Thread,Time,Action,Pointer,Stream\n")
        with self.assertRaisesRegex(plot_log.LogError, "test.csv:2: Time"):
            read("Thread,Time,Action,Pointer,Size,Stream\n1,noon,allocate,0x1,8,0\n")
        with self.assertRaisesRegex(plot_log.LogError, "test.csv:3: unknown Action"):
            read("Thread,Time,Action,Pointer,Size,Stream\n1,10:00:00.0,allocate,0x1,8,0\n1,10:00:00.1,grow,0x1,8,0\n")
        with self.assertRaisesRegex(plot_log.LogError, "empty file"):
            read("")

    def test_main_reports_errors_with_status_2(self):
        self.assertEqual(plot_log.main(["/nonexistent/log.csv", "--no-png"]), 2)


# Reserved equal to used at every row (a pool that holds exactly what it
# handed out): the case where the used line hid the reserved one.
EQUAL_LOG = """Thread,Time,Action,Pointer,Size,Stream,Reserved
11,10:00:00.000000,allocate,0x7f0000000000,2097152,0,2097152
11,10:00:00.100000,allocate,0x7f0000200000,2097152,0,4194304
11,10:00:00.200000,free,0x7f0000000000,2097152,0,2097152
"""


def drawn_axes(series, title):
    """The Axes plot_log.plot drew, caught where it closes the figure."""
    import matplotlib.pyplot as plt  # noqa: PLC0415
    figures = []
    close = plt.close
    plt.close = figures.append
    try:
        with tempfile.TemporaryDirectory() as tmp:
            plot_log.plot(series, os.path.join(tmp, "log.png"), title)
    finally:
        plt.close = close
    for fig in figures:
        close(fig)
    return [ax for fig in figures for ax in fig.axes]


class BothLinesShow(unittest.TestCase):
    def setUp(self):
        try:
            import matplotlib  # noqa: PLC0415
            matplotlib.use("Agg")
        except ImportError:
            self.skipTest("matplotlib is not installed")

    def test_equal_reserved_and_used(self):
        s = read(EQUAL_LOG)
        self.assertEqual(s["used"], s["reserved"])
        (ax,) = drawn_axes(s, "equal")
        reserved, used = sorted(ax.get_lines(), key=lambda line: line.get_zorder())
        self.assertTrue(reserved.get_label().startswith("reserved"))
        self.assertTrue(used.get_label().startswith("used"))
        self.assertNotEqual(reserved.get_linestyle(), used.get_linestyle())
        self.assertLess(used.get_linewidth(), reserved.get_linewidth(), "used, above, covers reserved")
        self.assertIn("= reserved", used.get_label())

    def test_no_note_when_they_differ(self):
        (ax,) = drawn_axes(read(LOG), "differ")
        self.assertEqual(len(ax.get_lines()), 2)
        self.assertFalse(any("=" in line.get_label() for line in ax.get_lines()))


def png():
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("matplotlib is not installed: the PNG is not checked (skipped)")
        return 77
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "log.csv")
        with open(log, "w") as f:
            f.write(LOG)
        out = os.path.join(tmp, "memory.png")
        rc = plot_log.main([log, "-o", out])
        with open(out, "rb") as f:
            ok = rc == 0 and f.read(8) == b"\x89PNG\r\n\x1a\n"
    print("PNG written" if ok else "FAILED: no PNG")
    return 0 if ok else 1


if __name__ == "__main__":
    if "--png" in sys.argv:
        sys.exit(png())
    unittest.main(argv=[sys.argv[0]])
