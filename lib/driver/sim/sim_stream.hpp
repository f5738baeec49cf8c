// sova sim — one simulated stream: a FIFO of work items drained in order by
// the stream's own worker thread.
//
// Completion is a count: the stream has `submitted` items and has finished
// `completed` of them; a Point (stream, seq) is reached once completed >= seq.
// Events and stream waits are Points, so an event "marker" is simply the
// position of an item in the queue. Items are run strictly one after
// another, so Points of one stream are reached in order.
//
// An item waits for its Points, then stays busy for its delay, then runs its
// work. Waits only ever name work submitted earlier (a Point is captured at
// the call that creates it), so waits form no cycle and every queue drains.
//
// Thread safety: all members are guarded by the stream's own mutex except
// those marked otherwise. Lock order: SimStreams' mutex, then a stream's.
// The worker never takes SimStreams' mutex while holding its own.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace sova::sim {

class Stream;

/// The work of `stream` up to and including its `seq`-th item.
struct Point {
  std::shared_ptr<Stream> stream;
  std::uint64_t seq = 0;

  bool reached() const;
  void wait() const;  // blocks until reached()
};

struct Item {
  std::vector<Point> waits;            // all reached before the item starts
  std::chrono::microseconds delay{0};  // then the stream is busy this long
  std::function<void()> work;          // then this runs (may be empty: a marker)
};

/// How a stream synchronizes with the legacy default stream.
enum class StreamKind {
  legacy,        // the legacy default stream itself
  blocking,      // cudaStreamDefault and per-thread default streams
  non_blocking,  // cudaStreamNonBlocking: no implicit synchronization
};

class Stream {
 public:
  /// Starts the worker thread.
  Stream(unsigned long long id, int device, StreamKind kind);
  /// Closes, drains and joins if that was not done yet (never from the
  /// stream's own worker: it then detaches instead of deadlocking).
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  /// Appends an item; returns its sequence number (1 for the first item).
  std::uint64_t enqueue(Item item);
  /// How many items were ever enqueued: Point{this, submitted()} covers them all.
  std::uint64_t submitted() const;
  /// Whether items are submitted but not finished.
  bool busy() const;
  /// No more items will come: the worker exits once the queue is drained.
  void close();
  /// Whether the worker has drained its queue after close() and is leaving.
  bool exited() const noexcept { return exited_.load(std::memory_order_acquire); }
  /// Joins the worker (after close()); no-op when called from the worker or
  /// once joined. Thread-safe.
  void join();

  const unsigned long long id;  ///< stream_id(): unique for the process's life
  const int device;
  const StreamKind kind;
  /// The legacy stream's seq this stream has already been made to wait for.
  /// Guarded by SimStreams' mutex, not by the stream's.
  std::uint64_t legacy_seen = 0;

 private:
  friend struct Point;
  void run();

  mutable std::mutex mu_;
  std::condition_variable work_cv_;          // worker: an item came or closing
  mutable std::condition_variable done_cv_;  // waiters: `completed_` advanced
  std::deque<Item> queue_;
  std::uint64_t submitted_ = 0;
  std::uint64_t completed_ = 0;
  bool closing_ = false;
  std::atomic<bool> exited_{false};
  std::mutex join_mu_;  // join() callers take turns
  std::thread worker_;  // last: starts once everything above is built
};

}  // namespace sova::sim
