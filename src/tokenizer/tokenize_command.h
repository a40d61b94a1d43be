// `clef tokenize`: print the token ids (and pieces) of a text, or decode ids.
#pragma once

#include <iosfwd>
#include <optional>
#include <string>

#include "tokenizer/pretokenizer.h"

namespace clef {

/// Options of `clef tokenize --model DIR [--pieces] [--decode] TEXT|-`.
struct TokenizeCommandOptions {
  std::string model_dir;  ///< folder with tokenizer.json (+ tokenizer_config.json)
  std::string text;       ///< the text (or ids with decode); "-" reads standard input
  bool pieces = false;    ///< one line per token: id, TAB, HF token string
  bool decode = false;    ///< text holds ids (separated by spaces, commas or newlines): print the decoded text
  bool skip_special = false;  ///< with decode: drop special added tokens
  std::optional<SplitPattern> split_override;  ///< --split-regex (nullopt: the file's)
};

/// Runs the command; writes to `out`, reads `in` when text is "-". Throws InvalidArgument for
/// invalid UTF-8 (naming the byte offset) or a malformed id list, and the load errors of
/// Tokenizer::load. Output: the ids separated by spaces on one line; --pieces: "id\ttoken" lines;
/// --decode: the decoded text followed by a newline.
void run_tokenize_command(const TokenizeCommandOptions& options, std::istream& in, std::ostream& out);

}  // namespace clef
