// The kernel IR's text form read back (parse_kernel, see kernel_ir.h): the inverse of
// print_kernel, so that IR-level tests can start from kernel text.
//
// The text is line-based. Expression lets (`v3: f32 = mul(v1, p2:f32)`) may be used before
// they are defined (the printer writes the domain's line before the lets its extents use), so
// the lines are read first and the expressions built on demand, each let once: shared subtrees
// stay shared, and printing the parsed kernel gives the text back.
#include <algorithm>
#include <charconv>
#include <limits>
#include <cstdlib>
#include <map>
#include <optional>
#include <unordered_map>

#include "codegen/kernel_ir.h"
#include "graph/verify.h"
#include "kiln/error.h"

namespace kiln::codegen {

namespace {

using graph::OpKind;

[[noreturn]] void fail(int line, const std::string& what) {
  throw Error("parse_kernel", "line " + std::to_string(line) + ": " + what);
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

/// Splits "a, b, c" (no nesting: the operands of a let are atoms).
std::vector<std::string_view> split_list(std::string_view s) {
  std::vector<std::string_view> out;
  s = trim(s);
  if (s.empty()) return out;
  for (size_t start = 0;;) {
    const size_t comma = s.find(',', start);
    out.push_back(trim(s.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start)));
    if (comma == std::string_view::npos) return out;
    start = comma + 1;
  }
}

int64_t parse_int(std::string_view s, int line, const char* what) {
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) fail(line, std::string("bad ") + what + " '" + std::string(s) + "'");
  return v;
}

DType parse_dtype(std::string_view s, int line) {
  DType t;
  if (!dtype_from_name(s, t)) fail(line, "unknown dtype '" + std::string(s) + "'");
  return t;
}

/// The number after a one- or more-letter prefix ("v12" -> 12), or -1 when `s` is not prefix + digits
/// or the number does not fit an int (the IR's indices are ints: "p2193558186" printed back as a
/// negative parameter, which the fuzzer found).
int64_t numbered(std::string_view s, std::string_view prefix) {
  if (!starts_with(s, prefix) || s.size() == prefix.size()) return -1;
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data() + prefix.size(), s.data() + s.size(), v);
  return ec == std::errc() && end == s.data() + s.size() && v <= std::numeric_limits<int>::max() ? v : -1;
}

std::shared_ptr<Expr> make_expr(ExprKind kind, DType dtype, std::vector<ExprRef> args = {}, int index = 0) {
  auto e = std::make_shared<Expr>();
  e->kind = kind;
  e->dtype = dtype;
  e->index = index;
  e->args = std::move(args);
  return e;
}

class Parser {
public:
  explicit Parser(std::string_view text) { read_lines(text); }

  Kernel parse() {
    Kernel k;
    parse_header(k);
    k.domain = extents(domain_, domain_line_);
    if (gemm_) {
      k.matmul = MatmulDims{gemm_->m_var, gemm_->n_var};
      k.gemm = gemm_;
      k.form = KernelForm::Gemm;
    }
    if (attention_) k.attention = attention(k), k.form = KernelForm::Attention;
    for (size_t r = 0; r < reductions_.size(); ++r) k.reductions.push_back(reduction(static_cast<int>(r)));
    if (scan_) {
      k.scan = scan_loop();
      k.form = KernelForm::Scan;
    }
    k.map = extents(map_, map_line_);
    for (const StoreText& s : stores_) {
      if (s.buffer < 0 || s.buffer >= static_cast<int>(k.buffers.size()) || !k.buffers[static_cast<size_t>(s.buffer)].output)
        fail(s.line, "store to b" + std::to_string(s.buffer) + ", which is not an output buffer");
      Store st{s.buffer, ref(s.offset, s.line), ref(s.value, s.line)};
      if (st.offset->dtype != DType::Int64 || st.value->dtype != k.buffers[static_cast<size_t>(s.buffer)].dtype)
        fail(s.line, "a store's offset is i64 and its value has the buffer's dtype");
      k.stores.push_back(std::move(st));
    }
    return k;
  }

private:
  struct Let {
    DType dtype;
    std::string_view head, args;
    int line;
  };
  struct ReductionText {
    ReduceOp op;
    bool fma = false, block_inner = false;
    std::string_view extents, value;
    int line;
  };
  // "scan red0 = OP DTYPE over r0 < STEPS [into m0 < POSITIONS] [inner_axis]:", its yield and "at m0 = TARGET";
  // an argsort's OP is "argsort" or "argsort descending"
  struct ScanText {
    ScanOp op;
    DType dtype;
    bool inner_axis = false;
    bool sort = false, descending = false;
    std::string_view steps, positions, value, target;
    int line;
  };
  struct StoreText {
    int buffer;
    std::string_view offset, value;
    int line;
  };

