#pragma once
/// \file tensor.h
/// kiln's Tensor: a lazy handle on a graph node. Ops record nodes; nothing runs
/// until a value is read (item(), to_vector(), printing) or realize() is called.
///
/// Every op takes the caller's std::source_location (defaulted), so that a
/// kiln::Error names the user's line. Operators capture it through Operand.

#include <concepts>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <optional>
#include <source_location>
#include <string>
#include <utility>
#include <vector>

#include "kiln/device.h"
#include "kiln/dtype.h"
#include "kiln/error.h"
#include "kiln/scalar.h"

namespace kiln {

namespace graph {
class Node;
}

/// A list of extents or dims.
using IntList = std::vector<int64_t>;
/// The caller's source line, defaulted at each op.
using Loc = std::source_location;

/// An index with the user's line that reads it (for its errors): converts from an integer, so that
/// `list[i]` (a ModuleList, a Loader) names the caller's line (operator[] takes no default argument).
struct IndexAt {
  int64_t i;  ///< the index
  Loc loc;    ///< where it is used
  IndexAt(int64_t index, Loc where = Loc::current()) : i(index), loc(where) {} // NOLINT: implicit on purpose
};

struct TensorImpl;

/// What Tensor::register_hook returns, as torch's RemovableHandle: remove() stops the hook (copies share it).
class HookHandle {
public:
  /// A handle of no hook (remove() does nothing).
  HookHandle() = default;
  /// The handle of a hook that runs while *on is true (internal).
  explicit HookHandle(std::shared_ptr<bool> on) : on_(std::move(on)) {}
  /// Stops the hook: later backward() and grad() calls pass the gradient on unchanged.
  void remove() {
    if (on_) *on_ = false;
  }

private:
  std::shared_ptr<bool> on_;
};

/// A tensor: a (shared) handle on a value computed lazily from a graph.
class Tensor {
public:
  /// An undefined tensor (defined() is false).
  Tensor();
  /// Wraps a graph node (internal; used by kiln's own layers).
  explicit Tensor(std::shared_ptr<const graph::Node> node, bool requires_grad = false);

  /// False for a default-constructed tensor.
  bool defined() const { return impl_ != nullptr; }
  /// Element type.
  DType dtype() const;
  /// Extents, outermost first.
  const IntList& shape() const;
  /// Same as shape() (PyTorch's name).
  const IntList& sizes() const { return shape(); }
  /// Extent of one dim (negative dims count from the end).
  int64_t size(int64_t dim, Loc loc = Loc::current()) const;
  /// Rank.
  int64_t dim() const;
  /// Number of elements.
  int64_t numel() const;
  /// Where the value lives.
  Device device() const;
  /// "f32[2,3]".
  std::string type_str() const;

  /// Computes the value now (no-op when it already is).
  const Tensor& realize(Loc loc = Loc::current()) const;
  /// The only element of a one-element tensor, converted to T.
  template <class T> T item(Loc loc = Loc::current()) const;
  /// All elements in row-major order, converted to T.
  template <class T> std::vector<T> to_vector(Loc loc = Loc::current()) const;
  /// A readable form: dtype, shape and values. Past 1000 elements only the first and last 3
  /// entries of each longer dim are shown, and only they are computed.
  std::string str(Loc loc = Loc::current()) const;

  // ---- autograd (see kiln/autograd.h for grad(), jvp(), gradcheck()) ----
  /// Marks this tensor as a leaf that accumulates gradients in backward().
  Tensor& requires_grad_(bool on = true, Loc loc = Loc::current());
  /// True when gradients flow to (or through) this tensor.
  bool requires_grad() const;
  /// False for the result of ops on grad-requiring tensors (recorded for backward()), as torch's is_leaf.
  bool is_leaf() const;
  /// Makes backward() fill grad() of this non-leaf too (accumulating, as a leaf's), as torch's retain_grad;
  /// a no-op on a leaf that requires grad, an error on a tensor that does not require grad.
  void retain_grad(Loc loc = Loc::current());
  /// Calls `hook` with the gradient flowing into this tensor (a lazy tensor) when backward() or grad() builds the
  /// gradients; a defined tensor it returns (shaped like the gradient) replaces it, as torch's register_hook. On a
  /// non-leaf, the hook sees the gradient of the uses made after this call (torch: of all uses); on a leaf, the
  /// gradient backward() accumulates (grad() of a leaf input returns it unhooked, as torch 1.13). Inside compile() the
  /// hook runs while tracing and what it returns is replayed.
  HookHandle register_hook(std::function<Tensor(const Tensor&)> hook, Loc loc = Loc::current());
  /// The gradient accumulated by backward() (undefined before).
  Tensor grad() const;
  /// Clears the accumulated gradient.
  void zero_grad();
  /// Accumulates d(this)/d(leaf) into every leaf's grad(); `grad_output` defaults to ones for scalars.
  /// As in PyTorch, a tensor's graph is differentiated once: a second backward() or grad() of
  /// this tensor throws kiln::Error unless the earlier backward() passed retain_graph = true.
  void backward(const Tensor& grad_output = Tensor(), bool retain_graph = false, Loc loc = Loc::current()) const;
  /// backward() of a one-element tensor: `loss.backward(/*retain_graph=*/true)` keeps the graph.
  void backward(bool retain_graph, Loc loc = Loc::current()) const;
  /// The same value, cut from the graph of gradients.
  Tensor detach() const;
  /// Replaces this tensor's value by `value` (same shape and dtype), keeping its identity
  /// (grad, requires_grad); the way optimizers update parameters. A value on another
  /// device is copied to this tensor's device first (loading a checkpoint into a GPU model).
  void assign(const Tensor& value, Loc loc = Loc::current());

  // ---- in-place methods (inplace.cpp; README "In-place methods") ----
  // Each replaces this tensor's value by the op's result, as PyTorch's `x.add_(y)`, and returns *this; every
  // handle on this tensor sees it. The result keeps this tensor's shape (the other operands must broadcast to it)
  // and dtype (a result type that cannot be cast to it, as an integer tensor's add_(0.5), is an error). On a
  // tensor computed from grad-requiring ones the op is recorded (gradients flow through it); on a grad-requiring
  // leaf it is an error unless grad mode is off (NoGradGuard), where it is an update as assign(). kiln has no views
  // sharing memory: on a tensor whose value is a view-like movement (reshape, view, slice, select, narrow, permute,
  // transpose, expand, squeeze, unfold ...) of another value it is an error rather than a change to the copy alone.
  Tensor& add_(const Tensor& other, Scalar alpha = 1, Loc loc = Loc::current()); ///< this += alpha * other
  Tensor& add_(Scalar other, Scalar alpha = 1, Loc loc = Loc::current()); ///< this += alpha * other
  Tensor& sub_(const Tensor& other, Scalar alpha = 1, Loc loc = Loc::current()); ///< this -= alpha * other
  Tensor& sub_(Scalar other, Scalar alpha = 1, Loc loc = Loc::current()); ///< this -= alpha * other
  Tensor& mul_(const Tensor& other, Loc loc = Loc::current()); ///< this *= other
  Tensor& mul_(Scalar other, Loc loc = Loc::current()); ///< this *= other
  Tensor& div_(const Tensor& other, Loc loc = Loc::current()); ///< this /= other (true division)
  Tensor& div_(Scalar other, Loc loc = Loc::current()); ///< this /= other (true division)
  Tensor& pow_(const Tensor& exponent, Loc loc = Loc::current()); ///< this = this ^ exponent
  Tensor& pow_(Scalar exponent, Loc loc = Loc::current()); ///< this = this ^ exponent
  Tensor& neg_(Loc loc = Loc::current()); ///< this = -this
  Tensor& abs_(Loc loc = Loc::current()); ///< this = |this|
  Tensor& sqrt_(Loc loc = Loc::current()); ///< this = sqrt(this)
  Tensor& exp_(Loc loc = Loc::current()); ///< this = e^this
  Tensor& log_(Loc loc = Loc::current()); ///< this = log(this)
  Tensor& relu_(Loc loc = Loc::current()); ///< this = max(this, 0)
  Tensor& sigmoid_(Loc loc = Loc::current()); ///< this = sigmoid(this)
  Tensor& tanh_(Loc loc = Loc::current()); ///< this = tanh(this)
  /// this = clamp(this, min, max) (see kiln::clamp)
  Tensor& clamp_(std::optional<Scalar> min, std::optional<Scalar> max = std::nullopt, Loc loc = Loc::current());
  Tensor& clamp_min_(Scalar min, Loc loc = Loc::current()); ///< this = max(this, min)
  Tensor& clamp_max_(Scalar max, Loc loc = Loc::current()); ///< this = min(this, max)
  Tensor& zero_(Loc loc = Loc::current()); ///< every element 0
  Tensor& fill_(Scalar value, Loc loc = Loc::current()); ///< every element `value`
  Tensor& fill_(const Tensor& value, Loc loc = Loc::current()); ///< every element the 0-d tensor `value`
  /// this = src broadcast to this tensor's shape, cast to its dtype and copied to its device.
  Tensor& copy_(const Tensor& src, Loc loc = Loc::current());
  /// `value` where mask (bool, broadcast to this tensor's shape) is true (see kiln::masked_fill).
  Tensor& masked_fill_(const Tensor& mask, Scalar value, Loc loc = Loc::current());
  /// see kiln::index_fill
  Tensor& index_fill_(int64_t dim, const Tensor& index, Scalar value, Loc loc = Loc::current());
  /// see kiln::index_copy
  Tensor& index_copy_(int64_t dim, const Tensor& index, const Tensor& source, Loc loc = Loc::current());
  /// see kiln::index_add
  Tensor& index_add_(int64_t dim, const Tensor& index, const Tensor& source, double alpha = 1,
                     Loc loc = Loc::current());
  /// see kiln::index_put
  Tensor& index_put_(const std::vector<Tensor>& indices, const Tensor& values, bool accumulate = false,
                     Loc loc = Loc::current());
  /// see kiln::scatter
  Tensor& scatter_(int64_t dim, const Tensor& index, const Tensor& src, Loc loc = Loc::current());
  /// see kiln::scatter (a value)
  Tensor& scatter_(int64_t dim, const Tensor& index, Scalar value, Loc loc = Loc::current());
  /// see kiln::scatter_add
  Tensor& scatter_add_(int64_t dim, const Tensor& index, const Tensor& src, Loc loc = Loc::current());
  /// Uniform in [from, to) from a seed (as kiln::rand: PyTorch's take a generator's state instead); floating only.
  Tensor& uniform_(double from, double to, uint64_t seed, Loc loc = Loc::current());
  /// Normal of mean and std from a seed (as kiln::randn); floating only.
  Tensor& normal_(double mean, double std, uint64_t seed, Loc loc = Loc::current());
  /// The value on `device`: this tensor when it is there already, else a copy made now
  /// (realizing it first; a GPU-to-host copy waits for the GPU). Differentiable: the
  /// gradient is copied back. Throws kiln::Error when the device is unusable (saying why)
  /// or inside a function traced by compile() (move inputs before calling it).
  Tensor to(Device device, Loc loc = Loc::current()) const;

