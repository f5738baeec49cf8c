"""Scenario tests of sova.Pool from Python, written from the documentation
alone (docs/python.md "sova.Pool and the C API from Python", docs/sleep-wake.md
"Arguments, from Python" and "Pinning ahead, and the host memory budget",
docs/c-api.md for the C API that sova.Pool wraps), on the host simulation.

Every scenario runs in a fresh interpreter (scenario_pool_helpers.run_scenario).
Random programs are seeded; the seed is in the test id and in every message.
"""
import textwrap

import pytest

from scenario_pool_helpers import run_scenario

SEEDS = [11, 202, 3003, 40004]

# ---------------------------------------------------------------------------
# Creating pools: each documented option, valid and invalid values and types.
# docs/python.md: "bad values raise ValueError/TypeError naming the option,
# before anything changes".
# ---------------------------------------------------------------------------

VALID_OPTIONS = [
    {},
    {"release_threshold": None}, {"release_threshold": 0}, {"release_threshold": 64 << 20},
    {"policy": "default"}, {"policy": "size_classes"}, {"policy": "buddy"}, {"policy": "best_fit"},
    {"remap": "off"}, {"remap": "balanced"}, {"remap": "thorough"},
    {"stream_checks": True}, {"stream_checks": False},
    {"max_size": 0}, {"max_size": 32 << 20},
    {"sleep_pin_ahead": True}, {"sleep_pin_ahead": False},
    {"sleep_host_budget": 0}, {"sleep_host_budget": 16 << 20},
]


def test_every_documented_option_value_makes_a_working_pool():
    run_scenario(f"""
    for opts in {VALID_OPTIONS!r}:
        with sova.Pool(**opts) as p:
            s = p.stats()
            assert s["usedCurrent"] == 0 and s["liveBlocks"] == 0, (opts, s)
            a = p.allocate(3 * MiB + 7)
            fill(a, 3 * MiB + 7, 0xa5)
            invariants(p.stats(), {{a: (3 * MiB + 7,)}}, f"options {{opts}}")
            assert intact(a, 3 * MiB + 7, 0xa5), opts
            p.free(a)
            invariants(p.stats(), {{}}, f"options {{opts}} after free")
            if "sleep_host_budget" in opts:
                assert s["sleepHostBudget"] == opts["sleep_host_budget"], \\
                    f"stats()['sleepHostBudget'] is the budget (docs/sleep-wake.md): {{s}}"
    with sova.Pool(0) as p:          # device=0, positionally
        p.free(p.allocate(1))
    print("ok")
    """)


BAD_OPTIONS = [
    ({"release_threshold": -1}, ValueError),
    ({"release_threshold": "0"}, TypeError),
    ({"release_threshold": 1.0}, TypeError),
    ({"release_threshold": True}, TypeError),
    ({"policy": "first_fit"}, ValueError),
    # A value of the wrong type for the two string options: the docs say
    # "ValueError/TypeError" without saying which; sova gives ValueError here,
    # TypeError for the other options' wrong types (a difference, not a defect).
    ({"policy": None}, (TypeError, ValueError)),
    ({"policy": 2}, (TypeError, ValueError)),
    ({"remap": "sometimes"}, ValueError),
    ({"remap": True}, (TypeError, ValueError)),
    ({"remap": None}, (TypeError, ValueError)),
    ({"stream_checks": 1}, TypeError),
    ({"stream_checks": "yes"}, TypeError),
    ({"stream_checks": None}, TypeError),
    ({"max_size": -1}, ValueError),
    ({"max_size": 1.5}, TypeError),
    ({"max_size": None}, TypeError),
    ({"max_size": "8M"}, TypeError),
    ({"sleep_pin_ahead": 1}, TypeError),
    ({"sleep_pin_ahead": None}, TypeError),
    ({"sleep_pin_ahead": "true"}, TypeError),
    ({"sleep_host_budget": -1}, ValueError),
    ({"sleep_host_budget": None}, TypeError),
    ({"sleep_host_budget": True}, TypeError),
    ({"sleep_host_budget": 1.0}, TypeError),
    ({"sleep_host_budget": "1G"}, TypeError),
]


def _names(error):
    """An exception type, or a tuple of them, as source text for a scenario body."""
    if isinstance(error, tuple):
        return "(" + ", ".join(e.__name__ for e in error) + ",)"
    return error.__name__


@pytest.mark.parametrize("opts, error", BAD_OPTIONS, ids=[f"{next(iter(o))}={o[next(iter(o))]!r}"
                                                          for o, _ in BAD_OPTIONS])
def test_bad_option_is_refused_naming_it_and_makes_no_pool(opts, error):
    (name, value), = opts.items()
    run_scenario(f"""
    import gc
    def make():
        return sova.Pool(**{opts!r})
    refused(make, {_names(error)}, words=({name!r},), what="sova.Pool(**{opts!r})",
            promise="bad values raise ValueError/TypeError naming the option, before anything changes")
    # Nothing was made: a pool made afterwards starts empty and works.
    with sova.Pool() as p:
        assert p.stats()["reservedCurrent"] == 0
        p.free(p.allocate(MiB))
    print("ok")
    """)


@pytest.mark.parametrize("name", ["release_threshold", "max_size", "sleep_host_budget"])
def test_an_option_of_64_bits_or_more_is_an_overflow_error_naming_it(name):
    """docs/python.md: options' "bad values raise ValueError/TypeError naming the
    option (OverflowError above 2**64-1, as for every byte count the package
    takes)". 2**64 cannot be a size_t."""
    run_scenario(f"""
    refused(lambda: sova.Pool(**{{{name!r}: 1 << 64}}), OverflowError, words=({name!r},),
            what="{name}=2**64", promise="OverflowError above 2**64-1, naming the option")
    print("ok")
    """)


def test_unknown_option_positional_options_and_bad_devices_are_refused():
    run_scenario("""
    refused(lambda: sova.Pool(release_treshold=0), TypeError, what="a misspelled option",
            promise="sova.Pool(device=0, **options)")
    # The docs give no exception type for a device that is not an int (sova:
    # ValueError 'device must be an int >= 0'; the size rule would say TypeError).
    for bad in ("0", None, 0.0, [0]):
        refused(lambda: sova.Pool(device=bad), (TypeError, ValueError), words=("device",), what=f"device={bad!r}",
                promise="device is an int")
    # The simulation is one device (docs/python.md: "a 1 GiB device").
    for dev in (1, 5, 1 << 31):
        refused(lambda: sova.Pool(device=dev), (sova.SovaError, ValueError), what=f"device={dev}",
                promise="docs/c-api.md: 'device 5 does not exist (1 device)'")
    refused(lambda: sova.Pool(device=-1), (ValueError, sova.SovaError), what="device=-1",
            promise="a device that does not exist")
    with sova.Pool() as p:
        assert p.stats()["reservedCurrent"] == 0
    print("ok")
    """)


def test_an_option_given_positionally_is_a_type_error():
    run_scenario("""
    refused(lambda: sova.Pool(0, "buddy"), TypeError, what="sova.Pool(0, 'buddy')",
            promise="sova.Pool(device=0, **options): options are keywords")
    refused(lambda: sova.Pool(0, {"policy": "buddy"}), TypeError, what="sova.Pool(0, {'policy': 'buddy'})",
            promise="sova.Pool(device=0, **options): options are keywords")
    print("ok")
    """)


def test_device_out_of_range_message_says_how_many_devices():
    """docs/c-api.md: 'sovaMemPoolCreate: device 5 does not exist (1 device)'."""
    run_scenario("""
    e = refused(lambda: sova.Pool(device=5), sova.SovaError, words=("device 5", "1 device"),
                what="device=5", promise="docs/c-api.md error-message table")
    assert e.code in (1, 101), f"code {e.code}: cudaErrorInvalidValue or cudaErrorInvalidDevice"
    print("ok")
    """)


# ---------------------------------------------------------------------------
# Statistics follow a random program: allocate and free on streams 0,
# cudaStreamLegacy (1) and cudaStreamPerThread (2), trims and peak resets;
# contents written into every block and checked at its free.
# ---------------------------------------------------------------------------

