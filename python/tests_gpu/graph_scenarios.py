"""Scenarios of the CUDA graph GPU tests (test_torch_graphs_gpu.py).

Each runs in a fresh process under one allocator, chosen by ``mode``:
"torch" (PyTorch's own), "sova" (sova.torch.enable(backend="pluggable")),
"native" (sova.torch.enable(backend="native")) or "default" (sova.torch.enable()
with no arguments: the native backend where it builds), and saves what it computed
with torch.save, so that the test can check that sova's results equal
PyTorch's bit for bit: the same kernels on the same inputs, with
deterministic algorithms. Inputs come from a CPU generator, so that no
allocator can change them. Each scenario also checks itself (replay against
eager, memory returned) and prints what it measured.

    python graph_scenarios.py MODE SCENARIO OUT.pt
"""
import contextlib
import gc
import os
import sys
import time

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import torch  # noqa: E402

MODES = ("torch", "sova", "native", "default")


def setup(mode: str) -> None:
    if mode not in MODES:
        raise SystemExit(f"mode must be one of {MODES}, not {mode!r}")
    if mode != "torch":
        import sova.torch
        if mode == "default":  # enable() as a user calls it: "auto", native where it builds
            sova.torch.enable()
            assert sova.torch.backend() == "native", sova.torch.backend()
        else:
            sova.torch.enable(backend="pluggable" if mode == "sova" else "native")
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)


def sova_used() -> int:
    """Bytes live in sova's pools of device 0: its pool and the native backend's
    segment pool (0 under PyTorch's allocator)."""
    import sova.torch
    if not sova.torch.is_enabled():
        return 0
    return sova.torch.memory_stats(0)["sova.usedCurrent"] + sova.torch.memory_stats(0).get("sova.segments.usedCurrent", 0)


def sova_used_after_a_call() -> int:
    """sova_used() after one allocation and free: CUDA reports a destroyed graph
    from a thread of its own, and the pool takes the graph's memory back at its
    next call (docs/graphs.md)."""
    torch.empty(256, device="cuda")
    return sova_used()


def wait_for(predicate, seconds: float = 5.0) -> bool:
    """Polls `predicate` until it holds or `seconds` pass."""
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def mlp(width: int = 256) -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(64, width), torch.nn.ReLU(),
                               torch.nn.Linear(width, 64)).cuda()


def cpu_randn(gen: torch.Generator, *shape) -> torch.Tensor:
    return torch.randn(*shape, generator=gen).cuda()


def throwaway_capture(model, x, stream) -> int:
    """Captures and destroys one graph; returns the bytes of sova's pool it
    left in use. PyTorch keeps state made at a process's first capture (it
    does under its own allocator too: a graph pool segment stays after the
    graph is gone), so a check that a graph gives back all it took starts
    after one."""
    before = sova_used()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=stream):
        model(x)
    del g
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    return sova_used_after_a_call() - before


def cuda_graph(mode: str) -> dict:
    """torch.cuda.graph: capture, replays equal to eager, memory returned on destroy."""
    gen = torch.Generator().manual_seed(1)
    model = mlp()
    static_in = cpu_randn(gen, 32, 64)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):   # warm up on the capture stream: cuBLAS's workspace exists
        for _ in range(3):
            model(static_in)
    torch.cuda.current_stream().wait_stream(s)
    model(static_in)   # and on the current stream, where the eager comparison runs: cuBLAS
    torch.cuda.synchronize()   # keeps a workspace per stream, which must not count as the graph's
    first_capture_keeps = throwaway_capture(model, static_in, s)
    before = sova_used()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        hidden = model[1](model[0](static_in))   # an intermediate freed inside the capture
        static_out = model[2](hidden)
        del hidden
    during = sova_used()
    if mode == "sova":   # pluggable: the capture's allocations are sova's graph memory, listed per graph
        import sova.torch
        holdings = sova.torch.graph_holdings()
        print("graph holdings", holdings)
        assert len(holdings) >= 1 and holdings[-1]["outputBytes"] > 0, holdings
        assert holdings[-1]["heldBytes"] >= holdings[-1]["outputBytes"], holdings
    outs = []
    for _ in range(5):
        static_in.copy_(cpu_randn(gen, 32, 64))
        g.replay()
        eager = model(static_in)
        assert torch.equal(static_out, eager), "a replay differs from eager execution"
        outs.append(static_out.detach().cpu())   # detached: a copy with autograd history would keep
        # the graph's saved activations (its memory) alive
    torch.cuda.synchronize()
    del g, static_out, eager
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()   # PyTorch's pools (native backend) return their segments here
    returned = wait_for(lambda: sova_used_after_a_call() <= before)
    if mode == "sova":
        import sova.torch
        assert wait_for(lambda: len(sova.torch.graph_holdings()) < len(holdings)), sova.torch.graph_holdings()
    print(f"sova used: before capture {before}, after capture {during}, "
          f"after destroy {sova_used()}; PyTorch's first capture kept {first_capture_keeps}")
    if mode != "torch":
        assert during > before, "the capture took no memory from sova"
        assert returned, f"graph memory not returned: {sova_used()} > {before}"
    return {"outs": torch.stack(outs).cpu()}


