"""RAPIDS RMM on sova, from Python: sova as RMM's current device resource.

    import sova.rmm
    sova.rmm.install()          # rmm.DeviceBuffer, cuDF, ... now allocate from sova
    buf = rmm.DeviceBuffer(size=1 << 20)

Contracts (docs/adapters.md has the reasons and the measured cost):

- ``resource()`` is an ``rmm.mr.CallbackMemoryResource`` whose callbacks call
  sova's C API: ``sovaMallocAsync`` / ``sovaFreeAsync`` on the stream RMM
  passes, from the current device's current sova pool. It is a
  DeviceMemoryResource like any other: RMM's adaptors (statistics, logging,
  limiting) take it as upstream.
- ``install(device=None)`` makes it the current device's resource (or
  `device`'s), through ``rmm.mr.set_per_device_resource``, and returns the
  resource it replaced, to put back with ``rmm.mr.set_current_device_resource``
  (or ``set_per_device_resource``). RMM keeps the
  resource alive while it is installed.
- Cost: RMM calls back into Python (with the GIL) for every allocation and
  free, also for those made by C++ code underneath (libcudf); a C++ program
  should use ``sova::RmmResource`` (include/sova/rmm.hpp), which has no such
  cost. RMM offers no other way to plug a resource in from Python.
- Running out of memory raises MemoryError inside the callback, which RMM
  turns into rmm::out_of_memory (MemoryError again in Python, what cuDF's
  spilling catches); nothing changes. A free sova refuses raises an error
  that RMM reports; the pool is unchanged.
- Alignment: RMM's Python callbacks are not given one; sova's blocks are
  512-byte aligned, more than RMM's 256.
"""

import rmm

from . import _alloc

__all__ = ["resource", "install"]


def _stream_handle(stream):
    # rmm.pylibrmm.stream.Stream speaks the CUDA stream protocol.
    return stream.__cuda_stream__()[1]


def _allocate(size, stream):
    return _alloc.malloc(size, _stream_handle(stream))


def _deallocate(ptr, size, stream):
    if ptr:
        _alloc.free(ptr, _stream_handle(stream))


def resource():
    """A new RMM memory resource that allocates from sova (the current
    device's current sova pool, in stream order)."""
    return rmm.mr.CallbackMemoryResource(_allocate, _deallocate)


def install(device=None):
    """Makes ``resource()`` RMM's resource for `device` (default: the current
    device). Returns the resource it replaces."""
    if device is None:
        previous = rmm.mr.get_current_device_resource()
        rmm.mr.set_current_device_resource(resource())
    else:
        previous = rmm.mr.get_per_device_resource(device)
        rmm.mr.set_per_device_resource(device, resource())
    return previous
