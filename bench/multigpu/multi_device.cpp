// sova_multi_device: does one device's allocator work slow another's? One
// sova::Pool per device in one process; each case runs on every device alone
// (one device after another), then on all devices at once, in R rounds that
// alternate the order (alone first, then together first, ...), so that a
// drift of the host falls on both alike. Prints per device the median over
// rounds and the spread (min-max) of the alone and together figures, and the
// ratio together / alone taken within each round (1.00 = no interference):
// where the ratios' spread holds 1.00, or the alone figures swing as much,
// the run does not tell interference from the host's noise.
//
//   sova_multi_device [--devices=N] [--case=threads|replay|all] [--threads=T]
//                     [--seconds=S] [--trace=FILE.csv[.gz]] [--passes=P] [--rounds=R]
//                     [--pin=FIRST_CORE] [--allocator=sova|driver]
//
//   threads  T host threads per device (default 4), each with its own stream
//            of that device, allocate+free pairs of small blocks (256 B ..
//            64 KiB, the sizes threads/ of sova_bench cycles) for S seconds
//            (default 2): pairs per second per device.
//   replay   one host thread per device replays a recorded trace (default
//            bench/traces/gpt_train.csv.gz) P passes (default 3) on its
//            device's pool, each trace stream a stream of that device;
//            milliseconds per pass (median of the passes) and the pool's peak reserved.
// R defaults to 5. N defaults to every device CUDA sees; fewer than 2 is an
// error (exit 2). --pin pins every worker thread to a core of its own, the
// same core alone and together (device d's thread t on FIRST_CORE + d*T + t;
// a replay thread on FIRST_CORE + d), so that a thread's core, and the
// scheduler's placement of it, is no difference between the two.
// --allocator=driver runs the same cases on a cudaMemPool_t per device
// (cudaMallocFromPoolAsync / cudaFreeAsync, release threshold at its
// maximum, as sova keeps its memory between passes): the baseline that tells
// what the host and the driver take from running devices together, which no
// allocator avoids, from what sova's pools would add.
#include "replay/trace.hpp"

#include <sova/pool.hpp>

#include <cuda_runtime_api.h>
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "sova_multi_device: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

cudaStream_t make_stream(int device) {
  check(cudaSetDevice(device), "cudaSetDevice");
  cudaStream_t s = nullptr;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  return s;
}

/// --pin's first core; negative: threads not pinned.
int g_first_core = -1;
/// --allocator=driver: the runtime's pools instead of sova's.
bool g_driver_pools = false;

/// One device's allocator under test: a sova::Pool, or with --allocator=driver
/// a cudaMemPool_t of that device.
class DevicePool {
 public:
  explicit DevicePool(int device) {
    if (!g_driver_pools) {
      sova::PoolOptions o;
      o.device = device;
      sova_ = std::make_unique<sova::Pool>(o);
      return;
    }
    cudaMemPoolProps props{};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device;
    check(cudaMemPoolCreate(&driver_, &props), "cudaMemPoolCreate");
    std::uint64_t keep = UINT64_MAX;
    check(cudaMemPoolSetAttribute(driver_, cudaMemPoolAttrReleaseThreshold, &keep), "cudaMemPoolSetAttribute");
  }
  ~DevicePool() {
    if (driver_ != nullptr) cudaMemPoolDestroy(driver_);
  }
  DevicePool(const DevicePool&) = delete;
  DevicePool& operator=(const DevicePool&) = delete;

  void* allocate(std::size_t bytes, cudaStream_t s) {
    if (sova_) return sova_->allocate(bytes, s);
    void* p = nullptr;
    check(cudaMallocFromPoolAsync(&p, bytes, driver_, s), "cudaMallocFromPoolAsync");
    return p;
  }
  void deallocate(void* p, cudaStream_t s) {
    if (sova_) return sova_->deallocate(p, s);
    check(cudaFreeAsync(p, s), "cudaFreeAsync");
  }
  std::uint64_t peak_reserved() const {
    if (sova_) return sova_->stats().reserved_high;
    std::uint64_t high = 0;
    check(cudaMemPoolGetAttribute(driver_, cudaMemPoolAttrReservedMemHigh, &high), "cudaMemPoolGetAttribute");
    return high;
  }

