"""sova as PyTorch's CUDA allocator.

    import sova.torch
    sova.torch.enable()          # before the first CUDA tensor
    ...                          # train as usual

``enable`` makes sova PyTorch's CUDA allocator (every CUDA tensor of the
process then comes from sova: one pool per device): by default as a c10
CUDAAllocator compiled against the installed PyTorch on first use (the native
backend, _torch_native, which torch.compile(mode="reduce-overhead") needs),
and where it cannot be built through torch.cuda.memory.CUDAPluggableAllocator
(backend="pluggable", one warning says what will not work);
``mem_pool`` gives a torch.cuda.MemPool on sova for scoped use
(torch.cuda.use_mem_pool) without replacing PyTorch's allocator.
PyTorch's own memory_stats() and snapshot raise under a pluggable allocator
(pytorch#133281): this module gives memory_stats(), max_memory_reserved(),
reset_peak_memory_stats(), empty_cache(), record_memory_history() and
snapshot()/dump_snapshot() in PyTorch's key names and format.
docs/python.md has the details and the limitations.
"""
from __future__ import annotations

import ctypes
import os
import pickle
import threading
import warnings

from . import _capi, _snapshot
from ._capi import SovaError
from ._options import PoolOptions
from ._torch_sleep import sleep, tag, tag_stats, tags, wake

__all__ = ["enable", "is_enabled", "backend", "configure", "mem_pool", "memory_stats", "memory_allocated",
           "graph_holdings", "max_memory_allocated", "memory_reserved", "max_memory_reserved",
           "reset_peak_memory_stats", "empty_cache", "record_memory_history", "snapshot",
           "dump_snapshot", "last_error", "out_of_memory_error", "SovaError",
           "tag", "tags", "sleep", "wake", "tag_stats"]

_lock = threading.Lock()
_options: PoolOptions | None = None   # set by the first configure()/enable()
_enabled = False
_backend = None                       # "pluggable" or "native" once enabled
_requested_backend = None             # what enable() was asked for ("auto" included)
BACKENDS = ("auto", "pluggable", "native")
_allocator = None                     # the CUDAPluggableAllocator installed by enable()
_pool_allocator = None                # the one behind mem_pool()
_orig_record_stream = None
_oom_error = None                     # set by enable()


def _torch():
    try:
        import torch
    except ImportError as e:
        raise ImportError("sova.torch needs PyTorch (import torch failed)") from e
    return torch


def last_error() -> str:
    """The adapter's last error message on this thread (e.g. sova's out-of-memory
    message after a torch.cuda.MemPool allocation failed)."""
    return _capi.torch_last_error()


