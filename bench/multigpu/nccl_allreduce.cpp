// sova_nccl_allreduce: an all-reduce's bus bandwidth on sova memory, with and
// without NCCL's user-buffer registration, against ncclMemAlloc's memory.
// One process per mode (this program again, --modes=MODE), one thread
// driving one communicator per device (ncclCommInitAll), sizes from
// --min-mib to --max-mib (x4 steps), in place, float sum. For each mode, per
// size: the median of --reps timed runs of --iters all-reduces; bus bandwidth
// = bytes * 2 (n-1)/n / time, as nccl-tests reports it. The sums are checked
// after each size.
//
//   sova_nccl_allreduce [--modes=LIST] [--min-mib=1] [--max-mib=1024] [--iters=20] [--reps=5]
//
// Modes (default all):
//   sova          a sova::Pool block, not registered
//   sova_reg      the same block, ncclCommRegister'ed
//   sova_win      a block of a window pool (window_pool_options: one
//                 physical chunk per block), ncclCommWindowRegister'ed
//                 (NCCL_WIN_COLL_SYMMETRIC; NCCL >= 2.27), the symmetric kernels' route
//   ncclmem       ncclMemAlloc, not registered
//   ncclmem_reg   ncclMemAlloc, ncclCommRegister'ed
//   ncclmem_win   ncclMemAlloc, window-registered
//   cudamalloc    cudaMalloc, not registered (the usual baseline)
// sova pools are created with POSIX file-descriptor handles (what NCCL's
// registration asks of VMM memory to map it for peers) and every peer device
// granted read-write access. A registration NCCL refuses, or a window this
// program refuses before NCCL sees it (window_refusal: the rule NCCL
// relies on without checking it), is reported with its reason and that mode's
// larger sizes skipped. A mode that fails (a refusal, a wrong sum, a CUDA
// error that poisons the context) ends its own process only: the other modes
// still run, and the exit status is then 1.
// Leave NVLink multicast off on shared machines: NCCL_NVLS_ENABLE=0.
#include <sova/pool.hpp>

#include <cuda_runtime_api.h>
#include <nccl.h>
#include <spawn.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

extern char** environ;

#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 27, 0)
#define SOVA_HAVE_NCCL_WINDOWS 1
#else
#define SOVA_HAVE_NCCL_WINDOWS 0
#endif

namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "sova_nccl_allreduce: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

void nccl_check(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) {
    std::fprintf(stderr, "sova_nccl_allreduce: %s: %s\n", what, ncclGetErrorString(r));
    std::exit(1);
  }
}

struct Rank {
  int device = 0;
  cudaStream_t stream = nullptr;
  ncclComm_t comm = nullptr;
  std::unique_ptr<sova::Pool> pool;  ///< the sova modes' buffers
};

/// The buffers of one mode, one per rank, and how to give them back.
struct Buffers {
  std::vector<void*> ptrs;
  std::vector<void*> reg_handles;
#if SOVA_HAVE_NCCL_WINDOWS
  std::vector<ncclWindow_t> windows;
#endif
};

bool is_sova(const std::string& mode) { return mode.rfind("sova", 0) == 0; }
bool is_nccl_mem(const std::string& mode) { return mode.rfind("ncclmem", 0) == 0; }
bool registers(const std::string& mode) { return mode.size() > 4 && mode.compare(mode.size() - 4, 4, "_reg") == 0; }
bool windows(const std::string& mode) { return mode.size() > 4 && mode.compare(mode.size() - 4, 4, "_win") == 0; }

/// The pool of the sova_win mode. NCCL's window registration needs each
/// rank's buffer to lie in ONE physical allocation, at the same offset and in
/// an allocation of the same size on every rank (window_refusal). A block
/// that is such a pool's only allocation is one chunk of its own, from the
/// chunk's first byte: no limit on a chunk's size (max_chunk 0), so a block
/// grows as one chunk; no remapping, so no free chunk is moved under it; and
/// the pool is trimmed to nothing after each size (free_buffers), so the
/// next block grows afresh rather than over a cached chunk of another size.
sova::PoolOptions window_pool_options(int device) {
  sova::PoolOptions o;
  o.device = device;
  o.max_chunk = 0;
  o.remap = false;
  return o;
}

