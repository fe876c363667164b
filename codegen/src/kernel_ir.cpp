#include "codegen/kernel_ir.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "graph/verify.h"
#include "kiln/error.h"

namespace kiln::codegen {

std::optional<ScalarOp> scalar_op(graph::OpKind op) {
  switch (op) {
#define KILN_OP(e, name, arity, cat, types) KILN_IF_SCALAR(e, cat, case graph::OpKind::e: return ScalarOp::e;)
#include "graph/ops.def"
#undef KILN_OP
#define KILN_OP(e, name, arity, cat, types) \
  KILN_IF_NOT_ELEMENTWISE_##cat(case graph::OpKind::e:) KILN_IF_NOT_SCALAR_ELEMENTWISE(e, cat, case graph::OpKind::e:)
#include "graph/ops.def"
#undef KILN_OP
    break;
  }
  return std::nullopt;
}

graph::OpKind graph_op(ScalarOp op) {
  switch (op) {
#define KILN_OP(e, name, arity, cat, types) KILN_IF_SCALAR(e, cat, case ScalarOp::e: return graph::OpKind::e;)
#include "graph/ops.def"
#undef KILN_OP
  }
  KILN_ASSERT(false, "bad ScalarOp " + std::to_string(static_cast<int>(op)));
  return graph::OpKind::Add;
}

std::optional<ReduceOp> reduce_op(graph::OpKind op) {
  switch (op) {
#define KILN_OP(e, name, arity, cat, types) KILN_IF_CATEGORY(cat, Reduce, case graph::OpKind::e: return ReduceOp::e;)
#include "graph/ops.def"
#undef KILN_OP
#define KILN_OP(e, name, arity, cat, types) KILN_IF_NOT_REDUCE_##cat(case graph::OpKind::e:)
#include "graph/ops.def"
#undef KILN_OP
    break;
  }
  return std::nullopt;
}

graph::OpKind graph_op(ReduceOp op) {
  switch (op) {
#define KILN_OP(e, name, arity, cat, types) KILN_IF_CATEGORY(cat, Reduce, case ReduceOp::e: return graph::OpKind::e;)
#include "graph/ops.def"
#undef KILN_OP
  }
  KILN_ASSERT(false, "bad ReduceOp " + std::to_string(static_cast<int>(op)));
  return graph::OpKind::Sum;
}

std::string_view op_name(ScalarOp op) { return graph::op_name(graph_op(op)); }
std::string_view op_name(ReduceOp op) { return graph::op_name(graph_op(op)); }
std::string_view scan_op_name(ScanOp op) {
  switch (op) {
  case ScanOp::Add: return "add";
  case ScanOp::Mul: return "mul";
  case ScanOp::Max: return "max";
  case ScanOp::Min: return "min";
  case ScanOp::LogAddExp: return "logaddexp";
  }
  KILN_ASSERT(false, "bad ScanOp " + std::to_string(static_cast<int>(op)));
  return "";
}

std::optional<ScanOp> scan_op_named(std::string_view name) {
  for (ScanOp op : {ScanOp::Add, ScanOp::Mul, ScanOp::Max, ScanOp::Min, ScanOp::LogAddExp})
    if (scan_op_name(op) == name) return op;
  return std::nullopt;
}

std::string_view op_name(RandomDist dist) {
  switch (dist) {
  case RandomDist::Uniform: return "rand";
  case RandomDist::Normal: return "randn";
  }
  return "?";
}
int op_arity(ScalarOp op) { return graph::op_arity(graph_op(op)); }
bool returns_bool(ScalarOp op) { return graph::returns_bool(graph_op(op)); }

namespace {

ExprRef make(ExprKind kind, DType dtype, std::vector<ExprRef> args = {}) {
  auto e = std::make_shared<Expr>();
  e->kind = kind;
  e->dtype = dtype;
  e->args = std::move(args);
  return e;
}

ExprRef indexed(ExprKind kind, int index, DType dtype = DType::Int64) {
  auto e = std::make_shared<Expr>();
  e->kind = kind;
  e->dtype = dtype;
  e->index = index;
  return e;
}

bool const_value(const ExprRef& e, int64_t& v) {
  if (e->kind != ExprKind::Const || e->dtype != DType::Int64) return false;
  v = e->i;
  return true;
}

} // namespace

ExprRef constant(DType dtype, double value) {
  if (!is_floating(dtype)) return int_constant(dtype, static_cast<int64_t>(value));
  auto e = std::make_shared<Expr>();
  e->kind = ExprKind::Const;
  e->dtype = dtype;
  e->f = value;
  return e;
}

ExprRef int_constant(DType dtype, int64_t value) {
  if (is_floating(dtype)) return constant(dtype, static_cast<double>(value));
  auto e = std::make_shared<Expr>();
  e->kind = ExprKind::Const;
  e->dtype = dtype;
  e->i = dtype == DType::Bool ? (value != 0) : value;
  return e;
}

ExprRef index_const(int64_t v) { return int_constant(DType::Int64, v); }
ExprRef loop_var(int d) { return indexed(ExprKind::LoopVar, d); }
ExprRef reduce_var(int k) { return indexed(ExprKind::ReduceVar, k); }
ExprRef map_var(int k) { return indexed(ExprKind::MapVar, k); }
ExprRef param(int k) { return indexed(ExprKind::Param, k); }

ExprRef scalar_param(int k, DType dtype) {
  KILN_ASSERT(dtype != DType::Bool, "bool constants stay baked");
  return indexed(ExprKind::Param, k, dtype);
}

int64_t scalar_param_bits(DType dtype, double value) {
  KILN_ASSERT(is_floating(dtype), "an integer's slot is its value");
  if (dtype == DType::Float64) return std::bit_cast<int64_t>(value);
  return static_cast<int64_t>(std::bit_cast<uint32_t>(static_cast<float>(value)));
}

int64_t scalar_param_bits(const graph::Node& n) {
  KILN_ASSERT(n.op == graph::OpKind::Const && n.dtype != DType::Bool, "not a scalar constant");
  if (is_floating(n.dtype)) return scalar_param_bits(n.dtype, n.attrs.f0);
  return n.dtype == DType::Int32 ? static_cast<int32_t>(n.attrs.i0) : n.attrs.i0;
}

ExprRef load(int buffer, DType dtype, ExprRef offset, ExprRef guard) {
  KILN_ASSERT(offset->dtype == DType::Int64);
  std::vector<ExprRef> args{std::move(offset)};
  if (guard) {
    KILN_ASSERT(guard->dtype == DType::Bool);
    args.push_back(std::move(guard));
  }
  auto e = std::make_shared<Expr>();
  e->kind = ExprKind::Load;
  e->dtype = dtype;
  e->index = buffer;
  e->args = std::move(args);
  return e;
}

ExprRef op(ScalarOp o, DType dtype, std::vector<ExprRef> args) {
  KILN_ASSERT(static_cast<int>(args.size()) == op_arity(o), std::string(op_name(o)));
  auto e = std::make_shared<Expr>();
  e->kind = ExprKind::Op;
  e->dtype = dtype;
  e->op = o;
  e->args = std::move(args);
  return e;
}

ExprRef cast(ExprRef x, DType to) {
  if (x->dtype == to) return x;
  if (x->kind == ExprKind::Const) {
    if (is_floating(x->dtype)) {
      if (is_floating(to)) return constant(to, to == DType::Float32 ? static_cast<float>(x->f) : x->f);
    } else if (to == DType::Bool || !is_floating(to)) {
      return int_constant(to, to == DType::Int32 ? static_cast<int32_t>(x->i) : x->i);
    }
  }
  return op(ScalarOp::Cast, to, {std::move(x)});
}

ExprRef reduce_result(int k, DType dtype) {
  auto e = indexed(ExprKind::ReduceResult, k);
  auto m = std::make_shared<Expr>(*e);
  m->dtype = dtype;
  return m;
}

ExprRef random(RandomDist dist, DType dtype, ExprRef seed, ExprRef counter) {
  auto e = std::make_shared<Expr>();
  e->kind = ExprKind::Random;
  e->dtype = dtype;
  e->dist = dist;
  e->args = {std::move(counter), std::move(seed)};
  return e;
}

ExprRef check(ExprRef index, ExprRef bound, ExprRef site, int error_buffer) {
  KILN_ASSERT(index->dtype == DType::Int32 || index->dtype == DType::Int64, "check of a non-integer");
  KILN_ASSERT(bound->dtype == DType::Int64 && site->dtype == DType::Int64);
  auto e = std::make_shared<Expr>();
  e->kind = ExprKind::Check;
  e->dtype = index->dtype;
  e->index = error_buffer;
  e->args = {std::move(index), std::move(bound), std::move(site)};
  return e;
}

const char* form_name(KernelForm f) {
  switch (f) {
  case KernelForm::Elementwise: return "elementwise";
  case KernelForm::Reduction: return "reduction";
  case KernelForm::Row: return "row";
  case KernelForm::Gemm: return "gemm";
  case KernelForm::Scan: return "scan";
  case KernelForm::Attention: return "attention";
  case KernelForm::Columns: return "columns";
  }
  return "?";
}

int64_t eval_index(const ExprRef& e, const std::vector<int64_t>& params) {
  auto arg = [&](int i) { return eval_index(e->args.at(i), params); };
  switch (e->kind) {
  case ExprKind::Const: return e->i;
  case ExprKind::Param:
    KILN_ASSERT(e->index >= 0 && e->index < static_cast<int>(params.size()), "launch size: bad param");
    return params[e->index];
  case ExprKind::IntDiv: return arg(1) ? arg(0) / arg(1) : 0;
  case ExprKind::IntMod: return arg(1) ? arg(0) % arg(1) : 0;
  case ExprKind::Op:
    if (e->op == ScalarOp::Add) return arg(0) + arg(1);
    if (e->op == ScalarOp::Sub) return arg(0) - arg(1);
    if (e->op == ScalarOp::Mul) return arg(0) * arg(1);
    if (e->op == ScalarOp::Maximum) return std::max(arg(0), arg(1));
    if (e->op == ScalarOp::Minimum) return std::min(arg(0), arg(1));
    break;
  case ExprKind::LoopVar: case ExprKind::ReduceVar: case ExprKind::MapVar: case ExprKind::Load:
  case ExprKind::ReduceResult: case ExprKind::Random: case ExprKind::Check:
    break;
  }
  KILN_ASSERT(false, "launch size is not an expression of parameters");
  return 0;
}

bool sums_in_lanes(const Reduction& r) {
  return r.op == ReduceOp::Sum && is_floating(r.dtype) && !r.block_inner && !r.extents.empty();
}

namespace {
bool mentions(const ExprRef& e, ExprKind kind, int index, std::unordered_set<const Expr*>& seen) {
  if (e->kind == kind && (index == kAnyIndex || e->index == index)) return true;
  if (!seen.insert(e.get()).second) return false;
  for (const ExprRef& a : e->args)
    if (mentions(a, kind, index, seen)) return true;
  return false;
}
} // namespace

bool same_node(const Expr& a, const Expr& b) {
  return a.kind == b.kind && a.dtype == b.dtype && a.op == b.op && a.index == b.index && a.i == b.i && a.dist == b.dist &&
         (a.f == b.f || (a.f != a.f && b.f != b.f)) && a.args.size() == b.args.size();
}

bool mentions(const ExprRef& e, ExprKind kind, int index) {
  std::unordered_set<const Expr*> seen;
  return mentions(e, kind, index, seen);
}

namespace {

/// Computes coefficient(): each shared subtree is looked at once, so a DAG costs its size,
/// not its tree size.
class Coefficient {
public:
  Coefficient(ExprKind kind, int index) : kind_(kind), index_(index) {}
  /// The coefficient in e.
  std::optional<int64_t> of(const ExprRef& e) {
    if (auto it = coef_.find(e.get()); it != coef_.end()) return it->second;
    return coef_[e.get()] = compute(e);
  }

private:
  ExprKind kind_;
  int index_;
  std::unordered_map<const Expr*, bool> mentions_;
  std::unordered_map<const Expr*, std::optional<int64_t>> coef_;

