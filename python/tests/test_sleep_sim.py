"""Sleep and wake from Python on the host simulation: sova.Pool.sleep/wake,
and sova.torch's tags (through the adapter as PyTorch calls it, by ctypes;
PyTorch itself is not needed). The sim's device memory is host memory, so
contents are written and checked with ctypes."""
from sim_helpers import TORCH_ALLOC, run_py

# The restore runs on the pool's copy stream, ordered before later work on the
# caller's stream; the C API has no stream synchronize for the host to wait
# with, so the host polls (the sim copies within milliseconds).
RESTORED = """
    import time
    def restored(address, n, byte):
        buf = (ctypes.c_ubyte * n).from_address(address)
        deadline = time.monotonic() + 10
        while bytes(buf) != bytes([byte]) * n:
            assert time.monotonic() < deadline, "contents not restored"
            time.sleep(0.01)
"""


def test_pool_sleep_backup_restores_contents_at_the_same_address():
    run_py("""
    import ctypes, sova
""" + RESTORED + """
    MiB = 1 << 20
    with sova.Pool(release_threshold=None) as p:
        a = p.allocate(5 * MiB + 3)
        ctypes.memset(a, 0x3c, 5 * MiB + 3)
        reserved = p.stats()["reservedCurrent"]
        assert not p.asleep
        p.sleep(backup=True)
        assert p.asleep
        s = p.stats()
        assert s["reservedCurrent"] == 0 and s["asleepBytes"] == reserved, s
        assert s["sleepHostBytes"] >= 5 * MiB + 3, s
        try:
            p.allocate(1000)
            raise AssertionError("allocated while asleep")
        except sova.SovaError as e:
            assert e.code == 800, e     # cudaErrorNotPermitted
        p.sleep()                       # idempotent
        p.wake()
        p.wake()
        assert not p.asleep
        restored(a, 5 * MiB + 3, 0x3c)
        assert p.stats()["reservedCurrent"] == reserved
        p.free(a)
        p.release_sleep_host_memory()
        assert p.stats()["sleepHostBytes"] == 0
        p.reserve_sleep_backup(3 * MiB)     # pinned ahead: the next sleep pins nothing
        held = p.stats()["sleepHostBytes"]
        assert held >= 3 * MiB, held
        try:
            p.reserve_sleep_backup(-1)
            raise AssertionError("a negative size accepted")
        except ValueError:
            pass
        assert p.stats()["sleepHostBytes"] == held
    print("ok")
    """)


def test_torch_tags_route_allocations_and_sleep_alone():
    run_py("""
    import ctypes, sova, sova.torch as st, sova._capi as c
""" + RESTORED + TORCH_ALLOC + """
    untagged = alloc(2 * MiB)
    with st.tag("weights"):
        w = alloc(4 * MiB)
        ctypes.memset(w, 0x11, 4 * MiB)
    with st.tag("kv_cache"):
        kv = alloc(8 * MiB)
    assert st.tags() == ["weights", "kv_cache"]
    assert st.tag_stats("weights")["liveBlocks"] == 1
    assert st.tag_stats("kv_cache")["usedCurrent"] == 8 * MiB
    st.sleep(backup=["weights"], stream=0)
    assert st.tag_stats("weights")["reservedCurrent"] == 0
    assert st.tag_stats("kv_cache")["asleepBytes"] == 8 * MiB
    assert st.tag_stats("kv_cache")["sleepHostBytes"] == 0   # dropped, not backed up
    # Untagged memory stays, and untagged allocations still work.
    other = alloc(1 * MiB)
    with st.tag("weights"):
        assert tl.sova_torch_malloc_nothrow(1000, 0, ctypes.c_void_p(0)) is None
    st.wake(["weights"], stream=0)
    assert st.tag_stats("kv_cache")["asleepBytes"] == 8 * MiB
    st.wake(stream=0)
    assert st.tag_stats("kv_cache")["asleepBytes"] == 0
    restored(w, 4 * MiB, 0x11)
    # Frees find their pool by address, whatever the thread's tag.
    for p, n in ((w, 4 * MiB), (kv, 8 * MiB), (untagged, 2 * MiB), (other, MiB)):
        tl.sova_torch_free(ctypes.c_void_p(p), n, 0, ctypes.c_void_p(0))
    assert st.tag_stats("weights")["liveBlocks"] == 0
    try:
        st.sleep(tags=["nope"])
        raise AssertionError("unknown tag accepted")
    except ValueError:
        pass
    print("ok")
    """)


