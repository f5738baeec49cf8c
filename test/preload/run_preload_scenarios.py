#!/usr/bin/env python3
"""Scenario tests of LD_PRELOAD=libsova_preload.so and of the allocation log,
written from the documentation only (docs/c-api.md, "LD_PRELOAD" and "The
allocation log"; README). test/preload/meson.build registers each scenario as
a test of the sim suite:

  run_preload_scenarios.py SCENARIO PRELOAD PROBE [PLOT_LOG]

PROBE is preload_scenario_probe (linked with libcudart.so); every run has
LD_PRELOAD=PRELOAD and SOVA_DRIVER=sim (the documented test-only switch).
Each check prints one line, "ok: ..." or "FAILED: ...", quoting the docs.
Exit status 0 when every check passed.
"""
import csv
import datetime
import os
import re
import subprocess
import sys
import tempfile

HEADER = "Thread,Time,Action,Pointer,Size,Stream,Reserved"
failed = 0


def check(ok, what):
    global failed
    print(("ok: " if ok else "FAILED: ") + what)
    if not ok:
        failed += 1


def run(argv, env_extra, timeout=240, preload=True):
    env = dict(os.environ)
    env.pop("SOVA_LOG", None)
    env.update({"SOVA_DRIVER": "sim"})
    if preload:
        env["LD_PRELOAD"] = PRELOAD
    env.update(env_extra)
    p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)
    sys.stdout.write(p.stdout)
    sys.stdout.write(p.stderr)
    return p


def probe(args, env_extra=None, **kw):
    return run([PROBE] + args, env_extra or {}, **kw)


def read_log(path):
    """(header line, rows as lists of fields); None if there is no file."""
    if not os.path.exists(path):
        return None
    with open(path, newline="") as f:
        lines = f.read().splitlines()
    if not lines:
        return ("", [])
    return (lines[0], [row for row in csv.reader(lines[1:])])


def stream_field(handle):
    """docs/c-api.md: "Stream the handle in hex (0 for the legacy stream's NULL,
    as RMM prints it)". The probe prints handles with %p: glibc writes NULL
    as (nil)."""
    return "0" if handle in ("(nil)", "0", "0x0") else handle


# ---- LD_PRELOAD scenarios ---------------------------------------------------------

def scenario_random():
    for seed in ("1", "2", "3"):
        p = probe(["random", seed])
        check(p.returncode == 0, "random sequence, seed %s: every check of the probe passed (exit %d)" % (seed, p.returncode))


def scenario_errors():
    p = probe(["errors"])
    check(p.returncode == 0, "frees the runtime would reject, sizes, handles: every check passed (exit %d)" % p.returncode)


def scenario_first_call():
    for which in ("free-null", "free-foreign", "get-pool", "trim", "oom"):
        log = os.path.join(TMP, "first-%s.csv" % which)
        p = probe(["first", which], {"SOVA_LOG": log})
        check(p.returncode == 0, "first call %s, then allocation works (exit %d)" % (which, p.returncode))
        rows = read_log(log)
        # SOVA_LOG is "read once, when the C API creates its first pool: a
        # default pool's first use or sovaMemPoolCreate; also under
        # libsova_preload.so": whatever the first call, the later pair is logged.
        actions = [r[2] for r in rows[1]] if rows else None
        check(actions is not None and actions.count("allocate") == 1 and actions.count("free") == 1,
              "first call %s: SOVA_LOG logged the allocation and free that followed (actions %s)" % (which, actions))


def scenario_threads():
    p = probe(["threads"])
    check(p.returncode == 0, "8 threads on 3 streams freeing each other's blocks (exit %d)" % p.returncode)


def scenario_exit_live():
    for how in ("exit", "return", "thread"):
        log = os.path.join(TMP, "exit-%s.csv" % how)
        p = probe(["exit-live", how], {"SOVA_LOG": log})
        check(p.returncode == 0 and "ok: three live blocks at exit" in p.stdout,
              "exit (%s) with live blocks in a default, a current and a destroyed pool: exit status 0 "
              "(\"not torn down at process exit\"; got %d)" % (how, p.returncode))
        rows = read_log(log)
        sizes = sorted(int(r[4]) for r in rows[1] if r[2] == "allocate") if rows else None
        check(rows is not None and rows[0] == HEADER and sizes == [1111, 2222, 3333],
              "exit (%s): \"The log is also stopped, and written out, at process exit\" (allocations %s)"
              % (how, sizes))


