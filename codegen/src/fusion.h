#pragma once
/// \file fusion.h
/// Internal: the fusion pass. `Partition` decides, from the outputs back, which nodes get a
/// buffer of their own (kernel roots) and which are computed inside the kernel of their users
/// (elementwise chains, row reductions, matmul epilogues); `Grouping` then decides which roots
/// one kernel stores together (multi-output kernels). Every choice is a FusionDecision
/// (codegen/lower.h). Entry point: the `Fusion` constructor. Lowering (lower.cpp) builds each kernel's IR from
/// the result and never changes a decision: what a kernel can compute (a reduction or a matmul
/// read only at the kernel's own points) is decided here.

#include <algorithm>
#include <cmath>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "codegen/lower.h"
#include "graph/build.h"
#include "graph/node.h"

namespace kiln::codegen::fusion {

using graph::Node;
using graph::OpCategory;
using graph::OpKind;

/// "add f32[8] (main.cpp:3)": a node in decisions and messages.
inline std::string describe(const Node* n) {
  std::string s = std::string(graph::op_name(n->op)) + " " + std::string(dtype_name(n->dtype)) + graph::shape_str(n->shape);
  return n->origin ? s + " (" + graph::source_line_str(n->origin) + ")" : s;
}

/// True for an op computed at its operands' own points: elementwise, or a custom output (the
/// identity of its value, as detach is).
inline bool pointwise(OpKind op) { return graph::is_elementwise(op) || op == OpKind::CustomOutput; }

// ---------------------------------------------------------------- partitioning

/// Which nodes get a buffer of their own, and why. Decided from the outputs back:
/// each node learns which kernel consumes it (its owner) before it is decided, so
/// a value used only inside one kernel is computed there, and a reduction whose
/// result is only broadcast back over its input's rows joins the row kernel that
/// uses it (softmax, layernorm: reductions then a map over the same row).
class Partition {
public:
  Partition(const std::vector<const Node*>& outputs, const ScheduleOptions& opt) : opt_(opt) {
    for (const Node* o : outputs) outputs_.insert(o);
    // a realized value's history is not needed
    order_ = graph::value_order(outputs, [this](const Node* n) { return is_source(n); });
    for (const Node* n : order_)
      if (!is_source(n))
        for (const auto& in : graph::value_inputs(*n)) users_[in.get()].push_back(n);
    for (auto it = order_.rbegin(); it != order_.rend(); ++it) decide(*it);
  }
  /// Nodes in dependency order.
  const std::vector<const Node*>& order() const { return order_; }
  /// True when `n` is read from a buffer rather than recomputed inside its consumer.
  bool has_buffer(const Node* n) const { return is_source(n) || computed_.count(n); }
  /// True when a kernel must compute `n`.
  bool computed(const Node* n) const { return computed_.count(n) > 0; }
  /// True for a reduction computed inside the row kernel of its owner.
  bool absorbed(const Node* n) const { return absorbed_.count(n) > 0; }
  /// The row dims (reduced and mapped over) of a kernel root, empty when it has none.
  std::vector<int64_t> row_dims(const Node* root) const {
    auto it = row_dims_.find(root);
    return it == row_dims_.end() ? std::vector<int64_t>{} : it->second;
  }
  /// True when a kernel root's kernel has map loops (a row kernel: reductions, then stores per row element).
  bool has_map(const Node* root) const {
    return graph::op_category(root->op) != OpCategory::Reduce && row_dims_.count(root) > 0;
  }
  /// True when a kernel root's kernel computes a matmul (its own, or one it takes as an epilogue).
  bool has_matmul(const Node* root) const {
    return graph::op_category(root->op) == OpCategory::Contraction || matmul_of_.count(root) > 0;
  }
  /// True in unfused mode (one kernel per primitive op).
  bool unfused() const { return !opt_.fusion; }
  /// True for a node the realize asked for.
  bool is_output(const Node* n) const { return outputs_.count(n) > 0; }
  /// The nodes that read n (within what this schedule computes).
  const std::vector<const Node*>& users(const Node* n) const {
    static const std::vector<const Node*> none;
    auto it = users_.find(n);
    return it == users_.end() ? none : it->second;
  }
  /// The kernel root whose kernel computes n (n itself for a root), or null when n is computed
  /// inside several kernels (a view or leaf read by several).
  const Node* owner(const Node* n) const {
    auto it = owner_.find(n);
    return it == owner_.end() || it->second == several() ? nullptr : it->second;
  }
  /// True for a kernel root cut off its users' kernel by the depth or buffer bound.
  bool cut(const Node* root) const { return cut_.count(root) > 0; }
  /// Ops between a fused node and its kernel's root (0 for roots).
  int depth(const Node* n) const { return depth_.at(n); }
  /// The bound on a kernel's expression depth.
  static constexpr int kMaxFusedDepth = 256;
  /// Where each node is computed, and why, in the order decided (outputs first).
  std::vector<FusionDecision> decisions;
  /// Takes one unit of fusion fuel (ScheduleOptions::fuel); false when none is left.
  bool spend_fuel() const {
    if (opt_.fuel >= 0 && fuel_used_ >= opt_.fuel) return false;
    ++fuel_used_;
    return true;
  }
  /// Each kernel root and why it has a buffer of its own.
  std::unordered_map<const Node*, std::string> boundaries;

private:
  const ScheduleOptions& opt_;
  std::unordered_set<const Node*> outputs_;
  std::vector<const Node*> order_;
  std::unordered_map<const Node*, std::vector<const Node*>> users_;
  std::unordered_map<const Node*, const Node*> owner_; // kernel root that computes the node
  std::unordered_set<const Node*> computed_, absorbed_;
  std::unordered_map<const Node*, std::vector<int64_t>> row_dims_;
  std::unordered_set<const Node*> matmul_of_; // kernel roots that contain a matmul
  std::unordered_set<const Node*> needs_buffer_; // operands of matmuls (see buffer_matmul_operands)
  std::unordered_set<const Node*> attention_operands_; // operands of attention (see buffer_attention_operands)
  std::unordered_set<const Node*> sort_keys_;          // operands of argsorts (see buffer_sort_keys)
  std::unordered_map<const Node*, int> depth_;   // ops between a node and its kernel's root (0: the root)
  std::unordered_set<const Node*> cut_;          // roots cut by the depth or buffer bound
  mutable std::unordered_map<const Node*, bool> at_root_index_; // read_at_root_index(), once per node
  mutable int64_t fuel_used_ = 0;                // fusion decisions made (ScheduleOptions::fuel)
  // Buffers a kernel reads at most: a bounded kernel signature (CUDA's 4 KB of
  // arguments) and compile time. A concat joins a kernel only while the kernel reads at
  // most graph::build::kMaxConcatPieces buffers: each piece read from a buffer is a
  // guarded load per element, whose code costs LLVM far more than a plain load.
  static constexpr size_t kMaxKernelBuffers = 64;
  // Per kernel root, the nodes its kernel reads that are not (yet) fused into it: its
  // buffers once every node is decided (leaves computed in place are not counted).
  std::unordered_map<const Node*, std::unordered_set<const Node*>> reads_;
  // The kernels a node inlined into several kernels (a view read by several) is part of.
  std::unordered_map<const Node*, std::vector<const Node*>> kernels_of_;

