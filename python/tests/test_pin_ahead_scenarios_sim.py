"""User scenarios for sleep's pin-ahead and host memory budget through
``sova.Pool``, on the host simulation (SOVA_DRIVER=sim: pool memory is host
memory, so the test reads and writes it with ctypes), written from
docs/sleep-wake.md ("Pinning ahead, and the host memory budget") and
docs/python.md alone.

Each scenario runs in a fresh interpreter (sim_helpers.run_py). Background
progress is waited for by bounded polls of ``stats()`` (5 s), never by a
sleep that assumes timing.
"""
import pytest

from sim_helpers import run_py

# Shared by every scenario body: block patterns, pool model, checks.
PRELUDE = r"""
import ctypes, random, time
import sova

MiB = 1 << 20
BUDGET_WORDS = "the backup needs more pinned host memory than the pool's budget allows"
RESERVE_WORDS = "pinned host memory than the pool's budget allows (sleepHostBudget "

def pattern(bid, n):
    # a 4099-byte period (odd: a block read shifted by any word differs)
    unit = random.Random(bid).randbytes(4099)
    return (unit * (n // 4099 + 1))[:n]

class Subject:
    def __init__(self, name, budget, pin_ahead, cap):
        self.name, self.budget, self.pin_ahead, self.cap = name, budget, pin_ahead, cap
        kw = {}
        if budget is not None:
            kw["sleep_host_budget"] = budget
        if pin_ahead is not None:
            kw["sleep_pin_ahead"] = pin_ahead
        self.pool = sova.Pool(**kw)
        self.budget = budget or 0
        self.pin_ahead = bool(pin_ahead)
        self.blocks = {}          # ptr -> [size, id, valid]
        self.asleep = False
        self.holding = False      # pin-ahead held after a release
        self.held_at_high = 0
        self.next_id = 1
        self.reserved_before = 0  # reservedCurrent when it last fell asleep

    def live(self):
        return sum(b[0] for b in self.blocks.values())

    def alloc(self, n):
        p = self.pool.allocate(n)
        bid = self.next_id; self.next_id += 1
        ctypes.memmove(p, pattern(bid, n), n)
        self.blocks[p] = [n, bid, True]
        return p

    def free(self, p):
        self.pool.free(p)
        del self.blocks[p]

def target_of(s):
    # min(the budget rounded down to whole 2 MiB slabs, reservedHigh)
    b = s["sleepHostBudget"]
    return s["reservedHigh"] if b == 0 else min(b // (2 * MiB) * (2 * MiB), s["reservedHigh"])

def done(s):
    t = s["sleepPinAheadTarget"]
    return s["sleepPinAheadBytes"] >= t or s["sleepHostBytes"] >= t

def wait_pin_ahead(pool, limit=5.0):
    end = time.monotonic() + limit
    s = pool.stats()
    while not (s["sleepPinAheadTarget"] == target_of(s) and done(s)) and time.monotonic() < end:
        time.sleep(0.002)
        s = pool.stats()
    assert s["sleepPinAheadTarget"] == target_of(s) and done(s), s
    return s

def poll(pool, ok, limit=5.0):
    end = time.monotonic() + limit
    s = pool.stats()
    while not ok(s) and time.monotonic() < end:
        time.sleep(0.002)
        s = pool.stats()
    return s

def check(x):
    s = x.pool.stats()
    what = (x.name, s)
    assert s["sleepHostBudget"] == x.budget, what
    assert s["liveBlocks"] == len(x.blocks), what
    assert s["sleepPinAheadBytes"] <= s["sleepHostBytes"], what
    if x.budget:
        assert s["sleepHostBytes"] <= x.budget, what
        assert s["sleepPinAheadTarget"] <= x.budget, what
    assert s["sleepPinAheadTarget"] <= s["reservedHigh"], what
    if not x.pin_ahead:
        assert s["sleepPinAheadTarget"] == 0 and s["sleepPinAheadBytes"] == 0, what
    assert x.pool.asleep == x.asleep, what
    if x.asleep:
        assert s["reservedCurrent"] == 0, what
        return s
    assert s["asleepBytes"] == 0, what
    for p, (n, bid, valid) in x.blocks.items():
        if valid:
            assert ctypes.string_at(p, n) == pattern(bid, n), (x.name, "block", bid, n, hex(p))
    return s

def sleep_backup(x):
    before = x.pool.stats()
    if not x.asleep:
        x.reserved_before = before["reservedCurrent"]
    live = x.live()
    try:
        x.pool.sleep()
    except sova.SovaError as e:
        after = x.pool.stats()
        msg = str(e)
        assert e.code == 2, msg                               # cudaErrorMemoryAllocation
        assert x.budget != 0, msg
        assert BUDGET_WORDS in msg, msg
        assert "sleepHostBudget %d bytes" % x.budget in msg, msg
        assert "nothing was copied or released, the pool is awake as it was" in msg, msg
        assert before["sleepHostBytes"] < before["reservedCurrent"], (msg, before)
        assert after["sleepBudgetRefusals"] == before["sleepBudgetRefusals"] + 1, after
        assert not x.pool.asleep and after["asleepBytes"] == 0, after
        assert after["reservedCurrent"] == before["reservedCurrent"], after
        p = x.pool.allocate(4096)                          # allocations served as before
        x.pool.free(p)
        return False
    after = x.pool.stats()
    x.asleep = True
    if x.budget:
        assert live <= x.budget, (live, after)
    assert after["asleepBytes"] == before["reservedCurrent"], (before, after)
    assert after["sleepHostBytes"] >= max(before["sleepHostBytes"], live), (before, after)
    assert after["sleepBudgetRefusals"] == before["sleepBudgetRefusals"]
    return True

def sleep_discard(x):
    if not x.asleep:
        x.reserved_before = x.pool.stats()["reservedCurrent"]
        for b in x.blocks.values():
            b[2] = False
    x.pool.sleep(backup=False)                              # never refused
    x.asleep = True

def wake(x, _unused=None):
    reserved_before = x.reserved_before
    was = x.asleep
    x.pool.wake()
    x.asleep = False
    s = x.pool.stats()
    assert s["asleepBytes"] == 0, s
    if was:
        assert s["usedCurrent"] <= s["reservedCurrent"] <= reserved_before, (reserved_before, s)
    for p, b in x.blocks.items():
        if not b[2]:
            b[1] = x.next_id; x.next_id += 1
            ctypes.memmove(p, pattern(b[1], b[0]), b[0])
            b[2] = True

def release(x):
    before = x.pool.stats()
    if x.asleep:
        try:
            x.pool.release_sleep_host_memory()
        except sova.SovaError as e:
            assert x.pool.stats()["sleepHostBytes"] == before["sleepHostBytes"]
            return
        raise AssertionError("release while asleep was not refused")
    x.pool.release_sleep_host_memory()
    s = x.pool.stats()
    assert s["sleepHostBytes"] == 0 and s["sleepPinAheadBytes"] == 0 and s["sleepPinAheadTarget"] == 0, s
    if x.pin_ahead:
        x.holding, x.held_at_high = True, s["reservedHigh"]

def reserve(x, nbytes):
    before = x.pool.stats()
    if x.budget and nbytes > x.budget:
        try:
            x.pool.reserve_sleep_backup(nbytes)
        except sova.SovaError as e:
            assert e.code == 2 and RESERVE_WORDS in str(e), str(e)
            after = x.pool.stats()
            assert after["sleepBudgetRefusals"] == before["sleepBudgetRefusals"] + 1, after
            assert after["sleepHostBytes"] <= x.budget, after
            return
        raise AssertionError("reserve beyond the budget was not refused")
    x.pool.reserve_sleep_backup(nbytes)
    s = x.pool.stats()
    assert s["sleepHostBytes"] >= nbytes, (nbytes, s)
    if nbytes:
        x.holding = False

def note_growth(x):
    if x.holding and x.pool.stats()["reservedHigh"] > x.held_at_high:
        x.holding = False
"""


