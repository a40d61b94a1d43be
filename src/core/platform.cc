// SPDX-License-Identifier: MIT
#include "core/platform.h"

#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <string>
#include <system_error>
#include <thread>

#if defined(__linux__)
#include <sched.h>
#include <sys/sysmacros.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#endif
#if defined(__GLIBC__)
#include <malloc.h>
#endif
#if defined(__APPLE__)
#include <fcntl.h>
#include <sys/param.h>
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

void release_free_heap() noexcept {
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
}

bool set_heap_mmap_threshold(int bytes) noexcept {
#if defined(__GLIBC__)
  return mallopt(M_MMAP_THRESHOLD, bytes) == 1;
#else
  (void)bytes;
  return false;
#endif
}

bool advise_huge_pages(void* p, std::size_t bytes) noexcept {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  return ::madvise(p, bytes, MADV_HUGEPAGE) == 0;
#else
  (void)p;
  (void)bytes;
  return false;
#endif
}

bool can_reexec_self() {
#if defined(__linux__)
  struct stat exe {};
  if (stat("/proc/self/exe", &exe) != 0) return false;
  std::FILE* maps = std::fopen("/proc/self/maps", "r");
  if (maps == nullptr) return false;
  const auto here = reinterpret_cast<std::uintptr_t>(&can_reexec_self);
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
#else
  return false;
#endif
}

void reexec_self(char** argv) {
#if defined(__linux__)
  execv("/proc/self/exe", argv);
#else
  (void)argv;
  errno = ENOSYS;
#endif
}

std::string descriptor_path(int fd) {
#if defined(__linux__)
  std::error_code ec;
  const std::filesystem::path p = std::filesystem::read_symlink("/proc/self/fd/" + std::to_string(fd), ec);
  return ec ? std::string() : p.string();
#elif defined(__APPLE__)
  char path[MAXPATHLEN] = {};
  return ::fcntl(fd, F_GETPATH, path) == 0 ? std::string(path) : std::string();
#else
  (void)fd;
  return std::string();
#endif
}

short poll_peer_closed_event() noexcept {
#if defined(__linux__)
  return POLLRDHUP;
#else
  return 0;
#endif
}

std::ptrdiff_t send_nonblocking(int fd, const void* data, std::size_t n) noexcept {
#if defined(__linux__)
  return ::send(fd, data, n, MSG_NOSIGNAL | MSG_DONTWAIT);
#else
  return ::send(fd, data, n, MSG_DONTWAIT);
#endif
}

}  // namespace clef
