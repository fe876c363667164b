// Collectives on tensors and DistributedDataParallel (see kiln/dist.h), on the byte-level
// process group of runtime/comm.h.
//
// On MPI (CPU tensors, and CUDA tensors staged through host memory where NCCL is not used),
// an all-reduce is a direct reduce-scatter then an all-gather: the n elements are cut into
// world_size blocks; rank c receives block c from every rank and reduces it in rank order
// (x0, then x1, ...), then sends the result to every rank. Each rank sends and receives
// 2 (N-1)/N of the data, as a ring does, but every element is combined in the same order
// whatever the timing, so the result is deterministic and independent of how tensors are
// grouped into messages.
//
// CUDA tensors go through NCCL (runtime/nccl.h) when every rank can: each rank says so in the
// description record that every collective exchanges first, so all ranks choose alike. NCCL's
// sums are its own (the same on every rank, not in rank order); mean is its sum divided by the
// world size in a kiln kernel, as the host path divides.
#include "kiln/dist.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>

#include "frontend/src/tensor_impl.h"
#include "kiln/autograd.h"
#include "kiln/options.h"
#include "runtime/comm.h"
#include "runtime/nccl.h"
#include "runtime/observe.h"
#include "runtime/storage.h"

namespace kiln::dist {

namespace {

using runtime::comm::Transfer;
using Clock = std::chrono::steady_clock;

// Message tags: one per phase, so the phases of one collective never match each other's messages.
enum Tag : int { kDescriptionTag = 1, kScatterTag = 2, kGatherTag = 3 };

Stats& counters() {
  static Stats s;
  return s;
}

// Adds a collective's time to stats() when it ends (by return or throw), and records it as a
// span of category "dist" in a KILN_TRACE / profile::start_trace() timeline.
class Timed {
public:
  explicit Timed(const char* name) : span_("dist", name), start_(Clock::now()) {}
  ~Timed() {
    counters().collectives += 1;
    counters().seconds += std::chrono::duration<double>(Clock::now() - start_).count();
  }
  Timed(const Timed&) = delete;
  Timed& operator=(const Timed&) = delete;
private:
  runtime::observe::Span span_;
  Clock::time_point start_;
};

const runtime::comm::World& group(const char* op, const Loc& loc) {
  if (detail::active_capture())
    throw Error(op, "cannot run inside a compile() trace: a collective exchanges realized values with the other "
                    "ranks; call it between compiled functions",
                loc);
  return runtime::comm::world(op, loc);
}

void exchange(const std::vector<Transfer>& sends, const std::vector<Transfer>& recvs, Tag tag, const char* op,
              const Loc& loc) {
  for (const Transfer& t : sends) counters().bytes_sent += static_cast<int64_t>(t.bytes);
  runtime::comm::exchange(sends, recvs, tag, op, options().dist_timeout, loc);
}

// FNV-1a: the same digest on every rank and build.
uint64_t digest(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ULL;
  return h;
}

// Every rank sends every other a fixed-size record of what it is calling (a digest and the
// start of the text) and whether it can run the call on NCCL; a different call throws on every
// rank, naming both descriptions. Returns whether every rank can use NCCL (so all choose alike).
bool agree(const char* op, const std::string& what, bool can_nccl, const Loc& loc) {
  const auto& w = group(op, loc);
  if (w.size == 1) return false;
  constexpr size_t kText = 247, kCompared = 8 + kText, kRecord = kCompared + 1; // the last byte: NCCL
  std::vector<char> mine(kRecord, 0), all(kRecord * static_cast<size_t>(w.size), 0);
  const uint64_t h = digest(what);
  std::memcpy(mine.data(), &h, 8);
  std::memcpy(mine.data() + 8, what.data(), std::min(kText - 1, what.size()));
  mine[kCompared] = can_nccl ? 1 : 0;
  std::vector<Transfer> sends, recvs;
  for (int r = 0; r < w.size; ++r) {
    if (r == w.rank) continue;
    sends.push_back({r, mine.data(), kRecord});
    recvs.push_back({r, all.data() + kRecord * static_cast<size_t>(r), kRecord});
  }
  runtime::comm::exchange(sends, recvs, kDescriptionTag, op, options().dist_timeout, loc);
  bool every = can_nccl;
  for (int r = 0; r < w.size; ++r) {
    if (r == w.rank) continue;
    const char* rec = all.data() + kRecord * static_cast<size_t>(r);
    every = every && rec[kCompared] == 1;
    if (std::memcmp(rec, mine.data(), kCompared) == 0) continue;
    const std::string theirs(rec + 8, strnlen(rec + 8, kText));
    throw Error(op, "the ranks disagree: rank " + std::to_string(w.rank) + " calls " + what + " but rank " +
                        std::to_string(r) + " calls " + theirs,
                loc);
  }
  if (can_nccl && !every && options().debug >= 1)
    std::fprintf(stderr, "[kiln] dist: rank %d: %s is staged through host memory: another rank cannot use NCCL\n",
                 w.rank, what.c_str());
  return every;
}

// Whether this rank can run a collective on `ts` on NCCL: more than one rank, options().nccl,
// all on one CUDA device that NCCL serves (runtime/nccl.h says why not).
bool can_use_nccl(const char* op, const std::vector<Tensor>& ts, const Loc& loc) {
  if (!options().nccl || ts.empty() || group(op, loc).size == 1) return false;
  for (const Tensor& t : ts)
    if (t.device() != ts[0].device()) return false;
  return ts[0].device().kind == Device::Kind::CUDA && runtime::nccl::unusable(ts[0].device()).empty();
}

const char* op_name(ReduceOp op) {
  switch (op) {
  case ReduceOp::Sum: return "sum";
  case ReduceOp::Mean: return "mean";
  case ReduceOp::Max: return "max";
  }
  return "?";
}

// acc[i] = acc[i] op x[i]; max propagates NaN, as torch.max does.
template <class T> void combine(T* acc, const T* x, size_t n, ReduceOp op) {
  if (op == ReduceOp::Max) {
    for (size_t i = 0; i < n; ++i) {
      if constexpr (std::is_floating_point_v<T>) {
        if (std::isnan(x[i]) || x[i] > acc[i]) acc[i] = x[i];
      } else {
        acc[i] = std::max(acc[i], x[i]);
      }
    }
    return;
  }
  for (size_t i = 0; i < n; ++i) acc[i] += x[i];
}

void combine(DType dt, void* acc, const void* x, size_t n, ReduceOp op) {
  switch (dt) {
  case DType::Int32: return combine(static_cast<int32_t*>(acc), static_cast<const int32_t*>(x), n, op);
  case DType::Int64: return combine(static_cast<int64_t*>(acc), static_cast<const int64_t*>(x), n, op);
  case DType::Float32: return combine(static_cast<float*>(acc), static_cast<const float*>(x), n, op);
  case DType::Float64: return combine(static_cast<double*>(acc), static_cast<const double*>(x), n, op);
  case DType::Bool: break;
  }
  KILN_ASSERT(false, "combine of an unsupported dtype");
}

// acc[i] /= world (Mean is checked to be floating).
void divide(DType dt, void* acc, size_t n, int world) {
  if (dt == DType::Float32)
    for (size_t i = 0; i < n; ++i) static_cast<float*>(acc)[i] /= static_cast<float>(world);
  else
    for (size_t i = 0; i < n; ++i) static_cast<double*>(acc)[i] /= static_cast<double>(world);
}

void check_reducible(const char* op, DType dt, ReduceOp rop, const std::string& what, const Loc& loc) {
  if (dt == DType::Bool) throw Error(op, "cannot reduce bool values (" + what + ")", loc);
  if (rop == ReduceOp::Mean && !is_floating(dt))
    throw Error(op, "mean needs a floating dtype (" + what + "); use sum", loc);
}

std::shared_ptr<graph::Storage> host_buffer(size_t bytes, const char* op, const Loc& loc) {
  return detail::memory_guard(op, loc, [&] { return runtime::allocate_host(bytes); });
}

// n elements cut into one block per rank, on multiples of `unit` elements (a row for
// reduce_scatter, 1 for all_reduce).
struct Blocks {
  size_t n, unit;
  int parts;
  size_t begin(int c) const { return n / unit * static_cast<size_t>(c) / static_cast<size_t>(parts) * unit; }
  size_t size(int c) const { return begin(c + 1) - begin(c); }
};

// The first half of an all-reduce: rank c receives block c of every rank's `in` and combines
// them in rank order. Returns a buffer whose first block is this rank's reduced block.
std::shared_ptr<graph::Storage> reduce_own_block(const Blocks& b, const void* in, DType dt, ReduceOp rop,
                                                 const char* op, const Loc& loc) {
  const auto& w = group(op, loc);
  const size_t es = dtype_size(dt), mine = b.size(w.rank) * es;
  auto parts = host_buffer(std::max<size_t>(1, mine * static_cast<size_t>(w.size)), op, loc);
  char* part = static_cast<char*>(parts->data()); // block `rank` of every rank, in rank order
  char* data = const_cast<char*>(static_cast<const char*>(in)); // only read (sent)
  std::vector<Transfer> sends, recvs;
  for (int r = 0; r < w.size; ++r) {
    char* at = part + mine * static_cast<size_t>(r);
    if (r == w.rank) {
      if (mine) std::memcpy(at, data + b.begin(r) * es, mine);
      continue;
    }
    sends.push_back({r, data + b.begin(r) * es, b.size(r) * es});
    recvs.push_back({r, at, mine});
  }
  exchange(sends, recvs, kScatterTag, op, loc);
  for (int r = 1; r < w.size; ++r) combine(dt, part, part + mine * static_cast<size_t>(r), mine / es, rop);
  if (rop == ReduceOp::Mean) divide(dt, part, mine / es, w.size);
  return parts;
}

// The second half: every rank sends its reduced block (`own`) to every other; returns all n elements.
std::shared_ptr<graph::Storage> gather_blocks(const Blocks& b, const char* own, DType dt, const char* op,
                                              const Loc& loc) {
  const auto& w = group(op, loc);
  const size_t es = dtype_size(dt);
  auto out = host_buffer(std::max<size_t>(1, b.n * es), op, loc);
  char* o = static_cast<char*>(out->data());
  if (b.size(w.rank)) std::memcpy(o + b.begin(w.rank) * es, own, b.size(w.rank) * es);
  std::vector<Transfer> sends, recvs;
  for (int r = 0; r < w.size; ++r) {
    if (r == w.rank) continue;
    sends.push_back({r, const_cast<char*>(own), b.size(w.rank) * es});
    recvs.push_back({r, o + b.begin(r) * es, b.size(r) * es});
  }
  exchange(sends, recvs, kGatherTag, op, loc);
  return out;
}

// A realized CPU tensor of `storage`, moved to `device`.
Tensor wrap(std::shared_ptr<graph::Storage> storage, DType dt, IntList shape, Device device, const Loc& loc) {
  Tensor t(graph::make_input(dt, std::move(shape), std::move(storage)));
  return device == kCPU ? t : t.to(device, loc);
}

// The realized values of `ts` (of one dtype) one after another in host memory: the tensor's
// own storage when there is one tensor (read only), else a copy.
std::shared_ptr<graph::Storage> flatten(const std::vector<Tensor>& ts, const char* op, const Loc& loc) {
  if (ts.size() == 1) return detail::host_storage(ts[0], op, loc);
  const size_t es = dtype_size(ts[0].dtype());
  size_t n = 0;
  for (const Tensor& t : ts) n += static_cast<size_t>(t.numel());
  auto flat = host_buffer(std::max<size_t>(1, n * es), op, loc);
  size_t at = 0;
  for (const Tensor& t : ts) {
    const size_t bytes = static_cast<size_t>(t.numel()) * es;
    if (bytes) std::memcpy(static_cast<char*>(flat->data()) + at, detail::host_storage(t, op, loc)->data(), bytes);
    at += bytes;
  }
  return flat;
}

// `flat` cut back into tensors shaped and placed like `like` (one tensor: `flat` itself).
std::vector<Tensor> unflatten(std::shared_ptr<graph::Storage> flat, const std::vector<Tensor>& like, const char* op,
                              const Loc& loc) {
  const DType dt = like[0].dtype();
  if (like.size() == 1) return {wrap(std::move(flat), dt, like[0].shape(), like[0].device(), loc)};
  std::vector<Tensor> out;
  size_t at = 0;
  for (const Tensor& t : like) {
    const size_t bytes = static_cast<size_t>(t.numel()) * dtype_size(dt);
    auto piece = host_buffer(std::max<size_t>(1, bytes), op, loc);
    if (bytes) std::memcpy(piece->data(), static_cast<char*>(flat->data()) + at, bytes);
    at += bytes;
    out.push_back(wrap(std::move(piece), dt, t.shape(), t.device(), loc));
  }
  return out;
}

std::string describe(const std::string& call, const Tensor& t) { return call + " of " + t.type_str(); }

void check_defined(const char* op, const Tensor& t, const Loc& loc) {
  if (!t.defined()) throw Error(op, "the tensor is undefined", loc);
}

// ---------------------------------------------------------------- on NCCL

// The value of realized `t` in its device's memory (no copy).
std::shared_ptr<graph::Storage> device_value(const Tensor& t) {
  std::shared_ptr<graph::Storage> s = t.node()->realized();
  KILN_ASSERT(s && s->device() == t.device(), "a realized tensor without its storage on its device");
  return s;
}

// One collective's input and output on the device, as a runtime::nccl::Call and the result tensor.
struct NcclPart {
  // Held until the call is queued: a block freed then is reused only by later work on the same
  // stream (runtime::Gpu's allocator), which runs after the collective.
  std::shared_ptr<graph::Storage> in;
  Tensor out;
};

// A fresh result of `shape` on t's device, with the NCCL call that writes it from t's value.
NcclPart nccl_part(const Tensor& t, IntList shape, runtime::nccl::Call& call, const char* op, const Loc& loc) {
  NcclPart part{t.numel() > 0 ? device_value(t) : nullptr, Tensor()};
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  const size_t bytes = static_cast<size_t>(n) * dtype_size(t.dtype());
  auto out = detail::memory_guard(op, loc, [&] { return runtime::allocate(t.device(), std::max<size_t>(1, bytes)); });
  call.send = part.in ? part.in->data() : nullptr;
  call.recv = out->data();
  part.out = Tensor(graph::make_input(t.dtype(), std::move(shape), std::move(out), t.device()));
  return part;
}

// Queues the calls whose count is not zero on the device's stream (runtime::nccl::run).
void run_nccl(Device device, std::vector<runtime::nccl::Call> calls, const char* op, const Loc& loc) {
  std::erase_if(calls, [](const runtime::nccl::Call& c) { return c.count == 0; });
  runtime::nccl::run(device, calls, op, options().dist_timeout, loc);
}

runtime::nccl::Reduction nccl_reduction(ReduceOp op) {
  return op == ReduceOp::Max ? runtime::nccl::Reduction::Max : runtime::nccl::Reduction::Sum;
}

// Mean is NCCL's sum divided by the world size in a kiln kernel (as the host path divides: not
// ncclAvg, whose floating average premultiplies each input by 1/p); the results realized.
std::vector<Tensor> finish(std::vector<Tensor> out, ReduceOp op, int world, const Loc& loc) {
  if (op == ReduceOp::Mean)
    for (Tensor& t : out) t = t / static_cast<double>(world);
  realize(out, loc);
  return out;
}

// all_reduce_coalesced on NCCL: one ncclAllReduce per tensor, in one group.
std::vector<Tensor> nccl_all_reduce(const std::vector<Tensor>& ts, ReduceOp op, const char* name, const Loc& loc) {
  realize(ts, loc);
  std::vector<runtime::nccl::Call> calls;
  std::vector<NcclPart> parts;
  for (const Tensor& t : ts) {
    runtime::nccl::Call c{runtime::nccl::Kind::AllReduce, nullptr, nullptr, static_cast<size_t>(t.numel()),
                          t.dtype(), nccl_reduction(op)};
    parts.push_back(nccl_part(t, t.shape(), c, name, loc));
    calls.push_back(c);
  }
  run_nccl(ts[0].device(), std::move(calls), name, loc);
  std::vector<Tensor> out;
  for (NcclPart& p : parts) out.push_back(p.out);
  return finish(std::move(out), op, group(name, loc).size, loc);
}

// A collective of one tensor on NCCL: `kind` from `t` into a result of `shape`.
Tensor nccl_one(runtime::nccl::Kind kind, const Tensor& t, IntList shape, size_t count, ReduceOp op, int root,
                const char* name, const Loc& loc) {
  realize({t}, loc);
  runtime::nccl::Call c{kind, nullptr, nullptr, count, t.dtype(), nccl_reduction(op), root};
  NcclPart part = nccl_part(t, std::move(shape), c, name, loc);
  run_nccl(t.device(), {c}, name, loc);
  return finish({part.out}, op, group(name, loc).size, loc)[0];
}

} // namespace

// Queries exchange nothing: they are fine inside a compile() trace (the group does not change).
int rank(Loc loc) { return runtime::comm::world("rank", loc).rank; }
int world_size(Loc loc) { return runtime::comm::world("world_size", loc).size; }
std::string backend(Loc loc) { return runtime::comm::world("backend", loc).backend; }

std::string backend(Device device, Loc loc) {
  const auto& w = runtime::comm::world("backend", loc);
  if (device.kind != Device::Kind::CUDA || w.size == 1) return w.backend;
  const std::string staged = w.backend + ", staged through host memory: ";
  if (!options().nccl) return staged + "KILN_NCCL=0";
  if (std::string why = runtime::nccl::unusable(device); !why.empty()) return staged + why;
  return runtime::nccl::describe();
}

void barrier(Loc loc) {
  Timed timed("barrier");
  agree("barrier", "barrier", false, loc);
}

Tensor all_reduce(const Tensor& t, ReduceOp op, Loc loc) {
  check_defined("all_reduce", t, loc);
  return all_reduce_coalesced({t}, op, loc)[0];
}

std::vector<Tensor> all_reduce_coalesced(const std::vector<Tensor>& ts, ReduceOp op, Loc loc) {
  const char* name = "all_reduce";
  Timed timed(name);
  std::string what = std::string(name) + "(" + op_name(op) + ") of";
  for (const Tensor& t : ts) {
    check_defined(name, t, loc);
    if (t.dtype() != ts[0].dtype())
      throw Error(name, "the tensors of one call need one dtype, got " + ts[0].type_str() + " and " + t.type_str(), loc);
    what += " " + t.type_str();
  }
  if (ts.empty()) return {};
  const DType dt = ts[0].dtype();
  check_reducible(name, dt, op, what, loc);
  if (agree(name, what, can_use_nccl(name, ts, loc), loc)) return nccl_all_reduce(ts, op, name, loc);
  realize(ts, loc);
  size_t n = 0;
  for (const Tensor& t : ts) n += static_cast<size_t>(t.numel());
  const Blocks blocks{n, 1, group(name, loc).size};
  const auto own = reduce_own_block(blocks, flatten(ts, name, loc)->data(), dt, op, name, loc);
  return unflatten(gather_blocks(blocks, static_cast<const char*>(own->data()), dt, name, loc), ts, name, loc);
}

Tensor reduce_scatter(const Tensor& t, ReduceOp op, Loc loc) {
  const char* name = "reduce_scatter";
  Timed timed(name);
  check_defined(name, t, loc);
  const int world = world_size(loc);
  const std::string what = describe(std::string(name) + "(" + op_name(op) + ")", t);
  if (t.dim() == 0 || t.size(0) % world != 0)
    throw Error(name, "dim 0 must be a multiple of the world size " + std::to_string(world) + ", got " + t.type_str(), loc);
  check_reducible(name, t.dtype(), op, what, loc);
  const bool nccl = agree(name, what, can_use_nccl(name, {t}, loc), loc);
  const size_t n = static_cast<size_t>(t.numel());
  const size_t row = t.size(0) == 0 || n == 0 ? 1 : n / static_cast<size_t>(t.size(0)); // elements a row
  IntList shape = t.shape();
  shape[0] /= world;
  if (nccl)
    return nccl_one(runtime::nccl::Kind::ReduceScatter, t, shape, n / static_cast<size_t>(world), op, 0, name, loc);
  const Blocks blocks{n, row, world};
  auto own = reduce_own_block(blocks, detail::host_storage(t, name, loc)->data(), t.dtype(), op, name, loc);
  return wrap(std::move(own), t.dtype(), shape, t.device(), loc); // its first block is the result
}

Tensor broadcast(const Tensor& t, int root, Loc loc) {
  const char* name = "broadcast";
  Timed timed(name);
  check_defined(name, t, loc);
  const auto& w = group(name, loc);
  if (root < 0 || root >= w.size)
    throw Error(name, "root " + std::to_string(root) + " is not a rank of a group of " + std::to_string(w.size), loc);
  const std::string what = describe(std::string(name) + " from rank " + std::to_string(root), t);
  if (agree(name, what, can_use_nccl(name, {t}, loc), loc))
    return nccl_one(runtime::nccl::Kind::Broadcast, t, t.shape(), static_cast<size_t>(t.numel()), ReduceOp::Sum, root,
                    name, loc);
  const size_t bytes = static_cast<size_t>(t.numel()) * dtype_size(t.dtype());
  auto out = host_buffer(std::max<size_t>(1, bytes), name, loc);
  std::vector<Transfer> sends, recvs;
  if (w.rank == root) {
    if (bytes) std::memcpy(out->data(), detail::host_storage(t, name, loc)->data(), bytes);
    for (int r = 0; r < w.size; ++r)
      if (r != root) sends.push_back({r, out->data(), bytes});
  } else {
    recvs.push_back({root, out->data(), bytes});
  }
  exchange(sends, recvs, kGatherTag, name, loc);
  return wrap(std::move(out), t.dtype(), t.shape(), t.device(), loc);
}

Tensor all_gather(const Tensor& t, Loc loc) {
  const char* name = "all_gather";
  Timed timed(name);
  check_defined(name, t, loc);
  const auto& w = group(name, loc);
  IntList shape = t.shape();
  shape.insert(shape.begin(), w.size);
  if (agree(name, describe(name, t), can_use_nccl(name, {t}, loc), loc))
    return nccl_one(runtime::nccl::Kind::AllGather, t, shape, static_cast<size_t>(t.numel()), ReduceOp::Sum, 0, name,
                    loc);
  const size_t bytes = static_cast<size_t>(t.numel()) * dtype_size(t.dtype());
  auto out = host_buffer(std::max<size_t>(1, bytes * static_cast<size_t>(w.size)), name, loc);
  char* o = static_cast<char*>(out->data());
  char* mine = o + bytes * static_cast<size_t>(w.rank);
  if (bytes) std::memcpy(mine, detail::host_storage(t, name, loc)->data(), bytes);
  std::vector<Transfer> sends, recvs;
  for (int r = 0; r < w.size; ++r) {
    if (r == w.rank) continue;
    sends.push_back({r, mine, bytes});
    recvs.push_back({r, o + bytes * static_cast<size_t>(r), bytes});
  }
  exchange(sends, recvs, kGatherTag, name, loc);
  return wrap(std::move(out), t.dtype(), shape, t.device(), loc);
}

void abort_job(int code) { runtime::comm::abort_job(code); }

Stats stats() { return counters(); }
void reset_stats() { counters() = Stats{}; }

} // namespace kiln::dist

