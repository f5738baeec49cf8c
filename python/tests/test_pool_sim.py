"""sova.Pool and sovaMemPoolGetStats on the host simulation."""
from sim_helpers import run_py


def test_statistics_follow_allocations():
    run_py("""
    import sova
    MiB = 1 << 20
    with sova.Pool(release_threshold=None) as p:
        s0 = p.stats()
        assert s0["usedCurrent"] == 0 and s0["liveBlocks"] == 0
        a = p.allocate(3 * MiB)
        b = p.allocate(1000)
        assert a and b and a != b
        s = p.stats()
        assert s["usedCurrent"] == 3 * MiB + 1000, s
        assert s["liveBlocks"] == 2 and s["allocations"] == 2, s
        assert s["reservedCurrent"] >= 4 * MiB, s
        p.free(a)
        s = p.stats()
        assert s["usedCurrent"] == 1000 and s["usedHigh"] == 3 * MiB + 1000, s
        p.reset_peaks()
        assert p.stats()["usedHigh"] == 1000
        p.free(b)
        p.trim(0)
        assert p.stats()["reservedCurrent"] == 0, p.stats()
    print("ok")
    """)


def test_out_of_memory_and_bad_frees_change_nothing():
    out = run_py("""
    import sova
    p = sova.Pool(max_size=8 << 20)
    a = p.allocate(4 << 20)
    before = p.stats()
    try:
        p.allocate(64 << 20)
    except sova.SovaError as e:
        assert e.code == 2, e          # cudaErrorMemoryAllocation
        print("oom:", e)
    after = p.stats()
    assert after["usedCurrent"] == before["usedCurrent"]
    assert after["failedAllocations"] == before["failedAllocations"] + 1
    for bad in (a + 512, 0xdead000):
        try:
            p.free(bad)
        except sova.SovaError as e:
            assert e.code == 1, e      # cudaErrorInvalidValue
        else:
            raise SystemExit("a foreign pointer was freed")
    assert p.stats()["liveBlocks"] == 1
    p.free(a)
    try:
        p.free(a)
    except sova.SovaError:
        print("double free refused")
    for bad, error in ((-1, ValueError), (1.5, TypeError), (True, TypeError)):
        try:
            p.allocate(bad)
        except error:
            pass
        else:
            raise SystemExit(f"allocate({bad!r}) accepted")
    p.close()
    try:
        p.allocate(1)
    except ValueError as e:
        print("closed:", e)
    """)
    assert "double free refused" in out and "closed" in out


def test_error_messages_say_what_failed_once_and_how_many_devices():
    out = run_py("""
    import sova
    p = sova.Pool(max_size=8 << 20)
    try:
        p.allocate(64 << 20)
    except sova.SovaError as e:
        print("oom:", e)
    try:
        sova.Pool(device=5)
    except sova.SovaError as e:
        print("device:", e)
    """)
    # The pool's words and figures follow (docs/runtime-errors.md, "Bad input, route by route").
    assert "oom: sova: allocating 67108864 bytes failed: cudaErrorMemoryAllocation (out of memory): " \
           "larger than this pool can ever hold" in out, out
    assert "max size 8388608 B" in out, out
    assert out.count("allocating") == 1, out
    assert "device: sova: creating a pool on device 5 failed: device 5 does not exist (1 device)" in out, out


def test_graph_holdings_of_a_pool_without_graphs_and_of_a_closed_one():
    # The per-graph listing itself is tested through C++ and C with the
    # simulation's captures (test/core/test_graph_holdings.cpp,
    # test/capi/test_capi_graphs.cpp) and on the GPU (python/tests_gpu):
    # here, the binding's sizing loop with no graph, and a closed pool.
    run_py("""
    import sova
    p = sova.Pool()
    a = p.allocate(1 << 20)
    assert p.graph_holdings() == [], p.graph_holdings()
    p.free(a)
    p.close()
    try:
        p.graph_holdings()
    except ValueError as e:
        print("closed:", e)
    else:
        raise SystemExit("graph_holdings of a closed pool answered")
    """)