def run(body: str) -> str:
    return run_py(PRELUDE + "\n" + body)


# Seed 36 found a race (a release right after a growth left a slab pinned
# ahead by a target decided before the release): fixed, and kept.
@pytest.mark.parametrize("seed", [7, 36, 1234])
def test_random_program_three_pools(seed):
    """Random grow/free/sleep/wake/release/reserve/trim/destroy on three pools
    with their own budgets; every kept byte and the documented statistics
    checked after each step."""
    run(f"""
rng = random.Random({seed})
subjects = [Subject("A pin-ahead budget 48 MiB", 48 * MiB, True, 80 * MiB),
            Subject("B pin-ahead no budget", None, True, 64 * MiB),
            Subject("C budget 32 MiB, pin-ahead off", 32 * MiB, None, 64 * MiB)]
reserved_before = [0, 0, 0]
refused = slept = 0
history = []
for step in range(120):
    i = rng.randrange(3)
    x = subjects[i]
    op = rng.randrange(100)
    history.append((step, i, op))
    try:
        if op < 35:
            k = rng.randrange(10)
            n = rng.randrange(256, 256 << 10) if k < 6 else rng.randrange(MiB, 6 * MiB) if k < 9 else rng.randrange(12 * MiB, 24 * MiB)
            if x.live() + n <= x.cap:
                if x.asleep:
                    try:
                        x.pool.allocate(n)
                        raise AssertionError("allocated while asleep")
                    except sova.SovaError as e:
                        assert e.code == 800, e    # cudaErrorNotPermitted
                else:
                    x.alloc(n)
                    note_growth(x)
        elif op < 52:
            if x.blocks:
                x.free(rng.choice(list(x.blocks)))
        elif op < 64:
            if not x.asleep:
                reserved_before[i] = x.pool.stats()["reservedCurrent"]
                if rng.randrange(2) and x.pin_ahead and not x.holding:
                    wait_pin_ahead(x.pool)
                if sleep_backup(x): slept += 1
                else: refused += 1
            else:
                x.pool.sleep()                             # idempotent
        elif op < 69:
            if not x.asleep:
                reserved_before[i] = x.pool.stats()["reservedCurrent"]
            sleep_discard(x)
        elif op < 82:
            wake(x, reserved_before[i])
        elif op < 87:
            release(x)
        elif op < 92:
            top = x.budget + x.budget // 2 if x.budget else 128 * MiB
            reserve(x, rng.randrange(0, top // (2 * MiB) + 1) * 2 * MiB)
        elif op < 96:
            if not x.asleep:
                before = x.pool.stats()["sleepHostBytes"]
                x.pool.trim(rng.choice([0, x.pool.stats()["reservedCurrent"] // 2]))
                assert x.pool.stats()["sleepHostBytes"] >= before
        elif op < 98:
            if not x.asleep and x.pin_ahead and not x.holding:
                wait_pin_ahead(x.pool)
        else:
            # destroy (close) and make anew; the old blocks go with it
            x.pool.close()
            fresh = Subject(x.name, x.budget or None, x.pin_ahead or None, x.cap)
            subjects[i] = fresh
        for y in subjects:
            check(y)
    except AssertionError as e:
        raise AssertionError(f"seed {seed} step {{step}} op {{op}} on {{x.name}}: {{e}}; ops on this pool (step, op): {{[(s, o) for s, j, o in history if j == i][-8:]}}") from None
print("slept", slept, "refused", refused)
for y in subjects:
    if y.asleep:
        y.pool.wake(); y.asleep = False
    check(y)
    y.pool.close()
""")


