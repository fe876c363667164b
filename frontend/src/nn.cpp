// nn modules: the Module registry (parameters, buffers, submodules, modes),
// PyTorch's initializations with kiln's counter-based random numbers, and the
// layers, which delegate their arithmetic to nn::functional.

#include "kiln/nn.h"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cmath>
#include <sstream>

#include "frontend/src/tensor_impl.h"
#include "graph/random.h"
#include "graph/shape.h"
#include "kiln/autograd.h"
#include "kiln/indexops.h"

namespace kiln::nn {

// ---------------------------------------------------------------- seeds

namespace {

std::atomic<uint64_t> g_seed_base{0};
std::atomic<uint64_t> g_seed_counter{0};

// SplitMix64's step: turns consecutive counters into unrelated seeds.
uint64_t mix(uint64_t z) { return graph::splitmix64_finalize(z + graph::rng::kSeedMul); }

// uniform(-bound, bound), seeded.
Tensor uniform(IntList shape, double bound) { return (rand(std::move(shape), next_seed()) * 2.0 - 1.0) * bound; }

std::string join_ints(std::initializer_list<int64_t> v) {
  std::string s = "(";
  for (int64_t x : v) s += (s.size() > 1 ? ", " : "") + std::to_string(x);
  return s + ")";
}

std::string size2_str(const Size2& s) { return join_ints({s.h, s.w}); }

// A convolution module's padding string known, and "same" not strided, checked where it is made (PyTorch's
// ValueError of _ConvNd's constructor).
template <class E> void check_padding_option(const char* op, const ConvPadding<E>& p, bool strided, const Loc& loc) {
  if (!p.unknown.empty())
    throw Error(op, "invalid padding string '" + p.unknown + "', should be one of {'valid', 'same'}", loc);
  if (p.mode == PaddingMode::Same && strided)
    throw Error(op, "padding='same' is not supported for strided convolutions", loc);
}

// A convolution module's padding_mode known, checked where it is made (PyTorch's ValueError of _ConvNd's constructor).
void check_padding_mode(const char* op, const std::string& m, const Loc& loc) {
  if (m != "zeros" && m != "reflect" && m != "replicate" && m != "circular")
    throw Error(
        op, "padding_mode must be one of 'zeros', 'reflect', 'replicate', 'circular', but got padding_mode='" + m + "'",
        loc);
}

// What a convolution module whose padding_mode is not "zeros" pads its input by, in kiln::pad's order (last dim
// first), from its spatial dims' paddings, kernel sizes and dilations (first dim first): `size` on both sides,
// none for "valid", "same"'s dilation * (kernel - 1) in all with the odd one after, as PyTorch's
// _reversed_padding_repeated_twice.
IntList mode_pads(PaddingMode mode, const IntList& size, const IntList& kernel, const IntList& dilation) {
  IntList pads;
  for (size_t i = size.size(); i-- > 0;) {
    const int64_t total = mode == PaddingMode::Same    ? dilation[i] * (kernel[i] - 1)
                          : mode == PaddingMode::Valid ? 0
                                                       : 2 * size[i];
    pads.insert(pads.end(), {total / 2, total - total / 2});
  }
  return pads;
}

// ", padding_mode=reflect" when it is not the default, as PyTorch's repr of a convolution.
std::string padding_mode_str(const std::string& m) { return m == "zeros" ? "" : ", padding_mode=" + m; }

// A convolution module's padding as PyTorch's repr writes it: the string, or the extents by `extents`.
template <class E, class F> std::string padding_str(const ConvPadding<E>& p, F extents) {
  switch (p.mode) {
  case PaddingMode::Explicit: return extents(p.size);
  case PaddingMode::Valid: return "valid";
  case PaddingMode::Same: return "same";
  }
  return extents(p.size); // unreachable: every mode returns above
}

} // namespace

void manual_seed(uint64_t seed) {
  g_seed_base = seed;
  g_seed_counter = 0;
}

uint64_t next_seed() { return mix(g_seed_base.load() * 0x100000001b3ULL + g_seed_counter.fetch_add(1)); }

// ---------------------------------------------------------------- Module

Tensor Module::operator()(const Tensor& x, Loc loc) {
  const graph::SourceScope at(loc);
  detail::UserCall call(name(), loc);
  const ForwardScope scope(*this);
  return forward(x);
}

Tensor Module::forward_at(const Tensor& x, Loc loc) {
  const graph::SourceScope at(loc);
  detail::UserCall call(name(), loc);
  const ForwardScope scope(*this);
  return forward_impl(x);
}

Module::ForwardScope::ForwardScope(Module& m) : m_(m) {
  if (m.forward_depth_ == 0)
    for (const PreHook& h : m.pre_hooks_) h.hook(m); // a hook that throws leaves the depth as it was
  ++m.forward_depth_;
}

int64_t Module::register_forward_pre_hook(ForwardPreHook hook, std::string tag) {
  pre_hooks_.push_back({next_pre_hook_, std::move(tag), std::move(hook)});
  return next_pre_hook_++;
}

bool Module::remove_forward_pre_hook(int64_t handle) {
  auto it = std::find_if(pre_hooks_.begin(), pre_hooks_.end(), [&](const PreHook& h) { return h.handle == handle; });
  if (it == pre_hooks_.end()) return false;
  pre_hooks_.erase(it);
  return true;
}

std::optional<std::pair<int64_t, Module::ForwardPreHook>> Module::find_forward_pre_hook(const std::string& tag) const {
  for (const PreHook& h : pre_hooks_)
    if (h.tag == tag) return std::pair{h.handle, h.hook};
  return std::nullopt;
}

namespace {
// Removes `name` from `list` and returns its tensor; an absent one is the kiln::Error of `op`.
Tensor unregister(NamedTensors& list, const std::string& name, const std::string& op, const char* kind,
                  const Loc& loc) {
  auto it = std::find_if(list.begin(), list.end(), [&](const auto& p) { return p.first == name; });
  if (it == list.end()) throw Error(op, "\"" + name + "\" is not a " + kind + " of this module", loc);
  Tensor t = it->second;
  list.erase(it);
  return t;
}
} // namespace

Tensor Module::unregister_parameter(const std::string& name, Loc loc) {
  return unregister(params_, name, this->name() + "::unregister_parameter", "parameter", loc);
}

Tensor Module::unregister_buffer(const std::string& name, Loc loc) {
  return unregister(buffers_, name, this->name() + "::unregister_buffer", "buffer", loc);
}

Tensor Module::forward(const Tensor& x) { return forward_impl(x); }

Tensor Module::forward_impl(const Tensor&) {
  throw Error(name() + "::forward", "this module has no single-input forward; call its own forward");
}

void Module::check_new_name(const char* kind, const std::string& name, const Loc& loc) const {
  auto refuse = [&](const std::string& why) { throw Error(this->name() + "::register_" + kind, why, loc); };
  if (name.empty()) refuse(std::string(kind) + " name can't be empty string \"\"");
  if (name.find('.') != std::string::npos) refuse(std::string(kind) + " name can't contain \".\", got \"" + name + "\"");
  auto named = [&](const auto& entries) {
    return std::any_of(entries.begin(), entries.end(), [&](const auto& e) { return e.first == name; });
  };
  if (named(params_) || named(buffers_) || named(children_)) refuse("attribute '" + name + "' already exists");
}

Tensor Module::register_parameter(std::string name, Tensor t, Loc loc) {
  check_new_name("parameter", name, loc);
  if (!t.defined()) throw Error(this->name() + "::register_parameter", "parameter \"" + name + "\" is undefined", loc);
  if (!t.requires_grad()) t.requires_grad_(true, loc);
  params_.emplace_back(std::move(name), t);
  return t;
}

Tensor Module::register_buffer(std::string name, Tensor t, Loc loc) {
  check_new_name("buffer", name, loc);
  if (!t.defined()) throw Error(this->name() + "::register_buffer", "buffer \"" + name + "\" is undefined", loc);
  buffers_.emplace_back(std::move(name), t);
  return t;
}

void Module::add_child(std::string name, std::shared_ptr<Module> m, const Loc& loc) {
  check_new_name("module", name, loc);
  if (!m) throw Error(this->name() + "::register_module", "module \"" + name + "\" is null", loc);
  children_.emplace_back(std::move(name), std::move(m));
}

void Module::collect(const std::string& prefix, bool params, bool buffers, NamedTensors& out) const {
  if (params)
    for (const auto& [n, t] : params_) out.emplace_back(prefix + n, t);
  if (buffers)
    for (const auto& [n, t] : buffers_) out.emplace_back(prefix + n, t);
  for (const auto& [n, m] : children_) m->collect(prefix + n + ".", params, buffers, out);
}

NamedTensors Module::named_parameters() const {
  NamedTensors out;
  collect("", true, false, out);
  return out;
}

NamedTensors Module::named_buffers() const {
  NamedTensors out;
  collect("", false, true, out);
  return out;
}

NamedTensors Module::state_dict() const {
  NamedTensors out = named_parameters();
  for (auto& b : named_buffers()) out.push_back(std::move(b));
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_parameters()) out.push_back(t);
  return detail::distinct_tensors(std::move(out)); // a tensor shared by two modules (tied weights) once, as PyTorch
}

