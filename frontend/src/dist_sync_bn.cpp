// nn::SyncBatchNorm (see kiln/dist.h).
//
// Forward, in training mode on several ranks: each rank computes per channel its count n_r,
// mean m_r and sum of squared deviations M_r; one all-gather gives every rank all of them,
// and every rank combines them alike (so the statistics are bitwise equal on all ranks):
//   N = sum n_r,  mean = sum n_r m_r / N,  M = sum (M_r + n_r (m_r - mean)^2),  var = M / N
// (Chan, Golub and LeVeque's pairwise update, summed over ranks at once). Backward: with
// xhat = (x - mean) / sqrt(var + eps) and g the output gradient, the input gradient is
//   w / sqrt(var + eps) * (g - sum(g) / N - xhat * sum(g xhat) / N)
// with both sums over the global batch: one all-reduce of the 2C local sums.
//
// Higher orders: the statistics are differentiable functions of x (the all-gather is an op whose
// gradient is the all-reduce of the gradients) and the backward's all-reduce is one too, so the
// backward formula, differentiated again, sees how the global statistics and sums depend on every
// rank's input: gradients of gradients are those of one process with the whole batch.
#include <limits>

#include "frontend/src/tensor_impl.h"
#include "kiln/autograd.h"
#include "kiln/dist.h"

