#!/usr/bin/env python3
"""The default policy's layout repeats itself pass after pass (meson test
layout_passes, suite 'sim': no GPU needed, none used).

    check_passes.py SOVA_SIM_PASSES TRACE_DIR

Replays every trace of TRACE_DIR (bench/traces: training and decoding runs
recorded on the H100) four times on the host simulation, with the
simulation's own stream timing (no --idle: frees complete when its stream
threads get to the pool's fences), and checks what docs/design.md
("A stable layout") promises:
  * peak reserved memory after the fourth pass is within 1% of the first
    pass's (before the layout was stable it drifted by 5-45%);
  * a single-stream trace creates and remaps no physical memory in the
    fourth pass (the caches' blocks, reused last-freed-first, can shift a
    placement or two in the second pass; two streams: the other stream's
    frees complete at times the simulation decides, a chunk may come or go);
  * peak reserved stays within 1.05x the trace's peak live bytes.
"""
import glob
import gzip
import os
import re
import subprocess
import sys

PASS_LINE = re.compile(r"pass (\d+): peak reserved .* = ([0-9.]+); chunks created (\d+), remapped (\d+);")
RATIO_BOUND = 1.05
DRIFT_BOUND = 0.01


def streams_of(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        header = next(f).strip().split(",")
        column = header.index("Stream")
        return {line.strip().split(",")[column] for line in f if line.strip()}


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    tool, trace_dir = sys.argv[1], sys.argv[2]
    traces = sorted(glob.glob(os.path.join(trace_dir, "*.csv")) + glob.glob(os.path.join(trace_dir, "*.csv.gz")))
    if not traces:
        print("check_passes: FAILED: no traces in " + trace_dir)
        return 1
    failures = 0
    for trace in traces:
        name = os.path.basename(trace)
        out = subprocess.run([tool, trace, "--passes=4"], capture_output=True, text=True, timeout=600)
        passes = [tuple(float(g) if i == 1 else int(g) for i, g in enumerate(m.groups()))
                  for m in map(PASS_LINE.match, out.stdout.splitlines()) if m]
        if out.returncode != 0 or len(passes) != 4:
            print(f"check_passes: FAILED: {name}: exit {out.returncode}\n{out.stdout}{out.stderr}")
            failures += 1
            continue
        first, last = passes[0][1], passes[-1][1]
        single = len(streams_of(trace)) == 1
        last_work = passes[-1][2] + passes[-1][3]
        checks = [
            (last <= first + DRIFT_BOUND, f"peak after 4 passes {last:.3f} within {DRIFT_BOUND} of the first pass's {first:.3f}"),
            (last <= RATIO_BOUND, f"peak reserved / peak live {last:.3f} <= {RATIO_BOUND}"),
        ]
        if single:
            checks.append((last_work == 0, f"no chunk created or remapped in the fourth pass ({last_work})"))
        for ok, what in checks:
            print(f"check_passes: {'ok' if ok else 'FAILED'}: {name}: {what}")
            failures += 0 if ok else 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
