"""sova._alloc, the allocation calls under sova.cupy and sova.rmm, on the host
simulation (no GPU, no CuPy or RMM needed): stream-ordered malloc/free on the
current pool, its figures, and the errors the adapters turn into their
frameworks' (MemoryError for out of memory; SovaError, nothing changed, for a
bad free)."""
from sim_helpers import run_py


def test_malloc_free_and_pool_figures():
    run_py("""
    from sova import _alloc
    assert _alloc.malloc(0, 0) == 0
    base = _alloc.pool_bytes("used")
    a = _alloc.malloc(3 << 20, 0)
    b = _alloc.malloc(1000, 0)
    assert a and b and a != b and a % 512 == 0 and b % 512 == 0
    assert _alloc.pool_bytes("used") == base + (3 << 20) + 1000
    assert _alloc.pool_bytes("reserved") >= (3 << 20) + 1000
    _alloc.free(a, 0)
    assert _alloc.pool_bytes("used") == base + 1000
    assert _alloc.pool_bytes("used_high") >= base + (3 << 20) + 1000
    _alloc.free(b, 0)
    assert _alloc.pool_bytes("used") == base
    print("ok")
    """)


def test_out_of_memory_is_a_memory_error_and_changes_nothing():
    run_py("""
    from sova import _alloc
    keep = _alloc.malloc(1 << 20, 0)
    used = _alloc.pool_bytes("used")
    try:
        _alloc.malloc(64 << 30, 0)  # the simulated device has 1 GiB
    except MemoryError as e:
        assert isinstance(e, _alloc.SovaOutOfMemory) and "out of memory" in str(e), e
    else:
        raise AssertionError("no MemoryError")
    assert _alloc.pool_bytes("used") == used
    _alloc.free(keep, 0)
    print("ok")
    """)


def test_a_bad_free_raises_and_changes_nothing():
    run_py("""
    import sova
    from sova import _alloc
    p = _alloc.malloc(4096, 0)
    used = _alloc.pool_bytes("used")
    for bad in (p + 512, 0x1000):
        try:
            _alloc.free(bad, 0)
        except sova.SovaError as e:
            assert "cudaErrorInvalidValue" in str(e), e
        else:
            raise AssertionError("freeing %#x did not raise" % bad)
    assert _alloc.pool_bytes("used") == used
    _alloc.free(p, 0)
    try:
        _alloc.free(p, 0)
    except sova.SovaError:
        pass
    else:
        raise AssertionError("double free did not raise")
    assert _alloc.pool_bytes("used") == used - 4096
    print("ok")
    """)
