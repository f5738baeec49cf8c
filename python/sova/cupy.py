"""CuPy on sova: device memory from sova's pool, on CuPy's current stream.

    import sova.cupy
    sova.cupy.install()              # every CuPy allocation from now on
    with sova.cupy.using():          # or only inside a block (this thread)
        x = cupy.arange(10**6)

Contracts (docs/adapters.md has the reasons and the measured cost):

- A block is allocated on CuPy's current stream (``cupy.cuda.get_current_stream()``)
  from the current device's current sova pool (``sovaMallocAsync``), and
  freed in stream order (``sovaFreeAsync``) when CuPy drops its last reference,
  on the stream it was allocated on — or, if that stream object is gone, on
  the current stream. This is what CuPy's own ``MemoryAsyncPool`` does
  (``cupy.cuda.memory.MemoryAsync``), so code written for it needs no change:
  memory used on another stream than its allocation stream must be ordered
  by the user (an event or a synchronize) before it is freed, as there.
- Running out of memory raises ``cupy.cuda.memory.OutOfMemoryError`` (a
  MemoryError) and changes nothing; sova itself first releases what it can
  and synchronizes the device before failing, so there is no cache to free.
- A free sova refuses (not a sova block: only possible if the pointer was
  tampered with) is reported by Python as an exception ignored in ``__del__``;
  the pool is unchanged.
- Size 0 gives a null pointer and no sova call, as CuPy's pools do.
- Graph capture (``cupy.cuda.Stream.begin_capture``): arrays made on a
  capturing stream are graph memory (docs/graphs.md), freed inside the graph
  or left as its output. An array made before a capture and dropped during
  it on its stream is a free sova refuses under capture: it is kept and
  freed on that stream at the first allocation or free outside the capture,
  as PyTorch's allocator defers such frees (the stream must still exist).
"""

import contextlib
import threading
import weakref

import cupy
from cupy.cuda import memory as _memory

from . import _alloc, _capi

__all__ = ["malloc", "install", "using"]


_CAPTURE_UNSUPPORTED = 900  # cudaErrorStreamCaptureUnsupported

_deferred_lock = threading.Lock()
_deferred = []  # (ptr, stream) freed during a capture, under _deferred_lock


def _free_or_defer(ptr, stream):
    """Frees ``ptr`` on ``stream``; keeps it for later where sova refuses the
    free because the stream captures (a block made before the capture)."""
    try:
        _alloc.free(ptr, stream)
    except _capi.SovaError as error:
        if error.code != _CAPTURE_UNSUPPORTED:
            raise
        with _deferred_lock:
            _deferred.append((ptr, stream))


def _free_deferred():
    """Makes the frees deferred so far whose captures are over."""
    if not _deferred:
        return
    with _deferred_lock:
        pending = list(_deferred)
        _deferred.clear()
    for ptr, stream in pending:
        _free_or_defer(ptr, stream)


class _Block:
    """Owns one sova block; frees it in stream order when CuPy lets it go."""

    __slots__ = ("ptr", "stream")

    def __init__(self, ptr, stream):
        self.ptr = ptr
        # A weak reference, as CuPy's MemoryAsync: a stream may be destroyed
        # before memory allocated on it is freed.
        self.stream = weakref.ref(stream)

    def __del__(self):
        stream = self.stream()
        if stream is None:
            stream = cupy.cuda.get_current_stream()
        _free_deferred()
        _free_or_defer(self.ptr, stream.ptr)


def malloc(size):
    """CuPy's allocator hook: a MemoryPointer to `size` bytes of sova memory
    for work on the current stream."""
    device = cupy.cuda.runtime.getDevice()
    if size == 0:
        return _memory.MemoryPointer(_memory.UnownedMemory(0, 0, None, device), 0)
    stream = cupy.cuda.get_current_stream()
    _free_deferred()
    try:
        ptr = _alloc.malloc(size, stream.ptr)
    except _alloc.SovaOutOfMemory:
        raise _memory.OutOfMemoryError(size, -1) from None
    return _memory.MemoryPointer(_memory.UnownedMemory(ptr, size, _Block(ptr, stream), device), 0)


def install():
    """Makes sova CuPy's allocator (``cupy.cuda.set_allocator``) for the
    process; returns the allocator it replaces, for ``cupy.cuda.set_allocator``
    to put back (existing arrays keep the memory they have)."""
    previous = cupy.cuda.get_allocator()
    cupy.cuda.set_allocator(malloc)
    return previous


@contextlib.contextmanager
def using():
    """sova as CuPy's allocator inside a ``with`` block, on this thread only
    (``cupy.cuda.using_allocator``)."""
    with cupy.cuda.using_allocator(malloc):
        yield
