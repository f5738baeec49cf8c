"""The conftest.py that tools/device/torch-test-cuda.sh puts beside PyTorch's
test/test_cuda.py (carried, never committed) for every column alike:

- fills the names test_cuda.py imports that the installed PyTorch lacks (the
  stored test file is newer than it): each with a stand-in that keeps the
  test's meaning where it can (flags the machine answers, decorators that do
  what PyTorch's do) and is said on stderr as "conftest: filled NAME";
- under a sova column (TORCH_CONF_SOVA=native|pluggable) makes sova PyTorch's
  allocator with sova.torch.enable(backend=...) before anything initializes
  CUDA, in this process only (the variable is dropped, so the test's own
  subprocesses run as a program that never called enable());
- writes each test's start and outcome to $TORCH_CONF_RESULTS as it happens,
  so that a column whose process aborts still counts what ran (the script
  goes on after the test that aborted it).
"""
import contextlib
import functools
import os
import platform
import sys

import torch

# First, before anything below asks CUDA a question.
_backend = os.environ.pop("TORCH_CONF_SOVA", "")
if _backend:
    import sova.torch
    sova.torch.enable(backend=_backend)
    assert sova.torch.backend() == _backend, sova.torch.backend()
    print(f"conftest: sova.torch.enable(backend={_backend!r})", file=sys.stderr)


def _identity_decorator(*args, **kwargs):
    """decorator, decorator(...) and decorator() alike: the test unchanged."""
    if len(args) == 1 and callable(args[0]) and not kwargs:
        return args[0]
    return lambda fn: fn