std::vector<Tensor> Module::buffers() const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_buffers()) out.push_back(t);
  return out;
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (const Tensor& p : parameters()) n += p.numel();
  return n;
}

bool Module::is_training() const {
  detail::trace_guard([this, alive = std::weak_ptr<int>(life_.token), was = training_] {
    return alive.expired() || training_ == was;
  });
  return training_;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [n, m] : children_) m->train(on);
}

void Module::zero_grad() {
  for (Tensor p : parameters()) p.zero_grad();
}

Module& Module::to(Device device, Loc loc) {
  for (const auto& [name, t] : state_dict()) detail::move_in_place(t, device, loc);
  return *this;
}

Module& Module::to(DType dtype, Loc loc) {
  if (!is_floating(dtype))
    throw Error("to", "modules convert to floating dtypes only, not " + std::string(dtype_name(dtype)), loc);
  for (const auto& [name, t] : state_dict())
    if (is_floating(t.dtype())) detail::cast_in_place(t, dtype, loc);
  return *this;
}

void Module::describe(std::string& out, int indent) const {
  out += name() + "(" + extra_repr();
  if (children_.empty()) {
    out += ")";
    return;
  }
  out += "\n";
  for (const auto& [n, m] : children_) {
    out += std::string(indent + 2, ' ') + "(" + n + "): ";
    m->describe(out, indent + 2);
    out += "\n";
  }
  out += std::string(indent, ' ') + ")";
}

std::string Module::str() const {
  std::string out;
  describe(out, 0);
  return out;
}

// ---------------------------------------------------------------- Linear

Linear::Linear(int64_t in_features, int64_t out_features, bool with_bias, Loc loc) {
  if (in_features <= 0 || out_features <= 0)
    throw Error("Linear", "features must be positive, got in=" + std::to_string(in_features) + ", out=" +
                              std::to_string(out_features), loc);
  const detail::UserCall call("Linear", loc); // errors of making the parameters (memory) are Linear's
  const graph::SourceScope at(loc);
  // Kaiming-uniform with a = sqrt(5) reduces to bound 1/sqrt(fan_in), as the bias.
  const double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
  weight = register_parameter("weight", uniform({out_features, in_features}, bound));
  if (with_bias) bias = register_parameter("bias", uniform({out_features}, bound));
}

Tensor Linear::forward_impl(const Tensor& x) { return functional::linear(x, weight, bias); }

std::string Linear::extra_repr() const {
  return "in_features=" + std::to_string(weight.size(1)) + ", out_features=" + std::to_string(weight.size(0)) +
         ", bias=" + (bias.defined() ? "true" : "false");
}

// ---------------------------------------------------------------- Bilinear

Bilinear::Bilinear(int64_t in1_features, int64_t in2_features, int64_t out_features, bool with_bias, Loc loc) {
  if (in1_features <= 0 || in2_features <= 0 || out_features <= 0)
    throw Error("Bilinear",
                "features must be positive, got in1=" + std::to_string(in1_features) +
                    ", in2=" + std::to_string(in2_features) + ", out=" + std::to_string(out_features),
                loc);
  const detail::UserCall call("Bilinear", loc); // errors of making the parameters (memory) are Bilinear's
  const graph::SourceScope at(loc);
  const double bound = 1.0 / std::sqrt(static_cast<double>(in1_features)); // PyTorch's reset_parameters
  weight = register_parameter("weight", uniform({out_features, in1_features, in2_features}, bound));
  if (with_bias) bias = register_parameter("bias", uniform({out_features}, bound));
}

Tensor Bilinear::forward(const Tensor& x1, const Tensor& x2, Loc loc) {
  const graph::SourceScope at(loc);
  const detail::UserCall call(name(), loc);
  return functional::bilinear(x1, x2, weight, bias);
}

std::string Bilinear::extra_repr() const {
  return "in1_features=" + std::to_string(weight.size(1)) + ", in2_features=" + std::to_string(weight.size(2)) +
         ", out_features=" + std::to_string(weight.size(0)) + ", bias=" + (bias.defined() ? "true" : "false");
}

// ---------------------------------------------------------------- Conv2d

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, Size2 kernel_size, Conv2dOptions opts, Loc loc)
    : options(opts), in_(in_channels), out_(out_channels), kernel_(kernel_size) {
  const int64_t g = opts.groups;
  if (in_channels <= 0 || out_channels <= 0 || g <= 0 || in_channels % g || out_channels % g)
    throw Error("Conv2d", "channels (in " + std::to_string(in_channels) + ", out " + std::to_string(out_channels) +
                              ") must be positive and divisible by groups=" + std::to_string(g), loc);
  if (kernel_size.h <= 0 || kernel_size.w <= 0) throw Error("Conv2d", "the kernel size must be positive", loc);
  check_padding_option("Conv2d", opts.padding, opts.stride.h != 1 || opts.stride.w != 1, loc);
  check_padding_mode("Conv2d", opts.padding_mode, loc);
  const detail::UserCall call("Conv2d", loc);
  const graph::SourceScope at(loc);
  const int64_t fan_in = in_channels / g * kernel_size.h * kernel_size.w;
  const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
  weight = register_parameter("weight", uniform({out_channels, in_channels / g, kernel_size.h, kernel_size.w}, bound));
  if (opts.bias) bias = register_parameter("bias", uniform({out_channels}, bound));
}

Tensor Conv2d::forward_impl(const Tensor& x) {
  if (options.padding_mode == "zeros")
    return functional::conv2d(x, weight, bias, options.stride, options.padding, options.dilation, options.groups);
  const Size2& p = options.padding.size;
  const IntList pads =
      mode_pads(options.padding.mode, {p.h, p.w}, {kernel_.h, kernel_.w}, {options.dilation.h, options.dilation.w});
  return functional::conv2d(pad(x, pads, options.padding_mode), weight, bias, options.stride, 0, options.dilation,
                            options.groups);
}

std::string Conv2d::extra_repr() const {
  return std::to_string(in_) + ", " + std::to_string(out_) + ", kernel_size=" + size2_str(kernel_) +
         ", stride=" + size2_str(options.stride) + ", padding=" + padding_str(options.padding, size2_str) +
         ", dilation=" + size2_str(options.dilation) + ", groups=" + std::to_string(options.groups) +
         ", bias=" + (bias.defined() ? "true" : "false") + padding_mode_str(options.padding_mode);
}

// ---------------------------------------------------------------- Conv1d

Conv1d::Conv1d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, Conv1dOptions opts, Loc loc)
    : options(opts), in_(in_channels), out_(out_channels), kernel_(kernel_size) {
  const int64_t g = opts.groups;
  if (in_channels <= 0 || out_channels <= 0 || g <= 0 || in_channels % g || out_channels % g)
    throw Error("Conv1d", "channels (in " + std::to_string(in_channels) + ", out " + std::to_string(out_channels) +
                              ") must be positive and divisible by groups=" + std::to_string(g), loc);
  if (kernel_size <= 0) throw Error("Conv1d", "the kernel size must be positive", loc);
  check_padding_option("Conv1d", opts.padding, opts.stride != 1, loc);
  check_padding_mode("Conv1d", opts.padding_mode, loc);
  const detail::UserCall call("Conv1d", loc);
  const graph::SourceScope at(loc);
  // Kaiming-uniform with a = sqrt(5) over fan_in = in/groups * k, as the bias: bound 1/sqrt(fan_in).
  const double bound = 1.0 / std::sqrt(static_cast<double>(in_channels / g * kernel_size));
  weight = register_parameter("weight", uniform({out_channels, in_channels / g, kernel_size}, bound));
  if (opts.bias) bias = register_parameter("bias", uniform({out_channels}, bound));
}

Tensor Conv1d::forward_impl(const Tensor& x) {
  if (options.padding_mode == "zeros")
    return functional::conv1d(x, weight, bias, options.stride, options.padding, options.dilation, options.groups);
  const IntList pads = mode_pads(options.padding.mode, {options.padding.size}, {kernel_}, {options.dilation});
  return functional::conv1d(pad(x, pads, options.padding_mode), weight, bias, options.stride, 0, options.dilation,
                            options.groups);
}

