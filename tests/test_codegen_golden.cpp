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
//
// The kernel IR's text also reads back (parse_kernel): every kernel of every case prints,
// parses and prints the same text, plans the same form and emits the same CUDA; and a
// kernel written as text by hand compiles and runs (IR in, results out).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "codegen/cuda_emitter.h"
#include "codegen/form.h"
#include "codegen/kernel_ir.h"
#include "codegen/llvm_jit.h"
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

/// A graph (its roots keep its nodes, which the decisions name, alive) and its schedule.
struct Scheduled {
  std::vector<graph::NodeRef> roots;
  codegen::Schedule schedule;
};

/// The schedule of the graph text.
Scheduled schedule_of(const std::string& graph_text) {
  Scheduled s{graph::parse_graph(graph_text), {}};
  std::vector<const graph::Node*> outputs;
  for (const graph::NodeRef& r : s.roots) outputs.push_back(r.get());
  s.schedule = codegen::schedule(outputs, options_of(graph_text));
  return s;
}

/// The schedule of the graph text, as the golden files hold it.
std::string schedule_text(const std::string& graph_text) {
  const Scheduled scheduled = schedule_of(graph_text);
  const codegen::Schedule& s = scheduled.schedule;
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

// Each kernel's text parses back to a kernel that prints the same text, plans the same form
// for the case's target, gets the same name, and emits the same CUDA source.
TEST_P(CodegenGolden, KernelTextParsesBack) {
  const std::string graph_text = read(kDir / (GetParam() + ".graph"));
  const codegen::ScheduleOptions options = options_of(graph_text);
  const Scheduled s = schedule_of(graph_text);
  for (const codegen::KernelLaunch& l : s.schedule.launches) {
    const std::string text = codegen::print_kernel(l.kernel);
    codegen::Kernel k = codegen::parse_kernel(text);
    EXPECT_EQ(codegen::print_kernel(k), text);
    if (!k.gemm) codegen::set_form(k, codegen::plan_form(k, l.params, options.target));
    EXPECT_EQ(k.form, l.kernel.form) << text;
    codegen::finalize(k);
    EXPECT_EQ(k.name, l.kernel.name) << text;
    if (options.target.kind == codegen::Target::Kind::CUDA) EXPECT_EQ(codegen::emit_cuda(k), codegen::emit_cuda(l.kernel));
  }
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

// IR in, results out: a row kernel written as text (each row minus its maximum) is parsed,
// planned for this host, compiled and run.
TEST(KernelText, AHandWrittenKernelRuns) {
  codegen::Kernel k = codegen::parse_kernel(R"(kernel k_row_minus_max(b0: f32, out b1: f32; params 2)
  domain [p0]
  reduce red0 = max over [p1]:
    v0: i64 = mul(i0, p1)
    v1: i64 = add(v0, r0)
    v2: f32 = load b0(v1)
    yield v2
  map [p1]:
    v3: i64 = add(v0, m0)
    v4: f32 = load b0(v3)
    v5: f32 = sub(v4, red0)
    store b1[v3] = v5
)");
  const int64_t rows = 3, cols = 37;
  const std::vector<int64_t> params{rows, cols};
  codegen::set_form(k, codegen::plan_form(k, params, codegen::host_cpu_target()));
  EXPECT_EQ(k.form, codegen::KernelForm::Row);
  codegen::finalize(k);
  std::vector<float> x(rows * cols), y(rows * cols, -1.0f);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 7919) % 101) - 50.0f;
  const std::vector<void*> bufs{x.data(), y.data()};
  codegen::LlvmJit::instance().compile(k)(0, rows, bufs.data(), params.data());
  for (int64_t r = 0; r < rows; ++r) {
    const float m = *std::max_element(x.begin() + r * cols, x.begin() + (r + 1) * cols);
    for (int64_t c = 0; c < cols; ++c) ASSERT_EQ(y[r * cols + c], x[r * cols + c] - m) << r << "," << c;
  }
}

/// The message of the parse error of `text`.
std::string parse_error(const std::string& text) {
  try {
    (void)codegen::parse_kernel(text);
  } catch (const kiln::Error& e) {
    return e.what();
  }
  return "(no error)";
}

