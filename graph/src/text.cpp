#include "graph/text.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <unordered_map>

#include "graph/verify.h"
#include "kiln/error.h"

namespace kiln::graph {

namespace {

std::string format_double(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

std::string format_attrs(const Attrs& a) {
  std::string s;
  if (!a.ints.empty()) {
    s += " ints=[";
    for (size_t i = 0; i < a.ints.size(); ++i) s += (i ? "," : "") + std::to_string(a.ints[i]);
    s += "]";
  }
  if (a.f0 != 0 || std::signbit(a.f0) || std::isnan(a.f0)) s += " f0=" + format_double(a.f0);
  if (a.f1 != 0 || std::signbit(a.f1) || std::isnan(a.f1)) s += " f1=" + format_double(a.f1);
  if (a.i0 != 0) s += " i0=" + std::to_string(a.i0);
  if (a.i1 != 0) s += " i1=" + std::to_string(a.i1);
  return s;
}

// A cursor over one line of text with the parse errors in one place.
class Cursor {
public:
  Cursor(std::string_view s, int line) : s_(s), line_(line) {}
  void skip_ws() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\r')) ++pos_;
  }
  bool done() {
    skip_ws();
    return pos_ >= s_.size();
  }
  bool accept(std::string_view tok) {
    skip_ws();
    if (s_.substr(pos_, tok.size()) != tok) return false;
    pos_ += tok.size();
    return true;
  }
  void expect(std::string_view tok) {
    if (!accept(tok)) fail("expected '" + std::string(tok) + "'");
  }
  std::string_view word() {
    skip_ws();
    const size_t b = pos_;
    while (pos_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '_')) ++pos_;
    if (b == pos_) fail("expected a name");
    return s_.substr(b, pos_ - b);
  }
  int64_t integer() {
    skip_ws();
    int64_t v = 0;
    auto [p, ec] = std::from_chars(s_.data() + pos_, s_.data() + s_.size(), v);
    if (ec != std::errc()) fail("expected an integer");
    pos_ = static_cast<size_t>(p - s_.data());
    return v;
  }
  double real() {
    skip_ws();
    const size_t b = pos_;
    while (pos_ < s_.size() && s_[pos_] != ' ' && s_[pos_] != ',' && s_[pos_] != ')') ++pos_;
    const std::string tok(s_.substr(b, pos_ - b));
    char* end = nullptr;
    const double v = std::strtod(tok.c_str(), &end);
    if (tok.empty() || end != tok.c_str() + tok.size()) fail("expected a number");
    return v;
  }
  std::vector<int64_t> int_list() {
    expect("[");
    std::vector<int64_t> v;
    if (accept("]")) return v;
    do v.push_back(integer());
    while (accept(","));
    expect("]");
    return v;
  }
  [[noreturn]] void fail(const std::string& what) const {
    throw Error("parse", "line " + std::to_string(line_) + ", column " + std::to_string(pos_ + 1) + ": " + what +
                             " in '" + std::string(s_) + "'");
  }

private:
  std::string_view s_;
  size_t pos_ = 0;
  int line_;
};

DType parse_dtype(Cursor& c) {
  const std::string_view w = c.word();
  DType t;
  if (!dtype_from_name(w, t)) c.fail("unknown dtype '" + std::string(w) + "'");
  return t;
}

NodeRef parse_ref(Cursor& c, const std::unordered_map<int64_t, NodeRef>& defs) {
  c.expect("%");
  const int64_t id = c.integer();
  auto it = defs.find(id);
  if (it == defs.end()) c.fail("use of undefined %" + std::to_string(id));
  return it->second;
}

Attrs parse_attrs(Cursor& c) {
  Attrs a;
  while (!c.done()) {
    const std::string_view key = c.word();
    c.expect("=");
    if (key == "ints") a.ints = c.int_list();
    else if (key == "f0") a.f0 = c.real();
    else if (key == "f1") a.f1 = c.real();
    else if (key == "i0") a.i0 = c.integer();
    else if (key == "i1") a.i1 = c.integer();
    else c.fail("unknown attribute '" + std::string(key) + "'");
  }
  return a;
}

// Limits on parsed values, checked before check_node() (whose arithmetic assumes sane
// sizes): no extent, element count (of the non-zero extents) or int attribute beyond 2^40,
// so that no later size or index computation overflows int64; and the shapes of the
// attributes that check_node() indexes with.
constexpr int64_t kMaxParsed = int64_t{1} << 40;

std::string check_limits(OpKind op, const Shape& shape, const std::vector<NodeRef>& inputs, const Attrs& a) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return "negative extent";
    if (d > kMaxParsed || (d > 0 && n > kMaxParsed / d)) return "shape " + shape_str(shape) + " is too large (over 2^40 elements)";
    if (d > 0) n *= d;
  }
  for (int64_t v : a.ints)
    if (v < -kMaxParsed || v > kMaxParsed) return "attribute " + std::to_string(v) + " out of range";
  if (op == OpKind::Input && (a.i0 < 0 || a.i0 > (int64_t{1} << 62))) return "input id out of range";
  if (op == OpKind::Permute && (a.ints.size() != shape.size() || inputs.size() != 1 || inputs[0]->shape.size() != shape.size()))
    return "permute needs one dim per result dim, and the operand's rank";
  if (op == OpKind::Slice && inputs.size() == 1 && a.ints.size() == 2 * shape.size())
    for (size_t d = 0; d < shape.size(); ++d) {
      int64_t last = 0;
      if (shape[d] > 0 && (__builtin_mul_overflow(shape[d] - 1, a.ints[2 * d + 1], &last) ||
                           __builtin_add_overflow(last, a.ints[2 * d], &last)))
        return "slice out of range";
    }
  return "";
}