# ---- the allocation log -----------------------------------------------------------

TIME = re.compile(r"^\d\d:\d\d:\d\d\.\d{6}$")
POINTER = re.compile(r"^0x[0-9a-f]+$")


def seconds_of_day(text):
    h, m, s = text.split(":")
    return int(h) * 3600 + int(m) * 60 + float(s)


def scenario_log_format():
    log = os.path.join(TMP, "known.csv")
    t0 = datetime.datetime.now()
    p = probe(["log-known"], {"SOVA_LOG": log})
    t1 = datetime.datetime.now()
    check(p.returncode == 0, "the known sequence ran (exit %d)" % p.returncode)
    expected = [line[len("expect: "):].split(",") for line in p.stdout.splitlines() if line.startswith("expect: ")]
    ptsz = [line[len("ptsz-free: "):].split(",") for line in p.stdout.splitlines() if line.startswith("ptsz-free: ")]
    got = read_log(log)
    check(got is not None, "SOVA_LOG=%s wrote the file" % log)
    if got is None:
        return
    header, rows = got
    check(header == HEADER, "the header is %r (got %r)" % (HEADER, header))
    check(all(len(r) == 7 for r in rows), "every row has the header's 7 fields")
    # Rows: the expected ones in order, plus the cudaFreeAsync_ptsz row.
    # The _ptsz free's row is located by its pointer and checked apart (its
    # Stream field: see below).
    ptsz_rows = [r for r in rows if ptsz and r[2] == "free" and r[3] == ptsz[0][2]]
    other = [r for r in rows if r not in ptsz_rows]
    check(len(rows) == len(expected) + 1,
          "one row per allocation, failed allocation and free; none for the refused interior and double "
          "frees or the runtime's free (%d rows, expected %d)" % (len(rows), len(expected) + 1))
    check([r[2] for r in other] == [e[1] for e in expected],
          "Action column in call order: %s (got %s)" % ([e[1] for e in expected], [r[2] for r in other]))
    for i, (r, e) in enumerate(zip(other, expected)):
        where = "row %d (%s %s)" % (i + 1, e[1], e[3])
        check(r[0] == e[0], "%s: Thread is the OS thread id %s (got %s)" % (where, e[0], r[0]))
        ok_time = bool(TIME.match(r[1]))
        check(ok_time, "%s: Time is local time with microseconds HH:MM:SS.ffffff (got %r)" % (where, r[1]))
        if ok_time:
            t = seconds_of_day(r[1])
            lo = t0.hour * 3600 + t0.minute * 60 + t0.second - 1
            hi = t1.hour * 3600 + t1.minute * 60 + t1.second + 2
            check(lo <= t <= hi or hi < lo, "%s: Time %s is the local time of the run" % (where, r[1]))
        check(r[3] == e[2], "%s: Pointer as %%p: %s (got %s)" % (where, e[2], r[3]))
        check(r[4] == e[3], "%s: Size \"the requested bytes (for a free, the block's)\": %s (got %s)" % (where, e[3], r[4]))
        check(r[5] == stream_field(e[4]),
              "%s: Stream \"the handle in hex (0 for the legacy stream's NULL)\": %s (got %s)"
              % (where, stream_field(e[4]), r[5]))
        check(r[6].isdigit(), "%s: Reserved is a byte count (got %r)" % (where, r[6]))
    for r in rows:
        if POINTER.match(r[3]) is None and r[3] != "(nil)":
            check(False, "Pointer %r is %%p's form" % r[3])
    check(len(ptsz_rows) == 1 and ptsz_rows[0][4] == "77" and ptsz_rows[0][0] == ptsz[0][0],
          "the cudaFreeAsync_ptsz free is logged with its block's size 77 and thread (%s)" % ptsz_rows)
    if ptsz_rows:
        # Ambiguous in the docs: _ptsz "take 0 as cudaStreamPerThread"; the
        # log's Stream is "the handle". Either the handle passed (0) or the
        # one it means (0x2) is one reading; anything else is neither.
        check(ptsz_rows[0][5] in ("0", "0x2"),
              "the _ptsz free's Stream is 0 (the handle passed) or 0x2 (cudaStreamPerThread, what it means): %s"
              % ptsz_rows[0][5])
        print("note: cudaFreeAsync_ptsz(p, 0) is logged with Stream %s" % ptsz_rows[0][5])
    # Order: "a block's allocation row precedes its free row".
    seen = set()
    order_ok = True
    for r in rows:
        if r[2] == "allocate":
            seen.add(r[3])
        elif r[2] == "free" and r[3] not in seen:
            order_ok = False
    check(order_ok, "every free row follows its block's allocation row")
    plot_accepts(log, len(rows), len(expected) + 1)


