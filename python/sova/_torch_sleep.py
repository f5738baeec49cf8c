"""sova.torch's sleep and wake by tag (docs/sleep-wake.md).

    with sova.torch.tag("weights"):
        model = build_model().cuda()        # these tensors live in the "weights" pool
    with sova.torch.tag("kv_cache"):
        cache = torch.empty(...)            # and these in the "kv_cache" pool
    sova.torch.sleep(backup=["weights"])    # weights to host, KV cache dropped
    ...                                     # the memory is the device's meanwhile
    sova.torch.wake()                       # same addresses, contents back; CUDA graphs stay valid

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
from .pool import _SLEEP_BACKUP, _SLEEP_DISCARD, _SLEEP_DISCARD_ZEROED

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


def _names(value, what: str) -> list:
    """A tag name or a list/tuple/set of them, as a list; else TypeError."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, (list, tuple, set, frozenset)) and all(isinstance(n, str) for n in value):
        return list(value)
    raise TypeError(f"sova.torch.{what} must be a tag name (str) or a list, tuple or set of them, "
                    f"not {value!r} ({type(value).__name__}); nothing was done")


def _selected(names, what: str) -> list:
    if names is None:
        return tags()
    names = _names(names, what)
    with _tag_lock:
        unknown = [n for n in names if n not in _tag_ids]
        if unknown:
            raise ValueError(f"sova.torch: unknown tags {unknown}; tags used so far: {list(_tag_ids)}")
        return list(dict.fromkeys(names))


def _pools(selected):
    """(name, device, pool handle) of every pool the tags have."""
    lib = _capi.torch_lib()
    for name in selected:
        tag_id = _tag_ids[name]
        for device in range(_MAX_TAGS):
            pool = lib.sova_torch_tag_pool(tag_id, device)
            if pool:
                yield name, device, pool


def _stream_arg(stream, what: str):
    """None, or the cudaStream_t value of ``stream``: an int, or a stream object
    with ``cuda_stream`` (torch.cuda.Stream) or ``ptr`` (cupy)."""
    if stream is None:
        return None
    for attr in ("cuda_stream", "ptr"):
        if not isinstance(stream, int) and hasattr(stream, attr):
            stream = getattr(stream, attr)
            break
    return _capi.address_arg(stream, f"sova.torch.{what}: stream")


def _current_stream(device: int) -> int:
    import sys
    torch = sys.modules.get("torch")
    if torch is None:  # PyTorch not loaded: no CUDA work of its own to order after
        import torch
    if not torch.cuda.is_initialized():
        return 0
    return torch.cuda.current_stream(device).cuda_stream


def _give_back_pinned(lib, pool, name: str, device: int) -> None:
    """A tag slept without backup needs no host memory: what pin-ahead pinned
    for it goes back, and pin-ahead holds until the pool reserves more than it ever had
    (docs/sleep-wake.md, "Pinning ahead"). Asleep already: nothing to do."""
    asleep = ctypes.c_int(0)
    _capi.check(lib.sovaMemPoolIsAsleep(ctypes.c_void_p(pool), ctypes.byref(asleep)),
                f"asking whether tag {name!r} of device {device} is asleep")
    if not asleep.value:
        _capi.check(lib.sovaMemPoolReleaseSleepHostMemory(ctypes.c_void_p(pool)),
                    f"giving back the host memory of tag {name!r} of device {device}")


def _zeroed(zero, selected, backed) -> set:
    """The tags whose dropped contents wake zeroes: every selected tag not
    backed up for zero=True, none for False; zero=True with nothing dropped
    is a contradiction (ValueError)."""
    if not isinstance(zero, bool):
        raise TypeError(f"sova.torch.sleep: zero must be True (the tags not backed up read zero after "
                        f"wake) or False (undefined), not {zero!r} ({type(zero).__name__}); nothing was done")
    zeroed = set(selected) - backed if zero else set()
    if zero and selected and not zeroed:
        raise ValueError("sova.torch.sleep: zero=True, but every tag put to sleep is backed up "
                         "(a backup is restored, not zeroed); nothing was done")
    return zeroed


