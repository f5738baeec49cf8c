#!/usr/bin/env python3
"""tools/perf_gate_table.py and tools/device/perf-gate.sh without a GPU
(meson test perf_gate, suite sim).

The parser on recorded outputs (perf_gate_samples/: sova_bench's JSON and
sova_driver_time's output from the host simulation, and sova_sleep_wake's
--json records in the program's own format with an H200's figures), the
ratios, noise and verdicts on made-up rounds; then the script end to end on
stand-in programs (perf_gate_stub.py): its rounds, the files it leaves, its
table, its refusals. The script's builds and the GPU are not exercised here.

    test_perf_gate.py REPO_ROOT
"""
import contextlib
import importlib.util
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import unittest

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", ".."))
HERE = os.path.dirname(os.path.abspath(__file__))
SAMPLES = os.path.join(HERE, "perf_gate_samples")
SCRIPT = os.path.join(ROOT, "tools", "device", "perf-gate.sh")
spec = importlib.util.spec_from_file_location("perf_gate_table", os.path.join(ROOT, "tools", "perf_gate_table.py"))
gate = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gate)


def sample(name):
    with open(os.path.join(SAMPLES, name)) as f:
        return f.read()


class Parsers(unittest.TestCase):
    def test_sova_bench_json(self):
        figures, problems = gate.bench_figures(sample("sova_bench_sim.json"))
        pair = figures["pair 4 KiB, sova_pool_sim (ns)"][1]
        self.assertAlmostEqual(pair, 612.075333094926)  # the median of the three repetitions
        threads = figures["threads_mixed 2 threads, 16 sizes, sova_pool_sim (ns a pair)"][1]
        self.assertAlmostEqual(threads, 1e9 / 1752357.4190546074)  # from the pairs counter
        self.assertEqual(len(figures), 2)
        self.assertEqual(problems, ["seed/sova/threshold_max:0/mib:4/manual_time: no GPU"])

    def test_unreadable_json_is_a_problem(self):
        figures, problems = gate.bench_figures('{"benchmarks": [')
        self.assertEqual(figures, {})
        self.assertIn("unreadable JSON", problems[0])

    def test_seed_names_with_and_without_mib(self):
        new, unit, _ = gate.bench_case_figure("seed/sova/threshold_max:0/mib:4/manual_time")
        old, _, _ = gate.bench_case_figure("seed/sova/threshold_max:0/manual_time")
        self.assertEqual(new.label, old.label)  # a bench/ from before mib:N ran 4 MiB
        self.assertEqual(new.label, "seed loop 4 MiB, threshold 0 (ms)")
        self.assertEqual(unit, 1e-3)
        floor, _, _ = gate.bench_case_figure("seed/preallocated/threshold_max:0/mib:64/manual_time")
        self.assertEqual(floor.label, "seed loop 64 MiB, preallocated: control (ms)")
        top, _, _ = gate.bench_case_figure("seed/sova/threshold_max:1/mib:1/manual_time")
        self.assertEqual(top.label, "seed loop 1 MiB, threshold max (ms)")
        self.assertLess(top.sort_key, new.sort_key)  # by size first
        self.assertLess(new.sort_key, floor.sort_key)

    def test_driver_time(self):
        figures, problems = gate.replay_figures(sample("sova_driver_time_sim.txt"), "gpt_train")
        self.assertEqual(problems, [])
        self.assertEqual(figures["replay gpt_train, steady (us a pass)"][1], 415.3)
        self.assertEqual(figures["replay gpt_train, first pass (us)"][1], 105576.7)
        old = "\n".join(line for line in sample("sova_driver_time_sim.txt").splitlines()
                        if not line.startswith("first pass"))
        self.assertEqual(list(gate.replay_figures(old, "gpt_train")[0]), ["replay gpt_train, steady (us a pass)"])
        self.assertEqual(gate.replay_figures("gpt_train: cannot open\n", "gpt_train"), ({}, ["no replay line"]))

    def test_sleep_wake_records(self):
        figures, problems = gate.sleep_figures(sample("sova_sleep_wake_8gib.jsonl"))
        self.assertEqual(problems, [])
        values = {label: v for label, (_, v) in figures.items()}
        self.assertEqual(values["sleep 8 GiB, first (s)"], 3.839102)
        self.assertEqual(values["sleep 8 GiB, steady (s)"], 0.175012)  # cycles 1-3, backup only
        self.assertEqual(values["wake 8 GiB, steady (s)"], 0.171733)
        self.assertAlmostEqual(values["pinned copy 8 GiB to host: control (s)"], 8 / 51.21)
        no_copy = sample("sova_sleep_wake_8gib.jsonl").replace('"pinned_d2h_gibs": 51.21', '"pinned_d2h_gibs": 0.00')
        self.assertNotIn("pinned copy 8 GiB to host: control (s)", gate.sleep_figures(no_copy)[0])
        changed = sample("sova_sleep_wake_8gib.jsonl").replace('"intact": true}', '"intact": false}', 1)
        self.assertEqual(gate.sleep_figures(changed)[1], ["8 GiB cycle 0: a block came back changed"])


