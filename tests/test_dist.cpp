// kiln::dist, nn::DistributedDataParallel and data::DistributedSampler (issue 19).
//
// Every test runs on every rank. ctest runs this binary on one process (the collectives are
// copies there; tests that need more ranks skip, saying so), and, where mpirun exists, under
// `mpirun -np 2` and `-np 3` (dist_mpi_2, dist_mpi_3), and the failure cases (DistFailure.*)
// alone under `mpirun -np 2` with KILN_DIST_TIMEOUT=1 (see tests/CMakeLists.txt).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <set>
#include <thread>
#include <dlfcn.h>
#include <unistd.h>

#include "kiln/kiln.h"
#include "runtime/executor.h"
#include "runtime/observe.h"
#include "tests/error_of.h"

using namespace kiln;
using kiln::test::error_of;
namespace F = kiln::nn::functional;

namespace {

#define NEED_RANKS(n)                                                                                               \
  if (dist::world_size() < (n))                                                                                     \
  GTEST_SKIP() << "needs " << (n) << " ranks, this is " << dist::world_size()                                       \
               << ": ctest runs these under mpirun (dist_mpi_2, dist_mpi_3) where mpirun is installed"

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Collectives on CUDA tensors staged through host memory while it lives (options().nccl off).
struct HostStaging {
  bool was = options().nccl;
  HostStaging() { options().nccl = false; }
  ~HostStaging() { options().nccl = was; }
};

// A rank-dependent f32 tensor whose sum depends on the order of addition.
std::vector<float> ragged(int rank, size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    const float big = (i + static_cast<size_t>(rank)) % 2 ? 1e8f : -1e8f;
    v[i] = rank == 0 ? big : static_cast<float>(rank) * 0.1f + static_cast<float>(i) * 1e-3f + (rank % 2 ? -big : 3.f);
  }
  return v;
}

// ---------------------------------------------------------------- collectives

TEST(Dist, GroupFromTheEnvironment) {
  const int w = dist::world_size(), r = dist::rank();
  EXPECT_GE(w, 1);
  EXPECT_GE(r, 0);
  EXPECT_LT(r, w);
  if (const char* s = std::getenv("OMPI_COMM_WORLD_SIZE")) {
    EXPECT_EQ(w, std::atoi(s));
    EXPECT_EQ(r, std::atoi(std::getenv("OMPI_COMM_WORLD_RANK")));
  }
  EXPECT_EQ(dist::backend(), w > 1 ? "mpi (libmpi.so.40)" : "single process");
  dist::barrier();
}

// What a child process of this test binary prints when the environment names a group it cannot join.
std::string child_output(const std::string& env) {
  const std::string cmd = "env -u OMPI_COMM_WORLD_SIZE -u OMPI_COMM_WORLD_RANK -u RANK -u WORLD_SIZE " + env +
                          " /proc/" + std::to_string(getpid()) + "/exe --gtest_filter=Dist.GroupFromTheEnvironment 2>&1";
  std::string out;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char buf[4096];
    for (size_t got; (got = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, got);
    pclose(p);
  }
  return out;
}

TEST(Dist, EnvironmentErrorsNameTheVariables) {
  if (std::getenv("OMPI_COMM_WORLD_SIZE")) GTEST_SKIP() << "runs children without a launcher: once, on one process";
  const std::string no_launcher = child_output("WORLD_SIZE=2");
  EXPECT_TRUE(contains(no_launcher, "world_size: cannot join the process group: WORLD_SIZE=2 but this process was not "
                                    "started by Open MPI's mpirun, kiln's launcher: run `mpirun -np 2 <program>`"))
      << no_launcher;
  const std::string disagree = child_output("RANK=1");
  EXPECT_TRUE(contains(disagree, "RANK/WORLD_SIZE (1/1) disagree with the launcher's rank 0 of 1")) << disagree;
  const std::string bad = child_output("WORLD_SIZE=two");
  EXPECT_TRUE(contains(bad, "not non-negative integers: WORLD_SIZE='two'")) << bad;
  const std::string huge = child_output("WORLD_SIZE=99999999999999999999"); // strtol's LONG_MAX was taken for it
  EXPECT_TRUE(contains(huge, "not non-negative integers: WORLD_SIZE='99999999999999999999'")) << huge;
  EXPECT_TRUE(contains(child_output("RANK=0 WORLD_SIZE=1"), "[  PASSED  ] 1 test")); // consistent: one process
  // a launcher whose MPI library cannot be loaded, or is not Open MPI's
  const std::string missing = child_output("OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_RANK=0 KILN_MPI_LIBRARY=/nonexistent/libmpi.so.40");
  EXPECT_TRUE(contains(missing, "started by mpirun, but Open MPI's /nonexistent/libmpi.so.40 cannot be loaded")) << missing;
  const std::string other = child_output("OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_RANK=0 KILN_MPI_LIBRARY=libz.so.1");
  EXPECT_TRUE(contains(other, "libz.so.1 lacks MPI_Initialized MPI_Init_thread")) << other;
}

TEST(Dist, AllReduceSumMeanMax) {
  const int w = dist::world_size(), r = dist::rank();
  const Tensor x = from_vector<float>({1.f * r, -2.f * r, 0.5f, 10.f - r, 7.f, 1.f}, {2, 3});
  std::vector<float> sum(6, 0.f), mx(6, -1e30f);
  for (int k = 0; k < w; ++k) {
    const std::vector<float> v{1.f * k, -2.f * k, 0.5f, 10.f - k, 7.f, 1.f};
    for (size_t i = 0; i < 6; ++i) sum[i] += v[i], mx[i] = std::max(mx[i], v[i]);
  }
  const Tensor s = dist::all_reduce(x);
  EXPECT_EQ(s.shape(), (IntList{2, 3}));
  EXPECT_EQ(s.to_vector<float>(), sum);
  EXPECT_EQ(dist::all_reduce(x, dist::ReduceOp::Max).to_vector<float>(), mx);
  std::vector<float> mean = sum;
  for (float& m : mean) m /= static_cast<float>(w);
  EXPECT_EQ(dist::all_reduce(x, dist::ReduceOp::Mean).to_vector<float>(), mean);
  // integers and f64
  EXPECT_EQ(dist::all_reduce(from_vector<int64_t>({r, 1})).to_vector<int64_t>(),
            (std::vector<int64_t>{w * (w - 1) / 2, w}));
  EXPECT_EQ(dist::all_reduce(from_vector<double>({0.25 * r}), dist::ReduceOp::Max).item<double>(), 0.25 * (w - 1));
  // a lazy input is realized first; the input is left as it was
  const Tensor lazy = ones({5}) * static_cast<float>(r + 1);
  EXPECT_EQ(dist::all_reduce(lazy).to_vector<float>(), std::vector<float>(5, w * (w + 1) / 2.f));
  EXPECT_EQ(lazy.to_vector<float>(), std::vector<float>(5, r + 1.f));
}

TEST(Dist, SumIsTakenInRankOrder) {
  // Bitwise the host's ((x0 + x1) + x2) ...: the order matters for these values.
  const int w = dist::world_size(), r = dist::rank();
  const size_t n = 1001; // not a multiple of 2 or 3: blocks of unequal size
  std::vector<float> expect = ragged(0, n);
  for (int k = 1; k < w; ++k) {
    const std::vector<float> v = ragged(k, n);
    for (size_t i = 0; i < n; ++i) expect[i] += v[i];
  }
  const Tensor x = from_vector<float>(ragged(r, n));
  for (int repeat = 0; repeat < 3; ++repeat) {
    const std::vector<float> got = dist::all_reduce(x).to_vector<float>();
    ASSERT_EQ(std::memcmp(got.data(), expect.data(), n * sizeof(float)), 0) << "repeat " << repeat;
  }
  // grouping into one message (DDP's buckets) does not change a bit
  const Tensor a = x.slice(0, 0, 400), b = x.slice(0, 400, n);
  const std::vector<Tensor> both = dist::all_reduce_coalesced({a, b});
  EXPECT_EQ(both[0].to_vector<float>(), dist::all_reduce(a).to_vector<float>());
  EXPECT_EQ(both[1].to_vector<float>(), std::vector<float>(expect.begin() + 400, expect.end()));
}

TEST(Dist, BroadcastAllGatherReduceScatter) {
  const int w = dist::world_size(), r = dist::rank();
  const int root = w - 1;
  const Tensor mine = from_vector<int32_t>({r, 10 * r, 100}, {3});
  EXPECT_EQ(dist::broadcast(mine, root).to_vector<int32_t>(), (std::vector<int32_t>{root, 10 * root, 100}));
  const Tensor g = dist::all_gather(mine);
  EXPECT_EQ(g.shape(), (IntList{w, 3}));
  std::vector<int32_t> expect;
  for (int k = 0; k < w; ++k) expect.insert(expect.end(), {k, 10 * k, 100});
  EXPECT_EQ(g.to_vector<int32_t>(), expect);
  // bool travels too (broadcast, all_gather)
  EXPECT_EQ(dist::broadcast(from_vector<bool>({r == 0, true})).to_vector<bool>(), (std::vector<bool>{true, true}));
  // reduce_scatter: rows [2r, 2r+2) of the sum
  std::vector<double> rows(static_cast<size_t>(2 * w * 2));
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<double>(i) + r;
  const Tensor rs = dist::reduce_scatter(from_vector<double>(rows, {2 * w, 2}));
  EXPECT_EQ(rs.shape(), (IntList{2, 2}));
  std::vector<double> want;
  for (size_t i = static_cast<size_t>(4 * r); i < static_cast<size_t>(4 * r + 4); ++i)
    want.push_back(static_cast<double>(i) * w + w * (w - 1) / 2.0);
  EXPECT_EQ(rs.to_vector<double>(), want);
}

TEST(Dist, EmptyAndZeroDimTensors) {
  const int w = dist::world_size();
  EXPECT_EQ(dist::all_reduce(zeros({0, 3})).shape(), (IntList{0, 3}));
  EXPECT_EQ(dist::all_reduce(scalar_tensor(2.0)).item<float>(), 2.f * w);
  EXPECT_EQ(dist::all_gather(zeros({0})).shape(), (IntList{w, 0}));
  EXPECT_EQ(dist::reduce_scatter(zeros({2 * w, 0})).shape(), (IntList{2, 0}));
  EXPECT_EQ(dist::reduce_scatter(zeros({0, 3})).shape(), (IntList{0, 3}));
}

