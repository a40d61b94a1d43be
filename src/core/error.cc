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

std::string errno_message(int err) {
  char buf[256];
  // GNU strerror_r returns a char* that may or may not point into buf.
  const char* msg = strerror_r(err, buf, sizeof buf);
  return std::string(msg);
}

}  // namespace clef
