// sova_graph_bench — the seed program's loop captured as a CUDA graph (or as
// --graphs graphs, all alive, launched in turn) and launched N times, with
// three sources of the loop's buffers in the same run:
//   sova          sovaMallocAsync / sovaFreeAsync captured (docs/graphs.md)
//   runtime       cudaMallocAsync / cudaFreeAsync captured: graph memory nodes
//   preallocated  buffers allocated before capture: no allocation in the graph
// One graph holds --iterations x (allocate --buffers buffers of --buffer-mib
// MiB (4: the seed's), one kernel that writes, reads back and checks every
// float of each, free them). Buffers of different iterations never live at
// once: --iterations 3 --buffer-mib 1024 is three 1 GiB allocations whose
// lifetimes do not overlap (warp#1157). --graphs G captures G such graphs on
// the one stream, each holding its own memory while it lives.
//
// Per variant it prints (and writes with --json): the capture + instantiate
// time, the median time per launch over --rounds rounds of --launches launches
// (host clock around the launches and a final synchronize; the rounds of the
// three variants interleave, so drift hits all alike), and the memory each
// holds after its launches: sova's graph memory (sovaDeviceGetGraphMemAttribute)
// and its pool's reserved bytes; the runtime's graph memory
// (cudaDeviceGetGraphMemAttribute, used and reserved); the preallocated bytes.
// The kernel counts every float it read back wrong, and buffers of one
// iteration get distinct values, so memory shared between them shows: the
// program exits 1 if any was wrong.
//
// Usage: sova_graph_bench [--buffers B] [--buffer-mib M] [--iterations I]
//                         [--graphs G] [--launches N] [--rounds R] [--json FILE]
// Needs a GPU (built only with -Dgpu=enabled); tools/device/graphs-bench.sh runs it.
#include <sova/sova.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

constexpr unsigned kThreads = 256;
constexpr int kMaxBuffers = 8;
constexpr int kMaxGraphs = 64;

struct Buffers {
  float* p[kMaxBuffers];
  int count;
};

// Every thread writes one float of each buffer (a value naming the buffer),
// reads them all back and counts mismatches: buffers that overlap, or memory
// that is not mapped as it should be, show as errors or faults.
__global__ void graph_seed_kernel(Buffers b, float tag, unsigned long long* errors) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  const float base = tag * 64.0f + static_cast<float>(i & 0xff);
  for (int k = 0; k < b.count; ++k) static_cast<volatile float*>(b.p[k])[i] = base + 16384.0f * k;
  for (int k = 0; k < b.count; ++k) {
    if (static_cast<volatile float*>(b.p[k])[i] != base + 16384.0f * k) atomicAdd(errors, 1ULL);
  }
}

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(err));
}

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

enum class Variant { sova, runtime, preallocated };
const char* name(Variant v) {
  switch (v) {
    case Variant::sova: return "sova";
    case Variant::runtime: return "cudaMallocAsync";
    case Variant::preallocated: return "preallocated";
  }
  return "?";
}

struct Options {
  int buffers = 1;
  int buffer_mib = 4;  // the seed's size
  int graphs = 1;
  int iterations = 100;  // the seed's loop length
  int launches = 200;
  int rounds = 5;
  std::string json;
  std::size_t buffer_bytes() const { return static_cast<std::size_t>(buffer_mib) << 20; }
  /// One thread a float of a buffer.
  unsigned blocks() const { return static_cast<unsigned>(buffer_bytes() / sizeof(float) / kThreads); }
};

struct Result {
  explicit Result(Variant v) : variant(v) {}
  Variant variant;
  double capture_s = 0;
  std::vector<double> per_launch_s;  // one per round
  std::uint64_t graph_used = 0, graph_reserved = 0, graph_reserved_high = 0, pool_reserved = 0, prealloc = 0;
  double median() const {
    std::vector<double> v = per_launch_s;
    std::sort(v.begin(), v.end());
    return v.empty() ? 0 : v[v.size() / 2];
  }
};

