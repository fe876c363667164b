// Observability (issue 18): readable kernel names, the user's source lines on graph
// nodes and kernels, the per-kernel profile, the Chrome trace and the DOT picture.

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>

#include "kiln/kiln.h"
#include "runtime/executor.h"

using namespace kiln;
namespace F = kiln::nn::functional;

namespace {

std::vector<codegen::KernelLaunch> launches_of(const std::vector<Tensor>& ts) {
  std::vector<graph::NodeRef> nodes;
  for (const Tensor& t : ts) nodes.push_back(t.node());
  return runtime::make_plan(nodes).schedule.launches;
}

std::vector<std::string> kernel_names(const std::vector<Tensor>& ts) {
  std::vector<std::string> names;
  for (const auto& l : launches_of(ts)) names.push_back(l.kernel.name);
  return names;
}

bool has_prefix(const std::vector<std::string>& names, const std::string& prefix) {
  for (const std::string& n : names)
    if (n.rfind(prefix, 0) == 0) return true;
  return false;
}

std::string here(int line) { return "test_observe.cpp:" + std::to_string(line); }

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / (name + "_" + std::to_string(::getpid()))).string();
}

} // namespace

TEST(KernelNames, DescribeWhatTheKernelComputes) {
  Tensor x = randn({64, 96}, 1), w = randn({96, 128}, 2), b = randn({128}, 3);
  // (the exp over other points than the softmax's: small independent values over the same
  // points would share its kernel)
  const auto names = kernel_names({F::softmax(x, 1), relu(matmul(x, w) + b), x.sum({1}), exp(x.transpose(0, 1) * 2.0)});
  EXPECT_TRUE(has_prefix(names, "k_softmax_f32_")) << ::testing::PrintToString(names);
  EXPECT_TRUE(has_prefix(names, "k_gemm_add_relu_f32_")) << ::testing::PrintToString(names);
  EXPECT_TRUE(has_prefix(names, "k_sum_f32_")) << ::testing::PrintToString(names);
  EXPECT_TRUE(has_prefix(names, "k_mul_exp_f32_")) << ::testing::PrintToString(names);
  const std::regex identifier("k_[a-z0-9_]+_[0-9a-f]{12}");
  for (const std::string& n : names) {
    EXPECT_TRUE(std::regex_match(n, identifier)) << n;
    EXPECT_LE(n.size(), 80u) << n;
  }
}

TEST(KernelNames, LongChainsAreBoundedAndTheHashStillDecides) {
  Tensor x = randn({1000}, 4);
  Tensor y = log(sqrt(abs(cos(sin(x) + 1) * tanh(x) - sigmoid(x))));
  const auto names = kernel_names({y});
  ASSERT_EQ(names.size(), 1u);
  EXPECT_NE(names[0].find("_etc_f32_"), std::string::npos) << names[0];
  EXPECT_LE(names[0].size(), 80u);
  // Same computation over another size: the same kernel (sizes are parameters), the same name.
  Tensor z = randn({777}, 5);
  const auto again = kernel_names({log(sqrt(abs(cos(sin(z) + 1) * tanh(z) - sigmoid(z))))});
  EXPECT_EQ(again, names);
  // Another constant: the same kernel too (scalar constants are parameters).
  EXPECT_EQ(kernel_names({log(sqrt(abs(cos(sin(x) + 2) * tanh(x) - sigmoid(x))))}), names);
  // Another op past the description's five words: the same description, another hash.
  const auto other = kernel_names({exp(sqrt(abs(cos(sin(x) + 1) * tanh(x) - sigmoid(x))))});
  ASSERT_EQ(other.size(), 1u);
  EXPECT_NE(other[0], names[0]);
  EXPECT_EQ(other[0].substr(0, other[0].size() - 12), names[0].substr(0, names[0].size() - 12));
}