// GPU tensors staged through host memory (KILN_NCCL=0, or where NCCL cannot be used): against
// kiln's emulator of the CUDA driver here (tests/cuda_emu), against a GPU with KILN_CUDA_DRIVER=libcuda.so.1.
TEST(Dist, GpuTensorsStageThroughHost) {
  setenv("KILN_CUDA_DRIVER", KILN_CUDA_EMU, 0);
  if (cuda_devices().empty()) GTEST_SKIP() << "no CUDA device: " << cuda_unavailable_reason();
  const HostStaging staged; // KILN_NCCL=0 (the Nccl tests below cover NCCL)
  const Device gpu{Device::Kind::CUDA, 0};
  const int w = dist::world_size(), r = dist::rank();
  const Tensor x = from_vector<float>({1.f + r, 2.f * r}).to(gpu);
  const Tensor s = dist::all_reduce(x);
  EXPECT_EQ(s.device(), gpu);
  EXPECT_EQ(s.to(kCPU).to_vector<float>(), (std::vector<float>{w + w * (w - 1) / 2.f, 1.f * w * (w - 1)}));
  const Tensor b = dist::broadcast(x, w - 1);
  EXPECT_EQ(b.device(), gpu);
  EXPECT_EQ(b.to(kCPU).to_vector<float>(), (std::vector<float>{1.f * w, 2.f * (w - 1)}));
  const Tensor g = dist::all_gather(x);
  EXPECT_EQ(g.device(), gpu);
  EXPECT_EQ(g.shape(), (IntList{w, 2}));
  // a result computed on the GPU from the reduced value
  EXPECT_EQ((s * 2.f).sum().to(kCPU).item<float>(), 2.f * (w + w * (w - 1) / 2.f + 1.f * w * (w - 1)));
}

TEST(Dist, UserErrors) {
  EXPECT_TRUE(contains(error_of([] { dist::all_reduce(from_vector<int64_t>({1}), dist::ReduceOp::Mean); }),
                       "all_reduce: mean needs a floating dtype"));
  EXPECT_TRUE(contains(error_of([] { dist::all_reduce(from_vector<bool>({true})); }), "cannot reduce bool"));
  EXPECT_TRUE(contains(error_of([] { dist::all_reduce(Tensor()); }), "undefined"));
  const std::string root = error_of([] { dist::broadcast(ones({2}), -1); });
  EXPECT_TRUE(contains(root, "broadcast: root -1 is not a rank")) << root;
  EXPECT_TRUE(contains(root, "test_dist.cpp")) << root; // the user's line
  EXPECT_TRUE(contains(error_of([] { dist::reduce_scatter(scalar_tensor(1.0)); }), "dim 0 must be a multiple"));
  EXPECT_TRUE(contains(error_of([] { dist::all_reduce_coalesced({ones({2}), ones({2}, kFloat64)}); }),
                       "need one dtype, got f32[2] and f64[2]"));
  // not inside a compile() trace
  auto f = compile([](const std::vector<Tensor>& a) { return std::vector<Tensor>{dist::all_reduce(a[0])}; });
  const std::string traced = error_of([&] { f({ones({2})}); });
  EXPECT_TRUE(contains(traced, "all_reduce: cannot run inside a compile() trace")) << traced;
  dist::barrier(); // the group is still in step
}

TEST(Dist, ShapeMismatchNamesBothShapes) {
  NEED_RANKS(2);
  const int r = dist::rank();
  const Tensor x = r == 1 ? ones({3, 2}) : ones({2, 3});
  const std::string e = error_of([&] { dist::all_reduce(x); });
  EXPECT_TRUE(contains(e, "all_reduce: the ranks disagree")) << e;
  EXPECT_TRUE(contains(e, "all_reduce(sum) of f32[2,3]")) << e;
  EXPECT_TRUE(contains(e, "all_reduce(sum) of f32[3,2]")) << e;
  // a different collective, or dtype, is caught the same way; the group stays usable
  const std::string kind = error_of([&] {
    if (r == 0) dist::broadcast(ones({2}));
    else dist::all_gather(ones({2}));
  });
  EXPECT_TRUE(contains(kind, "broadcast from rank 0 of f32[2]") || contains(kind, "all_gather of f32[2]")) << kind;
  EXPECT_TRUE(contains(kind, "the ranks disagree")) << kind;
  EXPECT_EQ(dist::all_reduce(ones({1})).item<float>(), static_cast<float>(dist::world_size()));
}

TEST(Dist, StatsCountCollectives) {
  dist::reset_stats();
  dist::all_reduce(ones({256}));
  const dist::Stats s = dist::stats();
  EXPECT_EQ(s.collectives, 1);
  const int w = dist::world_size(), r = dist::rank();
  // each rank sends the other ranks' blocks of its 1 KiB, then its own reduced block to each
  const int64_t own = (256 * (r + 1) / w - 256 * r / w) * 4;
  EXPECT_EQ(s.bytes_sent, (1024 - own) + own * (w - 1)) << "world " << w;
  EXPECT_GE(s.seconds, 0.0);
}

TEST(Dist, CollectivesAreSpansOfTheTrace) {
  const std::string path = ::testing::TempDir() + "kiln_dist_trace_" + std::to_string(dist::rank()) + ".json";
  profile::start_trace(path);
  dist::all_reduce(ones({64}));
  dist::broadcast(ones({2}));
  profile::stop_trace();
  std::ifstream f(path);
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_TRUE(contains(text, R"("name":"all_reduce","cat":"dist")")) << text.substr(0, 2000);
  EXPECT_TRUE(contains(text, R"("name":"broadcast","cat":"dist")"));
  std::remove(path.c_str());
}

// ---------------------------------------------------------------- sampler

TEST(DistributedSampler, ShardsAreDisjointAndCoverTheData) {
  for (int world : {1, 2, 3, 4})
    for (int64_t n : {12, 13, 2}) {
      std::multiset<int64_t> seen;
      for (int r = 0; r < world; ++r) {
        data::DistributedSampler s(n, r, world, /*seed=*/7);
        s.set_epoch(3);
        const auto idx = s.indices();
        EXPECT_EQ(static_cast<int64_t>(idx.size()), s.num_samples());
        seen.insert(idx.begin(), idx.end());
      }
      const int64_t padded = (n + world - 1) / world * world;
      EXPECT_EQ(static_cast<int64_t>(seen.size()), padded);
      for (int64_t i = 0; i < n; ++i) EXPECT_GE(seen.count(i), 1u) << "sample " << i << " of " << n;
      if (n % world == 0) { // no overlap when nothing is padded
        for (int64_t i = 0; i < n; ++i) EXPECT_EQ(seen.count(i), 1u);
      }
    }
}

TEST(DistributedSampler, ReproducibleShufflePerEpoch) {
  data::DistributedSampler a(100, 1, 3, 5), b(100, 1, 3, 5);
  EXPECT_EQ(a.indices(), b.indices());
  const auto e0 = a.indices();
  a.set_epoch(1);
  EXPECT_NE(a.indices(), e0);
  // rank r's positions in the single process's order (shuffled_indices(seed + epoch))
  const auto order = data::shuffled_indices(100, 5 + 1);
  const auto mine = a.indices();
  for (size_t k = 0; k < mine.size(); ++k) EXPECT_EQ(mine[k], order[(1 + 3 * k) % 100]);
  // drop_last: equal shards without padding; no shuffle: in order
  data::DistributedSampler d(10, 2, 3, 0, /*shuffle=*/false, /*drop_last=*/true);
  EXPECT_EQ(d.indices(), (std::vector<int64_t>{2, 5, 8}));
}

TEST(DistributedSampler, Errors) {
  EXPECT_TRUE(contains(error_of([] { data::DistributedSampler(10, 3, 3); }), "rank 3 is not in a world of 3"));
  EXPECT_TRUE(contains(error_of([] { data::DistributedSampler(-1, 0, 1); }), "must not be negative"));
  EXPECT_TRUE(data::DistributedSampler(0, 1, 2).indices().empty()); // an empty data set: empty shards
  data::Dataset ds(std::vector<float>(8, 1.f), {2}, {0, 1, 0, 1});
  data::DistributedSampler s(4, 1, 2, 0, false);
  const data::Loader l = ds.batches(s, 1);
  ASSERT_EQ(l.size(), 2);
  EXPECT_EQ(l[0].y.to_vector<int64_t>(), (std::vector<int64_t>{1}));
  data::DistributedSampler big(5, 0, 1, 0, false);
  EXPECT_TRUE(contains(error_of([&] { ds.batches(big, 2); }), "index 4 out of range for a dataset of 4 samples"));
}

// ---------------------------------------------------------------- DistributedDataParallel

std::shared_ptr<nn::Sequential> small_mlp(uint64_t seed) {
  nn::manual_seed(seed);
  auto m = std::make_shared<nn::Sequential>(nn::Linear(6, 5), nn::Tanh(), nn::Linear(5, 3));
  m->to(kFloat64);
  return m;
}

// A fixed data set of n samples (the same on every rank).
std::pair<Tensor, Tensor> samples(int64_t n) {
  std::vector<int64_t> y(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) y[static_cast<size_t>(i)] = (i * 7) % 3;
  return {randn({n, 6}, 11, kFloat64), from_vector<int64_t>(y)};
}

// Rows `rows` of a 1-d or 2-d x, copied on the host.
template <class T> Tensor rows_of(const Tensor& x, const std::vector<int64_t>& rows) {
  const std::vector<T> all = x.to_vector<T>();
  const int64_t width = x.dim() == 1 ? 1 : x.size(1);
  std::vector<T> out;
  for (int64_t i : rows) out.insert(out.end(), all.begin() + i * width, all.begin() + (i + 1) * width);
  IntList shape = x.shape();
  shape[0] = static_cast<int64_t>(rows.size());
  return from_vector<T>(out, shape);
}
Tensor x_rows(const Tensor& x, const std::vector<int64_t>& rows) { return rows_of<double>(x, rows); }
Tensor y_rows(const Tensor& y, const std::vector<int64_t>& rows) { return rows_of<int64_t>(y, rows); }
std::vector<int64_t> range(int64_t begin, int64_t end) {
  std::vector<int64_t> r;
  for (int64_t i = begin; i < end; ++i) r.push_back(i);
  return r;
}

