#!/usr/bin/env python3
"""PyTorch's NCCL registration of a torch.cuda.MemPool, on sova's memory:
an all-reduce on tensors of sova.torch.mem_pool() registered with NCCL
(ProcessGroupNCCL.register_mem_pool, which calls ncclCommRegister on every
segment of the pool and on segments it gets later), against the same pool
unregistered, PyTorch's own allocator, and the pool PyTorch documents for
this (torch.cuda.MemPool(backend.mem_allocator): ncclMemAlloc's memory),
registered. Every rank of every process allocator backend in turn:

    python3 bench/torch/nccl_mem_pool.py [--gpus N] [--backends pytorch,native,pluggable]
        [--min-mib 1] [--max-mib 1024] [--iters 20] [--reps 5] [--out DIR]

Backends (the process's allocator; one torchrun launch each):
  pytorch    PyTorch's caching allocator; sova only in the MemPool
  native     sova.torch.enable(backend="native"): sova serves ordinary
             allocations, PyTorch's allocator manages MemPools (segments from sova)
  pluggable  sova.torch.enable(backend="pluggable"): reported, not
             judged, since PyTorch's MemPool registration needs its caching
             allocator's segment list

Modes, per backend, in one process: torch (tensors of the process's
allocator), sova_pool (of sova.torch.mem_pool()), sova_pool_reg (the same
pool after register_mem_pool), nccl_pool_reg (ncclMemAlloc's pool,
registered). Per size (x4 steps): the first all-reduce's sum is checked
exactly on every rank (rank r holds r + 1: the sum is n(n+1)/2), then the
median of --reps timed runs of --iters in-place all-reduces (CUDA events),
as bus bandwidth (bytes * 2(n-1)/n / time, as nccl-tests reports it).
Registration is read from NCCL's own log (NCCL_DEBUG=INFO, subsystem REG,
one file a rank): the lines naming a registration are counted per mode.
NVLink multicast stays off (NCCL_NVLS_ENABLE=0).
Exit status: 0 when the pytorch and native backends ran every mode with
exact sums and registered sova's pool.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import time

MODES = ("torch", "sova_pool", "sova_pool_reg", "nccl_pool_reg")
BACKENDS = ("pytorch", "native", "pluggable")
JUDGED = ("pytorch", "native")
SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


# ---- worker: one rank --------------------------------------------------------
def reg_lines(log_glob: str) -> list:
    """Lines of this rank's NCCL log (subsystem REG only) that name a registration."""
    lines = []
    for path in glob.glob(log_glob):
        with open(path, errors="replace") as f:
            lines += [line.strip() for line in f if "egist" in line]
    return lines