def test_first_sleep_after_pin_ahead_pins_nothing_and_budget_caps():
    """Pin-ahead follows the growth to min(budget, reserved); a sleep of a pool
    whose reserved bytes are all pinned pins nothing new (sleepHostBytes does
    not move); beyond the budget the sleep is refused, pool awake and intact."""
    run("""
x = Subject("no budget", None, True, 1 << 30)
for _ in range(4):
    x.alloc(30 * MiB + 12345)
    s = wait_pin_ahead(x.pool)
    assert s["sleepPinAheadTarget"] == s["reservedHigh"], s
    assert s["sleepHostBytes"] == s["sleepPinAheadBytes"], s
    check(x)
before = x.pool.stats()
assert sleep_backup(x)
assert x.pool.stats()["sleepHostBytes"] == before["sleepHostBytes"]
check(x)
wake(x, before["reservedCurrent"])
check(x)
x.pool.close()

y = Subject("budget 40 MiB", 40 * MiB, True, 1 << 30)
for _ in range(3):
    y.alloc(20 * MiB)
s = wait_pin_ahead(y.pool)
assert s["sleepPinAheadTarget"] == 40 * MiB, s
assert sleep_backup(y) is False
check(y)
# a sleep without backup is never refused
sleep_discard(y)
check(y)
wake(y, s["reservedCurrent"])
check(y)
# free to the budget and trim: the held slabs cover reserved, the sleep pins nothing
for p in list(y.blocks)[:2]:
    y.free(p)
y.pool.trim(0)
t = y.pool.stats()
assert t["sleepHostBytes"] >= t["reservedCurrent"], t
assert sleep_backup(y)
assert y.pool.stats()["sleepHostBytes"] == t["sleepHostBytes"]
wake(y, t["reservedCurrent"])
check(y)
y.pool.close()
""")


