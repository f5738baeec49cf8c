#!/usr/bin/env python3
"""Per-allocation cost of the Python adapters against their frameworks' own
allocators, in one process (peers in the same run; report ratios):

  cupy/<allocator>/<bytes>   cupy.empty(bytes, uint8) and its release, on a
                             non-blocking stream, for allocator in
                             MemoryPool (CuPy's default), MemoryAsyncPool
                             (cudaMallocAsync), sova (sova.cupy.malloc)
  cupy_hook/<allocator>/<bytes>   the allocator hook alone (malloc(bytes) ->
                             MemoryPointer, then dropped): what each adds
                             under cupy.empty
  rmm/<resource>/<bytes>     rmm.DeviceBuffer(size=bytes) and its release,
                             for PoolMemoryResource (over CudaMemoryResource,
                             initial size 1 GiB), CudaAsyncMemoryResource, sova
                             (sova.rmm.resource()); only when rmm imports

Each figure is the median over --repeats timed runs of --iterations pairs
(time.perf_counter_ns), after a warm-up run; the GPU is synchronized after
each run, so frees that only queue work are counted when they complete.
Prints a table and, with --json FILE, writes the figures.

  SOVA_LIBRARY=build/libsova.so PYTHONPATH=python python3 bench/adapters/python_alloc.py
"""

import argparse
import json
import statistics
import sys
import time

import cupy

SIZES = [256, 64 << 10, 4 << 20]


def time_pairs(make, iterations, repeats):
    """Median ns per make()+release over `repeats` runs of `iterations`."""
    for _ in range(iterations):  # warm-up: pools filled, code paths cached
        make()
    cupy.cuda.Device().synchronize()
    runs = []
    for _ in range(repeats):
        start = time.perf_counter_ns()
        for _ in range(iterations):
            make()
        cupy.cuda.Device().synchronize()
        runs.append((time.perf_counter_ns() - start) / iterations)
    return statistics.median(runs)


def bench_cupy(args, results):
    import sova.cupy
    pool = cupy.cuda.MemoryPool()
    async_pool = cupy.cuda.MemoryAsyncPool()
    allocators = {"MemoryPool": pool.malloc, "MemoryAsyncPool": async_pool.malloc, "sova": sova.cupy.malloc}
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        for name, malloc in allocators.items():
            with cupy.cuda.using_allocator(malloc):
                for size in SIZES:
                    results[f"cupy/{name}/{size}"] = time_pairs(
                        lambda: cupy.empty(size, dtype=cupy.uint8), args.iterations, args.repeats)
            for size in SIZES:
                results[f"cupy_hook/{name}/{size}"] = time_pairs(lambda: malloc(size), args.iterations, args.repeats)


def bench_rmm(args, results):
    try:
        import rmm
        import rmm.mr
    except ImportError as error:
        print(f"rmm cases not run: {error}", file=sys.stderr)
        return False
    import sova.rmm
    resources = {
        "PoolMemoryResource": lambda: rmm.mr.PoolMemoryResource(rmm.mr.CudaMemoryResource(), initial_pool_size=1 << 30),
        "CudaAsyncMemoryResource": lambda: rmm.mr.CudaAsyncMemoryResource(),
        "sova": sova.rmm.resource,
    }
    previous = rmm.mr.get_current_device_resource()
    try:
        for name, make in resources.items():
            rmm.mr.set_current_device_resource(make())
            for size in SIZES:
                results[f"rmm/{name}/{size}"] = time_pairs(lambda: rmm.DeviceBuffer(size=size), args.iterations,
                                                           args.repeats)
    finally:
        rmm.mr.set_current_device_resource(previous)
    return True


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iterations", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", help="write the figures (ns per pair) here")
    args = parser.parse_args()

    results = {}
    bench_cupy(args, results)
    have_rmm = bench_rmm(args, results)

    print(f"device: {cupy.cuda.runtime.getDeviceProperties(0)['name'].decode()}, cupy {cupy.__version__}")
    groups = [("cupy", "MemoryPool"), ("cupy_hook", "MemoryPool")] + ([("rmm", "PoolMemoryResource")] if have_rmm else [])
    for group, baseline in groups:
        names = sorted({k.split("/")[1] for k in results if k.startswith(group + "/")})
        print(f"\n{group}: ns per allocate+release pair (ratio to {baseline})")
        print("| allocator | " + " | ".join(f"{s} B" for s in SIZES) + " |")
        print("| --- |" + " --- |" * len(SIZES))
        for name in names:
            cells = []
            for size in SIZES:
                value = results[f"{group}/{name}/{size}"]
                cells.append(f"{value:.0f} ({value / results[f'{group}/{baseline}/{size}']:.2f}x)")
            print(f"| {name} | " + " | ".join(cells) + " |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"ns_per_pair": results, "iterations": args.iterations, "repeats": args.repeats}, f, indent=1)


if __name__ == "__main__":
    main()
