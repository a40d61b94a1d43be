// SPDX-License-Identifier: MIT
// The subcommands of `clef`, one file each (apps/clef/*_command.cc). Each add_*_command registers
// its CLI11 subcommand and flags on the program's parser and returns what main() runs once the
// command line has been parsed with that subcommand chosen. Errors are thrown (clef::Error) and
// turned into one stderr line and an exit code by main(); docs/CLI.md "Exit codes".
#pragma once

#include <functional>
#include <string>

#include <CLI/CLI.hpp>

namespace clef::cli {

struct Command {
  CLI::App* app = nullptr;   ///< the registered subcommand
  std::string help_hint;     ///< what a usage error of this command points to, e.g. "clef serve --help"
  std::function<int()> run;  ///< runs the parsed command; returns its exit code
};

Command add_inspect_command(CLI::App& app);     ///< inspect_command.cc
Command add_make_model_command(CLI::App& app);  ///< make_model_command.cc
Command add_tokenize_command(CLI::App& app);    ///< tokenize_command.cc
Command add_decide_command(CLI::App& app);      ///< decide_command.cc
Command add_serve_command(CLI::App& app);       ///< serve_command.cc
Command add_pull_command(CLI::App& app);        ///< pull_command.cc
Command add_mcp_command(CLI::App& app);         ///< mcp_command.cc
Command add_hidden_command(CLI::App& app);      ///< hidden_command.cc

}  // namespace clef::cli
