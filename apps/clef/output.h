// SPDX-License-Identifier: MIT
// Standard output of the commands that print an answer: a failed write (disk full, closed pipe) is
// an I/O error naming the file and the system's reason (exit 5, docs/CLI.md "Exit codes"), so an answer
// that did not reach its reader never exits 0.
#pragma once

#include <string_view>

namespace clef::cli {

/// Flushes std::cout; throws IoError when it or stdout failed.
void flush_stdout();

/// Writes `text` to stdout and flushes it, reporting a failure as flush_stdout() does, with the
/// reason taken right at the failing call.
void write_stdout(std::string_view text);

}  // namespace clef::cli
