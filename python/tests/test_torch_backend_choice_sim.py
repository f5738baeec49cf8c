"""enable()'s backend choice without a GPU: where the native backend cannot
be built (no compiler, no CUDA toolkit headers), enable() must fall back at
once and say why, not start a build that fails after a minute; where it can,
a build is said on stderr. A stand-in for torch.utils.cpp_extension answers,
in a fresh interpreter. The fallback itself (the pluggable allocator and its
one warning) and the native build need PyTorch and a GPU:
python/tests_gpu/test_torch_graphs_gpu.py."""
import os
import subprocess
import sys

FAKE_TORCH = """
import sys, types
torch = types.ModuleType("torch")
torch.__version__ = "0.0-fake"
utils = types.ModuleType("torch.utils")
ext = types.ModuleType("torch.utils.cpp_extension")
ext.CUDA_HOME = CUDA_HOME
ext._get_build_directory = lambda name, verbose: "/nonexistent-sova-build-dir"
def load(**kwargs):
    raise SystemExit("a build was started")
ext.load = load
torch.utils, utils.cpp_extension = utils, ext
sys.modules.update({"torch": torch, "torch.utils": utils, "torch.utils.cpp_extension": ext})
import sova
from sova import _torch_native
try:
    _torch_native.install(announce=True)
except sova.SovaError as e:
    print("refused:", e)
"""


def run(cuda_home, env=None) -> str:
    e = dict(os.environ)
    e.update(env or {})
    p = subprocess.run([sys.executable, "-c", f"CUDA_HOME = {cuda_home!r}\n" + FAKE_TORCH],
                       capture_output=True, text=True, env=e, timeout=120)
    return p.stdout + p.stderr


def test_no_toolkit_headers_refuses_before_any_build():
    out = run(None)
    assert "refused: sova.torch native backend: cannot be built here: no CUDA toolkit headers" in out, out
    assert "a build was started" not in out, out


def test_no_compiler_refuses_before_any_build():
    out = run(None, env={"CXX": "sova-no-such-compiler"})
    assert "cannot be built here: no C++ compiler (sova-no-such-compiler is not on PATH)" in out, out
    assert "a build was started" not in out, out


def test_a_build_is_said_on_stderr_before_it_starts():
    # The CUDA toolkit is a build requirement of sova, so its headers are here.
    home = os.environ.get("CUDA_PATH") or os.environ.get("CUDA_HOME") or "/usr/local/cuda"
    assert os.path.isfile(os.path.join(home, "include", "cuda_runtime_api.h")), f"no CUDA toolkit at {home}"
    out = run(home)
    assert "sova.torch: building the native backend for PyTorch 0.0-fake" in out, out
    assert "a build was started" in out, out
