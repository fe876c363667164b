// einsum, as PyTorch 1.13's: the equation is parsed into a list of labels per operand (letters, and
// one label per ellipsis dim, right-aligned), diagonals of repeated labels are taken, labels no later
// step needs are summed early, and operands are contracted left to right, each pair by one (batched)
// matmul: the labels both share and keep are batch dims, those they share and drop are flattened into
// K, a's others into M and b's into N. So the GEMM runs and no [batch, M, K, N] product is made.

#include <algorithm>
#include <cctype>
#include <map>
#include <numeric>
#include <set>

#include "frontend/src/tensor_impl.h"
#include "kiln/linalg.h"

namespace kiln {

namespace {

constexpr int kLetters = 52; // A-Z are 0-25, a-z 26-51 (PyTorch's order); ellipsis dims follow
constexpr int kEllipsis = -1; // where "..." stands in a parsed term

/// A tensor and the label of each of its dims.
struct Term {
  Tensor t;
  std::vector<int> labels;
};

std::string label_name(int l) {
  if (l < 26) return std::string(1, static_cast<char>('A' + l));
  if (l < kLetters) return std::string(1, static_cast<char>('a' + l - 26));
  return "... dim " + std::to_string(l - kLetters);
}

/// Parses and checks an equation against its operands; errors name einsum, the equation, the operands'
/// shapes and the caller's line.
class Parser {
public:
  Parser(const std::string& eq, const std::vector<Tensor>& ops, const Loc& loc) : eq_(eq), ops_(ops), loc_(loc) {}

  /// The labels of each operand's dims, and of the output's.
  std::pair<std::vector<std::vector<int>>, std::vector<int>> parse() {
    if (ops_.empty()) bad("needs at least one operand");
    for (const Tensor& t : ops_)
      if (!t.defined()) bad("an operand is undefined");
    const size_t arrow = eq_.find("->");
    const std::vector<std::vector<int>> terms = split_inputs(arrow == std::string::npos ? eq_.size() : arrow);
    std::vector<std::vector<int>> inputs;
    for (size_t i = 0; i < terms.size(); ++i) inputs.push_back(expand(terms[i], i));
    check_extents(inputs);
    if (arrow == std::string::npos) return {inputs, implicit_output(inputs)};
    return {inputs, explicit_output(parse_term(arrow + 2, eq_.size()), inputs)};
  }

private:
  [[noreturn]] void bad(const std::string& what) const {
    std::string shapes;
    for (const Tensor& t : ops_) shapes += (shapes.empty() ? "" : ", ") + detail::operand_str(t);
    throw Error("einsum", what + " in the equation '" + eq_ + "' (operands: " + shapes + ")", loc_);
  }

  // The labels of eq_[begin, end), kEllipsis where "..." stands.
  std::vector<int> parse_term(size_t begin, size_t end) const {
    std::vector<int> term;
    for (size_t i = begin; i < end; ++i) {
      const char c = eq_[i];
      if (c == ' ') continue;
      if (std::isalpha(static_cast<unsigned char>(c))) {
        term.push_back(std::isupper(static_cast<unsigned char>(c)) ? c - 'A' : 26 + (c - 'a'));
        continue;
      }
      if (c != '.')
        bad("invalid subscript '" + std::string(1, c) + "' at index " + std::to_string(i) +
            " (subscripts are letters a-z, A-Z)");
      if (eq_.compare(i, 3, "...") != 0) bad("'.' at index " + std::to_string(i) + " is not part of an ellipsis '...'");
      if (std::count(term.begin(), term.end(), kEllipsis)) bad("more than one ellipsis '...' in a term");
      term.push_back(kEllipsis);
      i += 2;
    }
    return term;
  }

  // The terms of the inputs, eq_[0, end) split at commas; one per operand.
  std::vector<std::vector<int>> split_inputs(size_t end) const {
    std::vector<std::vector<int>> terms;
    for (size_t begin = 0;;) {
      const size_t comma = std::min(eq_.find(',', begin), end);
      terms.push_back(parse_term(begin, comma));
      if (comma == end) break;
      begin = comma + 1;
    }
    if (terms.size() != ops_.size())
      bad("the equation has " + std::to_string(terms.size()) + " operand terms but " + std::to_string(ops_.size()) +
          " operands were given");
    return terms;
  }

