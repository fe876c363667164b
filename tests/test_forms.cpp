// Targets and kernel forms (codegen/target.h, codegen/form.h): a Target's text and
// equality; the form plan_form() records per kernel kind on a CPU and a CUDA target; the
// CPU GEMM tiling computed from the target (and nothing of it in a CUDA kernel); kernel
// names that stay the same across targets wherever the emitted code does. The CUDA
// emitter's reading of the form is tested with the shim in test_cuda.cpp (CudaForms).
#include <gtest/gtest.h>
#include <tbb/global_control.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "codegen/form.h"
#include "codegen/llvm_jit.h"
#include "codegen/lower.h"
#include "kiln/functional.h"
#include "kiln/kiln.h"
#include "runtime/executor.h"

using namespace kiln;
using codegen::KernelForm;
using codegen::Target;

namespace {

namespace F = nn::functional;

const Target kAvx512 = Target::cpu(512, true, 32);
const Target kAvx2 = Target::cpu(256, true, 16);
const Target kSm90 = Target::cuda(9, 0, 132, 2048, 49152);

Tensor filled(IntList shape, DType dt = kFloat32) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<float> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 7) - 3.0f;
  return from_vector(v, shape).to(dt);
}

/// The one kernel that computes `t` (from realized tensors) when planned for `target`.
codegen::KernelLaunch only_launch(const Tensor& t, const Target& target) {
  const codegen::Schedule s = codegen::schedule({t.node().get()}, {true, target});
  std::string names;
  for (const auto& l : s.launches) names += l.kernel.name + " ";
  EXPECT_EQ(s.launches.size(), 1u) << names;
  return s.launches.empty() ? codegen::KernelLaunch{} : s.launches[0];
}

KernelForm form_of(const Tensor& t, const Target& target) { return only_launch(t, target).kernel.form; }

TEST(Target, TextAndEquality) {
  EXPECT_EQ(kAvx512.str(), "cpu v512 fma r32");
  EXPECT_EQ(Target::baseline_cpu().str(), "cpu v128 r16");
  EXPECT_EQ(kSm90.str(), "cuda sm_90 sms 132 tpsm 2048 smem 49152");
  EXPECT_EQ(Target::cuda(8, 6).str(), "cuda sm_86 sms 0 tpsm 0 smem 0");
  EXPECT_EQ(kAvx512, Target::cpu(512, true, 32));
  EXPECT_NE(kAvx512, kAvx2);
  EXPECT_NE(kAvx2, Target::cpu(256, false, 16)); // FMA alone
  EXPECT_NE(kSm90, Target::cuda(9, 0, 132, 2048, 0));
  EXPECT_NE(Target::cuda(9, 0), Target::cuda(8, 0));
  EXPECT_NE(Target::baseline_cpu(), Target::cuda(9, 0));
  EXPECT_EQ(codegen::ScheduleOptions{}.target, Target::baseline_cpu());
}

TEST(Target, TheHostIsACpuTargetComputedOnce) {
  const Target host = codegen::host_cpu_target();
  EXPECT_EQ(host.kind, Target::Kind::CPU);
  EXPECT_TRUE(host.vector_bits == 128 || host.vector_bits == 256 || host.vector_bits == 512) << host.str();
  EXPECT_EQ(host.vector_registers, host.vector_bits == 512 ? 32 : 16) << host.str();
  EXPECT_EQ(host.cc_major, 0);
  EXPECT_EQ(codegen::host_cpu_target(), host);
  // the executor plans CPU kernels for it, with the threads they may run on now
  codegen::Target planned = runtime::schedule_options(kCPU, true).target;
  EXPECT_GE(planned.threads, 1);
  planned.threads = 0;
  EXPECT_EQ(planned, host);
  EXPECT_EQ(Target::cpu(512, true, 32, 2).str(), "cpu v512 fma r32 t2");
  EXPECT_FALSE(runtime::schedule_options(kCPU, false).fusion);
}