def plot_accepts(log, nrows, expected_rows):
    if PLOT_LOG is None:
        return
    allocs = sum(1 for r in read_log(log)[1] if r[2] == "allocate")
    frees = sum(1 for r in read_log(log)[1] if r[2] == "free")
    fails = sum(1 for r in read_log(log)[1] if r[2] == "allocate failure")
    p = run([sys.executable, PLOT_LOG, log, "--no-png"], {}, preload=False)
    m = re.search(r"(\d+) rows: (\d+) allocations, (\d+) frees, (\d+) failed allocations, (\d+) frees of unknown", p.stdout)
    check(p.returncode == 0 and m is not None,
          "tools/plot_log.py reads the log (\"draws used memory (from the rows) and reserved memory\"; exit %d)"
          % p.returncode)
    if m:
        check([int(x) for x in m.groups()] == [nrows, allocs, frees, fails, 0],
              "plot_log.py counts %d rows, %d allocations, %d frees, %d failures, 0 unknown frees (got %s)"
              % (nrows, allocs, frees, fails, m.groups()))
    png = log + ".png"
    p = run([sys.executable, PLOT_LOG, log, "-o", png], {}, preload=False)
    if p.returncode == 3:
        print("note: matplotlib is not installed: plot_log.py said so and exited 3, as documented")
        check("matplotlib" in p.stderr, "plot_log.py without matplotlib says so")
    else:
        check(p.returncode == 0 and os.path.getsize(png) > 0, "plot_log.py -o wrote %s (exit %d)" % (png, p.returncode))


def scenario_log_api():
    a = os.path.join(TMP, "api-a.csv")
    b = os.path.join(TMP, "api-b.csv")
    p = probe(["log-api", a, b])
    check(p.returncode == 0, "sovaLogStart/sovaLogStop through the preload: every check passed (exit %d)" % p.returncode)
    got = read_log(a)
    rows = got[1] if got else None
    summary = [(r[2], r[4]) for r in rows] if rows is not None else None
    check(summary == [("allocate", "222"), ("free", "222"), ("free", "111")],
          "the first log holds what ran between start and stop, the free of a block allocated before the "
          "start included; nothing after the stop (got %s)" % summary)
    got = read_log(b)
    summary = [(r[2], r[4]) for r in got[1]] if got else None
    check(summary == [("allocate", "444"), ("free", "444")],
          "the log started after the disk-full one holds its own pair only (got %s)" % summary)


def scenario_log_env_bad():
    # "SOVA_LOG naming a file that cannot be written: a line on stderr, no log."
    bad = "/nonexistent-sova-dir/log.csv"
    p = probe(["first", "get-pool"], {"SOVA_LOG": bad})
    check(p.returncode == 0, "SOVA_LOG unwritable: the program runs (exit %d)" % p.returncode)
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    check(len(lines) == 1 and "/nonexistent-sova-dir/log.csv" in lines[0],
          "SOVA_LOG unwritable: \"a line on stderr\" naming the file (stderr %r)" % p.stderr)
    check(not os.path.exists(bad), "no log written")
    # A directory is a file that cannot be written either.
    p = probe(["first", "get-pool"], {"SOVA_LOG": TMP})
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    check(p.returncode == 0 and len(lines) == 1, "SOVA_LOG naming a directory: one line on stderr (stderr %r)" % p.stderr)
    # SOVA_LOG set, and the program starts its own log after its first pool:
    # "a log already running: cudaErrorInvalidValue, nothing changes (the
    # running log goes on; no file is created)".
    env_log = os.path.join(TMP, "env.csv")
    own = os.path.join(TMP, "own.csv")
    p = probe(["log-start-after-env", own], {"SOVA_LOG": env_log})
    check(p.returncode == 0, "SOVA_LOG running, sovaLogStart refused: the probe's checks hold (exit %d)" % p.returncode)
    got = read_log(env_log)
    summary = [(r[2], r[4]) for r in got[1]] if got else None
    check(summary == [("allocate", "555"), ("free", "555"), ("allocate", "666"), ("free", "666")],
          "the SOVA_LOG log went on through the refused sovaLogStart and was written by sovaLogStop (got %s)"
          % summary)