namespace kiln::nn {

namespace {
// Parameter indices in reverse registration order, cut into buckets of one dtype and at most
// `cap` bytes (a larger parameter alone).
std::vector<std::vector<size_t>> make_buckets(const std::vector<Tensor>& params, int64_t cap) {
  std::vector<std::vector<size_t>> buckets;
  int64_t filled = 0;
  for (size_t k = params.size(); k-- > 0;) {
    const Tensor& p = params[k];
    const int64_t bytes = p.numel() * static_cast<int64_t>(dtype_size(p.dtype()));
    const bool fits = !buckets.empty() && params[buckets.back()[0]].dtype() == p.dtype() && filled + bytes <= cap;
    if (!fits) buckets.emplace_back(), filled = 0;
    buckets.back().push_back(k);
    filled += bytes;
  }
  return buckets;
}
} // namespace

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<Module> module, DDPOptions options, Loc loc)
    : options_(options) {
  const char* op = "DistributedDataParallel";
  const detail::UserCall call(op, loc); // errors of the broadcasts are the constructor's
  if (!module) throw Error(op, "the module is null", loc);
  if (options.bucket_bytes <= 0)
    throw Error(op, "bucket_bytes must be positive, got " + std::to_string(options.bucket_bytes), loc);
  module_ = register_module("module", std::move(module));
  dist::world_size(loc); // joins the group now: an unusable environment fails here
  if (options.broadcast_at_construction) {
    NoGradGuard no_grad;
    for (Tensor& t : module_->parameters()) t.assign(dist::broadcast(t, 0, loc), loc);
    sync_buffers(loc);
  }
  buckets_ = make_buckets(parameters(), options.bucket_bytes);
}