  std::string_view header_;
  std::string_view domain_, map_;
  int domain_line_ = 0, map_line_ = 0;
  std::optional<GemmTiling> gemm_;
  std::optional<AttentionSpec> attention_; // its buffers, causal and rows (from the "attention" line)
  std::string_view attention_sizes_, attention_scale_, attention_mask_, attention_dropout_; // "sizes", "mask", "dropout"
  int attention_line_ = 0, sizes_line_ = 0, mask_line_ = 0, dropout_line_ = 0;
  std::map<int64_t, Let> lets_;
  std::vector<ReductionText> reductions_;
  std::optional<ScanText> scan_;
  std::vector<StoreText> stores_;
  std::unordered_map<int64_t, ExprRef> built_;
  std::vector<std::optional<Reduction>> built_reductions_;
  std::vector<DType> buffer_dtypes_;
  std::vector<int64_t> building_; // lets being built (a cycle is an error)
  int visible_reductions_ = 1 << 30; // reductions whose results may be read here

  void read_lines(std::string_view text) {
    int line = 0;
    for (size_t start = 0; start <= text.size();) {
      size_t nl = text.find('\n', start);
      if (nl == std::string_view::npos) nl = text.size();
      ++line;
      read_line(trim(text.substr(start, nl - start)), line);
      start = nl + 1;
    }
    if (header_.empty()) fail(1, "no 'kernel NAME(...)' line");
    if (domain_line_ == 0) fail(line, "no 'domain [...]' line");
    for (const ReductionText& r : reductions_)
      if (r.value.empty()) fail(r.line, "reduction without a 'yield'");
    if (scan_ && (scan_->value.empty() || scan_->positions.empty() != scan_->target.empty()))
      fail(scan_->line, "a scan needs a 'yield', and a scatter's also an 'at m0 = ...'");
  }

