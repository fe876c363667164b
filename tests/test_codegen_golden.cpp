// IR-level tests of the middle of the pipeline (fusion, then lowering): each
// tests/codegen/NAME.graph holds a graph in its text form (graph/text.h) and a comment
// saying which rule or kernel form it shows; it is scheduled, and its fusion decisions
// (FusionDecision::text(), as KILN_DEBUG=2 prints them) and each kernel's IR
// (print_kernel) are compared with tests/codegen/NAME.expected. A change to fusion or
// lowering shows up as a readable diff there; when it is intended, rewrite the files
// with KILN_UPDATE_GOLDEN=1 and review the diff.
//
// A line "# options: fusion=off fuel=N target=cuda" sets the ScheduleOptions; the
// default target is an AVX-512 CPU (the golden files do not depend on the host).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "codegen/kernel_ir.h"
#include "codegen/lower.h"
#include "graph/text.h"
#include "kiln/error.h"

using namespace kiln;
namespace fs = std::filesystem;

namespace {

const fs::path kDir = fs::path(KILN_SOURCE_DIR) / "tests" / "codegen";

std::string read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// The options named on the case's "# options:" line.
codegen::ScheduleOptions options_of(const std::string& text) {
  codegen::ScheduleOptions o;
  o.target = codegen::Target::cpu(512, true, 32);
  const std::string key = "# options:";
  const size_t at = text.find(key);
  if (at == std::string::npos) return o;
  std::istringstream words(text.substr(at + key.size(), text.find('\n', at) - at - key.size()));
  for (std::string w; words >> w;) {
    if (w == "fusion=off") o.fusion = false;
    else if (w.rfind("fuel=", 0) == 0) o.fuel = std::stoll(w.substr(5));
    else if (w == "target=cuda") o.target = codegen::Target::cuda(9, 0, 132, 2048, 49152);
    else ADD_FAILURE() << "unknown option " << w;
  }
  return o;
}

/// The schedule of the graph text, as the golden files hold it.
std::string schedule_text(const std::string& graph_text) {
  const std::vector<graph::NodeRef> roots = graph::parse_graph(graph_text);
  std::vector<const graph::Node*> outputs;
  for (const graph::NodeRef& r : roots) outputs.push_back(r.get());
  const codegen::Schedule s = codegen::schedule(outputs, options_of(graph_text));
  std::string out = "decisions:\n";
  for (const codegen::FusionDecision& d : s.decisions) out += "  " + d.text() + "\n";
  for (size_t k = 0; k < s.launches.size(); ++k) {
    const codegen::KernelLaunch& l = s.launches[k];
    std::string params;
    for (int64_t p : l.params) params += (params.empty() ? "" : ", ") + std::to_string(p);
    out += "\nkernel " + std::to_string(k) + " (" + codegen::form_name(l.kernel.form) + ", " +
           std::to_string(l.outputs.size()) + " output" + (l.outputs.size() == 1 ? "" : "s") + ", params [" + params +
           "]):\n";
    out += codegen::print_kernel(l.kernel);
    if (out.back() != '\n') out += '\n';
  }
  return out;
}

std::vector<std::string> case_names() {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(kDir))
    if (e.path().extension() == ".graph") names.push_back(e.path().stem().string());
  std::sort(names.begin(), names.end());
  return names;
}

class CodegenGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(CodegenGolden, ScheduleMatches) {
  const fs::path in = kDir / (GetParam() + ".graph"), expected = kDir / (GetParam() + ".expected");
  const std::string text = schedule_text(read(in));
  if (const char* u = std::getenv("KILN_UPDATE_GOLDEN"); u && std::string(u) == "1") {
    std::ofstream(expected) << text;
    return;
  }
  ASSERT_TRUE(fs::exists(expected)) << expected << " is missing; run with KILN_UPDATE_GOLDEN=1 to create it";
  EXPECT_EQ(read(expected), text) << expected << " differs; if the change is intended, run with KILN_UPDATE_GOLDEN=1";
}

INSTANTIATE_TEST_SUITE_P(Cases, CodegenGolden, ::testing::ValuesIn(case_names()),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

// The suite covers every kernel form on the CPU target and the CUDA one.
TEST(CodegenGoldenSuite, CoversEveryForm) {
  std::string all;
  for (const std::string& n : case_names()) all += read(kDir / (n + ".expected"));
  for (const char* form : {"elementwise", "row", "reduction", "gemm", "attention"})
    EXPECT_NE(all.find(std::string("(") + form + ","), std::string::npos) << "no case of the " << form << " form";
}

// A malformed case is a parse error naming the line, not a crash.
TEST(CodegenGoldenSuite, MalformedGraphTextIsAnError) {
  EXPECT_THROW(schedule_text("%0 = input f32[4] i0=1\n%1 = exp f32[4] (%7)\nreturn %1\n"), kiln::Error);
}

} // namespace