// Lowering memoizes each node's value by the addresses of its index expressions. A broadcast's
// temporary index (its 0) was freed after use, and the next slice's index (1 + i) could be
// allocated at the same address, so the slice read the broadcast's element: SyncBatchNorm's
// statistics combine slices of one gathered row like this, and were wrong under ThreadSanitizer's
// allocator (CI's TSan job runs this test). Counts, means and sums of squares as columns of one
// realized buffer, combined as Chan's formula does, against the values computed here.
TEST(Lowering, SlicesOfOneBufferReadTheirOwnElements) {
  const std::vector<double> row{12, 4.39813, 4.34126, 61.9427, 42.4297, 12, 6.68496, 2.68421, 66.8342, 86.5387};
  const Tensor all = from_vector<double>(row).reshape({2, 5});
  realize({all});
  const Tensor counts = all.slice(1, 0, 1), means = all.slice(1, 1, 3), m2 = all.slice(1, 3, 5);
  const Tensor count = counts.sum({0});
  const Tensor mean = (counts * means).sum({0}) / count;
  const Tensor shift = means - mean;
  const std::vector<double> got = ((m2 + counts * shift * shift).sum({0}) / count).to_vector<double>();
  for (int c = 0; c < 2; ++c) {
    const double n0 = row[0], n1 = row[5], m0 = row[1 + c], m1 = row[6 + c];
    const double mu = (n0 * m0 + n1 * m1) / (n0 + n1);
    const double want = (row[3 + c] + n0 * (m0 - mu) * (m0 - mu) + row[8 + c] + n1 * (m1 - mu) * (m1 - mu)) / (n0 + n1);
    EXPECT_NEAR(got[static_cast<size_t>(c)], want, 1e-12 * want) << "channel " << c;
  }
}

TEST(Forms, ElementwiseKernels) {
  const Tensor x = filled({8, 64}), y = filled({64});
  for (const Target& t : {kAvx512, kAvx2, kSm90}) {
    SCOPED_TRACE(t.str());
    const codegen::KernelLaunch l = only_launch(sigmoid(x * y + 1.0), t);
    EXPECT_EQ(l.kernel.form, KernelForm::Elementwise);
    EXPECT_FALSE(l.kernel.gemm.has_value());
    EXPECT_EQ(l.gemm_tasks, 0);
  }
}

TEST(Forms, RowKernels) {
  const Tensor x = filled({6, 40});
  for (const Target& t : {kAvx2, kSm90}) {
    SCOPED_TRACE(t.str());
    EXPECT_EQ(form_of(F::softmax(x, 1), t), KernelForm::Row);
    EXPECT_EQ(form_of(F::layer_norm(x, {40}), t), KernelForm::Row);
  }
}

TEST(Forms, ReductionKernels) {
  const Tensor x = filled({6, 40});
  // A float sum in lane order: a loop nest per row on the CPU, a group of threads per
  // row on CUDA (the row form splits its lanes).
  EXPECT_EQ(form_of(sum(x, {1}, true), kAvx2), KernelForm::Reduction);
  EXPECT_EQ(form_of(sum(x, {1}, true), kSm90), KernelForm::Row);
  // No lane-order sum (max, argmax, integer sums): one thread per row on CUDA too.
  for (const Target& t : {kAvx2, kSm90}) {
    SCOPED_TRACE(t.str());
    EXPECT_EQ(form_of(max(x, {1}, true), t), KernelForm::Reduction);
    EXPECT_EQ(form_of(argmax(x, 1, true), t), KernelForm::Reduction);
    EXPECT_EQ(form_of(sum(filled({6, 40}, kInt64), {1}, true), t), KernelForm::Reduction);
  }
}

/// The float bits of t, as i64 (f32 widened exactly), to compare sums bit for bit.
std::vector<double> bits_of(const Tensor& t) { return t.to(kFloat64).realize().to_vector<double>(); }