PROGRAM = """
def program(seed, steps, **opts):
    rng = random.Random(seed)
    max_size = opts.get("max_size", 0)
    sizes = [1, 100, 511, 512, 513, 4096, 65536, MiB - 1, MiB, 2 * MiB + 3, 5 * MiB, 33 * MiB]
    with sova.Pool(**opts) as p:
        live, starts = {}, []
        allocs = frees = fails = 0
        peak = 0
        for step in range(steps):
            ctx = f"seed={seed} opts={opts} step={step}"
            op = rng.random()
            used = sum(n for n, *_ in live.values())
            if (op < 0.55 or not live) and used < 300 * MiB:
                n = rng.choice(sizes) + rng.randrange(0, 3)
                s = rng.choice((0, 1, 2))
                before = stable(p.stats())
                try:
                    a = p.allocate(n, s) if rng.random() < 0.5 else p.allocate(n, stream=s)
                except sova.SovaError as e:
                    assert max_size and e.code == CUDA_ERROR_MEMORY_ALLOCATION, f"{ctx}: {e!r}"
                    fails += 1
                    # docs/c-api.md: out of memory leaves the pool unchanged (after sova
                    # "released what it could": reserved memory and ghosts may go).
                    after = p.stats()
                    for k in ("usedCurrent", "liveBlocks", "allocations", "deallocations"):
                        assert after[k] == before[k], f"{ctx}: out of memory changed {k}: {before[k]} -> {after[k]}"
                    assert after["reservedCurrent"] <= before["reservedCurrent"], ctx
                    assert p.stats()["failedAllocations"] == before["failedAllocations"] + 1, ctx
                    continue
                assert isinstance(a, int) and a, f"{ctx}: allocate returned {a!r}"
                no_overlap(starts, live, a, n, ctx)
                byte = rng.randrange(256)
                fill(a, n, byte)
                live[a] = (n, byte, s)
                bisect.insort(starts, a)
                allocs += 1
                peak = max(peak, used + n)
            elif op < 0.9 and live:
                a = rng.choice(starts)
                n, byte, s = live.pop(a)
                starts.remove(a)
                bad = first_bad(a, n, byte)
                assert bad is None, f"{ctx}: block {a:#x}+{n} lost its contents at byte {bad}"
                p.free(a, rng.choice((s, 0, 1, 2)))
                frees += 1
            elif op < 0.95:
                keep = rng.choice((0, MiB, 64 * MiB))
                r0 = p.stats()["reservedCurrent"]
                p.trim(keep)
                s2 = p.stats()
                if not live:
                    assert s2["reservedCurrent"] <= keep, \\
                        f"{ctx}: trim({keep}) with no live block left {s2['reservedCurrent']} reserved " \\
                        "(docs/c-api.md: 'at most keep stays reserved where live blocks allow')"
                assert s2["reservedCurrent"] <= max(r0, keep), ctx
            else:
                p.reset_peaks()
                s2 = p.stats()
                assert s2["usedHigh"] == s2["usedCurrent"], f"{ctx}: reset_peaks left usedHigh {s2}"
                peak = s2["usedCurrent"]
            s = p.stats()
            invariants(s, live, ctx, peak=peak)
            assert s["allocations"] == allocs, f"{ctx}: allocations {s['allocations']} != {allocs}"
            assert s["deallocations"] == frees, f"{ctx}: deallocations {s['deallocations']} != {frees}"
            assert s["failedAllocations"] == fails, f"{ctx}: failedAllocations {s['failedAllocations']} != {fails}"
            if max_size:
                assert s["reservedCurrent"] <= max_size, f"{ctx}: reserved {s['reservedCurrent']} > max_size"
        for a in list(starts):
            n, byte, s = live.pop(a)
            assert first_bad(a, n, byte) is None, f"seed={seed}: block {a:#x}+{n} lost its contents"
            p.free(a)
        p.trim(0)
        s = p.stats()
        assert s["usedCurrent"] == 0 and s["liveBlocks"] == 0 and s["reservedCurrent"] == 0, \\
            f"seed={seed}: after freeing everything and trim(0): {s}"
    return allocs, frees, fails
"""


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("policy", ["default", "size_classes", "buddy", "best_fit"])
def test_random_program_statistics_follow_each_step(seed, policy):
    out = run_scenario(PROGRAM + textwrap.dedent(f"""
    remap = ("off", "balanced", "thorough")[{seed} % 3]
    print("counts", program({seed}, 250, policy={policy!r}, remap=remap, release_threshold=None))
    """))
    assert "counts (" in out, out


@pytest.mark.parametrize("seed", SEEDS[:2])
def test_random_program_under_max_size_fails_cleanly(seed):
    out = run_scenario(PROGRAM + textwrap.dedent(f"""
    allocs, frees, fails = program({seed}, 300, max_size=48 * MiB, release_threshold=None)
    assert fails > 0, "seed={seed}: the program never reached max_size; the test tests nothing"
    print("counts", allocs, frees, fails)
    """))
    assert "counts " in out, out


@pytest.mark.parametrize("seed", SEEDS[:2])
def test_random_program_with_release_threshold_zero_and_no_stream_checks(seed):
    out = run_scenario(PROGRAM + textwrap.dedent(f"""
    print("counts", program({seed}, 250, release_threshold=0, stream_checks=False))
    """))
    assert "counts (" in out, out


# ---------------------------------------------------------------------------
# Arguments of allocate / free / trim: "not an int (None included) is a
# TypeError, a negative one a ValueError, 2**64 or more an OverflowError;
# nothing changes."
# ---------------------------------------------------------------------------

def test_bad_sizes_addresses_streams_and_keeps_change_nothing():
    run_scenario(r"""
    PROMISE = "docs/python.md: not an int is a TypeError, negative a ValueError, 2**64 or more an OverflowError; nothing changes"
    BAD = [("1", TypeError), (1.0, TypeError), (None, TypeError), (b"1", TypeError), ([1], TypeError),
           (-1, ValueError), (-(1 << 70), ValueError), (1 << 64, OverflowError), (1 << 100, OverflowError)]
    with sova.Pool(release_threshold=None) as p:
        a = p.allocate(2 * MiB)
        fill(a, 2 * MiB, 0x3c)
        b = p.allocate(4096)
        p.free(b)
        before = stable(p.stats())
        for bad, err in BAD:
            refused(lambda: p.allocate(bad), err, what=f"allocate({bad!r})", promise=PROMISE)
            refused(lambda: p.allocate(MiB, bad), err, words=("stream",), what=f"allocate(MiB, {bad!r})", promise=PROMISE)
            refused(lambda: p.allocate(MiB, stream=bad), err, words=("stream",), what=f"allocate(MiB, stream={bad!r})", promise=PROMISE)
            refused(lambda: p.free(bad), err, what=f"free({bad!r})", promise=PROMISE)
            refused(lambda: p.free(a, bad), err, words=("stream",), what=f"free(a, {bad!r})", promise=PROMISE)
            refused(lambda: p.free(a, stream=bad), err, words=("stream",), what=f"free(a, stream={bad!r})", promise=PROMISE)
            refused(lambda: p.trim(bad), err, what=f"trim({bad!r})", promise=PROMISE)
            unchanged(p, before, f"after the refusals of {bad!r}")
        # bool is an int subclass, but not a size (the existing tests refuse allocate(True)).
        refused(lambda: p.allocate(True), TypeError, what="allocate(True)", promise=PROMISE)
        refused(lambda: p.free(True), TypeError, what="free(True)", promise=PROMISE)
        refused(lambda: p.trim(False), TypeError, what="trim(False)", promise=PROMISE)
        unchanged(p, before, "after the bool refusals")
        assert intact(a, 2 * MiB, 0x3c), "a refused call touched a live block"
        # Still works.
        p.free(a)
        assert p.stats()["liveBlocks"] == 0
    print("ok")
    """)


def test_reset_peaks_and_stats_with_an_argument_are_type_errors():
    """docs/python.md lists reset_peaks() and stats() without arguments. (trim()
    without keep is accepted and trims to 0: undocumented, docs list trim(keep).)"""
    run_scenario("""
    with sova.Pool(release_threshold=None) as p:
        before = stable(p.stats())
        refused(lambda: p.reset_peaks(0), TypeError, what="reset_peaks(0)", promise="reset_peaks()")
        refused(lambda: p.stats(0), TypeError, what="stats(0)", promise="stats()")
        unchanged(p, before, "bad arity")
    print("ok")
    """)


