// The CUDA backend's CPU-side proof (no GPU needed):
//  (a) golden files of the emitted CUDA source (KILN_UPDATE_GOLDEN=1 rewrites them);
//  (b) every kernel of a broad set of graphs (every op category and dtype) compiles
//      with NVRTC for sm_90 (CUBIN) and compute_90 (PTX, checked by ptxas where present);
//      skipped with the reason only where NVRTC is absent;
//  (c) the emitted CUDA source, compiled by the host C++ compiler behind
//      tests/cuda_emu/cuda_shim.h, runs on the CPU and matches the LLVM path bitwise, float
//      sums included (both emitters follow the order of codegen::sum_lanes); float
//      pow is CUDA's pow on a GPU, on the shim libm's, so bitwise here too;
//  (d) the KILN_CUDA_CHECK hook in the executor.

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "codegen/cuda_emitter.h"
#include "codegen/form.h"
#include "codegen/lower.h"
#include "codegen/nvrtc.h"
#include "codegen/src/cuda_math.h"
#include "frontend/src/tensor_impl.h"
#include "graph/build.h"
#include "graph/index_check.h"
#include "graph/node.h"
#include "graph/random.h"
#include "kiln/functional.h"
#include "kiln/kiln.h"
#include "kiln/options.h"
#include "runtime/executor.h"
#include "tests/random_graph.h"
#include "tests/table_checks.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
namespace F = nn::functional;
using codegen::Kernel;
using codegen::KernelLaunch;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// ---------------------------------------------------------------- test data

double uniform(uint64_t seed, uint64_t k) { return graph::random_uniform(seed ^ 0xc0da, k, true); }

/// Values for a dtype: floats in [-3, 3] (or (0.05, 5] when positive), ints in [-9, 9],
/// bool 0/1; with specials, 40% are NaN, +-inf, +-0, huge, tiny, subnormal or int extremes.
std::vector<double> values(DType dt, int64_t n, uint64_t seed, bool specials = false, bool positive = false) {
  static const double fs_[] = {kNaN, kInf, -kInf, 0.0, -0.0, 1e30, -1e30, 1e-30, 3e-40, 1.0, -1.0, 88.0, -104.0, 1e10, 710, -746};
  static const double i32[] = {2147483647.0, -2147483648.0, 0, -1, 1, 65536, -65536};
  static const double i64[] = {9.2e18, -9.2e18, 0, -1, 1, 4294967296.0, -3037000500.0};
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) {
    const double u = uniform(seed, k);
    double x = dt == DType::Bool ? (u < 0.5 ? 0 : 1)
               : is_floating(dt) ? (positive ? 0.05 + 4.95 * u : 6 * u - 3)
                                 : std::floor(positive ? 10 * u : 19 * u - 9);
    if (specials && dt != DType::Bool && uniform(seed + 1, k) < 0.4) {
      const auto pick = static_cast<size_t>(uniform(seed + 2, k) * 1000);
      x = is_floating(dt) ? fs_[pick % std::size(fs_)] : dt == DType::Int32 ? i32[pick % 7] : i64[pick % 7];
    }
    v[static_cast<size_t>(k)] = x;
  }
  return v;
}

using test::tensor_of;
using test::numel_of;

Tensor make(DType dt, IntList shape, uint64_t seed, bool specials = false, bool positive = false) {
  return tensor_of(values(dt, numel_of(shape), seed, specials, positive), dt, shape);
}

const std::vector<DType> kAll = {kFloat32, kFloat64, kInt32, kInt64, kBool};
const std::vector<DType> kNumeric = {kFloat32, kFloat64, kInt32, kInt64};
const std::vector<DType> kFloats = {kFloat32, kFloat64};

// ---------------------------------------------------------------- cases

/// A graph to compile and run: `build` returns its outputs (fresh, unrealized tensors).
struct Case {
  Case(std::string n, std::function<std::vector<Tensor>()> b) : name(std::move(n)), build(std::move(b)) {}
  std::string name;                             ///< test name
  std::function<std::vector<Tensor>()> build;  ///< the outputs
};

std::string dn(DType dt) { return std::string(dtype_name(dt)); }

void add_unary(std::vector<Case>& cases) {
  using Fn = Tensor (*)(const Tensor&, Loc);
  const std::vector<std::pair<const char*, Fn>> ops = {
      {"exp", exp}, {"log", log}, {"sqrt", sqrt}, {"rsqrt", rsqrt}, {"sin", sin}, {"cos", cos}, {"tanh", tanh},
      {"sigmoid", sigmoid}, {"reciprocal", reciprocal}, {"logical_not", logical_not}, {"expm1", expm1}, {"log1p", log1p}};
  for (const auto& [name, fn] : ops)
    for (DType dt : kAll)
      for (bool sp : {false, true}) {
        if (sp && !is_floating(dt)) continue;
        cases.push_back({std::string(name) + "_" + dn(dt) + (sp ? "_specials" : ""), [fn = fn, dt, sp, name = std::string(name)] {
                           const bool pos = name == "log" || name == "sqrt" || name == "rsqrt";
                           return std::vector<Tensor>{fn(make(dt, {5, 37}, 11, sp, pos && !sp), Loc::current())};
                         }});
      }
  // the functions added with atan: f32 and f64, random values and specials (integers promote as exp's)
  const std::vector<std::pair<const char*, Fn>> more = {
      {"tan", tan},     {"atan", atan},   {"asin", asin},   {"acos", acos}, {"sinh", sinh},
      {"cosh", cosh},   {"asinh", asinh}, {"acosh", acosh}, {"atanh", atanh}, {"log2", log2},
      {"log10", log10}, {"exp2", exp2},   {"trunc", trunc}, {"frac", frac}};
  for (const auto& [name, fn] : more)
    for (DType dt : kFloats)
      for (bool sp : {false, true})
        cases.push_back({std::string(name) + "_" + dn(dt) + (sp ? "_specials" : ""), [fn = fn, dt, sp] {
                           return std::vector<Tensor>{fn(make(dt, {5, 37}, 13, sp), Loc::current())};
                         }});
  using Fn2 = Tensor (*)(const Tensor&, Loc);
  const std::vector<std::pair<const char*, Fn2>> numeric = {{"neg", neg}, {"abs", abs}, {"relu", relu}, {"square", square}};
  for (const auto& [name, fn] : numeric)
    for (DType dt : kNumeric)
      cases.push_back({std::string(name) + "_" + dn(dt), [fn = fn, dt] {
                         return std::vector<Tensor>{fn(make(dt, {3, 29}, 12, true), Loc::current())};
                       }});
  // Wide ranges of the polynomials, including where they overflow, underflow and degrade.
  for (DType dt : kFloats)
    cases.push_back({"math_wide_" + dn(dt), [dt] {
                       std::vector<double> v;
                       for (int k = -400; k <= 400; ++k) v.push_back(k * 2.0 + k * 0.0137);
                       for (double x : {1e-300, 1e-310, 1e-40, 1e-45, 1e6, 1.6e6, 1e20, 745.0, 709.9, 88.7, 89.5, -87.0, -103.9})
                         v.push_back(x), v.push_back(-x);
                       const Tensor x = tensor_of(v, dt, {static_cast<int64_t>(v.size())});
                       return std::vector<Tensor>{exp(x), log(abs(x)), sin(x), cos(x), tanh(x * 0.01), sigmoid(x),
                                                  exp(x * 0.125), tanh(x * 0.001), expm1(x), log1p(x),
                                                  tan(x), atan(x), asin(x * 0.001), acos(x * 0.001), sinh(x), cosh(x),
                                                  asinh(x), acosh(abs(x)), atanh(x * 0.001), log2(abs(x)),
                                                  log10(abs(x)), exp2(x), trunc(x), frac(x), atan2(x, x * 0.3 - 1.0),
                                                  fmod(x, x * 0.37 + 0.5), remainder(x, x * -0.37 + 0.5)};
                     }});
}

void add_binary(std::vector<Case>& cases) {
  using Fn = Tensor (*)(const Tensor&, const Tensor&, Loc);
  const std::vector<std::pair<const char*, Fn>> ops = {
      {"add", add}, {"sub", sub}, {"mul", mul}, {"div", div}, {"maximum", maximum}, {"minimum", minimum},
      {"eq", eq}, {"ne", ne}, {"lt", lt}, {"le", le}, {"gt", gt}, {"ge", ge}, {"logical_and", logical_and},
      {"logical_or", logical_or}, {"pow", pow}, {"atan2", atan2}, {"fmod", fmod}, {"remainder", remainder}};
  for (const auto& [name, fn] : ops)
    for (DType dt : kAll) {
      const std::string n = name;
      const bool added = n == "atan2" || n == "fmod" || n == "remainder"; // with atan: floats and int32 only
      if (added && dt != kFloat32 && dt != kFloat64 && dt != kInt32) continue;
      if (dt == kBool && (n == "sub" || n == "pow" || n == "maximum" || n == "minimum" || n == "add" || n == "mul"))
        continue;
      cases.push_back({n + "_" + dn(dt), [fn = fn, dt, n] {
                         // Broadcasting [4,1,9] x [3,9]; specials in the first operand.
                         const Tensor a = make(dt, {4, 1, 9}, 21, n != "pow");
                         const Tensor b = n == "pow" && !is_floating(dt) ? make(dt, {3, 9}, 22, false, true)
                                                                         : make(dt, {3, 9}, 22, n != "pow");
                         return std::vector<Tensor>{fn(a, b, Loc::current())};
                       }});
    }
  for (DType dt : {kInt32, kInt64})
    cases.push_back({"pow_negative_exponent_" + dn(dt), [dt] {
                       const Tensor a = tensor_of({-2, -1, 0, 1, 2, 3, -1, 1, 5}, dt, {9});
                       const Tensor b = tensor_of({-1, -3, -2, -5, 0, 2, -4, 7, 1}, dt, {9});
                       return std::vector<Tensor>{pow(a, b)};
                     }});
  for (DType dt : kAll)
    cases.push_back({"where_" + dn(dt), [dt] {
                       const Tensor c = make(kBool, {6, 1}, 31);
                       return std::vector<Tensor>{where(c, make(dt, {6, 7}, 32, true), make(dt, {7}, 33))};
                     }});
  for (DType from : kAll)
    cases.push_back({"cast_from_" + dn(from), [from] {
                       const Tensor x = make(from, {2, 41}, 41, true);
                       std::vector<Tensor> out;
                       for (DType to : kAll) out.push_back(cast(x, to));
                       return out;
                     }});
}

void add_reductions(std::vector<Case>& cases) {
  for (DType dt : kAll) {
    cases.push_back({"sum_" + dn(dt), [dt] {
                       // runs shorter and longer than the lanes (sum_lanes), with and without a tail
                       const Tensor x = make(dt, {5, 6, 7}, 51), y = make(dt, {3, 20, 37}, 55);
                       return std::vector<Tensor>{sum(x, {1}), sum(x, {0, 2}, true), sum(x), sum(y, {2}),
                                                  sum(y, {0, 2}), sum(y, {1}), sum(y.slice(2, 0, 32), {2})};
                     }});
  }
  for (DType dt : kNumeric)
    cases.push_back({"max_min_arg_" + dn(dt), [dt] {
                       const Tensor x = make(dt, {6, 13}, 52, true);
                       return std::vector<Tensor>{max(x, {1}), min(x, {0}), argmax(x, 1), argmin(x, 0),
                                                  max(x), argmax(x.reshape({-1}), 0)};
                     }});
  for (DType dt : kFloats)
    cases.push_back({"mean_" + dn(dt), [dt] { return std::vector<Tensor>{mean(make(dt, {4, 33}, 53), {1})}; }});
  cases.push_back({"argmax_ties_i32", [] {
                     const Tensor x = make(kInt32, {5, 40}, 54);
                     return std::vector<Tensor>{argmax(x, 1), argmin(x, 1), argmax(x, 0), argmin(x, 0)};
                   }});
}

