"""sova's stream-ordered allocation calls for the Python adapters (sova.cupy, sova.rmm).

A thin ctypes binding of two C API calls (include/sova/sova.h):
``sovaMallocAsync`` and ``sovaFreeAsync``, which allocate from and free to the
current device's current sova pool, in stream order, as cudaMallocAsync and
cudaFreeAsync do. Streams are raw ``cudaStream_t`` values (ints); 0 is the
legacy default stream.

The library: ``$SOVA_LIBRARY`` when set (a path to libsova.so), else
``libsova.so`` beside this package (an installed wheel), else whatever the
dynamic loader finds as ``libsova.so`` (``ctypes.util.find_library``). It is
loaded once, on first use; a missing library raises OSError saying where it
looked. Today's libsova.so cannot be loaded after start-up (ctypes, dlopen):
its initial-exec thread-locals need static TLS that glibc only sets aside at
start-up ("cannot allocate memory in static TLS block"); preload it
(LD_PRELOAD=.../libsova.so) until the library drops them
(docs/adapters.md).
"""

import ctypes
import ctypes.util
import os
import threading

_CUDA_SUCCESS = 0
_CUDA_ERROR_MEMORY_ALLOCATION = 2  # cudaErrorMemoryAllocation

_lock = threading.Lock()
_lib = None


class SovaError(RuntimeError):
    """A sova call failed for a reason other than running out of memory."""

    def __init__(self, call, code):
        super().__init__(f"sova: {call} failed with cudaError_t {code}")
        self.code = code


class SovaOutOfMemory(MemoryError):
    """sova could not allocate: the device (or the pool's limit) is full.

    A MemoryError, as CuPy's OutOfMemoryError and RMM's translation of
    rmm::out_of_memory are, so code that catches those catches this.
    """

    def __init__(self, size):
        super().__init__(f"sova: out of memory allocating {size:,} bytes")
        self.size = size


def _candidates():
    env = os.environ.get("SOVA_LIBRARY")
    if env:
        return [env]
    here = os.path.dirname(os.path.abspath(__file__))
    found = ctypes.util.find_library("sova")
    return [os.path.join(here, "libsova.so")] + ([found] if found else [])


def library():
    """The loaded libsova (ctypes.CDLL), with the calls' signatures set."""
    global _lib
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is None:
            tried = []
            for path in _candidates():
                try:
                    lib = ctypes.CDLL(path)
                    break
                except OSError as error:
                    tried.append(f"{path}: {error}")
            else:
                hint = "set SOVA_LIBRARY to its path"
                if any("static TLS" in t for t in tried):
                    # libsova.so's thread-locals are initial-exec, and its
                    # static CUDA runtime's TLS is page-aligned: together more
                    # than glibc keeps for libraries loaded after start-up.
                    hint = "load it at start-up: LD_PRELOAD=/path/to/libsova.so"
                raise OSError("sova: cannot load libsova.so; " + hint + " (tried "
                              + "; ".join(tried or ["nothing"]) + ")")
            lib.sovaMallocAsync.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t, ctypes.c_void_p]
            lib.sovaMallocAsync.restype = ctypes.c_int
            lib.sovaFreeAsync.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
            lib.sovaFreeAsync.restype = ctypes.c_int
            lib.sovaDeviceGetMemPool.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int]
            lib.sovaDeviceGetMemPool.restype = ctypes.c_int
            lib.sovaMemPoolGetAttribute.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
            lib.sovaMemPoolGetAttribute.restype = ctypes.c_int
            _lib = lib
    return _lib


# cudaMemPoolAttr values of the figures pool_bytes() reads (driver_types.h).
_ATTRIBUTES = {"reserved": 5, "reserved_high": 6, "used": 7, "used_high": 8}


def pool_bytes(figure="used", device=0):
    """A figure of `device`'s current sova pool, in bytes: "used" (handed out
    and not freed), "reserved" (physical memory held), "used_high",
    "reserved_high" (cudaMemPoolAttr* semantics)."""
    lib = library()
    pool = ctypes.c_void_p()
    code = lib.sovaDeviceGetMemPool(ctypes.byref(pool), device)
    if code != _CUDA_SUCCESS:
        raise SovaError(f"sovaDeviceGetMemPool(device {device})", code)
    value = ctypes.c_uint64()
    code = lib.sovaMemPoolGetAttribute(pool, _ATTRIBUTES[figure], ctypes.byref(value))
    if code != _CUDA_SUCCESS:
        raise SovaError(f"sovaMemPoolGetAttribute({figure})", code)
    return value.value


def malloc(size, stream):
    """A block of `size` bytes for work on `stream` (an int); 0 for size 0.

    Raises SovaOutOfMemory when memory cannot be had (nothing changed), and
    SovaError for any other failure (a stream under graph capture, no device).
    """
    lib = library()
    ptr = ctypes.c_void_p()
    code = lib.sovaMallocAsync(ctypes.byref(ptr), size, stream)
    if code == _CUDA_SUCCESS:
        return ptr.value or 0
    if code == _CUDA_ERROR_MEMORY_ALLOCATION:
        raise SovaOutOfMemory(size)
    raise SovaError(f"sovaMallocAsync({size}, stream {stream:#x})", code)


def free(ptr, stream):
    """Frees `ptr` in stream order on `stream`. Raises SovaError when sova
    refuses it (not a live sova block, or freed twice), changing nothing."""
    code = library().sovaFreeAsync(ptr, stream)
    if code != _CUDA_SUCCESS:
        raise SovaError(f"sovaFreeAsync({ptr:#x}, stream {stream:#x})", code)