TEST(DDP, BroadcastsRankZerosStateAtConstruction) {
  const int r = dist::rank();
  auto m = small_mlp(100 + static_cast<uint64_t>(r)); // a different init on every rank
  nn::DistributedDataParallel ddp(m);
  const Tensor w = m->parameters()[0];
  const Tensor all = dist::all_gather(w);
  const Tensor first = small_mlp(100)->parameters()[0];
  for (int k = 0; k < dist::world_size(); ++k)
    EXPECT_EQ(all.slice(0, k, k + 1).squeeze(0).to_vector<double>(), first.to_vector<double>()) << "rank " << k;
  EXPECT_EQ(ddp.named_parameters()[0].first, "module.0.weight"); // PyTorch's names
  EXPECT_EQ(ddp.parameters().size(), 4u);
}

TEST(DDP, BucketsInReverseOrderUpToTheCap) {
  auto m = small_mlp(1);
  // sizes in bytes, registration order: 240, 40, 120, 24
  nn::DistributedDataParallel one(m);
  EXPECT_EQ(one.buckets(), (std::vector<std::vector<size_t>>{{3, 2, 1, 0}}));
  nn::DistributedDataParallel small(m, {.bucket_bytes = 160});
  EXPECT_EQ(small.buckets(), (std::vector<std::vector<size_t>>{{3, 2}, {1}, {0}}));
  EXPECT_TRUE(contains(error_of([&] { nn::DistributedDataParallel(m, {.bucket_bytes = 0}); }), "bucket_bytes must be positive"));
}

// N ranks with batch B (their shards of one global batch) against one process with batch N*B:
// the gradients and, after Adam steps, the parameters agree to f64 rounding (the sums are
// grouped differently: per rank, then across ranks).
TEST(DDP, MatchesOneProcessWithTheWholeBatch) {
  const int w = dist::world_size(), r = dist::rank();
  const int64_t B = 4, steps = 3;
  const auto [x, y] = samples(w * B * steps);
  auto ref = small_mlp(3);
  auto m = small_mlp(3);
  nn::DistributedDataParallel ddp(m, {.bucket_bytes = 100}); // several buckets
  optim::Adam opt_ref(ref->parameters(), {.lr = 1e-2});
  optim::Adam opt(ddp.parameters(), {.lr = 1e-2});
  data::DistributedSampler sampler(w * B * steps, r, w, 0, /*shuffle=*/false);
  const std::vector<int64_t> shard = sampler.indices(); // positions r, r + w, ...
  for (int64_t s = 0; s < steps; ++s) {
    // global batch s is samples [s*w*B, (s+1)*w*B); this rank's part of it is its shard's batch s
    const std::vector<int64_t> mine(shard.begin() + s * B, shard.begin() + (s + 1) * B);
    opt.zero_grad();
    F::cross_entropy(ddp(x_rows(x, mine)), y_rows(y, mine)).backward();
    ddp.sync_gradients();
    opt_ref.zero_grad();
    const std::vector<int64_t> global = range(s * w * B, (s + 1) * w * B);
    F::cross_entropy((*ref)(x_rows(x, global)), y_rows(y, global)).backward();
    for (size_t i = 0; i < 4; ++i) {
      const auto g = ddp.parameters()[i].grad().to_vector<double>(), gr = ref->parameters()[i].grad().to_vector<double>();
      for (size_t k = 0; k < g.size(); ++k) ASSERT_NEAR(g[k], gr[k], 1e-14) << "step " << s << " param " << i;
    }
    opt.step();
    opt_ref.step();
  }
  for (size_t i = 0; i < 4; ++i) {
    const auto p = ddp.parameters()[i].to_vector<double>(), pr = ref->parameters()[i].to_vector<double>();
    for (size_t k = 0; k < p.size(); ++k) EXPECT_NEAR(p[k], pr[k], 1e-12) << "param " << i;
  }
  // the replicas are bitwise equal on every rank
  for (const Tensor& p : ddp.parameters()) {
    const Tensor all = dist::all_gather(p);
    for (int k = 1; k < w; ++k)
      EXPECT_EQ(all.slice(0, k, k + 1).to_vector<double>(), all.slice(0, 0, 1).to_vector<double>());
  }
}

// Compiled forward+backward, then a compiled function of sync_gradients() and the optimizer's
// step (its gradients are inputs of the trace: the stage reads them as they are), give the bits
// of eager steps.
TEST(DDP, CompiledStepsMatchEagerSteps) {
  const int w = dist::world_size(), r = dist::rank();
  const int64_t B = 4, steps = 3;
  const auto [x, y] = samples(w * B * steps);
  auto run = [&](bool compiled) {
    auto m = small_mlp(9);
    nn::DistributedDataParallel ddp(m);
    optim::Adam opt(ddp.parameters(), {.lr = 1e-2});
    CompiledFunction fwd_bwd([&](const std::vector<Tensor>& a) {
      opt.zero_grad();
      const Tensor loss = F::cross_entropy(ddp(a[0]), a[1]);
      loss.backward();
      return std::vector<Tensor>{loss.detach()};
    });
    CompiledFunction update([&](const std::vector<Tensor>&) { // the averaging inside, before the step
      ddp.sync_gradients();
      opt.step();
      return std::vector<Tensor>{};
    });
    std::vector<double> losses;
    for (int64_t s = 0; s < steps; ++s) {
      const int64_t at = (s * w + r) * B;
      const Tensor xb = x_rows(x, range(at, at + B)), yb = y_rows(y, range(at, at + B));
      if (compiled) {
        losses.push_back(fwd_bwd({xb, yb})[0].item<double>());
        update({});
      } else {
        opt.zero_grad();
        const Tensor loss = F::cross_entropy(ddp(xb), yb);
        loss.backward();
        ddp.sync_gradients();
        opt.step();
        losses.push_back(loss.item<double>());
      }
    }
    std::vector<double> flat;
    for (const Tensor& p : ddp.parameters())
      for (double v : p.to_vector<double>()) flat.push_back(v);
    flat.insert(flat.end(), losses.begin(), losses.end());
    return flat;
  };
  EXPECT_EQ(run(true), run(false));
}

// One compiled function for the whole step (forward, backward, sync_gradients, Adam's step):
// the all-reduce is part of every replay, between the plan of the backward pass and the
// update's, and the bits are those of eager steps.
TEST(DDP, AllReduceInsideACompiledStep) {
  const int w = dist::world_size(), r = dist::rank();
  const int64_t B = 4, steps = 4;
  const auto [x, y] = samples(w * B * steps);
  auto run = [&](bool compiled) {
    auto m = small_mlp(21);
    nn::DistributedDataParallel ddp(m, {.bucket_bytes = 100});
    optim::Adam opt(ddp.parameters(), {.lr = 1e-2});
    auto step = [&](const Tensor& xb, const Tensor& yb) {
      opt.zero_grad();
      const Tensor loss = F::cross_entropy(ddp(xb), yb);
      loss.backward();
      ddp.sync_gradients();
      opt.step();
      return loss.detach();
    };
    CompiledFunction f([&](const std::vector<Tensor>& a) { return std::vector<Tensor>{step(a[0], a[1])}; });
    std::vector<double> out;
    const size_t in_place = runtime::executor_stats().in_place;
    for (int64_t s = 0; s < steps; ++s) {
      const int64_t at = (s * w + r) * B;
      const Tensor xb = x_rows(x, range(at, at + B)), yb = y_rows(y, range(at, at + B));
      out.push_back((compiled ? f({xb, yb})[0] : step(xb, yb)).item<double>());
    }
    if (compiled) {
      EXPECT_EQ(f.num_traces(), 2u); // the first step starts without gradients or Adam slots; then replays
      EXPECT_GT(f.num_kernels(), 0u);
      // the update, in the plan after the last all-reduce, writes parameters and Adam's slots in place
      EXPECT_GT(runtime::executor_stats().in_place, in_place);
    }
    for (const Tensor& p : ddp.parameters())
      for (double v : p.to_vector<double>()) out.push_back(v);
    for (const Tensor& p : ddp.parameters())
      for (double v : p.grad().to_vector<double>()) out.push_back(v);
    return out;
  };
  const std::vector<double> compiled = run(true), eager = run(false);
  EXPECT_EQ(compiled, eager);
  // and the replicas agree (parameters and gradients; the losses before them are each rank's own)
  const std::vector<double> state(compiled.begin() + steps, compiled.end());
  EXPECT_EQ(dist::all_reduce(from_vector<double>(state), dist::ReduceOp::Max).to_vector<double>(), state);
}

// A compiled DDP step (3 steps of Adam, f64) on `device`: the losses, then the parameters.
std::vector<double> compiled_ddp_steps(Device device) {
  const int w = dist::world_size(), r = dist::rank();
  const int64_t B = 4, steps = 3;
  const auto [x, y] = samples(w * B * steps);
  auto m = small_mlp(31);
  m->to(device);
  nn::DistributedDataParallel ddp(m, {.bucket_bytes = 160}); // several buckets: several all-reduces
  optim::Adam opt(ddp.parameters(), {.lr = 1e-2});
  CompiledFunction step([&](const std::vector<Tensor>& a) {
    opt.zero_grad();
    const Tensor loss = F::cross_entropy(ddp(a[0]), a[1]);
    loss.backward();
    ddp.sync_gradients();
    opt.step();
    return std::vector<Tensor>{loss.detach()};
  });
  std::vector<double> out;
  for (int64_t s = 0; s < steps; ++s) {
    const int64_t at = (s * w + r) * B;
    out.push_back(step({x_rows(x, range(at, at + B)).to(device), y_rows(y, range(at, at + B)).to(device)})[0]
                      .to(kCPU).item<double>());
  }
  for (const Tensor& p : ddp.parameters()) {
    EXPECT_EQ(p.device(), device);
    for (double v : p.to(kCPU).to_vector<double>()) out.push_back(v);
  }
  return out;
}

