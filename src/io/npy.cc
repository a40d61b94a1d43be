// SPDX-License-Identifier: MIT
#include "io/npy.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace clef {
namespace {

std::string header_value(const std::string& h, const std::string& key, const std::string& path) {
  const auto k = h.find("'" + key + "'");
  if (k == std::string::npos) throw InvalidArgument(path + ": .npy header has no '" + key + "'");
  auto p = h.find(':', k);
  if (p == std::string::npos) throw InvalidArgument(path + ": malformed .npy header");
  ++p;
  while (p < h.size() && h[p] == ' ') ++p;
  if (p < h.size() && h[p] == '(') return h.substr(p, h.find(')', p) - p + 1);
  if (p < h.size() && h[p] == '\'') return h.substr(p + 1, h.find('\'', p + 1) - p - 1);
  return h.substr(p, h.find_first_of(",}", p) - p);
}

}  // namespace

NpyArray read_npy(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError(path + ": cannot open: " + errno_message(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  const std::string b = ss.str();
  if (b.size() < 10 || b.compare(0, 6, "\x93NUMPY") != 0) throw InvalidArgument(path + ": not a .npy file");
  const auto major = static_cast<unsigned char>(b[6]);
  std::size_t hlen = 0, off = 0;
  if (major == 1) {
    hlen = static_cast<unsigned char>(b[8]) | (static_cast<std::size_t>(static_cast<unsigned char>(b[9])) << 8);
    off = 10;
  } else if (major == 2 || major == 3) {
    if (b.size() < 12) throw InvalidArgument(path + ": truncated .npy header");
    for (int i = 3; i >= 0; --i) hlen = (hlen << 8) | static_cast<unsigned char>(b[8 + static_cast<std::size_t>(i)]);
    off = 12;
  } else {
    throw InvalidArgument(path + ": unsupported .npy version " + std::to_string(major));
  }
  if (off + hlen > b.size()) throw InvalidArgument(path + ": truncated .npy header");
  const std::string h = b.substr(off, hlen);
  const std::string descr = header_value(h, "descr", path);
  if (header_value(h, "fortran_order", path).find("False") == std::string::npos) {
    throw InvalidArgument(path + ": Fortran-order arrays are not supported");
  }
  NpyArray a;
  const std::string shape = header_value(h, "shape", path);
  std::size_t count = 1;
  for (std::size_t p = 1; p < shape.size();) {
    while (p < shape.size() && (shape[p] == ' ' || shape[p] == ',')) ++p;
    if (p >= shape.size() || shape[p] == ')') break;
    std::size_t used = 0;
    const long long d = std::stoll(shape.substr(p), &used);
    if (d < 0) throw InvalidArgument(path + ": negative dimension");
    a.shape.push_back(d);
    count *= static_cast<std::size_t>(d);
    p += used;
  }
  const std::size_t data = off + hlen;
  const std::size_t esize = descr == "<i4" ? 4 : 8;
  const bool f4 = descr == "<f4";
  if (f4 && b.size() - data != count * 4) throw InvalidArgument(path + ": data size does not match the shape");
  if (!f4 && descr != "<i8" && descr != "<i4") {
    throw InvalidArgument(path + ": dtype " + descr + " is not supported (float32, int64, int32)");
  }
  if (f4) {
    a.f32.resize(count);
    std::memcpy(a.f32.data(), b.data() + data, count * 4);
  } else {
    if (b.size() - data != count * esize) throw InvalidArgument(path + ": data size does not match the shape");
    a.i64.resize(count);
    for (std::size_t i = 0; i < count; ++i) {
      if (esize == 8) {
        std::memcpy(&a.i64[i], b.data() + data + 8 * i, 8);
      } else {
        std::int32_t v;
        std::memcpy(&v, b.data() + data + 4 * i, 4);
        a.i64[i] = v;
      }
    }
  }
  return a;
}

void write_npy(const std::string& path, const std::vector<std::int64_t>& shape, const float* data) {
  std::string dims;
  std::size_t count = 1;
  for (auto d : shape) {
    dims += std::to_string(d) + ",";
    count *= static_cast<std::size_t>(d);
  }
  if (shape.size() > 1) dims.pop_back();
  std::string h = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + dims + "), }";
  while ((10 + h.size() + 1) % 64 != 0) h.push_back(' ');
  h.push_back('\n');
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw IoError(path + ": cannot create: " + errno_message(errno));
  const unsigned char pre[10] = {0x93,
                                 'N',
                                 'U',
                                 'M',
                                 'P',
                                 'Y',
                                 1,
                                 0,
                                 static_cast<unsigned char>(h.size() & 0xff),
                                 static_cast<unsigned char>(h.size() >> 8)};
  out.write(reinterpret_cast<const char*>(pre), 10);
  out << h;
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(count * 4));
  if (!out) throw IoError(path + ": write failed");
}

}  // namespace clef