def test_frees_at_odd_moments():
    """Frees right after a growth (pin-ahead pinning), right before a sleep,
    and while asleep; the kept blocks come back intact, the freed ones are
    the pool's again."""
    run("""
x = Subject("odd frees", 64 * MiB, True, 1 << 30)
ps = [x.alloc(16 * MiB - 100) for _ in range(6)]
# at once, while the thread may still pin
x.free(ps[0]); x.free(ps[2])
check(x)
x.alloc(3 * MiB)
# right before the sleep
x.free(ps[4])
before = x.pool.stats()
assert x.live() <= 64 * MiB
assert sleep_backup(x)
check(x)
# while asleep: accepted and final
x.free(ps[1])
check(x)
s = x.pool.stats()
assert s["liveBlocks"] == len(x.blocks)
# release refused while asleep; allocation refused while asleep
release(x)
try:
    x.pool.allocate(4096)
    raise AssertionError("allocated while asleep")
except sova.SovaError as e:
    assert e.code == 800, e
wake(x, before["reservedCurrent"])
check(x)
# the freed memory is the pool's again
q = x.alloc(20 * MiB)
check(x)
x.pool.close()
""")


def test_release_holds_until_growth_or_reserve():
    """release_sleep_host_memory gives every pinned byte back; pin-ahead holds
    (pins nothing) until the pool reserves more than ever, or a reserve asks."""
    run("""
x = Subject("release", None, True, 1 << 30)
p = x.alloc(40 * MiB)
wait_pin_ahead(x.pool)
release(x)
time.sleep(0.2)          # several of the thread's 50 ms looks: it must stay held
s = x.pool.stats()
assert s["sleepHostBytes"] == 0 and s["sleepPinAheadTarget"] == 0, s
x.alloc(64 * MiB)        # beyond the most ever reserved: pin-ahead resumes
note_growth(x)
assert not x.holding
s = wait_pin_ahead(x.pool)
assert s["sleepPinAheadTarget"] == s["reservedHigh"] > 0, s
release(x)
reserve(x, 8 * MiB)
s = wait_pin_ahead(x.pool)   # resumes after a reserve
assert s["sleepHostBytes"] >= s["reservedHigh"], s
before = x.pool.stats()
assert sleep_backup(x)
assert x.pool.stats()["sleepHostBytes"] == before["sleepHostBytes"]
reserve(x, 4 * MiB)          # while asleep, within what is held
release(x)                   # refused while asleep
wake(x, before["reservedCurrent"])
check(x)
x.pool.close()
""")


def test_several_pools_each_with_its_budget_and_close_while_pinning():
    run("""
budgets = [8 * MiB, None, 64 * MiB, 24 * MiB]
xs = [Subject("P%d" % i, b, True, 1 << 30) for i, b in enumerate(budgets)]
for r in range(3):
    for i, x in enumerate(xs):
        x.alloc((6 + 5 * i) * MiB + r)
for x in xs:
    s = wait_pin_ahead(x.pool)
    assert s["sleepPinAheadTarget"] == (s["reservedHigh"] if not x.budget else min(x.budget, s["reservedHigh"])), s
    check(x)
res = [x.pool.stats()["reservedCurrent"] for x in xs]
outcome = [sleep_backup(x) for x in xs]
assert outcome[0] is False            # 18 MiB live > 8 MiB budget
assert outcome[1] is True             # no budget
for x in xs:
    check(x)
for x, r in zip(xs, res):
    if x.asleep:
        wake(x, r)
    check(x)
# close one while it pins ahead: right after a large growth
big = Subject("big", None, True, 1 << 30)
for _ in range(10):
    big.alloc(32 * MiB)
for p in list(big.blocks):
    big.free(p)
t0 = time.monotonic()
big.pool.close()
assert time.monotonic() - t0 < 2.0
# the other pools are untouched
for x in xs:
    check(x)
    x.pool.close()
""")