def _recover_orig_fp32_precision(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        saved = {}
        for obj, attr in ((torch.backends.cuda.matmul, "fp32_precision"),
                          (getattr(torch.backends.cudnn, "conv", None), "fp32_precision"),
                          (getattr(torch.backends.cudnn, "rnn", None), "fp32_precision"),
                          (torch.backends.cudnn, "fp32_precision"), (torch.backends, "fp32_precision")):
            if obj is not None and hasattr(obj, attr):
                saved[(id(obj), attr)] = (obj, attr, getattr(obj, attr))
        matmul = torch.get_float32_matmul_precision()
        try:
            return fn(*args, **kwargs)
        finally:
            for obj, attr, value in saved.values():
                with contextlib.suppress(Exception):
                    setattr(obj, attr, value)
            with contextlib.suppress(Exception):
                torch.set_float32_matmul_precision(matmul)
    return wrapper


def _set_blas_backends_to_default_finally(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        finally:
            torch.backends.cuda.preferred_blas_library("default")
    return wrapper


def _skip_cuda_memory_leak_check_if(condition):
    def dec(fn):
        if condition:
            fn._do_cuda_memory_leak_check = False
        return fn
    return dec


def _cuda_python_error_check(result):
    """cuda-python's (error, *values): raises on an error, else the values."""
    err, *values = result if isinstance(result, tuple) else (result,)
    if int(err) != 0:
        raise RuntimeError(f"cuda-python call failed: {err}")
    return values[0] if len(values) == 1 else tuple(values)


def _has_cuda_bindings():
    try:
        import cuda.bindings.runtime  # noqa: F401
        return True
    except ImportError:
        return False


def _unavailable(name):
    def stub(*args, **kwargs):
        raise NotImplementedError(f"{name} is not in this PyTorch ({torch.__version__})")
    return stub


# module -> {name: stand-in}; used only where the module lacks the name.
FILLS = {
    "torch.testing._internal.common_utils": {
        "cuda_python_error_check": _cuda_python_error_check,
        "EXPANDABLE_SEGMENTS": "expandable_segments:True" in os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
        "gcIfJetson": _identity_decorator,
        "IS_JETSON": False,
        "IS_X86": platform.machine() in ("x86_64", "i386", "i686", "AMD64"),
        "IS_LINUX": sys.platform.startswith("linux"),
        "IS_FBCODE": False,
        "IS_SANDCASTLE": False,
        "MI200_ARCH": ("gfx90a",),
        "MI300_ARCH": ("gfx940", "gfx941", "gfx942"),
        "recover_orig_fp32_precision": _recover_orig_fp32_precision,
        "serialTest": _identity_decorator,
        "setBlasBackendsToDefaultFinally": _set_blas_backends_to_default_finally,
        "skipCUDAMemoryLeakCheckIf": _skip_cuda_memory_leak_check_if,
        "skipIfRocmArch": lambda arch=None: _identity_decorator,
        "TEST_CUDA_PYTHON_BINDINGS": _has_cuda_bindings(),
        "TEST_CUDA_GRAPH": torch.cuda.is_available(),
        "TEST_CUDAMALLOCASYNC": torch.cuda.is_available()
        and torch.cuda.get_allocator_backend() == "cudaMallocAsync",
    },
    "torch.testing._internal.common_cuda": {
        "PLATFORM_SUPPORTS_GREEN_CONTEXT": False,
    },
    "torch.cuda._memory_viz": {
        "_profile_to_snapshot": _unavailable("torch.cuda._memory_viz._profile_to_snapshot"),
    },
}


class _Absent:
    """A name test_cuda.py imports that neither the installed PyTorch nor FILLS
    has: false as a flag; as a decorator or a call, the test skips, saying so."""

    def __init__(self, name):
        self.name = name

    def __bool__(self):
        return False

    def __call__(self, *args, **kwargs):
        import functools
        import unittest
        if len(args) == 1 and callable(args[0]) and not kwargs:
            fn = args[0]

            @functools.wraps(fn)
            def skipped(*a, **k):
                raise unittest.SkipTest(f"{self.name} is absent from the installed PyTorch")
            return skipped
        raise unittest.SkipTest(f"{self.name} is absent from the installed PyTorch")


def _imported_names(path):
    """{module: names} of test_cuda.py's `from torch.testing._internal... import`."""
    import ast
    wanted = {}
    try:
        tree = ast.parse(open(path).read())
    except OSError:
        return wanted
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("torch."):
            wanted.setdefault(node.module, []).extend(a.name for a in node.names)
    return wanted


def _fill():
    import importlib
    for module_name, names in FILLS.items():
        module = importlib.import_module(module_name)
        for name, value in names.items():
            if not hasattr(module, name):
                setattr(module, name, value)
                print(f"conftest: filled {module_name}.{name}", file=sys.stderr)
    # Whatever else the file imports that this PyTorch lacks: taken from a
    # sibling testing module that has it, else an _Absent that skips.
    siblings = [importlib.import_module(m) for m in (
        "torch.testing._internal.common_utils", "torch.testing._internal.common_cuda",
        "torch.testing._internal.common_device_type")]
    here = os.path.dirname(os.path.abspath(__file__))
    for module_name, names in _imported_names(os.path.join(here, "test_cuda.py")).items():
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        for name in names:
            if hasattr(module, name):
                continue
            source = next((m for m in siblings if hasattr(m, name)), None)
            setattr(module, name, getattr(source, name) if source is not None else _Absent(name))
            print(f"conftest: filled {module_name}.{name} "
                  f"({'from ' + source.__name__ if source is not None else 'absent: skips'})", file=sys.stderr)


try:  # test_cuda.py imports psutil at the top, for TestGDS alone (skipped: no cuFile)
    import psutil  # noqa: F401
except ImportError:
    import types
    _psutil = types.ModuleType("psutil")
    _psutil.disk_partitions = _unavailable("psutil.disk_partitions")
    sys.modules["psutil"] = _psutil
    print("conftest: filled psutil (absent)", file=sys.stderr)

_fill()

_results_path = os.environ.pop("TORCH_CONF_RESULTS", "")
_results = open(_results_path, "a", buffering=1) if _results_path else None  # noqa: SIM115


def _name(nodeid):
    return nodeid.split("::", 1)[-1].replace("::", ".")


def pytest_runtest_logstart(nodeid, location):
    if _results:
        _results.write(f"START {_name(nodeid)}\n")
        _results.flush()
        os.fsync(_results.fileno())


def pytest_runtest_logreport(report):
    if not _results:
        return
    xfail = hasattr(report, "wasxfail")
    if report.when == "call" or report.outcome != "passed":
        if report.outcome == "passed":
            outcome = "xpassed" if xfail else "passed"
        elif report.outcome == "skipped":
            outcome = "xfailed" if xfail else "skipped"
        else:
            outcome = "failed" if report.when == "call" else "error"
        _results.write(f"{outcome.upper()} {_name(report.nodeid)}\n")
        _results.flush()
