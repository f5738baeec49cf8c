// sova benchmarks — shared helpers (see common.hpp).
#include "common.hpp"

#include <sova/driver.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

namespace sova_bench {

bool have_gpu() {
  static const bool gpu = [] {
    int count = 0;
    return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
  }();
  return gpu;
}

std::string device_name() {
  cudaDeviceProp prop{};
  if (!have_gpu() || cudaGetDeviceProperties(&prop, 0) != cudaSuccess) return "no GPU";
  return prop.name;
}

sova::SimDriver& shared_sim() {
  static sova::SimDriver* sim = new sova::SimDriver();  // leaked on purpose, see header
  return *sim;
}

sova::SimDriver* capi_sim() {
  static sova::SimDriver* const sim = []() -> sova::SimDriver* {
    if (!have_gpu()) {
      cudaError_t err = sova::set_process_driver(&shared_sim());
      if (err != cudaSuccess) {
        std::fprintf(stderr, "sova_bench: cannot put sova's C API on the host simulation: %s\n",
                     cudaGetErrorString(err));
        std::exit(2);
      }
    }
    // SOVA_DRIVER=sim may have chosen the library's own simulation even on a GPU machine.
    sova::Driver& driver = sova::process_driver();
    return std::strcmp(driver.name(), "sim") == 0 ? static_cast<sova::SimDriver*>(&driver) : nullptr;
  }();
  return sim;
}

void check_cuda(cudaError_t err, const char* what) {
  if (err != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(err));
}

Stream::Stream(sova::SimDriver* sim) : sim_(sim) {
  if (sim_ != nullptr) {
    stream_ = sim_->create_stream();
  } else {
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  }
}

Stream::~Stream() {
  if (sim_ != nullptr) {
    sim_->stream_synchronize(stream_);
    sim_->destroy_stream(stream_);
  } else {
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
  }
}

void Stream::sync() const {
  check_cuda(sim_ != nullptr ? sim_->stream_synchronize(stream_) : cudaStreamSynchronize(stream_),
             "stream synchronize");
}

}  // namespace sova_bench