  bool mentions(const ExprRef& e) {
    if (e->kind == kind_ && e->index == index_) return true;
    if (auto it = mentions_.find(e.get()); it != mentions_.end()) return it->second;
    bool m = false;
    for (const ExprRef& a : e->args) m = m || mentions(a);
    return mentions_[e.get()] = m;
  }

  std::optional<int64_t> compute(const ExprRef& e) {
    if (!mentions(e)) return 0;
    if (e->kind == kind_) return 1;
    if (e->kind != ExprKind::Op || e->args.size() != 2) return std::nullopt;
    const auto a = of(e->args[0]), b = of(e->args[1]);
    if (!a || !b) return std::nullopt;
    if (e->op == ScalarOp::Add) return *a + *b;
    if (e->op == ScalarOp::Sub) return *a - *b;
    if (e->op != ScalarOp::Mul) return std::nullopt;
    for (int s = 0; s < 2; ++s)
      if (e->args[s]->kind == ExprKind::Const && (s ? *a : *b) == 0) return e->args[s]->i * (s ? *b : *a);
    return std::nullopt;
  }
};

} // namespace

std::optional<int64_t> coefficient(const ExprRef& e, ExprKind kind, int index) { return Coefficient(kind, index).of(e); }

void collect_loads(const ExprRef& e, std::vector<const Expr*>& out, std::unordered_set<const Expr*>& seen) {
  if (!seen.insert(e.get()).second) return;
  if (e->kind == ExprKind::Load) out.push_back(e.get());
  for (const ExprRef& a : e->args) collect_loads(a, out, seen);
}

bool is_const(const ExprRef& e, int64_t v) {
  int64_t c;
  return const_value(e, c) && c == v;
}

ExprRef iadd(ExprRef a, ExprRef b) {
  int64_t x, y;
  if (const_value(a, x) && const_value(b, y)) return index_const(x + y);
  if (is_const(a, 0)) return b;
  if (is_const(b, 0)) return a;
  return op(ScalarOp::Add, DType::Int64, {std::move(a), std::move(b)});
}

ExprRef isub(ExprRef a, ExprRef b) {
  int64_t x, y;
  if (const_value(a, x) && const_value(b, y)) return index_const(x - y);
  if (is_const(b, 0)) return a;
  return op(ScalarOp::Sub, DType::Int64, {std::move(a), std::move(b)});
}

ExprRef imul(ExprRef a, ExprRef b) {
  int64_t x, y;
  if (const_value(a, x) && const_value(b, y)) return index_const(x * y);
  if (is_const(a, 0) || is_const(b, 0)) return index_const(0);
  if (is_const(a, 1)) return b;
  if (is_const(b, 1)) return a;
  return op(ScalarOp::Mul, DType::Int64, {std::move(a), std::move(b)});
}

ExprRef idiv(ExprRef a, ExprRef b) {
  int64_t x, y;
  if (const_value(a, x) && const_value(b, y) && y != 0) return index_const(x / y);
  if (is_const(b, 1) || is_const(a, 0)) return a;
  return make(ExprKind::IntDiv, DType::Int64, {std::move(a), std::move(b)});
}

namespace {

/// The terms of an i64 sum (the leaves of its tree of Adds), in order.
void add_terms(const ExprRef& e, std::vector<ExprRef>& out) {
  if (e->kind == ExprKind::Op && e->op == ScalarOp::Add && e->dtype == DType::Int64) {
    add_terms(e->args[0], out);
    add_terms(e->args[1], out);
  } else {
    out.push_back(e);
  }
}

/// Structural equality of expressions (shared subtrees compare by pointer first).
bool same_expr(const ExprRef& a, const ExprRef& b) {
  if (a == b) return true;
  if (!same_node(*a, *b)) return false;
  for (size_t i = 0; i < a->args.size(); ++i)
    if (!same_expr(a->args[i], b->args[i])) return false;
  return true;
}

ExprRef sum_of(const std::vector<ExprRef>& terms) {
  ExprRef s = index_const(0);
  for (const ExprRef& t : terms) s = iadd(s, t);
  return s;
}

} // namespace

ExprRef iselect(ExprRef cond, ExprRef a, ExprRef b) {
  std::vector<ExprRef> ta, tb, common;
  add_terms(a, ta);
  add_terms(b, tb);
  for (auto it = ta.begin(); it != ta.end();) {
    auto match = std::find_if(tb.begin(), tb.end(), [&](const ExprRef& t) { return same_expr(*it, t); });
    if (match == tb.end() || (*it)->kind == ExprKind::Const) {
      ++it;
      continue;
    }
    common.push_back(*it);
    tb.erase(match);
    it = ta.erase(it);
  }
  if (common.empty()) return op(ScalarOp::Where, DType::Int64, {std::move(cond), std::move(a), std::move(b)});
  return iadd(iselect(std::move(cond), sum_of(ta), sum_of(tb)), sum_of(common));
}

ExprRef imod(ExprRef a, ExprRef b) {
  int64_t x, y;
  if (const_value(a, x) && const_value(b, y) && y != 0) return index_const(x % y);
  if (is_const(b, 1) || is_const(a, 0)) return index_const(0);
  return make(ExprKind::IntMod, DType::Int64, {std::move(a), std::move(b)});
}

namespace {

// Prints expressions as numbered lets so that shared subtrees print once.
class Printer {
public:
  std::string out;
  std::string ref(const ExprRef& e) {
    if (auto it = ids_.find(e.get()); it != ids_.end()) return it->second;
    std::string s = inline_form(e);
    if (s.empty()) {
      std::vector<std::string> args;
      for (const ExprRef& a : e->args) args.push_back(ref(a));
      s = head(*e) + "(";
      for (size_t i = 0; i < args.size(); ++i) s += (i ? ", " : "") + args[i];
      s += ")";
      // lets are numbered densely, whether or not the atoms they use are shared objects: the
      // text says nothing of the atoms' identity, so parse_kernel gives the same numbers back
      const std::string id = "v" + std::to_string(lets_++);
      out += "    " + id + ": " + std::string(dtype_name(e->dtype)) + " = " + s + "\n";
      s = id;
    }
    ids_[e.get()] = s;
    return s;
  }

private:
  std::unordered_map<const Expr*, std::string> ids_;
  int lets_ = 0;

