#pragma once
/// \file dist.h
/// Data-parallel training across processes: a process group, collectives on tensors, and
/// nn::DistributedDataParallel.
///
/// The group comes from the launcher's environment on first use: under Open MPI's mpirun
/// (`mpirun -np 2 ./train --ddp`; as root add `--allow-run-as-root`, and `--oversubscribe`
/// for more ranks than cores) each process is one rank of MPI_COMM_WORLD, reached through
/// Open MPI's libmpi.so.40 loaded at run time (kiln does not link MPI). Started without a
/// launcher, a program is rank 0 of a group of 1, where every collective returns its input:
/// the same code runs on one process or many. RANK and WORLD_SIZE, where set, must agree.
///
/// Collectives are called by every rank in the same order, from one thread at a time, outside
/// compile() traces. They realize their input, and return a new realized tensor on the input's
/// device, cut from the graph of gradients (collectives are not differentiated).
///
/// CUDA tensors: where every rank's tensor is on a CUDA device and NVIDIA's libnccl.so.2 loads
/// on every rank (KILN_NCCL_LIBRARY names another path), the collective runs on NCCL, queued on
/// kiln's stream of that device (no host wait); otherwise, or with KILN_NCCL=0 (options().nccl),
/// the tensor is staged through host memory on MPI. backend(device) says which, and
/// KILN_DEBUG=1 says it once on stderr. An NCCL error is a kiln::Error naming the collective,
/// the NCCL function, the rank and NCCL's message; later collectives are staged through host
/// memory.
///
/// Determinism: on MPI, reductions combine the ranks' values in rank order
/// (((x0 + x1) + x2) + ...) for every element, whatever the timing, message sizes or DDP bucket
/// sizes. On NCCL, the order of a floating sum is NCCL's (its rings and trees): every rank gets
/// the same values, within rounding of the rank-order sum, and bitwise equal to it on 2 ranks
/// (x0 + x1 == x1 + x0); integer sums and max are exact either way. KILN_NCCL=0 gives the
/// rank-order bits on CUDA tensors too. Mean is the sum divided by world_size() on both paths.
///
/// Errors: every collective first exchanges a short description of the call (collective,
/// reduction, root, dtype, shape); a mismatch throws kiln::Error on every rank naming both
/// descriptions. A rank that does not answer within options().dist_timeout seconds
/// (KILN_DIST_TIMEOUT, default 300) makes the others throw kiln::Error naming it and the
/// collective; the group is then unusable and the process leaves MPI without finalizing,
/// so that mpirun ends the job rather than hang. On NCCL a collective returns once queued, so
/// a peer that dies or hangs inside it is caught by a watchdog: the next host wait on that
/// GPU's stream (item(), to(kCPU)) or the next collective throws kiln::Error once it has not
/// completed within options().dist_timeout seconds of the stream reaching it (or NCCL reported
/// an error), naming the collective, its line, this rank and the ranks that did not answer over
/// MPI; the communicator is aborted and later collectives on CUDA tensors are staged through
/// host memory (or, when a rank did not answer, fail: the group is unusable).

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/nn.h"
#include "kiln/tensor.h"

