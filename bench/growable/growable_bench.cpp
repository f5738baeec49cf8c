// sova_bench_growable: a vector grown from 1 MiB to 8 GiB, three ways.
//
//   growable/realloc/div:D    cudaMalloc(new) + copy + cudaFree(old) at every step
//   growable/doubling/div:D   capacity doubled when exceeded (std::vector's way):
//                             cudaMalloc + copy + cudaFree at each doubling only
//   growable/sova/div:D       sova::GrowableBuffer::resize at every step: new
//                             physical memory mapped after the old, no copy
//   growable/sova_sim/div:D   the same on the host simulation, 1 MiB -> 512 MiB
//                             (a smoke test for CI; host timings, not GPU ones)
// Each step grows the size by size/D (D = 8: +12.5%, 78 steps; D = 1: x2, 14
// steps). An iteration is the whole growth from nothing to 8 GiB and back to
// nothing (the last free or the buffer's destruction included), synchronized.
// Counters: peak_GiB (the most device memory held at once by the method's own
// allocations: old + new during a copy, the capacity for doubling, the mapped
// bytes for sova), peak_over_final (peak_GiB over 8 GiB), copied_GiB, steps.
//
// With SOVA_GROWABLE_CSV=<file>, the first iteration of each case appends
// "case,step,size_bytes,held_bytes" rows there (bench/growable/plot_growable.py
// plots them with the JSON). Without a GPU the CUDA cases skip.
#include <sova/growable.hpp>
#include <sova/sim.hpp>

#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;
constexpr std::size_t kGiB = std::size_t{1} << 30;
constexpr std::size_t kStart = kMiB;
constexpr std::size_t kFinalGpu = 8 * kGiB;
constexpr std::size_t kFinalSim = 512 * kMiB;

bool have_gpu() {
  static const bool yes = [] {
    int count = 0;
    return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
  }();
  return yes;
}

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(err));
}

std::vector<std::size_t> sizes(std::size_t final_size, int div) {
  std::vector<std::size_t> out{kStart};
  while (out.back() < final_size) out.push_back(std::min(final_size, out.back() + out.back() / div));
  return out;
}

struct Run {
  std::size_t peak = 0;
  std::size_t copied = 0;
  std::vector<std::pair<std::size_t, std::size_t>> trace;  // (size, held)
  void held(std::size_t size, std::size_t bytes) {
    peak = std::max(peak, bytes);
    trace.emplace_back(size, bytes);
  }
};

void realloc_growth(const std::vector<std::size_t>& steps, cudaStream_t stream, Run& run) {
  void* p = nullptr;
  std::size_t old = 0;
  for (std::size_t size : steps) {
    void* q = nullptr;
    check(cudaMalloc(&q, size), "cudaMalloc");
    run.held(size, old + size);
    if (p != nullptr) {
      check(cudaMemcpyAsync(q, p, old, cudaMemcpyDeviceToDevice, stream), "cudaMemcpyAsync");
      run.copied += old;
      check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
      check(cudaFree(p), "cudaFree");
    }
    p = q;
    old = size;
  }
  check(cudaFree(p), "cudaFree");
}

void doubling_growth(const std::vector<std::size_t>& steps, cudaStream_t stream, Run& run) {
  void* p = nullptr;
  std::size_t capacity = 0, size_now = 0;
  for (std::size_t size : steps) {
    if (size > capacity) {
      const std::size_t grown = std::max(size, capacity * 2);
      void* q = nullptr;
      check(cudaMalloc(&q, grown), "cudaMalloc");
      run.held(size, capacity + grown);
      if (p != nullptr) {
        check(cudaMemcpyAsync(q, p, size_now, cudaMemcpyDeviceToDevice, stream), "cudaMemcpyAsync");
        run.copied += size_now;
        check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
        check(cudaFree(p), "cudaFree");
      }
      p = q;
      capacity = grown;
    }
    run.held(size, capacity);
    size_now = size;
  }
  check(cudaFree(p), "cudaFree");
}

