// SPDX-License-Identifier: MIT
// The state cache's and the balancer's identities of a release (runtime/release_identity.h).
#include "runtime/release_identity.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <span>
#include <vector>

#include "core/sha256.h"
#include "ops/parallel.h"

namespace clef {
namespace {

/// " size=N sha256=HEX" of a file for the routing identity: the SHA-256 of its bytes when it holds
/// at most 16 MiB, else of its first and last MiB (weights differ there between checkpoints of one
/// shape); nullopt when it cannot be read.
std::optional<std::string> routing_fingerprint(const std::filesystem::path& p) {
  constexpr std::uintmax_t kWholeFileBytes = std::uintmax_t{16} << 20;
  constexpr std::uintmax_t kEdgeBytes = std::uintmax_t{1} << 20;
  std::error_code fe;
  const std::uintmax_t size = std::filesystem::file_size(p, fe);
  if (fe) return std::nullopt;
  std::ifstream in(p, std::ios::binary);
  if (!in) return std::nullopt;
  const auto read_at = [&in](std::uintmax_t offset, std::uintmax_t n, std::string& out) {
    const std::size_t at = out.size();
    out.resize(at + static_cast<std::size_t>(n));
    in.seekg(static_cast<std::streamoff>(offset));
    in.read(out.data() + at, static_cast<std::streamsize>(n));
    return static_cast<bool>(in);
  };
  std::string bytes;
  const bool ok = size <= kWholeFileBytes
                      ? read_at(0, size, bytes)
                      : read_at(0, kEdgeBytes, bytes) && read_at(size - kEdgeBytes, kEdgeBytes, bytes);
  if (!ok) return std::nullopt;
  return " size=" + std::to_string(size) +
         " sha256=" + sha256_hex(std::as_bytes(std::span<const char>(bytes.data(), bytes.size())));
}

}  // namespace

std::string engine_identity(const ReleaseFolder& r, const Backbone& b) {
  namespace fs = std::filesystem;
  std::string text = "dir=" + fs::weakly_canonical(fs::path(r.dir)).string() + "\n";
  if (!r.gguf.empty()) text += "gguf=" + fs::path(r.gguf).filename().string() + "\n";
  // Every regular file of the folder; entries that cannot be examined (a symlink loop, a file
  // removed meanwhile) are skipped, never an error: the loader has already read what it needs.
  std::vector<std::string> files;
  std::error_code ec;
  for (fs::directory_iterator it(r.dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code fe;
    if (!it->is_regular_file(fe) || fe) continue;
    const auto size = it->file_size(fe);
    if (fe) continue;
    const auto mtime = it->last_write_time(fe).time_since_epoch().count();
    if (fe) continue;
    files.push_back("file=" + it->path().filename().string() + " size=" + std::to_string(size) +
                    " mtime=" + std::to_string(static_cast<long long>(mtime)) + "\n");
  }
  std::sort(files.begin(), files.end());
  for (const auto& f : files) text += f;
  if (!r.mmproj.empty()) {  // the projector may live outside the folder
    std::error_code fe;
    const fs::path m = fs::weakly_canonical(fs::path(r.mmproj), fe);
    const auto size = fs::file_size(m, fe);
    const auto mtime = fe ? 0 : fs::last_write_time(m, fe).time_since_epoch().count();
    text += "mmproj=" + m.string() + " size=" + std::to_string(fe ? 0 : size) +
            " mtime=" + std::to_string(static_cast<long long>(mtime)) + "\n";
  }
  const BackboneOptions& o = b.options();
  text += "precision=" + std::to_string(static_cast<int>(o.precision)) + " chunk=" + std::to_string(o.chunk_size) +
          " threads=" + std::to_string(ops::num_threads()) + " padded=" + std::to_string(o.padded_readout ? 1 : 0) +
          " pad=" + std::to_string(b.pad_id()) + "\n";
  return sha256_hex(std::as_bytes(std::span<const char>(text.data(), text.size())));
}

std::string release_routing_identity(const ReleaseFolder& r) {
  namespace fs = std::filesystem;
  std::vector<std::string> files;
  std::error_code ec;
  for (fs::directory_iterator it(r.dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code fe;
    if (!it->is_regular_file(fe) || fe) continue;
    if (const auto f = routing_fingerprint(it->path())) {
      files.push_back("file=" + it->path().filename().string() + *f + "\n");
    }
  }
  std::sort(files.begin(), files.end());
  std::string text = "clef-routing-v1\n";
  for (const auto& f : files) text += f;
  if (!r.mmproj.empty()) {
    if (const auto f = routing_fingerprint(r.mmproj)) text += "mmproj" + *f + "\n";
  }
  return sha256_hex(std::as_bytes(std::span<const char>(text.data(), text.size())));
}

}  // namespace clef