  // True when n is read from its realized buffer. Decided once per node: another thread
  // may realize a shared node meanwhile, and the partition must not see it change
  // (a user realized between two looks left its operand without users).
  bool is_source(const Node* n) const {
    auto [it, first] = source_.try_emplace(n, false);
    if (first) it->second = n->realized() || n->op == OpKind::Input;
    return it->second;
  }
  mutable std::unordered_map<const Node*, bool> source_;
  static const Node* several() { return reinterpret_cast<const Node*>(uintptr_t{1}); }

  // The one kernel all users of n belong to, or several().
  const Node* users_owner(const Node* n) const {
    const Node* owner = nullptr;
    for (const Node* u : users_.at(n)) {
      auto it = owner_.find(u);
      const Node* o = it == owner_.end() ? several() : it->second;
      if (owner && owner != o) return several();
      owner = o;
    }
    return owner ? owner : several();
  }

  void materialize(const Node* n, const std::string& why) {
    computed_.insert(n);
    owner_[n] = n;
    boundaries[n] = why;
    decisions.push_back({FusionDecision::Kind::Kernel, n, n, why, {}});
  }

  // A fusion decision of n into kernel's kernel (kind Fuse), or into every kernel that reads it
  // (Recompute, kernel null); false (and n gets a kernel) when the fuel is spent.
  bool fuse(const Node* n, const Node* kernel, std::string why, FusionDecision::Kind kind = FusionDecision::Kind::Fuse) {
    if (!spend_fuel()) {
      materialize(n, "out of fusion fuel (KILN_FUEL=" + std::to_string(opt_.fuel) + ")");
      return false;
    }
    decisions.push_back({kind, n, kernel, std::move(why), {}});
    return true;
  }

  void decide(const Node* n) {
    if (is_source(n)) return; // inputs are bound when the plan runs
    // Its users are decided, so this does not depend on n's placement (an output has no users).
    const int depth = outputs_.count(n) ? 0 : fused_depth(n);
    decide_placement(n, depth);
    depth_[n] = computed_.count(n) ? 0 : depth;
    note_reads(n);
  }

  // An input that a kernel reading n's value would read from a buffer unless it fuses
  // it: anything but a leaf computed in place (a constant, arange, random numbers).
  bool reads_buffer(const Node* in) const { return graph::op_category(in->op) != OpCategory::Leaf || is_source(in); }

  // The kernels that would compute n inline: its users' kernel, or every kernel of its
  // users when they are several (views are recomputed in each kernel that reads them).
  std::vector<const Node*> inlined_into(const Node* n) const {
    const Node* owner = users_owner(n);
    if (owner != several()) return {owner};
    std::unordered_set<const Node*> seen;
    std::vector<const Node*> out;
    for (const Node* u : users_.at(n)) {
      auto it = owner_.find(u);
      if (it != owner_.end() && it->second != several()) {
        if (seen.insert(it->second).second) out.push_back(it->second);
        continue;
      }
      if (auto k = kernels_of_.find(u); k != kernels_of_.end())
        for (const Node* kernel : k->second)
          if (seen.insert(kernel).second) out.push_back(kernel);
    }
    return out;
  }

  // True when computing n inside the kernels that read it keeps each of them within
  // kMaxKernelBuffers buffers: n stops being one of their buffers, its inputs become ones.
  bool within_buffer_budget(const Node* n) const {
    const auto ins = graph::value_inputs(*n);
    if (!std::any_of(ins.begin(), ins.end(), [&](const auto& in) { return reads_buffer(in.get()); })) return true;
    for (const Node* kernel : inlined_into(n)) {
      auto it = reads_.find(kernel);
      size_t count = it == reads_.end() ? 0 : it->second.size() - it->second.count(n);
      std::unordered_set<const Node*> added;
      for (const auto& in : ins)
        if (reads_buffer(in.get()) && (it == reads_.end() || !it->second.count(in.get())) && added.insert(in.get()).second)
          ++count;
      if (count > (n->op == OpKind::Concat ? graph::build::kMaxConcatPieces : kMaxKernelBuffers)) return false;
    }
    return true;
  }

  // Records what n's placement adds to the buffers each kernel reads (see reads_).
  void note_reads(const Node* n) {
    std::vector<const Node*> kernels{n};
    const auto ins = graph::value_inputs(*n);
    if (!computed_.count(n)) {
      if (!std::any_of(ins.begin(), ins.end(), [&](const auto& in) { return reads_buffer(in.get()); }))
        return; // nothing to charge (a leaf, or a view of one)
      kernels = inlined_into(n);
      if (owner_.at(n) == several()) kernels_of_[n] = kernels;
    }
    for (const Node* kernel : kernels) {
      auto& reads = reads_[kernel];
      if (kernel != n) reads.erase(n);
      for (const auto& in : ins)
        if (reads_buffer(in.get())) reads.insert(in.get());
    }
  }