  // ---- methods mirroring the free functions ----
  Tensor reshape(IntList shape, Loc loc = Loc::current()) const;      ///< see kiln::reshape
  Tensor view(IntList shape, Loc loc = Loc::current()) const;         ///< same as reshape
  Tensor flatten(int64_t start = 0, int64_t end = -1, Loc loc = Loc::current()) const; ///< merges dims
  /// Splits dim into `sizes` (one may be -1: inferred), which must multiply up to its extent, as Tensor.unflatten.
  Tensor unflatten(int64_t dim, IntList sizes, Loc loc = Loc::current()) const;
  Tensor permute(IntList dims, Loc loc = Loc::current()) const;       ///< see kiln::permute
  Tensor transpose(int64_t d0, int64_t d1, Loc loc = Loc::current()) const; ///< swaps two dims
  Tensor t(Loc loc = Loc::current()) const;                           ///< transpose of a 2-d tensor
  Tensor expand(IntList shape, Loc loc = Loc::current()) const;       ///< see kiln::expand
  Tensor unsqueeze(int64_t dim, Loc loc = Loc::current()) const;      ///< inserts a size-1 dim
  Tensor squeeze(int64_t dim, Loc loc = Loc::current()) const;        ///< removes a size-1 dim
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1, Loc loc = Loc::current()) const; ///< see kiln::slice
  Tensor squeeze(Loc loc = Loc::current()) const;                     ///< removes every size-1 dim
  Tensor narrow(int64_t dim, int64_t start, int64_t length, Loc loc = Loc::current()) const; ///< see kiln::narrow
  Tensor unfold(int64_t dim, int64_t size, int64_t step, Loc loc = Loc::current()) const; ///< see kiln::unfold
  std::vector<Tensor> chunk(int64_t chunks, int64_t dim = 0, Loc loc = Loc::current()) const; ///< see kiln::chunk
  /// Pieces of split_size along dim (see kiln::split); a template so that `{2}` picks the list form.
  template <std::integral I> std::vector<Tensor> split(I split_size, int64_t dim = 0, Loc loc = Loc::current()) const;
  std::vector<Tensor> split(const IntList& split_sizes, int64_t dim = 0, Loc loc = Loc::current()) const; ///< see kiln::split
  std::vector<Tensor> unbind(int64_t dim = 0, Loc loc = Loc::current()) const; ///< see kiln::unbind
  Tensor tril(int64_t diagonal = 0, Loc loc = Loc::current()) const;  ///< see kiln::tril
  Tensor triu(int64_t diagonal = 0, Loc loc = Loc::current()) const;  ///< see kiln::triu
  Tensor masked_fill(const Tensor& mask, Scalar value, Loc loc = Loc::current()) const; ///< see kiln::masked_fill
  Tensor sum(IntList dims = {}, bool keepdim = false, Loc loc = Loc::current()) const;  ///< see kiln::sum
  Tensor mean(IntList dims = {}, bool keepdim = false, Loc loc = Loc::current()) const; ///< see kiln::mean
  /// Sum over one dim (`x.sum(1)`); a template so that `x.sum({})` still means every dim, and not for
  /// bool (`x.sum(true)` does not compile rather than sum dim 1: write `x.sum({}, true)`).
  template <std::integral I>
    requires(!std::same_as<I, bool>)
  Tensor sum(I dim, bool keepdim = false, Loc loc = Loc::current()) const {
    return sum(IntList{static_cast<int64_t>(dim)}, keepdim, loc);
  }
  /// Mean over one dim (`x.mean(1)`); as the one-dim sum (not for bool).
  template <std::integral I>
    requires(!std::same_as<I, bool>)
  Tensor mean(I dim, bool keepdim = false, Loc loc = Loc::current()) const {
    return mean(IntList{static_cast<int64_t>(dim)}, keepdim, loc);
  }
  Tensor logsumexp(IntList dims, bool keepdim = false, Loc loc = Loc::current()) const; ///< see kiln::logsumexp
  /// Variance over dims (all when empty), n - 1 in the divisor unless `unbiased` is false: see kiln::var.
  Tensor var(IntList dims = {}, bool unbiased = true, bool keepdim = false, Loc loc = Loc::current()) const;
  /// Standard deviation over dims (all when empty): see kiln::std.
  Tensor std(IntList dims = {}, bool unbiased = true, bool keepdim = false, Loc loc = Loc::current()) const;
  /// Variance over one dim (`x.var(1)`); a template so that `x.var({})` still means every dim, and not for bool
  /// (`x.var(false)` does not compile rather than reduce dim 0: write `x.var({}, false)`).
  template <std::integral I>
    requires(!std::same_as<I, bool>)
  Tensor var(I dim, bool unbiased = true, bool keepdim = false, Loc loc = Loc::current()) const {
    return var(IntList{static_cast<int64_t>(dim)}, unbiased, keepdim, loc);
  }
  /// Standard deviation over one dim (`x.std(1)`); as the one-dim var.
  template <std::integral I>
    requires(!std::same_as<I, bool>)
  Tensor std(I dim, bool unbiased = true, bool keepdim = false, Loc loc = Loc::current()) const {
    return std(IntList{static_cast<int64_t>(dim)}, unbiased, keepdim, loc);
  }
  /// Variance over dims (all when empty) with torch's integer `correction` (`x.var({1}, 2)`): see kiln::var.
  template <std::integral C>
    requires(!std::same_as<C, bool>)
  Tensor var(IntList dims, C correction, bool keepdim = false, Loc loc = Loc::current()) const {
    return var_corrected(std::move(dims), static_cast<int64_t>(correction), keepdim, false, loc);
  }
  /// Standard deviation over dims (all when empty) with torch's integer `correction`: see kiln::std.
  template <std::integral C>
    requires(!std::same_as<C, bool>)
  Tensor std(IntList dims, C correction, bool keepdim = false, Loc loc = Loc::current()) const {
    return var_corrected(std::move(dims), static_cast<int64_t>(correction), keepdim, true, loc);
  }
  /// Variance over one dim with an integer `correction` (`x.var(1, 2)`): see kiln::var.
  template <std::integral I, std::integral C>
    requires(!std::same_as<I, bool> && !std::same_as<C, bool>)
  Tensor var(I dim, C correction, bool keepdim = false, Loc loc = Loc::current()) const {
    return var_corrected(IntList{static_cast<int64_t>(dim)}, static_cast<int64_t>(correction), keepdim, false, loc);
  }
  /// Standard deviation over one dim with an integer `correction` (`x.std(1, 2)`): see kiln::std.
  template <std::integral I, std::integral C>
    requires(!std::same_as<I, bool> && !std::same_as<C, bool>)
  Tensor std(I dim, C correction, bool keepdim = false, Loc loc = Loc::current()) const {
    return var_corrected(IntList{static_cast<int64_t>(dim)}, static_cast<int64_t>(correction), keepdim, true, loc);
  }
  Tensor max(IntList dims = {}, bool keepdim = false, Loc loc = Loc::current()) const;  ///< see kiln::max
  Tensor min(IntList dims = {}, bool keepdim = false, Loc loc = Loc::current()) const;  ///< see kiln::min
  Tensor argmax(int64_t dim, bool keepdim = false, Loc loc = Loc::current()) const;     ///< see kiln::argmax
  Tensor argmin(int64_t dim, bool keepdim = false, Loc loc = Loc::current()) const;     ///< see kiln::argmin
  /// (values, indices) sorted along dim, stably: see kiln::sort (kiln/indexops.h).
  std::pair<Tensor, Tensor> sort(int64_t dim = -1, bool descending = false, bool stable = false,
                                 Loc loc = Loc::current()) const;
  /// The indices that sort along dim, stably: see kiln::argsort.
  Tensor argsort(int64_t dim = -1, bool descending = false, bool stable = false, Loc loc = Loc::current()) const;
  /// The k largest (smallest) along dim and their indices: see kiln::topk.
  std::pair<Tensor, Tensor> topk(int64_t k, int64_t dim = -1, bool largest = true, bool sorted = true,
                                 Loc loc = Loc::current()) const;
  /// Sorted along dim 0: see kiln::msort.
  Tensor msort(Loc loc = Loc::current()) const;
  // ---- indexing along a dim (kiln/indexops.h; this tensor is the input, or self)
  Tensor gather(int64_t dim, const Tensor& index, Loc loc = Loc::current()) const; ///< see kiln::gather
  Tensor index_select(int64_t dim, const Tensor& index, Loc loc = Loc::current()) const; ///< see kiln::index_select
  /// see kiln::scatter_add
  Tensor scatter_add(int64_t dim, const Tensor& index, const Tensor& src, Loc loc = Loc::current()) const;
  /// see kiln::index_add
  Tensor index_add(int64_t dim, const Tensor& index, const Tensor& source, double alpha = 1,
                   Loc loc = Loc::current()) const;
  /// see kiln::scatter
  Tensor scatter(int64_t dim, const Tensor& index, const Tensor& src, Loc loc = Loc::current()) const;
  /// see kiln::scatter (a value)
  Tensor scatter(int64_t dim, const Tensor& index, Scalar value, Loc loc = Loc::current()) const;
  /// see kiln::scatter_reduce
  Tensor scatter_reduce(int64_t dim, const Tensor& index, const Tensor& src, const std::string& reduce,
                        bool include_self = true, Loc loc = Loc::current()) const;
  /// see kiln::index_fill
  Tensor index_fill(int64_t dim, const Tensor& index, Scalar value, Loc loc = Loc::current()) const;
  /// see kiln::index_fill (a 0-d tensor value)
  Tensor index_fill(int64_t dim, const Tensor& index, const Tensor& value, Loc loc = Loc::current()) const;
  /// see kiln::index_copy
  Tensor index_copy(int64_t dim, const Tensor& index, const Tensor& source, Loc loc = Loc::current()) const;
  /// see kiln::index_put
  Tensor index_put(const std::vector<Tensor>& indices, const Tensor& values, bool accumulate = false,
                   Loc loc = Loc::current()) const;
  Tensor take(const Tensor& index, Loc loc = Loc::current()) const; ///< see kiln::take
  /// see kiln::take_along_dim (without a dim: of the flattened tensor)
  Tensor take_along_dim(const Tensor& indices, std::optional<int64_t> dim = std::nullopt,
                        Loc loc = Loc::current()) const;
  Tensor to(DType dtype, Loc loc = Loc::current()) const;             ///< cast
  Tensor matmul(const Tensor& other, Loc loc = Loc::current()) const; ///< see kiln::matmul
  // ---- matrix products and diagonals (kiln/linalg.h)
  Tensor mm(const Tensor& other, Loc loc = Loc::current()) const; ///< see kiln::mm
  Tensor bmm(const Tensor& other, Loc loc = Loc::current()) const; ///< see kiln::bmm
  Tensor mv(const Tensor& vec, Loc loc = Loc::current()) const; ///< see kiln::mv
  Tensor dot(const Tensor& other, Loc loc = Loc::current()) const; ///< see kiln::dot
  Tensor outer(const Tensor& other, Loc loc = Loc::current()) const; ///< see kiln::outer
  Tensor kron(const Tensor& other, Loc loc = Loc::current()) const; ///< see kiln::kron
  Tensor trace(Loc loc = Loc::current()) const; ///< see kiln::trace
  /// see kiln::diagonal
  Tensor diagonal(int64_t offset = 0, int64_t dim1 = 0, int64_t dim2 = 1, Loc loc = Loc::current()) const;
  Tensor diag(int64_t offset = 0, Loc loc = Loc::current()) const; ///< see kiln::diag
  /// see kiln::diag_embed
  Tensor diag_embed(int64_t offset = 0, int64_t dim1 = -2, int64_t dim2 = -1, Loc loc = Loc::current()) const;
  /// see kiln::cross
  Tensor cross(const Tensor& other, std::optional<int64_t> dim = std::nullopt, Loc loc = Loc::current()) const;
  /// see kiln::addmm (this tensor is the input)
  Tensor addmm(const Tensor& m1, const Tensor& m2, Scalar beta = 1, Scalar alpha = 1, Loc loc = Loc::current()) const;
  /// see kiln::baddbmm (this tensor is the input)
  Tensor baddbmm(const Tensor& b1, const Tensor& b2, Scalar beta = 1, Scalar alpha = 1, Loc loc = Loc::current()) const;
  Tensor neg(Loc loc = Loc::current()) const;        ///< see kiln::neg
  Tensor abs(Loc loc = Loc::current()) const;        ///< see kiln::abs
  Tensor exp(Loc loc = Loc::current()) const;        ///< see kiln::exp
  Tensor log(Loc loc = Loc::current()) const;        ///< see kiln::log
  Tensor expm1(Loc loc = Loc::current()) const;      ///< see kiln::expm1
  Tensor log1p(Loc loc = Loc::current()) const;      ///< see kiln::log1p
  Tensor sqrt(Loc loc = Loc::current()) const;       ///< see kiln::sqrt
  Tensor rsqrt(Loc loc = Loc::current()) const;      ///< see kiln::rsqrt
  Tensor sin(Loc loc = Loc::current()) const;        ///< see kiln::sin
  Tensor cos(Loc loc = Loc::current()) const;        ///< see kiln::cos
  Tensor tanh(Loc loc = Loc::current()) const;       ///< see kiln::tanh
  Tensor sigmoid(Loc loc = Loc::current()) const;    ///< see kiln::sigmoid
  Tensor relu(Loc loc = Loc::current()) const;       ///< see kiln::relu
  Tensor reciprocal(Loc loc = Loc::current()) const; ///< see kiln::reciprocal
  Tensor square(Loc loc = Loc::current()) const;     ///< see kiln::square
  Tensor sign(Loc loc = Loc::current()) const;       ///< see kiln::sign
  Tensor floor(Loc loc = Loc::current()) const;      ///< see kiln::floor
  Tensor ceil(Loc loc = Loc::current()) const;       ///< see kiln::ceil
  Tensor round(Loc loc = Loc::current()) const;      ///< see kiln::round
  Tensor tan(Loc loc = Loc::current()) const;         ///< see kiln::tan
  Tensor atan(Loc loc = Loc::current()) const;        ///< see kiln::atan
  Tensor asin(Loc loc = Loc::current()) const;        ///< see kiln::asin
  Tensor acos(Loc loc = Loc::current()) const;        ///< see kiln::acos
  Tensor sinh(Loc loc = Loc::current()) const;        ///< see kiln::sinh
  Tensor cosh(Loc loc = Loc::current()) const;        ///< see kiln::cosh
  Tensor asinh(Loc loc = Loc::current()) const;       ///< see kiln::asinh
  Tensor acosh(Loc loc = Loc::current()) const;       ///< see kiln::acosh
  Tensor atanh(Loc loc = Loc::current()) const;       ///< see kiln::atanh
  Tensor log2(Loc loc = Loc::current()) const;        ///< see kiln::log2
  Tensor log10(Loc loc = Loc::current()) const;       ///< see kiln::log10
  Tensor exp2(Loc loc = Loc::current()) const;        ///< see kiln::exp2
  Tensor trunc(Loc loc = Loc::current()) const;       ///< see kiln::trunc
  Tensor frac(Loc loc = Loc::current()) const;        ///< see kiln::frac
  Tensor atan2(const Tensor& other, Loc loc = Loc::current()) const;     ///< see kiln::atan2 (this tensor is y)
  Tensor fmod(const Tensor& other, Loc loc = Loc::current()) const;      ///< see kiln::fmod
  Tensor fmod(Scalar other, Loc loc = Loc::current()) const;             ///< see kiln::fmod
  Tensor remainder(const Tensor& other, Loc loc = Loc::current()) const; ///< see kiln::remainder
  Tensor remainder(Scalar other, Loc loc = Loc::current()) const;        ///< see kiln::remainder
  Tensor pow(Scalar exponent, Loc loc = Loc::current()) const;        ///< see kiln::pow
  Tensor pow(const Tensor& exponent, Loc loc = Loc::current()) const; ///< see kiln::pow
  Tensor clamp(std::optional<Scalar> min, std::optional<Scalar> max = std::nullopt, Loc loc = Loc::current()) const; ///< see kiln::clamp

