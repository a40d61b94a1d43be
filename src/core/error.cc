// SPDX-License-Identifier: MIT
#include "core/error.h"

#include <cstring>

namespace clef {

const char* error_kind_name(ErrorKind kind) noexcept {
  switch (kind) {
    case ErrorKind::kInvalidArgument: return "invalid_argument";
    case ErrorKind::kModelLoad: return "model_load";
    case ErrorKind::kUnsupported: return "unsupported";
    case ErrorKind::kIo: return "io";
    case ErrorKind::kInternal: return "internal";
  }
  return "internal";
}

int exit_code_for(ErrorKind kind) noexcept {
  switch (kind) {
    case ErrorKind::kInvalidArgument: return 2;
    case ErrorKind::kModelLoad: return 3;
    case ErrorKind::kUnsupported: return 4;
    case ErrorKind::kIo: return 5;
    case ErrorKind::kInternal: return 70;
  }
  return 70;
}

namespace {

// strerror_r comes in two shapes, chosen by overload on its result: GNU's (glibc with
// _GNU_SOURCE, which g++ and clang++ define) returns a char* that may or may not point into buf;
// the XSI one (macOS, musl) returns 0 and fills buf, or an error number.
[[maybe_unused]] const char* strerror_text(const char* gnu, const char* /*buf*/) { return gnu; }
[[maybe_unused]] const char* strerror_text(int xsi, const char* buf) { return xsi == 0 ? buf : "Unknown error"; }

}  // namespace

std::string errno_message(int err) {
  char buf[256] = {};
  return std::string(strerror_text(strerror_r(err, buf, sizeof buf), buf));
}

}  // namespace clef
