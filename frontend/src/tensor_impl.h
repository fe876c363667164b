#pragma once
// Internal: the shared state behind a Tensor handle, and helpers for op implementations.

#include <atomic>
#include <cmath>
#include <cstdint>
#include <functional>
#include <future>
#include <initializer_list>
#include <limits>
#include <mutex>
#include <new>
#include <stdexcept>
#include <type_traits>
#include <string>
#include <thread>
#include <vector>

#include "graph/node.h"
#include "kiln/tensor.h"

namespace kiln {

/// The next TensorImpl::serial (tensors made later have larger ones).
inline uint64_t next_tensor_serial() {
  static std::atomic<uint64_t> counter{0};
  return counter.fetch_add(1, std::memory_order_relaxed);
}

/// The state shared by all copies of a Tensor handle.
struct TensorImpl {
  const uint64_t serial = next_tensor_serial(); ///< creation order: a trace tells state made before it
  uint64_t noted_in_trace = 0;                  ///< the CaptureState::id that last made it a slot (0: none)
  graph::NodeRef node;         ///< the value, as a graph node (see load_node)
  bool requires_grad = false;  ///< gradients flow to or through it
  bool is_leaf = true;         ///< not the result of an op on grad-requiring tensors
  bool wrapped_number = false; ///< a C++ scalar operand (lowest priority in type promotion)
  Tensor grad;                 ///< accumulated by backward()
  bool graph_released = false; ///< backward() was called on it without retain_graph
  /// A leaf's gradient hooks (Tensor::register_hook): each runs while its flag is true.
  std::vector<std::pair<std::shared_ptr<bool>, std::function<Tensor(const Tensor&)>>> hooks;
  bool retains_grad = false; ///< a non-leaf whose grad() backward() fills (Tensor::retain_grad)
  mutable std::mutex node_mu;  ///< guards `node` where one thread assigns while others read
  std::weak_ptr<const graph::Node> made; ///< the node it counts itself a maker of (graph::Node::tensor_makers)

  TensorImpl() = default;
  TensorImpl(const TensorImpl&) = delete;
  TensorImpl& operator=(const TensorImpl&) = delete;
  ~TensorImpl() {
    if (auto n = made.lock()) n->tensor_makers.fetch_sub(1, std::memory_order_relaxed);
  }