  // ---- rearrangement and vector norms (see the free functions)
  Tensor flip(IntList dims, Loc loc = Loc::current()) const; ///< see kiln::flip
  Tensor roll(IntList shifts, IntList dims = {}, Loc loc = Loc::current()) const; ///< see kiln::roll
  /// This tensor repeated sizes[i] times along dim i, as torch.Tensor.repeat: `sizes` may be longer
  /// than the rank (leading dims of extent 1 are added first), not shorter; a repeat of 0 gives an empty
  /// dim, a negative one is an error. (torch has no free function repeat; kiln::tile is the lenient form.)
  Tensor repeat(IntList sizes, Loc loc = Loc::current()) const;
  Tensor tile(IntList reps, Loc loc = Loc::current()) const; ///< see kiln::tile
  /// see kiln::repeat_interleave
  Tensor repeat_interleave(int64_t repeats, std::optional<int64_t> dim = std::nullopt, Loc loc = Loc::current()) const;
  /// see kiln::repeat_interleave
  Tensor repeat_interleave(const Tensor& repeats, std::optional<int64_t> dim = std::nullopt,
                           Loc loc = Loc::current()) const;
  Tensor norm(double p = 2, IntList dims = {}, bool keepdim = false, Loc loc = Loc::current()) const; ///< see kiln::norm

  // ---- torch.Tensor's conveniences and other names (aliases.cpp, special.cpp)
  /// The same value as a new tensor, as Tensor.clone: gradients flow through it to this tensor, and an
  /// assign() to either leaves the other as it was.
  Tensor clone(Loc loc = Loc::current()) const;
  /// This tensor, as Tensor.contiguous (kiln's values have no strides to make contiguous).
  Tensor contiguous(Loc loc = Loc::current()) const;
  Tensor expand_as(const Tensor& other, Loc loc = Loc::current()) const; ///< expand(other.shape())
  Tensor reshape_as(const Tensor& other, Loc loc = Loc::current()) const; ///< reshape(other.shape())
  Tensor view_as(const Tensor& other, Loc loc = Loc::current()) const; ///< reshape(other.shape())
  Tensor type_as(const Tensor& other, Loc loc = Loc::current()) const; ///< to(other.dtype())
  /// zeros of `shape` with this tensor's dtype and device, as Tensor.new_zeros.
  Tensor new_zeros(IntList shape, Loc loc = Loc::current()) const;
  /// ones of `shape` with this tensor's dtype and device, as Tensor.new_ones.
  Tensor new_ones(IntList shape, Loc loc = Loc::current()) const;
  /// `value` in `shape` with this tensor's dtype and device, as Tensor.new_full.
  Tensor new_full(IntList shape, Scalar value, Loc loc = Loc::current()) const;
  Tensor select(int64_t dim, int64_t index, Loc loc = Loc::current()) const; ///< see kiln::select
  Tensor movedim(IntList source, IntList destination, Loc loc = Loc::current()) const; ///< see kiln::movedim
  Tensor movedim(int64_t source, int64_t destination, Loc loc = Loc::current()) const; ///< see kiln::movedim
  Tensor moveaxis(IntList source, IntList destination, Loc loc = Loc::current()) const; ///< see kiln::movedim
  Tensor moveaxis(int64_t source, int64_t destination, Loc loc = Loc::current()) const; ///< see kiln::movedim
  Tensor swapaxes(int64_t d0, int64_t d1, Loc loc = Loc::current()) const; ///< transpose
  Tensor swapdims(int64_t d0, int64_t d1, Loc loc = Loc::current()) const; ///< transpose
  Tensor ravel(Loc loc = Loc::current()) const; ///< see kiln::ravel
  Tensor broadcast_to(IntList shape, Loc loc = Loc::current()) const; ///< expand
  /// see kiln::clamp
  Tensor clip(std::optional<Scalar> min, std::optional<Scalar> max = std::nullopt, Loc loc = Loc::current()) const;
  /// see kiln::isclose
  Tensor isclose(const Tensor& other, double rtol = 1e-5, double atol = 1e-8, bool equal_nan = false,
                 Loc loc = Loc::current()) const;
  /// see kiln::allclose
  bool allclose(const Tensor& other, double rtol = 1e-5, double atol = 1e-8, bool equal_nan = false,
                Loc loc = Loc::current()) const;
  bool equal(const Tensor& other, Loc loc = Loc::current()) const; ///< see kiln::equal
  Tensor hypot(const Tensor& other, Loc loc = Loc::current()) const; ///< see kiln::hypot
  Tensor logit(std::optional<double> eps = std::nullopt, Loc loc = Loc::current()) const; ///< see kiln::logit
  Tensor sinc(Loc loc = Loc::current()) const; ///< see kiln::sinc
  Tensor fmax(const Tensor& other, Loc loc = Loc::current()) const; ///< see kiln::fmax
  Tensor fmin(const Tensor& other, Loc loc = Loc::current()) const; ///< see kiln::fmin
  Tensor float_power(const Tensor& exponent, Loc loc = Loc::current()) const; ///< see kiln::float_power
  Tensor float_power(Scalar exponent, Loc loc = Loc::current()) const; ///< see kiln::float_power
  Tensor lgamma(Loc loc = Loc::current()) const; ///< see kiln::lgamma
  Tensor digamma(Loc loc = Loc::current()) const; ///< see kiln::digamma
  Tensor nonzero(Loc loc = Loc::current()) const; ///< see kiln::nonzero (kiln/indexops.h)
  Tensor argwhere(Loc loc = Loc::current()) const; ///< see kiln::argwhere
  Tensor masked_select(const Tensor& mask, Loc loc = Loc::current()) const; ///< see kiln::masked_select

  /// The graph node currently holding this tensor's value (internal).
  const std::shared_ptr<const graph::Node>& node() const;
  /// Shared state (internal).
  const std::shared_ptr<TensorImpl>& impl() const { return impl_; }

private:
  /// Makes `value` this tensor's value (assign's and the in-place methods' one place): detached unless
  /// `keep_graph` (an in-place op on a non-leaf), for every handle; `op` names the errors.
  void store_value(const Tensor& value, bool keep_graph, const char* op, const Loc& loc);
  /// The in-place methods' one place: checks this tensor may be updated by `op`, then stores `value` (the op's
  /// out-of-place result) cast to this tensor's dtype, checking its shape and dtype as PyTorch does.
  Tensor& update_in_place(const char* op, const Tensor& value, const Loc& loc);
  /// var (or, with `root`, std) with an integer correction: what the correction overloads call.
  Tensor var_corrected(IntList dims, int64_t correction, bool keepdim, bool root, Loc loc) const;
  std::shared_ptr<TensorImpl> impl_;
};

/// Prints str().
std::ostream& operator<<(std::ostream& os, const Tensor& t);

