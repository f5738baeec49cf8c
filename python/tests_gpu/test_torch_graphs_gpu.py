"""CUDA graphs under sova.torch on a real GPU: torch.cuda.graph,
make_graphed_callables, torch.cuda.graph into sova.torch.mem_pool(), and
torch.compile(mode="reduce-overhead"). Each scenario (graph_scenarios.py) runs
in a fresh process under PyTorch's allocator and under sova; the results must
be equal bit for bit (deterministic algorithms, the same kernels on the same
inputs), and each run checks its own replays and the memory returned.
The pluggable backend's captures need sova's core to serve allocations under
capture (docs/python.md, "CUDA graphs")."""
import os
import tempfile

import torch

from gpu_helpers import run_script

HERE = os.path.dirname(os.path.abspath(__file__))


def run_scenario(mode: str, scenario: str, timeout: int = 420) -> dict:
    out = os.path.join(tempfile.mkdtemp(), f"{scenario}-{mode}.pt")
    env = {"PYTHONPATH": HERE + os.pathsep + os.environ.get("PYTHONPATH", "")}
    run_script(f"""
    import runpy, sys
    sys.argv = ["graph_scenarios.py", {mode!r}, {scenario!r}, {out!r}]
    runpy.run_path({os.path.join(HERE, "graph_scenarios.py")!r}, run_name="__main__")
    """, env=env, timeout=timeout)
    return torch.load(out)


def assert_bitwise_equal(got, want, where=""):
    if isinstance(want, dict):
        assert set(got) == set(want), where
        for k in want:
            assert_bitwise_equal(got[k], want[k], f"{where}.{k}")
    elif isinstance(want, (list, tuple)):
        assert len(got) == len(want), where
        for i, (g, w) in enumerate(zip(got, want)):
            assert_bitwise_equal(g, w, f"{where}[{i}]")
    else:
        assert torch.equal(got, want), f"{where}: sova's result differs from PyTorch's allocator's"


def test_cuda_graph_pluggable():
    assert_bitwise_equal(run_scenario("sova", "cuda_graph"), run_scenario("torch", "cuda_graph"))


def test_make_graphed_callables_pluggable():
    assert_bitwise_equal(run_scenario("sova", "graphed_callables"),
                         run_scenario("torch", "graphed_callables"))


def test_cuda_graph_native():
    assert_bitwise_equal(run_scenario("native", "cuda_graph"), run_scenario("torch", "cuda_graph"))


def test_make_graphed_callables_native():
    assert_bitwise_equal(run_scenario("native", "graphed_callables"),
                         run_scenario("torch", "graphed_callables"))


def test_reduce_overhead_native():
    assert_bitwise_equal(run_scenario("native", "reduce_overhead"),
                         run_scenario("torch", "reduce_overhead"))


def test_graph_into_sova_mem_pool_under_pytorchs_allocator():
    run_scenario("torch", "graph_in_sova_mem_pool")


def test_reduce_overhead_default_enable():
    # enable() with no arguments builds and picks the native backend where it
    # can (a compiler and the toolkit's headers: the GPU machines have both),
    # and reduce-overhead then runs, equal to PyTorch's allocator bit for bit.
    assert_bitwise_equal(run_scenario("default", "reduce_overhead"),
                         run_scenario("torch", "reduce_overhead"))


# Graph memory sleeps (docs/sleep-wake.md, "Graph memory"): captured under a
# tag, slept without backup (zeroed on wake once), replayed after each wake
# with no recapture; equal bit for bit to PyTorch's allocator with no sleep.
def test_graph_memory_sleeps_pluggable():
    assert_bitwise_equal(run_scenario("sova", "graph_sleeps"), run_scenario("torch", "graph_sleeps"))


def test_graph_memory_sleeps_native():
    assert_bitwise_equal(run_scenario("native", "graph_sleeps"), run_scenario("torch", "graph_sleeps"))


def test_reduce_overhead_graph_memory_sleeps_default_enable():
    assert_bitwise_equal(run_scenario("default", "reduce_overhead_sleeps"),
                         run_scenario("torch", "reduce_overhead_sleeps"))

def test_reduce_overhead_pluggable_is_a_clear_error():
    # The pluggable allocator cannot give cudagraph trees their checkpoints
    # (docs/python.md): sova's error must say so and name the fix, and eager
    # work goes on.
    out = run_script("""
    import torch, sova.torch
    sova.torch.enable(backend="pluggable")
    model = torch.nn.Linear(64, 64).cuda()
    f = torch.compile(model, mode="reduce-overhead")
    x = torch.randn(8, 64, device="cuda")
    try:
        for _ in range(3):
            f(x)
        torch.cuda.synchronize()
    except Exception as e:
        print("ERR", type(e).__name__, str(e).splitlines()[0])
    else:
        raise SystemExit("reduce-overhead ran under the pluggable allocator: update the docs")
    assert torch.equal(model(x), model(x))
    print("eager ok")
    """)
    assert "does not yet support" in out and "eager ok" in out, out
    assert "sova.torch: torch.compile" in out and "native backend" in out, out


