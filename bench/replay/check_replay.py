#!/usr/bin/env python3
"""The trace replay end to end on the host simulation (meson test replay_sim,
suite 'sim': no GPU needed, none used).

    check_replay.py SOVA_BENCH SOURCE_ROOT

In a temporary directory: the synthetic traces of test/trace/synthetic/, and
a synthetic PyTorch snapshot converted by tools/traces/snapshot_to_csv.py
(.csv.gz); then `SOVA_BENCH --trace_dir=... --replay_memory_out=...` on the
replay/<trace>/sova_pool_sim cases, and tools/plot_bench.py on what it wrote.
Checks: the cases registered (by flag and by $SOVA_TRACE_DIR); the good
traces replayed with the counters their contents imply; the trace with
unknown frees skipped, naming their count; the memory-over-time rows (one
per operation here); summary.md's replay table and, with matplotlib, the
memory figure.
"""
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile

MIB = float(1 << 20)
FILTER = "--benchmark_filter=^replay/[^/]+/sova_pool_sim/"


def fail(message):
    print("check_replay: FAILED: " + message)
    sys.exit(1)


def check(condition, message):
    if not condition:
        fail(message)
    print("check_replay: ok: " + message)


def synthetic_snapshot():
    """A PyTorch-like device trace: 300 blocks of cycling sizes on two
    streams, at most 9 live, freed oldest first (free_requested then
    free_completed), and a free of a block from before recording."""
    sizes = (512, 4096, 1 << 20, 3 << 20, 256 << 10)
    entries = [{"action": "free_completed", "addr": 0xDEAD0000, "size": 64, "stream": 0, "time_us": 0}]
    live = []
    for i in range(300):
        addr = 0x10000000 + i * 0x400000
        stream = 0 if i % 3 else 0x77
        entries.append({"action": "alloc", "addr": addr, "size": sizes[i % 5], "stream": stream, "time_us": i})
        live.append((addr, stream))
        if len(live) > 8:
            old, old_stream = live.pop(0)
            for action in ("free_requested", "free_completed"):
                entries.append({"action": action, "addr": old, "size": 0, "stream": old_stream, "time_us": i})
    return {"segments": [], "device_traces": [entries]}


def min_time_flag(bench):
    """Google Benchmark 1.8 wants "0.01s", 1.7 a bare number."""
    probe = subprocess.run([bench, "--benchmark_list_tests=true", "--benchmark_filter=^$",
                            "--benchmark_min_time=0.01s"], capture_output=True)
    return "--benchmark_min_time=" + ("0.01s" if probe.returncode == 0 else "0.01")


def listed(bench, args, env=None):
    out = subprocess.run([bench, "--benchmark_list_tests=true", FILTER] + args, capture_output=True, text=True,
                         env=env)
    if out.returncode != 0:
        fail("listing cases failed: " + out.stderr)
    return sorted(out.stdout.split())


