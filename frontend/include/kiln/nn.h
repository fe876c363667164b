#pragma once
/// \file nn.h
/// Neural-network modules in the style of torch::nn: a Module owns named
/// parameters (tensors that require grad), named buffers (state such as
/// BatchNorm's running statistics) and named submodules; names are dotted paths
/// ("0.weight", "features.3.running_mean") as in PyTorch's state_dict.
///
/// Modules are handles in spirit: copying a module shares its parameter tensors
/// and submodules (Tensor is itself a shared handle). Update a parameter with
/// Tensor::assign, which keeps its identity, never by rebinding the member.
///
/// Initialization follows PyTorch (Kaiming-uniform with a = sqrt(5) for Linear
/// and Conv2d weights, uniform(-1/sqrt(fan_in), 1/sqrt(fan_in)) for their biases,
/// N(0, 1) for Embedding). Random numbers come from kiln's counter-based
/// rand()/randn(): each initialization takes the next seed of a process-wide
/// sequence that manual_seed() restarts, so a program builds the same model on
/// every run and every machine.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kiln/functional.h"
#include "kiln/tensor.h"

namespace kiln::nn {

/// A list of (dotted name, tensor) pairs, in registration order.
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

/// Restarts the sequence of seeds used by module initialization and Dropout.
void manual_seed(uint64_t seed);
/// The next seed of the sequence (used by module constructors).
uint64_t next_seed();

/// The base of all modules.
class Module {
public:
  virtual ~Module() = default;
  Module() = default;
  Module(const Module&) = default;            ///< shallow: shares parameters and submodules
  Module& operator=(const Module&) = default; ///< shallow
  Module(Module&&) = default;                 ///< moves the registrations
  Module& operator=(Module&&) = default;      ///< moves the registrations

  /// The module's computation on one input: override it in your modules. The default runs
  /// forward_impl (kiln's layers' computation), which throws for a module that has none:
  /// modules whose forward takes other arguments define their own and are not usable in Sequential.
  virtual Tensor forward(const Tensor& x);
  /// forward(x), as a call of this module at `loc`: the graph nodes it makes record `loc` as
  /// their source line (profiles and KILN_DEBUG name the model's line), and a kiln::Error raised
  /// inside (by kiln's layers, losses and ops) names this module and the caller's line.
  ///
  /// kiln's layers (Linear, ..., Sequential) declare a non-virtual `forward(x, loc)` that hides
  /// the virtual forward and takes the caller's line the same way, so that a direct
  /// `layer.forward(x)` (and `Linear::forward(x)` inside a subclass's override) names the
  /// user's line too. It runs that layer's own computation, like a qualified call: a subclass
  /// that overrides forward is reached through the subclass's type, `Module&` or operator().
  /// Called through a `Module&` (`seq[i].forward(x)`), forward has no caller line to give.
  Tensor operator()(const Tensor& x, Loc loc = Loc::current());
  /// The type name shown by str() ("Linear").
  virtual std::string name() const { return "Module"; }
  /// One line describing the module's configuration ("Linear(in=784, out=256, bias=true)").
  virtual std::string extra_repr() const { return ""; }
  /// A multi-line description of the module tree, like printing a torch.nn.Module.
  std::string str() const;

  /// All parameters, recursively, in the order of named_parameters(), each tensor once (a weight
  /// shared by two modules, tied, is listed at its first name only, as PyTorch).
  std::vector<Tensor> parameters() const;
  /// Parameters with dotted names: own parameters first, then each submodule's.
  NamedTensors named_parameters() const;
  /// All buffers (non-trainable state), recursively.
  std::vector<Tensor> buffers() const;
  /// Buffers with dotted names.
  NamedTensors named_buffers() const;
  /// Parameters and buffers with dotted names: what a checkpoint stores.
  NamedTensors state_dict() const;
  /// The direct submodules with their names.
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& children() const { return children_; }
  /// Total number of parameter elements.
  int64_t num_parameters() const;

  /// Switches this module and all submodules to training (true) or evaluation mode.
  virtual void train(bool on = true);
  /// Same as train(false).
  void eval() { train(false); }
  /// True in training mode (the default). Read inside a compiled function, it makes the trace
  /// depend on it: after train() / eval() the function is traced again (as PyTorch's modules
  /// branch on self.training).
  bool is_training() const;
  /// Clears the gradient of every parameter.
  void zero_grad();
  /// Moves every parameter and buffer (and gradient) to `device` in place: the tensors
  /// keep their identity, so an optimizer made before or after still updates them.
  Module& to(Device device, Loc loc = Loc::current());
  /// Converts every floating parameter and buffer (and gradient) to the floating `dtype` in place,
  /// as torch.nn.Module.to(dtype): integer buffers stay as they are, and the tensors keep their
  /// identity (a parameter is the same Tensor, now of `dtype`), so `model.to(kFloat64)` makes a
  /// model gradcheck-able. As in PyTorch, convert before making the optimizer: slots it already
  /// holds keep their old dtype. The values are computed now (not inside a compile() trace).
  Module& to(DType dtype, Loc loc = Loc::current());

  /// Registers `t` as a trainable parameter (marks it requires_grad) and returns it. As in PyTorch, the
  /// name must be non-empty, without '.' (state_dict() joins names with it) and not yet used by a
  /// parameter, buffer or submodule of this module; else, or when `t` is undefined, a kiln::Error
  /// names the module, the name and `loc`.
  Tensor register_parameter(std::string name, Tensor t, Loc loc = Loc::current());
  /// Registers `t` as a buffer (saved in checkpoints, not trained) and returns it; names as register_parameter.
  Tensor register_buffer(std::string name, Tensor t, Loc loc = Loc::current());
  /// Removes the parameter `name` from this module's own parameters and returns it (torch's
  /// `del module._parameters[name]`, which reparametrizations such as nn::utils::weight_norm do);
  /// a name that is not one of them is a kiln::Error naming the module, the name and `loc`.
  Tensor unregister_parameter(const std::string& name, Loc loc = Loc::current());
  /// Removes the buffer `name` from this module's own buffers and returns it; as unregister_parameter.
  Tensor unregister_buffer(const std::string& name, Loc loc = Loc::current());

  /// A function run before every forward of this module (torch's forward pre-hook, without the input):
  /// run by operator() and by kiln's layers' forward(x), not by a forward of your own called directly
  /// (as PyTorch runs hooks in __call__ only), and once per call: an override of forward that calls
  /// its base layer's forward (Linear::forward(x)) inside operator() does not run them again.
  /// Reparametrizations recompute a parameter there (nn::utils::weight_norm, spectral_norm).
  using ForwardPreHook = std::function<void(Module&)>;
  /// Registers `hook` (hooks run in registration order) under `tag` (a name to find it by, may be
  /// empty) and returns its handle.
  int64_t register_forward_pre_hook(ForwardPreHook hook, std::string tag = "");
  /// Removes the hook with handle `handle`; false when there is none.
  bool remove_forward_pre_hook(int64_t handle);
  /// The handle and function of the first hook registered under `tag`, if any.
  std::optional<std::pair<int64_t, ForwardPreHook>> find_forward_pre_hook(const std::string& tag) const;

  /// Registers a submodule (moved into shared ownership) and returns it; names as register_parameter.
  template <class M> std::shared_ptr<M> register_module(std::string name, M module, Loc loc = Loc::current()) {
    return register_module(std::move(name), std::make_shared<M>(std::move(module)), loc);
  }
  /// Registers a submodule held by a shared pointer (not null) and returns it; names as register_parameter.
  template <class M>
  std::shared_ptr<M> register_module(std::string name, std::shared_ptr<M> module, Loc loc = Loc::current()) {
    add_child(std::move(name), module, loc);
    return module;
  }
protected:
  friend class SyncBatchNorm; // convert_sync_batchnorm replaces submodules
  /// The direct submodules, for containers that insert, replace or rename them (ModuleList, ModuleDict).
  std::vector<std::pair<std::string, std::shared_ptr<Module>>>& child_slots() { return children_; }
  /// The own parameters, for containers that read or replace them (ParameterList, ParameterDict).
  NamedTensors& param_slots() { return params_; }
  /// The own parameters, read-only.
  const NamedTensors& param_slots() const { return params_; }
  /// A module value or shared pointer as a shared pointer to a module (what the containers hold).
  template <class M> static std::shared_ptr<Module> shared_module(M module) {
    if constexpr (std::is_null_pointer_v<M>) return nullptr; // the container's kiln::Error names the caller's line
    else if constexpr (requires { typename M::element_type; }) return std::shared_ptr<Module>(std::move(module));
    else return std::make_shared<M>(std::move(module));
  }

private:
  void add_child(std::string name, std::shared_ptr<Module> m, const Loc& loc);
  // Throws the kiln::Error of register_<kind> ("parameter", "buffer", "module") at `loc` when `name`
  // cannot be registered: empty, dotted, or taken by a parameter, buffer or submodule.
  void check_new_name(const char* kind, const std::string& name, const Loc& loc) const;
  void collect(const std::string& prefix, bool params, bool buffers, NamedTensors& out) const;
  void describe(std::string& out, int indent) const;
  /// While alive, this module's forward runs: the outermost one runs the forward pre-hooks first.
  class ForwardScope {
  public:
    explicit ForwardScope(Module& m);
    ~ForwardScope() { --m_.forward_depth_; }
    ForwardScope(const ForwardScope&) = delete;
    ForwardScope& operator=(const ForwardScope&) = delete;
  private:
    Module& m_;
  };
  int forward_depth_ = 0; // forwards of this module running (ForwardScope)

  /// A registered forward pre-hook.
  struct PreHook {
    int64_t handle;      ///< what register_forward_pre_hook returned
    std::string tag;     ///< what find_forward_pre_hook looks for
    ForwardPreHook hook; ///< the function
  };
  std::vector<PreHook> pre_hooks_;
  int64_t next_pre_hook_ = 0;
  NamedTensors params_;
  NamedTensors buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
  /// Lives exactly as long as this object (a copy or move gets its own): what a compiled function's
  /// guard on is_training() checks before it reads training_ (a dead module's mode cannot change).
  struct LifeToken {
    std::shared_ptr<int> token = std::make_shared<int>(0);
    LifeToken() = default;
    LifeToken(const LifeToken&) : LifeToken() {}
    LifeToken& operator=(const LifeToken&) { return *this; }
  };
  LifeToken life_;

protected:
  /// What kiln's layers compute (they override this, not forward, so that their public
  /// forward can take the caller's line). The default throws.
  virtual Tensor forward_impl(const Tensor& x);
  /// forward_impl(x) as a call of this module at `loc` (what operator() does for forward).
  Tensor forward_at(const Tensor& x, Loc loc);
};

/// y = x W^T + b, for x of shape [..., in_features].
class Linear : public Module {
public:
  /// Weight [out, in] and bias [out], initialized as PyTorch's nn.Linear.
  Linear(int64_t in_features, int64_t out_features, bool bias = true, Loc loc = Loc::current());
  /// x W^T + b; a direct call names the caller's line, as operator() does
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) { return forward_at(x, loc); }
  std::string name() const override { return "Linear"; } ///< "Linear"
  std::string extra_repr() const override;        ///< sizes and bias
  Tensor weight; ///< [out_features, in_features]
  Tensor bias;   ///< [out_features], undefined without bias
protected:
  Tensor forward_impl(const Tensor& x) override;
};

/// y = x1^T A x2 + b per output feature (functional::bilinear), for x1 [..., in1] and x2 [..., in2], as
/// torch.nn.Bilinear.
class Bilinear : public Module {
public:
  /// Weight [out, in1, in2] and bias [out], both uniform in +-1/sqrt(in1), as PyTorch's nn.Bilinear.
  Bilinear(int64_t in1_features, int64_t in2_features, int64_t out_features, bool bias = true,
           Loc loc = Loc::current());
  /// bilinear(x1, x2, weight, bias); a direct call names the caller's line
  Tensor forward(const Tensor& x1, const Tensor& x2, Loc loc = Loc::current());
  std::string name() const override { return "Bilinear"; } ///< "Bilinear"
  std::string extra_repr() const override; ///< sizes and bias
  Tensor weight; ///< [out_features, in1_features, in2_features]
  Tensor bias; ///< [out_features], undefined without bias
};

/// Options of Conv2d (designated initializers: `{.padding = 1}`).
struct Conv2dOptions {
  Size2 stride = 1;     ///< step between windows
  Padding2 padding = 0; ///< zeros added on each side, or "valid" (none) or "same" (stride 1 only: Ho, Wo = H, W)
  Size2 dilation = 1; ///< spacing between kernel taps
  int64_t groups = 1; ///< channel groups (in and out channels must divide by it)
  bool bias = true;   ///< learnable bias per output channel
  /// What the padding is made of, as torch's padding_mode: "zeros" (the convolution's own), or "reflect",
  /// "replicate" or "circular" (the module pads its input by kiln::pad in that mode, then convolves unpadded).
  std::string padding_mode = "zeros";
};

/// 2-d convolution (cross-correlation, as PyTorch) of [N, C, H, W] inputs.
/// Computed by im2col: pad, one strided slice per kernel tap, and one matmul per group.
class Conv2d : public Module {
public:
  /// Weight [out, in/groups, kh, kw], bias [out]; initialized as PyTorch's nn.Conv2d. A padding string other
  /// than "valid" and "same", or "same" with a stride, is an error here, as PyTorch's.
  Conv2d(int64_t in_channels, int64_t out_channels, Size2 kernel_size, Conv2dOptions options = {},
         Loc loc = Loc::current());
  /// [N, out, Ho, Wo]; a direct call names the caller's line, as operator() does
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) { return forward_at(x, loc); }
  std::string name() const override { return "Conv2d"; } ///< "Conv2d"
  std::string extra_repr() const override;        ///< configuration
  Tensor weight;         ///< [out, in/groups, kh, kw]
  Tensor bias;           ///< [out], undefined without bias
  Conv2dOptions options; ///< stride, padding, dilation, groups
