#!/usr/bin/env python3
"""Unit tests of tools/traces/snapshot_to_csv.py on synthetic snapshots (no
torch, no GPU): what each snapshot action becomes, frees of blocks allocated
before recording, the gzip output, the command line.

    test_snapshot_to_csv.py TOOLS_TRACES_DIR     (meson test snapshot_to_csv)
"""
import contextlib
import gzip
import io
import os
import pickle
import sys
import tempfile
import unittest

sys.path.insert(0, sys.argv.pop(1) if len(sys.argv) > 1 else
                os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "traces"))
import snapshot_to_csv as conv  # noqa: E402

T0 = 1_700_000_000_000_000  # 2023-11-14 22:13:20 UTC, in microseconds
S = 0x5555  # a stream other than the legacy one


def entry(action, addr=None, size=0, stream=0, t=0):
    e = {"action": action, "size": size, "stream": stream, "time_us": T0 + t, "frames": []}
    if addr is not None:
        e["addr"] = addr
    return e


# A small device trace: a segment, two blocks on two streams, a free of a
# block allocated before recording began, a free requested but not completed
# by the end, an address reused, and markers.
TRACE = [
    entry("segment_alloc", 0x1000, 2 << 20, 0, 0),
    entry("alloc", 0x1000, 512, 0, 1),
    entry("alloc", 0x2000, 1024, S, 2),
    entry("free_requested", 0x1000, 512, 0, 3),
    entry("free_completed", 0x1000, 512, 0, 4),
    entry("free_requested", 0x9000, 64, 0, 5),
    entry("free_completed", 0x9000, 64, 0, 6),  # allocated before recording
    entry("free_requested", 0x2000, 1024, S, 7),  # its completion never came
    entry("snapshot", 0, 0, 0, 8),
    entry("alloc", 0x1000, 256, 0, 9),
    entry("free_requested", 0x1000, 256, 0, 1_000_010),
    entry("free_completed", 0x1000, 256, 0, 1_000_011),
    entry("oom", None, 1 << 40, 0, 1_000_012),
]


class FormatTest(unittest.TestCase):
    def test_time_is_rmm_utc_time_of_day(self):
        self.assertEqual(conv.format_time(T0 + 123456), "22:13:20.123456")
        self.assertEqual(conv.format_time(None), "00:00:00.000000")

    def test_stream_as_rmm_prints_it(self):
        self.assertEqual(conv.format_stream(0), "0")
        self.assertEqual(conv.format_stream(None), "0")
        self.assertEqual(conv.format_stream(0x5555), "0x5555")


class RowsTest(unittest.TestCase):
    def test_free_completed_is_the_free(self):
        rows, stats = conv.to_rows(TRACE)
        self.assertEqual(rows, [
            ("0", "22:13:20.000001", "allocate", "0x1000", "512", "0"),
            ("0", "22:13:20.000002", "allocate", "0x2000", "1024", "0x5555"),
            ("0", "22:13:20.000004", "free", "0x1000", "512", "0"),
            ("0", "22:13:20.000009", "allocate", "0x1000", "256", "0"),
            ("0", "22:13:21.000011", "free", "0x1000", "256", "0"),
        ])
        self.assertEqual(stats["allocations"], 3)
        self.assertEqual(stats["frees"], 2)
        self.assertEqual(stats["dropped_frees"], 1)  # 0x9000, allocated before recording
        self.assertEqual(stats["live_at_end"], 1)  # 0x2000: free requested, not completed
        self.assertEqual(stats["peak_live_bytes"], 1536)
        self.assertEqual(stats["streams"], 2)
        self.assertEqual(stats["duplicate_allocations"], 0)
        self.assertEqual(stats["entries"], len(TRACE))
        self.assertEqual(stats["ignored"], {"segment_alloc": 1, "free_requested": 4, "snapshot": 1, "oom": 1})

    def test_free_requested_on_request(self):
        rows, stats = conv.to_rows(TRACE, "free_requested")
        self.assertEqual([(r[2], r[3], r[4]) for r in rows], [
            ("allocate", "0x1000", "512"), ("allocate", "0x2000", "1024"), ("free", "0x1000", "512"),
            ("free", "0x2000", "1024"), ("allocate", "0x1000", "256"), ("free", "0x1000", "256"),
        ])
        self.assertEqual(stats["live_at_end"], 0)
        self.assertEqual(stats["dropped_frees"], 1)
        self.assertEqual(stats["ignored"]["free_completed"], 3)

    def test_alloc_at_a_live_address_frees_the_earlier_block_first(self):
        rows, stats = conv.to_rows([entry("alloc", 0x10, 8), entry("alloc", 0x10, 16)])
        self.assertEqual([(r[2], r[4]) for r in rows], [("allocate", "8"), ("free", "8"), ("allocate", "16")])
        self.assertEqual(stats["duplicate_allocations"], 1)
        self.assertEqual(stats["peak_live_bytes"], 16)

    def test_unknown_free_event_is_refused(self):
        with self.assertRaises(ValueError):
            conv.to_rows(TRACE, "free")


class ConvertTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.snapshot = {"segments": [], "device_traces": [[entry("alloc", 0x40, 8)], TRACE]}

    def tearDown(self):
        self.dir.cleanup()

    def path(self, name):
        return os.path.join(self.dir.name, name)

    def test_writes_deterministic_gzip_csv(self):
        stats = conv.convert(self.snapshot, self.path("a.csv.gz"))
        self.assertEqual(stats["device"], 1)  # the device trace with the most allocations
        self.assertEqual(stats["rows"], 5)
        with gzip.open(self.path("a.csv.gz"), "rt") as f:
            lines = f.read().splitlines()
        self.assertEqual(lines[0], "Thread,Time,Action,Pointer,Size,Stream")
        self.assertEqual(lines[1], "0,22:13:20.000001,allocate,0x1000,512,0")
        self.assertEqual(len(lines), 6)
        conv.convert(self.snapshot, self.path("b.csv.gz"))
        with open(self.path("a.csv.gz"), "rb") as a, open(self.path("b.csv.gz"), "rb") as b:
            data = a.read()
            self.assertEqual(data, b.read())
        self.assertEqual(data[4:8], b"\0\0\0\0")  # no time in the gzip header

    def test_device_choice(self):
        self.assertEqual(conv.convert(self.snapshot, self.path("d0.csv.gz"), device=0)["rows"], 1)
        with self.assertRaises(ValueError):
            conv.convert(self.snapshot, self.path("d5.csv.gz"), device=5)

    def test_no_allocations_is_an_error(self):
        with self.assertRaises(ValueError):
            conv.convert({"device_traces": [[entry("snapshot", 0)]]}, self.path("none.csv.gz"))
        with self.assertRaises(ValueError):
            conv.convert({"segments": []}, self.path("none.csv.gz"))
        self.assertFalse(os.path.exists(self.path("none.csv.gz")))

    def test_command_line(self):
        with open(self.path("snap.pickle"), "wb") as f:
            pickle.dump(self.snapshot, f)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            rc = conv.main([self.path("snap.pickle"), self.path("cli.csv.gz"), "--free-event", "free_requested"])
        self.assertEqual(rc, 0)
        self.assertIn('"live_at_end": 0', out.getvalue())
        with gzip.open(self.path("cli.csv.gz"), "rt") as f:
            self.assertEqual(len(f.read().splitlines()), 7)
        with open(self.path("empty.pickle"), "wb") as f:
            pickle.dump({"device_traces": []}, f)
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            self.assertEqual(conv.main([self.path("empty.pickle"), self.path("e.csv.gz")]), 1)
        self.assertIn("no alloc entries", err.getvalue())


if __name__ == "__main__":
    unittest.main()
