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
           "PoolStats", "GraphHolding", "graph_holdings", "TorchOptions", "TorchStats", "TorchEvent", "library_path",
           "SIZE_MAX", "size_arg", "address_arg", "last_error_message"]

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
    800: "cudaErrorNotPermitted",
    801: "cudaErrorNotSupported",
    900: "cudaErrorStreamCaptureUnsupported",
    999: "cudaErrorUnknown",
}


def error_name(code: int) -> str:
    return _ERROR_NAMES.get(code, f"cudaError {code}")


# The largest size_t (and pointer) value. ctypes converts a larger int, or a
# negative one, modulo 2**64 without a word: (1 << 64) + 8192 would reach C as
# 8192. Every size or address handed to C goes through size_arg/address_arg.
SIZE_MAX = (1 << (8 * ctypes.sizeof(ctypes.c_size_t))) - 1


def size_arg(value, what: str) -> int:
    """``value`` checked as a size_t argument named ``what``: TypeError unless
    an int (bools refused), ValueError when negative, OverflowError above
    SIZE_MAX. Returns it unchanged."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"sova: {what} must be an int, not {type(value).__name__}")
    if value < 0:
        raise ValueError(f"sova: {what} must be >= 0, not {value}")
    if value > SIZE_MAX:
        raise OverflowError(f"sova: {what} must be at most 2**64-1 (size_t), not {value}")
    return value


def address_arg(value, what: str) -> int:
    """``value`` checked as an address (a device pointer or a cudaStream_t,
    as an int; 0 is NULL / the legacy stream): as size_arg, and None is a
    TypeError that says what was expected."""
    if value is None:
        raise TypeError(f"sova: {what} must be an int address (0 for NULL), not None")
    return size_arg(value, what)


class SovaError(RuntimeError):
    """A sova call failed. ``code`` is the cudaError_t it returned."""

    def __init__(self, message: str, code: int = 0):
        super().__init__(message)
        self.code = code


# Codes that mean no usable NVIDIA driver or GPU (lib/base/no_gpu_hint.hpp).
_NO_GPU_CODES = (3, 34, 35, 100)
_NO_GPU_HINT = ("no NVIDIA driver or GPU was found (or the driver is older than CUDA 12); "
                "SOVA_DRIVER=sim runs sova on its host simulation, without a GPU")


def last_error_message() -> str:
    """sovaGetLastErrorMessage: why the last failed sova call on this thread
    failed, without the function's name ("" if none failed, or if the loaded
    libsova predates the call)."""
    fn = getattr(lib(), "sovaGetLastErrorMessage", None)
    if fn is None:
        return ""
    text = (fn() or b"").decode(errors="replace")
    head, sep, rest = text.partition(": ")
    return rest if sep and head.startswith("sova") and " " not in head else text


def check(err: int, what: str, detail: str = "", capi: bool = True) -> None:
    """Raises SovaError when ``err`` is not cudaSuccess. ``capi``: ``err``
    came from a C API call (sova.h) made just before on this thread, whose
    own message (sovaGetLastErrorMessage: "already freed", "inside a block
    allocated at ...", no GPU and SOVA_DRIVER=sim) is then the reason; else,
    and where there is none, the code's name is."""
    if err == 0:
        return
    reason = (last_error_message() if capi else "") or f"{error_name(err)} ({err})"
    if error_name(err) not in reason:  # the code's name too, for whoever searches for it
        reason += f" ({error_name(err)})"
    if err in _NO_GPU_CODES and "SOVA_DRIVER" not in reason:
        reason += f": {_NO_GPU_HINT}"
    # The C API's own message may already say what failed ("allocating N bytes
    # failed: ..."): not said twice.
    message = f"sova: {reason}" if reason.startswith(f"{what} ") else f"sova: {what} failed: {reason}"
    if detail:
        message += f" ({detail})"
    raise SovaError(message, err)


class PoolProps(ctypes.Structure):
    """sovaMemPoolProps."""
    _fields_ = [("device", ctypes.c_int), ("policy", ctypes.c_int),
                ("maxSize", ctypes.c_size_t), ("handleTypes", ctypes.c_int),
                ("flags", ctypes.c_uint), ("hostNumaNode", ctypes.c_int),
                ("reservedPad", ctypes.c_ubyte * 4), ("sleepHostBudget", ctypes.c_size_t),
                ("reserved", ctypes.c_ubyte * 48)]


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
                # bytes cached by retired or inactive ones, until their frees are known complete
                "streamStates", "retiredStreams", "activeStreams", "strandedBytes",
                # physical memory asleep, and the pinned host memory kept for backups
                "asleepBytes", "sleepHostBytes",
                # what CUDA graphs hold now (also in reservedCurrent and usedCurrent)
                "graphHeldBytes", "graphHeldBlocks", "graphs",
                # sleep's host memory budget, pin-ahead's target, bytes and failures, refusals
                "sleepHostBudget", "sleepPinAheadTarget", "sleepPinAheadBytes", "sleepPinAheadFailures",
                "sleepBudgetRefusals"]


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
                ("flags", ctypes.c_uint), ("maxSize", ctypes.c_size_t),
                ("sleepHostBudget", ctypes.c_size_t)]