  // A term's labels for operand i's dims: its ellipsis stands for the dims no letter names,
  // labelled as the last of the equation's ellipsis dims (right-aligned, as broadcasting).
  std::vector<int> expand(const std::vector<int>& term, size_t i) {
    const bool ell = std::count(term.begin(), term.end(), kEllipsis) > 0;
    const int64_t letters = static_cast<int64_t>(term.size()) - (ell ? 1 : 0), rank = ops_[i].dim();
    if (ell ? letters > rank : letters != rank)
      bad("operand " + std::to_string(i) + " has " + std::to_string(rank) + " dims but its term names " +
          (ell ? "at least " : "") + std::to_string(letters));
    ell_dims_.push_back(rank - letters);
    std::vector<int> labels;
    for (int l : term) {
      if (l != kEllipsis) labels.push_back(l);
      else
        for (int64_t k = 0; k < rank - letters; ++k) labels.push_back(kEllipsis); // numbered in check_extents
    }
    return labels;
  }

  // Numbers the ellipsis dims and checks that a label has one extent, up to broadcasting an extent of 1
  // between operands (within one operand, a repeated label's extents must be equal).
  void check_extents(std::vector<std::vector<int>>& inputs) {
    num_ell_ = ell_dims_.empty() ? 0 : *std::max_element(ell_dims_.begin(), ell_dims_.end());
    std::map<int, std::pair<int64_t, size_t>> seen; // label -> (an extent other than 1, its operand)
    for (size_t i = 0; i < inputs.size(); ++i) {
      int next_ell = kLetters + static_cast<int>(num_ell_ - ell_dims_[i]);
      std::map<int, int64_t> mine;
      for (size_t d = 0; d < inputs[i].size(); ++d) {
        int& l = inputs[i][d];
        if (l == kEllipsis) l = next_ell++;
        const int64_t n = ops_[i].size(static_cast<int64_t>(d));
        if (auto it = mine.find(l); it != mine.end() && it->second != n)
          bad("subscript '" + label_name(l) + "' is repeated in operand " + std::to_string(i) + " with extents " +
              std::to_string(it->second) + " and " + std::to_string(n));
        mine[l] = n;
        if (n == 1) continue;
        auto [it, fresh] = seen.try_emplace(l, n, i);
        if (!fresh && it->second.first != n)
          bad("subscript '" + label_name(l) + "' has extent " + std::to_string(it->second.first) + " in operand " +
              std::to_string(it->second.second) + " and " + std::to_string(n) + " in operand " + std::to_string(i) +
              " (only an extent of 1 broadcasts)");
      }
    }
  }

  std::vector<int> ellipsis_labels() const {
    std::vector<int> e(static_cast<size_t>(num_ell_));
    std::iota(e.begin(), e.end(), kLetters);
    return e;
  }

  // Without "->": the ellipsis dims, then the letters that appear once, in order.
  std::vector<int> implicit_output(const std::vector<std::vector<int>>& inputs) const {
    std::map<int, int> count;
    for (const auto& labels : inputs)
      for (int l : labels) ++count[l];
    std::vector<int> out = ellipsis_labels();
    for (const auto& [l, c] : count)
      if (l < kLetters && c == 1) out.push_back(l);
    return out;
  }

  std::vector<int> explicit_output(const std::vector<int>& term, const std::vector<std::vector<int>>& inputs) const {
    std::vector<int> out;
    for (int l : term) {
      if (l == kEllipsis) {
        const std::vector<int> e = ellipsis_labels();
        out.insert(out.end(), e.begin(), e.end());
        continue;
      }
      const bool in_input = std::any_of(inputs.begin(), inputs.end(),
                                        [l](const auto& in) { return std::count(in.begin(), in.end(), l); });
      if (!in_input) bad("output subscript '" + label_name(l) + "' does not appear in any operand");
      if (std::count(out.begin(), out.end(), l)) bad("output subscript '" + label_name(l) + "' appears more than once");
      out.push_back(l);
    }
    return out;
  }

