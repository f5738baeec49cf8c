"""sova.torch on a real GPU: each test one fresh process (conftest.run_script)."""
from gpu_helpers import run_script

PRELUDE = """
    import torch, sova, sova.torch
"""


def test_enable_after_cuda_init_is_a_clear_error():
    out = run_script(PRELUDE + """
    x = torch.ones(4, device="cuda")
    try:
        sova.torch.enable(backend="pluggable")
    except sova.SovaError as e:
        assert "before PyTorch initializes CUDA" in str(e), e
        print("refused")
    else:
        raise SystemExit("enable() after CUDA init did not raise")
    assert not sova.torch.is_enabled()
    assert torch.cuda.memory_allocated() > 0  # PyTorch's own allocator still serves
    """)
    assert "refused" in out


def test_statistics_match_what_was_allocated():
    run_script(PRELUDE + """
    sova.torch.enable(release_threshold=None)
    MiB = 1 << 20
    a = torch.empty(3 * MiB, dtype=torch.uint8, device="cuda")
    b = torch.empty(1000, dtype=torch.uint8, device="cuda")
    s = sova.torch.memory_stats()
    assert s["allocated_bytes.all.current"] == 3 * MiB + 1000, s
    assert s["allocation.all.current"] == 2, s
    assert s["reserved_bytes.all.current"] >= 3 * MiB + 1000, s
    assert sova.torch.memory_allocated() == 3 * MiB + 1000
    assert s["sova.allocations"] == 2 and s["num_ooms"] == 0
    del a
    s = sova.torch.memory_stats()
    assert s["allocated_bytes.all.current"] == 1000, s
    assert s["allocated_bytes.all.peak"] == 3 * MiB + 1000, s
    assert s["allocated_bytes.all.freed"] == 3 * MiB, s
    peak_reserved = sova.torch.max_memory_reserved()
    assert peak_reserved >= 3 * MiB
    sova.torch.reset_peak_memory_stats()
    assert sova.torch.max_memory_allocated() == 1000
    torch.cuda.synchronize()
    sova.torch.empty_cache()
    assert sova.torch.memory_reserved() < peak_reserved, sova.torch.memory_stats()
    assert torch.cuda.current_device() == 0 and sova.torch.raw_stats(0)["liveBlocks"] == 1
    print("ok")
    """)


def test_out_of_memory_raises_torch_error_and_training_goes_on():
    out = run_script(PRELUDE + """
    sova.torch.enable(backend="pluggable")
    model = torch.nn.Linear(256, 256).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    def step():
        x = torch.randn(64, 256, device="cuda")
        loss = model(x).square().mean()
        opt.zero_grad(); loss.backward(); opt.step()
        return loss.item()
    step()
    try:
        huge = torch.empty(1 << 40, dtype=torch.uint8, device="cuda")  # 1 TiB
    except torch.OutOfMemoryError as e:
        kind = "torch.OutOfMemoryError"
        msg = str(e)
    except RuntimeError as e:
        kind = "RuntimeError"
        msg = str(e)
    print("KIND", kind, "bound:", sova.torch.out_of_memory_error())
    print("MSG", msg.splitlines()[0])
    assert sova.torch.out_of_memory_error() is torch.OutOfMemoryError, sova.torch.last_error()
    assert "CUDA out of memory (sova)" in msg and "1024.00 GiB" in msg and "largest free block" in msg, msg
    assert kind == "torch.OutOfMemoryError", kind
    assert sova.torch.memory_stats()["num_ooms"] == 1
    print("after", step())
    """)
    assert "after" in out


def test_record_stream_with_a_delayed_kernel():
    # x is read on a side stream behind a long sleep; the allocating stream
    # frees x and at once allocates a block of the same size and fills it.
    # Without record_stream sova reuses x's block at once (the hazard, checked
    # first, so the test can fail); with it, the side stream's result stays
    # right. Both streams are PyTorch side streams, not the legacy default
    # stream, whose implicit synchronization could hide the hazard.
    out = run_script(PRELUDE + """
    sova.torch.enable(backend="pluggable")
    # record_stream reaches sova through the allocator's hook, not a Python patch
    assert sova.torch._orig_record_stream is None
    n = 1 << 22
    main, side = torch.cuda.Stream(), torch.cuda.Stream()
    # Load every kernel the trial uses first: with CUDA's lazy module loading,
    # a kernel's first launch can wait for the running sleep, which orders
    # the streams and hides the hazard (what the first GPU runs of this test saw).
    w = torch.ones(n, device="cuda")
    torch.mul(w, 2, out=torch.empty_like(w)).fill_(7)
    torch.cuda._sleep(1000)
    assert bool((w == 1).all())
    del w
    torch.cuda.synchronize()
    def trial(record):
        with torch.cuda.stream(main):
            x = torch.ones(n, device="cuda")
            y = torch.empty(n, device="cuda")
            side.wait_stream(main)
            with torch.cuda.stream(side):
                torch.cuda._sleep(500_000_000)   # ~0.3 s of spinning on the side stream
                torch.mul(x, 2, out=y)
            if record:
                x.record_stream(side)
            addr = x.data_ptr()
            del x
            z = torch.empty(n, device="cuda")
            same = z.data_ptr() == addr
            z.fill_(7)
            main.wait_stream(side)
        torch.cuda.synchronize()
        return same, bool((y == 2).all())
    same, ok = trial(record=False)
    print("without record_stream: reused", same, "correct", ok)
    assert same, "the test needs the block to be reused at once"
    assert not ok, "the hazard did not show: the test could not catch a missing record_stream"
    same, ok = trial(record=True)
    print("with record_stream: reused", same, "correct", ok)
    assert ok, "record_stream did not protect the block"
    assert sova.torch.memory_stats()["sova.recordStreamWaits"] >= 1
    """)
    assert "with record_stream" in out


