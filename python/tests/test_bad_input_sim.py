"""Bad input from Python, on the simulation: refused before anything changes,
with a message that says what was wrong (docs/runtime-errors.md, "Bad input,
route by route"; docs/python.md: a stream value the driver does not know as
a stream is a sova.SovaError).

Each body runs in a fresh interpreter (scenario_pool_helpers.run_scenario):
the prelude's `refused` and `stable` helpers, and the statistics compared
whole (every counter but those that move with time).
"""
from scenario_pool_helpers import run_scenario

CUDA_ERROR_INVALID_RESOURCE_HANDLE = 400


def test_allocate_on_a_value_that_is_no_stream_is_refused_and_changes_nothing():
    run_scenario(r"""
    with sova.Pool() as p:
        p.free(p.allocate(MiB))          # one stream state, a block cached
        for stream in (12345, 54321, 99999, 0x7000):
            before = stable(p.stats())
            e = refused(lambda: p.allocate(4096, stream=stream), sova.SovaError, words=("names no stream",),
                        what=f"allocate(stream={stream})", promise="an invalid stream is refused")
            assert e.code == 400, f"stream {stream}: code {e.code}"
            unchanged(p, before, f"allocate(stream={stream})")
            assert p.stats()["activeStreams"] <= before.get("activeStreams", 1), p.stats()
    print("ok")
    """)


def test_free_on_a_value_that_is_no_stream_makes_no_stream_state():
    run_scenario(r"""
    with sova.Pool() as p:
        a = p.allocate(MiB)
        fill(a, MiB, 0x3c)
        for stream in (99999, 12345, 0x7000):
            before = p.stats()
            e = refused(lambda: p.free(a, stream), sova.SovaError, what=f"free(stream={stream})",
                        words=("names no stream", "the block stays live"), promise="an invalid stream is refused")
            assert e.code == 400, f"stream {stream}: code {e.code}"
            after = p.stats()
            assert after["streamStates"] == before["streamStates"], (before["streamStates"], after["streamStates"])
            assert after["activeStreams"] <= before["activeStreams"], (before["activeStreams"], after["activeStreams"])
            unchanged(p, stable(before), f"free(stream={stream})")
        assert intact(a, MiB, 0x3c), "a refused free touched the block"
        p.free(a)
    print("ok")
    """)


def test_beyond_max_size_is_refused_with_the_cache_kept():
    # The case: 1 GiB + 1 on a pool of max_size 1 GiB with 1 MiB cached.
    out = run_scenario(r"""
    with sova.Pool(max_size=1 << 30) as p:
        keep = p.allocate(MiB)
        p.free(p.allocate(MiB))
        before = stable(p.stats())
        assert before["cachedBytes"] >= MiB, before
        e = refused(lambda: p.allocate((1 << 30) + 1), sova.SovaError, what="1 GiB + 1",
                    words=("larger than this pool can ever hold", "max size 1073741824 B"),
                    promise="out of memory, the pool unchanged")
        assert e.code == CUDA_ERROR_MEMORY_ALLOCATION, e.code
        after = stable(p.stats())
        assert after["failedAllocations"] == before["failedAllocations"] + 1, (before, after)
        changed = {k: v for k, v in diff(before, after).items() if k != "failedAllocations"}
        assert not changed, f"a refused allocation changed {changed}"
        print("message:", e)
        p.free(keep)
    print("ok")
    """)
    assert "no max size" not in out


def test_out_of_memory_without_a_limit_says_so():
    run_scenario(r"""
    with sova.Pool() as p:
        e = refused(lambda: p.allocate(2 << 30), sova.SovaError, what="2 GiB on a 1 GiB device",
                    words=("no max size", "device memory"))
        assert "max size 0 B" not in str(e), str(e)
    print("ok")
    """)


def test_a_closed_pool_and_a_destroyed_handle_say_what_they_were():
    run_scenario(r"""
    from sova import _capi
    p = sova.Pool()
    handle = p.handle
    p.close()
    refused(lambda: p.allocate(4096), ValueError, words=("closed",), what="allocate on a closed pool")
    # The handle of the destroyed pool, through the C API as another user would pass it.
    ptr = ctypes.c_void_p()
    err = _capi.lib().sovaMallocFromPoolAsync(ctypes.byref(ptr), 4096, ctypes.c_void_p(handle), None)
    assert err == CUDA_ERROR_INVALID_VALUE, err
    msg = _capi.last_error_message()
    assert "was destroyed (sovaMemPoolDestroy)" in msg, msg
    print("ok")
    """)