def test_huge_sizes_are_out_of_memory_and_change_nothing_but_the_failure_count():
    run_scenario("""
    with sova.Pool(release_threshold=None) as p:
        a = p.allocate(MiB)
        fill(a, MiB, 0x11)
        for n in ((1 << 64) - 1, 1 << 63, 1 << 40, (1 << 30) + 1):
            before = p.stats()
            e = refused(lambda: p.allocate(n), sova.SovaError, what=f"allocate({n})",
                        promise="docs/c-api.md: larger than the device: cudaErrorMemoryAllocation, the pool unchanged")
            assert e.code == CUDA_ERROR_MEMORY_ALLOCATION, f"allocate({n}): code {e.code}, want 2"
            assert str(n) in str(e), f"message names the size: {e}"
            after = p.stats()
            for k in ("usedCurrent", "liveBlocks", "allocations", "deallocations", "reservedCurrent"):
                assert after[k] == before[k], f"allocate({n}) changed {k}: {before[k]} -> {after[k]}"
            assert after["failedAllocations"] == before["failedAllocations"] + 1, after
        assert intact(a, MiB, 0x11)
        b = p.allocate(MiB)           # "the next allocation works as before"
        p.free(b); p.free(a)
    print("ok")
    """)


def test_size_zero_allocates_nothing_and_freeing_its_result_changes_nothing():
    """docs/c-api.md: 'size == 0: cudaSuccess, *devPtr = NULL (freeing that NULL is
    cudaSuccess)'. docs/python.md does not say what allocate(0) returns; we accept
    0 (NULL, as in C) or a ValueError, and require no live block either way."""
    run_scenario("""
    with sova.Pool(release_threshold=None) as p:
        before = stable(p.stats())
        try:
            r = p.allocate(0)
        except ValueError as e:
            print("allocate(0) refused:", e)
            r = None
        if r is not None:
            assert r == 0, f"allocate(0) returned {r!r}; C returns NULL"
            p.free(r)            # freeing NULL: success, as cudaFreeAsync(NULL)
        s = p.stats()
        assert s["liveBlocks"] == 0 and s["usedCurrent"] == 0 and s["reservedCurrent"] == 0, s
        print("allocate(0) ->", r, "allocations:", s["allocations"])
    print("ok")
    """)


def test_double_interior_and_foreign_frees_raise_and_change_nothing():
    run_scenario(r"""
    with sova.Pool(release_threshold=None) as p:
        a = p.allocate(10000)
        fill(a, 10000, 0x5a)
        c = p.allocate(MiB)
        p.free(c)
        before = stable(p.stats())
        host = ctypes.create_string_buffer(4096)
        cases = [
            (c, "already freed"),
            (a + 512, "inside a block allocated at"),
            (a + 1, "inside a block allocated at"),
            (ctypes.addressof(host), "not allocated by sova"),
            (0xdead000, "not allocated by sova"),
        ]
        for ptr, words in cases:
            for stream in (0, 1, 2):
                e = refused(lambda: p.free(ptr, stream), sova.SovaError, words=(words,), what=f"free({ptr:#x})",
                            promise="a free says 'already freed', 'inside a block ...' or 'not allocated by sova'")
                assert e.code == CUDA_ERROR_INVALID_VALUE, f"free({ptr:#x}): code {e.code}"
                # streamStates too: a refused free makes no state for a stream new to the pool.
                unchanged(p, before, f"free({ptr:#x}, {stream})")
        e = refused(lambda: p.free(a + 512), sova.SovaError, what="interior")
        assert "(10000 bytes)" in str(e) and "free its start" in str(e) and f"{a:x}" in str(e).lower(), \
            f"docs/c-api.md: 'inside a block allocated at 0x... (10000 bytes); free its start': {e}"
        assert intact(a, 10000, 0x5a), "a refused free touched the block"
        p.free(a)
        e = refused(lambda: p.free(a), sova.SovaError, words=("already freed",), what="double free")
        assert p.stats()["deallocations"] == before["deallocations"] + 1
    print("ok")
    """)


def test_freeing_a_pointer_of_another_pool():
    """docs/python.md: free(ptr) of a sova.Pool; docs/c-api.md: sovaFreeAsync
    'frees p in stream order into the pool it came from'. Whether
    pool_a.free(pointer_of_pool_b) is refused or frees into pool b is not
    said; either way pool a must not change and pool b must stay consistent."""
    out = run_scenario("""
    pa = sova.Pool(release_threshold=None)
    pb = sova.Pool(release_threshold=None)
    a = pa.allocate(MiB)
    b = pb.allocate(3 * MiB)
    fill(b, 3 * MiB, 0x77)
    sa, sb = stable(pa.stats()), stable(pb.stats())
    try:
        pa.free(b)
    except sova.SovaError as e:
        print("refused:", e)
        unchanged(pa, sa, "pa.free(b) refused")
        unchanged(pb, sb, "pa.free(b) refused")
        assert intact(b, 3 * MiB, 0x77)
        pb.free(b)
    else:
        print("freed into its own pool")
        unchanged(pa, sa, "pa.free(b) of pool b's block changed pool a")
        s = pb.stats()
        assert s["liveBlocks"] == 0 and s["usedCurrent"] == 0 and s["deallocations"] == 1, \\
            f"pa.free(b) accepted but pool b does not count the free: {s}"
        refused(lambda: pb.free(b), sova.SovaError, words=("already freed",), what="pb.free(b) after pa.free(b)")
    pa.free(a)
    assert pa.stats()["liveBlocks"] == 0
    pa.close(); pb.close()
    print("ok")
    """)
    print(out)


# ---------------------------------------------------------------------------
# Lifecycle: context manager, close, use after close.
# ---------------------------------------------------------------------------

def test_context_manager_closes_even_on_an_exception_and_use_after_close_is_refused():
    """docs/python.md: close() (also a context manager). What a closed pool's
    calls raise is not documented (the existing tests expect ValueError); we
    require every call to be refused alike and to say the pool is closed."""
    run_scenario("""
    class Boom(Exception):
        pass
    try:
        with sova.Pool(release_threshold=None) as p:
            a = p.allocate(MiB)
            raise Boom()
    except Boom:
        pass
    calls = {
        "allocate": lambda: p.allocate(1),
        "free": lambda: p.free(a),
        "stats": lambda: p.stats(),
        "trim": lambda: p.trim(0),
        "reset_peaks": lambda: p.reset_peaks(),
        "sleep": lambda: p.sleep(),
        "wake": lambda: p.wake(),
        "graph_holdings": lambda: p.graph_holdings(),
        "reserve_sleep_backup": lambda: p.reserve_sleep_backup(MiB),
        "release_sleep_host_memory": lambda: p.release_sleep_host_memory(),
    }
    kinds = {}
    for name, call in calls.items():
        try:
            call()
        except Exception as e:
            kinds[name] = type(e).__name__
            assert "closed" in str(e).lower(), f"{name} on a closed pool: {e!r} does not say the pool is closed"
        else:
            raise AssertionError(f"{name} on a closed pool (left by the with block) was accepted")
    assert len(set(kinds.values())) == 1, f"a closed pool's calls raise different types: {kinds}"
    try:
        v = p.asleep
    except Exception as e:
        print("asleep on a closed pool:", type(e).__name__, e)
    else:
        print("asleep on a closed pool:", v)
    p.close()          # closing twice
    print("ok", kinds)
    """)


def test_close_with_live_blocks_then_a_new_pool_works():
    """docs/c-api.md: 'A block of a destroyed pool: cudaSuccess; the last one
    releases the pool'. From Python the closed object refuses calls; a new
    pool must still work and start from zero."""
    run_scenario("""
    p = sova.Pool(release_threshold=None)
    blocks = [p.allocate(MiB * (i + 1)) for i in range(4)]
    p.close()
    q = sova.Pool(release_threshold=None)
    s = q.stats()
    assert s["usedCurrent"] == 0 and s["liveBlocks"] == 0 and s["allocations"] == 0, s
    x = q.allocate(8 * MiB)
    fill(x, 8 * MiB, 1)
    for b in blocks:
        assert not (b <= x < b + MiB), "new pool handed out an address of a block still live in the closed pool"
    q.free(x); q.close()
    print("ok")
    """)


