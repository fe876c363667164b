#pragma once
/// \file kernel_ir.h
/// The backend-neutral kernel IR. Lowering produces it from the graph; the LLVM
/// and CUDA emitters read it (and never the graph).
///
/// A kernel runs, for every point of its parallel *domain* (loop vars LoopVar(0..)):
///   1. its reductions in order: reduction k loops over its extents (ReduceVar(0..),
///      the last extent innermost), combining `value` into an accumulator in a fixed
///      order that depends only on the extents; ReduceResult(k) then names the result.
///      The order is sequential, except for float sums that are not `block_inner`: see
///      sum_lanes(). The order never depends on fusion, chunking or thread count, so
///      fused and unfused kernels give bitwise the same results;
///   2. its stores: if `map` is empty, once; otherwise once for every point of the
///      map loops (MapVar(0..), last innermost) - the row pattern of softmax.
/// A store writes `value` at element `offset` of an output buffer.
///
/// On the CPU the domain is flattened in row-major order and split into chunks
/// [begin, end); the innermost domain dim is the vectorized loop when there are no
/// reductions. Sizes are Param expressions so one compiled kernel serves many sizes.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "codegen/kernel_ops.h"
#include "graph/node.h"

namespace kiln::codegen {

/// What an expression is.
enum class ExprKind : uint8_t {
  Const,        ///< a constant of `dtype`: `f` for floats, `i` for ints and bool
  LoopVar,      ///< domain loop var `index` (i64)
  ReduceVar,    ///< loop var `index` of the enclosing reduction (i64)
  MapVar,       ///< map loop var `index` (i64)
  Param,        ///< kernel parameter `index` (an i64 slot): a size, stride, seed or site (i64), or a scalar
                ///< constant of the user's of any dtype but bool (see scalar_param()), its bits in the slot
  Load,         ///< element args[0] (i64) of buffer `index`; with args[1] (bool guard): 0 where the guard is false
  Op,           ///< the elementwise op `op` (kernel_ops.h) applied to args (Cast converts to `dtype`)
  IntDiv,       ///< args[0] / args[1] on i64 (operands are never negative)
  IntMod,       ///< args[0] % args[1] on i64 (operands are never negative)
  ReduceResult, ///< result of reduction `index` (for Argmax/Argmin the i64 index)
  Random,       ///< counter-based random number (see graph/random.h) of distribution `dist`, counter args[0], seed args[1]
  Check,        ///< the integer index args[0], unchanged; where it is outside [0, args[1]) (i64), the kernel
                ///< records {args[2] + 1 (the site, i64), a failing index} in error buffer `index` unless a failure
                ///< is recorded there already (graph/index_check.h); the LLVM emitter does it once per call, branch-free
};

struct Expr;
/// Expressions are immutable trees (DAGs where subtrees are shared).
using ExprRef = std::shared_ptr<const Expr>;

/// One expression node.
struct Expr {
  ExprKind kind;                             ///< what it is
  DType dtype;                               ///< type of the value (i64 for indices, bool for predicates)
  ScalarOp op = ScalarOp::Add;               ///< for Op
  RandomDist dist = RandomDist::Uniform;     ///< for Random
  int index = 0;                             ///< var, param, buffer or reduction number
  int64_t i = 0;                             ///< integer constant
  double f = 0;                              ///< floating constant
  std::vector<ExprRef> args;                 ///< operands
};

/// A kernel argument buffer.
struct BufferParam {
  DType dtype;          ///< element type
  bool output = false;  ///< written by the kernel (outputs are never read by it)
  bool error = false;   ///< the error buffer (i64[2], zeroed by the runtime) of the kernel's Check expressions
};

/// One reduction per domain point.
struct Reduction {
  ReduceOp op;                   ///< the combine
  DType dtype;                   ///< dtype of `value` (the accumulator's type)
  std::vector<ExprRef> extents;  ///< loop extents (i64); ReduceVar(k) ranges over [0, extents[k])
  ExprRef value;                 ///< the value combined at each point
  bool fma = false;              ///< a float Sum of a Mul may fuse multiply and add (matmul)
  /// Layout hint: the value's loads are contiguous in the innermost domain var rather than
  /// in the reduction vars (matmul with a row-major right operand). A backend may then
  /// evaluate the reduction for a block of consecutive innermost-domain points at once,
  /// reduction loops outermost; each point still accumulates in the sequential order.
  /// Every GEMM-form kernel (Kernel::gemm) sets it, whatever its layout: its order is
  /// sequential too, on every backend.
  bool block_inner = false;
};

/// The lane count of a float sum's innermost loop over n elements. For n < lanes the
/// sum is sequential: s = ((0 + v0) + v1) + ... Otherwise lane l accumulates, in order,
/// the elements k with k % lanes == l (starting from 0; fmuladd steps for a `fma`
/// reduction), and the lanes are then combined pairwise: lane l += lane l + h for
/// h = lanes/2, lanes/4, ..., 1. With several extents, each run of the innermost loop
/// gives one such partial, and the partials are summed sequentially, starting from 0.
/// This order vectorizes (the lanes are independent) without reassociation, so every
/// backend and every fusion decision computes the same bits.
constexpr int64_t sum_lanes(DType dt) { return dt == DType::Float64 ? 8 : 16; }

/// True for a reduction summed in sum_lanes() order: a float Sum, not block_inner, with extents.
bool sums_in_lanes(const Reduction& r);

/// One store per domain (or map) point.
struct Store {
  int buffer;      ///< an output buffer
  ExprRef offset;  ///< element offset (i64)
  ExprRef value;   ///< of the buffer's dtype
};

/// How the emitters lay out a kernel's loops and threads. plan_form() (form.h) decides it
/// once per kernel for a target, after lowering; the emitters and the CUDA launch
/// configuration read it and never infer it from the IR. It never changes a result: the
/// order of every reduction is fixed by the IR (see Reduction).
enum class KernelForm : uint8_t {
  Elementwise, ///< no reductions: one point of the domain at a time (CUDA: a grid-stride loop, 4 f32 points a thread where it can)
  Reduction,   ///< reductions (then the stores or a map) per domain point, by one thread (CUDA) or one loop nest (CPU)
  Row,         ///< reductions with a map over each row (softmax, layernorm); on CUDA also reductions with a float
               ///< sum in sum_lanes order: a group of threads per row splits the sums' lanes and the map's points
  Gemm,        ///< the GEMM form of a matmul kernel (Kernel::gemm): packed panels (CPU) or a shared-memory tiled GEMM (CUDA)
  Scan,        ///< a kernel with a ScanLoop (Kernel::scan): sequential along one axis per domain point (a "column");
               ///< CPU: blocks of consecutive columns, steps outermost; CUDA: a thread per column
  Attention,   ///< an attention kernel (Kernel::attention): per query block, key blocks with an online softmax (CPU and CUDA)
  Columns,     ///< CPU only: one float sum in sum_lanes() order whose loads are contiguous along the innermost domain
               ///< var (a column sum: a bias gradient); a block of consecutive innermost points accumulates at
               ///< once, each point's lanes its own, reduction loops outside the block (each point's order unchanged)
};

/// Points per block of a Columns-form kernel: one 64-byte vector of them (16 f32, 8 f64).
constexpr int64_t columns_block_points(DType dtype) { return dtype == DType::Float64 ? 8 : 16; }

/// The form's name ("elementwise", "reduction", "row", "gemm", "scan", "attention", "columns").
const char* form_name(KernelForm f);

/// What lowering records of a matmul kernel that may take the GEMM form (its shape makes the
/// GEMM pay off): the domain vars of the output's rows and columns, -1 where the extent is 1.
/// plan_form() decides, for the target, whether it takes the form. Lowering also marks its
/// reduction (reductions[0], the first and only one then) block_inner, so its order is
/// sequential whatever form is planned.
struct MatmulDims {
  int m_var = -1; ///< domain var of the output rows
  int n_var = -1; ///< domain var of the output columns
};

/// The GEMM form of a matmul kernel (see llvm_gemm.h for the CPU, cuda_emitter.h for
/// CUDA). The kernel has one reduction, a float Sum marked fma whose value is Mul(a, b) over ReduceVar(0) = k, no
/// map; `a` reads no `n_var`, `b` no `m_var`. Its domain is [batch vars..., m_var, n_var]
/// (a var is absent, -1, where its extent is 1). The computation is the same as without
/// the form - each output element accumulates fmuladd(a, b, acc) over k in order from 0,
/// then the stores run - only the loop structure differs. A CUDA target's form has no CPU
/// tiling (mr, nr, mc, nc and kc are 0): the CUDA emitter picks its tile from the dtype
/// and the sizes. On the CPU:
///   * the CPU kernel's [begin, end) counts tasks, not domain points: task t is the
///     output block (batch point, row block rb, column block cb) with cb fastest,
///     t = (batch * row_blocks + rb) * col_blocks + cb; the rows are cut into
///     row_blocks = ceil(rows / mc') blocks of equal whole tiles (the last one shorter), mc'
///     being the launch's rows per task (gemm_blocks()); likewise the columns;
///   * buffers[buffers.size()] (one past the output) points at gemm_scratch_bytes() of
///     64-byte aligned scratch memory private to the call.
/// Inside a task: k in blocks of kc; per k block the a panel is packed (mr rows a
/// panel, zero-padded), and per nr columns the b panel; an mr x nr register tile
/// accumulates over the k block, kept in scratch between k blocks; after the last k
/// block the stores (the fused epilogue) run for the tile's elements inside the output.
struct GemmTiling {
  int m_var = -1;      ///< domain var of the output rows, -1 when there is one row
  int n_var = -1;      ///< domain var of the output columns, -1 when there is one column
  int64_t mr = 0;      ///< register tile rows
  int64_t nr = 0;      ///< register tile columns (a multiple of the vector width)
  int64_t mc = 0;      ///< rows per task at most (a multiple of mr): the scratch's size
  int64_t nc = 0;      ///< columns per task at most (a multiple of nr)
  int64_t kc = 0;      ///< k block
  /// The parameters holding the launch's rows and columns per task (at most mc and nc, multiples
  /// of mr and nr), so that one kernel serves every block size; -1: mc and nc themselves.
  int mc_param = -1, nc_param = -1;
};

/// Consecutive columns a CPU Scan-form kernel runs together, steps outermost (a cache line of
/// f32 columns: a step's loads and stores are contiguous), unless ScanLoop::inner_axis.
constexpr int64_t kScanColumns = 16;

/// A running scan's or a scatter's combine (ScanLoop::op), applied as acc = combine(acc, v):
enum class ScanOp : uint8_t {
  /// acc + v, from 0 (integers wrap)
  Add,
  /// acc * v, from 1
  Mul,
  /// v where v >= acc or v is NaN, else acc (torch's cummax: a NaN sticks, a tie takes v), from -inf, the lowest
  /// integer or false
  Max,
  /// v where v <= acc or v is NaN, else acc, from +inf, the highest integer or true
  Min,
  /// floats only, from -inf: m = max(acc, v) (NaN-propagating), then m where m is +-inf (so -inf, -inf gives
  /// -inf), else m + log1p(exp(-|acc - v|)) (kiln's exp and log1p, math_body.h)
  LogAddExp,
};

/// The combine's text name: "add", "mul", "max", "min" or "logaddexp".
std::string_view scan_op_name(ScanOp op);
/// The combine of a text name (scan_op_name's); nullopt for another word.
std::optional<ScanOp> scan_op_named(std::string_view name);

/// The sequential loop of a Scan-form kernel: work that is ordered along one axis and
/// independent across the other points (cumsum, cumprod, cummax, cummin, logcumsumexp, the
/// scatters: scatter_add, scatter_mul, scatter_max, scatter_min). Such a kernel has no
/// reductions and no map; its domain is the columns (the output's points off the axis), and
/// it has exactly one Store, of value ReduceResult(0) (of `dtype`, the output's dtype), whose
/// offset names the output element at position MapVar(0) along the axis. Per column:
///   * a running scan (`target` null): acc = the identity of `op` (ScanOp); for
///     s = 0, 1, ..., steps - 1 in order (ReduceVar(0) = s): acc = acc op value; then the
///     store runs with MapVar(0) = s and ReduceResult(0) = acc;
///   * a scatter (`target` set): first the store runs for MapVar(0) = p in [0, positions) with
///     ReduceResult(0) = the identity; then for s = 0, 1, ..., steps - 1 in order, with
///     p = target (at ReduceVar(0) = s): where 0 <= p < positions, the store runs with
///     MapVar(0) = p and ReduceResult(0) = (the output element there) op value. Other p
///     (reported by a Check in `target` where the index is checked) touch nothing.
///   * an argsort (`sort` set; graph op Argsort): the keys k_s = value at ReduceVar(0) = s for s in
///     [0, steps) (of `dtype`) are put in stable sorted order - ascending, or descending with
///     `descending` - where NaN sorts above every number, -0.0 equals +0.0 and false < true; for
///     each position p in [0, steps), the store runs with MapVar(0) = p and ReduceResult(0) (an i64,
///     not of `dtype`) = the s of the p-th key in that order. `op` is unused (Add). The order is a
///     function of the keys alone, so every backend gives the same positions: the CPU copies each
///     column's keys to scratch memory (sort_scratch_bytes(); buffers[buffers.size()] points at it,
///     64-byte aligned, as for the GEMM form) and merge-sorts them there (codegen/src/sort_runtime.h,
///     O(steps log steps) a column); CUDA gives each (column, s) a thread that counts the keys
///     before k_s (O(steps) each) and stores s at that position.
/// So the scatter's output is read back by the kernel: the one exception to "outputs are never
/// read". `op` applies without contraction or reassociation (a float Add is one rounded add per
/// step), so every backend and every column split gives the same bits. Work: steps (+
/// positions) per column.
struct ScanLoop {
  ScanOp op = ScanOp::Add;               ///< the combine (a scatter's: any but LogAddExp)
  DType dtype = DType::Float32;          ///< of value, the accumulator and the output
  ExprRef steps;                         ///< the sequential extent (i64)
  ExprRef value;                         ///< combined at step ReduceVar(0)
  ExprRef target;                        ///< a scatter's output position at step ReduceVar(0) (i64); null: a running scan
  ExprRef positions;                     ///< a scatter's extent of output positions (i64); null for a running scan
  /// The axis is the output's innermost (unit stride): the CPU then runs one column at a time,
  /// streaming along it, since a block of columns would touch kScanColumns far-apart rows per step.
  /// (An argsort goes column by column on the CPU either way.)
  bool inner_axis = false;
  bool sort = false;       ///< an argsort (see above): red0 is the i64 position of a key
  bool descending = false; ///< an argsort's order: largest first
};

/// Keys per block of an attention kernel's online softmax. It is part of the arithmetic (where the
/// running max and sum are rescaled), so it is fixed rather than tuned per target.
constexpr int64_t kAttentionKeyBlock = 64;
/// Query rows per task of a CPU attention kernel (a row's result does not depend on it).
constexpr int64_t kAttentionQueryBlock = 64;

/// An attention kernel (graph op Attention; the form Attention), which replaces the domain,
/// reductions and stores: for every batch point b < bh and query row i < l (rows are independent),
///   s_j = (sum over d < e of q[b, i, d] * k[b, j, d], fmuladd steps in order from d = 0) * scale,
///   then -inf where causal and j > i, then where(mask, s_j, -inf) (a bool mask) or s_j + mask
///   (a float one), the mask evaluated at LoopVar(0) = b, LoopVar(1) = i, ReduceVar(0) = j;
/// the keys in blocks of kAttentionKeyBlock, in order, with a running max m (from -inf), sum z
/// (from 0) and output row o (from 0): per block, m' = max(m, the block's s_j in order), c = m'
/// or 0 where m' is -inf, a = exp(m - c), p_j = exp(s_j - c), z = z * a + (the sum of the block's
/// p_j in sum_lanes() order over kAttentionKeyBlock terms, 0 for the keys past s),
/// o = o * a, then o += (p_j * z_j) * v[b, j, :] with z_j the dropout factor (the product left out
/// without dropout; fmuladd, in order of j; with causal only the keys j <= i,
/// so a key the row does not see never enters it, not even as 0 * v); m = m'. Finally
/// out[b, i, :] = o / z, or 0 where z is 0 (every key masked), and lse[b, i] = c + log(z) (-inf where
/// z is 0). Buffers q, k, v, out and lse are contiguous [bh, l, e], [bh, s, e], [bh, s, ev],
/// [bh, l, ev] and [bh, l]; out or lse may be absent (-1), not both (without out, no o is kept).
/// On the CPU the kernel's [begin, end) counts tasks: task t is batch point t / qb, query rows
/// [kAttentionQueryBlock * (t % qb), +kAttentionQueryBlock) with qb = ceil(l / kAttentionQueryBlock);
/// buffers[buffers.size()] points at attention_scratch_bytes() of 64-byte aligned scratch memory.
/// Inside a task, per key block: the block of k packed transposed; then per group of `rows` query
/// rows, their scores as vectors of kAttentionKeyBlock lanes (one fmuladd per d and row), the rows'
/// online-softmax steps, and o += p v by tiles of two 64-byte column vectors for the group together.
/// On CUDA (codegen/src/cuda_attention.cpp) a forward task is the same (batch point, query block); o is
/// kept in `out` and the backward's partial sums in dq, dk and dv: those outputs are read back there.
struct AttentionSpec {
  DType dtype = DType::Float32;    ///< of q, k, v, out and the arithmetic
  int q = -1, k = -1, v = -1;      ///< input buffers
  int out = -1;                    ///< the output buffer (-1: only lse is stored)
  int lse = -1;                    ///< the rows' logsumexp: an output of the forward (-1: not stored), an input of the backward
  ExprRef bh, l, s, e, ev;         ///< sizes: batch points, query rows, keys, q/k width, v width (i64)
  ExprRef scale;                   ///< the scores' factor (of dtype)
  bool causal = false;             ///< mask key j > query row i
  ExprRef mask;                    ///< null, or a bool keep-mask or an additive mask of dtype (see above)
  ExprRef dropout;                 ///< null, or the dropout factor of weight p_j (of dtype, evaluated
                                   ///< as the mask is: 0 for a dropped weight, build::dropout_scale(p) for a kept one)
  int64_t rows = 1;                ///< CPU: query rows whose scores accumulate together in vector registers
                                   ///< (1, 2 or 4; plan_form() from the target; never changes a result)
  /// The backward (graph op AttentionGrad; AttentionBackward below): `out` and `lse` are then inputs
  /// (the forward's), dout the adjoint of out, and dq, dk, dv the gradients written (-1: not written;
  /// at least one is).
  bool backward = false;
  int dout = -1, dq = -1, dk = -1, dv = -1; ///< the backward's buffers (dout [bh, l, ev], dq [bh, l, e],
                                            ///< dk [bh, s, e], dv [bh, s, ev], contiguous)
};
// AttentionBackward: the backward kernel (AttentionSpec::backward) of the same sizes, scale and mask.
// For every batch point b < bh, in this order:
//   per query row i, D_i = sum over c < ev of dout[b, i, c] * out[b, i, c] (fmuladd in order of c),
//   and L_i = lse[b, i], or +inf where it is -inf (every key masked: the row's p is then 0 and it
//   adds nothing);
//   dq, dk and dv of b are zeroed; then per key block (in order), the blocks of k and v packed
//   transposed, per query row i (in order; causal: rows i >= the block's first key), for the block's
//   keys j: s_j as in the forward (scaled, masked), p_j = exp(s_j - L_i),
//   dp_j = sum over c < ev of dout[b, i, c] * v[b, j, c] (fmuladd in order of c), times z_j with
//   dropout (the forward's factor),
//   g_j = (p_j * (dp_j - D_i)) * scale, or 0 where s_j is -inf (whatever dp_j holds, so the CPU
//   need not compute the dots of keys no row of a group sees);
//   then dv[b, j, :] += (p_j * z_j, or p_j without dropout) * dout[b, i, :],
//   dk[b, j, :] += g_j * q[b, i, :] (each fmuladd, j in order) and dq[b, i, :] += g_j * k[b, j, :]
//   (fmuladd in order of j); with causal, these three only for the pairs j <= i.
// On the CPU a task is a batch point; per key block, the query rows go by chunks of
// kAttentionQueryBlock: the chunk's p and g (AttentionSpec::rows rows through the block together),
// then dv and dk of the block's keys and dq of the chunk's rows as register tiles (a few keys or rows
// x 2 vectors of 64 bytes, accumulated over the chunk's rows or the block's keys). Neither changes a
// result: each element's fmuladds keep the order above. buffers[buffers.size()] points at
// attention_scratch_bytes() of scratch (the packed blocks, the chunk's p and g, and D of the batch
// point's rows).

/// A kernel: see the file comment for its semantics.
struct Kernel {
  std::string name;                   ///< "k_<description>_<hash>" (see finalize())
  std::vector<BufferParam> buffers;   ///< inputs and outputs, in argument order
  int num_params = 0;                 ///< number of i64 parameters
  std::vector<ExprRef> domain;        ///< parallel extents (i64 exprs)
  std::vector<Reduction> reductions;  ///< evaluated in order at each domain point
  std::vector<ExprRef> map;           ///< map extents (empty: the stores run once per domain point)
  std::vector<Store> stores;          ///< results
  std::optional<MatmulDims> matmul;   ///< set by lowering on a matmul kernel that may take the GEMM form
  KernelForm form = KernelForm::Elementwise; ///< how it is emitted (plan_form(); set before finalize())
  std::optional<GemmTiling> gemm;     ///< the GEMM form's layout, set exactly when form is Gemm (see GemmTiling)
  std::optional<ScanLoop> scan;       ///< the sequential loop, set exactly when form is Scan (see ScanLoop)
  std::optional<AttentionSpec> attention; ///< an attention kernel (then domain, reductions and stores are empty)
};

/// The rows and columns per task of the CPU GEMM-form kernel k at parameters `params`
/// (GemmTiling::mc_param and nc_param, else mc and nc).
std::pair<int64_t, int64_t> gemm_blocks(const Kernel& k, const std::vector<int64_t>& params);

/// Bytes of scratch a CPU GEMM-form kernel needs per call (packed panels and the tile accumulators); 0 for others.
int64_t gemm_scratch_bytes(const Kernel& k);
/// Where an argsort kernel's CPU scratch holds each part for a column of n keys (ScanLoop::sort): the
/// keys (of the key dtype's memory type) and a second array of them for the merges, then the
/// positions (i64) and a second array of them; byte offsets, each a multiple of 64.
struct SortScratch {
  int64_t keys = 0, keys_tmp = 0, idx = 0, idx_tmp = 0, bytes = 0;
};
SortScratch sort_scratch(DType key, int64_t n);
/// Bytes of scratch a CPU argsort kernel needs per call at launch parameters `params` (one column's
/// SortScratch, reused column after column); 0 for other kernels.
int64_t sort_scratch_bytes(const Kernel& k, const std::vector<int64_t>& params);
/// Bytes of scratch a CPU attention kernel needs per call at launch parameters `params` (a packed key
/// block, the block's scores, the query block's output rows, running maxima and sums); 0 for others.
int64_t attention_scratch_bytes(const Kernel& k, const std::vector<int64_t>& params);

// Builders. They assert dtype invariants (internal errors).
ExprRef constant(DType dtype, double value);      ///< floating (or any) constant from a double
ExprRef int_constant(DType dtype, int64_t value); ///< integer or bool constant
ExprRef index_const(int64_t v);                   ///< i64 constant
ExprRef loop_var(int d);                          ///< domain var d
ExprRef reduce_var(int k);                        ///< reduction var k
ExprRef map_var(int k);                           ///< map var k
ExprRef param(int k);                             ///< i64 parameter k
/// Scalar parameter k of `dtype` (not bool): slot k holds scalar_param_bits() of the value. Scalar
/// constants of the user's (a Const node: `x * lr`, `x + 1.5`, `idx + 1`, `full`) are parameters
/// rather than baked into the kernel (DESIGN.md, practice 8), so that kernels that differ only in
/// them are one compiled kernel. The bits are the constant's, so results are bitwise those of a
/// baked constant.
ExprRef scalar_param(int k, DType dtype);
/// The parameter slot of a scalar: an f64's bits, an f32's (the value rounded to f32, as a baked
/// constant is) in the low 32 bits, an integer's value.
int64_t scalar_param_bits(DType dtype, double value);
/// The parameter slot of Const node `n`'s value (its f0 for floats, its i0 for integers).
int64_t scalar_param_bits(const graph::Node& n);
ExprRef load(int buffer, DType dtype, ExprRef offset, ExprRef guard = nullptr); ///< buffer element
ExprRef op(ScalarOp op, DType dtype, std::vector<ExprRef> args); ///< elementwise op, result `dtype`
ExprRef cast(ExprRef x, DType to);                ///< conversion (identity when already `to`)
ExprRef reduce_result(int k, DType dtype);        ///< result of reduction k
/// A random number of distribution `dist` at (seed, counter), both i64 expressions. The lowering makes the
/// seed a kernel parameter, so that a new seed (dropout's mask each step) reuses the kernel.
ExprRef random(RandomDist dist, DType dtype, ExprRef seed, ExprRef counter);
/// `index` checked against [0, bound) for `site` (both i64), failures recorded in `error_buffer`.
ExprRef check(ExprRef index, ExprRef bound, ExprRef site, int error_buffer);

// Index arithmetic on i64 with constant folding (0 + x = x, 1 * x = x, ...).
ExprRef iadd(ExprRef a, ExprRef b); ///< a + b
ExprRef imul(ExprRef a, ExprRef b); ///< a * b
ExprRef isub(ExprRef a, ExprRef b); ///< a - b
ExprRef idiv(ExprRef a, ExprRef b); ///< a / b (non-negative)
ExprRef imod(ExprRef a, ExprRef b); ///< a % b (non-negative)
/// where(cond, a, b) on i64 with the additive terms both arms share taken out of it: where(c, x + t,
/// y + t) = where(c, x, y) + t. im2col's taps select among offsets that all add the innermost loop
/// var; outside the select, the select is invariant along the row and the load is contiguous.
ExprRef iselect(ExprRef cond, ExprRef a, ExprRef b);

/// The value of an i64 expression of parameters and constants (a size at launch); an internal
/// error for anything else (a loop var, a load).
int64_t eval_index(const ExprRef& e, const std::vector<int64_t>& params);

/// True when `e` mentions the variable (kind, index), or any expression of that kind for index
/// kAnyIndex (each shared subtree looked at once).
bool mentions(const ExprRef& e, ExprKind kind, int index);
inline constexpr int kAnyIndex = -1;

/// True when a and b agree in every field but their operands (kind, dtype, op, index, constants,
/// random distribution, number of operands); NaN constants agree.
bool same_node(const Expr& a, const Expr& b);

/// The constant coefficient of the variable (kind, index) in the affine i64 expression e (0 where e
/// does not mention it); nullopt when it is not a known constant (a parameter stride, a division, ...).
std::optional<int64_t> coefficient(const ExprRef& e, ExprKind kind, int index);

/// Appends the distinct loads reachable from e to `out`, in first-visit order (each shared subtree
/// once across calls with the same `seen`).
void collect_loads(const ExprRef& e, std::vector<const Expr*>& out, std::unordered_set<const Expr*>& seen);

/// True for a Const expression equal to v.
bool is_const(const ExprRef& e, int64_t v);

/// The kernel's text form (stable: it is hashed into the kernel's name).
std::string print_kernel(const Kernel& k);
/// The kernel that print_kernel printed as `text` (its name, buffers, domain, GEMM form, reductions,
/// map and stores; print_kernel of the result gives `text` back). A kernel without a `gemm` line
/// comes back unplanned (KernelForm::Elementwise): plan it for a target with set_form(plan_form())
/// before emitting it. Malformed or ill-typed text is a kiln::Error naming the line.
Kernel parse_kernel(std::string_view text);
/// What the kernel computes, from its form and ops, for its name: "gemm_add_relu_f32",
/// "softmax_f32", "sum_mul_f64", "copy_i64"; at most 5 words then "_etc", and its output's dtype.
std::string describe_kernel(const Kernel& k);
/// Sets k.name to "k_" + describe_kernel(k) + "_" + 12 hex digits of a hash of its text
/// form (a valid C, LLVM and CUDA identifier of at most about 80 characters); returns it.
/// The hash decides caching: the description is a function of the same text.
const std::string& finalize(Kernel& k);
/// 64-bit FNV-1a hash of a string (kernel names and cache keys).
uint64_t hash_text(const std::string& s);

} // namespace kiln::codegen