// The kernel IR's ops (kernel_ops.h): ScalarOp is every elementwise row of ops.def but those lowering
// removes, ReduceOp every reduction; each maps back to its graph op and prints with its name (so the
// kernel text, and every kernel name, reads as when the kernel IR held graph ops).
TEST(KernelOps, GeneratedFromTheOpTable) {
  int scalars = 0, reductions = 0;
  for (int i = 0; i < graph::kNumOps; ++i) {
    const auto k = static_cast<graph::OpKind>(i);
    SCOPED_TRACE(std::string(graph::op_name(k)));
    if (const std::optional<codegen::ScalarOp> s = codegen::scalar_op(k)) {
      ++scalars;
      EXPECT_TRUE(graph::is_elementwise(k));
      EXPECT_EQ(codegen::graph_op(*s), k);
      EXPECT_EQ(codegen::op_name(*s), graph::op_name(k));
      EXPECT_EQ(codegen::op_arity(*s), graph::op_arity(k));
    }
    if (const std::optional<codegen::ReduceOp> r = codegen::reduce_op(k)) {
      ++reductions;
      EXPECT_EQ(graph::op_category(k), graph::OpCategory::Reduce);
      EXPECT_EQ(codegen::graph_op(*r), k);
      EXPECT_EQ(codegen::op_name(*r), graph::op_name(k));
    } else {
      EXPECT_NE(graph::op_category(k), graph::OpCategory::Reduce);
    }
  }
  // what lowering removes (detach) or lowers to a Check expression (check_index) is no ScalarOp
  EXPECT_FALSE(codegen::scalar_op(graph::OpKind::Detach));
  EXPECT_FALSE(codegen::scalar_op(graph::OpKind::CheckIndex));
  EXPECT_EQ(codegen::scalar_op(graph::OpKind::Cast), codegen::ScalarOp::Cast);
  EXPECT_EQ(codegen::scalar_op(graph::OpKind::Where), codegen::ScalarOp::Where);
  for (int v = 0; v < scalars; ++v) { // the enums are dense: each value names its graph op's row
    const auto s = static_cast<codegen::ScalarOp>(v);
    EXPECT_EQ(codegen::scalar_op(codegen::graph_op(s)), s);
  }
  for (int v = 0; v < reductions; ++v) {
    const auto r = static_cast<codegen::ReduceOp>(v);
    EXPECT_EQ(codegen::reduce_op(codegen::graph_op(r)), r);
  }
  EXPECT_TRUE(codegen::returns_bool(codegen::ScalarOp::Lt));
  EXPECT_FALSE(codegen::returns_bool(codegen::ScalarOp::Add));
  EXPECT_EQ(codegen::op_name(codegen::RandomDist::Uniform), "rand");
  EXPECT_EQ(codegen::op_name(codegen::RandomDist::Normal), "randn");
}

