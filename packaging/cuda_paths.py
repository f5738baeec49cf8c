#!/usr/bin/env python3
"""Prints the CUDA toolkit's root, include and library directories, one a line,
for sova.pc: the include and library directories relative to the root when
they lie under it (so that the .pc names one variable, cuda_root, that users
override with `pkg-config --define-variable=cuda_root=DIR`).

Found as Meson finds the toolkit: $CUDA_PATH, $CUDA_HOME, $CUDA_ROOT, then the
directory above the nvcc on PATH, then /usr/local/cuda. The root is the first
candidate with cuda_runtime_api.h; a versioned directory (/usr/local/cuda-13.0)
is replaced by /usr/local/cuda when that resolves to it, which keeps the .pc
valid across toolkit updates. Exit status 1 (with a message) when none is found.
"""
import glob
import os
import platform
import shutil
import sys


def candidates():
    for var in ("CUDA_PATH", "CUDA_HOME", "CUDA_ROOT"):
        if os.environ.get(var):
            yield os.environ[var]
    nvcc = shutil.which("nvcc")
    if nvcc:
        yield os.path.dirname(os.path.dirname(nvcc))
    yield "/usr/local/cuda"
    yield from sorted(glob.glob("/usr/local/cuda-*"), reverse=True)


def first_with(root, rel_dirs, name):
    for rel in rel_dirs:
        if os.path.isfile(os.path.join(root, rel, name)):
            return rel
    return None


def main():
    arch = platform.machine()
    target = f"targets/{arch}-linux"
    multiarch = f"lib/{arch}-linux-gnu"
    for root in candidates():
        root = os.path.abspath(root)
        inc = first_with(root, ["include", f"{target}/include"], "cuda_runtime_api.h")
        if inc is None:
            continue
        lib = first_with(root, ["lib64", f"{target}/lib", "lib", multiarch], "libcudart_static.a")
        if lib is None:
            continue
        unversioned = "/usr/local/cuda"
        if root != unversioned and os.path.realpath(root) == os.path.realpath(unversioned):
            root = unversioned
        print(root)
        print(inc)
        print(lib)
        return 0
    print("cuda_paths.py: no CUDA toolkit with cuda_runtime_api.h and libcudart_static.a found "
          "($CUDA_PATH, nvcc on PATH, /usr/local/cuda)", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