namespace kiln::dist {

/// How all_reduce and reduce_scatter combine the ranks' values.
enum class ReduceOp {
  Sum,  ///< x0 + x1 + ... (in rank order on MPI; see Determinism above)
  Mean, ///< the sum, divided by world_size() (floating dtypes only)
  Max,  ///< the largest
};

/// This process's rank, 0 .. world_size()-1. Throws kiln::Error when the environment asks for a
/// group that cannot be joined (no libmpi.so.40 under mpirun, WORLD_SIZE > 1 without mpirun).
int rank(Loc loc = Loc::current());
/// Number of processes in the group (1 without a launcher).
int world_size(Loc loc = Loc::current());
/// "mpi (libmpi.so.40)" or "single process".
std::string backend(Loc loc = Loc::current());
/// What collectives on this rank's tensors of `device` use: for CUDA tensors on several ranks,
/// "nccl 2.21.5 (libnccl.so.2)" where NCCL can serve them (a collective uses it when every
/// rank can), else backend() and why they are staged through host memory; backend() otherwise.
std::string backend(Device device, Loc loc = Loc::current());
/// Returns once every rank has called it.
void barrier(Loc loc = Loc::current());

/// The elementwise reduction of `t` over all ranks, on every rank (same shape and dtype on all
/// ranks; bool is not reduced).
Tensor all_reduce(const Tensor& t, ReduceOp op = ReduceOp::Sum, Loc loc = Loc::current());
/// Rank `root`'s `t`, on every rank (same shape and dtype on all ranks).
Tensor broadcast(const Tensor& t, int root = 0, Loc loc = Loc::current());
/// Every rank's `t` stacked in rank order: shape [world_size(), ...t.shape()].
Tensor all_gather(const Tensor& t, Loc loc = Loc::current());
/// all_reduce(t, op) split into world_size() equal blocks along dim 0: this rank gets block rank()
/// (t.size(0) must be a multiple of world_size()).
Tensor reduce_scatter(const Tensor& t, ReduceOp op = ReduceOp::Sum, Loc loc = Loc::current());
/// all_reduce of several tensors of one dtype as one message: the results, in order (what
/// DistributedDataParallel does per bucket).
std::vector<Tensor> all_reduce_coalesced(const std::vector<Tensor>& ts, ReduceOp op = ReduceOp::Sum,
                                         Loc loc = Loc::current());

/// Ends this process with status `code` at once, and the whole job with it under mpirun
/// (MPI_Abort): what a rank that fails should do rather than return from main, where MPI's
/// finalization would wait for ranks that are waiting for it. Without a launcher, std::exit(code).
[[noreturn]] void abort_job(int code);

/// What this process's collectives cost since the start (or reset_stats()).
struct Stats {
  int64_t collectives = 0; ///< calls
  int64_t bytes_sent = 0;  ///< payload bytes this rank sent (descriptions excluded)
  double seconds = 0;      ///< wall time inside collectives, waiting for other ranks included
};
/// The counters of this process.
Stats stats();
/// Zeroes the counters.
void reset_stats();

} // namespace kiln::dist

namespace kiln::nn {

/// Options of DistributedDataParallel.
struct DDPOptions {
  /// Gradients are averaged in buckets of about this many bytes (a larger parameter gets a
  /// bucket of its own), as PyTorch's bucket_cap_mb (25 MB by default).
  int64_t bucket_bytes = 25 * 1024 * 1024;
  /// Broadcast rank 0's parameters and buffers at construction (as PyTorch does).
  bool broadcast_at_construction = true;
};

/// Data-parallel training of a module, as torch.nn.parallel.DistributedDataParallel: every
/// rank holds a replica, runs it on its own part of each batch, and the replicas stay equal
/// because their gradients are averaged across ranks before each optimizer step.
///
/// kiln's backward() is lazy (gradients are graph until the step realizes them), so the
/// averaging is an explicit call: `loss.backward(); ddp.sync_gradients(); opt.step();`.
/// It averages the gradients bucket by bucket (in reverse registration order, roughly the
/// order backward produces them; in rank order on MPI, NCCL's order on CUDA tensors where
/// NCCL is used), and replaces each parameter's grad by the
/// average. A parameter without a gradient on this rank contributes zeros. Eagerly, it realizes
/// each bucket's gradients in turn and starts its all-reduce on another thread while it
/// computes the next bucket's (the rest of the backward pass). Inside a compile()d step
/// (forward, backward, sync_gradients(), the optimizer's step) each bucket's all-reduce is part
/// of every replay, started as soon as the plan computing that bucket's gradients has run and
/// overlapping the plans that compute the rest of the backward pass (see detail::host_stage);
/// the bits are those of eager steps on MPI. (On GPU tensors the stages run on the replaying thread; on NCCL they are queued on the
/// stream between the plans' kernels.)
///
/// The wrapped module is registered as the child "module" (state_dict names start with
/// "module.", as in PyTorch); module() gives it back for checkpoints that a single process
/// reads. Buffers (BatchNorm's running statistics) stay per rank after construction.
class DistributedDataParallel : public Module {
public:
  /// Wraps `module` (shared with the caller); broadcasts rank 0's parameters and buffers.
  explicit DistributedDataParallel(std::shared_ptr<Module> module, DDPOptions options = {}, Loc loc = Loc::current());
  /// The wrapped module's forward, as a call at `loc`.
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) { return forward_at(x, loc); }
  std::string name() const override { return "DistributedDataParallel"; }
  /// The wrapped module.
  Module& module() { return *module_; }

