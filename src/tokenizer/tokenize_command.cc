#include "tokenizer/tokenize_command.h"

#include <charconv>
#include <istream>
#include <iterator>
#include <ostream>
#include <vector>

#include "core/error.h"
#include "runtime/release.h"
#include "tokenizer/tokenizer.h"

namespace clef {

void run_tokenize_command(const TokenizeCommandOptions& options, std::istream& in, std::ostream& out) {
  TokenizerLoadOptions load;
  load.split_override = options.split_override;
  const Tokenizer tok = load_model_tokenizer(options.model_dir, nullptr, load);  // a folder or a GGUF model
  const std::string text =
      options.text == "-" ? std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()) : options.text;
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

}  // namespace clef