def main():
    if len(sys.argv) != 3:
        fail("usage: check_replay.py SOVA_BENCH SOURCE_ROOT")
    bench, root = sys.argv[1:]
    sys.path.insert(0, os.path.join(root, "tools", "traces"))
    import snapshot_to_csv  # noqa: PLC0415

    tmp = tempfile.mkdtemp(prefix="sova_replay_check_")
    try:
        traces = os.path.join(tmp, "traces")
        os.makedirs(traces)
        synthetic = os.path.join(root, "test", "trace", "synthetic")
        for name in ("synthetic_two_streams.csv", "synthetic_bad_unknown_free.csv"):
            shutil.copy(os.path.join(synthetic, name), traces)
        converted = snapshot_to_csv.convert(synthetic_snapshot(), os.path.join(traces, "synthetic_snapshot.csv.gz"))
        check(converted["dropped_frees"] == 1 and converted["allocations"] == 300,
              "converter: 300 allocations, the free from before recording dropped")

        want = sorted("replay/%s/sova_pool_sim/real_time" % t for t in
                      ("synthetic_bad_unknown_free", "synthetic_snapshot", "synthetic_two_streams"))
        check(listed(bench, ["--trace_dir=" + traces]) == want, "--trace_dir registers one case per trace")
        env = dict(os.environ, SOVA_TRACE_DIR=traces)
        check(listed(bench, [], env) == want, "$SOVA_TRACE_DIR does the same")

        out_json = os.path.join(tmp, "replay.json")
        memory = os.path.join(tmp, "memory.csv")
        run = subprocess.run([bench, "--trace_dir=" + traces, FILTER, min_time_flag(bench),
                              "--benchmark_out=" + out_json, "--benchmark_out_format=json",
                              "--replay_memory_out=" + memory, "--replay_memory_every=1"],
                             capture_output=True, text=True, timeout=120)
        print(run.stdout + run.stderr)
        check(run.returncode == 0, "sova_bench ran (exit 0)")
        with open(out_json) as f:
            data = json.load(f)
        cases = {b["name"].split("/")[1]: b for b in data["benchmarks"]}
        check("replay_traces" in data["context"], "the JSON context names the trace directory")

        good = cases["synthetic_two_streams"]
        check(not good.get("error_occurred"), "synthetic_two_streams replayed (%s)" % good.get("error_message", ""))
        check(good["label"] == "sim", "labelled sim")
        check(good["events"] == 10, "10 operations: 5 allocations, 3 frees, 2 closing frees")
        check(abs(good["peak_req_MiB"] * MIB - 3674112) < 1, "peak requested 3,674,112 bytes")
        check(good["ops"] > 0, "ops/s reported")
        # sova's UsedMemHigh is a lower bound with several streams (docs/design.md,
        # "Statistics"), so only its consistency is checked here.
        check(good["peak_res_MiB"] * MIB >= 3674112, "peak reserved at least the trace's peak")
        check(good["peak_res_MiB"] >= good["peak_used_MiB"] >= 0, "peak reserved at least peak used")
        check(abs(good["res_over_req"] - good["peak_res_MiB"] / good["peak_req_MiB"]) < 1e-6,
              "res_over_req = peak reserved / peak requested")
        check(("res_over_used" in good) == (good["peak_used_MiB"] > 0) and
              ("res_over_used" not in good or
               abs(good["res_over_used"] - good["peak_res_MiB"] / good["peak_used_MiB"]) < 1e-6),
              "res_over_used = peak reserved / peak used, where peak used is known")

        bad = cases["synthetic_bad_unknown_free"]
        message = bad.get("error_message", "")
        check(bad.get("error_occurred") and "2 frees of pointers the trace never allocated" in message
              and "line 3: free of 0x2000" in message, "the trace with unknown frees is refused: " + message)

        snap = cases["synthetic_snapshot"]
        expected_events = converted["rows"] + converted["live_at_end"]
        check(not snap.get("error_occurred"), "the converted .csv.gz replayed (%s)" % snap.get("error_message", ""))
        check(snap["events"] == expected_events, "its %d operations (rows + closing frees)" % expected_events)
        check(abs(snap["peak_req_MiB"] * MIB - converted["peak_live_bytes"]) < 1,
              "its peak requested is the converter's peak live bytes")

        with open(memory) as f:
            rows = list(csv.DictReader(f))
        by_trace = {}
        for r in rows:
            by_trace.setdefault(r["trace"], []).append(r)
        two = by_trace.get("synthetic_two_streams", [])
        check(len(two) == 11 and all(r["allocator"] == "sova_pool_sim" for r in two),
              "memory over time: 11 samples of synthetic_two_streams (every operation, and before the first)")
        requested = [int(r["requested_bytes"]) for r in two]
        check(requested == [0, 1048576, 1052672, 3149824, 2101248, 2625536, 528384, 3674112, 3149824, 3145728, 0],
              "requested bytes follow the trace")
        check(all(int(r["reserved_bytes"]) >= int(r["used_bytes"]) for r in rows), "reserved >= used in every sample")
        check("synthetic_snapshot" in by_trace, "the converted trace has samples")
        check("synthetic_bad_unknown_free" not in by_trace, "the refused trace has none")

        plots = os.path.join(tmp, "plots")
        try:
            import matplotlib  # noqa: F401, PLC0415
            have_mpl = True
        except ImportError:
            have_mpl = False
        plot = subprocess.run([sys.executable, os.path.join(root, "tools", "plot_bench.py"), "--out", plots,
                               "--replay-memory", memory, out_json] + ([] if have_mpl else ["--no-png"]),
                              capture_output=True, text=True, timeout=120)
        print(plot.stdout + plot.stderr)
        check(plot.returncode == 0, "plot_bench.py ran")
        with open(os.path.join(plots, "summary.md")) as f:
            summary = f.read()
        check("replay/" in summary and "synthetic_two_streams" in summary and "res_over_used" in summary,
              "summary.md has the replay table")
        if have_mpl:
            check(os.path.isfile(os.path.join(plots, "replay_memory.png")), "replay_memory.png written")
            check("replay_memory.png" in summary, "summary.md shows it")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("check_replay: all checks passed")


if __name__ == "__main__":
    main()
