// libFuzzer target: the graph text IR parser. Any input either parses to a valid
// graph or throws kiln::Error; a parsed graph prints and parses back to the same
// text, verifies, and (when small) evaluates in the reference interpreter, again
// with kiln::Error as the only failure.

#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "graph/interpret.h"
#include "graph/text.h"
#include "graph/verify.h"
#include "kiln/error.h"

using namespace kiln::graph;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::vector<NodeRef> roots;
  try {
    roots = parse_graph(text);
  } catch (const kiln::Error&) {
    return 0;
  }
  const std::string printed = print_graph(roots);
  std::vector<NodeRef> again;
  try {
    again = parse_graph(printed);
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "printed graph does not parse: %s\n%s", e.what(), printed.c_str());
    std::abort();
  }
  if (print_graph(again) != printed) {
    std::fprintf(stderr, "round trip changed the text:\n%s", printed.c_str());
    std::abort();
  }
  if (const std::string err = verify(roots); !err.empty()) {
    std::fprintf(stderr, "parsed graph does not verify: %s\n", err.c_str());
    std::abort();
  }
  std::vector<const Node*> raw;
  for (const NodeRef& r : roots) raw.push_back(r.get());
  int64_t total = 0;
  for (const Node* n : topo_order(raw)) {
    total += n->numel();
    if (total > (1 << 16)) return 0; // too big to evaluate quickly
  }
  try {
    interpret(roots);
  } catch (const kiln::Error&) {
  }
  return 0;
}
