#include "ops/parallel.h"

#include <omp.h>
#include <sched.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace clef::ops {

int hardware_threads() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  const int n = omp_get_num_procs();
  return n > 0 ? n : 1;
}

int set_num_threads(int n) {
  // More OpenMP threads than CPUs never helps these compute-bound kernels and, with spinning
  // barriers, can stall the whole machine (e.g. --threads 4096): cap at the CPUs we may run on.
  const int hw = hardware_threads();
  if (n <= 0 || n > hw) n = hw;
  omp_set_num_threads(n);
  return n;
}

int num_threads() { return omp_get_max_threads(); }

void apply_default_wait_policy(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr || std::getenv("GOMP_SPINCOUNT") != nullptr) return;
  const char* opt = std::getenv("CLEF_OMP_REEXEC");
  if (opt != nullptr && std::strcmp(opt, "0") == 0) return;
  if (setenv("GOMP_SPINCOUNT", kDefaultGompSpinCount, 1) != 0) return;
  execv("/proc/self/exe", argv);
  // exec failed (no /proc, say): run on with libgomp's defaults; leave the variable set so a
  // child process does not try again.
}

}  // namespace clef::ops
