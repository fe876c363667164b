#pragma once
/// \file api.h
/// The runtime as the frontend sees it: realizing nodes, plans held as opaque handles,
/// executing a plan with new bindings and random seeds (compile()'s replay), and the picture
/// of a schedule. It includes no codegen/ header: kernels, schedules and the JIT stay behind
/// runtime/executor.h, which defines Plan and the rest for the runtime itself, tests and
/// benchmarks. The frontend's other runtime headers (storage.h, observe.h, comm.h) are free of
/// codegen/ too; the ctest `frontend_includes` checks every frontend translation unit.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "graph/node.h"

namespace kiln::runtime {

/// A map keyed by nodes, held as a vector sorted by address: the maps of one execution hold a
/// few to a few hundred entries, and a node-based hash map's allocation per entry cost a replay of
/// small kernels more than all its lookups (bench `Replay/overhead`).
template <class V> class NodeMap {
public:
  using value_type = std::pair<const graph::Node*, V>;
  using iterator = typename std::vector<value_type>::iterator;
  using const_iterator = typename std::vector<value_type>::const_iterator;

  NodeMap() = default;
  /// The entries of `init`; a key given twice keeps its last value.
  NodeMap(std::initializer_list<value_type> init) {
    for (const value_type& e : init) (*this)[e.first] = e.second;
  }
  /// The value of `n`, inserted value-initialized if absent.
  V& operator[](const graph::Node* n) {
    auto it = lower_bound(n);
    if (it == items_.end() || it->first != n) it = items_.emplace(it, n, V{});
    return it->second;
  }
  /// The entry of `n`, or end().
  iterator find(const graph::Node* n) {
    auto it = lower_bound(n);
    return it != items_.end() && it->first == n ? it : items_.end();
  }
  /// The entry of `n`, or end().
  const_iterator find(const graph::Node* n) const { return const_cast<NodeMap*>(this)->find(n); }
  /// 1 if `n` has an entry, else 0.
  size_t count(const graph::Node* n) const { return find(n) == end() ? 0 : 1; }
  /// Room for `n` entries.
  void reserve(size_t n) { items_.reserve(n); }
  size_t size() const { return items_.size(); }   ///< Number of entries.
  bool empty() const { return items_.empty(); }   ///< True with no entry.
  iterator begin() { return items_.begin(); }     ///< Entries by node address.
  iterator end() { return items_.end(); }         ///< Past the last entry.
  const_iterator begin() const { return items_.begin(); } ///< Entries by node address.
  const_iterator end() const { return items_.end(); }     ///< Past the last entry.

private:
  iterator lower_bound(const graph::Node* n) {
    return std::lower_bound(items_.begin(), items_.end(), n, [](const value_type& e, const graph::Node* k) {
      return std::less<const graph::Node*>()(e.first, k);
    });
  }
  std::vector<value_type> items_;
};

/// Storages bound to leaf nodes, overriding their realized() value.
using Bindings = NodeMap<std::shared_ptr<graph::Storage>>;
/// Random seeds replaced in one execution: every rand/randn leaf whose seed is a key
/// draws with the mapped seed instead (compile() gives dropout a fresh mask each step).
using SeedOverrides = std::unordered_map<int64_t, int64_t>;
/// Scalar constants replaced in one execution: every kernel parameter that holds the value of a
/// Const node that is a key (codegen::KernelLaunch::const_params) takes the mapped slot instead
/// (codegen::scalar_param_bits() of another constant: a cached plan run for a graph with other constants).
using ConstOverrides = std::unordered_map<const graph::Node*, int64_t>;

/// Storages a caller of execute() gives up: (input, output) pairs of a leaf the plan reads through
/// the bindings and the index of one of the plan's outputs, which the plan may compute into the input's storage
/// (compile()'s replay gives a parameter's or an optimizer slot's old value, which nothing else can
/// reach, to its new value). The plan does so only where that cannot change a result: the
/// launch writing the output is the last to read the input, and its kernel reads each element of
/// the input only where it writes the same element of the output (codegen/in_place.h). A failed
/// index check leaves the input as it was (the plan's checks all run, and are read, before the
/// first write in place); in anomaly mode, and on a GPU, nothing is written in place.
using Donations = std::vector<std::pair<const graph::Node*, size_t>>;

/// A compiled, memory-planned schedule (defined in runtime/executor.h).
struct Plan;
/// A plan as the frontend holds it: shared, immutable, opaque.
using PlanRef = std::shared_ptr<const Plan>;

/// make_plan(outputs) of runtime/executor.h (fused as options().fusion says) as a handle.
PlanRef make_plan_ref(const std::vector<graph::NodeRef>& outputs);
/// The number of kernel launches one execution of `plan` makes.
size_t plan_launches(const Plan& plan);
/// Peak bytes of the intermediates of `plan` (the size of its arena).
size_t plan_arena_bytes(const Plan& plan);

/// Runs a plan; returns one storage per output (an output already realized returns its value;
/// an output computed in place, a donated storage: see Donations).
/// On a GPU the kernels are queued: reading a result (copy_to the CPU) waits for them.
/// A binding on another device than the plan's throws kiln::Error.
std::vector<std::shared_ptr<graph::Storage>> execute(const Plan& plan, const Bindings& bindings = {},
                                                     const SeedOverrides& seeds = {}, const ConstOverrides& consts = {},
                                                     const Donations& donations = {});

/// Computes every node in `nodes` that is not yet realized and attaches its value (one
/// plan per device among them). A graph structurally equal to one realized before on this
/// thread (same ops, dtypes, shapes, attributes, devices and sharing; other sources, where
/// a source is an input or an already realized node; other scalar constants (not bools), which
/// are kernel parameters) reuses that plan: its schedule, kernels and memory plan, bound to
/// the new sources and constants (the schedule cache; off with KILN_SCHEDULE_CACHE=0).
/// Results are bitwise those of a fresh plan.
void realize(const std::vector<graph::NodeRef>& nodes);

/// Graphviz DOT text of how the unrealized `outputs` would be scheduled on `device`, fused or
/// not as `fusion` says: codegen::schedule_dot (codegen/dot.h) of make_plan's schedule.
std::string schedule_dot(const std::vector<const graph::Node*>& outputs, Device device, bool fusion);

} // namespace kiln::runtime