// ---------------------------------------------------------------- creation
// Creation ops make a lazy leaf on `device`. A constant holds no data: used with a
// tensor on another device it moves there (a CPU `ones({3})` can be added to a CUDA tensor).
/// Zeros of a shape and dtype.
Tensor zeros(IntList shape, DType dtype = kFloat32, Device device = kCPU, Loc loc = Loc::current());
/// Ones of a shape and dtype.
Tensor ones(IntList shape, DType dtype = kFloat32, Device device = kCPU, Loc loc = Loc::current());
/// A tensor filled with one value.
Tensor full(IntList shape, Scalar value, DType dtype = kFloat32, Device device = kCPU, Loc loc = Loc::current());
/// Zeros shaped, typed and placed like `like`.
Tensor zeros_like(const Tensor& like, Loc loc = Loc::current());
/// Ones shaped, typed and placed like `like`.
Tensor ones_like(const Tensor& like, Loc loc = Loc::current());
/// [0, end) with step 1, i64 (like torch.arange(end)).
Tensor arange(int64_t end, Loc loc = Loc::current());
/// [start, end) in steps of `step`, in `dtype` (i64 for integer arguments in PyTorch; explicit here).
/// ceil((end - start) / step) values; an integer dtype's are trunc(start) + i * trunc(step), as
/// PyTorch's (torch 1.13's int64 alone counted from the truncated bounds, since fixed), and a step
/// whose integer part is 0 is an error there.
Tensor arange(double start, double end, double step, DType dtype, Device device = kCPU, Loc loc = Loc::current());
/// Uniform [0, 1) from a seed (counter-based: the same seed gives the same values anywhere).
Tensor rand(IntList shape, uint64_t seed, DType dtype = kFloat32, Device device = kCPU, Loc loc = Loc::current());
/// Standard normal from a seed.
Tensor randn(IntList shape, uint64_t seed, DType dtype = kFloat32, Device device = kCPU, Loc loc = Loc::current());
// More random tensors (random.cpp), from a seed as rand and randn (PyTorch's take a generator's state instead).
/// rand of like's shape, dtype and device, as torch.rand_like (floating only).
Tensor rand_like(const Tensor& like, uint64_t seed, Loc loc = Loc::current());
/// randn of like's shape, dtype and device, as torch.randn_like (floating only).
Tensor randn_like(const Tensor& like, uint64_t seed, Loc loc = Loc::current());
/// Integers uniform in [low, high) (high > low), as torch.randint, i64 by default.
Tensor randint(int64_t low, int64_t high, IntList shape, uint64_t seed, DType dtype = kInt64, Device device = kCPU,
               Loc loc = Loc::current());
/// A random permutation of 0 .. n-1 (i64), as torch.randperm: the argsort of n uniform draws.
Tensor randperm(int64_t n, uint64_t seed, Device device = kCPU, Loc loc = Loc::current());
/// 1 with probability p (each element of a floating p in [0, 1]; checked when p is already computed), else 0, in
/// p's dtype, as torch.bernoulli; no gradient.
Tensor bernoulli(const Tensor& p, uint64_t seed, Loc loc = Loc::current());
/// mean + std * randn of their broadcast shape, as torch.normal with tensor mean and std (floating, one dtype; std
/// >= 0, checked when computed); differentiable in mean and std.
Tensor normal(const Tensor& mean, const Tensor& std, uint64_t seed, Loc loc = Loc::current());
/// A 1-d tensor holding a copy of host data (like torch.tensor([...])).
template <class T> Tensor from_vector(const std::vector<T>& data);
/// A tensor of the given shape holding a copy of host data ({} makes a 0-d tensor of one value).
template <class T> Tensor from_vector(const std::vector<T>& data, IntList shape, Loc loc = Loc::current());
/// A 0-d tensor holding one value of `dtype`.
Tensor scalar_tensor(Scalar value, DType dtype = kFloat32, Loc loc = Loc::current());

// ---------------------------------------------------------------- elementwise
Tensor neg(const Tensor& x, Loc loc = Loc::current());        ///< -x
Tensor abs(const Tensor& x, Loc loc = Loc::current());        ///< |x|
Tensor exp(const Tensor& x, Loc loc = Loc::current());        ///< e^x (integers promote to f32)
Tensor log(const Tensor& x, Loc loc = Loc::current());        ///< natural log
/// e^x - 1, accurate near 0 where exp(x) - 1 cancels (within 1 ulp; -0 stays -0).
Tensor expm1(const Tensor& x, Loc loc = Loc::current());
/// log(1 + x), accurate near 0 where log(1 + x) loses x's low bits (within 1 ulp in f32, 2 in f64;
/// -1 gives -inf, below -1 NaN, -0 stays -0).
Tensor log1p(const Tensor& x, Loc loc = Loc::current());
Tensor sqrt(const Tensor& x, Loc loc = Loc::current());       ///< square root
Tensor rsqrt(const Tensor& x, Loc loc = Loc::current());      ///< 1 / sqrt(x)
Tensor sin(const Tensor& x, Loc loc = Loc::current());        ///< sine
Tensor cos(const Tensor& x, Loc loc = Loc::current());        ///< cosine
Tensor tanh(const Tensor& x, Loc loc = Loc::current());       ///< hyperbolic tangent
Tensor sigmoid(const Tensor& x, Loc loc = Loc::current());    ///< 1 / (1 + e^-x)
Tensor erf(const Tensor& x, Loc loc = Loc::current());        ///< the error function (within 1 ulp)
Tensor relu(const Tensor& x, Loc loc = Loc::current());       ///< max(x, 0)
Tensor reciprocal(const Tensor& x, Loc loc = Loc::current()); ///< 1 / x
/// tan x, with sin's and cos's argument reduction (within 0.5 ulp in f32, 3.5 in f64; accurate to |x| ~ 1.6e6).
Tensor tan(const Tensor& x, Loc loc = Loc::current());
/// The arc tangent, in [-pi/2, pi/2] (within 0.5 ulp in f32, 1 in f64; -0 stays -0).
Tensor atan(const Tensor& x, Loc loc = Loc::current());
/// The arc sine, in [-pi/2, pi/2]; NaN outside [-1, 1] (within 0.5 ulp in f32, 1 in f64).
Tensor asin(const Tensor& x, Loc loc = Loc::current());
/// The arc cosine, in [0, pi]; NaN outside [-1, 1] (within 0.5 ulp in f32, 1.5 in f64).
Tensor acos(const Tensor& x, Loc loc = Loc::current());
/// The hyperbolic sine; inf only where the result overflows (within 0.5 ulp in f32, 1.5 in f64).
Tensor sinh(const Tensor& x, Loc loc = Loc::current());
/// The hyperbolic cosine; inf only where the result overflows (within 0.5 ulp in f32, 1.5 in f64).
Tensor cosh(const Tensor& x, Loc loc = Loc::current());
/// The inverse hyperbolic sine (within 0.5 ulp in f32, 2 in f64).
Tensor asinh(const Tensor& x, Loc loc = Loc::current());
/// The inverse hyperbolic cosine; NaN below 1 (within 0.5 ulp in f32, 2.1 in f64).
Tensor acosh(const Tensor& x, Loc loc = Loc::current());
/// The inverse hyperbolic tangent; +-inf at +-1, NaN beyond (within 0.5 ulp in f32, 2 in f64).
Tensor atanh(const Tensor& x, Loc loc = Loc::current());
/// The base-2 logarithm, exact at powers of two (within 0.5 ulp in f32, 1 in f64).
Tensor log2(const Tensor& x, Loc loc = Loc::current());
/// The base-10 logarithm (within 0.5 ulp in f32, 1 in f64).
Tensor log10(const Tensor& x, Loc loc = Loc::current());
/// 2^x, exact at integers (within 0.5 ulp in f32, 1.5 in f64).
Tensor exp2(const Tensor& x, Loc loc = Loc::current());
/// The largest integer <= x, in x's dtype (integers unchanged); the gradient is zero, as PyTorch's.
Tensor floor(const Tensor& x, Loc loc = Loc::current());
/// The smallest integer >= x, in x's dtype (integers unchanged); the gradient is zero.
Tensor ceil(const Tensor& x, Loc loc = Loc::current());
/// x rounded to the nearest integer, ties to even (torch.round: 0.5 -> 0, 1.5 -> 2, -2.5 -> -2),
/// in x's dtype (integers unchanged); the gradient is zero.
Tensor round(const Tensor& x, Loc loc = Loc::current());
/// x rounded toward zero, in x's dtype (integers unchanged); the gradient is zero.
Tensor trunc(const Tensor& x, Loc loc = Loc::current());
/// x - trunc(x), exact, with x's sign (torch.frac: inf gives NaN); the gradient is 1. Floating x only.
Tensor frac(const Tensor& x, Loc loc = Loc::current());
Tensor square(const Tensor& x, Loc loc = Loc::current());     ///< x * x
Tensor logical_not(const Tensor& x, Loc loc = Loc::current()); ///< x == 0, as bool
/// -1, 0 or 1 in x's dtype, as torch.sign (NaN and -0 give 0); the gradient is zero. Bool is unchanged.
Tensor sign(const Tensor& x, Loc loc = Loc::current());
/// min(max(x, min), max) with either bound omitted, as torch.clamp: the result dtype follows
/// type promotion with the bounds, NaN stays NaN (gradient 0), a NaN bound makes every element
/// NaN, min > max gives max, and the gradient is 1 where min <= x <= max (the bounds included),
/// else 0. At least one bound is needed; an integer bound must fit an integer x's dtype. A bool x is
/// clamped as i64 with an integer bound, as the default float with a floating one (PyTorch's result
/// type); bool bounds alone are an error, as PyTorch's.
Tensor clamp(const Tensor& x, std::optional<Scalar> min, std::optional<Scalar> max = std::nullopt,
             Loc loc = Loc::current());