  /// Averages the gradients of the parameters across ranks (see the class comment). No-op in a
  /// no_sync() scope, where gradients accumulate locally.
  void sync_gradients(Loc loc = Loc::current());
  /// Copies rank 0's buffers (BatchNorm's running statistics) to every rank, as PyTorch's
  /// broadcast_buffers does before each forward: call it before evaluating or saving.
  void sync_buffers(Loc loc = Loc::current());
  /// While the returned guard lives, sync_gradients() does nothing (gradient accumulation:
  /// the first sync_gradients() after it averages everything accumulated).
  class NoSync {
  public:
    /// Suspends the averaging of `ddp`.
    explicit NoSync(DistributedDataParallel& ddp) : ddp_(&ddp) { ++ddp.no_sync_depth_; }
    ~NoSync() { --ddp_->no_sync_depth_; }
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;
  private:
    DistributedDataParallel* ddp_;
  };
  /// A NoSync guard for this module (`{ auto g = ddp.no_sync(); ... }`).
  [[nodiscard]] std::unique_ptr<NoSync> no_sync() { return std::make_unique<NoSync>(*this); }
  /// The buckets: indices into parameters(), in the order they are reduced.
  const std::vector<std::vector<size_t>>& buckets() const { return buckets_; }

protected:
  Tensor forward_impl(const Tensor& x) override;

private:
  std::shared_ptr<Module> module_;
  DDPOptions options_;
  std::vector<std::vector<size_t>> buckets_;
  int no_sync_depth_ = 0;
};

/// Batch normalization whose training-mode statistics are those of the whole global batch, as
/// torch.nn.SyncBatchNorm: each rank's per-channel count, mean and sum of squared deviations are
/// gathered from every rank and combined (in rank order; Chan et al.'s pairwise formula, stable
/// where sum-of-squares is not), and the backward pass all-reduces the per-channel sums of the
/// output gradient and of its product with the normalized input. So N ranks with batch B
/// compute the outputs, input gradients and running statistics of one process with batch N*B
/// (to rounding); the weight and bias gradients are each rank's part of it, summed (averaged)
/// by DistributedDataParallel like every other gradient. In evaluation mode, and in a group
/// of one process, it is BatchNorm, bit for bit. Inputs are [N, C, ...] (any rank >= 2).
///
/// Its collectives run as host stages: eagerly, one when forward() is called and one when
/// backward() reaches it; inside compile() as stages of every replay (see compile()). Every
/// rank must run the same layers in the same order. Gradients of its gradients (grad() with
/// create_graph, to any order) and forward mode (jvp()) are taken across ranks too: the gathered
/// statistics and the all-reduced sums are differentiable (the gradient of a sum over ranks is the
/// sum over ranks of the gradients), so they are those of one process with the whole batch, as for
/// first order. They add collectives of their own: every rank must make the same grad()/jvp() calls.
class SyncBatchNorm : public BatchNorm {
public:
  /// For `features` channels.
  explicit SyncBatchNorm(int64_t features, BatchNormOptions options = {}, Loc loc = Loc::current());
  /// A SyncBatchNorm sharing `bn`'s parameters, buffers, options and training mode.
  explicit SyncBatchNorm(const BatchNorm& bn);
  /// normalized x, same shape; a direct call names the caller's line, as operator() does
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) { return forward_at(x, loc); }
  std::string name() const override { return "SyncBatchNorm"; } ///< "SyncBatchNorm"

  /// Replaces every BatchNorm1d/2d among the submodules of `module`, recursively, by a
  /// SyncBatchNorm sharing its parameters and buffers, as PyTorch's
  /// SyncBatchNorm.convert_sync_batchnorm; returns `module` (or the new SyncBatchNorm where
  /// `module` itself is a BatchNorm). The parameters stay the same tensors, so an optimizer
  /// made before still trains them. A module that calls a BatchNorm through its own member
  /// (rather than as a registered child, as Sequential does) keeps calling that BatchNorm.
  static std::shared_ptr<Module> convert_sync_batchnorm(std::shared_ptr<Module> module);

protected:
  Tensor forward_impl(const Tensor& x) override;
};

} // namespace kiln::nn
