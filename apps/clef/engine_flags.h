// Engine flags shared by the subcommands that run a model (`clef serve`; `clef decide` defines the
// same flags with the same defaults): one place for their names, checks, help and mapping onto
// EngineOptions.
#pragma once

#include <cstdint>
#include <string>

#include <CLI/CLI.hpp>

#include "runtime/engine.h"

namespace clef::cli {

/// Values of the engine flags, with `clef decide`'s defaults.
struct EngineFlags {
  std::string model_dir;           ///< --model (empty with model_given false: the embedded default)
  bool model_given = false;
  std::string precision = "f32";   ///< f32 | bf16
  std::int64_t threads = 0;        ///< 0 = all CPUs
  std::int64_t chunk = 512;        ///< prefill chunk (tokens)
  std::int64_t max_tokens = 16384; ///< record token budget
  std::string overflow = "refuse"; ///< refuse | truncate
  std::string confidence = "reference";  ///< reference | jev
  bool jev_legend = false;
};

/// Adds --model/-m, --precision, --threads, --chunk, --max-tokens, --overflow, --confidence and
/// --jev-legend to `app`, bound to `flags`. Returns the --model option (to test whether it was given).
CLI::Option* add_engine_flags(CLI::App& app, EngineFlags& flags);

/// The EngineOptions the flags describe (accept_any_model and aliases are left to the caller).
EngineOptions engine_options(const EngineFlags& flags);

/// The model folder to open: --model when given (empty is an InvalidArgument), else the embedded
/// default tiny random-weight model (made on first use; a notice goes to stderr).
std::string model_dir_or_default(const EngineFlags& flags, bool* is_default);

}  // namespace clef::cli