std::string Conv1d::extra_repr() const {
  auto one = [](int64_t v) { return "(" + std::to_string(v) + ",)"; }; // PyTorch's 1-tuples
  return std::to_string(in_) + ", " + std::to_string(out_) + ", kernel_size=" + one(kernel_) +
         ", stride=" + one(options.stride) + ", padding=" + padding_str(options.padding, one) +
         ", dilation=" + one(options.dilation) + ", groups=" + std::to_string(options.groups) +
         ", bias=" + (bias.defined() ? "true" : "false") + padding_mode_str(options.padding_mode);
}

// ---------------------------------------------------------------- ConvTranspose2d, ConvTranspose1d

namespace {

// The weight [in, out/groups, kernel...] and bias [out] of a transposed convolution module, initialized as
// PyTorch's _ConvNd.reset_parameters: kaiming-uniform with a = sqrt(5) and the bias both give bound
// 1/sqrt(fan_in), where fan_in is the weight's size(1) * kernel size, out/groups here.
void make_transposed_parameters(Module& m, Tensor& weight, Tensor& bias, const char* op, int64_t in, int64_t out,
                                int64_t groups, const IntList& kernel, bool with_bias, const Loc& loc) {
  if (in <= 0 || out <= 0 || groups <= 0 || in % groups || out % groups)
    throw Error(op, "channels (in " + std::to_string(in) + ", out " + std::to_string(out) +
                        ") must be positive and divisible by groups=" + std::to_string(groups), loc);
  int64_t fan_in = out / groups;
  for (int64_t k : kernel) {
    if (k <= 0) throw Error(op, "the kernel size must be positive", loc);
    fan_in *= k;
  }
  const detail::UserCall call(op, loc);
  const graph::SourceScope at(loc);
  const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
  IntList shape{in, out / groups};
  shape.insert(shape.end(), kernel.begin(), kernel.end());
  weight = m.register_parameter("weight", uniform(shape, bound));
  if (with_bias) bias = m.register_parameter("bias", uniform({out}, bound));
}

// The output_padding per spatial dim that makes a transposed convolution of x give the spatial extents
// `output_size` (alone, or after the batch and channels of x), as PyTorch's _ConvTransposeNd._output_padding.
// An input of the wrong rank, or a non-positive stride or dilation or a negative padding, gets the options'
// `fallback`: the convolution reports them.
IntList output_padding_for(const char* op, const Tensor& x, IntList output_size, const IntList& kernel,
                           const IntList& stride, const IntList& padding, const IntList& dilation,
                           const IntList& fallback, const Loc& loc) {
  const auto k = static_cast<int64_t>(kernel.size());
  if (!x.defined() || (x.dim() != k + 1 && x.dim() != k + 2)) return fallback;
  for (size_t i = 0; i < kernel.size(); ++i)
    if (stride[i] <= 0 || dilation[i] <= 0 || padding[i] < 0) return fallback; // and these
  const int64_t leading = x.dim() - k; // the batch (if any) and the channels
  if (static_cast<int64_t>(output_size.size()) == leading + k)
    output_size.erase(output_size.begin(), output_size.begin() + leading);
  if (static_cast<int64_t>(output_size.size()) != k)
    detail::fail(op,
                 "for " + std::to_string(x.dim()) + "-d input, output_size must have " + std::to_string(k) + " or " +
                     std::to_string(leading + k) + " elements (got " + std::to_string(output_size.size()) + ")",
                 {&x}, loc);
  IntList low, high, in, result;
  for (int64_t d = 0; d < k; ++d) {
    const auto i = static_cast<size_t>(d);
    // (in - 1) * stride - 2 * padding + dilation * (kernel - 1) + 1, the extent without output_padding
    const auto spread = graph::checked_mul(x.size(leading + d) - 1, stride[i]);
    const auto reach = graph::checked_mul(dilation[i], kernel[i] - 1);
    const auto twice_pad = graph::checked_mul(2, padding[i]);
    const auto grown = spread && reach ? graph::checked_add(*spread, *reach) : std::nullopt;
    const auto m = grown && twice_pad ? graph::checked_add(*grown - *twice_pad, 1) : std::nullopt;
    if (!m || !graph::checked_add(*m, stride[i] - 1)) detail::fail(op, "the output size overflows int64", {&x}, loc);
    in.push_back(x.size(leading + d));
    low.push_back(*m);
    high.push_back(*m + stride[i] - 1);
  }
  for (size_t i = 0; i < output_size.size(); ++i) {
    if (output_size[i] < low[i] || output_size[i] > high[i])
      detail::fail(op,
                   "requested an output size of " + detail::list_str(output_size) + ", but valid sizes range from " +
                       detail::list_str(low) + " to " + detail::list_str(high) + " (for an input of " + detail::list_str(in) + ")",
                   {&x}, loc);
    result.push_back(output_size[i] - low[i]);
  }
  return result;
}

} // namespace

ConvTranspose2d::ConvTranspose2d(int64_t in_channels, int64_t out_channels, Size2 kernel_size,
                                 ConvTranspose2dOptions opts, Loc loc)
    : options(opts), in_(in_channels), out_(out_channels), kernel_(kernel_size) {
  make_transposed_parameters(*this, weight, bias, "ConvTranspose2d", in_channels, out_channels, opts.groups,
                             {kernel_size.h, kernel_size.w}, opts.bias, loc);
}

Tensor ConvTranspose2d::forward_impl(const Tensor& x) {
  return functional::conv_transpose2d(x, weight, bias, options.stride, options.padding, options.output_padding,
                                      options.groups, options.dilation);
}

Tensor ConvTranspose2d::forward(const Tensor& x, const IntList& output_size, Loc loc) {
  const graph::SourceScope at(loc);
  const detail::UserCall call(name(), loc);
  const ConvTranspose2dOptions& o = options;
  const IntList op = output_padding_for("ConvTranspose2d", x, output_size, {kernel_.h, kernel_.w},
                                        {o.stride.h, o.stride.w}, {o.padding.h, o.padding.w},
                                        {o.dilation.h, o.dilation.w}, {o.output_padding.h, o.output_padding.w}, loc);
  return functional::conv_transpose2d(x, weight, bias, o.stride, o.padding, {op[0], op[1]}, o.groups, o.dilation);
}

std::string ConvTranspose2d::extra_repr() const {
  return std::to_string(in_) + ", " + std::to_string(out_) + ", kernel_size=" + size2_str(kernel_) +
         ", stride=" + size2_str(options.stride) + ", padding=" + size2_str(options.padding) +
         ", output_padding=" + size2_str(options.output_padding) + ", dilation=" + size2_str(options.dilation) +
         ", groups=" + std::to_string(options.groups) + ", bias=" + (bias.defined() ? "true" : "false");
}

ConvTranspose1d::ConvTranspose1d(int64_t in_channels, int64_t out_channels, int64_t kernel_size,
                                 ConvTranspose1dOptions opts, Loc loc)
    : options(opts), in_(in_channels), out_(out_channels), kernel_(kernel_size) {
  make_transposed_parameters(*this, weight, bias, "ConvTranspose1d", in_channels, out_channels, opts.groups,
                             {kernel_size}, opts.bias, loc);
}

Tensor ConvTranspose1d::forward_impl(const Tensor& x) {
  return functional::conv_transpose1d(x, weight, bias, options.stride, options.padding, options.output_padding,
                                      options.groups, options.dilation);
}

Tensor ConvTranspose1d::forward(const Tensor& x, const IntList& output_size, Loc loc) {
  const graph::SourceScope at(loc);
  const detail::UserCall call(name(), loc);
  const ConvTranspose1dOptions& o = options;
  const IntList op = output_padding_for("ConvTranspose1d", x, output_size, {kernel_}, {o.stride}, {o.padding},
                                        {o.dilation}, {o.output_padding}, loc);
  return functional::conv_transpose1d(x, weight, bias, o.stride, o.padding, op[0], o.groups, o.dilation);
}

std::string ConvTranspose1d::extra_repr() const {
  auto one = [](int64_t v) { return "(" + std::to_string(v) + ",)"; }; // PyTorch's 1-tuples
  return std::to_string(in_) + ", " + std::to_string(out_) + ", kernel_size=" + one(kernel_) +
         ", stride=" + one(options.stride) + ", padding=" + one(options.padding) +
         ", output_padding=" + one(options.output_padding) + ", dilation=" + one(options.dilation) +
         ", groups=" + std::to_string(options.groups) + ", bias=" + (bias.defined() ? "true" : "false");
}

