// SPDX-License-Identifier: MIT
#include "io/gguf.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <numeric>

#include "core/error.h"
#include "core/paths.h"
#include "io/safetensors.h"  // shape_to_string

namespace clef {
namespace {

constexpr std::uint64_t kMaxDims = 4;             // GGML_MAX_DIMS
constexpr std::uint64_t kMaxAlignment = 1 << 20;  // far above what any writer uses (32)

/// A bounds-checked little-endian reader over the file; every failure names the byte offset.
class Cursor {
 public:
  Cursor(std::span<const std::byte> file, const std::string& label) : file_(file), label_(label) {}

  [[noreturn]] void fail(const std::string& msg, std::uint64_t at) const {
    throw ModelLoadError(label_ + ": " + msg + " (at byte " + std::to_string(at) + ")");
  }
  std::uint64_t pos() const noexcept { return pos_; }
  std::uint64_t left() const noexcept { return file_.size() - pos_; }

  template <typename T>
  T read(const char* what) {
    if (left() < sizeof(T)) fail(std::string("file ends inside ") + what, pos_);
    T v;
    std::memcpy(&v, file_.data() + pos_, sizeof(T));  // little-endian hosts only (x86-64, ARM64)
    pos_ += sizeof(T);
    return v;
  }

  std::string read_string(const std::string& what) {
    const std::uint64_t at = pos_;
    const auto n = read<std::uint64_t>(what.c_str());
    if (n > left()) {
      fail(what + ": string length " + std::to_string(n) + " runs past the end of the file", at);
    }
    std::string s(reinterpret_cast<const char*>(file_.data() + pos_), static_cast<std::size_t>(n));
    pos_ += n;
    return s;
  }