Tensor add(const Tensor& a, const Tensor& b, Loc loc = Loc::current());     ///< a + b, broadcasting (two bools: logical or)
Tensor sub(const Tensor& a, const Tensor& b, Loc loc = Loc::current());     ///< a - b (an error with a bool operand, as PyTorch)
Tensor mul(const Tensor& a, const Tensor& b, Loc loc = Loc::current());     ///< a * b (two bools: logical and)
Tensor div(const Tensor& a, const Tensor& b, Loc loc = Loc::current());     ///< true division (integers give f32)
Tensor pow(const Tensor& a, const Tensor& b, Loc loc = Loc::current());     ///< a ^ b
/// a ^ b with a number b, as PyTorch's: b = 0.5 is sqrt(a) and -0.5 is 1 / sqrt(a) (so -inf gives NaN
/// and -0 gives -0 and -inf, where C's pow gives inf, 0, inf); other exponents as C's pow.
Tensor pow(const Tensor& a, Scalar b, Loc loc = Loc::current());
/// atan2(y, x), the angle of the point (x, y) in [-pi, pi], as C's and PyTorch's (signed zeros: atan2(+-0, -0)
/// = +-pi; infinities: atan2(inf, -inf) = 3pi/4); within 0.5 ulp in f32, 1.5 in f64; integers give f32.
/// The gradient is PyTorch's (x, -y) / (x^2 + y^2), NaN at (0, 0) as PyTorch's.
Tensor atan2(const Tensor& y, const Tensor& x, Loc loc = Loc::current());
/// C's fmod: a - n b with n = trunc(a / b) computed exactly (the result is exact and has a's sign; b = 0
/// gives NaN); integers give f32 (PyTorch keeps them integral). Gradients: 1 and -trunc(a / b).
Tensor fmod(const Tensor& a, const Tensor& b, Loc loc = Loc::current());
/// fmod(a, b) with a number b.
Tensor fmod(const Tensor& a, Scalar b, Loc loc = Loc::current());
/// PyTorch's remainder (Python's %): fmod(a, b), plus b where that is non-zero and its sign differs from b's,
/// so the result has b's sign; integers give f32 (PyTorch keeps them integral). Gradients: 1 and -floor(a / b).
Tensor remainder(const Tensor& a, const Tensor& b, Loc loc = Loc::current());
/// remainder(a, b) with a number b.
Tensor remainder(const Tensor& a, Scalar b, Loc loc = Loc::current());
Tensor maximum(const Tensor& a, const Tensor& b, Loc loc = Loc::current()); ///< elementwise max, NaN-propagating (bools: or)
Tensor minimum(const Tensor& a, const Tensor& b, Loc loc = Loc::current()); ///< elementwise min, NaN-propagating (bools: and)
Tensor eq(const Tensor& a, const Tensor& b, Loc loc = Loc::current());      ///< a == b (bool)
Tensor ne(const Tensor& a, const Tensor& b, Loc loc = Loc::current());      ///< a != b
Tensor lt(const Tensor& a, const Tensor& b, Loc loc = Loc::current());      ///< a < b
Tensor le(const Tensor& a, const Tensor& b, Loc loc = Loc::current());      ///< a <= b
Tensor gt(const Tensor& a, const Tensor& b, Loc loc = Loc::current());      ///< a > b
Tensor ge(const Tensor& a, const Tensor& b, Loc loc = Loc::current());      ///< a >= b
Tensor logical_and(const Tensor& a, const Tensor& b, Loc loc = Loc::current()); ///< a && b (bool)
Tensor logical_or(const Tensor& a, const Tensor& b, Loc loc = Loc::current());  ///< a || b (bool)
/// cond ? a : b, broadcasting all three.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b, Loc loc = Loc::current());
/// cond ? a : b with a scalar branch.
Tensor where(const Tensor& cond, const Tensor& a, Scalar b, Loc loc = Loc::current());
/// Conversion to another dtype.
Tensor cast(const Tensor& x, DType dtype, Loc loc = Loc::current());
/// A 0-d tensor for a scalar operand, typed by PyTorch's rules for wrapped numbers
/// relative to `other` (used by the scalar overloads).
Tensor wrap_scalar(Scalar s, const Tensor& other, Loc loc = Loc::current());

// ---------------------------------------------------------------- reductions
/// Sum over dims (all when empty); integers and bool sum to i64.
Tensor sum(const Tensor& x, IntList dims = {}, bool keepdim = false, Loc loc = Loc::current());
/// Mean over dims (all when empty); floating dtypes only.
Tensor mean(const Tensor& x, IntList dims = {}, bool keepdim = false, Loc loc = Loc::current());
/// Maximum over dims (all when empty), NaN-propagating; error on an empty reduction. A bool x gives
/// a bool result (any), as torch.max and torch.amax.
Tensor max(const Tensor& x, IntList dims = {}, bool keepdim = false, Loc loc = Loc::current());
/// Minimum over dims (all when empty); a bool x gives a bool result (all), as torch.min.
Tensor min(const Tensor& x, IntList dims = {}, bool keepdim = false, Loc loc = Loc::current());
/// Sum over one dim (`sum(x, 1)`); a template so that `sum(x, {})` still means every dim (not for bool,
/// as Tensor::sum).
template <std::integral I>
  requires(!std::same_as<I, bool>)
Tensor sum(const Tensor& x, I dim, bool keepdim = false, Loc loc = Loc::current()) {
  return x.sum(IntList{static_cast<int64_t>(dim)}, keepdim, loc);
}
/// Mean over one dim (`mean(x, 1)`); a template so that `mean(x, {})` still means every dim (not for bool).
template <std::integral I>
  requires(!std::same_as<I, bool>)
Tensor mean(const Tensor& x, I dim, bool keepdim = false, Loc loc = Loc::current()) {
  return x.mean(IntList{static_cast<int64_t>(dim)}, keepdim, loc);
}
/// log(sum(exp(x))) over dims (all when empty), computed stably as m + log(sum(exp(x - m))) with m
/// the max (taken as 0 where it is infinite, as torch.logsumexp: a row of -inf gives -inf, a +inf
/// gives +inf; an empty reduction gives -inf). Integers promote to the default float dtype.
Tensor logsumexp(const Tensor& x, IntList dims, bool keepdim = false, Loc loc = Loc::current());
/// Variance over dims (all when empty), as torch.var(input, dim, unbiased, keepdim) of PyTorch 1.13: the
/// sum of squared deviations from the mean divided by max(0, n - 1) when `unbiased` (the default, Bessel's
/// correction) or by n, for the n elements reduced into each result. So one element with `unbiased` (or
/// none) gives NaN, and its gradient is NaN, as PyTorch's. Floating dtypes only.
Tensor var(const Tensor& x, IntList dims = {}, bool unbiased = true, bool keepdim = false, Loc loc = Loc::current());
/// The square root of var(x, dims, unbiased, keepdim), as torch.std; where it is 0 (a constant row) the
/// gradient is 0, as PyTorch's (not the 0 * inf of sqrt's derivative there).
Tensor std(const Tensor& x, IntList dims = {}, bool unbiased = true, bool keepdim = false, Loc loc = Loc::current());
/// Variance with torch's integer `correction` (torch.var(input, dim, correction=c, keepdim) of 1.13):
/// the sum of squared deviations divided by max(0, n - c); c = 1 is `unbiased`, 0 the biased variance,
/// a negative c is allowed. For c >= n the divisor is 0: inf (NaN for a constant row), and, as
/// PyTorch's, the gradient divides by n - c (not clamped). `var(x, {1}, 2)`; bool stays `unbiased`.
template <std::integral C>
  requires(!std::same_as<C, bool>)
Tensor var(const Tensor& x, IntList dims, C correction, bool keepdim = false, Loc loc = Loc::current()) {
  return x.var(std::move(dims), correction, keepdim, loc);
}
/// The square root of var(x, dims, correction, keepdim), as torch.std(input, dim, correction=c); as std.
template <std::integral C>
  requires(!std::same_as<C, bool>)
Tensor std(const Tensor& x, IntList dims, C correction, bool keepdim = false, Loc loc = Loc::current()) {
  return x.std(std::move(dims), correction, keepdim, loc);
}
/// var over one dim with an integer `correction` (`var(x, 1, 2)`).
template <std::integral I, std::integral C>
  requires(!std::same_as<I, bool> && !std::same_as<C, bool>)
Tensor var(const Tensor& x, I dim, C correction, bool keepdim = false, Loc loc = Loc::current()) {
  return x.var(dim, correction, keepdim, loc);
}
/// std over one dim with an integer `correction` (`std(x, 1, 2)`).
template <std::integral I, std::integral C>
  requires(!std::same_as<I, bool> && !std::same_as<C, bool>)
Tensor std(const Tensor& x, I dim, C correction, bool keepdim = false, Loc loc = Loc::current()) {
  return x.std(dim, correction, keepdim, loc);
}
/// var over one dim (`var(x, 1)`); a template so that `var(x, {})` still means every dim, and not for bool
/// (`var(x, false)` does not compile rather than reduce dim 0: write `var(x, {}, false)`).
template <std::integral I>
  requires(!std::same_as<I, bool>)
Tensor var(const Tensor& x, I dim, bool unbiased = true, bool keepdim = false, Loc loc = Loc::current()) {
  return x.var(IntList{static_cast<int64_t>(dim)}, unbiased, keepdim, loc);
}
/// std over one dim (`std(x, 1)`); as the one-dim var.
template <std::integral I>
  requires(!std::same_as<I, bool>)
Tensor std(const Tensor& x, I dim, bool unbiased = true, bool keepdim = false, Loc loc = Loc::current()) {
  return x.std(IntList{static_cast<int64_t>(dim)}, unbiased, keepdim, loc);
}
// ---------------------------------------------------------------- vector norms
/// The vector p-norm (sum |x|^ord)^(1/ord) over dims (all when empty), as torch.linalg.vector_norm of
/// PyTorch 1.13: ord inf is max |x|, -inf min |x|, 0 the count of non-zeros, a negative ord gives 0 where
/// an element is 0. Floating x only; inf, -inf and a negative ord over an empty dim are an error (no
/// identity). The gradient is PyTorch's: 0 where the norm is 0 (the subgradient at 0, not sqrt's
/// 0 * inf), 0 at zero elements for ord < 1, none for ord 0, split evenly among ties for +-inf.
Tensor linalg_vector_norm(const Tensor& x, double ord = 2, IntList dims = {}, bool keepdim = false,
                          Loc loc = Loc::current());
/// torch.norm(input, p, dim, keepdim) with a number p: linalg_vector_norm of the same arguments.
Tensor norm(const Tensor& x, double p = 2, IntList dims = {}, bool keepdim = false, Loc loc = Loc::current());

/// Index (i64) of the first maximum along dim.
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false, Loc loc = Loc::current());
/// Index (i64) of the first minimum along dim.
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim = false, Loc loc = Loc::current());

// ---------------------------------------------------------------- more reductions, NaN handling, scans
// Composites of the ops above and of kiln/indexops.h (reductions.cpp), as PyTorch 1.13's functions of the
// same names; each error names the function, the operands and the caller's line.
/// The product of every element, as torch.prod: integers and bool give i64, no element gives 1. The gradient
/// is PyTorch's, without dividing by the input: exact with one zero (the product of the others there) and
/// with several (0); it is itself differentiable (a custom rule built from cumprod).
Tensor prod(const Tensor& x, Loc loc = Loc::current());
/// The product along one dim (negative counts from the end), as torch.prod(input, dim, keepdim).
Tensor prod(const Tensor& x, int64_t dim, bool keepdim = false, Loc loc = Loc::current());
/// The maximum over dims (all when empty), as torch.amax: the gradient is split evenly among ties.
Tensor amax(const Tensor& x, IntList dims = {}, bool keepdim = false, Loc loc = Loc::current());
/// The minimum over dims (all when empty), as torch.amin: the gradient is split evenly among ties.
Tensor amin(const Tensor& x, IntList dims = {}, bool keepdim = false, Loc loc = Loc::current());
/// (amin, amax) over one dim, or over all without it, as torch.aminmax.
std::pair<Tensor, Tensor> aminmax(const Tensor& x, std::optional<int64_t> dim = std::nullopt, bool keepdim = false,
                                  Loc loc = Loc::current());
