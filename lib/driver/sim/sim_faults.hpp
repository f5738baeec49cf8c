// sova sim — faults of modelled device work: a copy (memcpy_async) or a
// kernel that says what it touches (SimDriver::launch_touching) reaching
// bytes of reserved VA that are not mapped, or mapped without the access it
// needs, at the moment it runs. On a GPU that is an illegal address and the
// context is lost (cudaErrorIllegalAddress, cudaErrorLaunchFailure); a
// plain host memcpy into the simulation's PROT_NONE reservation would
// SIGSEGV on a stream worker with no word of which work did it.
//
// With SimConfig::abort_on_fault (the default) a fault prints what faulted
// and aborts the process: no test goes on past one. Without, it is recorded
// (sticky: the count and the first one's words) for the test to read, the
// faulting work does nothing, and the first is printed on stderr.
//
// Thread safety: one mutex; report() is called from stream workers.
#pragma once

#include <cstddef>
#include <mutex>
#include <string>

namespace sova::sim {

class SimFaults {
 public:
  explicit SimFaults(bool abort_on_fault) noexcept : abort_(abort_on_fault) {}

  /// One fault, in words ("a copy of ... : ... is not mapped"). Aborts with
  /// abort_on_fault.
  void report(const std::string& what) noexcept;

  std::size_t count() const;
  /// The first fault's words; empty when none.
  std::string first() const;

 private:
  const bool abort_;
  mutable std::mutex mu_;
  std::size_t count_ = 0;
  std::string first_;
};

}  // namespace sova::sim