def test_blocks_live_at_close_keep_their_memory_until_freed_through_the_c_api():
    """docs/c-api.md, sovaMemPoolDestroy: 'Blocks still live stay valid (their
    contents intact): the pool's memory is released when the last of them is
    freed with sovaFreeAsync'. A closed sova.Pool refuses free() (above), so from
    Python such a block is freed through sova._capi (the C API's binding).
    docs/python.md says none of this about close()."""
    run_scenario(r"""
    import sova._capi as capi
    p = sova.Pool()
    a = p.allocate(800 * MiB)           # most of the simulated 1 GiB device
    fill(a, 800 * MiB, 0x07)
    p.close()
    assert intact(a, 800 * MiB, 0x07), "a block live at close lost its contents"
    q = sova.Pool()
    e = refused(lambda: q.allocate(800 * MiB), sova.SovaError, what="800 MiB while the closed pool's block lives")
    assert e.code == CUDA_ERROR_MEMORY_ALLOCATION, e.code
    rc = capi.lib().sovaFreeAsync(ctypes.c_void_p(a), None)
    assert rc == 0, f"sovaFreeAsync of a destroyed pool's block: {rc} (docs/c-api.md: cudaSuccess)"
    b = q.allocate(800 * MiB)           # the closed pool's memory went back with its last block
    q.free(b)
    q.close()
    print("ok")
    """)


# ---------------------------------------------------------------------------
# Release threshold and trim.
# ---------------------------------------------------------------------------

def test_trim_keep_bounds_reserved_memory_and_keeps_live_contents():
    run_scenario("""
    with sova.Pool(release_threshold=None) as p:
        blocks = [p.allocate(4 * MiB) for _ in range(16)]
        for i, b in enumerate(blocks):
            fill(b, 4 * MiB, i)
        keepers = blocks[::5]
        for b in blocks:
            if b not in keepers:
                p.free(b)
        r0 = p.stats()["reservedCurrent"]
        p.trim(1 << 40)               # keep more than held: nothing to release
        assert p.stats()["reservedCurrent"] == r0, "trim(keep > reserved) released memory"
        p.trim(0)
        s = p.stats()
        assert s["reservedCurrent"] < r0, f"trim(0) released nothing: {r0} -> {s['reservedCurrent']}"
        assert s["reservedCurrent"] >= s["usedCurrent"]
        for b in keepers:
            assert intact(b, 4 * MiB, blocks.index(b)), "trim touched a live block"
        for b in keepers:
            p.free(b)
        p.trim(20 * MiB)
        assert p.stats()["reservedCurrent"] <= 20 * MiB, p.stats()
        p.trim(0)
        assert p.stats()["reservedCurrent"] == 0, p.stats()
    print("ok")
    """)


def test_release_threshold_gives_free_memory_above_it_back_when_idle():
    """docs/python.md: release_threshold is 'bytes of free memory kept when idle;
    memory above goes back to the device'."""
    run_scenario("""
    with sova.Pool(release_threshold=0) as p:
        a = p.allocate(64 * MiB)
        p.free(a)
        wait_for(lambda: p.stats()["reservedCurrent"] == 0,
                 "an idle pool with release_threshold=0 giving its free memory back")
    with sova.Pool(release_threshold=32 * MiB) as p:
        a = p.allocate(96 * MiB)
        p.free(a)
        wait_for(lambda: p.stats()["reservedCurrent"] <= 32 * MiB,
                 "an idle pool with release_threshold=32 MiB keeping at most 32 MiB")
        assert p.stats()["reservedCurrent"] > 0, "kept nothing although the threshold allows 32 MiB"
    print("ok")
    """)


def test_release_threshold_between_chunk_sizes_keeps_at_least_it_and_less_than_a_chunk_more():
    """docs/python.md: release_threshold is 'bytes of free memory kept when idle;
    memory above goes back to the device in whole chunks that fit above it (so
    an idle pool keeps at least this much and less than one chunk more)'."""
    run_scenario("""
    chunk = 32 * MiB                           # max_chunk's default (docs/policies.md)
    with sova.Pool(release_threshold=16 * MiB) as p:
        a = p.allocate(64 * MiB)
        p.free(a)
        deadline = time.monotonic() + 2.0      # 100 looks of the release worker (every 20 ms)
        while time.monotonic() < deadline and p.stats()["reservedCurrent"] >= 16 * MiB + chunk:
            time.sleep(0.02)
        r = p.stats()["reservedCurrent"]
        assert 16 * MiB <= r < 16 * MiB + chunk, (
            f"idle pool with release_threshold=16 MiB keeps {r >> 20} MiB: the docs promise at least "
            f"16 MiB and less than one chunk more")
    print("ok")
    """)


def test_trim_to_a_keep_between_chunk_sizes_releases_the_straddling_chunk():
    """docs/c-api.md: 'at most keep stays reserved where live blocks allow (a
    chunk straddling keep goes too)' -- the counterpart of the xfail above."""
    run_scenario("""
    with sova.Pool(release_threshold=None) as p:
        a = p.allocate(64 * MiB)
        p.free(a)
        p.trim(16 * MiB)
        assert p.stats()["reservedCurrent"] <= 16 * MiB, p.stats()
    print("ok")
    """)


def test_release_threshold_none_keeps_everything():
    """docs/python.md: release_threshold None means 'keep all'."""
    run_scenario("""
    with sova.Pool(release_threshold=None) as p:
        a = p.allocate(64 * MiB)
        p.free(a)
        r = p.stats()["reservedCurrent"]
        assert r >= 64 * MiB
        time.sleep(0.5)      # 25 looks of the release worker (docs/design.md: every 20 ms)
        assert p.stats()["reservedCurrent"] == r, "release_threshold=None released memory"
    print("ok")
    """)


def test_default_release_threshold_of_a_plain_pool_keeps_everything():
    """docs/python.md's options table: release_threshold defaults to None ('keep
    all, as PyTorch does'), with no separate value for sova.Pool (unlike remap and
    the sleep options). docs/sleep-wake.md ('No drift across cycles') speaks of
    'the default of 0' instead: the docs disagree; this holds sova.Pool to
    docs/python.md."""
    run_scenario("""
    with sova.Pool() as p:
        a = p.allocate(64 * MiB)
        p.free(a)
        r = p.stats()["reservedCurrent"]
        time.sleep(0.5)
        assert p.stats()["reservedCurrent"] == r >= 64 * MiB, "sova.Pool() released memory: its default is not None"
    print("ok")
    """)


# ---------------------------------------------------------------------------
# Sleep and wake from Python.
# ---------------------------------------------------------------------------

def test_sleep_arguments_are_checked_before_anything_changes():
    run_scenario(r"""
    with sova.Pool(release_threshold=None) as p:
        a = p.allocate(3 * MiB)
        fill(a, 3 * MiB, 0x42)
        before = stable(p.stats())
        for bad in (None, 0, 1, 2, "yes", "", 1.0, [], (True,), {True}):
            refused(lambda: p.sleep(backup=bad), TypeError, words=("backup",), what=f"sleep(backup={bad!r})",
                    promise="backup is True or False ... anything else is a TypeError and the pool is untouched")
            refused(lambda: p.sleep(backup=False, zero=bad), TypeError, words=("zero",),
                    what=f"sleep(backup=False, zero={bad!r})", promise="zero: not a bool: TypeError")
            assert not p.asleep
        refused(lambda: p.sleep(backup=True, zero=True), ValueError, words=("zero",), what="backup=True, zero=True",
                promise="True with backup=True: ValueError")
        refused(lambda: p.sleep(zero=True), ValueError, words=("zero",), what="zero=True (backup defaults to True)",
                promise="True with backup=True: ValueError")
        refused(lambda: p.sleep(True), TypeError, what="sleep(True)", promise="keyword-only")
        refused(lambda: p.sleep(False), TypeError, what="sleep(False)", promise="keyword-only")
        refused(lambda: p.sleep(backup=False, zero=False, stream="0"), TypeError, words=("stream",), what="stream='0'")
        refused(lambda: p.sleep(backup=True, stream=-1), ValueError, words=("stream",), what="stream=-1")
        refused(lambda: p.sleep(backup=True, stream=1 << 64), OverflowError, words=("stream",), what="stream=2**64")
        refused(lambda: p.sleep(backup=True, unknown=1), TypeError, what="unknown keyword")
        refused(lambda: p.wake(stream="0"), TypeError, words=("stream",), what="wake(stream='0')")
        refused(lambda: p.wake(stream=1.0), TypeError, words=("stream",), what="wake(stream=1.0)")
        refused(lambda: p.wake(stream=-2), ValueError, words=("stream",), what="wake(stream=-2)")
        assert not p.asleep
        p.wake(stream=None)                 # awake: nothing to do
        assert not p.asleep
        unchanged(p, before, "refused sleep/wake arguments")
        assert intact(a, 3 * MiB, 0x42)
        p.free(a)
    print("ok")
    """)


