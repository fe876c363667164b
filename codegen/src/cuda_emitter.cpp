// Kernel IR -> CUDA C++ (see cuda_emitter.h for the launch ABI and the numerics).
//
// Every compound expression becomes one `const T vN = ...;` statement, emitted once
// per scope where it is first needed (like the LLVM emitter's value cache), so
// shared subtrees are computed once and every op rounds on its own. The semantics of
// each op follow llvm_emitter.cpp; the helpers (kiln_add, kiln_max, kiln_exp_f32, ...)
// live in the prelude (cuda_math.cpp).
//
// The kernel's form (Kernel::form, planned by form.cpp) decides the layout: a Gemm-form
// kernel becomes the shared-memory tiled GEMM of emit_gemm() (layout and sizes in
// cuda_emitter.h); a Row-form kernel gets 16 threads per row (emit_rows()); an attention
// kernel is cuda_attention.cpp's, which evaluates the mask through this writer (CudaBody);
// every other kernel is a grid-stride loop over its domain (emit_domain()).
#include "codegen/cuda_emitter.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <algorithm>
#include <functional>
#include <limits>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "codegen/form.h"
#include "codegen/src/cuda_attention.h"
#include "codegen/src/cuda_math.h"
#include "kiln/error.h"

namespace kiln::codegen {


namespace {

/// prefix followed by a number ("v12"), built by appends: GCC 12 misreports
/// -Wrestrict on `"v" + std::to_string(i)`.
std::string numbered(const char* prefix, long long i) {
  std::string s(prefix);
  return s.append(std::to_string(i));
}

/// The C++ type of a value of dtype t in registers.
std::string reg_type(DType t) {
  switch (t) {
  case DType::Bool: return "bool";
  case DType::Int32: return "int";
  case DType::Int64: return "long long";
  case DType::Float32: return "float";
  case DType::Float64: return "double";
  }
  return "?";
}

/// The C++ type of an element of dtype t in memory (bool is one byte, 0 or 1).
std::string mem_type(DType t) { return t == DType::Bool ? "unsigned char" : reg_type(t); }

/// "_f32" / "_f64": the suffix of the prelude's math functions.
std::string fsuffix(DType t) { return t == DType::Float64 ? "_f64" : "_f32"; }

/// An exact literal of a float value (hex float; non-finite values through their bits).
std::string float_literal(DType t, double v) {
  char buf[64];
  if (t == DType::Float32) {
    const float f = static_cast<float>(v);
    if (!std::isfinite(f)) {
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      std::snprintf(buf, sizeof buf, "__int_as_float((int)0x%08xu)", bits);
      return buf;
    }
    std::snprintf(buf, sizeof buf, "%af", static_cast<double>(f));
  } else {
    if (!std::isfinite(v)) {
      uint64_t bits;
      std::memcpy(&bits, &v, 8);
      std::snprintf(buf, sizeof buf, "__longlong_as_double((long long)0x%016llxull)", static_cast<unsigned long long>(bits));
      return buf;
    }
    std::snprintf(buf, sizeof buf, "%a", v);
  }
  return std::signbit(v) ? "(" + std::string(buf) + ")" : std::string(buf);
}

/// A literal of an integer or bool value of dtype t.
std::string int_literal(DType t, int64_t v) {
  if (t == DType::Bool) return v ? "true" : "false";
  if (t == DType::Int32) {
    const auto x = static_cast<int32_t>(v);
    if (x == std::numeric_limits<int32_t>::min()) return "(-2147483647 - 1)";
    return x < 0 ? "(" + std::to_string(x) + ")" : std::to_string(x);
  }
  if (v == std::numeric_limits<int64_t>::min()) return "(-9223372036854775807LL - 1)";
  return v < 0 ? "(" + std::to_string(v) + "LL)" : std::to_string(v) + "LL";
}

std::string zero(DType t) { return is_floating(t) ? float_literal(t, 0) : int_literal(t, 0); }

/// A float Sum of a product that may contract (matmul): acc = fma(a, b, acc).
bool is_fma_reduction(const Reduction& r) {
  return r.fma && r.op == ReduceOp::Sum && is_floating(r.dtype) && r.value->kind == ExprKind::Op &&
         r.value->op == ScalarOp::Mul;
}

/// Lanes of the vector form of an elementwise kernel.
constexpr int kVectorWidth = 4;

/// Whether an access of dtype t at `offset` belongs in the vector form: f32, and one
/// element further per step of the innermost loop var (its coefficient is exactly 1).
bool is_wide_access(DType t, const ExprRef& offset, int last) {
  return t == DType::Float32 && coefficient(offset, ExprKind::LoopVar, last) == std::optional<int64_t>(1);
}

/// The unguarded f32 loads of a kernel's stores that the vector form reads 4 at a time.
std::vector<const Expr*> wide_loads(const Kernel& k) {
  std::vector<const Expr*> loads, wide;
  std::unordered_set<const Expr*> seen;
  for (const Store& s : k.stores) {
    collect_loads(s.offset, loads, seen);
    collect_loads(s.value, loads, seen);
  }
  const int last = static_cast<int>(k.domain.size()) - 1;
  for (const Expr* l : loads)
    if (l->args.size() == 1 && is_wide_access(l->dtype, l->args[0], last)) wide.push_back(l);
  return wide;
}

/// An Elementwise-form kernel with an f32 access that steps by one element along the
/// innermost loop var: it gets the vector form.
bool is_vector_map(const Kernel& k) {
  if (k.form != KernelForm::Elementwise || !k.map.empty() || k.domain.empty()) return false;
  const int last = static_cast<int>(k.domain.size()) - 1;
  for (const Store& s : k.stores)
    if (is_wide_access(k.buffers[s.buffer].dtype, s.offset, last)) return true;
  return !wide_loads(k).empty();
}

/// Whether the first load of `operand` whose offset moves with (kind, index) moves by
/// one element per step: then the threads that stage the operand should run along it.
bool unit_stride(const ExprRef& operand, ExprKind kind, int index) {
  if (operand->kind == ExprKind::Load && mentions(operand->args.at(0), kind, index))
    return coefficient(operand->args[0], kind, index) == std::optional<int64_t>(1);
  for (const ExprRef& a : operand->args)
    if (mentions(a, kind, index)) return unit_stride(a, kind, index);
  return false;
}

/// The first failed index check of a kernel: {site + 1, index} into its error buffer (kernel_ir.h, ExprKind::Check).
constexpr const char* kCheckHelper =
    "#ifndef KILN_CUDA_CHECK_HELPER\n#define KILN_CUDA_CHECK_HELPER\n"
    "__device__ __forceinline__ long long kiln_check(long long v, long long n, long long site, long long* err) {\n"
    "  if ((unsigned long long)v >= (unsigned long long)n &&\n"
    "      atomicCAS((unsigned long long*)err, 0ull, (unsigned long long)(site + 1)) == 0ull)\n"
    "    err[1] = v;\n"
    "  return v;\n"
    "}\n#endif\n";

bool has_error_buffer(const Kernel& k) {
  return std::any_of(k.buffers.begin(), k.buffers.end(), [](const BufferParam& b) { return b.error; });
}

/// The tiled GEMM's shape for a dtype (see cuda_emitter.h): a block of 16 x 16 threads
/// computes a tm x tn output tile, each thread an mr x nr register tile (see vec4),
/// over k tiles of bk staged (double-buffered) in shared memory.
struct GemmTile {
  int tm, tn, bk, mr, nr, pad; ///< pad: extra elements per shared row (bank conflicts)
  /// Whether a thread's rows (columns) come in runs of 4 adjacent ones, read from
  /// shared memory as one 16-byte kiln_f4 (rows 64 q + 4 ty + 0..3 for q < mr / 4);
  /// else at a stride of 16 (rows ty + 16 i). Either way each output element is the
  /// same chain of fmas in k order: only which thread computes it changes.
  bool vec4 = false;
};

constexpr int kGemmThreads = 256;

/// The tile of a dtype; `small`: f32's tile for products of few large tiles (f64's tile
/// is already that size).
GemmTile gemm_tile(DType t, bool small = false) {
  if (t == DType::Float64) return {64, 64, 16, 4, 4, 1};
  if (small) return {64, 64, 16, 4, 4, 4, true}; // rows of 68 floats: 16-byte aligned
  return {128, 128, 8, 8, 8, 4, true};
}

/// The offset in a tile of a thread's element e (< mr or nr) along one side, t its
/// thread coordinate on that side (ty or tx); see GemmTile::vec4.
std::string tile_offset(const GemmTile& g, const std::string& t, const std::string& e) {
  if (!g.vec4) return t + " + " + e + " * 16";
  return "(" + e + " / 4) * 64 + " + t + " * 4 + " + e + " % 4";
}

/// f32 products of fewer large tiles than this use the small tile (4 times the blocks).
int g_small_gemm_below = 64;

/// Whether a product of `batch` matrices of m x n uses the small tile; the kernel makes
/// the same decision from its parameters (emit_gemm).
bool small_gemm(DType t, int64_t batch, int64_t m, int64_t n) {
  const GemmTile big = gemm_tile(t);
  return t == DType::Float32 && batch * ((m + big.tm - 1) / big.tm) * ((n + big.tn - 1) / big.tn) < g_small_gemm_below;
}

/// Static shared memory of one tile's kernel body: two buffers of each operand's k tile.
int64_t gemm_shared_bytes(DType t, bool small) {
  const GemmTile g = gemm_tile(t, small);
  return 2 * int64_t{g.bk} * ((g.tm + g.pad) + (g.tn + g.pad)) * (t == DType::Float64 ? 8 : 4);
}

/// Threads per row of a Row-form kernel (see cuda_emitter.h).
constexpr int kRowThreads = kCudaRowThreads;

/// Whether k's form fits its IR (plan_form() guarantees it; a hand-made kernel may not).
bool form_fits(const Kernel& k) {
  switch (k.form) {
  case KernelForm::Elementwise: return k.reductions.empty() && !k.gemm;
  case KernelForm::Reduction: return !k.reductions.empty() && !k.gemm;
  case KernelForm::Row: return !k.reductions.empty() && !k.gemm;
  case KernelForm::Gemm: return k.gemm && k.reductions.size() == 1 && is_fma_reduction(k.reductions[0]) && k.map.empty();
  case KernelForm::Scan: return k.scan && k.reductions.empty() && k.map.empty() && !k.gemm && k.stores.size() == 1;
  case KernelForm::Attention: return k.attention && k.domain.empty() && k.reductions.empty() && k.stores.empty() && !k.gemm;
  case KernelForm::Columns: return false;   // a CPU loop structure: plan_form gives CUDA targets the Reduction form
  }
  return false;
}

class CudaWriter : public CudaBody {
public:
  explicit CudaWriter(const Kernel& k) : k_(k) {}