/// Why NCCL's window registration cannot take the sova blocks `ptrs` (one
/// per rank, `bytes` each), or "" when it can. NCCL (2.27-2.28,
/// ncclDevrWindowRegisterInGroup) looks up the one physical allocation under
/// the buffer's start (cuMemGetAddressRange, cuMemRetainAllocationHandle),
/// maps that allocation alone for every peer at the same offset of its
/// symmetric VA, and checks only that the buffer's offset in it is a multiple
/// of NCCL_WIN_REQUIRED_ALIGNMENT: a buffer reaching past the allocation is
/// accepted, and the symmetric kernels then fault on the unmapped rest
/// (an illegal memory access, the context lost). In sova a physical
/// allocation is a chunk (Pool::chunks_under), so each rank's buffer must lie
/// in one chunk, at an aligned offset, with the same chunk size and offset as
/// rank 0's.
std::string window_refusal(const std::vector<Rank>& ranks, const std::vector<void*>& ptrs, std::size_t bytes) {
  std::size_t first_chunk = 0, first_offset = 0;
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    std::vector<sova::Pool::ChunkView> chunks;
    const sova::Pool& pool = *ranks[i].pool;
    std::ostringstream why;
    why << "rank " << i << ": ";
    if (pool.chunks_under(ptrs[i], bytes, &chunks) != cudaSuccess) {
      why << "not a live block of the rank's pool";
      return why.str();
    }
    if (chunks.size() != 1) {
      why << "the buffer lies over " << chunks.size() << " physical chunks; NCCL maps only the first for its peers";
      return why.str();
    }
    const std::size_t offset = reinterpret_cast<std::uintptr_t>(ptrs[i]) - (pool.va_base() + chunks[0].offset);
#if SOVA_HAVE_NCCL_WINDOWS
    if (offset % NCCL_WIN_REQUIRED_ALIGNMENT != 0) {
      why << "offset " << offset << " in its chunk is not a multiple of " << NCCL_WIN_REQUIRED_ALIGNMENT;
      return why.str();
    }
#endif
    if (i == 0) {
      first_chunk = chunks[0].bytes;
      first_offset = offset;
    } else if (chunks[0].bytes != first_chunk || offset != first_offset) {
      why << "a chunk of " << chunks[0].bytes << " bytes at offset " << offset << ", rank 0's " << first_chunk << " at "
          << first_offset << "; NCCL needs the same on every rank";
      return why.str();
    }
  }
  return "";
}

/// Allocates and registers `bytes` per rank; false (after printing why) when NCCL
/// refused, or window_refusal did before NCCL saw the buffers.
bool make_buffers(const std::string& mode, std::vector<Rank>& ranks, std::size_t bytes, Buffers* b) {
  for (Rank& r : ranks) {
    cuda_check(cudaSetDevice(r.device), "cudaSetDevice");
    void* p = nullptr;
    if (is_sova(mode)) {
      p = r.pool->allocate(bytes, r.stream);
    } else if (is_nccl_mem(mode)) {
      nccl_check(ncclMemAlloc(&p, bytes), "ncclMemAlloc");
    } else {
      cuda_check(cudaMalloc(&p, bytes), "cudaMalloc");
    }
    cuda_check(cudaStreamSynchronize(r.stream), "cudaStreamSynchronize");
    b->ptrs.push_back(p);
  }
  if (registers(mode)) {
    for (std::size_t i = 0; i < ranks.size(); ++i) {
      void* handle = nullptr;
      const ncclResult_t res = ncclCommRegister(ranks[i].comm, b->ptrs[i], bytes, &handle);
      if (res != ncclSuccess) {
        std::printf("%s: ncclCommRegister of %zu MiB on rank %zu refused: %s (%s)\n", mode.c_str(), bytes / kMiB, i,
                    ncclGetErrorString(res), ncclGetLastError(ranks[i].comm));
        return false;
      }
      b->reg_handles.push_back(handle);
    }
  }
  if (windows(mode)) {
#if SOVA_HAVE_NCCL_WINDOWS
    if (is_sova(mode)) {
      const std::string refusal = window_refusal(ranks, b->ptrs, bytes);
      if (!refusal.empty()) {
        std::printf("%s: a window of %zu MiB refused before NCCL: %s\n", mode.c_str(), bytes / kMiB, refusal.c_str());
        return false;
      }
    }
    b->windows.resize(ranks.size());
    // Collective: every rank's call in one group (one thread drives all ranks).
    nccl_check(ncclGroupStart(), "ncclGroupStart");
    std::vector<ncclResult_t> results(ranks.size(), ncclSuccess);
    for (std::size_t i = 0; i < ranks.size(); ++i) {
      results[i] = ncclCommWindowRegister(ranks[i].comm, b->ptrs[i], bytes, &b->windows[i], NCCL_WIN_COLL_SYMMETRIC);
    }
    const ncclResult_t end = ncclGroupEnd();
    for (std::size_t i = 0; i < ranks.size(); ++i) {
      if (results[i] != ncclSuccess || end != ncclSuccess) {
        std::printf("%s: ncclCommWindowRegister of %zu MiB refused on rank %zu: %s / group %s (%s)\n", mode.c_str(),
                    bytes / kMiB, i, ncclGetErrorString(results[i]), ncclGetErrorString(end),
                    ncclGetLastError(ranks[i].comm));
        b->windows.clear();
        return false;
      }
    }
#else
    std::printf("%s: this NCCL (%d) has no ncclCommWindowRegister\n", mode.c_str(), NCCL_VERSION_CODE);
    return false;
#endif
  }
  return true;
}