def test_dataloader_pinned_memory_and_worker_streams():
    run_script(PRELUDE + """
    sova.torch.enable(backend="pluggable")
    import torch.utils.data as tud
    class DS(tud.Dataset):
        def __len__(self): return 96
        def __getitem__(self, i):
            g = torch.Generator().manual_seed(i)
            return torch.randn(256, 256, generator=g), i
    loader = tud.DataLoader(DS(), batch_size=8, num_workers=2, pin_memory=True)
    streams = [torch.cuda.Stream() for _ in range(3)]
    main = torch.cuda.current_stream()
    results = []
    for k, (cpu, idx) in enumerate(loader):
        assert cpu.is_pinned()
        s = streams[k % 3]
        with torch.cuda.stream(s):
            torch.cuda._sleep(2_000_000)
            gpu = cpu.cuda(non_blocking=True)
        main.wait_stream(s)
        gpu.record_stream(main)
        results.append(((gpu * 3).sum(dim=(1, 2)), cpu.sum(dim=(1, 2)) * 3))
        del gpu
    torch.cuda.synchronize()
    for got, want in results:
        torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-2)
    print("batches", len(results))
    """)


def test_mem_pool_scoped_use_without_enable():
    run_script(PRELUDE + """
    pool = sova.torch.mem_pool()
    before = sova.torch.raw_stats(0)["usedCurrent"]
    with torch.cuda.use_mem_pool(pool):
        x = torch.randn(1 << 20, device="cuda")
    y = torch.randn(1 << 20, device="cuda")   # PyTorch's own allocator
    used = sova.torch.raw_stats(0)["usedCurrent"]
    assert used >= 4 << 20, used              # x's segment came from sova
    assert torch.cuda.memory_stats()["allocated_bytes.all.current"] >= 8 << 20
    del x, y
    print("ok", before, used)
    """)


def test_history_in_pytorch_snapshot_format():
    run_script(PRELUDE + """
    import pickle, tempfile, os
    sova.torch.enable(backend="pluggable")
    sova.torch.record_memory_history(max_entries=1000)
    a = torch.empty(1 << 20, dtype=torch.uint8, device="cuda")
    b = torch.empty(4096, dtype=torch.uint8, device="cuda")
    del a
    snap = sova.torch.snapshot()
    trace = snap["device_traces"][0]
    actions = [(e["action"], e["size"]) for e in trace]
    assert ("alloc", 1 << 20) in actions and ("free_completed", 1 << 20) in actions, actions
    live = [(s["address"], s["total_size"]) for s in snap["segments"]]
    assert live == [(b.data_ptr(), 4096)], live
    path = os.path.join(tempfile.mkdtemp(), "snap.pickle")
    sova.torch.dump_snapshot(path)
    with open(path, "rb") as f:
        again = pickle.load(f)
    assert again["device_traces"][0][0]["action"] == "alloc"
    from torch.cuda import _memory_viz
    html = _memory_viz.trace_plot(again)
    assert len(html) > 1000
    html = _memory_viz.segment_plot(again)
    print("viz ok", len(html))
    """)


def test_options_reach_the_pool():
    run_script(PRELUDE + """
    sova.torch.enable(release_threshold=0, policy="best_fit", remap="thorough", stream_checks=False,
                      max_size=1 << 30)
    x = torch.empty(512 << 20, dtype=torch.uint8, device="cuda")
    try:
        y = torch.empty(768 << 20, dtype=torch.uint8, device="cuda")   # over max_size
    except (torch.OutOfMemoryError, RuntimeError) as e:
        assert "sova" in str(e)
    else:
        raise SystemExit("max_size was not applied")
    try:
        sova.torch.configure(policy="buddy")
    except sova.SovaError as e:
        print("late configure refused:", str(e).splitlines()[0])
    else:
        raise SystemExit("configure after the first allocation was accepted")
    print("ok")
    """)
