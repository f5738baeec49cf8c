// sova — ChunkView, one physical chunk under a pool's VA range, as
// Pool::chunks_under reports it (for views and export: sova/alias.hpp,
// sova/ipc.hpp).
#pragma once

#include <sova/driver.hpp>

#include <cstddef>
#include <cstdint>

namespace sova {

/// One physical chunk under a pool's VA range.
struct ChunkView {
  std::size_t offset = 0;  ///< from the pool's VA base
  std::size_t bytes = 0;
  PhysicalHandle handle = 0;
  std::uint64_t serial = 0;  ///< never reused within the pool: tells a moved or new chunk from the old
};

}  // namespace sova