  std::string emit() {
    KILN_ASSERT(!k_.name.empty(), "kernel not finalize()d");
    std::string head;
    if (has_error_buffer(k_)) head += kCheckHelper;
    KILN_ASSERT(form_fits(k_), std::string("kernel ") + k_.name + " does not fit its form " + form_name(k_.form));
    const bool tiled = k_.form == KernelForm::Gemm, rows = k_.form == KernelForm::Row, attention = k_.form == KernelForm::Attention;
    if (attention) head += cuda_attention_helpers();
    head += "extern \"C\" __global__ void " + std::string(tiled || rows || attention ? "__launch_bounds__(256) " : "") +
            k_.name + "(" + signature() + ") {\n";
    scopes_.emplace_back();
    if (tiled) emit_gemm();
    else if (rows) emit_rows();
    else if (attention) emit_attention();
    else if (k_.form == KernelForm::Scan && k_.scan->sort) emit_sort();
    else emit_domain();
    scopes_.pop_back();
    const std::string code = head + body_ + "}\n";
    return "// kiln kernel " + k_.name + " as CUDA C++ (generated by codegen/src/cuda_emitter.cpp)\n" +
           cuda_prelude_for(code) + code;
  }

private:
  using Scope = std::unordered_map<const Expr*, std::string>;

  const Kernel& k_;
  std::string body_;
  int depth_ = 1;                // indentation level
  int next_ = 0;                 // next value number
  std::vector<Scope> scopes_;    // names of computed expressions, innermost last
  int reduce_rank_ = -1;         // extents of the reduction being emitted (-1: none)
  int map_rank_ = -1;            // map extents in scope (-1: none)
  int results_ = 0;              // reductions whose result is in scope
  std::string lane_var_;         // the innermost loop var's value in a vector lane ("" outside)

  void line(const std::string& s) override { body_ += std::string(2 * depth_, ' ') + s + "\n"; }
  void open(const std::string& s) override {
    line(s.empty() ? "{" : s + " {");
    ++depth_;
    scopes_.emplace_back();
  }
  void close() override {
    scopes_.pop_back();
    --depth_;
    line("}");
  }

  std::string signature() const {
    std::string s;
    for (size_t b = 0; b < k_.buffers.size(); ++b) {
      const BufferParam& p = k_.buffers[b];
      s += (b ? ", " : "") + std::string(p.output || p.error ? "" : "const ") + mem_type(p.dtype) + "* __restrict__ b" +
           std::to_string(b);
    }
    for (int p = 0; p < k_.num_params; ++p) s += ", long long p" + std::to_string(p);
    return s;
  }

  // --- structure ---------------------------------------------------------------

  /// An attention kernel (cuda_attention.cpp): its mask reads LoopVar(0), LoopVar(1) and ReduceVar(0).
  void emit_attention() {
    reduce_rank_ = 1;
    emit_cuda_attention(k_, *this);
    reduce_rank_ = -1;
  }

  /// Domain loop vars in scope: an attention kernel has two (batch point, query row) and no domain.
  int loop_rank() const { return k_.attention ? 2 : static_cast<int>(k_.domain.size()); }

  /// The grid-stride loop over the flattened domain; the flat index is split into the
  /// loop vars row-major (last fastest), as on the CPU.
  void emit_domain() {
    line("const long long n = " + emit_domain_extents() + ";");
    line("const long long stride = (long long)blockDim.x * gridDim.x;");
    const bool vector = is_vector_map(k_);
    if (vector) {
      open("if (e" + std::to_string(k_.domain.size() - 1) + " % " + std::to_string(kVectorWidth) + " == 0)");
      emit_vector_loop();
      close();
      open("else");
    }
    open("for (long long flat = (long long)blockIdx.x * blockDim.x + threadIdx.x; flat < n; flat += stride)");
    if (!k_.domain.empty()) line("unsigned long long rest = (unsigned long long)flat;");
    emit_split_index();
    emit_point();
    close();
    if (vector) close();
  }

  /// The vector form of an elementwise kernel, for an innermost extent divisible by 4:
  /// each thread takes 4 consecutive points of a row per step of its grid-stride loop,
  /// reads each wide load with one kiln_load4 and writes each wide store with one
  /// kiln_store4 (128-bit accesses where aligned, else 4 scalar ones); every lane computes
  /// exactly the scalar form's expression for its point, so results are the same bits.
  void emit_vector_loop() {
    const int last = static_cast<int>(k_.domain.size()) - 1;
    const std::string width = std::to_string(kVectorWidth);
    open("for (long long flat = ((long long)blockIdx.x * blockDim.x + threadIdx.x) * " + width +
         "; flat < n; flat += stride * " + width + ")");
    line("unsigned long long rest = (unsigned long long)flat;");
    emit_split_index(); // the innermost var is the first lane's
    // Addresses at the first lane, in a scope of their own: they depend on the innermost var.
    scopes_.emplace_back();
    std::vector<std::pair<const Expr*, std::string>> loads;
    for (const Expr* l : wide_loads(k_)) {
      const std::string w = numbered("w", static_cast<long long>(loads.size()));
      line("const kiln_f4 " + w + " = kiln_load4(" + numbered("b", l->index) + " + " + ref(l->args[0]) + ");");
      loads.emplace_back(l, w);
    }
    std::vector<std::string> out(k_.stores.size()); // the kiln_f4 of each wide store ("" for the others)
    for (size_t s = 0; s < k_.stores.size(); ++s) {
      const Store& st = k_.stores[s];
      if (!is_wide_access(k_.buffers[st.buffer].dtype, st.offset, last)) continue;
      out[s] = numbered("o", static_cast<long long>(s));
      line("float* const " + out[s] + "_at = " + numbered("b", st.buffer) + " + " + ref(st.offset) + ";");
      line("kiln_f4 " + out[s] + ";");
    }
    scopes_.pop_back();
    static const char* lane_field[] = {".x", ".y", ".z", ".w"};
    for (int lane = 0; lane < kVectorWidth; ++lane) {
      open("");
      const std::string first = "i" + std::to_string(last);
      lane_var_ = lane ? "(" + first + " + " + std::to_string(lane) + "LL)" : first;
      for (const auto& [l, w] : loads) scopes_.back()[l] = w + lane_field[lane];
      for (size_t s = 0; s < k_.stores.size(); ++s) {
        if (out[s].empty()) emit_store(k_.stores[s]);
        else line(out[s] + lane_field[lane] + " = " + ref(k_.stores[s].value) + ";");
      }
      lane_var_.clear();
      close();
    }
    for (const std::string& o : out)
      if (!o.empty()) line("kiln_store4(" + o + "_at, " + o + ");");
    close();
  }

