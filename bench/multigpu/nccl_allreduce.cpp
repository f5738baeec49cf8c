// sova_nccl_allreduce: an all-reduce's bus bandwidth on sova memory, with and
// without NCCL's user-buffer registration, against ncclMemAlloc's memory.
// One process, one thread driving one communicator per device
// (ncclCommInitAll), sizes from --min-mib to --max-mib (x4 steps), in place,
// float sum. For each mode, per size: the median of --reps timed runs of
// --iters all-reduces; bus bandwidth = bytes * 2 (n-1)/n / time, as
// nccl-tests reports it. The sums are checked after each size.
//
//   sova_nccl_allreduce [--modes=LIST] [--min-mib=1] [--max-mib=1024] [--iters=20] [--reps=5]
//
// Modes (default all):
//   sova          a sova::Pool block, not registered
//   sova_reg      the same block, ncclCommRegister'ed
//   sova_win      the same block, ncclCommWindowRegister'ed (NCCL_WIN_COLL_SYMMETRIC;
//                 NCCL >= 2.27), the symmetric kernels' route
//   ncclmem       ncclMemAlloc, not registered
//   ncclmem_reg   ncclMemAlloc, ncclCommRegister'ed
//   ncclmem_win   ncclMemAlloc, window-registered
//   cudamalloc    cudaMalloc, not registered (the usual baseline)
// sova pools are created with POSIX file-descriptor handles (what NCCL's
// registration asks of VMM memory to map it for peers) and every peer device
// granted read-write access. A registration NCCL refuses is reported with
// its error and that mode skipped; the exit status is then 1.
// Leave NVLink multicast off on shared machines: NCCL_NVLS_ENABLE=0.
#include <sova/pool.hpp>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

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
  std::unique_ptr<sova::Pool> pool;
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

/// Allocates and registers `bytes` per rank; false (after printing why) when NCCL refused.
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

}  // namespace

int main(int argc, char** argv) {
  std::string modes_arg = "sova,sova_reg,sova_win,ncclmem,ncclmem_reg,ncclmem_win,cudamalloc", v;
  std::size_t min_mib = 1, max_mib = 1024;
  int iters = 20, reps = 5;
  for (int i = 1; i < argc; ++i) {
    if (arg(argv[i], "--modes", &v)) modes_arg = v;
    else if (arg(argv[i], "--min-mib", &v)) min_mib = std::strtoull(v.c_str(), nullptr, 10);
    else if (arg(argv[i], "--max-mib", &v)) max_mib = std::strtoull(v.c_str(), nullptr, 10);
    else if (arg(argv[i], "--iters", &v)) iters = std::atoi(v.c_str());
    else if (arg(argv[i], "--reps", &v)) reps = std::atoi(v.c_str());
    else {
      std::fprintf(stderr, "sova_nccl_allreduce: unknown argument %s (see the source's header)\n", argv[i]);
      return 2;
    }
  }
  std::vector<std::string> modes;
  std::stringstream ss(modes_arg);
  for (std::string m; std::getline(ss, m, ',');) {
    static const char* known[] = {"sova", "sova_reg", "sova_win", "ncclmem", "ncclmem_reg", "ncclmem_win", "cudamalloc"};
    if (std::find_if(std::begin(known), std::end(known), [&](const char* k) { return m == k; }) == std::end(known)) {
      std::fprintf(stderr, "sova_nccl_allreduce: unknown mode '%s'\n", m.c_str());
      return 2;
    }
    modes.push_back(m);
  }
  if (min_mib < 1 || max_mib < min_mib || iters < 1 || reps < 1) {
    std::fprintf(stderr, "sova_nccl_allreduce: sizes, --iters and --reps must be positive, min <= max\n");
    return 2;
  }
  int n = 0;
  cuda_check(cudaGetDeviceCount(&n), "cudaGetDeviceCount");
  if (n < 2) {
    std::fprintf(stderr, "sova_nccl_allreduce: needs 2 or more devices, CUDA sees %d\n", n);
    return 2;
  }
  const char* nvls = std::getenv("NCCL_NVLS_ENABLE");
  if (nvls == nullptr || std::strcmp(nvls, "0") != 0) {
    std::fprintf(stderr, "sova_nccl_allreduce: set NCCL_NVLS_ENABLE=0 (NVLink multicast stays off here)\n");
    return 2;
  }
  int version = 0;
  nccl_check(ncclGetVersion(&version), "ncclGetVersion");
  std::printf("NCCL %d (headers %d), %d ranks, one thread\n", version, NCCL_VERSION_CODE, n);

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
    sova::PoolOptions o;
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
  std::printf("%-12s %10s %12s %12s\n", "mode", "MiB", "median_us", "busbw_GB/s");
  for (const std::string& mode : modes) {
    for (std::size_t mib = min_mib; mib <= max_mib; mib *= 4) {
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
      for (int r = 0; r < reps; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        for (int k = 0; k < iters; ++k) all_reduce(ranks, b, count);
        sync_all(ranks);
        us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / iters);
      }
      std::sort(us.begin(), us.end());
      const double median = us[us.size() / 2];
      const double busbw = static_cast<double>(bytes) * 2.0 * (n - 1) / n / (median * 1e-6) / 1e9;
      std::printf("%-12s %10zu %12.1f %12.1f\n", mode.c_str(), mib, median, busbw);
      std::fflush(stdout);
      free_buffers(mode, ranks, &b);
    }
  }
  for (Rank& r : ranks) {
    cuda_check(cudaSetDevice(r.device), "cudaSetDevice");
    cuda_check(cudaStreamSynchronize(r.stream), "cudaStreamSynchronize");
    r.pool->trim_to(0);
    nccl_check(ncclCommDestroy(r.comm), "ncclCommDestroy");
    cuda_check(cudaStreamDestroy(r.stream), "cudaStreamDestroy");
  }
  return status;
}
