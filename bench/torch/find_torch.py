"""Prints what bench/torch/meson.build needs to build sova_bench_torch against
the PyTorch that this Python imports, one value per line, in this order:

    version      torch.__version__, e.g. 2.11.0+cu130
    include      <torch>/include
    lib          <torch>/lib (libc10.so, libc10_cuda.so)
    cuda         torch.version.cuda, e.g. 13.0 (empty for a CPU-only build)
    cxx11_abi    1 or 0: the _GLIBCXX_USE_CXX11_ABI torch was built with
    cudart       the libcudart.so.<major> that torch's wheel depends on
                 (site-packages/nvidia/...), or empty if none is found

Exits 1 with a reason on stderr when torch cannot be imported or lacks
what is needed (headers, libc10_cuda.so, CUDA).
"""
import glob
import os
import sys


def fail(reason):
    sys.stderr.write(reason + "\n")
    sys.exit(1)


def main():
    try:
        import torch  # noqa: PLC0415 (imported here so that a failure is reported)
    except Exception as e:  # ImportError, or a broken install raising anything
        fail("cannot import torch: %s" % e)
    root = os.path.dirname(os.path.abspath(torch.__file__))
    include = os.path.join(root, "include")
    lib = os.path.join(root, "lib")
    cuda = torch.version.cuda or ""
    if not cuda:
        fail("torch %s is a CPU-only build" % torch.__version__)
    if not os.path.isfile(os.path.join(include, "c10", "cuda", "CUDACachingAllocator.h")):
        fail("no c10/cuda/CUDACachingAllocator.h under %s" % include)
    for name in ("libc10.so", "libc10_cuda.so"):
        if not os.path.isfile(os.path.join(lib, name)):
            fail("no %s in %s" % (name, lib))
    abi = getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", True)
    # pip wheels take the CUDA runtime from nvidia-* packages beside torch
    # (nvidia/cuda_runtime/lib, or nvidia/cu13/lib for CUDA 13).
    site = os.path.dirname(root)
    major = cuda.split(".")[0]
    cudart = ""
    found = sorted(glob.glob(os.path.join(site, "nvidia", "**", "libcudart.so." + major), recursive=True))
    if found:
        cudart = found[0]
    for value in (torch.__version__, include, lib, cuda, "1" if abi else "0", cudart):
        print(value)


if __name__ == "__main__":
    main()