TEST(SourceLines, NodesRememberTheUsersLine) {
  Tensor x = randn({8, 16}, 6);
  const int line = __LINE__ + 1;
  Tensor y = relu(x * 3.0);
  EXPECT_EQ(graph::source_line_str(y.node()->origin), here(line));
  EXPECT_EQ(graph::source_line_str(y.node()->inputs[0]->origin), here(line)); // the mul, made inside relu's line too
  // Hash-consing is unaffected: the same op at another line is the same node, with its first line.
  Tensor again = relu(x * 3.0);
  EXPECT_EQ(again.node(), y.node());
  EXPECT_EQ(graph::source_line_str(again.node()->origin), here(line));
}

// Every node of y's graph made after `leaves` (the input and the parameters): their lines.
std::vector<std::string> lines_above(const Tensor& y, const std::vector<Tensor>& leaves) {
  std::vector<std::string> out;
  std::vector<const graph::Node*> stack{y.node().get()}, seen;
  auto is_leaf = [&](const graph::Node* n) {
    for (const Tensor& l : leaves)
      if (l.node().get() == n) return true;
    return false;
  };
  while (!stack.empty()) {
    const graph::Node* n = stack.back();
    stack.pop_back();
    if (is_leaf(n) || std::find(seen.begin(), seen.end(), n) != seen.end()) continue;
    seen.push_back(n);
    out.push_back(graph::source_line_str(n->origin));
    for (const auto& in : n->inputs) stack.push_back(in.get());
  }
  return out;
}

TEST(SourceLines, ADirectForwardRecordsTheUsersLine) {
  // Three models, so that no node (a transposed weight) is shared between the three calls:
  // a hash-consed node keeps the line that first made it.
  nn::manual_seed(0);
  auto nested = [] { return nn::Sequential(nn::Linear(16, 8), nn::ReLU(), nn::Sequential(nn::Linear(8, 4), nn::Tanh())); };
  nn::Sequential seq = nested(), seq2 = nested();
  nn::Linear lin(16, 8);
  const Tensor x = randn({2, 16}, 9);
  std::vector<Tensor> leaves{x};
  for (const nn::Module* m : std::initializer_list<const nn::Module*>{&seq, &seq2, &lin})
    for (const Tensor& p : m->parameters()) leaves.push_back(p);
  const int line = __LINE__ + 1;
  const Tensor y = seq.forward(x); // nested Sequentials, called directly
  const auto lines = lines_above(y, leaves);
  EXPECT_GE(lines.size(), 6u); // matmul, add, relu, matmul, add, tanh at least
  for (const std::string& l : lines) EXPECT_EQ(l, here(line));
  const int line2 = __LINE__ + 1;
  const Tensor z = lin.forward(x);
  for (const std::string& l : lines_above(z, leaves)) EXPECT_EQ(l, here(line2));
  const int line3 = __LINE__ + 1;
  const Tensor w = seq2(x); // as before
  for (const std::string& l : lines_above(w, leaves)) EXPECT_EQ(l, here(line3));
}

TEST(SourceLines, KernelsAndDecisionsNameTheirLines) {
  Tensor x = randn({32, 64}, 7);
  const int line1 = __LINE__ + 1;
  Tensor s = F::softmax(x, 1);
  const int line2 = __LINE__ + 1;
  Tensor y = (s * 2.0).sum({0});
  std::vector<graph::NodeRef> nodes{y.node()};
  const runtime::Plan plan = runtime::make_plan(nodes);
  std::string all_lines, decisions;
  for (const auto& l : plan.schedule.launches) all_lines += graph::source_lines_str(l.lines) + ";";
  for (const auto& d : plan.schedule.debug_lines()) decisions += d + "\n";
  EXPECT_NE(all_lines.find(here(line1)), std::string::npos) << all_lines;
  EXPECT_NE(all_lines.find(here(line2)), std::string::npos) << all_lines;
  for (const auto& l : plan.schedule.launches)
    EXPECT_NE(decisions.find(l.kernel.name + " computes "), std::string::npos) << decisions;
  EXPECT_NE(decisions.find("(" + here(line2) + ")"), std::string::npos) << decisions;
}