def runs_of(rounds):
    """read_runs' shape from [(tree1, {label: v}), (tree2, {label: v})] per round."""
    runs = {}
    for r, slots in enumerate(rounds, 1):
        for slot, (tree, values) in enumerate(slots, 1):
            figures = {label: (gate.Figure(label, "pair", (label,)), v) for label, v in values.items()}
            runs[(r, slot)] = {"tree": tree, "figures": figures}
    return runs


class Compare(unittest.TestCase):
    def rows(self, floor=0.01):
        runs = runs_of([
            [("base", {"slower": 100, "faster": 100, "same": 100, "noisy": 100, "one at a time": 5}),
             ("head", {"slower": 112, "faster": 80, "same": 100.5, "noisy": 104})],
            [("base", {"slower": 100, "faster": 100, "same": 100, "noisy": 100}),
             ("base", {"slower": 101, "faster": 99, "same": 100.2, "noisy": 95})],
            [("head", {"slower": 110, "faster": 82, "same": 99.8, "noisy": 103, "one at a time": 5}),
             ("base", {"slower": 100, "faster": 100, "same": 100, "noisy": 100})],
            [("head", {"slower": 110, "faster": 80, "same": 100, "noisy": 100}),
             ("head", {"slower": 111, "faster": 80, "same": 100, "noisy": 106})],
        ])
        return {row["figure"]: row for row in gate.compare(runs, floor)}

    def test_ratios_noise_and_verdicts(self):
        rows = self.rows()
        self.assertAlmostEqual(rows["slower"]["ratio"], 1.11)  # the median of 1.12 and 1.10
        self.assertAlmostEqual(rows["slower"]["noise"], 0.01)  # the larger of 1% and 0.9%
        self.assertEqual(rows["slower"]["base"], 100)
        self.assertEqual(rows["slower"]["head"], 111)
        self.assertEqual(rows["slower"]["verdict"], "WORSE")
        self.assertEqual(rows["faster"]["verdict"], "better")
        self.assertEqual(rows["same"]["verdict"], "ok")
        self.assertAlmostEqual(rows["noisy"]["noise"], 0.06)
        self.assertEqual(rows["noisy"]["verdict"], "ok")  # 1.035 within its 6% noise
        self.assertEqual(rows["one at a time"]["verdict"], "n/a")
        # Each tree had it, never both in one round: their values, no ratio.
        self.assertEqual((rows["one at a time"]["base"], rows["one at a time"]["head"]), (5, 5))
        self.assertEqual([r["kind"] for r in rows["slower"]["rounds"]], ["A/B", "A/A", "A/B", "A/A"])

    def test_floor(self):
        rows = self.rows(floor=0.2)
        self.assertEqual(rows["slower"]["verdict"], "ok")  # 1.11 within 1 +- 0.2
        self.assertEqual(rows["faster"]["verdict"], "ok")  # 0.81 too

    def test_a_round_without_its_second_run_gives_nothing(self):
        runs = runs_of([[("base", {"x": 1.0}), ("head", {"x": 2.0})]])
        runs.pop((1, 2))
        rows = gate.compare(runs)
        self.assertEqual(rows[0]["ratio"], None)
        self.assertEqual(gate.round_kind(runs, 1), None)