void DistributedDataParallel::sync_buffers(Loc loc) {
  const detail::UserCall call("DistributedDataParallel::sync_buffers", loc);
  NoGradGuard no_grad;
  for (Tensor& t : module_->buffers()) t.assign(dist::broadcast(t, 0, loc), loc);
}

Tensor DistributedDataParallel::forward_impl(const Tensor& x) { return module_->forward(x); }

namespace {

// run(group) for each group, outside compile(): each group realized (for DDP, the backward pass
// as far as a bucket's gradients need), then run started on another thread while this one
// computes the next group, as compiled replays start their host stages; the same plans' values,
// so the same bits.
std::vector<std::vector<Tensor>> run_started(std::vector<std::vector<Tensor>> groups, const detail::HostRun& run,
                                             const Loc& loc) {
  std::deque<detail::StartedStage> started;
  std::vector<std::vector<Tensor>> out;
  try {
    for (std::vector<Tensor>& g : groups) {
      realize(g, loc);
      started.emplace_back(run, std::move(g), started.empty() ? nullptr : &started.back());
    }
    for (const detail::StartedStage& s : started) out.push_back(s.get());
  } catch (...) {
    for (const detail::StartedStage& s : started) s.wait(); // no collective outlives the step
    throw;
  }
  return out;
}

} // namespace