 private:
  std::unique_ptr<sova::Pool> sova_;
  cudaMemPool_t driver_ = nullptr;
};

/// Pins the calling thread to core g_first_core + slot (when --pin was given).
void pin_to_slot(int slot) {
  if (g_first_core < 0) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(g_first_core + slot, &set);
  if (int e = pthread_setaffinity_np(pthread_self(), sizeof set, &set); e != 0) {
    std::fprintf(stderr, "sova_multi_device: cannot pin a thread to core %d: %s\n", g_first_core + slot,
                 std::strerror(e));
    std::exit(1);
  }
}

constexpr std::size_t kSmallSizes[] = {256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536};

/// pairs per second of `threads` threads on each device in `devices`, all at once.
std::vector<double> run_threads(const std::vector<int>& devices, int threads, double seconds) {
  std::vector<std::unique_ptr<DevicePool>> pools;
  for (int d : devices) pools.push_back(std::make_unique<DevicePool>(d));
  std::vector<std::atomic<std::uint64_t>> pairs(devices.size());
  std::atomic<int> ready{0};
  std::atomic<bool> go{false}, stop{false};
  std::vector<std::thread> workers;
  for (std::size_t i = 0; i < devices.size(); ++i) {
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&, i, t] {
        pin_to_slot(devices[i] * threads + t);
        cudaStream_t s = make_stream(devices[i]);
        DevicePool& pool = *pools[i];
        for (std::size_t b : kSmallSizes) pool.deallocate(pool.allocate(b, s), s);  // warm
        std::size_t next = static_cast<std::size_t>(t) % std::size(kSmallSizes);
        std::uint64_t n = 0;
        ++ready;
        while (!go.load()) std::this_thread::yield();
        while (!stop.load(std::memory_order_relaxed)) {
          for (int k = 0; k < 256; ++k) {
            pool.deallocate(pool.allocate(kSmallSizes[next], s), s);
            if (++next == std::size(kSmallSizes)) next = 0;
          }
          n += 256;
        }
        pairs[i] += n;
        check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
        check(cudaStreamDestroy(s), "cudaStreamDestroy");
      });
    }
  }
  while (ready.load() < static_cast<int>(workers.size())) std::this_thread::yield();
  const auto t0 = Clock::now();
  go = true;
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop = true;
  for (std::thread& w : workers) w.join();
  const double elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
  std::vector<double> rates;
  for (auto& p : pairs) rates.push_back(static_cast<double>(p.load()) / elapsed);
  return rates;
}

struct ReplayFigures {
  double median_ms = 0;
  std::uint64_t peak_reserved = 0;
};

std::vector<ReplayFigures> run_replay(const std::vector<int>& devices, const sova_bench::Trace& trace, int passes) {
  std::vector<ReplayFigures> figures(devices.size());
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> workers;
  for (std::size_t i = 0; i < devices.size(); ++i) {
    workers.emplace_back([&, i] {
      const int device = devices[i];
      pin_to_slot(device);
      DevicePool pool(device);
      std::vector<cudaStream_t> streams;
      for (std::size_t k = 0; k < trace.streams.size(); ++k) streams.push_back(make_stream(device));
      std::vector<void*> slots(trace.slots, nullptr);
      std::vector<double> ms;
      ++ready;
      while (!go.load()) std::this_thread::yield();
      for (int p = 0; p < passes; ++p) {
        const auto t0 = Clock::now();
        for (const sova_bench::TraceOp& op : trace.ops) {
          if (op.bytes != 0) {
            slots[op.slot] = pool.allocate(op.bytes, streams[op.stream]);
          } else {
            pool.deallocate(slots[op.slot], streams[op.stream]);
            slots[op.slot] = nullptr;
          }
        }
        for (cudaStream_t s : streams) check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
        ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
      }
      std::sort(ms.begin(), ms.end());
      figures[i].median_ms = ms[ms.size() / 2];
      figures[i].peak_reserved = pool.peak_reserved();
      for (cudaStream_t s : streams) check(cudaStreamDestroy(s), "cudaStreamDestroy");
    });
  }
  while (ready.load() < static_cast<int>(workers.size())) std::this_thread::yield();
  go = true;
  for (std::thread& w : workers) w.join();
  return figures;
}