void free_buffers(const std::string& mode, std::vector<Rank>& ranks, Buffers* b) {
#if SOVA_HAVE_NCCL_WINDOWS
  if (!b->windows.empty()) {
    for (std::size_t i = 0; i < ranks.size(); ++i) (void)ncclCommWindowDeregister(ranks[i].comm, b->windows[i]);
  }
#endif
  for (std::size_t i = 0; i < b->reg_handles.size(); ++i) (void)ncclCommDeregister(ranks[i].comm, b->reg_handles[i]);
  for (std::size_t i = 0; i < b->ptrs.size(); ++i) {
    Rank& r = ranks[i];
    cuda_check(cudaSetDevice(r.device), "cudaSetDevice");
    cuda_check(cudaStreamSynchronize(r.stream), "cudaStreamSynchronize");
    if (is_sova(mode)) {
      r.pool->deallocate(b->ptrs[i], r.stream);
      if (windows(mode)) {
        cuda_check(cudaStreamSynchronize(r.stream), "cudaStreamSynchronize");
        r.pool->trim_to(0);  // the next size's block grows as a chunk of its own (window_pool_options)
      }
    } else if (is_nccl_mem(mode)) {
      nccl_check(ncclMemFree(b->ptrs[i]), "ncclMemFree");
    } else {
      cuda_check(cudaFree(b->ptrs[i]), "cudaFree");
    }
  }
  *b = Buffers{};
}

void all_reduce(std::vector<Rank>& ranks, const Buffers& b, std::size_t count) {
  nccl_check(ncclGroupStart(), "ncclGroupStart");
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    nccl_check(ncclAllReduce(b.ptrs[i], b.ptrs[i], count, ncclFloat, ncclSum, ranks[i].comm, ranks[i].stream),
               "ncclAllReduce");
  }
  nccl_check(ncclGroupEnd(), "ncclGroupEnd");
}

void sync_all(std::vector<Rank>& ranks) {
  for (Rank& r : ranks) cuda_check(cudaStreamSynchronize(r.stream), "cudaStreamSynchronize");
}

/// Each rank's buffer set to 1.0f, one all-reduce, then every element must be n.
bool check_sum(std::vector<Rank>& ranks, const Buffers& b, std::size_t count) {
  const float one = 1.0f;
  std::uint32_t bits = 0;
  std::memcpy(&bits, &one, sizeof bits);
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    cuda_check(cudaSetDevice(ranks[i].device), "cudaSetDevice");
    // cudaMemsetAsync sets bytes: 1.0f is 0x3f800000, not a byte pattern;
    // write it through a host buffer once per check instead.
    std::vector<float> host(std::min<std::size_t>(count, 1 << 20), 1.0f);
    for (std::size_t off = 0; off < count; off += host.size()) {
      const std::size_t n = std::min(host.size(), count - off);
      cuda_check(cudaMemcpyAsync(static_cast<float*>(b.ptrs[i]) + off, host.data(), n * sizeof(float),
                                 cudaMemcpyHostToDevice, ranks[i].stream),
                 "cudaMemcpyAsync");
      cuda_check(cudaStreamSynchronize(ranks[i].stream), "cudaStreamSynchronize");
    }
  }
  all_reduce(ranks, b, count);
  sync_all(ranks);
  const float want = static_cast<float>(ranks.size());
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    float first = 0, last = 0;
    cuda_check(cudaSetDevice(ranks[i].device), "cudaSetDevice");
    cuda_check(cudaMemcpy(&first, b.ptrs[i], sizeof first, cudaMemcpyDeviceToHost), "cudaMemcpy");
    cuda_check(cudaMemcpy(&last, static_cast<float*>(b.ptrs[i]) + count - 1, sizeof last, cudaMemcpyDeviceToHost),
               "cudaMemcpy");
    if (first != want || last != want) {
      std::printf("wrong sum on rank %zu: %g and %g, want %g\n", i, first, last, want);
      return false;
    }
  }
  return true;
}

