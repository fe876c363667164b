#pragma once
/// \file api.h
/// The runtime as the frontend sees it: realizing nodes, plans held as opaque handles,
/// executing a plan with new bindings and random seeds (compile()'s replay), and the picture
/// of a schedule. It includes no codegen/ header: kernels, schedules and the JIT stay behind
/// runtime/executor.h, which defines Plan and the rest for the runtime itself, tests and
/// benchmarks. The frontend's other runtime headers (storage.h, observe.h, comm.h) are free of
/// codegen/ too; the ctest `frontend_includes` checks every frontend translation unit.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "graph/node.h"

namespace kiln::runtime {

/// Storages bound to leaf nodes, overriding their realized() value.
using Bindings = std::unordered_map<const graph::Node*, std::shared_ptr<graph::Storage>>;
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
