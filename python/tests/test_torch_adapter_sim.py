"""The PyTorch adapter (libsova_torch.so) on the host simulation, called as
PyTorch calls it (alloc(size, device, stream) / free(ptr, size, device,
stream)) but through ctypes: statistics in PyTorch's key names, the snapshot
format, record_stream's waits, out-of-memory messages, configure-once.
PyTorch itself is not needed (python/tests_gpu runs the same through PyTorch)."""
from sim_helpers import run_py

PRELUDE = """
    import ctypes, sova, sova.torch as st, sova._capi as c
    tl = c.torch_lib()
    def alloc(n, stream=0):
        p = tl.sova_torch_malloc_nothrow(n, 0, ctypes.c_void_p(stream))
        assert p, st.last_error()
        return p
    def free(p, n, stream=0):
        tl.sova_torch_free(ctypes.c_void_p(p), n, 0, ctypes.c_void_p(stream))
    MiB = 1 << 20
"""


def test_memory_stats_in_torch_keys():
    run_py(PRELUDE + """
    st.configure(release_threshold=None)
    a, b = alloc(3 * MiB), alloc(1000)
    s = st.memory_stats(0)
    assert s["allocated_bytes.all.current"] == 3 * MiB + 1000, s
    assert s["allocation.all.current"] == 2 and s["allocation.all.peak"] == 2, s
    assert s["reserved_bytes.all.current"] >= 4 * MiB, s
    assert s["segment.all.current"] >= 1 and s["num_ooms"] == 0, s
    assert s["sova.liveBlocks"] == 2 and "sova.fragmentation" in s
    free(a, 3 * MiB)
    s = st.memory_stats(0)
    assert s["allocated_bytes.all.current"] == 1000, s
    assert s["allocated_bytes.all.peak"] == 3 * MiB + 1000, s
    assert s["allocated_bytes.all.allocated"] == 3 * MiB + 1000, s
    assert s["allocated_bytes.all.freed"] == 3 * MiB, s
    peak = st.max_memory_reserved(0)
    st.reset_peak_memory_stats(0)
    assert st.max_memory_allocated(0) == 1000
    assert st.memory_stats(0)["allocation.all.peak"] == 1
    st.empty_cache(0)
    assert st.memory_reserved(0) < peak, st.memory_stats(0)
    free(b, 1000)
    assert st.memory_allocated(0) == 0
    print("ok")
    """)


def test_out_of_memory_message_and_count():
    out = run_py(PRELUDE + """
    st.configure(max_size=64 * MiB)
    a = alloc(40 * MiB)
    p = tl.sova_torch_malloc_nothrow(100 * MiB, 0, None)
    assert not p
    msg = st.last_error()
    print(msg)
    # PyTorch's words, which scripts and PyTorch's own tests match
    assert "CUDA out of memory (sova). Tried to allocate 100.00 MiB. GPU 0 has a total capacity of 1.00 GiB of which" in msg, msg
    assert "40.00 MiB live in 1 blocks" in msg and "largest free block" in msg, msg
    assert st.memory_stats(0)["num_ooms"] == 1
    b = alloc(10 * MiB)                       # the pool still serves
    free(a, 40 * MiB); free(b, 10 * MiB)
    """)
    assert "Tried to allocate" in out


def test_options_are_fixed_at_the_first_allocation():
    out = run_py(PRELUDE + """
    assert set(st.TORCH_DEFAULTS) == {"remap", "sleep_pin_ahead", "sleep_host_budget"}
    opts = st.configure(policy="best_fit")
    assert opts.remap == "off" and opts.policy == "best_fit"   # sova.torch's default remap
    assert opts.sleep_pin_ahead and opts.sleep_host_budget > 0  # tags pin ahead, within half the host
    st.configure(policy="best_fit")                 # the same again: fine
    free(alloc(MiB), MiB)
    try:
        st.configure(policy="buddy")
    except sova.SovaError as e:
        print("refused:", e)
    """)
    assert "options apply only before the first allocation" in out


def test_bad_device_is_refused():
    out = run_py(PRELUDE + """
    p = tl.sova_torch_malloc_nothrow(MiB, 5, None)   # the sim has one device
    assert not p
    print("ERR", st.last_error())
    p = tl.sova_torch_malloc_nothrow(MiB, -1, None)
    assert not p
    print("ERR", st.last_error())
    """)
    assert "cannot create the pool of device 5" in out and "device -1 out of range" in out


def test_record_stream_makes_the_free_wait():
    run_py(PRELUDE + """
    PER_THREAD = 0x2     # cudaStreamPerThread: a stream of its own on the sim
    a = alloc(MiB)
    assert tl.sova_torch_record_stream(ctypes.c_void_p(a), ctypes.c_void_p(PER_THREAD)) == 0
    assert tl.sova_torch_record_stream(ctypes.c_void_p(a), ctypes.c_void_p(0)) == 0  # own stream
    free(a, MiB)
    s = st.raw_stats(0)
    assert s["recordStreamWaits"] == 1, s      # one wait: the other stream only
    b = alloc(MiB)
    free(b, MiB)
    assert st.raw_stats(0)["recordStreamWaits"] == 1   # forgotten with the free
    print("ok")
    """)


def test_history_is_a_pytorch_snapshot():
    run_py(PRELUDE + """
    import pickle, os, tempfile
    st.configure()
    before = alloc(2 * MiB)                 # not recorded
    st.record_memory_history(max_entries=3)
    a = alloc(MiB); b = alloc(4096)
    free(a, MiB)
    snap = st.snapshot()
    assert set(snap) == {"segments", "device_traces", "allocator_settings"}
    trace = snap["device_traces"][0]
    # max_entries=3 keeps the newest three of four events
    assert [(e["action"], e["size"]) for e in trace] == [
        ("alloc", 4096), ("free_requested", MiB), ("free_completed", MiB)], trace
    assert all(e["stream"] == 0 and e["time_us"] > 0 and e["frames"] == [] for e in trace)
    segs = snap["segments"]
    assert [(s["address"], s["total_size"]) for s in segs] == [(b, 4096)], segs
    blk = segs[0]["blocks"][0]
    assert blk["state"] == "active_allocated" and blk["size"] == 4096
    path = os.path.join(tempfile.mkdtemp(), "s.pickle")
    st.dump_snapshot(path)
    with open(path, "rb") as f:
        assert pickle.load(f) == snap
    st.record_memory_history(None)
    free(b, 4096)
    assert len(st.snapshot()["device_traces"][0]) == 3   # stopped: nothing more recorded
    st.record_memory_history(True)
    assert st.snapshot()["device_traces"][0] == []       # starting again clears
    for bad in (-1, 2.0):
        try:
            st.record_memory_history(True, max_entries=bad)
        except ValueError:
            pass
        else:
            raise SystemExit("bad max_entries accepted")
    free(before, 2 * MiB)
    print("ok")
    """)


def test_mem_pool_is_refused_under_the_pluggable_backend():
    # enable() needs PyTorch; what it leaves behind for the pluggable backend
    # (the backend's name) is set directly. PyTorch's CUDAPluggableAllocator
    # refuses every MemPool (seen on the GPU: nccl_mem_pool.py's pluggable
    # run); sova says why and what to use, before touching PyTorch.
    out = run_py(PRELUDE + """
    st._backend = "pluggable"
    try:
        st.mem_pool()
    except sova.SovaError as e:
        print("refused:", e)
    """)
    assert "refused: sova.torch.mem_pool: not available under enable()'s pluggable backend" in out
    assert 'backend="native"' in out