protected:
  Tensor forward_impl(const Tensor& x) override;
private:
  int64_t in_, out_;
  Size2 kernel_;
};

/// Options of Conv1d (designated initializers: `{.padding = 1}`).
struct Conv1dOptions {
  int64_t stride = 1;   ///< step between windows
  Padding1 padding = 0; ///< zeros added on each side, or "valid" (none) or "same" (stride 1 only: Lo = L)
  int64_t dilation = 1; ///< spacing between kernel taps
  int64_t groups = 1;   ///< channel groups (in and out channels must divide by it)
  bool bias = true;     ///< learnable bias per output channel
  /// What the padding is made of, as torch's padding_mode: "zeros" (the convolution's own), or "reflect",
  /// "replicate" or "circular" (the module pads its input by kiln::pad in that mode, then convolves unpadded).
  std::string padding_mode = "zeros";
};

/// 1-d convolution (cross-correlation, as PyTorch) of [N, C, L] (or unbatched [C, L]) inputs:
/// functional::conv1d, Conv2d's computation over a unit height.
class Conv1d : public Module {
public:
  /// Weight [out, in/groups, k], bias [out]; initialized as PyTorch's nn.Conv1d (bounds 1/sqrt(in/groups * k)).
  /// A padding string other than "valid" and "same", or "same" with a stride, is an error here, as PyTorch's.
  Conv1d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, Conv1dOptions options = {},
         Loc loc = Loc::current());
  /// [N, out, Lo]; a direct call names the caller's line, as operator() does
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) { return forward_at(x, loc); }
  std::string name() const override { return "Conv1d"; } ///< "Conv1d"
  std::string extra_repr() const override;        ///< configuration
  Tensor weight;         ///< [out, in/groups, k]
  Tensor bias;           ///< [out], undefined without bias
  Conv1dOptions options; ///< stride, padding, dilation, groups
protected:
  Tensor forward_impl(const Tensor& x) override;
private:
  int64_t in_, out_, kernel_;
};

/// Options of ConvTranspose2d, in torch.nn.ConvTranspose2d's order (designated initializers: `{.stride = 2}`).
struct ConvTranspose2dOptions {
  Size2 stride = 1;         ///< step between the input's points in the output
  Size2 padding = 0;        ///< dilation * (kernel - 1) - padding zeros around the spread input
  Size2 output_padding = 0; ///< extra rows and columns at the end (smaller than the stride or the dilation)
  int64_t groups = 1;       ///< channel groups (in and out channels must divide by it)
  bool bias = true;         ///< learnable bias per output channel
  Size2 dilation = 1;       ///< spacing between kernel taps
};

/// 2-d transposed convolution of [N, C, H, W] (or unbatched [C, H, W]) inputs, as torch.nn.ConvTranspose2d
/// (functional::conv_transpose2d).
class ConvTranspose2d : public Module {
public:
  /// Weight [in, out/groups, kh, kw], bias [out]; initialized as PyTorch's (bounds 1/sqrt(out/groups * kh * kw)).
  ConvTranspose2d(int64_t in_channels, int64_t out_channels, Size2 kernel_size, ConvTranspose2dOptions options = {},
                  Loc loc = Loc::current());
  /// [N, out, Ho, Wo]; a direct call names the caller's line, as operator() does
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) { return forward_at(x, loc); }
  /// [N, out, Ho, Wo] of the spatial extents `output_size` ({Ho, Wo}, or {N, out, Ho, Wo}; unbatched {out, Ho, Wo},
  /// where only the spatial extents are read), as torch.nn.ConvTranspose2d.forward(input, output_size): the
  /// output_padding that gives them replaces the options' one. Each extent must lie in [m, m + stride - 1], m
  /// the extent without output_padding; else a kiln::Error lists the valid ranges, as PyTorch's ValueError.
  Tensor forward(const Tensor& x, const IntList& output_size, Loc loc = Loc::current());
  std::string name() const override { return "ConvTranspose2d"; } ///< "ConvTranspose2d"
  std::string extra_repr() const override;                 ///< configuration
  Tensor weight;                  ///< [in, out/groups, kh, kw]
  Tensor bias;                    ///< [out], undefined without bias
  ConvTranspose2dOptions options; ///< stride, padding, output_padding, groups, dilation
protected:
  Tensor forward_impl(const Tensor& x) override;
private:
  int64_t in_, out_;
  Size2 kernel_;
};

/// Options of ConvTranspose1d, in torch.nn.ConvTranspose1d's order (designated initializers: `{.stride = 2}`).
struct ConvTranspose1dOptions {
  int64_t stride = 1;         ///< step between the input's points in the output
  int64_t padding = 0;        ///< dilation * (kernel - 1) - padding zeros around the spread input
  int64_t output_padding = 0; ///< extra points at the end (smaller than the stride or the dilation)
  int64_t groups = 1;         ///< channel groups (in and out channels must divide by it)
  bool bias = true;           ///< learnable bias per output channel
  int64_t dilation = 1;       ///< spacing between kernel taps
};

/// 1-d transposed convolution of [N, C, L] (or unbatched [C, L]) inputs, as torch.nn.ConvTranspose1d
/// (functional::conv_transpose1d).
class ConvTranspose1d : public Module {
public:
  /// Weight [in, out/groups, k], bias [out]; initialized as PyTorch's (bounds 1/sqrt(out/groups * k)).
  ConvTranspose1d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, ConvTranspose1dOptions options = {},
                  Loc loc = Loc::current());
  /// [N, out, Lo]; a direct call names the caller's line, as operator() does
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) { return forward_at(x, loc); }
  /// [N, out, Lo] of the extent `output_size` ({Lo}, or {N, out, Lo}; unbatched {out, Lo}), as
  /// torch.nn.ConvTranspose1d.forward(input, output_size); see ConvTranspose2d's.
  Tensor forward(const Tensor& x, const IntList& output_size, Loc loc = Loc::current());
  std::string name() const override { return "ConvTranspose1d"; } ///< "ConvTranspose1d"
  std::string extra_repr() const override;                 ///< configuration
  Tensor weight;                  ///< [in, out/groups, k]
  Tensor bias;                    ///< [out], undefined without bias
  ConvTranspose1dOptions options; ///< stride, padding, output_padding, groups, dilation
protected:
  Tensor forward_impl(const Tensor& x) override;
private:
  int64_t in_, out_, kernel_;
};

/// Max pooling over windows of [N, C, H, W] inputs (padding counts as -infinity).
class MaxPool2d : public Module {
public:
  /// Window size; the stride defaults to the window size (see functional::max_pool2d for ceil_mode).
  MaxPool2d(Size2 kernel_size, std::optional<Size2> stride = std::nullopt, Size2 padding = 0, Size2 dilation = 1,
            bool ceil_mode = false);
  /// [N, C, Ho, Wo]; a direct call names the caller's line, as operator() does
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) { return forward_at(x, loc); }
  /// The values and their indices, as return_indices=True (functional::max_pool2d_with_indices).
  std::pair<Tensor, Tensor> forward_with_indices(const Tensor& x, Loc loc = Loc::current());
  std::string name() const override { return "MaxPool2d"; } ///< "MaxPool2d"
  std::string extra_repr() const override;  ///< configuration
protected:
  Tensor forward_impl(const Tensor& x) override;
private:
  Size2 kernel_, stride_, padding_, dilation_;
  bool ceil_mode_;
};

/// Average pooling over windows (zero padding counts in the average unless count_include_pad is false).
class AvgPool2d : public Module {
public:
  /// Window size; the stride defaults to the window size (see functional::avg_pool2d for the flags and divisor_override).
  AvgPool2d(Size2 kernel_size, std::optional<Size2> stride = std::nullopt, Size2 padding = 0, bool ceil_mode = false,
            bool count_include_pad = true, std::optional<int64_t> divisor_override = std::nullopt);
  /// [N, C, Ho, Wo]; a direct call names the caller's line, as operator() does
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) { return forward_at(x, loc); }
  std::string name() const override { return "AvgPool2d"; } ///< "AvgPool2d"
  std::string extra_repr() const override;  ///< configuration
protected:
  Tensor forward_impl(const Tensor& x) override;
private:
  Size2 kernel_, stride_, padding_;
  bool ceil_mode_, count_include_pad_;
  std::optional<int64_t> divisor_override_;
};

/// Max pooling over windows of [N, C, L] (or [C, L]) inputs, as torch.nn.MaxPool1d (functional::max_pool1d).
class MaxPool1d : public Module {
public:
  /// Window size; the stride defaults to the window size.
  MaxPool1d(int64_t kernel_size, std::optional<int64_t> stride = std::nullopt, int64_t padding = 0, int64_t dilation = 1,
            bool ceil_mode = false);
  /// [N, C, Lo]; a direct call names the caller's line, as operator() does
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) { return forward_at(x, loc); }
  /// The values and their indices, as return_indices=True (functional::max_pool1d_with_indices).
  std::pair<Tensor, Tensor> forward_with_indices(const Tensor& x, Loc loc = Loc::current());
  std::string name() const override { return "MaxPool1d"; } ///< "MaxPool1d"
  std::string extra_repr() const override;  ///< configuration
protected:
  Tensor forward_impl(const Tensor& x) override;
private:
  int64_t kernel_, stride_, padding_, dilation_;
  bool ceil_mode_;
};

/// Average pooling over windows of [N, C, L] (or [C, L]) inputs, as torch.nn.AvgPool1d (functional::avg_pool1d).
class AvgPool1d : public Module {
public:
  /// Window size; the stride defaults to the window size.
  AvgPool1d(int64_t kernel_size, std::optional<int64_t> stride = std::nullopt, int64_t padding = 0, bool ceil_mode = false,
            bool count_include_pad = true);
  /// [N, C, Lo]; a direct call names the caller's line, as operator() does
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) { return forward_at(x, loc); }
  std::string name() const override { return "AvgPool1d"; } ///< "AvgPool1d"
  std::string extra_repr() const override;  ///< configuration
protected:
  Tensor forward_impl(const Tensor& x) override;
private:
  int64_t kernel_, stride_, padding_;
  bool ceil_mode_, count_include_pad_;
};

/// Mean over adaptive windows of [N, C, H, W] (or [C, H, W]) inputs to a fixed output size, as
/// torch.nn.AdaptiveAvgPool2d (functional::adaptive_avg_pool2d).
class AdaptiveAvgPool2d : public Module {
public:
  /// The output's extents (Ho, Wo); an integer means both.
  explicit AdaptiveAvgPool2d(Size2 output_size) : output_size_(output_size) {}
  /// [N, C, Ho, Wo]; a direct call names the caller's line, as operator() does
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) { return forward_at(x, loc); }
  std::string name() const override { return "AdaptiveAvgPool2d"; } ///< "AdaptiveAvgPool2d"
  std::string extra_repr() const override;                          ///< output_size
protected:
  Tensor forward_impl(const Tensor& x) override;
private:
  Size2 output_size_;
};

/// Mean over adaptive windows of [N, C, D, H, W] (or [C, D, H, W]) inputs to fixed extents, as
/// torch.nn.AdaptiveAvgPool3d (functional::adaptive_avg_pool3d).
class AdaptiveAvgPool3d : public Module {
public:
  /// The output's extents (Do, Ho, Wo); an integer means all three.
  explicit AdaptiveAvgPool3d(Size3 output_size) : output_size_(output_size) {}
  /// [N, C, Do, Ho, Wo]; a direct call names the caller's line, as operator() does
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) { return forward_at(x, loc); }
  std::string name() const override { return "AdaptiveAvgPool3d"; } ///< "AdaptiveAvgPool3d"
  std::string extra_repr() const override; ///< output_size
protected:
  Tensor forward_impl(const Tensor& x) override { return functional::adaptive_avg_pool3d(x, output_size_); }
private:
  Size3 output_size_;
};

/// Mean over adaptive windows of [N, C, L] (or [C, L]) inputs to a fixed output length, as
/// torch.nn.AdaptiveAvgPool1d (functional::adaptive_avg_pool1d).
class AdaptiveAvgPool1d : public Module {
public:
  /// The output's length.
  explicit AdaptiveAvgPool1d(int64_t output_size) : output_size_(output_size) {}
  /// [N, C, Lo]; a direct call names the caller's line, as operator() does
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) { return forward_at(x, loc); }
  std::string name() const override { return "AdaptiveAvgPool1d"; } ///< "AdaptiveAvgPool1d"
  std::string extra_repr() const override;                          ///< output_size
protected:
  Tensor forward_impl(const Tensor& x) override;
private:
  int64_t output_size_;
};

/// Options of Conv3d (designated initializers: `{.padding = 1}`).
struct Conv3dOptions {
  Size3 stride = 1; ///< step between windows
  Size3 padding = 0; ///< zeros added on each side of each spatial dim
  Size3 dilation = 1; ///< spacing between kernel taps
  int64_t groups = 1; ///< channel groups (in and out channels must divide by it)
  bool bias = true; ///< learnable bias per output channel
  /// What the padding is made of, as torch's padding_mode: "zeros" (the convolution's own), or "reflect",
  /// "replicate" or "circular" (the module pads its input by kiln::pad in that mode, then convolves unpadded).
  std::string padding_mode = "zeros";
};