TEST(SourceLines, GradientsCarryTheForwardLine) {
  Tensor w = randn({16}, 8).requires_grad_();
  const int line = __LINE__ + 1;
  Tensor loss = (exp(w) * w).sum();
  loss.backward();
  // the gradient's nodes were made by the rules of ops on `line`
  const auto launches = launches_of({w.grad()});
  ASSERT_FALSE(launches.empty());
  EXPECT_NE(graph::source_lines_str(launches.back().lines, 16).find(here(line)), std::string::npos)
      << graph::source_lines_str(launches.back().lines, 16);
}

TEST(Profile, TableOfKernelsAndSteps) {
  profile::scope collect(/*print_at_end=*/false);
  Tensor w = (randn({64, 32}, 9) * 0.1).requires_grad_();
  auto step = compile([&](const std::vector<Tensor>& a) -> std::vector<Tensor> {
    return {relu(matmul(a[0], w)).mean()};
  });
  const int call_line = __LINE__ + 1;
  for (int i = 0; i < 3; ++i) (void)step({randn({128, 64}, 10 + i)})[0].item<float>();
  const auto rows = profile::kernels();
  ASSERT_FALSE(rows.empty());
  bool gemm = false;
  for (const auto& r : rows) {
    EXPECT_GT(r.bytes, 0) << r.name;
    if (r.name.rfind("k_gemm", 0) == 0) {
      gemm = true;
      EXPECT_EQ(r.calls, 3u) << r.name;
      EXPECT_DOUBLE_EQ(r.flops, 2.0 * 128 * 32 * 64);
      EXPECT_NE(r.lines.find("test_observe.cpp:"), std::string::npos) << r.lines;
    }
  }
  EXPECT_TRUE(gemm);
  const auto steps = profile::steps();
  ASSERT_EQ(steps.size(), 1u);
  EXPECT_EQ(steps[0].where, here(call_line));
  EXPECT_EQ(steps[0].calls, 3u);
  EXPECT_GT(steps[0].kernel_ms, 0);
  EXPECT_LE(steps[0].kernel_ms, steps[0].total_ms);
  const std::string table = profile::report();
  EXPECT_NE(table.find("GFLOP/s"), std::string::npos) << table;
  EXPECT_NE(table.find(rows[0].name), std::string::npos) << table;
  EXPECT_NE(table.find("kernel share"), std::string::npos) << table;
  profile::reset();
  EXPECT_TRUE(profile::kernels().empty());
}

// One kernel serves every shape its parameters allow; its row averages over all its launches
// (a row with the first launch's figures made a GEMM that ran a small and a large product
// look several times slower than it was).
TEST(Profile, AKernelOfSeveralShapesAveragesOverItsLaunches) {
  profile::scope collect(/*print_at_end=*/false);
  const Tensor small = randn({64, 32}, 12).realize(), large = randn({64, 128}, 13).realize();
  const Tensor w_small = randn({32, 48}, 14).realize(), w_large = randn({128, 48}, 15).realize();
  (void)matmul(small, w_small).realize();
  (void)matmul(large, w_large).realize();
  const auto rows = profile::kernels();
  std::vector<profile::KernelRow> gemms;
  for (const auto& r : rows)
    if (r.name.rfind("k_gemm", 0) == 0) gemms.push_back(r);
  ASSERT_EQ(gemms.size(), 1u) << "both products are expected to run one kernel";
  EXPECT_EQ(gemms[0].calls, 2u);
  EXPECT_DOUBLE_EQ(gemms[0].flops, (2.0 * 64 * 48 * 32 + 2.0 * 64 * 48 * 128) / 2);
  EXPECT_DOUBLE_EQ(gemms[0].bytes, 4.0 * ((64 * 32 + 32 * 48 + 64 * 48) + (64 * 128 + 128 * 48 + 64 * 48)) / 2);
}

TEST(Profile, OffCollectsNothing) {
  profile::enable(false);
  profile::reset();
  (void)(randn({100}, 11) + 1).sum().item<float>();
  EXPECT_TRUE(profile::kernels().empty());
}