/// True (bool) where any element is non-zero (NaN counts), as torch.any; false for none.
Tensor any(const Tensor& x, Loc loc = Loc::current());
/// torch.any along one dim.
Tensor any(const Tensor& x, int64_t dim, bool keepdim = false, Loc loc = Loc::current());
/// True (bool) where every element is non-zero, as torch.all; true for none.
Tensor all(const Tensor& x, Loc loc = Loc::current());
/// torch.all along one dim.
Tensor all(const Tensor& x, int64_t dim, bool keepdim = false, Loc loc = Loc::current());
/// The number (i64) of non-zero elements over dims (all when empty), as torch.count_nonzero.
Tensor count_nonzero(const Tensor& x, IntList dims = {}, Loc loc = Loc::current());
/// sum with NaN counted as 0, as torch.nansum (the gradient is 0 at NaN).
Tensor nansum(const Tensor& x, IntList dims = {}, bool keepdim = false, Loc loc = Loc::current());
/// The mean of the non-NaN elements, as torch.nanmean (NaN where all are NaN); floating only.
Tensor nanmean(const Tensor& x, IntList dims = {}, bool keepdim = false, Loc loc = Loc::current());
/// True (bool) where x is NaN (never for integers and bool).
Tensor isnan(const Tensor& x, Loc loc = Loc::current());
/// True where x is +inf or -inf.
Tensor isinf(const Tensor& x, Loc loc = Loc::current());
/// True where x is neither NaN nor infinite (always for integers and bool).
Tensor isfinite(const Tensor& x, Loc loc = Loc::current());
/// True where x is +inf.
Tensor isposinf(const Tensor& x, Loc loc = Loc::current());
/// True where x is -inf.
Tensor isneginf(const Tensor& x, Loc loc = Loc::current());
/// x with NaN, +inf and -inf replaced, as torch.nan_to_num: by `nan` (0), `posinf` and `neginf` (unset: the
/// largest and lowest finite value of x's dtype). Integers and bool come back unchanged. The gradient is 0
/// where an element was replaced.
Tensor nan_to_num(const Tensor& x, double nan = 0, std::optional<double> posinf = std::nullopt,
                  std::optional<double> neginf = std::nullopt, Loc loc = Loc::current());
/// The lower median of every element, as torch.median(input): NaN when any element is NaN (or there are
/// none). The gradient is split evenly among the elements equal to it, as PyTorch's.
Tensor median(const Tensor& x, Loc loc = Loc::current());
/// (values, indices) of the lower median along dim, as torch.median(input, dim, keepdim): where a row has a
/// NaN, NaN and the index of its first NaN; else the index among ties is PyTorch's (that of the stable sort).
/// The gradient goes to that index.
std::pair<Tensor, Tensor> median(const Tensor& x, int64_t dim, bool keepdim = false, Loc loc = Loc::current());
/// median of the non-NaN elements, as torch.nanmedian (NaN where all are NaN).
Tensor nanmedian(const Tensor& x, Loc loc = Loc::current());
/// median along dim of the non-NaN elements, as torch.nanmedian(input, dim, keepdim) (a row of NaN: NaN, index 0).
std::pair<Tensor, Tensor> nanmedian(const Tensor& x, int64_t dim, bool keepdim = false, Loc loc = Loc::current());
/// (values, indices) of the k-th smallest (1 <= k <= the extent) along dim, as torch.kthvalue; NaN is the
/// largest. Among ties the index is the first of the stable sort (PyTorch's quickselect may pick another tie).
std::pair<Tensor, Tensor> kthvalue(const Tensor& x, int64_t k, int64_t dim = -1, bool keepdim = false,
                                   Loc loc = Loc::current());
/// The q-quantiles along dim (of every element without it), as torch.quantile: q a 0-d or 1-d tensor of x's
/// floating dtype with values in [0, 1] (a 1-d q puts its dim first in the result); interpolation between the
/// sorted neighbours "linear", "lower", "higher", "nearest" (ties to even) or "midpoint". A row holding a NaN
/// gives NaN. The gradient flows through the sort to the elements picked.
Tensor quantile(const Tensor& x, const Tensor& q, std::optional<int64_t> dim = std::nullopt, bool keepdim = false,
                const std::string& interpolation = "linear", Loc loc = Loc::current());
/// quantile with a number q in [0, 1].
Tensor quantile(const Tensor& x, double q, std::optional<int64_t> dim = std::nullopt, bool keepdim = false,
                const std::string& interpolation = "linear", Loc loc = Loc::current());
/// quantile of the non-NaN elements, as torch.nanquantile (NaN where all are NaN).
Tensor nanquantile(const Tensor& x, const Tensor& q, std::optional<int64_t> dim = std::nullopt, bool keepdim = false,
                   const std::string& interpolation = "linear", Loc loc = Loc::current());
/// nanquantile with a number q in [0, 1].
Tensor nanquantile(const Tensor& x, double q, std::optional<int64_t> dim = std::nullopt, bool keepdim = false,
                   const std::string& interpolation = "linear", Loc loc = Loc::current());
/// (values, indices) of the running maximum along dim, as torch.cummax: the index of the last element equal
/// to the maximum so far; from the first NaN on, NaN and the index of the last NaN so far. The gradient goes to
/// those indices. O(n) work per row of n (a running-max scan, then one over the positions).
std::pair<Tensor, Tensor> cummax(const Tensor& x, int64_t dim, Loc loc = Loc::current());
/// The running minimum along dim, as torch.cummin (ties and NaN as cummax).
std::pair<Tensor, Tensor> cummin(const Tensor& x, int64_t dim, Loc loc = Loc::current());
/// log(cumsum(exp(x))) along dim, as torch.logcumsumexp, computed stably (a running logaddexp: O(n) work
/// per row of n; f32 runs in f64); floating only.
Tensor logcumsumexp(const Tensor& x, int64_t dim, Loc loc = Loc::current());
/// The n-th forward difference along dim, as torch.diff: `prepend` and `append` (optional, x's rank and
/// extents off dim) are joined to x first; bool gives x[i + 1] != x[i].
Tensor diff(const Tensor& x, int64_t n = 1, int64_t dim = -1, const Tensor& prepend = Tensor(),
            const Tensor& append = Tensor(), Loc loc = Loc::current());
/// start + weight (end - start), as torch.lerp (PyTorch's two-sided formula, exact at weight 1); start and end
/// floating of one dtype, broadcast.
Tensor lerp(const Tensor& start, const Tensor& end, double weight, Loc loc = Loc::current());
/// lerp with a tensor weight (broadcast; differentiable).
Tensor lerp(const Tensor& start, const Tensor& end, const Tensor& weight, Loc loc = Loc::current());
/// input + value * t1 * t2, as torch.addcmul.
Tensor addcmul(const Tensor& input, const Tensor& t1, const Tensor& t2, Scalar value = 1, Loc loc = Loc::current());
/// input + value * t1 / t2, as torch.addcdiv (integer t1 and t2 are an error, as PyTorch's).
Tensor addcdiv(const Tensor& input, const Tensor& t1, const Tensor& t2, Scalar value = 1, Loc loc = Loc::current());
/// x * log(y), 0 where x is 0 (unless y is NaN), as torch.xlogy (x and y broadcast; integers give f32). The
/// gradients are PyTorch's (a custom rule): log(y) for x (0 where x is 0 and y <= 0) and x / y for y.
Tensor xlogy(const Tensor& x, const Tensor& y, Loc loc = Loc::current());
/// xlogy with a number y.
Tensor xlogy(const Tensor& x, Scalar y, Loc loc = Loc::current());
/// clamp(x, min), as torch.clamp_min.
Tensor clamp_min(const Tensor& x, Scalar min, Loc loc = Loc::current());
/// clamp(x, nullopt, max), as torch.clamp_max.
Tensor clamp_max(const Tensor& x, Scalar max, Loc loc = Loc::current());
/// (var, mean) over dims, as torch.var_mean (see var).
std::pair<Tensor, Tensor> var_mean(const Tensor& x, IntList dims = {}, bool unbiased = true, bool keepdim = false,
                                   Loc loc = Loc::current());
/// (std, mean) over dims, as torch.std_mean (see std).
std::pair<Tensor, Tensor> std_mean(const Tensor& x, IntList dims = {}, bool unbiased = true, bool keepdim = false,
                                   Loc loc = Loc::current());
namespace detail {
/// var_mean (or, with `root`, std_mean) with an integer correction: what the templates below call.
std::pair<Tensor, Tensor> moments_corrected(const Tensor& x, IntList dims, int64_t correction, bool keepdim, bool root,
                                            Loc loc);
} // namespace detail
/// var_mean with torch's integer `correction` (`var_mean(x, {1}, 0)`).
template <std::integral C>
  requires(!std::same_as<C, bool>)
std::pair<Tensor, Tensor> var_mean(const Tensor& x, IntList dims, C correction, bool keepdim = false,
                                   Loc loc = Loc::current()) {
  return detail::moments_corrected(x, std::move(dims), static_cast<int64_t>(correction), keepdim, false, loc);
}
/// std_mean with torch's integer `correction`.
template <std::integral C>
  requires(!std::same_as<C, bool>)
std::pair<Tensor, Tensor> std_mean(const Tensor& x, IntList dims, C correction, bool keepdim = false,
                                   Loc loc = Loc::current()) {
  return detail::moments_corrected(x, std::move(dims), static_cast<int64_t>(correction), keepdim, true, loc);
}
/// The integral of y along dim by the trapezoidal rule with spacing dx, as torch.trapezoid (0 for fewer than
/// 2 samples).
Tensor trapezoid(const Tensor& y, double dx = 1, int64_t dim = -1, Loc loc = Loc::current());
/// trapezoid at sample points x: 1-d of y's extent along dim, or of y's shape.
Tensor trapezoid(const Tensor& y, const Tensor& x, int64_t dim = -1, Loc loc = Loc::current());
/// trapezoid, as torch.trapz.
Tensor trapz(const Tensor& y, double dx = 1, int64_t dim = -1, Loc loc = Loc::current());
/// trapezoid at sample points x, as torch.trapz.
Tensor trapz(const Tensor& y, const Tensor& x, int64_t dim = -1, Loc loc = Loc::current());
/// The running trapezoidal integral along dim (one element fewer), as torch.cumulative_trapezoid.
Tensor cumulative_trapezoid(const Tensor& y, double dx = 1, int64_t dim = -1, Loc loc = Loc::current());
/// cumulative_trapezoid at sample points x (as trapezoid's).
Tensor cumulative_trapezoid(const Tensor& y, const Tensor& x, int64_t dim = -1, Loc loc = Loc::current());
/// The covariance matrix of the variables in the rows of a floating x [vars, obs] (a 1-d x: one variable, a 0-d
/// result), with `correction` subtracted from the observation count, as torch.cov without fweights and aweights (a
/// count at or below the correction gives inf or NaN, as PyTorch's).
Tensor cov(const Tensor& x, int64_t correction = 1, Loc loc = Loc::current());
/// The Pearson correlation coefficients of the rows of x, clipped to [-1, 1], as torch.corrcoef.
Tensor corrcoef(const Tensor& x, Loc loc = Loc::current());
/// log(exp(a) + exp(b)) computed stably, as torch.logaddexp (a and b broadcast; floating); the gradients are
/// sigmoid(a - b) and sigmoid(b - a), 1/2 each at a tie.
Tensor logaddexp(const Tensor& a, const Tensor& b, Loc loc = Loc::current());