TEST(Forms, ColumnSumsTakeTheColumnsFormWithTheBitsOfTheSameSumByRows) {
  // A sum down the columns (a bias gradient) reads each row contiguously: the CPU sums a block
  // of columns at once (KernelForm::Columns). Each column keeps its own sum_lanes() order, so the
  // result is bitwise that of the same sums read through a transpose (the Reduction form).
  for (DType dt : {kFloat32, kFloat64}) {
    for (const IntList& shape : {IntList{37, 45}, IntList{5, 45}, IntList{40, 3}, IntList{3, 20, 33}}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " " + std::to_string(shape.size()) + "-d, " + std::to_string(shape[0]) + " rows");
      // values over many binades, so that any change of order shows in the bits
      const Tensor x = (randn(shape, 5, dt) * exp(randn(shape, 6, dt) * 4.0)).realize();
      const bool two = shape.size() == 2;
      const Tensor down = two ? x.sum({0}) : x.sum({0, 1});
      // the columns as rows of a buffer of their own: a sum along rows, the same values in the same order
      const Tensor xt = two ? x.t() : x.permute({2, 0, 1});
      const Tensor rows = from_vector(xt.to(kFloat64).to_vector<double>(), xt.shape()).to(dt).realize();
      const Tensor across = two ? rows.sum({1}) : rows.sum({1, 2});
      EXPECT_EQ(form_of(down, kAvx512), KernelForm::Columns);
      EXPECT_EQ(form_of(down, kAvx2), KernelForm::Columns);
      EXPECT_NE(form_of(down, kSm90), KernelForm::Columns); // a CPU loop structure
      EXPECT_EQ(form_of(across, kAvx512), KernelForm::Reduction);
      EXPECT_EQ(bits_of(down), bits_of(across));
    }
  }
  // Not a column sum: along rows, a max, or a read that does not move with the columns.
  const Tensor x = filled({6, 40});
  EXPECT_NE(form_of(x.sum({1}), kAvx512), KernelForm::Columns);
  EXPECT_NE(form_of(x.max({0}), kAvx512), KernelForm::Columns);
  EXPECT_NE(form_of(filled({40, 6}).t().sum({0}), kAvx512), KernelForm::Columns);
}

TEST(Forms, AGemmKernelsAssemblyDumpShowsItsMicrokernel) {
  // KILN_DEBUG=5's .s file of a GEMM kernel: the kernel, then the support routines it calls,
  // where its time goes (perf names them kiln_gemm_<dtype>_<mr>x<nr>_*)
  const codegen::KernelLaunch l = only_launch(matmul(filled({64, 48}), filled({48, 40})), codegen::host_cpu_target());
  ASSERT_EQ(l.kernel.form, KernelForm::Gemm);
  const std::string s = codegen::LlvmJit::instance().assembly(l.kernel);
  const size_t kernel = s.find(l.kernel.name + ":");
  const size_t support = s.find("# GEMM support routines");
  // a strided b: the microkernels that fetch the next b panel, and only those (the support
  // parts are modules of their own, compiled where a kernel calls them)
  const size_t micro = s.find("_micro_packed_fetching:");
  EXPECT_EQ(s.find("_micro_packed:"), std::string::npos);
  EXPECT_NE(s.find("_pack_ak:"), std::string::npos);
  ASSERT_NE(kernel, std::string::npos) << s.substr(0, 2000);
  ASSERT_NE(support, std::string::npos);
  ASSERT_NE(micro, std::string::npos);
  EXPECT_LT(kernel, support);
  EXPECT_LT(support, micro);
  EXPECT_NE(s.find("fmadd", micro), std::string::npos); // the register tile's fused multiply-adds
}