  /// Declares e0, e1, ... (the domain's extents); returns their product as an expression.
  std::string emit_domain_extents() {
    std::string n = "1LL";
    for (size_t d = 0; d < k_.domain.size(); ++d) {
      line("const long long e" + std::to_string(d) + " = " + ref(k_.domain[d]) + ";");
      n = d ? n + " * e" + std::to_string(d) : "e0";
    }
    return n;
  }

  /// Splits the flat index `rest` (declared by the caller) into the loop vars i0, i1, ...
  /// row-major (last fastest), as on the CPU.
  void emit_split_index() {
    const size_t rank = k_.domain.size();
    for (size_t d = rank; d-- > 1;) {
      const std::string e = "(unsigned long long)e" + std::to_string(d);
      line("const long long i" + std::to_string(d) + " = (long long)(rest % " + e + ");");
      line("rest /= " + e + ";");
    }
    if (rank > 0) line("const long long i0 = (long long)rest;");
  }

  // --- the tiled GEMM ----------------------------------------------------------

  /// A GEMM-form kernel as a shared-memory tiled GEMM (see cuda_emitter.h). A grid-stride
  /// loop over output tiles t = (batch * mtiles + mt) * ntiles + nt; per tile, k tiles in
  /// order, double-buffered: iteration kt loads k tile kt into registers (through the
  /// operands' own expressions, zero outside the matrices), multiplies k tile kt - 1 from
  /// shared buffer (kt - 1) & 1, stores the registers into buffer kt & 1, then one
  /// __syncthreads. Each output element accumulates fma(a, b, acc) over k in order from
  /// 0 (k within the last tile bounded by K, never padded), as the LLVM path does; then
  /// the kernel's stores run for it.
  void emit_gemm() {
    const Reduction& r = k_.reductions[0];
    const GemmTiling& form = *k_.gemm;
    std::vector<int> batch_vars;
    for (int d = 0; d < static_cast<int>(k_.domain.size()); ++d)
      if (d != form.m_var && d != form.n_var) batch_vars.push_back(d);
    line("if (blockDim.x != " + std::to_string(kGemmThreads) + ") __trap(); // the tiling needs exactly this block");
    line("const long long M = " + (form.m_var >= 0 ? ref(k_.domain[form.m_var]) : std::string("1LL")) + ";");
    line("const long long N = " + (form.n_var >= 0 ? ref(k_.domain[form.n_var]) : std::string("1LL")) + ";");
    line("const long long K = " + ref(r.extents[0]) + ";");
    std::string batch = "1LL";
    for (size_t v = 0; v < batch_vars.size(); ++v) {
      const std::string e = numbered("e", batch_vars[v]);
      line("const long long " + e + " = " + ref(k_.domain[batch_vars[v]]) + ";");
      batch = v ? batch + " * " + e : e;
    }
    line("const int tx = (int)(threadIdx.x % 16u), ty = (int)(threadIdx.x / 16u);");
    if (r.dtype != DType::Float32) return emit_gemm_tiles(gemm_tile(r.dtype), batch_vars, batch);
    // f32: the small tile for products of few large tiles (small_gemm(), same rule on the host).
    const GemmTile big = gemm_tile(r.dtype);
    const std::string TM = std::to_string(big.tm), TN = std::to_string(big.tn);
    open("if (" + batch + " * ((M + " + TM + " - 1) / " + TM + ") * ((N + " + TN + " - 1) / " + TN + ") < " +
         std::to_string(g_small_gemm_below) + "LL)");
    emit_gemm_tiles(gemm_tile(r.dtype, true), batch_vars, batch);
    close();
    open("else");
    emit_gemm_tiles(big, batch_vars, batch);
    close();
  }

  /// The tiled GEMM's body for tile g, after emit_gemm's M, N, K, batch extents, tx, ty.
  void emit_gemm_tiles(const GemmTile& g, const std::vector<int>& batch_vars, const std::string& batch) {
    const Reduction& r = k_.reductions[0];
    const GemmTiling& form = *k_.gemm;
    const std::string T = reg_type(r.dtype), z = zero(r.dtype);
    const std::string TM = std::to_string(g.tm), TN = std::to_string(g.tn), BK = std::to_string(g.bk);
    const std::string MR = std::to_string(g.mr), NR = std::to_string(g.nr);
    const int stage_a = g.tm * g.bk / kGemmThreads, stage_b = g.bk * g.tn / kGemmThreads;
    const ExprRef& a = r.value->args[0];
    const ExprRef& b = r.value->args[1];
    // Threads stage an operand along the dim it is contiguous in (coalesced loads).
    const bool a_kfast = unit_stride(a, ExprKind::ReduceVar, 0);
    const bool b_kfast = !(form.n_var >= 0 && unit_stride(b, ExprKind::LoopVar, form.n_var)) &&
                         unit_stride(b, ExprKind::ReduceVar, 0);
    line("const long long mtiles = (M + " + TM + " - 1) / " + TM + ", ntiles = (N + " + TN + " - 1) / " + TN + ";");
    line("const long long tiles = " + (batch == "1LL" ? std::string() : batch + " * ") + "mtiles * ntiles, ktiles = (K + " + BK + " - 1) / " + BK + ";");
    line("__shared__ __align__(16) " + T + " As[2][" + BK + "][" + std::to_string(g.tm + g.pad) + "];");
    line("__shared__ __align__(16) " + T + " Bs[2][" + BK + "][" + std::to_string(g.tn + g.pad) + "];");
    open("for (long long tile = blockIdx.x; tile < tiles; tile += gridDim.x)");
    line("long long rest = tile;");
    line("const long long tn0 = rest % ntiles * " + TN + ";");
    line("rest /= ntiles;");
    line("const long long tm0 = rest % mtiles * " + TM + ";");
    line("rest /= mtiles;");
    for (size_t v = batch_vars.size(); v-- > 0;) {
      const std::string i = numbered("i", batch_vars[v]), e = numbered("e", batch_vars[v]);
      const bool used = kernel_mentions(ExprKind::LoopVar, batch_vars[v]);
      if (v == 0) {
        if (used) line("const long long " + i + " = rest;");
      } else {
        if (used) line("const long long " + i + " = rest % " + e + ";");
        line("rest /= " + e + ";");
      }
    }
    line(T + " acc[" + MR + "][" + NR + "];");
    line("#pragma unroll");
    open("for (int i = 0; i < " + MR + "; ++i)");
    line("#pragma unroll");
    line("for (int j = 0; j < " + NR + "; ++j) acc[i][j] = " + z + ";");
    close();
    line(T + " ra[" + std::to_string(stage_a) + "], rb[" + std::to_string(stage_b) + "];");
    open("for (long long kt = 0; kt <= ktiles; ++kt)");
    open("if (kt < ktiles)");
    emit_stage_load(a, "ra", stage_a, a_kfast, g.tm, g.bk, form.m_var, "tm0", "M");
    emit_stage_load(b, "rb", stage_b, b_kfast, g.tn, g.bk, form.n_var, "tn0", "N");
    close();
    open("if (kt > 0)");
    line("const int cur = (int)((kt - 1) & 1);");
    // k steps of this tile: BK, fewer in the last one (never padded). One loop body
    // (not unrolled over kk) keeps the NVRTC compile short: MR x NR FMAs per MR + NR loads.
    line("const long long left = K - (kt - 1) * " + BK + ";");
    line("const int kn = left < " + BK + " ? (int)left : " + BK + ";");
    open("for (int kk = 0; kk < kn; ++kk)");
    emit_tile_step(g, r.dtype);
    close();
    close();
    open("if (kt < ktiles)");
    line("const int nxt = (int)(kt & 1);");
    emit_stage_store("As", "ra", stage_a, a_kfast, g.tm, g.bk);
    emit_stage_store("Bs", "rb", stage_b, b_kfast, g.tn, g.bk);
    close();
    line("__syncthreads();");
    close();
    // The epilogue: the kernel's stores for each element of the thread's tile inside the output.
    line("#pragma unroll");
    open("for (int i = 0; i < " + MR + "; ++i)");
    line("const long long row = tm0 + " + tile_offset(g, "ty", "i") + ";");
    if (form.m_var >= 0 && stores_mention(form.m_var)) line("const long long " + numbered("i", form.m_var) + " = row;");
    open("if (row < M)");
    line("#pragma unroll");
    open("for (int j = 0; j < " + NR + "; ++j)");
    line("const long long col = tn0 + " + tile_offset(g, "tx", "j") + ";");
    if (form.n_var >= 0 && stores_mention(form.n_var)) line("const long long " + numbered("i", form.n_var) + " = col;");
    open("if (col < N)");
    line("const " + T + " red0 = acc[i][j];");
    results_ = 1;
    emit_stores();
    results_ = 0;
    close();
    close();
    close();
    close();
    close(); // tiles
  }