def graphed_callables(mode: str) -> dict:
    """make_graphed_callables: a few training steps; their losses and weights."""
    gen = torch.Generator().manual_seed(2)
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sample = cpu_randn(gen, 32, 64)
    graphed = torch.cuda.make_graphed_callables(model, (sample,))
    losses = []
    for _ in range(6):
        x, target = cpu_randn(gen, 32, 64), cpu_randn(gen, 32, 64)
        loss = (graphed(x) - target).square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.detach().clone())
    torch.cuda.synchronize()
    print("losses", [round(float(v), 6) for v in losses])
    return {"losses": torch.stack(losses).cpu(),
            "params": [p.detach().cpu().clone() for p in model.parameters()]}


def graph_in_sova_mem_pool(mode: str) -> dict:
    """torch.cuda.graph(pool=sova.torch.mem_pool().id) with PyTorch's allocator
    the process's: the graph's segments come from sova, asked for during the
    capture, and go back once the graph and the pool are gone."""
    import sova.torch
    assert mode == "torch", "this scenario keeps PyTorch's allocator"
    gen = torch.Generator().manual_seed(3)
    model = mlp(width=2048)   # blocks of 2048x32 floats: segments beyond the small pool
    static_in = cpu_randn(gen, 32, 64)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        model(static_in)
    torch.cuda.current_stream().wait_stream(s)
    model(static_in)
    torch.cuda.synchronize()
    throwaway_capture(model, static_in, s)   # PyTorch's first-capture state, in its own pool
    pool = sova.torch.mem_pool()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, pool=pool.id, stream=s):
        static_out = model(static_in)
    held = sova.torch.raw_stats(0)["usedCurrent"]
    assert held > 0, "the graph's memory did not come from sova"
    outs = []
    for _ in range(4):
        static_in.copy_(cpu_randn(gen, 32, 64))
        g.replay()
        assert torch.equal(static_out, model(static_in)), "a replay differs from eager execution"
        outs.append(static_out.detach().clone())   # no autograd history into the graph's pool
    torch.cuda.synchronize()
    del g, static_out
    gc.collect()
    torch.cuda.synchronize()
    del pool
    gc.collect()
    torch.cuda.empty_cache()
    left = sova.torch.raw_stats(0)["usedCurrent"]
    print(f"sova held {held} during the graph's life, {left} after")
    segments = [(s["segment_pool_id"], s["total_size"], [(b["size"], b["state"]) for b in s["blocks"]])
                for s in torch.cuda.memory_snapshot() if tuple(s["segment_pool_id"]) != (0, 0)]
    assert left == 0, f"segments not returned to sova: {left} bytes live; PyTorch's pool segments {segments}"
    return {"outs": torch.stack(outs).cpu()}


def reduce_overhead(mode: str) -> dict:
    """torch.compile(mode="reduce-overhead") (cudagraph trees, default checks):
    inference with several shapes, then training steps."""
    import torch._dynamo
    from torch._dynamo.utils import counters
    gen = torch.Generator().manual_seed(4)
    model = mlp()
    infer = torch.compile(model, mode="reduce-overhead")
    outs = []
    with torch.no_grad():
        for batch in (8, 32, 8, 128, 32, 8):
            for _ in range(3):   # warm-up, recording, replay
                outs.append(infer(cpu_randn(gen, batch, 64)).clone())
    train_model = mlp()
    opt = torch.optim.SGD(train_model.parameters(), lr=0.05)
    train = torch.compile(train_model, mode="reduce-overhead")
    losses = []
    for _ in range(8):
        torch.compiler.cudagraph_mark_step_begin()
        x, target = cpu_randn(gen, 16, 64), cpu_randn(gen, 16, 64)
        loss = (train(x) - target).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.detach().clone())
    torch.cuda.synchronize()
    skips = dict(counters["inductor"])
    print("inductor counters", {k: v for k, v in skips.items() if "cudagraph" in k})
    assert skips.get("cudagraph_skips", 0) == 0, f"cudagraphs were skipped: {skips}"
    segments = sum(s["total_size"] for s in torch.cuda.memory_snapshot())
    used = sova_used()
    print(f"graph pool segments {segments} bytes; sova used {used}")
    if mode in ("native", "default"):
        assert segments > 0 and used >= segments, "the graph pools' segments are not sova's"
    result = {"outs": [o.cpu() for o in outs], "losses": torch.stack(losses).cpu(),
              "params": [p.detach().cpu().clone() for p in train_model.parameters()]}
    del infer, train, outs, losses, loss
    torch._dynamo.reset()   # drops the cudagraph trees and their graphs
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    left = sum(s["total_size"] for s in torch.cuda.memory_snapshot())
    print(f"graph pool segments after reset: {left} bytes; sova used {sova_used()}")
    if mode in ("native", "default"):
        assert left == 0, f"graph pools kept {left} bytes after reset and empty_cache"
        assert sova_used() < used, "no memory returned to sova"
    return result