// The same compiled DDP step on a (here emulated) GPU: gradients staged through host memory for
// the all-reduce, the same bits as on the CPU.
TEST(DDP, CompiledStepOnTheGpuMatchesTheCpu) {
  setenv("KILN_CUDA_DRIVER", KILN_CUDA_EMU, 0);
  if (cuda_devices().empty()) GTEST_SKIP() << "no CUDA device: " << cuda_unavailable_reason();
  const HostStaging staged; // rank-order sums: bitwise (Nccl.CompiledDdpStepOnTheGpu: on NCCL)
  EXPECT_EQ(compiled_ddp_steps({Device::Kind::CUDA, 0}), compiled_ddp_steps(kCPU));
}

// Two whole DDP steps in one compiled function: two host stages, the second reading the
// parameters the first step's update computed after the first all-reduce. The replay runs three
// plans around the two stages, keeping what a later plan reads, with the bits of eager steps.
TEST(DDP, SeveralAllReducesInOneCompiledFunction) {
  const int w = dist::world_size(), r = dist::rank();
  const int64_t B = 4, steps = 4;
  const auto [x, y] = samples(w * B * steps);
  auto run = [&](bool compiled) {
    auto m = small_mlp(27);
    nn::DistributedDataParallel ddp(m, {.bucket_bytes = 100});
    optim::SGD opt(ddp.parameters(), {.lr = 0.1, .momentum = 0.9});
    auto step = [&](const Tensor& xb, const Tensor& yb) {
      opt.zero_grad();
      const Tensor loss = F::cross_entropy(ddp(xb), yb);
      loss.backward();
      ddp.sync_gradients();
      opt.step();
      return loss.detach();
    };
    CompiledFunction two([&](const std::vector<Tensor>& a) {
      return std::vector<Tensor>{step(a[0], a[1]), step(a[2], a[3])};
    });
    std::vector<double> out;
    for (int64_t s = 0; s < steps; s += 2) {
      const int64_t at = (s * w + r) * B, next = ((s + 1) * w + r) * B;
      const Tensor x0 = x_rows(x, range(at, at + B)), y0 = y_rows(y, range(at, at + B));
      const Tensor x1 = x_rows(x, range(next, next + B)), y1 = y_rows(y, range(next, next + B));
      const std::vector<Tensor> losses = compiled ? two({x0, y0, x1, y1}) : std::vector<Tensor>{step(x0, y0), step(x1, y1)};
      for (const Tensor& l : losses) out.push_back(l.item<double>());
    }
    if (compiled) EXPECT_EQ(two.num_traces(), 2u); // without, then with momentum buffers
    for (const Tensor& p : ddp.parameters())
      for (double v : p.to_vector<double>()) out.push_back(v);
    return out;
  };
  EXPECT_EQ(run(true), run(false));
}

// The text of the file at `path`, which is then removed.
std::string read_and_remove(const std::string& path) {
  std::ifstream f(path);
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::remove(path.c_str());
  return text;
}

// The "tid" fields of a Chrome trace's spans whose name starts with `name`.
std::set<std::string> span_tids(const std::string& text, const std::string& name) {
  std::set<std::string> out;
  for (size_t at = text.find("\"name\":\"" + name); at != std::string::npos; at = text.find("\"name\":\"" + name, at + 1)) {
    const size_t t = text.find("\"tid\":", at);
    out.insert(text.substr(t, text.find_first_of(",}", t) - t));
  }
  return out;
}

// The structure of the overlap: in a compiled DDP step with three buckets, each bucket's
// gradients are computed by the plan just before its all-reduce (later buckets' gradients by
// later plans, which run while the earlier all-reduces travel), and the all-reduces run on
// another thread than the step's kernels.
TEST(DDP, BucketAllReducesStartDuringTheBackwardPass) {
  const int w = dist::world_size(), r = dist::rank();
  auto m = small_mlp(13);
  nn::DistributedDataParallel ddp(m, {.bucket_bytes = 160}); // buckets {3, 2}, {1}, {0}
  optim::SGD opt(ddp.parameters(), {.lr = 0.1});
  CompiledFunction step([&](const std::vector<Tensor>& a) {
    opt.zero_grad();
    const Tensor loss = F::cross_entropy(ddp(a[0]), a[1]);
    loss.backward();
    ddp.sync_gradients();
    opt.step();
    return std::vector<Tensor>{loss.detach()};
  });
  const auto [x, y] = samples(4 * w);
  const Tensor xb = x_rows(x, range(4 * r, 4 * r + 4)), yb = y_rows(y, range(4 * r, 4 * r + 4));
  step({xb, yb});
  const std::string path = ::testing::TempDir() + "kiln_ddp_overlap_" + std::to_string(r) + ".json";
  profile::start_trace(path);
  step({xb, yb});
  profile::stop_trace();
  const std::vector<size_t> plans = step.kernels_per_plan();
  ASSERT_EQ(plans.size(), 4u); // one before each bucket's all-reduce, one for the update
  for (size_t k = 0; k < plans.size(); ++k) EXPECT_GT(plans[k], 0u) << "plan " << k;
  const std::string text = read_and_remove(path);
  const std::set<std::string> reduce = span_tids(text, "all_reduce"), step_thread = span_tids(text, "step ");
  ASSERT_FALSE(reduce.empty()) << text.substr(0, 2000);
  ASSERT_EQ(step_thread.size(), 1u);
  EXPECT_EQ(reduce.count(*step_thread.begin()), 0u); // one thread per started stage, never the step's
}

// Eager steps overlap too: sync_gradients() realizes each bucket's gradients in turn and starts
// its all-reduce on another thread while this one computes the next buckets' (the compiled
// path's StartedStage); the updates are the compiled steps' (DDP.CompiledStepsMatchEagerSteps).
TEST(DDP, EagerBucketAllReducesRunOnAnotherThreadDuringTheBackwardPass) {
  const int w = dist::world_size(), r = dist::rank();
  auto m = small_mlp(13);
  nn::DistributedDataParallel ddp(m, {.bucket_bytes = 160}); // buckets {3, 2}, {1}, {0}
  ASSERT_EQ(ddp.buckets().size(), 3u);
  optim::SGD opt(ddp.parameters(), {.lr = 0.1});
  const auto [x, y] = samples(4 * w);
  const Tensor xb = x_rows(x, range(4 * r, 4 * r + 4)), yb = y_rows(y, range(4 * r, 4 * r + 4));
  auto step = [&] {
    opt.zero_grad();
    F::cross_entropy(ddp(xb), yb).backward();
    ddp.sync_gradients();
    opt.step();
    realize(ddp.parameters());
  };
  step();
  const std::string path = ::testing::TempDir() + "kiln_ddp_eager_overlap_" + std::to_string(r) + ".json";
  profile::start_trace(path);
  {
    runtime::observe::Span mark("test", "eager step"); // on this thread's track
    step();
  }
  profile::stop_trace();
  const std::string text = read_and_remove(path);
  const std::set<std::string> reduce = span_tids(text, "all_reduce"), here = span_tids(text, "eager step\"");
  ASSERT_EQ(here.size(), 1u);
  ASSERT_FALSE(reduce.empty());
  EXPECT_EQ(reduce.count(*here.begin()), 0u); // never on the thread computing the backward pass
}

TEST(DDP, NoSyncAccumulatesLocally) {
  const int w = dist::world_size(), r = dist::rank();
  auto m = small_mlp(5);
  nn::DistributedDataParallel ddp(m);
  const auto [x, y] = samples(2 * w * 2);
  // two micro-batches: the first under no_sync (the gradient stays this rank's), the second syncs
  const Tensor x0 = x_rows(x, range(2 * r, 2 * r + 2)), y0 = y_rows(y, range(2 * r, 2 * r + 2));
  const Tensor x1 = x_rows(x, range(2 * (w + r), 2 * (w + r) + 2)), y1 = y_rows(y, range(2 * (w + r), 2 * (w + r) + 2));
  {
    auto guard = ddp.no_sync();
    F::cross_entropy(ddp(x0), y0).backward();
    ddp.sync_gradients(); // does nothing here
  }
  const Tensor local = ddp.parameters()[0].grad().detach();
  realize({local});
  F::cross_entropy(ddp(x1), y1).backward();
  ddp.sync_gradients();
  // the reference: both micro-batches' gradients, summed per rank, averaged across ranks
  auto ref = small_mlp(5);
  F::cross_entropy((*ref)(x0), y0).backward();
  F::cross_entropy((*ref)(x1), y1).backward();
  const Tensor want = dist::all_reduce(ref->parameters()[0].grad(), dist::ReduceOp::Mean);
  const auto g = ddp.parameters()[0].grad().to_vector<double>(), gw = want.to_vector<double>();
  for (size_t k = 0; k < g.size(); ++k) EXPECT_NEAR(g[k], gw[k], 1e-14);
  if (w > 1) {
    EXPECT_NE(local.to_vector<double>(), dist::all_reduce(local, dist::ReduceOp::Max).to_vector<double>());
  }
}

TEST(DDP, BuffersStayPerRankUntilSyncBuffers) {
  const int w = dist::world_size(), r = dist::rank();
  nn::manual_seed(2);
  auto m = std::make_shared<nn::Sequential>(nn::Linear(3, 4), nn::BatchNorm1d(4));
  nn::DistributedDataParallel ddp(m);
  ddp(randn({8, 3}, 40 + static_cast<uint64_t>(r))).sum().backward(); // rank-dependent running statistics
  ddp.sync_gradients();
  const Tensor mean = m->buffers()[0];
  ASSERT_EQ(m->named_buffers()[0].first, "1.running_mean");
  const Tensor before = dist::all_gather(mean);
  if (w > 1) {
    EXPECT_NE(before.slice(0, 1, 2).to_vector<float>(), before.slice(0, 0, 1).to_vector<float>());
  }
  ddp.sync_buffers();
  const Tensor after = dist::all_gather(mean);
  for (int k = 0; k < w; ++k)
    EXPECT_EQ(after.slice(0, k, k + 1).to_vector<float>(), before.slice(0, 0, 1).to_vector<float>()) << "rank " << k;
}

// ---------------------------------------------------------------- SyncBatchNorm

// Rank r's rows of a global batch where rank r has B + r rows (uneven counts on purpose).
std::pair<int64_t, int64_t> uneven_rows(int r, int64_t B) {
  int64_t begin = 0;
  for (int k = 0; k < r; ++k) begin += B + k;
  return {begin, begin + B + r};
}