  // How many expression levels a node adds above its inputs: a concat selects among its
  // pieces with a chain of wheres.
  static int span(const Node* n) { return n->op == OpKind::Concat ? std::max<int>(1, static_cast<int>(n->inputs.size()) - 1) : 1; }

  // How deep inside its kernel's expression n would sit if fused into the kernel of
  // its users: 1 + the deepest of its users there (of its users in any kernel, when they are
  // in several: n is then recomputed in each).
  int fused_depth(const Node* n) const {
    const Node* owner = users_owner(n);
    int d = 0;
    for (const Node* u : users_.at(n))
      if (auto it = owner_.find(u); it != owner_.end() && (owner == several() || it->second == owner))
        d = std::max(d, depth_.at(u) + span(u) - 1);
    return d + 1;
  }

  // depth: fused_depth(n).
  void decide_placement(const Node* n, int depth) {
    if (graph::op_category(n->op) == OpCategory::Contraction) buffer_matmul_operands(n);
    if (graph::op_category(n->op) == OpCategory::Attention) buffer_attention_operands(n);
    if (n->op == OpKind::Argsort) buffer_sort_keys(n);
    if (outputs_.count(n)) return materialize(n, "requested output");
    // The code generators walk a kernel's expressions recursively: a long chain of
    // ops (an unrolled loop) is cut into kernels of bounded depth.
    if (graph::op_category(n->op) != OpCategory::Leaf && users_owner(n) != several() && depth > kMaxFusedDepth)
      return cut_.insert(n), materialize(n, "not fusing: the kernel would nest more than " + std::to_string(kMaxFusedDepth) +
                                " ops deep");
    // A wide graph (a long concat, a sum of many leaves) is cut into kernels that read a
    // bounded number of buffers.
    if (!within_buffer_budget(n))
      return cut_.insert(n), materialize(n, "not fusing: the kernel would read more than " +
                                std::to_string(n->op == OpKind::Concat ? graph::build::kMaxConcatPieces : kMaxKernelBuffers) +
                                " buffers");
    if (needs_buffer_.count(n))
      return materialize(n, "a matmul operand: computed once rather than once per output row or column");
    if (attention_operands_.count(n)) return materialize(n, "an attention operand: read from a buffer of its own");
    if (sort_keys_.count(n)) return materialize(n, "an argsort's keys: read from a buffer of its own");
    switch (graph::op_category(n->op)) {
    case OpCategory::Reduce: return decide_reduce(n);
    case OpCategory::Contraction: return decide_matmul(n);
    case OpCategory::Scan: // its elementwise producers fuse into its loop as its loads (decide_elementwise)
      return materialize(n, "a scan: sequential along its dim, a kernel of its own (scan form)");
    case OpCategory::Attention: return materialize(n, "attention: a kernel of its own (the attention form)");
    case OpCategory::Custom: owner_[n] = users_owner(n); return; // the identity of its value, as detach
    case OpCategory::Leaf:
    case OpCategory::Movement: owner_[n] = users_owner(n); return; // index arithmetic inside consumers
    case OpCategory::Unary:
    case OpCategory::Binary:
    case OpCategory::Ternary: return decide_elementwise(n);
    }
  }

  void decide_elementwise(const Node* n) {
    if (n->op == OpKind::Detach) { // an identity
      owner_[n] = users_owner(n);
      return;
    }
    if (!opt_.fusion) return materialize(n, "unfused mode (KILN_FUSION=0)");
    const Node* owner = users_owner(n);
    if (owner == several()) {
      if (const std::string why = why_not_recomputed(n); !why.empty())
        return materialize(n, "not fusing: its users are in more than one kernel, and " + why);
      if (!fuse(n, nullptr,
                "cheap, and reading its operands costs the kernels of its users less memory traffic than storing it "
                "and reading it back",
                FusionDecision::Kind::Recompute))
        return;
      owner_[n] = several();
      return;
    }
    // Read through a broadcast or at several places, a fused node is computed again at every point
    // it is read at: worth it for a few ops, not for a subexpression (col2im's taps under a pooling's
    // gradient were computed 4 times a point: 70 ms of the CNN step's backward).
    if (const int64_t times = std::llround(recomputed_in_one_kernel(n)); times >= 2)
      if (const int cost = inline_cost(n); cost >= kRecomputeCost)
        return materialize(n, "not fusing: its kernel reads it broadcast or at several places, " +
                                  std::to_string(times) + " times a point, and it costs " + std::to_string(cost) +
                                  " ops or more a point");
    // A scan of fewer columns than one block of its kernel runs them one element after another, in
    // scalar code on one thread: work fused into its loop runs there too, where a kernel of its own
    // runs vectorized and in parallel (histc's bins, into a one-column scatter: 10.8 ms fused, 1.4 ms
    // for the scatter after a kernel computing them).
    if (graph::op_category(owner->op) == OpCategory::Scan && scan_columns(owner) < kScanColumns)
      if (const int cost = inline_cost(n); cost >= kRecomputeCost)
        return materialize(n, "not fusing: its user is a scan of fewer columns (" +
                                  std::to_string(scan_columns(owner)) + ") than a block (" +
                                  std::to_string(kScanColumns) + "), run in scalar code on one thread, and it costs " +
                                  std::to_string(cost) + " ops or more a point");
    if (!fuse(n, owner, "its users are all in that kernel")) return;
    owner_[n] = owner;
  }

  // The columns of scan node s: its points off its dim, which its kernel runs side by side.
  static int64_t scan_columns(const Node* s) {
    const int64_t steps = s->shape[static_cast<size_t>(s->attrs.ints.at(0))];
    return steps == 0 ? 0 : graph::numel(s->shape) / steps;
  }

