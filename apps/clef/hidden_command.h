// SPDX-License-Identifier: MIT
// `clef hidden` flags, shared with the test tool clef_backbone_dump (tests/drivers): the parsing of
// the command line into clef_tools/backbone_dump.h's options, which compute and write the dump.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace clef::cli {

/// The raw flag values, checked by run_hidden().
struct HiddenFlags {
  std::string model, revision, ids_file, ids_list, random_ids, out, precision, fp32_weights, threads, repeat;
  std::vector<std::string> chunks;
  bool padded = false, fork_check = false;
  CLI::Option* model_opt = nullptr;
  CLI::Option* revision_opt = nullptr;
  CLI::Option* precision_opt = nullptr;
  CLI::Option* fp32_weights_opt = nullptr;
  CLI::Option* threads_opt = nullptr;
  CLI::Option* repeat_opt = nullptr;
};

/// Adds --model/-m, --revision, --ids, --ids-list, --random-ids, --out, --chunks (repeatable),
/// --padded, --fork-check, --precision, --fp32-weights, --threads and --repeat to `app`, and its
/// footer. A flag given twice keeps its last value.
void add_hidden_flags(CLI::App& app, HiddenFlags& flags);

/// Resolves a hub name given to --model (at --revision; engine_flags.h resolve_model_arg; its
/// errors are thrown), checks the values and runs run_backbone_dump(). Returns the exit code: 0,
/// or after an error the one line "clef_backbone_dump: MESSAGE" on stderr (as the tool always
/// printed) and the code of core/error.h (2 for a bad flag value or any other exception).
int run_hidden(const HiddenFlags& flags);

}  // namespace clef::cli