def test_budget_and_flag_arguments():
    """Bad values raise ValueError/TypeError/OverflowError naming the option,
    before anything is made (docs/python.md: "bad values raise
    ValueError/TypeError naming the option, before anything changes")."""
    run("""
def raises(exc, words, **kw):
    try:
        sova.Pool(**kw)
    except exc as e:
        assert words in str(e), (kw, e)
        return
    raise AssertionError("accepted %r" % (kw,))

raises(ValueError, "sleep_host_budget", sleep_host_budget=-1)
raises(TypeError, "sleep_host_budget", sleep_host_budget="1GiB")
raises(TypeError, "sleep_host_budget", sleep_host_budget=1.5)
raises(TypeError, "sleep_host_budget", sleep_host_budget=None)
raises(OverflowError, "sleep_host_budget", sleep_host_budget=2 ** 64)
raises(TypeError, "sleep_pin_ahead", sleep_pin_ahead="yes")
raises(TypeError, "sleep_pin_ahead", sleep_pin_ahead=None)
raises(TypeError, "sleep_host_budgets", sleep_host_budgets=1)

# the defaults of a plain sova.Pool: no pin-ahead, no budget
x = Subject("defaults", None, None, 1 << 30)
x.alloc(16 * MiB)
time.sleep(0.12)
s = x.pool.stats()
assert s["sleepHostBudget"] == 0 and s["sleepHostBytes"] == 0 and s["sleepPinAheadTarget"] == 0, s
x.pool.close()

# the largest budget: as no limit
x = Subject("huge", 2 ** 64 - 1, True, 1 << 30)
x.alloc(10 * MiB)
s = wait_pin_ahead(x.pool)
assert s["sleepHostBudget"] == 2 ** 64 - 1 and s["sleepPinAheadTarget"] == s["reservedHigh"], s
assert sleep_backup(x)
wake(x, s["reservedCurrent"])
check(x)
x.pool.close()

# a budget of 1 byte: backups of live bytes refused, discards fine
x = Subject("one byte", 1, True, 1 << 30)
x.alloc(4096)
assert sleep_backup(x) is False
sleep_discard(x)
wake(x, 0)
check(x)
# reserve_sleep_backup's argument checks, and beyond the budget
for bad, exc in [(-1, ValueError), (None, TypeError), (1.0, TypeError), (2 ** 64, OverflowError)]:
    before = x.pool.stats()
    try:
        x.pool.reserve_sleep_backup(bad)
        raise AssertionError("reserve accepted %r" % (bad,))
    except exc:
        pass
    assert x.pool.stats()["sleepBudgetRefusals"] == before["sleepBudgetRefusals"]
reserve(x, 2 * MiB)
assert x.pool.stats()["sleepBudgetRefusals"] == 2
x.pool.close()
""")


def test_torch_configure_budget_arguments():
    """sova.torch.configure checks sleep_host_budget / sleep_pin_ahead as
    sova.Pool does (docs/python.md: options are sova.PoolOptions)."""
    run("""
import sova.torch as st
for kw, exc in [(dict(sleep_host_budget=-1), ValueError), (dict(sleep_host_budget=None), TypeError),
                (dict(sleep_host_budget="x"), TypeError), (dict(sleep_host_budget=2 ** 64), OverflowError),
                (dict(sleep_pin_ahead="yes"), TypeError)]:
    try:
        st.configure(**kw)
    except exc as e:
        assert list(kw)[0] in str(e), (kw, e)
        continue
    raise AssertionError("configure accepted %r" % (kw,))
st.configure(sleep_host_budget=64 * MiB, sleep_pin_ahead=False)
""")


def test_budget_not_a_granule_multiple_pin_ahead_gets_done():
    """docs/sleep-wake.md: "Pin-ahead is done when sleepPinAheadBytes (or
    sleepHostBytes) reaches sleepPinAheadTarget"; any int budget is accepted."""
    run("""
x = Subject("odd budget", 40 * MiB + 4097, True, 1 << 30)
x.alloc(64 * MiB)
s = wait_pin_ahead(x.pool)
check(x)
x.pool.close()
""")