// ---------------------------------------------------------------- pooling

MaxPool2d::MaxPool2d(Size2 kernel_size, std::optional<Size2> stride, Size2 padding, Size2 dilation, bool ceil_mode)
    : kernel_(kernel_size), stride_(stride.value_or(kernel_size)), padding_(padding), dilation_(dilation),
      ceil_mode_(ceil_mode) {}

Tensor MaxPool2d::forward_impl(const Tensor& x) {
  return functional::max_pool2d(x, kernel_, stride_, padding_, dilation_, ceil_mode_);
}

std::string MaxPool2d::extra_repr() const {
  return "kernel_size=" + size2_str(kernel_) + ", stride=" + size2_str(stride_) + ", padding=" + size2_str(padding_) +
         ", dilation=" + size2_str(dilation_) + ", ceil_mode=" + (ceil_mode_ ? "true" : "false");
}

AvgPool2d::AvgPool2d(Size2 kernel_size, std::optional<Size2> stride, Size2 padding, bool ceil_mode, bool count_include_pad,
                     std::optional<int64_t> divisor_override)
    : kernel_(kernel_size), stride_(stride.value_or(kernel_size)), padding_(padding), ceil_mode_(ceil_mode),
      count_include_pad_(count_include_pad), divisor_override_(divisor_override) {}

Tensor AvgPool2d::forward_impl(const Tensor& x) {
  return functional::avg_pool2d(x, kernel_, stride_, padding_, ceil_mode_, count_include_pad_, divisor_override_);
}

std::string AvgPool2d::extra_repr() const {
  return "kernel_size=" + size2_str(kernel_) + ", stride=" + size2_str(stride_) + ", padding=" + size2_str(padding_) +
         ", ceil_mode=" + (ceil_mode_ ? "true" : "false") +
         ", count_include_pad=" + (count_include_pad_ ? "true" : "false") +
         (divisor_override_ ? ", divisor_override=" + std::to_string(*divisor_override_) : "");
}

MaxPool1d::MaxPool1d(int64_t kernel_size, std::optional<int64_t> stride, int64_t padding, int64_t dilation, bool ceil_mode)
    : kernel_(kernel_size), stride_(stride.value_or(kernel_size)), padding_(padding), dilation_(dilation),
      ceil_mode_(ceil_mode) {}

Tensor MaxPool1d::forward_impl(const Tensor& x) {
  return functional::max_pool1d(x, kernel_, stride_, padding_, dilation_, ceil_mode_);
}

std::string MaxPool1d::extra_repr() const {
  return "kernel_size=" + std::to_string(kernel_) + ", stride=" + std::to_string(stride_) + ", padding=" +
         std::to_string(padding_) + ", dilation=" + std::to_string(dilation_) + ", ceil_mode=" + (ceil_mode_ ? "true" : "false");
}

AvgPool1d::AvgPool1d(int64_t kernel_size, std::optional<int64_t> stride, int64_t padding, bool ceil_mode, bool count_include_pad)
    : kernel_(kernel_size), stride_(stride.value_or(kernel_size)), padding_(padding), ceil_mode_(ceil_mode),
      count_include_pad_(count_include_pad) {}

Tensor AvgPool1d::forward_impl(const Tensor& x) {
  return functional::avg_pool1d(x, kernel_, stride_, padding_, ceil_mode_, count_include_pad_);
}

std::string AvgPool1d::extra_repr() const {
  return "kernel_size=" + std::to_string(kernel_) + ", stride=" + std::to_string(stride_) + ", padding=" +
         std::to_string(padding_) + ", ceil_mode=" + (ceil_mode_ ? "true" : "false") +
         ", count_include_pad=" + (count_include_pad_ ? "true" : "false");
}

Tensor AdaptiveAvgPool2d::forward_impl(const Tensor& x) { return functional::adaptive_avg_pool2d(x, output_size_); }

std::string AdaptiveAvgPool2d::extra_repr() const { return "output_size=" + size2_str(output_size_); }

Tensor AdaptiveAvgPool1d::forward_impl(const Tensor& x) { return functional::adaptive_avg_pool1d(x, output_size_); }

std::string AdaptiveAvgPool3d::extra_repr() const {
  return "output_size=" + join_ints({output_size_.d, output_size_.h, output_size_.w});
}

std::string AdaptiveAvgPool1d::extra_repr() const { return "output_size=" + std::to_string(output_size_); }

std::pair<Tensor, Tensor> MaxPool2d::forward_with_indices(const Tensor& x, Loc loc) {
  const graph::SourceScope at(loc);
  const detail::UserCall call(name(), loc);
  return functional::max_pool2d_with_indices(x, kernel_, stride_, padding_, dilation_, ceil_mode_);
}

std::pair<Tensor, Tensor> MaxPool1d::forward_with_indices(const Tensor& x, Loc loc) {
  const graph::SourceScope at(loc);
  const detail::UserCall call(name(), loc);
  return functional::max_pool1d_with_indices(x, kernel_, stride_, padding_, dilation_, ceil_mode_);
}

Tensor MaxUnpool2d::forward(const Tensor& x, const Tensor& indices, const IntList& output_size, Loc loc) {
  const graph::SourceScope at(loc);
  const detail::UserCall call(name(), loc);
  return functional::max_unpool2d(x, indices, kernel_, stride_, padding_, output_size);
}

std::string MaxUnpool2d::extra_repr() const {
  return "kernel_size=" + size2_str(kernel_) + ", stride=" + size2_str(stride_) + ", padding=" + size2_str(padding_);
}

Tensor MaxUnpool1d::forward(const Tensor& x, const Tensor& indices, const IntList& output_size, Loc loc) {
  const graph::SourceScope at(loc);
  const detail::UserCall call(name(), loc);
  return functional::max_unpool1d(x, indices, kernel_, stride_, padding_, output_size);
}

std::string MaxUnpool1d::extra_repr() const {
  return "kernel_size=" + std::to_string(kernel_) + ", stride=" + std::to_string(stride_) +
         ", padding=" + std::to_string(padding_);
}

Tensor AdaptiveMaxPool2d::forward_impl(const Tensor& x) { return functional::adaptive_max_pool2d(x, output_size_); }

std::pair<Tensor, Tensor> AdaptiveMaxPool2d::forward_with_indices(const Tensor& x, Loc loc) {
  const graph::SourceScope at(loc);
  const detail::UserCall call(name(), loc);
  return functional::adaptive_max_pool2d_with_indices(x, output_size_);
}

std::string AdaptiveMaxPool2d::extra_repr() const { return "output_size=" + size2_str(output_size_); }

Tensor AdaptiveMaxPool1d::forward_impl(const Tensor& x) { return functional::adaptive_max_pool1d(x, output_size_); }

std::pair<Tensor, Tensor> AdaptiveMaxPool1d::forward_with_indices(const Tensor& x, Loc loc) {
  const graph::SourceScope at(loc);
  const detail::UserCall call(name(), loc);
  return functional::adaptive_max_pool1d_with_indices(x, output_size_);
}

std::string AdaptiveMaxPool1d::extra_repr() const { return "output_size=" + std::to_string(output_size_); }

namespace {

std::string py_float(double v); // a double as Python's repr writes it (defined with Upsample's)

} // namespace

Tensor LPPool2d::forward_impl(const Tensor& x) {
  return functional::lp_pool2d(x, norm_type_, kernel_, stride_, ceil_mode_);
}

std::string LPPool2d::extra_repr() const {
  return "norm_type=" + py_float(norm_type_) + ", kernel_size=" + size2_str(kernel_) +
         ", stride=" + size2_str(stride_) + ", ceil_mode=" + (ceil_mode_ ? "true" : "false");
}

Tensor LPPool1d::forward_impl(const Tensor& x) {
  return functional::lp_pool1d(x, norm_type_, kernel_, stride_, ceil_mode_);
}

std::string LPPool1d::extra_repr() const {
  return "norm_type=" + py_float(norm_type_) + ", kernel_size=" + std::to_string(kernel_) +
         ", stride=" + std::to_string(stride_) + ", ceil_mode=" + (ceil_mode_ ? "true" : "false");
}

// ---------------------------------------------------------------- 3-d layers

namespace {

std::string size3_str(const Size3& s) { return join_ints({s.d, s.h, s.w}); }

} // namespace