def _half_of_host_memory() -> int:
    """Half the host's physical memory in bytes; 0 (no limit) where unknown."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2
    except (ValueError, OSError, AttributeError):
        return 0


# sova.torch's defaults where they differ from sova.PoolOptions': no physical
# remapping. Measured on the H100 (docs/benchmarks.md, "Remapping under
# PyTorch"): in training with varying shapes, remapping's host waits on the
# allocating stream (300-470 per run) stalled PyTorch's asynchronous pipeline, 6-22% more
# time per step, for 3-7% less peak reserved memory; without it sova is at
# native's time and within 1% of expandable segments' peak. Since pinned
# ghosts (docs/design.md) the waits are 4-5x fewer and remapping costs
# -2% to +8% of a step against sova without it in one run, and +0.4% /
# +21% / +5% in another (ResNet-18 the costly one): not a default.
# remap="balanced" or "thorough" asks for it.
#
# Sleep (docs/sleep-wake.md, "Pinning ahead"): a tag's pool exists to sleep,
# so it pins its backup's host memory ahead, in the background, by default
# (the first sleep then copies at the link's speed instead of pinning at a
# few GiB/s), within a budget of half the host's physical memory per pool:
# pinned memory cannot be swapped, and a backup that would lock more than
# half the host is refused rather than starve the host. The untagged pool
# never sleeps through sova.torch and pins nothing ahead. A tag slept without
# backup gives its pinned memory back (_torch_sleep.sleep).
TORCH_DEFAULTS = {"remap": "off", "sleep_pin_ahead": True, "sleep_host_budget": _half_of_host_memory()}


def _make_options(options: PoolOptions | None, kwargs: dict) -> PoolOptions:
    if options is not None and kwargs:
        raise TypeError("sova.torch: give options or keyword options, not both")
    return options if options is not None else PoolOptions(**{**TORCH_DEFAULTS, **kwargs})


def configure(options: PoolOptions | None = None, **kwargs) -> PoolOptions:
    """Fixes the options of sova.torch's pools (release_threshold, policy, remap,
    stream_checks, max_size, sleep_pin_ahead, sleep_host_budget: see
    sova.PoolOptions; defaults as there but TORCH_DEFAULTS: remap="off", and
    tags' pools pin sleep's host memory ahead within half the host's memory). Allowed until the first
    allocation; calling again with the same options is a no-op, with others
    after pools exist raises SovaError. Returns the options in force."""
    global _options
    opts = _make_options(options, kwargs)
    with _lock:
        if _options == opts:
            return opts
        t = _capi.TorchOptions(opts.threshold_value, opts.policy_value, opts.flags, opts.max_size,
                               opts.sleep_host_budget)
        err = _capi.torch_lib().sova_torch_configure(ctypes.byref(t))
        if err:
            raise SovaError(f"sova.torch.configure: {last_error()} (options in force: {_options})", err)
        _options = opts
        return opts


def _library() -> str:
    return _capi.library_path("libsova_torch.so")


def _torch_libraries(torch) -> list:
    """PyTorch's shared libraries loaded in this process, libc10 first."""
    libdir = os.path.realpath(os.path.join(os.path.dirname(torch.__file__), "lib"))
    found = []
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                parts = line.split(maxsplit=5)
                path = parts[5].strip() if len(parts) == 6 else ""
                if path.startswith(libdir) and ".so" in path and path not in found:
                    found.append(path)
    except OSError:
        pass
    order = ["libc10.so", "libc10_cuda.so", "libtorch_cuda.so", "libtorch_cpu.so"]
    return sorted(found, key=lambda p: (order.index(os.path.basename(p))
                                        if os.path.basename(p) in order else len(order), p))


def _bind_torch_errors(torch) -> None:
    """Makes sova's out-of-memory raise torch.OutOfMemoryError (torch_errors.hpp);
    where that cannot be done, warns that it raises RuntimeError."""
    global _oom_error
    libs = _torch_libraries(torch)
    if _capi.torch_lib().sova_torch_bind_torch(":".join(libs).encode()) == 0:
        _oom_error = torch.OutOfMemoryError
    else:
        _oom_error = RuntimeError
        warnings.warn("sova.torch: out of memory will raise RuntimeError, not "
                      f"torch.OutOfMemoryError ({last_error()})", RuntimeWarning, stacklevel=3)


def out_of_memory_error():
    """The exception class sova's out of memory raises under enable():
    torch.OutOfMemoryError, or RuntimeError where that could not be bound
    (a warning said so). None before enable()."""
    return _oom_error


