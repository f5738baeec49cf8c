"""sova.cupy with CuPy on a GPU (suite 'gpu'; needs CuPy and libsova.so via
$SOVA_LIBRARY). Results are checked against NumPy, and blocks freed on one
stream while its work still runs are checked not to be handed to another
stream early (a slow kernel reads the block after it was freed)."""

import numpy
import pytest

import cupy  # required: a missing CuPy fails, never skips

import sova.cupy
from sova import _alloc

MiB = 1 << 20


@pytest.fixture(autouse=True)
def sova_allocator():
    previous = sova.cupy.install()
    yield
    cupy.cuda.Device().synchronize()
    cupy.cuda.set_allocator(previous)


def used():
    cupy.cuda.Device().synchronize()
    return _alloc.pool_bytes("used", cupy.cuda.runtime.getDevice())


def test_arrays_come_from_sova_and_go_back():
    before = used()
    x = cupy.empty(3 * MiB, dtype=cupy.uint8)
    assert isinstance(x.data.mem, cupy.cuda.memory.UnownedMemory)
    assert isinstance(x.data.mem._owner, sova.cupy._Block)
    assert used() == before + 3 * MiB
    del x
    assert used() == before


def test_zero_sized_arrays():
    before = used()
    x = cupy.empty(0, dtype=cupy.float32)
    assert x.data.ptr == 0
    assert (x + 1).size == 0
    assert used() == before


def test_reductions_and_ffts_on_several_streams():
    rng = numpy.random.default_rng(1)
    streams = [cupy.cuda.Stream(non_blocking=True) for _ in range(4)]
    expected, results = [], []
    for round_ in range(30):
        for k, stream in enumerate(streams):
            host = rng.standard_normal(4096 + 512 * k + round_).astype(numpy.float64)
            with stream:
                x = cupy.asarray(host)
                tmp = x * 2.0 + 1.0  # temporaries churn the allocator
                results.append((cupy.sum(tmp), cupy.linalg.norm(x), cupy.fft.fft(x)[:8]))
                del x, tmp
            expected.append((numpy.sum(host * 2.0 + 1.0), numpy.linalg.norm(host), numpy.fft.fft(host)[:8]))
    for stream in streams:
        stream.synchronize()
    for (s, n, f), (es, en, ef) in zip(results, expected):
        assert float(s) == pytest.approx(es, rel=1e-9)
        assert float(n) == pytest.approx(en, rel=1e-9)
        numpy.testing.assert_allclose(cupy.asnumpy(f), ef, rtol=1e-9, atol=1e-9)


_slow_sum = cupy.RawKernel(r"""
extern "C" __global__ void slow_sum(const float* x, int n, float* out, unsigned long long wait_ns) {
  unsigned long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do { __nanosleep(1000); asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now)); } while (now - start < wait_ns);
  float s = 0;
  for (int i = 0; i < n; ++i) s += x[i];
  *out = s;
}
""", "slow_sum")


def test_a_block_freed_while_its_stream_works_is_not_handed_to_another_stream():
    a = cupy.cuda.Stream(non_blocking=True)
    b = cupy.cuda.Stream(non_blocking=True)
    n = 1 << 16
    for _ in range(5):
        with a:
            x = cupy.ones(n, dtype=cupy.float32)
            out = cupy.zeros(1, dtype=cupy.float32)
            _slow_sum((1,), (1,), (x, numpy.int32(n), out, numpy.uint64(50_000_000)))  # 50 ms
            del x  # freed on a, in stream order: a still reads it
        with b:
            y = cupy.full(n, 7.0, dtype=cupy.float32)  # same size: the freed block if it were free
            y += 1
        a.synchronize()
        assert float(out.get()[0]) == float(n)
        b.synchronize()
        assert float(y[0].get()) == 8.0


def test_memory_freed_after_its_stream_is_gone():
    before = used()
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        x = cupy.arange(MiB, dtype=cupy.int32)
    stream.synchronize()
    del stream  # the weak reference dies; the free goes to the current stream
    assert int(x[-1].get()) == MiB - 1
    del x
    assert used() == before


def test_out_of_memory_raises_cupys_error_and_changes_nothing():
    before = used()
    free, total = cupy.cuda.runtime.memGetInfo()
    with pytest.raises(cupy.cuda.memory.OutOfMemoryError):
        cupy.empty(2 * total, dtype=cupy.uint8)
    assert used() == before
    x = cupy.empty(MiB, dtype=cupy.uint8)  # still works
    del x


def test_using_is_scoped():
    cupy.cuda.set_allocator(cupy.get_default_memory_pool().malloc)
    with sova.cupy.using():
        inside = cupy.empty(1024)
    outside = cupy.empty(1024)
    assert isinstance(inside.data.mem._owner, sova.cupy._Block)
    assert not isinstance(outside.data.mem, cupy.cuda.memory.UnownedMemory)


def test_arrays_made_and_dropped_under_capture_run_in_a_graph_launched_many_times():
    stream = cupy.cuda.Stream(non_blocking=True)
    host = numpy.arange(1 << 20, dtype=numpy.float32)
    with stream:
        x = cupy.asarray(host)  # eager: the graph's input
        stream.synchronize()
        stream.begin_capture()
        tmp = x * 2.0  # graph memory, freed inside the graph
        out = tmp + 1.0  # graph memory the graph leaves live: its output
        del tmp
        graph = stream.end_capture()
        for _ in range(50):
            graph.launch(stream)
        stream.synchronize()
    numpy.testing.assert_array_equal(cupy.asnumpy(out), host * 2.0 + 1.0)
    del out, graph, x


@pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning")
def test_an_array_made_before_a_capture_and_dropped_during_it_is_freed_after_it():
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        eager = cupy.zeros(4 * MiB, dtype=cupy.uint8)
        ptr = eager.data.ptr
        stream.synchronize()
        stream.begin_capture()
        del eager  # refused by sova under capture: kept, no exception, the capture still valid
        assert [p for p, _ in sova.cupy._deferred] == [ptr]
        inside = cupy.ones(1024, dtype=cupy.float32)  # an allocation during the capture frees nothing yet
        assert [p for p, _ in sova.cupy._deferred] == [ptr]
        graph = stream.end_capture()
        graph.launch(stream)
        after = cupy.empty(16, dtype=cupy.uint8)  # the first call outside the capture frees it
        assert sova.cupy._deferred == []
        stream.synchronize()
    del inside, after, graph
