"""sova's stream-ordered allocation calls for the CuPy and RMM adapters
(sova.cupy, sova.rmm), on the C API that _capi.py binds.

``malloc`` / ``free`` are ``sovaMallocAsync`` / ``sovaFreeAsync``: the
current device's current sova pool, in stream order, as cudaMallocAsync and
cudaFreeAsync. Streams are raw ``cudaStream_t`` values (ints); 0 is the
legacy default stream.

Loading: as _capi.lib() (``$SOVA_LIBRARY``, else the libsova.so installed
beside the package). The package's own build (-Dpython=true) loads with
ctypes; a regular build's libsova.so uses initial-exec thread-locals
(lib/base/tls_model.hpp) and cannot be loaded after start-up ("cannot
allocate memory in static TLS block"): preload it (``LD_PRELOAD``), as
test/adapters/meson.build does.
"""

import ctypes

from . import _capi

_CUDA_SUCCESS = 0
_CUDA_ERROR_MEMORY_ALLOCATION = 2  # cudaErrorMemoryAllocation

# cudaMemPoolAttr values of the figures pool_bytes() reads (driver_types.h).
_ATTRIBUTES = {"reserved": 5, "reserved_high": 6, "used": 7, "used_high": 8}


class SovaOutOfMemory(MemoryError):
    """sova could not allocate: the device (or the pool's limit) is full.

    A MemoryError, as CuPy's OutOfMemoryError and RMM's translation of
    rmm::out_of_memory are, so code that catches those catches this.
    """

    def __init__(self, size):
        super().__init__(f"sova: out of memory allocating {size:,} bytes")
        self.size = size


def library():
    """libsova (ctypes.CDLL) through _capi.lib(), with a hint when a regular
    build's library cannot be loaded late."""
    try:
        return _capi.lib()
    except _capi.SovaError as error:
        if "static TLS" in str(error):
            raise _capi.SovaError(f"{error}; preload it (LD_PRELOAD=/path/to/libsova.so) or use the "
                                  "Python package's build (pip install .)") from error
        raise


def pool_bytes(figure="used", device=0):
    """A figure of `device`'s current sova pool, in bytes: "used" (handed out
    and not freed), "reserved" (physical memory held), "used_high",
    "reserved_high" (cudaMemPoolAttr* semantics)."""
    lib = library()
    pool = ctypes.c_void_p()
    _capi.check(lib.sovaDeviceGetMemPool(ctypes.byref(pool), device), "sovaDeviceGetMemPool")
    value = ctypes.c_uint64()
    _capi.check(lib.sovaMemPoolGetAttribute(pool, _ATTRIBUTES[figure], ctypes.byref(value)),
                "sovaMemPoolGetAttribute", figure)
    return value.value


def malloc(size, stream):
    """A block of `size` bytes for work on `stream` (an int); 0 for size 0.

    Raises SovaOutOfMemory when memory cannot be had (nothing changed),
    _capi.SovaError for any other failure (a stream under graph capture, no
    device), and TypeError/ValueError/OverflowError for a size that is not an
    int in [0, 2**64-1] (ctypes would wrap it).
    """
    _capi.size_arg(size, "sova: malloc size")
    _capi.address_arg(stream, "sova: malloc stream")
    ptr = ctypes.c_void_p()
    code = library().sovaMallocAsync(ctypes.byref(ptr), size, stream)
    if code == _CUDA_SUCCESS:
        return ptr.value or 0
    if code == _CUDA_ERROR_MEMORY_ALLOCATION:
        raise SovaOutOfMemory(size)
    _capi.check(code, "sovaMallocAsync", f"{size} bytes on stream {stream:#x}")


def free(ptr, stream):
    """Frees `ptr` in stream order on `stream`. Raises _capi.SovaError when
    sova refuses it (not a live sova block, or freed twice), changing nothing;
    TypeError/ValueError/OverflowError for an argument that is no address."""
    _capi.address_arg(ptr, "sova: free ptr")
    _capi.address_arg(stream, "sova: free stream")
    _capi.check(library().sovaFreeAsync(ptr, stream), "sovaFreeAsync", f"{ptr:#x} on stream {stream:#x}")