// ---------------------------------------------------------------- movement
/// Same elements in a new shape (one extent may be -1).
Tensor reshape(const Tensor& x, IntList shape, Loc loc = Loc::current());
/// Reorders dims.
Tensor permute(const Tensor& x, IntList dims, Loc loc = Loc::current());
/// Swaps two dims.
Tensor transpose(const Tensor& x, int64_t d0, int64_t d1, Loc loc = Loc::current());
/// Broadcasts to a shape (NumPy rules; -1 keeps an extent).
Tensor expand(const Tensor& x, IntList shape, Loc loc = Loc::current());
/// Elements start, start+step, ... below end along dim (Python slice rules for bounds).
Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step = 1, Loc loc = Loc::current());
/// Joins tensors along an existing dim.
Tensor concat(const std::vector<Tensor>& xs, int64_t dim = 0, Loc loc = Loc::current());
/// `length` elements of dim from `start` (negative counts from the end), as torch.narrow; a view.
Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length, Loc loc = Loc::current());
/// Every window of `size` elements along dim, `step` apart, as torch.Tensor.unfold: dim's extent
/// becomes the window count (n - size) / step + 1 and a last dim of `size` is added; a view.
Tensor unfold(const Tensor& x, int64_t dim, int64_t size, int64_t step, Loc loc = Loc::current());
namespace detail {
/// unfold() with the window dim inserted at position `at` of the result rather than last (at most
/// the input's rank): the layout im2col wants, [N, C, kh, kw, Ho, Wo], without a permute.
Tensor unfold_at(const Tensor& x, int64_t dim, int64_t size, int64_t step, int64_t at, Loc loc);
} // namespace detail
/// At most `chunks` pieces of equal size ceil(n / chunks) along dim (the last may be smaller, and
/// there may be fewer), as torch.chunk; an empty dim gives `chunks` empty pieces.
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim = 0, Loc loc = Loc::current());
namespace detail {
/// split() by one size (the implementation behind the template below).
std::vector<Tensor> split_by_size(const Tensor& x, int64_t split_size, int64_t dim, Loc loc);
} // namespace detail
/// Pieces of `split_size` along dim, the last one smaller when n does not divide, as torch.split with
/// an int (an empty dim gives one empty piece; a size of 0 only fits an empty dim). A template so
/// that `split(x, {2})` picks the list form.
template <std::integral I>
std::vector<Tensor> split(const Tensor& x, I split_size, int64_t dim = 0, Loc loc = Loc::current()) {
  return detail::split_by_size(x, static_cast<int64_t>(split_size), dim, loc);
}
template <std::integral I> std::vector<Tensor> Tensor::split(I split_size, int64_t dim, Loc loc) const {
  return detail::split_by_size(*this, static_cast<int64_t>(split_size), dim, loc);
}
/// Pieces of the given sizes along dim, which must add up to its extent, as torch.split with a list.
std::vector<Tensor> split(const Tensor& x, const IntList& split_sizes, int64_t dim = 0, Loc loc = Loc::current());
/// Every index of dim as a tensor without that dim, as torch.unbind.
std::vector<Tensor> unbind(const Tensor& x, int64_t dim = 0, Loc loc = Loc::current());
/// Joins tensors of one shape along a new dim (in [-(rank+1), rank]), as torch.stack.
Tensor stack(const std::vector<Tensor>& xs, int64_t dim = 0, Loc loc = Loc::current());
/// Inserts a size-1 dim (in [-(rank+1), rank]).
Tensor unsqueeze(const Tensor& x, int64_t dim, Loc loc = Loc::current());
/// Removes dim when its extent is 1 (else returns x), as torch.squeeze.
Tensor squeeze(const Tensor& x, int64_t dim, Loc loc = Loc::current());
/// Removes every size-1 dim.
Tensor squeeze(const Tensor& x, Loc loc = Loc::current());
/// The lower triangle of the last two dims (rank >= 2): elements with col - row <= diagonal, others 0.
Tensor tril(const Tensor& x, int64_t diagonal = 0, Loc loc = Loc::current());
/// The upper triangle of the last two dims (rank >= 2): elements with col - row >= diagonal, others 0.
Tensor triu(const Tensor& x, int64_t diagonal = 0, Loc loc = Loc::current());
/// x with `value` (converted to x's dtype) where the bool `mask` is true; x and mask broadcast, as
/// Tensor.masked_fill. The gradient flows to x where the mask is false.
Tensor masked_fill(const Tensor& x, const Tensor& mask, Scalar value, Loc loc = Loc::current());
/// pad's mode, as torch.nn.functional.pad's string: "constant", "reflect", "replicate" or "circular" (a string
/// or a std::string; a bare 0 is pad's value, not a mode).
struct PadMode {
  std::string name; ///< the mode's name, checked by pad
  /// A C string (a template, so that a literal 0 does not convert: it is pad's constant).
  template <class C>
    requires std::same_as<C, const char*> || std::same_as<C, char*>
  PadMode(C s) : name(s) {} // NOLINT: implicit, as PyTorch's string
  /// A string.
  PadMode(std::string s) : name(std::move(s)) {} // NOLINT: implicit, as PyTorch's string
};
/// Pads with a constant: `pads` is (before, after) pairs starting from the LAST dim, as torch.nn.functional.pad.
/// A negative amount crops that many elements (first, as PyTorch: pad(x, {-3, 2}) of an extent 3 is 2 values);
/// crops adding up past a dim's extent are an error.
Tensor pad(const Tensor& x, IntList pads, Scalar value = 0, Loc loc = Loc::current());
/// pad with torch.nn.functional.pad's `mode`: "constant" (the pad above, with `value`), or "reflect"
/// (mirrored about the edge element, which is not repeated), "replicate" (the edge element repeated) and
/// "circular" (the other end's elements), which take no value (0) and pad the last 1, 2 or 3 dims:
/// reflect and replicate of a tensor with 1 or 2 more dims, circular with exactly 2 more ([N, C, ...]),
/// as PyTorch 1.13's. Reflect needs each amount below its dim's extent, circular at most its extent;
/// negative amounts crop (reflect and replicate: the padded result; circular: the input, before it wraps
/// around), and reflect and replicate leave at least one element. Built from slices, a reversing gather
/// and a concat, so the gradient sums into the edge elements exactly (deterministic), for any dtype.
Tensor pad(const Tensor& x, IntList pads, PadMode mode, Scalar value = 0, Loc loc = Loc::current());
// ---------------------------------------------------------------- rearrangement
// Compositions of the movement ops (a gather, slices and a concat, an expand and a reshape): their
// gradients, fusion and compile() come with them.
/// The elements in reverse order along each of dims, as torch.flip (a dim listed twice is an error,
/// none returns x).
Tensor flip(const Tensor& x, IntList dims, Loc loc = Loc::current());
/// The elements shifted by shifts[i] along dims[i] (wrapping around: a negative shift moves toward
/// the front, one past the extent wraps), as torch.roll; without dims, x is rolled flattened by the
/// one shift and reshaped back.
Tensor roll(const Tensor& x, IntList shifts, IntList dims = {}, Loc loc = Loc::current());
/// torch.tile: Tensor::repeat, with ones added in front of `reps` when it is shorter than the rank.
Tensor tile(const Tensor& x, IntList reps, Loc loc = Loc::current());
/// Each element repeated `repeats` times along dim, next to itself ([a, b] -> [a, a, b, b]), as
/// torch.repeat_interleave; without dim, x is flattened first.
Tensor repeat_interleave(const Tensor& x, int64_t repeats, std::optional<int64_t> dim = std::nullopt,
                         Loc loc = Loc::current());
/// repeat_interleave with a count per element along dim: `repeats` an integer 0-d or 1-d tensor of one
/// value or of the dim's extent. Its values are read on the host (they decide the result's shape), so
/// the call cannot be traced by compile() (pass an integer there), as the output's size in PyTorch.
Tensor repeat_interleave(const Tensor& x, const Tensor& repeats, std::optional<int64_t> dim = std::nullopt,
                         Loc loc = Loc::current());

// ---------------------------------------------------------------- torch's other names (aliases.cpp)
// Functions torch has under two names: kiln's is declared above, these forward to it (same checks, errors
// and gradients, under the name the user called).
Tensor cat(const std::vector<Tensor>& xs, int64_t dim = 0, Loc loc = Loc::current()); ///< torch.cat: concat
Tensor concatenate(const std::vector<Tensor>& xs, int64_t dim = 0, Loc loc = Loc::current()); ///< concat
Tensor absolute(const Tensor& x, Loc loc = Loc::current()); ///< abs
Tensor negative(const Tensor& x, Loc loc = Loc::current()); ///< neg
/// x itself, as torch.positive (bool is an error, as PyTorch's).
Tensor positive(const Tensor& x, Loc loc = Loc::current());
Tensor fix(const Tensor& x, Loc loc = Loc::current()); ///< trunc
Tensor sgn(const Tensor& x, Loc loc = Loc::current()); ///< sign (kiln has no complex dtype)
Tensor arccos(const Tensor& x, Loc loc = Loc::current()); ///< acos
Tensor arcsin(const Tensor& x, Loc loc = Loc::current()); ///< asin
Tensor arctan(const Tensor& x, Loc loc = Loc::current()); ///< atan
Tensor arccosh(const Tensor& x, Loc loc = Loc::current()); ///< acosh
Tensor arcsinh(const Tensor& x, Loc loc = Loc::current()); ///< asinh
Tensor arctanh(const Tensor& x, Loc loc = Loc::current()); ///< atanh
Tensor arctan2(const Tensor& y, const Tensor& x, Loc loc = Loc::current()); ///< atan2
/// clamp
Tensor clip(const Tensor& x, std::optional<Scalar> min, std::optional<Scalar> max = std::nullopt,
            Loc loc = Loc::current());
Tensor multiply(const Tensor& a, const Tensor& b, Loc loc = Loc::current()); ///< mul
Tensor divide(const Tensor& a, const Tensor& b, Loc loc = Loc::current()); ///< div (true division)
Tensor true_divide(const Tensor& a, const Tensor& b, Loc loc = Loc::current()); ///< div
Tensor subtract(const Tensor& a, const Tensor& b, Loc loc = Loc::current()); ///< sub
Tensor greater(const Tensor& a, const Tensor& b, Loc loc = Loc::current()); ///< gt
Tensor greater_equal(const Tensor& a, const Tensor& b, Loc loc = Loc::current()); ///< ge
Tensor less(const Tensor& a, const Tensor& b, Loc loc = Loc::current()); ///< lt
Tensor less_equal(const Tensor& a, const Tensor& b, Loc loc = Loc::current()); ///< le
Tensor not_equal(const Tensor& a, const Tensor& b, Loc loc = Loc::current()); ///< ne
Tensor swapaxes(const Tensor& x, int64_t d0, int64_t d1, Loc loc = Loc::current()); ///< transpose
Tensor swapdims(const Tensor& x, int64_t d0, int64_t d1, Loc loc = Loc::current()); ///< transpose
/// expand, as torch.broadcast_to (-1 keeps an extent).
Tensor broadcast_to(const Tensor& x, IntList shape, Loc loc = Loc::current());

// ---------------------------------------------------------------- small composites (aliases.cpp)
/// other - alpha * input, as torch.rsub (broadcast).
Tensor rsub(const Tensor& input, const Tensor& other, Scalar alpha = 1, Loc loc = Loc::current());
/// split with a list of sizes, as torch.split_with_sizes.
std::vector<Tensor> split_with_sizes(const Tensor& x, const IntList& split_sizes, int64_t dim = 0,
                                     Loc loc = Loc::current());
