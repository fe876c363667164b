// The CUDA attention kernel (KernelForm::Attention; the arithmetic is AttentionSpec's, kernel_ir.h),
// bitwise equal to the CPU's (llvm_attention.cpp): every element's operations and their order are
// the same, only who computes them differs. A block is 256 threads (fixed); tiles go through
// __shared__ memory; the grid loops over the kernel's tasks.
//
// The forward: a task is a batch point and a block of kAttentionQueryBlock (64) query rows, as on
// the CPU (with causal, the keys after the block's last row are skipped, as there). Per key block
// of kAttentionKeyBlock (64) keys:
//   * scores: the 64 x 64 tile of q k^T (each thread 4 rows x 4 keys in registers), the q and k
//     rows staged through shared memory by chunks of DK columns (fmaf over d in order); then
//     scaled, masked (the mask is the kernel's own expression) into the shared scores Ss;
//   * the online softmax step: 4 threads a row; each reads the row's 64 scores for the block max
//     (exact, so any order), then turns its keys into p and sums its sum_lanes() lanes (lane l:
//     the keys l, l + lanes, ... in order from 0); one thread a row combines the lanes pairwise
//     (lane l += lane l + h, h = lanes/2, ..., 1) and updates z = z * a + sum;
//   * with dropout, p_j times its dropout factor z_j in Ss (z already summed);
//   * o = o * a + sum of p_j v_j (fmaf, j in order), by chunks of CW columns of v staged in shared
//     memory, a thread per (row, column); o is kept in the output rows themselves (global memory,
//     the only output read back), so any ev fits.
// Finally out = o / z (0 where z is 0) and lse = c + log(z) (-inf where z is 0).
//
// The backward (kernel_ir.h, AttentionBackward), FlashAttention-2 style, two kinds of task:
//   * a key task (batch point, block of 64 keys) owns dk and dv of its keys: zeroes them, then per
//     chunk of BR query rows in order (from the block's first key with causal), recomputes the
//     chunk's p = exp(s - lse) and g = (p (dP - D)) scale, 0 where s is -inf (s and dP as the forward's scores, D =
//     dout . out per row), and accumulates dv_j += p_ij dout_i, dk_j += g_ij q_i over the chunk's
//     rows in order (a thread per (key, column), the rows' columns staged in shared memory);
//   * a query task (batch point, chunk of BR rows) owns dq of its rows: zeroes them, then per key
//     block in order (with causal, the blocks starting at or before the row), recomputes p and g
//     and accumulates dq_i += g_ij k_j over the block's keys in order.
// p and g are recomputed by both kinds (as FlashAttention-2's separate dq pass does); no task
// reads another's results, so one launch does it all.
#include "codegen/src/cuda_attention.h"

#include <algorithm>

#include "codegen/form.h"
#include "kiln/error.h"