TEST(Forms, AGemmOverAStridedBFetchesItsNextBPanelDuringTheMicrokernels) {
  // A strided b (a row-major weight, or its transpose): the kernel lists the next panel's lines
  // and calls the microkernel that fetches them. An im2col b (gathered columns): the plain one.
  const Target host = codegen::host_cpu_target();
  for (const Tensor& product : {matmul(filled({64, 48}), filled({48, 96})), matmul(filled({64, 48}), filled({96, 48}).t())}) {
    const codegen::KernelLaunch l = only_launch(product, host);
    ASSERT_EQ(l.kernel.form, KernelForm::Gemm);
    const std::string ir = codegen::LlvmJit::instance().llvm_ir(l.kernel, /*optimized=*/false);
    EXPECT_NE(ir.find("_fetching("), std::string::npos) << l.kernel.name;
  }
  const Tensor x = filled({2, 3, 8, 8}), w = filled({4, 3, 3, 3});
  const codegen::Schedule s = codegen::schedule({F::conv2d(x, w).node().get()}, {true, host});
  bool gemm = false;
  for (const codegen::KernelLaunch& l : s.launches) {
    if (l.kernel.form != KernelForm::Gemm) continue;
    gemm = true;
    const std::string ir = codegen::LlvmJit::instance().llvm_ir(l.kernel, /*optimized=*/false);
    EXPECT_EQ(ir.find("_fetching("), std::string::npos) << l.kernel.name;
    EXPECT_NE(ir.find("_micro_"), std::string::npos) << l.kernel.name;
  }
  EXPECT_TRUE(gemm);
}

TEST(Forms, AGemmPacksARowMajorAWhoseRowsShareTheL1sSets) {
  // A row-major a whose rows are a multiple of 4 KiB apart (they share the L1's sets), against 16
  // b panels or more: each task packs its full a panels (the support routine *_pack_ak) instead
  // of reading the rows in place. The same fmuladds in the same order: the bits of the product
  // of the same values read in place (rows 1040 elements apart), and the product itself.
  const Target host = codegen::host_cpu_target();
  const int64_t M = 37, K = 517, N = 500; // a partial a panel, a k block past the last whole vector, a partial b panel
  // (N: one block of 16 b panels of 32 f32 or two of 16 f64 columns: see plan_cpu_gemm)
  for (DType dt : {kFloat32, kFloat64}) {
    SCOPED_TRACE(dtype_name(dt));
    const Tensor packed = randn({M, 1024}, 7, dt).realize().narrow(1, 0, K); // rows 4 or 8 KiB apart
    const Tensor in_place = concat({packed, zeros({M, 1040 - K}, dt)}, 1).realize().narrow(1, 0, K);
    const Tensor b = randn({K, N}, 8, dt).realize();
    const Tensor product = matmul(packed, b);
    const codegen::KernelLaunch l = only_launch(product, host);
    ASSERT_EQ(l.kernel.form, KernelForm::Gemm);
    EXPECT_NE(codegen::LlvmJit::instance().llvm_ir(l.kernel, /*optimized=*/false).find("_pack_ak("), std::string::npos);
    const std::vector<double> got = bits_of(product);
    EXPECT_EQ(got, bits_of(matmul(in_place, b)));
    const std::vector<double> av = packed.to(kFloat64).realize().to_vector<double>(), bv = b.to(kFloat64).to_vector<double>();
    double worst = 0;
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double want = 0, scale = 0;
        for (int64_t k = 0; k < K; ++k) {
          want += av[i * K + k] * bv[k * N + j];
          scale += std::abs(av[i * K + k] * bv[k * N + j]);
        }
        worst = std::max(worst, std::abs(got[i * N + j] - want) / scale);
      }
    EXPECT_LT(worst, K * (dt == kFloat32 ? 6e-8 : 1.2e-16));
  }
}