def scenario_log_env_disk_full():
    # docs/c-api.md, "The allocation log": "a log stopped at exit whose
    # writes failed (a full disk): a line on stderr". /dev/full opens, and
    # every write fails (ENOSPC), as on a full disk; a SOVA_LOG log, stopped
    # at exit, has no caller to return sovaLogStop's code to, so the stderr
    # line is the only way the user learns the log is lost.
    p = probe(["log-many", "5000"], {"SOVA_LOG": "/dev/full"})
    check(p.returncode == 0, "SOVA_LOG=/dev/full: the program runs (exit %d)" % p.returncode)
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    check(len(lines) == 1 and "/dev/full" in lines[0],
          "SOVA_LOG naming a file that cannot be written (/dev/full: every write fails): \"a line on stderr\" "
          "(stderr %r)" % p.stderr)


def scenario_log_env_no_pool():
    # "read once, when the C API creates its first pool": a program that makes
    # no pool leaves no log.
    log = os.path.join(TMP, "nopool.csv")
    p = probe(["pid"], {"SOVA_LOG": log})
    check(p.returncode == 0 and not os.path.exists(log),
          "a program that creates no pool: no SOVA_LOG file (exists: %s)" % os.path.exists(log))


def scenario_log_many():
    log = os.path.join(TMP, "many.csv")
    pairs = 25000
    p = probe(["log-many", str(pairs)], {"SOVA_LOG": log}, timeout=600)
    check(p.returncode == 0, "4 threads x %d pairs ran (exit %d)" % (pairs, p.returncode))
    got = read_log(log)
    rows = got[1] if got else []
    allocs = [r for r in rows if r[2] == "allocate"]
    frees = [r for r in rows if r[2] == "free"]
    check(len(allocs) == 4 * pairs and len(frees) == 4 * pairs,
          "\"every allocation and free\": %d allocate and %d free rows (got %d, %d)"
          % (4 * pairs, 4 * pairs, len(allocs), len(frees)))
    check(len(set(r[0] for r in rows)) == 4, "four Thread ids")
    # "the log replays in file order": each address alternates allocate, free.
    state = {}
    bad = 0
    for r in rows:
        if r[2] == "allocate":
            bad += state.get(r[3]) == "allocate"
            state[r[3]] = "allocate"
        elif r[2] == "free":
            bad += state.get(r[3]) != "allocate"
            state[r[3]] = "free"
    check(bad == 0, "\"a block's allocation row precedes its free row and the next allocation of the same "
                    "address\": %d rows out of order" % bad)
    plot_accepts(log, len(rows), len(rows))


SCENARIOS = {
    "random": scenario_random,
    "errors": scenario_errors,
    "first_call": scenario_first_call,
    "threads": scenario_threads,
    "exit_live": scenario_exit_live,
    "log_format": scenario_log_format,
    "log_api": scenario_log_api,
    "log_env_bad": scenario_log_env_bad,
    "log_env_no_pool": scenario_log_env_no_pool,
    "log_env_disk_full": scenario_log_env_disk_full,
    "log_many": scenario_log_many,
}


def main(argv):
    global PRELOAD, PROBE, PLOT_LOG, TMP
    if len(argv) not in (4, 5) or argv[1] not in SCENARIOS:
        print(__doc__, file=sys.stderr)
        return 2
    PRELOAD, PROBE = os.path.abspath(argv[2]), os.path.abspath(argv[3])
    PLOT_LOG = os.path.abspath(argv[4]) if len(argv) == 5 else None
    with tempfile.TemporaryDirectory(prefix="sova-preload-scen-") as TMP:
        SCENARIOS[argv[1]]()
    print("%d failed" % failed)
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