void sova_growth(const std::vector<std::size_t>& steps, cudaStream_t stream, sova::Driver* driver, Run& run) {
  sova::GrowableOptions options;
  options.driver = driver;
  sova::GrowableBuffer buffer(steps.back(), options);
  for (std::size_t size : steps) {
    check(buffer.resize(size, stream), "GrowableBuffer::resize");
    run.held(size, buffer.physical_bytes());
  }
  check(driver->stream_synchronize(stream), "stream_synchronize");
}  // the buffer's destructor unmaps and releases: timed too

void write_trace(const std::string& name, const Run& run) {
  const char* path = std::getenv("SOVA_GROWABLE_CSV");
  if (path == nullptr || *path == '\0') return;
  FILE* f = std::fopen(path, "a");
  if (f == nullptr) return;
  for (std::size_t i = 0; i < run.trace.size(); ++i) {
    std::fprintf(f, "%s,%zu,%zu,%zu\n", name.c_str(), i, run.trace[i].first, run.trace[i].second);
  }
  std::fclose(f);
}

enum class Method { realloc, doubling, sova, sova_sim };

void bench_growth(benchmark::State& state, Method method) {
  const int div = static_cast<int>(state.range(0));
  const bool sim = method == Method::sova_sim;
  if (!sim && !have_gpu()) {
    state.SkipWithError("no GPU");
    return;
  }
  static sova::SimDriver* sim_driver = nullptr;
  if (sim && sim_driver == nullptr) {
    sova::SimConfig config;
    config.total_memory = kGiB;
    sim_driver = new sova::SimDriver(config);  // leaked: lives to the end of the program
  }
  const std::vector<std::size_t> steps = sizes(sim ? kFinalSim : kFinalGpu, div);
  cudaStream_t stream = nullptr;
  try {
    if (sim) {
      stream = sim_driver->create_stream();
    } else {
      check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    }
    Run first;
    bool recorded = false;
    for (auto _ : state) {
      Run run;
      switch (method) {
        case Method::realloc: realloc_growth(steps, stream, run); break;
        case Method::doubling: doubling_growth(steps, stream, run); break;
        case Method::sova: sova_growth(steps, stream, &sova::cuda_driver(), run); break;
        case Method::sova_sim: sova_growth(steps, stream, sim_driver, run); break;
      }
      if (!sim) check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
      if (!recorded) {
        first = std::move(run);
        recorded = true;
      }
    }
    static const char* const kNames[] = {"realloc", "doubling", "sova", "sova_sim"};
    write_trace(std::string("growable/") + kNames[static_cast<int>(method)] + "/div:" + std::to_string(div), first);
    state.counters["peak_GiB"] = static_cast<double>(first.peak) / kGiB;
    state.counters["peak_over_final"] = static_cast<double>(first.peak) / static_cast<double>(steps.back());
    state.counters["copied_GiB"] = static_cast<double>(first.copied) / kGiB;
    state.counters["steps"] = static_cast<double>(steps.size());
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
  if (sim) {
    sim_driver->destroy_stream(stream);
  } else if (stream != nullptr) {
    cudaStreamDestroy(stream);
  }
}

void args(benchmark::internal::Benchmark* b) {
  b->ArgName("div")->Arg(8)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(3);
}

BENCHMARK_CAPTURE(bench_growth, realloc, Method::realloc)->Name("growable/realloc")->Apply(args);
BENCHMARK_CAPTURE(bench_growth, doubling, Method::doubling)->Name("growable/doubling")->Apply(args);
BENCHMARK_CAPTURE(bench_growth, sova, Method::sova)->Name("growable/sova")->Apply(args);
BENCHMARK_CAPTURE(bench_growth, sova_sim, Method::sova_sim)->Name("growable/sova_sim")->Apply(args);

}  // namespace

BENCHMARK_MAIN();
