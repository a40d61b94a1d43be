// SPDX-License-Identifier: MIT
// Bounded line reading for the commands that take one message per line (`clef decide --jsonl`,
// `clef mcp`): a line is never held beyond a cap, so a peer that sends an endless line without a
// newline cannot make the process allocate without bound.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

namespace clef::cli {

/// Reads '\n'-terminated lines from a stream, never holding more than `max_line` bytes of one line.
/// Reads with read(2) on the stream's descriptor (the stream itself is never read through stdio),
/// so a line that arrives on a pipe is handed over at once, not when 64 KiB have piled up.
class LineReader {
 public:
  LineReader(std::FILE* f, std::size_t max_line) : f_(f), max_line_(max_line) {}

  /// Next line without its '\n' into `line`; false at the end of the input. `too_long` is set
  /// (and `line` emptied) for a line over the cap, whose rest is skipped without being stored.
  /// Throws IoError (naming `what`) when the descriptor cannot be read.
  bool next(std::string& line, bool& too_long, const char* what = "the request lines");

  std::uint64_t bytes_read() const noexcept { return bytes_; }
  /// Whether the line last returned ended with '\n' (false for a last line without one).
  bool terminated() const noexcept { return terminated_; }
  std::size_t max_line() const noexcept { return max_line_; }

 private:
  std::FILE* f_;
  std::size_t max_line_;
  char buf_[1 << 16];
  std::size_t pos_ = 0, len_ = 0;
  std::uint64_t bytes_ = 0;
  bool terminated_ = false;
};

}  // namespace clef::cli