// BatchNorm (2-4 dims, the reference on the whole batch) and SyncBatchNorm of C channels in f64,
// with the same random weight and bias.
struct BatchNormPair {
  nn::BatchNorm ref;
  nn::SyncBatchNorm sync;
  BatchNormPair(int64_t C, nn::BatchNormOptions opts) : ref(C, opts, 2, 4, "BatchNorm", Loc::current()), sync(C, opts) {
    ref.to(kFloat64);
    sync.to(kFloat64);
    NoGradGuard no_grad;
    for (nn::BatchNorm* m : {&ref, static_cast<nn::BatchNorm*>(&sync)}) {
      m->weight.assign(randn({C}, 7, kFloat64) + 1.0);
      m->bias.assign(randn({C}, 8, kFloat64));
    }
  }
};

// N ranks, each with its part of one global batch, against BatchNorm on the whole batch in one
// process: outputs, input gradients, the weight and bias gradients summed over ranks, and the
// running statistics after two steps agree to f64 rounding (1e-12: the sums are grouped
// differently). For [N, C, H, W] and [N, C] inputs, with uneven per-rank batches.
TEST(SyncBatchNorm, MatchesBatchNormOnTheWholeBatch) {
  const int w = dist::world_size(), r = dist::rank();
  for (const IntList rest : {IntList{3, 2, 2}, IntList{3}}) {
    const int64_t B = 3, C = rest[0];
    int64_t total = 0;
    for (int k = 0; k < w; ++k) total += B + k;
    IntList shape{total};
    shape.insert(shape.end(), rest.begin(), rest.end());
    const auto [begin, end] = uneven_rows(r, B);
    BatchNormPair pair(C, {.momentum = 0.3});
    nn::BatchNorm& ref = pair.ref;
    nn::SyncBatchNorm& bn = pair.sync;
    for (uint64_t step = 0; step < 2; ++step) {
      const Tensor x_all = (randn(shape, 20 + step, kFloat64) * 3.0 + 5.0).detach(); // far from 0: cancellation shows
      const Tensor coef = randn(shape, 30 + step, kFloat64);
      Tensor xr = x_all.detach();
      xr.requires_grad_(true);
      Tensor xs = x_all.slice(0, begin, end).detach();
      xs.requires_grad_(true);
      const Tensor yr = ref(xr), ys = bn(xs);
      (yr * coef).sum().backward();
      (ys * coef.slice(0, begin, end)).sum().backward();
      auto near = [](const std::vector<double>& a, const std::vector<double>& b, const char* what) {
        ASSERT_EQ(a.size(), b.size()) << what;
        for (size_t k = 0; k < a.size(); ++k) ASSERT_NEAR(a[k], b[k], 1e-12 * (1 + std::abs(b[k]))) << what << " " << k;
      };
      near(ys.to_vector<double>(), yr.slice(0, begin, end).to_vector<double>(), "output");
      near(xs.grad().to_vector<double>(), xr.grad().slice(0, begin, end).to_vector<double>(), "input gradient");
      near(dist::all_reduce(bn.weight.grad()).to_vector<double>(), ref.weight.grad().to_vector<double>(), "weight gradient");
      near(dist::all_reduce(bn.bias.grad()).to_vector<double>(), ref.bias.grad().to_vector<double>(), "bias gradient");
      near(bn.running_mean.to_vector<double>(), ref.running_mean.to_vector<double>(), "running mean");
      near(bn.running_var.to_vector<double>(), ref.running_var.to_vector<double>(), "running var");
      EXPECT_EQ(bn.num_batches_tracked.item<int64_t>(), static_cast<int64_t>(step + 1));
      bn.zero_grad(), ref.zero_grad();
    }
    // evaluation mode: the running statistics, on every rank
    bn.eval(), ref.eval();
    const Tensor x = randn({2, C}, 3, kFloat64).reshape(rest.size() == 3 ? IntList{1, C, 1, 2} : IntList{2, C});
    const auto want = ref(x).to_vector<double>(), got = bn(x).to_vector<double>();
    for (size_t k = 0; k < want.size(); ++k) EXPECT_NEAR(got[k], want[k], 1e-12);
  }
}

// Gradients of gradients across ranks: with create_graph, the input and weight gradients of
// sum(tanh(y) * coef) (nonlinear, so the output gradient depends on x too) are differentiated again (through a second loss mixing both), and the second
// derivatives match BatchNorm on the whole batch in one process (weight's summed over ranks; each
// rank's loss counts once in the global one). Uneven per-rank batches, f64.
TEST(SyncBatchNorm, GradientsOfGradientsMatchBatchNormOnTheWholeBatch) {
  const int w = dist::world_size(), r = dist::rank();
  const int64_t B = 3, C = 3;
  int64_t total = 0;
  for (int k = 0; k < w; ++k) total += B + k;
  const IntList shape{total, C, 2, 2};
  const auto [begin, end] = uneven_rows(r, B);
  BatchNormPair pair(C, {});
  nn::BatchNorm& ref = pair.ref;
  nn::SyncBatchNorm& bn = pair.sync;
  const Tensor x_all = (randn(shape, 21, kFloat64) * 3.0 + 5.0).detach();
  const Tensor coef = randn(shape, 31, kFloat64), coef2 = randn(shape, 32, kFloat64), wcoef = randn({C}, 33, kFloat64);
  // The second loss of module m on input x (this rank's rows [lo, hi) of the coefficients), and
  // its gradients with respect to x and the weight.
  auto second = [&](nn::BatchNorm& m, int64_t lo, int64_t hi) {
    Tensor x = x_all.slice(0, lo, hi).detach();
    x.requires_grad_(true);
    const Tensor y = m(x);
    const std::vector<Tensor> g =
        grad({(tanh(y) * coef.slice(0, lo, hi)).sum()}, {x, m.weight}, {}, false, /*create_graph=*/true);
    const Tensor loss2 = (g[0] * coef2.slice(0, lo, hi)).sum() + (g[1] * wcoef).sum();
    return grad({loss2}, {x, m.weight});
  };
  const std::vector<Tensor> want = second(ref, 0, total), got = second(bn, begin, end);
  auto near = [](const std::vector<double>& a, const std::vector<double>& b, const char* what) {
    ASSERT_EQ(a.size(), b.size()) << what;
    for (size_t k = 0; k < a.size(); ++k) ASSERT_NEAR(a[k], b[k], 1e-11 * (1 + std::abs(b[k]))) << what << " " << k;
  };
  near(got[0].to_vector<double>(), want[0].slice(0, begin, end).to_vector<double>(), "d/dx of the input gradient");
  near(dist::all_reduce(got[1]).to_vector<double>(), want[1].to_vector<double>(), "d/dweight");
}

// Forward mode across ranks: the tangent of SyncBatchNorm's output along a direction of the
// input (each rank its rows of one global direction) is BatchNorm's on the whole batch (its
// statistics' tangents gathered from every rank).
TEST(SyncBatchNorm, ForwardModeMatchesBatchNormOnTheWholeBatch) {
  const int w = dist::world_size(), r = dist::rank();
  const int64_t B = 3, C = 2;
  int64_t total = 0;
  for (int k = 0; k < w; ++k) total += B + k;
  const IntList shape{total, C, 3};
  const auto [begin, end] = uneven_rows(r, B);
  nn::BatchNorm ref(C, {}, 1, 3, "BatchNorm", Loc::current());
  nn::SyncBatchNorm bn(C);
  ref.to(kFloat64);
  bn.to(kFloat64);
  const Tensor x = randn(shape, 41, kFloat64) * 2.0 + 1.0, dx = randn(shape, 42, kFloat64);
  const auto [y_ref, t_ref] = jvp([&](const Tensor& v) { return ref(v); }, x, dx);
  const auto [y, t] = jvp([&](const Tensor& v) { return bn(v); }, x.slice(0, begin, end), dx.slice(0, begin, end));
  const auto got = t.to_vector<double>(), want = t_ref.slice(0, begin, end).to_vector<double>();
  ASSERT_EQ(got.size(), want.size());
  for (size_t k = 0; k < got.size(); ++k) EXPECT_NEAR(got[k], want[k], 1e-11 * (1 + std::abs(want[k]))) << k;
}

// A group of one process, and evaluation mode anywhere: BatchNorm, bit for bit (outputs,
// gradients, running statistics), eager and compiled.
TEST(SyncBatchNorm, IsBatchNormOnOneRankAndInEvaluation) {
  const bool one = dist::world_size() == 1;
  auto run = [&](bool sync, bool compiled, bool training) {
    nn::manual_seed(4);
    auto m = std::make_shared<nn::Sequential>(nn::Conv2d(1, 3, 3), nn::BatchNorm2d(3), nn::ReLU(), nn::Flatten(),
                                              nn::Linear(12, 2));
    if (sync) nn::SyncBatchNorm::convert_sync_batchnorm(m);
    m->train(training);
    optim::SGD opt(m->parameters(), {.lr = 0.1, .momentum = 0.5});
    auto step = [&](const Tensor& x) {
      opt.zero_grad();
      const Tensor loss = (*m)(x).square().mean();
      loss.backward();
      opt.step();
      return loss.detach();
    };
    CompiledFunction f([&](const std::vector<Tensor>& a) { return std::vector<Tensor>{step(a[0])}; });
    std::vector<float> out;
    for (uint64_t s = 0; s < 3; ++s) {
      const Tensor x = randn({4, 1, 4, 4}, 50 + s);
      out.push_back((compiled ? f({x})[0] : step(x)).item<float>());
    }
    for (const Tensor& t : m->parameters())
      for (float v : t.to_vector<float>()) out.push_back(v);
    for (const Tensor& t : m->buffers())
      if (t.dtype() == kFloat32)
        for (float v : t.to_vector<float>()) out.push_back(v);
    return out;
  };
  for (bool compiled : {false, true}) {
    EXPECT_EQ(run(true, compiled, false), run(false, compiled, false)) << "evaluation, compiled " << compiled;
    if (one) EXPECT_EQ(run(true, compiled, true), run(false, compiled, true)) << "training, compiled " << compiled;
  }
}