  void read_line(std::string_view s, int line) {
    if (s.empty()) return;
    if (starts_with(s, "kernel ")) {
      if (!header_.empty()) fail(line, "a second 'kernel' line");
      header_ = s;
    } else if (starts_with(s, "domain ")) {
      domain_ = bracketed(s.substr(7), line);
      domain_line_ = line;
    } else if (starts_with(s, "gemm ")) {
      gemm_ = gemm(s.substr(5), line);
    } else if (starts_with(s, "attention ")) {
      attention_ = attention_line(s.substr(10), line);
      attention_line_ = line;
    } else if (starts_with(s, "sizes [bh, l, s, e, ev] = ")) {
      const std::string_view rest = s.substr(26);
      const size_t at = rest.rfind(" scale ");
      if (at == std::string_view::npos) fail(line, "expected 'sizes [bh, l, s, e, ev] = [...] scale X'");
      attention_sizes_ = bracketed(rest.substr(0, at), line);
      attention_scale_ = trim(rest.substr(at + 7));
      sizes_line_ = line;
    } else if (starts_with(s, "mask ")) {
      attention_mask_ = trim(s.substr(5));
      mask_line_ = line;
    } else if (starts_with(s, "dropout ")) {
      attention_dropout_ = trim(s.substr(8));
      dropout_line_ = line;
    } else if (starts_with(s, "reduce ")) {
      reductions_.push_back(reduction_text(s.substr(7), line));
    } else if (starts_with(s, "scan ")) {
      if (scan_ || !reductions_.empty()) fail(line, "a scan kernel has one scan and no reductions");
      scan_ = scan_text(s.substr(5), line);
    } else if (starts_with(s, "yield ")) {
      if (!scan_ && reductions_.empty()) fail(line, "'yield' outside a reduction or scan");
      std::string_view& value = scan_ ? scan_->value : reductions_.back().value;
      if (!value.empty()) fail(line, "'yield' outside a reduction or scan");
      value = trim(s.substr(6));
    } else if (starts_with(s, "at m0 = ")) {
      if (!scan_ || scan_->positions.empty() || !scan_->target.empty()) fail(line, "'at' outside a scatter");
      scan_->target = trim(s.substr(8));
    } else if (starts_with(s, "map ")) {
      if (!s.ends_with(":")) fail(line, "expected ':' after the map's extents");
      map_ = bracketed(s.substr(4, s.size() - 5), line);
      map_line_ = line;
    } else if (starts_with(s, "store ")) {
      stores_.push_back(store_text(s.substr(6), line));
    } else if (s.front() == 'v') {
      let(s, line);
    } else {
      fail(line, "unexpected '" + std::string(s) + "'");
    }
  }

  static std::string_view bracketed(std::string_view s, int line) {
    s = trim(s);
    if (s.size() < 2 || s.front() != '[' || s.back() != ']') fail(line, "expected [extents]");
    return s.substr(1, s.size() - 2);
  }

  static GemmTiling gemm(std::string_view s, int line) {
    GemmTiling g;
    const std::vector<std::string_view> w = words(s);
    if (w.size() % 2) fail(line, "gemm: expected name value pairs");
    for (size_t i = 0; i < w.size(); i += 2) {
      const int64_t v = parse_int(w[i + 1], line, "gemm value");
      if (w[i] == "m_var") g.m_var = static_cast<int>(v);
      else if (w[i] == "n_var") g.n_var = static_cast<int>(v);
      else if (w[i] == "mr") g.mr = v;
      else if (w[i] == "nr") g.nr = v;
      else if (w[i] == "mc") g.mc = v;
      else if (w[i] == "nc") g.nc = v;
      else if (w[i] == "kc") g.kc = v;
      else if (w[i] == "mc_param") g.mc_param = static_cast<int>(v);
      else if (w[i] == "nc_param") g.nc_param = static_cast<int>(v);
      else fail(line, "gemm: unknown field '" + std::string(w[i]) + "'");
    }
    return g;
  }

  /// "q bQ k bK v bV [out bO] [lse bL] [dout bD [dq bN] [dk bN] [dv bN]] [causal] rows R" (print_kernel's
  /// attention line; with dout, the backward, which reads out and lse).
  static AttentionSpec attention_line(std::string_view s, int line) {
    AttentionSpec a;
    const std::vector<std::string_view> w = words(s);
    for (size_t i = 0; i < w.size(); ++i) {
      if (w[i] == "causal") {
        a.causal = true;
        continue;
      }
      if (i + 1 == w.size()) fail(line, "attention: '" + std::string(w[i]) + "' without a value");
      const std::string_view v = w[++i];
      const int64_t b = numbered(v, "b");
      if (w[i - 1] == "rows") a.rows = parse_int(v, line, "attention rows");
      else if (b < 0) fail(line, "attention: expected a buffer bN after '" + std::string(w[i - 1]) + "'");
      else if (w[i - 1] == "q") a.q = static_cast<int>(b);
      else if (w[i - 1] == "k") a.k = static_cast<int>(b);
      else if (w[i - 1] == "v") a.v = static_cast<int>(b);
      else if (w[i - 1] == "out") a.out = static_cast<int>(b);
      else if (w[i - 1] == "lse") a.lse = static_cast<int>(b);
      else if (w[i - 1] == "dout") a.dout = static_cast<int>(b), a.backward = true;
      else if (w[i - 1] == "dq") a.dq = static_cast<int>(b);
      else if (w[i - 1] == "dk") a.dk = static_cast<int>(b);
      else if (w[i - 1] == "dv") a.dv = static_cast<int>(b);
      else fail(line, "attention: unknown field '" + std::string(w[i - 1]) + "'");
    }
    if (a.q < 0 || a.k < 0 || a.v < 0 || (a.out < 0 && (a.backward || a.lse < 0)))
      fail(line, "attention: needs q, k, v and out buffers");
    if (a.backward && a.lse < 0) fail(line, "attention: the backward needs an lse buffer");
    if (!a.backward && (a.dq >= 0 || a.dk >= 0 || a.dv >= 0)) fail(line, "attention: dq, dk or dv without dout");
    if (a.backward && a.dq < 0 && a.dk < 0 && a.dv < 0) fail(line, "attention: dout without dq, dk or dv");
    return a;
  }