Conv3d::Conv3d(int64_t in_channels, int64_t out_channels, Size3 kernel_size, Conv3dOptions opts, Loc loc)
    : options(opts), in_(in_channels), out_(out_channels), kernel_(kernel_size) {
  const int64_t g = opts.groups;
  if (in_channels <= 0 || out_channels <= 0 || g <= 0 || in_channels % g || out_channels % g)
    throw Error("Conv3d",
                "channels (in " + std::to_string(in_channels) + ", out " + std::to_string(out_channels) +
                    ") must be positive and divisible by groups=" + std::to_string(g),
                loc);
  if (kernel_size.d <= 0 || kernel_size.h <= 0 || kernel_size.w <= 0)
    throw Error("Conv3d", "the kernel size must be positive", loc);
  check_padding_mode("Conv3d", opts.padding_mode, loc);
  const detail::UserCall call("Conv3d", loc);
  const graph::SourceScope at(loc);
  const int64_t fan_in = in_channels / g * kernel_size.d * kernel_size.h * kernel_size.w;
  const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in)); // kaiming-uniform, a = sqrt(5), as Conv2d
  weight = register_parameter(
      "weight", uniform({out_channels, in_channels / g, kernel_size.d, kernel_size.h, kernel_size.w}, bound));
  if (opts.bias) bias = register_parameter("bias", uniform({out_channels}, bound));
}

Tensor Conv3d::forward_impl(const Tensor& x) {
  if (options.padding_mode == "zeros")
    return functional::conv3d(x, weight, bias, options.stride, options.padding, options.dilation, options.groups);
  const Size3 &p = options.padding, &k = kernel_, &d = options.dilation;
  const IntList pads = mode_pads(PaddingMode::Explicit, {p.d, p.h, p.w}, {k.d, k.h, k.w}, {d.d, d.h, d.w});
  return functional::conv3d(pad(x, pads, options.padding_mode), weight, bias, options.stride, 0, options.dilation,
                            options.groups);
}

std::string Conv3d::extra_repr() const {
  return std::to_string(in_) + ", " + std::to_string(out_) + ", kernel_size=" + size3_str(kernel_) +
         ", stride=" + size3_str(options.stride) + ", padding=" + size3_str(options.padding) +
         ", dilation=" + size3_str(options.dilation) + ", groups=" + std::to_string(options.groups) +
         ", bias=" + (bias.defined() ? "true" : "false") + padding_mode_str(options.padding_mode);
}

ConvTranspose3d::ConvTranspose3d(int64_t in_channels, int64_t out_channels, Size3 kernel_size,
                                 ConvTranspose3dOptions opts, Loc loc)
    : options(opts), in_(in_channels), out_(out_channels), kernel_(kernel_size) {
  make_transposed_parameters(*this, weight, bias, "ConvTranspose3d", in_channels, out_channels, opts.groups,
                             {kernel_size.d, kernel_size.h, kernel_size.w}, opts.bias, loc);
}

Tensor ConvTranspose3d::forward_impl(const Tensor& x) {
  return functional::conv_transpose3d(x, weight, bias, options.stride, options.padding, options.output_padding,
                                      options.groups, options.dilation);
}

Tensor ConvTranspose3d::forward(const Tensor& x, const IntList& output_size, Loc loc) {
  const graph::SourceScope at(loc);
  const detail::UserCall call(name(), loc);
  const ConvTranspose3dOptions& o = options;
  const IntList op = output_padding_for("ConvTranspose3d", x, output_size, {kernel_.d, kernel_.h, kernel_.w},
                                        {o.stride.d, o.stride.h, o.stride.w}, {o.padding.d, o.padding.h, o.padding.w},
                                        {o.dilation.d, o.dilation.h, o.dilation.w},
                                        {o.output_padding.d, o.output_padding.h, o.output_padding.w}, loc);
  return functional::conv_transpose3d(x, weight, bias, o.stride, o.padding, {op[0], op[1], op[2]}, o.groups,
                                      o.dilation);
}

std::string ConvTranspose3d::extra_repr() const {
  return std::to_string(in_) + ", " + std::to_string(out_) + ", kernel_size=" + size3_str(kernel_) +
         ", stride=" + size3_str(options.stride) + ", padding=" + size3_str(options.padding) +
         ", output_padding=" + size3_str(options.output_padding) + ", dilation=" + size3_str(options.dilation) +
         ", groups=" + std::to_string(options.groups) + ", bias=" + (bias.defined() ? "true" : "false");
}

Tensor MaxPool3d::forward_impl(const Tensor& x) {
  return functional::max_pool3d(x, kernel_, stride_, padding_, dilation_, ceil_mode_);
}

std::string MaxPool3d::extra_repr() const {
  return "kernel_size=" + size3_str(kernel_) + ", stride=" + size3_str(stride_) + ", padding=" + size3_str(padding_) +
         ", dilation=" + size3_str(dilation_) + ", ceil_mode=" + (ceil_mode_ ? "true" : "false");
}

Tensor AvgPool3d::forward_impl(const Tensor& x) {
  return functional::avg_pool3d(x, kernel_, stride_, padding_, ceil_mode_, count_include_pad_, divisor_override_);
}

std::string AvgPool3d::extra_repr() const {
  return "kernel_size=" + size3_str(kernel_) + ", stride=" + size3_str(stride_) + ", padding=" + size3_str(padding_) +
         ", ceil_mode=" + (ceil_mode_ ? "true" : "false") +
         ", count_include_pad=" + (count_include_pad_ ? "true" : "false") +
         (divisor_override_ ? ", divisor_override=" + std::to_string(*divisor_override_) : "");
}

// ---------------------------------------------------------------- vision rearrangements

Tensor PixelShuffle::forward_impl(const Tensor& x) { return functional::pixel_shuffle(x, factor_); }

std::string PixelShuffle::extra_repr() const { return "upscale_factor=" + std::to_string(factor_); }

Tensor PixelUnshuffle::forward_impl(const Tensor& x) { return functional::pixel_unshuffle(x, factor_); }

std::string PixelUnshuffle::extra_repr() const { return "downscale_factor=" + std::to_string(factor_); }

Tensor ChannelShuffle::forward_impl(const Tensor& x) { return functional::channel_shuffle(x, groups_); }

std::string ChannelShuffle::extra_repr() const { return "groups=" + std::to_string(groups_); }

Tensor Unfold::forward_impl(const Tensor& x) { return functional::unfold(x, kernel_, dilation_, padding_, stride_); }

std::string Unfold::extra_repr() const {
  return "kernel_size=" + size2_str(kernel_) + ", dilation=" + size2_str(dilation_) +
         ", padding=" + size2_str(padding_) + ", stride=" + size2_str(stride_);
}

Tensor Fold::forward_impl(const Tensor& x) {
  return functional::fold(x, output_size_, kernel_, dilation_, padding_, stride_);
}

std::string Fold::extra_repr() const {
  return "output_size=" + size2_str(output_size_) + ", kernel_size=" + size2_str(kernel_) +
         ", dilation=" + size2_str(dilation_) + ", padding=" + size2_str(padding_) + ", stride=" + size2_str(stride_);
}

// ---------------------------------------------------------------- Upsample