  // Recomputing a shared value (rematerialization): an elementwise value read by several kernels
  // is computed again inside each of them instead of being stored by one and read back by the
  // others, where it is one cheap op and the operands this adds to those kernels' reads move fewer
  // bytes than the store and the reads it saves. (A GELU's saved x / sqrt(2) and x / 2: its
  // backward reads x once instead of both.) The bits are the same either way; the unfused mode
  // stores every value. Empty when n is recomputed, else why not.
  std::string why_not_recomputed(const Node* n) const {
    if (!cheap_to_recompute(n->op)) return "it is not one cheap op (add, mul, compare, select...)";
    if (reads_random(n)) return "it reads random numbers, which each kernel would generate again";
    if (fused_depth(n) > kMaxFusedDepth) return "recomputing it would nest more than " + std::to_string(kMaxFusedDepth) + " ops deep";
    if (recomputed(n) >= 2 && inline_cost(n) >= kRecomputeCost)
      return "a kernel reads it broadcast, and it costs " + std::to_string(kRecomputeCost) + " ops or more a point";
    const std::vector<const Node*> kernels = inlined_into(n);
    const int64_t saved = bytes_of(n) * static_cast<int64_t>(1 + kernels.size()); // its store, and a read a kernel
    int64_t added = 0;
    std::unordered_set<const Node*> operands;
    for (const auto& in : graph::value_inputs(*n)) {
      const int64_t bytes = read_bytes(in.get());
      if (!operands.insert(in.get()).second || bytes == 0) continue;
      for (const Node* kernel : kernels)
        if (auto reads = reads_.find(kernel); reads == reads_.end() || !reads->second.count(in.get())) added += bytes;
      // An operand only n reads would be computed inside n's kernel; recomputed, n needs it stored
      // (a conv's bias add on its GEMM: the GEMM would store the product instead of the sum),
      // unless it is cheap to recompute as well (its own decision then weighs its operands).
      const auto& readers = users_.at(in.get());
      if (!is_source(in.get()) && !(cheap_to_recompute(in->op) && !reads_random(in.get())) &&
          std::all_of(readers.begin(), readers.end(), [&](const Node* u) { return u == n; }))
        added += bytes_of(in.get());
    }
    if (added >= saved)
      return "reading its operands in those " + std::to_string(kernels.size()) + " kernels (" + std::to_string(added) +
             " bytes) costs no less than storing it and reading it back (" + std::to_string(saved) + ")";
    return "";
  }

  // Elementwise ops costing about as much as the load they would replace (no division, no math
  // function, no random numbers). A list, not a switch: an op added to ops.def is not cheap until
  // it is listed here, and needs no change in fusion (README, "Adding an op").
  static bool cheap_to_recompute(OpKind op) {
    static constexpr OpKind kCheap[] = {OpKind::Neg, OpKind::Abs, OpKind::Relu, OpKind::Cast, OpKind::LogicalNot,
                                        OpKind::Add, OpKind::Sub, OpKind::Mul, OpKind::Maximum, OpKind::Minimum,
                                        OpKind::Eq, OpKind::Ne, OpKind::Lt, OpKind::Le, OpKind::Gt, OpKind::Ge,
                                        OpKind::LogicalAnd, OpKind::LogicalOr, OpKind::Where};
    return std::find(std::begin(kCheap), std::end(kCheap), op) != std::end(kCheap);
  }

  // True when an operand of n is random numbers (through views).
  static bool reads_random(const Node* n) {
    for (const auto& in : graph::value_inputs(*n))
      if (const OpKind op = below_views(in.get())->op; op == OpKind::Rand || op == OpKind::Randn) return true;
    return false;
  }

  // The bytes a kernel reads for operand `in` (a view reads its base; a leaf computed in place, none).
  int64_t read_bytes(const Node* in) const {
    const Node* base = below_views(in);
    return reads_buffer(base) ? bytes_of(base) : 0;
  }

  static int64_t bytes_of(const Node* n) { return static_cast<int64_t>(n->bytes()); }

  // Ops a point (inline_cost) from which a node read through a broadcast gets a buffer.
  static constexpr int kRecomputeCost = 8;

  // How many times a kernel that fuses n computes each of its points: the most any user
  // broadcasts it (an Expand to more points), through the views on the way.
  int64_t recomputed(const Node* n) const {
    int64_t most = 1;
    const auto users = users_.find(n);
    if (users == users_.end()) return most; // read by no kernel (an output view)
    for (const Node* u : users->second) {
      if (u->op == OpKind::Expand && n->numel() > 0) most = std::max(most, u->numel() / n->numel() * recomputed(u));
      else if (u->op == OpKind::Reshape || u->op == OpKind::Permute || u->op == OpKind::Slice) most = std::max(most, recomputed(u));
      else if (u->op == OpKind::Unfold) // overlapping windows read each point ceil(size / step) times
        most = std::max(most, (u->attrs.ints[1] + u->attrs.ints[2] - 1) / u->attrs.ints[2] * recomputed(u));
    }
    return most;
  }

  // The same where all of n's users are in one kernel, which then computes n once at each place it
  // reads it: each read through a movement op counts the share of n's points it reads (a slice part
  // of them, a broadcast or overlapping windows more than all, a pad or a concat all of them once),
  // times how often that op's own points are computed; users reading n where it is (elementwise, and a
  // gather reading n as its index, at the gather's own points) count once together (lowering computes a
  // node once per place it is read at), as often as the most computed of them. So x[1:] + x[:-1]
  // computes x twice a point, a 2x2 pooling's four strided slices once, and a binary search's probe
  // position, read by its gather and by the next position, once. (With recomputed()'s most of the reads, a
  // scan written as log2(n) steps of shifted slices fused into one kernel whose expression doubled with
  // each step: 2^12 copies of the first step for 4,096 values, which did not finish.)
  double recomputed_in_one_kernel(const Node* n) const {
    const auto users = users_.find(n);
    if (users == users_.end() || n->numel() == 0) return 1; // read by no kernel (an output view)
    double moved = 0, in_place = 0;
    std::unordered_set<const Node*> seen;
    for (const Node* u : users->second) {
      if (!seen.insert(u).second) continue; // a user reading n twice (x * x) reads one place
      if (graph::op_category(u->op) != OpCategory::Movement) {
        in_place = std::max(in_place, 1.0);
        continue;
      }
      if (u->op == OpKind::Gather && u->inputs[1].get() == n) { // the index: read at the gather's points
        in_place = std::max(in_place, recomputed_in_one_kernel(u));
        if (u->inputs[0].get() != n) continue;
      }
      const bool places_all = u->op == OpKind::Pad || u->op == OpKind::Concat;
      const double share = places_all ? 1.0 : static_cast<double>(u->numel()) / static_cast<double>(n->numel());
      moved += share * recomputed_in_one_kernel(u);
    }
    return std::max(1.0, moved + in_place);
  }

