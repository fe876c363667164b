#pragma once
/// \file anomaly.h
/// The executor's side of anomaly mode (kiln/anomaly.h): checking a launch's output for NaN
/// and inf, and finding the op that made one.

#include <functional>

#include "codegen/lower.h"
#include "runtime/executor.h"

namespace kiln::runtime {

/// True when the executor checks outputs on this thread (anomaly mode on and not already
/// searching for a culprit). One thread-local load when a scope decides; else options().
bool anomaly_checks_on();

/// Where an execution's buffers are: the address of a node's buffer on the plan's device.
using BufferAddress = std::function<void*(const graph::Node*)>;

/// Checks the output of launch `l`, which has just run on `device` (a GPU's queue is waited
/// for): when it holds a NaN or inf, runs `before_report` (which may throw an earlier error,
/// such as a failed index check), then finds the first op of the kernel that made a
/// non-finite value from finite inputs (re-running the kernel's ops one kernel per op, with
/// the random seeds of `seeds`) and throws kiln::AnomalyError naming it.
void check_for_anomaly(const codegen::KernelLaunch& l, Device device, const BufferAddress& address,
                       const SeedOverrides& seeds, const std::function<void()>& before_report);

} // namespace kiln::runtime
