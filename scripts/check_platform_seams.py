#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Checks that Linux-only and glibc-only calls stay behind the platform seams.

A macOS (or any non-Linux) build needs every call that exists only on Linux or only in glibc to sit
in one of the seam files below, behind #if defined(__linux__) / __GLIBC__ with a fallback; the rest
of the engine asks the seam (src/core/platform.h, src/ops/cpu/arm_features.h). A compile against
libc++ on Linux cannot see these: glibc's headers still declare malloc_trim and POLLRDHUP. So this
check reads the code of src/, apps/ and python/ (not tests/, which run on Linux only) and reports
each use outside the seams: FILE:LINE: NAME. Comments (from // to the end of the line, and /* */)
are skipped; string literals are not ("/proc/..." paths are what it looks for). Exits 1 on any
finding, 0 silently. Standard library only: python3 scripts/check_platform_seams.py
"""
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent

# The seams: the only files that may name what FORBIDDEN lists.
SEAMS = {
    "src/core/platform.cc",             # memory/CPU limits, heap, huge pages, re-exec, descriptors, sockets
    "src/ops/cpu/arm_features_linux.cc",  # getauxval (Linux aarch64 only)
}

FORBIDDEN = [
    (r"#\s*include\s*<(malloc\.h|sys/(auxv|sysmacros|prctl|epoll|eventfd|signalfd|timerfd|inotify|"
     r"sysinfo|sendfile)\.h|linux/|asm/)", "a Linux-only header"),
    (r"\b(malloc_trim|mallopt|malloc_usable_size|getauxval|prctl|sysinfo|get_nprocs|gettid|accept4|pipe2|"
     r"memfd_create|sendfile|epoll_\w+|eventfd|signalfd|timerfd_\w+|inotify_\w+|sched_[gs]etaffinity|"
     r"pthread_[gs]etaffinity_np)\s*\(", "a Linux/glibc-only call"),
    (r"\b(MADV_HUGEPAGE|MADV_NOHUGEPAGE|MAP_POPULATE|MAP_HUGETLB|POLLRDHUP|MSG_NOSIGNAL|TCP_KEEPIDLE|"
     r"TCP_USER_TIMEOUT|SO_REUSEPORT|O_TMPFILE|O_DIRECT|M_MMAP_THRESHOLD|M_TRIM_THRESHOLD|CPU_ZERO|CPU_COUNT|"
     r"RLIMIT_RTPRIO|AT_HWCAP2?)\b", "a Linux-only constant"),
    (r"\"/(proc|sys)/", "a /proc or /sys path"),
]
PATTERNS = [(re.compile(p), what) for p, what in FORBIDDEN]


def code_lines(text):
    """(line number, line) with comments blanked; string and character literals are kept."""
    out, block = [], False
    for n, line in enumerate(text.splitlines(), 1):
        code, i, quote = [], 0, None
        while i < len(line):
            c = line[i]
            if block:
                if line.startswith("*/", i):
                    block, i = False, i + 2
                else:
                    i += 1
                continue
            if quote:
                code.append(c)
                if c == "\\" and i + 1 < len(line):
                    code.append(line[i + 1])
                    i += 1
                elif c == quote:
                    quote = None
            elif line.startswith("//", i):
                break
            elif line.startswith("/*", i):
                block, i = True, i + 2
                continue
            else:
                if c in "\"'" and not (c == "'" and i > 0 and line[i - 1].isalnum()):  # 1'000 digit separators
                    quote = c
                code.append(c)
            i += 1
        out.append((n, "".join(code)))
    return out


def main():
    files = subprocess.run(["git", "ls-files", "--", "src/*.cc", "src/*.h", "apps/*.cc", "apps/*.h", "python/*.cc"],
                           cwd=ROOT, check=True, capture_output=True, text=True).stdout.split()
    bad = 0
    for rel in files:
        if rel in SEAMS or rel.endswith("_test.cc"):
            continue
        for n, line in code_lines((ROOT / rel).read_text(encoding="utf-8", errors="replace")):
            for pattern, what in PATTERNS:
                m = pattern.search(line)
                if m:
                    print(f"{rel}:{n}: {m.group(0).strip()}: {what} outside the platform seams "
                          "(src/core/platform.h; docs/ARM64.md \"macOS\")")
                    bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