void add_rows_and_matmul(std::vector<Case>& cases) {
  for (DType dt : kFloats) {
    cases.push_back({"softmax_" + dn(dt), [dt] { return std::vector<Tensor>{F::softmax(make(dt, {7, 19}, 61), 1)}; }});
    cases.push_back({"log_softmax_" + dn(dt), [dt] {
                       return std::vector<Tensor>{F::log_softmax(make(dt, {3, 4, 10}, 62), -1)};
                     }});
    cases.push_back({"layer_norm_" + dn(dt), [dt] {
                       return std::vector<Tensor>{F::layer_norm(make(dt, {6, 24}, 63), {24}, make(dt, {24}, 64),
                                                                make(dt, {24}, 65))};
                     }});
    cases.push_back({"matmul_" + dn(dt), [dt] {
                       const Tensor a = make(dt, {9, 17}, 66), b = make(dt, {17, 70}, 67);
                       return std::vector<Tensor>{matmul(a, b), relu(matmul(a, b) + 1.0)};
                     }});
    cases.push_back({"matmul_transposed_batched_" + dn(dt), [dt] {
                       const Tensor a = make(dt, {2, 5, 8}, 68), b = make(dt, {2, 6, 8}, 69);
                       return std::vector<Tensor>{matmul(a, b.transpose(1, 2)), matmul(make(dt, {8}, 70), b.transpose(1, 2))};
                     }});
  }
  for (DType dt : {kInt32, kInt64})
    cases.push_back({"matmul_" + dn(dt), [dt] {
                       return std::vector<Tensor>{matmul(make(dt, {4, 6}, 71), make(dt, {6, 5}, 72))};
                     }});
  cases.push_back({"conv_pool_f32", [] {
                     const Tensor x = make(kFloat32, {2, 3, 7, 6}, 76), w = make(kFloat32, {4, 3, 3, 3}, 77);
                     const Tensor y = F::conv2d(x, w, make(kFloat32, {4}, 78), 1, 1, 1, 1);
                     return std::vector<Tensor>{y, F::max_pool2d(y, 2, 2, 0, 1), F::avg_pool2d(x, 3, 2, 1)};
                   }});
  cases.push_back({"mlp_step_f32", [] {
                     Tensor w = make(kFloat32, {10, 12}, 73);
                     w.requires_grad_();
                     const Tensor x = make(kFloat32, {8, 12}, 74);
                     const Tensor loss = F::cross_entropy(F::linear(x, w), make(kInt64, {8}, 75, false, true));
                     return std::vector<Tensor>{loss, grad({loss}, {w})[0]};
                   }});
}

/// Matmuls in the GEMM form (the CUDA emitter's tiled GEMM: 128 x 128 f32 tiles, 64 x 64
/// f64, k tiles of 8 / 16): sizes that are not multiples of the tiles or of the k tile,
/// several tiles per grid block, K = 0, batches, views, fused prologues and epilogues.
/// (M < 4 or N < 8 is not the GEMM form: those run the one-thread-per-element kernel.)
void add_gemm(std::vector<Case>& cases) {
  for (DType dt : kFloats) {
    cases.push_back({"gemm_odd_shapes_" + dn(dt), [dt] {
                       return std::vector<Tensor>{matmul(make(dt, {65, 7}, 201), make(dt, {7, 130}, 202)),
                                                  matmul(make(dt, {130, 65}, 203), make(dt, {65, 63}, 204)),
                                                  matmul(make(dt, {7, 130}, 205), make(dt, {130, 65}, 206)),
                                                  matmul(make(dt, {63, 1}, 207), make(dt, {1, 9}, 208)),
                                                  matmul(make(dt, {1, 63}, 209), make(dt, {63, 65}, 210)),
                                                  matmul(make(dt, {65, 63}, 211), make(dt, {63, 7}, 212))};
                     }});
    cases.push_back({"gemm_many_tiles_" + dn(dt), [dt] {
                       // 2 x 2 f32 tiles, 3 x 3 f64 tiles: more tiles than the test's grid of 3 blocks
                       return std::vector<Tensor>{matmul(make(dt, {130, 130}, 213), make(dt, {130, 130}, 214))};
                     }});
    cases.push_back({"gemm_k0_" + dn(dt), [dt] {
                       const Tensor a = make(dt, {9, 0}, 215), b = make(dt, {0, 10}, 216);
                       return std::vector<Tensor>{matmul(a, b), relu(matmul(a, b) + make(dt, {10}, 217))};
                     }});
    cases.push_back({"gemm_batched_" + dn(dt), [dt] {
                       return std::vector<Tensor>{
                           matmul(make(dt, {3, 17, 33}, 218), make(dt, {3, 33, 20}, 219)),
                           matmul(make(dt, {2, 1, 9, 12}, 220), make(dt, {3, 12, 10}, 221)), // broadcast batch
                           matmul(make(dt, {4, 9, 12}, 222), make(dt, {12, 10}, 223)),       // b shared by the batch
                           matmul(make(dt, {9, 12}, 224), make(dt, {2, 12, 65}, 225))};     // a shared by the batch
                     }});
    cases.push_back({"gemm_transposed_" + dn(dt), [dt] {
                       const Tensor at = make(dt, {33, 20}, 226), a = make(dt, {20, 33}, 227);
                       const Tensor bt = make(dt, {17, 33}, 228), b = make(dt, {33, 17}, 229);
                       return std::vector<Tensor>{
                           matmul(at.transpose(0, 1), b),                                   // A^T
                           matmul(a, bt.transpose(0, 1)),                                   // x @ W^T
                           matmul(at.transpose(0, 1), bt.transpose(0, 1)),                  // both
                           matmul(make(dt, {2, 9, 12}, 230).transpose(1, 2), make(dt, {2, 9, 10}, 231)),
                           matmul(make(dt, {20, 40}, 232).slice(1, 3, 36), b)};             // a strided view
                     }});
    cases.push_back({"gemm_linear_bias_relu_" + dn(dt), [dt] {
                       const Tensor x = make(dt, {70, 65}, 233), w = make(dt, {130, 65}, 234);
                       const Tensor b = make(dt, {130}, 235), res = make(dt, {70, 130}, 236);
                       return std::vector<Tensor>{relu(F::linear(x, w, b)),                  // bias + relu epilogue
                                                  F::linear(x, w) * 0.5 + res,               // scale + residual
                                                  matmul(relu(x) * 2.0, w.transpose(0, 1))}; // fused prologue
                     }});
    cases.push_back({"gemm_specials_" + dn(dt), [dt] {
                       // NaN, +-inf, +-0, huge and subnormal operands: no padded k step may touch them
                       return std::vector<Tensor>{matmul(make(dt, {12, 13}, 237, true), make(dt, {13, 9}, 238, true)),
                                                  matmul(make(dt, {5, 3}, 239, true) * 0.0, make(dt, {3, 8}, 240) * -1.0)};
                     }});
  }
}

/// Row kernels (reductions, then a map over the row): the CUDA emitter runs them with 16
/// threads per row, float sums split in the order of sum_lanes (16 f32 / 8 f64 lanes).
/// Rows shorter than, equal to and longer than the lanes, with and without a tail; more
/// rows than the test's grid of 3 blocks of 16 rows, and a partial last block; sums over
/// two dims; a strided row (softmax over dim 0); specials.
void add_rows(std::vector<Case>& cases) {
  for (DType dt : kFloats) {
    cases.push_back({"rows_lengths_" + dn(dt), [dt] {
                       std::vector<Tensor> out;
                       for (int64_t n : {1, 7, 8, 9, 15, 16, 17, 33, 100})
                         out.push_back(F::softmax(make(dt, {5, n}, 250 + static_cast<uint64_t>(n)), 1));
                       out.push_back(F::softmax(make(dt, {37}, 269), 0)); // one row: an empty domain
                       return out;
                     }});
    cases.push_back({"rows_many_" + dn(dt), [dt] {
                       const Tensor x = make(dt, {53, 40}, 261);
                       return std::vector<Tensor>{F::softmax(x, 1), F::layer_norm(x, {40}, make(dt, {40}, 262), make(dt, {40}, 263)),
                                                  x - mean(x, {1}, true)};
                     }});
    cases.push_back({"rows_two_dims_" + dn(dt), [dt] {
                       const Tensor x = make(dt, {6, 5, 7}, 264);
                       return std::vector<Tensor>{F::layer_norm(x, {5, 7}, make(dt, {5, 7}, 265), make(dt, {5, 7}, 266)),
                                                  x / sum(x.transpose(1, 2), {1, 2}, true).reshape({6, 1, 1}),
                                                  F::softmax(make(dt, {40, 3}, 267), 0)};
                     }});
    cases.push_back({"rows_specials_" + dn(dt), [dt] {
                       const Tensor x = make(dt, {9, 37}, 268, true);
                       return std::vector<Tensor>{F::softmax(x, 1), F::log_softmax(x, 1), x - mean(x, {1}, true)};
                     }});
  }
  // Max and min split across the row's group (a __shfl_xor_sync butterfly): rows shorter
  // and longer than the group, specials, signed zeros (max(-0, +0) is +0 whichever lane
  // holds which), integers.
  for (DType dt : kNumeric)
    cases.push_back({"rows_extremes_" + dn(dt), [dt] {
                       const bool fp = dt == kFloat32 || dt == kFloat64;
                       const Tensor x = make(dt, {21, 37}, 270, fp), s = make(dt, {4, 5}, 271);
                       std::vector<Tensor> out{x - max(x, {1}, true), x + min(x, {1}, true), s - max(s, {1}, true)};
                       if (fp) {
                         const Tensor z = make(dt, {13, 40}, 272) * 0.0; // +0 and -0
                         out.push_back(z + max(z, {1}, true));
                         out.push_back(z + min(z, {1}, true));
                       }
                       return out;
                     }});
}

/// Elementwise kernels whose innermost extent divides by 4 take the vector form (4 points
/// a thread, kiln_load4/kiln_store4): aligned rows, rows that start misaligned (a slice by
/// one), broadcast rows, a bool result next to a float one, and a random leaf.
void add_vector_forms(std::vector<Case>& cases) {
  cases.push_back({"vector_aligned", [] {
                     const Tensor x = make(kFloat32, {8, 64}, 91, true), y = make(kFloat32, {8, 64}, 92);
                     return std::vector<Tensor>{exp(x * 0.5) + y * y, x > y};
                   }});
  cases.push_back({"vector_misaligned_rows", [] {
                     const Tensor x = make(kFloat32, {6, 69}, 93).slice(1, 1, 69); // rows start at 1 mod 4
                     const Tensor y = make(kFloat32, {68}, 94);
                     return std::vector<Tensor>{sigmoid(x) * y, (x + 1.0).to(kFloat64)};
                   }});
  cases.push_back({"vector_random", [] {
                     return std::vector<Tensor>{randn({5, 12}, 95) * 2.0 + rand({5, 12}, 96)};
                   }});
}

void add_movement_and_leaves(std::vector<Case>& cases) {
  for (DType dt : kAll)
    cases.push_back({"movement_" + dn(dt), [dt] {
                       const Tensor x = make(dt, {3, 4, 5}, 81, true);
                       return std::vector<Tensor>{x.permute({2, 0, 1}), x.slice(2, 1, 5, 2), pad(x, {1, 2, 0, 1}),
                                                  concat({x, x.slice(0, 0, 1)}, 0), x.slice(1, 0, 1).expand({3, 6, 5}),
                                                  x.transpose(0, 2).reshape({5, 12})};
                     }});
  for (DType dt : kFloats)
    cases.push_back({"random_" + dn(dt), [dt] {
                       return std::vector<Tensor>{rand({7, 9}, 5, dt), randn({7, 9}, 6, dt), randn({3}, 7, dt) * 2.0};
                     }});
  cases.push_back({"arange_full", [] {
                     return std::vector<Tensor>{arange(17), arange(0.5, 9.0, 0.75, kFloat32), full({3, 2}, 2.5, kFloat64),
                                                arange(-3, 20, 4, kInt32) * 3};
                   }});
  cases.push_back({"elementwise_chain_f32", [] {
                     const Tensor x = make(kFloat32, {64, 33}, 91);
                     const Tensor y = sigmoid(x * 2.0 + 1.0) * tanh(x) - exp(-abs(x)) / (1.0 + x * x);
                     return std::vector<Tensor>{y, sqrt(abs(y)) + log(1.0 + abs(x))};
                   }});
}