def worker(backend: str, sizes_mib: list, iters: int, reps: int, out: str) -> None:
    import torch
    import torch.distributed as dist

    rank, world, local = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ["LOCAL_RANK"])
    import sova.torch
    if backend != "pytorch":
        sova.torch.enable(backend="native" if backend == "native" else "pluggable")
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    dist.init_process_group("nccl", device_id=dev)
    pg = dist.distributed_c10d._get_default_group()
    nccl = pg._get_backend(dev)
    log_glob = os.environ["NCCL_DEBUG_FILE"].replace("%p", str(os.getpid())).replace("%h", "*")
    want = (world * (world + 1)) // 2

    def measure(make) -> dict:
        """Per size: exact sum, then the bus bandwidth's median over reps."""
        rows = []
        for mib in sizes_mib:
            n = mib * 2**20 // 4
            x = make(n)
            x.fill_(rank + 1)
            dist.all_reduce(x)
            torch.cuda.synchronize()
            exact = bool((x == want).all().item())
            if not exact:
                rows.append({"mib": mib, "exact": False})
                break
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            times = []
            for _ in range(reps):
                x.fill_(1.0 / world)  # stays 1/world .. 1 over the iterations: no overflow
                dist.barrier()
                start.record()
                for _ in range(iters):
                    dist.all_reduce(x)
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end) / iters)
            ms = statistics.median(times)
            rows.append({"mib": mib, "exact": True, "us": ms * 1e3,
                         "busbw_gbs": mib * 2**20 * 2 * (world - 1) / world / (ms * 1e-3) / 1e9})
            del x
        return {"sizes": rows}

    results = {}
    pools = {}

    def run(mode, pool=None, register=False):
        before = len(reg_lines(log_glob))
        try:
            if register:
                nccl.register_mem_pool(pool)
            if pool is None:
                res = measure(lambda n: torch.empty(n, dtype=torch.float32, device=dev))
            else:
                def make(n):
                    with torch.cuda.use_mem_pool(pool):
                        return torch.empty(n, dtype=torch.float32, device=dev)
                res = measure(make)
        except Exception as e:  # reported per mode; the next mode still runs
            res = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"}
        if pool is not None:
            try:
                res["segments"] = len(torch.cuda.memory.memory_snapshot(pool.id))
            except Exception as e:
                res["segments"] = f"unknown ({type(e).__name__})"
        torch.cuda.synchronize()
        new = reg_lines(log_glob)[before:]
        res["reg_log_lines"], res["reg_log_sample"] = len(new), new[:2]
        results[mode] = res

    run("torch")
    try:
        pools["sova"] = sova.torch.mem_pool()
    except Exception as e:
        results["sova_pool"] = {"error": f"mem_pool(): {type(e).__name__}: {e}"}
    if "sova" in pools:
        run("sova_pool", pools["sova"])
        run("sova_pool_reg", pools["sova"], register=True)
    try:
        pools["nccl"] = torch.cuda.MemPool(nccl.mem_allocator)
        run("nccl_pool_reg", pools["nccl"], register=True)
    except Exception as e:
        results["nccl_pool_reg"] = {"error": f"{type(e).__name__}: {e}"}
    for name in ("sova", "nccl"):
        if name in pools and "error" not in results.get(f"{name}_pool_reg", {"error": 1}):
            try:
                nccl.deregister_mem_pool(pools[name])
            except Exception as e:
                results[f"{name}_pool_reg"]["deregister_error"] = str(e)[:200]
    if backend != "pytorch":
        # sova.torch's own allocations (the process allocator's, and the pool's segments).
        results["sova_stats"] = {"allocations": sova.torch.raw_stats(local)["allocations"]}
    dist.barrier()
    with open(os.path.join(out, f"{backend}.rank{rank}.json"), "w") as f:
        json.dump({"rank": rank, "world": world, "backend": backend, "torch": torch.__version__,
                   "nccl": ".".join(map(str, torch.cuda.nccl.version())), "modes": results}, f, indent=1)
    dist.destroy_process_group()


