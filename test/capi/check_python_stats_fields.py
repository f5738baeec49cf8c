"""The Python binding's statistics struct against the C API's.

Usage: check_python_stats_fields.py DUMP_EXE CAPI_PY

DUMP_EXE (stats_fields_dump) prints sovaMemPoolStats as the C++ compiler lays
it out, counter by counter in lib/capi/stats_fields.hpp's order; CAPI_PY is
python/sova/_capi.py, loaded on its own (it needs only the standard library
and loads libsova only when asked). Fails, naming the difference, unless
_capi.PoolStats has structSize and then exactly those counters, as uint64 at
the same offsets, and the same size: a counter added to the C struct and not
to _STAT_FIELDS, or the other way round, fails here.
"""
import ctypes
import importlib.util
import subprocess
import sys


def c_layout(dump_exe):
    lines = subprocess.run([dump_exe], check=True, capture_output=True, text=True).stdout.split("\n")
    size = int(lines[0].split()[1])
    fields = [(name, int(offset)) for name, offset in (line.split() for line in lines[1:] if line)]
    return size, fields


def python_layout(capi_py):
    spec = importlib.util.spec_from_file_location("sova_capi_under_test", capi_py)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    stats = module.PoolStats
    fields = stats._fields_
    if not fields or fields[0][0] != "structSize" or fields[0][1] is not ctypes.c_size_t:
        sys.exit("_capi.PoolStats does not start with structSize (size_t)")
    wrong_type = [name for name, ctype in fields[1:] if ctype is not ctypes.c_uint64]
    if wrong_type:
        sys.exit(f"_capi.PoolStats fields that are not uint64: {wrong_type}")
    return ctypes.sizeof(stats), [(name, getattr(stats, name).offset) for name, _ in fields[1:]]


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    c_size, c_fields = c_layout(sys.argv[1])
    py_size, py_fields = python_layout(sys.argv[2])
    c_names = [name for name, _ in c_fields]
    py_names = [name for name, _ in py_fields]
    errors = []
    if c_names != py_names:
        only_c = [n for n in c_names if n not in py_names]
        only_py = [n for n in py_names if n not in c_names]
        errors.append(f"counters differ: in sovaMemPoolStats only {only_c}, in _STAT_FIELDS only {only_py}"
                      + ("" if only_c or only_py else " (same names, another order)"))
    elif c_fields != py_fields:
        errors.append(f"offsets differ: C {c_fields}, Python {py_fields}")
    if c_size != py_size:
        errors.append(f"sizeof(sovaMemPoolStats) is {c_size}, ctypes.sizeof(_capi.PoolStats) is {py_size}")
    for e in errors:
        print(e, file=sys.stderr)
    if errors:
        return 1
    print(f"_capi.PoolStats matches sovaMemPoolStats: {len(c_fields)} counters, {c_size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
