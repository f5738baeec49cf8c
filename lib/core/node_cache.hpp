// NodeCache and RecyclingAllocator: node-based standard containers (the
// heap's best-fit set, a stream's pending ranges) without a call to the
// system allocator per insert once warm.
//
// Each insert into a std::set or std::map allocates a node, each erase frees
// one: on the slow path that was a malloc and a free per block flushed,
// carved or coalesced (a profile of the U-Net trace's replay: a tenth of the
// pool's instructions). A NodeCache keeps freed nodes on a free list and hands
// them out again; it returns them to the system only when it is destroyed, so
// it holds at most as many nodes as were ever in use at once. Not
// thread-safe: the container's own lock guards it (the heap lock for both).
#pragma once

#include <cstddef>
#include <new>

namespace sova::detail {

class NodeCache {
 public:
  NodeCache() = default;
  NodeCache(const NodeCache&) = delete;
  NodeCache& operator=(const NodeCache&) = delete;
  ~NodeCache() {
    while (free_ != nullptr) {
      Link* next = free_->next;
      ::operator delete(static_cast<void*>(free_));
      free_ = next;
    }
  }

  /// A node of `bytes` bytes (the same size on every call of one cache).
  /// Throws std::bad_alloc.
  void* take(std::size_t bytes) {
    if (free_ == nullptr) return ::operator new(bytes < sizeof(Link) ? sizeof(Link) : bytes);
    Link* node = free_;
    free_ = node->next;
    return node;
  }
  void give(void* node) noexcept {
    Link* link = static_cast<Link*>(node);
    link->next = free_;
    free_ = link;
  }

 private:
  struct Link {
    Link* next;
  };
  Link* free_ = nullptr;
};

/// An allocator for node-based containers over a NodeCache: single nodes come
/// from the cache, anything else (which node containers never ask for) from
/// the system.
template <class T>
struct RecyclingAllocator {
  using value_type = T;
  NodeCache* cache;

  explicit RecyclingAllocator(NodeCache* c) noexcept : cache(c) {}
  template <class U>
  RecyclingAllocator(const RecyclingAllocator<U>& other) noexcept : cache(other.cache) {}

  T* allocate(std::size_t n) {
    if (n == 1) return static_cast<T*>(cache->take(sizeof(T)));
    return static_cast<T*>(::operator new(n * sizeof(T)));
  }
  void deallocate(T* p, std::size_t n) noexcept {
    if (n == 1) {
      cache->give(p);
    } else {
      ::operator delete(static_cast<void*>(p));
    }
  }
  template <class U>
  bool operator==(const RecyclingAllocator<U>& other) const noexcept {
    return cache == other.cache;
  }
};

}  // namespace sova::detail