def enable(options: PoolOptions | None = None, backend: str = "auto", **kwargs) -> None:
    """Makes sova PyTorch's CUDA allocator for the whole process.

    Must run before PyTorch initializes CUDA (before the first CUDA tensor);
    afterwards it raises SovaError and changes nothing. Options as configure().
    Calling it again with the same options and backend does nothing.

    backend="auto" (default): the native backend where it can be built here,
    else the pluggable one with one warning saying what will not work. The
    native backend is a c10 CUDAAllocator built against the installed PyTorch
    on first use (a C++ compiler and the CUDA toolkit's headers needed; about
    a minute, said on stderr with the time it took; cached in PyTorch's
    extension directory, TORCH_EXTENSIONS_DIR, for later processes): it runs
    everything, torch.compile(mode="reduce-overhead") included, and
    torch.cuda.memory_stats() reports sova. backend="pluggable": through
    CUDAPluggableAllocator, no build; its hooks route record_stream (also from
    PyTorch's C++, e.g. DDP's NCCL streams) and torch.cuda.empty_cache() to
    sova, but PyTorch's pluggable allocator cannot serve reduce-overhead's
    cudagraph trees (sova's error says so). backend="native" forces the build
    and fails if it cannot. docs/python.md, "Which backend".
    """
    global _enabled, _allocator, _orig_record_stream, _backend, _oom_error, _requested_backend
    if backend not in BACKENDS:
        raise ValueError(f"sova.torch.enable: backend must be one of {BACKENDS}, not {backend!r}")
    opts = _make_options(options, kwargs)  # checked before anything changes
    torch = _torch()
    with _lock:
        enabled = _enabled
    if enabled:
        if _options != opts or backend not in (_requested_backend, _backend):
            raise SovaError(f"sova.torch.enable: already enabled ({_backend}) with {_options}; "
                            f"the allocator cannot be changed to {backend} with {opts}")
        return
    if torch.cuda.is_initialized():
        raise SovaError("sova.torch.enable() must be called before PyTorch initializes CUDA "
                        "(before the first CUDA tensor or torch.cuda call that allocates); "
                        "PyTorch's allocator is already in use in this process and cannot be "
                        "swapped. Call it at the start of the program.")
    configure(opts)
    if backend in ("auto", "native"):
        from . import _torch_native
        try:
            _torch_native.install(announce=True)
        except SovaError as e:
            if backend == "native":
                raise
            warnings.warn(
                "sova.torch.enable(): the native backend could not be built here, so sova runs "
                "through PyTorch's pluggable allocator, under which torch.compile(mode="
                "\"reduce-overhead\") cannot run (PyTorch's CUDAPluggableAllocator has no "
                "checkPoolLiveAllocations); everything else works. To get it: a C++ compiler and "
                "the CUDA toolkit's headers (CUDA_HOME). To choose the pluggable backend without "
                f"this warning: enable(backend=\"pluggable\"). The build said: {e}",
                RuntimeWarning, stacklevel=2)
        else:
            with _lock:
                _oom_error = torch.OutOfMemoryError  # raised by the backend itself
                _enabled, _backend, _requested_backend = True, "native", backend
            return
    _bind_torch_errors(torch)
    allocator = torch.cuda.memory.CUDAPluggableAllocator(_library(), "sova_torch_malloc",
                                                          "sova_torch_free")
    record_stream_hooked = _set_pluggable_hooks(allocator)
    try:
        torch.cuda.memory.change_current_allocator(allocator)
    except RuntimeError as e:
        raise SovaError(f"sova.torch.enable: PyTorch refused the allocator: {e}") from e
    _explain_reduce_overhead(torch)
    with _lock:
        _allocator = allocator
        _enabled, _backend, _requested_backend = True, "pluggable", backend
        if not record_stream_hooked and _orig_record_stream is None:
            # A PyTorch without set_record_stream_fn: only the Python method reaches sova.
            _orig_record_stream = torch.Tensor.record_stream
            torch.Tensor.record_stream = _record_stream


def _explain_reduce_overhead(torch) -> None:
    """Under the pluggable backend, torch.compile(mode="reduce-overhead")'s
    cudagraph trees call checkPoolLiveAllocations, which PyTorch's pluggable
    allocator refuses with an error that names neither sova nor the fix:
    the call raises sova's instead (the same RuntimeError type)."""
    original = getattr(torch._C, "_cuda_checkPoolLiveAllocations", None)
    if original is None or getattr(original, "_sova_explained", False):
        return

    def check_pool_live_allocations(*args, **kwargs):
        try:
            return original(*args, **kwargs)
        except RuntimeError as e:
            raise RuntimeError(
                "sova.torch: torch.compile(mode=\"reduce-overhead\") needs sova's native backend; "
                "this process runs the pluggable one (PyTorch's CUDAPluggableAllocator does not yet "
                "support checkPoolLiveAllocations). Call sova.torch.enable() with a C++ compiler and "
                "the CUDA toolkit's headers present (it then builds the native backend), or "
                f"enable(backend=\"native\"). PyTorch said: {e}") from e

    check_pool_live_allocations._sova_explained = True
    torch._C._cuda_checkPoolLiveAllocations = check_pool_live_allocations


