#include "codegen/dot.h"

#include <unordered_map>

namespace kiln::codegen {

namespace {

using graph::Node;

// A DOT string literal's contents ("\n" starts a new line of a label).
std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c == '\n' ? std::string("\\n") : std::string(1, c);
  }
  return out + "\"";
}

std::string node_label(const Node* n) {
  std::string s = std::string(graph::op_name(n->op)) + " " + std::string(dtype_name(n->dtype)) + graph::shape_str(n->shape);
  return n->origin ? s + "\n" + graph::source_line_str(n->origin) : s;
}

// Numbers the nodes in first-seen order and remembers which kernel draws each.
struct Layout {
  std::unordered_map<const Node*, int> id;
  std::unordered_map<const Node*, size_t> kernel_of;
  int number(const Node* n) { return id.try_emplace(n, static_cast<int>(id.size())).first->second; }
};

void draw_edges(std::string& out, Layout& lay, const Schedule& s, const Node* n) {
  for (const auto& in : graph::value_inputs(*n)) { // what the kernels read (not a custom call's inputs)
    const Node* x = in.get();
    std::string attrs;
    const auto from = lay.kernel_of.find(x), to = lay.kernel_of.find(n);
    const bool crosses = from == lay.kernel_of.end() || to == lay.kernel_of.end() || from->second != to->second;
    if (crosses)
      if (auto why = s.boundaries.find(x); why != s.boundaries.end())
        attrs = " [color=red, style=dashed, fontsize=8, fontcolor=red, label=" + quoted(why->second) + "]";
    out += "  n" + std::to_string(lay.number(x)) + " -> n" + std::to_string(lay.number(n)) + attrs + ";\n";
  }
}

} // namespace

std::string kernel_form(const Kernel& k) {
  if (k.gemm) return "gemm";
  if (k.reductions.size() == 1 && k.reductions[0].fma) return "matmul";
  if (!k.map.empty()) return "row";
  return k.reductions.empty() ? "elementwise" : "reduce";
}

std::string schedule_dot(const Schedule& s, const std::vector<const graph::Node*>& outputs) {
  Layout lay;
  std::string out = "digraph kiln {\n  rankdir=TB;\n  node [shape=box, fontsize=10, fontname=\"monospace\"];\n";
  for (size_t k = 0; k < s.launches.size(); ++k) {
    const KernelLaunch& l = s.launches[k];
    out += "  subgraph cluster_" + std::to_string(k) + " {\n    label=" +
           quoted(l.kernel.name + "\n(" + kernel_form(l.kernel) + ", " + std::to_string(l.domain_size) + " points)") +
           ";\n    style=rounded; color=blue;\n";
    for (const Node* n : l.nodes) {
      if (!lay.kernel_of.try_emplace(n, k).second) continue;
      const bool root = l.stores(n);
      out += "    n" + std::to_string(lay.number(n)) + " [label=" + quoted(node_label(n)) + (root ? ", penwidth=2" : "") + "];\n";
    }
    out += "  }\n";
  }
  for (const KernelLaunch& l : s.launches)
    for (const Node* in : l.inputs)
      if (in && !lay.kernel_of.count(in) && !lay.id.count(in)) // null: the error buffer of index checks
        out += "  n" + std::to_string(lay.number(in)) + " [shape=ellipse, label=" + quoted(node_label(in)) + "];\n";
  for (const KernelLaunch& l : s.launches)
    for (const Node* n : l.nodes)
      if (lay.kernel_of.at(n) == static_cast<size_t>(&l - s.launches.data())) draw_edges(out, lay, s, n);
  for (const Node* o : outputs)
    if (lay.id.count(o)) out += "  n" + std::to_string(lay.number(o)) + " [style=bold];\n";
  return out + "}\n";
}

} // namespace kiln::codegen