namespace kiln::codegen {

namespace {

constexpr int kThreads = 256;
constexpr int kKeys = static_cast<int>(kAttentionKeyBlock);   // keys per block (part of the arithmetic)
constexpr int kRows = static_cast<int>(kAttentionQueryBlock); // the forward's query rows per task (as the CPU's)
static_assert(kKeys == 64 && kRows == 64, "the CUDA attention tiles assume blocks of 64 keys and 64 rows");

/// The tile sizes of a dtype (none changes a result).
struct Tiles {
  int dk;       ///< columns of q and k (or dout and v) staged at a time for the scores
  int cw;       ///< columns of v, dout, q or k staged at a time for the products
  int br;       ///< the backward's query rows per chunk (a multiple of 16)
  int lanes;    ///< sum_lanes(dtype)
  int elem;     ///< bytes of an element
};

constexpr Tiles tiles(DType t) {
  if (t == DType::Float64) return {8, 16, 32, static_cast<int>(sum_lanes(t)), 8};
  return {16, 32, 64, static_cast<int>(sum_lanes(t)), 4};
}

/// Elements of the shared staging buffer: the scores' two operand chunks or a product's chunk.
int stage_elems(const Tiles& g, int rows) { return std::max({(rows + kKeys) * (g.dk + 1), rows * g.cw, kKeys * g.cw}); }

/// Whether a backward kernel needs g (it writes dq or dk).
bool needs_g(const AttentionSpec& a) { return a.dq >= 0 || a.dk >= 0; }

/// Static shared memory of a forward (scores, staging, m, z, a and the lane partials) or backward
/// (p, g where needed, staging, D) kernel.
int64_t shared_bytes(const AttentionSpec& a) {
  const Tiles g = tiles(a.dtype);
  if (a.backward) {
    const int64_t tiles = (a.dv >= 0 ? 1 : 0) + (needs_g(a) ? 1 : 0); // p, g
    return int64_t{g.elem} * (tiles * g.br * (kKeys + 1) + stage_elems(g, g.br) + (needs_g(a) ? g.br : 0));
  }
  return int64_t{g.elem} * (kRows * (kKeys + 1) + stage_elems(g, kRows) + 3 * kRows + kRows * g.lanes);
}

static_assert(kKeys % tiles(DType::Float32).br == 0 && kKeys % tiles(DType::Float64).br == 0,
              "a backward chunk of rows must not straddle a key block's first key (causal)");
static_assert(kKeys % sum_lanes(DType::Float32) == 0 && sum_lanes(DType::Float32) % 4 == 0 && kKeys % sum_lanes(DType::Float64) == 0 &&
                  sum_lanes(DType::Float64) % 4 == 0,
              "the softmax step: 4 threads a row, each whole lanes of a block's keys");

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/// Replaces every "$NAME" of `vars` in `text`.
std::string subst(std::string text, const std::vector<std::pair<std::string, std::string>>& vars) {
  for (const auto& [name, value] : vars)
    for (size_t at = text.find(name); at != std::string::npos; at = text.find(name, at + value.size()))
      text.replace(at, name.size(), value);
  return text;
}

class Writer {
public:
  Writer(const Kernel& k, CudaBody& body) : a_(*k.attention), body_(body), g_(tiles(a_.dtype)) {
    const bool f64 = a_.dtype == DType::Float64;
    vars_ = {{"$T", f64 ? "double" : "float"},
             {"$F", f64 ? "f64" : "f32"},
             {"$DK", std::to_string(g_.dk)},
             {"$CW", std::to_string(g_.cw)},
             {"$BR", std::to_string(a_.backward ? g_.br : kRows)},
             {"$Y", std::to_string((a_.backward ? g_.br : kRows) / 16)},
             {"$LANES", std::to_string(g_.lanes)},
             {"$LPT", std::to_string(g_.lanes / 4)},
             {"$STAGE", std::to_string(stage_elems(g_, a_.backward ? g_.br : kRows))}};
    for (auto [name, buffer] : {std::pair{"$Q", a_.q}, {"$K", a_.k}, {"$V", a_.v}, {"$OUT", a_.out}, {"$LSE", a_.lse},
                                {"$DOUT", a_.dout}, {"$DQ", a_.dq}, {"$DK_", a_.dk}, {"$DV", a_.dv}})
      if (buffer >= 0) vars_.emplace(vars_.begin(), name, std::string("b").append(std::to_string(buffer))); // first: $DK_ before $DK
  }

  void emit() {
    put("if (blockDim.x != 256) __trap(); // the tiles need exactly this block");
    put("const long long A_bh = " + body_.ref(a_.bh) + ", A_l = " + body_.ref(a_.l) + ", A_s = " + body_.ref(a_.s) +
        ", A_e = " + body_.ref(a_.e) + ", A_ev = " + body_.ref(a_.ev) + ";");
    put("(void)A_ev; // not read by a forward kernel storing only lse");
    put("const $T A_scale = " + body_.ref(a_.scale) + ";");
    put("const $T A_inf = kiln_attn_inf(($T)0);");
    put("const int tid = (int)threadIdx.x, tx = tid % 16, ty = tid / 16;");
    if (a_.backward) backward();
    else forward();
  }

private:
  const AttentionSpec& a_;
  CudaBody& body_;
  Tiles g_;
  std::vector<std::pair<std::string, std::string>> vars_;

