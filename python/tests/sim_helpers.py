"""Helpers of the tests that need no GPU (CI runs them: .ci/run).

Every scenario that creates pools runs in a fresh interpreter on sova's host
simulation (SOVA_DRIVER=sim, include/sova/sim.hpp: a 1 GiB device whose memory
is real host memory), so the C library's process-wide state (the chosen
driver, sova.torch's configure-once options) starts clean each time.
They need the package installed (pip install .), not PyTorch.
"""
import os
import subprocess
import sys
import textwrap


def run_py(body: str, sim: bool = True, env: dict | None = None) -> str:
    """Runs ``body``; returns its output; fails with the output unless it exits 0."""
    e = dict(os.environ)
    e.pop("SOVA_DRIVER", None)
    if sim:
        e["SOVA_DRIVER"] = "sim"
    e.update(env or {})
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(body)], capture_output=True,
                       text=True, env=e, timeout=120)
    out = p.stdout + p.stderr
    assert p.returncode == 0, f"exit {p.returncode}\n{out}"
    return out


# A run_py body's sova.torch allocation, as PyTorch's pluggable allocator
# calls it (device 0, the legacy stream), by ctypes; needs `ctypes`, `st`
# (sova.torch) and `c` (sova._capi) imported.
TORCH_ALLOC = """
    tl = c.torch_lib()
    MiB = 1 << 20
    def alloc(n):
        p = tl.sova_torch_malloc_nothrow(n, 0, ctypes.c_void_p(0))
        assert p, st.last_error()
        return p
"""
