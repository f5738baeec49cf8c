// sova sim — one simulated stream (see sim_stream.hpp).
#include "sim_stream.hpp"

#include <cstdio>
#include <exception>
#include <utility>

namespace sova::sim {

bool Point::reached() const {
  if (!stream) return true;
  std::lock_guard lock(stream->mu_);
  return stream->completed_ >= seq;
}

void Point::wait() const {
  if (!stream) return;
  std::unique_lock lock(stream->mu_);
  stream->done_cv_.wait(lock, [&] { return stream->completed_ >= seq; });
}

Stream::Stream(unsigned long long id_, int device_, StreamKind kind_)
    : id(id_), device(device_), kind(kind_), worker_([this] { run(); }) {}

Stream::~Stream() {
  close();
  join();
  if (worker_.joinable()) worker_.detach();  // destroyed by its own worker
}

std::uint64_t Stream::enqueue(Item item) {
  std::uint64_t seq;
  {
    std::lock_guard lock(mu_);
    queue_.push_back(std::move(item));
    seq = ++submitted_;
  }
  work_cv_.notify_one();
  return seq;
}

std::uint64_t Stream::submitted() const {
  std::lock_guard lock(mu_);
  return submitted_;
}

bool Stream::busy() const {
  std::lock_guard lock(mu_);
  return completed_ < submitted_;
}

void Stream::close() {
  {
    std::lock_guard lock(mu_);
    closing_ = true;
  }
  work_cv_.notify_one();
}

void Stream::join() {
  // Two callers may join one retired stream at once (a thread's exit hook
  // and another thread's create or destroy reaping exited workers): joining
  // a std::thread twice concurrently is undefined, so they take turns.
  std::lock_guard lock(join_mu_);
  if (worker_.joinable() && worker_.get_id() != std::this_thread::get_id()) worker_.join();
}

void Stream::run() {
  for (;;) {
    Item item;
    {
      std::unique_lock lock(mu_);
      work_cv_.wait(lock, [&] { return !queue_.empty() || closing_; });
      if (queue_.empty()) break;  // closing and drained
      item = std::move(queue_.front());
      queue_.pop_front();
    }
    for (const Point& p : item.waits) p.wait();
    if (item.delay.count() > 0) std::this_thread::sleep_for(item.delay);
    if (item.work) {
      // A kernel cannot throw; host work that does must not kill the process
      // or the stream (later items and waiters still expect completion).
      try {
        item.work();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "sova sim: stream %llu: work threw: %s\n", id, e.what());
      } catch (...) {
        std::fprintf(stderr, "sova sim: stream %llu: work threw\n", id);
      }
    }
    item = Item{};  // drop captured state (and Points) before signalling completion
    {
      std::lock_guard lock(mu_);
      ++completed_;
    }
    done_cv_.notify_all();
  }
  exited_.store(true, std::memory_order_release);
}

}  // namespace sova::sim