  /// Lines of text, the $ names replaced.
  void put(const std::string& text) {
    const std::string s = subst(text, vars_);
    for (size_t at = 0; at < s.size();) {
      const size_t end = std::min(s.find('\n', at), s.size());
      if (end > at) body_.line(s.substr(at, end - at));
      at = end + 1;
    }
  }

  /// `text {` (the $ names replaced), a new scope.
  void open(const std::string& text) { body_.open(subst(text, vars_)); }
  /// `}`, the end of the innermost scope.
  void close() { body_.close(); }

  /// `s` (the scaled score of query row i1 = qrow0 + rr and key r0 = key0 + jj of batch point i0 = bi)
  /// with causal and the mask applied, in its own scope.
  void mask_score() {
    open("");
    put("const long long i0 = bi, i1 = qrow0 + rr, r0 = key0 + jj;\n(void)i0; (void)i1; (void)r0;");
    if (a_.causal) put("if (r0 > i1) s = -A_inf;");
    if (a_.mask) {
      const std::string m = body_.ref(a_.mask);
      put(a_.mask->dtype == DType::Bool ? "s = " + m + " ? s : -A_inf;" : "s = s + " + m + ";");
    }
    close();
  }

  /// `$T z`, the dropout factor of query row i1 = qrow0 + rr and key r0 = key0 + jj of batch point
  /// i0 = bi (AttentionSpec::dropout; a kernel with dropout only).
  void dropout_factor() {
    put("$T z;");
    open("");
    put("const long long i0 = bi, i1 = qrow0 + rr, r0 = key0 + jj;\n(void)i0; (void)i1; (void)r0;");
    put("z = " + body_.ref(a_.dropout) + ";");
    close();
  }

  /// With dropout, the weights in Ss that o takes: p_j * z_j (z, the softmax's sum, has the undropped p).
  void drop_weights() {
    if (!a_.dropout) return;
    open("for (int x = tid; x < 64 * 64; x += 256)");
    put("const int rr = x / 64, jj = x % 64;");
    open("if (rr < nrows && jj < nkeys)");
    dropout_factor();
    put("Ss[rr][jj] = Ss[rr][jj] * z;");
    close();
    close();
  }

  /// The forward: a task per (batch point, 64 query rows), its key blocks in order.
  void forward() {
    put(R"(__shared__ $T Ss[64][65];
__shared__ __align__(16) $T Stage[$STAGE];
__shared__ $T Ms[64], Zs[64], As[64], Part[64][$LANES];
const long long qblocks = (A_l + 63) / 64;)");
    open("for (long long task = blockIdx.x; task < A_bh * qblocks; task += gridDim.x)");
    put(R"(const long long bi = task / qblocks, qrow0 = task % qblocks * 64;
const int nrows = (int)(A_l - qrow0 < 64 ? A_l - qrow0 : 64);)");
    put(a_.causal ? "const long long keys = A_s < qrow0 + nrows ? A_s : qrow0 + nrows; // later keys: masked in every row"
                  : "const long long keys = A_s;");
    put(R"(if (tid < 64) { Ms[tid] = -A_inf; Zs[tid] = ($T)0; })");
    open("for (long long key0 = 0; key0 < keys; key0 += 64)");
    put("const int nkeys = (int)(keys - key0 < 64 ? keys - key0 : 64);");
    forward_scores();
    softmax_step();
    drop_weights();
    if (a_.out >= 0) accumulate_out();
    close(); // key blocks
    finish_rows();
    put("__syncthreads(); // m and z are reset by the next task");
    close(); // tasks
  }

