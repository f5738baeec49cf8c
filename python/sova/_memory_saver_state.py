"""The part of sova's torch_memory_saver drop-in (sova.memory_saver) that needs
no PyTorch: which sova.torch tags a torch_memory_saver tag stands for, pause
and resume on them, the host memory kept or given back, the backups read, and
the per-thread region state that torch_memory_saver keeps in its C library.

A torch_memory_saver tag is two sova.torch tags (a pool each per device):
``torch_memory_saver:<tag>+cpu_backup`` for its regions with
enable_cpu_backup=True, ``torch_memory_saver:<tag>`` for the others; sova
decides backup or not per pool at sleep, torch_memory_saver per allocation.
pause(tag) sleeps both: the first backed up, the second discarded and zeroed
on wake (torch_memory_saver leaves discarded memory undefined; zero is one
value of undefined, and no old contents are read back). resume(tag) wakes
both; unless retain_cpu_backup, the backed-up pools then give their pinned
host memory back (torch_memory_saver frees its host shadows at resume).
"""
from __future__ import annotations

import ctypes
import os
import threading

from . import _capi
from . import _torch_sleep
from ._capi import SovaError

PREFIX = "torch_memory_saver:"
DEFAULT_TAG = "default"
BACKENDS = ("pinned", "mmap")
_MAX_DEVICES = 64  # sova.torch's kMaxDevices: tag pools are looked up per device


def _env_flag(name: str) -> bool:
    value = os.environ.get(name, "")
    if value not in ("", "0", "1"):
        raise ValueError(f"sova.memory_saver: {name} must be 0 or 1, not {value!r}")
    return value == "1"


def env_backend() -> str:
    """TMS_INIT_CPU_BACKUP_BACKEND (default "pinned"), checked."""
    value = os.environ.get("TMS_INIT_CPU_BACKUP_BACKEND", "") or "pinned"
    if value not in BACKENDS:
        raise ValueError(f"sova.memory_saver: TMS_INIT_CPU_BACKUP_BACKEND must be one of {BACKENDS}, not {value!r}")
    return value


def check_tag(tag, what: str = "tag") -> str:
    if not isinstance(tag, str) or not tag:
        raise TypeError(f"sova.memory_saver: {what} must be a non-empty str, not {tag!r}")
    return tag


def check_bool(value, what: str) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"sova.memory_saver: {what} must be True or False, not {value!r} ({type(value).__name__})")
    return value


def sova_tag(tag: str, cpu_backup: bool) -> str:
    """The sova.torch tag behind torch_memory_saver's (tag, enable_cpu_backup)."""
    return PREFIX + tag + ("+cpu_backup" if cpu_backup else "")


class RegionConfig(threading.local):
    """torch_memory_saver's per-thread region state (its tms_get_* / tms_set_*):
    where the thread's allocations go. Its start follows TMS_INIT_ENABLE,
    TMS_INIT_ENABLE_CPU_BACKUP and TMS_INIT_CPU_BACKUP_BACKEND, as
    torch_memory_saver's. apply() routes the thread's sova.torch allocations to
    the tag the state names (none outside a region)."""

    def __init__(self):
        self.tag = DEFAULT_TAG
        self.interesting_region = _env_flag("TMS_INIT_ENABLE")
        self.enable_cpu_backup = _env_flag("TMS_INIT_ENABLE_CPU_BACKUP")
        self.cpu_backup_backend = env_backend()
        self.enable_disk_backup = False

    def snapshot(self) -> tuple:
        return (self.tag, self.interesting_region, self.enable_cpu_backup, self.cpu_backup_backend,
                self.enable_disk_backup)

    def restore(self, saved: tuple) -> None:
        (self.tag, self.interesting_region, self.enable_cpu_backup, self.cpu_backup_backend,
         self.enable_disk_backup) = saved

    def sova_tag_id(self) -> int:
        if not self.interesting_region:
            return 0
        return _torch_sleep._tag_id(sova_tag(self.tag, self.enable_cpu_backup))

    def apply(self) -> None:
        if _capi.torch_lib().sova_torch_set_tag(self.sova_tag_id()) < 0:
            raise SovaError("sova.memory_saver: sova_torch_set_tag refused the tag")


