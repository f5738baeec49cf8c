// sova sim — faults of modelled device work (sim_faults.hpp).
#include "sim_faults.hpp"

#include <cstdio>
#include <cstdlib>

namespace sova::sim {

void SimFaults::report(const std::string& what) noexcept {
  if (abort_) {
    std::fprintf(stderr, "sova sim: device fault (cudaErrorIllegalAddress on a GPU): %s\n", what.c_str());
    std::abort();
  }
  std::lock_guard lock(mu_);
  if (count_++ == 0) {
    std::fprintf(stderr, "sova sim: device fault (cudaErrorIllegalAddress on a GPU), recorded: %s\n", what.c_str());
    try {
      first_ = what;
    } catch (...) {
      // Out of host memory for the words: the count still says it.
    }
  }
}

std::size_t SimFaults::count() const {
  std::lock_guard lock(mu_);
  return count_;
}

std::string SimFaults::first() const {
  std::lock_guard lock(mu_);
  return first_;
}

}  // namespace sova::sim