def _mode(name: str, backed: set, zeroed: set) -> int:
    if name in backed:
        return _SLEEP_BACKUP
    return _SLEEP_DISCARD_ZEROED if name in zeroed else _SLEEP_DISCARD


def sleep(tags=None, backup=True, stream=None, zero=False) -> None:
    """Puts the tags' pools (all tags used so far: None; a name; or a list of
    names) to sleep. Blocks until their memory is the device's.

    ``backup``: True, the default (every selected tag's contents copied to
    pinned host memory, restored by wake: discarding must be asked for),
    False (all dropped: undefined after wake), or a tag name or list of the
    tags to back up (the rest dropped; each must be among those put to
    sleep). Anything else (None, 0, 1, ...) is a TypeError: a stand-in's
    truth value would decide silently whether data is lost.
    ``zero``: False, the default, or True: the tags not backed up read zero
    after wake (one device memset of their live bytes on wake; for code that
    assumes zeroed memory). True where every tag is backed up: ValueError.
    ``stream``: None (each pool sleeps after the work ordered before on the
    current stream of its device) or a stream (an int, torch.cuda.Stream):
    after the work ordered before on it, and after nothing else.

    Every argument is checked before any pool sleeps; a refused one changes
    nothing. Asleep already: nothing happens. While asleep, allocating under
    the tag raises. A tag slept without backup first gives back the pinned
    host memory it held for backups (what pin-ahead pinned)."""
    selected = _selected(tags, "sleep: tags")
    if isinstance(backup, bool):
        backed = set(selected) if backup else set()
    elif isinstance(backup, (str, list, tuple, set, frozenset)):
        backed = set(_names(backup, "sleep: backup"))
        extra = backed - set(selected)
        if extra:
            raise ValueError(f"sova.torch.sleep: backup names tags not put to sleep: {sorted(extra)}; "
                             f"nothing was done")
    else:
        raise TypeError(f"sova.torch.sleep: backup must be True, False, or the tags to back up "
                        f"(a str or a list of them), not {backup!r} ({type(backup).__name__}); "
                        f"nothing was done")
    zeroed = _zeroed(zero, selected, backed)
    given = _stream_arg(stream, "sleep")
    lib = _capi.lib()
    for name, device, pool in _pools(selected):
        mode = _mode(name, backed, zeroed)
        if mode != _SLEEP_BACKUP:
            _give_back_pinned(lib, pool, name, device)
        s = given if given is not None else _current_stream(device)
        _capi.check(lib.sovaMemPoolSleep(ctypes.c_void_p(pool), mode, ctypes.c_void_p(s)),
                    f"putting tag {name!r} of device {device} to sleep")


def wake(tags=None, stream=None) -> None:
    """Wakes the tags' pools (all: None; a name; or a list of names): memory
    made anew at the same addresses, backups restored (tags slept with
    zero=True: zeroed).

    ``stream`` None (the default): the restore is ordered before later work on
    the current stream of each device, and wake returns once it is done:
    the contents are then what any stream, or the host (``.cpu()``), reads.
    ``stream`` given (an int or torch.cuda.Stream): ordered before later work
    on that stream, and wake returns at once (other streams must wait for it).
    Awake already: nothing happens. Arguments checked first: a refused one
    changes nothing."""
    selected = _selected(tags, "wake: tags")
    given = _stream_arg(stream, "wake")
    lib = _capi.lib()
    for name, device, pool in _pools(selected):
        if given is None:
            err = lib.sovaMemPoolWakeSynchronize(ctypes.c_void_p(pool), ctypes.c_void_p(_current_stream(device)))
        else:
            err = lib.sovaMemPoolWake(ctypes.c_void_p(pool), ctypes.c_void_p(given))
        _capi.check(err, f"waking tag {name!r} of device {device}")


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