# Waits, bounded, for a pool's statistics to satisfy a condition (pin-ahead
# runs on a thread of the pool's own).
EVENTUALLY = """
    import time
    def eventually(stats, done):
        deadline = time.monotonic() + 10
        while not done(stats()):
            assert time.monotonic() < deadline, stats()
            time.sleep(0.005)
        return stats()
"""


def test_pool_pins_ahead_within_its_budget_when_asked():
    run_py("""
    import ctypes, sova
""" + RESTORED + EVENTUALLY + """
    MiB = 1 << 20
    with sova.Pool() as plain:
        plain.free(plain.allocate(5 * MiB))
        s = plain.stats()
        assert s["sleepHostBudget"] == 0 and s["sleepPinAheadTarget"] == 0 and s["sleepHostBytes"] == 0, s
    with sova.Pool(release_threshold=None, sleep_pin_ahead=True, sleep_host_budget=64 * MiB) as p:
        a = p.allocate(5 * MiB + 3)
        ctypes.memset(a, 0x5e, 5 * MiB + 3)
        reserved = p.stats()["reservedCurrent"]
        s = eventually(p.stats, lambda s: s["sleepPinAheadBytes"] == reserved)
        assert s["sleepHostBudget"] == 64 * MiB and s["sleepPinAheadTarget"] == reserved, s
        assert s["sleepHostBytes"] == reserved and s["sleepPinAheadFailures"] == 0, s
        p.sleep()
        assert p.stats()["sleepHostBytes"] == reserved      # the first sleep pinned nothing more
        p.wake()
        restored(a, 5 * MiB + 3, 0x5e)
        p.release_sleep_host_memory()
        s = p.stats()
        assert s["sleepHostBytes"] == 0 and s["sleepPinAheadBytes"] == 0 and s["sleepPinAheadTarget"] == 0, s
        p.free(a)
    print("ok")
    """)


def test_pool_sleep_beyond_its_budget_is_refused_and_changes_nothing():
    run_py("""
    import ctypes, sova
    MiB = 1 << 20
    with sova.Pool(release_threshold=None, sleep_host_budget=2 * MiB) as p:
        a = p.allocate(5 * MiB)
        ctypes.memset(a, 0x77, 5 * MiB)
        reserved = p.stats()["reservedCurrent"]
        try:
            p.sleep()
            raise AssertionError("a sleep beyond the budget went through")
        except sova.SovaError as e:
            assert e.code == 2 and "budget" in str(e), e     # cudaErrorMemoryAllocation
        assert not p.asleep
        s = p.stats()
        assert s["sleepBudgetRefusals"] == 1 and s["reservedCurrent"] == reserved, s
        assert s["sleepHostBytes"] == 0 and s["sleepPinAheadTarget"] == 0, s
        assert bytes((ctypes.c_ubyte * (5 * MiB)).from_address(a)) == b"\x77" * (5 * MiB)
        p.sleep(backup=False)                                # no backup: within any budget
        p.wake()
        p.free(a)
    print("ok")
    """)


def test_torch_tags_pin_ahead_by_default_and_a_discarded_tag_gives_it_back():
    run_py("""
    import ctypes, os, sova, sova.torch as st, sova._capi as c
""" + EVENTUALLY + """
    opts = st.configure()
    half = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2
    assert opts.sleep_pin_ahead and opts.sleep_host_budget == half, opts
""" + TORCH_ALLOC + """
    untagged = alloc(2 * MiB)
    with st.tag("weights"):
        w = alloc(4 * MiB)
    with st.tag("kv"):
        kv = alloc(6 * MiB)
    for tag in ("weights", "kv"):
        reserved = st.tag_stats(tag)["reservedCurrent"]
        s = eventually(lambda: st.tag_stats(tag), lambda s: s["sleepPinAheadBytes"] == reserved)
        assert s["sleepHostBudget"] == half, s
    assert st.tag_stats("weights")["sleepPinAheadTarget"] > 0
    st.sleep(backup=["weights"], stream=0)
    assert st.tag_stats("weights")["sleepHostBytes"] > 0
    assert st.tag_stats("kv")["sleepHostBytes"] == 0       # discarded: its pinned memory went back
    assert st.tag_stats("kv")["sleepPinAheadTarget"] == 0  # and pin-ahead holds
    st.wake(stream=0)
    for p, n in ((w, 4 * MiB), (kv, 6 * MiB), (untagged, 2 * MiB)):
        tl.sova_torch_free(ctypes.c_void_p(p), n, 0, ctypes.c_void_p(0))
    print("ok")
    """)
