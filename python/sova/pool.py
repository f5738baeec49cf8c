"""sova.pool.Pool: one sova pool from Python, on the C API (sovaMemPool_t).

Addresses and streams are ints (a cudaStream_t's value; 0 is the legacy
stream). For libraries that hand sova's memory to their own objects (the
PyTorch adapter uses its own per-device pools: sova.torch).
"""
from __future__ import annotations

import ctypes

from . import _capi
from ._options import PoolOptions

# cudaMemPoolAttr values (driver_types.h).
_ATTR_RELEASE_THRESHOLD = 4
_ATTR_RESERVED_HIGH = 6
_ATTR_USED_HIGH = 8
_INT_MAX = (1 << 31) - 1
# sovaSleepMode values (sova.h; compared by test/capi/check_python_constants.py,
# as are the cudaMemPoolAttr values above).
_SLEEP_BACKUP = 0
_SLEEP_DISCARD = 1
_SLEEP_DISCARD_ZEROED = 2


def _bool_arg(value, name: str, what: str, meaning: str) -> None:
    """TypeError unless ``value`` is a bool: a stand-in's truth value would
    decide silently what happens to the contents."""
    if not isinstance(value, bool):
        raise TypeError(f"{what}: {name} must be {meaning}, not {value!r} "
                        f"({type(value).__name__}); nothing was done")


def _sleep_mode(backup, what: str, zero=False) -> int:
    """sovaSleepMode for ``backup`` and ``zero``, both bools; zeroing a
    backup is a contradiction (ValueError)."""
    _bool_arg(backup, "backup", what, "True (contents copied to host memory and restored by wake) "
              "or False (contents dropped)")
    _bool_arg(zero, "zero", what, "True (dropped contents read zero after wake) or False (undefined)")
    if backup and zero:
        raise ValueError(f"{what}: zero=True needs backup=False (a backup is restored, not zeroed); "
                         f"nothing was done")
    if backup:
        return _SLEEP_BACKUP
    return _SLEEP_DISCARD_ZEROED if zero else _SLEEP_DISCARD