  /// The key block's 64 x 64 scores of the task's rows, scaled and masked, into Ss.
  void forward_scores() {
    put(R"($T sc[4][4];
kiln_attn_dots<$T, 64, $DK>($Q, bi * A_l + qrow0, nrows, $K, bi * A_s + key0, nkeys, A_e, Stage, sc);
#pragma unroll)");
    open("for (int y = 0; y < 4; ++y)");
    put("#pragma unroll");
    open("for (int x = 0; x < 4; ++x)");
    put("const int rr = ty + 16 * y, jj = tx + 16 * x;\n$T s = -A_inf;");
    open("if (rr < nrows && jj < nkeys)");
    put("s = sc[y][x] * A_scale;");
    mask_score();
    close();
    put("Ss[rr][jj] = s;");
    close();
    close();
  }

  /// The online softmax step of the block: 4 threads a row turn the scores in Ss into p and sum
  /// their lanes; then one thread a row combines the lanes and updates z (the factor a in As).
  void softmax_step() {
    put(R"(__syncthreads();
{
  const int rr = tid / 4, part = tid % 4;
  $T top = -A_inf;
  for (int jj = 0; jj < 64; ++jj) top = kiln_max(top, Ss[rr][jj]);
  const $T mold = Ms[rr], mnew = kiln_max(mold, top);
  const $T shift = mnew == -A_inf ? ($T)0 : mnew;
  const $T alpha = kiln_exp_$F(mold - shift);
  __syncthreads();
  for (int l = 0; l < $LPT; ++l) {
    $T lane = ($T)0;
    for (int c = 0; c < 64; c += $LANES) {
      const int jj = c + part * $LPT + l;
      const $T pv = kiln_exp_$F(Ss[rr][jj] - shift);
      Ss[rr][jj] = pv;
      lane = lane + pv;
    }
    Part[rr][part * $LPT + l] = lane;
  }
  if (part == 0) { Ms[rr] = mnew; As[rr] = alpha; }
  __syncthreads();
}
if (tid < 64) {
  $T lanes[$LANES];
#pragma unroll
  for (int l = 0; l < $LANES; ++l) lanes[l] = Part[tid][l];
#pragma unroll
  for (int h = $LANES / 2; h >= 1; h /= 2)
#pragma unroll
    for (int l = 0; l < h; ++l) lanes[l] = lanes[l] + lanes[l + h];
  Zs[tid] = Zs[tid] * As[tid] + lanes[0];
})");
  }

  /// o = o * a + p V_blk for the task's rows, kept in the output rows (rows_times_keys).
  void accumulate_out() { rows_times_keys("Ss", "$V", "A_ev", "$OUT", "(key0 == 0 ? ($T)0 : *o) * As[rr]"); }

  /// dst[row] = init + sum over the block's keys in order of weights[row][key] * src[key] (each an
  /// fma), for the task's rows: a thread per (row, column), src's `cols` columns staged in shared
  /// memory by chunks of CW. `init` reads the row's old value as `*o`. The forward's o update and
  /// the backward's dq update.
  void rows_times_keys(const std::string& weights, const std::string& src, const std::string& cols,
                       const std::string& dst, const std::string& init) {
    put(subst(R"(for (long long c0 = 0; c0 < @COLS; c0 += $CW) {
  const int cn = (int)(@COLS - c0 < $CW ? @COLS - c0 : $CW);
  __syncthreads();
  for (int x = tid; x < 64 * $CW; x += 256) {
    const int kk = x / $CW, c = x % $CW;
    Stage[x] = kk < nkeys && c < cn ? @SRC[(bi * A_s + key0 + kk) * @COLS + c0 + c] : ($T)0;
  }
  __syncthreads();
  const int tc = tid % $CW;
  if (tc < cn)
    for (int rr = tid / $CW; rr < nrows; rr += 256 / $CW) {
      $T* const o = @DST + (bi * A_l + qrow0 + rr) * @COLS + c0 + tc;
      $T acc = @INIT;
      @KEYS
      for (int kk = 0; kk < kend; ++kk) acc = kiln_attn_fma(@W[rr][kk], Stage[kk * $CW + tc], acc);
      *o = acc;
    }
})",
              {{"@COLS", cols}, {"@SRC", src}, {"@DST", dst}, {"@INIT", init}, {"@W", weights},
               {"@KEYS", a_.causal ? "const long long seen = qrow0 + rr - key0 + 1; // causal: the keys up to the row only\n"
                                     "      const int kend = seen < nkeys ? (seen < 0 ? 0 : (int)seen) : nkeys;"
                                   : "const int kend = nkeys;"}}));
  }

