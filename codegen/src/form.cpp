// Form planning (see form.h): the one place that decides how a kernel is emitted.
#include "codegen/form.h"

#include <algorithm>
#include <mutex>

#include "kiln/error.h"

namespace kiln::codegen {

namespace {

std::mutex tiling_mutex;
std::optional<GemmTiling> tiling_override; // tests: set_gemm_tiling_override()

/// The matmul's sizes at launch: rows, columns, batch (the other domain dims) and k.
struct GemmSizes {
  int64_t m = 1, n = 1, batch = 1, k = 1;
};

GemmSizes gemm_sizes(const Kernel& k, const std::vector<int64_t>& params) {
  const MatmulDims& mm = *k.matmul;
  GemmSizes s;
  for (int d = 0; d < static_cast<int>(k.domain.size()); ++d)
    (d == mm.m_var ? s.m : d == mm.n_var ? s.n : s.batch) *= eval_index(k.domain[d], params);
  s.k = eval_index(k.reductions.at(0).extents.at(0), params);
  return s;
}

/// The tasks of a GEMM in blocks of at most mc x nc outputs: one per batch point and block.
int64_t task_count(const GemmSizes& s, int64_t mc, int64_t nc) {
  return s.batch * ((s.m + mc - 1) / mc) * ((s.n + nc - 1) / nc);
}

/// How evenly blocks of at most `block` (a multiple of `tile`) cut `extent` as the GEMM emitter
/// cuts it (llvm_gemm.cpp: equal blocks of whole tiles, the last one shorter): the mean block over
/// the largest, 1 when all are equal.
double evenness(int64_t extent, int64_t tile, int64_t block) {
  const int64_t blocks = (extent + block - 1) / block;
  const int64_t largest = std::min(extent, ((extent + blocks - 1) / blocks + tile - 1) / tile * tile);
  return static_cast<double>(extent) / static_cast<double>(blocks * largest);
}

/// How evenly the tasks of blocks mc x nc share out among `threads` threads: the evenness of the
/// row blocks, of the column blocks, and of the task count over the threads. A thread waits for
/// its largest task, and for the others when it has more tasks than they do: 128 rows in two
/// blocks of 72 and 56 keep one of two threads idle 22% of the time, where four blocks of 128
/// columns keep both busy (MLPStep/128 on 2 threads 1.14x, bench/RESULTS.md stop 34).
double balance(const GemmSizes& s, int64_t mr, int64_t mc, int64_t nr, int64_t nc, int threads) {
  const int64_t tasks = task_count(s, mc, nc), workers = std::max(threads, 1);
  const int64_t per_worker = (tasks + workers - 1) / workers;
  return evenness(s.m, mr, mc) * evenness(s.n, nr, nc) * static_cast<double>(tasks) / static_cast<double>(per_worker * workers);
}

/// plan_cpu_gemm picks a split for balance only where its blocks keep this many register tiles.
constexpr int64_t kMinBalancedTiles = 4;

/// The CPU GEMM form: the target's tiling, with smaller blocks for small products so that
/// they still split among threads: up to 4 tasks of at least 8 MFLOP each, each halving the
/// rows' or the columns' blocks, whichever shares the work out more evenly (balance). On one thread a
/// product is one task: a split only packs the operands again for each part (5-10% slower at
/// the MLP's and GPT's shapes on one thread, bench Gemm/*/kiln/threads:1). The blocks never
/// change a result (each element's k order is kc's).
FormPlan plan_cpu_gemm(const Kernel& k, const std::vector<int64_t>& params, const Target& t) {
  GemmTiling g = cpu_gemm_tiling(t, k.reductions.at(0).dtype);
  g.m_var = k.matmul->m_var;
  g.n_var = k.matmul->n_var;
  GemmTiling most = g; // the kernel's: its blocks at most, and where it reads the launch's
  most.mc_param = k.num_params;
  most.nc_param = k.num_params + 1;
  const GemmSizes s = gemm_sizes(k, params);
  const int64_t m = s.m, cols = s.n;
  auto tasks = [&] { return task_count(s, g.mc, g.nc); };
  const double flops = 2.0 * static_cast<double>(s.batch * m * cols) * static_cast<double>(s.k);
  const int64_t wanted = t.threads == 1 ? 1 : 4;
  while (tasks() < wanted && flops / static_cast<double>(2 * tasks()) >= 8e6) {
    const bool can_rows = (m + g.mc - 1) / g.mc < (m + g.mr - 1) / g.mr;
    const bool can_cols = g.nc > g.nr && (cols + g.nc - 1) / g.nc < (cols + g.nr - 1) / g.nr;
    const int64_t mc = std::max(g.mr, (std::min(g.mc, m) + 2 * g.mr - 1) / (2 * g.mr) * g.mr);
    const int64_t nc = std::max(g.nr, (std::min(g.nc, cols) + 2 * g.nr - 1) / (2 * g.nr) * g.nr);
    bool rows_split = can_rows && (g.mc >= g.nc / 2 || g.nc <= g.nr);
    if (can_rows && can_cols) { // the split whose tasks share out more evenly among the threads,
      // where its blocks keep kMinBalancedTiles tiles (thinner blocks reuse each packed panel too
      // little: the CNN's 128 x 3136 x 128 layer in blocks of 32 columns measured 12% slower)
      const double by_rows = balance(s, g.mr, mc, g.nr, g.nc, t.threads);
      const double by_cols = balance(s, g.mr, g.mc, g.nr, nc, t.threads);
      if (by_cols > by_rows + 0.01 && nc >= kMinBalancedTiles * g.nr) rows_split = false;
      else if (by_rows > by_cols + 0.01 && mc >= kMinBalancedTiles * g.mr) rows_split = true;
    }
    if (rows_split) g.mc = mc;
    else if (can_cols) g.nc = nc;
    else break;
  }
  FormPlan plan{KernelForm::Gemm, most, tasks()};
  plan.added_params = {g.mc, g.nc};
  return plan;
}

/// Whether the CUDA tiled GEMM applies to the matmul kernel k (see plan_form).
bool cuda_tiled_gemm_applies(const Kernel& k) {
  if (k.reductions.size() != 1 || !k.map.empty()) return false;
  const Reduction& r = k.reductions[0];
  if (!r.fma || r.op != ReduceOp::Sum || r.extents.size() != 1) return false;
  if (r.dtype != DType::Float32 && r.dtype != DType::Float64) return false;
  if (r.value->kind != ExprKind::Op || r.value->op != ScalarOp::Mul) return false;
  const MatmulDims& mm = *k.matmul;
  const int rank = static_cast<int>(k.domain.size());
  if (mm.m_var >= rank || mm.n_var >= rank || (mm.m_var >= 0 && mm.m_var == mm.n_var)) return false;
  if (mm.n_var >= 0 && mentions(r.value->args[0], ExprKind::LoopVar, mm.n_var)) return false;
  if (mm.m_var >= 0 && mentions(r.value->args[1], ExprKind::LoopVar, mm.m_var)) return false;
  return true;
}

/// CUDA's row form: a group of kCudaRowThreads threads per row splits a map, or float
/// sums in lane order (each sum's lanes must fit the group).
bool cuda_row_form(const Kernel& k) {
  for (const Reduction& r : k.reductions)
    if (sum_lanes(r.dtype) > kCudaRowThreads) return false;
  return !k.map.empty() || std::any_of(k.reductions.begin(), k.reductions.end(), sums_in_lanes);
}

/// True when every load of `value` that moves with the domain var `var` moves by one element a
/// step of it, and at least one does.
bool contiguous_along(const ExprRef& value, int var) {
  std::vector<const Expr*> loads;
  std::unordered_set<const Expr*> seen;
  collect_loads(value, loads, seen);
  bool any = false;
  for (const Expr* l : loads) {
    const std::optional<int64_t> step = coefficient(l->args[0], ExprKind::LoopVar, var);
    if (step == 0) continue;
    if (step != 1) return false;
    any = true;
  }
  return any;
}

/// The CPU's Columns form (kernel_ir.h): one lane-order float sum (not a matmul's) read
/// contiguously along the innermost domain var, and no map.
bool columns_form(const Kernel& k) {
  if (k.reductions.size() != 1 || !k.map.empty() || k.domain.empty() || k.matmul) return false;
  const Reduction& r = k.reductions[0];
  return sums_in_lanes(r) && !r.fma && contiguous_along(r.value, static_cast<int>(k.domain.size()) - 1);
}

} // namespace

FormPlan plan_form(const Kernel& k, const std::vector<int64_t>& params, const Target& t) {
  const bool cpu = t.kind == Target::Kind::CPU;
  if (k.scan) return {KernelForm::Scan, std::nullopt, 0};
  if (const auto& a = k.attention) {
    if (!cpu) return {KernelForm::Attention, std::nullopt, 0, 1}; // the CUDA kernel's tiles are its own (cuda_attention.cpp)
    const int64_t rows = eval_index(a->l, params);
    // the backward's task is a batch point (its dk and dv sum over every query row)
    const int64_t tasks = eval_index(a->bh, params) * (a->backward ? 1 : (rows + kAttentionQueryBlock - 1) / kAttentionQueryBlock);
    const int64_t row_bits = kAttentionKeyBlock * (a->dtype == DType::Float64 ? 64 : 32);
    const int64_t in_registers = std::clamp<int64_t>(int64_t{t.vector_registers} * t.vector_bits / (2 * row_bits), 1, 4);
    return {KernelForm::Attention, std::nullopt, tasks, in_registers == 3 ? 2 : in_registers};
  }
  if (k.matmul) {
    if (cpu) return plan_cpu_gemm(k, params, t);
    if (cuda_tiled_gemm_applies(k)) return {KernelForm::Gemm, GemmTiling{k.matmul->m_var, k.matmul->n_var}, 0};
  }
  if (k.reductions.empty()) return {KernelForm::Elementwise, std::nullopt, 0};
  if (k.matmul) return {KernelForm::Reduction, std::nullopt, 0}; // a matmul CUDA's tiled GEMM does not take
  if (cpu && columns_form(k)) return {KernelForm::Columns, std::nullopt, 0};
  const bool row = cpu ? !k.map.empty() : cuda_row_form(k);
  return {row ? KernelForm::Row : KernelForm::Reduction, std::nullopt, 0};
}

void set_form(Kernel& k, const FormPlan& plan) {
  KILN_ASSERT((plan.form == KernelForm::Gemm) == plan.gemm.has_value(), "a GEMM layout without the GEMM form or back");
  KILN_ASSERT((plan.form == KernelForm::Scan) == k.scan.has_value(), "a scan loop without the scan form or back");
  k.form = plan.form;
  k.gemm = plan.gemm;
  k.num_params += static_cast<int>(plan.added_params.size());
  KILN_ASSERT((plan.form == KernelForm::Attention) == k.attention.has_value(), "the attention form without an attention kernel or back");
  if (k.attention) k.attention->rows = plan.attention_rows;
}

GemmTiling cpu_gemm_tiling(const Target& t, DType dtype) {
  {
    std::lock_guard lock(tiling_mutex);
    if (tiling_override) {
      GemmTiling g = *tiling_override;
      g.m_var = g.n_var = -1;
      return g;
    }
  }
  KILN_ASSERT(t.kind == Target::Kind::CPU && t.vector_bits >= 128 && t.vector_registers >= 8,
              "no CPU GEMM tiling for target " + t.str());
  const int64_t elem = dtype == DType::Float64 ? 8 : 4;
  GemmTiling g;
  g.nr = 2 * (t.vector_bits / 8) / elem;   // two vectors of columns
  g.mr = t.vector_registers * 3 / 4 / 2;   // 24 (of 32) or 12 (of 16) vector accumulators
  g.mc = 384;                              // b is read from memory once per mc rows
  g.nc = 2048 / elem;                      // 512 f32 or 256 f64 columns
  g.kc = 256;                              // a b panel of kc x nr: 32 KiB (AVX-512), in L1
  return g;
}

void set_gemm_tiling_override(std::optional<GemmTiling> tiling) {
  std::lock_guard lock(tiling_mutex);
  tiling_override = tiling;
}

} // namespace kiln::codegen