TEST(Trace, ChromeTraceEventFile) {
  const std::string path = temp_path("kiln_trace.json");
  Tensor w = (randn({256, 64}, 12) * 0.1).requires_grad_();
  auto step = compile([&](const std::vector<Tensor>& a) -> std::vector<Tensor> {
    Tensor loss = relu(matmul(a[0], w)).mean();
    loss.backward();
    return {loss};
  });
  profile::start_trace(path);
  EXPECT_TRUE(profile::tracing());
  for (int i = 0; i < 2; ++i) (void)step({randn({64, 256}, 20 + i)})[0].item<float>();
  (void)(randn({1 << 20}, 13) * 2.0).realize(); // big enough for TBB chunks
  profile::stop_trace();
  EXPECT_FALSE(profile::tracing());
  std::ifstream f(path);
  ASSERT_TRUE(f.good());
  const nlohmann::json trace = nlohmann::json::parse(f);
  std::filesystem::remove(path);
  std::map<std::string, int> count;
  for (const auto& e : trace.at("traceEvents")) {
    if (e.at("ph") != "X") continue;
    ++count[e.at("cat").get<std::string>()];
    EXPECT_GE(e.at("dur").get<double>(), 0);
    if (e.at("cat") == "compile") EXPECT_TRUE(e.at("args").contains("cache")) << e;
    if (e.at("cat") == "launch") EXPECT_EQ(e.at("name").get<std::string>().rfind("k_", 0), 0u) << e;
  }
  const size_t kernels = step.num_kernels();
  EXPECT_EQ(count["trace"], 2); // the second call traces again: gradients exist from then on
  EXPECT_EQ(count["step"], 2);
  EXPECT_GE(count["schedule"], 2); // the step's plan and the sum's
  EXPECT_GE(count["compile"], static_cast<int>(kernels));
  EXPECT_GE(count["launch"], static_cast<int>(2 * kernels + 1));
  EXPECT_GE(count["chunk"], 2);
  EXPECT_GE(count["copy"], 0);
}

TEST(GraphDot, ClustersPerKernelWithReasons) {
  Tensor x = randn({32, 48}, 14), w = randn({48, 16}, 15);
  Tensor h = relu(matmul(x, w));
  Tensor y = F::softmax(h, 1) + h.sum({1}, true);
  const std::string dot = graph_dot({y});
  const auto names = kernel_names({y});
  for (const std::string& n : names) EXPECT_NE(dot.find(n), std::string::npos) << n << "\n" << dot;
  EXPECT_NE(dot.find("subgraph cluster_0"), std::string::npos);
  EXPECT_NE(dot.find("color=red"), std::string::npos) << dot; // a boundary with its reason
  EXPECT_NE(dot.find("label=\"matmul kernel; no epilogue fused: "), std::string::npos) << dot;
  EXPECT_NE(dot.find("(gemm, "), std::string::npos) << dot;
  EXPECT_NE(dot.find("(row, "), std::string::npos) << dot;
  if (std::system("command -v dot >/dev/null 2>&1") != 0) {
    std::printf("skipping the render: Graphviz's `dot` is not installed (apt install graphviz)\n");
    return;
  }
  const std::string in = temp_path("kiln_graph.dot"), out = in + ".svg";
  std::ofstream(in) << dot;
  ASSERT_EQ(std::system(("dot -Tsvg " + in + " -o " + out).c_str()), 0) << dot;
  std::ifstream svg(out);
  std::string text((std::istreambuf_iterator<char>(svg)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("<svg"), std::string::npos);
  std::filesystem::remove(in);
  std::filesystem::remove(out);
}

TEST(GraphDot, DumpDirWritesOnePerPlan) {
  const std::string dir = temp_path("kiln_dump");
  std::filesystem::create_directories(dir);
  const Options saved = options();
  options().debug = 2;
  options().dump_dir = dir;
  testing::internal::CaptureStderr();
  (void)(randn({64}, 16) * 3.0).sum().item<float>();
  const std::string err = testing::internal::GetCapturedStderr();
  options() = saved;
  size_t dots = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) dots += e.path().extension() == ".dot";
  std::filesystem::remove_all(dir);
  EXPECT_GE(dots, 1u) << err;
  EXPECT_NE(err.find("schedule: k_"), std::string::npos) << err;
}
