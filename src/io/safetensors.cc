// SPDX-License-Identifier: MIT
#include "io/safetensors.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <set>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_reader.h"
#include "core/paths.h"

namespace clef {

std::uint64_t TensorInfo::numel() const noexcept {
  std::uint64_t n = 1;
  for (auto d : shape) n *= static_cast<std::uint64_t>(d);
  return n;
}

std::string shape_to_string(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

namespace {

[[noreturn]] void bad(const std::string& label, const std::string& msg) { throw ModelLoadError(label + ": " + msg); }

bool mul_overflows(std::uint64_t a, std::uint64_t b, std::uint64_t* out) { return __builtin_mul_overflow(a, b, out); }

TensorInfo parse_entry(const std::string& label, const std::string& name, const nlohmann::json& e,
                       std::uint64_t data_bytes) {
  const std::string where = "tensor \"" + printable(name) + "\"";
  if (name.empty()) bad(label, "header has a tensor with an empty name");
  if (!e.is_object()) bad(label, where + ": expected an object, got " + describe_json(e));
  for (auto it = e.begin(); it != e.end(); ++it) {
    if (it.key() != "dtype" && it.key() != "shape" && it.key() != "data_offsets") {
      bad(label, where + ": unknown field \"" + printable(it.key()) + "\"");
    }
  }
  TensorInfo t;
  t.name = name;
  auto dt = e.find("dtype");
  if (dt == e.end() || !dt->is_string()) bad(label, where + ": missing or non-string \"dtype\"");
  auto parsed = dtype_from_name(dt->get<std::string>());
  if (!parsed) bad(label, where + ": unknown dtype \"" + printable(dt->get<std::string>()) + "\"");
  t.dtype = *parsed;

  auto sh = e.find("shape");
  if (sh == e.end() || !sh->is_array()) bad(label, where + ": missing or non-array \"shape\"");
  std::uint64_t numel = 1;
  for (const auto& d : *sh) {
    if (!d.is_number_unsigned() && !(d.is_number_integer() && d.get<std::int64_t>() >= 0)) {
      bad(label, where + ": shape entries must be non-negative integers, got " + describe_json(d));
    }
    const std::uint64_t v = d.get<std::uint64_t>();
    if (v > (std::uint64_t{1} << 62) || mul_overflows(numel, v, &numel)) {
      bad(label, where + ": shape " + sh->dump() + " overflows");
    }
    t.shape.push_back(static_cast<std::int64_t>(v));
  }
  std::uint64_t nbytes = 0;
  if (mul_overflows(numel, dtype_size(t.dtype), &nbytes)) bad(label, where + ": byte size overflows");

  auto off = e.find("data_offsets");
  if (off == e.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
      !(*off)[1].is_number_unsigned()) {
    bad(label, where + ": \"data_offsets\" must be [begin, end] with non-negative integers");
  }
  t.begin = (*off)[0].get<std::uint64_t>();
  t.end = (*off)[1].get<std::uint64_t>();
  const std::string range = "[" + std::to_string(t.begin) + ", " + std::to_string(t.end) + ")";
  if (t.begin > t.end) bad(label, where + ": data_offsets " + range + " has begin > end");
  if (t.end > data_bytes) {
    bad(label, where + ": data_offsets " + range + " run past the end of the data section (" +
                   std::to_string(data_bytes) + " bytes; file truncated?)");
  }
  if (t.end - t.begin != nbytes) {
    bad(label, where + ": dtype " + std::string(dtype_name(t.dtype)) + " x shape " + shape_to_string(t.shape) +
                   " needs " + std::to_string(nbytes) + " bytes but data_offsets " + range + " span " +
                   std::to_string(t.end - t.begin));
  }
  return t;
}

}  // namespace

SafetensorsHeader parse_safetensors_header(std::span<const std::byte> file, const std::string& label) {
  if (file.size() < 8) {
    bad(label,
        "truncated: the file is " + std::to_string(file.size()) + " bytes, too short for the 8-byte header length");
  }
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | std::to_integer<std::uint64_t>(file[static_cast<std::size_t>(i)]);
  if (n > kMaxSafetensorsHeaderBytes) {
    bad(label, "header length " + std::to_string(n) + " exceeds the limit of " +
                   std::to_string(kMaxSafetensorsHeaderBytes) + " bytes");
  }
  if (n > file.size() - 8) {
    bad(label, "header length " + std::to_string(n) + " runs past the end of the file (" + std::to_string(file.size()) +
                   " bytes; truncated?)");
  }
  SafetensorsHeader h;
  h.json_bytes = n;
  h.data_offset = 8 + n;
  h.data_bytes = file.size() - h.data_offset;

  const char* begin = reinterpret_cast<const char*>(file.data() + 8);
  if (n == 0 || *begin != '{') bad(label, "malformed header JSON: it must start with '{'");

  // Duplicate keys are rejected at every depth (a repeated tensor name or a repeated "dtype"), as the
  // safetensors library does; nesting is bounded (a header is at most 3 levels deep).
  const nlohmann::json j = parse_json_text(std::string_view(begin, static_cast<std::size_t>(n)), label + ": header",
                                           JsonTextLimits{8, DuplicateKeys::kReject});
  if (!j.is_object()) bad(label, "malformed header: expected a JSON object, got " + describe_json(j));

  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object()) bad(label, "__metadata__ must be an object of strings");
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string()) bad(label, "__metadata__." + printable(m.key()) + ": expected a string");
        h.metadata[m.key()] = m->get<std::string>();
      }
      continue;
    }
    h.tensors.push_back(parse_entry(label, it.key(), *it, h.data_bytes));
  }
  std::sort(h.tensors.begin(), h.tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  std::uint64_t cursor = 0;
  const TensorInfo* prev = nullptr;
  for (const auto& t : h.tensors) {
    if (t.begin < cursor) {
      bad(label, "tensors \"" + printable(prev->name) + "\" [" + std::to_string(prev->begin) + ", " +
                     std::to_string(prev->end) + ") and \"" + printable(t.name) + "\" [" + std::to_string(t.begin) +
                     ", " + std::to_string(t.end) + ") overlap");
    }
    if (t.begin > cursor) {
      bad(label, "bytes [" + std::to_string(cursor) + ", " + std::to_string(t.begin) +
                     ") of the data section belong to no tensor");
    }
    cursor = t.end;
    prev = &t;
  }
  if (cursor != h.data_bytes) {
    bad(label, "bytes [" + std::to_string(cursor) + ", " + std::to_string(h.data_bytes) +
                   ") at the end of the data section belong to no tensor");
  }
  return h;
}