/// The median and the range of some figures (one a round).
struct Spread {
  double median = 0, min = 0, max = 0;
};

Spread spread_of(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  const double median = n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
  return {median, values.front(), values.back()};
}

/// "median (min-max)", scaled, in a column of `width`.
void print_spread(const Spread& s, double scale, int width) {
  char text[64];
  std::snprintf(text, sizeof text, "%.2f (%.2f-%.2f)", s.median * scale, s.min * scale, s.max * scale);
  std::printf(" %*s", width, text);
}

/// Per device: its alone and together figures of every round, then their
/// spreads and the spread of the per-round ratios together / alone.
struct RoundFigures {
  std::vector<std::vector<double>> alone, together;  // [device][round]
  explicit RoundFigures(std::size_t devices) : alone(devices), together(devices) {}

  void print(double scale) const {
    std::printf("%-8s %22s %22s %22s\n", "device", "alone", "together", "together/alone");
    for (std::size_t d = 0; d < alone.size(); ++d) {
      std::vector<double> ratios;
      for (std::size_t r = 0; r < alone[d].size(); ++r) ratios.push_back(together[d][r] / alone[d][r]);
      std::printf("%-8zu", d);
      print_spread(spread_of(alone[d]), scale, 22);
      print_spread(spread_of(together[d]), scale, 22);
      print_spread(spread_of(ratios), 1.0, 22);
      std::printf("\n");
    }
  }
};

/// `rounds` rounds, each running `alone(d)` for every device d (one after
/// another) and `together()` once, alone first in even rounds and together
/// first in odd ones; each returns its figure(s), recorded in `f`.
template <typename Alone, typename Together>
void alternate(int rounds, const std::vector<int>& devices, RoundFigures& f, Alone alone, Together together) {
  for (int r = 0; r < rounds; ++r) {
    auto all_at_once = [&] {
      const std::vector<double> figures = together();
      for (int d : devices) f.together[d].push_back(figures[d]);
    };
    if (r % 2) all_at_once();
    for (int d : devices) f.alone[d].push_back(alone(d));
    if (r % 2 == 0) all_at_once();
  }
}

bool arg(const char* a, const char* name, std::string* value) {
  const std::size_t n = std::strlen(name);
  if (std::strncmp(a, name, n) != 0 || a[n] != '=') return false;
  *value = a + n + 1;
  return true;
}

