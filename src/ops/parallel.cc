// SPDX-License-Identifier: MIT
#include "ops/parallel.h"

#include <omp.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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

/// True when /proc/self/exe is the file this code was loaded from. Not so when the program was
/// started through the dynamic loader (`ld.so PROGRAM ARGS`: /proc/self/exe is then ld.so), or
/// when that cannot be told (no /proc): re-executing /proc/self/exe would then run something else.
bool running_from_proc_self_exe() {
  struct stat exe {};
  if (stat("/proc/self/exe", &exe) != 0) return false;
  std::FILE* maps = std::fopen("/proc/self/maps", "r");
  if (maps == nullptr) return false;
  const auto here = reinterpret_cast<std::uintptr_t>(&running_from_proc_self_exe);
  bool same = false;
  char line[4096];
  while (std::fgets(line, sizeof line, maps) != nullptr) {
    unsigned long long lo = 0, hi = 0, inode = 0;
    unsigned major = 0, minor = 0;
    // "lo-hi perms offset major:minor inode path"
    if (std::sscanf(line, "%llx-%llx %*s %*s %x:%x %llu", &lo, &hi, &major, &minor, &inode) != 5) continue;
    if (here < lo || here >= hi) continue;
    same = inode == static_cast<unsigned long long>(exe.st_ino) && major == ::major(exe.st_dev) &&
           minor == ::minor(exe.st_dev);
    break;
  }
  std::fclose(maps);
  return same;
}

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
  if (!running_from_proc_self_exe()) return;  // e.g. started as `ld.so clef ...`
  if (setenv("GOMP_SPINCOUNT", kDefaultGompSpinCount, 1) != 0) return;
  execv("/proc/self/exe", argv);
  // exec failed (no /proc, say): run on with libgomp's defaults; leave the variable set so a
  // child process does not try again.
}

}  // namespace clef::ops