void DistributedDataParallel::sync_gradients(Loc loc) {
  const bool suspended = no_sync_depth_ > 0;
  detail::trace_guard([this, suspended] { return (no_sync_depth_ > 0) == suspended; }); // traced again on a change
  if (suspended) return;
  const char* op = "DistributedDataParallel::sync_gradients";
  const detail::UserCall call(op, loc);
  const std::vector<Tensor> params = parameters();
  std::vector<Tensor> grads; // one per parameter, zeros where it has none
  for (const Tensor& p : params) grads.push_back(p.grad().defined() ? p.grad() : zeros_like(p, loc));
  const detail::HostRun mean_of = [op, loc](const std::vector<Tensor>& g) {
    const detail::UserCall replayed(op, loc);
    return dist::all_reduce_coalesced(g, dist::ReduceOp::Mean, loc);
  };
  std::vector<std::vector<Tensor>> bucket_grads(buckets_.size());
  for (size_t b = 0; b < buckets_.size(); ++b)
    for (size_t k : buckets_[b]) bucket_grads[b].push_back(grads[k]);
  // Eagerly, each bucket's all-reduce starts as soon as its gradients are computed (run_started);
  // inside compile(), one host stage per bucket, started on every replay as soon as the plan
  // computing the bucket's gradients has run, while the next plans compute the rest.
  std::vector<std::vector<Tensor>> means;
  if (!detail::active_capture()) {
    means = run_started(std::move(bucket_grads), mean_of, loc);
  } else {
    for (const std::vector<Tensor>& g : bucket_grads) means.push_back(detail::host_stage(g, mean_of));
  }
  for (size_t b = 0; b < buckets_.size(); ++b)
    for (size_t i = 0; i < buckets_[b].size(); ++i) {
      detail::note_state_change(params[buckets_[b][i]].impl());
      params[buckets_[b][i]].impl()->grad = means[b][i];
    }
}

} // namespace kiln::nn