  /// The attention kernel's spec, its buffers checked and its sizes, scale, mask and dropout built.
  AttentionSpec attention(const Kernel& k) {
    AttentionSpec a = *attention_;
    const int n = static_cast<int>(k.buffers.size());
    for (int b : {a.q, a.k, a.v, a.out, a.lse, a.dout, a.dq, a.dk, a.dv})
      if (b >= n) fail(attention_line_, "attention: no buffer b" + std::to_string(b));
    auto is_output = [&](int b) { return k.buffers[static_cast<size_t>(b)].output; };
    if (!a.backward && a.out >= 0 && !is_output(a.out)) fail(attention_line_, "attention: 'out' is not an output buffer");
    if (!a.backward && a.lse >= 0 && !is_output(a.lse)) fail(attention_line_, "attention: 'lse' is not an output buffer");
    for (int b : {a.dq, a.dk, a.dv})
      if (b >= 0 && !is_output(b)) fail(attention_line_, "attention: dq, dk and dv must be output buffers");
    a.dtype = k.buffers[static_cast<size_t>(a.out >= 0 ? a.out : a.lse)].dtype;
    if (!is_floating(a.dtype)) fail(attention_line_, "attention: needs a floating output");
    for (int b : {a.q, a.k, a.v, a.out, a.lse, a.dout, a.dq, a.dk, a.dv})
      if (b >= 0 && k.buffers[static_cast<size_t>(b)].dtype != a.dtype)
        fail(attention_line_, "attention: q, k, v, out, lse and the gradients differ in dtype");
    if (sizes_line_ == 0) fail(attention_line_, "attention without a 'sizes' line");
    const std::vector<ExprRef> sizes = extents(attention_sizes_, sizes_line_);
    if (sizes.size() != 5) fail(sizes_line_, "attention: expected 5 sizes");
    a.bh = sizes[0], a.l = sizes[1], a.s = sizes[2], a.e = sizes[3], a.ev = sizes[4];
    a.scale = ref(attention_scale_, sizes_line_);
    if (a.scale->dtype != a.dtype) fail(sizes_line_, "attention: the scale has the output's dtype");
    if (mask_line_ != 0) {
      a.mask = ref(attention_mask_, mask_line_);
      if (a.mask->dtype != DType::Bool && a.mask->dtype != a.dtype) fail(mask_line_, "attention: the mask is bool or of the output's dtype");
    }
    if (dropout_line_ != 0) {
      a.dropout = ref(attention_dropout_, dropout_line_);
      if (a.dropout->dtype != a.dtype) fail(dropout_line_, "attention: the dropout factor has the output's dtype");
    }
    return a;
  }

  static std::vector<std::string_view> words(std::string_view s) {
    std::vector<std::string_view> w;
    for (size_t i = 0; i < s.size();) {
      while (i < s.size() && s[i] == ' ') ++i;
      size_t j = i;
      while (j < s.size() && s[j] != ' ') ++j;
      if (j > i) w.push_back(s.substr(i, j - i));
      i = j;
    }
    return w;
  }

