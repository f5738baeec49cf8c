"""sova as a drop-in for torch_memory_saver (docs/python.md, "Coming from
torch_memory_saver"): the same object, calls and arguments, served by sova's
sleep and wake.

    from sova.memory_saver import torch_memory_saver   # was: from torch_memory_saver import ...
    with torch_memory_saver.region(tag="weights", enable_cpu_backup=True):
        model = build_model().cuda()
    torch_memory_saver.pause("weights")       # memory back to the device, contents in host memory
    torch_memory_saver.resume("weights")      # same addresses, contents back

Or, for a program that cannot be edited, one environment variable puts a
``torch_memory_saver`` package that is this module first on the path:

    PYTHONPATH="$(python -m sova.memory_saver)" python serve.py

How: like torch_memory_saver's torch hook mode, region() allocates through a
torch.cuda.MemPool per (tag, enable_cpu_backup, backend, device) whose
segments come from sova (sova.torch.mem_pool), under the sova.torch tag that
the torch_memory_saver tag stands for (sova._memory_saver_state). Both hook
modes take this route: PyTorch's allocations inside region() and
cuda_graph() are all that either mode makes pauseable in a PyTorch program;
cudaMalloc called outside PyTorch (what torch_memory_saver's preload library
also catches) is not. Allocations outside region() stay PyTorch's own.
"""
from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import sys
import threading

from . import _capi
from . import _memory_saver_state as _state
from ._capi import SovaError

__all__ = ["TorchMemorySaver", "torch_memory_saver", "configure_subprocess"]

HOOK_MODES = ("preload", "torch")


def _torch():
    import torch
    return torch


class _RegionPool:
    """A region's torch.cuda.MemPool (sova segments) and what it stands for.
    Dropped (torch_memory_saver's own tests pop it from _mem_pools), it gives
    its memory back, and, where no live block is left under its sova tag, the
    backup's host memory too (Saver.give_back_if_empty)."""

    def __init__(self, saver: _state.Saver, tag: str, cpu_backup: bool, device: int):
        import sova.torch
        self.mem_pool = sova.torch.mem_pool()
        self._saver, self._tag, self._cpu_backup, self._device = saver, tag, cpu_backup, device

    def __del__(self):
        if getattr(self, "mem_pool", None) is None or sys.is_finalizing():
            return
        self.mem_pool = None
        try:
            _torch().cuda.empty_cache()  # the dropped pool's cached segments go back to sova
            self._saver.give_back_if_empty(self._tag, self._cpu_backup, self._device)
        except Exception as e:  # a destructor must not raise; say what was left
            print(f"sova.memory_saver: a dropped region pool kept its memory: {e}", file=sys.stderr)


class _CudaRuntimeFunctions:
    """The CUDA runtime functions torch_memory_saver's library re-exports
    (its tests call cudaHostGetFlags through it): the runtime PyTorch loaded."""

    def __init__(self):
        self._cudart = None

    def get(self, name: str):
        if self._cudart is None:
            torch = _torch()
            major = (torch.version.cuda or "12").split(".")[0]
            self._cudart = ctypes.CDLL(f"libcudart.so.{major}")
        return getattr(self._cudart, name)