/// Scan-form kernels (kernel_ir.h, ScanLoop): cumprod both ways, a one-column scan, integer
/// scans, scatters of a 1-d and a 2-d computed index with an inf row (it must reach only its row).
void add_scans(std::vector<Case>& cases) {
  for (DType dt : kFloats)
    cases.push_back({"scans_" + dn(dt), [dt] {
                       const Tensor x = make(dt, {40, 37}, 310);
                       const Tensor i = make(kInt64, {40, 37}, 311, false, true) - 1 + 1; // [0, 9], computed
                       const Tensor inf_row = where(arange(40).reshape({40, 1}) == 7, full({40, 37}, INFINITY, dt), x);
                       return std::vector<Tensor>{cumprod(x * 0.01 + 1.0, 0), cumprod(x * 0.01 + 1.0, 1),
                                                  cumsum(x.reshape({1480}), 0), cumsum(i, 0), cumprod(i.slice(1, 0, 5), 1),
                                                  index_add(zeros({10, 37}, dt), 0, i.slice(1, 0, 1).reshape({40}), inf_row),
                                                  scatter_add(zeros({10, 37}, dt), 0, i, inf_row)};
                     }});
}

/// The max, min and logaddexp scans (kernel_ir.h, ScanOp): cummax/cummin values and indices with NaN,
/// infinities and ties (specials), both axes, integers; logcumsumexp of large, -inf, +inf and NaN terms.
void add_extreme_scans(std::vector<Case>& cases) {
  for (DType dt : kFloats)
    cases.push_back({"scans_max_min_lse_" + dn(dt), [dt] {
                       const Tensor x = make(dt, {40, 37}, 312, true), y = make(dt, {40, 37}, 313);
                       const Tensor ties = floor(y * 3.0) * 0.5, i = make(kInt32, {40, 37}, 314);
                       const auto [mx, ix] = cummax(x, 0);
                       const auto [mn, in] = cummin(ties, 1);
                       std::vector<Tensor> out = {
                           mx, ix, mn, in, cummax(i, 1).first, cummin(y.reshape({1480}), 0).second};
                       out.push_back(logcumsumexp(y * 30.0, 1));
                       out.push_back(logcumsumexp(x, 0));
                       out.push_back(logcumsumexp(x.reshape({1480}), 0));
                       return out;
                     }});
}

/// Kernels storing several values (codegen/lower.h): a GEMM with its update, sibling
/// reductions, small independent values.
void add_multi_output(std::vector<Case>& cases) {
  for (DType dt : kFloats) {
    cases.push_back({"multi_output_gemm_" + dn(dt), [dt] {
                       const Tensor x = make(dt, {40, 72}, 101), dy = make(dt, {40, 36}, 102), w = make(dt, {72, 36}, 103);
                       const Tensor g = matmul(x.transpose(0, 1), dy);
                       const Tensor h = matmul(x, w) + 0.5;
                       return std::vector<Tensor>{g, w - g * 0.01, relu(h), h > 0.0};
                     }});
    cases.push_back({"multi_output_rows_" + dn(dt), [dt] {
                       const Tensor x = make(dt, {19, 70}, 104), y = make(dt, {19, 70}, 105);
                       return std::vector<Tensor>{x.sum({1}, true), (x * y).max({1}, true), y.min({1}), exp(x.slice(1, 0, 1)),
                                                  y.slice(1, 1, 2) * 3.0};
                     }});
  }
}

/// Lazy class indices read through one_hot: kernels with an index check (graph/index_check.h).
Tensor checked_losses(const std::vector<int64_t>& targets) {
  const Tensor logits = make(kFloat32, {3, 37}, 93);
  const Tensor lazy = from_vector<int64_t>(targets) + 1 - 1;
  return nn::functional::cross_entropy(logits, lazy, {.reduction = nn::functional::Reduction::None});
}

const std::vector<Case>& all_cases() {
  static const std::vector<Case> cases = [] {
    std::vector<Case> c;
    add_unary(c);
    add_binary(c);
    add_reductions(c);
    add_rows_and_matmul(c);
    add_multi_output(c);
    add_gemm(c);
    add_rows(c);
    add_movement_and_leaves(c);
    add_vector_forms(c);
    add_scans(c);
    add_extreme_scans(c);
    return c;
  }();
  return cases;
}

std::vector<const graph::Node*> nodes_of(const std::vector<Tensor>& ts) {
  std::vector<const graph::Node*> out;
  for (const Tensor& t : ts)
    if (!t.node()->realized() && std::find(out.begin(), out.end(), t.node().get()) == out.end())
      out.push_back(t.node().get());
  return out;
}

/// The CUDA target these tests plan kernels for (the sm_90 that NVRTC compiles for).
const codegen::Target kSm90 = codegen::Target::cuda(9, 0);

/// The schedule that realizing `ts` on a GPU would run.
codegen::Schedule schedule_of(const std::vector<Tensor>& ts, bool fusion = true) {
  return codegen::schedule(nodes_of(ts), {fusion, kSm90});
}

// ---------------------------------------------------------------- (a) golden files

std::string golden_dir() { return std::string(KILN_SOURCE_DIR) + "/tests/golden"; }

/// The names of the prelude functions in `prelude` (from their include guards).
std::vector<std::string> prelude_functions_in(const std::string& prelude) {
  std::vector<std::string> names;
  const std::string guard = "#ifndef KILN_CUDA_FN_";
  for (size_t at = prelude.find(guard); at != std::string::npos; at = prelude.find(guard, at + 1)) {
    const size_t from = at + guard.size();
    names.push_back(prelude.substr(from, prelude.find('\n', from) - from));
  }
  return names;
}

/// The emitted source with its prelude (golden file cuda_prelude.cuh) replaced by the list of
/// the math functions it brought.
std::string kernel_text(const Kernel& k) {
  const std::string s = codegen::emit_cuda(k);
  const size_t at = s.find("#ifndef KILN_CUDA_PRELUDE\n");
  const std::string_view end_marker = codegen::cuda_prelude_end_marker();
  const size_t end = s.find(end_marker);
  EXPECT_NE(at, std::string::npos);
  EXPECT_NE(end, std::string::npos);
  std::string fns;
  for (const std::string& f : prelude_functions_in(s.substr(at, end - at))) fns += " " + f;
  return s.substr(0, at) + "// (kiln prelude, see cuda_prelude.cuh; math functions:" + (fns.empty() ? " none" : fns) +
         ")\n" + s.substr(end + end_marker.size());
}

void check_golden(const std::string& file, const std::string& text) {
  const fs::path path = fs::path(golden_dir()) / file;
  const char* update = std::getenv("KILN_UPDATE_GOLDEN");
  if (update && std::string(update) == "1") {
    fs::create_directories(path.parent_path());
    std::ofstream(path) << text;
    return;
  }
  std::ifstream in(path);
  ASSERT_TRUE(in.good()) << path << " is missing; run with KILN_UPDATE_GOLDEN=1 to create it";
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_EQ(ss.str(), text) << path << " differs; if the change is intended, run with KILN_UPDATE_GOLDEN=1";
}

std::string schedule_text(const std::vector<Tensor>& ts) {
  std::string out;
  for (const KernelLaunch& l : schedule_of(ts).launches) out += codegen::print_kernel(l.kernel) + "\n" + kernel_text(l.kernel) + "\n";
  return out;
}

TEST(CudaGolden, Prelude) { check_golden("cuda_prelude.cuh", codegen::cuda_prelude()); }

// A kernel's prelude holds the math functions its code calls, and the ones those call
// (sigmoid calls exp; tanh has expm1's core inlined), and no others.
TEST(CudaPrelude, BringsOnlyTheFunctionsAKernelCallsAndTheirCallees) {
  const Tensor x = from_vector(std::vector<float>(8, 0.5f), {8});
  const codegen::Schedule s = schedule_of({erf(x) + tanh(x) * sigmoid(x)});
  ASSERT_EQ(s.launches.size(), 1u);
  const std::string src = codegen::emit_cuda(s.launches[0].kernel);
  const std::vector<std::string> fns = prelude_functions_in(src);
  const std::vector<std::string> all = prelude_functions_in(codegen::cuda_prelude());
  for (const char* f : {"kiln_erf_f32", "kiln_tanh_f32", "kiln_sigmoid_f32", "kiln_exp_f32"})
    EXPECT_NE(std::find(fns.begin(), fns.end(), f), fns.end()) << f;
  for (const char* f : {"kiln_sin_f32", "kiln_log_f64", "kiln_randn_f32", "kiln_expm1_f32"})
    EXPECT_EQ(std::find(fns.begin(), fns.end(), f), fns.end()) << f;
  EXPECT_LT(fns.size(), all.size() / 3);
  EXPECT_LT(src.size(), codegen::cuda_prelude().size() / 2);
  // Each function brought is defined before the kernel uses it, in the prelude's order.
  std::ptrdiff_t previous = -1;
  for (const std::string& f : fns) {
    const std::ptrdiff_t at = std::find(all.begin(), all.end(), f) - all.begin();
    EXPECT_GT(at, previous) << f;
    previous = at;
  }
}

TEST(CudaGolden, ElementwiseChain) {
  const Tensor x = from_vector(std::vector<float>(12, 1.0f), {3, 4});
  const Tensor y = from_vector(std::vector<float>(4, 2.0f), {4});
  check_golden("cuda_elementwise.cu", schedule_text({sigmoid(x * y + 1.0) - tanh(x)}));
}

TEST(CudaGolden, Reduction) {
  const Tensor x = from_vector(std::vector<double>(24, 1.0), {2, 3, 4});
  check_golden("cuda_reduction.cu", schedule_text({sum(x, {1}), argmax(x, 2)}));
}

TEST(CudaGolden, Softmax) {
  const Tensor x = from_vector(std::vector<float>(20, 1.0f), {4, 5});
  check_golden("cuda_softmax.cu", schedule_text({F::softmax(x, 1)}));
}

TEST(CudaGolden, Matmul) {
  // A GEMM-form kernel (the tiled GEMM) with a fused bias + relu epilogue. Planned for a
  // CUDA target, it carries no CPU tiling, so the file is the same on every host.
  const Tensor a = from_vector(std::vector<float>(24, 1.0f), {4, 6});
  const Tensor b = from_vector(std::vector<float>(48, 1.0f), {6, 8});
  const Tensor bias = from_vector(std::vector<float>(8, 0.5f), {8});
  const std::string text = schedule_text({relu(matmul(a, b) + bias)});
  EXPECT_NE(text.find("__syncthreads"), std::string::npos) << "not the tiled GEMM";
  EXPECT_EQ(text.find(" mr "), std::string::npos) << "a CPU tiling in a CUDA kernel";
  check_golden("cuda_matmul.cu", text);
}

TEST(CudaVector, ElementwiseKernelsGetTheVectorFormAndItsLaunch) {
  const Tensor x = make(kFloat32, {8, 64}, 97), y = make(kFloat32, {8, 64}, 98);
  const std::string text = schedule_text({x * y + 1.0});
  EXPECT_NE(text.find("kiln_load4("), std::string::npos) << text;
  EXPECT_NE(text.find("kiln_store4("), std::string::npos) << text;
  const codegen::Schedule s = schedule_of({x * y + 1.0});
  ASSERT_EQ(s.launches.size(), 1u);
  EXPECT_EQ(codegen::cuda_launch_config(s.launches[0].kernel, s.launches[0].params).grid, 1u); // 512 points, 4 a thread
  const Tensor ints = make(kInt32, {8, 64}, 99); // no f32 access: the scalar form only
  EXPECT_EQ(schedule_text({ints * ints}).find("kiln_load4("), std::string::npos);
}

TEST(CudaGolden, NaiveMatmul) {
  // Too narrow for the GEMM form (fewer than 8 columns): one thread per output element.
  const Tensor a = from_vector(std::vector<float>(24, 1.0f), {4, 6});
  const Tensor b = from_vector(std::vector<float>(30, 1.0f), {6, 5});
  check_golden("cuda_matmul_naive.cu", schedule_text({relu(matmul(a, b))}));
}