_TORCH_STAT_FIELDS = ["numOoms", "bytesAllocated", "bytesFreed", "liveBlocksPeak",
                      "recordStreamWaits", "deferredFrees", "freeErrors", "recordStreamCalls"]


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


class GraphHolding(ctypes.Structure):
    """sovaGraphHolding: what one graph holds of a pool."""
    _fields_ = [("captureId", ctypes.c_ulonglong), ("heldBytes", ctypes.c_uint64),
                ("heldBlocks", ctypes.c_uint64), ("outputBytes", ctypes.c_uint64),
                ("outputBlocks", ctypes.c_uint64), ("capturing", ctypes.c_int),
                ("reserved", ctypes.c_ubyte * 20)]

    def as_dict(self) -> dict:
        return {"captureId": self.captureId, "heldBytes": self.heldBytes, "heldBlocks": self.heldBlocks,
                "outputBytes": self.outputBytes, "outputBlocks": self.outputBlocks,
                "capturing": bool(self.capturing)}


def graph_holdings(pool) -> list:
    """sovaMemPoolGetGraphHoldings of ``pool`` (a handle or its address): a dict per graph
    holding its memory, in order of capture id."""
    if not isinstance(pool, ctypes.c_void_p):  # an address (sova_torch_pool's answer)
        pool = ctypes.c_void_p(pool)
    count = ctypes.c_size_t(0)
    while True:
        room = count.value
        array = (GraphHolding * max(room, 1))()
        check(lib().sovaMemPoolGetGraphHoldings(pool, array if room else None, room,
                                                ctypes.byref(count)), "reading what graphs hold")
        if count.value <= room:  # all of them fitted (the graphs may have changed between calls)
            return [array[i].as_dict() for i in range(count.value)]


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
    "sovaMemPoolSleep": (_ERR, [_P, _c.c_int, _P]),
    "sovaMemPoolWake": (_ERR, [_P, _P]),
    "sovaMemPoolWakeSynchronize": (_ERR, [_P, _P]),
    "sovaMemPoolIsAsleep": (_ERR, [_P, _c.POINTER(_c.c_int)]),
    "sovaMemPoolReleaseSleepHostMemory": (_ERR, [_P]),
    "sovaMemPoolReserveSleepBackup": (_ERR, [_P, _c.c_size_t]),
    "sovaMemPoolGetSleepBackup": (_ERR, [_P, _P, _c.c_size_t, _c.POINTER(_P), _c.POINTER(_c.c_size_t)]),
    "sovaMemPoolGetStats": (_ERR, [_P, _c.POINTER(PoolStats)]),
    "sovaMemPoolGetGraphHoldings": (_ERR, [_P, _c.POINTER(GraphHolding), _c.c_size_t,
                                           _c.POINTER(_c.c_size_t)]),
    "sovaDeviceGetDefaultMemPool": (_ERR, [_c.POINTER(_P), _c.c_int]),
    "sovaDeviceSetMemPool": (_ERR, [_c.c_int, _P]),
    "sovaDeviceGetMemPool": (_ERR, [_c.POINTER(_P), _c.c_int]),
    "sovaGetLastErrorMessage": (_c.c_char_p, []),
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
    "sova_torch_segment_pool": (_P, [_c.c_int]),
    "sova_torch_memory_fraction": (_c.c_double, [_c.c_int]),
    "sova_torch_memory_limit": (_c.c_uint64, [_c.c_int]),
    "sova_torch_reserved_bytes": (_c.c_uint64, [_c.c_int]),
    "sova_torch_set_tag": (_c.c_int, [_c.c_int]),
    "sova_torch_tag_pool": (_P, [_c.c_int, _c.c_int]),
    "sova_torch_record_history": (_ERR, [_c.c_int, _c.c_size_t]),
    "sova_torch_history": (_c.c_size_t, [_c.POINTER(TorchEvent), _c.c_size_t]),
    "sova_torch_live_blocks": (_c.c_size_t, [_c.POINTER(TorchEvent), _c.c_size_t]),
    "sova_torch_bind_torch": (_ERR, [_c.c_char_p]),
    "sova_torch_last_error": (_c.c_char_p, []),
}
# Declared where present: a libsova of a build before it still loads.
_OPTIONAL = frozenset({"sovaGetLastErrorMessage"})
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
            f = getattr(handle, fn, None)
            if f is None and fn in _OPTIONAL:  # a libsova older than this package (SOVA_LIBRARY)
                continue
            if f is None:
                raise SovaError(f"sova: {path} lacks {fn}: a libsova of another version?")
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
