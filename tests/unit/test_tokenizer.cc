// SPDX-License-Identifier: MIT
// Unit tests of the tokenizer (src/tokenizer/): UTF-8, Unicode tables, NFC, the split scanner,
// BPE rules and added tokens on small synthetic tokenizer.json files (docs/TOKENIZER.md §1, §1.9).
// Byte-exact parity with HF `tokenizers` on real vocabularies is tested live by
// tests/reference/test_tokenizer_parity*.py.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/paths.h"
#include "test_util.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace clef {
namespace {

using json = nlohmann::json;
using Ids = std::vector<std::int32_t>;

// ---------------------------------------------------------------------------------------------
// helpers

/// GPT-2 byte -> unicode string (docs/TOKENIZER.md §1.3), written independently of the library.
std::string byte_char(unsigned b) {
  auto printable = [](unsigned x) { return (x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE; };
  std::uint32_t cp = b;
  if (!printable(b)) {
    cp = 0x100;
    for (unsigned x = 0; x < b; ++x) cp += printable(x) ? 0u : 1u;
  }
  std::string s;
  unicode::append_utf8(cp, s);
  return s;
}
std::string bl(std::string_view raw) {
  std::string s;
  for (const char c : raw) s += byte_char(static_cast<unsigned char>(c));
  return s;
}

/// A tokenizer.json with ids 0..255 = bytes (in byte order), then `extra` tokens, the given merges
/// (raw byte strings, converted to byte-level form) and added tokens.
json make_json(const std::vector<std::string>& extra, const std::vector<std::pair<std::string, std::string>>& merges,
               const json& added = json::array(), const char* regex = kSplitRegexQwen35) {
  json vocab = json::object();
  for (unsigned b = 0; b < 256; ++b) vocab[byte_char(b)] = b;
  int id = 256;
  for (const auto& e : extra) vocab[bl(e)] = id++;
  json m = json::array();
  for (const auto& [a, b] : merges) m.push_back({bl(a), bl(b)});
  json bytelevel = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}};
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens", added},
          {"normalizer", {{"type", "NFC"}}},
          {"pre_tokenizer",
           {{"type", "Sequence"},
            {"pretokenizers",
             {{{"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", "Isolated"}, {"invert", false}},
              bytelevel}}}},
          {"post_processor", bytelevel},
          {"decoder", bytelevel},
          {"model",
           {{"type", "BPE"},
            {"dropout", nullptr},
            {"unk_token", nullptr},
            {"continuing_subword_prefix", ""},
            {"end_of_word_suffix", ""},
            {"fuse_unk", false},
            {"byte_fallback", false},
            {"ignore_merges", false},
            {"vocab", vocab},
            {"merges", m}}}};
}

json added_token(int id, const std::string& content, bool special) {
  return {{"id", id},        {"content", content},  {"single_word", false}, {"lstrip", false},
          {"rstrip", false}, {"normalized", false}, {"special", special}};
}

Tokenizer load(const json& j, const json& config = json()) {
  return Tokenizer::from_json(j.dump(), config.is_null() ? std::string() : config.dump());
}

std::vector<std::string> split(std::string_view text, SplitPattern p) {
  std::vector<std::uint32_t> ends;
  split_pieces(text, p, ends);
  std::vector<std::string> out;
  std::size_t start = 0;
  for (const auto e : ends) {
    out.emplace_back(text.substr(start, e - start));
    start = e;
  }
  return out;
}

using Pieces = std::vector<std::string>;

// ---------------------------------------------------------------------------------------------
// UTF-8 and Unicode tables