def test_native_backend_statistics_and_errors():
    run_script("""
    import torch, sova, sova.torch
    sova.torch.enable(backend="native")
    assert sova.torch.backend() == "native"
    MiB = 1 << 20
    a = torch.empty(3 * MiB, dtype=torch.uint8, device="cuda")
    s = torch.cuda.memory_stats()
    assert s["allocated_bytes.all.current"] == 3 * MiB, s["allocated_bytes.all.current"]
    assert torch.cuda.memory_allocated() == 3 * MiB
    assert torch.cuda.memory_reserved() == sova.torch.memory_reserved() >= 3 * MiB
    del a
    torch.cuda.synchronize()
    held = torch.cuda.memory_reserved()
    torch.cuda.empty_cache()
    assert torch.cuda.memory_reserved() < held, (held, torch.cuda.memory_reserved())
    try:
        torch.empty(1 << 40, dtype=torch.uint8, device="cuda")
    except torch.OutOfMemoryError as e:
        assert "CUDA out of memory (sova)" in str(e), e
    else:
        raise SystemExit("1 TiB was allocated")
    x = torch.randn(1 << 20, device="cuda")
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        y = x * 2
    x.record_stream(side)          # the backend's recordStream, not a Python patch
    assert sova.torch._orig_record_stream is None
    del x
    assert sova.torch.raw_stats(0)["recordStreamWaits"] >= 1
    try:
        sova.torch.enable(backend="pluggable")
    except sova.SovaError as e:
        print("refused:", e)
    else:
        raise SystemExit("changing the backend was accepted")
    print("ok")
    """)


def test_c10d_collectives_on_sova_tensors_are_safe_and_record_streams_reach_sova():
    # c10d's NCCL process group runs collectives on its own stream. Where it
    # protects a tensor with CUDACachingAllocator::recordStream (C++), the
    # pluggable allocator's record_stream hook must take the call to sova
    # (recordStreamCalls); where it stashes the tensors in the Work until
    # wait() instead (PyTorch 2.11 for async ops), no call is made and none is
    # needed. Either way a tensor dropped right after the collective must not
    # be reused while NCCL still reads it: the results must be exact.
    out = run_script("""
    import os, tempfile, torch, torch.distributed as dist, sova.torch
    sova.torch.enable(backend="pluggable")
    assert sova.torch._orig_record_stream is None, "Tensor.record_stream was patched"
    init = "file://" + os.path.join(tempfile.mkdtemp(), "rendezvous")
    dist.init_process_group("nccl", init_method=init, rank=0, world_size=1,
                            device_id=torch.device("cuda", 0))
    calls = lambda: sova.torch.raw_stats(0)["recordStreamCalls"]
    x = torch.randn(1 << 20, device="cuda")
    x.record_stream(torch.cuda.Stream())          # the hook is live: one call
    assert calls() == 1, calls()
    seen = {}
    n = 1 << 22
    for name in ("all_reduce", "all_reduce async", "all_gather_into_tensor async",
                 "reduce_scatter_tensor async", "broadcast async"):
        before = calls()
        for i in range(20):
            t = torch.full((n,), float(i + 1), device="cuda")
            if name.startswith("all_reduce"):
                work = dist.all_reduce(t, async_op=name.endswith("async"))
                res = t
            elif name.startswith("all_gather"):
                res = torch.empty(n, device="cuda")
                work = dist.all_gather_into_tensor(res, t, async_op=True)
            elif name.startswith("reduce_scatter"):
                res = torch.empty(n, device="cuda")
                work = dist.reduce_scatter_tensor(res, t, async_op=True)
            else:
                work = dist.broadcast(t, src=0, async_op=True)
                res = t
            del t                                  # dropped before wait()
            torch.full((n,), -1.0, device="cuda")  # a block of the same size, at once
            if work is not None:
                work.wait()
            assert bool((res == i + 1).all()), f"{name}: step {i} read a reused block"
        seen[name] = calls() - before
    torch.cuda.synchronize()
    print("recordStreamCalls per collective", seen)
    dist.destroy_process_group()
    """, env={"TORCH_NCCL_AVOID_RECORD_STREAMS": "0"})
    assert "recordStreamCalls per collective" in out