// A small CNN with SyncBatchNorm under DDP: compiled steps (forward all-gathers, backward
// all-reduces and the gradient buckets: several host stages in one compiled function) give the
// bits of eager steps, and both match one process training on the whole batch with BatchNorm.
TEST(SyncBatchNorm, DistributedStepsMatchOneProcessAndCompiledMatchesEager) {
  const int w = dist::world_size(), r = dist::rank();
  const int64_t B = 2, steps = 3;
  auto model = [](bool sync) {
    nn::manual_seed(8);
    auto m = std::make_shared<nn::Sequential>(nn::Conv2d(1, 3, 3), nn::BatchNorm2d(3), nn::Tanh(), nn::Flatten(),
                                              nn::Linear(12, 4), nn::BatchNorm1d(4), nn::Tanh(), nn::Linear(4, 3));
    m->to(kFloat64);
    if (sync) nn::SyncBatchNorm::convert_sync_batchnorm(m);
    return m;
  };
  const Tensor x = randn({w * B * steps, 1, 4, 4}, 60, kFloat64);
  std::vector<int64_t> labels;
  for (int64_t i = 0; i < w * B * steps; ++i) labels.push_back(i % 3);
  const Tensor y = from_vector<int64_t>(labels);
  auto run = [&](bool compiled) {
    auto m = model(true);
    nn::DistributedDataParallel ddp(m, {.bucket_bytes = 200});
    optim::SGD opt(ddp.parameters(), {.lr = 0.1, .momentum = 0.9});
    auto step = [&](const Tensor& xb, const Tensor& yb) {
      opt.zero_grad();
      const Tensor loss = F::cross_entropy(ddp(xb), yb);
      loss.backward();
      ddp.sync_gradients();
      opt.step();
      return loss.detach();
    };
    CompiledFunction f([&](const std::vector<Tensor>& a) { return std::vector<Tensor>{step(a[0], a[1])}; });
    std::vector<double> out;
    for (int64_t s = 0; s < steps; ++s) {
      const int64_t at = (s * w + r) * B;
      const Tensor xb = x.slice(0, at, at + B), yb = y.slice(0, at, at + B);
      out.push_back((compiled ? f({xb, yb})[0] : step(xb, yb)).item<double>());
    }
    for (const Tensor& t : m->parameters())
      for (double v : t.to_vector<double>()) out.push_back(v);
    for (const Tensor& t : m->buffers())
      if (t.dtype() == kFloat64)
        for (double v : t.to_vector<double>()) out.push_back(v);
    return out;
  };
  const std::vector<double> eager = run(false), compiled = run(true);
  EXPECT_EQ(compiled, eager);
  // one process, BatchNorm, the whole batch (a rank's losses are its own: compare the state)
  auto ref = model(false);
  optim::SGD opt(ref->parameters(), {.lr = 0.1, .momentum = 0.9});
  for (int64_t s = 0; s < steps; ++s) {
    opt.zero_grad();
    F::cross_entropy((*ref)(x.slice(0, s * w * B, (s + 1) * w * B)), y.slice(0, s * w * B, (s + 1) * w * B)).backward();
    opt.step();
  }
  std::vector<double> want;
  for (const Tensor& t : ref->parameters())
    for (double v : t.to_vector<double>()) want.push_back(v);
  for (const Tensor& t : ref->buffers())
    if (t.dtype() == kFloat64)
      for (double v : t.to_vector<double>()) want.push_back(v);
  ASSERT_EQ(eager.size(), want.size() + steps);
  for (size_t k = 0; k < want.size(); ++k) EXPECT_NEAR(eager[steps + k], want[k], 1e-12) << k;
}

TEST(SyncBatchNorm, ConvertKeepsTheTensorsAndNames) {
  nn::manual_seed(1);
  auto m = std::make_shared<nn::Sequential>(nn::Linear(3, 4), nn::BatchNorm1d(4),
                                            nn::Sequential(nn::Linear(4, 4), nn::BatchNorm1d(4)));
  const nn::NamedTensors before = m->named_parameters(), buffers = m->named_buffers();
  EXPECT_EQ(nn::SyncBatchNorm::convert_sync_batchnorm(m), m);
  EXPECT_EQ((*m)[1].name(), "SyncBatchNorm");
  EXPECT_TRUE(contains(m->str(), "SyncBatchNorm(4, eps=")) << m->str();
  const nn::NamedTensors after = m->named_parameters();
  ASSERT_EQ(after.size(), before.size());
  for (size_t i = 0; i < after.size(); ++i) {
    EXPECT_EQ(after[i].first, before[i].first);
    EXPECT_EQ(after[i].second.impl(), before[i].second.impl()) << after[i].first; // the same tensors
  }
  EXPECT_EQ(m->named_buffers().size(), buffers.size());
  auto alone = std::make_shared<nn::BatchNorm2d>(2);
  EXPECT_EQ(nn::SyncBatchNorm::convert_sync_batchnorm(alone)->name(), "SyncBatchNorm");
}

TEST(SyncBatchNorm, Errors) {
  nn::SyncBatchNorm bn(3);
  const std::string e = error_of([&] { bn.forward(zeros({2, 4})); });
  EXPECT_TRUE(contains(e, "SyncBatchNorm")) << e;
  EXPECT_TRUE(contains(e, "expects [N, 3, ...] inputs")) << e;
  EXPECT_TRUE(contains(e, "f32[2,4]")) << e;
  EXPECT_TRUE(contains(e, "test_dist.cpp")) << e;
  EXPECT_TRUE(contains(error_of([&] { bn.forward(zeros({3})); }), "expects [N, 3, ...] inputs"));
}

// Integer running statistics are refused as batch_norm refuses them, on one rank (BatchNorm's path)
// and on several (checked before any communication, so every rank throws and none waits).
TEST(SyncBatchNorm, RefusesIntegerRunningStatistics) {
  nn::SyncBatchNorm bn(3);
  bn.running_var = ones({3}, kInt64);
  const std::string e = error_of([&] { bn.forward(randn({4, 3}, 1)); });
  EXPECT_TRUE(contains(e, "SyncBatchNorm")) << e;
  EXPECT_TRUE(contains(e, "must be floating")) << e;
  EXPECT_TRUE(contains(e, "i64[3]")) << e;
  EXPECT_TRUE(contains(e, "test_dist.cpp")) << e;
}

// ---------------------------------------------------------------- failures (mpirun -np 2, KILN_DIST_TIMEOUT=1)

// ---------------------------------------------------------------- NCCL (emulated here)
//
// dist_mpi_2 and dist_mpi_3 point KILN_NCCL_LIBRARY at tests/nccl_emu (an NCCL between the ranks
// through shared memory, on the CUDA driver emulator's streams); with libnccl.so.2 and a GPU per
// rank these tests run against the real thing.

const Device kGpu{Device::Kind::CUDA, 0};

// Skips unless there are 2 ranks or more, a CUDA device and NCCL for its tensors.
#define NEED_NCCL()                                                                                                 \
  if (dist::world_size() < 2) {                                                                                     \
    GTEST_SKIP() << "needs 2 ranks: ctest runs these under mpirun (dist_mpi_2, dist_mpi_3)";                        \
  }                                                                                                                 \
  setenv("KILN_CUDA_DRIVER", KILN_CUDA_EMU, 0);                                                                     \
  if (cuda_devices().empty()) {                                                                                     \
    GTEST_SKIP() << "no CUDA device: " << cuda_unavailable_reason();                                                \
  }                                                                                                                 \
  if (dist::backend(kGpu).rfind("nccl ", 0) != 0) {                                                                 \
    GTEST_SKIP() << "CUDA tensors do not use NCCL here (" << dist::backend(kGpu)                                    \
                 << "): ctest's dist_mpi_2 and dist_mpi_3 set KILN_NCCL_LIBRARY to the NCCL emulator";              \
  }

// The NCCL emulator's counters (communicators made, collectives run), or {0, 0} on a real NCCL.
std::pair<uint64_t, uint64_t> emulated_nccl_counters() {
  const char* path = std::getenv("KILN_NCCL_LIBRARY");
  void* h = path ? dlopen(path, RTLD_NOW | RTLD_NOLOAD) : nullptr;
  auto* counters = h ? reinterpret_cast<void (*)(unsigned long long*)>(dlsym(h, "kilnNcclEmuCounters")) : nullptr;
  unsigned long long out[2] = {0, 0};
  if (counters) counters(out);
  return {out[0], out[1]};
}

// Every collective of kiln::dist on CUDA tensors of T through NCCL gives the host path's values
// (on CPU tensors): the values are exact in T, so that the order of a sum does not matter.
template <class T> void expect_nccl_matches_host_path() {
  const int w = dist::world_size(), r = dist::rank();
  std::vector<T> v;
  for (int i = 0; i < 6 * w; ++i) v.push_back(static_cast<T>((r + 1) * (i % 7) - 2 * i + 3 * r));
  if constexpr (std::is_floating_point_v<T>)
    for (T& x : v) x /= 2;
  const Tensor cpu = from_vector<T>(v, {2 * w, 3}), gpu = cpu.to(kGpu);
  const auto before = emulated_nccl_counters();
  auto same = [&](const Tensor& g, const Tensor& c, const char* what) {
    EXPECT_EQ(g.device(), kGpu) << what;
    EXPECT_EQ(g.shape(), c.shape()) << what;
    EXPECT_EQ(g.to(kCPU).to_vector<T>(), c.to_vector<T>()) << what << " of " << cpu.type_str();
  };
  same(dist::all_reduce(gpu), dist::all_reduce(cpu), "all_reduce(sum)");
  same(dist::all_reduce(gpu, dist::ReduceOp::Max), dist::all_reduce(cpu, dist::ReduceOp::Max), "all_reduce(max)");
  same(dist::broadcast(gpu, w - 1), dist::broadcast(cpu, w - 1), "broadcast");
  same(dist::all_gather(gpu), dist::all_gather(cpu), "all_gather");
  same(dist::reduce_scatter(gpu), dist::reduce_scatter(cpu), "reduce_scatter(sum)");
  const auto a = dist::all_reduce_coalesced({gpu, gpu * 2, gpu.slice(0, 1, 2)});
  const auto b = dist::all_reduce_coalesced({cpu, cpu * 2, cpu.slice(0, 1, 2)});
  for (size_t i = 0; i < a.size(); ++i) same(a[i], b[i], "all_reduce_coalesced");
  int calls = 8; // the coalesced all-reduce is one ncclAllReduce per tensor (in one group)
  if constexpr (std::is_floating_point_v<T>) { // sum, then the host's division by the world size
    same(dist::all_reduce(gpu, dist::ReduceOp::Mean), dist::all_reduce(cpu, dist::ReduceOp::Mean), "all_reduce(mean)");
    same(dist::reduce_scatter(gpu, dist::ReduceOp::Mean), dist::reduce_scatter(cpu, dist::ReduceOp::Mean),
         "reduce_scatter(mean)");
    calls += 2;
  }
  const auto after = emulated_nccl_counters();
  if (after.second > 0) {
    EXPECT_EQ(after.second - before.second, static_cast<uint64_t>(calls)) << "NCCL ran them all";
  }
}