SafetensorsFile::SafetensorsFile(const std::string& path, const std::string& label)
    : map_(path), label_(label), header_(parse_safetensors_header(map_.bytes(), label)) {
  index_.reserve(header_.tensors.size());
  for (std::size_t i = 0; i < header_.tensors.size(); ++i) index_.emplace(header_.tensors[i].name, i);
}

const TensorInfo* SafetensorsFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &header_.tensors[it->second];
}

std::span<const std::byte> SafetensorsFile::data(const TensorInfo& t) const noexcept {
  return map_.bytes().subspan(header_.data_offset + t.begin, t.nbytes());
}

namespace {
struct FileCloser {
  void operator()(std::FILE* f) const noexcept { std::fclose(f); }
};
}  // namespace

void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::uint64_t offset = 0;
  std::set<std::string> names;
  for (const auto& t : tensors) {
    if (!names.insert(t.name).second) throw InvalidArgument("write_safetensors: duplicate tensor " + t.name);
    std::uint64_t numel = 1;
    for (auto d : t.shape) numel *= static_cast<std::uint64_t>(d);
    if (numel * dtype_size(t.dtype) != t.bytes.size()) {
      throw InvalidArgument("write_safetensors: tensor " + t.name + " has " + std::to_string(t.bytes.size()) +
                            " bytes, shape " + shape_to_string(t.shape) + " needs " +
                            std::to_string(numel * dtype_size(t.dtype)));
    }
    header[t.name] = {{"dtype", std::string(dtype_name(t.dtype))},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  std::string text = header.dump();
  while (text.size() % 8 != 0) text.push_back(' ');
  const std::string tmp = path + ".tmp";
  {
    std::unique_ptr<std::FILE, FileCloser> f(std::fopen(tmp.c_str(), "wb"));
    if (!f) throw IoError(tmp + ": cannot create: " + errno_message(errno));
    unsigned char len[8];
    std::uint64_t n = text.size();
    for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>((n >> (8 * i)) & 0xffu);
    bool ok = std::fwrite(len, 1, 8, f.get()) == 8 && std::fwrite(text.data(), 1, text.size(), f.get()) == text.size();
    for (const auto& t : tensors) {
      if (!ok) break;
      ok = t.bytes.empty() || std::fwrite(t.bytes.data(), 1, t.bytes.size(), f.get()) == t.bytes.size();
    }
    ok = ok && std::fflush(f.get()) == 0;
    if (!ok) {
      const int err = errno;
      f.reset();
      std::remove(tmp.c_str());
      throw IoError(tmp + ": write failed: " + errno_message(err));
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) throw IoError(path + ": cannot rename from " + tmp + ": " + ec.message());
}

}  // namespace clef