  /// Whether the kernel's stores read domain var d.
  bool stores_mention(int d) const {
    for (const Store& st : k_.stores)
      if (mentions(st.offset, ExprKind::LoopVar, d) || mentions(st.value, ExprKind::LoopVar, d)) return true;
    return false;
  }

  /// Whether the reductions or the stores read the variable (kind, index).
  bool kernel_mentions(ExprKind kind, int index) const {
    for (const Reduction& r : k_.reductions)
      if (mentions(r.value, kind, index)) return true;
    for (const Store& st : k_.stores)
      if (mentions(st.offset, kind, index) || mentions(st.value, kind, index)) return true;
    return false;
  }

  /// Loads this thread's elements of an operand's k tile kt into registers `regs`:
  /// element e = threadIdx.x + 256 s of the bk x extent tile, k fastest (kfast) or the
  /// row/column fastest; 0 outside the matrix (not loaded there).
  void emit_stage_load(const ExprRef& operand, const char* regs, int count, bool kfast, int extent, int bk, int var,
                       const char* origin, const char* size) {
    const std::string E = std::to_string(extent), BK = std::to_string(bk);
    line("#pragma unroll");
    open("for (int s = 0; s < " + std::to_string(count) + "; ++s)");
    line("const int e = (int)threadIdx.x + s * " + std::to_string(kGemmThreads) + ";");
    line(kfast ? "const int kk = e % " + BK + ", x = e / " + BK + ";" : "const int x = e % " + E + ", kk = e / " + E + ";");
    line("const long long r0 = kt * " + BK + " + kk;");
    if (var >= 0 && mentions(operand, ExprKind::LoopVar, var))
      line("const long long " + numbered("i", var) + " = " + origin + " + x;");
    line(reg_type(operand->dtype) + " val = " + zero(operand->dtype) + ";");
    open("if (" + std::string(origin) + " + x < " + size + " && r0 < K)");
    reduce_rank_ = 1;
    line("val = " + ref(operand) + ";");
    reduce_rank_ = -1;
    close();
    line(std::string(regs) + "[s] = val;");
    close();
  }

  /// Stores the staged registers into shared buffer `nxt` of an operand (layout [k][x]).
  void emit_stage_store(const char* shared, const char* regs, int count, bool kfast, int extent, int bk) {
    const std::string E = std::to_string(extent), BK = std::to_string(bk);
    line("#pragma unroll");
    open("for (int s = 0; s < " + std::to_string(count) + "; ++s)");
    line("const int e = (int)threadIdx.x + s * " + std::to_string(kGemmThreads) + ";");
    line(kfast ? "const int kk = e % " + BK + ", x = e / " + BK + ";" : "const int x = e % " + E + ", kk = e / " + E + ";");
    line(std::string(shared) + "[nxt][kk][x] = " + regs + "[s];");
    close();
  }

  /// One k step of the thread's register tile from shared buffer `cur`.
  void emit_tile_step(const GemmTile& g, DType dt) {
    const std::string T = reg_type(dt), MR = std::to_string(g.mr), NR = std::to_string(g.nr);
    line(T + " av[" + MR + "], bv[" + NR + "];");
    line("#pragma unroll");
    if (g.vec4) {
      for (const auto& [reg, sh, t, n] : {std::tuple{"av", "As", "ty", g.mr}, std::tuple{"bv", "Bs", "tx", g.nr}}) {
        open("for (int q = 0; q < " + std::to_string(n / 4) + "; ++q)");
        line("const kiln_f4 f = *reinterpret_cast<const kiln_f4*>(&" + std::string(sh) + "[cur][kk][q * 64 + " + t + " * 4]);");
        line(std::string(reg) + "[4 * q] = f.x; " + reg + "[4 * q + 1] = f.y; " + reg + "[4 * q + 2] = f.z; " + reg +
             "[4 * q + 3] = f.w;");
        close();
        if (reg == std::string("av")) line("#pragma unroll");
      }
    } else {
      line("for (int i = 0; i < " + MR + "; ++i) av[i] = As[cur][kk][ty + i * 16];");
      line("#pragma unroll");
      line("for (int j = 0; j < " + NR + "; ++j) bv[j] = Bs[cur][kk][tx + j * 16];");
    }
    line("#pragma unroll");
    open("for (int i = 0; i < " + MR + "; ++i)");
    line("#pragma unroll");
    line("for (int j = 0; j < " + NR + "; ++j) acc[i][j] = " + (dt == DType::Float32 ? "fmaf" : "fma") +
         "(av[i], bv[j], acc[i][j]);");
    close();
  }

  // --- row kernels -------------------------------------------------------------

  /// A row kernel: a group of 16 threads per domain point (row), 16 rows per block of
  /// 256, a grid-stride loop over blocks of rows (uniform across the block: threads past
  /// the last row compute row 0 and store nothing, so every thread reaches every shuffle).
  /// Float sums (sum_lanes order) are split across the group: thread g < lanes computes
  /// lane g (the elements k = g, g + lanes, ... in order, from 0), the lanes are combined
  /// pairwise with __shfl_down_sync (lane l += lane l + h, h = lanes/2, ..., 1) and lane 0's
  /// sum is broadcast: the same operations in the same order as the sequential code.
  /// Max and min over one dim are split across the group too (emit_row_lane_extreme).
  /// Short sums (n < lanes) and the other reductions (arg*, integer and block_inner
  /// sums, several reduction dims) are computed by every thread of the group,
  /// sequentially, so all hold the same bits; the map's points are then split across the group.
  void emit_rows() {
    const size_t rank = k_.domain.size();
    const std::string G = std::to_string(kRowThreads), R = std::to_string(kGemmThreads / kRowThreads);
    line("if (blockDim.x != " + std::to_string(kGemmThreads) + ") __trap(); // 16 rows of 16 threads");
    line("const long long rows = " + emit_domain_extents() + ";");
    line("const int g = (int)(threadIdx.x % " + G + "u);");
    open("for (long long base = (long long)blockIdx.x * " + R + "; base < rows; base += (long long)gridDim.x * " + R + ")");
    line("const long long row = base + (long long)(threadIdx.x / " + G + "u);");
    line("const bool active = row < rows;");
    if (rank > 0) line("unsigned long long rest = active ? (unsigned long long)row : 0ull;");
    emit_split_index();
    results_ = 0;
    for (size_t r = 0; r < k_.reductions.size(); ++r) {
      if (sums_in_lanes(k_.reductions[r])) emit_row_lane_sum(k_.reductions[r], static_cast<int>(r));
      else if (extreme_in_lanes(k_.reductions[r])) emit_row_lane_extreme(k_.reductions[r], static_cast<int>(r));
      else emit_reduction(k_.reductions[r], static_cast<int>(r));
      results_ = static_cast<int>(r) + 1;
    }
    if (k_.map.empty()) { // reductions alone: the row's first thread stores them
      open("if (active && g == 0)");
      emit_stores();
      close();
      close();
      return;
    }
    std::vector<std::string> ext;
    for (const ExprRef& e : k_.map) ext.push_back(ref(e));
    std::string total = ext[0];
    for (size_t m = 1; m < ext.size(); ++m) total += " * " + ext[m];
    line("const long long mtotal = " + total + ";");
    open("for (long long mflat = g; mflat < mtotal; mflat += " + G + ")");
    map_rank_ = static_cast<int>(ext.size());
    if (ext.size() > 1) line("long long mrest = mflat;");
    for (size_t m = ext.size(); m-- > 1;) {
      line("const long long " + numbered("m", m) + " = mrest % " + ext[m] + ";");
      line("mrest /= " + ext[m] + ";");
    }
    line(std::string("const long long m0 = ") + (ext.size() > 1 ? "mrest;" : "mflat;"));
    open("if (active)");
    emit_stores();
    close();
    map_rank_ = -1;
    close();
    close();
  }

  /// A float sum split across the row's thread group (see emit_rows); defines red<index>.
  void emit_row_lane_sum(const Reduction& r, int index) {
    KILN_ASSERT(r.value->dtype == r.dtype, "reduction dtype mismatch in " + k_.name);
    const std::string t = reg_type(r.dtype), zero_ = zero(r.dtype), lanes = std::to_string(sum_lanes(r.dtype));
    const std::string id = std::to_string(index), acc = "acc" + id, lane = "lane" + id;
    reduce_rank_ = static_cast<int>(r.extents.size());
    line(t + " " + acc + " = " + zero_ + ";");
    emit_lane_sum_runs(r, acc, id, [&](const std::string& n, const std::string& k, const std::string& part) {
      line(t + " " + lane + " = " + zero_ + ";");
      open("for (long long " + k + " = g; g < " + lanes + " && " + k + " < " + n + "; " + k + " += " + lanes + ")");
      sum_step(r, lane);
      close();
      line("for (int h = " + lanes + " / 2; h >= 1; h /= 2) " + lane + " = " + lane + " + __shfl_down_sync(0xffffffffu, " +
           lane + ", h, " + std::to_string(kRowThreads) + ");");
      line(part + " = __shfl_sync(0xffffffffu, " + lane + ", 0, " + std::to_string(kRowThreads) + ");");
    });
    reduce_rank_ = -1;
    line("const " + t + " red" + id + " = " + acc + ";");
  }

