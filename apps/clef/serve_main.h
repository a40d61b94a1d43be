// `clef serve`: the HTTP server subcommand (flags and exit codes in serve_main.cc's --help).
#pragma once

namespace clef::cli {

/// Runs `clef serve` with argv[0] == "serve". Returns the exit code; clef::Error escapes to main().
int serve_main(int argc, char** argv);

}  // namespace clef::cli
