#!/usr/bin/env python3
"""Stands in for sova_bench, sova_driver_time and sova_sleep_wake when
test_perf_gate.py runs tools/device/perf-gate.sh without a GPU: answers the
arguments the script passes with output in each program's format, from fixed
figures times the tree's factors.

    perf_gate_stub.py CONFIG PROGRAM ARGS...

CONFIG (JSON): "scale" {key: factor} (keys: a sova_bench case name,
"replay:TRACE:steady", "replay:TRACE:first", "sleep:first", "sleep:steady",
"wake:steady"); "old_bench" true: the programs of a bench/ from before the
seed's mib:N, the first-pass line and --no-copy (seed cases at 4 MiB only,
named without mib:); "delay" seconds: how long each call takes. Each call counts itself in CONFIG's folder, and the
figures move with the count by up to 1%, as a device's do.
"""
import json
import os
import re
import sys
import time

SEED = {("sova", 0): (0.55, 1.08, 4.6), ("sova", 1): (0.53, 0.70, 4.4),
        ("preallocated", 0): (0.50, 0.65, 4.3), ("preallocated", 1): (0.50, 0.65, 4.3)}
PAIR = {"sova_pool": 95.0, "sova_pool_unchecked": 60.0, "sova_capi": 110.0, "sova_capi_unchecked": 80.0}
THREADS_PAIRS = {("sova_pool", 16): 45e6, ("sova_pool", 64): 3e6, ("sova_capi", 16): 40e6, ("sova_capi", 64): 2.8e6}
REPLAY_US = 1000.0
FIRST_US = 52000.0
SLEEP = {"first": 3.84, "steady": 0.175, "wake": 0.172}


def cases(old):
    """(name, kind, value): every case the stub's sova_bench registers."""
    out = []
    for (variant, threshold), by_mib in SEED.items():
        for mib, ms in zip((1, 4, 64), by_mib):
            if old and mib != 4:
                continue
            name = "seed/%s/threshold_max:%d%s/manual_time" % (variant, threshold, "" if old else "/mib:%d" % mib)
            out.append((name, "ms", ms))
    for alloc, ns in PAIR.items():
        out.append(("pair/%s/4096/real_time" % alloc, "ns", ns))
    for (alloc, classes), pairs in THREADS_PAIRS.items():
        out.append(("threads_mixed/%s/classes:%d/real_time/threads:16" % (alloc, classes), "pairs", 1e9 / pairs))
    return out


def wobble(call, i):
    return 1 + 0.004 * (((call * 7) % 5) - 2) + 0.0005 * i


def option(args, name, default=None):
    for a in args:
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    return default


def sova_bench(config, call, args):
    if "--benchmark_list_tests=true" in args:
        return 0
    pattern = re.compile(option(args, "--benchmark_filter", "."))
    reps = int(option(args, "--benchmark_repetitions", "1"))
    scale = config.get("scale", {})
    benchmarks = []
    for name, kind, value in cases(config.get("old_bench")):
        if not pattern.search(name):
            continue
        factor = scale.get(name, 1.0)
        values = [value * factor * wobble(call, i) for i in range(reps)]
        for i, v in enumerate(values):
            entry = {"name": name, "run_name": name, "run_type": "iteration", "repetitions": reps,
                     "repetition_index": i, "threads": 16 if kind == "pairs" else 1, "iterations": 1000}
            if kind == "pairs":  # v: ns a pair of all threads; the case reports its rate
                entry.update(real_time=v, time_unit="ns", pairs=1e9 / v)
            else:
                entry.update(real_time=v, time_unit=kind)
            benchmarks.append(entry)
            print("%-60s %10.3f %s" % (name, entry["real_time"], entry["time_unit"]))
        median = dict(benchmarks[-1], name=name + "_median", run_type="aggregate", aggregate_name="median")
        median.pop("repetition_index")
        benchmarks.append(median)
    out = option(args, "--benchmark_out")
    if out:
        with open(out, "w") as f:
            json.dump({"context": {"executable": "sova_bench", "gpu": "stub"}, "benchmarks": benchmarks}, f, indent=1)
    return 0


def sova_driver_time(config, call, args):
    trace = os.path.basename(args[0]).split(".")[0]
    scale = config.get("scale", {})
    steady = REPLAY_US * scale.get("replay:%s:steady" % trace, 1.0) * wobble(call, 0)
    first = FIRST_US * scale.get("replay:%s:first" % trace, 1.0) * wobble(call, 1)
    passes = option(args, "--passes", "20")
    print("%s on cuda (with remapping): %s passes after 5 warm ones" % (args[0], passes))
    if not config.get("old_bench"):
        print("first pass %.1f us (a fresh pool, its growth included)" % first)
    print("replay %.1f us (3788 events, %.0f ns each); peak reserved / trace peak 1.008" % (steady, steady * 1e3 / 3788))
    print("slow path a pass: heap 0.0 (0.0 us), grown 0.0 (0.0 us); fast-path hits 1894.0 of 1894.0")
    return 0


def sova_sleep_wake(config, call, args):
    usage = "usage: sova_sleep_wake [--sizes 1,8,32] [--cycles 3] [--block-mib 256]%s [--json FILE]" % (
        "" if config.get("old_bench") else " [--no-copy]")
    if "--help" in args or ("--no-copy" in args and config.get("old_bench")):
        print(usage, file=sys.stderr)
        return 2
    gib = float(args[args.index("--sizes") + 1])
    cycles = int(args[args.index("--cycles") + 1])
    path = args[args.index("--json") + 1]
    scale = config.get("scale", {})
    d2h = 0.0 if "--no-copy" in args else 51.2
    with open(path, "w") as f:
        for mode in ("backup", "discard"):
            for c in range(cycles):
                key = "sleep:first" if c == 0 else "sleep:steady"
                sleep_s = SLEEP["first" if c == 0 else "steady"] * gib / 8 * scale.get(key, 1.0) * wobble(call, c)
                wake_s = SLEEP["wake"] * gib / 8 * scale.get("wake:steady", 1.0) * wobble(call, c + 1)
                if mode == "discard":
                    sleep_s, wake_s = sleep_s / 100, wake_s / 100
                f.write(json.dumps({"device": "stub", "gib": gib, "mode": mode, "cycle": c, "sleep_s": sleep_s,
                                    "wake_s": wake_s, "pinned_d2h_gibs": d2h, "intact": True}) + "\n")
    print("all intact")
    return 0


def main():
    config_path, program, args = sys.argv[1], sys.argv[2], sys.argv[3:]
    with open(config_path) as f:
        config = json.load(f)
    counter = os.path.join(os.path.dirname(config_path), "calls")
    call = int(open(counter).read()) + 1 if os.path.exists(counter) else 1
    with open(counter, "w") as f:
        f.write(str(call))
    time.sleep(config.get("delay", 0))
    programs = {"sova_bench": sova_bench, "sova_driver_time": sova_driver_time, "sova_sleep_wake": sova_sleep_wake}
    return programs[program](config, call, args)


if __name__ == "__main__":
    sys.exit(main())
