// SimDriver: stream order, delays, events, cross-stream waits, the legacy and
// per-thread default streams, handle reuse and shutdown.
//
// Ordering is checked with flags written by earlier work and read by later
// work: a missing dependency shows up as a flag read too early, because the
// earlier work sits behind a delay much longer than the scheduling noise.
#include "support/catch.hpp"

#include "driver/sim/sim_streams.hpp"
#include "sim_test_util.hpp"
#include "support/scoped_current_device.hpp"

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

using namespace sova;
using namespace sova::simtest;
using namespace std::chrono_literals;

namespace {

using Clock = std::chrono::steady_clock;

// Long enough to dwarf thread wake-ups, even under a sanitizer.
constexpr auto kBusy = std::chrono::microseconds(200ms);

}  // namespace

// Checks that `expr` gives cudaErrorNotReady because of a kBusy delay that was
// enqueued after `t0`. On a badly overloaded machine more than kBusy may have
// passed, and then nothing can be concluded: the check is skipped rather than
// flaky. (Ordering checks through flags need no such care.)
#define CHECK_BUSY_SINCE(t0, expr) \
  do { \
    const cudaError_t busy_result_ = (expr); \
    if (Clock::now() - (t0) < kBusy) CHECK(busy_result_ == cudaErrorNotReady); \
  } while (0)

TEST_CASE("sim: launches on a stream run in submission order", "[sim_driver]") {
  SimDriver sim;
  cudaStream_t s = sim.create_stream();
  std::vector<int> seen;  // touched only by s's worker until the sync
  for (int i = 0; i < 200; ++i) {
    if (i % 50 == 0) sim.delay(s, 1ms);
    sim.launch(s, [&seen, i] { seen.push_back(i); });
  }
  REQUIRE(sim.stream_synchronize(s) == cudaSuccess);
  REQUIRE(seen.size() == 200);
  for (int i = 0; i < 200; ++i) CHECK(seen[static_cast<std::size_t>(i)] == i);
  sim.destroy_stream(s);
}

TEST_CASE("sim: a delayed stream is not ready until it has drained", "[sim_driver]") {
  SimDriver sim;
  cudaStream_t s = sim.create_stream();
  EventHandle e = nullptr;
  REQUIRE(sim.event_create(&e) == cudaSuccess);
  CHECK(sim.event_query(e) == cudaSuccess);   // never recorded: complete
  CHECK(sim.stream_query(s) == cudaSuccess);  // empty stream

  const auto t1 = Clock::now();
  sim.delay(s, kBusy);
  REQUIRE(sim.event_record(e, s) == cudaSuccess);
  CHECK_BUSY_SINCE(t1, sim.event_query(e));
  CHECK_BUSY_SINCE(t1, sim.stream_query(s));
  REQUIRE(sim.event_synchronize(e) == cudaSuccess);
  CHECK(sim.event_query(e) == cudaSuccess);
  CHECK(sim.stream_query(s) == cudaSuccess);

  SECTION("re-recording replaces the captured work") {
    const auto t2 = Clock::now();
    sim.delay(s, kBusy);
    REQUIRE(sim.event_record(e, s) == cudaSuccess);
    CHECK_BUSY_SINCE(t2, sim.event_query(e));
    REQUIRE(sim.stream_synchronize(s) == cudaSuccess);
    CHECK(sim.event_query(e) == cudaSuccess);
  }
  SECTION("an event captures only work submitted before the record") {
    REQUIRE(sim.event_record(e, s) == cudaSuccess);  // on an idle stream
    const auto t3 = Clock::now();
    sim.delay(s, kBusy);
    REQUIRE(sim.event_synchronize(e) == cudaSuccess);
    CHECK_BUSY_SINCE(t3, sim.stream_query(s));
    REQUIRE(sim.stream_synchronize(s) == cudaSuccess);
  }
  CHECK(sim.counters().events_recorded == 2);
  REQUIRE(sim.event_destroy(e) == cudaSuccess);
  CHECK(sim.event_query(e) == cudaErrorInvalidResourceHandle);
  CHECK(sim.event_destroy(e) == cudaErrorInvalidResourceHandle);
  sim.destroy_stream(s);
}

