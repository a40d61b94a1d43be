// SPDX-License-Identifier: MIT
// Typed errors of clef.cpp. Errors are thrown inside the engine and translated once at each
// boundary (CLI exit code, HTTP status). User input never aborts the process.
#pragma once

#include <stdexcept>
#include <string>

namespace clef {

/// Machine-readable category of an Error; each boundary maps it to an exit code / status.
enum class ErrorKind {
  kInvalidArgument,  ///< bad user input (request, CLI flag)
  kModelLoad,        ///< a model file or folder is malformed, missing or inconsistent
  kUnsupported,      ///< well-formed but not supported by this build (option, dtype, layer type)
  kIo,               ///< the operating system refused an operation (open, mmap, write)
  kInternal,         ///< a bug: an invariant only the code itself can break
};

/// Base class of every clef error. what() is one line, naming what and where.
class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const noexcept { return kind_; }

 private:
  ErrorKind kind_;
};

/// Bad user input.
class InvalidArgument : public Error {
 public:
  explicit InvalidArgument(const std::string& m) : Error(ErrorKind::kInvalidArgument, m) {}
};

/// A model file is malformed, missing or inconsistent. The message starts with the file name.
class ModelLoadError : public Error {
 public:
  explicit ModelLoadError(const std::string& m) : Error(ErrorKind::kModelLoad, m) {}
};

/// Well-formed input that this build does not support.
class Unsupported : public Error {
 public:
  explicit Unsupported(const std::string& m) : Error(ErrorKind::kUnsupported, m) {}
};

/// The operating system refused an operation.
class IoError : public Error {
 public:
  explicit IoError(const std::string& m) : Error(ErrorKind::kIo, m) {}
};

/// An internal invariant broke (a bug in clef.cpp).
class InternalError : public Error {
 public:
  explicit InternalError(const std::string& m) : Error(ErrorKind::kInternal, m) {}
};

/// Short name of an ErrorKind ("invalid_argument", "model_load", ...).
const char* error_kind_name(ErrorKind kind) noexcept;

/// Process exit code for an ErrorKind (documented in the CLI's --help): 2 invalid argument,
/// 3 model load, 4 unsupported, 5 I/O, 70 internal.
int exit_code_for(ErrorKind kind) noexcept;

/// "strerror(errno)" as a std::string (thread-safe).
std::string errno_message(int err);

}  // namespace clef

/// Throws InternalError with file:line when an invariant that only a bug can break fails.
#define CLEF_ASSERT(cond)                                                                                    \
  do {                                                                                                       \
    if (!(cond)) {                                                                                           \
      throw ::clef::InternalError(std::string("internal invariant failed: " #cond " at ") + __FILE__ + ":" + \
                                  std::to_string(__LINE__));                                                 \
    }                                                                                                        \
  } while (0)
