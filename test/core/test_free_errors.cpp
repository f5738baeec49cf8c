// A refused free says what happened: a foreign pointer, an interior pointer
// and a double free each get their own words (Pool::deallocate's message,
// Pool::describe_pointer), and the refusal changes nothing.
#include "core/sim_pool_fixture.hpp"

#include <cstdio>
#include <string>

using namespace sova;
using namespace sova::test;

namespace {

std::string hex(const void* p) {
  char text[32];
  std::snprintf(text, sizeof text, "%p", p);
  return text;
}

/// The message Pool::deallocate throws for `ptr`, or "" when it frees it.
std::string free_error(Pool& pool, void* ptr, cudaStream_t s) {
  try {
    pool.deallocate(ptr, s);
  } catch (const Error& e) {
    CHECK(e.error() == cudaErrorInvalidValue);
    return e.what();
  }
  return "";
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("free errors: foreign, interior and double frees are told apart", "[core][free_errors]") {
  SimDriver sim(small_sim());
  Pool pool(options_on(sim));
  cudaStream_t s = sim.create_stream();
  char* block = static_cast<char*>(pool.allocate(10000, s));
  void* other = pool.allocate(4096, s);
  const PoolStats before = pool.stats();

  SECTION("a pointer outside the pool") {
    int on_the_stack = 0;
    const std::string m = free_error(pool, &on_the_stack, s);
    INFO(m);
    CHECK(contains(m, "cannot free " + hex(&on_the_stack)));
    CHECK(contains(m, "not allocated by this pool"));
    CHECK(pool.describe_pointer(&on_the_stack) == "not allocated by this pool");
  }
  SECTION("a pointer inside a live block, aligned or not") {
    for (void* inside : {static_cast<void*>(block + 512), static_cast<void*>(block + 1)}) {
      const std::string m = free_error(pool, inside, s);
      INFO(m);
      CHECK(contains(m, "inside a block allocated at " + hex(block) + " (10000 bytes); free its start"));
    }
  }
  SECTION("a block freed twice") {
    pool.deallocate(other, s);
    const std::string m = free_error(pool, other, s);
    INFO(m);
    CHECK(contains(m, "cannot free " + hex(other) + ": already freed"));
    CHECK(pool.describe_pointer(other) == "already freed");
    pool.allocate(4096, s);  // back for the counts below (the stream's cache gives it again)
  }
  SECTION("a pointer into free memory past every block") {
    char* beyond = block + (std::size_t{64} << 20);
    REQUIRE(pool.contains(beyond));  // the VA range is sized for the device's memory (256 MiB)
    {
      const std::string m = free_error(pool, beyond, s);
      INFO(m);
      CHECK(contains(m, "free memory of this pool"));
    }
  }
  SECTION("a live block's start is described as such") {
    CHECK(pool.describe_pointer(block) == "a live block of this pool");
  }
  // Nothing changed: the same blocks live, the same bytes in use.
  const PoolStats after = pool.stats();
  CHECK(after.used_current == before.used_current);
  CHECK(after.live_blocks == before.live_blocks);
  CHECK(pool.block_size(block) == 10000);
  pool.deallocate(block, s);
  pool.check_invariants();
  sim.stream_synchronize(s);
  sim.destroy_stream(s);
}
