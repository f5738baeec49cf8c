#!/usr/bin/env python3
"""tools/check-docs on made-up repositories (meson test check_docs_rules, suite sim).

The reference page's rules: docs/benchmarks.md with a commit hash, a device
call or session narrated, or a lease kind named fails, naming the line and
the words; the same page saying what was measured, on what and with which
command passes (API calls, versions, figures and code blocks included).

    test_check_docs.py REPO_ROOT
"""
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", ".."))
CHECK_DOCS = os.path.join(ROOT, "tools", "check-docs")

CLEAN = """# Benchmarks

`sova_bench --benchmark_filter='^pair/'` on one NVIDIA H200 (driver 580.159.04, CUDA 13.0,
PyTorch 2.11.0+cu130): 97 ns a pair, 1024 pairs; access grants cost 67-82 us a call and
unmaps the same in one call as in several. The pool's calls to the driver are timed.

    SOVA_TAG=0xA11CE5ED build/bench/sova_bench   # a tag as code: 3f77070 stays code
"""


class ReferencePage(unittest.TestCase):
    def check(self, benchmarks):
        """check-docs' exit status and output on a repository holding only this page."""
        with tempfile.TemporaryDirectory() as root:
            os.mkdir(os.path.join(root, "docs"))
            with open(os.path.join(root, "README.md"), "w") as f:
                f.write("# sova\n")
            with open(os.path.join(root, "docs", "benchmarks.md"), "w") as f:
                f.write(benchmarks)
            run = subprocess.run([sys.executable, CHECK_DOCS, root], capture_output=True, text=True)
            return run.returncode, run.stdout

    def assert_fails(self, line, expected):
        rc, out = self.check(CLEAN + line)
        self.assertEqual(rc, 1, out)
        where = f"docs/benchmarks.md:{CLEAN.count(chr(10)) + 1}: "
        self.assertIn(where + expected, out)
        self.assertIn("1 broken", out)

    def test_a_reference_page_passes(self):
        rc, out = self.check(CLEAN)
        self.assertEqual(rc, 0, out)
        self.assertIn("1 reference page(s); 0 broken", out)

    def test_a_commit_hash_fails(self):
        self.assert_fails("Measured on tree `0378f73`.\n", "'0378f73' looks like a commit hash")
        self.assert_fails("at e0958c9a1b2c3d4e5f60718293a4b5c6d7e8f901 again\n", "'e0958c9a1b2c3d4e5f60718293a4b5c6d7e8f901'")

    def test_call_narration_fails(self):
        # the words written, and the words check-docs names
        for written, named in (("this call", "this call"), ("the same call's run", "the same call"),
                               ("a later call", "a later call"), ("a third call", "a third call"),
                               ("one device call", "device call"), ("three A/B calls", "A/B calls"),
                               ("from call to call", "from call to call"), ("runs between calls", "between calls"),
                               ("the call above", "call above"), ("in a call of two rounds", "in a call of")):
            with self.subTest(written=written):
                self.assert_fails(f"Measured in {written} on the H200.\n",
                                  f"'{named}' narrates a device call or session")

    def test_narration_over_a_line_break_fails(self):
        rc, out = self.check(CLEAN + "A run (the session's last\ncall) gave 0.96.\n")
        self.assertEqual(rc, 1, out)
        self.assertIn("'session' narrates", out)

    def test_a_lent_machine_fails(self):
        self.assert_fails("On the lent H100.\n", "'lent' narrates a device call or session")

    def test_a_lease_kind_fails(self):
        self.assert_fails("Four NVIDIA H200 (`nvidia-h200-x4`).\n", "'nvidia-h200-x4' is a lease kind")
        self.assert_fails("One GPU, nvidia-h200.\n", "'nvidia-h200' is a lease kind")


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
