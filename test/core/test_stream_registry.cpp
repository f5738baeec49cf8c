// StreamRegistry (lib/core/stream_registry.hpp) alone, on the simulation:
// one state per stream, a reused handle's state retired, fences that make
// frees known complete, and synchronizes that do it without one.
#include "core/sim_pool_fixture.hpp"

#include "core/stream_registry.hpp"
#include "core/stream_state_access.hpp"

#include <vector>

using namespace sova;
using namespace sova::detail;
using namespace sova::test;

using Access = StreamStateTestAccess;

TEST_CASE("stream registry: one state per stream, legacy handles as one", "[core][streams]") {
  SimDriver sim(small_sim());
  StreamRegistry registry(sim, 0, /*check_streams=*/true);
  const cudaStream_t a = sim.create_stream();
  const cudaStream_t b = sim.create_stream();
  StreamState* sa = registry.find(a);
  StreamState* sb = registry.find(b);
  REQUIRE((sa != nullptr && sb != nullptr));
  CHECK(sa != sb);
  CHECK(registry.find(a) == sa);
  CHECK(registry.find(nullptr) == registry.find(cudaStreamLegacy));
  CHECK(registry.find(nullptr)->is_legacy());
  CHECK(registry.count() == 3);
  CHECK(registry.active() == 3);
  std::size_t seen = 0;
  registry.for_each_state([&](StreamState*) { ++seen; });
  CHECK(seen == 3);
  // A new stream id under the same handle: the old state is retired.
  StreamState* renewed = registry.renew(sa, sa->stream_id() + 1000);
  REQUIRE(renewed != nullptr);
  CHECK(renewed != sa);
  CHECK(Access::retired(*sa));
  CHECK(registry.find(a) == renewed);
  CHECK(registry.retired_count() == 1);
  CHECK(registry.count() == 4);
  sim.destroy_stream(a);
  sim.destroy_stream(b);
}

TEST_CASE("stream registry: a fence makes a stream's frees complete once its work is done", "[core][streams]") {
  SimDriver sim(small_sim());
  StreamRegistry registry(sim, 0, /*check_streams=*/true);
  const cudaStream_t stream = sim.create_stream();
  StreamState* s = registry.find(stream);
  REQUIRE(s != nullptr);
  std::lock_guard<SpinLock> lock(Access::lock(*s));
  // No free in the open epoch: nothing to cover, no event.
  registry.record_fence_locked(s, stream);
  CHECK(registry.events_recorded() == 0);
  Access::stamp_free(*s);
  const std::uint64_t epoch = Access::epoch(*s);
  registry.record_fence_locked(s, stream);
  CHECK(registry.events_recorded() == 1);
  CHECK(Access::epoch(*s) == epoch + 1);
  REQUIRE(sim.stream_synchronize(stream) == cudaSuccess);
  registry.poll_fences_locked(s);
  CHECK(Access::safe_epoch(*s) == epoch);
  CHECK(Access::fences(*s) == 0);
  sim.destroy_stream(stream);
}

TEST_CASE("stream registry: a synchronize completes what no fence covers", "[core][streams]") {
  SimDriver sim(small_sim());
  StreamRegistry registry(sim, 0, /*check_streams=*/true);
  const cudaStream_t stream = sim.create_stream();
  StreamState* s = registry.find(stream);
  REQUIRE(s != nullptr);
  Access::stamp_free(*s);
  const std::uint64_t epoch = Access::epoch(*s);
  const std::size_t synchronizes = sim.counters().device_synchronizes;
  REQUIRE(registry.synchronize(std::vector<StreamState*>{s}));
  CHECK(sim.counters().device_synchronizes == synchronizes + 1);
  CHECK(Access::safe_epoch(*s) == epoch);
  CHECK_FALSE(Access::open_epoch_has_frees(*s));
  // complete_through: already complete, no wait.
  bool waited = false;
  CHECK(registry.complete_through(s, epoch, &waited));
  CHECK_FALSE(waited);
  // Frees of a later epoch: waited for.
  Access::stamp_free(*s);
  CHECK(registry.complete_through(s, Access::epoch(*s), &waited));
  CHECK(waited);
  sim.destroy_stream(stream);
}

TEST_CASE("stream registry: stranded bytes never go below zero", "[core][streams]") {
  SimDriver sim(small_sim());
  StreamRegistry registry(sim, 0, /*check_streams=*/false);
  CHECK(registry.stranded() == 0);
  registry.unstrand(100);
  CHECK(registry.stranded() == 0);
  CHECK(registry.recount_stranded() == 0);
  registry.set_active(5);
  CHECK(registry.active() == 5);
}