def graph_tag(mode: str):
    """The tag graph memory is captured under: "graphs" under sova (its own
    pool, which can sleep alone), nothing under PyTorch's allocator."""
    if mode == "torch":
        return contextlib.nullcontext()
    import sova.torch
    return sova.torch.tag("graphs")


def graphs_sleep_and_wake(mode: str, zero: bool) -> None:
    """Puts tag "graphs" to sleep without backup (graph memory is scratch
    between replays) and wakes it: its memory must go back to the device
    while asleep. Nothing under PyTorch's allocator, the reference run."""
    if mode == "torch":
        return
    import sova.torch as st
    torch.cuda.synchronize()
    held = st.tag_stats("graphs")["reservedCurrent"]
    assert held > 0, "no graph memory in the tag's pool: the capture did not allocate under the tag"
    free_awake = torch.cuda.mem_get_info()[0]
    st.sleep(tags="graphs", backup=False, zero=zero)
    freed = torch.cuda.mem_get_info()[0] - free_awake
    assert st.tag_stats("graphs")["reservedCurrent"] == 0, "an asleep tag still holds device memory"
    assert freed >= held, f"sleep gave the device {freed} bytes of the graphs' {held}"
    st.wake(tags="graphs")


def graph_sleeps(mode: str) -> dict:
    """Graph memory sleeps (docs/sleep-wake.md, "Graph memory"): a graph
    captured under a tag holds its memory in that tag's pool; the tag sleeps
    without backup (its memory the device's meanwhile, zeroed on wake when
    asked), wakes at the same addresses, and the graph replays equal to eager
    execution with no recapture. The static input lives outside the tag."""
    gen = torch.Generator().manual_seed(5)
    model = mlp(width=2048)   # blocks beyond PyTorch's small pool
    static_in = cpu_randn(gen, 32, 64)   # untagged: the device's pool, which never sleeps
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            model(static_in)
    torch.cuda.current_stream().wait_stream(s)
    model(static_in)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with graph_tag(mode), torch.cuda.graph(g, stream=s):
        static_out = model(static_in)
    outs = []
    for zero in (False, True, False):
        graphs_sleep_and_wake(mode, zero)
        if zero and mode != "torch":   # the graph's output, not yet written again: zeros
            assert int(static_out.abs().max()) == 0, "zero=True: graph memory not zeroed on wake"
        static_in.copy_(cpu_randn(gen, 32, 64))
        g.replay()
        assert torch.equal(static_out, model(static_in)), "a replay after wake differs from eager execution"
        outs.append(static_out.detach().clone())
    torch.cuda.synchronize()
    return {"outs": torch.stack(outs).cpu()}


def reduce_overhead_sleeps(mode: str) -> dict:
    """torch.compile(mode="reduce-overhead") inference recorded under a tag:
    the cudagraph trees' pool segments sleep with the tag, and the compiled
    model runs on after wake, equal to PyTorch's allocator with no sleep."""
    from torch._dynamo.utils import counters
    gen = torch.Generator().manual_seed(6)
    model = mlp()
    infer = torch.compile(model, mode="reduce-overhead")
    outs = []
    with torch.no_grad():
        with graph_tag(mode):   # warm-up and recording: the graphs' memory is the tag's
            for batch in (8, 32):
                for _ in range(3):
                    # to the host at once: a copy on the device would be the
                    # tag's memory too, and discarded by the sleeps below
                    outs.append(infer(cpu_randn(gen, batch, 64)).cpu())
        for zero in (False, True):
            graphs_sleep_and_wake(mode, zero)
            for batch in (8, 32, 8):
                outs.append(infer(cpu_randn(gen, batch, 64)).clone())
    torch.cuda.synchronize()
    skips = dict(counters["inductor"])
    assert skips.get("cudagraph_skips", 0) == 0, f"cudagraphs were skipped: {skips}"
    return {"outs": [o.cpu() for o in outs]}


SCENARIOS = {f.__name__: f for f in (cuda_graph, graphed_callables, graph_in_sova_mem_pool,
                                     reduce_overhead, graph_sleeps, reduce_overhead_sleeps)}

if __name__ == "__main__":
    mode, scenario, out = sys.argv[1:4]
    setup(mode)
    torch.save(SCENARIOS[scenario](mode), out)
    print("saved", scenario, mode)