class Rig {
 public:
  explicit Rig(const Options& o) : opt_(o) {
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    check(cudaMalloc(&errors_, sizeof *errors_), "cudaMalloc(error counter)");
    check(cudaMemset(errors_, 0, sizeof *errors_), "cudaMemset");
    for (int k = 0; k < opt_.buffers; ++k) {
      void* p = nullptr;
      check(cudaMalloc(&p, opt_.buffer_bytes()), "cudaMalloc(preallocated)");
      prealloc_.push_back(static_cast<float*>(p));
    }
    // sova's default pool is made on first use: made here, eagerly, so that
    // the capture measures allocation under capture, not the pool's creation.
    void* p = nullptr;
    check(sovaMallocAsync(&p, opt_.buffer_bytes(), stream_), "sovaMallocAsync(warm-up)");
    check(sovaFreeAsync(p, stream_), "sovaFreeAsync(warm-up)");
    check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize(warm-up)");
  }
  ~Rig() {
    cudaStreamSynchronize(stream_);
    for (int v = 0; v < 3; ++v)
      for (int g = 0; g < opt_.graphs; ++g) destroy(v, g);
    for (float* p : prealloc_) cudaFree(p);
    cudaFree(errors_);
    cudaStreamDestroy(stream_);
  }

  // Captures and instantiates the variant's graphs; returns the seconds taken.
  double capture(Variant v) {
    check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    const Clock::time_point t = Clock::now();
    for (int g = 0; g < opt_.graphs; ++g) capture_one(v, g);
    return seconds_since(t);
  }

  // Launches each graph `launches` times, in turn; returns seconds per launch.
  double launch(Variant v) {
    check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    const Clock::time_point t = Clock::now();
    for (int n = 0; n < opt_.launches; ++n)
      for (int g = 0; g < opt_.graphs; ++g) check(cudaGraphLaunch(execs_[static_cast<int>(v)][g], stream_), "cudaGraphLaunch");
    check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize(after launches)");
    return seconds_since(t) / (static_cast<double>(opt_.launches) * opt_.graphs);
  }