TEST(Forms, GemmKernelsOnTheCpuCarryTheTargetsTiling) {
  const Tensor a = filled({64, 48}), b = filled({48, 40});
  for (const Target& t : {kAvx512, kAvx2}) {
    SCOPED_TRACE(t.str());
    const codegen::KernelLaunch l = only_launch(matmul(a, b), t);
    EXPECT_EQ(l.kernel.form, KernelForm::Gemm);
    ASSERT_TRUE(l.kernel.gemm.has_value());
    const codegen::GemmTiling& g = *l.kernel.gemm;
    const codegen::GemmTiling want = codegen::cpu_gemm_tiling(t, DType::Float32);
    EXPECT_EQ(g.mr, want.mr);
    EXPECT_EQ(g.nr, want.nr);
    EXPECT_EQ(g.kc, want.kc);
    EXPECT_EQ(g.m_var, 0);
    EXPECT_EQ(g.n_var, 1);
    EXPECT_GE(l.gemm_tasks, 1);
    EXPECT_NE(codegen::print_kernel(l.kernel).find(" mr " + std::to_string(want.mr) + " nr " + std::to_string(want.nr)),
              std::string::npos);
  }
  // different tilings are different kernels
  EXPECT_NE(only_launch(matmul(a, b), kAvx512).kernel.name, only_launch(matmul(a, b), kAvx2).kernel.name);
}

TEST(Forms, TheCpuTilingComesFromTheTarget) {
  auto tile = [](const Target& t, DType dt) {
    const codegen::GemmTiling g = codegen::cpu_gemm_tiling(t, dt);
    return std::vector<int64_t>{g.mr, g.nr, g.mc, g.nc, g.kc};
  };
  EXPECT_EQ(tile(kAvx512, DType::Float32), (std::vector<int64_t>{12, 32, 384, 512, 256}));
  EXPECT_EQ(tile(kAvx512, DType::Float64), (std::vector<int64_t>{12, 16, 384, 256, 256}));
  EXPECT_EQ(tile(kAvx2, DType::Float32), (std::vector<int64_t>{6, 16, 384, 512, 256}));
  EXPECT_EQ(tile(Target::baseline_cpu(), DType::Float32), (std::vector<int64_t>{6, 8, 384, 512, 256}));
  // the tests' override still replaces it
  codegen::set_gemm_tiling_override(codegen::GemmTiling{-1, -1, 5, 16, 5, 48, 3});
  EXPECT_EQ(tile(kAvx512, DType::Float32), (std::vector<int64_t>{5, 16, 5, 48, 3}));
  const codegen::KernelLaunch l = only_launch(matmul(filled({64, 48}), filled({48, 40})), kAvx512);
  codegen::set_gemm_tiling_override(std::nullopt);
  ASSERT_TRUE(l.kernel.gemm.has_value());
  EXPECT_EQ(l.kernel.gemm->mr, 5);
  EXPECT_EQ(l.kernel.gemm->kc, 3);
}

/// The sizes of the blocks a CPU GEMM kernel cuts `extent` into (llvm_gemm.cpp: blocks of at
/// most `block`, equal in whole tiles, the last one shorter).
std::vector<int64_t> gemm_block_sizes(int64_t extent, int64_t tile, int64_t block) {
  const int64_t count = (extent + block - 1) / block;
  const int64_t per = ((extent + count - 1) / count + tile - 1) / tile * tile;
  std::vector<int64_t> sizes;
  for (int64_t at = 0; at < extent; at += per) sizes.push_back(std::min(per, extent - at));
  return sizes;
}