bool arg(const char* a, const char* name, std::string* value) {
  const std::size_t n = std::strlen(name);
  if (std::strncmp(a, name, n) != 0 || a[n] != '=') return false;
  *value = a + n + 1;
  return true;
}

struct Settings {
  std::size_t min_mib = 1, max_mib = 1024;
  int iters = 20, reps = 5;
  bool header = true;  ///< the NCCL line and the table's header (--no-header: a later mode's process)
};

/// Runs every mode in a process of its own (this program with --modes=MODE),
/// one after the other: a mode whose CUDA context is lost (a sticky error
/// such as an illegal memory access) or that exits on an error ends alone.
/// Returns 0 when every mode's process did.
int run_each_mode(const std::vector<std::string>& modes, const Settings& s) {
  int status = 0;
  for (std::size_t m = 0; m < modes.size(); ++m) {
    std::fflush(stdout);
    std::vector<std::string> args = {"sova_nccl_allreduce",
                                     "--modes=" + modes[m],
                                     "--min-mib=" + std::to_string(s.min_mib),
                                     "--max-mib=" + std::to_string(s.max_mib),
                                     "--iters=" + std::to_string(s.iters),
                                     "--reps=" + std::to_string(s.reps)};
    if (m > 0 || !s.header) args.push_back("--no-header");
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid = 0;
    if (posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv.data(), environ) != 0) {
      std::fprintf(stderr, "sova_nccl_allreduce: cannot start the process of mode %s\n", modes[m].c_str());
      return 1;
    }
    int wstatus = 0;
    while (waitpid(pid, &wstatus, 0) < 0) {
    }
    if (WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0) continue;
    status = 1;
    if (WIFEXITED(wstatus)) {
      std::printf("%s: FAILED (exit %d); the other modes go on\n", modes[m].c_str(), WEXITSTATUS(wstatus));
    } else {
      std::printf("%s: FAILED (signal %d); the other modes go on\n", modes[m].c_str(), WTERMSIG(wstatus));
    }
  }
  return status;
}

