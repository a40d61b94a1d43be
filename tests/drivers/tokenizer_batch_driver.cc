// SPDX-License-Identifier: MIT
// clef_tokenizer_batch: a batch driver for the live parity tests (tests/reference/
// test_tokenizer_parity*.py). Not a test by itself. One process encodes many inputs:
//
//   clef_tokenizer_batch --model DIR | --json FILE [--config FILE] [--no-config] MODE < in > out
//
// MODE: encode | pieces | ends | props | nfc | decode | decode-skip. Input: records of [u32 length][bytes]
// (little endian); for decode*, the bytes are little-endian int32 ids. Output per record:
//   encode: [u32 n][n x i32]; ends: [u32 n][n x u32 code-point offsets]; pieces: [u32 n][n x
//   (u32 len, bytes)]; props / nfc / decode*: [u32 len][bytes];
//   an input the tokenizer rejects: [u32 0xFFFFFFFF][u32 len][message].
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw clef::IoError("cannot open " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return std::move(ss).str();
}

void put_u32(std::string& out, std::uint32_t v) { out.append(reinterpret_cast<const char*>(&v), 4); }

}  // namespace

int main(int argc, char** argv) {
  try {
    std::string model, json_path, config_path, mode;
    bool no_config = false;
    std::string split;
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      if (a == "--model" && i + 1 < argc) {
        model = argv[++i];
      } else if (a == "--json" && i + 1 < argc) {
        json_path = argv[++i];
      } else if (a == "--config" && i + 1 < argc) {
        config_path = argv[++i];
      } else if (a == "--no-config") {
        no_config = true;
      } else if (a == "--split-regex" && i + 1 < argc) {
        split = argv[++i];
      } else {
        mode = a;
      }
    }
    clef::TokenizerLoadOptions opt;
    opt.merge_config_added_tokens = !no_config;
    if (!split.empty()) opt.split_override = clef::split_pattern_from_name(split);
    const clef::Tokenizer tok =
        !model.empty() ? clef::Tokenizer::load(model, opt)
                       : clef::Tokenizer::from_json(slurp(json_path),
                                                    config_path.empty() ? std::string() : slurp(config_path), opt);
    std::ios::sync_with_stdio(false);
    const std::string input((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
    std::string out;
    clef::TokenizerWorkspace ws;
    std::vector<std::int32_t> ids;
    std::vector<std::uint32_t> ends;
    std::size_t pos = 0;
    while (pos + 4 <= input.size()) {
      std::uint32_t len;
      std::memcpy(&len, input.data() + pos, 4);
      pos += 4;
      const std::string_view rec(input.data() + pos, len);
      pos += len;
      try {
        if (mode == "encode") {
          ids.clear();
          tok.encode(rec, ids, ws);
          put_u32(out, static_cast<std::uint32_t>(ids.size()));
          out.append(reinterpret_cast<const char*>(ids.data()), ids.size() * 4);
        } else if (mode == "pieces") {
          const auto pieces = tok.pre_tokenize(rec);
          put_u32(out, static_cast<std::uint32_t>(pieces.size()));
          for (const auto& p : pieces) {
            put_u32(out, static_cast<std::uint32_t>(p.size()));
            out += p;
          }
        } else if (mode == "ends") {
          // end offsets, in code points, of every added token and piece (needs normalizer null)
          ends.clear();
          tok.pre_tokenize_ends(rec, ends, ws);
          put_u32(out, static_cast<std::uint32_t>(ends.size()));
          std::size_t byte = 0, cps = 0;
          for (const std::uint32_t e : ends) {
            while (byte < e) {
              const auto b = static_cast<unsigned char>(rec[byte]);
              byte += b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
              ++cps;
            }
            put_u32(out, static_cast<std::uint32_t>(cps));
          }
        } else if (mode == "props") {
          // one byte of clef::unicode::props per code point of the (valid UTF-8) record
          std::string bits;
          for (std::size_t i = 0; i < rec.size();) {
            std::size_t n = 0;
            const std::uint32_t cp =
                clef::unicode::decode_utf8(reinterpret_cast<const unsigned char*>(rec.data()) + i, n);
            bits.push_back(static_cast<char>(clef::unicode::props(cp)));
            i += n;
          }
          put_u32(out, static_cast<std::uint32_t>(bits.size()));
          out += bits;
        } else if (mode == "nfc") {
          const std::string s = clef::unicode::nfc(rec);
          put_u32(out, static_cast<std::uint32_t>(s.size()));
          out += s;
        } else if (mode == "decode" || mode == "decode-skip") {
          std::vector<std::int32_t> d(rec.size() / 4);
          std::memcpy(d.data(), rec.data(), d.size() * 4);
          const std::string s = tok.decode(d, mode == "decode-skip");
          put_u32(out, static_cast<std::uint32_t>(s.size()));
          out += s;
        } else {
          std::cerr << "unknown mode " << mode << "\n";
          return 2;
        }
      } catch (const clef::InvalidArgument& e) {
        put_u32(out, 0xFFFFFFFFu);
        const std::string m = e.what();
        put_u32(out, static_cast<std::uint32_t>(m.size()));
        out += m;
      }
    }
    std::fwrite(out.data(), 1, out.size(), stdout);
    return 0;
  } catch (const clef::Error& e) {
    std::cerr << "clef_tokenizer_batch: error: " << e.what() << "\n";
    return clef::exit_code_for(e.kind());
  }
}
