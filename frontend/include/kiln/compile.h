#pragma once
/// \file compile.h
/// Capture and replay: a function (e.g. forward + backward + optimizer update) is
/// traced once per argument signature into one compiled, memory-planned plan;
/// later calls bind the new arguments and replay the kernel list with no graph
/// building, scheduling or hashing.

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kiln/tensor.h"

namespace kiln {

/// A traced function. Calls with arguments of a new shape/dtype signature trace again.
///
/// What the function does to tensors that outlive it is captured too: parameters
/// updated with Tensor::assign() and gradients accumulated by backward() or cleared
/// by zero_grad() are updated after each replay, exactly as an eager call would. The
/// arguments are such tensors: a value assign()ed to an argument, or a gradient
/// backward() accumulates into one that requires grad, is the caller's tensor's after
/// the call (a gradient the argument held before the call is accumulated into, and
/// whether it held one is part of the signature). An argument that requires grad without
/// being a leaf (computed from leaves) is an input of its own inside: gradients do not flow
/// through it to those leaves; pass the leaves instead.
/// Tensors that outlive it and that it only reads (a model's parameters and buffers in
/// an evaluation function, gradients) are read as they are at each call, so changes
/// made between calls (eager assigns, another compiled step) show; a change of their
/// dtype, shape or device (Module::to) makes the next call trace again.
/// Reading a value inside the function (item(), to_vector()) is an error while
/// tracing. Random numbers of rand()/randn() called with a fixed seed use that seed
/// on every replay (as they would eagerly); nn::Dropout draws a fresh seed per call,
/// and inside a compiled function it draws one per replay (detail::host_seed), giving
/// the same masks, step for step, as eager calls.
///
/// kiln's optimizers work inside: their slots (momentum, Adam's moments) are updated
/// with assign(), and their per-step host values (the learning rate, Adam's bias
/// corrections, step counts) are recomputed before every replay, so a compiled step
/// gives the same bits as the eager one, schedules included. A replay also checks the
/// host state the trace branched on (which parameters have gradients, which optimizer
/// slots exist and whether they were replaced by load_state_dict()) and traces again
/// when it changed.
///
/// nn::DistributedDataParallel::sync_gradients() (kiln/dist.h) works inside too: its
/// all-reduce cannot be a kernel, so the function is planned in two parts, the kernels up to
/// the gradients and those after, and each replay runs the all-reduce on the host between them
/// (one such call per compiled function).
///
/// What a compiled function returns is values, cut from the graph: the results never require
/// grad, whatever they were computed from. Differentiate inside the function (backward(),
/// grad()) and return the gradients, as a training step does.
///
/// C++ values the function reads (a captured number, a flag, a branch on a size) are read
/// while tracing and are constants of the plan: later calls replay them as they were. Pass
/// what changes between calls as a tensor argument (a 0-d tensor for a scalar), or compile
/// again. kiln's own host values (optimizer learning rates, dropout seeds) are recomputed per
/// replay (see above).
///
/// A trace's kernels are planned for the threads the caller may use at trace time (oneTBB's
/// arena and global_control limit): a product traced on one thread stays one GEMM task when
/// replayed on more (the same bits, less parallelism); trace under the thread limit you train with.
class CompiledFunction {
public:
  /// The traced function's type.
  using Fn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;
  /// Wraps `fn`; nothing is traced until the first call.
  explicit CompiledFunction(Fn fn);
  ~CompiledFunction();
  CompiledFunction(CompiledFunction&&) noexcept;
  CompiledFunction& operator=(CompiledFunction&&) noexcept;
  /// Runs the function: traces on a new signature, otherwise replays. Results are realized.
  std::vector<Tensor> operator()(const std::vector<Tensor>& args, Loc loc = Loc::current());
  /// Number of kernels in the plan of the last call.
  size_t num_kernels() const;
  /// Peak bytes of the intermediates of the last call's plan (outputs excluded).
  size_t peak_intermediate_bytes() const;
  /// Number of traces so far (one per distinct signature).
  size_t num_traces() const;
  /// The kernels of each plan of the last call, in the order they run: one plan, or with host
  /// stages (collectives: DistributedDataParallel's buckets, SyncBatchNorm) one before each
  /// stage and one after the last.
  std::vector<size_t> kernels_per_plan() const;

private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// compile(fn): see CompiledFunction.
CompiledFunction compile(CompiledFunction::Fn fn);

} // namespace kiln
