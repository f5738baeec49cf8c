#include "core/release_worker.hpp"

#include "core/pool_core.hpp"

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace sova::detail {

namespace {

class ReleaseWorker {
 public:
  void add(PoolCore* pool) {
    std::unique_lock<std::mutex> lock(mutex_);
    pools_.push_back(pool);
    if (!thread_.joinable()) {
      stop_ = false;
      thread_ = std::thread([this] { run(); });
    }
  }

  void remove(PoolCore* pool) noexcept {
    std::thread finished;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      // Wait out a pass that may be looking at this pool right now.
      idle_.wait(lock, [&] { return busy_ != pool; });
      pools_.erase(std::remove(pools_.begin(), pools_.end(), pool), pools_.end());
      if (pools_.empty() && thread_.joinable()) {
        stop_ = true;
        wake_.notify_all();
        finished = std::move(thread_);
      }
    }
    if (finished.joinable()) {
      if (finished.get_id() == std::this_thread::get_id()) {
        finished.detach();
      } else {
        finished.join();
      }
    }
  }

  ~ReleaseWorker() {
    std::thread finished;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      stop_ = true;
      wake_.notify_all();
      finished = std::move(thread_);
    }
    if (finished.joinable()) finished.join();
  }

 private:
  void run() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stop_) {
      wake_.wait_for(lock, kReleasePeriod, [&] { return stop_; });
      if (stop_) break;
      // Look at each pool without holding the worker's mutex (pools may be
      // added meanwhile); `busy_` keeps the one being looked at alive.
      for (std::size_t i = 0; i < pools_.size() && !stop_; ++i) {
        busy_ = pools_[i];
        lock.unlock();
        busy_->track_stream_activity();
        busy_->release_if_idle();
        lock.lock();
        busy_ = nullptr;
        idle_.notify_all();
      }
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable idle_;
  std::vector<PoolCore*> pools_;
  PoolCore* busy_ = nullptr;
  bool stop_ = false;
  std::thread thread_;
};

ReleaseWorker& worker() {
  static ReleaseWorker instance;
  return instance;
}

}  // namespace

void register_for_release(PoolCore* pool) { worker().add(pool); }
void unregister_for_release(PoolCore* pool) noexcept { worker().remove(pool); }

}  // namespace sova::detail