 private:
  void capture_one(Variant v, int graph) {
    check(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeGlobal), "cudaStreamBeginCapture");
    for (int it = 0; it < opt_.iterations; ++it) {
      Buffers b{};
      b.count = opt_.buffers;
      for (int k = 0; k < b.count; ++k) b.p[k] = acquire(v, k);
      graph_seed_kernel<<<opt_.blocks(), kThreads, 0, stream_>>>(b, static_cast<float>(it % 100), errors_);
      check(cudaGetLastError(), "kernel launch during capture");
      for (int k = 0; k < b.count; ++k) release(v, b.p[k]);
    }
    cudaGraph_t& g = graphs_[static_cast<int>(v)][graph];
    check(cudaStreamEndCapture(stream_, &g), "cudaStreamEndCapture");
    check(cudaGraphInstantiate(&execs_[static_cast<int>(v)][graph], g, 0), "cudaGraphInstantiate");
  }

 public:
  void measure_memory(Result& r) {
    std::uint64_t x = 0;
    switch (r.variant) {
      case Variant::sova: {
        check(sovaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrUsedMemCurrent, &x), "sovaDeviceGetGraphMemAttribute");
        r.graph_used = x;
        check(sovaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrReservedMemCurrent, &x),
              "sovaDeviceGetGraphMemAttribute");
        r.graph_reserved = x;
        check(sovaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrReservedMemHigh, &x), "sovaDeviceGetGraphMemAttribute");
        r.graph_reserved_high = x;
        sovaMemPool_t pool = nullptr;
        check(sovaDeviceGetMemPool(&pool, 0), "sovaDeviceGetMemPool");
        check(sovaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &x), "sovaMemPoolGetAttribute");
        r.pool_reserved = x;
        break;
      }
      case Variant::runtime:
        check(cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrUsedMemCurrent, &x), "cudaDeviceGetGraphMemAttribute");
        r.graph_used = x;
        check(cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrReservedMemCurrent, &x),
              "cudaDeviceGetGraphMemAttribute");
        r.graph_reserved = x;
        check(cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrReservedMemHigh, &x), "cudaDeviceGetGraphMemAttribute");
        r.graph_reserved_high = x;
        break;
      case Variant::preallocated: r.prealloc = opt_.buffer_bytes() * prealloc_.size(); break;
    }
  }

  std::uint64_t kernel_errors() {
    unsigned long long n = 0;
    check(cudaMemcpy(&n, errors_, sizeof n, cudaMemcpyDeviceToHost), "cudaMemcpy(error counter)");
    return n;
  }

 private:
  float* acquire(Variant v, int k) {
    void* p = nullptr;
    switch (v) {
      case Variant::sova: check(sovaMallocAsync(&p, opt_.buffer_bytes(), stream_), "sovaMallocAsync during capture"); break;
      case Variant::runtime:
        check(cudaMallocAsync(&p, opt_.buffer_bytes(), stream_), "cudaMallocAsync during capture");
        break;
      case Variant::preallocated: p = prealloc_[k]; break;
    }
    return static_cast<float*>(p);
  }
  void release(Variant v, float* p) {
    switch (v) {
      case Variant::sova: check(sovaFreeAsync(p, stream_), "sovaFreeAsync during capture"); break;
      case Variant::runtime: check(cudaFreeAsync(p, stream_), "cudaFreeAsync during capture"); break;
      case Variant::preallocated: break;
    }
  }
  void destroy(int v, int g) {
    if (execs_[v][g] != nullptr) cudaGraphExecDestroy(execs_[v][g]);
    if (graphs_[v][g] != nullptr) cudaGraphDestroy(graphs_[v][g]);
    execs_[v][g] = nullptr;
    graphs_[v][g] = nullptr;
  }

  Options opt_;
  cudaStream_t stream_ = nullptr;
  unsigned long long* errors_ = nullptr;
  std::vector<float*> prealloc_;
  cudaGraph_t graphs_[3][kMaxGraphs] = {};
  cudaGraphExec_t execs_[3][kMaxGraphs] = {};
};

int usage(const char* why) {
  std::fprintf(stderr,
               "sova_graph_bench: %s\n"
               "usage: sova_graph_bench [--buffers B (1..%d)] [--buffer-mib M (1..4096)] [--iterations I] "
               "[--graphs G (1..%d)] [--launches N] [--rounds R] [--json FILE]\n",
               why, kMaxBuffers, kMaxGraphs);
  return 2;
}

bool parse_int(const char* s, int lo, int hi, int& out) {
  char* end = nullptr;
  const long v = std::strtol(s, &end, 10);
  if (end == s || *end != '\0' || v < lo || v > hi) return false;
  out = static_cast<int>(v);
  return true;
}

double mib(std::uint64_t b) { return static_cast<double>(b) / (1 << 20); }

