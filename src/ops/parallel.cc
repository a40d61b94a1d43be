// SPDX-License-Identifier: MIT
#include "ops/parallel.h"

#include <omp.h>
#include <strings.h>

#include <cstdlib>
#include <initializer_list>

#include "core/platform.h"

namespace clef::ops {

int hardware_threads() { return usable_cpus(); }

int set_num_threads(int n) {
  // More OpenMP threads than CPUs never helps these compute-bound kernels and, with spinning
  // barriers, can stall the whole machine (e.g. --threads 4096): cap at the CPUs we may run on.
  const int hw = hardware_threads();
  if (n <= 0 || n > hw) n = hw;
  omp_set_num_threads(n);
  return n;
}

int num_threads() { return omp_get_max_threads(); }

namespace {

bool opted_out(const char* v) {
  if (v == nullptr) return false;
  for (const char* no : {"0", "false", "off", "no"}) {
    if (strcasecmp(v, no) == 0) return true;
  }
  return false;
}

}  // namespace

void apply_default_wait_policy(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr || std::getenv("GOMP_SPINCOUNT") != nullptr) return;
  if (opted_out(std::getenv("CLEF_OMP_REEXEC"))) return;
  if (!can_reexec_self()) return;  // e.g. started as `ld.so clef ...`, or not Linux
  if (setenv("GOMP_SPINCOUNT", kDefaultGompSpinCount, 1) != 0) return;
  reexec_self(argv);
  // exec failed (no /proc, say): run on with libgomp's defaults; leave the variable set so a
  // child process does not try again.
}

}  // namespace clef::ops
