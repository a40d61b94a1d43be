// SPDX-License-Identifier: MIT
// What the operating system lets this process use: memory and CPUs. The one place that reads
// cgroup files, sysconf and the CPU affinity mask, so that the layers above ask a question
// instead of parsing /proc and /sys. Linux is probed in full; on other systems (a future macOS
// build) the answers fall back to what the standard library knows.
#pragma once

#include <cstdint>
#include <optional>

namespace clef {

/// Physical memory of the machine in bytes (sysconf _SC_PHYS_PAGES x _SC_PAGESIZE), 0 when unknown.
std::uint64_t physical_memory_bytes();

/// The smallest memory limit in bytes of this process's cgroup and its ancestors (Linux only):
/// the cgroup v2 `memory.max` along the "0::/path" line of /proc/self/cgroup under /sys/fs/cgroup,
/// the v1 `memory.limit_in_bytes` along a "N:...memory...:/path" line under /sys/fs/cgroup/memory
/// ("unlimited" reads as a huge number), and /sys/fs/cgroup/memory.max itself (the root of a
/// private cgroup namespace). "max", unreadable files and zero count as no limit. nullopt when
/// there is no limit, and always on systems other than Linux.
std::optional<std::uint64_t> memory_limit_bytes();

/// Logical CPUs this process may run on, at least 1: the CPUs of its affinity mask
/// (sched_getaffinity, which taskset and container cpusets narrow) on Linux, else
/// std::thread::hardware_concurrency().
int usable_cpus();

}  // namespace clef