namespace {

// A double as Python's repr writes it: the shortest round-trip digits, and ".0" on an integer.
std::string py_float(double v) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  std::string s(buf, r.ptr);
  if (std::isfinite(v) && s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

// One value as itself, several as a Python tuple.
template <class T, class F> std::string py_value_or_tuple(const std::vector<T>& v, F str) {
  if (v.size() == 1) return str(v[0]);
  std::string s = "(";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + str(v[i]);
  return s + ")";
}

} // namespace

Tensor Upsample::forward_impl(const Tensor& x) { return functional::interpolate(x, options); }

std::string Upsample::extra_repr() const {
  const std::string what = options.size.empty()
                               ? "scale_factor=" + py_value_or_tuple(options.scale_factor, py_float)
                               : "size=" + py_value_or_tuple(options.size, [](int64_t v) { return std::to_string(v); });
  return what + ", mode='" + options.mode + "'";
}

// ---------------------------------------------------------------- Softmax2d, Threshold, Unflatten

Tensor Softmax2d::forward_impl(const Tensor& x) {
  if (x.dim() != 3 && x.dim() != 4)
    detail::fail("Softmax2d", "needs a 3-d or 4-d input ([N, C, H, W] or [C, H, W])", {&x}, Loc::current());
  return functional::softmax(x, -3);
}

std::string Threshold::extra_repr() const {
  return "threshold=" + py_float(threshold_) + ", value=" + py_float(value_);
}

std::string Unflatten::extra_repr() const {
  std::string sizes = "(";
  for (int64_t v : sizes_) sizes += (sizes.size() > 1 ? ", " : "") + std::to_string(v);
  return "dim=" + std::to_string(dim_) + ", unflattened_size=" + sizes + (sizes_.size() == 1 ? ",)" : ")");
}

// ---------------------------------------------------------------- padding modules

Pad::Pad(std::string name, std::string pad_mode, int64_t dims, IntList amounts, double v, Loc loc)
    : padding(std::move(amounts)), mode(std::move(pad_mode)), value(v), name_(std::move(name)) {
  if (padding.size() == 1) padding.assign(static_cast<size_t>(2 * dims), padding[0]);
  if (static_cast<int64_t>(padding.size()) != 2 * dims)
    throw Error(name_,
                "needs one padding or " + std::to_string(2 * dims) + " (before, after), got " +
                    std::to_string(padding.size()) + " values",
                loc);
}

Tensor Pad::forward_impl(const Tensor& x) { return pad(x, padding, mode, value); }

std::string Pad::extra_repr() const {
  std::string amounts = "(";
  for (int64_t v : padding) amounts += (amounts.size() > 1 ? ", " : "") + std::to_string(v);
  amounts += ")";
  return name_.starts_with("ConstantPad") ? "padding=" + amounts + ", value=" + py_float(value) : amounts;
}

// ---------------------------------------------------------------- BatchNorm

BatchNorm::BatchNorm(int64_t features, BatchNormOptions opts, int rank_min, int rank_max, std::string name, Loc loc)
    : options(opts), features_(features), rank_min_(rank_min), rank_max_(rank_max), name_(std::move(name)) {
  if (features <= 0) throw Error(name_, "the number of features must be positive", loc);
  const detail::UserCall call(name_, loc);
  const graph::SourceScope at(loc);
  if (opts.affine) {
    weight = register_parameter("weight", ones({features}));
    bias = register_parameter("bias", zeros({features}));
  }
  if (opts.track_running_stats) {
    running_mean = register_buffer("running_mean", zeros({features}));
    running_var = register_buffer("running_var", ones({features}));
    num_batches_tracked = register_buffer("num_batches_tracked", zeros({}, kInt64));
  }
}

Tensor BatchNorm::forward_impl(const Tensor& x) {
  if (x.dim() < rank_min_ || x.dim() > rank_max_ || x.size(1) != features_)
    detail::fail(name_,
                 "expects [N, " + std::to_string(features_) +
                     (rank_max_ == 5   ? ", D, H, W]"
                      : rank_max_ == 4 ? ", H, W]"
                                       : "(, L)]") +
                     " inputs",
                 {&x}, Loc::current());
  const bool use_batch = is_training() || !options.track_running_stats;
  const Tensor factor = count_batch();
  // With batch statistics, batch_norm also updates the running ones (undefined when not tracked).
  return kiln::detail::batch_norm_with(x, running_mean, running_var, weight, bias, use_batch, options.momentum.value_or(0),
                                       factor, options.eps, Loc::current());
}

Tensor BatchNorm::count_batch() {
  if (!is_training() || !options.track_running_stats) return Tensor();
  NoGradGuard no_grad;
  num_batches_tracked.assign(num_batches_tracked + 1);
  if (options.momentum) return Tensor();
  return 1.0 / num_batches_tracked.to(kFloat64); // torch's momentum=None: the cumulative moving average
}

std::string BatchNorm::extra_repr() const {
  std::ostringstream os;
  os << features_ << ", eps=" << options.eps << ", momentum=";
  if (options.momentum) os << *options.momentum;
  else os << "None";
  os << ", affine=" << (options.affine ? "true" : "false")
     << ", track_running_stats=" << (options.track_running_stats ? "true" : "false");
  return os.str();
}

// ---------------------------------------------------------------- LayerNorm

LayerNorm::LayerNorm(IntList normalized_shape, double eps, bool elementwise_affine, Loc loc)
    : shape_(std::move(normalized_shape)), eps_(eps) {
  if (shape_.empty()) throw Error("LayerNorm", "normalized_shape must not be empty", loc);
  const detail::UserCall call("LayerNorm", loc);
  const graph::SourceScope at(loc);
  if (elementwise_affine) {
    weight = register_parameter("weight", ones(shape_));
    bias = register_parameter("bias", zeros(shape_));
  }
}

Tensor LayerNorm::forward_impl(const Tensor& x) { return functional::layer_norm(x, shape_, weight, bias, eps_); }

std::string LayerNorm::extra_repr() const {
  std::ostringstream os;
  os << "normalized_shape=" << detail::list_str(shape_) << ", eps=" << eps_ << ", elementwise_affine=" << (weight.defined() ? "true" : "false");
  return os.str();
}

// ---------------------------------------------------------------- GroupNorm, InstanceNorm

GroupNorm::GroupNorm(int64_t num_groups, int64_t num_channels, double eps, bool affine, Loc loc)
    : groups_(num_groups), channels_(num_channels), eps_(eps) {
  if (num_groups <= 0 || num_channels <= 0 || num_channels % num_groups != 0)
    throw Error("GroupNorm",
                "num_channels " + std::to_string(num_channels) + " must be divisible by num_groups " +
                    std::to_string(num_groups) + " (both positive)",
                loc);
  const detail::UserCall call("GroupNorm", loc);
  const graph::SourceScope at(loc);
  if (affine) {
    weight = register_parameter("weight", ones({num_channels}));
    bias = register_parameter("bias", zeros({num_channels}));
  }
}

Tensor GroupNorm::forward_impl(const Tensor& x) {
  if (x.dim() >= 2 && x.size(1) != channels_)
    detail::fail("GroupNorm", "expects [N, " + std::to_string(channels_) + ", ...] inputs", {&x}, Loc::current());
  return functional::group_norm(x, groups_, weight, bias, eps_);
}

std::string GroupNorm::extra_repr() const {
  std::ostringstream os;
  os << groups_ << ", " << channels_ << ", eps=" << eps_ << ", affine=" << (weight.defined() ? "true" : "false");
  return os.str();
}

InstanceNorm::InstanceNorm(int64_t features, double eps, double momentum, bool affine, bool track_running_stats,
                           int rank, std::string name, Loc loc)
    : features_(features), eps_(eps), momentum_(momentum), rank_(rank), name_(std::move(name)) {
  if (features <= 0) throw Error(name_, "the number of features must be positive", loc);
  const detail::UserCall call(name_, loc);
  const graph::SourceScope at(loc);
  if (affine) {
    weight = register_parameter("weight", ones({features}));
    bias = register_parameter("bias", zeros({features}));
  }
  if (track_running_stats) {
    running_mean = register_buffer("running_mean", zeros({features}));
    running_var = register_buffer("running_var", ones({features}));
    num_batches_tracked = register_buffer("num_batches_tracked", zeros({}, kInt64));
  }
}

Tensor InstanceNorm::forward_impl(const Tensor& x) {
  const std::string dims = rank_ == 3 ? "L]" : rank_ == 4 ? "H, W]" : "D, H, W]";
  if (x.dim() != rank_ && x.dim() != rank_ - 1)
    detail::fail(name_, "expects [N, C, " + dims + " (or unbatched [C, " + dims + ") inputs", {&x}, Loc::current());
  const bool unbatched = x.dim() == rank_ - 1;
  const Tensor xb = unbatched ? x.unsqueeze(0) : x;
  // Without weights or statistics of their own, any channel count does (PyTorch warns there).
  if (xb.size(1) != features_ && (weight.defined() || running_mean.defined()))
    detail::fail(name_, "expects " + std::to_string(features_) + " channels", {&x}, Loc::current());
  const bool use_input_stats = is_training() || !running_mean.defined();
  const Tensor y =
      functional::instance_norm(xb, running_mean, running_var, weight, bias, use_input_stats, momentum_, eps_);
  return unbatched ? y.squeeze(0) : y;
}

std::string InstanceNorm::extra_repr() const {
  std::ostringstream os;
  os << features_ << ", eps=" << eps_ << ", momentum=" << momentum_
     << ", affine=" << (weight.defined() ? "true" : "false")
     << ", track_running_stats=" << (running_mean.defined() ? "true" : "false");
  return os.str();
}

// ---------------------------------------------------------------- RMSNorm

RMSNorm::RMSNorm(IntList normalized_shape, std::optional<double> eps, bool elementwise_affine, Loc loc)
    : shape_(std::move(normalized_shape)), eps_(eps) {
  if (shape_.empty()) throw Error("RMSNorm", "normalized_shape must not be empty", loc);
  const detail::UserCall call("RMSNorm", loc);
  const graph::SourceScope at(loc);
  if (elementwise_affine) weight = register_parameter("weight", ones(shape_));
}

Tensor RMSNorm::forward_impl(const Tensor& x) { return functional::rms_norm(x, shape_, weight, eps_); }

std::string RMSNorm::extra_repr() const {
  std::ostringstream os;
  os << "normalized_shape=" << detail::list_str(shape_) << ", eps=";
  if (eps_) os << *eps_;
  else os << "None";
  os << ", elementwise_affine=" << (weight.defined() ? "true" : "false");
  return os.str();
}

// ---------------------------------------------------------------- Dropout

Dropout::Dropout(double p, std::optional<uint64_t> seed, Loc loc)
    : p_(p), seed_(seed.value_or(next_seed())), calls_(std::make_shared<uint64_t>(0)) {
  if (!(p >= 0 && p <= 1)) throw Error("Dropout", "p must be in [0, 1], got " + std::to_string(p), loc);
}

uint64_t Dropout::next_mask_seed() {
  return detail::host_seed([base = seed_, calls = calls_] { return mix(base ^ mix((*calls)++)); });
}

Tensor Dropout::forward_impl(const Tensor& x) {
  if (!is_training() || p_ == 0) return x;
  return functional::dropout(x, p_, next_mask_seed(), true);
}

Tensor Dropout1d::forward_impl(const Tensor& x) {
  const bool masks = is_training() && p() > 0;
  return functional::dropout1d(x, p(), masks ? next_mask_seed() : 0, masks);
}

Tensor Dropout2d::forward_impl(const Tensor& x) {
  const bool masks = is_training() && p() > 0;
  return functional::dropout2d(x, p(), masks ? next_mask_seed() : 0, masks);
}

Tensor AlphaDropout::forward_impl(const Tensor& x) {
  const bool masks = is_training() && p() > 0;
  return functional::alpha_dropout(x, p(), masks ? next_mask_seed() : 0, masks);
}

Tensor FeatureAlphaDropout::forward_impl(const Tensor& x) {
  const bool masks = is_training() && p() > 0;
  return functional::feature_alpha_dropout(x, p(), masks ? next_mask_seed() : 0, masks);
}

Tensor Dropout3d::forward_impl(const Tensor& x) {
  const bool masks = is_training() && p() > 0;
  return functional::dropout3d(x, p(), masks ? next_mask_seed() : 0, masks);
}

std::string Dropout::extra_repr() const {
  std::ostringstream os;
  os << "p=" << p_;
  return os.str();
}

// ---------------------------------------------------------------- GELU, Embedding, Sequential

GELU::GELU(std::string approximate, Loc loc) : approximate_(std::move(approximate)) {
  if (approximate_ != "none" && approximate_ != "tanh")
    throw Error("GELU", "approximate must be \"none\" or \"tanh\", not \"" + approximate_ + "\"", loc);
}

// ---------------------------------------------------------------- activations

namespace {

// A float as Python's repr writes it ("1.0", "0.01", "0.0001", "1e-05"), as PyTorch's module reprs show their
// floats: the shortest digits that read back as v (std::to_chars), positional from 1e-4 to below 1e16 with ".0"
// after an integral value, scientific outside.
std::string python_float(double v) {
  char buf[32];
  if (!std::isfinite(v)) return std::string(buf, std::to_chars(buf, buf + sizeof buf, v).ptr); // inf, -inf, nan
  const std::string sci(buf, std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific).ptr);
  const int exp10 = std::stoi(sci.substr(sci.find('e') + 1));
  if (exp10 < -4 || exp10 >= 16) return sci; // Python's repr: 1e-05, 1e+16 ("1.5e-07": shortest digits)
  std::string s(buf, std::to_chars(buf, buf + sizeof buf, v, std::chars_format::fixed).ptr); // 0.0001, 100.0
  if (s.find('.') == std::string::npos) s += ".0";
  return s;
}

} // namespace

