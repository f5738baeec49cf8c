"""Sleep and wake arguments that cannot lose data, on the host
simulation: sova.Pool.sleep's backup is a bool and nothing else, wake()
returns with the contents in place, a stream given makes wake stream-ordered,
and every refused argument leaves the pool as it was. sova.torch's sleep and
wake likewise (through the adapter, by ctypes; a stand-in `torch` module where
they ask PyTorch for the current stream)."""
from sim_helpers import TORCH_ALLOC, run_py

# A block large enough that the sim's restore copy (one memcpy, front to back,
# on the pool's copy stream) is still running when a wake that does not wait
# returns: its last byte is written last.
BIG = """
    import ctypes
    MiB = 1 << 20
    N = 256 * MiB
    def fill(address, byte):
        ctypes.memset(address, byte, N)
    def intact(address, byte):
        tail = (ctypes.c_ubyte * 4096).from_address(address + N - 4096)
        if bytes(tail) != bytes([byte]) * 4096:
            return False
        return ctypes.string_at(address, N) == bytes([byte]) * N
    def restored_later(address, byte):
        import time
        deadline = time.monotonic() + 20
        while not intact(address, byte):
            assert time.monotonic() < deadline, "contents not restored"
            time.sleep(0.01)
"""


def test_pool_sleep_refuses_a_backup_that_is_not_a_bool_and_changes_nothing():
    run_py("""
    import ctypes, sova
    MiB = 1 << 20
    with sova.Pool(release_threshold=None) as p:
        a = p.allocate(3 * MiB)
        ctypes.memset(a, 0x5e, 3 * MiB)
        before = p.stats()
        for bad in (None, "yes", "", 2, 1, 0, 1.0, [], [True], object()):
            try:
                p.sleep(backup=bad)
            except TypeError as e:
                assert "backup must be True" in str(e) and "nothing was done" in str(e), e
            else:
                raise SystemExit(f"sleep(backup={bad!r}) accepted")
            assert not p.asleep, bad
        try:
            p.sleep(True)           # keyword only: sleep(False) would not say what it drops
        except TypeError:
            pass
        else:
            raise SystemExit("a positional backup accepted")
        assert not p.asleep
        after = p.stats()
        assert after["reservedCurrent"] == before["reservedCurrent"], (before, after)
        assert after["sleepHostBytes"] == 0 and after["asleepBytes"] == 0, after
        assert ctypes.string_at(a, 3 * MiB) == b"\\x5e" * (3 * MiB)
        # The default backs up: sleep() then wake() keeps the contents.
        p.sleep()
        assert p.asleep and p.stats()["sleepHostBytes"] >= 3 * MiB
        p.wake()
        assert ctypes.string_at(a, 3 * MiB) == b"\\x5e" * (3 * MiB)
        p.free(a)
    print("ok")
    """)


def test_pool_wake_returns_with_the_contents_restored():
    """Before: wake() returned at once and a read right after it saw the
    restore unfinished (zeros)."""
    run_py("""
    import sova
""" + BIG + """
    with sova.Pool(release_threshold=None) as p:
        a = p.allocate(N)
        for cycle, byte in enumerate((0x11, 0x22, 0x33)):
            fill(a, byte)
            p.sleep(backup=True)
            p.wake()
            assert intact(a, byte), f"cycle {cycle}: read right after wake() saw the restore unfinished"
        p.free(a)
    print("ok")
    """)


def test_pool_wake_on_a_stream_is_stream_ordered_and_returns_at_once():
    run_py("""
    import sova
""" + BIG + """
    with sova.Pool(release_threshold=None) as p:
        a = p.allocate(N)
        fill(a, 0x44)
        p.sleep(backup=True, stream=0)
        p.wake(stream=0)            # ordered before later work on stream 0: no host wait
        restored_later(a, 0x44)
        p.free(a)
    print("ok")
    """)


