// SPDX-License-Identifier: MIT
// `clef tokenize`: print the token ids (and pieces) of a text, or decode ids, with the tokenizer of a
// release folder or GGUF model (docs/TOKENIZER.md).
#include <charconv>
#include <iostream>
#include <istream>
#include <iterator>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "commands.h"
#include "core/error.h"
#include "engine_flags.h"
#include "output.h"
#include "runtime/release.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer.h"

namespace clef::cli {

namespace {

/// Options of `clef tokenize --model DIR [--pieces] [--decode] TEXT|-`.
struct TokenizeOptions {
  std::string model_dir;      ///< folder with tokenizer.json (+ tokenizer_config.json), or a GGUF model
  std::string text;           ///< the text (or ids with decode); "-" reads standard input
  bool pieces = false;        ///< one line per token: id, TAB, HF token string
  bool decode = false;        ///< text holds ids (separated by spaces, commas or newlines): print the decoded text
  bool skip_special = false;  ///< with decode: drop special added tokens
  std::optional<SplitPattern> split_override;  ///< --split-regex (nullopt: the file's)
};

/// Runs the command; writes to `out`, reads `in` when text is "-". Throws InvalidArgument for
/// invalid UTF-8 (naming the byte offset) or a malformed id list, and the load errors of
/// Tokenizer::load. Output: the ids separated by spaces on one line; --pieces: "id\ttoken" lines;
/// --decode: the decoded text followed by a newline.
void run_tokenize(const TokenizeOptions& options, std::istream& in, std::ostream& out) {
  TokenizerLoadOptions load;
  load.split_override = options.split_override;
  const Tokenizer tok = load_model_tokenizer(options.model_dir, nullptr, load);  // a folder or a GGUF model
  const std::string text = options.text == "-"
                               ? std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>())
                               : options.text;
  if (options.decode) {
    std::vector<std::int32_t> ids;
    std::size_t i = 0;
    while (i < text.size()) {
      const char c = text[i];
      if (c == ' ' || c == ',' || c == '\n' || c == '\r' || c == '\t' || c == '[' || c == ']') {
        ++i;
        continue;
      }
      std::int32_t id = 0;
      const auto [p, ec] = std::from_chars(text.data() + i, text.data() + text.size(), id);
      if (ec != std::errc() || p == text.data() + i) {
        throw InvalidArgument("tokenize --decode: expected token ids, got \"" + text.substr(i, 20) + "\" at offset " +
                              std::to_string(i));
      }
      ids.push_back(id);
      i = static_cast<std::size_t>(p - text.data());
    }
    out << tok.decode(ids, options.skip_special) << "\n";
    return;
  }
  const std::vector<std::int32_t> ids = tok.encode(text);
  if (options.pieces) {
    for (const auto id : ids) out << id << "\t" << tok.token_string(id) << "\n";
    return;
  }
  for (std::size_t k = 0; k < ids.size(); ++k) out << (k ? " " : "") << ids[k];
  out << "\n";
}

struct TokenizeFlags {
  TokenizeOptions options;
  std::string split_regex = "file";
  CLI::Option* model = nullptr;
};

}  // namespace

Command add_tokenize_command(CLI::App& app) {
  auto f = std::make_shared<TokenizeFlags>();
  TokenizeOptions& tk = f->options;
  auto* tokenize = app.add_subcommand("tokenize",
                                      "Print the token ids of TEXT (exactly as Hugging Face tokenizers), "
                                      "its pieces, or decode ids. Invalid UTF-8 is rejected (exit 2).");
  tokenize->add_option("TEXT", tk.text, "Text to encode, ids to --decode, or - to read standard input")->required();
  f->model = tokenize->add_option(
      "--model,-m", tk.model_dir,
      "Folder with tokenizer.json, a GGUF model (tokenizer.json beside it, else its tokenizer.ggml.* metadata), or a "
      "hub name in the shared cache (default: the embedded tiny model)");
  tokenize->add_flag("--pieces", tk.pieces, "One line per token: id, TAB, token string");
  tokenize->add_flag("--decode", tk.decode, "TEXT holds token ids: print the decoded text");
  tokenize->add_flag("--skip-special", tk.skip_special, "With --decode: drop special added tokens");
  add_split_regex_flag(*tokenize, f->split_regex);
  return {tokenize, "clef --help", [f] {
            bool is_default = false;
            f->options.model_dir =
                resolve_model_arg(f->options.model_dir, f->model->count() > 0, "", false, &is_default);
            f->options.split_override = split_override_from_flag(f->split_regex);
            run_tokenize(f->options, std::cin, std::cout);
            flush_stdout();
            return 0;
          }};
}

}  // namespace clef::cli
