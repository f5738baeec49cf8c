// libFuzzer entry point (built with -Dfuzz=true, clang only; docs/fuzzing.md):
// each input is a program for the pool-operation interpreter, run on one host
// thread with every check. A broken promise aborts with its description, so
// libFuzzer keeps the input as a crash.
#include "fuzz/interpreter.hpp"

#include <cstdio>
#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    sova::fuzz::run_program(data, size);
  } catch (const sova::fuzz::Failure& failure) {
    std::fprintf(stderr, "sova fuzz: %s\n", failure.what());
    std::abort();
  }
  return 0;
}