TEST_CASE("sim: stream_wait_event orders another stream's later work", "[sim_driver]") {
  SimDriver sim;
  cudaStream_t a = sim.create_stream();
  cudaStream_t b = sim.create_stream();
  EventHandle e = nullptr;
  REQUIRE(sim.event_create(&e) == cudaSuccess);
  std::atomic<bool> a_done{false};
  std::atomic<bool> b_saw_a{false};

  const auto t4 = Clock::now();
  sim.delay(a, kBusy);
  sim.launch(a, [&] { a_done = true; });
  REQUIRE(sim.event_record(e, a) == cudaSuccess);
  REQUIRE(sim.stream_wait_event(b, e) == cudaSuccess);

  SECTION("the wait holds even if the event is re-recorded later") {
    cudaStream_t c = sim.create_stream();
    REQUIRE(sim.event_record(e, c) == cudaSuccess);  // idle stream: complete at once
    REQUIRE(sim.event_synchronize(e) == cudaSuccess);
    sim.destroy_stream(c);
  }
  sim.launch(b, [&] { b_saw_a = a_done.load(); });
  CHECK_BUSY_SINCE(t4, sim.stream_query(b));
  REQUIRE(sim.stream_synchronize(b) == cudaSuccess);
  CHECK(b_saw_a);
  CHECK(sim.counters().stream_waits == 1);

  SECTION("waiting for an event never recorded is a no-op") {
    EventHandle fresh = nullptr;
    REQUIRE(sim.event_create(&fresh) == cudaSuccess);
    const auto t5 = Clock::now();
    sim.delay(a, kBusy);
    REQUIRE(sim.stream_wait_event(b, fresh) == cudaSuccess);
    REQUIRE(sim.stream_synchronize(b) == cudaSuccess);
    CHECK_BUSY_SINCE(t5, sim.stream_query(a));
    REQUIRE(sim.event_destroy(fresh) == cudaSuccess);
  }
  REQUIRE(sim.event_destroy(e) == cudaSuccess);
  CHECK(sim.stream_wait_event(b, e) == cudaErrorInvalidResourceHandle);
  sim.destroy_stream(a);
  sim.destroy_stream(b);
}

TEST_CASE("sim: without a wait, streams run concurrently", "[sim_driver]") {
  SimDriver sim;
  cudaStream_t a = sim.create_stream();
  cudaStream_t b = sim.create_stream();
  const auto t6 = Clock::now();
  sim.delay(a, kBusy);
  std::atomic<bool> ran{false};
  sim.launch(b, [&] { ran = true; });
  REQUIRE(sim.stream_synchronize(b) == cudaSuccess);
  CHECK(ran);
  CHECK_BUSY_SINCE(t6, sim.stream_query(a));  // b did not wait for a
  REQUIRE(sim.device_synchronize(0) == cudaSuccess);
  CHECK(sim.stream_query(a) == cudaSuccess);
  CHECK(sim.counters().device_synchronizes == 1);
  sim.destroy_stream(a);
  sim.destroy_stream(b);
}