  // The arithmetic ops (and guarded loads: pads) a point of n costs when fused with what it reads,
  // up to what has a buffer of its own anyway (sources, reductions, matmuls, scans); at most
  // kRecomputeCost (enough to decide).
  int inline_cost(const Node* n) const {
    std::unordered_set<const Node*> seen;
    std::vector<const Node*> todo{n};
    int cost = 0;
    while (!todo.empty() && cost < kRecomputeCost) {
      const Node* x = todo.back();
      todo.pop_back();
      if (!seen.insert(x).second || is_source(x) || computed_.count(x)) continue;
      switch (graph::op_category(x->op)) {
      case OpCategory::Unary: case OpCategory::Binary: case OpCategory::Ternary:
        cost += x->op == OpKind::Detach ? 0 : 1;
        break;
      case OpCategory::Movement:
        cost += x->op == OpKind::Pad || x->op == OpKind::Concat || x->op == OpKind::Gather ? 1 : 0;
        break;
      case OpCategory::Custom: break;
      case OpCategory::Leaf: case OpCategory::Reduce: case OpCategory::Contraction: case OpCategory::Scan:
      case OpCategory::Attention:
        continue; // computed by a kernel of its own (or a constant)
      }
      for (const auto& in : graph::value_inputs(*x)) todo.push_back(in.get());
    }
    return cost;
  }

  void decide_reduce(const Node* r) {
    if (!opt_.fusion) return materialize(r, "unfused mode (KILN_FUSION=0)");
    const std::string why = why_not_absorbed(r);
    if (!why.empty()) return materialize(r, "reductions end a kernel unless fused into a row kernel; not fusing: " + why);
    const Node* owner = users_owner(r);
    if (!fuse(r, owner, "a row reduction whose result is only broadcast back over its rows")) return;
    absorbed_.insert(r);
    owner_[r] = owner;
    row_dims_[owner] = reduced_row_dims(r);
  }

  // A matmul takes its elementwise users into its kernel as an epilogue (bias,
  // activation, residual) when they all belong to one kernel over the same shape.
  // A matmul reads each operand element once per output row or column, so its
  // operands must be cheap to index: views (reshape, permute, expand, slice) of a
  // buffer. The first node below such a view chain that is anything else (pad,
  // concat, arithmetic) is computed into a buffer of its own.
  // An operand that concatenates views of a pad, or unfolds one (im2col's window taps), also
  // gets the pad in a buffer: each tap is then a plain load rather than a guarded one. On the CPU
  // a right operand that unfolds is read in place (implicit_im2col).
  void buffer_matmul_operands(const Node* m) {
    for (const auto& in : m->inputs) {
      const Node* n = below_views(in.get());
      if (is_source(n) || graph::op_category(n->op) == OpCategory::Leaf) continue;
      if (implicit_im2col(m, in.get(), n)) continue;
      needs_buffer_.insert(n);
      std::vector<const Node*> pieces;
      if (n->op == OpKind::Concat)
        for (const auto& piece : n->inputs) pieces.push_back(piece.get());
      if (const Node* windows = unfolded(n); windows != n) pieces.push_back(windows);
      for (const Node* piece : pieces)
        if (const Node* p = below_views(piece); p->op == OpKind::Pad && !is_source(p)) needs_buffer_.insert(p);
    }
  }

  // The implicit GEMM of a convolution on the CPU: the right operand (in, at n below its views)
  // unfolds a buffer (im2col's windows) and is read in place, by the GEMM's gather pack, where its
  // offsets split into a row term and a column term (llvm_gemm.cpp): only what the windows unfold
  // gets a buffer (the padded input), not the column matrix, kernel size times larger. CUDA's GEMM
  // reads its operands' tiles element by element: there the columns stay in a buffer.
  bool implicit_im2col(const Node* m, const Node* in, const Node* n) {
    if (opt_.target.kind != Target::Kind::CPU || in != m->inputs[1].get() || n->op != OpKind::Unfold) return false;
    const Node* windows = unfolded(n);
    if (!is_source(windows) && graph::op_category(windows->op) != OpCategory::Leaf) needs_buffer_.insert(windows);
    return true;
  }

  // What a chain of unfolds (and views between them) starting at n unfolds; n itself if no unfold.
  static const Node* unfolded(const Node* n) {
    while (n->op == OpKind::Unfold) n = below_views(n->inputs[0].get());
    return n;
  }

  // The attention kernel reads its operands as contiguous buffers of their own shapes
  // (AttentionSpec), each element many times: every operand not in memory gets a buffer.
  void buffer_attention_operands(const Node* a) {
    for (const auto& in : a->inputs)
      if (!is_source(in.get())) attention_operands_.insert(in.get());
  }

  // An argsort reads its keys from a buffer (a view of one is index arithmetic): its CUDA kernel
  // reads each key once per key of its column, so a fused producer would run that often too.
  void buffer_sort_keys(const Node* s) {
    const Node* x = s->inputs[0].get();
    if (!is_source(below_views(x))) sort_keys_.insert(x);
  }

  static const Node* below_views(const Node* n) {
    while (n->op == OpKind::Reshape || n->op == OpKind::Permute || n->op == OpKind::Expand || n->op == OpKind::Slice)
      n = n->inputs[0].get();
    return n;
  }

