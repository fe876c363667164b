// Whether a kernel may write an output over one of its inputs (see in_place.h).
#include "codegen/in_place.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <optional>
#include <unordered_set>
#include <utility>

namespace kiln::codegen {

namespace {

/// An i64 expression as c + sum of coef * var over domain and map vars, at fixed parameters.
struct Affine {
  int64_t constant = 0;
  std::map<std::pair<ExprKind, int>, int64_t> coef; ///< non-zero coefficients only

  bool operator==(const Affine&) const = default;

  Affine& add(const Affine& o, int64_t scale) {
    constant += scale * o.constant;
    for (const auto& [var, c] : o.coef)
      if ((coef[var] += scale * c) == 0) coef.erase(var);
    return *this;
  }
  int64_t of(ExprKind kind, int index) const {
    const auto it = coef.find({kind, index});
    return it == coef.end() ? 0 : it->second;
  }
};

/// `e` as an affine function of the domain and map vars with `params` substituted; nullopt for
/// anything else (a division, a select, a load, a reduction var).
std::optional<Affine> affine_at(const ExprRef& e, const std::vector<int64_t>& params) {
  if (e->dtype != DType::Int64) return std::nullopt;
  if (e->kind == ExprKind::Const) return Affine{e->i, {}};
  if (e->kind == ExprKind::Param) {
    if (e->index < 0 || e->index >= static_cast<int>(params.size())) return std::nullopt;
    return Affine{params[static_cast<size_t>(e->index)], {}};
  }
  if (e->kind == ExprKind::LoopVar || e->kind == ExprKind::MapVar) return Affine{0, {{{e->kind, e->index}, 1}}};
  if (e->kind != ExprKind::Op || e->args.size() != 2) return std::nullopt;
  auto a = affine_at(e->args[0], params), b = affine_at(e->args[1], params);
  if (!a || !b) return std::nullopt;
  if (e->op == ScalarOp::Add) return a->add(*b, 1);
  if (e->op == ScalarOp::Sub) return a->add(*b, -1);
  if (e->op != ScalarOp::Mul) return std::nullopt;
  if (a->coef.empty()) return Affine{}.add(*b, a->constant);
  if (b->coef.empty()) return Affine{}.add(*a, b->constant);
  return std::nullopt;
}

/// True when `f` maps the kernel's domain and map points to distinct elements: ordered by
/// stride, each var's stride is at least the span of the vars below it (a var of extent 1 is
/// free), and f mentions no var outside them.
bool one_to_one(const Affine& f, const Kernel& k, const std::vector<int64_t>& params) {
  std::vector<std::pair<int64_t, int64_t>> steps; // (|stride|, extent)
  size_t seen = 0;
  auto var = [&](ExprKind kind, int index, const ExprRef& extent) {
    const int64_t c = f.of(kind, index), n = eval_index(extent, params);
    seen += c != 0;
    if (n > 1) steps.emplace_back(std::llabs(c), n);
  };
  for (size_t d = 0; d < k.domain.size(); ++d) var(ExprKind::LoopVar, static_cast<int>(d), k.domain[d]);
  for (size_t m = 0; m < k.map.size(); ++m) var(ExprKind::MapVar, static_cast<int>(m), k.map[m]);
  if (seen != f.coef.size()) return false;
  std::sort(steps.begin(), steps.end());
  int64_t span = 1;
  for (const auto& [stride, extent] : steps) {
    if (stride < span) return false;
    if (__builtin_mul_overflow(stride, extent, &span)) return false;
  }
  return true;
}

/// The loads of buffer `buffer` reachable from `e`.
std::vector<const Expr*> loads_of(const ExprRef& e, int buffer) {
  std::vector<const Expr*> loads;
  std::unordered_set<const Expr*> seen;
  collect_loads(e, loads, seen);
  std::erase_if(loads, [&](const Expr* l) { return l->index != buffer; });
  return loads;
}

} // namespace

bool may_write_in_place(const Kernel& k, int in, int out, const std::vector<int64_t>& params) {
  const int n = static_cast<int>(k.buffers.size());
  if (in < 0 || out < 0 || in >= n || out >= n || k.buffers[in].output || !k.buffers[out].output) return false;
  if (k.buffers[in].dtype != k.buffers[out].dtype || k.scan || k.attention) return false;
  const Store* store = nullptr;
  for (const Store& s : k.stores) {
    if (s.buffer != out) continue;
    if (store) return false; // two stores (a concatenation's pieces)
    store = &s;
  }
  if (!store) return false;
  const std::vector<const Expr*> feeding = loads_of(store->value, in);
  for (const Store& s : k.stores) {
    if (!loads_of(s.offset, in).empty()) return false;
    for (const Expr* l : loads_of(s.value, in)) // another store may share the load, computed once, before
      if (std::find(feeding.begin(), feeding.end(), l) == feeding.end()) return false;
  }
  for (const Reduction& r : k.reductions) {
    if (!loads_of(r.value, in).empty()) return false;
    for (const ExprRef& e : r.extents)
      if (!loads_of(e, in).empty()) return false;
  }
  for (const auto* extents : {&k.domain, &k.map})
    for (const ExprRef& e : *extents)
      if (!loads_of(e, in).empty()) return false;
  const std::optional<Affine> at = affine_at(store->offset, params);
  if (!at || !one_to_one(*at, k, params)) return false;
  for (const Expr* l : feeding)
    if (affine_at(l->args.at(0), params) != at) return false;
  return true;
}

} // namespace kiln::codegen
