// clef_gguf_driver FILE.gguf: prints what the GGUF reader (src/io/gguf.h) read, as one JSON object,
// for tests/reference/test_gguf_reader.py to compare with PyPI gguf's own reader and writer:
//   {"version", "alignment", "data_offset", "metadata": {key: {"type": T, "value": V}},
//    "tensors": [{"name", "ne", "type", "offset", "nbytes", "sha256"}]}
// Arrays: {"type": 9, "element_type": T, "value": [...]}. Exit 3 with the error on stderr for a
// file the reader refuses.
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "core/error.h"
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

}  // namespace

int main(int argc, char** argv) {
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