def test_bad_arguments_while_asleep_leave_it_asleep():
    run_scenario(r"""
    with sova.Pool(release_threshold=None) as p:
        a = p.allocate(2 * MiB)
        fill(a, 2 * MiB, 0x99)
        p.sleep()
        before = stable(p.stats())
        refused(lambda: p.wake(stream="x"), TypeError, words=("stream",), what="wake(stream='x') asleep")
        refused(lambda: p.sleep(backup=None), TypeError, words=("backup",), what="sleep(backup=None) asleep")
        refused(lambda: p.sleep(backup=False, zero=1), TypeError, words=("zero",), what="zero=1 asleep")
        assert p.asleep, "a refused call woke the pool"
        unchanged(p, before, "refused calls while asleep")
        p.wake()
        assert intact(a, 2 * MiB, 0x99)
        p.free(a)
    print("ok")
    """)


def test_sleep_wake_cycle_statistics_and_idempotence():
    run_scenario(r"""
    with sova.Pool(release_threshold=None) as p:
        blocks = {p.allocate(n): n for n in (MiB, 5 * MiB + 3, 4096, 17 * MiB)}
        for i, (b, n) in enumerate(blocks.items()):
            fill(b, n, 0x10 + i)
        s0 = p.stats()
        used = sum(blocks.values())
        assert not p.asleep and s0["asleepBytes"] == 0 and s0["sleepHostBytes"] == 0, s0
        p.sleep()
        s1 = p.stats()
        assert p.asleep is True, "asleep after sleep()"
        assert s1["asleepBytes"] > 0, f"asleepBytes after sleep: {s1}"
        assert s1["sleepHostBytes"] >= used, f"backup of {used} live bytes in {s1['sleepHostBytes']} host bytes"
        assert s1["usedCurrent"] == used and s1["liveBlocks"] == 4, f"live blocks survive sleep: {s1}"
        p.sleep()                  # "sleeping an asleep pool ... do nothing"
        p.sleep(backup=False)      # also nothing: the pool is asleep already
        s2 = p.stats()
        assert p.asleep
        for k in ("asleepBytes", "sleepHostBytes", "usedCurrent", "liveBlocks", "reservedCurrent"):
            assert s2[k] == s1[k], f"a second sleep changed {k}: {s1[k]} -> {s2[k]}"
        p.wake()
        s3 = p.stats()
        assert not p.asleep and s3["asleepBytes"] == 0, s3
        assert s3["reservedCurrent"] == s0["reservedCurrent"], \
            f"docs/sleep-wake.md: 'the pool's reserved bytes after wake are what they were before sleep': {s0['reservedCurrent']} -> {s3['reservedCurrent']}"
        assert s3["sleepHostBytes"] == s1["sleepHostBytes"], "host memory stays pinned across cycles"
        for i, (b, n) in enumerate(blocks.items()):
            assert intact(b, n, 0x10 + i), f"block {i} not restored at its address"
        p.wake()                   # "waking an awake one does nothing"
        assert not p.asleep
        assert stable(p.stats())["reservedCurrent"] == s3["reservedCurrent"]
        # A second cycle pins nothing more.
        p.sleep(); p.wake()
        assert p.stats()["sleepHostBytes"] == s1["sleepHostBytes"], "sleepHostBytes grew on the second cycle"
        p.release_sleep_host_memory()
        assert p.stats()["sleepHostBytes"] == 0, "release_sleep_host_memory gives the host memory back"
        for b in blocks:
            p.free(b)
    print("ok")
    """)


def test_allocate_while_asleep_is_not_permitted_and_free_while_asleep_is_final():
    run_scenario(r"""
    with sova.Pool(release_threshold=None) as p:
        a = p.allocate(4 * MiB); fill(a, 4 * MiB, 0xaa)
        b = p.allocate(4 * MiB); fill(b, 4 * MiB, 0xbb)
        c = p.allocate(100);      fill(c, 100, 0xcc)
        p.sleep()
        before = stable(p.stats())
        for n in (1, MiB, 64 * MiB):
            e = refused(lambda: p.allocate(n), sova.SovaError, words=("asleep",), what=f"allocate({n}) asleep",
                        promise="docs/sleep-wake.md: an allocation fails with cudaErrorNotPermitted ... says the pool is asleep")
            assert e.code == CUDA_ERROR_NOT_PERMITTED, f"code {e.code}, want 800 (cudaErrorNotPermitted)"
        s = stable(p.stats())
        d = {k: v for k, v in diff(before, s).items() if k != "failedAllocations"}
        assert not d, f"allocations refused while asleep changed {d}"
        print("failedAllocations counts refusals while asleep:", s["failedAllocations"] - before["failedAllocations"])
        p.free(b)                          # "a free is accepted and final"
        e = refused(lambda: p.free(b), sova.SovaError, words=("already freed",), what="double free while asleep")
        refused(lambda: p.free(a + 512), sova.SovaError, words=("inside a block",), what="interior free asleep")
        s = p.stats()
        assert s["liveBlocks"] == 2 and s["usedCurrent"] == 4 * MiB + 100 and s["deallocations"] == 1, s
        assert p.asleep
        p.wake()
        assert intact(a, 4 * MiB, 0xaa) and intact(c, 100, 0xcc), "blocks live at wake restored"
        x = p.allocate(4 * MiB)            # works after wake
        p.free(x); p.free(a); p.free(c)
        assert p.stats()["liveBlocks"] == 0
    print("ok")
    """)


def test_trim_and_reset_peaks_while_asleep_then_wake_restores():
    """docs/sleep-wake.md counts trims while asleep among the programs it runs;
    a trim while asleep must not lose live blocks."""
    run_scenario(r"""
    with sova.Pool(release_threshold=None) as p:
        a = p.allocate(6 * MiB); fill(a, 6 * MiB, 0x61)
        b = p.allocate(6 * MiB); fill(b, 6 * MiB, 0x62)
        f = p.allocate(32 * MiB); p.free(f)
        p.sleep()
        p.free(b)
        p.trim(0)
        p.reset_peaks()
        s = p.stats()
        assert p.asleep and s["usedCurrent"] == 6 * MiB and s["liveBlocks"] == 1, s
        p.wake()
        assert not p.asleep and p.stats()["asleepBytes"] == 0
        assert intact(a, 6 * MiB, 0x61), "trim while asleep lost a live block's contents"
        p.free(a)
        p.trim(0)
        assert p.stats()["reservedCurrent"] == 0
    print("ok")
    """)


def test_discard_with_zero_reads_zero_and_discard_keeps_no_host_memory():
    run_scenario(r"""
    with sova.Pool(release_threshold=None) as p:
        a = p.allocate(3 * MiB + 5); fill(a, 3 * MiB + 5, 0xee)
        b = p.allocate(700);          fill(b, 700, 0xdd)
        p.sleep(backup=False, zero=True)
        s = p.stats()
        assert p.asleep and s["sleepHostBytes"] == 0, f"a discard needs no host memory: {s}"
        p.wake()
        assert intact(a, 3 * MiB + 5, 0) and intact(b, 700, 0), \
            "docs: zero=True with backup=False: the live blocks read zero after wake"
        # Plain discard: contents undefined, addresses and statistics kept.
        fill(a, 3 * MiB + 5, 0x12)
        used = p.stats()["usedCurrent"]
        p.sleep(backup=False)
        p.wake()
        s = p.stats()
        assert s["usedCurrent"] == used and s["liveBlocks"] == 2 and s["sleepHostBytes"] == 0, s
        fill(a, 3 * MiB + 5, 0x13)        # the address is mapped again
        assert intact(a, 3 * MiB + 5, 0x13)
        p.free(a); p.free(b)
    print("ok")
    """)