  /// After the last key block: lse = c + log(z) and out = o / z (0 and -inf where z is 0).
  void finish_rows() {
    put("__syncthreads();");
    if (a_.lse >= 0) put(R"(for (int rr = tid; rr < nrows; rr += 256) {
  const $T z = Zs[rr], m = Ms[rr];
  $LSE[bi * A_l + qrow0 + rr] = z == ($T)0 ? -A_inf : (m == -A_inf ? ($T)0 : m) + kiln_log_$F(z);
})");
    if (a_.out >= 0) put(R"(for (long long x = tid; x < (long long)nrows * A_ev; x += 256) {
  $T* const o = $OUT + (bi * A_l + qrow0) * A_ev + x;
  const $T z = Zs[x / A_ev];
  *o = z == ($T)0 ? ($T)0 : *o / z;
})");
  }

  /// The backward: key tasks, then query tasks (those of the gradients written).
  void backward() {
    const bool keys_role = a_.dk >= 0 || a_.dv >= 0;
    if (a_.dv >= 0) put("__shared__ $T Ps[$BR][65];");
    if (needs_g(a_)) put("__shared__ $T Gs[$BR][65];");
    put("__shared__ __align__(16) $T Stage[$STAGE];");
    if (needs_g(a_)) put("__shared__ $T Ds[$BR];");
    if (keys_role) put("const long long kblocks = (A_s + 63) / 64;");
    if (a_.dq >= 0) put("const long long qchunks = (A_l + $BR - 1) / $BR;");
    put(std::string("const long long ktasks = ") + (keys_role ? "A_bh * kblocks" : "0") + ", tasks = ktasks + " +
        (a_.dq >= 0 ? "A_bh * qchunks" : "0") + ";");
    open("for (long long task = blockIdx.x; task < tasks; task += gridDim.x)");
    if (keys_role) {
      open("if (task < ktasks)");
      key_task();
      close();
    }
    if (a_.dq >= 0) {
      open(keys_role ? "else" : "");
      query_task();
      close();
    }
    close(); // tasks
  }

  /// A key task: dk and dv (those written) of a batch point's block of 64 keys, over the query rows
  /// in order by chunks of BR.
  void key_task() {
    put(R"(const long long bi = task / kblocks, key0 = task % kblocks * 64;
const int nkeys = (int)(A_s - key0 < 64 ? A_s - key0 : 64);)");
    if (a_.dk >= 0) put("for (long long x = tid; x < nkeys * A_e; x += 256) $DK_[(bi * A_s + key0) * A_e + x] = ($T)0;");
    if (a_.dv >= 0) put("for (long long x = tid; x < nkeys * A_ev; x += 256) $DV[(bi * A_s + key0) * A_ev + x] = ($T)0;");
    put(a_.causal ? "const long long first = key0 < A_l ? key0 : A_l; // rows before the block's first key see none of it"
                  : "const long long first = 0;");
    open("for (long long qrow0 = first; qrow0 < A_l; qrow0 += $BR)");
    put("const int nrows = (int)(A_l - qrow0 < $BR ? A_l - qrow0 : $BR);");
    tile(needs_g(a_));
    if (a_.dv >= 0) update_keys("$DV", "A_ev", "$DOUT", "Ps");
    if (a_.dk >= 0) update_keys("$DK_", "A_e", "$Q", "Gs");
    close();
  }

  /// A query task: dq of a batch point's chunk of BR query rows, over the key blocks in order.
  void query_task() {
    put(R"(const long long bi = (task - ktasks) / qchunks, qrow0 = (task - ktasks) % qchunks * $BR;
const int nrows = (int)(A_l - qrow0 < $BR ? A_l - qrow0 : $BR);
for (long long x = tid; x < nrows * A_e; x += 256) $DQ[(bi * A_l + qrow0) * A_e + x] = ($T)0;)");
    if (a_.causal) {
      // the blocks starting at or before the chunk's last row: exactly each row's (BR divides 64, so a
      // chunk never straddles a block's first key)
      put("const long long last = ((qrow0 + nrows - 1) / 64 + 1) * 64;");
      put("const long long keys = A_s < last ? A_s : last;");
    } else {
      put("const long long keys = A_s;");
    }
    open("for (long long key0 = 0; key0 < keys; key0 += 64)");
    put("const int nkeys = (int)(A_s - key0 < 64 ? A_s - key0 : 64);");
    tile(true);
    update_rows();
    close();
  }

  /// dq[row] += g[row][key] * k[key] over the block's keys in order, for the chunk's rows
  /// (rows_times_keys).
  void update_rows() { rows_times_keys("Gs", "$K", "A_e", "$DQ", "*o"); }

  /// p (into Ps, where dv is written) and, with `g`, g (into Gs; D of the rows into Ds first) of the
  /// chunk's rows [qrow0, +nrows) and the block's keys [key0, +nkeys).
  void tile(bool g) {
    if (g) put(R"(for (int rr = tid; rr < $BR; rr += 256) {
  $T d = ($T)0;
  if (rr < nrows)
    for (long long c = 0; c < A_ev; ++c)
      d = kiln_attn_fma($DOUT[(bi * A_l + qrow0 + rr) * A_ev + c], $OUT[(bi * A_l + qrow0 + rr) * A_ev + c], d);
  Ds[rr] = d;
})");
    put(R"($T sc[$Y][4];
kiln_attn_dots<$T, $BR, $DK>($Q, bi * A_l + qrow0, nrows, $K, bi * A_s + key0, nkeys, A_e, Stage, sc);)");
    if (g) put("$T dp[$Y][4];\nkiln_attn_dots<$T, $BR, $DK>($DOUT, bi * A_l + qrow0, nrows, $V, bi * A_s + key0, nkeys, A_ev, Stage, dp);");
    put("#pragma unroll");
    open("for (int y = 0; y < $Y; ++y)");
    put("#pragma unroll");
    open("for (int x = 0; x < 4; ++x)");
    put("const int rr = ty + 16 * y, jj = tx + 16 * x;");
    open("if (rr < nrows && jj < nkeys)");
    put("$T s = sc[y][x] * A_scale;");
    mask_score();
    put(R"(const $T lse = $LSE[bi * A_l + qrow0 + rr];
const $T pv = kiln_exp_$F(s - (lse == -A_inf ? A_inf : lse));)");
    if (a_.dropout) dropout_factor();
    if (a_.dv >= 0) put(a_.dropout ? "Ps[rr][jj] = pv * z; // dv's weight: the dropped one" : "Ps[rr][jj] = pv;");
    if (g)
      put(std::string("Gs[rr][jj] = s == -A_inf ? ($T)0 : (pv * (") + (a_.dropout ? "dp[y][x] * z" : "dp[y][x]") +
          " - Ds[rr])) * A_scale; // a masked key adds nothing");
    close();
    close();
    close();
    put("__syncthreads();");
  }

  /// dst[key] += coef[row][key] * src[row] over the chunk's rows in order, for the block's keys:
  /// a thread per (key, column), the rows' columns staged by chunks of CW.
  void update_keys(const char* dst, const char* width, const char* src, const char* coef) {
    put(subst(R"(for (long long c0 = 0; c0 < WIDTH; c0 += $CW) {
  const int cn = (int)(WIDTH - c0 < $CW ? WIDTH - c0 : $CW);
  __syncthreads();
  for (int x = tid; x < $BR * $CW; x += 256) {
    const int rr = x / $CW, c = x % $CW;
    Stage[x] = rr < nrows && c < cn ? SRC[(bi * A_l + qrow0 + rr) * WIDTH + c0 + c] : ($T)0;
  }
  __syncthreads();
  const int tc = tid % $CW;
  if (tc < cn)
    for (int kk = tid / $CW; kk < nkeys; kk += 256 / $CW) {
      $T* const o = DST + (bi * A_s + key0 + kk) * WIDTH + c0 + tc;
      $T acc = *o;
      ROWS
      for (int rr = rstart; rr < nrows; ++rr) acc = kiln_attn_fma(COEF[rr][kk], Stage[rr * $CW + tc], acc);
      *o = acc;
    }
})",
              {{"DST", dst}, {"SRC", src}, {"COEF", coef}, {"WIDTH", width},
               {"ROWS", a_.causal ? "const long long unseen = key0 + kk - qrow0; // causal: the rows from the key's on only\n"
                                    "      const int rstart = unseen > 0 ? (unseen < nrows ? (int)unseen : nrows) : 0;"
                                  : "const int rstart = 0;"}}));
  }
};

} // namespace

