// replay/ — the replay's streams (see streams.hpp).
#include "streams.hpp"

namespace sova_bench {

ReplayStreams::ReplayStreams(sova::SimDriver* sim, const std::vector<std::uint64_t>& trace_streams) : sim_(sim) {
  handles_.reserve(trace_streams.size());
  for (const std::uint64_t id : trace_streams) {
    if (id == 0) {
      handles_.push_back(nullptr);  // the legacy default stream
    } else {
      owned_.push_back(std::make_unique<Stream>(sim));
      handles_.push_back(owned_.back()->get());
    }
  }
}

void ReplayStreams::sync() const {
  for (const cudaStream_t s : handles_) {
    check_cuda(sim_ != nullptr ? sim_->stream_synchronize(s) : cudaStreamSynchronize(s), "stream synchronize");
  }
}

}  // namespace sova_bench