/// 3-d convolution (cross-correlation, as PyTorch) of [N, C, D, H, W] (or [C, D, H, W]) inputs, as
/// torch.nn.Conv3d (functional::conv3d).
class Conv3d : public Module {
public:
  /// Weight [out, in/groups, kd, kh, kw], bias [out]; initialized as PyTorch's nn.Conv3d.
  Conv3d(int64_t in_channels, int64_t out_channels, Size3 kernel_size, Conv3dOptions options = {},
         Loc loc = Loc::current());
  /// [N, out, Do, Ho, Wo]; a direct call names the caller's line, as operator() does
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) { return forward_at(x, loc); }
  std::string name() const override { return "Conv3d"; } ///< "Conv3d"
  std::string extra_repr() const override; ///< configuration
  Tensor weight; ///< [out, in/groups, kd, kh, kw]
  Tensor bias; ///< [out], undefined without bias
  Conv3dOptions options; ///< stride, padding, dilation, groups
protected:
  Tensor forward_impl(const Tensor& x) override;

private:
  int64_t in_, out_;
  Size3 kernel_;
};

/// Options of ConvTranspose3d, in torch.nn.ConvTranspose3d's order (designated initializers: `{.stride = 2}`).
struct ConvTranspose3dOptions {
  Size3 stride = 1; ///< step between the input's points in the output
  Size3 padding = 0; ///< dilation * (kernel - 1) - padding zeros around the spread input
  Size3 output_padding = 0; ///< extra planes, rows and columns at the end (smaller than the stride or the dilation)
  int64_t groups = 1; ///< channel groups (in and out channels must divide by it)
  bool bias = true; ///< learnable bias per output channel
  Size3 dilation = 1; ///< spacing between kernel taps
};

/// 3-d transposed convolution of [N, C, D, H, W] (or unbatched [C, D, H, W]) inputs, as torch.nn.ConvTranspose3d
/// (functional::conv_transpose3d).
class ConvTranspose3d : public Module {
public:
  /// Weight [in, out/groups, kd, kh, kw], bias [out]; initialized as PyTorch's (bounds 1/sqrt(out/groups * kd kh kw)).
  ConvTranspose3d(int64_t in_channels, int64_t out_channels, Size3 kernel_size, ConvTranspose3dOptions options = {},
                  Loc loc = Loc::current());
  /// [N, out, Do, Ho, Wo]; a direct call names the caller's line, as operator() does
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) { return forward_at(x, loc); }
  /// [N, out, Do, Ho, Wo] of the extents `output_size` ({Do, Ho, Wo}, or {N, out, Do, Ho, Wo}; unbatched
  /// {out, Do, Ho, Wo}), as torch.nn.ConvTranspose3d.forward(input, output_size); see ConvTranspose2d's.
  Tensor forward(const Tensor& x, const IntList& output_size, Loc loc = Loc::current());
  std::string name() const override { return "ConvTranspose3d"; } ///< "ConvTranspose3d"
  std::string extra_repr() const override; ///< configuration
  Tensor weight; ///< [in, out/groups, kd, kh, kw]
  Tensor bias; ///< [out], undefined without bias
  ConvTranspose3dOptions options; ///< stride, padding, output_padding, groups, dilation
protected:
  Tensor forward_impl(const Tensor& x) override;

private:
  int64_t in_, out_;
  Size3 kernel_;
};

/// Max pooling over windows of [N, C, D, H, W] (or [C, D, H, W]) inputs, as torch.nn.MaxPool3d
/// (functional::max_pool3d).
class MaxPool3d : public Module {
public:
  /// Window size; the stride defaults to the window size.
  MaxPool3d(Size3 kernel_size, std::optional<Size3> stride = std::nullopt, Size3 padding = 0, Size3 dilation = 1,
            bool ceil_mode = false)
      : kernel_(kernel_size), stride_(stride.value_or(kernel_size)), padding_(padding), dilation_(dilation),
        ceil_mode_(ceil_mode) {}
  /// [N, C, Do, Ho, Wo]; a direct call names the caller's line, as operator() does
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) { return forward_at(x, loc); }
  std::string name() const override { return "MaxPool3d"; } ///< "MaxPool3d"
  std::string extra_repr() const override; ///< configuration
protected:
  Tensor forward_impl(const Tensor& x) override;

private:
  Size3 kernel_, stride_, padding_, dilation_;
  bool ceil_mode_;
};

/// Average pooling over windows of [N, C, D, H, W] (or [C, D, H, W]) inputs, as torch.nn.AvgPool3d
/// (functional::avg_pool3d).
class AvgPool3d : public Module {
public:
  /// Window size; the stride defaults to the window size (see functional::avg_pool3d for the flags).
  AvgPool3d(Size3 kernel_size, std::optional<Size3> stride = std::nullopt, Size3 padding = 0, bool ceil_mode = false,
            bool count_include_pad = true, std::optional<int64_t> divisor_override = std::nullopt)
      : kernel_(kernel_size), stride_(stride.value_or(kernel_size)), padding_(padding), ceil_mode_(ceil_mode),
        count_include_pad_(count_include_pad), divisor_override_(divisor_override) {}
  /// [N, C, Do, Ho, Wo]; a direct call names the caller's line, as operator() does
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) { return forward_at(x, loc); }
  std::string name() const override { return "AvgPool3d"; } ///< "AvgPool3d"
  std::string extra_repr() const override; ///< configuration
protected:
  Tensor forward_impl(const Tensor& x) override;

private:
  Size3 kernel_, stride_, padding_;
  bool ceil_mode_, count_include_pad_;
  std::optional<int64_t> divisor_override_;
};

/// Max unpooling of [N, C, H, W] (or [C, H, W]) inputs with max_pool2d_with_indices's indices, as
/// torch.nn.MaxUnpool2d (functional::max_unpool2d).
class MaxUnpool2d : public Module {
public:
  /// The pooling's window; the stride defaults to the window size.
  MaxUnpool2d(Size2 kernel_size, std::optional<Size2> stride = std::nullopt, Size2 padding = 0)
      : kernel_(kernel_size), stride_(stride.value_or(kernel_size)), padding_(padding) {}
  /// [N, C, Ho, Wo] (output_size: {Ho, Wo} or the whole shape; empty: the default extents)
  Tensor forward(const Tensor& x, const Tensor& indices, const IntList& output_size = {}, Loc loc = Loc::current());
  std::string name() const override { return "MaxUnpool2d"; } ///< "MaxUnpool2d"
  std::string extra_repr() const override; ///< configuration
private:
  Size2 kernel_, stride_, padding_;
};

/// Max unpooling of [N, C, L] (or [C, L]) inputs with max_pool1d_with_indices's indices, as torch.nn.MaxUnpool1d
/// (functional::max_unpool1d).
class MaxUnpool1d : public Module {
public:
  /// The pooling's window; the stride defaults to the window size.
  MaxUnpool1d(int64_t kernel_size, std::optional<int64_t> stride = std::nullopt, int64_t padding = 0)
      : kernel_(kernel_size), stride_(stride.value_or(kernel_size)), padding_(padding) {}
  /// [N, C, Lo] (output_size: {Lo} or the whole shape; empty: the default extent)
  Tensor forward(const Tensor& x, const Tensor& indices, const IntList& output_size = {}, Loc loc = Loc::current());
  std::string name() const override { return "MaxUnpool1d"; } ///< "MaxUnpool1d"
  std::string extra_repr() const override; ///< configuration
private:
  int64_t kernel_, stride_, padding_;
};

/// Max over adaptive windows of [N, C, H, W] (or [C, H, W]) inputs to a fixed output size, as
/// torch.nn.AdaptiveMaxPool2d (functional::adaptive_max_pool2d).
class AdaptiveMaxPool2d : public Module {
public:
  /// The output's extents (Ho, Wo); an integer means both.
  explicit AdaptiveMaxPool2d(Size2 output_size) : output_size_(output_size) {}
  /// [N, C, Ho, Wo]; a direct call names the caller's line, as operator() does
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) { return forward_at(x, loc); }
  /// The values and their indices, as return_indices=True (functional::adaptive_max_pool2d_with_indices).
  std::pair<Tensor, Tensor> forward_with_indices(const Tensor& x, Loc loc = Loc::current());
  std::string name() const override { return "AdaptiveMaxPool2d"; } ///< "AdaptiveMaxPool2d"
  std::string extra_repr() const override; ///< output_size
protected:
  Tensor forward_impl(const Tensor& x) override;

private:
  Size2 output_size_;
};

/// Max over adaptive windows of [N, C, L] (or [C, L]) inputs to a fixed output length, as
/// torch.nn.AdaptiveMaxPool1d (functional::adaptive_max_pool1d).
class AdaptiveMaxPool1d : public Module {
public:
  /// The output's length.
  explicit AdaptiveMaxPool1d(int64_t output_size) : output_size_(output_size) {}
  /// [N, C, Lo]; a direct call names the caller's line, as operator() does
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) { return forward_at(x, loc); }
  /// The values and their indices, as return_indices=True (functional::adaptive_max_pool1d_with_indices).
  std::pair<Tensor, Tensor> forward_with_indices(const Tensor& x, Loc loc = Loc::current());
  std::string name() const override { return "AdaptiveMaxPool1d"; } ///< "AdaptiveMaxPool1d"
  std::string extra_repr() const override; ///< output_size
protected:
  Tensor forward_impl(const Tensor& x) override;

private:
  int64_t output_size_;
};

/// Power-average pooling of [N, C, H, W] (or [C, H, W]) inputs, as torch.nn.LPPool2d (functional::lp_pool2d).
class LPPool2d : public Module {
public:
  /// The power p, the window; the stride defaults to the window size.
  LPPool2d(double norm_type, Size2 kernel_size, std::optional<Size2> stride = std::nullopt, bool ceil_mode = false)
      : norm_type_(norm_type), kernel_(kernel_size), stride_(stride.value_or(kernel_size)), ceil_mode_(ceil_mode) {}
  /// [N, C, Ho, Wo]; a direct call names the caller's line, as operator() does
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) { return forward_at(x, loc); }
  std::string name() const override { return "LPPool2d"; } ///< "LPPool2d"
  std::string extra_repr() const override; ///< configuration
protected:
  Tensor forward_impl(const Tensor& x) override;

private:
  double norm_type_;
  Size2 kernel_, stride_;
  bool ceil_mode_;
};

/// Power-average pooling of [N, C, L] (or [C, L]) inputs, as torch.nn.LPPool1d (functional::lp_pool1d).
class LPPool1d : public Module {
public:
  /// The power p, the window; the stride defaults to the window size.
  LPPool1d(double norm_type, int64_t kernel_size, std::optional<int64_t> stride = std::nullopt, bool ceil_mode = false)
      : norm_type_(norm_type), kernel_(kernel_size), stride_(stride.value_or(kernel_size)), ceil_mode_(ceil_mode) {}
  /// [N, C, Lo]; a direct call names the caller's line, as operator() does
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) { return forward_at(x, loc); }
  std::string name() const override { return "LPPool1d"; } ///< "LPPool1d"
  std::string extra_repr() const override; ///< configuration
protected:
  Tensor forward_impl(const Tensor& x) override;

private:
  double norm_type_;
  int64_t kernel_, stride_;
  bool ceil_mode_;
};

/// [*, C r^2, H, W] -> [*, C, H r, W r], as torch.nn.PixelShuffle (functional::pixel_shuffle).
class PixelShuffle : public Module {
public:
  /// The factor r.
  explicit PixelShuffle(int64_t upscale_factor) : factor_(upscale_factor) {}
  /// [*, C, H r, W r]; a direct call names the caller's line, as operator() does
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) { return forward_at(x, loc); }
  std::string name() const override { return "PixelShuffle"; } ///< "PixelShuffle"
  std::string extra_repr() const override; ///< upscale_factor
protected:
  Tensor forward_impl(const Tensor& x) override;

private:
  int64_t factor_;
};

/// [*, C, H r, W r] -> [*, C r^2, H, W], as torch.nn.PixelUnshuffle (functional::pixel_unshuffle).
class PixelUnshuffle : public Module {
public:
  /// The factor r.
  explicit PixelUnshuffle(int64_t downscale_factor) : factor_(downscale_factor) {}
  /// [*, C r^2, H, W]; a direct call names the caller's line, as operator() does
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) { return forward_at(x, loc); }
  std::string name() const override { return "PixelUnshuffle"; } ///< "PixelUnshuffle"
  std::string extra_repr() const override; ///< downscale_factor
protected:
  Tensor forward_impl(const Tensor& x) override;

private:
  int64_t factor_;
};

/// The channels of [N, C, *] inputs regrouped, as torch.nn.ChannelShuffle (functional::channel_shuffle).
class ChannelShuffle : public Module {
public:
  /// The number of groups (dividing C).
  explicit ChannelShuffle(int64_t groups) : groups_(groups) {}
  /// [N, C, *]; a direct call names the caller's line, as operator() does
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) { return forward_at(x, loc); }
  std::string name() const override { return "ChannelShuffle"; } ///< "ChannelShuffle"
  std::string extra_repr() const override; ///< groups
protected:
  Tensor forward_impl(const Tensor& x) override;

private:
  int64_t groups_;
};

/// The sliding blocks of [N, C, H, W] (or [C, H, W]) inputs as columns, as torch.nn.Unfold (functional::unfold).
class Unfold : public Module {
public:
  /// The block's size, dilation, padding and stride, in PyTorch's order.
  explicit Unfold(Size2 kernel_size, Size2 dilation = 1, Size2 padding = 0, Size2 stride = 1)
      : kernel_(kernel_size), dilation_(dilation), padding_(padding), stride_(stride) {}
  /// [N, C * kh * kw, L]; a direct call names the caller's line, as operator() does
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) { return forward_at(x, loc); }
  std::string name() const override { return "Unfold"; } ///< "Unfold"
  std::string extra_repr() const override; ///< configuration
protected:
  Tensor forward_impl(const Tensor& x) override;

private:
  Size2 kernel_, dilation_, padding_, stride_;
};

