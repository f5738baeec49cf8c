"""Import, the loader, and clear errors without a GPU."""
import os

import pytest

from sim_helpers import run_py


def test_import_needs_neither_gpu_nor_torch():
    out = run_py("""
    import sys
    sys.modules["torch"] = None      # as if PyTorch were not installed
    import sova, sova.torch, sova.pool
    print(sova.__version__, sova.SovaError.__mro__[1].__name__)
    """, sim=False)
    assert "0.1.0 RuntimeError" in out


def test_libraries_are_installed_beside_the_package():
    import sova._capi as c
    assert os.path.isfile(c.library_path("libsova.so"))
    assert os.path.isfile(c.library_path("libsova_torch.so"))
    assert os.path.dirname(c.library_path("libsova.so")) == os.path.dirname(c.__file__)


def test_a_pool_without_a_gpu_is_a_clear_error():
    # CUDA_VISIBLE_DEVICES="" hides any GPU, so this holds on a GPU machine too.
    out = run_py("""
    import sova
    try:
        sova.Pool()
    except sova.SovaError as e:
        print("ERR", e.code, e)
    else:
        raise SystemExit("a pool was made without a GPU")
    """, sim=False, env={"CUDA_VISIBLE_DEVICES": ""})
    assert "ERR" in out and "no NVIDIA driver or GPU was found" in out, out
    assert out.count("SOVA_DRIVER=sim") == 1, out  # the way out, said once


def test_enable_without_torch_is_a_clear_import_error():
    out = run_py("""
    import sys
    sys.modules["torch"] = None
    import sova.torch
    try:
        sova.torch.enable()
    except ImportError as e:
        print("ERR", e)
    """, sim=False)
    assert "sova.torch needs PyTorch" in out


def test_loader_names_a_missing_library():
    out = run_py("""
    import sova, sova._capi as c
    try:
        c.lib()
    except sova.SovaError as e:
        print("ERR", e)
    """, env={"SOVA_LIBRARY": "/nonexistent/libsova.so"})
    assert "cannot load /nonexistent/libsova.so" in out