/// The shape the given shapes broadcast to (NumPy rules), as torch.broadcast_shapes; shapes that do not broadcast
/// are an error naming them.
IntList broadcast_shapes(const std::vector<IntList>& shapes, Loc loc = Loc::current());
/// x flattened to 1-d, as torch.ravel.
Tensor ravel(const Tensor& x, Loc loc = Loc::current());
/// The dims `source` moved to the positions `destination` (the others keep their order), as torch.movedim;
/// both lists have one length, and a dim repeated in either is an error.
Tensor movedim(const Tensor& x, IntList source, IntList destination, Loc loc = Loc::current());
/// movedim of one dim.
Tensor movedim(const Tensor& x, int64_t source, int64_t destination, Loc loc = Loc::current());
/// movedim, as torch.moveaxis.
Tensor moveaxis(const Tensor& x, IntList source, IntList destination, Loc loc = Loc::current());
/// movedim of one dim, as torch.moveaxis.
Tensor moveaxis(const Tensor& x, int64_t source, int64_t destination, Loc loc = Loc::current());
/// x without `dim`, at position `index` of it (negative counts from the end), as torch.select; a view.
Tensor select(const Tensor& x, int64_t dim, int64_t index, Loc loc = Loc::current());
/// The tensors expanded to their common broadcast shape, as torch.broadcast_tensors.
std::vector<Tensor> broadcast_tensors(const std::vector<Tensor>& xs, Loc loc = Loc::current());
/// x with at least 1 dim (a 0-d tensor becomes [1]), as torch.atleast_1d.
Tensor atleast_1d(const Tensor& x, Loc loc = Loc::current());
/// x with at least 2 dims (sizes 1 in front: [n] becomes [1, n]), as torch.atleast_2d.
Tensor atleast_2d(const Tensor& x, Loc loc = Loc::current());
/// x with at least 3 dims, as torch.atleast_3d: [] -> [1, 1, 1], [n] -> [1, n, 1], [m, n] -> [m, n, 1].
Tensor atleast_3d(const Tensor& x, Loc loc = Loc::current());
/// The flattened x on diagonal `offset` of a square matrix, as torch.diagflat.
Tensor diagflat(const Tensor& x, int64_t offset = 0, Loc loc = Loc::current());
/// The sum of products over the last dims of a and b (which must have one extent), as torch.inner: the
/// result's shape is a's without its last dim followed by b's without its last; a 0-d operand multiplies.
Tensor inner(const Tensor& a, const Tensor& b, Loc loc = Loc::current());
/// A tensor of like's shape, dtype and device filled with value, as torch.full_like.
Tensor full_like(const Tensor& like, Scalar value, Loc loc = Loc::current());
/// The n x m identity matrix (m = n when absent), as torch.eye.
Tensor eye(int64_t n, std::optional<int64_t> m = std::nullopt, DType dtype = kFloat32, Device device = kCPU,
           Loc loc = Loc::current());
/// `steps` values from start to end evenly spaced, as torch.linspace (PyTorch's formula: the first half from
/// start, the second from end, so both ends are exact); steps 0 gives an empty tensor, 1 gives [start].
Tensor linspace(double start, double end, int64_t steps, DType dtype = kFloat32, Device device = kCPU,
                Loc loc = Loc::current());
/// base ^ linspace(start, end, steps), as torch.logspace (computed in f64, then cast to dtype).
Tensor logspace(double start, double end, int64_t steps, double base = 10, DType dtype = kFloat32, Device device = kCPU,
                Loc loc = Loc::current());
/// Elementwise |a - b| <= atol + rtol |b|, or a == b (equal infinities), or both NaN with equal_nan, as
/// torch.isclose (bool; a and b broadcast and must be of one dtype class: both floating or both not).
Tensor isclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8, bool equal_nan = false,
               Loc loc = Loc::current());
/// Whether every element isclose, as torch.allclose (computes the value now).
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8, bool equal_nan = false,
              Loc loc = Loc::current());
/// Whether a and b have one shape and equal elements (NaN is never equal), as torch.equal (computes the value
/// now; different shapes are false, not an error).
bool equal(const Tensor& a, const Tensor& b, Loc loc = Loc::current());

// ---------------------------------------------------------------- more pointwise math (special.cpp)
// Compositions of kiln's ops, as PyTorch 1.13's functions of the same names (see also kiln/special.h).
/// sqrt(a^2 + b^2) without overflow or underflow on the way (scaled by the larger magnitude), as torch.hypot: a
/// and b floating, broadcast; an infinity gives +inf, even with NaN. The gradients are PyTorch's: g a / hypot and
/// g b / hypot (NaN at a = b = 0, as PyTorch's).
Tensor hypot(const Tensor& a, const Tensor& b, Loc loc = Loc::current());
/// log2(2^a + 2^b) computed stably, as torch.logaddexp2 (see logaddexp).
Tensor logaddexp2(const Tensor& a, const Tensor& b, Loc loc = Loc::current());
/// log(x / (1 - x)), as torch.logit; with eps, x is first clamped to [eps, 1 - eps]. Integers give f32. The
/// gradient is PyTorch's: g / (x (1 - x)), 0 outside [eps, 1 - eps] with eps, NaN outside [0, 1] without.
Tensor logit(const Tensor& x, std::optional<double> eps = std::nullopt, Loc loc = Loc::current());
/// sin(pi x) / (pi x), 1 at 0, as torch.sinc (integers give f32; the gradient at 0 is 0).
Tensor sinc(const Tensor& x, Loc loc = Loc::current());
/// x pi / 180, as torch.deg2rad (integers give f32).
Tensor deg2rad(const Tensor& x, Loc loc = Loc::current());
/// x 180 / pi, as torch.rad2deg (integers give f32).
Tensor rad2deg(const Tensor& x, Loc loc = Loc::current());
/// a ^ b in f64 (both cast to f64 first), as torch.float_power.
Tensor float_power(const Tensor& a, const Tensor& b, Loc loc = Loc::current());
/// float_power with a number exponent.
Tensor float_power(const Tensor& a, Scalar b, Loc loc = Loc::current());
/// The larger of a and b where neither is NaN, the other where one is, as torch.fmax (broadcast, promoted); the
/// gradient goes to a where a >= b or b is NaN, to b elsewhere (PyTorch's).
Tensor fmax(const Tensor& a, const Tensor& b, Loc loc = Loc::current());
/// The smaller, NaN-ignoring as fmax, as torch.fmin; the gradient goes to a where a <= b or b is NaN.
Tensor fmin(const Tensor& a, const Tensor& b, Loc loc = Loc::current());
/// 0 where x < 0, values where x == 0, 1 where x > 0 (and 0 where x is NaN), as torch.heaviside: x and values
/// broadcast and must have one dtype. kiln's gradient flows to values where x is 0 (PyTorch's is not
/// implemented).
Tensor heaviside(const Tensor& x, const Tensor& values, Loc loc = Loc::current());
/// Whether each element of `elements` equals one of `test_elements` (bool, elements' shape), as torch.isin; with
/// invert, whether it equals none. The two are promoted to one dtype; NaN is in nothing.
Tensor isin(const Tensor& elements, const Tensor& test_elements, bool invert = false, Loc loc = Loc::current());
/// x reversed along dim 1 (rank >= 2), as torch.fliplr.
Tensor fliplr(const Tensor& x, Loc loc = Loc::current());
/// x reversed along dim 0 (rank >= 1), as torch.flipud.
Tensor flipud(const Tensor& x, Loc loc = Loc::current());
/// (a != 0) xor (b != 0), as torch.logical_xor (bool; broadcast).
Tensor logical_xor(const Tensor& a, const Tensor& b, Loc loc = Loc::current());
/// log|Gamma(x)|, as torch.lgamma: a Lanczos sum (g = 7, 9 terms; reflection below 1/2), in f64 (f32 rounds the
/// f64 value), within ~1e-15 of the true value away from the poles; +inf at 0 and the negative integers, +inf at
/// +-inf. Integers give f32. The gradient is digamma(x).
Tensor lgamma(const Tensor& x, Loc loc = Loc::current());
/// The digamma function, d lgamma / dx, as torch.digamma: PyTorch's algorithm (reflection below 0, recurrence to
/// x >= 10 and its asymptotic series) in f64; -inf at +0, +inf at -0, NaN at the negative integers. The gradient
/// is the trigamma function, by PyTorch's formula (recurrence to x >= 6, a 4-term series: within ~1e-10).
Tensor digamma(const Tensor& x, Loc loc = Loc::current());
/// The multivariate log-gamma function of dimension p >= 1, as torch.mvlgamma: sum over i < p of lgamma(x - i/2)
/// plus p (p - 1) / 4 log(pi); every element must exceed (p - 1) / 2 (checked when x is already computed).
Tensor mvlgamma(const Tensor& x, int64_t p, Loc loc = Loc::current());

/// Matrix product with PyTorch's rules: 1-d operands, batched and broadcast batch dims.
Tensor matmul(const Tensor& a, const Tensor& b, Loc loc = Loc::current());

// ---------------------------------------------------------------- operators
/// A tensor operand that carries the caller's source line into an operator.
struct Operand {
  const Tensor& t; ///< the tensor
  Loc loc;         ///< where the operator was written
  /// Implicit on purpose: the default argument records the user's line.
  Operand(const Tensor& t_, Loc l = Loc::current()) : t(t_), loc(l) {} // NOLINT
};

Tensor operator-(Operand a);                  ///< neg
Tensor operator+(Operand a, const Tensor& b); ///< add
Tensor operator-(Operand a, const Tensor& b); ///< sub
Tensor operator*(Operand a, const Tensor& b); ///< mul
Tensor operator/(Operand a, const Tensor& b); ///< div
Tensor operator+(Operand a, Scalar b);        ///< add a scalar
Tensor operator-(Operand a, Scalar b);        ///< subtract a scalar
Tensor operator*(Operand a, Scalar b);        ///< multiply by a scalar
Tensor operator/(Operand a, Scalar b);        ///< divide by a scalar
Tensor operator+(Scalar a, Operand b);        ///< scalar + tensor
Tensor operator-(Scalar a, Operand b);        ///< scalar - tensor
Tensor operator*(Scalar a, Operand b);        ///< scalar * tensor
Tensor operator/(Scalar a, Operand b);        ///< scalar / tensor
Tensor operator==(Operand a, const Tensor& b); ///< eq
Tensor operator!=(Operand a, const Tensor& b); ///< ne
Tensor operator<(Operand a, const Tensor& b);  ///< lt
Tensor operator<=(Operand a, const Tensor& b); ///< le
Tensor operator>(Operand a, const Tensor& b);  ///< gt
Tensor operator>=(Operand a, const Tensor& b); ///< ge
Tensor operator==(Operand a, Scalar b);        ///< eq with a scalar
Tensor operator!=(Operand a, Scalar b);        ///< ne with a scalar
Tensor operator<(Operand a, Scalar b);         ///< lt with a scalar
Tensor operator<=(Operand a, Scalar b);        ///< le with a scalar
Tensor operator>(Operand a, Scalar b);         ///< gt with a scalar
Tensor operator>=(Operand a, Scalar b);        ///< ge with a scalar

// ---------------------------------------------------------------- realization
/// Computes several tensors in one go (sharing the work of common subgraphs). Memory that
/// cannot be had, here or in any function that computes or reads values, is a
/// kiln::OutOfMemoryError naming the bytes, what they were for and the caller's line.
void realize(const std::vector<Tensor>& tensors, Loc loc = Loc::current());
/// The text form of the graph behind some tensors (see graph/text.h).
std::string graph_text(const std::vector<Tensor>& tensors);
/// The graph that realizing `tensors` would run, as Graphviz DOT (`dot -Tsvg`): each
/// kernel of its schedule is a cluster labelled with the kernel's name and form, each
/// node shows its op, type and the user's source line, and every edge into another
/// kernel carries the reason for that boundary. Already realized values are inputs.
std::string graph_dot(const std::vector<Tensor>& tensors);

} // namespace kiln