class Saver:
    """The tags used, pause / resume and the host memory policy. Thread-safe."""

    def __init__(self):
        self._lock = threading.Lock()
        self._tags: dict = {}  # torch_memory_saver tag -> {cpu_backup flags used}
        self.retain_cpu_backup = _env_flag("TMS_RETAIN_CPU_BACKUP")
        self.config = RegionConfig()

    def use(self, tag: str, cpu_backup: bool) -> str:
        """Notes that (tag, cpu_backup) allocates; returns its sova.torch tag
        (made now, so that a refusal, 64 tags in all, comes before any allocation)."""
        name = sova_tag(check_tag(tag), cpu_backup)
        _torch_sleep._tag_id(name)
        with self._lock:
            self._tags.setdefault(tag, set()).add(cpu_backup)
        return name

    def tags(self) -> list:
        with self._lock:
            return list(self._tags)

    def _selected(self, tag) -> tuple:
        """(every sova tag, the backed-up ones) that ``tag`` (None: all) names;
        a tag never used names none, as in torch_memory_saver."""
        if tag is not None:
            check_tag(tag)
        with self._lock:
            chosen = self._tags.items() if tag is None else [(tag, self._tags.get(tag, set()))]
            names = [sova_tag(t, b) for t, flags in chosen for b in sorted(flags)]
            backed = [sova_tag(t, True) for t, flags in chosen if True in flags]
        return names, backed

    def pause(self, tag=None, stream=None) -> None:
        """Sleeps the tag's pools (all tags: None) after the work ordered
        before on ``stream`` (None: each device's current stream); returns
        once their memory is the device's. Paused already: nothing."""
        names, backed = self._selected(tag)
        if not names:
            return
        dropped = len(backed) < len(names)
        _torch_sleep.sleep(names, backup=backed if backed else False, zero=dropped, stream=stream)

    def resume(self, tag=None, stream=None) -> None:
        """Wakes the tag's pools (all: None) and returns once the contents are
        back, for any stream or the host to read: the restore ordered before
        later work on ``stream`` (None: each device's current stream), then
        waited for, as torch_memory_saver's resume returns. Without
        retain_cpu_backup the backed-up pools then give their host memory back."""
        names, backed = self._selected(tag)
        if not names:
            return
        lib = _capi.lib()
        for name in names:
            for device, pool in tag_pools(name):
                s = stream if stream is not None else _torch_sleep._current_stream(device)
                _capi.check(lib.sovaMemPoolWakeSynchronize(ctypes.c_void_p(pool), ctypes.c_void_p(s)),
                            f"waking {name!r} on device {device}")
        if not self.retain_cpu_backup:
            for name in backed:
                for device, pool in tag_pools(name):
                    _capi.check(_capi.lib().sovaMemPoolReleaseSleepHostMemory(ctypes.c_void_p(pool)),
                                f"giving back the host memory of {name!r} on device {device}")

    def backup_pieces(self, ptr: int, nbytes: int, device: int):
        """[(host address, bytes), ...] covering the last backup of
        [ptr, ptr + nbytes) on ``device``, adjacent host pieces merged; None
        where no backed-up pool holds all of it."""
        with self._lock:
            names = [sova_tag(t, True) for t, flags in self._tags.items() if True in flags]
        lib = _capi.lib()
        for name in names:
            pool = _capi.torch_lib().sova_torch_tag_pool(_torch_sleep._tag_id(name), device)
            if not pool:
                continue
            pieces, done = [], 0
            while done < nbytes:
                host, there = ctypes.c_void_p(), ctypes.c_size_t()
                _capi.check(lib.sovaMemPoolGetSleepBackup(ctypes.c_void_p(pool), ctypes.c_void_p(ptr + done),
                                                          nbytes - done, ctypes.byref(host), ctypes.byref(there)),
                            "reading a backup")
                if not host.value:
                    break
                if pieces and pieces[-1][0] + pieces[-1][1] == host.value:
                    pieces[-1] = (pieces[-1][0], pieces[-1][1] + there.value)
                else:
                    pieces.append((host.value, there.value))
                done += there.value
            if done == nbytes and nbytes > 0:
                return pieces
        return None

    def give_back_if_empty(self, tag: str, cpu_backup: bool, device: int) -> None:
        """Once no region's pool of (tag, cpu_backup) is left on ``device`` and
        its sova pool holds no live block: the pool awake (an empty wake),
        its free memory and its backup's host memory given back, as
        torch_memory_saver frees an allocation's host shadow with it."""
        name = sova_tag(tag, cpu_backup)
        pool = _capi.torch_lib().sova_torch_tag_pool(_torch_sleep._tag_id(name), device)
        if not pool:
            return
        lib, handle = _capi.lib(), ctypes.c_void_p(pool)
        stats = _capi.PoolStats.new()
        _capi.check(lib.sovaMemPoolGetStats(handle, ctypes.byref(stats)), "reading statistics")
        if stats.liveBlocks:
            return
        _capi.check(lib.sovaMemPoolWakeSynchronize(handle, ctypes.c_void_p(0)), f"waking {name!r}")
        _capi.check(lib.sovaMemPoolTrimTo(handle, 0), f"trimming {name!r}")
        _capi.check(lib.sovaMemPoolReleaseSleepHostMemory(handle), f"giving back the host memory of {name!r}")


def tag_pools(name: str):
    """(device, pool handle) of every pool sova.torch tag ``name`` has."""
    tl = _capi.torch_lib()
    tag_id = _torch_sleep._tag_id(name)
    for device in range(_MAX_DEVICES):
        pool = tl.sova_torch_tag_pool(tag_id, device)
        if pool:
            yield device, pool
