"""sova.rmm with RAPIDS RMM's Python package on a GPU (suite 'gpu'; needs
rmm-cu13, CuPy, and libsova.so via $SOVA_LIBRARY). A missing package fails."""

import numpy
import pytest

import cupy
import rmm
import rmm.mr
from rmm.pylibrmm.stream import Stream

import sova.rmm
from sova import _alloc

MiB = 1 << 20


@pytest.fixture(autouse=True)
def sova_resource():
    previous = sova.rmm.install()
    yield
    cupy.cuda.Device().synchronize()
    rmm.mr.set_current_device_resource(previous)


def used():
    cupy.cuda.Device().synchronize()
    return _alloc.pool_bytes("used", cupy.cuda.runtime.getDevice())


def test_device_buffers_come_from_sova_and_go_back():
    assert isinstance(rmm.mr.get_current_device_resource(), rmm.mr.CallbackMemoryResource)
    before = used()
    buffer = rmm.DeviceBuffer(size=5 * MiB)
    assert used() == before + 5 * MiB
    host = numpy.arange(1000, dtype=numpy.int64)
    copy = rmm.DeviceBuffer.to_device(host.tobytes())
    back = numpy.frombuffer(copy.copy_to_host(), dtype=numpy.int64)
    numpy.testing.assert_array_equal(back, host)
    del buffer, copy
    assert used() == before


def test_device_buffers_on_several_streams():
    before = used()
    cupy_streams = [cupy.cuda.Stream(non_blocking=True) for _ in range(4)]  # kept alive here
    streams = [Stream(s) for s in cupy_streams]
    buffers = []
    for round_ in range(50):
        for k, stream in enumerate(streams):
            data = numpy.full(1000 + round_ * 16 + k, k + round_, dtype=numpy.int32)
            buffers.append((rmm.DeviceBuffer.to_device(data.tobytes(), stream=stream), data))
        if len(buffers) > 40:
            del buffers[:20]  # freed in stream order on their streams
    for stream in streams:
        stream.synchronize()
    for buffer, data in buffers:
        numpy.testing.assert_array_equal(numpy.frombuffer(buffer.copy_to_host(), dtype=numpy.int32), data)
    # The loop's variables hold the last buffer: drop them with the list, while
    # its stream is alive (freeing on a destroyed stream is undefined, as with
    # RMM's own stream-ordered resources).
    del buffers, buffer, data
    assert used() == before


def test_rmm_adaptors_take_the_resource():
    stats = rmm.mr.StatisticsResourceAdaptor(sova.rmm.resource())
    rmm.mr.set_current_device_resource(stats)
    before = used()
    buffer = rmm.DeviceBuffer(size=12345)
    assert stats.allocation_counts.current_bytes == 12345
    assert used() == before + 12345
    del buffer
    assert stats.allocation_counts.current_bytes == 0


def test_cupy_through_rmm_through_sova():
    from rmm.allocators.cupy import rmm_cupy_allocator
    previous = cupy.cuda.get_allocator()
    cupy.cuda.set_allocator(rmm_cupy_allocator)
    try:
        before = used()
        x = cupy.arange(MiB, dtype=cupy.float32)
        assert used() >= before + 4 * MiB
        assert float(x.sum()) == pytest.approx(MiB * (MiB - 1) / 2, rel=1e-6)
        del x
        assert used() == before
    finally:
        cupy.cuda.set_allocator(previous)


def test_out_of_memory_is_a_memory_error_and_changes_nothing():
    before = used()
    free, total = cupy.cuda.runtime.memGetInfo()
    with pytest.raises(MemoryError):
        rmm.DeviceBuffer(size=2 * total)
    assert used() == before