/// One mode, in this process: communicators on every device, the sizes, the table's lines.
int run_mode(const std::string& mode, int n, const Settings& s) {
  if (s.header) {
    int version = 0;
    nccl_check(ncclGetVersion(&version), "ncclGetVersion");
    std::printf("NCCL %d (headers %d), %d ranks, one thread, one process per mode\n", version, NCCL_VERSION_CODE, n);
    std::printf("%-12s %10s %12s %12s\n", "mode", "MiB", "median_us", "busbw_GB/s");
  }
  std::vector<Rank> ranks(n);
  std::vector<int> devices(n);
  for (int d = 0; d < n; ++d) devices[d] = d;
  std::vector<ncclComm_t> comms(n);
  nccl_check(ncclCommInitAll(comms.data(), n, devices.data()), "ncclCommInitAll");
  for (int d = 0; d < n; ++d) {
    Rank& r = ranks[d];
    r.device = d;
    r.comm = comms[d];
    cuda_check(cudaSetDevice(d), "cudaSetDevice");
    cuda_check(cudaStreamCreateWithFlags(&r.stream, cudaStreamNonBlocking), "cudaStreamCreate");
    if (!is_sova(mode)) continue;
    sova::PoolOptions o = windows(mode) ? window_pool_options(d) : sova::PoolOptions{};
    o.device = d;
    o.handle_types = cudaMemHandleTypePosixFileDescriptor;
    r.pool = std::make_unique<sova::Pool>(o);
    std::vector<cudaMemAccessDesc> access;
    for (int e = 0; e < n; ++e) {
      if (e == d) continue;
      cudaMemAccessDesc a{};
      a.location.type = cudaMemLocationTypeDevice;
      a.location.id = e;
      a.flags = cudaMemAccessFlagsProtReadWrite;
      access.push_back(a);
    }
    cuda_check(r.pool->set_access(access.data(), access.size()), "sova set_access for the peers");
  }

  int status = 0;
  for (std::size_t mib = s.min_mib; mib <= s.max_mib; mib *= 4) {
    const std::size_t bytes = mib * kMiB, count = bytes / sizeof(float);
    Buffers b;
    if (!make_buffers(mode, ranks, bytes, &b)) {
      status = 1;
      free_buffers(mode, ranks, &b);
      break;
    }
    if (!check_sum(ranks, b, count)) status = 1;
    for (int w = 0; w < 3; ++w) all_reduce(ranks, b, count);
    sync_all(ranks);
    std::vector<double> us;
    for (int r = 0; r < s.reps; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      for (int k = 0; k < s.iters; ++k) all_reduce(ranks, b, count);
      sync_all(ranks);
      us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / s.iters);
    }
    std::sort(us.begin(), us.end());
    const double median = us[us.size() / 2];
    const double busbw = static_cast<double>(bytes) * 2.0 * (n - 1) / n / (median * 1e-6) / 1e9;
    std::printf("%-12s %10zu %12.1f %12.1f\n", mode.c_str(), mib, median, busbw);
    std::fflush(stdout);
    free_buffers(mode, ranks, &b);
  }
  for (Rank& r : ranks) {
    cuda_check(cudaSetDevice(r.device), "cudaSetDevice");
    cuda_check(cudaStreamSynchronize(r.stream), "cudaStreamSynchronize");
    if (r.pool) r.pool->trim_to(0);
    nccl_check(ncclCommDestroy(r.comm), "ncclCommDestroy");
    cuda_check(cudaStreamDestroy(r.stream), "cudaStreamDestroy");
  }
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  std::string modes_arg = "sova,sova_reg,sova_win,ncclmem,ncclmem_reg,ncclmem_win,cudamalloc", v;
  Settings settings;
  for (int i = 1; i < argc; ++i) {
    if (arg(argv[i], "--modes", &v))
      modes_arg = v;
    else if (arg(argv[i], "--min-mib", &v))
      settings.min_mib = std::strtoull(v.c_str(), nullptr, 10);
    else if (arg(argv[i], "--max-mib", &v))
      settings.max_mib = std::strtoull(v.c_str(), nullptr, 10);
    else if (arg(argv[i], "--iters", &v))
      settings.iters = std::atoi(v.c_str());
    else if (arg(argv[i], "--reps", &v))
      settings.reps = std::atoi(v.c_str());
    else if (std::strcmp(argv[i], "--no-header") == 0)
      settings.header = false;
    else {
      std::fprintf(stderr, "sova_nccl_allreduce: unknown argument %s (see the source's header)\n", argv[i]);
      return 2;
    }
  }
  std::vector<std::string> modes;
  std::stringstream ss(modes_arg);
  for (std::string m; std::getline(ss, m, ',');) {
    static const char* known[] = {"sova",        "sova_reg",    "sova_win",  "ncclmem",
                                  "ncclmem_reg", "ncclmem_win", "cudamalloc"};
    if (std::find_if(std::begin(known), std::end(known), [&](const char* k) { return m == k; }) == std::end(known)) {
      std::fprintf(stderr, "sova_nccl_allreduce: unknown mode '%s'\n", m.c_str());
      return 2;
    }
    modes.push_back(m);
  }
  if (modes.empty() || settings.min_mib < 1 || settings.max_mib < settings.min_mib || settings.iters < 1 ||
      settings.reps < 1) {
    std::fprintf(stderr, "sova_nccl_allreduce: a mode, positive sizes, --iters and --reps, min <= max\n");
    return 2;
  }
  const char* nvls = std::getenv("NCCL_NVLS_ENABLE");
  if (nvls == nullptr || std::strcmp(nvls, "0") != 0) {
    std::fprintf(stderr, "sova_nccl_allreduce: set NCCL_NVLS_ENABLE=0 (NVLink multicast stays off here)\n");
    return 2;
  }
  int n = 0;
  cuda_check(cudaGetDeviceCount(&n), "cudaGetDeviceCount");  // no context yet: the modes' processes make their own
  if (n < 2) {
    std::fprintf(stderr, "sova_nccl_allreduce: needs 2 or more devices, CUDA sees %d\n", n);
    return 2;
  }
  if (modes.size() > 1) return run_each_mode(modes, settings);
  return run_mode(modes[0], n, settings);
}