std::string LeakyReLU::extra_repr() const { return "negative_slope=" + python_float(slope_); }
std::string ELU::extra_repr() const { return "alpha=" + python_float(alpha_); }

CELU::CELU(double alpha, Loc loc) : alpha_(alpha) {
  if (alpha == 0) throw Error("CELU", "alpha cannot be 0", loc);
}

std::string CELU::extra_repr() const { return "alpha=" + python_float(alpha_); }
RReLU::RReLU(double lower, double upper, std::optional<uint64_t> seed, Loc loc)
    : lower_(lower), upper_(upper), seed_(seed.value_or(next_seed())), calls_(std::make_shared<uint64_t>(0)) {
  if (!(lower <= upper))
    throw Error("RReLU", "lower (" + python_float(lower) + ") must not exceed upper (" + python_float(upper) + ")",
                loc);
}

Tensor RReLU::forward_impl(const Tensor& x) {
  if (!is_training()) return functional::rrelu(x, lower_, upper_, false);
  const uint64_t seed = detail::host_seed([base = seed_, calls = calls_] { return mix(base ^ mix((*calls)++)); });
  return functional::rrelu(x, lower_, upper_, true, seed);
}

std::string RReLU::extra_repr() const { return "lower=" + python_float(lower_) + ", upper=" + python_float(upper_); }
std::string Hardshrink::extra_repr() const { return python_float(lambd_); }
std::string Softshrink::extra_repr() const { return python_float(lambd_); }
std::string LocalResponseNorm::extra_repr() const {
  return std::to_string(size_) + ", alpha=" + python_float(alpha_) + ", beta=" + python_float(beta_) +
         ", k=" + python_float(k_);
}

std::string Softplus::extra_repr() const {
  std::ostringstream os; // PyTorch's defaults are ints: "beta=1, threshold=20"
  os << "beta=" << beta_ << ", threshold=" << threshold_;
  return os.str();
}

Hardtanh::Hardtanh(double min_val, double max_val, Loc loc) : min_(min_val), max_(max_val) {
  if (!(max_val > min_val))
    throw Error("Hardtanh", "max_val (" + python_float(max_val) + ") must be greater than min_val (" +
                                python_float(min_val) + ")", loc);
}

std::string Hardtanh::extra_repr() const { return "min_val=" + python_float(min_) + ", max_val=" + python_float(max_); }
std::string GLU::extra_repr() const { return "dim=" + std::to_string(dim_); }

PReLU::PReLU(int64_t num_parameters, double init, Loc loc) {
  if (num_parameters <= 0)
    throw Error("PReLU", "num_parameters must be positive, got " + std::to_string(num_parameters), loc);
  const detail::UserCall call("PReLU", loc);
  const graph::SourceScope at(loc);
  weight = register_parameter("weight", full({num_parameters}, init));
}

std::string PReLU::extra_repr() const { return "num_parameters=" + std::to_string(weight.numel()); }
std::string Softmin::extra_repr() const { return "dim=" + std::to_string(dim_); }
std::string Softmax::extra_repr() const { return "dim=" + std::to_string(dim_); }
std::string LogSoftmax::extra_repr() const { return "dim=" + std::to_string(dim_); }

Embedding::Embedding(int64_t num_embeddings, int64_t embedding_dim, Loc loc)
    : Embedding(num_embeddings, embedding_dim, std::nullopt, std::nullopt, 2, loc) {}

Embedding::Embedding(int64_t num_embeddings, int64_t embedding_dim, std::optional<int64_t> padding_idx,
                     std::optional<double> max_norm, double norm_type, Loc loc)
    : num_(num_embeddings), dim_(embedding_dim), max_norm_(max_norm), norm_type_(norm_type) {
  if (num_embeddings <= 0 || embedding_dim <= 0) throw Error("Embedding", "sizes must be positive", loc);
  if (max_norm && !(*max_norm >= 0 && std::isfinite(*max_norm)))
    throw Error("Embedding", "max_norm must be non-negative and finite, got " + std::to_string(*max_norm), loc);
  if (max_norm && !(norm_type > 0))
    throw Error("Embedding", "norm_type must be positive (or infinity), got " + std::to_string(norm_type), loc);
  if (padding_idx && (*padding_idx < -num_embeddings || *padding_idx >= num_embeddings))
    throw Error("Embedding", "padding_idx " + std::to_string(*padding_idx) + " must be within [-" +
                                 std::to_string(num_embeddings) + ", " + std::to_string(num_embeddings) + ")", loc);
  if (padding_idx) padding_idx_ = *padding_idx < 0 ? *padding_idx + num_embeddings : *padding_idx;
  const detail::UserCall call("Embedding", loc);
  const graph::SourceScope at(loc);
  Tensor w = randn({num_embeddings, embedding_dim}, next_seed());
  if (padding_idx_) w = where(arange(num_embeddings).reshape({num_embeddings, 1}) == *padding_idx_, zeros_like(w), w);
  weight = register_parameter("weight", w);
}