NodeRef parse_definition(Cursor& c, const std::unordered_map<int64_t, NodeRef>& defs) {
  OpKind op;
  const std::string_view name = c.word();
  if (!op_from_name(name, op)) c.fail("unknown op '" + std::string(name) + "'");
  const DType dtype = parse_dtype(c);
  const Shape shape = c.int_list();
  std::vector<NodeRef> inputs;
  if (c.accept("(")) {
    if (!c.accept(")")) {
      do inputs.push_back(parse_ref(c, defs));
      while (c.accept(","));
      c.expect(")");
    }
  }
  const Attrs attrs = parse_attrs(c);
  if (const std::string err = check_limits(op, shape, inputs, attrs); !err.empty()) c.fail(err);
  if (const std::string err = check_node(op, dtype, shape, inputs, attrs); !err.empty()) c.fail(err);
  return make_node(op, dtype, shape, std::move(inputs), attrs);
}

} // namespace

std::string print_graph(const std::vector<NodeRef>& roots) {
  std::vector<const Node*> raw;
  for (const NodeRef& r : roots) raw.push_back(r.get());
  std::unordered_map<const Node*, size_t> ids;
  std::string out;
  for (const Node* n : topo_order(raw)) {
    const size_t id = ids.size();
    ids[n] = id;
    out += "%" + std::to_string(id) + " = " + std::string(op_name(n->op)) + " " +
           std::string(dtype_name(n->dtype)) + shape_str(n->shape);
    if (!n->inputs.empty()) {
      out += " (";
      for (size_t i = 0; i < n->inputs.size(); ++i) out += (i ? ", %" : "%") + std::to_string(ids.at(n->inputs[i].get()));
      out += ")";
    }
    out += format_attrs(n->attrs) + "\n";
  }
  out += "return";
  for (size_t i = 0; i < roots.size(); ++i) out += (i ? ", %" : " %") + std::to_string(ids.at(roots[i].get()));
  return out + "\n";
}

std::vector<NodeRef> parse_graph(std::string_view text) {
  std::unordered_map<int64_t, NodeRef> defs;
  int line_no = 0;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t nl = std::min(text.find('\n', start), text.size());
    Cursor c(text.substr(start, nl - start), ++line_no);
    start = nl + 1;
    if (c.done() || c.accept("#")) continue;
    if (c.accept("return")) {
      std::vector<NodeRef> roots;
      if (!c.done()) {
        do roots.push_back(parse_ref(c, defs));
        while (c.accept(","));
      }
      if (!c.done()) c.fail("trailing text");
      return roots;
    }
    c.expect("%");
    const int64_t id = c.integer();
    c.expect("=");
    if (defs.count(id)) c.fail("%" + std::to_string(id) + " defined twice");
    defs[id] = parse_definition(c, defs);
  }
  throw Error("parse", "missing 'return' line");
}

} // namespace kiln::graph