  /// `node`, read under node_mu: what the read paths (to_vector, item, realize) and
  /// assign use, so that a read sees the old or the new value of a concurrent assign.
  /// While a compile() trace on another thread holds the tensor as state, it is the
  /// value from before the trace: the trace's nodes are placeholders of a step not run yet.
  graph::NodeRef load_node() const {
    std::lock_guard lock(node_mu);
    return hidden_by_trace() ? before_trace : node;
  }
  /// Sets `node` under node_mu.
  void store_node(graph::NodeRef n) {
    std::lock_guard lock(node_mu);
    node = std::move(n);
  }
  /// Sets `node` to n if it is still `expected` (a concurrent assign wins); true when set.
  bool replace_node(const graph::Node* expected, graph::NodeRef n) {
    std::lock_guard lock(node_mu);
    if (hidden_by_trace() || node.get() != expected) return false;
    node = std::move(n);
    return true;
  }
  /// Makes the tensor state of a compile() trace running on this thread: `start` is its value,
  /// which other threads keep reading (load_node) until end_trace(), whatever the trace assigns.
  void begin_trace(graph::NodeRef start) {
    std::lock_guard lock(node_mu);
    before_trace = start;
    tracer = std::this_thread::get_id();
    node = std::move(start);
  }
  /// Ends begin_trace(): the tensor's value is `start` again, for every thread.
  void end_trace(graph::NodeRef start) {
    std::lock_guard lock(node_mu);
    before_trace = nullptr;
    node = std::move(start);
  }

private:
  graph::NodeRef before_trace; ///< set by begin_trace(): the value other threads read meanwhile
  std::thread::id tracer;      ///< the thread whose trace set before_trace
  bool hidden_by_trace() const { return before_trace && tracer != std::this_thread::get_id(); }
};

namespace detail {

/// While alive, records the caller's line on the nodes a public function makes (graph::SourceScope) and names
/// the function on the errors of the ops it uses (UserCall).
struct OpScope {
  graph::SourceScope at;
  UserCall call;
  OpScope(const char* op, const Loc& loc) : at(loc, op), call(op, loc) {}
};

/// A leaf's gradient `g` after its hooks (Tensor::register_hook), in the order registered; errors name `loc`.
Tensor after_leaf_hooks(const TensorImpl& impl, Tensor g, const Loc& loc);
/// "f32[2,3]" of a tensor.
std::string operand_str(const Tensor& t);
/// "[9, 11]": a list of extents as Python prints one (error messages, reprs).
std::string list_str(const IntList& v);
/// Throws kiln::Error for `op`, listing the operands' types.
[[noreturn]] void fail(const std::string& op, const std::string& what, std::initializer_list<const Tensor*> operands,
                       const Loc& loc);
/// Throws kiln::Error for `op` at `loc`, listing the operands, when `shape` cannot be a
/// tensor's shape (graph::shape_error: a negative extent, or beyond graph::kMaxNumel).
void check_shape(const std::string& op, const graph::Shape& shape, std::initializer_list<const Tensor*> operands,
                 const Loc& loc);
/// The device an op on `operands` runs on: theirs, where they agree. A constant, arange or
/// random leaf holds no data and follows the others (see graph::build::leaf_on); two
/// operands with data on different devices throw kiln::Error naming op, operands and devices.
Device common_device(const std::string& op, std::initializer_list<const Tensor*> operands, const Loc& loc);
/// Throws kiln::Error for `op` at `loc`, saying why, when `device` cannot be used.
void check_device(const std::string& op, Device device, const Loc& loc);
/// Same, for a list of operands.
Device common_device(const std::string& op, const std::vector<Tensor>& operands, const Loc& loc);
/// Wraps an op's result: requires grad when an input does (and grad mode is on); under
/// no_grad a result of grad-requiring inputs is detached.
Tensor result(graph::NodeRef node, std::initializer_list<const Tensor*> inputs);
/// Same, for a list of inputs.
Tensor result_of(graph::NodeRef node, const std::vector<Tensor>& inputs);
/// Throws kiln::Error for `op` when `t`'s graph was released by a backward() without retain_graph.
void check_graph_retained(const std::string& op, const Tensor& t, const Loc& loc);
/// Registers a grad-requiring leaf so that backward() can find it by node.
void register_leaf(const std::shared_ptr<TensorImpl>& impl);
/// The live leaf tensor whose current node is `n`, or null.
std::shared_ptr<TensorImpl> leaf_for(const graph::Node* n);
/// `dim` wrapped into x's range, or kiln::Error for `op` at `loc` naming the dim and x's rank.
int64_t wrap_dim_or_fail(const std::string& op, int64_t dim, const Tensor& x, const Loc& loc);
/// `tensors` with each tensor (TensorImpl) once, first occurrences in order.
std::vector<Tensor> distinct_tensors(std::vector<Tensor> tensors);
/// Moves a leaf's value (and gradient) to `device` in place, keeping its identity
/// (requires_grad, registration): what Module::to does to parameters and buffers.
void move_in_place(const Tensor& t, Device device, const Loc& loc);
/// Converts a leaf's value (and gradient) to `dtype` in place, computing it now and keeping its
/// identity (requires_grad, registration): what Module::to(DType) does to parameters and buffers.
void cast_in_place(const Tensor& t, DType dtype, const Loc& loc);
/// Eager loops at constant cost: outside a compile() trace, a tensor whose value or
/// gradient changed (assign(), backward()) waits here, with the roots backward() ran
/// from, until flush_pending() realizes them all in one realize (an optimizer's step()
/// does; after a backward(), any kiln::realize() does too, in the same realize: a loop
/// that assign()s by hand and reads its loss), so the next step reads buffers instead
/// of a growing graph. Held weakly.
void note_pending(const std::shared_ptr<TensorImpl>& impl);
/// Same, for a root of backward(): only its value is realized.
void note_pending_root(const std::shared_ptr<TensorImpl>& impl);
/// True when kiln::realize() of the tensor `impl` would compute nothing: it is defined and holds
/// a value already computed, and no backward()'s roots wait to join a realize (see note_pending).
bool nothing_to_realize(const std::shared_ptr<TensorImpl>& impl);
/// Realizes what note_pending() and note_pending_root() collected on this thread (values,
/// defined gradients, roots) in one realize; the leaves drop their history (always: a KeepHistory
/// keeps only the tensors a realize is asked for). No-op in a trace.
void flush_pending();
/// While one is alive on this thread, a realized leaf keeps its graph instead of dropping its
/// history (becoming an input that holds its data). Dropping it is safe only where nothing will
/// follow the tensor's graph again; forward mode and derivatives of custom rules follow graph
/// edges whatever requires_grad says. So jvp() holds one while it runs the function (the tangent
/// is seeded at its arguments), and a custom call's rules run under one (their results may be
/// differentiated again: create_graph, or forward mode by transposing the reverse rule).
class KeepHistory {
public:
  KeepHistory();
  ~KeepHistory();
  KeepHistory(const KeepHistory&) = delete;
  KeepHistory& operator=(const KeepHistory&) = delete;
};
/// The realized value of `t` in host memory (copied from a GPU, waiting for it, when it lives there);
/// memory that cannot be had is an OutOfMemoryError of `op` at `loc`.
std::shared_ptr<graph::Storage> host_storage(const Tensor& t, const char* op, const Loc& loc);

/// std::vector<T>(n) for a public function `op` called at `loc`: memory that cannot be had is an
/// OutOfMemoryError naming the bytes and what they were for (`what()`, "the values of f32[4]").
/// Every host vector whose size the user chose (a tensor's values, a data set, a file) is made here.
/// A count beyond what a vector can hold (std::length_error) is memory that cannot be had too; its
/// bytes saturate at UINT64_MAX.
template <class T, class What> std::vector<T> host_vector(size_t n, const char* op, What what, const Loc& loc) {
  try {
    return std::vector<T>(n);
  } catch (const std::bad_alloc&) {
  } catch (const std::length_error&) {
  }
  uint64_t bytes = std::is_same_v<T, bool> ? (n + 7) / 8 : 0;
  if (!std::is_same_v<T, bool> && __builtin_mul_overflow(uint64_t{n}, uint64_t{sizeof(T)}, &bytes)) bytes = UINT64_MAX;
  out_of_memory(op, "host", bytes, what(), loc);
}

/// running = (1 - m) running + m batch, recorded without gradient history: batch_norm's and
/// SyncBatchNorm's update of a running statistic. A defined `factor` (a 0-d tensor: BatchNorm's
/// cumulative average 1 / num_batches_tracked when its momentum is unset) replaces m.
void update_running(Tensor running, const Tensor& batch, double m, const Tensor& factor = Tensor());
/// functional::batch_norm with the running statistics' update factor `factor` when defined (see
/// update_running), else momentum: what BatchNorm calls.
Tensor batch_norm_with(const Tensor& x, Tensor running_mean, Tensor running_var, const Tensor& weight,
                       const Tensor& bias, bool training, double momentum, const Tensor& factor, double eps,
                       const Loc& loc);
/// Throws the kiln::Error of `op` at `loc` unless each defined one of `ts` (running statistics, weight,
/// bias) is a floating [C] tensor, C = x.size(1): batch_norm's and SyncBatchNorm's check.
void check_batch_norm_tensors(const char* op, const Tensor& x, std::initializer_list<const Tensor*> ts, const Loc& loc);

/// True when `v` converts to the integer dtype `to` without overflow: in range after truncation
/// toward zero (false for NaN and the infinities). Any value fits a floating or bool dtype.
inline bool fits_integer(double v, DType to) {
  if (!is_integral(to)) return true;
  const double lo = to == DType::Int32 ? -2147483648.0 : -9223372036854775808.0; // -2^31, -2^63
  const double t = std::trunc(v);
  return t >= lo && t < -lo; // -lo itself is the first value past the range
}
/// True when `v` is in the range of `to` (any value fits a floating, bool or int64 dtype).
inline bool fits_integer(int64_t v, DType to) {
  return to != DType::Int32 || (v >= std::numeric_limits<int32_t>::min() && v <= std::numeric_limits<int32_t>::max());
}

} // namespace detail
} // namespace kiln

