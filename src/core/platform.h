// SPDX-License-Identifier: MIT
// What the operating system lets this process use and the few calls that differ between systems.
// The one place that reads cgroup files, sysconf, the CPU affinity mask and /proc, and that calls
// glibc's heap controls, Linux's madvise and poll/send flags: the layers above ask a question or
// make a request here instead of writing #ifdef __linux__. Linux is implemented in full; on other
// systems (a future macOS build, docs/ARM64.md "macOS") each answer falls back to what the
// standard library and POSIX know, or the call does nothing, as each function says. No macOS
// branch here has been compiled or run on a Mac; scripts/check_libcxx.sh compiles the rest with
// clang and libc++ on Linux.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

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

/// Gives the heap's free memory back to the system now: glibc's malloc_trim(0) (whole free pages
/// at the top and inside every arena are released; it walks the heap, so it costs up to a few
/// milliseconds on a large one). A no-op elsewhere (macOS's allocator returns freed pages on its
/// own schedule; musl has no such call). Never fails.
void release_free_heap() noexcept;

/// Makes every allocation of at least `bytes` bytes a mapping of its own, returned to the system
/// as soon as it is freed, and stops glibc from raising that threshold on its own:
/// mallopt(M_MMAP_THRESHOLD, bytes). True when the allocator took the setting (glibc refuses
/// values above its maximum, 32 MiB on 64-bit systems); false there and always on systems without
/// mallopt (macOS: large blocks are mappings of their own already).
bool set_heap_mmap_threshold(int bytes) noexcept;

/// Advises the kernel to back the mapped range [p, p + bytes) with transparent huge pages
/// (madvise MADV_HUGEPAGE, Linux with THP mode "madvise" or "always"); p must be page-aligned. Only
/// advice: true when the kernel accepted it, false when it refused (no THP support, an unaligned
/// p) and always on other systems (macOS has no such advice); the memory works the same either way.
bool advise_huge_pages(void* p, std::size_t bytes) noexcept;

/// Whether reexec_self() would start this same program again. Linux: true when /proc/self/exe is
/// the file that holds this code (found in /proc/self/maps); false when the program was started
/// through the dynamic loader (`ld.so PROGRAM ARGS`, /proc/self/exe is then ld.so) or when it
/// cannot be told (no /proc). Always false on other systems (not implemented there).
bool can_reexec_self();

/// Replaces this process with a new run of its own executable, with `argv` (argv[0] first, null
/// terminated) and the current environment: execv("/proc/self/exe", argv) on Linux. Returns only
/// when that failed (errno says why), and at once on other systems (errno ENOSYS). Ask
/// can_reexec_self() first.
void reexec_self(char** argv);

/// The file or device that descriptor `fd` is open on ("/dev/full", "/data/out.json",
/// "pipe:[1234]"): the /proc/self/fd/<fd> link on Linux, fcntl F_GETPATH on macOS (which names
/// only files and devices). "" when the system cannot tell (a closed descriptor, no /proc).
std::string descriptor_path(int fd);

/// The poll() event bit that reports that the peer of a socket shut down its sending side (a
/// half-close or a close): POLLRDHUP on Linux. 0 on other systems, which have no such bit (macOS:
/// such a peer shows only as a read of 0 bytes or a failed write); ask for it and test it only
/// when it is not 0.
short poll_peer_closed_event() noexcept;

/// Sends up to `n` bytes of `data` on socket `fd` without blocking and without a SIGPIPE when the
/// peer is gone: send() with MSG_DONTWAIT | MSG_NOSIGNAL on Linux, MSG_DONTWAIT elsewhere (there
/// the socket itself must carry SO_NOSIGPIPE, as every socket Boost.Asio opens or accepts on macOS
/// does). Returns send()'s result: the bytes sent, or -1 with errno set (EAGAIN or EWOULDBLOCK: it
/// would block; EPIPE, ECONNRESET: the peer is gone).
std::ptrdiff_t send_nonblocking(int fd, const void* data, std::size_t n) noexcept;

}  // namespace clef