TEST(Forms, SmallProductsGetSmallerCpuBlocks) {
  // 384 x 512 f32 blocks would make one task of a 256 x 256 x 256 product (33 MFLOP): the plan
  // halves blocks until 4 tasks of at least 8 MFLOP, each time the rows' or the columns',
  // whichever gives tasks of more equal size while the blocks keep 4 register tiles: the 256
  // columns first (2 x 128, where 256 rows in tiles of 12 give 132 + 124), then the rows (2
  // blocks of 64 columns would be thinner than 4 tiles of 32).
  for (const Target& t : {kAvx512, Target::cpu(512, true, 32, 2)}) {
    SCOPED_TRACE(t.str());
    const codegen::KernelLaunch l = only_launch(matmul(filled({256, 256}), filled({256, 256})), t);
    ASSERT_TRUE(l.kernel.gemm.has_value());
    EXPECT_EQ(l.gemm_tasks, 4);
    EXPECT_EQ(gemm_block_sizes(256, 12, codegen::gemm_blocks(l.kernel, l.params).first), (std::vector<int64_t>{132, 124}));
    EXPECT_EQ(gemm_block_sizes(256, 32, codegen::gemm_blocks(l.kernel, l.params).second), (std::vector<int64_t>{128, 128}));
  }
  // The MLP's layer on a batch of 128 (103 MFLOP), on two threads: not 72 + 56 rows (one thread
  // idle a fifth of the time) but 4 equal blocks of 128 columns.
  const codegen::KernelLaunch mlp = only_launch(matmul(filled({128, 784}), filled({784, 512})), Target::cpu(512, true, 32, 2));
  ASSERT_TRUE(mlp.kernel.gemm.has_value());
  EXPECT_EQ(mlp.gemm_tasks, 4);
  EXPECT_EQ(gemm_block_sizes(128, 12, codegen::gemm_blocks(mlp.kernel, mlp.params).first), std::vector<int64_t>{128});
  EXPECT_EQ(gemm_block_sizes(512, 32, codegen::gemm_blocks(mlp.kernel, mlp.params).second), std::vector<int64_t>(4, 128));
  // Rows where they halve evenly and columns do not: 240 rows (2 x 120), 200 columns.
  const codegen::KernelLaunch rows = only_launch(matmul(filled({240, 256}), filled({256, 200})), Target::cpu(512, true, 32, 2));
  ASSERT_TRUE(rows.kernel.gemm.has_value());
  EXPECT_EQ(gemm_block_sizes(240, 12, codegen::gemm_blocks(rows.kernel, rows.params).first).front(), 120);
  // for one thread, one task with the target's blocks
  const codegen::KernelLaunch one =
      only_launch(matmul(filled({256, 256}), filled({256, 256})), Target::cpu(512, true, 32, 1));
  EXPECT_EQ(one.gemm_tasks, 1);
  EXPECT_EQ(codegen::gemm_blocks(one.kernel, one.params), (std::pair<int64_t, int64_t>{384, 512}));
  // The blocks are the launch's parameters, not the kernel's text: one kernel for both plans,
  // whose scratch holds the target's largest blocks.
  EXPECT_EQ(one.kernel.name, only_launch(matmul(filled({256, 256}), filled({256, 256})), Target::cpu(512, true, 32, 2)).kernel.name);
  EXPECT_EQ(one.kernel.gemm->mc, 384);
  EXPECT_EQ(one.kernel.gemm->nc, 512);
  // the same bits either way: only the blocks differ, not any element's order of k (the
  // executor's plans: one task on one thread, 4 on two; needs two CPUs)
  if (tbb::this_task_arena::max_concurrency() < 2) GTEST_SKIP() << "one CPU: no two-thread plan to compare";
  const Tensor a = filled({256, 256}) * 0.37, b = filled({256, 256}) * 1.3;
  realize({a, b});
  std::vector<float> by_threads[2];
  for (int threads : {1, 2}) {
    tbb::global_control limit(tbb::global_control::max_allowed_parallelism, static_cast<size_t>(threads));
    EXPECT_EQ(runtime::schedule_options(kCPU, true).target.threads, threads);
    by_threads[threads - 1] = matmul(a, b).to_vector<float>();
  }
  EXPECT_EQ(by_threads[0], by_threads[1]);
}