Tensor Embedding::forward_impl(const Tensor& indices) {
  return functional::embedding(indices, weight, padding_idx_, max_norm_, norm_type_);
}

std::string Embedding::extra_repr() const {
  std::ostringstream os;
  os << num_ << ", " << dim_;
  if (padding_idx_) os << ", padding_idx=" << *padding_idx_;
  if (max_norm_) os << ", max_norm=" << *max_norm_;
  if (norm_type_ != 2) os << ", norm_type=" << norm_type_;
  return os.str();
}

EmbeddingBag::EmbeddingBag(int64_t num_embeddings, int64_t embedding_dim, std::optional<double> max_norm,
                           double norm_type, std::string mode, bool include_last_offset,
                           std::optional<int64_t> padding_idx, Loc loc)
    : num_(num_embeddings), dim_(embedding_dim) {
  if (num_embeddings <= 0 || embedding_dim <= 0) throw Error("EmbeddingBag", "sizes must be positive", loc);
  if (padding_idx && (*padding_idx < -num_embeddings || *padding_idx >= num_embeddings))
    throw Error("EmbeddingBag",
                "padding_idx " + std::to_string(*padding_idx) + " must be within [-" + std::to_string(num_embeddings) +
                    ", " + std::to_string(num_embeddings) + ")",
                loc);
  if (mode != "sum" && mode != "mean" && mode != "max")
    throw Error("EmbeddingBag", "mode must be \"sum\", \"mean\" or \"max\", not \"" + mode + "\"", loc);
  const std::optional<int64_t> pad =
      padding_idx ? std::optional<int64_t>(*padding_idx < 0 ? *padding_idx + num_embeddings : *padding_idx)
                  : std::nullopt;
  options_ = {.max_norm = max_norm,
              .norm_type = norm_type,
              .mode = std::move(mode),
              .include_last_offset = include_last_offset,
              .padding_idx = pad};
  const detail::UserCall call("EmbeddingBag", loc);
  const graph::SourceScope at(loc);
  Tensor w = randn({num_embeddings, embedding_dim}, next_seed());
  if (pad) w = where(arange(num_embeddings).reshape({num_embeddings, 1}) == *pad, zeros_like(w), w);
  weight = register_parameter("weight", w);
}

Tensor EmbeddingBag::forward(const Tensor& input, const Tensor& offsets, const Tensor& per_sample_weights, Loc loc) {
  const graph::SourceScope at(loc);
  const detail::UserCall call(name(), loc);
  functional::EmbeddingBagOptions o = options_;
  o.offsets = offsets;
  o.per_sample_weights = per_sample_weights;
  return functional::embedding_bag(input, weight, o);
}

Tensor EmbeddingBag::forward_impl(const Tensor& input) { return functional::embedding_bag(input, weight, options_); }

std::string EmbeddingBag::extra_repr() const {
  std::ostringstream os;
  os << num_ << ", " << dim_;
  if (options_.max_norm) os << ", max_norm=" << *options_.max_norm;
  if (options_.norm_type != 2) os << ", norm_type=" << options_.norm_type;
  os << ", mode=" << options_.mode;
  if (options_.padding_idx) os << ", padding_idx=" << *options_.padding_idx;
  return os.str();
}

Tensor Sequential::forward_impl(const Tensor& x) {
  Tensor y = x;
  for (const auto& [n, m] : children()) y = (*m)(y); // errors inside name the child and the caller's line
  return y;
}

// ---------------------------------------------------------------- ModuleList, ModuleDict

void ModuleList::append(std::shared_ptr<Module> m, const Loc& loc) {
  if (!m) throw Error("ModuleList::push_back", "cannot append a null module", loc);
  register_module(std::to_string(size()), std::move(m), loc);
}

void ModuleList::insert_at(int64_t index, std::shared_ptr<Module> m, const Loc& loc) {
  if (!m) throw Error("ModuleList::insert", "cannot insert a null module", loc);
  const auto n = static_cast<int64_t>(size());
  const int64_t at = std::clamp<int64_t>(index < 0 ? index + n : index, 0, n); // as Python's list.insert
  auto& slots = child_slots();
  slots.insert(slots.begin() + at, {"", std::move(m)});
  for (size_t i = 0; i < slots.size(); ++i) slots[i].first = std::to_string(i);
}

Module& ModuleList::operator[](ModuleIndex index) const {
  const auto n = static_cast<int64_t>(size());
  const int64_t i = index.i;
  if (i < -n || i >= n)
    throw Error("ModuleList", "index " + std::to_string(i) + " is out of range for " + std::to_string(n) + " modules",
                index.loc);
  return *children()[static_cast<size_t>(i < 0 ? i + n : i)].second;
}

ParameterList::ParameterList(const std::vector<Tensor>& params, Loc loc) {
  for (const Tensor& p : params) append(p, loc);
}

Tensor ParameterList::append(Tensor t, Loc loc) {
  if (!t.defined()) throw Error("ParameterList::append", "cannot append an undefined tensor", loc);
  return register_parameter(std::to_string(size()), std::move(t), loc);
}

Tensor ParameterList::operator[](ModuleIndex index) const {
  const auto n = static_cast<int64_t>(size());
  const int64_t i = index.i;
  if (i < -n || i >= n)
    throw Error("ParameterList",
                "index " + std::to_string(i) + " is out of range for " + std::to_string(n) + " parameters", index.loc);
  return param_slots()[static_cast<size_t>(i < 0 ? i + n : i)].second;
}

bool ParameterDict::contains(const std::string& key) const {
  return std::any_of(param_slots().begin(), param_slots().end(), [&](const auto& p) { return p.first == key; });
}

Tensor ParameterDict::operator[](const ModuleKey& key) const {
  for (const auto& [k, t] : param_slots())
    if (k == key.key) return t;
  throw Error("ParameterDict", "no parameter named \"" + key.key + "\"", key.loc);
}

std::vector<std::string> ParameterDict::keys() const {
  std::vector<std::string> out;
  for (const auto& [k, t] : param_slots()) out.push_back(k);
  return out;
}

Tensor ParameterDict::pop(const std::string& key, Loc loc) {
  auto& slots = param_slots();
  auto it = std::find_if(slots.begin(), slots.end(), [&](const auto& p) { return p.first == key; });
  if (it == slots.end()) throw Error("ParameterDict", "no parameter named \"" + key + "\"", loc);
  Tensor t = std::move(it->second);
  slots.erase(it);
  return t;
}

Tensor ParameterDict::insert(const std::string& key, Tensor t, Loc loc) {
  if (key.empty() || key.find('.') != std::string::npos)
    throw Error("ParameterDict", "a key must be non-empty and contain no '.', got \"" + key + "\"", loc);
  if (!t.defined()) throw Error("ParameterDict", "parameter \"" + key + "\" is undefined", loc);
  for (auto& [k, slot] : param_slots())
    if (k == key) {
      if (!t.requires_grad()) t.requires_grad_(true, loc);
      slot = t;
      return t;
    }
  return register_parameter(key, std::move(t), loc);
}

bool ModuleDict::contains(const std::string& key) const {
  return std::any_of(children().begin(), children().end(), [&](const auto& c) { return c.first == key; });
}

Module& ModuleDict::operator[](const ModuleKey& key) const {
  for (const auto& [k, m] : children())
    if (k == key.key) return *m;
  throw Error("ModuleDict", "no module named \"" + key.key + "\"", key.loc);
}

std::vector<std::string> ModuleDict::keys() const {
  std::vector<std::string> out;
  for (const auto& [k, m] : children()) out.push_back(k);
  return out;
}

std::shared_ptr<Module> ModuleDict::pop(const std::string& key, Loc loc) {
  auto& slots = child_slots();
  auto it = std::find_if(slots.begin(), slots.end(), [&](const auto& c) { return c.first == key; });
  if (it == slots.end()) throw Error("ModuleDict", "no module named \"" + key + "\"", loc);
  std::shared_ptr<Module> m = std::move(it->second);
  slots.erase(it);
  return m;
}

void ModuleDict::set(const std::string& key, std::shared_ptr<Module> m, const Loc& loc) {
  if (key.empty() || key.find('.') != std::string::npos)
    throw Error("ModuleDict", "a key must be non-empty and contain no '.', got \"" + key + "\"", loc);
  if (!m) throw Error("ModuleDict", "module \"" + key + "\" is null", loc);
  for (auto& [k, slot] : child_slots())
    if (k == key) {
      slot = std::move(m);
      return;
    }
  register_module(key, std::move(m), loc);
}

} // namespace kiln::nn