  /// A max or min over one reduction dim, of a dtype a shuffle carries: such a reduction
  /// is exact and free of order (kiln_max orders -0 < +0; a NaN gives a NaN), so the
  /// row's group can split it and still hold the sequential result's bits.
  static bool extreme_in_lanes(const Reduction& r) {
    const ReduceOp kind = r.op;
    if (kind != ReduceOp::Max && kind != ReduceOp::Min) return false;
    if (r.extents.size() != 1 || is_fma_reduction(r)) return false;
    return r.dtype == DType::Float32 || r.dtype == DType::Float64 || r.dtype == DType::Int32 ||
           r.dtype == DType::Int64;
  }

  /// A max or min split across the row's group (see extreme_in_lanes): thread g takes the
  /// elements g, g + group, ...; a butterfly of __shfl_xor_sync leaves the result in every
  /// thread. Defines red<index>.
  void emit_row_lane_extreme(const Reduction& r, int index) {
    const ReduceOp kind = r.op;
    const std::string t = reg_type(r.dtype), id = std::to_string(index), acc = "acc" + id, G = std::to_string(kRowThreads);
    line(t + " " + acc + " = " + reduction_init(kind, r.dtype) + ";");
    const std::string n = ref(r.extents[0]);
    reduce_rank_ = 1;
    open("for (long long r0 = g; r0 < " + n + "; r0 += " + G + ")");
    line(acc + " = " + combine(kind, r.dtype, acc, ref(r.value)) + ";");
    close();
    reduce_rank_ = -1;
    open("for (int h = " + G + " / 2; h >= 1; h /= 2)");
    line("const " + t + " other = __shfl_xor_sync(0xffffffffu, " + acc + ", h, " + G + ");");
    line(acc + " = " + combine(kind, r.dtype, acc, "other") + ";");
    close();
    line("const " + t + " red" + id + " = " + acc + ";");
  }

  /// Everything the kernel does at one domain point.
  void emit_point() {
    if (k_.form == KernelForm::Scan) return emit_scan_column();
    results_ = 0;
    for (size_t r = 0; r < k_.reductions.size(); ++r) {
      emit_reduction(k_.reductions[r], static_cast<int>(r));
      results_ = static_cast<int>(r) + 1;
    }
    if (k_.map.empty()) return emit_stores();
    std::vector<std::string> ext;
    for (const ExprRef& e : k_.map) ext.push_back(ref(e));
    map_rank_ = static_cast<int>(ext.size());
    for (size_t m = 0; m < ext.size(); ++m) {
      const std::string v = numbered("m", m);
      open("for (long long " + v + " = 0; " + v + " < " + ext[m] + "; ++" + v + ")");
    }
    emit_stores();
    for (size_t m = 0; m < ext.size(); ++m) close();
    map_rank_ = -1;
  }

  void emit_stores() {
    for (const Store& s : k_.stores) emit_store(s);
  }

  // --- scan form (kernel_ir.h, ScanLoop): one thread per column ------------------------

  /// The scan's identity literal: 0 for add, 1 for mul, max's and min's reduction identity, -inf for logaddexp.
  static std::string scan_identity(const ScanLoop& sc) {
    switch (sc.op) {
    case ScanOp::Add:
    case ScanOp::Mul: {
      const int one = sc.op == ScanOp::Mul ? 1 : 0;
      return is_floating(sc.dtype) ? float_literal(sc.dtype, one) : int_literal(sc.dtype, one);
    }
    case ScanOp::Max: return reduction_init(ReduceOp::Max, sc.dtype);
    case ScanOp::Min: return reduction_init(ReduceOp::Min, sc.dtype);
    case ScanOp::LogAddExp: return float_literal(sc.dtype, -INFINITY);
    }
    return "";
  }

  /// acc op v (kernel_ir.h, ScanOp; no contraction: NVRTC runs with --fmad=false). The operands are
  /// plain names (the accumulator, a buffer element, a let), so they may be repeated.
  std::string scan_combine(const ScanLoop& sc, const std::string& acc, const std::string& v) {
    switch (sc.op) {
    case ScanOp::Add: return arith("+", "kiln_add", "|", acc, v, sc.dtype);
    case ScanOp::Mul: return arith("*", "kiln_mul", "&", acc, v, sc.dtype);
    case ScanOp::Max:
    case ScanOp::Min: {
      const bool is_max = sc.op == ScanOp::Max;
      if (!is_floating(sc.dtype)) return max_min(is_max, acc, v, sc.dtype);
      return "((" + v + (is_max ? " >= " : " <= ") + acc + " || " + v + " != " + v + ") ? " + v + " : " + acc + ")";
    }
    case ScanOp::LogAddExp: {
      require_float(sc.dtype, "logaddexp");
      const std::string m = max_min(true, acc, v, sc.dtype), fabs = sc.dtype == DType::Float32 ? "fabsf(" : "fabs(";
      const std::string r =
          m + " + " + math("log1p", math("exp", "-" + fabs + acc + " - " + v + ")", sc.dtype), sc.dtype);
      return "(" + fabs + m + ") == " + float_literal(sc.dtype, INFINITY) + " ? " + m + " : " + r + ")";
    }
    }
    KILN_ASSERT(false, "bad scan combine in " + k_.name);
    return "";
  }

  /// The column of the current domain point, its steps in order (as the LLVM path).
  void emit_scan_column() {
    const ScanLoop& sc = *k_.scan;
    const Store& st = k_.stores.at(0);
    const std::string T = reg_type(sc.dtype), steps = ref(sc.steps);
    if (!sc.target) { // a running scan
      line(T + " scan_acc = " + scan_identity(sc) + ";");
      open("for (long long r0 = 0; r0 < " + steps + "; ++r0)");
      reduce_rank_ = 1;
      line("scan_acc = " + scan_combine(sc, "scan_acc", ref(sc.value)) + ";");
      line("const long long m0 = r0;");
      line("const " + T + " red0 = scan_acc;");
      scan_store(st);
      close();
      reduce_rank_ = -1;
      return;
    }
    const std::string positions = ref(sc.positions); // a scatter: the identity everywhere, then the steps
    open("for (long long m0 = 0; m0 < " + positions + "; ++m0)");
    line("const " + T + " red0 = " + scan_identity(sc) + ";");
    scan_store(st);
    close();
    open("for (long long r0 = 0; r0 < " + steps + "; ++r0)");
    reduce_rank_ = 1;
    const std::string target = ref(sc.target), v = ref(sc.value);
    open("if ((unsigned long long)" + target + " < (unsigned long long)" + positions + ")");
    line("const long long m0 = " + target + ";");
    map_rank_ = 1;
    const std::string off = ref(st.offset);
    map_rank_ = -1;
    line("const " + T + " red0 = " + scan_combine(sc, numbered("b", st.buffer) + "[" + off + "]", v) + ";");
    scan_store(st);
    close();
    close();
    reduce_rank_ = -1;
  }

  /// An argsort (kernel_ir.h, ScanLoop::sort): a grid-stride loop over the (column, key) pairs, the
  /// key fastest. A pair's thread ranks its key k_own among its column's: the keys before it count
  /// unless k_own sorts strictly before them, the keys after it only where they sort strictly before
  /// k_own (stability), and it stores own at position rank. O(steps) a thread, O(steps^2) a column;
  /// the keys are read through the kernel's own expression (a load: fusion gives them a buffer).
  void emit_sort() {
    const ScanLoop& sc = *k_.scan;
    const Store& st = k_.stores.at(0);
    line("const long long cols = " + emit_domain_extents() + ";");
    line("const long long steps = " + ref(sc.steps) + ";");
    line("const long long n = cols * steps;");
    line("const long long stride = (long long)blockDim.x * gridDim.x;");
    open("for (long long flat = (long long)blockIdx.x * blockDim.x + threadIdx.x; flat < n; flat += stride)");
    line("const long long own = flat % steps;");
    if (!k_.domain.empty()) line("unsigned long long rest = (unsigned long long)(flat / steps);");
    emit_split_index();
    if (!mentions(st.offset, ExprKind::MapVar, 0)) { // one key a column (lowering's constant position): itself
      line("const long long red0 = own;");
      scan_store(st);
      close();
      return;
    }
    reduce_rank_ = 1;
    line(reg_type(sc.dtype) + " key;");
    open("");
    if (mentions(sc.value, ExprKind::ReduceVar, 0)) line("const long long r0 = own;");
    line("key = " + ref(sc.value) + ";");
    close();
    line("long long rank = 0;");
    open("for (long long r0 = 0; r0 < own; ++r0)");
    line("rank += !" + sorts_before(sc, "key", ref(sc.value)) + ";");
    close();
    open("for (long long r0 = own + 1; r0 < steps; ++r0)");
    line("rank += " + sorts_before(sc, ref(sc.value), "key") + ";");
    close();
    reduce_rank_ = -1;
    line("const long long m0 = rank;");
    line("const long long red0 = own;");
    scan_store(st);
    close();
  }