TEST(Forms, AGemmKernelForCudaCarriesNoCpuTiling) {
  const Tensor a = filled({64, 48}), b = filled({48, 40}), bias = filled({40});
  const codegen::KernelLaunch l = only_launch(relu(matmul(a, b) + bias), kSm90);
  EXPECT_EQ(l.kernel.form, KernelForm::Gemm);
  ASSERT_TRUE(l.kernel.gemm.has_value());
  const codegen::GemmTiling& g = *l.kernel.gemm;
  EXPECT_EQ(g.m_var, 0);
  EXPECT_EQ(g.n_var, 1);
  EXPECT_EQ(g.mr + g.nr + g.mc + g.nc + g.kc, 0);
  EXPECT_EQ(l.gemm_tasks, 0);
  EXPECT_EQ(codegen::gemm_scratch_bytes(l.kernel), 0);
  const std::string text = codegen::print_kernel(l.kernel);
  EXPECT_NE(text.find("  gemm m_var 0 n_var 1\n"), std::string::npos) << text;
  EXPECT_EQ(text.find(" mr "), std::string::npos) << text;
  // the same on every CPU tiling: overriding it changes nothing
  codegen::set_gemm_tiling_override(codegen::GemmTiling{-1, -1, 5, 16, 5, 48, 3});
  const std::string overridden = only_launch(relu(matmul(a, b) + bias), kSm90).kernel.name;
  codegen::set_gemm_tiling_override(std::nullopt);
  EXPECT_EQ(overridden, l.kernel.name);
  EXPECT_NE(l.kernel.name, only_launch(relu(matmul(a, b) + bias), kAvx2).kernel.name);
  EXPECT_EQ(l.kernel.name.rfind("k_gemm_add_relu_f32_", 0), 0u) << l.kernel.name;
}

TEST(Forms, MatrixVectorProductsStayOutOfTheGemmForm) {
  // Too few rows for the GEMM form on any target: a reduction (the dot products).
  const Tensor a = filled({2, 48}), b = filled({48, 40});
  for (const Target& t : {kAvx2, kSm90}) {
    SCOPED_TRACE(t.str());
    const codegen::KernelLaunch l = only_launch(matmul(a, b), t);
    EXPECT_EQ(l.kernel.form, KernelForm::Reduction);
    EXPECT_FALSE(l.kernel.gemm.has_value());
    EXPECT_EQ(l.kernel.name.rfind("k_gemm_", 0), 0u) << l.kernel.name; // still named a matmul
  }
}

TEST(Forms, NamesStayTheSameAcrossTargetsWhereTheCodeDoes) {
  // Only the GEMM form (and its CPU tiling) is in the kernel's text: other kernels have one
  // name on every target, so the caches keep them.
  const Tensor x = filled({6, 40});
  for (const Tensor& t : {x * 2.0 + 1.0, F::softmax(x, 1), sum(x, {1}, true), argmax(x, 1, true)}) {
    const std::string cpu = only_launch(t, kAvx512).kernel.name;
    EXPECT_EQ(cpu, only_launch(t, kAvx2).kernel.name);
    EXPECT_EQ(cpu, only_launch(t, kSm90).kernel.name);
  }
}

TEST(Forms, PlanFormReadsTheRecordedMatmul) {
  // plan_form() decides from Kernel::matmul (what lowering recorded), not from the IR's
  // look: the same GEMM kernel without it is a reduction on either target.
  codegen::KernelLaunch l = only_launch(matmul(filled({64, 48}), filled({48, 40})), kSm90);
  ASSERT_TRUE(l.kernel.matmul.has_value());
  codegen::Kernel k = l.kernel;
  k.matmul.reset();
  EXPECT_EQ(codegen::plan_form(k, l.params, kSm90).form, KernelForm::Reduction);
  EXPECT_EQ(codegen::plan_form(k, l.params, kAvx2).form, KernelForm::Reduction);
  const codegen::FormPlan cpu = codegen::plan_form(l.kernel, l.params, kAvx2);
  EXPECT_EQ(cpu.form, KernelForm::Gemm);
  EXPECT_EQ(cpu.gemm_tasks, 1);
  ASSERT_TRUE(cpu.gemm.has_value());
  EXPECT_EQ(cpu.gemm->mr, 6);
}

TEST(Forms, FormNames) {
  EXPECT_STREQ(codegen::form_name(KernelForm::Elementwise), "elementwise");
  EXPECT_STREQ(codegen::form_name(KernelForm::Reduction), "reduction");
  EXPECT_STREQ(codegen::form_name(KernelForm::Row), "row");
  EXPECT_STREQ(codegen::form_name(KernelForm::Gemm), "gemm");
}

} // namespace
