// SPDX-License-Identifier: MIT
// GGUF header parser (src/io/gguf.h): a valid file read back field by field, every prefix of it
// refused cleanly, and one malformed variant per rule the parser states. The files are built
// byte by byte here from the format description (gguf.h in ggml), independently of the parser.
// (The live check against files written by PyPI's `gguf` writer is for the GGUF binding work.)
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/gguf.h"
#include "io/weight_store.h"
#include "test_util.h"

namespace clef {
namespace {

/// Little-endian GGUF bytes, written field by field.
class Writer {
 public:
  template <typename T>
  Writer& put(T v) {
    const auto* p = reinterpret_cast<const std::byte*>(&v);
    bytes.insert(bytes.end(), p, p + sizeof(T));
    return *this;
  }
  Writer& str(const std::string& s) {
    put<std::uint64_t>(s.size());
    for (char c : s) bytes.push_back(static_cast<std::byte>(c));
    return *this;
  }
  Writer& pad_to(std::size_t a) {
    while (bytes.size() % a != 0) bytes.push_back(std::byte{0});
    return *this;
  }
  std::vector<std::byte> bytes;
};

struct Tensor {
  std::string name;
  std::vector<std::uint64_t> ne;
  std::uint32_t type;
  std::uint64_t offset;
};

/// A GGUF v3 file: `kv` writes the metadata (count `n_kv`), then the tensor infos, padding to
/// `align` and `data_bytes` bytes of data (byte i = i % 251).
std::vector<std::byte> make_file(const std::vector<Tensor>& tensors, std::uint64_t n_kv,
                                 const std::function<void(Writer&)>& kv, std::size_t align, std::size_t data_bytes,
                                 std::uint32_t version = 3) {
  Writer w;
  w.put<std::uint32_t>(0x46554747u).put<std::uint32_t>(version);  // "GGUF"
  w.put<std::uint64_t>(tensors.size()).put<std::uint64_t>(n_kv);
  kv(w);
  for (const auto& t : tensors) {
    w.str(t.name).put<std::uint32_t>(static_cast<std::uint32_t>(t.ne.size()));
    for (auto d : t.ne) w.put<std::uint64_t>(d);
    w.put<std::uint32_t>(t.type).put<std::uint64_t>(t.offset);
  }
  w.pad_to(align);
  for (std::size_t i = 0; i < data_bytes; ++i) w.bytes.push_back(static_cast<std::byte>(i % 251));
  return w.bytes;
}

// F32 [3, 2] at 0 (24 bytes), BF16 [8] at 32 (16 bytes), Q8_0 [64, 2] at 64 (4 blocks x 34 = 136).
const std::vector<Tensor> kTensors = {{"a.weight", {3, 2}, 0, 0},
                                      {"b.bias", {8}, 30, 32},
                                      {"blk.0.ffn_up.weight", {64, 2}, 8, 64}};
constexpr std::size_t kData = 64 + 136;

void good_kv(Writer& w) {
  w.str("general.architecture").put<std::uint32_t>(8).str("qwen35");
  w.str("qwen35.block_count").put<std::uint32_t>(4).put<std::uint32_t>(24);
  w.str("qwen35.rope.freq_base").put<std::uint32_t>(6).put<float>(10000000.0f);
  w.str("x.i8").put<std::uint32_t>(1).put<std::int8_t>(-5);
  w.str("x.u64").put<std::uint32_t>(10).put<std::uint64_t>(1ull << 40);
  w.str("x.f64").put<std::uint32_t>(12).put<double>(0.25);
  w.str("x.bool").put<std::uint32_t>(7).put<std::uint8_t>(1);
  w.str("tokenizer.ggml.tokens").put<std::uint32_t>(9).put<std::uint32_t>(8).put<std::uint64_t>(3);
  w.str("a").str("bc").str("");
  w.str("qwen35.rope.dimension_sections").put<std::uint32_t>(9).put<std::uint32_t>(5).put<std::uint64_t>(4);
  w.put<std::int32_t>(11).put<std::int32_t>(11).put<std::int32_t>(10).put<std::int32_t>(0);
}
constexpr std::uint64_t kGoodKv = 9;

std::vector<std::byte> good_file() { return make_file(kTensors, kGoodKv, good_kv, 32, kData); }

std::string error_of(const std::vector<std::byte>& f) {
  try {
    (void)parse_gguf_header(f, "m.gguf");
  } catch (const ModelLoadError& e) {
    return e.what();
  }
  return "";
}

TEST(Gguf, ReadsAValidFile) {
  const auto f = good_file();
  const GgufHeader h = parse_gguf_header(f, "m.gguf");
  EXPECT_EQ(h.version, 3u);
  EXPECT_EQ(h.alignment, 32u);
  EXPECT_EQ(h.data_offset % 32, 0u);
  EXPECT_EQ(h.data_bytes, kData);
  ASSERT_EQ(h.tensors.size(), 3u);
  EXPECT_EQ(h.tensors[0].name, "a.weight");
  EXPECT_EQ(h.tensors[0].nbytes, 24u);
  EXPECT_EQ(h.tensors[0].torch_shape(), (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(h.tensors[1].nbytes, 16u);
  EXPECT_EQ(h.tensors[2].nbytes, 136u);
  EXPECT_EQ(h.tensors[2].numel(), 128u);
  EXPECT_EQ(ggml_type_name(h.tensors[2].type), "Q8_0");

  test::TempDir dir;
  const std::string path = dir.str() + "/m.gguf";
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(f.data()), static_cast<std::streamsize>(f.size()));
  GgufFile g(path, "m.gguf");
  EXPECT_EQ(g.get_string("general.architecture"), "qwen35");
  EXPECT_EQ(g.get_int("qwen35.block_count"), 24);
  EXPECT_EQ(g.get_float("qwen35.rope.freq_base"), 10000000.0);
  EXPECT_EQ(g.get_int("x.i8"), -5);
  EXPECT_EQ(g.get_int("x.u64"), std::int64_t{1} << 40);
  EXPECT_EQ(g.get_float("x.f64"), 0.25);
  EXPECT_EQ(std::get<bool>(g.find_value("x.bool")->scalar), true);
  const auto& toks = g.get_array("tokenizer.ggml.tokens");
  ASSERT_EQ(toks.size(), 3u);
  EXPECT_EQ(std::get<std::string>(toks[1].scalar), "bc");
  EXPECT_EQ(std::get<std::string>(toks[2].scalar), "");
  const auto& sec = g.get_array("qwen35.rope.dimension_sections");
  ASSERT_EQ(sec.size(), 4u);
  EXPECT_EQ(std::get<std::int64_t>(sec[2].scalar), 10);
  // Data spans: the Q8_0 tensor starts 64 bytes into the data section.
  const GgufTensorInfo* q = g.find("blk.0.ffn_up.weight");
  ASSERT_NE(q, nullptr);
  const auto d = g.data(*q);
  ASSERT_EQ(d.size(), 136u);
  EXPECT_EQ(d[0], static_cast<std::byte>(64 % 251));
  EXPECT_EQ(g.find("missing"), nullptr);
  EXPECT_THROW((void)g.get_int("general.architecture"), ModelLoadError);
  EXPECT_THROW((void)g.get_string("qwen35.block_count"), ModelLoadError);
  EXPECT_THROW((void)g.get_array("nope"), ModelLoadError);
}

TEST(Gguf, EveryTruncationIsRefused) {
  const auto f = good_file();
  for (std::size_t n = 0; n < f.size(); ++n) {
    const std::vector<std::byte> cut(f.begin(), f.begin() + static_cast<std::ptrdiff_t>(n));
    EXPECT_NE(error_of(cut), "") << "prefix of " << n << " bytes was accepted";
  }
}

TEST(Gguf, AlignmentKeyMovesTheDataSection) {
  auto kv = [](Writer& w) { w.str("general.alignment").put<std::uint32_t>(4).put<std::uint32_t>(64); };
  const auto f = make_file({{"t", {16}, 0, 0}, {"u", {16}, 0, 64}}, 1, kv, 64, 128);
  const GgufHeader h = parse_gguf_header(f, "m.gguf");
  EXPECT_EQ(h.alignment, 64u);
  EXPECT_EQ(h.data_offset % 64, 0u);
  // An offset that is a multiple of 32 but not 64 is refused under alignment 64.
  const auto bad = make_file({{"t", {16}, 0, 0}, {"u", {8}, 0, 96}}, 1, kv, 64, 160);
  EXPECT_NE(error_of(bad).find("not a multiple of the alignment 64"), std::string::npos) << error_of(bad);
}

struct BadCase {
  const char* what;
  std::vector<std::byte> file;
  const char* expect;  ///< a substring of the message
};

std::vector<BadCase> bad_cases() {
  auto none = [](Writer&) {};
  auto kv1 = [](const std::function<void(Writer&)>& f) { return f; };
  std::vector<BadCase> v;
  auto f = good_file();
  f[0] = std::byte{'X'};
  v.push_back({"magic", f, "no \"GGUF\" magic"});
  v.push_back({"version 1", make_file(kTensors, kGoodKv, good_kv, 32, kData, 1), "version 1 is not supported"});
  v.push_back({"version 4", make_file(kTensors, kGoodKv, good_kv, 32, kData, 4), "version 4 is not supported"});
  v.push_back({"data cut", make_file(kTensors, kGoodKv, good_kv, 32, kData - 1), "run past the data section"});
  v.push_back({"offset past end", make_file({{"t", {4}, 0, 1u << 20}}, 0, none, 32, 64), "run past the data section"});
  v.push_back({"offset overflow", make_file({{"t", {4}, 0, ~std::uint64_t{31}}}, 0, none, 32, 64),
               "run past the data section"});
  v.push_back({"overlap", make_file({{"t", {16}, 0, 0}, {"u", {16}, 0, 32}}, 0, none, 32, 128), "overlap"});
  v.push_back({"misaligned", make_file({{"t", {4}, 0, 8}}, 0, none, 32, 64), "not a multiple of the alignment 32"});
  v.push_back({"unknown type", make_file({{"t", {4}, 99, 0}}, 0, none, 32, 64), "unknown ggml type 99"});
  v.push_back(
      {"Q8_0 row", make_file({{"t", {48, 2}, 8, 0}}, 0, none, 32, 256), "not a multiple of Q8_0's block of 32"});
  v.push_back({"0 dims", make_file({{"t", {}, 0, 0}}, 0, none, 32, 64), "0 dimensions"});
  v.push_back({"5 dims", make_file({{"t", {1, 1, 1, 1, 1}, 0, 0}}, 0, none, 32, 64), "5 dimensions"});
  v.push_back({"zero dim", make_file({{"t", {4, 0}, 0, 0}}, 0, none, 32, 64), "dimension 1 = 0"});
  v.push_back({"huge dims", make_file({{"t", {1ull << 40, 1ull << 40}, 0, 0}}, 0, none, 32, 64), "out of range"});
  v.push_back(
      {"dup tensor", make_file({{"t", {4}, 0, 0}, {"t", {4}, 0, 32}}, 0, none, 32, 64), "duplicate tensor \"t\""});
  v.push_back({"empty name", make_file({{"", {4}, 0, 0}}, 0, none, 32, 64), "empty name"});
  v.push_back({"dup key",
               make_file({}, 2, kv1([](Writer& w) {
                           w.str("k").put<std::uint32_t>(4).put<std::uint32_t>(1);
                           w.str("k").put<std::uint32_t>(4).put<std::uint32_t>(2);
                         }),
                         32, 0),
               "duplicate metadata key \"k\""});
  v.push_back({"value type",
               make_file({}, 1, kv1([](Writer& w) { w.str("k").put<std::uint32_t>(13).put<std::uint32_t>(0); }), 32, 0),
               "unknown value type 13"});
  v.push_back({"nested array",
               make_file({}, 1, kv1([](Writer& w) {
                           w.str("k").put<std::uint32_t>(9).put<std::uint32_t>(9).put<std::uint64_t>(1);
                         }),
                         32, 0),
               "nested arrays"});
  v.push_back({"bool 2",
               make_file({}, 1, kv1([](Writer& w) { w.str("k").put<std::uint32_t>(7).put<std::uint8_t>(2); }), 32, 0),
               "neither 0 nor 1"});
  v.push_back({"huge array",
               make_file({}, 1, kv1([](Writer& w) {
                           w.str("k").put<std::uint32_t>(9).put<std::uint32_t>(4).put<std::uint64_t>(1ull << 60);
                         }),
                         32, 0),
               "runs past the end of the file"});
  v.push_back({"huge string",
               make_file({}, 1, kv1([](Writer& w) {
                           w.put<std::uint64_t>(1ull << 62).put<std::uint64_t>(0).put<std::uint64_t>(0);
                         }),
                         32, 0),
               "metadata key 0: string length 4611686018427387904 runs past the end"});
  v.push_back(
      {"alignment 3",
       make_file({}, 1, kv1([](Writer& w) { w.str("general.alignment").put<std::uint32_t>(4).put<std::uint32_t>(3); }),
                 32, 0),
       "power of two"});
  v.push_back({"alignment u64",
               make_file({}, 1, kv1([](Writer& w) {
                           w.str("general.alignment").put<std::uint32_t>(10).put<std::uint64_t>(32);
                         }),
                         32, 0),
               "power of two"});
  Writer w;
  w.put<std::uint32_t>(0x46554747u).put<std::uint32_t>(3).put<std::uint64_t>(1ull << 50).put<std::uint64_t>(0);
  v.push_back({"tensor count", w.bytes, "tensor count"});
  return v;
}

TEST(Gguf, MalformedFilesNameTheProblem) {
  for (const BadCase& c : bad_cases()) {
    const std::string e = error_of(c.file);
    EXPECT_NE(e.find(c.expect), std::string::npos) << c.what << ": got \"" << e << "\"";
    EXPECT_EQ(e.rfind("m.gguf: ", 0), 0u) << c.what << ": the message must start with the file label: " << e;
  }
}

TEST(Gguf, HeaderOnlyFileWithoutTensorsIsValid) {
  const auto f = make_file(
      {}, 1, [](Writer& w) { w.str("general.name").put<std::uint32_t>(8).str("x"); }, 1, 0);
  const GgufHeader h = parse_gguf_header(f, "m.gguf");
  EXPECT_TRUE(h.tensors.empty());
  EXPECT_EQ(h.metadata.size(), 1u);
}

TEST(Gguf, UnreadTensorTypeSaysWhichTypesAreReadWhere) {
  // IQ4_NL (ggml type 20, 32 elements in 18 bytes): a valid GGUF type that no reader of clef takes.
  const auto f = make_file(
      {{"blk.0.ffn_up.weight", {32}, 20, 0}}, 0, [](Writer&) {}, 32, 32);
  test::TempDir dir;
  const std::string path = dir.str() + "/m.gguf";
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(f.data()), static_cast<std::streamsize>(f.size()));
  std::string e;
  try {
    (void)WeightStore::open_gguf(path, "m.gguf");
  } catch (const Unsupported& u) {
    e = u.what();
  }
  EXPECT_EQ(e.rfind("m.gguf: tensor blk.0.ffn_up.weight has ggml type IQ4_NL; ", 0), 0u) << e;
  // Q2_K and Q3_K are named apart from the types the backbone's linear layers run.
  EXPECT_NE(e.find("Q4_K, Q5_K and Q6_K in the backbone's 2-D weights"), std::string::npos) << e;
  EXPECT_NE(e.find("Q2_K and Q3_K only where a tensor is dequantized at load"), std::string::npos) << e;
  EXPECT_NE(e.find("not in backbone linear layers"), std::string::npos) << e;
}

}  // namespace
}  // namespace clef
