"""Bad arguments get a clear error and change nothing: sizes and addresses
that ctypes would wrap modulo 2**64, None for a pointer, and refused frees
that say what the pointer was (the C API's sovaGetLastErrorMessage), on the
host simulation. The no-GPU message: test_package.py."""
from sim_helpers import run_py


def test_sizes_beyond_size_t_and_negative_sizes_are_refused():
    out = run_py("""
    import sova
    from sova import _alloc
    p = sova.Pool(release_threshold=None)
    for size, error in (((1 << 64), OverflowError), ((1 << 64) + 8192, OverflowError),
                        (1 << 70, OverflowError), (-1, ValueError), (-(1 << 64), ValueError),
                        (None, TypeError), (4096.0, TypeError), (True, TypeError)):
        for allocate in (p.allocate, lambda s: _alloc.malloc(s, 0)):
            try:
                allocate(size)
            except error as e:
                assert "size" in str(e), e
            else:
                raise SystemExit(f"size {size!r} accepted")
    assert p.stats()["allocations"] == 0 and p.stats()["usedCurrent"] == 0, p.stats()
    try:
        p.trim(1 << 64)
    except OverflowError:
        pass
    else:
        raise SystemExit("trim(2**64) accepted")
    try:
        sova.Pool(max_size=1 << 64)
    except OverflowError:
        pass
    else:
        raise SystemExit("max_size=2**64 accepted")
    # The largest size_t is a size like any other: out of memory, not wrapped.
    try:
        p.allocate((1 << 64) - 1)
    except sova.SovaError as e:
        assert e.code == 2, e
        print("largest:", e)
    print("ok")
    """)
    assert "ok" in out and "largest:" in out


def test_free_of_none_or_a_wrapped_address_is_refused_clearly():
    run_py("""
    import sova
    from sova import _alloc
    p = sova.Pool()
    a = p.allocate(4096)
    for bad, error in ((None, TypeError), (-1, ValueError), (a + (1 << 64), OverflowError), ("0x10", TypeError)):
        for free in (p.free, lambda ptr: _alloc.free(ptr, 0)):
            try:
                free(bad)
            except error as e:
                assert "ptr" in str(e) and "format" not in str(e), e
            else:
                raise SystemExit(f"free({bad!r}) accepted")
    try:
        p.free(a, stream=None)
    except TypeError as e:
        assert "stream" in str(e), e
    assert p.stats()["liveBlocks"] == 1
    p.free(0)       # NULL: nothing to do, as sovaFreeAsync(NULL)
    p.free(a)
    assert p.stats()["liveBlocks"] == 0
    print("ok")
    """)


def test_refused_frees_say_what_happened():
    out = run_py("""
    import sova
    from sova import _alloc
    p = sova.Pool(release_threshold=None)
    a = p.allocate(10000)
    def refused(ptr, free=p.free):
        try:
            free(ptr)
        except sova.SovaError as e:
            assert e.code == 1, e
            return str(e)
        raise SystemExit(f"free({ptr:#x}) accepted")
    m = refused(a + 512)
    assert f"inside a block allocated at {a:#x} (10000 bytes); free its start" in m, m
    m = refused(0xdead000)
    assert "not allocated by sova" in m, m
    m = refused(0xdead000, free=lambda ptr: _alloc.free(ptr, 0))
    assert "not allocated by sova" in m, m
    p.free(a)
    m = refused(a)
    assert "already freed (cudaErrorInvalidValue)" in m, m
    print(m)
    """)
    assert "already freed" in out
