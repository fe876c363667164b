#pragma once
/// \file storage.h
/// Host memory for tensors: 64-byte-aligned blocks from a caching allocator, so
/// that a training loop reuses its buffers instead of faulting in fresh pages.

#include <cstddef>
#include <memory>

#include "graph/node.h"

namespace kiln::runtime {

/// Host storage of at least `bytes` bytes (never less than 64), 64-byte aligned.
/// Throws kiln::Error when the memory cannot be had.
std::shared_ptr<graph::Storage> allocate_host(size_t bytes);

/// Statistics of the host allocator.
struct AllocatorStats {
  size_t bytes_in_use = 0;  ///< held by live storages
  size_t bytes_cached = 0;  ///< freed blocks kept for reuse
  size_t peak_in_use = 0;   ///< high-water mark of bytes_in_use
  size_t fresh_allocations = 0; ///< blocks taken from the system
};
/// Current statistics.
AllocatorStats allocator_stats();
/// Returns every cached block to the system.
void release_cached_memory();

} // namespace kiln::runtime