/// Columns summed back into [N, C, H, W] (or [C, H, W]) images, as torch.nn.Fold (functional::fold).
class Fold : public Module {
public:
  /// The output's extents, then the block's size, dilation, padding and stride, in PyTorch's order.
  Fold(Size2 output_size, Size2 kernel_size, Size2 dilation = 1, Size2 padding = 0, Size2 stride = 1)
      : output_size_(output_size), kernel_(kernel_size), dilation_(dilation), padding_(padding), stride_(stride) {}
  /// [N, C, H, W]; a direct call names the caller's line, as operator() does
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) { return forward_at(x, loc); }
  std::string name() const override { return "Fold"; } ///< "Fold"
  std::string extra_repr() const override; ///< configuration
protected:
  Tensor forward_impl(const Tensor& x) override;

private:
  Size2 output_size_, kernel_, dilation_, padding_, stride_;
};

/// Resampling of [N, C, ...] inputs by functional::interpolate with fixed options, as torch.nn.Upsample
/// (size or scale_factor, mode "nearest" by default, also "linear", "bilinear", "bicubic", "trilinear",
/// "nearest-exact" and "area"; align_corners for the interpolating modes).
class Upsample : public Module {
public:
  /// The interpolation's options; they are checked against each input, as PyTorch's.
  explicit Upsample(functional::InterpolateOptions options = {}) : options(std::move(options)) {}
  /// The input resampled; a direct call names the caller's line, as operator() does
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) { return forward_at(x, loc); }
  std::string name() const override { return "Upsample"; } ///< "Upsample"
  std::string extra_repr() const override; ///< size or scale_factor, and the mode, as PyTorch's
  functional::InterpolateOptions options;  ///< what interpolate is given
protected:
  Tensor forward_impl(const Tensor& x) override;
};

/// Upsample in mode "nearest" with a size or scale factors, as torch.nn.UpsamplingNearest2d.
class UpsamplingNearest2d : public Upsample {
public:
  /// The output's size, or (size empty) the scale factors.
  explicit UpsamplingNearest2d(IntList size = {}, std::vector<double> scale_factor = {})
      : Upsample({.size = std::move(size), .scale_factor = std::move(scale_factor), .mode = "nearest"}) {}
  std::string name() const override { return "UpsamplingNearest2d"; } ///< "UpsamplingNearest2d"
};

/// Upsample in mode "bilinear" with align_corners, as torch.nn.UpsamplingBilinear2d.
class UpsamplingBilinear2d : public Upsample {
public:
  /// The output's size, or (size empty) the scale factors.
  explicit UpsamplingBilinear2d(IntList size = {}, std::vector<double> scale_factor = {})
      : Upsample({.size = std::move(size),
                  .scale_factor = std::move(scale_factor),
                  .mode = "bilinear",
                  .align_corners = true}) {}
  std::string name() const override { return "UpsamplingBilinear2d"; } ///< "UpsamplingBilinear2d"
};

/// What the padding modules share (ZeroPad2d, ConstantPad1d, ReflectionPad2d, ReplicationPad3d, ...): a
/// kiln::pad of the last 1, 2 or 3 dims by fixed amounts, in one mode.
class Pad : public Module {
public:
  /// The module `name` padding `dims` dims in `mode` ("constant", "reflect", "replicate"); `padding` is one
  /// amount for every side or 2 * dims amounts (before, after), last dim first; a kiln::Error names `loc` else.
  Pad(std::string name, std::string mode, int64_t dims, IntList padding, double value, Loc loc);
  /// The input padded; a direct call names the caller's line, as operator() does
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) { return forward_at(x, loc); }
  std::string name() const override { return name_; } ///< the module's class name ("ReflectionPad2d")
  std::string extra_repr() const override; ///< the amounts (and a constant's value), as PyTorch's
  IntList padding; ///< 2 * dims amounts (before, after), last dim first, as pad's
  std::string mode; ///< pad's mode
  double value; ///< the constant of "constant" (0 in the other modes)
protected:
  Tensor forward_impl(const Tensor& x) override;

private:
  std::string name_;
};

/// Pads the last 1 dim with zeros by pad(x, padding, "constant"), as torch.nn.ZeroPad1d (PyTorch 1.13 has ZeroPad2d
/// only).
class ZeroPad1d : public Pad {
public:
  /// `padding` on each side of each padded dim.
  explicit ZeroPad1d(int64_t padding, Loc loc = Loc::current()) : Pad("ZeroPad1d", "constant", 1, {padding}, 0, loc) {}
  /// 2 amounts (before, after), last dim first, as pad's (left, right).
  explicit ZeroPad1d(IntList padding, Loc loc = Loc::current())
      : Pad("ZeroPad1d", "constant", 1, std::move(padding), 0, loc) {}
};

/// Pads the last 2 dims with zeros by pad(x, padding, "constant"), as torch.nn.ZeroPad2d.
class ZeroPad2d : public Pad {
public:
  /// `padding` on each side of each padded dim.
  explicit ZeroPad2d(int64_t padding, Loc loc = Loc::current()) : Pad("ZeroPad2d", "constant", 2, {padding}, 0, loc) {}
  /// 4 amounts (before, after), last dim first, as pad's (left, right, top, bottom).
  explicit ZeroPad2d(IntList padding, Loc loc = Loc::current())
      : Pad("ZeroPad2d", "constant", 2, std::move(padding), 0, loc) {}
};

/// Pads the last 3 dims with zeros by pad(x, padding, "constant"), as torch.nn.ZeroPad3d (PyTorch 1.13 has ZeroPad2d
/// only).
class ZeroPad3d : public Pad {
public:
  /// `padding` on each side of each padded dim.
  explicit ZeroPad3d(int64_t padding, Loc loc = Loc::current()) : Pad("ZeroPad3d", "constant", 3, {padding}, 0, loc) {}
  /// 6 amounts (before, after), last dim first, as pad's (left, right, top, bottom, front, back).
  explicit ZeroPad3d(IntList padding, Loc loc = Loc::current())
      : Pad("ZeroPad3d", "constant", 3, std::move(padding), 0, loc) {}
};

/// Pads the last 1 dim with `value` by pad(x, padding, "constant", value), as torch.nn.ConstantPad1d.
class ConstantPad1d : public Pad {
public:
  /// `padding` on each side of each padded dim, filled with value.
  ConstantPad1d(int64_t padding, double value, Loc loc = Loc::current())
      : Pad("ConstantPad1d", "constant", 1, {padding}, value, loc) {}
  /// 2 amounts (before, after), last dim first, as pad's (left, right).
  ConstantPad1d(IntList padding, double value, Loc loc = Loc::current())
      : Pad("ConstantPad1d", "constant", 1, std::move(padding), value, loc) {}
};

/// Pads the last 2 dims with `value` by pad(x, padding, "constant", value), as torch.nn.ConstantPad2d.
class ConstantPad2d : public Pad {
public:
  /// `padding` on each side of each padded dim, filled with value.
  ConstantPad2d(int64_t padding, double value, Loc loc = Loc::current())
      : Pad("ConstantPad2d", "constant", 2, {padding}, value, loc) {}
  /// 4 amounts (before, after), last dim first, as pad's (left, right, top, bottom).
  ConstantPad2d(IntList padding, double value, Loc loc = Loc::current())
      : Pad("ConstantPad2d", "constant", 2, std::move(padding), value, loc) {}
};

/// Pads the last 3 dims with `value` by pad(x, padding, "constant", value), as torch.nn.ConstantPad3d.
class ConstantPad3d : public Pad {
public:
  /// `padding` on each side of each padded dim, filled with value.
  ConstantPad3d(int64_t padding, double value, Loc loc = Loc::current())
      : Pad("ConstantPad3d", "constant", 3, {padding}, value, loc) {}
  /// 6 amounts (before, after), last dim first, as pad's (left, right, top, bottom, front, back).
  ConstantPad3d(IntList padding, double value, Loc loc = Loc::current())
      : Pad("ConstantPad3d", "constant", 3, std::move(padding), value, loc) {}
};

/// Pads [N, C, W] or [C, W] with the input's reflection about its edge elements by pad(x, padding, "reflect"), as
/// torch.nn.ReflectionPad1d.
class ReflectionPad1d : public Pad {
public:
  /// `padding` on each side of each padded dim.
  explicit ReflectionPad1d(int64_t padding, Loc loc = Loc::current())
      : Pad("ReflectionPad1d", "reflect", 1, {padding}, 0, loc) {}
  /// 2 amounts (before, after), last dim first, as pad's (left, right).
  explicit ReflectionPad1d(IntList padding, Loc loc = Loc::current())
      : Pad("ReflectionPad1d", "reflect", 1, std::move(padding), 0, loc) {}
};

/// Pads [N, C, H, W] or [C, H, W] with the input's reflection about its edge elements by pad(x, padding, "reflect"), as
/// torch.nn.ReflectionPad2d.
class ReflectionPad2d : public Pad {
public:
  /// `padding` on each side of each padded dim.
  explicit ReflectionPad2d(int64_t padding, Loc loc = Loc::current())
      : Pad("ReflectionPad2d", "reflect", 2, {padding}, 0, loc) {}
  /// 4 amounts (before, after), last dim first, as pad's (left, right, top, bottom).
  explicit ReflectionPad2d(IntList padding, Loc loc = Loc::current())
      : Pad("ReflectionPad2d", "reflect", 2, std::move(padding), 0, loc) {}
};

/// Pads [N, C, D, H, W] or [C, D, H, W] with the input's reflection about its edge elements by pad(x, padding,
/// "reflect"), as torch.nn.ReflectionPad3d.
class ReflectionPad3d : public Pad {
public:
  /// `padding` on each side of each padded dim.
  explicit ReflectionPad3d(int64_t padding, Loc loc = Loc::current())
      : Pad("ReflectionPad3d", "reflect", 3, {padding}, 0, loc) {}
  /// 6 amounts (before, after), last dim first, as pad's (left, right, top, bottom, front, back).
  explicit ReflectionPad3d(IntList padding, Loc loc = Loc::current())
      : Pad("ReflectionPad3d", "reflect", 3, std::move(padding), 0, loc) {}
};

/// Pads [N, C, W] or [C, W] with copies of the input's edge elements by pad(x, padding, "replicate"), as
/// torch.nn.ReplicationPad1d.
class ReplicationPad1d : public Pad {
public:
  /// `padding` on each side of each padded dim.
  explicit ReplicationPad1d(int64_t padding, Loc loc = Loc::current())
      : Pad("ReplicationPad1d", "replicate", 1, {padding}, 0, loc) {}
  /// 2 amounts (before, after), last dim first, as pad's (left, right).
  explicit ReplicationPad1d(IntList padding, Loc loc = Loc::current())
      : Pad("ReplicationPad1d", "replicate", 1, std::move(padding), 0, loc) {}
};

/// Pads [N, C, H, W] or [C, H, W] with copies of the input's edge elements by pad(x, padding, "replicate"), as
/// torch.nn.ReplicationPad2d.
class ReplicationPad2d : public Pad {
public:
  /// `padding` on each side of each padded dim.
  explicit ReplicationPad2d(int64_t padding, Loc loc = Loc::current())
      : Pad("ReplicationPad2d", "replicate", 2, {padding}, 0, loc) {}
  /// 4 amounts (before, after), last dim first, as pad's (left, right, top, bottom).
  explicit ReplicationPad2d(IntList padding, Loc loc = Loc::current())
      : Pad("ReplicationPad2d", "replicate", 2, std::move(padding), 0, loc) {}
};

/// Pads [N, C, D, H, W] or [C, D, H, W] with copies of the input's edge elements by pad(x, padding, "replicate"), as
/// torch.nn.ReplicationPad3d.
class ReplicationPad3d : public Pad {
public:
  /// `padding` on each side of each padded dim.
  explicit ReplicationPad3d(int64_t padding, Loc loc = Loc::current())
      : Pad("ReplicationPad3d", "replicate", 3, {padding}, 0, loc) {}
  /// 6 amounts (before, after), last dim first, as pad's (left, right, top, bottom, front, back).
  explicit ReplicationPad3d(IntList padding, Loc loc = Loc::current())
      : Pad("ReplicationPad3d", "replicate", 3, std::move(padding), 0, loc) {}
};

/// Options of BatchNorm1d/2d.
struct BatchNormOptions {
  double eps = 1e-5;          ///< added to the variance
  /// Weight of the new batch in the running statistics; unset (std::nullopt, torch's momentum=None),
  /// the running statistics are the cumulative average: the factor is 1 / num_batches_tracked.
  std::optional<double> momentum = 0.1;
  bool affine = true;         ///< learnable scale (weight) and shift (bias)
  bool track_running_stats = true; ///< keep running statistics and use them in eval mode
};

/// Batch normalization over all dims but the channel dim (dim 1). In training
/// mode it normalizes with the batch statistics (biased variance) and updates the
/// running statistics (unbiased variance), as PyTorch; in eval mode it uses the
/// running statistics. The running-statistics update is lazy like everything
/// else: realize buffers() together with the parameters after each step.
class BatchNorm : public Module {
public:
  /// For `features` channels and inputs of rank `rank_min`..`rank_max` (set by the subclasses).
  BatchNorm(int64_t features, BatchNormOptions options, int rank_min, int rank_max, std::string name, Loc loc);
  /// normalized x, same shape; a direct call names the caller's line, as operator() does
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) { return forward_at(x, loc); }
  std::string name() const override { return name_; } ///< "BatchNorm1d", "BatchNorm2d" or "BatchNorm3d"
  std::string extra_repr() const override;  ///< configuration
  int64_t num_features() const { return features_; } ///< C
  Tensor weight;              ///< [C] scale (ones), undefined unless affine
  Tensor bias;                ///< [C] shift (zeros), undefined unless affine
  Tensor running_mean;        ///< [C] buffer
  Tensor running_var;         ///< [C] buffer
  Tensor num_batches_tracked; ///< 0-d i64 buffer
  BatchNormOptions options;   ///< eps, momentum, ...