def _set_pluggable_hooks(allocator) -> bool:
    """Gives the pluggable allocator sova's hooks (lib/adapters/torch/graph_hooks.hpp):
    CUDA graph capture begin/end/release, record_stream, empty_cache and
    set_per_process_memory_fraction (sova_torch_set_memory_fraction). Returns
    whether record_stream reaches sova through the allocator."""
    hooks = allocator.allocator()
    tl = _capi.torch_lib()
    setters = [("set_begin_allocate_to_pool", "sova_torch_begin_allocate_to_pool"),
               ("set_end_allocate_to_pool_fn", "sova_torch_end_allocate_to_pool"),
               ("set_release_pool", "sova_torch_release_pool"),
               ("set_reset_fn", "sova_torch_empty_cache_all"),
               ("set_memory_fraction_fn", "sova_torch_set_memory_fraction"),
               ("set_record_stream_fn", "sova_torch_record_stream_hook")]
    for setter, symbol in setters:
        if hasattr(hooks, setter):
            getattr(hooks, setter)(_capi.symbol_address(tl, symbol))
    return hasattr(hooks, "set_record_stream_fn")


def is_enabled() -> bool:
    return _enabled


def backend():
    """The backend enable() installed: "pluggable" or "native" (enable()'s "auto"
    says which it chose), else None."""
    return _backend


def _record_stream(self, stream):
    """Tensor.record_stream under sova where the allocator has no record_stream
    hook: PyTorch's checks, then sova's record."""
    _orig_record_stream(self, stream)
    if self.is_cuda:
        ptr = self.untyped_storage().data_ptr()
        if ptr:
            _capi.check(_capi.torch_lib().sova_torch_record_stream(ctypes.c_void_p(ptr),
                                                                   ctypes.c_void_p(stream.cuda_stream)),
                        "record_stream", last_error(), capi=False)


def mem_pool():
    """A torch.cuda.MemPool whose memory comes from sova (use with
    torch.cuda.use_mem_pool, or torch.cuda.graph(pool=mem_pool().id)). Works
    with or without enable(); PyTorch's caching allocator manages blocks inside
    it, so torch.cuda.memory_stats() counts it and a failed sova allocation
    becomes PyTorch's own out-of-memory error (sova's message:
    sova.torch.last_error()). Segments asked for during a graph capture are
    ordinary sova memory, not graph memory (sova_torch_malloc_segment).
    Refused under enable()'s pluggable backend: PyTorch 2.11's
    CUDAPluggableAllocator has no pools, so no torch.cuda.MemPool can work
    there ("does not yet support createOrIncrefPool"); use
    enable(backend="native"), or PyTorch's allocator with this pool."""
    global _pool_allocator
    if _backend == "pluggable":
        raise SovaError("sova.torch.mem_pool: not available under enable()'s pluggable backend, which has no "
                        "pools (PyTorch's CUDAPluggableAllocator refuses every torch.cuda.MemPool); use "
                        "enable(backend=\"native\"), or PyTorch's own allocator with mem_pool()")
    torch = _torch()
    if not hasattr(torch.cuda, "MemPool"):
        raise SovaError("sova.torch.mem_pool: this PyTorch has no torch.cuda.MemPool")
    if _options is None:
        configure()
    with _lock:
        if _pool_allocator is None:
            _pool_allocator = torch.cuda.memory.CUDAPluggableAllocator(
                _library(), "sova_torch_malloc_segment", "sova_torch_free_segment")
    return torch.cuda.MemPool(_pool_allocator.allocator())