def test_a_plain_pools_discarding_sleep_keeps_the_host_memory_it_pinned():
    """docs/sleep-wake.md: 'A sleep without backup needs no host memory and is
    never refused (on a plain pool it keeps the host memory already pinned)'."""
    run_scenario(r"""
    with sova.Pool(release_threshold=None, sleep_host_budget=4 * MiB) as p:
        a = p.allocate(3 * MiB); fill(a, 3 * MiB, 0x31)
        p.sleep(); p.wake()
        h = p.stats()["sleepHostBytes"]
        assert 3 * MiB <= h <= 4 * MiB, p.stats()
        b = p.allocate(16 * MiB)         # now beyond the budget: only a discard may sleep
        p.sleep(backup=False)
        s = p.stats()
        assert p.asleep and s["sleepHostBytes"] == h and s["sleepBudgetRefusals"] == 0, s
        p.wake(); p.free(a); p.free(b)
    print("ok")
    """)


def test_wake_on_a_stream_and_reuse_of_a_block_freed_while_asleep():
    """wake(stream=s): 'stream-ordered, returns at once, and only later work on
    that stream is sure to see the contents' -- from Python, without kernels,
    the host waits for the contents to appear. A block freed while asleep is
    free at wake; its place is reused and survives the next cycle."""
    run_scenario(r"""
    with sova.Pool(release_threshold=None) as p:
        a = p.allocate(8 * MiB); fill(a, 8 * MiB, 0x44)
        b = p.allocate(8 * MiB); fill(b, 8 * MiB, 0x45)
        for stream in (0, 1, 2):
            p.sleep(stream=stream)
            p.wake(stream=stream)           # stream-ordered, returns at once
            wait_for(lambda: intact(a, 8 * MiB, 0x44) and intact(b, 8 * MiB, 0x45), f"restore on stream {stream}")
        p.sleep()
        p.free(b)                           # while asleep: final
        p.wake()
        c = p.allocate(8 * MiB)
        fill(c, 8 * MiB, 0x46)
        assert intact(a, 8 * MiB, 0x44)
        p.sleep(); p.wake()
        assert intact(a, 8 * MiB, 0x44) and intact(c, 8 * MiB, 0x46), "second cycle after reuse"
        p.free(a); p.free(c)
        assert p.stats()["liveBlocks"] == 0
    print("ok")
    """)


@pytest.mark.parametrize("seed", SEEDS)
def test_random_sleep_wake_program(seed):
    run_scenario(f"""
    seed = {seed}
    rng = random.Random(seed)
    with sova.Pool(release_threshold=None, policy=rng.choice(("default", "buddy", "best_fit", "size_classes"))) as p:
        live = {{}}       # address -> (size, byte or None when undefined)
        allocs = frees = 0
        ops = dict(sleeps_with_live=0, wakes_checked=0, frees_asleep=0, refused_asleep=0)
        for step in range(120):
            ctx = f"seed={{seed}} step={{step}} asleep={{p.asleep}}"
            op = rng.random()
            if op < 0.35:
                n = rng.choice((1, 512, 4097, MiB, 3 * MiB + 1, 12 * MiB))
                if p.asleep:
                    e = refused(lambda: p.allocate(n), sova.SovaError, words=("asleep",), what=ctx)
                    assert e.code == CUDA_ERROR_NOT_PERMITTED, ctx
                    ops["refused_asleep"] += 1
                    continue
                a = p.allocate(n, rng.choice((0, 2)))
                byte = rng.randrange(256)
                fill(a, n, byte)
                live[a] = (n, byte)
                allocs += 1
            elif op < 0.55 and live:
                a = rng.choice(list(live))
                n, byte = live.pop(a)
                if not p.asleep and byte is not None:
                    assert first_bad(a, n, byte) is None, f"{{ctx}}: {{a:#x}}+{{n}} lost its contents"
                ops["frees_asleep"] += p.asleep
                p.free(a, rng.choice((0, 2)))
                frees += 1
            elif op < 0.75:
                mode = rng.choice(("backup", "discard", "zero"))
                was_asleep = p.asleep
                r0 = p.stats()["reservedCurrent"]
                if mode == "backup":
                    p.sleep()
                elif mode == "discard":
                    p.sleep(backup=False)
                else:
                    p.sleep(backup=False, zero=True)
                assert p.asleep, ctx
                s = p.stats()
                if not was_asleep:
                    ops["sleeps_with_live"] += bool(live)
                    if mode == "backup":
                        used = sum(n for n, _ in live.values())
                        assert s["sleepHostBytes"] >= used, f"{{ctx}}: host {{s['sleepHostBytes']}} < live {{used}}"
                    else:
                        live = {{a: (n, (0 if mode == "zero" else None)) for a, (n, b) in live.items()}}
                    assert s["asleepBytes"] == r0 or r0 == 0 and s["asleepBytes"] == 0, \\
                        f"{{ctx}}: asleepBytes {{s['asleepBytes']}} vs reserved before sleep {{r0}}"
            elif op < 0.92:
                p.wake() if rng.random() < 0.7 else p.wake(stream=0)
                if rng.random() < 0.5:
                    p.wake()
                assert not p.asleep and p.stats()["asleepBytes"] == 0, ctx
                ops["wakes_checked"] += any(b is not None for _, b in live.values())
                for a, (n, byte) in live.items():
                    if byte is not None:
                        bad = first_bad(a, n, byte)
                        assert bad is None, f"{{ctx}}: {{a:#x}}+{{n}} not restored (want {{byte:#x}}) at {{bad}}"
                live = {{a: (n, b if b is not None else None) for a, (n, b) in live.items()}}
                for a, (n, b) in list(live.items()):
                    if b is None:
                        nb = rng.randrange(256); fill(a, n, nb); live[a] = (n, nb)
            else:
                p.trim(rng.choice((0, 8 * MiB)))
            s = p.stats()
            assert s["usedCurrent"] == sum(n for n, _ in live.values()), f"{{ctx}}: usedCurrent {{s}}"
            assert s["liveBlocks"] == len(live) and s["allocations"] == allocs and s["deallocations"] == frees, \\
                f"{{ctx}}: counts {{s}}"
        p.wake()
        for a, (n, byte) in live.items():
            if byte is not None:
                assert first_bad(a, n, byte) is None, f"seed={{seed}} end: {{a:#x}} not restored"
            p.free(a)
        p.trim(0)
        assert p.stats()["reservedCurrent"] == 0
    assert all(ops.values()), f"seed={{seed}}: the program missed a kind of step: {{ops}}"
    print("ok", ops)
    """)


# ---------------------------------------------------------------------------
# Pin-ahead and the host memory budget.
# ---------------------------------------------------------------------------

