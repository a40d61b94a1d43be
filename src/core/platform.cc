// SPDX-License-Identifier: MIT
#include "core/platform.h"

#include <unistd.h>

#include <thread>

#if defined(__linux__)
#include <sched.h>

#include <algorithm>
#include <fstream>
#include <string>
#endif

namespace clef {

#if defined(__linux__)
namespace {

/// The number in a cgroup limit file ("max" or anything else unreadable: none).
std::optional<std::uint64_t> read_limit(const std::string& path) {
  std::ifstream f(path);
  std::string limit;
  if (!(f >> limit) || limit.empty() || limit.size() >= 20 ||
      !std::all_of(limit.begin(), limit.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return std::nullopt;
  }
  return std::stoull(limit);
}

/// The smallest limit named `file` in `root`/`path` and each of its ancestors up to `root`.
std::optional<std::uint64_t> chain_limit(const std::string& root, std::string path, const char* file) {
  std::optional<std::uint64_t> best;
  for (;;) {
    if (auto v = read_limit(root + path + (path.empty() || path.back() != '/' ? "/" : "") + file)) {
      if (*v > 0 && (!best || *v < *best)) best = v;
    }
    if (path.empty() || path == "/") break;
    const auto slash = path.find_last_of('/');
    path = slash == std::string::npos || slash == 0 ? "/" : path.substr(0, slash);
  }
  return best;
}

}  // namespace
#endif

std::uint64_t physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page) : 0;
}

std::optional<std::uint64_t> memory_limit_bytes() {
#if defined(__linux__)
  std::optional<std::uint64_t> best;
  auto take = [&](std::optional<std::uint64_t> v) {
    if (v && *v > 0 && (!best || *v < *best)) best = v;
  };
  // This process's cgroup: "0::/path" (v2) and/or "N:...memory...:/path" (v1), /proc/self/cgroup.
  std::ifstream cg("/proc/self/cgroup");
  for (std::string line; std::getline(cg, line);) {
    const auto a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (line.compare(0, a, "0") == 0 && controllers.empty()) {
      take(chain_limit("/sys/fs/cgroup", path, "memory.max"));
    } else if (("," + controllers + ",").find(",memory,") != std::string::npos) {
      take(chain_limit("/sys/fs/cgroup/memory", path, "memory.limit_in_bytes"));  // "unlimited" is huge
    }
  }
  take(read_limit("/sys/fs/cgroup/memory.max"));  // a private cgroup namespace's root
  return best;
#else
  return std::nullopt;
#endif
}

int usable_cpus() {
#if defined(__linux__)
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
#endif
  const unsigned n = std::thread::hardware_concurrency();
  return n > 0 ? static_cast<int>(n) : 1;
}

}  // namespace clef