class _StateCalls:
    """torch_memory_saver's C library calls on its region state
    (``_impl._binary_wrapper.cdll``), over the drop-in's state: what its own
    tests and code written against its internals read and set."""

    def __init__(self, impl: "_Impl"):
        self._impl = impl
        self._runtime = _CudaRuntimeFunctions()

    @property
    def _config(self):
        return self._impl.saver.config

    def tms_get_current_tag(self):
        return self._config.tag.encode()

    def tms_set_current_tag(self, tag):
        self._config.tag = _state.check_tag(tag.decode() if isinstance(tag, bytes) else tag)
        self._config.apply()

    def tms_get_interesting_region(self):
        return self._config.interesting_region

    def tms_set_interesting_region(self, value):
        self._config.interesting_region = bool(value)
        self._config.apply()

    def tms_get_enable_cpu_backup(self):
        return self._config.enable_cpu_backup

    def tms_set_enable_cpu_backup(self, value):
        self._config.enable_cpu_backup = bool(value)
        self._config.apply()

    def tms_get_cpu_backup_backend(self):
        return self._config.cpu_backup_backend.encode()

    def tms_set_cpu_backup_backend(self, value):
        value = value.decode() if isinstance(value, bytes) else value
        if value not in _state.BACKENDS:
            raise ValueError(f"sova.memory_saver: cpu_backup_backend must be one of {_state.BACKENDS}, not {value!r}")
        self._config.cpu_backup_backend = value

    def tms_get_enable_disk_backup(self):
        return False

    def tms_set_enable_disk_backup(self, value):
        if value:
            raise NotImplementedError(_DISK_REFUSAL)

    def tms_get_retain_cpu_backup(self):
        return self._impl.saver.retain_cpu_backup

    def tms_set_retain_cpu_backup(self, value):
        self._impl.saver.retain_cpu_backup = bool(value)

    def tms_pause(self, tag):
        self._impl.pause(tag.decode() if isinstance(tag, bytes) else tag)
        return 0

    def tms_resume(self, tag):
        self._impl.resume(tag.decode() if isinstance(tag, bytes) else tag)
        return 0

    def set_memory_margin_bytes(self, value):
        self._impl.memory_margin_bytes = int(value)

    def __getattr__(self, name):
        if name.startswith("cuda"):
            return self._runtime.get(name)
        raise AttributeError(f"sova.memory_saver: torch_memory_saver's library call {name} has no sova counterpart")


class _BinaryWrapper:
    def __init__(self, impl):
        self.cdll = _StateCalls(impl)


_DISK_REFUSAL = ("sova.memory_saver: enable_disk_backup is not supported: sova keeps backups in pinned host "
                 "memory; use enable_cpu_backup=True (contents kept, restored at resume)")


class _PoolStack(threading.local):
    """The drop-in's pools the thread allocates to, innermost last: (device, pool id)."""

    def __init__(self):
        self.pools = []