  // "redK = OP [fma] [block_inner] over [extents]:"
  static ReductionText reduction_text(std::string_view s, int line) {
    const size_t over = s.find(" over ");
    if (over == std::string_view::npos || !s.ends_with(":")) fail(line, "expected 'reduce redK = OP over [...]:'");
    const std::vector<std::string_view> w = words(s.substr(0, over));
    if (w.size() < 3 || w[1] != "=") fail(line, "expected 'reduce redK = OP ...'");
    ReductionText r{};
    r.line = line;
    OpKind op;
    const std::optional<ReduceOp> red = graph::op_from_name(w[2], op) ? reduce_op(op) : std::nullopt;
    if (!red) fail(line, "unknown reduction '" + std::string(w[2]) + "'");
    r.op = *red;
    for (size_t i = 3; i < w.size(); ++i) {
      if (w[i] == "fma") r.fma = true;
      else if (w[i] == "block_inner") r.block_inner = true;
      else fail(line, "unknown reduction flag '" + std::string(w[i]) + "'");
    }
    r.extents = bracketed(s.substr(over + 6, s.size() - over - 7), line);
    return r;
  }

  static ScanText scan_text(std::string_view s, int line) {
    if (!s.ends_with(":")) fail(line, "expected ':' after the scan");
    std::vector<std::string_view> w = words(s.substr(0, s.size() - 1));
    ScanText t{};
    t.line = line;
    t.op = ScanOp::Add;
    // red0 = argsort [descending] DTYPE over r0 < STEPS [inner_axis]: the word after argsort taken out
    if (w.size() > 2 && w[2] == "argsort") {
      t.sort = true;
      if (w.size() > 3 && w[3] == "descending") t.descending = true, w.erase(w.begin() + 3);
    }
    // red0 = OP DTYPE over r0 < STEPS [into m0 < POSITIONS] [inner_axis]
    if (w.size() < 8 || w[0] != "red0" || w[1] != "=" || w[4] != "over" || w[5] != "r0" || w[6] != "<")
      fail(line, "expected 'scan red0 = OP DTYPE over r0 < STEPS ...:'");
    if (!t.sort) {
      const std::optional<ScanOp> combine = scan_op_named(w[2]);
      if (!combine) fail(line, "a scan combines by add, mul, max, min or logaddexp, not '" + std::string(w[2]) + "'");
      t.op = *combine;
    }
    t.dtype = parse_dtype(w[3], line);
    if (t.op == ScanOp::LogAddExp && !is_floating(t.dtype)) fail(line, "a logaddexp scan needs a floating dtype");
    t.steps = w[7];
    size_t i = 8;
    if (i < w.size() && w[i] == "into") {
      if (t.sort) fail(line, "an argsort has no 'into'");
      if (i + 3 >= w.size() || w[i + 1] != "m0" || w[i + 2] != "<") fail(line, "expected 'into m0 < POSITIONS'");
      t.positions = w[i + 3];
      if (t.op == ScanOp::LogAddExp) fail(line, "a scatter combines by add, mul, max or min");
      i += 4;
    }
    if (i < w.size() && w[i] == "inner_axis") t.inner_axis = true, ++i;
    if (i != w.size()) fail(line, "unexpected '" + std::string(w[i]) + "' in the scan");
    return t;
  }

  // "bB[offset] = value"
  static StoreText store_text(std::string_view s, int line) {
    const size_t open = s.find('['), close = s.find("] = ");
    if (open == std::string_view::npos || close == std::string_view::npos || close < open)
      fail(line, "expected 'store bB[offset] = value'");
    const int64_t b = numbered(s.substr(0, open), "b");
    if (b < 0) fail(line, "expected a buffer 'bN'");
    return {static_cast<int>(b), trim(s.substr(open + 1, close - open - 1)), trim(s.substr(close + 4)), line};
  }

