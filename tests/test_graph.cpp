// The graph layer: hash-consing, shapes and broadcasting, promotion, the text
// form (print/parse round trips and parse errors), and the verifier.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "graph/build.h"
#include "graph/text.h"
#include "graph/verify.h"
#include "kiln/error.h"

namespace kiln::graph {
namespace {

NodeRef input(DType dt, Shape s) { return make_input(dt, std::move(s), nullptr); }

TEST(Graph, IdenticalNodesAreTheSameNode) {
  NodeRef x = input(kFloat32, {2, 3});
  NodeRef a = build::add(x, build::constant_like(x, 1.5));
  NodeRef b = build::add(x, build::constant_like(x, 1.5));
  EXPECT_EQ(a.get(), b.get());
  NodeRef c = build::add(x, build::constant_like(x, 2.5));
  EXPECT_NE(a.get(), c.get());
}

TEST(Graph, NegativeZeroConstantIsDistinct) {
  EXPECT_NE(build::constant(0.0, kFloat32).get(), build::constant(-0.0, kFloat32).get());
}

TEST(Graph, InputsAreNeverMerged) {
  EXPECT_NE(input(kFloat32, {2}).get(), input(kFloat32, {2}).get());
}

TEST(Graph, DeadNodesLeaveTheTable) {
  const size_t before = live_node_count();
  {
    NodeRef x = input(kFloat64, {4});
    NodeRef y = build::unary(OpKind::Exp, build::unary(OpKind::Neg, x));
    EXPECT_EQ(live_node_count(), before + 3);
  }
  EXPECT_EQ(live_node_count(), before);
}

TEST(Graph, AMillionNodeChainIsDestroyedWithoutRecursion) {
  // Nested destructors would overflow the stack long before a million levels.
  const size_t before = live_node_count();
  {
    NodeRef x = input(kFloat32, {4});
    for (int i = 0; i < 1000000; ++i) x = build::unary(i % 2 ? OpKind::Neg : OpKind::Exp, x);
    EXPECT_EQ(live_node_count(), before + 1000001);
  }
  EXPECT_EQ(live_node_count(), before);
}

TEST(Graph, TopoOrderPutsInputsFirst) {
  NodeRef x = input(kFloat32, {3});
  NodeRef y = build::mul(x, x);
  NodeRef z = build::add(y, x);
  auto order = topo_order({z.get()});
  ASSERT_EQ(order.size(), 3u);
  EXPECT_EQ(order[0], x.get());
  EXPECT_EQ(order[1], y.get());
  EXPECT_EQ(order[2], z.get());
}

// A custom output (as autograd/custom.h makes one): the value, then the call's inputs.
NodeRef custom(const NodeRef& value, std::vector<NodeRef> inputs, int64_t call, int64_t index = 0) {
  Attrs a;
  a.i0 = call;
  a.i1 = index;
  inputs.insert(inputs.begin(), value);
  return make_node(OpKind::CustomOutput, value->dtype, value->shape, std::move(inputs), a);
}

TEST(Graph, ACustomOutputsValueIsItsOperandZeroAlone) {
  NodeRef x = input(kFloat32, {3});
  NodeRef v = build::mul(x, x);
  NodeRef cin = build::unary(OpKind::Exp, x); // the call's input: in the structure, not in the value
  NodeRef c = custom(v, {cin, x}, 77);
  NodeRef z = build::add(c, x);
  ASSERT_EQ(value_inputs(*c).size(), 1u);
  EXPECT_EQ(value_inputs(*c)[0].get(), v.get());
  EXPECT_EQ(value_inputs(*z).size(), 2u);
  const auto all = topo_order({z.get()});
  const auto values = value_order({z.get()});
  EXPECT_NE(std::find(all.begin(), all.end(), cin.get()), all.end());
  EXPECT_EQ(std::find(values.begin(), values.end(), cin.get()), values.end());
  EXPECT_EQ(values, (std::vector<const Node*>{x.get(), v.get(), c.get(), z.get()}));
  // the call id and the inputs are structure: another call, or other inputs, is another node
  EXPECT_EQ(custom(v, {cin, x}, 77).get(), c.get());
  EXPECT_NE(custom(v, {cin, x}, 78).get(), c.get());
  EXPECT_NE(custom(v, {x}, 77).get(), c.get());
}

TEST(Shape, Broadcasting) {
  EXPECT_EQ(*broadcast_shapes({2, 1, 3}, {4, 1}), (Shape{2, 4, 3}));
  EXPECT_EQ(*broadcast_shapes({}, {5}), (Shape{5}));
  EXPECT_EQ(*broadcast_shapes({0, 1}, {1, 7}), (Shape{0, 7}));
  EXPECT_FALSE(broadcast_shapes({2, 3}, {4}).has_value());
}

TEST(Shape, ReshapeStridesOfViews) {
  StridedLayout contiguous = contiguous_layout({4, 6});
  EXPECT_EQ(*reshape_strides(contiguous, {2, 2, 6}), (Strides{12, 6, 1}));
  StridedLayout transposed{{6, 4}, {1, 6}, 0};
  EXPECT_FALSE(reshape_strides(transposed, {24}).has_value());
  EXPECT_EQ(*reshape_strides(transposed, {6, 2, 2}), (Strides{1, 12, 6}));
  EXPECT_TRUE(is_contiguous(contiguous));
  EXPECT_FALSE(is_contiguous(transposed));
}

TEST(DType, PromotionFollowsPyTorch) {
  EXPECT_EQ(promote_types(kInt32, kInt64), kInt64);
  EXPECT_EQ(promote_types(kInt64, kFloat32), kFloat32);
  EXPECT_EQ(promote_types(kFloat32, kFloat64), kFloat64);
  EXPECT_EQ(promote_types(kBool, kInt32), kInt32);
  EXPECT_EQ(promote_types(kBool, kBool), kBool);
}

NodeRef sample_graph() {
  NodeRef x = input(kFloat32, {2, 3});
  NodeRef y = input(kFloat32, {3});
  NodeRef yb = build::broadcast_to(y, {2, 3});
  NodeRef s = build::reduce(OpKind::Sum, build::unary(OpKind::Tanh, build::mul(x, yb)), {1});
  NodeRef p = build::pad(build::slice(x, {0, 1}, {1, 2}, {2, 1}), {1, 0}, {0, 2}, -0.0);
  NodeRef c = build::concat({p, build::permute(build::constant(std::nan(""), kFloat32, {3, 3}), {1, 0})}, 0);
  NodeRef m = build::matmul(x, build::transpose_last(x));
  NodeRef w = build::where(build::binary(OpKind::Lt, m, build::constant_like(m, 1e-30)), m, build::constant_like(m, 1e300));
  NodeRef i = build::cast(build::reduce(OpKind::Argmax, w, {0}), kInt32);
  NodeRef total = build::broadcast_to(build::reshape(build::reduce(OpKind::Sum, c, {0, 1}), {1, 1}), {2, 1});
  return build::concat({build::cast(s, kFloat64), build::cast(build::reshape(i, {2, 1}), kFloat64),
                        build::cast(total, kFloat64)},
                       1);
}

TEST(Text, PrintParseRoundTripGivesTheSameNodes) {
  NodeRef g = sample_graph();
  NodeRef c = build::concat({build::constant(1, kInt64, {2}), build::reshape(build::reduce(OpKind::Max, input(kInt64, {2, 5}), {1}), {2})}, 0);
  const std::string text = print_graph({g, c});
  std::vector<NodeRef> back = parse_graph(text);
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[0].get(), g.get());
  EXPECT_EQ(back[1].get(), c.get());
  EXPECT_EQ(print_graph(back), text);
}

TEST(Text, ParsesHandWrittenText) {
  const auto roots = parse_graph(
      "# a comment\n"
      "%0 = input f32[4] i0=900001\n"
      "%1 = const f32[4] f0=2\n"
      "%2 = mul f32[4] (%0, %1)\n"
      "%3 = sum f32[1] (%2) ints=[0]\n"
      "return %3\n");
  ASSERT_EQ(roots.size(), 1u);
  EXPECT_EQ(roots[0]->op, OpKind::Sum);
  EXPECT_EQ(roots[0]->inputs[0]->op, OpKind::Mul);
  EXPECT_EQ(roots[0]->inputs[0]->inputs[1]->attrs.f0, 2.0);
}

TEST(Text, ACustomOutputPrintsItsCallsInputsAndParsesBack) {
  NodeRef x = input(kFloat64, {2});
  NodeRef c = custom(build::neg(x), {x}, 4242, 1);
  const std::string text = print_graph({c});
  EXPECT_NE(text.find("%2 = custom f64[2] (%1, %0) i0=4242 i1=1\n"), std::string::npos) << text;
  EXPECT_EQ(parse_graph(text)[0].get(), c.get());
  // the parser needs no table of calls: a custom node is graph structure like any other
  const auto roots = parse_graph("%0 = const f32[3] f0=2\n%1 = input f32[3] i0=900002\n"
                                 "%2 = custom f32[3] (%0, %1) i0=31337\nreturn %2\n");
  EXPECT_EQ(roots[0]->op, OpKind::CustomOutput);
  EXPECT_EQ(roots[0]->inputs.size(), 2u);
}

void expect_parse_error(const std::string& text, const std::string& fragment) {
  try {
    parse_graph(text);
    FAIL() << "no error for: " << text;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(Text, MalformedInputIsAnError) {
  expect_parse_error("%0 = frobnicate f32[2]\nreturn %0\n", "unknown op 'frobnicate'");
  expect_parse_error("%0 = const q8[2]\nreturn %0\n", "unknown dtype");
  expect_parse_error("%0 = neg f32[2] (%7)\nreturn %0\n", "undefined %7");
  expect_parse_error("%0 = const f32[2]\n%1 = add f32[3] (%0, %0)\nreturn %1\n", "line 2");
  expect_parse_error("%0 = const f32[2]\n", "missing 'return'");
  expect_parse_error("%0 = const f32[2] f0=abc\nreturn %0\n", "expected a number");
  expect_parse_error("%0 = const f32[2]\n%0 = const f32[2]\nreturn %0\n", "defined twice");
  expect_parse_error("%0 = const f32[2] zz=1\nreturn %0\n", "unknown attribute");
}

TEST(Verify, AcceptsBuiltGraphs) { EXPECT_EQ(verify({sample_graph()}), ""); }

TEST(Verify, RejectsBrokenNodes) {
  NodeRef x = input(kFloat32, {2, 3});
  NodeRef y = input(kFloat32, {3, 2});
  NodeRef i = input(kInt32, {2, 3});
  EXPECT_NE(check_node(OpKind::Add, kFloat32, {2, 3}, {x, y}, {}), "");
  EXPECT_NE(check_node(OpKind::Add, kFloat32, {2, 3}, {x, i}, {}), "");
  EXPECT_NE(check_node(OpKind::Exp, kInt32, {2, 3}, {i}, {}), "");
  EXPECT_NE(check_node(OpKind::Matmul, kFloat32, {2, 2}, {x, x}, {}), "");
  EXPECT_EQ(check_node(OpKind::Matmul, kFloat32, {2, 2}, {x, y}, {}), "");
  Attrs bad_perm;
  bad_perm.ints = {0, 0};
  EXPECT_NE(check_node(OpKind::Permute, kFloat32, {2, 2}, {x}, bad_perm), "");
  Attrs slice;
  slice.ints = {0, 1, 2, 1};
  EXPECT_NE(check_node(OpKind::Slice, kFloat32, {2, 2}, {x}, slice), "") << "slice past the end";
  EXPECT_NE(check_node(OpKind::Lt, kFloat32, {2, 3}, {x, x}, {}), "") << "comparisons give bool";
  EXPECT_NE(check_node(OpKind::CustomOutput, kFloat32, {3, 2}, {x, y}, {}), "") << "a custom output keeps its value's shape";
  EXPECT_NE(check_node(OpKind::CustomOutput, kFloat64, {2, 3}, {x}, {}), "") << "and its dtype";
  // an attention's dropout: none, or p in (0, 1] with one seed
  NodeRef q = input(kFloat32, {4, 3}), k = input(kFloat32, {5, 3}), v = input(kFloat32, {5, 2});
  auto attention_with = [&](double p, std::vector<int64_t> ints) {
    Attrs a;
    a.f0 = 0.5, a.f1 = p, a.ints = std::move(ints);
    return check_node(OpKind::Attention, kFloat32, {4, 2}, {q, k, v}, a);
  };
  EXPECT_EQ(attention_with(0, {}), "");
  EXPECT_EQ(attention_with(0.1, {7}), "");
  EXPECT_EQ(attention_with(1.0, {7}), "") << "p = 1 drops every weight (the factor is 0)";
  EXPECT_NE(attention_with(1.5, {7}), "");
  EXPECT_NE(attention_with(-0.1, {7}), "");
  EXPECT_NE(attention_with(0.1, {}), "") << "a dropout without a seed";
  EXPECT_NE(attention_with(0.1, {7, 8}), "");
  EXPECT_NE(check_node(OpKind::CustomOutput, kFloat32, {2, 3}, {}, {}), "") << "it has a value";
  // its value and its kernel live on one device; the call's inputs may live elsewhere (to(device))
  const Device gpu{Device::Kind::CUDA, 0};
  NodeRef on_gpu = make_input(kFloat32, {2, 3}, nullptr, gpu);
  EXPECT_EQ(check_node(OpKind::CustomOutput, kFloat32, {2, 3}, {on_gpu, x}, {}), "");
  EXPECT_NE(check_node(OpKind::Add, kFloat32, {2, 3}, {on_gpu, x}, {}), "");
}

} // namespace
} // namespace kiln::graph
