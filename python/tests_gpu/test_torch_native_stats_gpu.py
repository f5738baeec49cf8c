"""sova's native PyTorch backend on a real GPU: torch.cuda.memory_stats()
counts CUDA graph pools as PyTorch's allocator does, and
torch.cuda.set_per_process_memory_fraction is honoured (docs/python.md,
"Costs and limits"). Each case runs in a fresh process with
sova.torch.enable(backend="native")."""
from gpu_helpers import run_script

PRELUDE = """
    import gc, torch, sova.torch
    sova.torch.enable(backend="native")
    assert sova.torch.backend() == "native"
    MiB = 1 << 20
"""


def test_graph_pool_counted_as_pytorch_counts_it():
    # A capture's private pool: its segment (2 MiB of the small pool) and its
    # live block in the per-pool keys; the CUDA generator's two seed/offset
    # holders (sova blocks, 512 bytes each at PyTorch's sizes) in small_pool.
    run_script(PRELUDE + """
    s = torch.cuda.Stream()
    g = torch.cuda.CUDAGraph()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        a = torch.ones(128, device="cuda")
        before = torch.cuda.memory_stats()
        g.capture_begin()
        b = a.clone()
        for _ in range(5):
            b = b.clone() + 1
        g.capture_end()
    torch.cuda.current_stream().wait_stream(s)
    gc.collect()
    after = torch.cuda.memory_stats()
    delta = lambda k: after[k] - before[k]
    assert delta("segment.small_pool.current") == 1, delta("segment.small_pool.current")
    assert delta("reserved_bytes.small_pool.current") == 2 * MiB, delta("reserved_bytes.small_pool.current")
    assert delta("active.small_pool.current") == 3, delta("active.small_pool.current")
    assert delta("active_bytes.small_pool.current") == 512 + 1024, delta("active_bytes.small_pool.current")
    g.replay()
    assert b.sum().item() == 6 * 128
    del g
    gc.collect()
    torch.cuda.empty_cache()
    end = torch.cuda.memory_stats()
    assert end["active.small_pool.current"] - before["active.small_pool.current"] == 1   # b alone
    assert end["segment.small_pool.current"] - before["segment.small_pool.current"] == 1
    assert sova.torch.memory_stats()["sova.segments.usedCurrent"] == 2 * MiB
    print("ok")
    """)


def test_shared_pool_reserves_one_segment_less():
    # test_cuda.py's test_graph_two_successive: two graphs sharing a pool
    # reserve one small segment (2 MiB) less than two pools.
    run_script(PRELUDE + """
    def run(share):
        torch.cuda.synchronize(); torch.cuda.empty_cache()
        a = torch.ones(1000, device="cuda")
        s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
        g0, g1 = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
        with torch.cuda.stream(s):
            g0.capture_begin(); b = a.clone() + 1; g0.capture_end()
            g1.capture_begin(*((g0.pool(),) if share else ())); c = b.clone() + 1; g1.capture_end()
        torch.cuda.current_stream().wait_stream(s)
        reserved = torch.cuda.memory_stats()["reserved_bytes.all.current"]
        del a, b, c, g0, g1
        torch.cuda.synchronize(); torch.cuda.empty_cache()
        return reserved
    apart, shared = run(False), run(True)
    assert apart - shared == 2 * MiB, (apart, shared)
    print("ok")
    """)


def test_memory_fraction_is_honoured():
    run_script(PRELUDE + """
    assert torch.cuda.get_per_process_memory_fraction(0) == 1.0
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.empty_cache()
    torch.cuda.set_per_process_memory_fraction(0.25, 0)
    assert torch.cuda.get_per_process_memory_fraction(0) == 0.25
    x = torch.empty(int(total * 0.2), dtype=torch.int8, device="cuda")
    try:
        torch.empty(int(total * 0.1), dtype=torch.int8, device="cuda")
    except torch.OutOfMemoryError as e:
        assert "per-process memory fraction" in str(e) and "out of memory" in str(e), e
    else:
        raise SystemExit("an allocation beyond the fraction succeeded")
    del x
    y = torch.empty(int(total * 0.24), dtype=torch.int8, device="cuda")   # the freed memory is given back first
    del y
    torch.cuda.set_per_process_memory_fraction(1.0, 0)
    z = torch.empty(int(total * 0.3), dtype=torch.int8, device="cuda")
    del z
    print("ok")
    """)


def test_pytorch_words_in_out_of_memory():
    run_script(PRELUDE + """
    import re
    try:
        torch.empty(1024 * 1024 * 1024 * 800000000, dtype=torch.int8, device="cuda")
    except torch.OutOfMemoryError as e:
        assert re.search("Tried to allocate 800000000.00 GiB. GPU 0 has a total capacity of", str(e)), e
    else:
        raise SystemExit("800000000 GiB were allocated")
    try:
        torch.empty(1024 * 1024 * 1024 * 8000000000, dtype=torch.int8, device="cuda")
    except RuntimeError as e:
        assert "Tried to allocate more than 1EB memory" in str(e), e
    else:
        raise SystemExit("8 EB were allocated")
    print("ok")
    """)