int usage(const char* why) {
  std::fprintf(stderr,
               "sova_multi_device: %s\nusage: sova_multi_device [--devices=N] [--case=threads|replay|all] "
               "[--threads=T] [--seconds=S] [--trace=FILE] [--passes=P] [--rounds=R] [--pin=FIRST_CORE]\n"
               "       [--allocator=sova|driver]\n",
               why);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  int found = 0;
  if (cudaGetDeviceCount(&found) != cudaSuccess) found = 0;
  int n = found, threads = 4, passes = 3, rounds = 5;
  double seconds = 2;
  std::string which = "all", trace_path = SOVA_BENCH_TRACE_DIR "/gpt_train.csv.gz", v;
  for (int i = 1; i < argc; ++i) {
    if (arg(argv[i], "--devices", &v))
      n = std::atoi(v.c_str());
    else if (arg(argv[i], "--case", &v))
      which = v;
    else if (arg(argv[i], "--threads", &v))
      threads = std::atoi(v.c_str());
    else if (arg(argv[i], "--seconds", &v))
      seconds = std::atof(v.c_str());
    else if (arg(argv[i], "--trace", &v))
      trace_path = v;
    else if (arg(argv[i], "--passes", &v))
      passes = std::atoi(v.c_str());
    else if (arg(argv[i], "--rounds", &v))
      rounds = std::atoi(v.c_str());
    else if (arg(argv[i], "--pin", &v))
      g_first_core = std::atoi(v.c_str());
    else if (arg(argv[i], "--allocator", &v) && (v == "sova" || v == "driver"))
      g_driver_pools = v == "driver";
    else
      return usage((std::string("unknown argument ") + argv[i]).c_str());
  }
  if (which != "threads" && which != "replay" && which != "all") return usage("--case takes threads, replay or all");
  if (threads < 1 || passes < 1 || rounds < 1 || !(seconds > 0))
    return usage("--threads, --passes, --rounds and --seconds must be positive");
  if (n < 2 || n > found) {
    std::fprintf(stderr, "sova_multi_device: needs 2 or more devices (asked %d, CUDA sees %d)\n", n, found);
    return 2;
  }
  // Line-buffered even into a pipe or file: a run cut short by a time limit
  // keeps the tables it finished.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  std::vector<int> all;
  for (int d = 0; d < n; ++d) all.push_back(d);
  std::printf("allocator: %s, one per device\n", g_driver_pools ? "the runtime's cudaMemPool_t" : "sova::Pool");
  if (g_first_core >= 0) {
    const int cores = static_cast<int>(std::thread::hardware_concurrency());
    if (g_first_core + n * threads > cores) {
      std::fprintf(stderr, "sova_multi_device: --pin=%d needs cores %d..%d, the host has %d\n", g_first_core,
                   g_first_core, g_first_core + n * threads - 1, cores);
      return 2;
    }
    std::printf("threads pinned: device d's thread t on core %d + d*%d + t, replay threads on core %d + d\n",
                g_first_core, threads, g_first_core);
  }

  if (which != "replay") {
    std::printf("threads: %d threads per device, %.1f s a run, %d rounds, M pairs/s\n", threads, seconds, rounds);
    RoundFigures f(all.size());
    alternate(
        rounds, all, f, [&](int d) { return run_threads({d}, threads, seconds)[0]; },
        [&] { return run_threads(all, threads, seconds); });
    f.print(1e-6);
  }
  if (which != "threads") {
    const sova_bench::Trace trace = sova_bench::load_trace(trace_path);
    std::printf("replay: %s, %zu ops, %zu streams, %d passes a run, %d rounds, ms a pass (median of a run's passes)\n",
                trace_path.c_str(), trace.ops.size(), trace.streams.size(), passes, rounds);
    RoundFigures f(all.size());
    std::vector<std::uint64_t> peak_alone(all.size()), peak_together(all.size());
    alternate(
        rounds, all, f,
        [&](int d) {
          const ReplayFigures alone = run_replay({d}, trace, passes)[0];
          peak_alone[d] = std::max(peak_alone[d], alone.peak_reserved);
          return alone.median_ms;
        },
        [&] {
          std::vector<double> ms;
          for (const ReplayFigures& figures : run_replay(all, trace, passes)) {
            peak_together[ms.size()] = std::max(peak_together[ms.size()], figures.peak_reserved);
            ms.push_back(figures.median_ms);
          }
          return ms;
        });
    f.print(1.0);
    for (int d : all)
      std::printf("device %d: peak reserved %.1f MiB alone, %.1f MiB together\n", d,
                  static_cast<double>(peak_alone[d]) / (1 << 20), static_cast<double>(peak_together[d]) / (1 << 20));
  }
  return 0;
}