  // "vN: DT = HEAD(ARGS)"
  void let(std::string_view s, int line) {
    const size_t colon = s.find(':'), eq = s.find(" = ");
    if (colon == std::string_view::npos || eq == std::string_view::npos || eq < colon) fail(line, "expected 'vN: dtype = op(args)'");
    const int64_t id = numbered(s.substr(0, colon), "v");
    if (id < 0) fail(line, "expected a let name 'vN'");
    const std::string_view rhs = s.substr(eq + 3);
    const size_t open = rhs.find('(');
    if (open == std::string_view::npos || !rhs.ends_with(")")) fail(line, "expected 'op(args)'");
    if (!lets_.emplace(id, Let{parse_dtype(trim(s.substr(colon + 1, eq - colon - 1)), line), trim(rhs.substr(0, open)),
                               rhs.substr(open + 1, rhs.size() - open - 2), line})
             .second)
      fail(line, "v" + std::to_string(id) + " is defined twice");
  }

  // "kernel NAME(b0: f32, out b1: f32, err b2: i64; params N)"
  void parse_header(Kernel& k) {
    const std::string_view s = header_.substr(7);
    const size_t open = s.find('('), semi = s.rfind("; params ");
    if (open == std::string_view::npos || semi == std::string_view::npos || !s.ends_with(")"))
      fail(1, "expected 'kernel NAME(buffers; params N)'");
    k.name = std::string(s.substr(0, open));
    k.num_params = static_cast<int>(parse_int(s.substr(semi + 9, s.size() - semi - 10), 1, "parameter count"));
    for (std::string_view b : split_list(s.substr(open + 1, semi - open - 1))) {
      BufferParam p{};
      if (starts_with(b, "out ")) p.output = true, b.remove_prefix(4);
      else if (starts_with(b, "err ")) p.error = true, b.remove_prefix(4);
      const size_t colon = b.find(':');
      if (colon == std::string_view::npos || numbered(b.substr(0, colon), "b") != static_cast<int64_t>(k.buffers.size()))
        fail(1, "expected buffer b" + std::to_string(k.buffers.size()) + ": dtype");
      p.dtype = parse_dtype(trim(b.substr(colon + 1)), 1);
      k.buffers.push_back(p);
    }
    buffer_dtypes_.clear();
    for (const BufferParam& p : k.buffers) buffer_dtypes_.push_back(p.dtype);
    built_reductions_.assign(reductions_.size(), std::nullopt);
  }

  std::vector<ExprRef> refs(std::string_view list, int line) {
    std::vector<ExprRef> out;
    for (std::string_view r : split_list(list)) out.push_back(ref(r, line));
    return out;
  }
  std::vector<ExprRef> extents(std::string_view list, int line) {
    std::vector<ExprRef> out = refs(list, line);
    for (const ExprRef& e : out)
      if (e->dtype != DType::Int64) fail(line, "extents are i64");
    return out;
  }