 private:
  std::span<const std::byte> file_;
  const std::string& label_;
  std::uint64_t pos_ = 0;
};

/// Smallest encoded size of one value of type t (bounds element counts before allocating).
std::uint64_t min_value_bytes(GgufValueType t) {
  switch (t) {
    case GgufValueType::kU8:
    case GgufValueType::kI8:
    case GgufValueType::kBool: return 1;
    case GgufValueType::kU16:
    case GgufValueType::kI16: return 2;
    case GgufValueType::kU32:
    case GgufValueType::kI32:
    case GgufValueType::kF32: return 4;
    case GgufValueType::kU64:
    case GgufValueType::kI64:
    case GgufValueType::kF64: return 8;
    case GgufValueType::kString: return 8;
    case GgufValueType::kArray: return 12;
  }
  return 1;
}

bool known_value_type(std::uint32_t t) { return t <= static_cast<std::uint32_t>(GgufValueType::kF64); }

GgufValue read_scalar(Cursor& c, GgufValueType t, const std::string& where) {
  GgufValue v;
  v.type = t;
  switch (t) {
    case GgufValueType::kU8: v.scalar = std::uint64_t{c.read<std::uint8_t>(where.c_str())}; break;
    case GgufValueType::kI8: v.scalar = std::int64_t{c.read<std::int8_t>(where.c_str())}; break;
    case GgufValueType::kU16: v.scalar = std::uint64_t{c.read<std::uint16_t>(where.c_str())}; break;
    case GgufValueType::kI16: v.scalar = std::int64_t{c.read<std::int16_t>(where.c_str())}; break;
    case GgufValueType::kU32: v.scalar = std::uint64_t{c.read<std::uint32_t>(where.c_str())}; break;
    case GgufValueType::kI32: v.scalar = std::int64_t{c.read<std::int32_t>(where.c_str())}; break;
    case GgufValueType::kU64: v.scalar = c.read<std::uint64_t>(where.c_str()); break;
    case GgufValueType::kI64: v.scalar = c.read<std::int64_t>(where.c_str()); break;
    case GgufValueType::kF32: v.scalar = static_cast<double>(c.read<float>(where.c_str())); break;
    case GgufValueType::kF64: v.scalar = c.read<double>(where.c_str()); break;
    case GgufValueType::kBool: {
      const std::uint64_t at = c.pos();
      const auto b = c.read<std::uint8_t>(where.c_str());
      if (b > 1) c.fail(where + ": bool value " + std::to_string(b) + " is neither 0 nor 1", at);
      v.scalar = b == 1;
      break;
    }
    case GgufValueType::kString: v.scalar = c.read_string(where); break;
    case GgufValueType::kArray: c.fail(where + ": nested arrays are not supported", c.pos());
  }
  return v;
}

GgufValue read_value(Cursor& c, const std::string& key) {
  const std::string where = "metadata \"" + printable(key) + "\"";
  const std::uint64_t at = c.pos();
  const auto t = c.read<std::uint32_t>(where.c_str());
  if (!known_value_type(t)) c.fail(where + ": unknown value type " + std::to_string(t), at);
  const auto type = static_cast<GgufValueType>(t);
  if (type != GgufValueType::kArray) return read_scalar(c, type, where);
  GgufValue v;
  v.type = GgufValueType::kArray;
  const std::uint64_t eat = c.pos();
  const auto et = c.read<std::uint32_t>(where.c_str());
  if (!known_value_type(et)) c.fail(where + ": unknown array element type " + std::to_string(et), eat);
  v.element_type = static_cast<GgufValueType>(et);
  if (v.element_type == GgufValueType::kArray) c.fail(where + ": nested arrays are not supported", eat);
  const std::uint64_t nat = c.pos();
  const auto n = c.read<std::uint64_t>(where.c_str());
  if (n > c.left() / min_value_bytes(v.element_type)) {
    c.fail(where + ": array of " + std::to_string(n) + " elements runs past the end of the file", nat);
  }
  v.elements.reserve(static_cast<std::size_t>(n));
  for (std::uint64_t i = 0; i < n; ++i) v.elements.push_back(read_scalar(c, v.element_type, where));
  return v;
}

bool is_integer(GgufValueType t) {
  switch (t) {
    case GgufValueType::kU8:
    case GgufValueType::kI8:
    case GgufValueType::kU16:
    case GgufValueType::kI16:
    case GgufValueType::kU32:
    case GgufValueType::kI32:
    case GgufValueType::kU64:
    case GgufValueType::kI64: return true;
    default: return false;
  }
}

}  // namespace

namespace {

// Every ggml tensor type a GGUF file can name (ggml.h's enum ggml_type), with its block layout: so
// that a file is parsed (sizes, offsets) whatever it holds, and an error names the type of a tensor
// clef does not compute with.
struct GgmlTypeInfo {
  std::uint32_t value;
  const char* name;
  std::int64_t block_elems;
  std::int64_t block_bytes;
};
constexpr GgmlTypeInfo kGgmlTypes[] = {
    {0, "F32", 1, 4},         {1, "F16", 1, 2},         {2, "Q4_0", 32, 18},      {3, "Q4_1", 32, 20},
    {6, "Q5_0", 32, 22},      {7, "Q5_1", 32, 24},      {8, "Q8_0", 32, 34},      {9, "Q8_1", 32, 36},
    {10, "Q2_K", 256, 84},    {11, "Q3_K", 256, 110},   {12, "Q4_K", 256, 144},   {13, "Q5_K", 256, 176},
    {14, "Q6_K", 256, 210},   {15, "Q8_K", 256, 292},   {16, "IQ2_XXS", 256, 66}, {17, "IQ2_XS", 256, 74},
    {18, "IQ3_XXS", 256, 98}, {19, "IQ1_S", 256, 50},   {20, "IQ4_NL", 32, 18},   {21, "IQ3_S", 256, 110},
    {22, "IQ2_S", 256, 82},   {23, "IQ4_XS", 256, 136}, {24, "I8", 1, 1},         {25, "I16", 1, 2},
    {26, "I32", 1, 4},        {27, "I64", 1, 8},        {28, "F64", 1, 8},        {29, "IQ1_M", 256, 56},
    {30, "BF16", 1, 2},       {34, "TQ1_0", 256, 54},   {35, "TQ2_0", 256, 66},   {39, "MXFP4", 32, 17},
};

const GgmlTypeInfo* find_ggml_type(std::uint32_t type) noexcept {
  for (const GgmlTypeInfo& t : kGgmlTypes) {
    if (t.value == type) return &t;
  }
  return nullptr;
}

}  // namespace

bool ggml_block_layout(std::uint32_t type, std::int64_t& block_elems, std::int64_t& block_bytes) noexcept {
  const GgmlTypeInfo* t = find_ggml_type(type);
  if (t == nullptr) return false;
  block_elems = t->block_elems;
  block_bytes = t->block_bytes;
  return true;
}

std::string ggml_type_name(std::uint32_t type) {
  const GgmlTypeInfo* t = find_ggml_type(type);
  return t != nullptr ? std::string(t->name) : "type " + std::to_string(type);
}

std::uint64_t GgufTensorInfo::numel() const noexcept {
  std::uint64_t n = 1;
  for (auto d : ne) n *= static_cast<std::uint64_t>(d);
  return n;
}

std::vector<std::int64_t> GgufTensorInfo::torch_shape() const { return {ne.rbegin(), ne.rend()}; }

GgufHeader parse_gguf_header(std::span<const std::byte> file, const std::string& label) {
  Cursor c(file, label);
  GgufHeader h;
  if (file.size() < 4 || std::memcmp(file.data(), "GGUF", 4) != 0) c.fail("not a GGUF file (no \"GGUF\" magic)", 0);
  (void)c.read<std::uint32_t>("the magic");
  h.version = c.read<std::uint32_t>("the version");
  if (h.version != 2 && h.version != 3) {
    c.fail("GGUF version " + std::to_string(h.version) + " is not supported (2 and 3 are)", 4);
  }
  const auto n_tensors = c.read<std::uint64_t>("the tensor count");
  const auto n_kv = c.read<std::uint64_t>("the metadata count");
  // Each tensor info takes at least 8 (name) + 4 + 8 + 4 + 8 bytes, each kv at least 8 + 4 + 1.
  if (n_tensors > c.left() / 32)
    c.fail("tensor count " + std::to_string(n_tensors) + " exceeds what the file can hold", 8);
  if (n_kv > c.left() / 13) c.fail("metadata count " + std::to_string(n_kv) + " exceeds what the file can hold", 16);

  for (std::uint64_t i = 0; i < n_kv; ++i) {
    const std::uint64_t at = c.pos();
    std::string key = c.read_string("metadata key " + std::to_string(i));
    if (key.empty()) c.fail("metadata key " + std::to_string(i) + " is empty", at);
    if (h.metadata.count(key)) c.fail("duplicate metadata key \"" + printable(key) + "\"", at);
    GgufValue v = read_value(c, key);
    h.metadata.emplace(std::move(key), std::move(v));
  }
  if (auto it = h.metadata.find("general.alignment"); it != h.metadata.end()) {
    const GgufValue& a = it->second;
    const auto* u = std::get_if<std::uint64_t>(&a.scalar);
    if (a.type != GgufValueType::kU32 || u == nullptr || *u == 0 || (*u & (*u - 1)) != 0 || *u > kMaxAlignment) {
      throw ModelLoadError(
          label + ": metadata \"general.alignment\" must be a u32 power of two <= " + std::to_string(kMaxAlignment));
    }
    h.alignment = *u;
  }

  h.tensors.reserve(static_cast<std::size_t>(n_tensors));
  std::unordered_map<std::string, std::size_t> seen;
  for (std::uint64_t i = 0; i < n_tensors; ++i) {
    const std::uint64_t at = c.pos();
    GgufTensorInfo t;
    t.name = c.read_string("tensor name " + std::to_string(i));
    if (t.name.empty()) c.fail("tensor " + std::to_string(i) + " has an empty name", at);
    const std::string where = "tensor \"" + printable(t.name) + "\"";
    if (!seen.emplace(t.name, i).second) c.fail("duplicate " + where, at);
    const std::uint64_t dat = c.pos();
    const auto n_dims = c.read<std::uint32_t>(where.c_str());
    if (n_dims < 1 || n_dims > kMaxDims) {
      c.fail(where + ": " + std::to_string(n_dims) + " dimensions (1 to " + std::to_string(kMaxDims) + " allowed)",
             dat);
    }
    std::uint64_t numel = 1;
    for (std::uint32_t d = 0; d < n_dims; ++d) {
      const std::uint64_t nat = c.pos();
      const auto v = c.read<std::uint64_t>(where.c_str());
      if (v < 1 || v > (std::uint64_t{1} << 62) || __builtin_mul_overflow(numel, v, &numel)) {
        c.fail(where + ": dimension " + std::to_string(d) + " = " + std::to_string(v) + " is out of range", nat);
      }
      t.ne.push_back(static_cast<std::int64_t>(v));
    }
    const std::uint64_t tat = c.pos();
    t.type = c.read<std::uint32_t>(where.c_str());
    std::int64_t be = 0, bb = 0;
    if (!ggml_block_layout(t.type, be, bb)) c.fail(where + ": unknown ggml type " + std::to_string(t.type), tat);
    if (t.ne[0] % be != 0) {
      c.fail(where + ": ne[0] = " + std::to_string(t.ne[0]) + " is not a multiple of " + ggml_type_name(t.type) +
                 "'s block of " + std::to_string(be),
             tat);
    }
    if (__builtin_mul_overflow(numel / static_cast<std::uint64_t>(be), static_cast<std::uint64_t>(bb), &t.nbytes)) {
      c.fail(where + ": byte size overflows", tat);
    }
    const std::uint64_t oat = c.pos();
    t.offset = c.read<std::uint64_t>(where.c_str());
    if (t.offset % h.alignment != 0) {
      c.fail(where + ": offset " + std::to_string(t.offset) + " is not a multiple of the alignment " +
                 std::to_string(h.alignment),
             oat);
    }
    h.tensors.push_back(std::move(t));
  }
  const std::uint64_t end_of_infos = c.pos();
  h.data_offset = (end_of_infos + h.alignment - 1) / h.alignment * h.alignment;
  if (h.data_offset > file.size()) {
    if (!h.tensors.empty()) c.fail("file ends before the data section", end_of_infos);
    h.data_offset = file.size();  // a header-only file with no tensors
  }
  h.data_bytes = file.size() - h.data_offset;

  std::vector<std::size_t> order(h.tensors.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::sort(order.begin(), order.end(),
            [&](std::size_t a, std::size_t b) { return h.tensors[a].offset < h.tensors[b].offset; });
  std::uint64_t prev_end = 0;
  const GgufTensorInfo* prev = nullptr;
  for (std::size_t i : order) {
    const GgufTensorInfo& t = h.tensors[i];
    std::uint64_t end = 0;
    if (__builtin_add_overflow(t.offset, t.nbytes, &end) || end > h.data_bytes) {
      throw ModelLoadError(
          label + ": tensor \"" + printable(t.name) + "\" " + ggml_type_name(t.type) + " " + shape_to_string(t.ne) +
          ": bytes [" + std::to_string(t.offset) + ", " + std::to_string(t.offset) + " + " + std::to_string(t.nbytes) +
          ") run past the data section of " + std::to_string(h.data_bytes) + " bytes (truncated file?)");
    }
    if (prev != nullptr && t.offset < prev_end) {
      throw ModelLoadError(label + ": tensors \"" + printable(prev->name) + "\" and \"" + printable(t.name) +
                           "\" overlap in the data section");
    }
    prev_end = end;
    prev = &t;
  }
  return h;
}

GgufFile::GgufFile(const std::string& path, const std::string& label)
    : map_(path), label_(label), header_(parse_gguf_header(map_.bytes(), label)) {
  for (std::size_t i = 0; i < header_.tensors.size(); ++i) index_.emplace(header_.tensors[i].name, i);
}

const GgufTensorInfo* GgufFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &header_.tensors[it->second];
}

const GgufTensorInfo& GgufFile::need_tensor(const std::string& name, std::size_t dims, const std::string& why) const {
  const GgufTensorInfo* t = find(name);
  if (t == nullptr) throw ModelLoadError(label_ + ": missing tensor " + name + " (" + why + ")");
  if (t->ne.size() != dims) {
    throw ModelLoadError(label_ + ": tensor " + name + " has " + std::to_string(t->ne.size()) + " dims, expected " +
                         std::to_string(dims));
  }
  return *t;
}

std::span<const std::byte> GgufFile::data(const GgufTensorInfo& t) const noexcept {
  return map_.bytes().subspan(static_cast<std::size_t>(header_.data_offset + t.offset),
                              static_cast<std::size_t>(t.nbytes));
}

const GgufValue* GgufFile::find_value(const std::string& key) const {
  auto it = header_.metadata.find(key);
  return it == header_.metadata.end() ? nullptr : &it->second;
}

namespace {
const GgufValue& need(const GgufFile& f, const std::string& key) {
  const GgufValue* v = f.find_value(key);
  if (v == nullptr) throw ModelLoadError(f.label() + ": metadata \"" + printable(key) + "\" is missing");
  return *v;
}
}  // namespace

void GgufFile::metadata_error(const std::string& key, const std::string& msg) const {
  throw ModelLoadError(label_ + ": metadata \"" + printable(key) + "\": " + msg);
}

std::int64_t GgufFile::get_positive_int(const std::string& key) const {
  const std::int64_t v = get_int(key);
  if (v < 1) metadata_error(key, "must be >= 1, got " + std::to_string(v));
  return v;
}

std::int64_t GgufFile::get_int(const std::string& key) const {
  const GgufValue& v = need(*this, key);
  if (!is_integer(v.type)) throw ModelLoadError(label_ + ": metadata \"" + printable(key) + "\" is not an integer");
  if (const auto* u = std::get_if<std::uint64_t>(&v.scalar)) {
    if (*u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
      throw ModelLoadError(label_ + ": metadata \"" + printable(key) + "\" = " + std::to_string(*u) + " is too large");
    }
    return static_cast<std::int64_t>(*u);
  }
  return std::get<std::int64_t>(v.scalar);
}

double GgufFile::get_float(const std::string& key) const {
  const GgufValue& v = need(*this, key);
  if (v.type == GgufValueType::kF32 || v.type == GgufValueType::kF64) return std::get<double>(v.scalar);
  if (is_integer(v.type)) return static_cast<double>(get_int(key));
  throw ModelLoadError(label_ + ": metadata \"" + printable(key) + "\" is not a number");
}

const std::string& GgufFile::get_string(const std::string& key) const {
  const GgufValue& v = need(*this, key);
  if (v.type != GgufValueType::kString)
    throw ModelLoadError(label_ + ": metadata \"" + printable(key) + "\" is not a string");
  return std::get<std::string>(v.scalar);
}

const std::vector<GgufValue>& GgufFile::get_array(const std::string& key) const {
  const GgufValue& v = need(*this, key);
  if (v.type != GgufValueType::kArray)
    throw ModelLoadError(label_ + ": metadata \"" + printable(key) + "\" is not an array");
  return v.elements;
}

}  // namespace clef
