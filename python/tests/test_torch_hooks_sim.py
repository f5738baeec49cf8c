"""The pluggable allocator's hooks of libsova_torch.so (graph_hooks.hpp and
sova_torch.h) on the host simulation, called through ctypes as PyTorch calls
them: record_stream through the allocator, empty_cache, mem_pool()'s segment
source, the CUDA graph hooks. The GPU suite runs them through PyTorch."""
from sim_helpers import run_py

PRELUDE = """
    import ctypes, sova, sova.torch as st, sova._capi as c
    tl = c.torch_lib()
    def alloc(n, stream=0, fn=None):
        p = (fn or tl.sova_torch_malloc_nothrow)(n, 0, ctypes.c_void_p(stream))
        assert p, st.last_error()
        return p
    def free(p, n, stream=0):
        tl.sova_torch_free(ctypes.c_void_p(p), n, 0, ctypes.c_void_p(stream))
    MiB = 1 << 20
    PER_THREAD = 0x2     # cudaStreamPerThread: a stream of its own on the sim
"""


def test_record_stream_hook_makes_the_free_wait():
    run_py(PRELUDE + """
    hook = tl.sova_torch_record_stream_hook
    hook.restype, hook.argtypes = None, [ctypes.c_void_p, ctypes.c_void_p]
    a = alloc(MiB)
    hook(a, PER_THREAD)
    hook(None, PER_THREAD)                     # an empty tensor's storage: ignored
    free(a, MiB)
    assert st.raw_stats(0)["recordStreamWaits"] == 1, st.raw_stats(0)
    assert st.raw_stats(0)["recordStreamCalls"] == 1, st.raw_stats(0)   # the NULL one is not counted
    b = alloc(MiB)
    free(b, MiB)
    assert st.raw_stats(0)["recordStreamWaits"] == 1   # forgotten with the free
    print("ok")
    """)


def test_empty_cache_all_releases_free_memory():
    run_py(PRELUDE + """
    st.configure(release_threshold=None)
    tl.sova_torch_empty_cache_all.restype = None
    tl.sova_torch_empty_cache_all()            # no pool yet: nothing to do, no pool made
    assert tl.sova_torch_pool(0) is None
    a = alloc(64 * MiB)
    free(a, 64 * MiB)
    held = st.memory_reserved(0)
    assert held >= 64 * MiB, held
    tl.sova_torch_empty_cache_all()
    assert st.memory_reserved(0) < held, st.memory_stats(0)
    print("ok")
    """)


def test_segment_source_off_capture_is_an_ordinary_allocation():
    # On a stream not being captured a segment is allocated on that stream;
    # the captured case needs a capture (python/tests_gpu).
    run_py(PRELUDE + """
    seg = tl.sova_torch_malloc_segment
    seg.restype, seg.argtypes = ctypes.c_void_p, [ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
    a = alloc(2 * MiB, PER_THREAD, fn=seg)
    s = st.raw_stats(0)
    assert s["liveBlocks"] == 1 and s["usedCurrent"] == 2 * MiB, s
    tl.sova_torch_free_segment.restype = None
    tl.sova_torch_free_segment.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                           ctypes.c_void_p]
    tl.sova_torch_free_segment(a, 2 * MiB, 0, PER_THREAD)   # synchronizes, then frees
    s = st.raw_stats(0)
    assert s["liveBlocks"] == 0 and s["usedCurrent"] == 0, s
    tl.sova_torch_free_segment(None, 0, 0, None)            # NULL: nothing
    assert not seg(MiB, 7, None)               # the sim has one device
    assert not seg(MiB, -1, None)
    print("ERR", st.last_error())
    """)


def test_graph_hooks_take_pytorchs_pool_ids():
    # end/release take c10's MempoolId_t (a pair of unsigned long long) by
    # value: two integer registers, as two separate arguments would be.
    run_py(PRELUDE + """
    for name in ("sova_torch_end_allocate_to_pool", "sova_torch_release_pool"):
        fn = getattr(tl, name)
        fn.restype, fn.argtypes = None, [ctypes.c_int, ctypes.c_ulonglong, ctypes.c_ulonglong]
        fn(0, 3, 0)
    a = alloc(MiB)                              # the pool serves as before
    free(a, MiB)
    print("ok")
    """)


def test_pool_segments_come_from_a_segment_pool_of_their_own():
    # The native backend's private pools' segment source: apart from the
    # device's pool, whose figures stay PyTorch's ordinary allocations.
    run_py(PRELUDE + """
    seg = tl.sova_torch_malloc_pool_segment
    seg.restype, seg.argtypes = ctypes.c_void_p, [ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
    unseg = tl.sova_torch_free_pool_segment
    unseg.restype, unseg.argtypes = None, [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
    assert tl.sova_torch_segment_pool(0) is None
    a = alloc(MiB)
    p = alloc(4 * MiB, PER_THREAD, fn=seg)
    assert tl.sova_torch_segment_pool(0) not in (None, tl.sova_torch_pool(0))
    s = st.memory_stats(0)
    assert s["sova.usedCurrent"] == MiB, s                   # the device pool: ordinary allocations alone
    assert s["sova.segments.usedCurrent"] == 4 * MiB, s
    unseg(p, 4 * MiB, 0, PER_THREAD)
    s = st.memory_stats(0)
    assert s["sova.segments.usedCurrent"] == 0 and s["sova.segments.reservedCurrent"] == 0, s
    free(a, MiB)
    print("ok")
    """)


def test_memory_fraction_limits_allocations_as_pytorchs_does():
    # sova_torch_set_memory_fraction is also the pluggable allocator's
    # set_memory_fraction_fn; valid values only here (it throws C++
    # exceptions at bad ones, for PyTorch to turn into RuntimeError).
    run_py(PRELUDE + """
    setf = tl.sova_torch_set_memory_fraction
    setf.restype, setf.argtypes = None, [ctypes.c_double, ctypes.c_int]
    assert tl.sova_torch_memory_fraction(0) == 1.0
    assert tl.sova_torch_memory_limit(0) == 2**64 - 1
    setf(0.25, 0)                                  # the sim's device: 1 GiB
    assert tl.sova_torch_memory_fraction(0) == 0.25
    assert tl.sova_torch_memory_limit(0) == 256 * MiB
    a = alloc(200 * MiB)
    assert not tl.sova_torch_malloc_nothrow(100 * MiB, 0, None)
    assert "per-process memory fraction" in st.last_error() and "out of memory" in st.last_error()
    assert st.memory_stats(0)["num_ooms"] == 1
    assert tl.sova_torch_reserved_bytes(0) <= 256 * MiB
    free(a, 200 * MiB)
    b = alloc(240 * MiB)                           # the freed memory is given back first
    free(b, 240 * MiB)
    setf(1.0, 0)
    assert tl.sova_torch_memory_limit(0) == 2**64 - 1
    c_ = alloc(300 * MiB)
    free(c_, 300 * MiB)
    print("ok")
    """)