class Pool:
    """A sova pool on ``device``; options as sova.PoolOptions' fields.

    Raises SovaError when the pool cannot be made (no GPU or driver: the
    error says so), ValueError/TypeError for bad options (nothing is made).
    """

    def __init__(self, device: int = 0, options: PoolOptions | None = None, **kwargs):
        if options is not None and kwargs:
            raise TypeError("sova.Pool: give options or keyword options, not both")
        if options is not None and not isinstance(options, PoolOptions):
            raise TypeError(f"sova.Pool: options are keywords (sova.Pool(device, policy=...)) or a "
                            f"sova.PoolOptions, not {type(options).__name__}")
        opts = options if options is not None else PoolOptions(**kwargs)
        if isinstance(device, bool) or not isinstance(device, int) or not 0 <= device <= _INT_MAX:
            raise ValueError(f"sova.Pool: device must be an int >= 0, not {device!r}")
        self.options = opts
        self.device = device
        lib = _capi.lib()
        props = _capi.PoolProps()
        props.device = device
        props.policy = opts.policy_value
        props.maxSize = opts.max_size
        props.flags = opts.flags
        props.sleepHostBudget = opts.sleep_host_budget
        handle = ctypes.c_void_p()
        _capi.check(lib.sovaMemPoolCreate(ctypes.byref(handle), ctypes.byref(props)),
                    f"creating a pool on device {device}")
        self._handle = handle
        threshold = ctypes.c_uint64(opts.threshold_value)
        err = lib.sovaMemPoolSetAttribute(handle, _ATTR_RELEASE_THRESHOLD, ctypes.byref(threshold))
        if err:
            lib.sovaMemPoolDestroy(handle)
            self._handle = None
            _capi.check(err, "setting the release threshold")

    @property
    def handle(self) -> int:
        """The sovaMemPool_t, as an int (for other C API users)."""
        self._check_open()
        return self._handle.value

    def _check_open(self):
        if self._handle is None:
            raise ValueError("sova.Pool: the pool is closed")

    def allocate(self, size: int, stream: int = 0) -> int:
        """A block of ``size`` bytes for work on ``stream``; its address (0 for size 0).
        Out of memory: SovaError with code 2 (cudaErrorMemoryAllocation), the pool unchanged.
        A size that is not an int: TypeError; negative: ValueError; 2**64 or more:
        OverflowError (nothing is allocated)."""
        self._check_open()
        _capi.size_arg(size, "sova.Pool.allocate: size")
        _capi.address_arg(stream, "sova.Pool.allocate: stream")
        ptr = ctypes.c_void_p()
        _capi.check(_capi.lib().sovaMallocFromPoolAsync(ctypes.byref(ptr), size, self._handle,
                                                        ctypes.c_void_p(stream)),
                    f"allocating {size} bytes")
        return ptr.value or 0

    def free(self, ptr: int, stream: int = 0) -> None:
        """Frees a block in stream order; 0 (NULL) is ignored. A pointer this pool
        did not hand out, one inside a block, or a block already freed: SovaError
        saying which, nothing changes. Not an int (None included): TypeError."""
        self._check_open()
        _capi.address_arg(ptr, "sova.Pool.free: ptr")
        _capi.address_arg(stream, "sova.Pool.free: stream")
        _capi.check(_capi.lib().sovaFreeAsync(ctypes.c_void_p(ptr), ctypes.c_void_p(stream)),
                    f"freeing {ptr:#x}")

    def stats(self) -> dict:
        """sovaMemPoolGetStats as a dict (the field names of sovaMemPoolStats)."""
        self._check_open()
        s = _capi.PoolStats.new()
        _capi.check(_capi.lib().sovaMemPoolGetStats(self._handle, ctypes.byref(s)), "reading statistics")
        return s.as_dict()

    def graph_holdings(self) -> list:
        """Which CUDA graph holds what of this pool (sovaMemPoolGetGraphHoldings):
        a dict per graph whose memory is not yet back, in order of capture id:
        captureId, heldBytes, heldBlocks, outputBytes, outputBlocks (allocated
        in the graph and not freed in it), capturing."""
        self._check_open()
        return _capi.graph_holdings(self._handle)

    def trim(self, keep: int = 0) -> None:
        """Releases free physical memory beyond ``keep`` bytes (may synchronize the device)."""
        self._check_open()
        _capi.size_arg(keep, "sova.Pool.trim: keep")
        _capi.check(_capi.lib().sovaMemPoolTrimTo(self._handle, keep), "trimming")

    def reset_peaks(self) -> None:
        """Resets the reserved and used high-water marks to the current values."""
        self._check_open()
        zero = ctypes.c_uint64(0)
        for attr in (_ATTR_RESERVED_HIGH, _ATTR_USED_HIGH):
            _capi.check(_capi.lib().sovaMemPoolSetAttribute(self._handle, attr, ctypes.byref(zero)),
                        "resetting peaks")

    def sleep(self, *, backup: bool = True, zero: bool = False, stream: int | None = None) -> None:
        """Gives the pool's physical memory back to the device, its addresses
        kept (docs/sleep-wake.md). Blocks until the memory is the device's:
        when sleep returns, it is gone.

        ``backup`` (keyword only; True or False, nothing else):
          True, the default: the live blocks' bytes are copied to pinned host
          memory (kept across cycles) and wake restores them. The default
          because the other choice loses data: discarding must be asked for.
          False: they are dropped; after wake the blocks hold undefined bytes.
          Anything else (None, 0, 1, "yes") is a TypeError, the pool untouched:
          a truthy or falsy stand-in would decide silently whether data is lost.
        ``zero`` (keyword only; True or False, nothing else; False by default):
          True with backup=False: the contents are dropped and wake zeroes the
          blocks still live (one device memset of their bytes; for code that
          assumes zeroed memory). True with backup=True: ValueError, nothing
          done. A driver without memsets: SovaError, the pool awake.
        ``stream`` (an int, a cudaStream_t's value; None: 0, the legacy default
          stream): the sleep comes after the work ordered before it on that
          stream, and after nothing else (order other streams' work that uses
          the pool before it). A stream the driver does not know: SovaError.

        Until wake() allocations fail (SovaError, code 800:
        cudaErrorNotPermitted); frees are accepted and final. Asleep already:
        nothing happens. A refused argument changes nothing."""
        self._check_open()
        mode = _sleep_mode(backup, "sova.Pool.sleep", zero)
        stream = 0 if stream is None else _capi.address_arg(stream, "sova.Pool.sleep: stream")
        _capi.check(_capi.lib().sovaMemPoolSleep(self._handle, mode, ctypes.c_void_p(stream)),
                    "putting the pool to sleep")

    def wake(self, stream: int | None = None) -> None:
        """Makes the memory anew at the same addresses and restores what sleep
        backed up, or zeroes the live blocks after sleep(backup=False,
        zero=True) (docs/sleep-wake.md).

        ``stream`` None (the default): returns once the restore is done (it
        synchronizes the legacy default stream, which the restore or zeroing is
        ordered before): the contents are then what any stream, or the host, reads next.
        ``stream`` an int (a cudaStream_t's value; 0 is the legacy default
        stream): stream-ordered, returns at once; work submitted to that
        stream afterwards sees the contents, other streams and the host must
        wait for it first (reading before then may see the restore unfinished).

        Awake already: nothing happens (but the wait, for None). Device full:
        SovaError, the pool still asleep. A stream that is not an int
        (TypeError) or that the driver does not know (SovaError): nothing changes."""
        self._check_open()
        lib = _capi.lib()
        if stream is None:
            _capi.check(lib.sovaMemPoolWakeSynchronize(self._handle, ctypes.c_void_p(0)), "waking the pool")
            return
        _capi.address_arg(stream, "sova.Pool.wake: stream")
        _capi.check(lib.sovaMemPoolWake(self._handle, ctypes.c_void_p(stream)), "waking the pool")

    @property
    def asleep(self) -> bool:
        """True from the start of a sleep until its wake."""
        self._check_open()
        value = ctypes.c_int(0)
        _capi.check(_capi.lib().sovaMemPoolIsAsleep(self._handle, ctypes.byref(value)), "asking if asleep")
        return bool(value.value)

    def release_sleep_host_memory(self) -> None:
        """Frees the pinned host memory kept for sleep's backups (awake only)."""
        self._check_open()
        _capi.check(_capi.lib().sovaMemPoolReleaseSleepHostMemory(self._handle), "releasing sleep's host memory")

    def reserve_sleep_backup(self, nbytes: int) -> None:
        """Pins host memory for sleep's backups ahead of time, until the pool
        holds at least ``nbytes`` of it, so that a sleep backing up no more
        pins nothing (``stats()["reservedCurrent"]`` is always enough).
        Failure: SovaError, the memory held as before."""
        self._check_open()
        _capi.size_arg(nbytes, "sova.Pool.reserve_sleep_backup: nbytes")
        _capi.check(_capi.lib().sovaMemPoolReserveSleepBackup(self._handle, nbytes), "pinning sleep's host memory")

    def close(self) -> None:
        """Destroys the pool (its memory goes when its last live block is freed)."""
        if self._handle is not None:
            handle, self._handle = self._handle, None
            _capi.check(_capi.lib().sovaMemPoolDestroy(handle), "destroying the pool")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