class _Impl:
    """The drop-in's state once initialized (torch_memory_saver's _impl)."""

    def __init__(self, hook_mode: str):
        torch = _torch()
        if "expandable_segments:True" in os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""):
            raise RuntimeError("sova.memory_saver: PYTORCH_CUDA_ALLOC_CONF has expandable_segments:True, which "
                               "torch.cuda.MemPool's segments cannot follow (as under torch_memory_saver); unset it")
        if not hasattr(torch.cuda, "MemPool"):
            raise SovaError("sova.memory_saver: this PyTorch has no torch.cuda.MemPool (PyTorch 2.5 or later needed)")
        import sova.torch
        if sova.torch._options is None:
            # Memory as torch_memory_saver uses it: a segment PyTorch frees goes
            # back to the device (its cudaFree), after sova's idle delay; host
            # memory pinned while paused only, unless backups are retained (then
            # pinned ahead, in the background).
            saver_retains = _state._env_flag("TMS_RETAIN_CPU_BACKUP")
            sova.torch.configure(release_threshold=0, sleep_pin_ahead=saver_retains)
        self._hook_mode = hook_mode
        self._is_xpu = False
        self.saver = _state.Saver()
        self.memory_margin_bytes = 0
        self._mem_pools: dict = {}
        self._pools_lock = threading.Lock()
        self._binary_wrapper = _BinaryWrapper(self)
        self._stack = _PoolStack()
        self._init_region = None
        if self.saver.config.interesting_region:
            # TMS_INIT_ENABLE=1: the initializing thread allocates in region()
            # (the default tag, TMS_INIT_ENABLE_CPU_BACKUP) from here on.
            self._init_region = contextlib.ExitStack()
            c = self.saver.config
            self._init_region.enter_context(self._pool_scope(c.tag, c.enable_cpu_backup, c.cpu_backup_backend))
            c.apply()
            # Ended at exit, before Python tears the pools down: PyTorch asserts
            # that no thread still allocates to a MemPool it destroys.
            atexit.register(self._end_init_region)

    def _end_init_region(self) -> None:
        region, self._init_region = self._init_region, None
        if region is not None:
            try:
                region.close()
            except Exception as e:  # at exit: say so, never raise
                print(f"sova.memory_saver: ending TMS_INIT_ENABLE's region at exit: {e}", file=sys.stderr)

    def _current_device(self) -> int:
        return _torch().cuda.current_device()

    def _pool(self, tag: str, cpu_backup: bool, backend: str) -> _RegionPool:
        device = self._current_device()
        key = (tag, cpu_backup, False, backend if cpu_backup else "", device)
        with self._pools_lock:
            pool = self._mem_pools.get(key)
            if pool is None:
                pool = self._mem_pools[key] = _RegionPool(self.saver, tag, cpu_backup, device)
        return pool

    @contextlib.contextmanager
    def _suspend_outer_pool(self):
        """The thread's enclosing pool (of an outer region, or TMS_INIT_ENABLE's)
        stops taking allocations for the block: PyTorch serves an allocation from
        the first pool a thread began, so a nested region, disable() or a graph
        capture would otherwise allocate from the outer pool's cached blocks,
        under the outer tag. Given back after, its count of users as before."""
        stack = self._stack.pools
        if not stack:
            yield
            return
        torch = _torch()
        device, pool_id = stack[-1]
        torch._C._cuda_endAllocateToPool(device, pool_id)
        try:
            yield
        finally:
            torch._C._cuda_beginAllocateCurrentThreadToPool(device, pool_id)
            torch._C._cuda_releasePool(device, pool_id)  # begin took a use: one is held already

    @contextlib.contextmanager
    def _use_pool(self, mem_pool):
        """torch.cuda.use_mem_pool(mem_pool), alone on the thread for the block."""
        torch = _torch()
        with self._suspend_outer_pool():
            with torch.cuda.use_mem_pool(mem_pool):
                self._stack.pools.append((torch.cuda.current_device(), mem_pool.id))
                try:
                    yield
                finally:
                    self._stack.pools.pop()

    @contextlib.contextmanager
    def _pool_scope(self, tag, cpu_backup, backend):
        self.saver.use(tag, cpu_backup)
        pool = self._pool(tag, cpu_backup, backend)
        with self._use_pool(pool.mem_pool):
            yield

    @contextlib.contextmanager
    def _with_region_config(self, tag: str, enable_cpu_backup: bool, cpu_backup_backend=None,
                            enable_disk_backup: bool = False):
        """The thread's region state set for the block, restored after."""
        if enable_disk_backup:
            raise NotImplementedError(_DISK_REFUSAL)
        config = self.saver.config
        saved = config.snapshot()
        config.tag = tag
        config.interesting_region = True
        config.enable_cpu_backup = enable_cpu_backup
        if cpu_backup_backend is not None:
            config.cpu_backup_backend = cpu_backup_backend
        config.enable_disk_backup = False
        try:
            config.apply()
            yield
        finally:
            config.restore(saved)
            config.apply()

    def _resolved_backend(self, enable_cpu_backup, cpu_backup_backend) -> str:
        return (cpu_backup_backend or self.saver.config.cpu_backup_backend) if enable_cpu_backup else ""

    @contextlib.contextmanager
    def region(self, tag, enable_cpu_backup, cpu_backup_backend):
        backend = self._resolved_backend(enable_cpu_backup, cpu_backup_backend)
        with self._pool_scope(tag, enable_cpu_backup, backend):
            with self._with_region_config(tag, enable_cpu_backup, cpu_backup_backend):
                yield

    @contextlib.contextmanager
    def cuda_graph(self, cuda_graph, pool, stream, capture_error_mode, tag, enable_cpu_backup, cpu_backup_backend):
        torch = _torch()
        self.saver.use(tag, enable_cpu_backup)
        if pool is None:
            # A pool of its own, as torch.cuda.graph gives each graph; kept by the
            # graph, so that its memory goes when the graph does.
            own = _RegionPool(self.saver, tag, enable_cpu_backup, self._current_device())
            cuda_graph._sova_memory_saver_pool = own
            pool = own.mem_pool.id
        with self._suspend_outer_pool():
            with torch.cuda.graph(cuda_graph, pool=pool, stream=stream, capture_error_mode=capture_error_mode):
                with self._with_region_config(tag, enable_cpu_backup, cpu_backup_backend):
                    yield

    @contextlib.contextmanager
    def disable(self):
        if not self.saver.config.interesting_region:
            raise RuntimeError("sova.memory_saver: disable() is for inside region() (or under TMS_INIT_ENABLE=1): "
                               "outside, allocations are not pauseable already")
        torch = _torch()
        config = self.saver.config
        saved = config.snapshot()
        config.interesting_region = False
        config.apply()
        try:
            pool = torch.cuda.MemPool()  # PyTorch's own memory, freed when the block ends
            with self._use_pool(pool):
                yield
            del pool
        finally:
            config.restore(saved)
            config.apply()

    def _sync_stream(self):
        return None  # each device's current stream (sova.torch.sleep / wake)

    def pause(self, tag):
        self.saver.pause(tag, stream=self._sync_stream())

    def resume(self, tag):
        self.saver.resume(tag, stream=self._sync_stream())

    def get_cpu_backup(self, x, zero_copy: bool):
        torch = _torch()
        if not isinstance(x, torch.Tensor) or not x.is_cuda:
            raise TypeError(f"sova.memory_saver.get_cpu_backup: a CUDA tensor, not {type(x).__name__}")
        if not x.is_contiguous():
            raise ValueError(f"sova.memory_saver.get_cpu_backup: a contiguous tensor ({tuple(x.shape)}, "
                             f"strides {x.stride()})")
        nbytes = x.nbytes
        pieces = self.saver.backup_pieces(x.data_ptr(), nbytes, x.device.index)
        if pieces is None:
            return None
        if len(pieces) == 1:
            host, _ = pieces[0]
            flat = torch.frombuffer((ctypes.c_uint8 * nbytes).from_address(host), dtype=torch.uint8)
            if not zero_copy:
                flat = flat.clone()
        else:  # split between host slabs: one tensor can only be a copy
            flat = torch.empty(nbytes, dtype=torch.uint8)
            done = 0
            for host, n in pieces:
                ctypes.memmove(flat.data_ptr() + done, host, n)
                done += n
        return flat.view(x.dtype).view(x.shape)


