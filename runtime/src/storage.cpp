#include "runtime/storage.h"

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <new>

#include "kiln/error.h"
#include "runtime/cuda_runtime.h"
#include "runtime/observe.h"

namespace kiln::runtime {

namespace {

constexpr size_t kAlign = 64;
constexpr size_t kMaxCached = size_t{2} << 30; // keep at most 2 GiB of freed blocks

constexpr size_t kMaxBytes = size_t{1} << 48; // far beyond any host's memory; keeps the rounding exact

size_t round_up(size_t bytes) { return std::max(kAlign, (bytes + kAlign - 1) / kAlign * kAlign); }

// Freed blocks keyed by their (rounded) size; best fit on reuse.
class HostPool {
public:
  // A block of `size` bytes (a multiple of kAlign), or null when the system has none.
  void* take(size_t size) noexcept {
    {
      std::lock_guard lock(mu_);
      auto it = free_.lower_bound(size);
      if (it != free_.end() && it->first <= size + size / 4) { // no more than 25% waste
        void* p = it->second;
        stats_.bytes_cached -= it->first;
        free_.erase(it);
        note_use(size);
        return p;
      }
    }
    void* p = std::aligned_alloc(kAlign, size);
    if (!p) {
      release();
      p = std::aligned_alloc(kAlign, size);
    }
    if (!p) return nullptr;
    std::lock_guard lock(mu_);
    ++stats_.fresh_allocations;
    note_use(size);
    return p;
  }
  // Called from destructors: never throws (a block the map has no room for goes back to the system).
  void give(void* p, size_t size) noexcept {
    std::lock_guard lock(mu_);
    stats_.bytes_in_use -= size;
    if (stats_.bytes_cached + size > kMaxCached) {
      std::free(p);
      return;
    }
    try {
      free_.emplace(size, p);
    } catch (const std::bad_alloc&) {
      std::free(p);
      return;
    }
    stats_.bytes_cached += size;
  }
  void release() {
    std::lock_guard lock(mu_);
    for (auto& [size, p] : free_) std::free(p);
    free_.clear();
    stats_.bytes_cached = 0;
  }
  AllocatorStats stats() {
    std::lock_guard lock(mu_);
    return stats_;
  }

private:
  std::mutex mu_;
  std::multimap<size_t, void*> free_;
  AllocatorStats stats_;
  void note_use(size_t size) {
    stats_.bytes_in_use += size;
    stats_.peak_in_use = std::max(stats_.peak_in_use, stats_.bytes_in_use);
  }
};

HostPool& pool() {
  static auto* p = new HostPool; // never destroyed: storages may be freed during static destruction
  return *p;
}

class HostStorage final : public graph::Storage {
public:
  HostStorage(size_t bytes, size_t size, void* data) : bytes_(bytes), size_(size), data_(data) {}
  ~HostStorage() override { pool().give(data_, size_); }
  void* data() const override { return data_; }
  size_t bytes() const override { return bytes_; }
  Device device() const override { return kCPU; }

private:
  size_t bytes_, size_;
  void* data_;
};

} // namespace

std::shared_ptr<graph::Storage> try_allocate_host(size_t bytes) noexcept {
  if (bytes > kMaxBytes) return nullptr;
  const size_t size = round_up(bytes);
  void* data = pool().take(size);
  if (!data) return nullptr;
  try {
    return std::make_shared<HostStorage>(bytes, size, data);
  } catch (const std::bad_alloc&) { // the control block
    pool().give(data, size);
    return nullptr;
  }
}

std::shared_ptr<graph::Storage> allocate_host(size_t bytes) {
  auto s = try_allocate_host(bytes);
  if (!s) detail::out_of_memory("allocate", "host", bytes, "", std::source_location::current());
  return s;
}
AllocatorStats allocator_stats() { return pool().stats(); }

void require_device(Device device) {
  if (device.kind == Device::Kind::CUDA) Gpu::get(device.index);
}

std::shared_ptr<graph::Storage> allocate(Device device, size_t bytes) {
  return device.kind == Device::Kind::CPU ? allocate_host(bytes) : Gpu::get(device.index).allocate(bytes);
}

std::shared_ptr<graph::Storage> copy_to(const graph::Storage& src, Device device) {
  const size_t n = src.bytes();
  std::shared_ptr<graph::Storage> dst = allocate(device, n);
  const bool from_host = src.device().kind == Device::Kind::CPU, to_host = device.kind == Device::Kind::CPU;
  observe::Span span("copy", src.device().str() + " -> " + device.str());
  span.arg("bytes", static_cast<double>(n));
  if (from_host && to_host) std::memcpy(dst->data(), src.data(), n);
  else if (from_host) Gpu::get(device.index).upload(dst->data(), src.data(), n);
  else if (to_host) Gpu::get(src.device().index).download(dst->data(), src.data(), n);
  else if (src.device() == device) Gpu::get(device.index).copy(dst->data(), src.data(), n);
  else { // between two GPUs: through the host
    auto staged = copy_to(src, kCPU);
    Gpu::get(device.index).upload(dst->data(), staged->data(), n);
  }
  return dst;
}

AllocatorStats allocator_stats(Device device) {
  return device.kind == Device::Kind::CPU ? allocator_stats() : Gpu::get(device.index).memory_stats();
}
void release_cached_memory() { pool().release(); }

} // namespace kiln::runtime
