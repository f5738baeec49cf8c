"""ctypes bindings of sova's C API (include/sova/sova.h) and of the PyTorch
adapter's (lib/adapters/torch/sova_torch.h), for every Python adapter.

Contract:
  * ``lib()`` loads libsova.so once: the file named by the environment
    variable ``SOVA_LIBRARY`` if set (a build tree, for development), else the
    one installed beside this module. Loading needs no GPU and no driver:
    libsova resolves the driver's entry points only when a pool is made.
  * ``torch_lib()`` likewise loads libsova_torch.so (``SOVA_TORCH_LIBRARY``).
  * Every function has its argtypes/restype declared here; call ``check(err,
    what)`` on a returned cudaError_t: it raises ``SovaError`` for non-zero.
  * The driver is chosen by libsova when the first pool is made: the real CUDA
    driver, or the host simulation when ``SOVA_DRIVER=sim`` is set in the
    environment before that (tests without a GPU use it).

This module holds no policy: option checking lives in _options.py, the
PyTorch behaviour in torch.py.
"""
from __future__ import annotations

import ctypes
import os
import threading

__all__ = ["SovaError", "lib", "torch_lib", "check", "error_name", "PoolProps",
           "PoolStats", "TorchOptions", "TorchStats", "TorchEvent", "library_path"]

_HERE = os.path.dirname(os.path.abspath(__file__))

# cudaError_t values sova returns (docs/c-api.md); others are shown by number.
_ERROR_NAMES = {
    0: "cudaSuccess",
    1: "cudaErrorInvalidValue",
    2: "cudaErrorMemoryAllocation",
    3: "cudaErrorInitializationError",
    35: "cudaErrorInsufficientDriver",
    100: "cudaErrorNoDevice",
    101: "cudaErrorInvalidDevice",
    400: "cudaErrorInvalidResourceHandle",
    801: "cudaErrorNotSupported",
    900: "cudaErrorStreamCaptureUnsupported",
    999: "cudaErrorUnknown",
}


def error_name(code: int) -> str:
    return _ERROR_NAMES.get(code, f"cudaError {code}")


class SovaError(RuntimeError):
    """A sova call failed. ``code`` is the cudaError_t it returned."""

    def __init__(self, message: str, code: int = 0):
        super().__init__(message)
        self.code = code


def check(err: int, what: str, detail: str = "") -> None:
    """Raises SovaError when ``err`` is not cudaSuccess."""
    if err == 0:
        return
    hint = ""
    if err in (3, 35, 100):
        hint = " (no usable GPU or CUDA driver on this machine)"
    message = f"sova: {what} failed: {error_name(err)} ({err}){hint}"
    if detail:
        message += f": {detail}"
    raise SovaError(message, err)


class PoolProps(ctypes.Structure):
    """sovaMemPoolProps."""
    _fields_ = [("device", ctypes.c_int), ("policy", ctypes.c_int),
                ("maxSize", ctypes.c_size_t), ("handleTypes", ctypes.c_int),
                ("flags", ctypes.c_uint), ("reserved", ctypes.c_ubyte * 60)]


# sovaMemPoolStats' counters after structSize, in its order: the test
# capi_stats_fields_python (test/capi) checks this list against the C struct.
_STAT_FIELDS = ["reservedCurrent", "reservedHigh", "usedCurrent", "usedHigh", "liveBlocks",
                "allocations", "deallocations", "fastPathHits", "failedAllocations",
                "cachedBytes", "cachedSmallBytes", "freeBackedBytes", "largestFreeBlock",
                "chunksMapped", "chunksUnmapped", "chunksRemapped", "bytesRemapped",
                "crossStreamReuses", "crossStreamWaits", "eventsRecorded",
                "deviceSynchronizes", "remapWaits",
                # the slow path's steps and their sampled host time
                "slowFromHeap", "slowFromHeapAll", "slowFromOtherStreams", "slowWithWait",
                "slowGrown", "slowAfterSynchronize", "slowFromHeapNs", "slowFromHeapAllNs",
                "slowFromOtherStreamsNs", "slowWithWaitNs", "slowGrownNs", "slowAfterSynchronizeNs",
                # moves back to a chunk's old mapping, and those mappings now
                "remapsToGhosts", "ghostMappings",
                # stream states held, retired, and active (allocated in the last ~200 ms);
                # bytes cached by retired or inactive ones, until the worker's synchronize
                "streamStates", "retiredStreams", "activeStreams", "strandedBytes"]


class PoolStats(ctypes.Structure):
    """sovaMemPoolStats (set structSize = ctypes.sizeof(PoolStats) before a call)."""
    _fields_ = [("structSize", ctypes.c_size_t)] + [(n, ctypes.c_uint64) for n in _STAT_FIELDS]

    @classmethod
    def new(cls) -> "PoolStats":
        s = cls()
        s.structSize = ctypes.sizeof(cls)
        return s

    def as_dict(self) -> dict:
        return {n: int(getattr(self, n)) for n in _STAT_FIELDS}


class TorchOptions(ctypes.Structure):
    """sovaTorchOptions."""
    _fields_ = [("releaseThreshold", ctypes.c_uint64), ("policy", ctypes.c_int),
                ("flags", ctypes.c_uint), ("maxSize", ctypes.c_size_t)]


