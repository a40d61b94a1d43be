// SPDX-License-Identifier: MIT
// Engine flags shared by the subcommands that run a model (`clef decide`, `clef serve`): one place
// for their names, checks, help and mapping onto EngineOptions; and the embedded-default-model
// helpers every command that opens a folder uses.
#pragma once

#include <charconv>
#include <cmath>
#include <cstdint>
#include <optional>
#include <sstream>
#include <string>
#include <type_traits>

#include <CLI/CLI.hpp>

#include "core/error.h"
#include "core/paths.h"
#include "runtime/engine.h"

namespace clef::cli {

/// The check of a numeric option (instead of CLI::Range, whose one message for both cases reads
/// "Value abc not in range 0 to 2"): the whole value must be a plain decimal number of T's kind (a
/// whole number for an integer T; no sign '+', blanks, hex, "nan" or "inf") within [lo, hi];
/// otherwise the message says which of the two it is not, e.g. "--threads: 'abc' is not a whole
/// number" or "--threads: 5000 is outside 0..2" (a whole number too large for the type included).
template <class T, class U>
CLI::Validator in_range(T lo, U hi) {
  using V = std::common_type_t<T, U>;
  const V low = static_cast<V>(lo), high = static_cast<V>(hi);
  std::ostringstream bounds;
  bounds << low << ".." << high;
  return CLI::Validator(
      [low, high, range = bounds.str()](std::string& text) -> std::string {
        V v{};
        const char* end = text.data() + text.size();
        const auto [ptr, ec] = std::from_chars(text.data(), end, v);
        const bool whole = ptr == end && !text.empty();
        if (whole && ec == std::errc::result_out_of_range) return text + " is outside " + range;
        if (!whole || ec != std::errc() || !std::isfinite(static_cast<double>(v))) {
          return "'" + text + "' is not a " + (std::is_integral_v<V> ? "whole number" : "number");
        }
        if (!(v >= low && v <= high)) return text + " is outside " + range;
        return {};
      },
      "in " + bounds.str());
}

/// Values of the engine flags, with `clef decide`'s defaults.
struct EngineFlags {
  std::string model_dir;  ///< --model: a path or a hub name (empty with model_given false: the embedded default)
  std::string mmproj;     ///< --mmproj: a GGUF model's projector file ("" = none)
  bool model_given = false;
  std::string revision;                  ///< --revision: branch, tag or commit of a hub name ("" = main)
  bool pull = false;                     ///< --pull: fetch what the cache lacks (decide, serve, mcp)
  std::string precision = "fp32";        ///< fp32 (or f32) | bf16
  std::string fp32_weights = "auto";     ///< auto | stream | resident (fp32 mode on a bf16 checkpoint)
  std::int64_t threads = 0;              ///< 0 = all CPUs
  std::int64_t chunk = 512;              ///< prefill chunk (tokens)
  std::int64_t max_tokens = 16384;       ///< record token budget
  std::string overflow = "refuse";       ///< refuse | truncate
  std::string confidence = "reference";  ///< reference | jev
  bool jev_legend = false;
  int vision_grid = 0;                        ///< 0 = smart resize; 8 or 14 = the seed's fixed grids
  bool no_images = false;                     ///< refuse requests with images
  std::string image_backend = "torchvision";  ///< torchvision | pil (docs/VISION.md)
  /// Pixels per image after the processor's resize (EngineOptions::max_image_pixels); 0 = no bound
  std::uint64_t max_image_pixels = EngineOptions::kDefaultMaxImagePixels;
  std::string split_regex = "file";  ///< file | qwen35 | qwen2 (docs/TOKENIZER.md "Which split regex")
};

/// Adds --model/-m, --mmproj, --revision, --pull (when `with_pull`), --precision, --threads, --chunk, --max-tokens,
/// --overflow,
/// --confidence,
/// --jev-legend, --vision-grid, --no-images and --split-regex to `app`, bound to `flags`. Returns the --model option
/// (to test whether it was given).
CLI::Option* add_engine_flags(CLI::App& app, EngineFlags& flags, bool with_pull = true);

/// Help text of --model for every command that takes a model (path or hub name).
extern const char* const kModelHelp;
/// Help text of --mmproj (the projector GGUF of a GGUF model).
extern const char* const kMmprojHelp;

/// The local path a command opens for the -m argument `arg` (docs/MODELS.md "Names"): the embedded
/// default model when not `given`; `arg` itself when it exists on disk or is not a name; else the
/// hub name resolved in the Hugging Face cache at `revision` (hub::resolve_cached), fetched first
/// when `pull` (hub::pull_model, progress on stderr). A GGUF repository's projector is noted on
/// stderr. Throws what those throw (InvalidArgument for a name not cached, saying how to pull it).
std::string resolve_model_arg(const std::string& arg, bool given, const std::string& revision, bool pull,
                              bool* is_default);

/// Adds --split-regex file|qwen35|qwen2 (default file) to `app`, bound to `value`.
void add_split_regex_flag(CLI::App& app, std::string& value);

/// The TokenizerLoadOptions::split_override a --split-regex value names (nullopt for "file").
std::optional<SplitPattern> split_override_from_flag(const std::string& value);

/// The EngineOptions the flags describe (accept_any_model and aliases are left to the caller).
EngineOptions engine_options(const EngineFlags& flags);

/// Parses the command line into `app`. Returns the exit code when the command is done (0 after
/// --help / --version, 2 after a usage error printed as one line "clef: error: ... (see
/// `help_hint`)"), or -1 when the command should run.
int parse_command_line(CLI::App& app, int argc, char** argv, const char* help_hint);

/// The folder a command works on: `dir` when `given` (an explicitly empty path is an
/// InvalidArgument, not a request for the default), else the embedded default tiny random-weight
/// model (made on first use; a notice goes to stderr).
std::string model_dir_or_default(const std::string& dir, bool given, bool* is_default);

/// Runs `load` (which opens the model folder `dir`); when `dir` is the embedded default model, a
/// model-file or I/O error gets a hint on how to regenerate it (ModelLoadError); other errors (bad
/// options) pass unchanged.
template <typename Load>
auto with_default_hint(const std::string& dir, bool is_default, Load load) {
  try {
    return load();
  } catch (const Error& e) {
    // Only a file problem can mean a damaged folder; a bad option (e.g. --mmproj with a folder) is the caller's.
    if (!is_default || (e.kind() != ErrorKind::kModelLoad && e.kind() != ErrorKind::kIo)) throw;
    throw ModelLoadError(std::string(e.what()) + " (the embedded default model is damaged; delete " + printable(dir) +
                         " and run again to regenerate it)");
  }
}

}  // namespace clef::cli
