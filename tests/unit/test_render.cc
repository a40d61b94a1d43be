// SPDX-License-Identifier: MIT
// render() / dump_json() / parse_json() (docs/PROTOCOL.md §3.3). Expected strings are Python 3.11's
// json.dumps(json.loads(text), ensure_ascii=False, sort_keys=True, separators=(",", ":")); the
// live comparison on >= 100,000 generated values is tests/reference/test_render_parity.py.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "core/json_text.h"
#include "decision/json_value.h"
#include "decision/render.h"
#include "decision/request_error.h"

namespace clef {
namespace {

std::string dump(std::string_view text) { return dump_json(parse_json(text)); }

struct ParseFailure {
  std::string code, path;
  std::size_t offset = 0;
};

ParseFailure parse_failure(std::string_view text, const JsonParseOptions& opt = {}) {
  try {
    (void)parse_json(text, opt);
  } catch (const RequestError& e) {
    return {e.code_name(), e.path().str(), e.offset().value_or(static_cast<std::size_t>(-1))};
  }
  ADD_FAILURE() << "accepted: " << text;
  return {};
}

TEST(PythonFloatRepr, MatchesPythonRepr) {
  // (value, repr(value)) pairs checked in CPython 3.11.
  const std::pair<double, const char*> cases[] = {
      {1.0, "1.0"},
      {0.0, "0.0"},
      {-0.0, "-0.0"},
      {0.1, "0.1"},
      {1e-05, "1e-05"},
      {0.0001, "0.0001"},
      {0.00012345, "0.00012345"},
      {1e16, "1e+16"},
      {1e15, "1000000000000000.0"},
      {1234567890123456.0, "1234567890123456.0"},
      {12345678901234567.0, "1.2345678901234568e+16"},
      {1.2345e20, "1.2345e+20"},
      {2.5e-07, "2.5e-07"},
      {100.0, "100.0"},
      {1250.0, "1250.0"},
      {123.456, "123.456"},
      {5e-324, "5e-324"},
      {2.2250738585072014e-308, "2.2250738585072014e-308"},
      {1.7976931348623157e308, "1.7976931348623157e+308"},
      {1e100, "1e+100"},
      {-1.5e-10, "-1.5e-10"},
      {0.30000000000000004, "0.30000000000000004"},
      {9007199254740993.0, "9007199254740992.0"},
      {1e22, "1e+22"},
      {1e-4, "0.0001"},
      {9.999999999999999e-05, "9.999999999999999e-05"},
      {0.5, "0.5"},
  };
  for (const auto& [v, repr] : cases) EXPECT_EQ(python_float_repr(v), repr) << repr;
  EXPECT_THROW(python_float_repr(std::numeric_limits<double>::quiet_NaN()), InternalError);
  EXPECT_THROW(python_float_repr(std::numeric_limits<double>::infinity()), InternalError);
}

TEST(Render, NumbersKeepIntVsFloatAndBigInts) {
  EXPECT_EQ(dump("1.0"), "1.0");
  EXPECT_EQ(dump("1"), "1");
  EXPECT_EQ(dump("1e2"), "100.0");
  EXPECT_EQ(dump("1E+2"), "100.0");
  EXPECT_EQ(dump("1e16"), "1e+16");
  EXPECT_EQ(dump("-0"), "0");
  EXPECT_EQ(dump("-0.0"), "-0.0");
  EXPECT_EQ(dump("-0e5"), "-0.0");
  EXPECT_EQ(dump("0.000"), "0.0");
  EXPECT_EQ(dump("1e-400"), "0.0");  // Python float() underflows to zero
  EXPECT_EQ(dump("-1e-400"), "-0.0");
  EXPECT_EQ(dump("3e-324"), "5e-324");
  EXPECT_EQ(dump("1.7976931348623158e308"), "1.7976931348623157e+308");
  EXPECT_EQ(dump("123456789012345678901234567890"), "123456789012345678901234567890");
  EXPECT_EQ(dump("-98765432109876543210987654321"), "-98765432109876543210987654321");
  EXPECT_EQ(dump("18446744073709551616"), "18446744073709551616");
  EXPECT_EQ(dump("0.1000000000000000055511151231257827021181583404541015625"), "0.1");
  EXPECT_EQ(dump("[1,1.0,1.5,-2,true,false,null]"), "[1,1.0,1.5,-2,true,false,null]");
  const std::string digits(4300, '7');
  EXPECT_EQ(dump(digits), digits);
  EXPECT_EQ(dump("-" + digits), "-" + digits);
}

TEST(Render, StringsEscapeOnlyWhatPythonEscapes) {
  EXPECT_EQ(dump(R"("q\"b\\s/")"), R"("q\"b\\s/")");
  EXPECT_EQ(dump(R"("\n\r\t\b\f")"), R"("\n\r\t\b\f")");
  EXPECT_EQ(dump(R"("\u0000\u0001\u001f\u000B")"), R"("\u0000\u0001\u001f\u000b")");
  EXPECT_EQ(dump(R"("\u007f\u2028\u2029\u00fc\/")"), "\"\x7f\u2028\u2029\u00fc/\"");
  EXPECT_EQ(dump(R"("\ud83d\ude00")"), "\"\U0001F600\"");
  EXPECT_EQ(dump("\"caf\xc3\xa9 \xf0\x9f\x8e\xaf\""), "\"caf\xc3\xa9 \xf0\x9f\x8e\xaf\"");
  EXPECT_EQ(dump(R"("<&'>")"), R"("<&'>")");  // no HTML escaping (not Jinja tojson)
}

TEST(Render, ObjectsSortByCodePointAndKeepLastDuplicate) {
  EXPECT_EQ(dump(R"({"b":1,"a":{"d":[1,2.0],"c":null}})"), R"({"a":{"c":null,"d":[1,2.0]},"b":1})");
  EXPECT_EQ(dump("{\"\xc3\xa9\":1,\"z\":2,\"A\":3,\"\xf0\x9f\x98\x80\":4,\"\xef\xbf\xbf\":5}"),
            "{\"A\":3,\"z\":2,\"\xc3\xa9\":1,\"\xef\xbf\xbf\":5,\"\xf0\x9f\x98\x80\":4}");
  EXPECT_EQ(dump(R"({"a":1,"a":2})"), R"({"a":2})");
  EXPECT_EQ(dump(R"({"10":1,"2":2,"1":3,"":4})"), R"({"":4,"1":3,"10":1,"2":2})");
  // Duplicate keeps its first position (visible in member order, not in the sorted render).
  const JsonValue v = parse_json(R"({"x":1,"y":2,"x":3})");
  ASSERT_EQ(v.members().size(), 2u);
  EXPECT_EQ(v.members()[0].first, "x");
  EXPECT_EQ(v.members()[0].second.int_text(), "3");
  EXPECT_EQ(v.members()[1].first, "y");
}

TEST(Render, StringsAreVerbatimOnlyAtTopLevel) {
  EXPECT_EQ(render(parse_json(R"("plain \n text")")), "plain \n text");
  EXPECT_EQ(render(parse_json(R"(["plain \n text"])")), R"(["plain \n text"])");
  EXPECT_EQ(render(parse_json("null")), "null");
  EXPECT_EQ(render(parse_json(" { } ")), "{}");
  EXPECT_EQ(render(parse_json("[ ]")), "[]");
}

TEST(ParseJson, WhitespaceAndBom) {
  EXPECT_EQ(dump(" \t\r\n[ 1 , { \"a\" : 2 } ]\n"), R"([1,{"a":2}])");
  EXPECT_EQ(dump("\xEF\xBB\xBF{}"), "{}");
}

TEST(ParseJson, SyntaxErrorsCarryOffsetAndPath) {
  auto f = parse_failure(R"({"model": "clef-flash", "state": "x", "questions": {)");
  EXPECT_EQ(f.code, "invalid_json");
  EXPECT_EQ(f.offset, 52u);
  f = parse_failure(R"({"a": [1, 2, x]})");
  EXPECT_EQ(f.code, "invalid_json");
  EXPECT_EQ(f.path, "a.2");
  EXPECT_EQ(f.offset, 13u);
  for (const char* bad : {"",
                          " ",
                          "01",
                          "1.",
                          ".5",
                          "-",
                          "1e",
                          "+1",
                          "[1,]",
                          "{\"a\":1,}",
                          "{a:1}",
                          "'x'",
                          "[1 2]",
                          "{\"a\" 1}",
                          "tru",
                          "nul",
                          "\"abc",
                          "\"\\x\"",
                          "\"\\u12\"",
                          "1 2",
                          "\"a\tb\"",
                          "\"\x01\"",
                          "[",
                          "{\"a\":1}}",
                          "\xff",
                          "\"\xc0\xaf\"",
                          "\"\xf5\x80\x80\x80\""}) {
    EXPECT_EQ(parse_failure(bad).code, "invalid_json") << bad;
  }
}

TEST(ParseJson, NonFiniteNumbersRefused) {
  for (const char* bad : {"NaN", "Infinity", "-Infinity", "[1, NaN]", "1e400", "-1e400", "1.7976931348623159e308"}) {
    EXPECT_EQ(parse_failure(bad).code, "non_finite_number") << bad;
  }
  EXPECT_EQ(parse_failure(R"({"state": {"x": NaN}})").path, "state.x");
  EXPECT_EQ(parse_failure("nan").code, "invalid_json");  // not even Python accepts these spellings
  EXPECT_EQ(parse_failure("inf").code, "invalid_json");
}

TEST(ParseJson, LoneSurrogatesRefused) {
  for (const char* bad : {R"("\ud800")", R"("\udc00")", R"("\ud800\u0041")", R"("a\ud800b")", R"("\ud83d\ud83d")",
                          R"(["\ude00\ud83d"])", "\"\xed\xa0\x80\"", R"({"\ud800": 1})"}) {
    EXPECT_EQ(parse_failure(bad).code, "lone_surrogate") << bad;
  }
  EXPECT_EQ(parse_failure(R"("\ud83d\n")").code, "lone_surrogate");
  // A text that ends inside a surrogate pair is a syntax error (Python agrees), not a lone surrogate.
  for (const char* cut : {R"("\ud83d)", R"("\ud83d\)", R"("\ud83d\u)", R"("\ud83d\ude)", R"("\ud83d\uzzzz")"}) {
    EXPECT_EQ(parse_failure(cut).code, "invalid_json") << cut;
  }
  const auto f = parse_failure(R"({"q": ["ok", "x\udfff"]})");
  EXPECT_EQ(f.path, "q.1");
  EXPECT_EQ(f.offset, 15u);
}

TEST(ParseJson, DepthAndDigitLimits) {
  JsonParseOptions opt;
  opt.max_depth = 4;
  EXPECT_EQ(dump_json(parse_json("[[[[1]]]]", opt)), "[[[[1]]]]");
  EXPECT_EQ(parse_failure("[[[[[1]]]]]", opt).code, "nesting_too_deep");
  EXPECT_EQ(parse_failure("{\"a\":[{\"b\":[[]]}]}", opt).path, "a.0.b.0");
  // The default depth (512) handles 512 levels, iteratively (no recursion in the parser).
  const std::string deep = std::string(512, '[') + std::string(512, ']');
  EXPECT_EQ(dump(deep), deep);
  EXPECT_EQ(parse_failure(std::string(100000, '[')).code, "nesting_too_deep");
  EXPECT_EQ(parse_failure(std::string(4301, '1')).code, "number_out_of_range");
  EXPECT_EQ(parse_failure("-" + std::string(4301, '1')).code, "number_out_of_range");
}

TEST(JsonValue, FactoriesKeepInvariants) {
  EXPECT_THROW(JsonValue::number(std::nan("")), InvalidArgument);
  EXPECT_THROW(JsonValue::string("\xed\xa0\x80"), InvalidArgument);
  EXPECT_THROW(JsonValue::string("\xff"), InvalidArgument);
  EXPECT_THROW(JsonValue::integer_text("01"), InvalidArgument);
  EXPECT_THROW(JsonValue::integer_text("1.0"), InvalidArgument);
  EXPECT_EQ(JsonValue::integer_text("-0").int_text(), "0");
  const JsonValue o =
      JsonValue::object({{"b", JsonValue::integer(1)}, {"a", JsonValue()}, {"b", JsonValue::number(2.0)}});
  EXPECT_EQ(dump_json(o), R"({"a":null,"b":2.0})");
  EXPECT_EQ(o.members()[0].first, "b");
  EXPECT_EQ(parse_json("9223372036854775807").as_int64(), 9223372036854775807LL);
  EXPECT_EQ(parse_json("9223372036854775808").as_int64(), std::nullopt);
  // Error messages show the value as compact JSON, cut after 40 code points.
  EXPECT_EQ(parse_json("\"abc\"").describe(), "\"abc\"");
  EXPECT_EQ(parse_json("\"a\\nb\"").describe(), "\"a\\nb\"");
  EXPECT_EQ(parse_json("2.50").describe(), "2.5");
  EXPECT_EQ(parse_json("7").describe(), "7");
  EXPECT_EQ(parse_json("null").describe(), "null");
  EXPECT_EQ(parse_json("[1, {\"b\": 2, \"a\": \"x\"}]").describe(), "the array [1,{\"b\":2,\"a\":\"x\"}]");
  EXPECT_EQ(parse_json("{}").describe(), "the object {}");
  // 45 two-byte characters: 39 of them after the quote, never half a character.
  std::string accents;
  for (int i = 0; i < 45; ++i) accents += "\xc3\xa9";
  EXPECT_EQ(parse_json("\"" + accents + "\"").describe(), "\"" + accents.substr(0, 78) + "... (a string of 90 bytes)");
  EXPECT_EQ(parse_json("[" + std::string(100, '1') + "]").describe(),
            "the array [" + std::string(39, '1') + "... (1 item)");
  // A value of any size or depth is described from its start only.
  EXPECT_EQ(parse_json(std::string(500, '[') + std::string(500, ']')).describe(),
            "the array " + std::string(40, '[') + "... (1 item)");
  EXPECT_THROW((void)parse_json("1").as_string(), InternalError);
}

}  // namespace
}  // namespace clef
