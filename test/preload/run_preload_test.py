#!/usr/bin/env python3
"""Runs programs under LD_PRELOAD=libsova_preload.so and checks what happened
(test/preload/meson.build registers each mode as a test).

  routed   PRELOAD EXE       EXE (linked with libcudart.so) `routed` on the
                             sim driver: exit 0, no load-time message, and
                             SOVA_LOG written with its allocations and frees
  static   PRELOAD EXE       EXE (cudart_static) `plain`: the load-time
                             message says it cannot be routed; no sova log;
                             SOVA_PRELOAD_QUIET=1 silences the message
  gpu      PRELOAD NVCC SRC ARCH
                             builds SRC with `nvcc -cudart shared` and with
                             `-cudart static`; the shared one must run on sova
                             (expect-sova, log rows), the static one on the
                             runtime's pool with the message (expect-runtime)
Exit status 0 when every check passed; each check prints one line.
"""
import os
import subprocess
import sys
import tempfile

STATIC_MESSAGE = "carries the CUDA runtime linked in statically"
failed = 0


def check(ok, what):
    global failed
    print(("ok: " if ok else "FAILED: ") + what)
    if not ok:
        failed += 1


def run(cmd, env_extra, timeout=120):
    env = dict(os.environ)
    env.update(env_extra)
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    sys.stdout.write(p.stdout)
    sys.stdout.write(p.stderr)
    return p


def log_rows(path):
    """(header, allocate rows, free rows) of a sova log; None if absent."""
    if not os.path.exists(path):
        return None
    with open(path) as f:
        lines = f.read().splitlines()
    if not lines:
        return ("", 0, 0)
    actions = [line.split(",")[2] for line in lines[1:] if line.count(",") >= 5]
    return (lines[0], actions.count("allocate"), actions.count("free"))


def routed(preload, exe, tmp):
    log = os.path.join(tmp, "routed.csv")
    p = run([exe, "routed"], {"LD_PRELOAD": preload, "SOVA_DRIVER": "sim", "SOVA_LOG": log})
    check(p.returncode == 0, "the routed program passed its checks (exit %d)" % p.returncode)
    check(STATIC_MESSAGE not in p.stderr and "sova preload:" not in p.stderr,
          "no load-time message for a program linked with libcudart.so")
    rows = log_rows(log)
    check(rows is not None and rows[0].startswith("Thread,Time,Action,Pointer,Size,Stream"),
          "SOVA_LOG wrote RMM's CSV header")
    check(rows is not None and rows[1] == 4 and rows[2] == 4,
          "the log holds the program's 4 allocations and 4 frees (got %s)" % ((rows[1:] if rows else None),))


def static(preload, exe, tmp):
    log = os.path.join(tmp, "static.csv")
    p = run([exe, "plain"], {"LD_PRELOAD": preload, "SOVA_DRIVER": "sim", "SOVA_LOG": log})
    check(p.returncode == 0, "the static program ran (exit %d)" % p.returncode)
    check(STATIC_MESSAGE in p.stderr, "the preload says the program cannot be routed")
    check(p.stderr.count("sova preload:") == 1, "said once")
    rows = log_rows(log)
    check(rows is None or rows[1] == 0, "nothing reached sova (no log rows)")
    q = run([exe, "plain"], {"LD_PRELOAD": preload, "SOVA_DRIVER": "sim", "SOVA_PRELOAD_QUIET": "1"})
    check("sova preload:" not in q.stderr, "SOVA_PRELOAD_QUIET=1 silences it")


def gpu(preload, nvcc, src, arch, tmp):
    exes = {}
    for kind in ("shared", "static"):
        exe = os.path.join(tmp, "preload_gpu_" + kind)
        b = subprocess.run([nvcc, "-arch=sm_" + arch, "-cudart", kind, "-o", exe, src],
                           capture_output=True, text=True)
        sys.stdout.write(b.stdout + b.stderr)
        check(b.returncode == 0, "nvcc -cudart %s builds the program" % kind)
        exes[kind] = exe
    if failed:
        return
    log = os.path.join(tmp, "gpu_shared.csv")
    p = run([exes["shared"], "expect-sova"], {"LD_PRELOAD": preload, "SOVA_LOG": log})
    check(p.returncode == 0, "-cudart shared: routed to sova, every block's data right (exit %d)" % p.returncode)
    check("sova preload:" not in p.stderr, "-cudart shared: no load-time message")
    rows = log_rows(log)
    check(rows is not None and rows[1] == 24 and rows[2] == 24,
          "-cudart shared: the log holds its 24 allocations and 24 frees (got %s)" % ((rows[1:] if rows else None),))
    log = os.path.join(tmp, "gpu_static.csv")
    p = run([exes["static"], "expect-runtime"], {"LD_PRELOAD": preload, "SOVA_LOG": log})
    check(p.returncode == 0, "-cudart static: runs on the runtime's pools, data right (exit %d)" % p.returncode)
    check(STATIC_MESSAGE in p.stderr, "-cudart static: the preload says it cannot be routed")
    rows = log_rows(log)
    check(rows is None or rows[1] == 0, "-cudart static: nothing reached sova")


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    mode, preload = argv[1], os.path.abspath(argv[2])
    with tempfile.TemporaryDirectory(prefix="sova-preload-") as tmp:
        if mode == "routed" and len(argv) == 4:
            routed(preload, argv[3], tmp)
        elif mode == "static" and len(argv) == 4:
            static(preload, argv[3], tmp)
        elif mode == "gpu" and len(argv) == 6:
            gpu(preload, argv[3], argv[4], argv[5], tmp)
        else:
            print(__doc__, file=sys.stderr)
            return 2
    print("%d failed" % failed)
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