  /// Whether key a sorts strictly before key b in the argsort's order: NaN above every number
  /// (so a NaN is first descending, last ascending), -0 equal to +0 (IEEE comparison), false < true.
  static std::string sorts_before(const ScanLoop& sc, const std::string& a, const std::string& b) {
    const std::string cmp = a + (sc.descending ? " > " : " < ") + b;
    if (!is_floating(sc.dtype)) return "(" + cmp + ")";
    const std::string& nan = sc.descending ? a : b, & other = sc.descending ? b : a;
    return "(" + cmp + " || (" + nan + " != " + nan + " && " + other + " == " + other + "))";
  }

  /// The scan's store, with m0 and red0 declared by the caller.
  void scan_store(const Store& st) {
    map_rank_ = 1;
    results_ = 1;
    emit_store(st);
    map_rank_ = -1;
    results_ = 0;
  }

  void emit_store(const Store& s) {
    KILN_ASSERT(s.buffer >= 0 && s.buffer < static_cast<int>(k_.buffers.size()), "bad store in " + k_.name);
    const BufferParam& b = k_.buffers[s.buffer];
    KILN_ASSERT(b.output && s.value->dtype == b.dtype, "bad store in " + k_.name);
    const std::string off = ref(s.offset), v = ref(s.value);
    std::string store = numbered("b", s.buffer) + "[" + off + "] = ";
    if (b.dtype == DType::Bool) store += "(unsigned char)";
    line(store + v + ";");
  }

  // --- reductions --------------------------------------------------------------

  /// The accumulator's initial value: 0, or the identity of max/min.
  static std::string reduction_init(ReduceOp kind, DType dt) {
    const bool maxlike = kind == ReduceOp::Max || kind == ReduceOp::Argmax;
    if (kind == ReduceOp::Sum) return zero(dt);
    if (is_floating(dt)) return float_literal(dt, maxlike ? -INFINITY : INFINITY);
    if (dt == DType::Bool) return maxlike ? "false" : "true";
    if (dt == DType::Int32)
      return int_literal(dt, maxlike ? std::numeric_limits<int32_t>::min() : std::numeric_limits<int32_t>::max());
    return int_literal(dt, maxlike ? std::numeric_limits<int64_t>::min() : std::numeric_limits<int64_t>::max());
  }

  /// acc (+) v for Sum, Max, Min.
  static std::string combine(ReduceOp kind, DType dt, const std::string& acc, const std::string& v) {
    if (dt == DType::Bool) return kind == ReduceOp::Min ? acc + " & " + v : acc + " | " + v;
    if (kind == ReduceOp::Sum) return is_floating(dt) ? acc + " + " + v : "kiln_add(" + acc + ", " + v + ")";
    return std::string(kind == ReduceOp::Max ? "kiln_max(" : "kiln_min(") + acc + ", " + v + ")";
  }

  /// Whether v replaces the best so far: strictly better, or the first NaN.
  static std::string arg_better(bool is_max, DType dt, const std::string& best, const std::string& v) {
    const std::string strict = v + (is_max ? " > " : " < ") + best;
    if (!is_floating(dt)) return strict;
    return strict + " || (" + v + " != " + v + " && " + best + " == " + best + ")";
  }

  /// part = part + v (or fma(a, b, part)) at the current reduce vars.
  void sum_step(const Reduction& r, const std::string& part) {
    if (is_fma_reduction(r)) {
      const std::string a = ref(r.value->args[0]), b = ref(r.value->args[1]);
      line(part + " = " + (r.dtype == DType::Float32 ? "fmaf(" : "fma(") + a + ", " + b + ", " + part + ");");
    } else {
      line(part + " = " + part + " + " + ref(r.value) + ";");
    }
  }

  /// A float sum in the order of sum_lanes() (the same bits as the LLVM path): per run
  /// of the innermost loop, lanes of in-order chains combined pairwise; partials in order.
  void emit_lane_sum(const Reduction& r, const std::string& acc, const std::string& id) {
    const std::string t = reg_type(r.dtype), zero_ = zero(r.dtype), lanes = std::to_string(sum_lanes(r.dtype));
    const std::string lane = "lane" + id, full = "full" + id;
    emit_lane_sum_runs(r, acc, id, [&](const std::string& n, const std::string& k, const std::string& part) {
      line(t + " " + lane + "[" + lanes + "];");
      line("for (int l = 0; l < " + lanes + "; ++l) " + lane + "[l] = " + zero_ + ";");
      line("const long long " + full + " = " + n + " / " + lanes + " * " + lanes + ";");
      open("for (long long k0 = 0; k0 < " + full + "; k0 += " + lanes + ")");
      open("for (int l = 0; l < " + lanes + "; ++l)");
      line("const long long " + k + " = k0 + l;");
      sum_step(r, lane + "[l]");
      close();
      close();
      open("for (long long " + k + " = " + full + "; " + k + " < " + n + "; ++" + k + ")");
      sum_step(r, lane + "[" + k + " - " + full + "]");
      close();
      open("for (int h = " + lanes + " / 2; h >= 1; h /= 2)");
      line("for (int l = 0; l < h; ++l) " + lane + "[l] = " + lane + "[l] + " + lane + "[l + h];");
      close();
      line(part + " = " + lane + "[0];");
    });
  }

  /// The frame of a lane sum: for each run of the innermost reduction loop (the outer
  /// reduction loops around it), a run shorter than the lanes is summed in order;
  /// a longer one by long_run(n, k, part), which leaves the run's sum in `part`;
  /// acc += part after each run.
  void emit_lane_sum_runs(const Reduction& r, const std::string& acc, const std::string& id,
                          const std::function<void(const std::string&, const std::string&, const std::string&)>& long_run) {
    const std::string t = reg_type(r.dtype), zero_ = zero(r.dtype), lanes = std::to_string(sum_lanes(r.dtype));
    const size_t last = r.extents.size() - 1;
    const std::string k = numbered("r", last), n = "n" + id, part = "part" + id;
    for (size_t d = 0; d < last; ++d) {
      const std::string v = numbered("r", d);
      open("for (long long " + v + " = 0; " + v + " < " + ref(r.extents[d]) + "; ++" + v + ")");
    }
    line("const long long " + n + " = " + ref(r.extents[last]) + ";");
    line(t + " " + part + " = " + zero_ + ";");
    open("if (" + n + " < " + lanes + ")");
    open("for (long long " + k + " = 0; " + k + " < " + n + "; ++" + k + ")");
    sum_step(r, part);
    close();
    close();
    open("else");
    long_run(n, k, part);
    close();
    line(acc + " = " + acc + " + " + part + ";");
    for (size_t d = 0; d < last; ++d) close();
  }

  void emit_reduction(const Reduction& r, int index) {
    const ReduceOp kind = r.op;
    const bool arg = kind == ReduceOp::Argmax || kind == ReduceOp::Argmin;
    KILN_ASSERT(r.value->dtype == r.dtype, "reduction dtype mismatch in " + k_.name);
    const std::string id = std::to_string(index), acc = "acc" + id, idx = "idx" + id, cnt = "cnt" + id;
    std::vector<std::string> ext;
    for (const ExprRef& e : r.extents) ext.push_back(ref(e));
    line(reg_type(r.dtype) + " " + acc + " = " + reduction_init(kind, r.dtype) + ";");
    if (arg) line("long long " + idx + " = 0, " + cnt + " = 0;");
    reduce_rank_ = static_cast<int>(ext.size());
    if (kind == ReduceOp::Sum && is_floating(r.dtype) && !r.block_inner && !ext.empty()) {
      emit_lane_sum(r, acc, id);
      reduce_rank_ = -1;
      line("const " + reg_type(r.dtype) + " red" + id + " = " + acc + ";");
      return;
    }
    for (size_t d = 0; d < ext.size(); ++d) {
      const std::string v = numbered("r", d);
      open("for (long long " + v + " = 0; " + v + " < " + ext[d] + "; ++" + v + ")");
    }
    if (is_fma_reduction(r)) {
      const std::string a = ref(r.value->args[0]), b = ref(r.value->args[1]);
      line(acc + " = " + (r.dtype == DType::Float32 ? "fmaf(" : "fma(") + a + ", " + b + ", " + acc + ");");
    } else if (arg) {
      const std::string v = ref(r.value);
      line("if (" + arg_better(kind == ReduceOp::Argmax, r.dtype, acc, v) + ") { " + acc + " = " + v + "; " + idx +
           " = " + cnt + "; }");
      line("++" + cnt + ";");
    } else {
      const std::string v = ref(r.value);
      line(acc + " = " + combine(kind, r.dtype, acc, v) + ";");
    }
    for (size_t d = 0; d < ext.size(); ++d) close();
    reduce_rank_ = -1;
    const DType rt = arg ? DType::Int64 : r.dtype;
    line("const " + reg_type(rt) + " red" + id + " = " + (arg ? idx : acc) + ";");
  }