std::string cuda_attention_helpers() {
  return R"(#ifndef KILN_CUDA_ATTENTION
#define KILN_CUDA_ATTENTION
KILN_DF float kiln_attn_inf(float) { return __int_as_float(0x7f800000); }
KILN_DF double kiln_attn_inf(double) { return __longlong_as_double(0x7ff0000000000000LL); }
KILN_DF float kiln_attn_fma(float a, float b, float c) { return fmaf(a, b, c); }
KILN_DF double kiln_attn_fma(double a, double b, double c) { return fma(a, b, c); }
// acc[y][x] = the dot product of row ty + 16 y of x (rows from x0, xn of them inside) and row
// tx + 16 x of y (from y0, yn inside), over `width` columns, fma in order of the column: the rows
// staged through `stage` (shared) by chunks of DK columns. Every thread of the block calls it; a
// barrier before each chunk's staging and one at the end.
template <class T, int BR, int DK>
__device__ void kiln_attn_dots(const T* __restrict__ x, long long x0, int xn, const T* __restrict__ y, long long y0, int yn,
                               long long width, T* stage, T (&acc)[BR / 16][4]) {
  const int tid = (int)threadIdx.x, tx = tid % 16, ty = tid / 16;
  T* const xs = stage;
  T* const ys = stage + BR * (DK + 1);
#pragma unroll
  for (int a = 0; a < BR / 16; ++a)
#pragma unroll
    for (int c = 0; c < 4; ++c) acc[a][c] = (T)0;
  for (long long d0 = 0; d0 < width; d0 += DK) {
    const int dn = width - d0 < DK ? (int)(width - d0) : DK;
    __syncthreads();
    for (int e = tid; e < BR * DK; e += 256) {
      const int r = e / DK, d = e % DK;
      xs[r * (DK + 1) + d] = r < xn && d < dn ? x[(x0 + r) * width + d0 + d] : (T)0;
    }
    for (int e = tid; e < 64 * DK; e += 256) {
      const int r = e / DK, d = e % DK;
      ys[r * (DK + 1) + d] = r < yn && d < dn ? y[(y0 + r) * width + d0 + d] : (T)0;
    }
    __syncthreads();
    for (int d = 0; d < dn; ++d) {
      T xv[BR / 16], yv[4];
#pragma unroll
      for (int a = 0; a < BR / 16; ++a) xv[a] = xs[(ty + 16 * a) * (DK + 1) + d];
#pragma unroll
      for (int c = 0; c < 4; ++c) yv[c] = ys[(tx + 16 * c) * (DK + 1) + d];
#pragma unroll
      for (int a = 0; a < BR / 16; ++a)
#pragma unroll
        for (int c = 0; c < 4; ++c) acc[a][c] = kiln_attn_fma(xv[a], yv[c], acc[a][c]);
    }
  }
  __syncthreads(); // the stage is free again, and the block is past what it did before the call (even for width 0)
}
#endif
)";
}

void emit_cuda_attention(const Kernel& k, CudaBody& body) {
  KILN_ASSERT(k.form == KernelForm::Attention && k.attention &&
                  (k.attention->dtype == DType::Float32 || k.attention->dtype == DType::Float64),
              "not an attention kernel: " + k.name);
  Writer(k, body).emit();
}

CudaLaunchConfig cuda_attention_launch_config(const Kernel& k, const std::vector<int64_t>& params, int64_t max_grid) {
  const AttentionSpec& a = *k.attention;
  const int64_t bh = eval_index(a.bh, params), l = eval_index(a.l, params), s = eval_index(a.s, params);
  int64_t tasks = bh * ceil_div(l, kRows);
  if (a.backward)
    tasks = (a.dk >= 0 || a.dv >= 0 ? bh * ceil_div(s, kKeys) : 0) + (a.dq >= 0 ? bh * ceil_div(l, tiles(a.dtype).br) : 0);
  CudaLaunchConfig c;
  c.grid = static_cast<unsigned>(std::min(tasks, max_grid));
  c.block = kThreads;
  c.fixed_block = true;
  c.shared_bytes = static_cast<unsigned>(shared_bytes(a));
  return c;
}

} // namespace kiln::codegen
