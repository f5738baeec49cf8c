// sova C API — the per-thread last error message (last_error.hpp).
#include "capi/last_error.hpp"

#include "base/no_gpu_hint.hpp"

#include <sova/sova.h>

#include <cstdio>
#include <cstring>

namespace sova::capi {
namespace {

/// One per thread, zero-initialized, no destructor: usable from any thread
/// at any time, thread exit included. Not on a hot path: the default TLS model.
struct LastError {
  char message[1024];
  char detail[960];  // an allocation's failure carries the pool's figures (Pool::describe_allocation_failure)
  cudaError_t detail_error;
  bool has_detail;
};
constinit thread_local LastError t_last{};

}  // namespace

void note_detail(cudaError_t error, const char* text) noexcept {
  if (text == nullptr) return;
  // sova's exception messages begin with "sova: "; the function's name takes its place.
  if (std::strncmp(text, "sova: ", 6) == 0) text += 6;
  std::snprintf(t_last.detail, sizeof t_last.detail, "%s", text);
  t_last.detail_error = error;
  t_last.has_detail = true;
}

bool detail_noted(cudaError_t error) noexcept { return t_last.has_detail && t_last.detail_error == error; }

cudaError_t record_error(const char* function, cudaError_t error) noexcept {
  LastError& last = t_last;
  const bool use_detail = last.has_detail && last.detail_error == error;
  last.has_detail = false;
  int n;
  if (use_detail) {
    n = std::snprintf(last.message, sizeof last.message, "%s: %s", function, last.detail);
  } else if (detail::means_no_gpu(error)) {
    // The runtime's description misleads here ("CUDA driver version is
    // insufficient" where no driver exists): the hint below says it.
    n = std::snprintf(last.message, sizeof last.message, "%s: %s", function, cudaGetErrorName(error));
  } else {
    n = std::snprintf(last.message, sizeof last.message, "%s: %s (%s)", function, cudaGetErrorName(error),
                      cudaGetErrorString(error));
  }
  if (n > 0 && static_cast<std::size_t>(n) < sizeof last.message && detail::means_no_gpu(error) &&
      std::strstr(last.message, "SOVA_DRIVER") == nullptr) {
    std::snprintf(last.message + n, sizeof last.message - static_cast<std::size_t>(n), ": %s", detail::kNoGpuHint);
  }
  return error;
}

const char* last_error_message() noexcept { return t_last.message; }

}  // namespace sova::capi

const char* sovaGetLastErrorMessage(void) { return sova::capi::last_error_message(); }