  const std::string& eq_;
  const std::vector<Tensor>& ops_;
  const Loc& loc_;
  std::vector<int64_t> ell_dims_; ///< per operand, how many dims its ellipsis stands for
  int64_t num_ell_ = 0; ///< the most of them: the equation's ellipsis dims
};

bool has(const std::vector<int>& labels, int l) { return std::find(labels.begin(), labels.end(), l) != labels.end(); }

int64_t pos(const Term& x, int l) { return std::find(x.labels.begin(), x.labels.end(), l) - x.labels.begin(); }

int64_t extent(const Term& x, int l) { return x.t.size(pos(x, l)); }

// x with each label that appears twice replaced by the diagonal of those two dims (as a last dim).
Term take_diagonals(Term x, const Loc& loc) {
  for (size_t p = 0; p < x.labels.size(); ++p) {
    const auto q = std::find(x.labels.begin() + p + 1, x.labels.end(), x.labels[p]);
    if (q == x.labels.end()) continue;
    const int l = x.labels[p];
    x.t = diagonal(x.t, 0, static_cast<int64_t>(p), q - x.labels.begin(), loc);
    x.labels.erase(q);
    x.labels.erase(x.labels.begin() + p);
    x.labels.push_back(l);
    p = static_cast<size_t>(-1); // look again from the start
  }
  return x;
}

// x summed over the labels `keep` rejects.
template <class Keep> Term sum_out(Term x, Keep keep, const Loc& loc) {
  IntList dims;
  std::vector<int> kept;
  for (size_t d = 0; d < x.labels.size(); ++d)
    if (keep(x.labels[d])) kept.push_back(x.labels[d]);
    else dims.push_back(static_cast<int64_t>(d));
  if (dims.empty()) return x;
  return {x.t.sum(dims, false, loc), kept};
}

// x's dims in the order of `order` (labels x has), reshaped to `shape` (where it differs).
Tensor arranged(const Term& x, const std::vector<int>& order, const IntList& shape, const Loc& loc) {
  IntList perm;
  for (int l : order) perm.push_back(pos(x, l));
  Tensor t = x.t;
  for (size_t i = 0; i < perm.size(); ++i)
    if (perm[i] != static_cast<int64_t>(i)) {
      t = t.permute(perm, loc);
      break;
    }
  return t.shape() == shape ? t : t.reshape(shape, loc);
}

int64_t extents(const Term& x, const std::vector<int>& labels) {
  int64_t n = 1;
  for (int l : labels) n *= extent(x, l);
  return n;
}

// a and b contracted by one matmul: labels in both that `keep` wants are batch dims, the other shared
// ones are summed (flattened into K), a's own ones flattened into M and b's into N.
template <class Keep> Term contract(Term a, Term b, Keep keep, const Loc& loc) {
  std::vector<int> batch, ks, ms, ns;
  for (int l : a.labels) (has(b.labels, l) ? (keep(l) ? batch : ks) : ms).push_back(l);
  for (int l : b.labels)
    if (!has(a.labels, l)) ns.push_back(l);
  for (int l : ks) { // an extent of 1 against n: sum the n side first
    if (extent(a, l) == extent(b, l)) continue;
    Term& wide = extent(a, l) == 1 ? b : a;
    wide.t = wide.t.sum(IntList{pos(wide, l)}, true, loc);
  }
  IntList sa, sb;
  for (int l : batch) {
    sa.push_back(extent(a, l));
    sb.push_back(extent(b, l));
  }
  sa.insert(sa.end(), {extents(a, ms), extents(a, ks)});
  sb.insert(sb.end(), {extents(b, ks), extents(b, ns)});
  std::vector<int> oa = batch, ob = batch;
  oa.insert(oa.end(), ms.begin(), ms.end());
  oa.insert(oa.end(), ks.begin(), ks.end());
  ob.insert(ob.end(), ks.begin(), ks.end());
  ob.insert(ob.end(), ns.begin(), ns.end());
  const Tensor r = matmul(arranged(a, oa, sa, loc), arranged(b, ob, sb, loc), loc);
  IntList shape(r.shape().begin(), r.shape().end() - 2);
  for (int l : ms) shape.push_back(extent(a, l));
  for (int l : ns) shape.push_back(extent(b, l));
  std::vector<int> labels = batch;
  labels.insert(labels.end(), ms.begin(), ms.end());
  labels.insert(labels.end(), ns.begin(), ns.end());
  return {r.shape() == shape ? r : r.reshape(shape, loc), labels};
}

} // namespace

Tensor einsum(const std::string& equation, const std::vector<Tensor>& operands, Loc loc) {
  const graph::SourceScope at(loc, "einsum");
  const auto parsed = Parser(equation, operands, loc).parse();
  const std::vector<std::vector<int>>& inputs = parsed.first;
  const std::vector<int>& output = parsed.second;
  std::vector<Term> terms;
  for (size_t i = 0; i < operands.size(); ++i) terms.push_back(take_diagonals({operands[i], inputs[i]}, loc));
  Term acc = terms[0];
  for (size_t j = 1; j < terms.size(); ++j) {
    std::set<int> later(output.begin(), output.end()); // what the output and the operands after j use
    for (size_t k = j + 1; k < terms.size(); ++k) later.insert(terms[k].labels.begin(), terms[k].labels.end());
    auto keep = [&later](int l) { return later.count(l) > 0; };
    const Term& next = terms[j];
    acc = sum_out(
        acc, [&](int l) { return keep(l) || has(next.labels, l); }, loc);
    const Term b = sum_out(
        next, [&](int l) { return keep(l) || has(acc.labels, l); }, loc);
    acc = contract(acc, b, keep, loc);
  }
  acc = sum_out(
      acc, [&output](int l) { return has(output, l); }, loc);
  return arranged(
      acc, output,
      [&] {
        IntList s;
        for (int l : output) s.push_back(extent(acc, l));
        return s;
      }(),
      loc);
}

} // namespace kiln
