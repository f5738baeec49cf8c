"""sova's native PyTorch backend (sova.torch.enable(backend="native")).

native_allocator.cpp beside this file is a c10 CUDAAllocator: it must be
compiled against the PyTorch that runs, so it is built on first use with
torch.utils.cpp_extension (a C++ compiler, the CUDA toolkit's headers and
PyTorch's headers are needed; the result is cached in PyTorch's extension
directory, TORCH_EXTENSIONS_DIR, so later processes only load it). Nothing
here is imported by ``import sova`` or ``import sova.torch``: the package
installs and imports without PyTorch. docs/python.md, "CUDA graphs", says why
this backend exists and what it delegates to PyTorch's allocator.
"""
from __future__ import annotations

import ctypes
import os

from .. import _capi
from .._capi import SovaError

_HERE = os.path.dirname(os.path.abspath(__file__))
_PACKAGE = os.path.dirname(_HERE)
_NAME = "sova_torch_native"


def _include_dirs() -> list:
    """sova.h and sova_torch.h: installed in the package's include/; in a source
    tree (SOVA_TORCH_LIBRARY pointing at a build), the repository's."""
    installed = os.path.join(_PACKAGE, "include")
    if os.path.isfile(os.path.join(installed, "sova_torch.h")):
        return [installed]
    repo = os.path.dirname(os.path.dirname(_PACKAGE))
    dirs = [os.path.join(repo, "include"), os.path.join(repo, "lib", "adapters", "torch")]
    if not os.path.isfile(os.path.join(dirs[1], "sova_torch.h")):
        raise SovaError(f"sova.torch native backend: sova_torch.h is neither in {installed} nor in "
                        f"{dirs[1]}; reinstall sova (pip install .)")
    return dirs


def build(verbose: bool = False) -> str:
    """Compiles (or finds already compiled) the backend; returns its path."""
    try:
        from torch.utils import cpp_extension
    except ImportError as e:
        raise SovaError("sova.torch native backend: needs PyTorch (torch.utils.cpp_extension)") from e
    torch_lib = os.path.dirname(_capi.library_path("libsova_torch.so"))
    try:
        path = cpp_extension.load(
            name=_NAME,
            sources=[os.path.join(_HERE, "native_allocator.cpp")],
            extra_include_paths=_include_dirs(),
            extra_cflags=["-O2"],
            extra_ldflags=[f"-L{torch_lib}", "-lsova_torch", "-lsova", f"-Wl,-rpath,{torch_lib}"],
            with_cuda=True,
            is_python_module=False,
            verbose=verbose,
        )
    except Exception as e:  # the compiler's own message is the useful part
        raise SovaError(f"sova.torch native backend: building {_NAME} failed: {e}") from e
    if not isinstance(path, str):  # older PyTorch returned nothing
        path = os.path.join(cpp_extension._get_build_directory(_NAME, verbose), f"{_NAME}.so")
    return path


def _cached() -> bool:
    """Whether a build for this PyTorch is already in its extension directory."""
    try:
        from torch.utils import cpp_extension
        directory = cpp_extension._get_build_directory(_NAME, False)
    except Exception:  # a private helper of PyTorch's: when it moves, say nothing
        return True
    return os.path.isfile(os.path.join(directory, f"{_NAME}.so"))


def _can_compile() -> str:
    """Why the backend cannot be built here ('' when it may be): checked
    before a build is tried, so that enable()'s fallback is quick and clear."""
    import shutil
    from torch.utils import cpp_extension
    compiler = os.environ.get("CXX", "c++")
    if shutil.which(compiler) is None:
        return f"no C++ compiler ({compiler} is not on PATH)"
    home = cpp_extension.CUDA_HOME
    if home is None or not os.path.isfile(os.path.join(home, "include", "cuda_runtime_api.h")):
        return "no CUDA toolkit headers (CUDA_HOME unset, or without include/cuda_runtime_api.h)"
    return ""


def install(verbose: bool = False, announce: bool = False) -> str:
    """Builds if needed and makes the backend PyTorch's CUDA allocator. Must run
    before PyTorch initializes CUDA; raises SovaError and changes nothing
    otherwise. Returns the library's path. With `announce`, a build (not a
    cached one) is said on stderr, with the time it took."""
    if announce and not _cached():
        reason = _can_compile()
        if reason:
            raise SovaError(f"sova.torch native backend: cannot be built here: {reason}")
        import sys
        import time
        import torch
        print(f"sova.torch: building the native backend for PyTorch {torch.__version__} "
              "(once per PyTorch build; seconds to a minute)...", file=sys.stderr, flush=True)
        start = time.monotonic()
        path = build(verbose)
        print(f"sova.torch: native backend built in {time.monotonic() - start:.0f} s", file=sys.stderr,
              flush=True)
    else:
        path = build(verbose)
    _capi.torch_lib()  # libsova_torch.so first, so the backend binds to this copy
    # RTLD_LOCAL (ctypes' default): nothing looks the backend's symbols up by
    # name, and made global they broke Triton's compiler in the same process
    # (torch.compile failed in ConvertTritonGPUToLLVM with a cold Inductor cache).
    lib = ctypes.CDLL(path)
    fn = lib.sova_torch_native_install
    fn.restype, fn.argtypes = ctypes.c_int, [ctypes.c_char_p, ctypes.c_size_t]
    message = ctypes.create_string_buffer(1024)
    if fn(message, len(message)) != 0:
        raise SovaError("sova.torch.enable(backend='native'): "
                        + message.value.decode(errors="replace"))
    return path