def test_sleep_beyond_the_budget_is_refused_before_anything_is_released():
    run_scenario(r"""
    budget = 8 * MiB
    with sova.Pool(release_threshold=None, sleep_host_budget=budget) as p:
        assert p.stats()["sleepHostBudget"] == budget
        a = p.allocate(12 * MiB); fill(a, 12 * MiB, 0x5c)
        before = p.stats()
        e = refused(lambda: p.sleep(), sova.SovaError,
                    words=("the backup needs more pinned host memory than the pool's budget allows",
                           f"sleepHostBudget {budget} bytes", "nothing was copied or released",
                           "the pool is awake as it was"),
                    what="sleep beyond the budget", promise="docs/sleep-wake.md, 'The budget'")
        assert e.code == CUDA_ERROR_MEMORY_ALLOCATION, f"code {e.code}"
        after = p.stats()
        assert not p.asleep, "refused sleep left the pool asleep"
        assert after["sleepBudgetRefusals"] == before["sleepBudgetRefusals"] + 1, after
        for k in ("reservedCurrent", "usedCurrent", "liveBlocks", "asleepBytes", "sleepHostBytes", "chunksUnmapped"):
            assert after[k] == before[k], f"refused sleep changed {k}: {before[k]} -> {after[k]}"
        assert intact(a, 12 * MiB, 0x5c)
        b = p.allocate(MiB)               # "allocations served as before"
        p.free(b)
        # reserve_sleep_backup beyond it: refused the same way.
        e = refused(lambda: p.reserve_sleep_backup(budget + 2 * MiB), sova.SovaError,
                    words=("that is more pinned host memory than the pool's budget allows", "nothing was pinned"),
                    what="reserve beyond the budget", promise="docs/sleep-wake.md, 'The budget'")
        s = p.stats()
        assert s["sleepBudgetRefusals"] == before["sleepBudgetRefusals"] + 2 and s["sleepHostBytes"] == 0, s
        # Within the budget it works; the sleep with the live bytes under it too.
        p.reserve_sleep_backup(4 * MiB)
        assert p.stats()["sleepHostBytes"] >= 4 * MiB
        p.free(a)
        a = p.allocate(6 * MiB); fill(a, 6 * MiB, 0x5d)
        p.sleep(); p.wake()
        assert intact(a, 6 * MiB, 0x5d)
        assert p.stats()["sleepHostBytes"] <= budget, "the pool holds more host memory than its budget"
        p.release_sleep_host_memory()
        assert p.stats()["sleepHostBytes"] == 0
        p.free(a)
    print("ok")
    """)


def test_reserve_sleep_backup_arguments():
    """nbytes is a size: 'not an int (None included) is a TypeError, a negative
    one a ValueError, 2**64 or more an OverflowError; nothing changes'."""
    run_scenario(r"""
    with sova.Pool(release_threshold=None) as p:
        before = stable(p.stats())
        for bad, err in (("1", TypeError), (None, TypeError), (1.5, TypeError), (True, TypeError),
                         (-1, ValueError), (1 << 64, OverflowError)):
            refused(lambda: p.reserve_sleep_backup(bad), err, what=f"reserve_sleep_backup({bad!r})",
                    promise="docs/python.md size checks")
        unchanged(p, before, "refused reserve_sleep_backup")
        refused(lambda: p.release_sleep_host_memory(1), TypeError, what="release_sleep_host_memory(1)")
        p.reserve_sleep_backup(0)
        p.reserve_sleep_backup(5 * MiB)
        h = p.stats()["sleepHostBytes"]
        assert h >= 5 * MiB, p.stats()
        p.reserve_sleep_backup(MiB)       # less than held: nothing more pinned
        assert p.stats()["sleepHostBytes"] == h
        p.release_sleep_host_memory()
        p.release_sleep_host_memory()     # twice: nothing left
        assert p.stats()["sleepHostBytes"] == 0
    print("ok")
    """)


def test_pin_ahead_reaches_its_target_then_the_first_sleep_pins_nothing():
    run_scenario(r"""
    budget = 40 * MiB + 12345               # rounded down to 2 MiB: 40 MiB
    with sova.Pool(release_threshold=None, sleep_pin_ahead=True, sleep_host_budget=budget) as p:
        a = p.allocate(24 * MiB); fill(a, 24 * MiB, 0x71)
        s = p.stats()
        target = min(budget // (2 * MiB) * (2 * MiB), s["reservedHigh"])
        wait_for(lambda: p.stats()["sleepPinAheadTarget"] == target,
                 f"sleepPinAheadTarget = min(budget rounded down to 2 MiB, reservedHigh) = {target}")
        wait_for(lambda: p.stats()["sleepPinAheadBytes"] >= p.stats()["sleepPinAheadTarget"],
                 "pin-ahead reaching its target")
        s = p.stats()
        assert s["sleepHostBytes"] <= budget, s
        assert s["sleepPinAheadFailures"] == 0, s
        h = s["sleepHostBytes"]
        p.sleep()
        assert p.stats()["sleepHostBytes"] == h, f"the first sleep after pin-ahead pinned more: {h} -> {p.stats()}"
        p.wake()
        assert intact(a, 24 * MiB, 0x71)
        p.release_sleep_host_memory()
        s = p.stats()
        assert s["sleepHostBytes"] == 0 and s["sleepPinAheadBytes"] == 0, s
        assert s["sleepPinAheadTarget"] == 0, f"docs: target 0 when holding (after a release): {s}"
        time.sleep(0.3)                    # six looks of the thread (every 50 ms)
        assert p.stats()["sleepHostBytes"] == 0, "pin-ahead took back host memory released on purpose"
        b = p.allocate(64 * MiB)           # reserves more than ever: pin-ahead resumes
        wait_for(lambda: p.stats()["sleepPinAheadTarget"] > 0, "pin-ahead resuming after growth")
        wait_for(lambda: p.stats()["sleepPinAheadBytes"] >= p.stats()["sleepPinAheadTarget"],
                 "pin-ahead reaching its target again")
        assert p.stats()["sleepHostBytes"] <= budget
        p.free(a); p.free(b)
    print("ok")
    """)


def test_pin_ahead_with_a_budget_under_2_mib_pins_nothing_and_off_pins_nothing():
    run_scenario(r"""
    with sova.Pool(release_threshold=None, sleep_pin_ahead=True, sleep_host_budget=MiB) as p:
        a = p.allocate(16 * MiB)
        time.sleep(0.3)
        s = p.stats()
        assert s["sleepHostBytes"] == 0 and s["sleepPinAheadTarget"] == 0, \
            f"docs: a budget under 2 MiB pins nothing ahead: {s}"
        p.free(a)
    with sova.Pool(release_threshold=None) as p:     # sova.Pool's default: off
        a = p.allocate(16 * MiB)
        time.sleep(0.3)
        s = p.stats()
        assert s["sleepHostBytes"] == 0 and s["sleepPinAheadTarget"] == 0 and s["sleepHostBudget"] == 0, \
            f"docs: sleep_pin_ahead False and no budget for sova.Pool: {s}"
        p.free(a)
    print("ok")
    """)


# ---------------------------------------------------------------------------
# Graph holdings.
# ---------------------------------------------------------------------------

def test_graph_holdings_empty_and_arguments():
    run_scenario(r"""
    with sova.Pool(release_threshold=None) as p:
        assert p.graph_holdings() == [], "no graph: an empty list"
        a = p.allocate(MiB)
        assert p.graph_holdings() == []
        before = stable(p.stats())
        refused(lambda: p.graph_holdings(0), TypeError, what="graph_holdings(0)",
                promise="sova.Pool.graph_holdings() takes no argument")
        refused(lambda: p.graph_holdings(tag="x"), TypeError, what="graph_holdings(tag='x')",
                promise="sova.Pool.graph_holdings() takes no argument (tag is sova.torch's)")
        unchanged(p, before, "refused graph_holdings")
        s = p.stats()
        assert s["graphs"] == 0 and s["graphHeldBytes"] == 0 and s["graphHeldBlocks"] == 0, s
        p.sleep()
        assert p.graph_holdings() == [], "asleep, still no graph"
        p.wake()
        p.free(a)
    print("ok")
    """)