TEST(Nccl, CollectivesOnCudaTensorsMatchTheHostPath) {
  NEED_NCCL();
  expect_nccl_matches_host_path<float>();
  expect_nccl_matches_host_path<double>();
  expect_nccl_matches_host_path<int32_t>();
  expect_nccl_matches_host_path<int64_t>();
  // bool travels (broadcast, all_gather); empty and 0-d tensors
  const Tensor flags = from_vector<bool>({dist::rank() == 0, true}).to(kGpu);
  EXPECT_EQ(dist::broadcast(flags).to(kCPU).to_vector<bool>(), (std::vector<bool>{true, true}));
  EXPECT_EQ(dist::all_gather(flags).shape(), (IntList{dist::world_size(), 2}));
  EXPECT_EQ(dist::all_reduce(zeros({0, 3}).to(kGpu)).shape(), (IntList{0, 3}));
  EXPECT_EQ(dist::all_reduce(scalar_tensor(2.0).to(kGpu)).to(kCPU).item<float>(), 2.f * dist::world_size());
  // more than the emulator's 1 MiB a round: several rounds (chunks), uneven last one
  const int w = dist::world_size(), r = dist::rank();
  const int64_t rows = 2 * w, width = 50'001; // f64: 400 KB a row
  const Tensor big =
      (arange(0, static_cast<double>(rows * width), 1, kFloat64).reshape({rows, width}) + static_cast<double>(r)).to(kGpu);
  const Tensor big_cpu = big.to(kCPU);
  EXPECT_EQ(dist::all_reduce(big).to(kCPU).to_vector<double>(), dist::all_reduce(big_cpu).to_vector<double>());
  EXPECT_EQ(dist::reduce_scatter(big).to(kCPU).to_vector<double>(), dist::reduce_scatter(big_cpu).to_vector<double>());
  EXPECT_EQ(dist::all_gather(big).to(kCPU).to_vector<double>(), dist::all_gather(big_cpu).to_vector<double>());
  EXPECT_EQ(dist::broadcast(big, 1).to(kCPU).to_vector<double>(), dist::broadcast(big_cpu, 1).to_vector<double>());
  // a result feeds the GPU's kernels (stream order: no host wait in between)
  const Tensor s = dist::all_reduce(ones({3}).to(kGpu) * 2.f);
  EXPECT_EQ((s + 1.f).sum().to(kCPU).item<float>(), 3.f * (2.f * dist::world_size() + 1.f));
  const auto [comms, collectives] = emulated_nccl_counters();
  if (collectives > 0) {
    EXPECT_EQ(comms, 1u) << "one communicator serves every collective";
  }
}

// A collective is queued on kiln's stream of the device: all_reduce returns before the stream ran
// it (the driver emulator holds each operation queued meanwhile for KILN_EMU_DELAY_US), and a
// kernel queued after it reads its result.
TEST(Nccl, QueuedOnTheStreamWithoutAHostWait) {
  NEED_NCCL();
  if (emulated_nccl_counters().first == 0) GTEST_SKIP() << "counts the NCCL emulator's collectives";
  const int w = dist::world_size();
  const Tensor x = ones({4}).to(kGpu) * static_cast<float>(dist::rank() + 1);
  realize({x});
  const uint64_t before = emulated_nccl_counters().second;
  setenv("KILN_EMU_DELAY_US", "500000", 1);
  const Tensor s = dist::all_reduce(x);
  const uint64_t right_after = emulated_nccl_counters().second;
  unsetenv("KILN_EMU_DELAY_US");
  EXPECT_EQ(right_after, before) << "all_reduce waited for the stream";
  const Tensor y = s * 2.f + 1.f; // a kernel queued after the collective
  EXPECT_EQ(y.to(kCPU).to_vector<float>(), std::vector<float>(4, static_cast<float>(w * (w + 1) + 1)));
  EXPECT_EQ(emulated_nccl_counters().second, before + 1);
}

// NCCL's sums are not in rank order: kiln promises every rank the same bits (NCCL's reduced
// chunks are sent to all ranks), within rounding of the rank-order sum, bitwise on 2 ranks; and
// the host path's rank-order bits with KILN_NCCL=0.
TEST(Nccl, SumsAreEqualOnEveryRankAndRankOrderOnRequest) {
  NEED_NCCL();
  const int w = dist::world_size(), r = dist::rank();
  const size_t n = 1001;
  // ranks 0 and 1 cancel (+-1e8), the others add small values: (x0 + x1) + x2 keeps them,
  // (x1 + x2) + x0 loses them to rounding at 1e8
  auto values = [n](int k) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) {
      const float big = (i % 2 ? 1e8f : -1e8f) * (1.f + static_cast<float>(i) * 1e-4f);
      v[i] = k == 0 ? big : k == 1 ? -big : static_cast<float>(k) * 0.1f + static_cast<float>(i) * 1e-3f;
    }
    return v;
  };
  std::vector<float> expect = values(0);
  for (int k = 1; k < w; ++k) {
    const std::vector<float> v = values(k);
    for (size_t i = 0; i < n; ++i) expect[i] += v[i];
  }
  const Tensor x = from_vector<float>(values(r)).to(kGpu);
  const std::vector<float> got = dist::all_reduce(x).to(kCPU).to_vector<float>();
  const std::vector<float> every = dist::all_gather(from_vector<float>(got)).to_vector<float>(); // on the host path
  for (int k = 0; k < w; ++k)
    EXPECT_EQ(std::memcmp(every.data() + n * static_cast<size_t>(k), got.data(), n * sizeof(float)), 0) << "rank " << k;
  for (size_t i = 0; i < n; ++i) ASSERT_NEAR(got[i], expect[i], 16.f) << i; // summands ~ 1e8: 2 ulps of them
  const bool rank_order = std::memcmp(got.data(), expect.data(), n * sizeof(float)) == 0;
  if (w == 2) {
    EXPECT_TRUE(rank_order) << "x1 + x0 == x0 + x1";
  }
  if (w >= 3 && emulated_nccl_counters().second != 0) {
    EXPECT_FALSE(rank_order) << "the emulator's order is a ring's";
  }
  const HostStaging staged;
  EXPECT_TRUE(contains(dist::backend(kGpu), "staged through host memory: KILN_NCCL=0")) << dist::backend(kGpu);
  const std::vector<float> ordered = dist::all_reduce(x).to(kCPU).to_vector<float>();
  EXPECT_EQ(std::memcmp(ordered.data(), expect.data(), n * sizeof(float)), 0);
}

// A compiled DDP step on the GPU whose bucket all-reduces run on NCCL (on the stream, between the
// plans' kernels): the CPU's bits on 2 ranks, within rounding of them on more.
TEST(Nccl, CompiledDdpStepOnTheGpu) {
  NEED_NCCL();
  const auto before = emulated_nccl_counters();
  const std::vector<double> gpu = compiled_ddp_steps(kGpu), cpu = compiled_ddp_steps(kCPU);
  if (emulated_nccl_counters().first > 0) {
    EXPECT_GT(emulated_nccl_counters().second, before.second + 9);
  }
  ASSERT_EQ(gpu.size(), cpu.size());
  if (dist::world_size() == 2) {
    EXPECT_EQ(gpu, cpu);
  }
  for (size_t i = 0; i < gpu.size(); ++i) EXPECT_NEAR(gpu[i], cpu[i], 1e-12 * (1 + std::abs(cpu[i]))) << i;
}

// dist_mpi_2_nccl_missing / _broken: KILN_NCCL_LIBRARY is a missing file or a library that is
// not NCCL; CUDA tensors are then staged through host memory, and KILN_DEBUG=1 says why.
TEST(NcclAlone, Fallback) {
  const char* kind = std::getenv("KILN_NCCL_ALONE_TEST");
  if (!kind || (std::string(kind) != "missing" && std::string(kind) != "broken"))
    GTEST_SKIP() << "ctest runs it alone under mpirun -np 2 (dist_mpi_2_nccl_missing, dist_mpi_2_nccl_broken)";
  ASSERT_EQ(dist::world_size(), 2);
  setenv("KILN_CUDA_DRIVER", KILN_CUDA_EMU, 0);
  ASSERT_FALSE(cuda_devices().empty()) << cuda_unavailable_reason();
  const int saved = options().debug;
  options().debug = 1;
  ::testing::internal::CaptureStderr();
  const std::string backend = dist::backend(kGpu); // loads (or fails to load) the library
  const std::string said = ::testing::internal::GetCapturedStderr();
  options().debug = saved;
  const std::string library = std::getenv("KILN_NCCL_LIBRARY");
  EXPECT_TRUE(contains(said, "[kiln] dist: collectives on CUDA tensors are staged through host memory on MPI: "))
      << said;
  EXPECT_TRUE(contains(said, std::string(kind) == "missing" ? library + " cannot be loaded"
                                                            : library + " lacks ncclGetVersion ncclGetUniqueId"))
      << said;
  EXPECT_TRUE(contains(backend, "mpi (libmpi.so.40), staged through host memory: ")) << backend;
  // the host path's values and rank-order bits
  const int w = dist::world_size(), r = dist::rank();
  std::vector<float> expect = ragged(0, 101);
  for (int k = 1; k < w; ++k)
    for (size_t i = 0; i < expect.size(); ++i) expect[i] += ragged(k, 101)[i];
  const Tensor s = dist::all_reduce(from_vector<float>(ragged(r, 101)).to(kGpu));
  EXPECT_EQ(s.device(), kGpu);
  EXPECT_EQ(s.to(kCPU).to_vector<float>(), expect);
  EXPECT_EQ(dist::broadcast(from_vector<int64_t>({r}).to(kGpu), 1).to(kCPU).item<int64_t>(), 1);
}