def test_pool_sleep_and_wake_refuse_bad_streams_and_change_nothing():
    out = run_py("""
    import ctypes, sova
    MiB = 1 << 20
    with sova.Pool(release_threshold=None) as p:
        a = p.allocate(MiB)
        ctypes.memset(a, 0x77, MiB)
        for bad, error in (("0", TypeError), (1.0, TypeError), (True, TypeError), (-1, ValueError),
                           (1 << 64, OverflowError)):
            for call in (lambda: p.sleep(stream=bad), lambda: p.wake(stream=bad), lambda: p.wake(bad)):
                try:
                    call()
                except error as e:
                    assert "stream" in str(e), e
                else:
                    raise SystemExit(f"stream {bad!r} accepted")
        assert not p.asleep
        # An int that is no stream: the driver's refusal, said so; nothing changed.
        try:
            p.sleep(backup=True, stream=0x7777770)
        except sova.SovaError as e:
            assert "not a stream" in str(e) and "nothing changed" in str(e), e
            print("sleep:", e)
        else:
            raise SystemExit("sleep on a stream that is none accepted")
        assert not p.asleep and p.stats()["sleepHostBytes"] == 0
        p.sleep(backup=True)
        for wake in (lambda: p.wake(stream=0x7777770), lambda: p.wake(0x7777770)):
            try:
                wake()
            except sova.SovaError as e:
                assert "not a stream" in str(e), e
                print("wake:", e)
            else:
                raise SystemExit("wake on a stream that is none accepted")
            assert p.asleep
        p.wake()
        assert ctypes.string_at(a, MiB) == b"\\x77" * MiB
        p.free(a)
    print("ok")
    """)
    assert "sleep: sova: putting the pool to sleep failed" in out, out


def test_closed_pool_refuses_sleep_and_wake():
    run_py("""
    import sova
    p = sova.Pool()
    p.close()
    for call in (lambda: p.sleep(), lambda: p.wake(), lambda: p.wake(stream=0)):
        try:
            call()
        except ValueError as e:
            assert "closed" in str(e), e
        else:
            raise SystemExit("a closed pool slept or woke")
    print("ok")
    """)


# sova.torch asks PyTorch for the current stream when none is given: a
# stand-in module whose CUDA is not initialized (stream 0, as sova.torch
# answers then) lets the default path run without PyTorch.
FAKE_TORCH = """
    import sys, types
    torch = types.ModuleType("torch")
    torch.cuda = types.SimpleNamespace(is_initialized=lambda: False)
    sys.modules["torch"] = torch
"""


def test_torch_sleep_refuses_bad_backup_tags_and_streams_before_any_pool_sleeps():
    run_py("""
    import ctypes, sova, sova.torch as st, sova._capi as c
""" + FAKE_TORCH + TORCH_ALLOC + """
    with st.tag("weights"):
        w = alloc(2 * MiB)
        ctypes.memset(w, 0x21, 2 * MiB)
    with st.tag("kv"):
        kv = alloc(2 * MiB)
    def awake():
        return all(st.tag_stats(t)["asleepBytes"] == 0 and st.tag_stats(t)["reservedCurrent"] > 0
                   for t in ("weights", "kv"))
    for kwargs, error in (
            (dict(backup=None), TypeError), (dict(backup=2), TypeError), (dict(backup=0), TypeError),
            (dict(backup=1.0), TypeError), (dict(backup=[1]), TypeError), (dict(backup={"weights": 1}), TypeError),
            (dict(backup=["nope"]), ValueError), (dict(tags=["kv"], backup=["weights"]), ValueError),
            (dict(tags=5), TypeError), (dict(tags=[b"kv"]), TypeError), (dict(tags=["nope"]), ValueError),
            (dict(stream="0"), TypeError), (dict(stream=-1), ValueError), (dict(stream=1.5), TypeError)):
        try:
            st.sleep(**kwargs)
        except error as e:
            assert "nothing was done" in str(e) or "unknown tags" in str(e) or "stream" in str(e), (kwargs, e)
        else:
            raise SystemExit(f"sleep({kwargs}) accepted")
        assert awake(), kwargs
    for kwargs, error in ((dict(tags=5), TypeError), (dict(tags=["nope"]), ValueError),
                          (dict(stream="0"), TypeError), (dict(stream=None, tags=[None]), TypeError)):
        try:
            st.wake(**kwargs)
        except error:
            pass
        else:
            raise SystemExit(f"wake({kwargs}) accepted")
    # A stream object is read by its cuda_stream, as torch.cuda.Stream's.
    import types
    st.sleep(backup="weights", stream=types.SimpleNamespace(cuda_stream=0))
    assert st.tag_stats("weights")["sleepHostBytes"] >= 2 * MiB
    assert st.tag_stats("kv")["sleepHostBytes"] == 0
    st.wake()
    assert ctypes.string_at(w, 2 * MiB) == b"\\x21" * (2 * MiB)
    print("ok")
    """)