# ---------------------------------------------------------------------------
# Threads: several Python threads on their own streams on one pool.
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("seed", SEEDS[:3])
def test_threads_on_their_own_streams_then_consistent_statistics(seed):
    run_scenario(f"""
    seed = {seed}
    THREADS, STEPS = 6, 400
    errors = []
    counts = {{}}
    kept = {{}}
    with sova.Pool(release_threshold=None, policy=("default", "buddy", "best_fit")[seed % 3]) as p:
        start = threading.Barrier(THREADS)
        def worker(t):
            try:
                rng = random.Random(seed * 100 + t)
                stream = 2 if t % 2 == 0 else (0 if t % 4 == 1 else 1)   # per-thread stream, or legacy
                mine = {{}}
                allocs = frees = 0
                start.wait()
                for step in range(STEPS):
                    if rng.random() < 0.55 or not mine:
                        n = rng.choice((8, 1000, 4096, 70000, MiB + 1, 3 * MiB))
                        a = p.allocate(n, stream)
                        byte = (t * 37 + step) % 256
                        fill(a, n, byte)
                        mine[a] = (n, byte)
                        allocs += 1
                    else:
                        a = rng.choice(list(mine))
                        n, byte = mine.pop(a)
                        bad = first_bad(a, n, byte)
                        assert bad is None, f"seed={{seed}} thread {{t}} step {{step}}: {{a:#x}}+{{n}} overwritten at {{bad}}"
                        p.free(a, stream)
                        frees += 1
                    if step % 50 == 0:
                        p.stats()
                counts[t] = (allocs, frees)
                kept[t] = mine
            except BaseException as e:
                errors.append(f"thread {{t}}: {{e!r}}")
        threads = [threading.Thread(target=worker, args=(t,)) for t in range(THREADS)]
        for th in threads: th.start()
        for th in threads: th.join()
        assert not errors, errors
        s = p.stats()
        live = {{a: v for m in kept.values() for a, v in m.items()}}
        assert len(live) == sum(len(m) for m in kept.values()), "two threads got the same address"
        ctx = f"seed={{seed}} after the threads"
        invariants(s, live, ctx)
        assert s["allocations"] == sum(a for a, f in counts.values()), f"{{ctx}}: {{s}}"
        assert s["deallocations"] == sum(f for a, f in counts.values()), f"{{ctx}}: {{s}}"
        starts = sorted(live)
        for x, y in zip(starts, starts[1:]):
            assert x + live[x][0] <= y, f"{{ctx}}: live blocks overlap: {{x:#x}}+{{live[x][0]}} and {{y:#x}}"
        for a, (n, byte) in live.items():
            assert first_bad(a, n, byte) is None, f"{{ctx}}: {{a:#x}} overwritten"
        # Free everything from the main thread on stream 0 (frees on another stream are allowed).
        for a in live:
            p.free(a)
        p.trim(0)
        s = p.stats()
        assert s["usedCurrent"] == 0 and s["liveBlocks"] == 0 and s["reservedCurrent"] == 0, f"{{ctx}}: {{s}}"
    print("ok")
    """)


def test_threads_sleep_wake_while_others_only_read_statistics():
    """Sleep/wake on one thread while other threads read stats() and try
    allocations that must either succeed (awake) or fail with 'asleep'.
    docs/sleep-wake.md: 'Do not allocate from the pool on another thread while
    it falls asleep' -- so the others only read statistics during the cycles,
    and allocate only between them."""
    run_scenario(r"""
    with sova.Pool(release_threshold=None) as p:
        a = p.allocate(8 * MiB); fill(a, 8 * MiB, 0x3f)
        stop = threading.Event()
        errors = []
        def reader():
            try:
                while not stop.is_set():
                    s = p.stats()
                    assert s["usedCurrent"] == 8 * MiB and s["liveBlocks"] == 1, s
            except BaseException as e:
                errors.append(repr(e))
        rs = [threading.Thread(target=reader) for _ in range(3)]
        for r in rs: r.start()
        for cycle in range(20):
            p.sleep(backup=True)
            p.wake()
            assert intact(a, 8 * MiB, 0x3f), f"cycle {cycle}"
        stop.set()
        for r in rs: r.join()
        assert not errors, errors
        p.free(a)
    print("ok")
    """)


# ---------------------------------------------------------------------------
# Statistics: their documented meaning (and a strict xfail where sova departs from it).
# ---------------------------------------------------------------------------

def test_free_backed_bytes_lies_between_reserved_minus_in_use_and_reserved():
    """include/sova/sova.h: freeBackedBytes is 'physical memory under free blocks,
    in whole granules (a granule a free block shares with a live one counts
    whole), at most reservedCurrent'. So it is at least what is reserved and not
    in a live block: reserved - in use, less each live block's rounding up to
    512 B (usedCurrent counts requested bytes)."""
    run_scenario(r"""
    with sova.Pool(release_threshold=None) as p:
        live = []
        for size in (3 * MiB, 1, 700 * 1024, 5 * MiB + 3, 512):
            live.append(p.allocate(size))
            s = p.stats()
            low = s["reservedCurrent"] - s["usedCurrent"] - 511 * s["liveBlocks"]
            high = s["reservedCurrent"]
            assert low <= s["freeBackedBytes"] <= high, (
                f"after allocating {size} B: freeBackedBytes {s['freeBackedBytes']} not within "
                f"[reserved - used - rounding, reserved] = [{low}, {high}]")
        for ptr in live:
            p.free(ptr)
        s = p.stats()
        assert s["freeBackedBytes"] == s["reservedCurrent"], f"all free: {s}"
    print("ok")
    """)


def test_refused_free_on_a_new_stream_changes_no_statistics():
    """docs/c-api.md: 'An interior pointer or a double free ...: cudaErrorInvalidValue, and nothing
    changes: ... the pool's statistics as they were' -- on a stream the pool had not seen
    (cudaStreamPerThread) too: no stream state is made for a refused free."""
    run_scenario(r"""
    with sova.Pool(release_threshold=None) as p:
        a = p.allocate(MiB)
        c = p.allocate(MiB)
        p.free(c)
        before = stable(p.stats())
        refused(lambda: p.free(a + 512, 2), sova.SovaError, words=("inside a block",), what="interior free")
        unchanged(p, before, "a refused interior free on cudaStreamPerThread")
        refused(lambda: p.free(c, 2), sova.SovaError, words=("already freed",), what="double free")
        unchanged(p, before, "a refused double free on cudaStreamPerThread")
        p.free(a)
    print("ok")
    """)


# ---------------------------------------------------------------------------
# The driver choice, and several pools.
# ---------------------------------------------------------------------------

def test_without_the_simulation_a_pool_is_a_clear_sova_error():
    """docs/python.md: 'making a pool without a GPU or driver raises
    sova.SovaError saying so'; 'without a GPU the message says none was found
    and that SOVA_DRIVER=sim runs the host simulation'. (This machine has no GPU.)"""
    from sim_helpers import run_py
    out = run_py("""
    import sova
    try:
        sova.Pool()
    except sova.SovaError as e:
        assert "SOVA_DRIVER=sim" in str(e), e
        assert isinstance(e.code, int) and e.code != 0, e.code
        print("refused:", e.code, e)
    else:
        raise SystemExit("a pool was made without a GPU and without SOVA_DRIVER=sim")
    """, sim=False)
    assert "refused:" in out


def test_sova_driver_set_in_os_environ_before_the_first_pool_is_honoured():
    """docs/python.md: 'With SOVA_DRIVER=sim in the environment (before the first pool)'."""
    from sim_helpers import run_py
    run_py("""
    import os, sova
    os.environ["SOVA_DRIVER"] = "sim"
    with sova.Pool() as p:
        p.free(p.allocate(1 << 20))
    print("ok")
    """, sim=False)


def test_one_pool_asleep_leaves_another_pool_working():
    run_scenario(r"""
    pa = sova.Pool(release_threshold=None)
    pb = sova.Pool(release_threshold=None, policy="buddy")
    a = pa.allocate(16 * MiB); fill(a, 16 * MiB, 0x0a)
    b = pb.allocate(16 * MiB); fill(b, 16 * MiB, 0x0b)
    pa.sleep()
    assert pa.asleep and not pb.asleep
    c = pb.allocate(32 * MiB); fill(c, 32 * MiB, 0x0c)
    sb = pb.stats()
    assert sb["asleepBytes"] == 0 and sb["liveBlocks"] == 2, sb
    refused(lambda: pa.allocate(1), sova.SovaError, words=("asleep",), what="allocate on the asleep pool")
    pb.sleep(backup=False, zero=True)
    pa.wake()
    assert intact(a, 16 * MiB, 0x0a)
    pb.wake()
    assert intact(b, 16 * MiB, 0) and intact(c, 32 * MiB, 0)
    for pool, ptrs in ((pa, (a,)), (pb, (b, c))):
        for x in ptrs:
            pool.free(x)
        pool.trim(0)
        assert pool.stats()["reservedCurrent"] == 0
        pool.close()
    print("ok")
    """)
