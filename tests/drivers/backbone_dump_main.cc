// SPDX-License-Identifier: MIT
// clef_backbone_dump: `clef hidden` as a program of its own (the same flags and errors:
// apps/clef/hidden_command.h), for the parity suite (tests/reference/test_backbone.py) and
// bench/bench_backbone.py.
#include <iostream>

#include <CLI/CLI.hpp>

#include "core/error.h"
#include "engine_flags.h"
#include "hidden_command.h"
#include "ops/parallel.h"

int main(int argc, char** argv) {
  clef::ops::apply_default_wait_policy(argv);
  CLI::App app{"Backbone final-norm hidden states for token ids, as .npy (debugging, parity).", "clef_backbone_dump"};
  clef::cli::HiddenFlags flags;
  clef::cli::add_hidden_flags(app, flags);
  if (const int rc = clef::cli::parse_command_line(app, argc, argv, "clef_backbone_dump --help"); rc >= 0) return rc;
  try {
    return clef::cli::run_hidden(flags);
  } catch (const clef::Error& e) {  // resolving a hub name given to --model
    std::cerr << "clef_backbone_dump: " << e.what() << "\n";
    return clef::exit_code_for(e.kind());
  }
}
