// sova seed loop on the host simulation (see seed.hpp): the same loop, the
// "kernel" host work on a sim stream. Timings are host timings, not GPU ones.
#include "seed.hpp"

#include <cstring>
#include <stdexcept>

namespace sova_bench {
namespace {

// The sim's kernel: fill every byte of the block (memset), then check one word
// per 4 KiB page. This host has far less memory bandwidth than a GPU, so a full
// read-modify pass would bury the allocator under the "kernel"; one word a page
// still faults on memory that is not mapped or not writable, and reads back
// wrong if the block is not the memory just written.
void sim_kernel(void* p, std::size_t bytes, unsigned char fill, std::atomic<std::uint64_t>& errors) {
  std::memset(p, fill, bytes);
  const std::uint32_t want = 0x01010101u * fill;
  std::uint64_t bad = 0;
  for (std::size_t offset = 0; offset < bytes; offset += 4096) {
    std::uint32_t got;
    std::memcpy(&got, static_cast<const unsigned char*>(p) + offset, sizeof got);
    bad += got != want;
  }
  if (bad != 0) errors.fetch_add(bad);
}

}  // namespace

SimSeed::SimSeed(sova::SimDriver& sim, std::size_t mib)
    : sim_(sim), stream_(&sim), bytes_(seed_block_bytes(mib)) {
  sova::DeviceInfo info;
  check_cuda(sim_.device_info(0, &info), "SimDriver::device_info");
  mapped_ = (bytes_ + info.granularity - 1) / info.granularity * info.granularity;
  check_cuda(sim_.address_reserve(mapped_, info.granularity, &va_), "SimDriver::address_reserve");
  check_cuda(sim_.physical_create(0, mapped_, &chunk_), "SimDriver::physical_create");
  check_cuda(sim_.map(va_, mapped_, chunk_), "SimDriver::map");
  cudaMemAccessDesc access{};
  access.location.type = cudaMemLocationTypeDevice;
  access.location.id = 0;
  access.flags = cudaMemAccessFlagsProtReadWrite;
  check_cuda(sim_.set_access(va_, mapped_, &access, 1), "SimDriver::set_access");
}

SimSeed::~SimSeed() {
  sim_.stream_synchronize(stream_.get());
  sim_.unmap(va_, mapped_);
  sim_.physical_release(chunk_);
  sim_.address_free(va_, mapped_);
}

void* SimSeed::acquire(SeedVariant v) {
  if (v == SeedVariant::preallocated) return reinterpret_cast<void*>(va_);
  if (v != SeedVariant::sova) throw std::invalid_argument("the host simulation runs only sova and preallocated");
  void* p = nullptr;
  check_cuda(sovaMallocAsync(&p, bytes_, stream_.get()), "sovaMallocAsync");
  return p;
}

void SimSeed::release(SeedVariant v, void* p) {
  if (v == SeedVariant::sova) check_cuda(sovaFreeAsync(p, stream_.get()), "sovaFreeAsync");
}

double SimSeed::run(SeedVariant v) {
  set_seed_thresholds(threshold_, false);
  stream_.sync();
  const Clock::time_point start = Clock::now();
  for (int it = 0; it < kSeedIterations; ++it) {
    void* p = acquire(v);
    const auto fill = static_cast<unsigned char>(it + 1);
    sim_.launch(stream_.get(), [p, bytes = bytes_, fill, errors = &errors_] { sim_kernel(p, bytes, fill, *errors); });
    release(v, p);
  }
  const cudaError_t err = sim_.stream_synchronize(stream_.get());
  const double elapsed = seconds_since(start);
  check_cuda(err, "SimDriver::stream_synchronize");
  return elapsed;
}

std::uint64_t SimSeed::kernel_errors() {
  stream_.sync();
  return errors_.load();
}

}  // namespace sova_bench