void write_json(const Options& o, const std::vector<Result>& rs, const Result& base, const std::string& device) {
  FILE* f = std::fopen(o.json.c_str(), "w");
  if (f == nullptr) throw std::runtime_error("cannot write " + o.json);
  std::fprintf(f,
               "{\"device\": \"%s\", \"buffers\": %d, \"buffer_bytes\": %zu, \"iterations\": %d, "
               "\"graphs\": %d, \"launches\": %d, \"rounds\": %d, \"variants\": [",
               device.c_str(), o.buffers, o.buffer_bytes(), o.iterations, o.graphs, o.launches, o.rounds);
  for (std::size_t i = 0; i < rs.size(); ++i) {
    const Result& r = rs[i];
    std::fprintf(f,
                 "%s\n  {\"name\": \"%s\", \"capture_instantiate_us\": %.1f, \"launch_us_median\": %.3f, "
                 "\"vs_preallocated\": %.4f, \"launch_us_rounds\": [",
                 i ? "," : "", name(r.variant), r.capture_s * 1e6, r.median() * 1e6, r.median() / base.median());
    for (std::size_t k = 0; k < r.per_launch_s.size(); ++k)
      std::fprintf(f, "%s%.3f", k ? ", " : "", r.per_launch_s[k] * 1e6);
    std::fprintf(f,
                 "], \"graph_mem_used\": %llu, \"graph_mem_reserved\": %llu, \"graph_mem_reserved_high\": %llu, "
                 "\"pool_reserved\": %llu, \"preallocated\": %llu}",
                 static_cast<unsigned long long>(r.graph_used), static_cast<unsigned long long>(r.graph_reserved),
                 static_cast<unsigned long long>(r.graph_reserved_high),
                 static_cast<unsigned long long>(r.pool_reserved), static_cast<unsigned long long>(r.prealloc));
  }
  std::fprintf(f, "\n]}\n");
  std::fclose(f);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    bool ok = v != nullptr;
    if (a == "--buffers")
      ok = ok && parse_int(v, 1, kMaxBuffers, o.buffers);
    else if (a == "--buffer-mib")
      ok = ok && parse_int(v, 1, 4096, o.buffer_mib);
    else if (a == "--graphs")
      ok = ok && parse_int(v, 1, kMaxGraphs, o.graphs);
    else if (a == "--iterations")
      ok = ok && parse_int(v, 1, 10000, o.iterations);
    else if (a == "--launches")
      ok = ok && parse_int(v, 1, 1000000, o.launches);
    else if (a == "--rounds")
      ok = ok && parse_int(v, 1, 1000, o.rounds);
    else if (a == "--json" && v != nullptr)
      o.json = v;
    else
      return usage(("unknown argument " + a).c_str());
    if (!ok) return usage(("bad value for " + a).c_str());
    ++i;
  }
  try {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
      std::fprintf(stderr, "sova_graph_bench: no CUDA GPU\n");
      return 1;
    }
    check(cudaSetDevice(0), "cudaSetDevice");
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
    std::printf(
        "sova_graph_bench on %s: %d graph(s), each %d x (allocate %d x %d MiB, kernel, free); "
        "%d launches of each a round, %d rounds, median per launch\n",
        prop.name, o.graphs, o.iterations, o.buffers, o.buffer_mib, o.launches, o.rounds);

    Rig rig(o);
    std::vector<Result> rs = {Result(Variant::sova), Result(Variant::runtime), Result(Variant::preallocated)};
    for (Result& r : rs) {
      r.capture_s = rig.capture(r.variant);
      rig.launch(r.variant);  // warm-up: the runtime maps graph memory at the first launch
    }
    for (int round = 0; round < o.rounds; ++round)
      for (Result& r : rs) r.per_launch_s.push_back(rig.launch(r.variant));
    for (Result& r : rs) rig.measure_memory(r);
    const std::uint64_t errors = rig.kernel_errors();

    const Result& base = rs[2];
    std::printf("%-16s %14s %12s %10s %14s %14s %14s\n", "variant", "capture+inst us", "launch us", "vs prealloc",
                "graph used MiB", "graph rsv MiB", "other MiB");
    for (const Result& r : rs) {
      const double other = r.variant == Variant::sova ? mib(r.pool_reserved) : mib(r.prealloc);
      std::printf("%-16s %14.1f %12.3f %9.4fx %14.1f %14.1f %14.1f\n", name(r.variant), r.capture_s * 1e6,
                  r.median() * 1e6, r.median() / base.median(), mib(r.graph_used), mib(r.graph_reserved), other);
    }
    std::printf(
        "(other: sova's pool reserved, all of its memory; preallocated: its buffers; "
        "live at once in a graph: %d x %d MiB)\n",
        o.buffers, o.buffer_mib);
    if (!o.json.empty()) write_json(o, rs, base, prop.name);
    if (errors != 0) {
      std::fprintf(stderr, "sova_graph_bench: error: the kernel read back %llu wrong floats\n",
                   static_cast<unsigned long long>(errors));
      return 1;
    }
    std::printf("kernel check: every float read back as written\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sova_graph_bench: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
