// sova sim — events (see sim_events.hpp).
#include "sim_events.hpp"

namespace sova::sim {

cudaError_t SimEvents::create(int device, EventHandle* out) {
  if (out == nullptr) return cudaErrorInvalidValue;
  auto event = std::make_unique<Event>();
  event->device = device;
  EventHandle handle = event.get();
  std::lock_guard lock(mu_);
  live_.emplace(handle, std::move(event));
  *out = handle;
  return cudaSuccess;
}

cudaError_t SimEvents::destroy(EventHandle event) {
  std::unique_ptr<Event> dead;  // freed after unlocking: it may own the last ref to a stream
  std::lock_guard lock(mu_);
  auto it = live_.find(event);
  if (it == live_.end()) return cudaErrorInvalidResourceHandle;
  dead = std::move(it->second);
  live_.erase(it);
  return cudaSuccess;
}

cudaError_t SimEvents::check(EventHandle event, int stream_device) {
  std::lock_guard lock(mu_);
  auto it = live_.find(event);
  if (it == live_.end() || it->second->device != stream_device) return cudaErrorInvalidResourceHandle;
  return cudaSuccess;
}

cudaError_t SimEvents::set(EventHandle event, Point at) {
  std::lock_guard lock(mu_);
  auto it = live_.find(event);
  if (it == live_.end()) return cudaErrorInvalidResourceHandle;
  it->second->at = std::move(at);
  return cudaSuccess;
}

cudaError_t SimEvents::get(EventHandle event, std::optional<Point>* out) {
  std::lock_guard lock(mu_);
  auto it = live_.find(event);
  if (it == live_.end()) return cudaErrorInvalidResourceHandle;
  *out = it->second->at;
  return cudaSuccess;
}

}  // namespace sova::sim