// ---------------------------------------------------------------- (b) NVRTC

/// Unique kernels of every case, fused and unfused.
std::map<std::string, Kernel> all_kernels() {
  std::map<std::string, Kernel> out;
  for (const Case& c : all_cases())
    for (bool fusion : {true, false}) {
      const auto ts = c.build();
      for (const KernelLaunch& l : schedule_of(ts, fusion).launches) out.emplace(l.kernel.name, l.kernel);
    }
  return out;
}

/// Compiles one kernel's source alone (to name the culprit of a failed batch).
void compile_alone(const Kernel& k) {
  const std::string src = codegen::emit_cuda(k);
  codegen::nvrtc_compile(src, k.name + ".cu", "sm_90");
  codegen::nvrtc_compile(src, k.name + ".cu", "compute_90");
}

/// Compiles a batch of kernels as one translation unit (the prelude is shared) for
/// sm_90 and compute_90; checks that every kernel is in the PTX and that ptxas takes it.
double compile_batch(const std::vector<const Kernel*>& batch, bool ptxas) {
  std::string src;
  for (const Kernel* k : batch) src += codegen::emit_cuda(*k);
  try {
    const auto cubin = codegen::nvrtc_compile(src, "batch.cu", "sm_90");
    EXPECT_FALSE(cubin.is_ptx);
    EXPECT_GT(cubin.binary.size(), 100u);
    const auto ptx = codegen::nvrtc_compile(src, "batch.cu", "compute_90");
    EXPECT_TRUE(ptx.is_ptx);
    for (const Kernel* k : batch) EXPECT_NE(ptx.binary.find(".entry " + k->name), std::string::npos) << k->name;
    EXPECT_EQ(cubin.ptx, ptx.binary) << "the sm_90 compile's PTX differs from compute_90's (KILN_CUDA_CHECK relies on it)";
    EXPECT_TRUE(cubin.log.empty() && ptx.log.empty()) << "warnings:\n" << cubin.log << ptx.log;
    if (ptxas) codegen::ptxas_check(ptx.binary, "sm_90");
    return cubin.ms + ptx.ms;
  } catch (const Error& e) {
    for (const Kernel* k : batch) EXPECT_NO_THROW(compile_alone(*k)) << k->name;
    ADD_FAILURE() << std::string(e.what()).substr(0, 6000);
    return 0;
  }
}

/// CompilesEveryKernelForSm90AndCompute90 runs in this many parts (kernel i in part i % kNvrtcParts),
/// each a test of its own: the whole took ~240 s of the 300-s test timeout on one core.
constexpr int kNvrtcParts = 4;

class CudaNvrtcPart : public ::testing::TestWithParam<int> {};

TEST_P(CudaNvrtcPart, CompilesEveryKernelForSm90AndCompute90) {
  std::string why;
  if (!codegen::nvrtc_available(&why)) GTEST_SKIP() << "NVRTC unavailable: " << why;
  const auto kernels = all_kernels();
  const bool have_ptxas = !codegen::ptxas_path().empty();
  if (!have_ptxas) std::printf("[ note ] ptxas not found: PTX is not assembled\n");
  double ms = 0;
  size_t index = 0, compiled = 0;
  std::vector<const Kernel*> batch;
  for (const auto& [name, k] : kernels) {
    if (static_cast<int>(index++ % kNvrtcParts) != GetParam()) continue;
    batch.push_back(&k);
    ++compiled;
    if (batch.size() == 32) ms += compile_batch(batch, have_ptxas), batch.clear();
  }
  if (!batch.empty()) ms += compile_batch(batch, have_ptxas);
  EXPECT_GT(compiled, 0u);
  std::printf("[ note ] NVRTC %s compiled %zu of %zu kernels for sm_90 and compute_90 (%.0f ms in NVRTC)%s\n",
              codegen::nvrtc_version().c_str(), compiled, kernels.size(), ms,
              have_ptxas ? ", PTX checked by ptxas" : "");
}

INSTANTIATE_TEST_SUITE_P(Parts, CudaNvrtcPart, ::testing::Range(0, kNvrtcParts));

TEST(CudaNvrtc, OneKernelAloneCompilesWithoutWarnings) {
  std::string why;
  if (!codegen::nvrtc_available(&why)) GTEST_SKIP() << "NVRTC unavailable: " << why;
  const Tensor x = make(kFloat32, {4, 9}, 3);
  const auto s = schedule_of({F::softmax(x, 1)});
  ASSERT_EQ(s.launches.size(), 1u);
  const Kernel& k = s.launches[0].kernel;
  const auto r = codegen::nvrtc_compile(codegen::emit_cuda(k), k.name + ".cu", "sm_90");
  EXPECT_EQ(r.log, "");
  EXPECT_GT(r.binary.size(), 100u);
}

TEST(CudaNvrtc, CompileErrorCarriesLogAndSource) {
  std::string why;
  if (!codegen::nvrtc_available(&why)) GTEST_SKIP() << "NVRTC unavailable: " << why;
  try {
    codegen::nvrtc_compile("extern \"C\" __global__ void broken(float* x) { x[0] = undefined_thing; }", "broken.cu",
                           "sm_90");
    FAIL() << "expected kiln::Error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("undefined_thing"), std::string::npos) << msg;
    EXPECT_NE(msg.find("--- log ---"), std::string::npos) << msg;
    EXPECT_NE(msg.find("--- source ---"), std::string::npos) << msg;
  }
}

// ---------------------------------------------------------------- (c) the shim

/// The generated sources of some kernels compiled with the host compiler into one
/// shared library, behind tests/cuda_emu/cuda_shim.h.
class ShimLibrary {
public:
  using Entry = void (*)(unsigned, unsigned, void* const*, const long long*);

