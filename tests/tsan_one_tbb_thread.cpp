// Linked into every test binary of a -DKILN_TSAN build (tests/CMakeLists.txt), and so into
// the child processes those tests start from their own binary.
//
// ThreadSanitizer cannot see oneTBB's synchronization: libtbb is not instrumented, so
// every hand-off between the thread that calls tbb::parallel_for and a TBB worker (the
// task object and the body's copy that the worker reads, the stack memory the caller
// reuses once the wait in libtbb returns) is reported as a race - hundreds per run of
// test_threads, none of them in kiln. With at most one TBB thread, each parallel_for
// runs on the thread that called it, so those hand-offs do not happen, and what TSan
// checks is what kiln shares between the tests' own std::threads: the node table, the
// JIT and its caches, the allocator, options(), the executor's counters, realization.
// (A tbb::global_control with a larger limit, as in the Determinism test, does not
// raise it: the smallest max_allowed_parallelism in force wins.)
#include <tbb/global_control.h>

namespace {
const tbb::global_control one_tbb_thread(tbb::global_control::max_allowed_parallelism, 1);
} // namespace