namespace kiln::detail {

/// State a compiled function's trace records about tensors that outlive it.
struct CaptureState {
  /// One tensor that outlives the traced function and that it reads or changes: every replay
  /// reads its value (and gradient) as it is then, not as it was when traced.
  struct Slot {
    std::shared_ptr<TensorImpl> impl; ///< the tensor
    graph::NodeRef start_node;        ///< its (realized input) node when first touched
    graph::NodeRef start_grad;        ///< its gradient's node then, or null
    bool tracks_grad = true;          ///< false: only its value is read (start_grad is null, whatever the gradient)
  };
  std::vector<Slot> slots; ///< in order of first touch
  uint64_t id = 0;           ///< unique per trace (TensorImpl::noted_in_trace)
  uint64_t first_serial = 0; ///< tensors with a smaller TensorImpl::serial existed before the trace
  /// Host-computed scalars (host_values): placeholders bound to fresh values before each replay.
  struct HostValues {
    std::vector<graph::NodeRef> placeholders; ///< 0-d inputs without data
    DType dtype;                              ///< their dtype
    Device device;                            ///< where they are used (copied there before each replay)
    std::function<void(double*)> fill;        ///< computes their values (and host side effects)
  };
  std::vector<HostValues> host_values; ///< in trace order
  /// Random seeds the host draws per step (host_seed): the trace's placeholder seed, and its generator.
  std::vector<std::pair<uint64_t, std::function<uint64_t()>>> seeds;
  std::vector<std::function<bool()>> guards; ///< the trace is replayed only while all hold
  /// A host computation in the middle of the traced function (host_stage): a replay runs the
  /// plan that computes `inputs` (and whatever else it can without this stage's results),
  /// calls `run` on their values, binds its results to `placeholders` and goes on.
  struct HostStage {
    std::vector<graph::NodeRef> inputs;       ///< what the host computation reads
    std::vector<graph::NodeRef> placeholders; ///< its results in the trace (inputs without data)
    std::function<std::vector<Tensor>(const std::vector<Tensor>&)> run; ///< the computation
  };
  std::vector<HostStage> stages; ///< in trace order (host_stage)
};

/// The capture in progress on this thread, or null.
CaptureState* active_capture();
/// Sets the capture in progress on this thread (null ends it).
void set_active_capture(CaptureState* s);
/// Called before a tensor's value or gradient changes: during a trace, records its
/// state at first touch (realizing it first).
void note_state_change(const std::shared_ptr<TensorImpl>& impl);
/// Called when a tensor's value (with_grad: also its gradient) is read: during a trace, a
/// tensor made before the trace becomes a slot, so that replays read its value then (a
/// parameter assigned between calls, a module moved to another dtype) rather than the
/// value captured when traced.
void note_state_read(const std::shared_ptr<TensorImpl>& impl, bool with_grad);
/// n 0-d tensors of `dtype` (f32 or f64) whose values the host computes with fill():
/// called now outside a trace; inside a compile() trace, called before every replay
/// instead, so that per-step host values (a scheduled learning rate, Adam's bias
/// corrections and step counts) stay current in a compiled step. fill() may have
/// host side effects (advancing a step counter): they happen once per step either way.
/// The values are placed on `device` (where the step that uses them runs).
std::vector<Tensor> host_values(size_t n, DType dtype, Device device, std::function<void(double*)> fill);
/// A random seed drawn by the host per step: next() now outside a trace; inside a
/// compile() trace, a unique placeholder seed that every replay replaces by a fresh
/// next() (so a compiled step's dropout draws a new mask each step, the same masks as
/// eager steps). next() may advance host state: once per step either way.
uint64_t host_seed(std::function<uint64_t()> next);
/// run(inputs), a host computation (a collective) whose results are typed and placed like its
/// inputs and shaped like them, or as `result_shapes` says where it is not empty (one per input).
/// Called now outside a trace. Inside a compile() trace, it is recorded as a stage of every
/// replay: a traced function with k stages is cut into k + 1 plans; a replay runs plan 0,
/// starts stage 0 on the values of its inputs, runs plan 1, starts stage 1, ..., and waits for
/// a stage before the first plan that reads its results. Each value is computed by the last
/// plan its uses allow (a stage's inputs just before it), and values a later plan reads are
/// kept, not recomputed. A started stage on CPU tensors runs on another thread, one stage at a
/// time in trace order, while the plans after it compute: run() must only read its inputs and
/// call collectives (the replaying thread calls none meanwhile).
std::vector<Tensor> host_stage(const std::vector<Tensor>& inputs,
                               std::function<std::vector<Tensor>(const std::vector<Tensor>&)> run,
                               const std::vector<IntList>& result_shapes = {});
/// A host stage's computation: collectives on tensors (host_stage).
using HostRun = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;
/// A host stage started so that work after it computes while it runs (a DDP bucket's all-reduce
/// during the rest of the backward pass, in compiled replays and eager steps): on CPU tensors on
/// another thread, on GPU tensors at once on this thread. Started stages run one at a time, in
/// order (each waits for `before`: collectives are called in the same order on every rank, by one
/// thread at a time). Wait for every started stage before leaving, also on an error.
class StartedStage {
public:
  /// Starts run(in) (its results realized) after `before` (null: the first).
  StartedStage(HostRun run, std::vector<Tensor> in, const StartedStage* before);
  /// Its results (rethrowing its error, or the error of a stage before it); the time this thread
  /// waits for them is a span "wait" of category "dist" in a KILN_TRACE timeline.
  const std::vector<Tensor>& get() const;
  /// Waits for it without throwing (the caller is already failing).
  void wait() const;

private:
  std::shared_future<std::vector<Tensor>> result_;
};
/// Inside a compile() trace: the trace is replayed only while still_valid() holds, and
/// traced again otherwise (host state the traced code branched on). No-op outside.
void trace_guard(std::function<bool()> still_valid);

} // namespace kiln::detail