TEST(TokenizerUnicode, Utf8Validation) {
  using unicode::find_invalid_utf8;
  constexpr auto npos = std::string_view::npos;
  EXPECT_EQ(find_invalid_utf8(""), npos);
  EXPECT_EQ(find_invalid_utf8(std::string("a\0b", 3)), npos);  // NUL is valid
  EXPECT_EQ(find_invalid_utf8("h\xC3\xA9llo \xE4\xBD\xA0 \xF0\x9F\x98\x80"), npos);
  EXPECT_EQ(find_invalid_utf8("\xF4\x8F\xBF\xBF"), npos);  // U+10FFFF
  EXPECT_EQ(find_invalid_utf8("ab\xFF"), 2u);
  EXPECT_EQ(find_invalid_utf8("\xC0\xAF"), 0u);             // overlong
  EXPECT_EQ(find_invalid_utf8("\xE0\x80\xAF"), 0u);         // overlong
  EXPECT_EQ(find_invalid_utf8("x\xED\xA0\x80"), 1u);        // surrogate U+D800
  EXPECT_EQ(find_invalid_utf8("\xF4\x90\x80\x80"), 0u);     // > U+10FFFF
  EXPECT_EQ(find_invalid_utf8("abcdefghij\xE2\x82"), 10u);  // truncated at end
  EXPECT_EQ(find_invalid_utf8("\x80"), 0u);                 // stray continuation
}