  // --- expressions -------------------------------------------------------------

  static bool is_leaf(ExprKind k) {
    return k == ExprKind::Const || k == ExprKind::LoopVar || k == ExprKind::ReduceVar || k == ExprKind::MapVar ||
           k == ExprKind::Param || k == ExprKind::ReduceResult;
  }

  /// The name (or literal) of e's value, emitting its statement on first use in scope.
  std::string ref(const ExprRef& e) override {
    for (auto s = scopes_.rbegin(); s != scopes_.rend(); ++s)
      if (auto it = s->find(e.get()); it != s->end()) return it->second;
    std::string v = value(*e);
    if (!is_leaf(e->kind)) {
      const std::string name = numbered("v", next_++);
      line("const " + reg_type(e->dtype) + " " + name + " = " + v + ";");
      v = name;
    }
    scopes_.back()[e.get()] = v;
    return v;
  }

  std::string var(const char* prefix, int index, int rank, const char* what) {
    KILN_ASSERT(index >= 0 && index < rank, std::string(what) + " out of scope in " + k_.name);
    return prefix + std::to_string(index);
  }

  /// An i64 parameter, or a scalar of another dtype from its slot (kernel_ir.h, scalar_param_bits()).
  std::string param(const Expr& e) {
    const std::string p = var("p", e.index, k_.num_params, "param");
    KILN_ASSERT(e.dtype != DType::Bool, "a bool parameter in " + k_.name);
    if (e.dtype == DType::Int64) return p;
    if (e.dtype == DType::Int32) return "((int)" + p + ")";
    return e.dtype == DType::Float64 ? "__longlong_as_double(" + p + ")" : "__int_as_float((int)" + p + ")";
  }

  std::string value(const Expr& e) {
    switch (e.kind) {
    case ExprKind::Const: return is_floating(e.dtype) ? float_literal(e.dtype, e.f) : int_literal(e.dtype, e.i);
    case ExprKind::LoopVar:
      if (!lane_var_.empty() && e.index + 1 == static_cast<int>(k_.domain.size())) return lane_var_;
      return var("i", e.index, loop_rank(), "loop var");
    case ExprKind::ReduceVar: return var("r", e.index, reduce_rank_, "reduce var");
    case ExprKind::MapVar: return var("m", e.index, map_rank_, "map var");
    case ExprKind::Param: return param(e);
    case ExprKind::Load: return load(e);
    case ExprKind::Op: return op(e);
    case ExprKind::IntDiv: return "kiln_udiv(" + ref(e.args.at(0)) + ", " + ref(e.args.at(1)) + ")";
    case ExprKind::IntMod: return "kiln_umod(" + ref(e.args.at(0)) + ", " + ref(e.args.at(1)) + ")";
    case ExprKind::ReduceResult: return var("red", e.index, results_, "reduction result");
    case ExprKind::Random: return random(e);
    case ExprKind::Check:
      return "(" + reg_type(e.dtype) + ")kiln_check(" + ref(e.args.at(0)) + ", " + ref(e.args.at(1)) + ", " +
             ref(e.args.at(2)) + ", " + numbered("b", e.index) + ")";
    }
    KILN_ASSERT(false, "bad ExprKind");
    return "";
  }

  /// A load; with a guard, 0 where the guard is false (and no memory access there).
  std::string load(const Expr& e) {
    KILN_ASSERT(e.index >= 0 && e.index < static_cast<int>(k_.buffers.size()), "bad buffer in " + k_.name);
    KILN_ASSERT(k_.buffers[e.index].dtype == e.dtype, "load dtype mismatch in " + k_.name);
    const std::string off = ref(e.args.at(0));
    std::string v = numbered("b", e.index) + "[" + off + "]";
    if (e.dtype == DType::Bool) v = "(" + v + " != 0)";
    if (e.args.size() < 2) return v;
    return ref(e.args[1]) + " ? " + v + " : " + zero(e.dtype);
  }

  void require_float(DType t, const char* what) {
    KILN_ASSERT(is_floating(t), std::string(what) + " on " + std::string(dtype_name(t)) + " in " + k_.name);
  }

  /// kiln_<fn>_<f32|f64>(args), args one operand or two joined by ", ".
  std::string math(const char* fn, const std::string& x, DType t) {
    require_float(t, fn);
    return std::string("kiln_") + fn + fsuffix(t) + "(" + x + ")";
  }

  /// floor, ceil, rint, trunc or fmod (f suffix for f32; fmod's operands joined by ", "): exact in CUDA and on
  /// the shim's host libm.
  std::string rounding(const char* fn, const std::string& x, DType t) {
    require_float(t, fn);
    return std::string(fn) + (t == DType::Float32 ? "f(" : "(") + x + ")";
  }

  std::string sqrt(const std::string& x, DType t) {
    require_float(t, "sqrt");
    return (t == DType::Float32 ? "sqrtf(" : "sqrt(") + x + ")";
  }

  static std::string to_bool(const std::string& x, DType from) {
    return from == DType::Bool ? x : "(" + x + " != " + zero(from) + ")";
  }

  /// One switch over every op, so a new op is a compile error here.
  std::string op(const Expr& e) {
    const DType in = e.args.at(0)->dtype;
    auto a = [&](int i) { return ref(e.args.at(i)); };
    switch (e.op) {
    case ScalarOp::Neg: return neg(a(0), in);
    case ScalarOp::Abs: return abs(a(0), in);
    case ScalarOp::Exp: return math("exp", a(0), in);
    case ScalarOp::Expm1: return math("expm1", a(0), in);
    case ScalarOp::Log: return math("log", a(0), in);
    case ScalarOp::Log1p: return math("log1p", a(0), in);
    case ScalarOp::Sin: return math("sin", a(0), in);
    case ScalarOp::Cos: return math("cos", a(0), in);
    case ScalarOp::Tanh: return math("tanh", a(0), in);
    case ScalarOp::Sigmoid: return math("sigmoid", a(0), in);
    case ScalarOp::Erf: return math("erf", a(0), in);
    case ScalarOp::Tan: return math("tan", a(0), in);
    case ScalarOp::Atan: return math("atan", a(0), in);
    case ScalarOp::Asin: return math("asin", a(0), in);
    case ScalarOp::Acos: return math("acos", a(0), in);
    case ScalarOp::Sinh: return math("sinh", a(0), in);
    case ScalarOp::Cosh: return math("cosh", a(0), in);
    case ScalarOp::Asinh: return math("asinh", a(0), in);
    case ScalarOp::Acosh: return math("acosh", a(0), in);
    case ScalarOp::Atanh: return math("atanh", a(0), in);
    case ScalarOp::Log2: return math("log2", a(0), in);
    case ScalarOp::Log10: return math("log10", a(0), in);
    case ScalarOp::Exp2: return math("exp2", a(0), in);
    case ScalarOp::Floor: return rounding("floor", a(0), in);
    case ScalarOp::Ceil: return rounding("ceil", a(0), in);
    case ScalarOp::Round: return rounding("rint", a(0), in); // ties to even (the default rounding mode)
    case ScalarOp::Trunc: return rounding("trunc", a(0), in);
    case ScalarOp::Sqrt: return sqrt(a(0), in);
    case ScalarOp::Rsqrt: return float_literal(in, 1) + " / " + sqrt(a(0), in);
    case ScalarOp::Reciprocal: require_float(in, "reciprocal"); return float_literal(in, 1) + " / " + a(0);
    case ScalarOp::Relu: return relu(a(0), in);
    case ScalarOp::LogicalNot: return "!" + to_bool(a(0), in);
    case ScalarOp::Cast: return cast(a(0), in, e.dtype);
    case ScalarOp::Add: return arith("+", "kiln_add", "|", a(0), a(1), in);
    case ScalarOp::Sub: return arith("-", "kiln_sub", nullptr, a(0), a(1), in);
    case ScalarOp::Mul: return arith("*", "kiln_mul", "&", a(0), a(1), in);
    case ScalarOp::Div: require_float(in, "div"); return a(0) + " / " + a(1);
    case ScalarOp::Pow: return pow(a(0), a(1), in);
    case ScalarOp::Atan2: return math("atan2", a(0) + ", " + a(1), in);
    case ScalarOp::Fmod: return rounding("fmod", a(0) + ", " + a(1), in); // exact: fmodf / fmod
    case ScalarOp::Remainder: require_float(in, "remainder"); return "kiln_remainder(" + a(0) + ", " + a(1) + ")";
    case ScalarOp::Maximum: return max_min(true, a(0), a(1), in);
    case ScalarOp::Minimum: return max_min(false, a(0), a(1), in);
    case ScalarOp::Eq: return a(0) + " == " + a(1);
    case ScalarOp::Ne: return a(0) + " != " + a(1);
    case ScalarOp::Lt: return a(0) + " < " + a(1);
    case ScalarOp::Le: return a(0) + " <= " + a(1);
    case ScalarOp::Gt: return a(0) + " > " + a(1);
    case ScalarOp::Ge: return a(0) + " >= " + a(1);
    case ScalarOp::LogicalAnd: return to_bool(a(0), in) + " && " + to_bool(a(1), e.args[1]->dtype);
    case ScalarOp::LogicalOr: return to_bool(a(0), in) + " || " + to_bool(a(1), e.args[1]->dtype);
    case ScalarOp::Where: return to_bool(a(0), in) + " ? " + a(1) + " : " + a(2);
    }
    KILN_ASSERT(false, "bad ScalarOp " + std::to_string(static_cast<int>(e.op)) + " in " + k_.name);
    return "";
  }