// dist_mpi_2_nccl_error: the NCCL emulator fails the next collective on both ranks; that is a
// kiln::Error naming the collective, the NCCL function, the rank and NCCL's message, and later
// collectives on CUDA tensors are staged through host memory.
TEST(NcclAlone, ErrorIsAKilnErrorNamingTheCollective) {
  const char* kind = std::getenv("KILN_NCCL_ALONE_TEST");
  if (!kind || std::string(kind) != "error") GTEST_SKIP() << "ctest runs it alone under mpirun -np 2 (dist_mpi_2_nccl_error)";
  NEED_NCCL();
  const int w = dist::world_size(), r = dist::rank();
  const Tensor x = from_vector<double>({1.0 + r, 2.0}).to(kGpu);
  EXPECT_EQ(dist::all_reduce(x).to(kCPU).to_vector<double>(), (std::vector<double>{w + w * (w - 1) / 2.0, 2.0 * w}));
  void* h = dlopen(std::getenv("KILN_NCCL_LIBRARY"), RTLD_NOW | RTLD_NOLOAD);
  auto* fail_next = h ? reinterpret_cast<void (*)(int)>(dlsym(h, "kilnNcclEmuFailNext")) : nullptr;
  ASSERT_NE(fail_next, nullptr) << "the NCCL emulator's test hook";
  fail_next(2); // ncclSystemError
  const std::string e = error_of([&] { dist::all_reduce(x); });
  EXPECT_TRUE(contains(e, "all_reduce: ncclAllReduce failed on rank " + std::to_string(r) + " of " + std::to_string(w) +
                              " (cuda:0): unhandled system error"))
      << e;
  EXPECT_TRUE(contains(e, "failure injected by kilnNcclEmuFailNext")) << e; // ncclGetLastError
  EXPECT_TRUE(contains(e, "test_dist.cpp")) << e;                          // the user's line
  EXPECT_TRUE(contains(dist::backend(kGpu), "staged through host memory: NCCL failed earlier (ncclAllReduce"))
      << dist::backend(kGpu);
  EXPECT_EQ(dist::all_reduce(x).to(kCPU).to_vector<double>(), (std::vector<double>{w + w * (w - 1) / 2.0, 2.0 * w}));
}

// The NCCL emulator's test hook `name`, or null on a real NCCL.
template <class F> F* nccl_emu_hook(const char* name) {
  void* h = dlopen(std::getenv("KILN_NCCL_LIBRARY"), RTLD_NOW | RTLD_NOLOAD);
  return h ? reinterpret_cast<F*>(dlsym(h, name)) : nullptr;
}

// Run by dist_mpi_2_nccl_hang, _die and _stall only (KILN_DIST_TIMEOUT=2, emulated GPU and NCCL):
// rank 1 fails inside its second NCCL all_reduce, on its stream, after both ranks queued it (so
// the description exchange on MPI passed), and the watchdog of the host wait that follows throws
// a kiln::Error naming the collective and its line instead of waiting for ever:
// - hang: rank 1's device never takes part and its host sleeps: rank 0 names rank 1, which does
//   not answer over MPI either; the process group is then unusable.
// - die: rank 1's process exits in the middle of the collective (mpirun --enable-recovery keeps
//   rank 0 running): the same for rank 0.
// - stall: rank 1's device never takes part but its host waits too: both watchdogs fire, each
//   rank says the other queued the collective and it did not complete there either; the group
//   survives and later collectives on CUDA tensors are staged through host memory.
void expect_nccl_failure_detected(const std::string& kind) {
  const char* test = std::getenv("KILN_NCCL_FAILURE_TEST");
  if (!test || test != kind)
    GTEST_SKIP() << "a failure case: ctest runs it alone under mpirun -np 2 (dist_mpi_2_nccl_" << kind << ")";
  NEED_NCCL();
  ASSERT_EQ(dist::world_size(), 2);
  auto* hang_next = nccl_emu_hook<void()>("kilnNcclEmuHangNext");
  auto* die_next = nccl_emu_hook<void(int)>("kilnNcclEmuDieNext");
  ASSERT_TRUE(hang_next && die_next) << "the NCCL emulator's test hooks";
  EXPECT_EQ(options().dist_timeout, 2.0); // KILN_DIST_TIMEOUT=2, from ctest
  const int r = dist::rank();
  const Tensor x = ones({1000}).to(kGpu);
  options().dist_timeout = 300; // both ranks here first, however slowly they start; makes the communicator
  EXPECT_EQ(dist::all_reduce(x).to(kCPU).sum().item<float>(), 2000.f);
  options().dist_timeout = 2;
  if (r == 1) {
    if (kind == "die") die_next(0);
    else hang_next();
  }
  const auto start = std::chrono::steady_clock::now();
  const int line = __LINE__ + 1;
  const Tensor s = dist::all_reduce(x); // queued on both ranks; rank 1's part fails on its stream
  if (r == 1 && kind != "stall") {
    std::this_thread::sleep_for(std::chrono::seconds(60)); // dies meanwhile, or mpirun ends it when rank 0 leaves
    return;
  }
  const int peer = 1 - r;
  const std::string e = error_of([&] { s.to(kCPU); }); // the host wait throws (inside to()'s error)
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); // printed only
  const std::string head = "all_reduce: ncclAllReduce (NCCL collective #2 of rank " + std::to_string(r) + " of 2, cuda:0) ";
  const std::string timed_out = head + "did not complete within the timeout of 2 s (KILN_DIST_TIMEOUT)";
  std::vector<std::string> parts = {"the communicator was aborted (ncclCommAbort)",
                                    std::string(__FILE__) + ":" + std::to_string(line)}; // the all_reduce's line
  if (kind == "stall") { // the first watchdog to fire aborts, which the other rank's NCCL may report first
    EXPECT_TRUE(contains(e, timed_out) || contains(e, head + "failed: remote process exited")) << e;
    parts.push_back("asked over MPI: rank " + std::to_string(peer) + " queued it and it did not complete there either");
    parts.push_back("later collectives on CUDA tensors are staged through host memory");
  } else {
    parts.push_back(timed_out);
    parts.push_back("asked over MPI: no data from rank 1 within 2 s (died, hangs, or never reached its watchdog)");
  }
  for (const std::string& part : parts) EXPECT_TRUE(contains(e, part)) << "missing '" << part << "' in: " << e;
  // NCCL is off in this process from now on
  EXPECT_TRUE(contains(dist::backend(kGpu), "staged through host memory: NCCL failed earlier (ncclAllReduce"))
      << dist::backend(kGpu);
  if (kind == "stall") { // both ranks go back to host staging together
    EXPECT_EQ(dist::all_reduce(x).to(kCPU).sum().item<float>(), 2000.f);
  } else {
    const std::string again = error_of([&] { dist::all_reduce(x); });
    EXPECT_TRUE(contains(again, "the process group failed earlier (no data from rank 1 in all_reduce)")) << again;
  }
  if (!::testing::Test::HasFailure() && r == 0)
    std::printf("kiln-dist: rank 0 caught the NCCL failure in %.2f s: %s\n", secs, e.c_str());
  std::fflush(stdout);
}

TEST(NcclFailure, RankHangsInAnAllReduce) { expect_nccl_failure_detected("hang"); }
TEST(NcclFailure, RankDiesInAnAllReduce) { expect_nccl_failure_detected("die"); }
TEST(NcclFailure, DeviceStallsOnOneRankAndBothWatchdogsFire) { expect_nccl_failure_detected("stall"); }

// Run by dist_mpi_2_leave and dist_mpi_2_hang only: rank 1 leaves (or hangs) instead of taking
// part; rank 0 must get a kiln::Error naming rank 1 and the collective within the timeout.
// With `compiled`, rank 0's all-reduce is a DDP bucket's, started on another thread by the
// replay of a compiled step: the error comes back through the step.
void expect_failure_detected(bool hang, bool compiled = false) {
  if (dist::world_size() != 2 || !std::getenv("KILN_DIST_FAILURE_TEST"))
    GTEST_SKIP() << "a failure case: ctest runs it alone under mpirun -np 2 (dist_mpi_2_leave, dist_mpi_2_hang, "
                    "dist_mpi_2_compiled)";
  EXPECT_EQ(options().dist_timeout, 1.0); // KILN_DIST_TIMEOUT=1, from ctest
  options().dist_timeout = 300;           // both ranks in the test first, however slowly they start
  dist::barrier();
  options().dist_timeout = 1;
  if (dist::rank() == 1) {
    if (hang) std::this_thread::sleep_for(std::chrono::seconds(60)); // mpirun ends it when rank 0 leaves
    return; // leaves early: goes on to exit without calling all_reduce
  }
  auto m = small_mlp(2);
  nn::DistributedDataParallel ddp(m, {.bucket_bytes = 160, .broadcast_at_construction = false});
  CompiledFunction step([&](const std::vector<Tensor>& a) {
    F::cross_entropy(ddp(a[0]), a[1]).backward();
    ddp.sync_gradients();
    return std::vector<Tensor>{};
  });
  const auto [x, y] = samples(4);
  const auto start = std::chrono::steady_clock::now();
  const std::string e =
      compiled ? error_of([&] { step({x, y}); }) : error_of([] { dist::all_reduce(ones({1000})); });
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // a DDP bucket's all-reduce is named as the user's call of sync_gradients, at its line
  const std::string op = compiled ? "DistributedDataParallel::sync_gradients" : "all_reduce";
  EXPECT_TRUE(contains(e, op + ": rank 0 of 2: no data from rank 1 within the timeout of 1 s")) << e;
  EXPECT_TRUE(contains(e, "test_dist.cpp")) << e;
  EXPECT_GE(secs, 1.0); // it waited for the timeout,
  EXPECT_LT(secs, 30.0); // and not much longer
  // the group is now unusable, and says why
  const std::string again = error_of([] { dist::barrier(); });
  EXPECT_TRUE(contains(again, "the process group failed earlier")) << again;
  if (!::testing::Test::HasFailure()) std::printf("kiln-dist: rank 0 caught the failure in %.2f s: %s\n", secs, e.c_str());
  std::fflush(stdout);
}

TEST(DistFailure, RankLeavesEarly) { expect_failure_detected(false); }
TEST(DistFailure, RankHangs) { expect_failure_detected(true); }
TEST(DistFailure, RankLeavesDuringACompiledStep) { expect_failure_detected(false, true); }

} // namespace