TEST_CASE("sim: the legacy stream synchronizes with blocking streams only", "[sim_driver]") {
  SimDriver sim;
  std::atomic<bool> first{false};
  std::atomic<bool> saw_first{false};
  const cudaStream_t legacy = GENERATE(cudaStream_t{nullptr}, cudaStreamLegacy);

  SECTION("legacy work waits for earlier blocking work") {
    cudaStream_t s = sim.create_stream(/*blocking=*/true);
    sim.delay(s, kBusy);
    sim.launch(s, [&] { first = true; });
    sim.launch(legacy, [&] { saw_first = first.load(); });
    REQUIRE(sim.stream_synchronize(legacy) == cudaSuccess);
    CHECK(saw_first);
    sim.destroy_stream(s);
  }
  SECTION("later blocking work waits for earlier legacy work") {
    cudaStream_t s = sim.create_stream(/*blocking=*/true);
    sim.delay(legacy, kBusy);
    sim.launch(legacy, [&] { first = true; });
    sim.launch(s, [&] { saw_first = first.load(); });
    REQUIRE(sim.stream_synchronize(s) == cudaSuccess);
    CHECK(saw_first);
    sim.destroy_stream(s);
  }
  SECTION("an event recorded on the legacy stream covers blocking work") {
    cudaStream_t s = sim.create_stream(/*blocking=*/true);
    EventHandle e = nullptr;
    REQUIRE(sim.event_create(&e) == cudaSuccess);
    const auto t9 = Clock::now();
    sim.delay(s, kBusy);
    REQUIRE(sim.event_record(e, legacy) == cudaSuccess);
    CHECK_BUSY_SINCE(t9, sim.event_query(e));
    REQUIRE(sim.stream_synchronize(s) == cudaSuccess);
    REQUIRE(sim.event_synchronize(e) == cudaSuccess);
    REQUIRE(sim.event_destroy(e) == cudaSuccess);
    sim.destroy_stream(s);
  }
  SECTION("non-blocking streams take part in neither direction") {
    cudaStream_t n = sim.create_stream(/*blocking=*/false);
    const auto t10 = Clock::now();
    sim.delay(n, kBusy);
    sim.launch(legacy, [&] { first = true; });
    REQUIRE(sim.stream_synchronize(legacy) == cudaSuccess);
    CHECK(first);
    CHECK_BUSY_SINCE(t10, sim.stream_query(n));  // legacy did not wait for n
    REQUIRE(sim.stream_synchronize(n) == cudaSuccess);

    const auto t11 = Clock::now();
    sim.delay(legacy, kBusy);
    sim.launch(n, [&] { saw_first = true; });
    REQUIRE(sim.stream_synchronize(n) == cudaSuccess);
    CHECK(saw_first);
    CHECK_BUSY_SINCE(t11, sim.stream_query(legacy));  // n did not wait for legacy
    sim.destroy_stream(n);
  }
  REQUIRE(sim.device_synchronize(0) == cudaSuccess);
}

TEST_CASE("sim: cudaStreamPerThread is one blocking stream per host thread", "[sim_driver]") {
  SimDriver sim;
  unsigned long long mine = 0, again = 0, theirs = 0, legacy = 0;
  REQUIRE(sim.stream_id(cudaStreamPerThread, &mine) == cudaSuccess);
  REQUIRE(sim.stream_id(cudaStreamPerThread, &again) == cudaSuccess);
  REQUIRE(sim.stream_id(cudaStreamLegacy, &legacy) == cudaSuccess);
  std::thread([&] { (void)sim.stream_id(cudaStreamPerThread, &theirs); }).join();
  CHECK(mine == again);
  CHECK(theirs != 0);
  CHECK(theirs != mine);
  CHECK(legacy != mine);

  // Synchronizes with the legacy stream, like a blocking stream.
  std::atomic<bool> first{false};
  std::atomic<bool> saw_first{false};
  sim.delay(nullptr, kBusy);
  sim.launch(nullptr, [&] { first = true; });
  sim.launch(cudaStreamPerThread, [&] { saw_first = first.load(); });
  REQUIRE(sim.stream_synchronize(cudaStreamPerThread) == cudaSuccess);
  CHECK(saw_first);

  // But not with another stream.
  cudaStream_t s = sim.create_stream(/*blocking=*/true);
  const auto t13 = Clock::now();
  sim.delay(s, kBusy);
  sim.launch(cudaStreamPerThread, [] {});
  REQUIRE(sim.stream_synchronize(cudaStreamPerThread) == cudaSuccess);
  CHECK_BUSY_SINCE(t13, sim.stream_query(s));

  // Work queued by a thread that then exits still runs.
  std::atomic<bool> ran{false};
  std::thread([&] {
    sim.delay(cudaStreamPerThread, 50ms);
    sim.launch(cudaStreamPerThread, [&] { ran = true; });
  }).join();
  REQUIRE(sim.device_synchronize(0) == cudaSuccess);
  CHECK(ran);
  sim.destroy_stream(s);
}