  // An operand: vN, iN, rN, mN, pN[:dtype], redN, or a constant VALUE:dtype.
  ExprRef ref(std::string_view s, int line) {
    if (const int64_t v = numbered(s, "v"); v >= 0) return built_let(v, line);
    if (scan_ && s == "red0") {
      if (visible_reductions_ == 0) fail(line, "red0 is used before it is computed");
      return make_expr(ExprKind::ReduceResult, scan_->sort ? DType::Int64 : scan_->dtype, {}, 0);
    }
    if (const int64_t v = numbered(s, "red"); v >= 0) {
      if (v >= static_cast<int64_t>(reductions_.size())) fail(line, "red" + std::to_string(v) + " is not a reduction");
      if (v >= visible_reductions_) fail(line, "red" + std::to_string(v) + " is used before it is computed");
      const Reduction& r = reduction(static_cast<int>(v));
      const bool index = r.op == ReduceOp::Argmax || r.op == ReduceOp::Argmin;
      return make_expr(ExprKind::ReduceResult, index ? DType::Int64 : r.dtype, {}, static_cast<int>(v));
    }
    if (const int64_t v = numbered(s, "i"); v >= 0) return make_expr(ExprKind::LoopVar, DType::Int64, {}, static_cast<int>(v));
    if (const int64_t v = numbered(s, "r"); v >= 0) return make_expr(ExprKind::ReduceVar, DType::Int64, {}, static_cast<int>(v));
    if (const int64_t v = numbered(s, "m"); v >= 0) return make_expr(ExprKind::MapVar, DType::Int64, {}, static_cast<int>(v));
    const size_t colon = s.rfind(':');
    if (starts_with(s, "p")) {
      const int64_t v = numbered(s.substr(0, colon), "p");
      if (v < 0) fail(line, "bad parameter '" + std::string(s) + "'");
      const DType dt = colon == std::string_view::npos ? DType::Int64 : parse_dtype(s.substr(colon + 1), line);
      return make_expr(ExprKind::Param, dt, {}, static_cast<int>(v));
    }
    if (colon == std::string_view::npos) fail(line, "unknown operand '" + std::string(s) + "'");
    return constant_of(s.substr(0, colon), parse_dtype(s.substr(colon + 1), line), line);
  }

  static ExprRef constant_of(std::string_view text, DType dt, int line) {
    auto e = std::make_shared<Expr>();
    e->kind = ExprKind::Const;
    e->dtype = dt;
    if (is_floating(dt)) {
      const std::string t(text);
      char* end = nullptr;
      e->f = std::strtod(t.c_str(), &end);
      if (end != t.c_str() + t.size()) fail(line, "bad constant '" + t + "'");
    } else {
      e->i = parse_int(text, line, "constant");
    }
    return e;
  }

  const Reduction& reduction(int r) {
    auto& slot = built_reductions_.at(static_cast<size_t>(r));
    if (!slot) {
      const ReductionText& t = reductions_[static_cast<size_t>(r)];
      Reduction red;
      red.op = t.op;
      red.fma = t.fma;
      red.block_inner = t.block_inner;
      // reduction r sees the results of the reductions before it only
      const int outer = visible_reductions_;
      visible_reductions_ = r;
      red.extents = extents(t.extents, t.line);
      red.value = ref(t.value, t.line);
      visible_reductions_ = outer;
      red.dtype = red.value->dtype;
      slot = std::move(red);
    }
    return *slot;
  }

  ScanLoop scan_loop() {
    const ScanText& t = *scan_;
    ScanLoop sc;
    sc.op = t.op;
    sc.dtype = t.dtype;
    sc.inner_axis = t.inner_axis;
    sc.sort = t.sort;
    sc.descending = t.descending;
    const int outer = visible_reductions_;
    visible_reductions_ = 0; // the scan's own value and target do not read its result
    sc.steps = extents(t.steps, t.line).at(0);
    sc.value = ref(t.value, t.line);
    if (!t.positions.empty()) {
      sc.positions = extents(t.positions, t.line).at(0);
      sc.target = ref(t.target, t.line);
    }
    visible_reductions_ = outer;
    if (sc.value->dtype != sc.dtype || (sc.target && sc.target->dtype != DType::Int64))
      fail(t.line, "the scan's value has its dtype and a scatter's target is i64");
    return sc;
  }

  ExprRef built_let(int64_t id, int line) {
    if (auto it = built_.find(id); it != built_.end()) return it->second;
    auto it = lets_.find(id);
    if (it == lets_.end()) fail(line, "v" + std::to_string(id) + " is not defined");
    if (std::find(building_.begin(), building_.end(), id) != building_.end())
      fail(it->second.line, "v" + std::to_string(id) + " depends on itself");
    building_.push_back(id);
    ExprRef e = build(it->second);
    building_.pop_back();
    return built_[id] = e;
  }