  static std::string inline_form(const ExprRef& e) {
    switch (e->kind) {
    case ExprKind::Const: {
      if (!is_floating(e->dtype)) return std::to_string(e->i) + ":" + std::string(dtype_name(e->dtype));
      char buf[40];
      std::snprintf(buf, sizeof buf, "%.17g", e->f);
      return std::string(buf) + ":" + std::string(dtype_name(e->dtype));
    }
    case ExprKind::LoopVar: return "i" + std::to_string(e->index);
    case ExprKind::ReduceVar: return "r" + std::to_string(e->index);
    case ExprKind::MapVar: return "m" + std::to_string(e->index);
    case ExprKind::Param:
      return "p" + std::to_string(e->index) + (e->dtype == DType::Int64 ? "" : ":" + std::string(dtype_name(e->dtype)));
    case ExprKind::ReduceResult: return "red" + std::to_string(e->index);
    case ExprKind::Load: case ExprKind::Op: case ExprKind::IntDiv: case ExprKind::IntMod: case ExprKind::Random:
    case ExprKind::Check: break;
    }
    return ""; // compound kinds print as numbered lets
  }
  static std::string head(const Expr& e) {
    switch (e.kind) {
    case ExprKind::Load: return "load b" + std::to_string(e.index);
    case ExprKind::Op: return std::string(op_name(e.op));
    case ExprKind::IntDiv: return "idiv";
    case ExprKind::IntMod: return "imod";
    case ExprKind::Random: return std::string(op_name(e.dist)); // (counter, seed)
    case ExprKind::Check: return "check b" + std::to_string(e.index); // (index, bound, site)
    case ExprKind::Const: case ExprKind::LoopVar: case ExprKind::ReduceVar: case ExprKind::MapVar: case ExprKind::Param:
    case ExprKind::ReduceResult: break; // inline forms (inline_form)
    }
    return "?";
  }
};

std::string extents_str(Printer& p, const std::vector<ExprRef>& ext) {
  std::string s = "[";
  for (size_t i = 0; i < ext.size(); ++i) s += (i ? ", " : "") + p.ref(ext[i]);
  return s + "]";
}

// The backward's fields of an attention line (" dout bD dq bN dk bN dv bN", the gradients written only).
std::string attention_grad_fields(const AttentionSpec& a) {
  if (!a.backward) return "";
  std::string s = " dout b" + std::to_string(a.dout);
  for (auto [name, b] : {std::pair{" dq b", a.dq}, std::pair{" dk b", a.dk}, std::pair{" dv b", a.dv}})
    if (b >= 0) s += name + std::to_string(b);
  return s;
}

} // namespace

std::string print_kernel(const Kernel& k) {
  Printer p;
  std::string head = "kernel " + k.name + "(";
  for (size_t b = 0; b < k.buffers.size(); ++b)
    head += (b ? ", " : "") + std::string(k.buffers[b].output ? "out " : k.buffers[b].error ? "err " : "") + "b" +
            std::to_string(b) + ": " +
            std::string(dtype_name(k.buffers[b].dtype));
  head += "; params " + std::to_string(k.num_params) + ")\n";
  std::string body = "  domain " + extents_str(p, k.domain) + "\n";
  // The form shows only where it changes the emitted code beyond what the rest of the text
  // says: the GEMM form and its CPU tiling (a CUDA GEMM form has none). The other forms
  // follow from the text and the target's kind, which the caches' keys hold.
  if (const auto& g = k.gemm) {
    body += "  gemm m_var " + std::to_string(g->m_var) + " n_var " + std::to_string(g->n_var);
    if (g->mr > 0)
      body += " mr " + std::to_string(g->mr) + " nr " + std::to_string(g->nr) + " mc " + std::to_string(g->mc) +
              " nc " + std::to_string(g->nc) + " kc " + std::to_string(g->kc);
    if (g->mc_param >= 0) body += " mc_param " + std::to_string(g->mc_param) + " nc_param " + std::to_string(g->nc_param);
    body += "\n";
  }
  if (const auto& a = k.attention) {
    body += "  attention q b" + std::to_string(a->q) + " k b" + std::to_string(a->k) + " v b" + std::to_string(a->v) +
            (a->out >= 0 ? " out b" + std::to_string(a->out) : "") + (a->lse >= 0 ? " lse b" + std::to_string(a->lse) : "") +
            attention_grad_fields(*a) + (a->causal ? " causal" : "") + " rows " +
            std::to_string(a->rows) + "\n";
    const std::string sizes = extents_str(p, {a->bh, a->l, a->s, a->e, a->ev}), scale = p.ref(a->scale);
    p.out += "  sizes [bh, l, s, e, ev] = " + sizes + " scale " + scale + "\n";
    if (a->mask) {
      const std::string m = p.ref(a->mask);
      p.out += "  mask " + m + "\n";
    }
    if (a->dropout) {
      const std::string z = p.ref(a->dropout);
      p.out += "  dropout " + z + "\n";
    }
  }
  for (size_t r = 0; r < k.reductions.size(); ++r) {
    const Reduction& red = k.reductions[r];
    std::string ext = extents_str(p, red.extents);
    p.out += "  reduce red" + std::to_string(r) + " = " + std::string(op_name(red.op)) + (red.fma ? " fma" : "") + (red.block_inner ? " block_inner" : "") +
             " over " + ext + ":\n";
    const std::string v = p.ref(red.value);
    p.out += "    yield " + v + "\n";
  }
  if (const auto& sc = k.scan) {
    const std::string steps = p.ref(sc->steps);
    const std::string what =
        sc->sort ? std::string(sc->descending ? "argsort descending" : "argsort") : std::string(scan_op_name(sc->op));
    p.out += "  scan red0 = " + what + " " + std::string(dtype_name(sc->dtype)) + " over r0 < " + steps;
    if (sc->target) p.out += " into m0 < " + p.ref(sc->positions);
    p.out += std::string(sc->inner_axis ? " inner_axis" : "") + ":\n";
    const std::string v = p.ref(sc->value);
    p.out += "    yield " + v + "\n";
    if (sc->target) {
      const std::string t = p.ref(sc->target);
      p.out += "    at m0 = " + t + "\n";
    }
  }
  if (!k.map.empty()) p.out += "  map " + extents_str(p, k.map) + ":\n";
  for (const Store& s : k.stores) {
    const std::string off = p.ref(s.offset), val = p.ref(s.value);
    p.out += "    store b" + std::to_string(s.buffer) + "[" + off + "] = " + val + "\n";
  }
  return head + body + p.out;
}

std::pair<int64_t, int64_t> gemm_blocks(const Kernel& k, const std::vector<int64_t>& params) {
  KILN_ASSERT(k.gemm && k.gemm->mr > 0, "gemm_blocks of a kernel without a CPU GEMM form: " + k.name);
  const GemmTiling& g = *k.gemm;
  auto at = [&](int i, int64_t otherwise) { return i >= 0 ? params.at(static_cast<size_t>(i)) : otherwise; };
  return {at(g.mc_param, g.mc), at(g.nc_param, g.nc)};
}

int64_t gemm_scratch_bytes(const Kernel& k) {
  if (!k.gemm || k.gemm->mr == 0 || k.reductions.empty()) return 0; // not a CPU GEMM
  const GemmTiling& g = *k.gemm;
  const int64_t elem = k.reductions[0].dtype == DType::Float64 ? 8 : 4;
  // packed a block (mc x kc), packed b panel (kc x nr), accumulators (mc x nc), one tile
  return elem * (g.mc * g.kc + g.kc * g.nr + g.mc * g.nc + g.mr * g.nr) + 256;
}

SortScratch sort_scratch(DType key, int64_t n) {
  auto region = [](int64_t bytes) { return (bytes + 63) / 64 * 64; };
  const int64_t keys = region(n * static_cast<int64_t>(dtype_size(key))), idx = region(n * 8);
  return {0, keys, 2 * keys, 2 * keys + idx, 2 * keys + 2 * idx};
}

int64_t sort_scratch_bytes(const Kernel& k, const std::vector<int64_t>& params) {
  if (!k.scan || !k.scan->sort) return 0;
  return sort_scratch(k.scan->dtype, eval_index(k.scan->steps, params)).bytes + 64;
}

int64_t attention_scratch_bytes(const Kernel& k, const std::vector<int64_t>& params) {
  if (!k.attention) return 0;
  const AttentionSpec& a = *k.attention;
  const int64_t elem = a.dtype == DType::Float64 ? 8 : 4;
  const int64_t e = eval_index(a.e, params), ev = eval_index(a.ev, params);
  auto region = [&](int64_t elems) { return (elems * elem + 63) / 64 * 64; };
  // the backward: k^T and v^T blocks, p and g of a chunk of rows, D of the batch point's rows
  if (a.backward)
    return region(e * kAttentionKeyBlock) + region(ev * kAttentionKeyBlock) + 2 * region(kAttentionQueryBlock * kAttentionKeyBlock) +
           region(eval_index(a.l, params)) + 64;
  // each region rounded up to 64 bytes: k^T block (e x key block), the scores of 4 rows, output rows
  // (each ev rounded up to 128 bytes: the emitter's tiles of two 64-byte vectors), maxima, sums
  const int64_t ev_padded = (ev * elem + 127) / 128 * 128 / elem;
  return region(e * kAttentionKeyBlock) + region(4 * kAttentionKeyBlock) + region(kAttentionQueryBlock * ev_padded) +
         2 * region(kAttentionQueryBlock) + 64;
}

uint64_t hash_text(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

namespace {

// The elementwise ops of a value tree in first-use order, and its random draws; loads'
// offsets and guards are index arithmetic and not listed.
void collect_ops(const ExprRef& e, std::vector<std::string>& ops, std::vector<std::string>& draws,
                 std::unordered_set<const Expr*>& seen) {
  if (!e || !seen.insert(e.get()).second || e->kind == ExprKind::Load) return;
  for (const ExprRef& a : e->args)
    if (e->kind != ExprKind::Random) collect_ops(a, ops, draws, seen);
  if (e->kind != ExprKind::Op && e->kind != ExprKind::Random) return;
  std::vector<std::string>& into = e->kind == ExprKind::Random ? draws : ops;
  std::string name(e->kind == ExprKind::Random ? op_name(e->dist) : op_name(e->op));
  if (std::find(into.begin(), into.end(), name) == into.end()) into.push_back(std::move(name));
}

bool has(const std::vector<std::string>& ops, std::string_view op) {
  return std::find(ops.begin(), ops.end(), op) != ops.end();
}

// A running scan's word: its graph op's name.
std::string scan_word(ScanOp op) {
  switch (op) {
  case ScanOp::Add: return "cumsum";
  case ScanOp::Mul: return "cumprod";
  case ScanOp::Max: return "cummax";
  case ScanOp::Min: return "cummin";
  case ScanOp::LogAddExp: return "logcumsumexp";
  }
  return "scan";
}

// The form's word: gemm (the GEMM form, or a matmul kept out of it: one fma sum),
// softmax / log_softmax / layernorm for the row kernels that are clearly one of them,
// else the reductions.
std::vector<std::string> form_words(const Kernel& k, const std::vector<std::string>& ops) {
  std::vector<std::string> w;
  const auto& r = k.reductions;
  if (k.attention) return {k.attention->backward ? "attention_grad" : "attention"};
  if (k.form == KernelForm::Gemm || (r.size() == 1 && r[0].fma)) return {"gemm"};
  if (k.scan) return {k.scan->sort ? "argsort" : k.scan->target ? "scatter" : scan_word(k.scan->op)};
  const bool row = k.form == KernelForm::Row && !k.map.empty() && r.size() == 2;
  if (row && r[0].op == ReduceOp::Max && r[1].op == ReduceOp::Sum && has(ops, "exp"))
    return {has(ops, "log") ? "log_softmax" : "softmax"};
  if (row && r[0].op == ReduceOp::Sum && r[1].op == ReduceOp::Sum && has(ops, "rsqrt")) return {"layernorm"};
  for (const Reduction& red : r)
    if (std::string n(op_name(red.op)); !has(w, n)) w.push_back(std::move(n));
  return w;
}

} // namespace

std::string describe_kernel(const Kernel& k) {
  constexpr size_t kMaxWords = 5;
  std::vector<std::string> ops, draws;
  std::unordered_set<const Expr*> seen;
  for (size_t i = 0; i < k.reductions.size(); ++i) {
    const Reduction& red = k.reductions[i];
    // a matmul's product is the form itself, not an op of it
    if (red.fma && red.value->kind == ExprKind::Op)
      for (const ExprRef& a : red.value->args) collect_ops(a, ops, draws, seen);
    else collect_ops(red.value, ops, draws, seen);
  }
  if (k.scan) collect_ops(k.scan->value, ops, draws, seen);
  for (const Store& st : k.stores) collect_ops(st.value, ops, draws, seen);
  if (k.attention && k.attention->mask) collect_ops(k.attention->mask, ops, draws, seen);
  if (k.attention && k.attention->dropout) collect_ops(k.attention->dropout, ops, draws, seen);
  std::vector<std::string> words = form_words(k, ops);
  const bool named_row = !words.empty() && (words[0] == "softmax" || words[0] == "log_softmax" || words[0] == "layernorm");
  for (const std::string& op : ops)
    if (!named_row && !has(words, op)) words.push_back(op);
  // random draws computed in place (an operand drawn inside its consumer) name a kernel only
  // when it does nothing else
  if (words.empty()) words = draws;
  if (words.empty()) words.push_back("copy");
  std::string d;
  for (size_t i = 0; i < words.size() && i < kMaxWords; ++i) d += (i ? "_" : "") + words[i];
  if (words.size() > kMaxWords) d += "_etc";
  for (const BufferParam& b : k.buffers)
    if (b.output) return d + "_" + std::string(dtype_name(b.dtype));
  return d;
}

const std::string& finalize(Kernel& k) {
  k.name.clear();
  char buf[16];
  // 48 bits of the hash: kernels with the same description differ there (the hash decides caching)
  std::snprintf(buf, sizeof buf, "%012llx",
                static_cast<unsigned long long>(hash_text(print_kernel(k)) >> 16));
  k.name = "k_" + describe_kernel(k) + "_" + buf;
  return k.name;
}

} // namespace kiln::codegen