TEST_CASE("sim: stream handles are reused, stream ids never", "[sim_driver]") {
  SimDriver sim;
  cudaStream_t a = sim.create_stream();
  cudaStream_t b = sim.create_stream(true);
  CHECK(a != b);
  CHECK(a != nullptr);
  CHECK(a != cudaStreamLegacy);
  CHECK(a != cudaStreamPerThread);
  unsigned long long id_a = 0, id_b = 0, id_c = 0;
  REQUIRE(sim.stream_id(a, &id_a) == cudaSuccess);
  REQUIRE(sim.stream_id(b, &id_b) == cudaSuccess);
  CHECK(id_a != id_b);

  sim.destroy_stream(a);
  CHECK(sim.stream_query(a) == cudaErrorInvalidResourceHandle);
  CHECK(sim.stream_id(a, &id_c) == cudaErrorInvalidResourceHandle);
  CHECK_THROWS(sim.launch(a, [] {}));
  CHECK_THROWS(sim.destroy_stream(a));

  cudaStream_t c = sim.create_stream();
  CHECK(c == a);  // the freed slot's handle comes back
  REQUIRE(sim.stream_id(c, &id_c) == cudaSuccess);
  CHECK(id_c != id_a);
  CHECK(id_c != id_b);

  bool capturing = true;
  REQUIRE(sim.stream_is_capturing(c, &capturing) == cudaSuccess);
  CHECK_FALSE(capturing);

  const auto bogus = reinterpret_cast<cudaStream_t>(std::uintptr_t{0xdead0});
  CHECK(sim.stream_query(bogus) == cudaErrorInvalidResourceHandle);
  CHECK(sim.stream_synchronize(bogus) == cudaErrorInvalidResourceHandle);
  CHECK(sim.stream_is_capturing(bogus, &capturing) == cudaErrorInvalidResourceHandle);
  EventHandle e = nullptr;
  REQUIRE(sim.event_create(&e) == cudaSuccess);
  CHECK(sim.event_record(e, bogus) == cudaErrorInvalidResourceHandle);
  CHECK(sim.stream_wait_event(bogus, e) == cudaErrorInvalidResourceHandle);
  CHECK(sim.event_record(reinterpret_cast<EventHandle>(&capturing), c) == cudaErrorInvalidResourceHandle);
  CHECK(sim.counters().events_recorded == 0);
  CHECK_THROWS(sim.destroy_stream(cudaStreamLegacy));
  REQUIRE(sim.event_destroy(e) == cudaSuccess);
  sim.destroy_stream(b);
  sim.destroy_stream(c);
}

TEST_CASE("sim: destroy_stream returns at once; queued work still runs", "[sim_driver]") {
  SimDriver sim;
  cudaStream_t s = sim.create_stream();
  EventHandle e = nullptr;
  REQUIRE(sim.event_create(&e) == cudaSuccess);
  std::atomic<bool> ran{false};
  const auto t14 = Clock::now();
  sim.delay(s, kBusy);
  sim.launch(s, [&] { ran = true; });
  REQUIRE(sim.event_record(e, s) == cudaSuccess);
  sim.destroy_stream(s);
  const bool ran_yet = ran;
  if (Clock::now() - t14 < kBusy) CHECK_FALSE(ran_yet);
  CHECK_BUSY_SINCE(t14, sim.event_query(e));          // events outlive their stream
  REQUIRE(sim.device_synchronize(0) == cudaSuccess);  // covers destroyed streams
  CHECK(ran);
  CHECK(sim.event_query(e) == cudaSuccess);
  REQUIRE(sim.event_destroy(e) == cudaSuccess);
}

TEST_CASE("sim: destroy joins an idle stream's worker; a busy one's is joined later", "[sim_driver]") {
  // A worker left unjoined after a process's last destroy is a thread leak,
  // which ThreadSanitizer turns into a failed exit (it failed the IPC peer).
  auto streams = std::make_shared<sim::SimStreams>(1);
  cudaStream_t idle = streams->create(0, false);
  REQUIRE(idle != nullptr);
  REQUIRE(streams->destroy(idle) == cudaSuccess);
  CHECK(streams->retired_count() == 0);

  cudaStream_t busy = streams->create(0, false);
  sim::Item sleep;
  sleep.delay = 50ms;
  REQUIRE(streams->submit(busy, std::move(sleep)) == cudaSuccess);
  REQUIRE(streams->destroy(busy) == cudaSuccess);  // returns at once
  CHECK(streams->retired_count() == 1);
  for (const sim::Point& p : streams->device_tails(0)) p.wait();
  // Drained: a later create or destroy joins it, once its worker has left
  // (right after its last item; polled, for loaded or sanitized machines).
  const auto give_up = Clock::now() + 10s;
  while (streams->retired_count() != 0 && Clock::now() < give_up) {
    std::this_thread::sleep_for(1ms);
    REQUIRE(streams->destroy(streams->create(0, false)) == cudaSuccess);
  }
  CHECK(streams->retired_count() == 0);
}