def test_torch_wake_returns_with_the_contents_restored():
    """Before: sova.torch.wake() returned before the restore was done."""
    run_py("""
    import sova, sova.torch as st, sova._capi as c
""" + FAKE_TORCH + BIG + """
    tl = c.torch_lib()
    with st.tag("weights"):
        w = tl.sova_torch_malloc_nothrow(N, 0, ctypes.c_void_p(0))
    assert w, st.last_error()
    for byte in (0x61, 0x62):
        fill(w, byte)
        st.sleep()                  # backup=True by default
        st.wake()
        assert intact(w, byte), "read right after sova.torch.wake() saw the restore unfinished"
    fill(w, 0x63)
    st.sleep(backup=True, stream=0)
    st.wake(stream=0)               # stream-ordered: returns at once
    restored_later(w, 0x63)
    print("ok")
    """)


def test_pool_sleep_zero_drops_the_contents_and_wake_zeroes_them():
    run_py("""
    import ctypes, sova
    MiB = 1 << 20
    with sova.Pool(release_threshold=None) as p:
        a = p.allocate(3 * MiB + 5)
        ctypes.memset(a, 0x5e, 3 * MiB + 5)
        for kwargs, error in ((dict(backup=True, zero=True), ValueError), (dict(zero=True), ValueError),
                              (dict(backup=False, zero=None), TypeError), (dict(backup=False, zero=1), TypeError)):
            try:
                p.sleep(**kwargs)
            except error as e:
                assert "nothing was done" in str(e), e
            else:
                raise SystemExit(f"sleep({kwargs}) accepted")
            assert not p.asleep, kwargs
        assert ctypes.string_at(a, 3 * MiB + 5) == b"\\x5e" * (3 * MiB + 5)
        p.sleep(backup=False, zero=True)
        assert p.asleep and p.stats()["sleepHostBytes"] == 0
        p.wake()                    # returns with the zeroing done
        assert ctypes.string_at(a, 3 * MiB + 5) == bytes(3 * MiB + 5)
        p.free(a)
    print("ok")
    """)


def test_torch_sleep_zero_zeroes_the_tags_not_backed_up():
    run_py("""
    import ctypes, sova, sova.torch as st, sova._capi as c
""" + FAKE_TORCH + TORCH_ALLOC + """
    with st.tag("weights"):
        w = alloc(2 * MiB)
        ctypes.memset(w, 0x21, 2 * MiB)
    with st.tag("kv"):
        kv = alloc(2 * MiB)
        ctypes.memset(kv, 0x42, 2 * MiB)
    def awake():
        return all(st.tag_stats(t)["asleepBytes"] == 0 for t in ("weights", "kv"))
    for kwargs, error in ((dict(zero=None), TypeError), (dict(zero=1), TypeError),
                          (dict(zero=True), ValueError), (dict(backup=["weights", "kv"], zero=True), ValueError),
                          (dict(backup="weights", zero=True, stream="0"), TypeError)):
        try:
            st.sleep(**kwargs)
        except error:
            pass
        else:
            raise SystemExit(f"sleep({kwargs}) accepted")
        assert awake(), kwargs
    st.sleep(backup="weights", zero=True)
    st.wake()
    assert ctypes.string_at(w, 2 * MiB) == b"\\x21" * (2 * MiB)
    assert ctypes.string_at(kv, 2 * MiB) == bytes(2 * MiB)
    print("ok")
    """)
