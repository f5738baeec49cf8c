"""GPU tests of sova.torch: need PyTorch with CUDA and a GPU.

Not part of the default test run (CI runs python/tests only). Run them with
    python -m pytest python/tests_gpu
on a machine with a GPU and the package installed (pip install .). Without a
GPU they FAIL (never skip): a run that proves nothing must not look green.

Each test runs its scenario in a fresh Python process (gpu_helpers.run_script): PyTorch's
allocator can be replaced only before CUDA is initialized, once per process.
"""
import pytest


@pytest.fixture(scope="session", autouse=True)
def need_gpu():
    try:
        import torch
    except ImportError:
        pytest.fail("python/tests_gpu needs PyTorch (these tests never skip)")
    if not torch.cuda.is_available():
        pytest.fail("python/tests_gpu needs a CUDA GPU (these tests never skip)")