TEST_CASE("sim: the destructor drains every stream", "[sim_driver]") {
  std::atomic<int> ran{0};
  {
    SimDriver sim;
    cudaStream_t a = sim.create_stream();
    cudaStream_t b = sim.create_stream(true);
    sim.delay(a, 50ms);
    sim.launch(a, [&] { ++ran; });
    sim.launch(b, [&] { ++ran; });
    sim.launch(nullptr, [&] { ++ran; });
    sim.launch(cudaStreamPerThread, [&] { ++ran; });
    sim.destroy_stream(b);
  }
  CHECK(ran == 4);
}

TEST_CASE("sim: streams and events from many threads", "[sim_driver]") {
  // Mostly for ThreadSanitizer: concurrent creates, destroys, launches,
  // records, waits and queries. Each thread chains its work through an event
  // recorded on the previous thread's stream, and checks the chain held.
  SimDriver sim;
  constexpr int kThreads = 6;
  constexpr int kRounds = 40;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int r = 0; r < kRounds; ++r) {
        cudaStream_t a = sim.create_stream(t % 2 == 0);
        cudaStream_t b = sim.create_stream(t % 3 == 0);
        EventHandle e = nullptr;
        if (sim.event_create(&e) != cudaSuccess) {
          ++failures;
          continue;
        }
        auto flag = std::make_shared<std::atomic<bool>>(false);
        sim.delay(a, std::chrono::microseconds(100 * (r % 3)));
        sim.launch(a, [flag] { *flag = true; });
        if (sim.event_record(e, a) != cudaSuccess) ++failures;
        if (sim.stream_wait_event(b, e) != cudaSuccess) ++failures;
        sim.launch(b, [flag, &failures] {
          if (!*flag) ++failures;
        });
        sim.launch(cudaStreamPerThread, [] {});
        (void)sim.event_query(e);
        (void)sim.stream_query(a);
        sim.destroy_stream(a);
        if (sim.event_destroy(e) != cudaSuccess) ++failures;
        if (r % 4 == 0 && sim.stream_synchronize(b) != cudaSuccess) ++failures;
        sim.destroy_stream(b);
      }
    });
  }
  for (auto& th : threads) th.join();
  REQUIRE(sim.device_synchronize(0) == cudaSuccess);
  CHECK(failures == 0);
  CHECK(sim.counters().stream_waits == kThreads * kRounds);
}

TEST_CASE("sim: stream_device names a stream's device; implicit handles the current one (0)", "[sim_driver]") {
  SimConfig config;
  config.device_count = 2;
  SimDriver sim(config);
  const cudaStream_t s0 = sim.create_stream();
  const cudaStream_t s1 = sim.create_stream(true, 1);
  int device = -1;
  REQUIRE(sim.stream_device(s0, &device) == cudaSuccess);
  CHECK(device == 0);
  REQUIRE(sim.stream_device(s1, &device) == cudaSuccess);
  CHECK(device == 1);
  for (cudaStream_t implicit : {cudaStream_t{nullptr}, cudaStreamLegacy, cudaStreamPerThread}) {
    device = -1;
    REQUIRE(sim.stream_device(implicit, &device) == cudaSuccess);
    CHECK(device == 0);
  }
  CHECK(sim.stream_device(s1, nullptr) == cudaErrorInvalidValue);
  CHECK_THROWS_AS(sim.create_stream(false, 2), std::invalid_argument);
  sim.destroy_stream(s1);
  CHECK(sim.stream_device(s1, &device) == cudaErrorInvalidResourceHandle);
  sim.destroy_stream(s0);
}

