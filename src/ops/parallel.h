// The engine's one thread pool. clef's own parallel loops use OpenMP, and Debian's oneDNN is
// built on the same OpenMP runtime (libgomp), so the GEMM library and our kernels share one pool
// and never oversubscribe each other (issue 5 §6). The pool is sized once per process.
#pragma once

namespace clef::ops {

/// Sets the number of threads used by every op and by the GEMM library (OpenMP's
/// omp_set_num_threads on the calling thread, which runs the engine). n <= 0 selects
/// hardware_threads(); n above hardware_threads() is capped to it (oversubscribing a spinning
/// OpenMP pool only stalls). Returns the number in effect.
int set_num_threads(int n);

/// Threads the next parallel region will use.
int num_threads();

/// Logical CPUs available to this process (sched_getaffinity), at least 1.
int hardware_threads();

}  // namespace clef::ops