  // The types the emitters rely on, checked so that ill-typed text is an error here rather
  // than a crash in an emitter.
  ExprRef build(const Let& l) {
    ExprRef e = untyped(l);
    auto expect = [&](bool ok, const char* what) {
      if (!ok) fail(l.line, std::string(l.head) + ": " + what);
    };
    const auto& a = e->args;
    auto all = [&](size_t from, DType dt) {
      return std::all_of(a.begin() + static_cast<std::ptrdiff_t>(from), a.end(), [&](const ExprRef& x) { return x->dtype == dt; });
    };
    switch (e->kind) {
    case ExprKind::Load:
      expect(a[0]->dtype == DType::Int64 && (a.size() == 1 || a[1]->dtype == DType::Bool), "offset i64, guard bool");
      expect(e->dtype == buffer_dtypes_[static_cast<size_t>(e->index)], "the buffer's dtype");
      break;
    case ExprKind::Check: expect(all(0, DType::Int64) && e->dtype == DType::Int64, "i64 operands and result"); break;
    case ExprKind::IntDiv: case ExprKind::IntMod: case ExprKind::Random:
      expect(all(0, DType::Int64), "i64 operands");
      expect(e->kind != ExprKind::Random ? e->dtype == DType::Int64 : is_floating(e->dtype), "its result type");
      break;
    case ExprKind::Op:
      if (e->op == ScalarOp::Cast) break;
      if (e->op == ScalarOp::Where) {
        expect(a[0]->dtype == DType::Bool && a[1]->dtype == e->dtype && a[2]->dtype == e->dtype, "where(bool, T, T): T");
        break;
      }
      expect(returns_bool(e->op) ? e->dtype == DType::Bool && all(0, a[0]->dtype) : all(0, e->dtype),
             "operands of its result's dtype (bool for a predicate)");
      break;
    case ExprKind::Const: case ExprKind::LoopVar: case ExprKind::ReduceVar: case ExprKind::MapVar: case ExprKind::Param:
    case ExprKind::ReduceResult: break; // operands, typed where they are read (ref())
    }
    return e;
  }

  ExprRef untyped(const Let& l) {
    std::vector<ExprRef> args = refs(l.args, l.line);
    auto need = [&](size_t lo, size_t hi) {
      if (args.size() < lo || args.size() > hi) fail(l.line, std::string(l.head) + ": wrong number of operands");
    };
    if (starts_with(l.head, "load ") || starts_with(l.head, "check ")) {
      const bool load = starts_with(l.head, "load ");
      const int64_t b = numbered(trim(l.head.substr(load ? 5 : 6)), "b");
      if (b < 0 || b >= static_cast<int64_t>(buffer_dtypes_.size())) fail(l.line, "bad buffer in '" + std::string(l.head) + "'");
      load ? need(1, 2) : need(3, 3);
      return make_expr(load ? ExprKind::Load : ExprKind::Check, l.dtype, std::move(args), static_cast<int>(b));
    }
    if (l.head == "idiv" || l.head == "imod") {
      need(2, 2);
      return make_expr(l.head == "idiv" ? ExprKind::IntDiv : ExprKind::IntMod, l.dtype, std::move(args));
    }
    for (RandomDist dist : {RandomDist::Uniform, RandomDist::Normal})
      if (l.head == op_name(dist)) {
        need(2, 2);
        auto e = make_expr(ExprKind::Random, l.dtype, std::move(args));
        e->dist = dist;
        return e;
      }
    OpKind graph_op;
    if (!graph::op_from_name(l.head, graph_op)) fail(l.line, "unknown op '" + std::string(l.head) + "'");
    const std::optional<ScalarOp> op = scalar_op(graph_op);
    if (!op) fail(l.line, "'" + std::string(l.head) + "' is not a kernel's elementwise op");
    const int arity = op_arity(*op);
    need(static_cast<size_t>(arity), static_cast<size_t>(arity));
    auto e = make_expr(ExprKind::Op, l.dtype, std::move(args));
    e->op = *op;
    return e;
  }
};

} // namespace

Kernel parse_kernel(std::string_view text) { return Parser(text).parse(); }

} // namespace kiln::codegen