# ---- driver ------------------------------------------------------------------
def launch(backend: str, gpus: int, args, out: str) -> int:
    env = dict(os.environ, **SAFE_ENV, NCCL_DEBUG="INFO", NCCL_DEBUG_SUBSYS="REG",
               NCCL_DEBUG_FILE=os.path.join(out, f"nccl-{backend}.%h.%p.log"), PYTHONUNBUFFERED="1")
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={gpus}",
           os.path.abspath(__file__), "--worker", backend, args.sizes, str(args.iters), str(args.reps), out]
    with open(os.path.join(out, f"{backend}.log"), "w") as log:
        try:
            return subprocess.run(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                  timeout=args.timeout).returncode
        except subprocess.TimeoutExpired:
            return 124


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpus", type=int, default=0, help="ranks (default: every GPU)")
    ap.add_argument("--backends", default=",".join(BACKENDS))
    ap.add_argument("--min-mib", type=int, default=1)
    ap.add_argument("--max-mib", type=int, default=1024)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--timeout", type=float, default=150, help="seconds for one backend's launch")
    ap.add_argument("--out", default="/tmp/nccl-mem-pool")
    args = ap.parse_args()
    backends = [b for b in args.backends.split(",") if b]
    for b in backends:
        if b not in BACKENDS:
            ap.error(f"unknown backend {b!r} (choose from {', '.join(BACKENDS)})")
    sizes, s = [], args.min_mib
    while s <= args.max_mib:
        sizes.append(s)
        s *= 4
    args.sizes = ",".join(map(str, sizes))
    import torch
    gpus = args.gpus or torch.cuda.device_count()
    if gpus < 2 or gpus > torch.cuda.device_count():
        print(f"nccl_mem_pool: needs 2 or more GPUs (CUDA sees {torch.cuda.device_count()})", file=sys.stderr)
        return 2
    os.makedirs(args.out, exist_ok=True)
    status = 0
    for b in backends:
        t = time.monotonic()
        rc = launch(b, gpus, args, args.out)
        ranks = []
        for r in range(gpus):
            path = os.path.join(args.out, f"{b}.rank{r}.json")
            if os.path.exists(path):
                with open(path) as f:
                    ranks.append(json.load(f))
        print(f"\n== backend {b}: {gpus} ranks, exit {rc}, {time.monotonic() - t:.0f} s"
              + (f", torch {ranks[0]['torch']}, NCCL {ranks[0]['nccl']}" if ranks else ""))
        if len(ranks) != gpus:
            print(f"   {len(ranks)} of {gpus} ranks reported; the launch's log: {args.out}/{b}.log")
            with open(os.path.join(args.out, f"{b}.log"), errors="replace") as f:
                print("   " + "".join(f.readlines()[-15:]).replace("\n", "\n   "))
            status |= b in JUDGED
            continue
        ok = report(b, ranks)
        if b in JUDGED and not ok:
            status = 1
    return status


def report(backend: str, ranks: list) -> bool:
    """Prints one backend's table; whether every mode ran with exact sums and sova's pool registered."""
    ok = True
    print("mode             MiB    median_us   busbw_GB/s   (rank 0; exact on every rank?)")
    for mode in MODES:
        per_rank = [r["modes"].get(mode, {"error": "not run"}) for r in ranks]
        err = next((m["error"] for m in per_rank if "error" in m), None)
        regs = [m.get("reg_log_lines", 0) for m in per_rank]
        if err is not None:
            print(f"{mode:<14} ERROR {err}")
            ok = False
            continue
        for i, row in enumerate(per_rank[0]["sizes"]):
            exact = all(i < len(m["sizes"]) and m["sizes"][i]["exact"] for m in per_rank)
            ok &= exact
            if "us" in row:
                print(f"{mode:<14} {row['mib']:>5} {row['us']:>12.1f} {row['busbw_gbs']:>12.1f}   "
                      f"{'exact' if exact else 'WRONG SUM'}")
            else:
                print(f"{mode:<14} {row['mib']:>5}   WRONG SUM")
        print(f"{mode:<14} NCCL registration log lines per rank: {regs}; pool segments (rank 0): "
              f"{per_rank[0].get('segments')}")
        for line in per_rank[0].get("reg_log_sample", []):
            print(f"{mode:<14}   {line[:200]}")
        if mode == "sova_pool_reg" and min(regs) == 0:
            print(f"{mode:<14} NOT REGISTERED: NCCL logged no registration on some rank")
            ok = False
    if "sova_stats" in ranks[0]["modes"]:
        print(f"sova.torch counters (rank 0): {ranks[0]['modes']['sova_stats']}")
    return ok


if __name__ == "__main__":
    if len(sys.argv) == 7 and sys.argv[1] == "--worker":
        worker(sys.argv[2], [int(s) for s in sys.argv[3].split(",")], int(sys.argv[4]), int(sys.argv[5]),
               sys.argv[6])
    else:
        sys.exit(main())