// Malformed and ill-typed kernel text is an error naming the line and the problem.
TEST(KernelText, BadTextIsAnErrorNamingTheLine) {
  const std::string head = "kernel k(b0: f32, out b1: f32; params 1)\n  domain [p0]\n";
  std::vector<std::pair<std::string, std::string>> cases{
      {"", "no 'kernel NAME(...)' line"},
      {"kernel k(b0: f32; params 1)\n", "no 'domain [...]' line"},
      {head + "    store b1[i0] = v9\n", "line 3: v9 is not defined"},
      {head + "    store b0[i0] = 1:f32\n", "line 3: store to b0, which is not an output buffer"},
      {head + "    v0: f32 = load b0(i0)\n    store b1[i0] = v0\n    v0: f32 = neg(v0)\n", "line 5: v0 is defined twice"},
      {head + "    v0: f32 = neg(v0)\n    store b1[i0] = v0\n", "line 3: v0 depends on itself"},
      {head + "    v0: f32 = load b0(i0)\n    v1: f32 = add(v0, 1:i64)\n    store b1[i0] = v1\n",
       "line 4: add: operands of its result's dtype"},
      {head + "    v0: f32 = frobnicate(i0)\n    store b1[i0] = v0\n", "line 3: unknown op 'frobnicate'"},
      // graph ops that are no kernel op (kernel_ops.h)
      {head + "    v0: f32 = load b0(i0)\n    v1: f32 = detach(v0)\n    store b1[i0] = v1\n",
       "line 4: 'detach' is not a kernel's elementwise op"},
      {head + "    v0: f32 = load b0(i0)\n    v1: f32 = matmul(v0, v0)\n    store b1[i0] = v1\n",
       "line 4: 'matmul' is not a kernel's elementwise op"},
      {head + "  reduce red0 = add over [p0]:\n    yield 1:f32\n    store b1[i0] = red0\n", "line 3: unknown reduction 'add'"},
      {"kernel k(out b0: f32; params 1)\n  domain [1:i64]\n  scan red0 = maximum f32 over r0 < p0:\n    yield 1:f32\n"
       "    store b0[m0] = red0\n",
       "line 3: a scan combines by add, mul, max, min or logaddexp, not 'maximum'"},
      {"kernel k(out b0: i64; params 1)\n  domain [1:i64]\n  scan red0 = logaddexp i64 over r0 < p0:\n    yield 1:i64\n"
       "    store b0[m0] = red0\n",
       "line 3: a logaddexp scan needs a floating dtype"},
      {"kernel k(out b0: f32; params 1)\n  domain [1:i64]\n  scan red0 = logaddexp f32 over r0 < p0 into m0 < p0:\n"
       "    yield 1:f32\n    at m0 = r0\n    store b0[m0] = red0\n",
       "line 3: a scatter combines by add, mul, max or min"},
      {"kernel k(out b0: i64; params 1)\n  domain [1:i64]\n  scan red0 = argsort f32 over r0 < p0 into m0 < p0:\n"
       "    yield 1:f32\n    at m0 = r0\n    store b0[m0] = red0\n",
       "line 3: an argsort has no 'into'"},
      {"kernel k(out b0: f32; params 1)\n  domain [1:i64]\n  scan red0 = argsort descending f32 over r0 < p0:\n"
       "    yield 1:f32\n    store b0[m0] = red0\n",
       "line 5: a store's offset is i64 and its value has the buffer's dtype"}, // an argsort's red0 is an i64 position
      {head + "    v0: f32 = load b0(i0)\n    store b1[i0] = v0\n  reduce red0 = sum over [p0]:\n",
       "reduction without a 'yield'"},
      {head + "  wibble\n", "line 3: unexpected 'wibble'"},
      {head + "  reduce red0 = sum over [p0]:\n    v0: f32 = neg(red0)\n    yield v0\n    store b1[i0] = red0\n",
       "line 4: red0 is used before it is computed"},
  };
  const std::string att = "kernel k(b0: f32, b1: f32, b2: f32, out b3: f32; params 4)\n  domain []\n";
  const std::string sizes = "  sizes [bh, l, s, e, ev] = [1:i64, p0, p1, p2, p3] scale 0.5:f32\n";
  cases.insert(cases.end(), {
      {att + "  attention q b0 k b1 v b2 rows 1\n" + sizes, "line 3: attention: needs q, k, v and out buffers"},
      {att + "  attention q b0 k b1 v b2 out b0 rows 1\n" + sizes, "line 3: attention: 'out' is not an output buffer"},
      {att + "  attention q b0 k b1 v b2 lse b0 rows 1\n" + sizes, "line 3: attention: 'lse' is not an output buffer"},
      {att + "  attention q b0 k b1 v b2 out b0 dout b1 dq b3 rows 1\n" + sizes, "line 3: attention: the backward needs an lse buffer"},
      {att + "  attention q b0 k b1 v b2 out b3 rows 1\n", "line 3: attention without a 'sizes' line"},
      {att + "  attention q b0 k b1 v b2 out b3 rows 1\n" + sizes + "  mask 1:i64\n",
       "line 5: attention: the mask is bool or of the output's dtype"},
  });
  for (const auto& [text, want] : cases) {
    const std::string msg = parse_error(text);
    EXPECT_EQ(msg.rfind("parse_kernel: ", 0), 0u) << msg;
    EXPECT_NE(msg.find(want), std::string::npos) << "want '" << want << "' in: " << msg;
  }
}

} // namespace
