// SPDX-License-Identifier: MIT
// The engine's one thread pool. clef's own parallel loops use OpenMP, and Debian's oneDNN is
// built on the same OpenMP runtime (libgomp), so the GEMM library and our kernels share one pool
// and never oversubscribe each other (docs/NUMERICS.md "Threading"). The pool is sized once per
// process.
#pragma once

#include <cstdint>

namespace clef::ops {

/// Below this many elements (of the loop's whole work: rows x columns) an element-wise kernel's
/// loop stays on one thread: an OpenMP fork/join costs a few microseconds.
inline constexpr std::int64_t kParallelMin = 1 << 15;

/// Sets the number of threads used by every op and by the GEMM library (OpenMP's
/// omp_set_num_threads on the calling thread, which runs the engine). n <= 0 selects
/// hardware_threads(); n above hardware_threads() is capped to it (oversubscribing a spinning
/// OpenMP pool only stalls). Returns the number in effect.
int set_num_threads(int n);

/// Threads the next parallel region will use.
int num_threads();

/// Logical CPUs available to this process, at least 1 (core/platform.h usable_cpus: the affinity mask).
int hardware_threads();

/// The OpenMP wait policy clef runs with unless the user set one (docs/PERFORMANCE.md
/// "Threading"): libgomp's default spins up to 300,000 iterations in every barrier, which on a
/// machine whose other CPU-bound work shares our cores steals the time the slowest thread needs.
inline constexpr const char* kDefaultGompSpinCount = "10000";

/// Call first thing in main(). libgomp reads OMP_WAIT_POLICY / GOMP_SPINCOUNT once, when it is
/// loaded (before main), so when neither is set (and CLEF_OMP_REEXEC is not 0/false/off/no) this
/// sets GOMP_SPINCOUNT=kDefaultGompSpinCount and re-executes the program (core/platform.h
/// reexec_self: /proc/self/exe on Linux) with the same arguments; it returns normally when there is
/// nothing to do, when the program cannot be re-executed (started through ld.so; systems other than
/// Linux) or the re-exec fails (the program then runs with libgomp's defaults). Any
/// OMP_WAIT_POLICY or GOMP_SPINCOUNT the user sets wins.
void apply_default_wait_policy(char** argv);

}  // namespace clef::ops
