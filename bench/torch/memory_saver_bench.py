"""torch_memory_saver against sova's drop-in for it (sova.memory_saver), the
same code through either object, one implementation per process:

  --impl tms    torch_memory_saver (hook_mode="torch")
  --impl sova   sova.memory_saver's torch_memory_saver

For each case, one region of --gib GiB (one tensor, a byte pattern) paused and
resumed --cycles times: cycle 0 is the first pause of that memory, the rest
the steady state (their median). Cases: "discard" (enable_cpu_backup=False),
"backup" (enable_cpu_backup=True, host memory given back at resume: both
libraries' default) and "backup+retain" (retain_cpu_backup=True: the host
memory kept across cycles). Each call is timed to the end of its device work
(torch.cuda.synchronize); a backed-up region is checked whole after every
resume. Prints one JSON object per cycle (also to --json FILE, appended) and
a table last: GiB/s of pause and resume, first and steady.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

from sleep_wake_rl import emit  # the same JSON lines, printed and appended to --json

CASES = (("discard", False, False), ("backup", True, False), ("backup+retain", True, True))


def saver(impl):
    if impl == "tms":
        from torch_memory_saver import torch_memory_saver as s
        s.hook_mode = "torch"
    else:
        from sova.memory_saver import torch_memory_saver as s
    return s


def timed(torch, fn) -> float:
    torch.cuda.synchronize()
    t = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return time.perf_counter() - t


def run(args):
    import torch
    s = saver(args.impl)
    n = int(args.gib * 2**30)
    rows = []
    for case, backup, retain in CASES:
        tag = case.replace("+", "_")
        with s.region(tag=tag, enable_cpu_backup=backup):
            t = torch.empty(n, dtype=torch.uint8, device="cuda")
        t.fill_(7)
        s.retain_cpu_backup = retain
        pauses, resumes = [], []
        for cycle in range(args.cycles):
            free0 = torch.cuda.mem_get_info()[0]
            pause_s = timed(torch, lambda: s.pause(tag))
            freed = torch.cuda.mem_get_info()[0] - free0
            resume_s = timed(torch, lambda: s.resume(tag))
            intact = bool((t == 7).all()) if backup else None
            if backup and not intact:
                print(f"{args.impl} {case}: contents lost at cycle {cycle}", file=sys.stderr)
                sys.exit(1)
            if freed < 0.9 * n:
                print(f"{args.impl} {case}: pause gave back {freed / 2**30:.2f} GiB of {args.gib}", file=sys.stderr)
                sys.exit(1)
            pauses.append(args.gib / pause_s)
            resumes.append(args.gib / resume_s)
            emit(args, {"impl": args.impl, "case": case, "gib": args.gib, "cycle": cycle, "pause_s": pause_s,
                        "resume_s": resume_s, "freed_gib": freed / 2**30, "intact": intact})
        s.retain_cpu_backup = False
        rows.append((case, pauses[0], statistics.median(pauses[1:]) if len(pauses) > 1 else float("nan"),
                     resumes[0], statistics.median(resumes[1:]) if len(resumes) > 1 else float("nan")))
        del t
        torch.cuda.synchronize()
    print(f"\n{args.impl}: {args.gib} GiB, {args.cycles} cycles (GiB/s; steady = median of cycles 2..)")
    print(f"{'case':<15}{'pause first':>13}{'pause steady':>14}{'resume first':>14}{'resume steady':>15}")
    for case, p0, p, r0, r in rows:
        print(f"{case:<15}{p0:>13.1f}{p:>14.1f}{r0:>14.1f}{r:>15.1f}")
    sys.stdout.flush()
    # torch_memory_saver 0.0.10 in torch mode aborts in its free hook at
    # interpreter teardown (bench/torch/sleep_wake_rl.py): leave without it.
    os._exit(0)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--impl", choices=["tms", "sova"], required=True)
    p.add_argument("--gib", type=float, default=8.0)
    p.add_argument("--cycles", type=int, default=4)
    p.add_argument("--json", default=None)
    args = p.parse_args()
    if args.gib <= 0 or args.cycles < 1:
        p.error("--gib must be > 0 and --cycles >= 1")
    run(args)


if __name__ == "__main__":
    main()