TEST_CASE("sim: set_current_device moves the implicit streams and event_create to that device",
          "[sim_driver][devices]") {
  SimConfig config;
  config.device_count = 2;
  SimDriver sim(config);
  int device = -1;
  REQUIRE(sim.current_device(&device) == cudaSuccess);
  CHECK(device == 0);
  unsigned long long legacy0 = 0, legacy1 = 0, per_thread0 = 0, per_thread1 = 0;
  REQUIRE(sim.stream_id(nullptr, &legacy0) == cudaSuccess);
  REQUIRE(sim.stream_id(cudaStreamPerThread, &per_thread0) == cudaSuccess);

  sova::test::ScopedCurrentDevice on_device_1(sim, 1);  // device 0 again at the end
  REQUIRE(sim.current_device(&device) == cudaSuccess);
  CHECK(device == 1);
  for (cudaStream_t implicit : {cudaStream_t{nullptr}, cudaStreamLegacy, cudaStreamPerThread}) {
    REQUIRE(sim.stream_device(implicit, &device) == cudaSuccess);
    CHECK(device == 1);
  }
  REQUIRE(sim.stream_id(nullptr, &legacy1) == cudaSuccess);
  REQUIRE(sim.stream_id(cudaStreamPerThread, &per_thread1) == cudaSuccess);
  CHECK(legacy1 != legacy0);  // each device has its own
  CHECK(per_thread1 != per_thread0);
  CHECK(sim.set_current_device(2) == cudaErrorInvalidDevice);
  CHECK(sim.set_current_device(-1) == cudaErrorInvalidDevice);
  REQUIRE(sim.current_device(&device) == cudaSuccess);
  CHECK(device == 1);  // unchanged by the refusals

  // An event belongs to the device current at its creation (or the one named).
  cudaStream_t on0 = sim.create_stream(false, 0);
  cudaStream_t on1 = sim.create_stream(false, 1);
  EventHandle current = nullptr, named0 = nullptr;
  REQUIRE(sim.event_create(&current) == cudaSuccess);
  REQUIRE(sim.event_create_on(0, &named0) == cudaSuccess);
  EventHandle none = nullptr;
  CHECK(sim.event_create_on(2, &none) == cudaErrorInvalidDevice);
  CHECK(none == nullptr);
  const std::size_t recorded = sim.counters().events_recorded;
  CHECK(sim.event_record(current, on0) == cudaErrorInvalidResourceHandle);
  CHECK(sim.event_record(named0, on1) == cudaErrorInvalidResourceHandle);
  CHECK(sim.event_record(named0, nullptr) == cudaErrorInvalidResourceHandle);  // device 1's legacy stream
  CHECK(sim.counters().events_recorded == recorded);                           // refused records enqueue nothing
  CHECK(sim.event_record(current, on1) == cudaSuccess);
  CHECK(sim.event_record(named0, on0) == cudaSuccess);
  CHECK(sim.stream_wait_event(on1, named0) == cudaSuccess);  // waits may cross devices, as in CUDA
  REQUIRE(sim.device_synchronize(0) == cudaSuccess);
  REQUIRE(sim.device_synchronize(1) == cudaSuccess);
  REQUIRE(sim.event_destroy(current) == cudaSuccess);
  REQUIRE(sim.event_destroy(named0) == cudaSuccess);
  sim.destroy_stream(on0);
  sim.destroy_stream(on1);
}

TEST_CASE("sim: a thread's exit retires its per-thread stream on every device it used", "[sim_driver][devices]") {
  SimConfig config;
  config.device_count = 2;
  SimDriver sim(config);
  std::atomic<int> ran{0};
  std::atomic<bool> set_ok{true};
  std::thread worker([&] {  // no Catch assertions off the main thread
    for (int device : {0, 1}) {
      if (sim.set_current_device(device) != cudaSuccess) set_ok = false;
      sim.delay(cudaStreamPerThread, std::chrono::milliseconds(20));
      sim.launch(cudaStreamPerThread, [&] { ++ran; });
    }
  });
  worker.join();  // the exit hook drains both streams before join returns
  CHECK(set_ok);
  CHECK(ran == 2);
  int device = -1;
  REQUIRE(sim.current_device(&device) == cudaSuccess);
  CHECK(device == 0);  // per thread: the worker's setting is not this thread's
}
