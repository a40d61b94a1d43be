// SPDX-License-Identifier: MIT
// The safetensors header parser and writer: valid files round-trip; each malformed file is
// refused with a message naming the problem (never a crash or an out-of-bounds read: this suite
// also runs under ASan/UBSan).
#include <gtest/gtest.h>

#include <cstring>

#include "core/error.h"
#include "core/quant_blocks.h"
#include "io/safetensors.h"
#include "test_util.h"

namespace clef {
namespace {

using test::error_of;

std::vector<std::byte> bytes_of(const std::string& s) {
  std::vector<std::byte> v(s.size());
  std::memcpy(v.data(), s.data(), s.size());
  return v;
}

/// A file made of an explicit header JSON and `data_bytes` zero bytes of data.
std::vector<std::byte> file_with(const std::string& header, std::size_t data_bytes, std::uint64_t claimed_len = ~0ull) {
  const std::uint64_t len = claimed_len == ~0ull ? header.size() : claimed_len;
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[static_cast<std::size_t>(i)] = static_cast<char>((len >> (8 * i)) & 0xff);
  s += header;
  s += std::string(data_bytes, '\0');
  return bytes_of(s);
}

std::string parse_error(const std::vector<std::byte>& f) {
  return error_of<ModelLoadError>([&] { (void)parse_safetensors_header(f, "w.safetensors"); });
}

TEST(Safetensors, ParsesValidHeader) {
  const auto f = file_with(
      R"({"__metadata__":{"format":"pt"},"b":{"dtype":"BF16","shape":[2,3],"data_offsets":[16,28]},)"
      R"("a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"s":{"dtype":"F32","shape":[],"data_offsets":[28,32]}})",
      32);
  const auto h = parse_safetensors_header(f, "w");
  ASSERT_EQ(h.tensors.size(), 3u);
  EXPECT_EQ(h.tensors[0].name, "a");  // sorted by offset
  EXPECT_EQ(h.tensors[1].name, "b");
  EXPECT_EQ(h.tensors[1].dtype, DType::kBF16);
  EXPECT_EQ(h.tensors[1].shape, (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(h.tensors[2].shape.size(), 0u);
  EXPECT_EQ(h.tensors[2].numel(), 1u);
  EXPECT_EQ(h.metadata.at("format"), "pt");
  EXPECT_EQ(h.data_bytes, 32u);
}

TEST(Safetensors, WriterRoundTripsThroughMmap) {
  test::TempDir dir;
  std::vector<TensorToWrite> ts;
  std::vector<float> vals = {1.5f, -2.0f, 3.25f};
  TensorToWrite a{"x.weight", DType::kF32, {3}, std::vector<std::byte>(12)};
  std::memcpy(a.bytes.data(), vals.data(), 12);
  ts.push_back(a);
  ts.push_back({"y", DType::kBF16, {1, 2}, std::vector<std::byte>(4)});
  ts.push_back({"empty", DType::kF16, {0, 5}, {}});
  const std::string path = (dir.path() / "t.safetensors").string();
  write_safetensors(path, ts, {{"format", "pt"}});
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  SafetensorsFile f(path, "t.safetensors");
  EXPECT_EQ((f.header().data_offset % 8), 0u);  // header padded to 8 bytes
  const TensorInfo* x = f.find("x.weight");
  ASSERT_NE(x, nullptr);
  auto d = f.data(*x);
  ASSERT_EQ(d.size(), 12u);
  float back[3];
  convert_to_f32(DType::kF32, d.data(), 3, back);
  EXPECT_EQ(back[1], -2.0f);
  EXPECT_EQ(f.find("nope"), nullptr);
  ASSERT_NE(f.find("empty"), nullptr);
  EXPECT_EQ(f.find("empty")->nbytes(), 0u);
}

TEST(Safetensors, WriterRejectsWrongByteCount) {
  test::TempDir dir;
  std::vector<TensorToWrite> ts{{"x", DType::kF32, {2}, std::vector<std::byte>(4)}};
  EXPECT_THROW(write_safetensors((dir.path() / "t").string(), ts), InvalidArgument);
}

TEST(Safetensors, TruncatedBeforeLength) {
  EXPECT_NE(parse_error(bytes_of("abc")).find("too short for the 8-byte header length"), std::string::npos);
  EXPECT_NE(parse_error({}).find("w.safetensors: truncated"), std::string::npos);
}

TEST(Safetensors, HeaderLengthPastEnd) {
  const auto f = file_with(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 4, 1000);
  EXPECT_NE(parse_error(f).find("header length 1000 runs past the end of the file"), std::string::npos);
}

TEST(Safetensors, HeaderLengthOverLimit) {
  const auto f = file_with("{}", 0, kMaxSafetensorsHeaderBytes + 1);
  EXPECT_NE(parse_error(f).find("exceeds the limit"), std::string::npos);
}

TEST(Safetensors, MalformedJson) {
  EXPECT_NE(parse_error(file_with(R"({"a":{"dtype":"F32",)", 0)).find("header: malformed JSON"), std::string::npos);
  EXPECT_NE(parse_error(file_with("[1,2]", 0)).find("must start with '{'"), std::string::npos);
  EXPECT_NE(parse_error(file_with("", 0)).find("malformed header JSON"), std::string::npos);
  EXPECT_NE(parse_error(file_with("{\"a\xff\":{}}", 0)).find("header: malformed JSON"), std::string::npos);
  // Anything after a NUL byte used to be ignored; the safetensors library calls it trailing data.
  EXPECT_NE(parse_error(file_with(std::string("{}\0 {not json}", 14), 0)).find("NUL byte"), std::string::npos);
  EXPECT_NE(parse_error(file_with("{} x", 0)).find("header: malformed JSON"), std::string::npos);
}

TEST(Safetensors, OffsetsOutOfRange) {
  const auto f = file_with(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8);
  const auto msg = parse_error(f);
  EXPECT_NE(msg.find("tensor \"a\": data_offsets [0, 16) run past the end of the data section (8 bytes"),
            std::string::npos)
      << msg;
}

TEST(Safetensors, OverlappingTensors) {
  const auto f = file_with(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                           R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                           12);
  const auto msg = parse_error(f);
  EXPECT_NE(msg.find("\"a\" [0, 8) and \"b\" [4, 12) overlap"), std::string::npos) << msg;
}

TEST(Safetensors, GapsAndTrailingBytes) {
  const auto gap = file_with(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8);
  EXPECT_NE(parse_error(gap).find("bytes [0, 4) of the data section belong to no tensor"), std::string::npos);
  const auto tail = file_with(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 8);
  EXPECT_NE(parse_error(tail).find("bytes [4, 8) at the end"), std::string::npos);
}

TEST(Safetensors, DtypeShapeByteMismatch) {
  const auto f = file_with(R"({"a":{"dtype":"BF16","shape":[3,3],"data_offsets":[0,16]}})", 16);
  const auto msg = parse_error(f);
  EXPECT_NE(msg.find("dtype BF16 x shape [3, 3] needs 18 bytes but data_offsets [0, 16) span 16"), std::string::npos)
      << msg;
}

TEST(Safetensors, BadEntries) {
  EXPECT_NE(parse_error(file_with(R"({"a":{"dtype":"Q4","shape":[1],"data_offsets":[0,1]}})", 1))
                .find("unknown dtype \"Q4\""),
            std::string::npos);
  EXPECT_NE(parse_error(file_with(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4))
                .find("non-negative integers"),
            std::string::npos);
  EXPECT_NE(parse_error(file_with(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})", 4)).find("begin > end"),
            std::string::npos);
  EXPECT_NE(parse_error(file_with(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", 4)).find("data_offsets"),
            std::string::npos);
  EXPECT_NE(parse_error(file_with(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1}})", 4))
                .find("unknown field \"x\""),
            std::string::npos);
  EXPECT_NE(parse_error(file_with(R"({"a":5})", 0)).find("expected an object"), std::string::npos);
  EXPECT_NE(parse_error(file_with(R"({"__metadata__":{"k":1}})", 0)).find("__metadata__.k"), std::string::npos);
  EXPECT_NE(parse_error(file_with(R"({"a":{"dtype":"F32","shape":[4611686018427387904,8],"data_offsets":[0,4]}})", 4))
                .find("overflows"),
            std::string::npos);
}

TEST(Safetensors, DuplicateNames) {
  const auto f = file_with(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                           R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                           8);
  EXPECT_NE(parse_error(f).find("key \"a\" appears twice"), std::string::npos);
  // A repeated field inside one entry, too.
  const auto g = file_with(R"({"a":{"dtype":"F16","shape":[2],"data_offsets":[0,4],"dtype":"BF16"}})", 4);
  EXPECT_NE(parse_error(g).find("key \"dtype\" appears twice"), std::string::npos);
}

TEST(Safetensors, DeepNestingIsRefusedWithoutRecursion) {
  const std::string deep = "{\"a\":" + std::string(200000, '[') + std::string(200000, ']') + "}";
  EXPECT_NE(parse_error(file_with(deep, 0)).find("nesting deeper than"), std::string::npos);
  const std::string shape =
      R"({"a":{"dtype":"F32","shape":)" + std::string(100000, '[') + std::string(100000, ']') + "}}";
  EXPECT_NE(parse_error(file_with(shape, 0)).find("nesting deeper than"), std::string::npos);
}

// Many entries (a hostile but legal header) parse in time linear in the header size.
TEST(Safetensors, ManyTensorsParse) {
  std::string header = "{";
  const int n = 20000;  // a 1.3 MB header
  for (int i = 0; i < n; ++i) {
    if (i) header += ",";
    header += "\"t" + std::to_string(i) + R"(":{"dtype":"F32","shape":[0],"data_offsets":[0,0]})";
  }
  header += "}";
  const auto h = parse_safetensors_header(file_with(header, 0), "w");
  EXPECT_EQ(h.tensors.size(), static_cast<std::size_t>(n));
}

TEST(Safetensors, TruncatedFileOnDisk) {
  test::TempDir dir;
  std::vector<TensorToWrite> ts{{"x", DType::kF32, {1024}, std::vector<std::byte>(4096)}};
  const auto path = dir.path() / "t.safetensors";
  write_safetensors(path.string(), ts);
  std::string content = test::read_file(path);
  test::write_file(path, content.substr(0, content.size() - 100));
  const auto msg = error_of<ModelLoadError>([&] { SafetensorsFile f(path.string(), "t.safetensors"); });
  EXPECT_NE(msg.find("t.safetensors: tensor \"x\": data_offsets [0, 4096) run past the end"), std::string::npos) << msg;
}

TEST(Safetensors, MissingFileIsIoError) { EXPECT_THROW(SafetensorsFile("/nonexistent/x.safetensors", "x"), IoError); }

}  // namespace
}  // namespace clef