class Files(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()

    def tearDown(self):
        shutil.rmtree(self.dir)

    def put(self, name, text):
        with open(os.path.join(self.dir, name), "w") as f:
            f.write(text)

    def main(self, *args):
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            return gate.main(list(args))

    def test_names_and_exit_status(self):
        self.assertEqual(self.main(self.dir, "--base", "a", "--head", "b"), 2)  # nothing to read
        bench = sample("sova_bench_sim.json")
        self.put("r1-1-base-pair.json", bench)
        self.put("r1-1-base-pair.txt", "the console: not read")
        self.put("r1-2-head-pair.json", bench.replace("612.075333094926", "700.0"))
        self.put("r1-1-base-replay-gpt_train.txt", sample("sova_driver_time_sim.txt"))
        self.put("r1-2-head-replay-gpt_train.txt", sample("sova_driver_time_sim.txt"))
        self.put("r1-1-base-sleep.jsonl", sample("sova_sleep_wake_8gib.jsonl"))
        self.put("r1-1-base-sleep.txt", "all intact")
        self.put("build-head.log", "not a run")
        runs, problems = gate.read_runs(self.dir)
        self.assertEqual(sorted(runs), [(1, 1), (1, 2)])
        self.assertIn("sleep 8 GiB, first (s)", runs[(1, 1)]["figures"])
        self.assertEqual(len([p for p in problems if "no GPU" in p]), 2)
        out = os.path.join(self.dir, "out.json")
        self.assertEqual(self.main(self.dir, "--base", "a", "--head", "b", "--json", out), 1)  # 700 / 612
        with open(out) as f:
            rows = {row["figure"]: row for row in json.load(f)["rows"]}
        self.assertEqual(rows["pair 4 KiB, sova_pool_sim (ns)"]["verdict"], "WORSE")
        self.assertEqual(rows["replay gpt_train, steady (us a pass)"]["ratio"], 1.0)
        self.assertEqual(rows["sleep 8 GiB, first (s)"]["verdict"], "n/a")  # base only


def have(program):
    return shutil.which(program) is not None


@unittest.skipUnless(have("bash") and have("timeout") and have("tar"), "needs bash, timeout and tar")
class Script(unittest.TestCase):
    """tools/device/perf-gate.sh on stand-in programs: the base an old bench/
    (seed at 4 MiB without mib:, no first-pass line, no --no-copy), this tree
    with one figure 15% slower and one 20% faster."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp()
        self.base_tree = os.path.join(self.tmp, "ab-base")
        os.makedirs(os.path.join(self.base_tree, "lib"))
        with open(os.path.join(self.base_tree, "meson.build"), "w") as f:
            f.write("project('base')\n")
        with open(os.path.join(self.base_tree, ".perf-gate-base"), "w") as f:
            f.write("7021226c0ffee0000000000000000000deadbeef\n")
        self.builds = {}
        for tree, config in (("base", {"old_bench": True}),
                             ("head", {"scale": {"pair/sova_capi/4096/real_time": 1.15,
                                                 "replay:gpt_train:steady": 0.8}})):
            build = os.path.join(self.tmp, "build-" + tree)
            os.makedirs(os.path.join(build, "bench"))
            config_path = os.path.join(build, "stub.json")
            with open(config_path, "w") as f:
                json.dump(config, f)
            for program in ("sova_bench", "sova_driver_time", "sova_sleep_wake"):
                path = os.path.join(build, "bench", program)
                with open(path, "w") as f:
                    f.write('#!/bin/sh\nexec "%s" "%s" "%s" %s "$@"\n' % (
                        sys.executable, os.path.join(HERE, "perf_gate_stub.py"), config_path, program))
                os.chmod(path, 0o755)
            self.builds[tree] = build

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def run_gate(self, *args, **env):
        full = dict(os.environ, OUT=os.path.join(self.tmp, "out"), PERF_GATE_WORK=os.path.join(self.tmp, "work"),
                    PERF_GATE_BASE_TREE=self.base_tree, PERF_GATE_HEAD_BUILD=self.builds["head"],
                    PERF_GATE_BASE_BUILD=self.builds["base"], PERF_GATE_PIN="", PERF_GATE_HEAD="head-tree",
                    PERF_GATE_ROUNDS="AB AA BA BB", PERF_GATE_TRACES="gpt_train lstm_train", TOTAL_S="300")
        full.pop("PERF_GATE_BASE", None)
        full.update(env)
        return subprocess.run(["bash", SCRIPT] + list(args), env=full, capture_output=True, text=True, timeout=240)

    def test_rounds_files_and_table(self):
        p = self.run_gate("7021226")
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)  # one figure WORSE
        lines = p.stdout.rstrip("\n").splitlines()
        rows = {}
        for line in lines:
            if line.startswith("| ") and not line.startswith("| ---") and not line.startswith("| figure"):
                cells = [c.strip() for c in line.strip("|").split("|")]
                rows[cells[0]] = cells
        self.assertTrue(lines[-1].startswith("| "), "the table comes last")
        self.assertIn("| figure | A: 7021226 | B: head-tree | B/A | A/A noise | verdict |", lines)
        self.assertEqual(rows["pair 4 KiB, sova_capi (ns)"][5], "WORSE")
        self.assertEqual(rows["replay gpt_train, steady (us a pass)"][5], "better")
        self.assertEqual(rows["pair 4 KiB, sova_pool (ns)"][5], "ok")
        self.assertEqual(rows["seed loop 4 MiB, threshold 0 (ms)"][5], "ok")  # the old name, matched
        self.assertEqual(rows["seed loop 64 MiB, threshold 0 (ms)"][5], "n/a")  # the old bench/ lacks it
        self.assertEqual(rows["replay lstm_train, first pass (us)"][5], "n/a")
        self.assertEqual(rows["threads_mixed 16 threads, 64 sizes, sova_capi (ns a pair)"][5], "ok")
        self.assertEqual(rows["sleep 8 GiB, first (s)"][5], "ok")
        self.assertEqual(rows["pinned copy 8 GiB to host: control (s)"][5], "n/a")  # head ran --no-copy
        self.assertTrue(rows["sleep 8 GiB, steady (s)"][4].endswith("%"))
        self.assertIn("2 A/B rounds (1 3), 2 A/A rounds (2 4)", p.stdout)
        out = os.path.join(self.tmp, "out")
        files = sorted(os.listdir(out))
        self.assertEqual(files, ["perf-gate-raw.tar.gz", "perf-gate-table.md", "perf-gate.json", "perf-gate.log"])
        for name in files:
            self.assertLess(os.path.getsize(os.path.join(out, name)), 16 << 20)
        with tarfile.open(os.path.join(out, "perf-gate-raw.tar.gz")) as tar:
            names = tar.getnames()
        self.assertIn("raw/r1-1-base-seed.json", names)
        self.assertIn("raw/r4-2-head-sleep.jsonl", names)
        self.assertIn("raw/r3-1-head-replay-lstm_train.txt", names)  # BA: this tree first
        with open(os.path.join(out, "perf-gate-table.md")) as f:
            self.assertEqual(f.read().rstrip("\n").splitlines()[-1], lines[-1])

    def test_refusals(self):
        p = self.run_gate("3743777")
        self.assertEqual(p.returncode, 2)
        self.assertIn("holds 7021226c0ffee", p.stderr)
        p = self.run_gate(PERF_GATE_BASE_TREE=os.path.join(self.tmp, "nothing"))
        self.assertEqual(p.returncode, 2)
        self.assertIn("--unpack BASE", p.stderr)
        os.remove(os.path.join(self.base_tree, ".perf-gate-base"))
        p = self.run_gate()
        self.assertEqual(p.returncode, 2)
        self.assertIn("name BASE", p.stderr)
        p = self.run_gate("7021226", PERF_GATE_ROUNDS="AB AC")
        self.assertEqual(p.returncode, 2)
        self.assertIn("AC", p.stderr)
        p = self.run_gate("7021226", PERF_GATE_STEPS="seed pairs")
        self.assertEqual(p.returncode, 2)
        self.assertIn("pairs", p.stderr)

    def test_steps_subset(self):
        p = self.run_gate("7021226", PERF_GATE_STEPS="seed sleep")
        rows = {}
        for line in p.stdout.splitlines():
            if line.startswith("| ") and not line.startswith("| ---") and not line.startswith("| figure"):
                cells = [c.strip() for c in line.strip("|").split("|")]
                rows[cells[0]] = cells
        self.assertEqual(rows["seed loop 4 MiB, threshold 0 (ms)"][5], "ok")
        self.assertEqual(rows["sleep 8 GiB, first (s)"][5], "ok")
        self.assertNotIn("pair 4 KiB, sova_capi (ns)", rows)  # pair left out
        self.assertNotIn("replay gpt_train, steady (us a pass)", rows)
        with tarfile.open(os.path.join(self.tmp, "out", "perf-gate-raw.tar.gz")) as tar:
            names = tar.getnames()
        self.assertIn("raw/r1-1-base-seed.json", names)
        self.assertNotIn("raw/r1-1-base-pair.json", names)
        self.assertFalse(any("replay" in n for n in names), names)

    def test_out_of_time_leaves_rounds_out(self):
        # Each program call takes 1 s: the first round (12 calls) takes 12 s or more,
        # after which 35 s leave no room for a second beside the 15 s kept for the table.
        for build in self.builds.values():
            config_path = os.path.join(build, "stub.json")
            with open(config_path) as f:
                config = json.load(f)
            config["delay"] = 1.0
            with open(config_path, "w") as f:
                json.dump(config, f)
        p = self.run_gate("7021226", TOTAL_S="35", PERF_GATE_TRACES="gpt_train")
        self.assertIn("=== rounds 2-4 left out", p.stdout)
        self.assertIn("1 A/B rounds (1), 0 A/A rounds (none)", p.stdout)
        self.assertEqual(p.returncode, 1)

    @unittest.skipUnless(have("git"), "needs git")
    def test_unpack(self):
        head = subprocess.run(["git", "-C", ROOT, "rev-parse", "HEAD"], capture_output=True, text=True)
        if head.returncode != 0:
            self.skipTest("the sources are no git checkout")
        target = os.path.join(self.tmp, "unpacked")
        p = self.run_gate("--unpack", "HEAD", PERF_GATE_BASE_TREE=target)
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(os.path.join(target, ".perf-gate-base")) as f:
            self.assertEqual(f.read().strip(), head.stdout.strip())
        self.assertTrue(os.path.isfile(os.path.join(target, "lib", "meson.build")) or
                        os.path.isdir(os.path.join(target, "lib")))
        p = self.run_gate("--unpack", "HEAD", PERF_GATE_BASE_TREE=target)
        self.assertEqual(p.returncode, 2)
        self.assertIn("delete it first", p.stderr)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