protected:
  Tensor forward_impl(const Tensor& x) override;
  /// In training mode with running statistics: counts this batch in num_batches_tracked and returns the
  /// running statistics' update factor when momentum is unset (1 / num_batches_tracked, a 0-d f64
  /// tensor); otherwise undefined (the factor is momentum).
  Tensor count_batch();
private:
  int64_t features_;
  int rank_min_, rank_max_;
  std::string name_;
};

/// BatchNorm over [N, C] or [N, C, L] inputs.
class BatchNorm1d : public BatchNorm {
public:
  /// For `features` channels.
  explicit BatchNorm1d(int64_t features, BatchNormOptions options = {}, Loc loc = Loc::current())
      : BatchNorm(features, options, 2, 3, "BatchNorm1d", loc) {}
};

/// BatchNorm over [N, C, H, W] inputs.
class BatchNorm2d : public BatchNorm {
public:
  /// For `features` channels.
  explicit BatchNorm2d(int64_t features, BatchNormOptions options = {}, Loc loc = Loc::current())
      : BatchNorm(features, options, 4, 4, "BatchNorm2d", loc) {}
};

/// BatchNorm over [N, C, D, H, W] inputs, as torch.nn.BatchNorm3d.
class BatchNorm3d : public BatchNorm {
public:
  /// For `features` channels.
  explicit BatchNorm3d(int64_t features, BatchNormOptions options = {}, Loc loc = Loc::current())
      : BatchNorm(features, options, 5, 5, "BatchNorm3d", loc) {}
};

/// Layer normalization over the trailing dims given by `normalized_shape`.
class LayerNorm : public Module {
public:
  /// Normalizes the last normalized_shape.size() dims, which must equal normalized_shape.
  explicit LayerNorm(IntList normalized_shape, double eps = 1e-5, bool elementwise_affine = true,
                     Loc loc = Loc::current());
  /// normalized x, same shape; a direct call names the caller's line, as operator() does
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) { return forward_at(x, loc); }
  std::string name() const override { return "LayerNorm"; } ///< "LayerNorm"
  std::string extra_repr() const override;  ///< configuration
  Tensor weight; ///< normalized_shape, ones; undefined without affine
  Tensor bias;   ///< normalized_shape, zeros; undefined without affine
protected:
  Tensor forward_impl(const Tensor& x) override;
private:
  IntList shape_;
  double eps_;
};

/// Root-mean-square normalization over the trailing dims of `normalized_shape`, as torch.nn.RMSNorm:
/// x / sqrt(mean(x^2) + eps) * weight, with eps the input dtype's machine epsilon when not given.
class RMSNorm : public Module {
public:
  /// Normalizes the last normalized_shape.size() dims, which must equal normalized_shape.
  explicit RMSNorm(IntList normalized_shape, std::optional<double> eps = std::nullopt, bool elementwise_affine = true,
                   Loc loc = Loc::current());
  /// normalized x, same shape; a direct call names the caller's line, as operator() does
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) { return forward_at(x, loc); }
  std::string name() const override { return "RMSNorm"; } ///< "RMSNorm"
  std::string extra_repr() const override;  ///< configuration
  Tensor weight; ///< normalized_shape, ones; undefined without affine
protected:
  Tensor forward_impl(const Tensor& x) override;
private:
  IntList shape_;
  std::optional<double> eps_;
};

/// Group normalization of [N, C, ...] inputs, as torch.nn.GroupNorm: see functional::group_norm.
class GroupNorm : public Module {
public:
  /// num_channels divisible by num_groups; with `affine`, a weight (ones) and bias (zeros) of [num_channels].
  GroupNorm(int64_t num_groups, int64_t num_channels, double eps = 1e-5, bool affine = true, Loc loc = Loc::current());
  /// normalized x, same shape; a direct call names the caller's line, as operator() does
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) { return forward_at(x, loc); }
  std::string name() const override { return "GroupNorm"; } ///< "GroupNorm"
  std::string extra_repr() const override;                   ///< configuration
  Tensor weight; ///< [C] scale (ones), undefined unless affine
  Tensor bias;   ///< [C] shift (zeros), undefined unless affine
protected:
  Tensor forward_impl(const Tensor& x) override;
private:
  int64_t groups_, channels_;
  double eps_;
};

/// Instance normalization, as torch.nn.InstanceNorm1d/2d: each channel of each sample normalized by its
/// own statistics (see functional::instance_norm), in training mode and, without track_running_stats,
/// in eval mode too; with track_running_stats, training updates running_mean and running_var and eval
/// mode normalizes by them. An unbatched input (one rank less) is normalized as a batch of one.
class InstanceNorm : public Module {
public:
  /// For `features` channels and batched inputs of rank `rank` (set by the subclasses).
  InstanceNorm(int64_t features, double eps, double momentum, bool affine, bool track_running_stats, int rank,
               std::string name, Loc loc);
  /// normalized x, same shape; a direct call names the caller's line, as operator() does
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) { return forward_at(x, loc); }
  std::string name() const override { return name_; } ///< "InstanceNorm1d", "InstanceNorm2d" or "InstanceNorm3d"
  std::string extra_repr() const override;             ///< configuration
  Tensor weight;              ///< [C] scale (ones), undefined unless affine
  Tensor bias;                ///< [C] shift (zeros), undefined unless affine
  Tensor running_mean;        ///< [C] buffer (zeros), undefined unless track_running_stats
  Tensor running_var;         ///< [C] buffer (ones), undefined unless track_running_stats
  /// 0-d i64 buffer with track_running_stats, as PyTorch's state_dict (which instance norm never counts up)
  Tensor num_batches_tracked;
protected:
  Tensor forward_impl(const Tensor& x) override;
private:
  int64_t features_;
  double eps_, momentum_;
  int rank_;
  std::string name_;
};

/// InstanceNorm over [N, C, L] (or unbatched [C, L]) inputs.
class InstanceNorm1d : public InstanceNorm {
public:
  /// For `features` channels; PyTorch's defaults (no affine, no running statistics).
  explicit InstanceNorm1d(int64_t features, double eps = 1e-5, double momentum = 0.1, bool affine = false,
                          bool track_running_stats = false, Loc loc = Loc::current())
      : InstanceNorm(features, eps, momentum, affine, track_running_stats, 3, "InstanceNorm1d", loc) {}
};

/// InstanceNorm over [N, C, H, W] (or unbatched [C, H, W]) inputs.
class InstanceNorm2d : public InstanceNorm {
public:
  /// For `features` channels; PyTorch's defaults (no affine, no running statistics).
  explicit InstanceNorm2d(int64_t features, double eps = 1e-5, double momentum = 0.1, bool affine = false,
                          bool track_running_stats = false, Loc loc = Loc::current())
      : InstanceNorm(features, eps, momentum, affine, track_running_stats, 4, "InstanceNorm2d", loc) {}
};

/// InstanceNorm over [N, C, D, H, W] (or unbatched [C, D, H, W]) inputs, as torch.nn.InstanceNorm3d.
class InstanceNorm3d : public InstanceNorm {
public:
  /// For `features` channels; PyTorch's defaults (no affine, no running statistics).
  explicit InstanceNorm3d(int64_t features, double eps = 1e-5, double momentum = 0.1, bool affine = false,
                          bool track_running_stats = false, Loc loc = Loc::current())
      : InstanceNorm(features, eps, momentum, affine, track_running_stats, 5, "InstanceNorm3d", loc) {}
};

/// Zeroes elements with probability p in training mode and scales the rest by
/// 1/(1-p) (p = 1 gives x * 0, zeros, as PyTorch); the identity in eval mode. The mask of
/// the k-th call uses a seed derived from the module's seed and k, so calls differ and runs repeat.
class Dropout : public Module {
public:
  /// Drop probability in [0, 1] (as PyTorch); the seed defaults to next_seed().
  explicit Dropout(double p = 0.5, std::optional<uint64_t> seed = std::nullopt, Loc loc = Loc::current());
  /// masked and scaled x; a direct call names the caller's line, as operator() does
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) { return forward_at(x, loc); }
  std::string name() const override { return "Dropout"; } ///< "Dropout"
  std::string extra_repr() const override;  ///< p
  /// Calls made so far in training mode (the mask counter).
  uint64_t calls() const { return *calls_; }
protected:
  Tensor forward_impl(const Tensor& x) override;
  /// The drop probability.
  double p() const { return p_; }
  /// The seed of the next mask (a training call's), counting the call.
  uint64_t next_mask_seed();
private:
  double p_;
  uint64_t seed_;
  std::shared_ptr<uint64_t> calls_; // shared so that copies of the module continue one sequence
};

/// Zeroes whole channels (dim 1 of [N, C, L], dim 0 of an unbatched [C, L]) with probability p in training mode
/// and scales the rest by 1/(1-p), as torch.nn.Dropout1d (see functional::dropout1d); seeded as Dropout.
class Dropout1d : public Dropout {
public:
  using Dropout::Dropout;
  /// channel-masked and scaled x; a direct call names the caller's line, as operator() does
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) { return forward_at(x, loc); }
  std::string name() const override { return "Dropout1d"; } ///< "Dropout1d"
protected:
  Tensor forward_impl(const Tensor& x) override;
};

/// Zeroes whole channels of [N, C, H, W] (or [N, C, L]) inputs, as torch.nn.Dropout2d (see functional::dropout2d).
class Dropout2d : public Dropout {
public:
  using Dropout::Dropout;
  /// channel-masked and scaled x; a direct call names the caller's line, as operator() does
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) { return forward_at(x, loc); }
  std::string name() const override { return "Dropout2d"; } ///< "Dropout2d"
protected:
  Tensor forward_impl(const Tensor& x) override;
};

/// Alpha dropout (functional::alpha_dropout) in training mode, as torch.nn.AlphaDropout; seeded as Dropout.
class AlphaDropout : public Dropout {
public:
  using Dropout::Dropout;
  /// alpha-dropped x; a direct call names the caller's line, as operator() does
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) { return forward_at(x, loc); }
  std::string name() const override { return "AlphaDropout"; } ///< "AlphaDropout"
protected:
  Tensor forward_impl(const Tensor& x) override;
};

/// Alpha dropout of whole channels (functional::feature_alpha_dropout), as torch.nn.FeatureAlphaDropout.
class FeatureAlphaDropout : public Dropout {
public:
  using Dropout::Dropout;
  /// alpha-dropped channels of x; a direct call names the caller's line, as operator() does
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) { return forward_at(x, loc); }
  std::string name() const override { return "FeatureAlphaDropout"; } ///< "FeatureAlphaDropout"
protected:
  Tensor forward_impl(const Tensor& x) override;
};

/// Zeroes whole channels of [N, C, D, H, W] (or unbatched [C, D, H, W]) inputs, as torch.nn.Dropout3d.
class Dropout3d : public Dropout {
public:
  using Dropout::Dropout;
  /// channel-masked and scaled x; a direct call names the caller's line, as operator() does
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) { return forward_at(x, loc); }
  std::string name() const override { return "Dropout3d"; } ///< "Dropout3d"
protected:
  Tensor forward_impl(const Tensor& x) override;
};

/// Merges dims start..end into one (default: all but the batch dim).
class Flatten : public Module {
public:
  /// Dims to merge (negative counts from the end).
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1) : start_(start_dim), end_(end_dim) {}
  /// merged dims; a direct call names the caller's line, as operator() does
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) { return forward_at(x, loc); }
  std::string name() const override { return "Flatten"; } ///< "Flatten"
protected:
  Tensor forward_impl(const Tensor& x) override { return x.flatten(start_, end_); }
private:
  int64_t start_, end_;
};

/// Splits dim into `sizes` (Tensor::unflatten), as torch.nn.Unflatten.
class Unflatten : public Module {
public:
  /// The dim (negative counts from the end) and the sizes it becomes (one may be -1).
  Unflatten(int64_t dim, IntList sizes) : dim_(dim), sizes_(std::move(sizes)) {}
  /// x with dim split; a direct call names the caller's line, as operator() does
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) { return forward_at(x, loc); }
  std::string name() const override { return "Unflatten"; } ///< "Unflatten"
  std::string extra_repr() const override; ///< dim and unflattened_size, as PyTorch's
protected:
  Tensor forward_impl(const Tensor& x) override { return x.unflatten(dim_, sizes_); }

private:
  int64_t dim_;
  IntList sizes_;
};

/// max(x, 0).
class ReLU : public Module {
public:
  /// relu(x); a direct call names the caller's line, as operator() does
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) { return forward_at(x, loc); }
  std::string name() const override { return "ReLU"; }             ///< "ReLU"
protected:
  Tensor forward_impl(const Tensor& x) override { return relu(x); }
};

/// Gaussian error linear unit. approximate = "none": x * Phi(x) with kiln::erf
/// (the primitive, within 1 ulp); approximate = "tanh": PyTorch's tanh approximation.
class GELU : public Module {
public:
  /// "none" (erf form) or "tanh".
  explicit GELU(std::string approximate = "none", Loc loc = Loc::current());
  /// gelu(x); a direct call names the caller's line, as operator() does
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) { return forward_at(x, loc); }
  std::string name() const override { return "GELU"; } ///< "GELU"
protected:
  Tensor forward_impl(const Tensor& x) override { return functional::gelu(x, approximate_); }
private:
  std::string approximate_;
};

/// x * sigmoid(x).
class SiLU : public Module {
public:
  /// silu(x); a direct call names the caller's line, as operator() does
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) { return forward_at(x, loc); }
  std::string name() const override { return "SiLU"; }                    ///< "SiLU"
protected:
  Tensor forward_impl(const Tensor& x) override { return functional::silu(x); }
};

