// SPDX-License-Identifier: MIT
// clef_gguf_driver FILE.gguf: prints what the GGUF reader (src/io/gguf.h) read, as one JSON object,
// for tests/reference/test_gguf_reader.py to compare with PyPI gguf's own reader and writer:
//   {"version", "alignment", "data_offset", "metadata": {key: {"type": T, "value": V}},
//    "tensors": [{"name", "ne", "type", "offset", "nbytes", "sha256"}]}
// Arrays: {"type": 9, "element_type": T, "value": [...]}. Exit 3 with the error on stderr for a
// file the reader refuses.
// clef_gguf_driver --dequant TYPE IN OUT: reads whole blocks of ggml block type TYPE ("Q4_K", ...)
// from the raw file IN and writes their fp32 dequantization (convert_to_f32, little-endian) to OUT,
// for tests/reference/test_quant_blocks.py.
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>
#include <iostream>
#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "core/error.h"
#include "core/quant_blocks.h"
#include "core/sha256.h"
#include "io/gguf.h"

namespace {

nlohmann::json scalar_json(const clef::GgufValue& v) {
  return std::visit([](const auto& x) -> nlohmann::json { return x; }, v.scalar);
}

nlohmann::json value_json(const clef::GgufValue& v) {
  nlohmann::json j;
  j["type"] = static_cast<std::uint32_t>(v.type);
  if (v.type == clef::GgufValueType::kArray) {
    j["element_type"] = static_cast<std::uint32_t>(v.element_type);
    nlohmann::json items = nlohmann::json::array();
    for (const auto& e : v.elements) items.push_back(scalar_json(e));
    j["value"] = std::move(items);
  } else {
    j["value"] = scalar_json(v);
  }
  return j;
}

int dequant(const std::string& type, const char* in_path, const char* out_path) {
  using clef::DType;
  std::uint64_t be = 0, bb = 0;
  DType t = DType::kF32;
  bool found = false;
  for (const DType d : {DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ8_0, DType::kQ2_K,
                        DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    if (clef::dtype_name(d) == type) {
      t = d;
      found = true;
    }
  }
  if (!found || !clef::dtype_block(t, be, bb)) {
    std::fprintf(stderr, "clef_gguf_driver: unknown block type %s\n", type.c_str());
    return 2;
  }
  std::ifstream in(in_path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "clef_gguf_driver: cannot open %s\n", in_path);
    return 2;
  }
  const std::vector<char> raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (raw.size() % static_cast<std::size_t>(bb) != 0) {
    std::fprintf(stderr, "clef_gguf_driver: %s does not hold whole %s blocks\n", in_path, type.c_str());
    return 2;
  }
  const std::size_t n = raw.size() / static_cast<std::size_t>(bb) * static_cast<std::size_t>(be);
  std::vector<float> out(n);
  clef::convert_to_f32(t, reinterpret_cast<const std::byte*>(raw.data()), n, out.data());
  std::ofstream o(out_path, std::ios::binary);
  o.write(reinterpret_cast<const char*>(out.data()), static_cast<std::streamsize>(n * sizeof(float)));
  return o ? 0 : 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 5 && std::string(argv[1]) == "--dequant") return dequant(argv[2], argv[3], argv[4]);
  if (argc != 2) {
    std::fprintf(stderr, "usage: clef_gguf_driver FILE.gguf\n");
    return 2;
  }
  try {
    const clef::GgufFile f(argv[1], argv[1]);
    const clef::GgufHeader& h = f.header();
    nlohmann::json out;
    out["version"] = h.version;
    out["alignment"] = h.alignment;
    out["data_offset"] = h.data_offset;
    nlohmann::json meta = nlohmann::json::object();
    for (const auto& [k, v] : h.metadata) meta[k] = value_json(v);
    out["metadata"] = std::move(meta);
    nlohmann::json tensors = nlohmann::json::array();
    for (const auto& t : h.tensors) {
      tensors.push_back({{"name", t.name},
                         {"ne", t.ne},
                         {"type", t.type},
                         {"offset", t.offset},
                         {"nbytes", t.nbytes},
                         {"sha256", clef::sha256_hex(f.data(t))}});
    }
    out["tensors"] = std::move(tensors);
    std::cout << out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    return 0;
  } catch (const clef::Error& e) {
    std::fprintf(stderr, "clef_gguf_driver: %s\n", e.what());
    return 3;
  }
}
