// SPDX-License-Identifier: MIT
#include "output.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>

#include "core/error.h"
#include "core/paths.h"
#include "core/platform.h"

namespace clef::cli {

namespace {

/// What standard output is (the file or device it was opened on: "/dev/full", "/data/out.json"),
/// or "" when the system cannot tell.
std::string stdout_target() { return descriptor_path(STDOUT_FILENO); }

[[noreturn]] void throw_stdout_error(int err) {
  const std::string target = stdout_target();
  throw IoError("cannot write the output to standard output" +
                (target.empty() ? std::string() : " (" + printable(target) + ")") +
                (err != 0 ? std::string(": ") + std::strerror(err) : std::string()));
}

}  // namespace

void flush_stdout() {
  errno = 0;
  std::cout.flush();
  const int err = errno;
  if (!std::cout || std::ferror(stdout) != 0) throw_stdout_error(err);
}

void write_stdout(std::string_view text) {
  flush_stdout();
  errno = 0;
  if (std::fwrite(text.data(), 1, text.size(), stdout) != text.size() || std::fflush(stdout) != 0) {
    throw_stdout_error(errno);
  }
}

}  // namespace clef::cli