TEST(TokenizerUnicode, LossyDecodingReplacesMaximalSubparts) {
  EXPECT_EQ(unicode::utf8_lossy("ok"), "ok");
  EXPECT_EQ(unicode::utf8_lossy("a\xE2\x82"), "a\xEF\xBF\xBD");  // one U+FFFD for a truncated sequence
  EXPECT_EQ(unicode::utf8_lossy("\xFF\xFE"), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(unicode::utf8_lossy("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate: 3
}

TEST(TokenizerUnicode, TableVersionsAndClasses) {
  using namespace unicode;
  EXPECT_STREQ(props_unicode_version(), "16.0.0");
  EXPECT_STREQ(nfc_unicode_version(), "9.0");
  EXPECT_EQ(props('A'), kLetter);
  EXPECT_EQ(props(0x4E2D), kLetter);        // 中
  EXPECT_EQ(props(0x0301) & kMark, kMark);  // combining acute
  EXPECT_EQ(props(0xFE0F) & kMark, kMark);  // VS16
  EXPECT_EQ(props('7'), kNumber);
  EXPECT_EQ(props(0x00BD), kNumber);        // ½
  EXPECT_EQ(props(0x2167), kNumber);        // Ⅷ (Nl)
  EXPECT_EQ(props(0x0897) & kMark, kMark);  // new in Unicode 16.0
  EXPECT_EQ(props(0x1C89), kLetter);        // new in Unicode 16.0
  for (std::uint32_t ws : {0x9u, 0xAu, 0xDu, 0x20u, 0x85u, 0xA0u, 0x1680u, 0x2000u, 0x200Au, 0x2028u, 0x2029u, 0x202Fu,
                           0x205Fu, 0x3000u}) {
    EXPECT_TRUE(props(ws) & kSpace) << ws;
  }
  for (std::uint32_t not_ws : {0x180Eu, 0x200Bu, 0xFEFFu, 0x1Cu, 0x1Fu}) EXPECT_FALSE(props(not_ws) & kSpace) << not_ws;
  for (std::uint32_t c = 0; c < 128; ++c) EXPECT_FALSE(props(c) & kNfcCheck) << c;
  EXPECT_EQ(props(0x110000), 0);
}

TEST(TokenizerUnicode, Nfc) {
  using unicode::nfc;
  EXPECT_EQ(nfc("plain ascii"), "plain ascii");
  EXPECT_EQ(nfc("e\xCC\x81"), "\xC3\xA9");                                 // e + U+0301 -> é
  EXPECT_EQ(nfc("\xE2\x84\xAB"), "\xC3\x85");                              // U+212B ANGSTROM -> Å (singleton)
  EXPECT_EQ(nfc("\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8"), "\xEA\xB0\x81");  // Hangul L V T -> 각
  EXPECT_EQ(nfc("\xEA\xB0\x80\xE1\x86\xA8"), "\xEA\xB0\x81");              // LV + T
  // canonical ordering: U+0301 (230) after U+0323 (220) once reordered; e + dot below composes first
  EXPECT_EQ(nfc("e\xCC\x81\xCC\xA3"), "\xE1\xBA\xB9\xCC\x81");  // ẹ + U+0301
  // U+1E4EC (ccc 232 since Unicode 15) is unassigned in the Unicode 9.0 data HF uses: not reordered
  EXPECT_EQ(nfc("a\xF0\x9E\x93\xAC\xCC\x96"), "a\xF0\x9E\x93\xAC\xCC\x96");
  // a composition excluded character decomposes: U+0958 -> U+0915 U+093C
  EXPECT_EQ(nfc("\xE0\xA5\x98"), "\xE0\xA4\x95\xE0\xA4\xBC");
  EXPECT_TRUE(unicode::nfc_quick_check("caf\xC3\xA9 \xE4\xBD\xA0\xE5\xA5\xBD"));
  EXPECT_FALSE(unicode::nfc_quick_check("cafe\xCC\x81"));
}

// ---------------------------------------------------------------------------------------------
// split scanner (docs/TOKENIZER.md §1.2 examples)

TEST(TokenizerSplit, PatternRecognition) {
  EXPECT_EQ(split_pattern_from_regex(kSplitRegexQwen35), SplitPattern::kQwen35);
  EXPECT_EQ(split_pattern_from_regex(kSplitRegexQwen2), SplitPattern::kQwen2);
  EXPECT_FALSE(split_pattern_from_regex("\\p{L}+"));
  EXPECT_FALSE(split_pattern_from_regex(std::string(kSplitRegexQwen35) + "|x"));
}

TEST(TokenizerSplit, Qwen35Table) {
  const auto p = SplitPattern::kQwen35;
  EXPECT_EQ(split("a  b", p), (Pieces{"a", " ", " b"}));
  EXPECT_EQ(split("abc   ", p), (Pieces{"abc", "   "}));
  EXPECT_EQ(split("a   \n\n  b", p), (Pieces{"a", "   \n\n", " ", " b"}));
  EXPECT_EQ(split("x\r\n\r\ny", p), (Pieces{"x", "\r\n\r\n", "y"}));
  EXPECT_EQ(split("1234", p), (Pieces{"1", "2", "3", "4"}));
  EXPECT_EQ(split("don't DON'T", p), (Pieces{"don", "'t", " DON", "'T"}));
  EXPECT_EQ(split("it's 's", p), (Pieces{"it", "'s", " '", "s"}));
  EXPECT_EQ(split("hello!!!\n\nnext", p), (Pieces{"hello", "!!!\n\n", "next"}));
  EXPECT_EQ(split("$100", p), (Pieces{"$", "1", "0", "0"}));
  EXPECT_EQ(split("_foo (bar @user .com", p), (Pieces{"_foo", " (", "bar", " @", "user", " .", "com"}));
  EXPECT_EQ(split("\tfoo", p), (Pieces{"\tfoo"}));
  EXPECT_EQ(split("你好，世界！", p), (Pieces{"你好", "，世界", "！"}));
  EXPECT_EQ(split("สวัสดีครับ", p), (Pieces{"สวัสดีครับ"}));
  EXPECT_EQ(split("नमस्ते", p), (Pieces{"नमस्ते"}));
  EXPECT_EQ(split("\xE2\x9D\xA4\xEF\xB8\x8F\xE2\x9D\xA4\xEF\xB8\x8F", p),
            (Pieces{"\xE2\x9D\xA4\xEF\xB8\x8F", "\xE2\x9D\xA4\xEF\xB8\x8F"}));  // ❤️❤️
  EXPECT_EQ(split("x\xCC\x81y", p), (Pieces{"x\xCC\x81y"}));
  EXPECT_EQ(split("a\xE3\x80\x80"
                  "b",
                  p),
            (Pieces{"a",
                    "\xE3\x80\x80"
                    "b"}));
  EXPECT_EQ(split("a \xE3\x80\x80"
                  "b",
                  p),
            (Pieces{"a", " ",
                    "\xE3\x80\x80"
                    "b"}));
  EXPECT_EQ(split("x'\xC5\xBF", p), (Pieces{"x", "'\xC5\xBF"}));    // 'ſ is a contraction
  EXPECT_EQ(split("\xE2\x80\x99s", p), (Pieces{"\xE2\x80\x99s"}));  // ’s: prefix + word
  EXPECT_EQ(split("'LL 'Re", p), (Pieces{"'LL", " '", "Re"}));
  EXPECT_EQ(split("", p), (Pieces{}));
  EXPECT_EQ(split(std::string("\0a", 2), p), (Pieces{std::string("\0a", 2)}));
}

TEST(TokenizerSplit, Qwen2DiffersOnlyOnMarks) {
  const auto p = SplitPattern::kQwen2;
  EXPECT_EQ(split("x\xCC\x81y", p), (Pieces{"x", "\xCC\x81y"}));
  EXPECT_EQ(split("\xE2\x9D\xA4\xEF\xB8\x8F\xE2\x9D\xA4\xEF\xB8\x8F", p),
            (Pieces{"\xE2\x9D\xA4\xEF\xB8\x8F\xE2\x9D\xA4\xEF\xB8\x8F"}));
  EXPECT_EQ(split("hello!!!\n\nnext", p), (Pieces{"hello", "!!!\n\n", "next"}));
  EXPECT_EQ(split("a  b", p), (Pieces{"a", " ", " b"}));
}

// ---------------------------------------------------------------------------------------------
// BPE rules

TEST(TokenizerBpe, PairKeyedMergesAndRankOrder) {
  // vocab: ab(256) bc(257) abc(258). Merges: (a,b) rank 0, (b,c) rank 1, (ab,c) rank 2.
  // "abc": (a,b) wins (lowest rank) -> ab c -> (ab,c) -> abc. Pair-keyed: (a,bc) is not a merge.
  const Tokenizer t = load(make_json({"ab", "bc", "abc"}, {{"a", "b"}, {"b", "c"}, {"ab", "c"}}));
  EXPECT_EQ(t.encode("abc"), (Ids{258}));
  const Tokenizer u = load(make_json({"ab", "bc", "abc"}, {{"b", "c"}, {"a", "b"}, {"ab", "c"}}));
  EXPECT_EQ(u.encode("abc"), (Ids{'a', 257}));  // (b,c) first; (a,bc) is not a merge
  EXPECT_EQ(t.merge_count(), 3u);
}

TEST(TokenizerBpe, LeftmostOnTiesAndLaterDuplicateWins) {
  const Tokenizer t = load(make_json({"aa"}, {{"a", "a"}}));
  EXPECT_EQ(t.encode("aaa"), (Ids{256, 'a'}));
  // duplicate (a,b): the later rank wins, so (b,c) at rank 1 now beats (a,b) at rank 2
  const Tokenizer d = load(make_json({"ab", "bc"}, {{"a", "b"}, {"b", "c"}, {"a", "b"}}));
  EXPECT_EQ(d.encode("abc"), (Ids{'a', 257}));
  EXPECT_EQ(d.merge_count(), 2u);
}

TEST(TokenizerBpe, UnreachableTokenNeverProduced) {
  // "xyz" is in the vocab but no merge builds it (ignore_merges false, docs/TOKENIZER.md §1.4)
  const Tokenizer t = load(make_json({"xy", "xyz"}, {{"x", "y"}}));
  EXPECT_EQ(t.encode("xyz"), (Ids{256, 'z'}));
  json j = make_json({"xy", "xyz"}, {{"x", "y"}});
  j["model"]["ignore_merges"] = true;
  const Tokenizer im = load(j);
  EXPECT_TRUE(im.ignore_merges());
  EXPECT_EQ(im.encode("xyz"), (Ids{257}));
}

TEST(TokenizerBpe, MissingByteIsDropped) {
  json j = make_json({}, {});
  j["model"]["vocab"].erase(byte_char('q'));
  const Tokenizer t = load(j);
  EXPECT_EQ(t.encode("aqb"), (Ids{'a', 'b'}));
}

TEST(TokenizerBpe, LongPiecesUseHeapPathWithSameResult) {
  const Tokenizer t = load(make_json({"aa", "aaaa", "ab"}, {{"a", "a"}, {"aa", "aa"}, {"a", "b"}}));
  // 1000 letters: one piece far above the small-piece limit
  std::string s;
  for (int i = 0; i < 250; ++i) s += "aaab";
  Ids expect;
  for (int i = 0; i < 250; ++i) expect.insert(expect.end(), {256, 258});  // (a,a) then a b -> aa ab
  EXPECT_EQ(t.encode(s), expect);
  // same chunk alone (small path)
  EXPECT_EQ(t.encode("aaab"), (Ids{256, 258}));
  EXPECT_EQ(t.encode(std::string(9, 'a')), (Ids{257, 257, 'a'}));
  EXPECT_EQ(t.encode(std::string(1001, 'a')).size(), 251u);
}

TEST(TokenizerBpe, SmallCacheGivesSameIds) {
  TokenizerLoadOptions small;
  small.cache_capacity = 2;
  const json j = make_json({"he", "ll", "hell", "hello"}, {{"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}});
  const Tokenizer a = Tokenizer::from_json(j.dump(), "", small);
  const Tokenizer b = load(j);
  const std::string text = "hello hell he hello hello, hello! hel lo";
  TokenizerWorkspace ws;
  Ids x, y;
  for (int i = 0; i < 3; ++i) {
    x.clear();
    a.encode(text, x, ws);
    EXPECT_EQ(x, b.encode(text));
  }
  EXPECT_LE(ws.cached_pieces(), 2u);
  small.cache_capacity = 0;
  const Tokenizer c = Tokenizer::from_json(j.dump(), "", small);
  EXPECT_EQ(c.encode(text), b.encode(text));
}

// ---------------------------------------------------------------------------------------------
// added tokens

json qwen_like_added() {
  json a = json::array();
  a.push_back(added_token(300, "<|im_start|>", true));
  a.push_back(added_token(301, "<|im_end|>", true));
  a.push_back(added_token(302, "<think>", false));
  a.push_back(added_token(303, "<|im", true));  // prefix of two others: leftmost-longest must win
  return a;
}

TEST(TokenizerAdded, LeftmostLongestOnRawText) {
  const Tokenizer t = load(make_json({}, {}, qwen_like_added()));
  EXPECT_EQ(t.encode("X.<|im_end|>"), (Ids{'X', '.', 301}));
  EXPECT_EQ(t.encode("<|im_start|><|im_end|>"), (Ids{300, 301}));
  EXPECT_EQ(t.encode("<|im_sta"), (Ids{303, '_', 's', 't', 'a'}));
  EXPECT_EQ(t.encode("<think>x"), (Ids{302, 'x'}));
  EXPECT_EQ(t.encode("<thin"), (Ids{'<', 't', 'h', 'i', 'n'}));
  // NFC never crosses an added-token boundary: e<think>U+0301 stays decomposed around it
  EXPECT_EQ(t.encode("e<think>\xCC\x81"), (Ids{'e', 302, 0xCC, 0x81}));
  const auto pieces = t.pre_tokenize("a <|im_end|>  b");
  EXPECT_EQ(pieces, (Pieces{"a", " ", "<|im_end|>", " ", " b"}));
}

TEST(TokenizerAdded, ConfigUnion) {
  json config = {{"added_tokens_decoder",
                  {{"300", added_token(300, "<|im_start|>", true)}, {"310", added_token(310, "<|audio_pad|>", true)}}}};
  for (auto& [k, v] : config["added_tokens_decoder"].items()) v.erase("id");
  const Tokenizer with = load(make_json({}, {}, qwen_like_added()), config);
  EXPECT_EQ(with.encode("<|audio_pad|>"), (Ids{310}));
  EXPECT_EQ(with.added_tokens().size(), 5u);
  EXPECT_FALSE(with.added_tokens().back().in_tokenizer_json);
  TokenizerLoadOptions no_union;
  no_union.merge_config_added_tokens = false;
  const Tokenizer without = Tokenizer::from_json(make_json({}, {}, qwen_like_added()).dump(), config.dump(), no_union);
  EXPECT_EQ(without.encode("<|audio_pad|>").size(), 13u);
  json bad = config;
  bad["added_tokens_decoder"]["300"]["content"] = "<|other|>";
  EXPECT_THROW(load(make_json({}, {}, qwen_like_added()), bad), ModelLoadError);
  json split = config;
  split["split_special_tokens"] = true;
  EXPECT_THROW(load(make_json({}, {}, qwen_like_added()), split), Unsupported);
}

TEST(TokenizerDecode, RulesOfTheByteLevelDecoder) {
  const Tokenizer t = load(make_json({"ab"}, {{"a", "b"}}, qwen_like_added()));
  const Ids ids = t.encode("ab <think>\xE4\xBD\xA0<|im_end|>");
  EXPECT_EQ(t.decode(ids), "ab <think>\xE4\xBD\xA0<|im_end|>");
  EXPECT_EQ(t.decode(ids, true), "ab <think>\xE4\xBD\xA0");   // non-special <think> stays
  EXPECT_EQ(t.decode(Ids{'a', 999999, -1, 299, 'b'}), "ab");  // unknown ids dropped
  EXPECT_EQ(t.decode(Ids{0xE4, 0xBD}), "\xEF\xBF\xBD");       // incomplete UTF-8 -> one U+FFFD
  EXPECT_EQ(t.token_string(' '), "\xC4\xA0");                 // Ġ
  EXPECT_EQ(t.token_bytes(' '), " ");
  EXPECT_EQ(t.token_to_id("\xC4\xA0"), ' ');
  EXPECT_EQ(t.token_to_id("<|im_end|>"), 301);
  EXPECT_EQ(t.token_to_id("nope"), -1);
  EXPECT_EQ(t.id_limit(), 304);
}

// ---------------------------------------------------------------------------------------------
// policies and refusals

TEST(TokenizerPolicy, InvalidUtf8IsRejectedWithOffset) {
  const Tokenizer t = load(make_json({}, {}));
  try {
    t.encode("abc\xC3(");
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_STREQ(e.what(), "tokenizer input: invalid UTF-8 at byte offset 3 (byte 0xC3)");
  }
  EXPECT_THROW(t.pre_tokenize("\xFF"), InvalidArgument);
  EXPECT_EQ(t.encode(std::string("\0", 1)), (Ids{0}));
}

TEST(TokenizerPolicy, RefusesWhatItDoesNotReproduce) {
  EXPECT_THROW(load(make_json({}, {}, json::array(), "\\p{L}+|\\s+")), Unsupported);
  json j = make_json({}, {});
  j["normalizer"] = {{"type", "NFKC"}};
  EXPECT_THROW(load(j), Unsupported);
  j = make_json({}, {});
  j["normalizer"] = nullptr;
  EXPECT_FALSE(load(j).normalizes_nfc());
  j = make_json({}, {});
  j["model"]["byte_fallback"] = true;
  EXPECT_THROW(load(j), Unsupported);
  j = make_json({}, {});
  j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed";
  EXPECT_THROW(load(j), Unsupported);
  j = make_json({}, {});
  j["post_processor"] = {{"type", "TemplateProcessing"}};
  EXPECT_THROW(load(j), Unsupported);
  json added = json::array({added_token(300, "<x>", true)});
  added[0]["lstrip"] = true;
  EXPECT_THROW(load(make_json({}, {}, added)), Unsupported);
  added[0]["lstrip"] = false;
  added[0]["normalized"] = true;
  EXPECT_THROW(load(make_json({}, {}, added)), Unsupported);
  // a merge naming a token that is not in the vocab
  EXPECT_THROW(load(make_json({}, {{"a", "b"}})), ModelLoadError);
  EXPECT_THROW(Tokenizer::from_json("{\"model\": ", ""), ModelLoadError);
  j = make_json({}, {});
  j["model"]["vocab"]["x-dup"] = 5;  // id 5 used twice
  EXPECT_THROW(load(j), ModelLoadError);
}

TEST(TokenizerPolicy, LegacyMergeStringsAndFiles) {
  json j = make_json({"ab"}, {});
  j["model"]["merges"] = json::array({"a b"});
  EXPECT_EQ(load(j).encode("ab"), (Ids{256}));
  j["model"]["merges"] = json::array({"ab"});
  EXPECT_THROW(load(j), ModelLoadError);
  test::TempDir dir;
  test::write_file(dir.path() / "tokenizer.json", make_json({"ab"}, {{"a", "b"}}, qwen_like_added()).dump());
  const Tokenizer t = Tokenizer::load(dir.str());
  EXPECT_EQ(t.encode("ab<|im_end|>"), (Ids{256, 301}));
  test::TempDir empty;
  EXPECT_THROW(Tokenizer::load(empty.str()), ModelLoadError);
}

TEST(TokenizerPolicy, RandomInputsRoundTripOrAreRejected) {
  // decode(encode(x)) == NFC(x) for valid x; random bytes either encode or throw InvalidArgument.
  const Tokenizer t = load(make_json({"ab", "abc", "  "}, {{"a", "b"}, {"ab", "c"}, {" ", " "}}, qwen_like_added()));
  std::mt19937 rng(42);
  const std::uint32_t pool[] = {'a',   'b',   'c',    ' ',    '\n',    '\r',   '\'',   's',   'S',    '1',
                                '!',   '<',   '|',    '>',    0xE9,    0x301,  0x323,  0x17F, 0x3000, 0x4E2D,
                                0xE31, 0x94D, 0xFE0F, 0x200D, 0x1F600, 0xAC00, 0x11A8, 0x0};
  for (int i = 0; i < 3000; ++i) {
    std::string s;
    const int n = static_cast<int>(rng() % 24);
    for (int k = 0; k < n; ++k) unicode::append_utf8(pool[rng() % std::size(pool)], s);
    if (rng() % 5 == 0) s += "<|im_end|>";
    EXPECT_EQ(t.decode(t.encode(s)), unicode::nfc(s));
    std::string bytes;
    for (int k = 0; k < n; ++k) bytes.push_back(static_cast<char>(rng() % 256));
    try {
      EXPECT_EQ(t.decode(t.encode(bytes)), unicode::nfc(bytes));
    } catch (const InvalidArgument&) {
      EXPECT_NE(unicode::find_invalid_utf8(bytes), std::string_view::npos);
    }
  }
  std::string big(1 << 20, ' ');  // a megabyte of spaces: one piece, heap BPE
  EXPECT_EQ(t.decode(t.encode(big)), big);
}

TEST(TokenizerPolicy, ConcurrentEncodeMatchesSerial) {
  const Tokenizer t = load(make_json({"ab", "abc"}, {{"a", "b"}, {"ab", "c"}}, qwen_like_added()));
  const std::string text = "abc ab<|im_end|> cab abcabc \xE4\xBD\xA0 x'll";
  const Ids expect = t.encode(text);
  std::vector<Ids> got(4);
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < got.size(); ++i) {
    threads.emplace_back([&, i] {
      for (int k = 0; k < 200; ++k) got[i] = t.encode(text);
    });
  }
  for (auto& th : threads) th.join();
  for (const auto& g : got) EXPECT_EQ(g, expect);
}

TEST(TokenizerSplit, StepsGiveTheSamePieces) {
  // split_pieces_from resumed at every piece end, a few pieces at a time, gives split_pieces' ends.
  const std::string text =
      "Hello, world! It's 2026\r\n\n  spaces   and\ttabs 'll don't \xE4\xBD\xA0\xE5\xA5\xBD e\xCC\x81 ";
  for (const SplitPattern p : {SplitPattern::kQwen35, SplitPattern::kQwen2}) {
    std::vector<std::uint32_t> whole;
    split_pieces(text, p, whole);
    for (std::size_t step = 1; step <= 4; ++step) {
      std::vector<std::uint32_t> ends;
      std::size_t pos = 0;
      while (pos < text.size()) {
        const std::size_t before = ends.size();
        pos = split_pieces_from(text, p, pos, step, ends);
        ASSERT_LE(ends.size() - before, step);
        ASSERT_EQ(pos, ends.back());
      }
      EXPECT_EQ(ends, whole) << step;
    }
  }
}

TEST(TokenizerBounded, SameIdsWithinTheLimitAndAPrefixBeyond) {
  const Tokenizer t = load(make_json({"ab", "abc", "  "}, {{"a", "b"}, {"ab", "c"}, {" ", " "}}, qwen_like_added()));
  TokenizerWorkspace ws;
  const std::string texts[] = {"", "abc", "abc ab<|im_end|> cab abcabc \xE4\xBD\xA0 x'll 12345",
                               std::string(5000, 'a') + " " + std::string(3000, '7') + "<|im_end|>"};
  for (const std::string& text : texts) {
    const Ids full = t.encode(text);
    for (const std::size_t limit : {std::size_t{0}, std::size_t{1}, std::size_t{5},
                                    full.size() - (full.empty() ? 0 : 1), full.size(), full.size() + 7}) {
      Ids got;
      const bool fits = t.encode_bounded(text, limit, got, ws);
      EXPECT_EQ(fits, full.size() <= limit) << limit;
      if (fits) {
        EXPECT_EQ(got, full);
      } else {
        // a prefix of the full ids; past the limit by at most one piece, itself at most
        // (room x the longest token's 3 bytes) ids
        ASSERT_LE(got.size(), full.size());
        EXPECT_TRUE(std::equal(got.begin(), got.end(), full.begin()));
        EXPECT_LE(got.size(), (limit + 1) * 4);
      }
    }
  }
  // Ids already in the vector count toward the limit.
  Ids pre(3, 0);
  EXPECT_FALSE(t.encode_bounded("abc abc", 4, pre, ws));
  Ids pre2(3, 0);
  EXPECT_TRUE(t.encode_bounded("abc", 4, pre2, ws));
  EXPECT_EQ(pre2.size(), 4u);
}

TEST(TokenizerBounded, OneHugePieceIsNotEncoded) {
  // 4 MB of letters is one split piece; with a limit of 10 ids its length alone proves it needs
  // more (the longest token here is 3 bytes), so it is refused without BPE, the ids vector stays
  // empty, and the call is fast.
  const Tokenizer t = load(make_json({"ab", "abc"}, {{"a", "b"}, {"ab", "c"}}));
  TokenizerWorkspace ws;
  Ids got;
  EXPECT_FALSE(t.encode_bounded(std::string(4 << 20, 'a'), 10, got, ws));
  EXPECT_TRUE(got.empty());
  Ids small;
  EXPECT_TRUE(t.encode_bounded(std::string(10, 'a'), 10, small, ws));
  EXPECT_EQ(small, t.encode(std::string(10, 'a')));
}

}  // namespace
}  // namespace clef