class TorchMemorySaver:
    """torch_memory_saver's TorchMemorySaver over sova (the module's docstring)."""

    def __init__(self):
        self._impl_ctor_kwargs = {"hook_mode": "preload"}
        self._impl = None
        self._init_lock = threading.Lock()

    @contextlib.contextmanager
    def region(self, tag: str = _state.DEFAULT_TAG, enable_cpu_backup: bool = False,
               enable_disk_backup: bool = False, cpu_backup_backend=None):
        """Allocations of the calling thread in the block can be paused under ``tag``;
        with ``enable_cpu_backup`` their contents survive pause."""
        self._check_region_args(tag, enable_cpu_backup, cpu_backup_backend)
        _state.check_bool(enable_disk_backup, "enable_disk_backup")
        if enable_disk_backup:
            raise NotImplementedError(_DISK_REFUSAL)
        self._ensure_initialized()
        with self._impl.region(tag, enable_cpu_backup, cpu_backup_backend):
            yield

    @contextlib.contextmanager
    def cuda_graph(self, cuda_graph, pool=None, stream=None, capture_error_mode="global",
                   tag: str = _state.DEFAULT_TAG, enable_cpu_backup: bool = False, cpu_backup_backend=None):
        """torch.cuda.graph whose memory (its private pool) pauses under ``tag``.
        Works in both hook modes. A ``pool`` given is used as it is (its memory
        pauses only if it came from a graph captured here)."""
        self._check_region_args(tag, enable_cpu_backup, cpu_backup_backend)
        self._ensure_initialized()
        with self._impl.cuda_graph(cuda_graph, pool, stream, capture_error_mode, tag, enable_cpu_backup,
                                   cpu_backup_backend):
            yield

    @contextlib.contextmanager
    def disable(self):
        """Inside a region: the block's allocations are PyTorch's own, not
        pauseable, and freed when it ends."""
        self._ensure_initialized()
        with self._impl.disable():
            yield

    def pause(self, tag=None):
        """Gives the memory of ``tag``'s allocations (every tag: None) back to the
        device, after the work ordered on each device's current stream; backed-up
        contents go to pinned host memory."""
        self._ensure_initialized()
        self._impl.pause(tag)

    def resume(self, tag=None):
        """Makes the memory anew at the same addresses; backed-up contents are
        back, the rest reads zero. Returns with the contents ready for any stream."""
        self._ensure_initialized()
        self._impl.resume(tag)

    @property
    def enabled(self):
        return True

    @property
    def hook_mode(self):
        raise AttributeError("sova.memory_saver: hook_mode can be set, not read (as in torch_memory_saver)")

    @hook_mode.setter
    def hook_mode(self, hook_mode):
        if hook_mode not in HOOK_MODES:
            raise ValueError(f"sova.memory_saver: hook_mode must be one of {HOOK_MODES}, not {hook_mode!r}")
        if self._impl is None:
            self._impl_ctor_kwargs["hook_mode"] = hook_mode
        # Initialized already (TMS_INIT_ENABLE=1 initializes at import): both modes are
        # one route under sova, so a later choice changes nothing.

    @property
    def memory_margin_bytes(self):
        raise NotImplementedError("Only setter is supported")

    @memory_margin_bytes.setter
    def memory_margin_bytes(self, value: int):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"sova.memory_saver: memory_margin_bytes must be an int >= 0, not {value!r}")
        self._ensure_initialized()
        self._impl.memory_margin_bytes = value

    @property
    def retain_cpu_backup(self) -> bool:
        self._ensure_initialized()
        return self._impl.saver.retain_cpu_backup

    @retain_cpu_backup.setter
    def retain_cpu_backup(self, value: bool):
        _state.check_bool(value, "retain_cpu_backup")
        self._ensure_initialized()
        self._impl.saver.retain_cpu_backup = value

    def get_cpu_backup(self, x, zero_copy: bool = False):
        """The backup of CUDA tensor ``x`` as a CPU tensor while paused (and, with
        retain_cpu_backup, after resume: what pause copied), else None.
        ``zero_copy``: a view of the backup itself, valid until the next pause
        or until the host memory is given back (a copy where the backup splits
        the tensor between host slabs)."""
        _state.check_bool(zero_copy, "zero_copy")
        self._ensure_initialized()
        return self._impl.get_cpu_backup(x, zero_copy=zero_copy)

    def set_disk_backup_dir(self, path: str):
        raise NotImplementedError(_DISK_REFUSAL)

    def _check_region_args(self, tag, enable_cpu_backup, cpu_backup_backend):
        _state.check_tag(tag)
        _state.check_bool(enable_cpu_backup, "enable_cpu_backup")
        if cpu_backup_backend is None:
            return
        if cpu_backup_backend not in _state.BACKENDS:
            raise ValueError(f"sova.memory_saver: cpu_backup_backend must be one of {_state.BACKENDS}, "
                             f"not {cpu_backup_backend!r}")
        if not enable_cpu_backup:
            raise ValueError("cpu_backup_backend requires enable_cpu_backup=True")

    def _ensure_initialized(self):
        if self._impl is not None:
            return
        with self._init_lock:
            if self._impl is None:
                self._impl = _Impl(**self._impl_ctor_kwargs)


@contextlib.contextmanager
def configure_subprocess():
    """torch_memory_saver's: sets LD_PRELOAD for child processes in preload mode.
    Under sova nothing is preloaded (both modes run in the process), so this
    changes nothing; children import the drop-in as the parent did."""
    yield


# The singleton, as torch_memory_saver's.
torch_memory_saver = TorchMemorySaver()

if _state._env_flag("TMS_INIT_ENABLE"):
    # torch_memory_saver's preload library puts every allocation in region()
    # from the process's start; here, the importing thread's from the import on.
    torch_memory_saver._ensure_initialized()


def shim_path() -> str:
    """The directory whose ``torch_memory_saver`` package is this module
    (PYTHONPATH's one-variable route)."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "_memory_saver_shim")


if __name__ == "__main__":
    print(shim_path())
