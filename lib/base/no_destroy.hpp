// sova — NoDestroy<T>: a process-lifetime object that is never destroyed.
//
// Drivers are process-wide and must outlive every pool, including pools that
// are destroyed during static destruction (a global sova::Pool, an adapter's
// static). A function-local `static T` would be destroyed at exit in an order
// we do not control; NoDestroy builds T in static storage and never runs its
// destructor, so the object stays usable until the process is gone. Its own
// destructor is trivial, so no atexit handler is registered.
#pragma once

#include <new>
#include <utility>

namespace sova::detail {

template <class T>
class NoDestroy {
 public:
  template <class... Args>
  explicit NoDestroy(Args&&... args) {
    ::new (static_cast<void*>(storage_)) T(std::forward<Args>(args)...);
  }
  NoDestroy(const NoDestroy&) = delete;
  NoDestroy& operator=(const NoDestroy&) = delete;

  T& get() noexcept { return *std::launder(reinterpret_cast<T*>(storage_)); }

 private:
  alignas(T) unsigned char storage_[sizeof(T)];
};

}  // namespace sova::detail