def _device_index(device) -> int:
    if device is None:
        torch = _torch()
        return torch.cuda.current_device() if torch.cuda.is_initialized() else 0
    if isinstance(device, int) and not isinstance(device, bool):
        if device < 0:
            raise ValueError(f"sova.torch: device must be >= 0, not {device}")
        return device
    torch = _torch()
    d = torch.device(device)
    if d.type != "cuda":
        raise ValueError(f"sova.torch: not a CUDA device: {device!r}")
    return d.index if d.index is not None else torch.cuda.current_device()


def raw_stats(device=None) -> dict:
    """The adapter's statistics of ``device`` (sovaTorchStats' field names)."""
    s = _capi.TorchStats.new()
    _capi.check(_capi.torch_lib().sova_torch_get_stats(_device_index(device), ctypes.byref(s)),
                "reading statistics", last_error(), capi=False)
    return s.as_dict()


def graph_holdings(device=None, tag=None) -> list:
    """Which CUDA graph holds what of sova's memory on ``device``: the device's
    pool, or tag ``tag``'s (docs/graphs.md, "Which graph holds what"). A dict
    per graph whose memory is not yet back, in order of capture id (as
    sova.Pool.graph_holdings). Under the pluggable backend, graph memory is
    sova's and counted here; under the native backend PyTorch's graph pools
    hold segments of sova's segment pool (memory_stats()'s "sova.segments.*";
    torch.cuda.memory_snapshot() shows those pools), and this lists nothing."""
    from ._torch_sleep import _tag_id
    index = _device_index(device)
    lib = _capi.torch_lib()
    pool = lib.sova_torch_pool(index) if tag is None else lib.sova_torch_tag_pool(_tag_id(tag), index)
    if not pool:   # no allocation there yet: no graph either
        return []
    return _capi.graph_holdings(pool)


def memory_stats(device=None) -> dict:
    """torch.cuda.memory_stats()'s keys where sova has the figure, plus "sova.*".

    allocated/active bytes are the requested sizes (PyTorch counts its rounded
    block sizes); reserved bytes are sova's mapped physical memory; segments
    are sova's physical chunks. Keys without a sova counterpart are absent."""
    r = raw_stats(device)
    stats = {
        "allocated_bytes.all.current": r["usedCurrent"],
        "allocated_bytes.all.peak": r["usedHigh"],
        "allocated_bytes.all.allocated": r["bytesAllocated"],
        "allocated_bytes.all.freed": r["bytesFreed"],
        "active_bytes.all.current": r["usedCurrent"],
        "active_bytes.all.peak": r["usedHigh"],
        "requested_bytes.all.current": r["usedCurrent"],
        "requested_bytes.all.peak": r["usedHigh"],
        "reserved_bytes.all.current": r["reservedCurrent"],
        "reserved_bytes.all.peak": r["reservedHigh"],
        "allocation.all.current": r["liveBlocks"],
        "allocation.all.peak": r["liveBlocksPeak"],
        "allocation.all.allocated": r["allocations"],
        "allocation.all.freed": r["deallocations"],
        "active.all.current": r["liveBlocks"],
        "active.all.peak": r["liveBlocksPeak"],
        "segment.all.current": r["chunksMapped"] - r["chunksUnmapped"],
        "num_device_alloc": r["chunksMapped"],
        "num_device_free": r["chunksUnmapped"],
        "inactive_split_bytes.all.current": r["freeBackedBytes"],
        "num_alloc_retries": r["deviceSynchronizes"],
        "num_sync_all_streams": r["deviceSynchronizes"],
        "num_ooms": r["numOoms"],
    }
    free_backed = r["freeBackedBytes"]
    stats["sova.fragmentation"] = (1.0 - r["largestFreeBlock"] / free_backed) if free_backed else 0.0
    stats["sova.peak_overhead"] = (r["reservedHigh"] / r["usedHigh"]) if r["usedHigh"] else 0.0
    for key, value in r.items():
        stats["sova." + key] = value
    # The native backend's private pools' segments (sova_torch_malloc_pool_segment).
    segments = _capi.torch_lib().sova_torch_segment_pool(_device_index(device))
    if segments:
        s = _capi.PoolStats.new()
        _capi.check(_capi.lib().sovaMemPoolGetStats(ctypes.c_void_p(segments), ctypes.byref(s)),
                    "reading the segment pool's statistics")
        stats["sova.segments.reservedCurrent"] = s.reservedCurrent
        stats["sova.segments.usedCurrent"] = s.usedCurrent
    return dict(sorted(stats.items()))


