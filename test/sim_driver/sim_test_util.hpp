// Helpers shared by the SimDriver unit tests.
#pragma once

#include "support/access_desc.hpp"

#include <sova/sim.hpp>

#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>

namespace sova::simtest {

inline constexpr std::size_t kG = std::size_t{2} << 20;  // SimConfig's default granularity

using sova::test::access_desc;

inline cudaError_t set_rw(SimDriver& sim, std::uintptr_t va, std::size_t bytes, int device = 0) {
  const cudaMemAccessDesc d = access_desc(device, cudaMemAccessFlagsProtReadWrite);
  return sim.set_access(va, bytes, &d, 1);
}

inline char* ptr(std::uintptr_t va) { return reinterpret_cast<char*>(va); }

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif

/// Whether touching `*p` (a write if `write`, else a read) faults: tried in a
/// forked child, which must die of SIGSEGV (or SIGBUS). A sanitizer runtime
/// may turn the signal into an error exit, so there any abnormal end counts.
inline bool touch_faults(volatile char* p, bool write) {
  std::fflush(nullptr);  // or the child may write the parent's buffered output again
  const pid_t pid = ::fork();
  if (pid == 0) {
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    ::sigaction(SIGSEGV, &dfl, nullptr);  // not Catch2's fatal-signal reporter
    ::sigaction(SIGBUS, &dfl, nullptr);
    if (write)
      *p = 42;
    else
      (void)*p;
    ::_exit(0);
  }
  if (pid < 0) return false;
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (WIFSIGNALED(status) && (WTERMSIG(status) == SIGSEGV || WTERMSIG(status) == SIGBUS)) return true;
  return kSanitized && !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

}  // namespace sova::simtest