  void decide_matmul(const Node* m) {
    if (!opt_.fusion) return materialize(m, "unfused mode (KILN_FUSION=0)");
    const std::string why = why_no_epilogue(m);
    if (!why.empty()) return materialize(m, "matmul kernel; no epilogue fused: " + why);
    const Node* owner = users_owner(m);
    if (!fuse(m, owner, "a matmul whose elementwise users become its epilogue")) return;
    absorbed_.insert(m);
    owner_[m] = owner;
    matmul_of_.insert(owner);
  }

  std::string why_no_epilogue(const Node* m) const {
    const Node* owner = users_owner(m);
    if (owner == several()) return "its users are in more than one kernel";
    if (!pointwise(owner->op) || owner->shape != m->shape) return "its user is not elementwise over its shape";
    if (row_dims_.count(owner) || matmul_of_.count(owner)) return "its user's kernel already has a reduction";
    for (const Node* u : users_.at(m))
      if (!pointwise(u->op)) return "it is used through a movement op";
    if (!read_at_root_index(m, owner)) return "its kernel reads it through a movement op, at shifted indices";
    return "";
  }

  // The reduced dims that have extent > 1 in the reduction's input.
  static std::vector<int64_t> reduced_row_dims(const Node* r) {
    std::vector<int64_t> d;
    for (int64_t k : r->attrs.ints)
      if (r->inputs[0]->shape[k] != 1) d.push_back(k);
    return d;
  }

  // True when n is read inside the kernel of `owner` only at that kernel's own index:
  // through elementwise ops up to the root, or as the input of a reduction that is the
  // root or fused into its row kernel (its reduced dims are the row's). A movement op on
  // the way (a permute, a slice, a gather) reads it at other points, where a reduction
  // or a matmul fused into the kernel would not be at hand, so such a reduction or
  // matmul keeps a buffer (decided here, so that lowering never finds out).
  bool read_at_root_index(const Node* n, const Node* owner) const {
    if (auto it = at_root_index_.find(n); it != at_root_index_.end()) return it->second;
    bool ok = true;
    for (const Node* u : users_of(n)) {
      const auto o = owner_.find(u);
      const bool inside = u == owner || (o != owner_.end() && o->second == owner);
      const bool reduction_input =
          graph::op_category(u->op) == OpCategory::Reduce && (u == owner || absorbed_.count(u) > 0);
      ok = ok && inside &&
           (reduction_input || (pointwise(u->op) && u->shape == n->shape &&
                                (u == owner || read_at_root_index(u, owner))));
    }
    return at_root_index_[n] = ok;
  }

  // True when every use of the reduction r (or of an elementwise op of r's shape on the
  // way) is an Expand back to `shape` read at the kernel's own index.
  bool expanded_at_root_index(const Node* r, const Node* owner) const {
    for (const Node* u : users_of(r))
      if (u->op == OpKind::Expand ? !read_at_root_index(u, owner) : !expanded_at_root_index(u, owner)) return false;
    return true;
  }

  const std::vector<const Node*>& users_of(const Node* n) const {
    static const std::vector<const Node*> none;
    const auto it = users_.find(n);
    return it == users_.end() ? none : it->second;
  }

  // True when every use of n goes back to the full `shape` through an Expand, with
  // only elementwise ops of n's own shape in between.
  bool broadcast_back(const Node* n, const graph::Shape& shape) const {
    for (const Node* u : users_.at(n)) {
      if (u->op == OpKind::Expand && u->shape == shape) continue;
      if (!pointwise(u->op) || u->shape != n->shape || computed_.count(u) || !broadcast_back(u, shape))
        return false;
    }
    return true;
  }