  std::string neg(const std::string& x, DType t) {
    KILN_ASSERT(t != DType::Bool, "neg on bool in " + k_.name);
    return is_floating(t) ? "-" + x : "kiln_neg(" + x + ")"; // ints wrap
  }

  static std::string abs(const std::string& x, DType t) {
    if (t == DType::Bool) return x;
    if (is_floating(t)) return (t == DType::Float32 ? "fabsf(" : "fabs(") + x + ")";
    return "kiln_abs(" + x + ")"; // abs(INT_MIN) wraps to INT_MIN
  }

  /// max(x, 0), keeping NaN and -0 (x < 0 is false for both).
  static std::string relu(const std::string& x, DType t) {
    if (t == DType::Bool) return x;
    if (is_floating(t)) return x + " < " + zero(t) + " ? " + zero(t) + " : " + x;
    return "kiln_max(" + x + ", " + zero(t) + ")";
  }

  std::string arith(const char* fop, const char* iop, const char* bop, const std::string& x, const std::string& y,
                    DType t) {
    if (is_floating(t)) return x + " " + fop + " " + y;
    if (t != DType::Bool) return std::string(iop) + "(" + x + ", " + y + ")";
    KILN_ASSERT(bop != nullptr, "arithmetic on bool in " + k_.name);
    return "(bool)(" + x + " " + bop + " " + y + ")";
  }

  static std::string max_min(bool is_max, const std::string& x, const std::string& y, DType t) {
    if (t == DType::Bool) return "(bool)(" + x + (is_max ? " | " : " & ") + y + ")";
    return std::string(is_max ? "kiln_max(" : "kiln_min(") + x + ", " + y + ")";
  }

  static std::string cast(const std::string& x, DType from, DType to) {
    if (from == to) return x;
    if (to == DType::Bool) return to_bool(x, from);
    if (is_floating(from) && !is_floating(to)) // saturating, NaN -> 0
      return std::string(to == DType::Int32 ? "kiln_to_i32(" : "kiln_to_i64(") + "(double)" + x + ")";
    return "(" + reg_type(to) + ")" + x;
  }

  /// Float pow through double (as the LLVM path); integer pow by exact squaring.
  std::string pow(const std::string& x, const std::string& y, DType t) {
    KILN_ASSERT(t != DType::Bool, "pow on bool in " + k_.name);
    if (!is_floating(t)) return "kiln_ipow(" + x + ", " + y + ")";
    if (t == DType::Float64) return "pow(" + x + ", " + y + ")";
    return "(float)pow((double)" + x + ", (double)" + y + ")";
  }

  std::string random(const Expr& e) {
    require_float(e.dtype, "random");
    const std::string fn = e.dist == RandomDist::Uniform ? "kiln_uniform" : "kiln_randn";
    return fn + fsuffix(e.dtype) + "(" + ref(e.args.at(1)) + ", " + ref(e.args.at(0)) + ")";
  }
};

} // namespace

std::string emit_cuda(const Kernel& k) { return CudaWriter(k).emit(); }

std::string emit_cuda_shim_entry(const Kernel& k) {
  std::string call;
  for (size_t b = 0; b < k.buffers.size(); ++b) {
    const BufferParam& p = k.buffers[b];
    call += (b ? ", " : "") + std::string("(") + (p.output || p.error ? "" : "const ") + mem_type(p.dtype) + "*)buffers[" +
            std::to_string(b) + "]";
  }
  for (int p = 0; p < k.num_params; ++p) call += ", params[" + std::to_string(p) + "]";
  return "extern \"C\" void " + k.name +
         "_shim(unsigned grid, unsigned block, void* const* buffers, const long long* params) {\n"
         "  kiln_shim::" +
         std::string(k.form == KernelForm::Gemm || k.form == KernelForm::Row || k.form == KernelForm::Attention ? "launch_sync" : "launch") +
         "(grid, block, [&] { " +
         k.name + "(" + call + "); });\n}\n"
         "extern \"C\" const int " + k.name + "_shim_arity[2] = {" + std::to_string(k.buffers.size()) + ", " +
         std::to_string(k.num_params) + "};\n";
}

void set_cuda_small_gemm_below(int tiles) { g_small_gemm_below = tiles; }

CudaLaunchConfig cuda_launch_config(const Kernel& k, const std::vector<int64_t>& params,
                                    const CudaDeviceLimits& limits) {
  int64_t max_grid = 2147483647; // gridDim.x
  CudaLaunchConfig c;
  if (k.form == KernelForm::Gemm) {
    const GemmTiling& form = *k.gemm;
    const Reduction& r = k.reductions[0];
    int64_t batch = 1, m = 1, n = 1;
    for (int d = 0; d < static_cast<int>(k.domain.size()); ++d) {
      const int64_t e = eval_index(k.domain[d], params);
      (d == form.m_var ? m : d == form.n_var ? n : batch) *= e;
    }
    const GemmTile g = gemm_tile(r.dtype, small_gemm(r.dtype, batch, m, n));
    const int64_t tiles = batch * ((m + g.tm - 1) / g.tm) * ((n + g.tn - 1) / g.tn);
    c.grid = static_cast<unsigned>(std::min(tiles, max_grid));
    c.block = kGemmThreads;
    c.fixed_block = true;
    c.shared_bytes = static_cast<unsigned>(gemm_shared_bytes(r.dtype, false) +
                                           (r.dtype == DType::Float32 ? gemm_shared_bytes(r.dtype, true) : 0));
    return c;
  }
  int64_t points = 1;
  for (const ExprRef& e : k.domain) points *= eval_index(e, params);
  if (k.form == KernelForm::Scan && k.scan->sort) points *= eval_index(k.scan->steps, params); // a thread per key
  if (limits.sm_count > 0 && limits.max_threads_per_sm >= kGemmThreads) // the forms below use 256-thread blocks
    max_grid = std::min<int64_t>(max_grid, kMaxWaves * limits.sm_count * (limits.max_threads_per_sm / kGemmThreads));
  if (k.form == KernelForm::Attention) return cuda_attention_launch_config(k, params, max_grid);
  if (k.form == KernelForm::Row) {
    const int64_t rows_per_block = kGemmThreads / kRowThreads;
    c.grid = static_cast<unsigned>(std::min((points + rows_per_block - 1) / rows_per_block, max_grid));
    c.block = kGemmThreads;
    c.fixed_block = true;
    return c;
  }
  c.block = kGemmThreads;
  const int64_t inner = k.domain.empty() ? 1 : eval_index(k.domain.back(), params);
  const int64_t per_thread = is_vector_map(k) && inner % kVectorWidth == 0 ? kVectorWidth : 1; // the vector form
  const int64_t threads = (points + per_thread - 1) / per_thread;
  c.grid = static_cast<unsigned>(std::min((threads + c.block - 1) / c.block, max_grid));
  return c;
}

} // namespace kiln::codegen
