"""sova.torch's sleep and wake by tag (docs/sleep-wake.md).

    with sova.torch.tag("weights"):
        model = build_model().cuda()        # these tensors live in the "weights" pool
    with sova.torch.tag("kv_cache"):
        cache = torch.empty(...)            # and these in the "kv_cache" pool
    sova.torch.sleep(backup=["weights"])    # weights to host, KV cache dropped
    ...                                     # the memory is the device's meanwhile
    sova.torch.wake()                       # same addresses; CUDA graphs stay valid

A tag is a pool of its own on each device (created on first use, with the
options of sova.torch.configure); untagged allocations stay in the device's
pool and never sleep. The tag is the calling thread's: allocations PyTorch
makes on other threads (autograd's backward threads) are untagged. Frees need
no tag. Sleep and wake are idempotent per tag.
"""
from __future__ import annotations

import contextlib
import ctypes
import threading

from . import _capi

_MAX_TAGS = 64
_tag_lock = threading.Lock()
_tag_ids: dict = {}  # name -> 1 .. _MAX_TAGS - 1, in order of first use


def _tag_id(name: str) -> int:
    if not isinstance(name, str) or not name:
        raise ValueError(f"sova.torch.tag: a tag is a non-empty str, not {name!r}")
    with _tag_lock:
        tag = _tag_ids.get(name)
        if tag is None:
            if len(_tag_ids) >= _MAX_TAGS - 1:
                raise ValueError(f"sova.torch.tag: at most {_MAX_TAGS - 1} tags per process")
            tag = _tag_ids[name] = len(_tag_ids) + 1
        return tag


@contextlib.contextmanager
def tag(name: str):
    """Allocations of the calling thread inside the block come from tag ``name``'s pool."""
    lib = _capi.torch_lib()
    previous = lib.sova_torch_set_tag(_tag_id(name))
    try:
        yield
    finally:
        lib.sova_torch_set_tag(previous)


def tags() -> list:
    """The tags used so far, in order of first use."""
    with _tag_lock:
        return list(_tag_ids)


def _selected(names) -> list:
    if names is None:
        return tags()
    if isinstance(names, str):
        names = [names]
    with _tag_lock:
        unknown = [n for n in names if n not in _tag_ids]
        if unknown:
            raise ValueError(f"sova.torch: unknown tags {unknown}; tags used so far: {list(_tag_ids)}")
        return list(names)


def _pools(names):
    """(name, device, pool handle) of every pool the tags have."""
    lib = _capi.torch_lib()
    for name in _selected(names):
        tag_id = _tag_ids[name]
        for device in range(_MAX_TAGS):
            pool = lib.sova_torch_tag_pool(tag_id, device)
            if pool:
                yield name, device, pool


def _stream_of(device: int, stream) -> int:
    if stream is not None:
        return int(stream)
    import torch  # the current stream of the pool's device
    if not torch.cuda.is_initialized():
        return 0
    return torch.cuda.current_stream(device).cuda_stream


def sleep(tags=None, backup=True, stream=None) -> None:
    """Puts the tags' pools (all tags used so far: None) to sleep, each after the
    work ordered before on the current stream of its device (or ``stream``, an
    int). ``backup``: True (every tag's contents copied to pinned host memory),
    False (all dropped), or the tags to back up (the rest dropped). Asleep
    already: nothing happens. While asleep, allocating under the tag raises."""
    selected = _selected(tags)
    if isinstance(backup, bool):
        backed = set(selected) if backup else set()
    else:
        backed = set([backup] if isinstance(backup, str) else backup)
        extra = backed - set(selected)
        if extra:
            raise ValueError(f"sova.torch.sleep: backup names tags not put to sleep: {sorted(extra)}")
    lib = _capi.lib()
    for name, device, pool in _pools(selected):
        mode = 0 if name in backed else 1
        _capi.check(lib.sovaMemPoolSleep(ctypes.c_void_p(pool), mode, ctypes.c_void_p(_stream_of(device, stream))),
                    f"putting tag {name!r} of device {device} to sleep")


def wake(tags=None, stream=None) -> None:
    """Wakes the tags' pools (all: None): memory made anew at the same addresses,
    backups restored before later work on the current stream of each device (or
    ``stream``). Awake already: nothing happens."""
    lib = _capi.lib()
    for name, device, pool in _pools(_selected(tags)):
        _capi.check(lib.sovaMemPoolWake(ctypes.c_void_p(pool), ctypes.c_void_p(_stream_of(device, stream))),
                    f"waking tag {name!r} of device {device}")


def tag_stats(name: str, device: int = 0) -> dict:
    """sovaMemPoolGetStats of tag ``name``'s pool on ``device`` (asleepBytes,
    sleepHostBytes, reservedCurrent, ...); {} when the tag has no pool there."""
    tag_id = _tag_id(name)
    pool = _capi.torch_lib().sova_torch_tag_pool(tag_id, device)
    if not pool:
        return {}
    s = _capi.PoolStats.new()
    _capi.check(_capi.lib().sovaMemPoolGetStats(ctypes.c_void_p(pool), ctypes.byref(s)), "reading statistics")
    return s.as_dict()