  std::string why_not_absorbed(const Node* r) const {
    if (r->op != OpKind::Sum && r->op != OpKind::Max && r->op != OpKind::Min) return "arg-reductions are not row-fused";
    const Node* owner = users_owner(r);
    if (owner == several()) return "its users are in more than one kernel";
    const graph::Shape& x = r->inputs[0]->shape;
    const bool owner_is_reduce = graph::op_category(owner->op) == OpCategory::Reduce;
    if (graph::op_category(owner->op) == OpCategory::Contraction) return "its user is a matmul";
    if (graph::op_category(owner->op) == OpCategory::Scan) return "its user is a scan";
    if (graph::op_category(owner->op) == OpCategory::Attention) return "its user is attention";
    if ((owner_is_reduce ? owner->inputs[0]->shape : owner->shape) != x) return "its user iterates over another shape";
    if (!broadcast_back(r, x)) return "its result is not only broadcast back over its rows";
    if (!expanded_at_root_index(r, owner)) return "the row kernel reads it through a movement op, at other rows";
    const std::vector<int64_t> dims = reduced_row_dims(r);
    if (dims.empty()) return "it reduces nothing";
    if (matmul_of_.count(owner)) return "its user's kernel already has a matmul";
    if (auto it = row_dims_.find(owner); it != row_dims_.end() && it->second != dims)
      return "the row kernel already reduces other dims";
    if (owner_is_reduce && reduced_row_dims(owner) != dims) return "its user reduces other dims";
    return "";
  }
};

// ---------------------------------------------------------------- multi-output kernels

/// The extents of a shape's dims other than 1: two kernels iterate over the same domain
/// points when these are equal (size-1 dims are no loop).
inline std::vector<int64_t> loop_extents(const graph::Shape& shape) {
  std::vector<int64_t> e;
  for (int64_t d : shape)
    if (d != 1) e.push_back(d);
  return e;
}

/// Which kernel roots one kernel stores together (see schedule()). A root joins the kernel of
/// an earlier root (its leader) when both run over the same domain points, everything it reads
/// is computed before that kernel runs, and it reads the kernel's other values only at the
/// point being computed (where they are in registers rather than in memory yet).
class Grouping {
public:
  Grouping(const Partition& part) : part_(part) {
    for (const Node* n : part.order())
      if (part.computed(n)) place(n);
  }
  /// Kernels in launch order, each as its roots, the leader first.
  std::vector<std::vector<const Node*>> kernels;
  /// True for a root that needs no buffer: not asked for, and read only by the other values of its
  /// kernel (a reduction whose reshape is the output; a matmul whose users all joined its kernel).
  bool internal(const Node* root) const {
    if (part_.is_output(root)) return false;
    const size_t g = group_of_.at(root);
    if (groups_[g].roots.size() == 1) return false;
    for (const Node* u : part_.users(root)) {
      const Node* o = part_.owner(u);
      if (!o || !group_of_.count(o) || group_of_.at(o) != g || o == root) return false;
    }
    return true;
  }
  /// The roots stored by another root's kernel, and why.
  std::vector<FusionDecision> decisions;

private:
  // How a kernel root's own kernel computes it.
  enum class Kind : uint8_t {
    Plain,     // elementwise and movement ops only: one value per domain point
    Reduction, // one reduction (nothing fused into it but its operand's elementwise ops)
    Other,     // row kernels, matmuls, scans: they lead kernels but join none
  };
  // What a root's own kernel reads: buffers, those read at other points than the root's own,
  // and the expression depth each buffer read at its own points is read at; the depth of the
  // root's expression.
  struct Reads {
    std::unordered_set<const Node*> buffers, shifted;
    std::unordered_map<const Node*, int> own_depth;
    int depth = 0;
    // An empty reduction or matmul (a structural zero extent): LLVM folds its value to a constant,
    // and NaNs folded at compile time can differ in sign from the hardware's, so what reads that
    // value reads it from memory, as in unfused mode.
    bool empty = false;
  };
  struct Kernel {
    std::vector<const Node*> roots;
    std::unordered_set<const Node*> reads; // buffers read, not its own roots
    bool sealed = false;                   // takes no other roots (Reads::empty)
  };
  // Joined kernels read at most this many buffers (as Partition's bound).
  static constexpr size_t kMaxBuffers = 64;
  // Independent values join a kernel only over small domains, where a launch costs more than the work.
  static constexpr int64_t kMaxHorizontalPoints = int64_t{1} << 15;
  // Independent values look this many kernels back for one to join.
  static constexpr size_t kHorizontalWindow = 8;

  const Partition& part_;
  std::vector<Kernel> groups_;
  std::unordered_map<const Node*, size_t> group_of_;
  std::unordered_map<const Node*, int> value_depth_; // a stored root's expression depth in its kernel

  Kind kind(const Node* root) const {
    if (part_.has_map(root) || part_.has_matmul(root) || !part_.row_dims(root).empty() || part_.cut(root) ||
        graph::numel(root->shape) == 0 || graph::op_category(root->op) == OpCategory::Scan ||
        graph::op_category(root->op) == OpCategory::Attention)
      return Kind::Other;
    return graph::op_category(root->op) == OpCategory::Reduce ? Kind::Reduction : Kind::Plain;
  }

  // True for a reduction over its input's innermost dim (contiguous rows).
  static bool along_rows(const Node* r) {
    const auto& dims = r->attrs.ints;
    const int64_t last = static_cast<int64_t>(r->inputs[0]->shape.size()) - 1;
    return std::find(dims.begin(), dims.end(), last) != dims.end();
  }

  // True when the edge from n to its input `in` keeps the index: an elementwise op's operand
  // (same shape), or a reshape that only adds or drops size-1 dims.
  static bool keeps_points(const Node* n, const Node* in) {
    if (pointwise(n->op)) return in->shape == n->shape;
    return n->op == OpKind::Reshape && loop_extents(in->shape) == loop_extents(n->shape);
  }

  // The buffers root's kernel reads; `simple` turns false where it computes an absorbed node.
  Reads reads_of(const Node* root, bool& simple) const {
    Reads r;
    std::unordered_set<const Node*> seen_own, seen_shifted;
    const bool own_root = graph::op_category(root->op) != OpCategory::Reduce && graph::op_category(root->op) != OpCategory::Scan;
    struct Edge {
      const Node* node;
      bool own;  // read at the root's own points
      int depth; // of the reader, +1
    };
    std::vector<Edge> todo;
    for (const auto& in : graph::value_inputs(*root)) todo.push_back({in.get(), own_root && keeps_points(root, in.get()), 1});
    r.empty = graph::numel(root->shape) == 0;
    while (!todo.empty()) {
      const Edge e = todo.back();
      todo.pop_back();
      r.depth = std::max(r.depth, e.depth);
      r.empty = r.empty || graph::numel(e.node->shape) == 0;
      if (part_.has_buffer(e.node)) {
        r.buffers.insert(e.node);
        if (!e.own) r.shifted.insert(e.node);
        else r.own_depth[e.node] = std::max(r.own_depth[e.node], e.depth);
        continue;
      }
      if (!(e.own ? seen_own : seen_shifted).insert(e.node).second) continue;
      if (part_.absorbed(e.node)) simple = false;
      const int d = part_.depth(e.node) + 1;
      for (const auto& in : graph::value_inputs(*e.node)) todo.push_back({in.get(), e.own && keeps_points(e.node, in.get()), d});
    }
    return r;
  }

  void place(const Node* root) {
    if (join_attention_sibling(root)) return;
    bool simple = true;
    const Kind k = kind(root);
    const Reads r = part_.unfused() ? Reads{} : reads_of(root, simple);
    if (k != Kind::Other && simple && !r.empty && !part_.unfused())
      if (join(root, k, r)) return;
    group_of_[root] = groups_.size();
    value_depth_[root] = r.depth;
    // an attention kernel stores its output only (its form has no other stores)
    groups_.push_back({{root}, r.buffers, r.empty || graph::op_category(root->op) == OpCategory::Attention});
    kernels.push_back({root});
  }