# cudaMemPoolAttr values (driver_types.h): cheap reads, no walk of the pool.
_ATTR_RESERVED_CURRENT, _ATTR_RESERVED_HIGH, _ATTR_USED_CURRENT, _ATTR_USED_HIGH = 5, 6, 7, 8


def _attribute(device, attr) -> int:
    pool = _capi.torch_lib().sova_torch_pool(_device_index(device))
    if not pool:
        return 0  # no pool yet: nothing allocated on that device
    value = ctypes.c_uint64()
    _capi.check(_capi.lib().sovaMemPoolGetAttribute(ctypes.c_void_p(pool), attr, ctypes.byref(value)),
                "reading a pool attribute")
    return value.value


def memory_allocated(device=None) -> int:
    """Bytes of live tensors (requested sizes) on ``device``."""
    return _attribute(device, _ATTR_USED_CURRENT)


def max_memory_allocated(device=None) -> int:
    return _attribute(device, _ATTR_USED_HIGH)


def memory_reserved(device=None) -> int:
    """Physical memory sova holds on ``device`` (cheap: one attribute read)."""
    return _attribute(device, _ATTR_RESERVED_CURRENT)


def max_memory_reserved(device=None) -> int:
    return _attribute(device, _ATTR_RESERVED_HIGH)


def reset_peak_memory_stats(device=None) -> None:
    """Peaks (reserved, allocated, live blocks) start again from the current values."""
    _capi.check(_capi.torch_lib().sova_torch_reset_peak_stats(_device_index(device)),
                "resetting peaks", last_error(), capi=False)


def empty_cache(device=None) -> None:
    """Releases the pool's free physical memory (may synchronize the device). Also
    what torch.cuda.empty_cache() leaves untouched under a pluggable allocator."""
    _capi.check(_capi.torch_lib().sova_torch_empty_cache(_device_index(device)),
                "empty_cache", last_error(), capi=False)


def record_memory_history(enabled: bool | None = True, max_entries: int = 100_000) -> None:
    """Like torch.cuda.memory._record_memory_history: start (clearing what was
    recorded) or stop (enabled None/False) recording allocations and frees."""
    if isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries < 0:
        raise ValueError(f"sova.torch.record_memory_history: max_entries must be an int >= 0, "
                         f"not {max_entries!r}")
    _capi.size_arg(max_entries, "sova.torch.record_memory_history: max_entries")
    on = enabled not in (None, False)
    _capi.check(_capi.torch_lib().sova_torch_record_history(int(on), max_entries), "record_memory_history",
                capi=False)


def _read(fn):
    n = fn(None, 0)
    buf = (_capi.TorchEvent * max(n, 1))()
    got = min(fn(buf, n), n)
    return list(buf[:got])


def snapshot() -> dict:
    """torch.cuda.memory._snapshot()'s dict, from what was recorded (_snapshot.py)."""
    tl = _capi.torch_lib()
    events = _read(tl.sova_torch_history)
    live = _read(tl.sova_torch_live_blocks)
    devices = 1 + max([e.device for e in events + live], default=0)
    return _snapshot.build(events, live, devices)


def dump_snapshot(filename: str = "dump_snapshot.pickle") -> None:
    """Like torch.cuda.memory._dump_snapshot: pickles snapshot() to ``filename``."""
    with open(filename, "wb") as f:
        pickle.dump(snapshot(), f)
