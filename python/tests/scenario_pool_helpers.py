"""Helpers of test_scenario_pool_python_sim.py: scenario bodies run in a fresh
interpreter on sova's host simulation (SOVA_DRIVER=sim, docs/python.md:
"pools run on sova's host simulation instead (a 1 GiB device in host
memory)"), with a prelude of checks written from the documentation alone.

The simulated device's memory is host memory, so the bodies write and read
blocks with ctypes (memset / string_at) to check contents, as the existing
sim tests do.
"""
import textwrap

from sim_helpers import run_py

PRELUDE = r'''
import ctypes, bisect, random, sys, threading, time
import sova

MiB = 1 << 20
CUDA_ERROR_INVALID_VALUE = 1
CUDA_ERROR_MEMORY_ALLOCATION = 2
CUDA_ERROR_NOT_PERMITTED = 800

# Counters that move with time or with host timing, not with the calls made.
VOLATILE = {"activeStreams"}


def stable(s):
    return {k: v for k, v in s.items() if k not in VOLATILE and not k.endswith("Ns")}


def diff(before, after):
    return {k: (before.get(k), after.get(k)) for k in set(before) | set(after)
            if before.get(k) != after.get(k)}


def refused(call, exc, words=(), what="", promise=""):
    """call() must raise exc (and not another type) whose message has every word."""
    try:
        call()
    except exc as e:
        msg = str(e)
        for w in words:
            assert w in msg, f"{what}: message {msg!r} lacks {w!r} ({promise})"
        return e
    except BaseException as e:  # noqa: BLE001 - a wrong type is the finding
        raise AssertionError(f"{what}: raised {type(e).__name__}({e}); docs promise "
                             f"{exc.__name__ if isinstance(exc, type) else exc} ({promise})") from e
    raise AssertionError(f"{what}: accepted; docs promise "
                         f"{exc.__name__ if isinstance(exc, type) else exc} ({promise})")


def unchanged(pool, before, what, ignore=()):
    after = stable(pool.stats())
    d = {k: v for k, v in diff(before, after).items() if k not in ignore}
    assert not d, f"{what}: a refused call changed the statistics {d} (docs: 'nothing changes')"


def fill(a, n, byte):
    ctypes.memset(a, byte, n)


def intact(a, n, byte):
    return ctypes.string_at(a, n) == bytes([byte]) * n


def first_bad(a, n, byte):
    data = ctypes.string_at(a, n)
    want = bytes([byte]) * n
    if data == want:
        return None
    i = next(i for i in range(n) if data[i] != byte)
    return i, data[i]


def invariants(s, live, ctx, peak=None):
    """Statistics against the blocks the test holds (docs/c-api.md, sova.h)."""
    used = sum(n for n, *_ in live.values())
    assert s["usedCurrent"] == used, f"{ctx}: usedCurrent {s['usedCurrent']} != requested bytes live {used}"
    assert s["liveBlocks"] == len(live), f"{ctx}: liveBlocks {s['liveBlocks']} != {len(live)}"
    assert s["reservedCurrent"] >= s["usedCurrent"], f"{ctx}: reserved < used: {s}"
    assert s["reservedHigh"] >= s["reservedCurrent"], f"{ctx}: reservedHigh < reservedCurrent: {s}"
    assert s["usedHigh"] >= s["usedCurrent"], f"{ctx}: usedHigh < usedCurrent: {s}"
    if peak is not None:
        assert s["usedHigh"] <= peak, f"{ctx}: usedHigh {s['usedHigh']} above the true peak {peak}"
    # freeBackedBytes is not checked here: it does not follow its documented
    # meaning (test_free_backed_bytes_is_reserved_minus_in_use, xfail).
    assert s["largestFreeBlock"] <= s["reservedCurrent"] - s["usedCurrent"], \
        f"{ctx}: largestFreeBlock {s['largestFreeBlock']} > reserved - used: {s}"


def no_overlap(starts, live, a, n, ctx):
    i = bisect.bisect_left(starts, a)
    if i > 0:
        b = starts[i - 1]
        assert b + live[b][0] <= a, f"{ctx}: new block {a:#x}+{n} overlaps live {b:#x}+{live[b][0]}"
    if i < len(starts):
        b = starts[i]
        assert a + n <= b, f"{ctx}: new block {a:#x}+{n} overlaps live {b:#x}+{live[b][0]}"
    assert a % 512 == 0, f"{ctx}: {a:#x} not aligned to 512 (docs/c-api.md)"


def wait_for(cond, what, seconds=20.0):
    """Waits for an eventual state (no timing assertion: the bound is generous)."""
    deadline = time.monotonic() + seconds
    while not cond():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.01)
'''


def run_scenario(body: str, env: dict | None = None) -> str:
    return run_py(PRELUDE + "\n" + textwrap.dedent(body), env=env)