  // Joins an attention root to the kernel of a sibling (the same operands and attrs, both forward or
  // both backward): an Attention node and its AttentionLse are one forward kernel that stores both,
  // AttentionGrad nodes of different gradients one backward kernel that computes the scores and
  // weights once for dq, dk and dv. Not in unfused mode (one kernel per op); false when there is no sibling.
  bool join_attention_sibling(const Node* root) {
    if (graph::op_category(root->op) != OpCategory::Attention || part_.unfused()) return false;
    const bool backward = root->op == OpKind::AttentionGrad;
    for (size_t g = groups_.size(); g-- > 0;) {
      const Node* leader = groups_[g].roots[0];
      if (graph::op_category(leader->op) != OpCategory::Attention || (leader->op == OpKind::AttentionGrad) != backward ||
          leader->inputs != root->inputs || leader->attrs.f0 != root->attrs.f0 || leader->attrs.i0 != root->attrs.i0 ||
          leader->attrs.f1 != root->attrs.f1 || leader->attrs.ints != root->attrs.ints || // the dropout
          !part_.spend_fuel())
        continue;
      decisions.push_back({FusionDecision::Kind::Store, root, leader,
                           backward ? "a sibling gradient of the same attention: one backward kernel"
                                    : "the row statistics of the same attention: one forward kernel",
                           {}});
      groups_[g].roots.push_back(root);
      value_depth_[root] = 0;
      group_of_[root] = g;
      kernels[g].push_back(root);
      return true;
    }
    return false;
  }

  // Joins root to the kernel it reads at its own points, or else (small and independent) to a
  // recent kernel over the same points; false when none qualifies.
  bool join(const Node* root, Kind k, const Reads& r) {
    // the latest kernel computing something root reads: root cannot run before it
    size_t ready = 0;
    bool reads_computed = false;
    for (const Node* b : r.buffers)
      if (auto it = group_of_.find(b); it != group_of_.end()) ready = std::max(ready, it->second), reads_computed = true;
    const int64_t points = graph::numel(root->shape);
    for (size_t g = groups_.size(); g-- > 0;) {
      if (reads_computed && g < ready) break;
      const bool reads_it = reads_computed && g == ready;
      if (!reads_it && groups_.size() - g > kHorizontalWindow) {
        if (!reads_computed) break;
        g = ready + 1; // on to the kernel it reads
        continue;
      }
      // a large independent value joins only a kernel reading the same data (Adam's m and v
      // updates both read the gradient): one pass over it instead of two
      if (!reads_it && points > kMaxHorizontalPoints && !shares_reads(groups_[g], r)) continue;
      if (!fits(groups_[g], root, k, r, g)) continue;
      if (!part_.spend_fuel()) {
        decisions.push_back({FusionDecision::Kind::Kernel, root, root,
                             "not stored with the kernel for " + describe(groups_[g].roots[0]) + ": out of fusion fuel",
                             {}});
        return false;
      }
      decisions.push_back({FusionDecision::Kind::Store, root, groups_[g].roots[0],
                           k == Kind::Reduction ? "a sibling reduction over the same rows"
                           : reads_it           ? "it reads that kernel's values at their own points"
                           : shares_reads(groups_[g], r) ? "a value over the same points reading the same data"
                                                         : "an independent value over the same points",
                           {}});
      groups_[g].roots.push_back(root);
      value_depth_[root] = joined_depth(r, g);
      for (const Node* b : r.buffers)
        if (!group_of_.count(b) || group_of_.at(b) != g) groups_[g].reads.insert(b);
      group_of_[root] = g;
      kernels[g].push_back(root);
      return true;
    }
    return false;
  }

  // True when root reads, at its own points, a buffer that kernel g reads too.
  static bool shares_reads(const Kernel& g, const Reads& r) {
    for (const Node* b : r.buffers)
      if (!r.shifted.count(b) && g.reads.count(b)) return true;
    return false;
  }

  // The depth of root's expression in kernel g: a value of g it reads is its expression there.
  int joined_depth(const Reads& r, size_t g) const {
    int depth = r.depth;
    for (const auto& [b, at] : r.own_depth)
      if (auto it = group_of_.find(b); it != group_of_.end() && it->second == g) depth = std::max(depth, at + value_depth_.at(b));
    return depth;
  }

  bool fits(const Kernel& g, const Node* root, Kind k, const Reads& r, size_t index) const {
    const Node* leader = g.roots[0];
    const Kind lk = kind(leader);
    if (g.sealed || graph::op_category(leader->op) == OpCategory::Scan) return false; // a scan kernel stores one value
    if (loop_extents(leader->shape) != loop_extents(root->shape)) return false;
    // reductions join reduction kernels only (a matmul's loops have one reduction; an
    // elementwise kernel keeps its vectorized loop over points), and only sums along rows:
    // two strided column reductions in one loop measured slower than apart (bias gradients)
    if (k == Kind::Reduction && (lk != Kind::Reduction || !along_rows(root) || !along_rows(leader))) return false;
    size_t extra = 0;
    for (const Node* b : r.buffers) {
      auto it = group_of_.find(b);
      if (it != group_of_.end() && it->second == index) { // a value of this kernel
        if (k != Kind::Plain || r.shifted.count(b)) return false;
        continue;
      }
      if (it != group_of_.end() && it->second > index) return false; // computed after it
      if (!g.reads.count(b)) ++extra;
    }
    return g.reads.size() + extra + g.roots.size() + 1 <= kMaxBuffers && joined_depth(r, index) <= Partition::kMaxFusedDepth;
  }
};

/// The fusion pass's result: the partition and the kernels' roots.
struct Fusion {
  Partition partition; ///< which nodes are kernel roots, and what each kernel computes inline
  Grouping groups;     ///< the roots each kernel stores, in launch order

  /// Runs the pass over what computing `outputs` needs.
  Fusion(const std::vector<const Node*>& outputs, const ScheduleOptions& options)
      : partition(outputs, options), groups(partition) {}
  Fusion(const Fusion&) = delete; // groups refers to partition
  Fusion& operator=(const Fusion&) = delete;
};

} // namespace kiln::codegen::fusion