/// tanh(x).
class Tanh : public Module {
public:
  /// tanh(x); a direct call names the caller's line, as operator() does
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) { return forward_at(x, loc); }
  std::string name() const override { return "Tanh"; }         ///< "Tanh"
protected:
  Tensor forward_impl(const Tensor& x) override { return tanh(x); }
};

/// sigmoid(x).
class Sigmoid : public Module {
public:
  /// sigmoid(x); a direct call names the caller's line, as operator() does
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) { return forward_at(x, loc); }
  std::string name() const override { return "Sigmoid"; }         ///< "Sigmoid"
protected:
  Tensor forward_impl(const Tensor& x) override { return sigmoid(x); }
};

// Activations (each is its functional:: function; see functional.h for PyTorch's edge behaviour). The module
// reprs print numbers as PyTorch's do: "ELU(alpha=1.0)", "Softplus(beta=1, threshold=20)".

/// x for x > 0, else negative_slope * x.
class LeakyReLU : public Module {
public:
  /// The slope of the negative side.
  explicit LeakyReLU(double negative_slope = 0.01) : slope_(negative_slope) {}
  /// leaky_relu(x); a direct call names the caller's line, as operator() does
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) { return forward_at(x, loc); }
  std::string name() const override { return "LeakyReLU"; } ///< "LeakyReLU"
  std::string extra_repr() const override; ///< negative_slope
protected:
  Tensor forward_impl(const Tensor& x) override { return functional::leaky_relu(x, slope_); }
private:
  double slope_;
};

/// x for x > 0, else alpha (e^x - 1).
class ELU : public Module {
public:
  /// The scale of the negative side.
  explicit ELU(double alpha = 1.0) : alpha_(alpha) {}
  /// elu(x); a direct call names the caller's line, as operator() does
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) { return forward_at(x, loc); }
  std::string name() const override { return "ELU"; } ///< "ELU"
  std::string extra_repr() const override; ///< alpha
protected:
  Tensor forward_impl(const Tensor& x) override { return functional::elu(x, alpha_); }
private:
  double alpha_;
};

/// scale * elu(x, alpha) with PyTorch's constants.
class SELU : public Module {
public:
  /// selu(x); a direct call names the caller's line, as operator() does
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) { return forward_at(x, loc); }
  std::string name() const override { return "SELU"; } ///< "SELU"
protected:
  Tensor forward_impl(const Tensor& x) override { return functional::selu(x); }
};

/// x for x > 0, else alpha (e^(x / alpha) - 1).
class CELU : public Module {
public:
  /// alpha (0 is an error).
  explicit CELU(double alpha = 1.0, Loc loc = Loc::current());
  /// celu(x); a direct call names the caller's line, as operator() does
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) { return forward_at(x, loc); }
  std::string name() const override { return "CELU"; } ///< "CELU"
  std::string extra_repr() const override; ///< alpha
protected:
  Tensor forward_impl(const Tensor& x) override { return functional::celu(x, alpha_); }
private:
  double alpha_;
};

/// log(1 + e^(beta x)) / beta, x itself where beta x > threshold.
class Softplus : public Module {
public:
  /// beta and the threshold of the linear part (as PyTorch's).
  explicit Softplus(double beta = 1.0, double threshold = 20.0) : beta_(beta), threshold_(threshold) {}
  /// softplus(x); a direct call names the caller's line, as operator() does
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) { return forward_at(x, loc); }
  std::string name() const override { return "Softplus"; } ///< "Softplus"
  std::string extra_repr() const override; ///< beta, threshold
protected:
  Tensor forward_impl(const Tensor& x) override { return functional::softplus(x, beta_, threshold_); }
private:
  double beta_, threshold_;
};

/// x tanh(softplus(x)).
class Mish : public Module {
public:
  /// mish(x); a direct call names the caller's line, as operator() does
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) { return forward_at(x, loc); }
  std::string name() const override { return "Mish"; } ///< "Mish"
protected:
  Tensor forward_impl(const Tensor& x) override { return functional::mish(x); }
};

/// x min(max(x + 3, 0), 6) / 6.
class Hardswish : public Module {
public:
  /// hardswish(x); a direct call names the caller's line, as operator() does
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) { return forward_at(x, loc); }
  std::string name() const override { return "Hardswish"; } ///< "Hardswish"
protected:
  Tensor forward_impl(const Tensor& x) override { return functional::hardswish(x); }
};

/// min(max(x + 3, 0), 6) / 6.
class Hardsigmoid : public Module {
public:
  /// hardsigmoid(x); a direct call names the caller's line, as operator() does
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) { return forward_at(x, loc); }
  std::string name() const override { return "Hardsigmoid"; } ///< "Hardsigmoid"
protected:
  Tensor forward_impl(const Tensor& x) override { return functional::hardsigmoid(x); }
};

/// clamp(x, min_val, max_val), with PyTorch's gradient (0 at the bounds).
class Hardtanh : public Module {
public:
  /// The bounds; max_val must be greater than min_val (as PyTorch's module asserts).
  explicit Hardtanh(double min_val = -1.0, double max_val = 1.0, Loc loc = Loc::current());
  /// hardtanh(x); a direct call names the caller's line, as operator() does
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) { return forward_at(x, loc); }
  std::string name() const override { return "Hardtanh"; } ///< "Hardtanh"
  std::string extra_repr() const override; ///< min_val, max_val
protected:
  Tensor forward_impl(const Tensor& x) override { return functional::hardtanh(x, min_, max_); }
private:
  double min_, max_;
};

/// hardtanh(x, 0, 6).
class ReLU6 : public Hardtanh {
public:
  ReLU6() : Hardtanh(0.0, 6.0) {} ///< the bounds 0 and 6
  /// relu6(x); a direct call names the caller's line, as operator() does
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) { return forward_at(x, loc); }
  std::string name() const override { return "ReLU6"; } ///< "ReLU6"
  std::string extra_repr() const override { return ""; } ///< none, as PyTorch's
};

/// log(sigmoid(x)), stable for large |x|.
class LogSigmoid : public Module {
public:
  /// logsigmoid(x); a direct call names the caller's line, as operator() does
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) { return forward_at(x, loc); }
  std::string name() const override { return "LogSigmoid"; } ///< "LogSigmoid"
protected:
  Tensor forward_impl(const Tensor& x) override { return functional::logsigmoid(x); }
};

/// x / (1 + |x|).
class Softsign : public Module {
public:
  /// softsign(x); a direct call names the caller's line, as operator() does
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) { return forward_at(x, loc); }
  std::string name() const override { return "Softsign"; } ///< "Softsign"
protected:
  Tensor forward_impl(const Tensor& x) override { return functional::softsign(x); }
};

/// x where |x| > lambd, else 0, as torch.nn.Hardshrink.
class Hardshrink : public Module {
public:
  /// The threshold lambd.
  explicit Hardshrink(double lambd = 0.5) : lambd_(lambd) {}
  /// hardshrink(x); a direct call names the caller's line, as operator() does
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) { return forward_at(x, loc); }
  std::string name() const override { return "Hardshrink"; } ///< "Hardshrink"
  std::string extra_repr() const override; ///< lambd
protected:
  Tensor forward_impl(const Tensor& x) override { return functional::hardshrink(x, lambd_); }
private:
  double lambd_;
};

/// x shrunk toward 0 by lambd (0 within it), as torch.nn.Softshrink.
class Softshrink : public Module {
public:
  /// The threshold lambd (>= 0, checked at the call).
  explicit Softshrink(double lambd = 0.5) : lambd_(lambd) {}
  /// softshrink(x); a direct call names the caller's line, as operator() does
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) { return forward_at(x, loc); }
  std::string name() const override { return "Softshrink"; } ///< "Softshrink"
  std::string extra_repr() const override; ///< lambd
protected:
  Tensor forward_impl(const Tensor& x) override { return functional::softshrink(x, lambd_); }
private:
  double lambd_;
};

/// Randomized leaky ReLU, as torch.nn.RReLU (see functional::rrelu): a new slope per element and call in training
/// mode (from a seed derived from the module's and the call count, as Dropout's), the mean slope in eval mode.
class RReLU : public Module {
public:
  /// The slopes' range, lower <= upper; the seed defaults to next_seed().
  explicit RReLU(double lower = 1.0 / 8, double upper = 1.0 / 3, std::optional<uint64_t> seed = std::nullopt,
                 Loc loc = Loc::current());
  /// rrelu(x); a direct call names the caller's line, as operator() does
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) { return forward_at(x, loc); }
  std::string name() const override { return "RReLU"; } ///< "RReLU"
  std::string extra_repr() const override; ///< lower, upper
protected:
  Tensor forward_impl(const Tensor& x) override;
private:
  double lower_, upper_;
  uint64_t seed_;
  std::shared_ptr<uint64_t> calls_; // shared so that copies of the module continue one sequence
};

/// x - tanh(x), as torch.nn.Tanhshrink.
class Tanhshrink : public Module {
public:
  /// tanhshrink(x); a direct call names the caller's line, as operator() does
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) { return forward_at(x, loc); }
  std::string name() const override { return "Tanhshrink"; } ///< "Tanhshrink"
protected:
  Tensor forward_impl(const Tensor& x) override { return functional::tanhshrink(x); }
};

/// Local response normalization across channels, as torch.nn.LocalResponseNorm (see local_response_norm).
class LocalResponseNorm : public Module {
public:
  /// The channels per window and alpha, beta, k.
  explicit LocalResponseNorm(int64_t size, double alpha = 1e-4, double beta = 0.75, double k = 1.0)
      : size_(size), alpha_(alpha), beta_(beta), k_(k) {}
  /// local_response_norm(x); a direct call names the caller's line, as operator() does
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) { return forward_at(x, loc); }
  std::string name() const override { return "LocalResponseNorm"; } ///< "LocalResponseNorm"
  std::string extra_repr() const override; ///< size, alpha, beta, k
protected:
  Tensor forward_impl(const Tensor& x) override { return functional::local_response_norm(x, size_, alpha_, beta_, k_); }
private:
  int64_t size_;
  double alpha_, beta_, k_;
};

/// a * sigmoid(b) for the halves a, b of x along dim.
class GLU : public Module {
public:
  /// The dim to halve.
  explicit GLU(int64_t dim = -1) : dim_(dim) {}
  /// glu(x); a direct call names the caller's line, as operator() does
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) { return forward_at(x, loc); }
  std::string name() const override { return "GLU"; } ///< "GLU"
  std::string extra_repr() const override; ///< dim
protected:
  Tensor forward_impl(const Tensor& x) override { return functional::glu(x, dim_); }
private:
  int64_t dim_;
};

/// x for x > 0, else weight * x, with a learnable weight of 1 or C (channel dim 1) elements.
class PReLU : public Module {
public:
  /// num_parameters weights (1, or the input's channels), each `init` (as PyTorch's).
  explicit PReLU(int64_t num_parameters = 1, double init = 0.25, Loc loc = Loc::current());
  /// prelu(x, weight); a direct call names the caller's line, as operator() does
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) { return forward_at(x, loc); }
  std::string name() const override { return "PReLU"; } ///< "PReLU"
  std::string extra_repr() const override; ///< num_parameters
  Tensor weight; ///< [num_parameters], a parameter
protected:
  Tensor forward_impl(const Tensor& x) override { return functional::prelu(x, weight); }
};

/// softmax(-x) along dim.
class Softmin : public Module {
public:
  /// The dim to normalize over (PyTorch's implicit dim is deprecated: kiln needs one).
  explicit Softmin(int64_t dim) : dim_(dim) {}
  /// softmin(x); a direct call names the caller's line, as operator() does
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) { return forward_at(x, loc); }
  std::string name() const override { return "Softmin"; } ///< "Softmin"
  std::string extra_repr() const override; ///< dim
protected:
  Tensor forward_impl(const Tensor& x) override { return functional::softmin(x, dim_); }
private:
  int64_t dim_;
};

/// softmax along dim.
class Softmax : public Module {
public:
  /// The dim to normalize over (PyTorch's implicit dim is deprecated: kiln needs one).
  explicit Softmax(int64_t dim) : dim_(dim) {}
  /// softmax(x); a direct call names the caller's line, as operator() does
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) { return forward_at(x, loc); }
  std::string name() const override { return "Softmax"; } ///< "Softmax"
  std::string extra_repr() const override; ///< dim
protected:
  Tensor forward_impl(const Tensor& x) override { return functional::softmax(x, dim_); }
private:
  int64_t dim_;
};

/// softmax over the channels (dim -3) of [N, C, H, W] or [C, H, W] inputs, as torch.nn.Softmax2d.
class Softmax2d : public Module {
public:
  /// softmax(x, -3) of a 3-d or 4-d x; a direct call names the caller's line, as operator() does
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) { return forward_at(x, loc); }
  std::string name() const override { return "Softmax2d"; } ///< "Softmax2d"
protected:
  Tensor forward_impl(const Tensor& x) override;
};

/// x where x > threshold, else value (functional::threshold), as torch.nn.Threshold.
class Threshold : public Module {
public:
  /// The threshold and the value that replaces the elements at or below it.
  Threshold(double threshold, double value) : threshold_(threshold), value_(value) {}
  /// threshold(x); a direct call names the caller's line, as operator() does
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) { return forward_at(x, loc); }
  std::string name() const override { return "Threshold"; } ///< "Threshold"
  std::string extra_repr() const override; ///< threshold, value
protected:
  Tensor forward_impl(const Tensor& x) override { return functional::threshold(x, threshold_, value_); }

private:
  double threshold_, value_;
};