  explicit ShimLibrary(const std::vector<const Kernel*>& kernels) {
    char tmpl[] = "/tmp/kiln-shim-XXXXXX";
    dir_ = mkdtemp(tmpl);
    std::string src = "#include \"tests/cuda_emu/cuda_shim.h\"\n";
    std::set<std::string> done;
    for (const Kernel* k : kernels)
      if (done.insert(k->name).second) src += codegen::emit_cuda(*k) + codegen::emit_cuda_shim_entry(*k);
    std::ofstream(dir_ + "/kernels.cpp") << src;
    const std::string cmd = std::string(KILN_CXX) + " -std=c++17 -O1 -ffp-contract=off -fno-fast-math -fPIC -shared -w -I" +
                            KILN_SOURCE_DIR + " -o " + dir_ + "/kernels.so " + dir_ + "/kernels.cpp 2>" + dir_ + "/log";
    if (std::system(cmd.c_str()) != 0) {
      std::ifstream log(dir_ + "/log");
      std::stringstream ss;
      ss << log.rdbuf();
      ADD_FAILURE() << "host compile of the CUDA source failed:\n" << ss.str().substr(0, 4000);
      return;
    }
    handle_ = dlopen((dir_ + "/kernels.so").c_str(), RTLD_NOW | RTLD_LOCAL);
    EXPECT_NE(handle_, nullptr) << dlerror();
  }
  ~ShimLibrary() {
    if (handle_) dlclose(handle_);
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  Entry entry(const std::string& name) const {
    return handle_ ? reinterpret_cast<Entry>(dlsym(handle_, (name + "_shim").c_str())) : nullptr;
  }

private:
  std::string dir_;
  void* handle_ = nullptr;
};

/// One output's bytes.
using Bytes = std::vector<unsigned char>;

/// Runs schedule `s` (its kernels in `lib`) through the shim, into `mem` (each output node's
/// bytes): grids of up to 3 blocks of `block` threads (or the block a kernel's launch config
/// fixes: the tiled GEMM, row and attention kernels), so the grid-stride loops take several turns
/// on larger domains. The kernels' index checks write into `err`. False when a kernel is missing.
bool run_launches(const codegen::Schedule& s, const ShimLibrary& lib, unsigned block, long long* err,
                  std::map<const graph::Node*, Bytes>& mem) {
  auto address = [&](const graph::Node* n) -> void* {
    if (auto it = mem.find(n); it != mem.end()) return it->second.data();
    return n->realized()->data();
  };
  for (const KernelLaunch& l : s.launches) {
    std::vector<void*> bufs;
    for (const graph::Node* in : l.inputs) bufs.push_back(in ? address(in) : err); // null: the error buffer
    for (const graph::Node* o : l.outputs) {
      Bytes& out = mem[o];
      out.assign(std::max<size_t>(64, o->numel() * dtype_size(o->dtype)), 0xAB);
      bufs.push_back(out.data());
    }
    auto fn = lib.entry(l.kernel.name);
    if (!fn) return false;
    if (l.domain_size == 0) continue;
    const codegen::CudaLaunchConfig cfg = codegen::cuda_launch_config(l.kernel, l.params);
    const unsigned b = cfg.fixed_block ? cfg.block : block;
    // an argsort has a thread per key of each column (domain point)
    const int64_t points = l.domain_size * (l.kernel.scan && l.kernel.scan->sort ? codegen::eval_index(l.kernel.scan->steps, l.params) : 1);
    const auto grid = static_cast<unsigned>(std::min<int64_t>(3, (points + b - 1) / b));
    // one block per 256 points, or per 1024 in the vector form of an elementwise kernel
    const auto blocks = [&](int64_t per_thread) {
      return static_cast<unsigned>(((points + per_thread - 1) / per_thread + 255) / 256);
    };
    if (!cfg.fixed_block) EXPECT_TRUE(cfg.grid == blocks(1) || cfg.grid == blocks(4)) << l.kernel.name << ": " << cfg.grid;
    std::vector<long long> params(l.params.begin(), l.params.end());
    fn(std::min(grid, cfg.grid), b, bufs.data(), params.data());
  }
  return true;
}

/// The bytes of `ts` after a shim run (run_launches' `mem`, else their realized data).
std::vector<Bytes> results_of(const std::vector<Tensor>& ts, const std::map<const graph::Node*, Bytes>& mem) {
  std::vector<Bytes> result;
  for (const Tensor& t : ts) {
    const size_t bytes = t.numel() * dtype_size(t.dtype());
    auto it = mem.find(t.node().get());
    const auto* p = it != mem.end() ? it->second.data() : static_cast<const unsigned char*>(t.node()->realized()->data());
    result.emplace_back(p, p + bytes);
  }
  return result;
}

/// Runs the schedule of `ts` through the shim (see run_launches); empty when it failed.
/// The kernels' index checks write into `errors` (kernel_ir.h, ExprKind::Check).
std::vector<Bytes> run_shim(const std::vector<Tensor>& ts, unsigned block, std::vector<long long>* errors = nullptr) {
  std::vector<long long> own(2, 0);
  const codegen::Schedule s = schedule_of(ts);
  std::vector<const Kernel*> ks;
  for (const KernelLaunch& l : s.launches) ks.push_back(&l.kernel);
  ShimLibrary lib(ks);
  std::map<const graph::Node*, Bytes> mem;
  if (!run_launches(s, lib, block, errors ? errors->data() : own.data(), mem)) return {};
  return results_of(ts, mem);
}

/// Distance in units in the last place (ordered bit patterns; no overflow for any pair).
template <class F, class I> uint64_t ulp_distance(F a, F b) {
  using U = std::make_unsigned_t<I>;
  U ua, ub;
  std::memcpy(&ua, &a, sizeof a);
  std::memcpy(&ub, &b, sizeof b);
  const U sign = U(1) << (8 * sizeof(U) - 1);
  ua = ua & sign ? U(~ua) : U(ua | sign);
  ub = ub & sign ? U(~ub) : U(ub | sign);
  return ua > ub ? ua - ub : ub - ua;
}

/// Bitwise equal, or both NaN.
template <class F> bool float_same(F a, F b) { return (std::isnan(a) && std::isnan(b)) || std::memcmp(&a, &b, sizeof a) == 0; }

/// Compares one output element by element; reports the first few differences.
void compare(const std::string& what, DType dt, const Bytes& shim, const Bytes& llvm) {
  ASSERT_EQ(shim.size(), llvm.size()) << what;
  const size_t n = shim.size() / dtype_size(dt);
  int bad = 0;
  for (size_t i = 0; i < n && bad < 5; ++i) {
    bool ok = true;
    std::string a, b;
    if (dt == kFloat32) {
      float x, y;
      std::memcpy(&x, &shim[i * 4], 4);
      std::memcpy(&y, &llvm[i * 4], 4);
      ok = float_same(x, y);
      a = std::to_string(x) + " (" + std::to_string(ulp_distance<float, int32_t>(x, y)) + " ulp)", b = std::to_string(y);
    } else if (dt == kFloat64) {
      double x, y;
      std::memcpy(&x, &shim[i * 8], 8);
      std::memcpy(&y, &llvm[i * 8], 8);
      ok = float_same(x, y);
      a = std::to_string(x) + " (" + std::to_string(ulp_distance<double, int64_t>(x, y)) + " ulp)", b = std::to_string(y);
    } else {
      const size_t w = dtype_size(dt);
      ok = std::memcmp(&shim[i * w], &llvm[i * w], w) == 0;
    }
    if (!ok) {
      ++bad;
      ADD_FAILURE() << what << " element " << i << ": shim " << a << " vs llvm " << b;
    }
  }
}

/// Runs one case through the shim and through the LLVM path and compares the outputs.
void check_case(const Case& c, unsigned block) {
  SCOPED_TRACE(c.name);
  const std::vector<Tensor> ts = c.build();
  const std::vector<Bytes> shim = run_shim(ts, block);
  ASSERT_EQ(shim.size(), ts.size()) << "shim run failed";
  realize(ts);
  for (size_t i = 0; i < ts.size(); ++i) {
    const auto* p = static_cast<const unsigned char*>(ts[i].node()->realized()->data());
    const Bytes llvm(p, p + ts[i].numel() * dtype_size(ts[i].dtype()));
    compare(c.name + " output " + std::to_string(i) + " " + ts[i].type_str(), ts[i].dtype(), shim[i], llvm);
  }
}

// The differential harness's random programs (tests/random_graph.h) as a third
// backend: every kernel of each program emitted as CUDA, run on the shim, and required
// bitwise equal to the LLVM path. KILN_SOAK=N runs N / 5 programs instead of 60.
TEST(CudaShimDifferential, RandomPrograms) {
  const char* soak = std::getenv("KILN_SOAK");
  const int n = soak && std::atoi(soak) > 0 ? std::atoi(soak) / 5 : 60;
  for (int s = 1; s <= n; ++s) {
    const testing::RandomProgram prog = testing::make_program(static_cast<uint64_t>(s));
    SCOPED_TRACE("seed " + std::to_string(s) + ", program:\n" + prog.describe());
    check_case(Case("random_" + std::to_string(s), [&] { return prog.build(prog.make_inputs()); }), 32);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

class CudaShim : public ::testing::TestWithParam<size_t> {};

TEST_P(CudaShim, MatchesLlvm) { check_case(all_cases()[GetParam()], 32); }

// Not in all_cases(): CudaNvrtcPart.CompilesEveryKernelForSm90AndCompute90 takes minutes
// already; the suite's KILN_CUDA_CHECK=1 run compiles these kernels with NVRTC.
TEST(CudaShimChecks, AFailedIndexCheckRecordsItsSiteAndValue) {
  check_case({"index_check_cross_entropy", [] { return std::vector<Tensor>{checked_losses({1, 36, 0})}; }}, 32);
  std::vector<long long> err(2, 0);
  ASSERT_FALSE(run_shim({checked_losses({1, 36, 0})}, 32, &err).empty());
  EXPECT_EQ(err[0], 0) << "no index out of range";
  ASSERT_FALSE(run_shim({checked_losses({1, 37, 0})}, 32, &err).empty());
  ASSERT_NE(err[0], 0) << "target 37 of 37 classes";
  EXPECT_EQ(err[1], 37);
  const graph::IndexSite site = graph::index_site_of(err[0] - 1);
  EXPECT_EQ(site.op, "cross_entropy");
  EXPECT_EQ(site.bound, 37);
  EXPECT_NE(std::string(site.where.file_name()).find("test_cuda.cpp"), std::string::npos) << site.where.file_name();
  // a scatter's index, checked in its scan kernel: the bad value recorded, its step adding nothing
  const Tensor rows = from_vector<int64_t>({0, 5, 2}, {3, 1}).expand({3, 4}) + 1 - 1; // computed: checked in the kernel
  err.assign(2, 0);
  const auto out = run_shim({scatter_add(zeros({3, 4}, kFloat32), 0, rows, full({3, 4}, 1.0, kFloat32))}, 32, &err);
  ASSERT_EQ(out.size(), 1u);
  ASSERT_NE(err[0], 0) << "index 5 of 3 rows";
  EXPECT_EQ(err[1], 5);
  EXPECT_EQ(graph::index_site_of(err[0] - 1).op, "scatter_add");
  std::vector<float> got(12);
  std::memcpy(got.data(), out[0].data(), sizeof(float) * 12);
  EXPECT_EQ(got, (std::vector<float>{1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1}));
}

// Not in all_cases() either (CudaNvrtc's time, see above): the indexing ops and floor, ceil and
// round, on the shim and the LLVM path, bitwise equal: a gather fused into elementwise work and
// alone (an index computed in the kernel, so checked there), scatter_add, index_add, cumsum and
// scatter_reduce's prod, amax and amin (scan-form kernels), searchsorted's binary searches, and the rounding
// functions on specials and ties.
TEST(CudaShimIndexOps, MatchLlvmBitwise) {
  for (DType dt : kFloats) {
    check_case({"gather_" + dn(dt), [dt] {
                  const Tensor x = make(dt, {9, 37}, 301, true);
                  const Tensor i = (make(kInt64, {9, 50}, 302, false, true) * 3) + 1 - 1; // [0, 27], computed
                  return std::vector<Tensor>{gather(x, 1, i), exp(gather(x * 2.0, 1, i)) + 1.0,
                                             index_select(x, 0, from_vector<int64_t>({8, 0, 8, 3}))};
                }}, 32);
    check_case({"scatter_add_" + dn(dt), [dt] {
                  const Tensor src = make(dt, {40, 37}, 303);
                  const Tensor i = make(kInt64, {40, 37}, 304, false, true) - 1 + 1; // [0, 9], computed
                  return std::vector<Tensor>{scatter_add(make(dt, {10, 37}, 305), 0, i, src),
                                             index_add(make(dt, {5, 37}, 306), 0, from_vector<int64_t>({4, 0, 4}), src.slice(0, 0, 3)),
                                             cumsum(src, 0), cumsum(src * 0.5, 1)};
                }}, 32);
    check_case({"searchsorted_" + dn(dt), [dt] { // binary searches: gathers at computed positions, NaN
                  const Tensor seq = sort(make(dt, {3, 37}, 310, true), 1).first, v = make(dt, {3, 50}, 311, true);
                  return std::vector<Tensor>{searchsorted(seq, v), searchsorted(seq, v * 2.0, true, true),
                                             bucketize(v, seq.slice(0, 1, 2).reshape({37}), false, true),
                                             searchsorted(make(dt, {37}, 312, true), v)}; // unsorted: torch's probes
                }}, 32);
    check_case({"rounding_" + dn(dt), [dt] {
                  const Tensor x = make(dt, {5, 37}, 307, true), t = make(dt, {5, 37}, 308) * 2.0;
                  const Tensor ties = make(kInt64, {5, 37}, 309, false, true).to(dt) * 0.5 - 2.0; // k/2: half are ties
                  return std::vector<Tensor>{floor(x), ceil(x), round(x), round(t), round(ties), floor(t) + ceil(t)};
                }}, 32);
  }
  for (DType dt : kNumeric) // scatter_reduce's scatter kernels (ScatterMul, ScatterMax, ScatterMin): specials, wrapping
    check_case({"scatter_reduce_" + dn(dt), [dt] {
                  const Tensor src = make(dt, {40, 37}, 310, true);
                  const Tensor i = make(kInt64, {40, 37}, 311, false, true) - 1 + 1; // [0, 9], computed
                  std::vector<Tensor> out;
                  for (const char* r : {"prod", "amax", "amin"})
                    for (bool inc : {true, false})
                      out.push_back(scatter_reduce(make(dt, {10, 37}, 312, true), 0, i, src, r, inc));
                  return out;
                }}, 32);
}

/// The argsort kernels of the shim's sort cases: every dtype with ties, NaN, +-inf, -0.0 (floats) or
/// extremes (integers), ascending and descending, along the last dim, dim 0 and a transposed view, rows
/// longer than the test's blocks, and the values' gather fused with its users.
std::vector<Tensor> sort_outputs(DType dt) {
  const Tensor x = make(dt, {5, 300}, 321, true);
  std::vector<Tensor> out = {argsort(x, 1), argsort(x, 1, true), argsort(x, 0), argsort(x.t(), -1, true),
                             sort(x, 1).first, argsort(x.slice(1, 0, 1), 1)};
  if (is_floating(dt)) {
    const Tensor ties = floor(x * 2.0); // a few values, many times each, and the specials
    out.push_back(argsort(ties, 1));
    out.push_back(argsort(ties, 0, true));
    out.push_back(exp(topk(ties, 7, 1).first) + 1.0);
  } else if (dt != kBool) {
    out.push_back(topk(x, 3, 0, false).second);
    out.push_back(topk(x, 11, 1).first);
  }
  return out;
}

// Not in all_cases() either (CudaNvrtc's time): the argsort kernel, a thread per (column, key) counting
// the keys that sort before its own, on the shim and the LLVM path (a merge sort), bitwise.
TEST(CudaShimSort, MatchLlvmBitwise) {
  for (DType dt : kAll) check_case({"sort_" + dn(dt), [dt] { return sort_outputs(dt); }}, 32);
  check_case({"sort_one_column", [] { return std::vector<Tensor>{argsort(make(kFloat32, {700}, 322, true), 0, true)}; }}, 64);
}

// Argsort kernels of CudaShimSort compile with NVRTC for sm_90 and compute_90, without warnings: each
// dtype ascending along rows and descending down columns, and a dim of one key. Not all 27 of them
// (6 s here): the suite's KILN_CUDA_CHECK=1 run compiles every kernel it runs.
TEST(CudaNvrtc, CompilesTheArgsortKernels) {
  std::string why;
  if (!codegen::nvrtc_available(&why)) GTEST_SKIP() << "NVRTC unavailable: " << why;
  std::map<std::string, Kernel> kernels;
  for (DType dt : kAll) {
    const Tensor x = make(dt, {5, 300}, 321, true);
    std::vector<Tensor> ts = {argsort(x, 1), argsort(x, 0, true)};
    if (dt == kFloat32) ts.push_back(argsort(x.slice(1, 0, 1), 1));
    for (const KernelLaunch& l : schedule_of(ts).launches)
      if (l.kernel.scan && l.kernel.scan->sort) kernels.emplace(l.kernel.name, l.kernel);
  }
  EXPECT_EQ(kernels.size(), 11u);
  std::vector<const Kernel*> batch;
  for (const auto& [name, k] : kernels) batch.push_back(&k);
  const double ms = compile_batch(batch, !codegen::ptxas_path().empty());
  std::printf("[ note ] NVRTC compiled %zu argsort kernels (%.0f ms in NVRTC)\n", kernels.size(), ms);
}

TEST(CudaGolden, Argsort) {
  const Tensor x = from_vector(std::vector<float>(12, 1.0f), {3, 4});
  check_golden("cuda_argsort.cu", schedule_text({sort(x * 2.0, 0, true).first}));
}

// The sequence and image layers (tests/test_layers1d.cpp, test_padding.cpp, test_vision.cpp) on the shim: interpolate's indices and weights
// computed on the device from an arange (each mode), conv1d, the 1-d pools and a cropping pad, the transposed
// convolutions and avg_pool2d's divisor_override, forward
// and input gradients, bitwise as the LLVM path.
TEST(CudaShimLayers1d, MatchLlvmBitwise) {
  for (DType dt : kFloats) {
    check_case({"interpolate_" + dn(dt), [dt] {
                  const Tensor x = make(dt, {2, 3, 5, 7}, 311), s = make(dt, {2, 3, 9}, 312);
                  std::vector<Tensor> out = {
                      F::interpolate(x, {.scale_factor = {1.7, 0.6}}),
                      F::interpolate(x, {.size = {4, 9}, .mode = "nearest-exact"}),
                      F::interpolate(x, {.scale_factor = {1.5, 2.3}, .mode = "bilinear"}),
                      F::interpolate(x, {.size = {3, 11}, .mode = "bilinear", .align_corners = true}),
                      F::interpolate(s, {.scale_factor = {1.3}, .mode = "linear"})};
                  Tensor xg = x.detach().requires_grad_();
                  const Tensor y = F::interpolate(xg, {.scale_factor = {1.5, 0.7}, .mode = "bilinear"});
                  out.push_back(grad({(y * y).sum()}, {xg})[0]);
                  return out;
                }}, 32);
    check_case({"conv1d_pools_pad_" + dn(dt), [dt] {
                  Tensor x = make(dt, {2, 4, 11}, 313).detach().requires_grad_();
                  const Tensor w = make(dt, {6, 2, 3}, 314);
                  const Tensor h = F::conv1d(x, w, Tensor(), 2, 1, 2, 2);
                  const Tensor p = F::max_pool1d(pad(h, {-1, 2}), 2, std::nullopt, 0, 1, true) + F::avg_pool1d(h, 3, 2, 1, false, false);
                  return std::vector<Tensor>{p, grad({(p * p).sum()}, {x})[0]};
                }}, 32);
    check_case({"conv_transpose_divisor_" + dn(dt), [dt] {
                  Tensor x = make(dt, {2, 4, 3, 5}, 315).detach().requires_grad_();
                  Tensor w = make(dt, {4, 3, 3, 2}, 316).detach().requires_grad_();
                  const Tensor y = F::conv_transpose2d(x, w, make(dt, {6}, 317), {2, 3}, {1, 0}, {1, 2}, 2, {1, 2});
                  const Tensor p = F::avg_pool2d(y, 3, 2, 1, true, false, 5);
                  const Tensor s = F::conv_transpose1d(x.flatten(2), w.flatten(2).slice(2, 0, 3), Tensor(), 3, 1, 2, 2, 2);
                  const auto g = grad({(p * p).sum() + (s * s).sum()}, {x, w});
                  return std::vector<Tensor>{y, p, s, g[0], g[1]};
                }}, 32);
    check_case({"pad_modes_grid_sample_" + dn(dt), [dt] { // pad's modes, conv_transpose3d, grid_sample, bilinear
                  Tensor x = make(dt, {2, 3, 4, 5}, 318).detach().requires_grad_();
                  Tensor w = make(dt, {3, 2, 2, 2, 2}, 319).detach().requires_grad_();
                  const Tensor padded = pad(x, {2, 1, 1, 2}, "reflect") + pad(x, {2, 1, 1, 2}, "replicate") +
                                        pad(x, {2, 1, 1, 2}, "circular");
                  const Tensor v = F::conv_transpose3d(x.unsqueeze(2), w, Tensor(), {2, 1, 2}, {0, 1, 0}, {1, 0, 1});
                  const Tensor theta = make(dt, {2, 2, 3}, 320);
                  const Tensor grid = F::affine_grid(theta, {2, 3, 3, 4});
                  const Tensor gs = F::grid_sample(x, grid, {.padding_mode = "reflection"}) +
                                    F::grid_sample(x, grid * 1.4, {.mode = "nearest", .align_corners = true});
                  const Tensor bl = F::bilinear(x.flatten(1, 2), x.flatten(1, 2), make(dt, {4, 5, 5}, 321));
                  const auto g = grad({(padded * padded).sum() + (v * v).sum() + (gs * gs).sum() + bl.sum()}, {x, w});
                  return std::vector<Tensor>{padded, v, gs, bl, g[0], g[1]};
                }}, 32);
    check_case({"grid_sample_3d_bicubic_" + dn(dt), [dt] { // grid_sample on 5-d input, and bicubic on 4-d
                  Tensor x = make(dt, {2, 2, 3, 4, 3}, 322).detach().requires_grad_();
                  Tensor y = make(dt, {2, 3, 4, 5}, 323).detach().requires_grad_();
                  const Tensor grid = F::affine_grid(make(dt, {2, 3, 4}, 324), {2, 2, 2, 3, 4}) * 1.3;
                  const Tensor tri = F::grid_sample(x, grid, {.padding_mode = "border"}) +
                                     F::grid_sample(x, grid, {.mode = "nearest", .padding_mode = "reflection"});
                  const Tensor cub = F::grid_sample(y, grid.slice(1, 0, 1).squeeze(1).slice(3, 0, 2) * 1.2,
                                                    {.mode = "bicubic", .padding_mode = "reflection"});
                  const auto g = grad({(tri * tri).sum() + (cub * cub).sum()}, {x, y});
                  return std::vector<Tensor>{tri, cub, g[0], g[1]};
                }}, 32);
  }
}

// ---------------------------------------------------------------- attention on the shim

// The attention kernel form (cuda_attention.cpp) on the shim against the LLVM path (llvm_attention.cpp),
// bitwise: the forward's out and lse (together and alone) and the backward's dq, dk and dv (together,
// alone and dk with dv), f32 and f64, causal, dropout (p = 1 too), a bool keep-mask, an additive float mask or none (a mask
// with a fully masked query row), and sizes that are multiples neither of the 64-key and 64-row blocks
// nor of the staged column chunks (e != ev), one query row and one key.

/// One attention problem's operands (realized) and attributes.
struct AttentionProblem {
  std::string name;
  Tensor q, k, v, mask, dout;
  double scale = 0.3;
  bool causal = false;
  graph::build::AttentionDropout dropout; ///< none unless set
  graph::NodeRef mask_node() const { return mask.defined() ? mask.node() : nullptr; }
};

enum class MaskKind { None, Bool, Float };

/// q [bh, l, e], k [bh, s, e], v [bh, s, ev], dout [bh, l, ev]; a bool mask [bh, l, s] or a float
/// one [1, l, s] (broadcast over the batch) whose row l / 2 keeps no key where l > 1 (with causal, a
/// float one also has +inf at row 0, key 40, which causal masks); `inf_key`: key 100 of batch point
/// 0 has an inf in k and in v, and its query row 0 one in dout.
AttentionProblem attention_problem(DType dt, std::array<int64_t, 5> size, MaskKind mask, bool causal, uint64_t seed,
                                   bool inf_key = false) {
  const auto [bh, l, s, e, ev] = size;
  AttentionProblem p;
  p.name = std::string(dtype_name(dt)) + " bh " + std::to_string(bh) + " l " + std::to_string(l) + " s " + std::to_string(s) +
           " e " + std::to_string(e) + " ev " + std::to_string(ev) + (causal ? " causal" : "") +
           (mask == MaskKind::Bool ? " bool mask" : mask == MaskKind::Float ? " float mask" : "");
  p.q = make(dt, {bh, l, e}, seed);
  p.k = make(dt, {bh, s, e}, seed + 1);
  p.v = make(dt, {bh, s, ev}, seed + 2);
  p.dout = make(dt, {bh, l, ev}, seed + 3);
  if (inf_key) { // key 100 of batch point 0: inf in k and v; an inf in dout of its query row 0
    std::vector<double> kv = values(dt, bh * s * e, seed + 1), vv = values(dt, bh * s * ev, seed + 2);
    std::vector<double> dv = values(dt, bh * l * ev, seed + 3);
    kv[100 * e] = vv[100 * ev] = dv[0] = kInf;
    p.k = tensor_of(kv, dt, {bh, s, e});
    p.v = tensor_of(vv, dt, {bh, s, ev});
    p.dout = tensor_of(dv, dt, {bh, l, ev});
    p.name += " inf key";
  }
  p.causal = causal;
  if (mask == MaskKind::None) return p;
  const DType mt = mask == MaskKind::Bool ? kBool : dt;
  const IntList shape = mask == MaskKind::Bool ? IntList{bh, l, s} : IntList{1, l, s};
  std::vector<double> m = values(mt, numel_of(shape), seed + 4);
  if (l > 1)
    for (int64_t b = 0; b < numel_of(shape) / (l * s); ++b)
      for (int64_t j = 0; j < s; ++j) m[(b * l + l / 2) * s + j] = mask == MaskKind::Bool ? 0 : -kInf;
  if (mask == MaskKind::Float && causal && s > 40) m[40] = kInf; // where causal masks (row 0, key 40): NaN on both
  p.mask = tensor_of(m, mt, shape);
  return p;
}

/// The problems: every dtype, mask kind and causal setting at l 70, s 130, e 24, ev 40 (2 batch
/// points), one query row, one key, e < ev, and an inf key with causal.
std::vector<AttentionProblem> attention_problems() {
  std::vector<AttentionProblem> out;
  uint64_t seed = 9100;
  for (DType dt : {kFloat32, kFloat64}) {
    for (MaskKind m : {MaskKind::None, MaskKind::Bool, MaskKind::Float})
      for (bool causal : {false, true}) out.push_back(attention_problem(dt, {2, 70, 130, 24, 40}, m, causal, seed += 10));
    out.push_back(attention_problem(dt, {3, 1, 70, 8, 5}, MaskKind::Float, false, seed += 10));
    out.push_back(attention_problem(dt, {2, 67, 1, 17, 33}, MaskKind::Bool, true, seed += 10));
    out.push_back(attention_problem(dt, {1, 129, 65, 3, 70}, MaskKind::None, true, seed += 10));
    // the key blocks a row (or a forward task's rows) never sees add nothing, not even 0 * inf
    out.push_back(attention_problem(dt, {2, 70, 130, 5, 6}, MaskKind::None, true, seed += 10, true));
  }
  // dropout (the weights' factor drawn from the kernel's seed parameter): causal with a bool mask, and
  // neither, f32 and f64
  for (DType dt : {kFloat32, kFloat64})
    for (MaskKind m : {MaskKind::Bool, MaskKind::None}) {
      AttentionProblem p = attention_problem(dt, {2, 70, 130, 24, 40}, m, m == MaskKind::Bool, seed += 10);
      p.dropout = {0.3, seed + 5};
      p.name += " dropout";
      out.push_back(p);
    }
  // dropout p = 1 (every weight dropped, a factor of 0): zeros on both
  AttentionProblem all = attention_problem(kFloat32, {2, 70, 130, 24, 40}, MaskKind::None, true, seed += 10);
  all.dropout = {1.0, seed + 5};
  all.name += " dropout 1";
  out.push_back(all);
  return out;
}

namespace gb = graph::build;

/// Named lists of tensors, each list computed by one kernel.
using AttentionSets = std::vector<std::pair<std::string, std::vector<Tensor>>>;

/// Runs every list of `sets` (unrealized tensors) through the shim, one library for all their
/// kernels, and then through the LLVM path; compares each tensor bitwise. Every set must be one
/// kernel of the attention form.
void check_attention_sets(const AttentionSets& sets) {
  std::vector<codegen::Schedule> schedules;
  std::vector<const Kernel*> kernels;
  for (const auto& [name, ts] : sets) {
    schedules.push_back(schedule_of(ts));
    ASSERT_EQ(schedules.back().launches.size(), 1u) << name;
    const Kernel& k = schedules.back().launches[0].kernel;
    ASSERT_EQ(k.form, codegen::KernelForm::Attention) << name;
    EXPECT_TRUE(codegen::cuda_launch_config(k, schedules.back().launches[0].params).fixed_block) << name;
  }
  for (const codegen::Schedule& s : schedules) kernels.push_back(&s.launches[0].kernel);
  ShimLibrary lib(kernels);
  for (size_t i = 0; i < sets.size(); ++i) {
    const auto& [name, ts] = sets[i];
    SCOPED_TRACE(name);
    std::map<const graph::Node*, Bytes> mem;
    std::vector<long long> err(2, 0);
    ASSERT_TRUE(run_launches(schedules[i], lib, 256, err.data(), mem));
    const std::vector<Bytes> shim = results_of(ts, mem);
    realize(ts);
    for (size_t t = 0; t < ts.size(); ++t) {
      const auto* p = static_cast<const unsigned char*>(ts[t].node()->realized()->data());
      compare(name + " output " + std::to_string(t), ts[t].dtype(), shim[t], Bytes(p, p + shim[t].size()));
    }
  }
}

/// Every problem's forward out and lse (one kernel), and for two of them out alone and lse alone.
AttentionSets attention_forward_sets() {
  AttentionSets sets;
  const std::vector<AttentionProblem> problems = attention_problems();
  for (const AttentionProblem& p : problems) {
    auto out = [&] {
      return detail::result_of(gb::attention(p.q.node(), p.k.node(), p.v.node(), p.mask_node(), p.scale, p.causal, p.dropout), {});
    };
    auto lse = [&] {
      return detail::result_of(gb::attention_lse(p.q.node(), p.k.node(), p.v.node(), p.mask_node(), p.scale, p.causal, p.dropout), {});
    };
    sets.push_back({p.name + " out and lse", {out(), lse()}});
    if (&p == &problems[3] || &p == &problems[13]) { // bool mask, causal: f32 and f64
      sets.push_back({p.name + " out", {out()}});
      sets.push_back({p.name + " lse", {lse()}});
    }
  }
  return sets;
}

/// Every problem's dq, dk and dv (one kernel; out and lse realized on the CPU), and for two of them
/// each alone, dk with dv and dq with dv.
AttentionSets attention_backward_sets() {
  AttentionSets sets;
  const std::vector<AttentionProblem> problems = attention_problems();
  for (const AttentionProblem& p : problems) {
    const graph::NodeRef mask = p.mask_node();
    const Tensor out =
        detail::result_of(gb::attention(p.q.node(), p.k.node(), p.v.node(), mask, p.scale, p.causal, p.dropout), {}).realize();
    const Tensor lse =
        detail::result_of(gb::attention_lse(p.q.node(), p.k.node(), p.v.node(), mask, p.scale, p.causal, p.dropout), {}).realize();
    auto grad = [&](gb::AttentionGradOf which) {
      return detail::result_of(gb::attention_grad(p.q.node(), p.k.node(), p.v.node(), out.node(), p.dout.node(), lse.node(), mask,
                                                  p.scale, p.causal, which, p.dropout),
                               {});
    };
    using G = gb::AttentionGradOf;
    sets.push_back({p.name + " dq dk dv", {grad(G::Q), grad(G::K), grad(G::V)}});
    if (&p == &problems[5] || &p == &problems[16]) { // float mask, causal (f32); float mask, one row (f64)
      sets.push_back({p.name + " dq", {grad(G::Q)}});
      sets.push_back({p.name + " dk", {grad(G::K)}});
      sets.push_back({p.name + " dv", {grad(G::V)}});
      sets.push_back({p.name + " dk dv", {grad(G::K), grad(G::V)}});
      sets.push_back({p.name + " dq dv", {grad(G::Q), grad(G::V)}});
    }
  }
  return sets;
}

TEST(CudaShimAttention, ForwardMatchesLlvmBitwise) { check_attention_sets(attention_forward_sets()); }

TEST(CudaShimAttention, BackwardMatchesLlvmBitwise) { check_attention_sets(attention_backward_sets()); }

// The emitted attention kernels (CUDA golden files; schedule_text prints the kernel IR first): a forward
// storing out and lse, f32, causal with a bool mask [bh, l, s]; a backward of dq, dk and dv, f64, with
// an additive float mask [1, l, s].
TEST(CudaGolden, AttentionForward) {
  const AttentionProblem p = attention_problem(kFloat32, {2, 5, 7, 3, 4}, MaskKind::Bool, true, 9900);
  const graph::NodeRef mask = p.mask_node();
  check_golden("cuda_attention_forward.cu",
               schedule_text({detail::result_of(gb::attention(p.q.node(), p.k.node(), p.v.node(), mask, p.scale, p.causal), {}),
                              detail::result_of(gb::attention_lse(p.q.node(), p.k.node(), p.v.node(), mask, p.scale, p.causal), {})}));
}

TEST(CudaGolden, AttentionBackward) {
  const AttentionProblem p = attention_problem(kFloat64, {2, 5, 7, 3, 4}, MaskKind::Float, false, 9910);
  const graph::NodeRef mask = p.mask_node();
  const Tensor out = detail::result_of(gb::attention(p.q.node(), p.k.node(), p.v.node(), mask, p.scale, p.causal), {});
  const Tensor lse = detail::result_of(gb::attention_lse(p.q.node(), p.k.node(), p.v.node(), mask, p.scale, p.causal), {});
  realize({out, lse});
  std::vector<Tensor> grads;
  for (auto which : {gb::AttentionGradOf::Q, gb::AttentionGradOf::K, gb::AttentionGradOf::V})
    grads.push_back(detail::result_of(
        gb::attention_grad(p.q.node(), p.k.node(), p.v.node(), out.node(), p.dout.node(), lse.node(), mask, p.scale, p.causal, which), {}));
  check_golden("cuda_attention_backward.cu", schedule_text(grads));
}

// Attention kernels of the shim tests compile with NVRTC for sm_90 and compute_90, without warnings
// (and through ptxas where present): the forward (out and lse, out, lse) of f32 causal with a bool
// mask, the backward (dq, dk and dv; each alone; dk and dv; dq and dv) of f32 causal with a float
// mask, and f64's forward and backward of a float mask. Not all of them (48 kernels, 35 s here), nor in all_kernels(): CudaNvrtcPart.CompilesEveryKernelForSm90AndCompute90's
// time. (KILN_CUDA_CHECK=1 compiles every attention kernel the suite runs.)
TEST(CudaNvrtc, CompilesTheAttentionKernels) {
  std::string why;
  if (!codegen::nvrtc_available(&why)) GTEST_SKIP() << "NVRTC unavailable: " << why;
  const std::string size = " bh 2 l 70 s 130 e 24 ev 40 causal ";
  std::map<std::string, Kernel> kernels;
  for (const AttentionSets& sets : {attention_forward_sets(), attention_backward_sets()})
    for (const auto& [name, ts] : sets) {
      const bool f32_bool_forward = name.rfind("f32" + size + "bool mask o", 0) == 0 || name.rfind("f32" + size + "bool mask l", 0) == 0;
      const bool wanted = f32_bool_forward || name.rfind("f32" + size + "float mask d", 0) == 0 || name.rfind("f64" + size + "float mask", 0) == 0;
      if (!wanted) continue;
      for (const KernelLaunch& l : schedule_of(ts).launches) kernels.emplace(l.kernel.name, l.kernel);
    }
  EXPECT_EQ(kernels.size(), 3u + 6u + 2u);
  std::vector<const Kernel*> batch;
  for (const auto& [name, k] : kernels) batch.push_back(&k);
  const double ms = compile_batch(batch, !codegen::ptxas_path().empty());
  std::printf("[ note ] NVRTC compiled %zu attention kernels (%.0f ms in NVRTC)\n", kernels.size(), ms);
}

INSTANTIATE_TEST_SUITE_P(Cases, CudaShim, ::testing::Range<size_t>(0, all_cases().size()),
                         [](const ::testing::TestParamInfo<size_t>& info) { return all_cases()[info.param].name; });

/// n points evenly spaced over [lo, hi], then n uniform random ones in it.
std::vector<double> math_points(double lo, double hi, int n, uint64_t seed) {
  std::vector<double> v;
  for (int k = 0; k < n; ++k) v.push_back(lo + (hi - lo) * k / (n - 1));
  for (int k = 0; k < n; ++k) v.push_back(lo + (hi - lo) * uniform(seed, static_cast<uint64_t>(k)));
  return v;
}

// Each math function over thousands of inputs, on the shim and the LLVM path, bitwise
// equal: the two generators must compute the same IEEE operations (fused exactly where
// both use fma), which the small tensors of the cases above are too few to show. The
// inputs of randn's log are 1 - u with u a multiple of 2^-24 (f32) in [0, 1);
// 0.681153417f is one where a fusion mismatch showed (randn({33, 70}, 2), f32).
TEST(CudaShimMath, ThousandsOfInputsMatchLlvmBitwise) {
  for (DType dt : kFloats) {
    std::vector<double> lg = math_points(1e-3, 3, 1500, 501);
    for (int k = 0; k < 1500; ++k) lg.push_back(std::exp(80 * uniform(502, static_cast<uint64_t>(k)) - 40));
    for (int k = 0; k < 1500; ++k) lg.push_back(1 - std::floor(uniform(503, static_cast<uint64_t>(k)) * 0x1p24) * 0x1p-24);
    lg.push_back(0.681153417), lg.push_back(1 - 0.318846583);
    auto t = [dt](const std::vector<double>& v) { return tensor_of(v, dt, {static_cast<int64_t>(v.size())}); };
    const double big = dt == kFloat64 ? 740 : 100;
    check_case(Case("math_many_" + dn(dt),
                    [&] {
                      return std::vector<Tensor>{exp(t(math_points(-big, big, 1500, 511))),
                                                 exp(t(math_points(-2, 2, 1500, 512))),
                                                 log(t(lg)),
                                                 sin(t(math_points(-40, 40, 2000, 513))),
                                                 cos(t(math_points(-40, 40, 2000, 514))),
                                                 sin(t(math_points(-1e5, 1e5, 1000, 515))),
                                                 cos(t(math_points(-1e5, 1e5, 1000, 516))),
                                                 tanh(t(math_points(-12, 12, 2000, 517))),
                                                 tanh(t(math_points(-0.6, 0.6, 1500, 518))),
                                                 sigmoid(t(math_points(-40, 40, 2000, 519))),
                                                 erf(t(math_points(-7, 7, 2000, 520))),
                                                 erf(t(math_points(0.7, 2.1, 2000, 521))),
                                                 erf(t(math_points(-1e-3, 1e-3, 500, 522))),
                                                 expm1(t(math_points(-big, big, 1500, 523))),
                                                 expm1(t(math_points(-1e-3, 1e-3, 500, 524))),
                                                 log1p(t(lg)),
                                                 log1p(t(math_points(-1, 1, 2000, 525))),
                                                 tan(t(math_points(-40, 40, 2000, 526))),
                                                 atan(t(math_points(-5, 5, 2000, 527))),
                                                 asin(t(math_points(-1, 1, 2000, 528))),
                                                 acos(t(math_points(-1, 1, 2000, 529))),
                                                 sinh(t(math_points(-big, big, 1500, 530))),
                                                 cosh(t(math_points(-big, big, 1500, 531))),
                                                 sinh(t(math_points(-1.5, 1.5, 1500, 532))),
                                                 asinh(t(math_points(-1e3, 1e3, 2000, 533))),
                                                 acosh(t(math_points(1, 5, 2000, 534))),
                                                 atanh(t(math_points(-1, 1, 2000, 535))),
                                                 log2(t(lg)),
                                                 log10(t(lg)),
                                                 exp2(t(math_points(-1.5 * big, 1.5 * big, 2000, 536))),
                                                 atan2(t(math_points(-3, 3, 2000, 537)), t(math_points(-3, 3, 2000, 538))),
                                                 randn({33, 70}, 2, dt),
                                                 randn({4000}, 3, dt)};
                    }),
               32);
  }
}

/// Forces the CUDA emitter's small-GEMM threshold for a scope (see set_cuda_small_gemm_below).
class SmallGemmBelow {
public:
  explicit SmallGemmBelow(int tiles) { codegen::set_cuda_small_gemm_below(tiles); }
  ~SmallGemmBelow() { codegen::set_cuda_small_gemm_below(64); }
};

/// Every GEMM case's GEMM-form kernels are tiled and launched one block per tile, with
/// 64 x 64 tiles for f64 and for f32 products of fewer than `small_below` 128 x 128 tiles.
void expect_tiled_launches(int small_below) {
  SmallGemmBelow threshold(small_below);
  for (const Case& c : all_cases()) {
    if (c.name.rfind("gemm_", 0) != 0) continue;
    SCOPED_TRACE(c.name);
    int tiled = 0;
    const std::vector<Tensor> ts = c.build();
    for (const KernelLaunch& l : schedule_of(ts).launches) {
      const std::string src = codegen::emit_cuda(l.kernel);
      const bool barrier = src.find("__syncthreads()") != std::string::npos;
      EXPECT_EQ(barrier, l.kernel.gemm.has_value()) << l.kernel.name;
      const codegen::CudaLaunchConfig cfg = codegen::cuda_launch_config(l.kernel, l.params);
      if (!barrier) continue;
      ++tiled;
      // one block of 256 threads per output tile
      const graph::Node* out = l.outputs[0]; // the matmul's value
      const bool f64 = out->dtype == kFloat64;
      const auto& shape = out->shape;
      const int64_t m = shape.size() >= 2 ? shape[shape.size() - 2] : 1, n = shape.back();
      const auto tiles_of = [&](int64_t t) { return out->numel() / std::max<int64_t>(1, m * n) * ((m + t - 1) / t) * ((n + t - 1) / t); };
      const int64_t t = f64 || tiles_of(128) < small_below ? 64 : 128;
      EXPECT_TRUE(cfg.fixed_block);
      EXPECT_EQ(cfg.block, 256u);
      EXPECT_EQ(cfg.grid, static_cast<unsigned>(tiles_of(t)));
      EXPECT_EQ(cfg.shared_bytes, f64 ? 33280u : 16896u + 17408u); // f32: both bodies' tiles (rows of 132 and 68 floats)
    }
    EXPECT_GT(tiled, 0);
  }
}

TEST(CudaTiledGemm, GemmCasesRunTheTiledKernel) {
  expect_tiled_launches(64); // the default: the shim's small products take the small tile
  expect_tiled_launches(0);  // never the small tile
}

TEST(CudaTiledGemm, TheLargeTileMatchesLlvmToo) {
  // The cases above run the small f32 tile by default (their products are small); here
  // the large one, so that both bodies are proven on the shim.
  SmallGemmBelow never(0);
  for (const Case& c : all_cases())
    if (c.name.rfind("gemm_", 0) == 0 && c.name.find("f32") != std::string::npos) check_case(c, 32);
}

TEST(CudaRowKernels, RowCasesRunTheRowKernel) {
  for (const Case& c : all_cases()) {
    if (c.name.rfind("rows_", 0) != 0) continue;
    SCOPED_TRACE(c.name);
    int rows = 0;
    const std::vector<Tensor> ts = c.build();
    for (const KernelLaunch& l : schedule_of(ts).launches) {
      const std::string src = codegen::emit_cuda(l.kernel);
      if (src.find("__shfl_down_sync") == std::string::npos && src.find("__shfl_xor_sync") == std::string::npos)
        continue;
      ++rows;
      const codegen::CudaLaunchConfig cfg = codegen::cuda_launch_config(l.kernel, l.params);
      EXPECT_TRUE(cfg.fixed_block);
      EXPECT_EQ(cfg.block, 256u);
      EXPECT_EQ(cfg.grid, static_cast<unsigned>((l.domain_size + 15) / 16)); // 16 rows a block
    }
    EXPECT_GT(rows, 0);
  }
}

TEST(CudaShimLaunch, AnyGridAndBlockShape) {
  for (unsigned block : {1u, 7u, 256u}) {
    SCOPED_TRACE(block);
    for (const Case& c : all_cases())
      if (c.name == "softmax_f32" || c.name == "matmul_f64" || c.name == "movement_i64") check_case(c, block);
  }
}

TEST(CudaShimLaunch, TiledGemmOnTwoHostThreadsAtOnce) {
  // One library, two host threads launching the same tiled GEMM at once: each thread's
  // blocks have their own __shared__ tiles (thread_local), so both get the LLVM result.
  const Tensor a = make(kFloat32, {130, 70}, 301), b = make(kFloat32, {70, 129}, 302); // kept: the launch reads them
  const Tensor c = matmul(a, b);
  const codegen::Schedule s = schedule_of({c});
  ASSERT_EQ(s.launches.size(), 1u);
  const KernelLaunch& l = s.launches[0];
  ASSERT_TRUE(l.kernel.gemm.has_value());
  ShimLibrary lib({&l.kernel});
  const auto fn = lib.entry(l.kernel.name);
  ASSERT_NE(fn, nullptr);
  const codegen::CudaLaunchConfig cfg = codegen::cuda_launch_config(l.kernel, l.params);
  ASSERT_EQ(cfg.grid, 9u); // 3 x 3 small tiles (64 x 64: 2 x 2 large ones are few)
  const std::vector<long long> params(l.params.begin(), l.params.end());
  auto run = [&](std::vector<float>& out) {
    std::vector<void*> bufs;
    for (const graph::Node* in : l.inputs) bufs.push_back(in->realized()->data());
    out.assign(static_cast<size_t>(c.numel()), 0.0f);
    bufs.push_back(out.data());
    fn(cfg.grid, cfg.block, bufs.data(), params.data());
  };
  std::vector<float> x, y;
  bool x_ok = true, y_ok = true;
  const std::vector<float> want = c.to_vector<float>();
  std::thread t1([&] {
    for (int r = 0; r < 4; ++r) run(x), x_ok = x_ok && std::memcmp(x.data(), want.data(), x.size() * 4) == 0;
  });
  std::thread t2([&] {
    for (int r = 0; r < 4; ++r) run(y), y_ok = y_ok && std::memcmp(y.data(), want.data(), y.size() * 4) == 0;
  });
  t1.join();
  t2.join();
  EXPECT_TRUE(x_ok);
  EXPECT_TRUE(y_ok);
}

/// Runs kernel `k` (the kernel of the one-launch `l`, possibly with another form) on the
/// shim in its launch configuration; the output's bytes.
Bytes run_kernel_on_shim(const KernelLaunch& l, const Kernel& k) {
  ShimLibrary lib({&k});
  const auto fn = lib.entry(k.name);
  if (!fn) {
    ADD_FAILURE() << "no shim entry for " << k.name;
    return {};
  }
  const codegen::CudaLaunchConfig cfg = codegen::cuda_launch_config(k, l.params);
  EXPECT_EQ(l.outputs.size(), 1u);
  const graph::Node* o = l.outputs[0];
  Bytes out(std::max<size_t>(64, o->numel() * dtype_size(o->dtype)), 0xAB);
  std::vector<void*> bufs;
  for (const graph::Node* in : l.inputs) bufs.push_back(in->realized()->data());
  bufs.push_back(out.data());
  const std::vector<long long> params(l.params.begin(), l.params.end());
  fn(cfg.grid, cfg.block, bufs.data(), params.data());
  out.resize(o->numel() * dtype_size(o->dtype));
  return out;
}

/// `k` with the form `form` recorded instead of its planned one (no GEMM layout unless Gemm).
Kernel with_form(Kernel k, codegen::KernelForm form) {
  codegen::FormPlan plan;
  plan.form = form;
  if (form == codegen::KernelForm::Gemm) plan.gemm = k.gemm;
  codegen::set_form(k, plan);
  codegen::finalize(k);
  return k;
}

TEST(CudaForms, TheEmitterFollowsTheRecordedForm) {
  // A float row sum, which plan_form gives the row form on CUDA, recorded as a Reduction:
  // the emitter and the launch configuration follow the record (one thread per row, no
  // shuffles, any block), with the same bits.
  const Tensor x = make(kFloat32, {33, 70}, 401);
  const Tensor s = sum(x, {1}, true);
  const codegen::Schedule sched = schedule_of({s});
  ASSERT_EQ(sched.launches.size(), 1u);
  const KernelLaunch& l = sched.launches[0];
  ASSERT_EQ(l.kernel.form, codegen::KernelForm::Row);
  const Kernel as_reduction = with_form(l.kernel, codegen::KernelForm::Reduction);
  const std::string row_src = codegen::emit_cuda(l.kernel), red_src = codegen::emit_cuda(as_reduction);
  EXPECT_NE(row_src.find("__shfl_down_sync"), std::string::npos);
  EXPECT_EQ(red_src.find("__shfl_down_sync"), std::string::npos) << red_src;
  EXPECT_EQ(red_src.find("__launch_bounds__"), std::string::npos) << red_src;
  EXPECT_TRUE(codegen::cuda_launch_config(l.kernel, l.params).fixed_block);
  EXPECT_FALSE(codegen::cuda_launch_config(as_reduction, l.params).fixed_block);
  EXPECT_NE(codegen::emit_cuda_shim_entry(l.kernel).find("launch_sync"), std::string::npos);
  EXPECT_EQ(codegen::emit_cuda_shim_entry(as_reduction).find("launch_sync"), std::string::npos);
  const Bytes want = run_kernel_on_shim(l, l.kernel);
  EXPECT_EQ(run_kernel_on_shim(l, as_reduction), want);
  const std::vector<float> cpu = s.to_vector<float>();
  ASSERT_EQ(want.size(), cpu.size() * 4);
  EXPECT_EQ(std::memcmp(want.data(), cpu.data(), want.size()), 0);
}

TEST(CudaForms, AGemmRecordedAsAReductionIsNotTiled) {
  // A matmul planned in the GEMM form, recorded as a Reduction: the emitter writes the
  // plain loops (no shared memory, no barrier), same bits as the tiled GEMM and the CPU.
  const Tensor a = make(kFloat32, {40, 24}, 402), b = make(kFloat32, {24, 36}, 403);
  const Tensor c = matmul(a, b);
  const codegen::Schedule sched = schedule_of({c});
  ASSERT_EQ(sched.launches.size(), 1u);
  const KernelLaunch& l = sched.launches[0];
  ASSERT_EQ(l.kernel.form, codegen::KernelForm::Gemm);
  const Kernel plain = with_form(l.kernel, codegen::KernelForm::Reduction);
  EXPECT_NE(codegen::emit_cuda(l.kernel).find("__syncthreads"), std::string::npos);
  const std::string src = codegen::emit_cuda(plain);
  EXPECT_EQ(src.find("__syncthreads"), std::string::npos) << src;
  EXPECT_EQ(src.find("__shared__"), std::string::npos) << src;
  const Bytes tiled = run_kernel_on_shim(l, l.kernel);
  EXPECT_EQ(run_kernel_on_shim(l, plain), tiled);
  const std::vector<float> cpu = c.to_vector<float>();
  ASSERT_EQ(tiled.size(), cpu.size() * 4);
  EXPECT_EQ(std::memcmp(tiled.data(), cpu.data(), tiled.size()), 0);
}

// ---------------------------------------------------------------- (d) the executor hook

TEST(CudaCheckHook, CompilesEveryNewKernelOnce) {
  std::string why;
  if (!codegen::nvrtc_available(&why)) GTEST_SKIP() << "NVRTC unavailable: " << why;
  const bool saved = options().cuda_check;
  const std::string saved_dir = options().cache_dir;
  char dir[] = "/tmp/kiln-cuda-check-XXXXXX";
  mkdtemp(dir);
  options().cache_dir = std::string(dir) + "/cache"; // no markers from earlier runs: the kernels really compile
  options().cuda_check = true;
  const size_t before = runtime::executor_stats().cuda_checked;
  const Tensor x = make(kFloat32, {3, 11}, 101);
  const Tensor y = F::softmax(x * 1.5 + 0.25, 1);
  y.realize();
  const size_t after = runtime::executor_stats().cuda_checked;
  EXPECT_GE(after, before + 1);
  (F::softmax(make(kFloat32, {3, 11}, 102) * 1.5 + 0.25, 1)).realize(); // the same kernels: not checked again
  EXPECT_EQ(runtime::executor_stats().cuda_checked, after);
  EXPECT_FALSE(fs::is_empty(fs::path(dir) / "kiln-cuda-checked"));
  options().cuda_check = saved;
  options().cache_dir = saved_dir;
  fs::remove_all(dir);
}

} // namespace
} // namespace kiln