namespace kiln::nn {

namespace {

const char* const kOp = "SyncBatchNorm";

// The dims reduced over ({0, 2, 3, ...}) and the shape a [C] tensor broadcasts as ([1, C, 1, ...]).
struct Layout {
  IntList dims{0}, bshape;
  int64_t c = 0;
  explicit Layout(const Tensor& x) : bshape(static_cast<size_t>(x.dim()), 1), c(x.size(1)) {
    for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
    bshape[1] = c;
  }
};

// One host stage: a collective on one tensor whose result has the shape `shape`.
Tensor collective(const Tensor& t, IntList shape, std::function<Tensor(const Tensor&)> run) {
  return detail::host_stage(
      {t}, [run = std::move(run)](const std::vector<Tensor>& in) { return std::vector<Tensor>{run(in[0])}; },
      {std::move(shape)})[0];
}

// The sum of `t` over the ranks, on every rank, as a differentiable op. Rank r's t enters every
// rank's result, so its gradient is the sum over ranks of their gradients: this op again (and so
// differentiable to any order); its forward-mode rule is the same sum of the tangents.
Tensor sum_over_ranks(const Tensor& t, const Loc& loc) {
  auto sum = [loc](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{collective(
        in[0], in[0].shape(), [loc](const Tensor& x) { return dist::all_reduce(x, dist::ReduceOp::Sum, loc); })};
  };
  auto again = [loc](const std::vector<Tensor>&, const std::vector<Tensor>&, const std::vector<Tensor>& g) {
    return std::vector<Tensor>{g[0].defined() ? sum_over_ranks(g[0], loc) : Tensor()};
  };
  return CustomFunction{"all_reduce", sum, again, again}({t}, loc)[0];
}

// Every rank's `t` stacked in rank order ([world, ...t's shape]), as a differentiable op: the
// gradient of this rank's t is row `rank` of the sum over ranks of their gradients (an all-reduce
// of the whole [world, ...] gradient: it is small here, a few values per channel).
Tensor gather_over_ranks(const Tensor& t, const Loc& loc) {
  const int world = dist::world_size(loc), rank = dist::rank(loc);
  IntList shape = t.shape();
  shape.insert(shape.begin(), world);
  auto gather = [loc, shape](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{collective(in[0], shape, [loc](const Tensor& x) { return dist::all_gather(x, loc); })};
  };
  auto backward = [loc, rank](const std::vector<Tensor>& in, const std::vector<Tensor>&, const std::vector<Tensor>& g) {
    return std::vector<Tensor>{sum_over_ranks(g[0], loc).slice(0, rank, rank + 1).reshape(in[0].shape())};
  };
  auto forward_mode = [loc](const std::vector<Tensor>&, const std::vector<Tensor>&, const std::vector<Tensor>& dt) {
    return std::vector<Tensor>{dt[0].defined() ? gather_over_ranks(dt[0], loc) : Tensor()};
  };
  return CustomFunction{"all_gather", gather, backward, forward_mode}({t}, loc)[0];
}

// The global batch's statistics of `x` per channel ([C] each; `count` is [1]), equal on every
// rank; differentiable functions of every rank's x.
struct Stats {
  Tensor mean, var, count;
};

Stats global_stats(const Tensor& x, const Layout& l, const Loc& loc) {
  const int64_t n = x.numel() / l.c;
  const Tensor mean = x.mean(l.dims, true);
  const Tensor dev = x - mean;
  const Tensor row = concat({full({1}, static_cast<double>(n), x.dtype(), x.device()), mean.reshape({l.c}),
                             (dev * dev).sum(l.dims)});
  if (!detail::active_capture()) realize({x, row}); // eagerly: x is kept for the normalization, not recomputed
  const Tensor all = gather_over_ranks(row, loc); // [world, 1 + C + C], in rank order
  const Tensor counts = all.slice(1, 0, 1), means = all.slice(1, 1, 1 + l.c), m2 = all.slice(1, 1 + l.c, 1 + 2 * l.c);
  Stats s;
  s.count = counts.sum({0}).detach(); // an integer: no derivative
  s.mean = (counts * means).sum({0}) / s.count;
  const Tensor shift = means - s.mean;
  s.var = (m2 + counts * shift * shift).sum({0}) / s.count; // biased, for normalizing
  return s;
}

// The normalization with the global statistics, as a custom op whose backward all-reduces. The
// statistics it captures are graph values of x, so the backward's result is differentiable in x
// through them as well as directly.
Tensor normalize(const Tensor& x, const Tensor& weight, const Tensor& bias, const Stats& s, double eps,
                 const Layout& l, const Loc& loc) {
  const Tensor mean = s.mean.reshape(l.bshape), invstd = rsqrt(s.var + eps).reshape(l.bshape);
  const bool affine = weight.defined();
  std::vector<Tensor> inputs{x};
  if (affine) inputs.push_back(weight), inputs.push_back(bias);
  auto forward = [=](const std::vector<Tensor>& in) {
    const Tensor xhat = (in[0] - mean) * invstd;
    return std::vector<Tensor>{affine ? xhat * in[1].reshape(l.bshape) + in[2].reshape(l.bshape) : xhat};
  };
  auto backward = [=](const std::vector<Tensor>& in, const std::vector<Tensor>&, const std::vector<Tensor>& g) {
    const Tensor& gy = g[0];
    const Tensor xhat = (in[0] - mean) * invstd;
    const Tensor sum_dy = gy.sum(l.dims), sum_dy_xhat = (gy * xhat).sum(l.dims); // this rank's, [C]
    const Tensor sums = concat({sum_dy, sum_dy_xhat});
    if (!detail::active_capture()) realize({gy, sums}); // eagerly: gy is kept, not recomputed
    const Tensor global = sum_over_ranks(sums, loc);
    const Tensor mean_dy = (global.slice(0, 0, l.c) / s.count).reshape(l.bshape);
    const Tensor mean_dy_xhat = (global.slice(0, l.c, 2 * l.c) / s.count).reshape(l.bshape);
    const Tensor scale = affine ? invstd * in[1].reshape(l.bshape) : invstd;
    std::vector<Tensor> grads{scale * (gy - mean_dy - xhat * mean_dy_xhat)};
    if (affine) grads.push_back(sum_dy_xhat), grads.push_back(sum_dy); // this rank's part: DDP averages them
    return grads;
  };
  return CustomFunction{kOp, forward, backward}(inputs, loc)[0];
}

} // namespace

SyncBatchNorm::SyncBatchNorm(int64_t features, BatchNormOptions options, Loc loc)
    : BatchNorm(features, options, 2, std::numeric_limits<int>::max(), kOp, loc) {}

SyncBatchNorm::SyncBatchNorm(const BatchNorm& bn) : BatchNorm(bn) {}

Tensor SyncBatchNorm::forward_impl(const Tensor& x) {
  const Loc loc = Loc::current();
  if (x.dim() < 2 || x.size(1) != num_features())
    detail::fail(kOp, "expects [N, " + std::to_string(num_features()) + ", ...] inputs", {&x}, loc);
  // PyTorch's rule: statistics are synchronized in training mode on more than one rank; otherwise
  // it is BatchNorm (the same graph, so the same bits).
  if (!is_training() || dist::world_size(loc) == 1) return BatchNorm::forward_impl(x);
  if (!is_floating(x.dtype())) detail::fail(kOp, "expects a floating-point input", {&x}, loc);
  if (x.numel() == 0) detail::fail(kOp, "needs at least one value per channel on every rank", {&x}, loc);
  // As batch_norm on one rank (integer running statistics are refused), before any communication.
  kiln::detail::check_batch_norm_tensors(kOp, x, {&running_mean, &running_var, &weight, &bias}, loc);
  const Layout l(x);
  const Stats s = global_stats(x, l, loc);
  if (options.track_running_stats) {
    const Tensor factor = count_batch(); // with momentum unset, 1 / num_batches_tracked
    NoGradGuard no_grad;
    const double m = options.momentum.value_or(0);
    kiln::detail::update_running(running_mean, s.mean, m, factor);
    kiln::detail::update_running(running_var, s.var * (s.count / (s.count - 1.0)), m, factor); // unbiased, as BatchNorm
  }
  return normalize(x, weight, bias, s, options.eps, l, loc);
}

std::shared_ptr<Module> SyncBatchNorm::convert_sync_batchnorm(std::shared_ptr<Module> module) {
  auto convert = [](const std::shared_ptr<Module>& m) -> std::shared_ptr<Module> {
    const auto bn = std::dynamic_pointer_cast<BatchNorm>(m);
    if (!bn || std::dynamic_pointer_cast<SyncBatchNorm>(m)) return nullptr;
    return std::make_shared<SyncBatchNorm>(*bn);
  };
  if (auto replaced = convert(module)) return replaced;
  std::vector<Module*> todo{module.get()};
  while (!todo.empty()) {
    Module* m = todo.back();
    todo.pop_back();
    for (auto& [name, child] : m->child_slots()) {
      if (auto replaced = convert(child)) child = std::move(replaced);
      else todo.push_back(child.get());
    }
  }
  return module;
}

} // namespace kiln::nn