/// log_softmax along dim.
class LogSoftmax : public Module {
public:
  /// The dim to normalize over (PyTorch's implicit dim is deprecated: kiln needs one).
  explicit LogSoftmax(int64_t dim) : dim_(dim) {}
  /// log_softmax(x); a direct call names the caller's line, as operator() does
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) { return forward_at(x, loc); }
  std::string name() const override { return "LogSoftmax"; } ///< "LogSoftmax"
  std::string extra_repr() const override; ///< dim
protected:
  Tensor forward_impl(const Tensor& x) override { return functional::log_softmax(x, dim_); }
private:
  int64_t dim_;
};

/// x itself.
class Identity : public Module {
public:
  /// x; a direct call names the caller's line, as operator() does
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) { return forward_at(x, loc); }
  std::string name() const override { return "Identity"; } ///< "Identity"
protected:
  Tensor forward_impl(const Tensor& x) override { return x; }
};

/// A lookup table: integer indices [...] give rows of weight, [..., dim], read by
/// index_select (kiln/indexops.h); the gradient adds each row's uses (scatter_add, in a
/// fixed order). Indices outside [0, num_embeddings) are a kiln::Error naming Embedding.
/// With max_norm, each forward first renormalizes IN PLACE (weight.assign, without gradient, as
/// torch's embedding_renorm_) every row the indices reference whose norm_type-norm exceeds max_norm:
/// row *= max_norm / (norm + 1e-7), the padding row included; eager and compile() alike.
class Embedding : public Module {
public:
  /// num_embeddings rows of embedding_dim, initialized N(0, 1) as PyTorch.
  Embedding(int64_t num_embeddings, int64_t embedding_dim, Loc loc = Loc::current());
  /// With torch's padding_idx (negative counts from the end): that row starts at zero and
  /// gets no gradient (its uses still read it); and torch's max_norm (>= 0: PyTorch takes a
  /// negative one and flips the rows' signs) with norm_type (> 0, or infinity for the largest
  /// magnitude: PyTorch's 0 counts nonzeros and a negative one is no norm; kiln refuses them).
  Embedding(int64_t num_embeddings, int64_t embedding_dim, std::optional<int64_t> padding_idx,
            std::optional<double> max_norm = std::nullopt, double norm_type = 2, Loc loc = Loc::current());
  /// [..., embedding_dim]; a direct call names the caller's line, as operator() does
  Tensor forward(const Tensor& indices, Loc loc = Loc::current()) { return forward_at(indices, loc); }
  std::string name() const override { return "Embedding"; } ///< "Embedding"
  std::string extra_repr() const override;        ///< sizes
  Tensor weight; ///< [num_embeddings, embedding_dim]
  /// The row that gets no gradient (wrapped into [0, num_embeddings)), if any.
  std::optional<int64_t> padding_idx() const { return padding_idx_; }
  /// The largest norm of a row that a forward reads, if any.
  std::optional<double> max_norm() const { return max_norm_; }
  /// The p of max_norm's p-norm.
  double norm_type() const { return norm_type_; }
protected:
  Tensor forward_impl(const Tensor& indices) override; ///< functional::embedding
private:
  int64_t num_, dim_;
  std::optional<int64_t> padding_idx_;
  std::optional<double> max_norm_;
  double norm_type_;
};

/// Sums, means or maxima of bags of embeddings, as torch.nn.EmbeddingBag (functional::embedding_bag): a weight
/// [num_embeddings, embedding_dim] initialized N(0, 1) as PyTorch (the padding row zero).
class EmbeddingBag : public Module {
public:
  /// PyTorch's arguments but scale_grad_by_freq and sparse: max_norm and norm_type as Embedding's, mode "sum",
  /// "mean" or "max", include_last_offset, padding_idx (negative counts from the end).
  EmbeddingBag(int64_t num_embeddings, int64_t embedding_dim, std::optional<double> max_norm = std::nullopt,
               double norm_type = 2, std::string mode = "mean", bool include_last_offset = false,
               std::optional<int64_t> padding_idx = std::nullopt, Loc loc = Loc::current());
  /// [B, embedding_dim] for a 1-d input with offsets, or a 2-d input [B, N] without; per_sample_weights for
  /// mode "sum" only.
  Tensor forward(const Tensor& input, const Tensor& offsets = Tensor(), const Tensor& per_sample_weights = Tensor(),
                 Loc loc = Loc::current());
  std::string name() const override { return "EmbeddingBag"; } ///< "EmbeddingBag"
  std::string extra_repr() const override; ///< sizes and options
  Tensor weight; ///< [num_embeddings, embedding_dim]
protected:
  Tensor forward_impl(const Tensor& input) override; ///< a 2-d input, without offsets
private:
  int64_t num_, dim_;
  functional::EmbeddingBagOptions options_; ///< without offsets and per_sample_weights
};

/// Applies its modules in order; they are named "0", "1", ...
class Sequential : public Module {
public:
  Sequential() = default;
  /// From module values (moved into shared ownership) or shared pointers to modules (a literal nullptr does not compile).
  template <class... Ms>
    requires(sizeof...(Ms) > 0 && !(sizeof...(Ms) == 1 && (std::is_base_of_v<Sequential, std::decay_t<Ms>> && ...)) &&
             !(std::is_null_pointer_v<std::decay_t<Ms>> || ...))
  explicit Sequential(Ms&&... modules) {
    (push_back(std::forward<Ms>(modules)), ...);
  }
  /// Appends a module value or shared pointer; a null one is a kiln::Error naming `loc`.
  template <class M> void push_back(M module, Loc loc = Loc::current()) {
    std::shared_ptr<Module> m = shared_module(std::move(module));
    if (!m) throw Error("Sequential::push_back", "cannot append a null module", loc);
    register_module(std::to_string(children().size()), std::move(m), loc);
  }
  /// the modules in order; a direct call names the caller's line, as operator() does
  Tensor forward(const Tensor& x, Loc loc = Loc::current()) { return forward_at(x, loc); }
  std::string name() const override { return "Sequential"; } ///< "Sequential"
  /// Number of modules.
  size_t size() const { return children().size(); }
  /// The i-th module.
  Module& operator[](size_t i) const { return *children().at(i).second; }
protected:
  Tensor forward_impl(const Tensor& x) override;
};

/// A ModuleList index (negative counts from the end) with the user's line that reads it.
using ModuleIndex = IndexAt;

/// A ModuleDict key with the user's line that reads it (for its errors), as ModuleIndex.
struct ModuleKey {
  std::string key; ///< the key
  Loc loc;         ///< where it is used
  ModuleKey(std::string k, Loc where = Loc::current()) : key(std::move(k)), loc(where) {}  // NOLINT: implicit
  ModuleKey(const char* k, Loc where = Loc::current()) : key(k), loc(where) {}             // NOLINT: implicit
};

/// A list of submodules, as torch.nn.ModuleList: registered as "0", "1", ..., so parameters(),
/// state_dict(), checkpoints, to() and zero_grad() see them. It has no forward: index or iterate it.
class ModuleList : public Module {
public:
  /// An empty list.
  ModuleList() = default;
  /// From module values (moved into shared ownership) or shared pointers to modules (a literal nullptr does not compile).
  template <class... Ms>
    requires(sizeof...(Ms) > 0 && !(sizeof...(Ms) == 1 && (std::is_base_of_v<ModuleList, std::decay_t<Ms>> && ...)) &&
             !(std::is_null_pointer_v<std::decay_t<Ms>> || ...))
  explicit ModuleList(Ms&&... modules) {
    (push_back(std::forward<Ms>(modules)), ...);
  }
  /// Appends a module value or shared pointer; a null one is a kiln::Error naming `loc`.
  template <class M> void push_back(M module, Loc loc = Loc::current()) { append(shared_module(std::move(module)), loc); }
  /// Inserts a module before position `index` (0..size(); negative counts from the end, as Python's
  /// list.insert clamps it); the later modules are renamed to keep the names "0", "1", ... in order.
  /// A null module is a kiln::Error naming `loc`.
  template <class M> void insert(int64_t index, M module, Loc loc = Loc::current()) {
    insert_at(index, shared_module(std::move(module)), loc);
  }
  std::string name() const override { return "ModuleList"; } ///< "ModuleList"
  /// Number of modules.
  size_t size() const { return children().size(); }
  /// True when empty.
  bool empty() const { return children().empty(); }
  /// The i-th module (negative counts from the end); kiln::Error at the caller's line when out of range.
  Module& operator[](ModuleIndex i) const;
  /// The i-th module as its type M; kiln::Error when it is not an M.
  template <class M> M& at(int64_t i, Loc loc = Loc::current()) const {
    Module& m = (*this)[ModuleIndex(i, loc)];
    if (auto* typed = dynamic_cast<M*>(&m)) return *typed;
    throw Error("ModuleList", "module " + std::to_string(i) + " is a " + m.name() + ", not the type asked for", loc);
  }
  /// Iterates over the modules (Module&) in order.
  class Iterator {
  public:
    using Base = std::vector<std::pair<std::string, std::shared_ptr<Module>>>::const_iterator; ///< the slots
    explicit Iterator(Base it) : it_(it) {}            ///< at a slot
    Module& operator*() const { return *it_->second; } ///< the module
    Iterator& operator++() { ++it_; return *this; }    ///< the next one
    bool operator==(const Iterator& o) const { return it_ == o.it_; } ///< same position
  private:
    Base it_;
  };
  Iterator begin() const { return Iterator(children().begin()); } ///< the first module
  Iterator end() const { return Iterator(children().end()); }     ///< past the last
private:
  void append(std::shared_ptr<Module> m, const Loc& loc);
  void insert_at(int64_t index, std::shared_ptr<Module> m, const Loc& loc);
};

/// Submodules by name, in insertion order, as torch.nn.ModuleDict: registered under their names, so
/// parameters(), state_dict(), checkpoints, to() and zero_grad() see them. It has no forward.
class ModuleDict : public Module {
public:
  /// An empty dict.
  ModuleDict() = default;
  /// Adds a module value or shared pointer under `key`, or replaces the module already there (keeping
  /// its position); a key must be non-empty and contain no '.', which separates names in state dicts.
  template <class M> void insert(const std::string& key, M module, Loc loc = Loc::current()) {
    set(key, shared_module(std::move(module)), loc);
  }
  std::string name() const override { return "ModuleDict"; } ///< "ModuleDict"
  /// Number of modules.
  size_t size() const { return children().size(); }
  /// True when `key` is present.
  bool contains(const std::string& key) const;
  /// The module under `key`; kiln::Error naming the key and the caller's line when absent.
  Module& operator[](const ModuleKey& key) const;
  /// The module under `key` as its type M; kiln::Error when absent or not an M.
  template <class M> M& at(const std::string& key, Loc loc = Loc::current()) const {
    Module& m = (*this)[ModuleKey(key, loc)];
    if (auto* typed = dynamic_cast<M*>(&m)) return *typed;
    throw Error("ModuleDict", "module \"" + key + "\" is a " + m.name() + ", not the type asked for", loc);
  }
  /// Keys in insertion order.
  std::vector<std::string> keys() const;
  /// Iterates over (key, module pointer) pairs in insertion order.
  auto begin() const { return children().begin(); }
  /// Past the last pair.
  auto end() const { return children().end(); }
  /// Removes `key` and returns its module; kiln::Error when absent.
  std::shared_ptr<Module> pop(const std::string& key, Loc loc = Loc::current());
private:
  void set(const std::string& key, std::shared_ptr<Module> m, const Loc& loc);
};

/// A list of parameters, as torch.nn.ParameterList: registered as "0", "1", ..., so parameters(), state_dict()
/// and checkpoints see them under PyTorch's names. It has no forward: index it.
class ParameterList : public Module {
public:
  /// An empty list.
  ParameterList() = default;
  /// From tensors, each registered as a parameter (it then requires grad).
  explicit ParameterList(const std::vector<Tensor>& params, Loc loc = Loc::current());
  /// Appends `t` as a parameter and returns it; an undefined one is a kiln::Error naming `loc`.
  Tensor append(Tensor t, Loc loc = Loc::current());
  std::string name() const override { return "ParameterList"; } ///< "ParameterList"
  /// Number of parameters.
  size_t size() const { return param_slots().size(); }
  /// True when empty.
  bool empty() const { return param_slots().empty(); }
  /// The i-th parameter (negative counts from the end); kiln::Error at the caller's line when out of range.
  Tensor operator[](ModuleIndex i) const;
};

/// Parameters by name, in insertion order, as torch.nn.ParameterDict: registered under their keys, so
/// parameters(), state_dict() and checkpoints see them under PyTorch's names. It has no forward.
class ParameterDict : public Module {
public:
  /// An empty dict.
  ParameterDict() = default;
  /// Adds `t` as a parameter under `key`, or replaces the one there (keeping its position), and returns it; a key
  /// must be non-empty and contain no '.', and an undefined `t` is a kiln::Error naming `loc`.
  Tensor insert(const std::string& key, Tensor t, Loc loc = Loc::current());
  std::string name() const override { return "ParameterDict"; } ///< "ParameterDict"
  /// Number of parameters.
  size_t size() const { return param_slots().size(); }
  /// True when `key` is present.
  bool contains(const std::string& key) const;
  /// The parameter under `key`; kiln::Error naming the key and the caller's line when absent.
  Tensor operator[](const ModuleKey& key) const;
  /// Keys in insertion order.
  std::vector<std::string> keys() const;
  /// Removes `key` and returns its parameter; kiln::Error when absent.
  Tensor pop(const std::string& key, Loc loc = Loc::current());
};

// ---------------------------------------------------------------- losses and distances as modules
// torch.nn's loss classes: each holds its functional's options and its forward(input, target) calls it (so
// they are not usable in Sequential); an error names the module and the caller's line. A class weight is a
// buffer (it moves with to()), as PyTorch's.

