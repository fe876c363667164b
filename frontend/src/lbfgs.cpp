// L-BFGS (torch.optim.LBFGS 1.13): the direction arithmetic and the line search run on the host in double,
// reading the loss and the gradient after each closure call; the parameters are written with assign().

#include <algorithm>
#include <cmath>
#include <optional>
#include <utility>

#include "frontend/src/tensor_impl.h"
#include "kiln/autograd.h"
#include "kiln/optim.h"

namespace kiln::optim {

namespace {

using Vec = std::vector<double>;

double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

double max_abs(const Vec& a) {
  double m = 0;
  for (double v : a) m = std::max(m, std::fabs(v));
  return m;
}

// a + alpha b, as torch's a.add(b, alpha=alpha).
Vec add_scaled(const Vec& a, const Vec& b, double alpha) {
  Vec out(a.size());
  for (size_t i = 0; i < a.size(); ++i) out[i] = a[i] + alpha * b[i];
  return out;
}

Vec negated(const Vec& a) {
  Vec out(a.size());
  for (size_t i = 0; i < a.size(); ++i) out[i] = -a[i];
  return out;
}

// torch's _cubic_interpolate: the minimizer of the cubic through (x1, f1, g1) and (x2, f2, g2), clamped to
// `bounds` (default: [min(x1, x2), max(x1, x2)]); their midpoint when the cubic has no minimum.
double cubic_interpolate(double x1, double f1, double g1, double x2, double f2, double g2,
                         std::optional<std::pair<double, double>> bounds = std::nullopt) {
  const auto [lo, hi] = bounds ? *bounds : (x1 <= x2 ? std::pair{x1, x2} : std::pair{x2, x1});
  const double d1 = g1 + g2 - 3 * (f1 - f2) / (x1 - x2);
  const double d2_square = d1 * d1 - g1 * g2;
  if (!(d2_square >= 0)) return (lo + hi) / 2.;
  const double d2 = std::sqrt(d2_square);
  const double min_pos = x1 <= x2 ? x2 - (x2 - x1) * ((g2 + d2 - d1) / (g2 - g1 + 2 * d2))
                                  : x1 - (x1 - x2) * ((g1 + d2 - d1) / (g1 - g2 + 2 * d2));
  return std::min(std::max(min_pos, lo), hi); // Python's min(max(...)) (the first argument on ties and NaN)
}

void check_option(bool ok, const std::string& what, const Loc& loc) {
  if (!ok) throw Error("LBFGS", "invalid " + what, loc);
}

int64_t default_max_eval(const LBFGSOptions& o) { return o.max_eval ? *o.max_eval : o.max_iter * 5 / 4; }

} // namespace

LBFGS::LBFGS(std::vector<Tensor> params, LBFGSOptions o, Loc loc)
    : options([&] {
        o.max_eval = default_max_eval(o);
        return o;
      }()),
      params_(detail::distinct_tensors(std::move(params))) {
  check_option(o.lr >= 0 && std::isfinite(o.lr), "learning rate: " + std::to_string(o.lr), loc);
  check_option(o.max_iter > 0, "max_iter: " + std::to_string(o.max_iter) + " (must be positive)", loc);
  check_option(*options.max_eval > 0, "max_eval: " + std::to_string(*options.max_eval) + " (must be positive)", loc);
  check_option(o.tolerance_grad >= 0, "tolerance_grad: " + std::to_string(o.tolerance_grad), loc);
  check_option(o.tolerance_change >= 0, "tolerance_change: " + std::to_string(o.tolerance_change), loc);
  check_option(o.history_size > 0, "history_size: " + std::to_string(o.history_size) + " (must be positive)", loc);
  if (!o.line_search_fn.empty() && o.line_search_fn != "strong_wolfe")
    throw Error("LBFGS", "only 'strong_wolfe' is supported as line_search_fn, got '" + o.line_search_fn + "'", loc);
  for (size_t i = 0; i < params_.size(); ++i)
    if (!params_[i].defined() || !params_[i].requires_grad())
      throw Error("LBFGS", "parameter " + std::to_string(i) + " does not require grad", loc);
}

void LBFGS::zero_grad() {
  for (Tensor& p : params_) p.zero_grad();
}

LBFGS::Vec LBFGS::flat_params() const {
  Vec x;
  for (const Tensor& p : params_) {
    const Vec v = p.to_vector<double>();
    x.insert(x.end(), v.begin(), v.end());
  }
  return x;
}

void LBFGS::set_params(const Vec& x) {
  NoGradGuard no_grad;
  size_t offset = 0;
  for (Tensor& p : params_) {
    const auto n = static_cast<size_t>(p.numel());
    const auto first = x.begin() + static_cast<ptrdiff_t>(offset);
    Tensor v = from_vector(Vec(first, first + static_cast<ptrdiff_t>(n)), p.shape());
    if (p.dtype() != v.dtype()) v = v.to(p.dtype());
    if (p.device() != v.device()) v = v.to(p.device());
    p.assign(v);
    offset += n;
  }
}

double LBFGS::evaluate(const std::function<Tensor()>& closure, Vec& grad, const Loc& loc, Tensor* first) {
  Tensor loss = closure();
  if (!loss.defined() || loss.numel() != 1)
    throw Error("LBFGS::step", "the closure must return the loss, a one-element tensor, got " +
                                   (loss.defined() ? loss.type_str() : std::string("an undefined tensor")),
                loc);
  if (first) *first = loss;
  const double value = loss.item<double>(loc);
  grad.clear();
  for (const Tensor& p : params_) {
    const Tensor g = p.grad();
    const Vec v = g.defined() ? g.to_vector<double>() : Vec(static_cast<size_t>(p.numel()), 0.0);
    grad.insert(grad.end(), v.begin(), v.end());
  }
  return value;
}

LBFGS::Vec LBFGS::direction(const Vec& grad) {
  const Vec y = add_scaled(grad, prev_grad_, -1.0);
  Vec s(d_.size());
  for (size_t i = 0; i < s.size(); ++i) s[i] = d_[i] * t_;
  const double ys = dot(y, s);
  if (ys > 1e-10) { // torch's curvature condition for keeping the pair
    if (static_cast<int64_t>(old_dirs_.size()) == options.history_size) {
      old_dirs_.erase(old_dirs_.begin());
      old_stps_.erase(old_stps_.begin());
      ro_.erase(ro_.begin());
    }
    old_dirs_.push_back(y);
    old_stps_.push_back(s);
    ro_.push_back(1. / ys);
    h_diag_ = ys / dot(y, y);
  }
  const size_t num_old = old_dirs_.size();
  Vec al(num_old);
  Vec q = negated(grad);
  for (size_t k = num_old; k-- > 0;) {
    al[k] = dot(old_stps_[k], q) * ro_[k];
    q = add_scaled(q, old_dirs_[k], -al[k]);
  }
  Vec r(q.size());
  for (size_t i = 0; i < r.size(); ++i) r[i] = q[i] * h_diag_;
  for (size_t k = 0; k < num_old; ++k) {
    const double be = dot(old_dirs_[k], r) * ro_[k];
    r = add_scaled(r, old_stps_[k], al[k] - be);
  }
  return r;
}

double LBFGS::strong_wolfe(const std::function<Tensor()>& closure, const Vec& x, double t, const Vec& d,
                           double& loss, Vec& grad, double gtd, int64_t& evals, const Loc& loc) {
  constexpr double c1 = 1e-4, c2 = 0.9;
  constexpr int64_t max_ls = 25;
  const double f = loss, d_norm = max_abs(d);
  const Vec g = grad;
  // The loss and gradient at x + t d (the parameters go back to x after).
  auto at = [&](double step, Vec& g_out) {
    set_params(add_scaled(x, d, step));
    const double value = evaluate(closure, g_out, loc);
    set_params(x);
    ++evals;
    return value;
  };
  Vec g_new;
  double f_new = at(t, g_new);
  double gtd_new = dot(g_new, d);
  double t_prev = 0, f_prev = f, gtd_prev = gtd;
  Vec g_prev = g;
  bool done = false;
  int64_t ls_iter = 0;
  std::vector<double> bracket, bracket_f, bracket_gtd;
  std::vector<Vec> bracket_g;
  // Bracketing: find an interval holding a point that satisfies the strong Wolfe conditions.
  while (ls_iter < max_ls) {
    const bool armijo_fails = f_new > (f + c1 * t * gtd) || (ls_iter > 1 && f_new >= f_prev);
    if (!armijo_fails && std::fabs(gtd_new) <= -c2 * gtd) { // torch checks in this order
      bracket = {t}, bracket_f = {f_new}, bracket_g = {g_new};
      done = true;
      break;
    }
    if (armijo_fails || gtd_new >= 0) {
      bracket = {t_prev, t}, bracket_f = {f_prev, f_new}, bracket_g = {g_prev, g_new};
      bracket_gtd = {gtd_prev, gtd_new};
      break;
    }
    const double min_step = t + 0.01 * (t - t_prev), max_step = t * 10, tmp = t;
    t = cubic_interpolate(t_prev, f_prev, gtd_prev, t, f_new, gtd_new, std::pair{min_step, max_step});
    t_prev = tmp, f_prev = f_new, g_prev = g_new, gtd_prev = gtd_new;
    f_new = at(t, g_new);
    gtd_new = dot(g_new, d);
    ++ls_iter;
  }
  if (ls_iter == max_ls) bracket = {0, t}, bracket_f = {f, f_new}, bracket_g = {g, g_new};
  // Zoom: shrink the interval until a point satisfies the conditions.
  bool insuf_progress = false;
  size_t low = bracket_f.front() <= bracket_f.back() ? 0 : 1, high = 1 - low;
  while (!done && ls_iter < max_ls) {
    if (std::fabs(bracket[1] - bracket[0]) * d_norm < options.tolerance_change) break;
    t = cubic_interpolate(bracket[0], bracket_f[0], bracket_gtd[0], bracket[1], bracket_f[1], bracket_gtd[1]);
    const double b_max = std::max(bracket[0], bracket[1]), b_min = std::min(bracket[0], bracket[1]);
    const double eps = 0.1 * (b_max - b_min);
    if (std::min(b_max - t, t - b_min) < eps) {
      // interpolation close to a boundary: unless the last step also was, move it eps inside
      if (insuf_progress || t >= b_max || t <= b_min) {
        t = std::fabs(t - b_max) < std::fabs(t - b_min) ? b_max - eps : b_min + eps;
        insuf_progress = false;
      } else {
        insuf_progress = true;
      }
    } else {
      insuf_progress = false;
    }
    f_new = at(t, g_new);
    gtd_new = dot(g_new, d);
    ++ls_iter;
    if (f_new > (f + c1 * t * gtd) || f_new >= bracket_f[low]) {
      bracket[high] = t, bracket_f[high] = f_new, bracket_g[high] = g_new, bracket_gtd[high] = gtd_new;
      low = bracket_f[0] <= bracket_f[1] ? 0 : 1, high = 1 - low;
    } else {
      if (std::fabs(gtd_new) <= -c2 * gtd) {
        done = true;
      } else if (gtd_new * (bracket[high] - bracket[low]) >= 0) {
        bracket[high] = bracket[low], bracket_f[high] = bracket_f[low], bracket_g[high] = bracket_g[low];
        bracket_gtd[high] = bracket_gtd[low];
      }
      bracket[low] = t, bracket_f[low] = f_new, bracket_g[low] = g_new, bracket_gtd[low] = gtd_new;
    }
  }
  loss = bracket_f[low];
  grad = bracket_g[low];
  return bracket[low];
}

Tensor LBFGS::step(const std::function<Tensor()>& closure, Loc loc) {
  if (detail::active_capture())
    throw Error("LBFGS::step", "cannot run inside a compile() trace: L-BFGS reads the loss and the gradient on the "
                               "host after each closure call (call it eagerly)",
                loc);
  if (!closure) throw Error("LBFGS::step", "needs a closure (it computes the loss and calls backward())", loc);
  const LBFGSOptions& o = options;
  Vec flat_grad;
  Tensor orig_loss;
  double loss = evaluate(closure, flat_grad, loc, &orig_loss);
  int64_t current_evals = 1;
  ++func_evals_;
  if (max_abs(flat_grad) <= o.tolerance_grad) return orig_loss;
  for (int64_t n_iter = 1; n_iter <= o.max_iter; ++n_iter) {
    if (++n_iter_ == 1) {
      d_ = negated(flat_grad);
      old_dirs_.clear(), old_stps_.clear(), ro_.clear();
      h_diag_ = 1;
    } else {
      d_ = direction(flat_grad);
    }
    prev_grad_ = flat_grad;
    prev_loss_ = loss;
    if (n_iter_ == 1) {
      double l1 = 0;
      for (double v : flat_grad) l1 += std::fabs(v);
      t_ = std::min(1., 1. / l1) * o.lr;
    } else {
      t_ = o.lr;
    }
    const double gtd = dot(flat_grad, d_);
    if (gtd > -o.tolerance_change) break; // not a descent direction
    int64_t ls_evals = 0;
    bool opt_cond = false;
    const Vec x = flat_params();
    if (o.line_search_fn == "strong_wolfe") {
      t_ = strong_wolfe(closure, x, t_, d_, loss, flat_grad, gtd, ls_evals, loc);
      set_params(add_scaled(x, d_, t_));
      opt_cond = max_abs(flat_grad) <= o.tolerance_grad;
    } else {
      set_params(add_scaled(x, d_, t_));
      if (n_iter != o.max_iter) {
        loss = evaluate(closure, flat_grad, loc);
        opt_cond = max_abs(flat_grad) <= o.tolerance_grad;
        ls_evals = 1;
      }
    }
    current_evals += ls_evals;
    func_evals_ += ls_evals;
    if (n_iter == o.max_iter || current_evals >= *o.max_eval || opt_cond) break;
    double step_max = 0;
    for (double v : d_) step_max = std::max(step_max, std::fabs(v * t_));
    if (step_max <= o.tolerance_change) break;            // the parameters stopped changing
    if (std::fabs(loss - prev_loss_) < o.tolerance_change) break; // the loss stopped changing
  }
  kiln::realize(params_);
  return orig_loss;
}

} // namespace kiln::optim
