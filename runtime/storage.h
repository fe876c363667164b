#pragma once
/// \file storage.h
/// Memory for tensors. Host memory: 64-byte-aligned blocks from a caching allocator, so
/// that a training loop reuses its buffers instead of faulting in fresh pages. GPU
/// memory: the caching allocator of runtime/cuda_runtime.h.

#include <cstddef>
#include <memory>

#include "graph/node.h"

namespace kiln::runtime {

/// Host storage of at least `bytes` bytes (never less than 64), 64-byte aligned, or null
/// when the memory cannot be had (the one place host memory for tensors is allocated).
std::shared_ptr<graph::Storage> try_allocate_host(size_t bytes) noexcept;
/// Host storage as try_allocate_host; throws kiln::OutOfMemoryError naming the bytes when
/// the memory cannot be had (public functions name themselves with detail::memory_guard).
std::shared_ptr<graph::Storage> allocate_host(size_t bytes);

/// Throws kiln::Error saying why when `device` cannot be used (sets a GPU up on first use).
void require_device(Device device);
/// Storage of at least `bytes` bytes on `device` (host or GPU memory); kiln::OutOfMemoryError
/// when the memory cannot be had.
std::shared_ptr<graph::Storage> allocate(Device device, size_t bytes);
/// A copy of `src` on `device` (the first `src.bytes()` bytes); a copy from a GPU waits
/// for the work queued there. Throws kiln::Error when the device is unusable.
std::shared_ptr<graph::Storage> copy_to(const graph::Storage& src, Device device);

/// Statistics of a caching allocator.
struct AllocatorStats {
  size_t bytes_in_use = 0;  ///< held by live storages
  size_t bytes_cached = 0;  ///< freed blocks kept for reuse
  size_t peak_in_use = 0;   ///< high-water mark of bytes_in_use
  size_t fresh_allocations = 0; ///< blocks taken from the system
};
/// Current statistics of the host allocator.
AllocatorStats allocator_stats();
/// Current statistics of `device`'s allocator (the host's for the CPU).
AllocatorStats allocator_stats(Device device);
/// Returns every cached block to the system.
void release_cached_memory();

} // namespace kiln::runtime