/// cross_entropy(input, target, options), as torch.nn.CrossEntropyLoss.
class CrossEntropyLoss : public Module {
public:
  /// The options (weight, ignore_index, reduction, label_smoothing: `{.label_smoothing = 0.1}`).
  explicit CrossEntropyLoss(functional::CrossEntropyOptions options = {}, Loc loc = Loc::current());
  /// The loss of logits `input` against class indices or probabilities `target`.
  Tensor forward(const Tensor& input, const Tensor& target, Loc loc = Loc::current());
  std::string name() const override { return "CrossEntropyLoss"; } ///< "CrossEntropyLoss"
private:
  functional::CrossEntropyOptions options_;
};

/// nll_loss(input, target, options), as torch.nn.NLLLoss.
class NLLLoss : public Module {
public:
  /// The options (weight, ignore_index, reduction).
  explicit NLLLoss(functional::NllLossOptions options = {}, Loc loc = Loc::current());
  /// The loss of log-probabilities `input` against class indices `target`.
  Tensor forward(const Tensor& input, const Tensor& target, Loc loc = Loc::current());
  std::string name() const override { return "NLLLoss"; } ///< "NLLLoss"
private:
  functional::NllLossOptions options_;
};

/// binary_cross_entropy(input, target, weight, reduction), as torch.nn.BCELoss.
class BCELoss : public Module {
public:
  /// An optional weight (broadcast to the input's shape) and the reduction.
  explicit BCELoss(Tensor weight = Tensor(), functional::Reduction reduction = functional::Reduction::Mean,
                   Loc loc = Loc::current());
  /// The loss of probabilities `input` against `target`.
  Tensor forward(const Tensor& input, const Tensor& target, Loc loc = Loc::current());
  std::string name() const override { return "BCELoss"; } ///< "BCELoss"
private:
  Tensor weight_;
  functional::Reduction reduction_;
};

/// binary_cross_entropy_with_logits(input, target, options), as torch.nn.BCEWithLogitsLoss.
class BCEWithLogitsLoss : public Module {
public:
  /// The options (weight, reduction, pos_weight: `{.pos_weight = w}`).
  explicit BCEWithLogitsLoss(functional::BinaryCrossEntropyWithLogitsOptions options = {}, Loc loc = Loc::current());
  /// The loss of logits `input` against `target`.
  Tensor forward(const Tensor& input, const Tensor& target, Loc loc = Loc::current());
  std::string name() const override { return "BCEWithLogitsLoss"; } ///< "BCEWithLogitsLoss"
private:
  functional::BinaryCrossEntropyWithLogitsOptions options_;
};

/// A loss of (input, target) with only a reduction: MSELoss, L1Loss (and the base of the ones below).
class ReducedLoss : public Module {
public:
  /// The reduction.
  explicit ReducedLoss(functional::Reduction reduction) : reduction_(reduction) {}
  /// The reduction the loss applies.
  functional::Reduction reduction() const { return reduction_; }
private:
  functional::Reduction reduction_;
};

/// mse_loss(input, target, reduction), as torch.nn.MSELoss.
class MSELoss : public ReducedLoss {
public:
  /// The reduction.
  explicit MSELoss(functional::Reduction reduction = functional::Reduction::Mean) : ReducedLoss(reduction) {}
  /// The loss of `input` against `target` (one shape).
  Tensor forward(const Tensor& input, const Tensor& target, Loc loc = Loc::current());
  std::string name() const override { return "MSELoss"; } ///< "MSELoss"
};

/// l1_loss(input, target, reduction), as torch.nn.L1Loss.
class L1Loss : public ReducedLoss {
public:
  /// The reduction.
  explicit L1Loss(functional::Reduction reduction = functional::Reduction::Mean) : ReducedLoss(reduction) {}
  /// The loss of `input` against `target` (one shape).
  Tensor forward(const Tensor& input, const Tensor& target, Loc loc = Loc::current());
  std::string name() const override { return "L1Loss"; } ///< "L1Loss"
};

/// smooth_l1_loss(input, target, reduction, beta), as torch.nn.SmoothL1Loss.
class SmoothL1Loss : public ReducedLoss {
public:
  /// The reduction and beta (>= 0, checked at the call).
  explicit SmoothL1Loss(functional::Reduction reduction = functional::Reduction::Mean, double beta = 1.0)
      : ReducedLoss(reduction), beta_(beta) {}
  /// The loss of `input` against `target` (one shape).
  Tensor forward(const Tensor& input, const Tensor& target, Loc loc = Loc::current());
  std::string name() const override { return "SmoothL1Loss"; } ///< "SmoothL1Loss"
private:
  double beta_;
};

/// huber_loss(input, target, reduction, delta), as torch.nn.HuberLoss.
class HuberLoss : public ReducedLoss {
public:
  /// The reduction and delta (> 0, checked at the call).
  explicit HuberLoss(functional::Reduction reduction = functional::Reduction::Mean, double delta = 1.0)
      : ReducedLoss(reduction), delta_(delta) {}
  /// The loss of `input` against `target` (one shape).
  Tensor forward(const Tensor& input, const Tensor& target, Loc loc = Loc::current());
  std::string name() const override { return "HuberLoss"; } ///< "HuberLoss"
private:
  double delta_;
};

/// kl_div(input, target, reduction, log_target), as torch.nn.KLDivLoss.
class KLDivLoss : public ReducedLoss {
public:
  /// The reduction (BatchMean for the batch's KL divergence) and whether the target is log-probabilities.
  explicit KLDivLoss(functional::Reduction reduction = functional::Reduction::Mean, bool log_target = false)
      : ReducedLoss(reduction), log_target_(log_target) {}
  /// The divergence of log-probabilities `input` from `target`.
  Tensor forward(const Tensor& input, const Tensor& target, Loc loc = Loc::current());
  std::string name() const override { return "KLDivLoss"; } ///< "KLDivLoss"
private:
  bool log_target_;
};

/// soft_margin_loss(input, target, reduction), as torch.nn.SoftMarginLoss.
class SoftMarginLoss : public ReducedLoss {
public:
  /// The reduction.
  explicit SoftMarginLoss(functional::Reduction reduction = functional::Reduction::Mean) : ReducedLoss(reduction) {}
  /// The loss of `input` against targets of 1 or -1.
  Tensor forward(const Tensor& input, const Tensor& target, Loc loc = Loc::current());
  std::string name() const override { return "SoftMarginLoss"; } ///< "SoftMarginLoss"
};

/// multilabel_soft_margin_loss(input, target, weight, reduction), as torch.nn.MultiLabelSoftMarginLoss.
class MultiLabelSoftMarginLoss : public Module {
public:
  /// An optional [C] class weight and the reduction.
  explicit MultiLabelSoftMarginLoss(Tensor weight = Tensor(),
                                    functional::Reduction reduction = functional::Reduction::Mean,
                                    Loc loc = Loc::current());
  /// The loss of `input` [N, C] against 0/1 targets of its shape.
  Tensor forward(const Tensor& input, const Tensor& target, Loc loc = Loc::current());
  std::string name() const override { return "MultiLabelSoftMarginLoss"; } ///< "MultiLabelSoftMarginLoss"
private:
  Tensor weight_;
  functional::Reduction reduction_;
};

/// multi_margin_loss(input, target, options), as torch.nn.MultiMarginLoss.
class MultiMarginLoss : public Module {
public:
  /// The options (p, margin, weight, reduction).
  explicit MultiMarginLoss(functional::MultiMarginLossOptions options = {}, Loc loc = Loc::current());
  /// The loss of `input` [N, C] against class indices `target` [N].
  Tensor forward(const Tensor& input, const Tensor& target, Loc loc = Loc::current());
  std::string name() const override { return "MultiMarginLoss"; } ///< "MultiMarginLoss"
private:
  functional::MultiMarginLossOptions options_;
};

/// multilabel_margin_loss(input, target, reduction), as torch.nn.MultiLabelMarginLoss.
class MultiLabelMarginLoss : public ReducedLoss {
public:
  /// The reduction.
  explicit MultiLabelMarginLoss(functional::Reduction reduction = functional::Reduction::Mean)
      : ReducedLoss(reduction) {}
  /// The loss of `input` against class-index targets of its shape (ended by -1).
  Tensor forward(const Tensor& input, const Tensor& target, Loc loc = Loc::current());
  std::string name() const override { return "MultiLabelMarginLoss"; } ///< "MultiLabelMarginLoss"
};

/// A loss of (input1, input2, target) with a margin and a reduction: MarginRankingLoss, HingeEmbeddingLoss' base.
class MarginLoss : public ReducedLoss {
public:
  /// The margin and the reduction.
  MarginLoss(double margin, functional::Reduction reduction) : ReducedLoss(reduction), margin_(margin) {}
  /// The margin.
  double margin() const { return margin_; }
private:
  double margin_;
};

/// margin_ranking_loss(input1, input2, target, margin, reduction), as torch.nn.MarginRankingLoss.
class MarginRankingLoss : public MarginLoss {
public:
  /// The margin and the reduction.
  explicit MarginRankingLoss(double margin = 0, functional::Reduction reduction = functional::Reduction::Mean)
      : MarginLoss(margin, reduction) {}
  /// The loss of ranking input1 above input2 where target is 1 (below where it is -1).
  Tensor forward(const Tensor& input1, const Tensor& input2, const Tensor& target, Loc loc = Loc::current());
  std::string name() const override { return "MarginRankingLoss"; } ///< "MarginRankingLoss"
};

/// cosine_embedding_loss(input1, input2, target, margin, reduction), as torch.nn.CosineEmbeddingLoss.
class CosineEmbeddingLoss : public MarginLoss {
public:
  /// The margin and the reduction.
  explicit CosineEmbeddingLoss(double margin = 0, functional::Reduction reduction = functional::Reduction::Mean)
      : MarginLoss(margin, reduction) {}
  /// The loss of input1 and input2 being similar (target 1) or not (-1).
  Tensor forward(const Tensor& input1, const Tensor& input2, const Tensor& target, Loc loc = Loc::current());
  std::string name() const override { return "CosineEmbeddingLoss"; } ///< "CosineEmbeddingLoss"
};

/// hinge_embedding_loss(input, target, margin, reduction), as torch.nn.HingeEmbeddingLoss.
class HingeEmbeddingLoss : public MarginLoss {
public:
  /// The margin and the reduction.
  explicit HingeEmbeddingLoss(double margin = 1.0, functional::Reduction reduction = functional::Reduction::Mean)
      : MarginLoss(margin, reduction) {}
  /// The loss of distances `input` against targets of 1 or -1.
  Tensor forward(const Tensor& input, const Tensor& target, Loc loc = Loc::current());
  std::string name() const override { return "HingeEmbeddingLoss"; } ///< "HingeEmbeddingLoss"
};

/// triplet_margin_loss(anchor, positive, negative, options), as torch.nn.TripletMarginLoss.
class TripletMarginLoss : public Module {
public:
  /// The options (margin, p, eps, swap, reduction).
  explicit TripletMarginLoss(functional::TripletMarginLossOptions options = {}) : options_(options) {}
  /// The loss of the anchor being nearer the positive than the negative by the margin.
  Tensor forward(const Tensor& anchor, const Tensor& positive, const Tensor& negative, Loc loc = Loc::current());
  std::string name() const override { return "TripletMarginLoss"; } ///< "TripletMarginLoss"
private:
  functional::TripletMarginLossOptions options_;
};

/// poisson_nll_loss(input, target, options), as torch.nn.PoissonNLLLoss.
class PoissonNLLLoss : public Module {
public:
  /// The options (log_input, full, eps, reduction).
  explicit PoissonNLLLoss(functional::PoissonNllLossOptions options = {}) : options_(options) {}
  /// The loss of rates `input` (log-rates with log_input) against counts `target`.
  Tensor forward(const Tensor& input, const Tensor& target, Loc loc = Loc::current());
  std::string name() const override { return "PoissonNLLLoss"; } ///< "PoissonNLLLoss"
private:
  functional::PoissonNllLossOptions options_;
};

/// gaussian_nll_loss(input, target, var, options), as torch.nn.GaussianNLLLoss.
class GaussianNLLLoss : public Module {
public:
  /// The options (full, eps, reduction).
  explicit GaussianNLLLoss(functional::GaussianNllLossOptions options = {}) : options_(options) {}
  /// The loss of means `input` and variances `var` against `target`.
  Tensor forward(const Tensor& input, const Tensor& target, const Tensor& var, Loc loc = Loc::current());
  std::string name() const override { return "GaussianNLLLoss"; } ///< "GaussianNLLLoss"
private:
  functional::GaussianNllLossOptions options_;
};

/// cosine_similarity(x1, x2, dim, eps), as torch.nn.CosineSimilarity.
class CosineSimilarity : public Module {
public:
  /// The dim to reduce and eps.
  explicit CosineSimilarity(int64_t dim = 1, double eps = 1e-8) : dim_(dim), eps_(eps) {}
  /// The similarity of x1 and x2 along dim.
  Tensor forward(const Tensor& x1, const Tensor& x2, Loc loc = Loc::current());
  std::string name() const override { return "CosineSimilarity"; } ///< "CosineSimilarity"
private:
  int64_t dim_;
  double eps_;
};

/// pairwise_distance(x1, x2, p, eps, keepdim), as torch.nn.PairwiseDistance.
class PairwiseDistance : public Module {
public:
  /// The norm's order, eps and keepdim.
  explicit PairwiseDistance(double p = 2, double eps = 1e-6, bool keepdim = false) : p_(p), eps_(eps), keepdim_(keepdim) {}
  /// The distance of x1 and x2 along the last dim.
  Tensor forward(const Tensor& x1, const Tensor& x2, Loc loc = Loc::current());
  std::string name() const override { return "PairwiseDistance"; } ///< "PairwiseDistance"
private:
  double p_, eps_;
  bool keepdim_;
};

} // namespace kiln::nn