_TORCH_STAT_FIELDS = ["numOoms", "bytesAllocated", "bytesFreed", "liveBlocksPeak",
                      "recordStreamWaits", "deferredFrees", "freeErrors"]


class TorchStats(ctypes.Structure):
    """sovaTorchStats."""
    _fields_ = [("pool", PoolStats)] + [(n, ctypes.c_uint64) for n in _TORCH_STAT_FIELDS]

    @classmethod
    def new(cls) -> "TorchStats":
        s = cls()
        s.pool.structSize = ctypes.sizeof(PoolStats)
        return s

    def as_dict(self) -> dict:
        d = self.pool.as_dict()
        d.update({n: int(getattr(self, n)) for n in _TORCH_STAT_FIELDS})
        return d


class TorchEvent(ctypes.Structure):
    """sovaTorchEvent."""
    _fields_ = [("action", ctypes.c_int), ("device", ctypes.c_int), ("addr", ctypes.c_uint64),
                ("size", ctypes.c_uint64), ("stream", ctypes.c_uint64), ("timeUs", ctypes.c_uint64)]


_c = ctypes
_P = _c.c_void_p
_ERR = _c.c_int
_SIGNATURES = {
    "sovaMallocAsync": (_ERR, [_c.POINTER(_P), _c.c_size_t, _P]),
    "sovaFreeAsync": (_ERR, [_P, _P]),
    "sovaMallocFromPoolAsync": (_ERR, [_c.POINTER(_P), _c.c_size_t, _P, _P]),
    "sovaMemPoolCreate": (_ERR, [_c.POINTER(_P), _c.POINTER(PoolProps)]),
    "sovaMemPoolDestroy": (_ERR, [_P]),
    "sovaMemPoolSetAttribute": (_ERR, [_P, _c.c_int, _P]),
    "sovaMemPoolGetAttribute": (_ERR, [_P, _c.c_int, _P]),
    "sovaMemPoolTrimTo": (_ERR, [_P, _c.c_size_t]),
    "sovaMemPoolStreamSynchronized": (_ERR, [_P, _P]),
    "sovaMemPoolGetStats": (_ERR, [_P, _c.POINTER(PoolStats)]),
    "sovaDeviceGetDefaultMemPool": (_ERR, [_c.POINTER(_P), _c.c_int]),
    "sovaDeviceSetMemPool": (_ERR, [_c.c_int, _P]),
    "sovaDeviceGetMemPool": (_ERR, [_c.POINTER(_P), _c.c_int]),
}
_TORCH_SIGNATURES = {
    "sova_torch_configure": (_ERR, [_c.POINTER(TorchOptions)]),
    "sova_torch_malloc_nothrow": (_P, [_c.c_size_t, _c.c_int, _P]),
    "sova_torch_free": (None, [_P, _c.c_size_t, _c.c_int, _P]),
    "sova_torch_record_stream": (_ERR, [_P, _P]),
    "sova_torch_get_stats": (_ERR, [_c.c_int, _c.POINTER(TorchStats)]),
    "sova_torch_reset_peak_stats": (_ERR, [_c.c_int]),
    "sova_torch_empty_cache": (_ERR, [_c.c_int]),
    "sova_torch_pool": (_P, [_c.c_int]),
    "sova_torch_record_history": (_ERR, [_c.c_int, _c.c_size_t]),
    "sova_torch_history": (_c.c_size_t, [_c.POINTER(TorchEvent), _c.c_size_t]),
    "sova_torch_live_blocks": (_c.c_size_t, [_c.POINTER(TorchEvent), _c.c_size_t]),
    "sova_torch_bind_torch": (_ERR, [_c.c_char_p]),
    "sova_torch_last_error": (_c.c_char_p, []),
}
# sova_torch_malloc is not declared: it throws C++ exceptions and is only for
# PyTorch to call (its address is taken with symbol_address).

_lock = threading.Lock()
_libs: dict = {}


def library_path(name: str = "libsova.so") -> str:
    """Where ``name`` is loaded from (see the module's contract)."""
    env = {"libsova.so": "SOVA_LIBRARY", "libsova_torch.so": "SOVA_TORCH_LIBRARY"}.get(name)
    if env and os.environ.get(env):
        return os.environ[env]
    return os.path.join(_HERE, name)


def _load(name: str, signatures: dict) -> ctypes.CDLL:
    with _lock:
        if name in _libs:
            return _libs[name]
        path = library_path(name)
        try:
            handle = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL if name == "libsova.so" else 0)
        except OSError as e:
            raise SovaError(f"sova: cannot load {path}: {e}") from e
        for fn, (restype, argtypes) in signatures.items():
            f = getattr(handle, fn)
            f.restype, f.argtypes = restype, argtypes
        _libs[name] = handle
        return handle


def lib() -> ctypes.CDLL:
    """libsova.so, with the C API's signatures declared."""
    return _load("libsova.so", _SIGNATURES)


def torch_lib() -> ctypes.CDLL:
    """libsova_torch.so (loads libsova.so first, so both are the same copy)."""
    lib()
    return _load("libsova_torch.so", _TORCH_SIGNATURES)


def symbol_address(handle: ctypes.CDLL, name: str) -> int:
    """The address of the function ``name`` in ``handle``."""
    return ctypes.cast(getattr(handle, name), ctypes.c_void_p).value


def torch_last_error() -> str:
    return (torch_lib().sova_torch_last_error() or b"").decode(errors="replace")
