// SPDX-License-Identifier: MIT
// Unit tests of the header rules and the body decoder of `clef serve`: strict
// Content-Length / Transfer-Encoding, the Host allow-list, JSON media types, target paths, and
// bounded gzip / deflate / br decoding (bombs stop at the cap). Inputs compressed here with zlib
// and brotli's encoders; expected values are the original bytes.
#include <gtest/gtest.h>

#include <brotli/encode.h>
#include <zlib.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "decision/json_value.h"
#include "decision/request_error.h"
#include "server/body_decoder.h"
#include "server/http_rules.h"
#include "server/route_key.h"

namespace clef::server {
namespace {

TEST(HttpRules, ContentLength) {
  std::uint64_t n = 0;
  EXPECT_EQ(parse_content_length("67", n), LengthParse::kOk);
  EXPECT_EQ(n, 67u);
  EXPECT_EQ(parse_content_length(" 0 ", n), LengthParse::kOk);
  EXPECT_EQ(n, 0u);
  EXPECT_EQ(parse_content_length("9223372036854775807", n), LengthParse::kOk);
  for (const char* bad : {"+67", "-1", "67abc", "67, 67", "6 7", "", " ", "0x10", "1e3"}) {
    EXPECT_EQ(parse_content_length(bad, n), LengthParse::kInvalid) << bad;
  }
  EXPECT_EQ(parse_content_length("9223372036854775808", n), LengthParse::kOverflow);
  EXPECT_EQ(parse_content_length("99999999999999999999999", n), LengthParse::kOverflow);
}

TEST(HttpRules, TransferEncoding) {
  EXPECT_TRUE(transfer_encoding_is_chunked("chunked"));
  EXPECT_TRUE(transfer_encoding_is_chunked(" Chunked "));
  for (const char* bad : {"chunked, identity", "gzip, chunked", "xchunked", "chunked;x", "identity", ""}) {
    EXPECT_FALSE(transfer_encoding_is_chunked(bad)) << bad;
  }
}

TEST(HttpRules, HostAllowList) {
  HostPolicy p;
  p.names = {"127.0.0.1", "clef.internal"};
  for (const char* ok : {"localhost", "LocalHost:8000", "localhost.", "127.0.0.1", "127.0.0.1:1", "[::1]", "[::1]:80",
                         "clef.internal", "CLEF.internal:443"}) {
    EXPECT_TRUE(host_allowed(ok, p, "")) << ok;
  }
  for (const char* bad : {"", "evil.example", "localhost.evil.example", "127.0.0.1.nip.io", "x@localhost",
                          "localhost:", "localhost:80a", "[::1", "[::1]x", "::1", "localhost:123456", "local host"}) {
    EXPECT_FALSE(host_allowed(bad, p, "")) << bad;
  }
  // a 0.0.0.0 bind: the address the connection arrived on is the server's own
  EXPECT_TRUE(host_allowed("192.168.1.7:8000", p, "192.168.1.7"));
  EXPECT_FALSE(host_allowed("192.168.1.8:8000", p, "192.168.1.7"));
  EXPECT_TRUE(host_allowed("[fe80::1]", p, "fe80::1"));
  // a TCP port is 16 bits
  EXPECT_TRUE(host_allowed("localhost:65535", p, ""));
  EXPECT_TRUE(host_allowed("localhost:00080", p, ""));
  for (const char* bad : {"localhost:65536", "localhost:99999", "[::1]:70000"}) {
    EXPECT_FALSE(host_allowed(bad, p, "")) << bad;
  }
  p.any = true;
  EXPECT_TRUE(host_allowed("evil.example", p, ""));
  EXPECT_FALSE(host_allowed("evil example", p, ""));
}

TEST(HttpRules, JsonMediaTypes) {
  for (const char* ok : {"application/json", "application/json; charset=utf-8", "Application/JSON",
                         "application/vnd.api+json", " application/problem+json ;q=1"}) {
    EXPECT_TRUE(is_json_media_type(ok)) << ok;
  }
  for (const char* bad : {"", "text/plain", "text/json", "application/x-www-form-urlencoded", "multipart/form-data",
                          "application/jsonx", "application/+json", "json", "application/ json"}) {
    EXPECT_FALSE(is_json_media_type(bad)) << bad;
  }
}

TEST(HttpRules, TargetPath) {
  EXPECT_EQ(target_path("/v1/systemone?x=1"), "/v1/systemone");
  EXPECT_EQ(target_path("/ai/run/%40cf/cloudflare/clef"), "/ai/run/@cf/cloudflare/clef");
  EXPECT_EQ(target_path("/a%zz%4"), "/a%zz%4");
  EXPECT_EQ(target_path("http://h:1/health#f"), "/health");
  EXPECT_EQ(target_path("*"), "*");
  // Escaped letters, digits and '/' stay escaped: "/%6detrics" is not "/metrics".
  EXPECT_EQ(target_path("/%6detrics"), "/%6detrics");
  EXPECT_EQ(target_path("/v1%2Fsystemone"), "/v1%2Fsystemone");
  EXPECT_EQ(target_path("/%68ealth"), "/%68ealth");
  EXPECT_EQ(target_path("/a%3Ab%3d"), "/a:b=");
  EXPECT_EQ(target_path("/a%00b%25"), "/a%00b%25");
}

TEST(HttpRules, TargetForm) {
  std::string authority = "x";
  EXPECT_EQ(parse_target("/health", authority), TargetForm::kOrigin);
  EXPECT_EQ(authority, "");
  EXPECT_EQ(parse_target("http://evil.example/health", authority), TargetForm::kAbsolute);
  EXPECT_EQ(authority, "evil.example");
  EXPECT_EQ(parse_target("HTTPS://127.0.0.1:8000?x", authority), TargetForm::kAbsolute);
  EXPECT_EQ(authority, "127.0.0.1:8000");
  EXPECT_EQ(parse_target("ftp://127.0.0.1/health", authority), TargetForm::kBadScheme);
  EXPECT_EQ(parse_target("file:///health", authority), TargetForm::kBadScheme);
  EXPECT_EQ(parse_target("*", authority), TargetForm::kOther);
}

std::string zlib_compress(const std::string& in, int window_bits) {
  z_stream z{};
  deflateInit2(&z, 9, Z_DEFLATED, window_bits, 8, Z_DEFAULT_STRATEGY);
  std::string out(deflateBound(&z, static_cast<uLong>(in.size())) + 64, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = static_cast<uInt>(in.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

std::string brotli_compress(const std::string& in) {
  std::size_t n = BrotliEncoderMaxCompressedSize(in.size());
  std::string out(n, '\0');
  EXPECT_TRUE(BrotliEncoderCompress(5, 22, BROTLI_MODE_GENERIC, in.size(),
                                    reinterpret_cast<const std::uint8_t*>(in.data()), &n,
                                    reinterpret_cast<std::uint8_t*>(out.data())));
  out.resize(n);
  return out;
}

/// Feeds `data` in pieces of `step` bytes; returns the first non-kOk status, else finish().
DecodeStatus decode(BodyEncoding e, const std::string& data, std::size_t cap, std::string& out, std::size_t step) {
  BodyDecoder d(e, cap);
  for (std::size_t i = 0; i < data.size(); i += step) {
    const DecodeStatus st = d.feed(std::string_view(data).substr(i, step), out);
    if (st != DecodeStatus::kOk) return st;
  }
  return d.finish();
}

TEST(BodyDecoder, RoundTripsEveryEncodingInAnyPieces) {
  std::string text;
  for (int i = 0; i < 5000; ++i) text += "{\"state\":" + std::to_string(i * 7919 % 1000) + "},";
  const struct {
    BodyEncoding e;
    std::string data;
  } cases[] = {{BodyEncoding::kIdentity, text},
               {BodyEncoding::kGzip, zlib_compress(text, 16 + 15)},
               {BodyEncoding::kDeflate, zlib_compress(text, 15)},
               {BodyEncoding::kDeflate, zlib_compress(text, 16 + 15)},  // gzip framing under "deflate"
               {BodyEncoding::kBrotli, brotli_compress(text)}};
  for (const auto& c : cases) {
    for (const std::size_t step : {std::size_t{1}, std::size_t{7}, std::size_t{65536}}) {
      std::string out;
      EXPECT_EQ(decode(c.e, c.data, 1 << 20, out, step), DecodeStatus::kOk);
      EXPECT_EQ(out, text);
    }
  }
  // concatenated gzip members decode to the concatenation
  std::string out;
  EXPECT_EQ(decode(BodyEncoding::kGzip, zlib_compress("ab", 31) + zlib_compress("cd", 31), 100, out, 3),
            DecodeStatus::kOk);
  EXPECT_EQ(out, "abcd");
}

TEST(BodyDecoder, BombsStopAtTheCap) {
  const std::string zeros(20 << 20, ' ');
  const std::size_t cap = 1000000;
  for (const auto& [e, data] : {std::pair{BodyEncoding::kGzip, zlib_compress(zeros, 31)},
                                std::pair{BodyEncoding::kDeflate, zlib_compress(zeros, 15)},
                                std::pair{BodyEncoding::kBrotli, brotli_compress(zeros)},
                                std::pair{BodyEncoding::kIdentity, std::string(cap + 1, ' ')}}) {
    std::string out;
    EXPECT_EQ(decode(e, data, cap, out, 4096), DecodeStatus::kTooLarge);
    EXPECT_LE(out.size(), cap + 1);
  }
  std::string out;  // exactly at the cap is fine
  EXPECT_EQ(decode(BodyEncoding::kGzip, zlib_compress(std::string(cap, 'x'), 31), cap, out, 100), DecodeStatus::kOk);
  EXPECT_EQ(out.size(), cap);
}

TEST(BodyDecoder, CorruptAndTruncatedStreams) {
  const std::string gz = zlib_compress(std::string(1000, 'a'), 31);
  const std::string br = brotli_compress(std::string(1000, 'a'));
  std::string out;
  EXPECT_EQ(decode(BodyEncoding::kGzip, "not gzip at all", 100000, out, 5), DecodeStatus::kCorrupt);
  out.clear();
  EXPECT_EQ(decode(BodyEncoding::kGzip, gz.substr(0, gz.size() / 2), 100000, out, 5), DecodeStatus::kCorrupt);
  out.clear();
  EXPECT_EQ(decode(BodyEncoding::kBrotli, br.substr(0, br.size() - 1), 100000, out, 5), DecodeStatus::kCorrupt);
  out.clear();
  EXPECT_EQ(decode(BodyEncoding::kBrotli, br + "junk", 100000, out, 5), DecodeStatus::kCorrupt);
  out.clear();
  EXPECT_EQ(decode(BodyEncoding::kGzip, gz + "junk", 100000, out, 5), DecodeStatus::kCorrupt);
}

TEST(BodyDecoder, BudgetBoundsTheOutputAcrossDecoders) {
  // Two bodies share a 1 MiB budget: the first takes its share, the second is refused once the
  // budget is spent, and a released grant makes room again.
  BodyBudget budget(1 << 20);
  const std::string big(3 << 19, 'a');  // 1.5 MiB
  BodyGrant g1(&budget);
  BodyGrant g2(&budget);
  std::string out1;
  std::string out2;
  BodyDecoder d1(BodyEncoding::kIdentity, 8 << 20, &g1);
  BodyDecoder d2(BodyEncoding::kGzip, 8 << 20, &g2);
  EXPECT_EQ(d1.feed(std::string_view(big).substr(0, 600 << 10), out1), DecodeStatus::kOk);
  EXPECT_EQ(g1.bytes(), out1.capacity());
  EXPECT_EQ(budget.used(), out1.capacity());
  const std::string gz = zlib_compress(big, 16 + 15);
  EXPECT_EQ(d2.feed(gz, out2), DecodeStatus::kOverBudget);
  EXPECT_LE(budget.used(), budget.limit());
  EXPECT_LE(out2.capacity(), g2.bytes());
  g1.release();
  std::string().swap(out1);
  g2.release();
  EXPECT_EQ(budget.used(), 0u);
  BodyGrant g3(&budget);
  std::string out3;
  BodyDecoder d3(BodyEncoding::kIdentity, 8 << 20, &g3);
  EXPECT_EQ(d3.feed(std::string_view(big).substr(0, 900 << 10), out3), DecodeStatus::kOk);
  EXPECT_EQ(out3.size(), std::size_t{900} << 10);
}

TEST(BodyDecoder, EncodingNames) {
  BodyEncoding e{};
  EXPECT_TRUE(parse_body_encoding("", e) && e == BodyEncoding::kIdentity);
  EXPECT_TRUE(parse_body_encoding("identity", e) && e == BodyEncoding::kIdentity);
  EXPECT_TRUE(parse_body_encoding(" GZIP ", e) && e == BodyEncoding::kGzip);
  EXPECT_TRUE(parse_body_encoding("deflate", e) && e == BodyEncoding::kDeflate);
  EXPECT_TRUE(parse_body_encoding("br", e) && e == BodyEncoding::kBrotli);
  for (const char* bad : {"zstd", "gzip, br", "compress", "x"}) EXPECT_FALSE(parse_body_encoding(bad, e)) << bad;
}

/// route_text / route_key of a body through its one parse (parse_json's top-level members), as the
/// server computes them; nullopt / "" for a body that does not parse.
std::optional<std::string> text_of(std::string_view body) {
  std::vector<JsonMemberText> members;
  try {
    (void)parse_json(body, {}, &members);
  } catch (const RequestError&) {
    return std::nullopt;
  }
  return route_text(body, members);
}
std::string key_of(std::string_view body) {
  std::vector<JsonMemberText> members;
  (void)parse_json(body, {}, &members);
  return route_key(body, members);
}

TEST(RouteKey, TheStateAndImagesTextAsSent) {
  // The same text deploy/haproxy/clef_state.lua extracts (spacing and escapes kept, last
  // duplicate wins, order of members irrelevant, keys compared as sent, no BOM skipped).
  EXPECT_EQ(text_of(R"({"questions":{},"state":"a b"})"), std::string("state=\"a b\"\nimages="));
  EXPECT_EQ(text_of(R"( { "state" : {"x": [1, "}"]} , "images":["d"], "q":1 } )"),
            std::string("state={\"x\": [1, \"}\"]}\nimages=[\"d\"]"));
  EXPECT_EQ(text_of(R"({"state":1,"state":null})"), std::string("state=null\nimages="));
  EXPECT_EQ(text_of(R"({"state":"\"}\\"})"), std::string("state=\"\\\"}\\\\\"\nimages="));
  EXPECT_EQ(text_of(R"({"state":-1.5e3 ,"images":[ ]})"), std::string("state=-1.5e3\nimages=[ ]"));
  for (const char* none :
       {"", "[]", "{}", R"({"questions":{}})", R"({"state":"cut)", R"({"state":[1,2)", R"({"state" "x"})",
        R"({state:1})", "\"state\"", R"({"st\u0061te":1})", "\xEF\xBB\xBF{\"state\":1}", R"({"a":{"state":1}})"}) {
    EXPECT_FALSE(text_of(none).has_value()) << none;
  }
  // The key is the hex SHA-256 of the text; no text, no key.
  EXPECT_EQ(key_of(R"({"state":"x"})").size(), 64u);
  EXPECT_EQ(key_of(R"({"state":"x","questions":{}})"), key_of(R"({"questions":{"a":1},"state":"x"})"));
  EXPECT_EQ(key_of(R"({"state":"x"})"), key_of(R"({ "state" : "x" })"));   // blanks around a value
  EXPECT_NE(key_of(R"({"state":["x"]})"), key_of(R"({"state":[ "x"]})"));  // blanks inside one
  EXPECT_EQ(key_of("{}"), "");
}

}  // namespace
}  // namespace clef::server
