// SPDX-License-Identifier: MIT
// Read-only memory mapping of a whole file (RAII, move-only).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace clef {

/// A read-only, private mapping of a file. Zero-length files map to an empty span.
/// Throws IoError (naming the path and the OS reason) when the file cannot be opened or mapped.
class MappedFile {
 public:
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;

  /// The file's bytes; valid as long as this object lives.
  std::span<const std::byte> bytes() const noexcept { return {data_, size_}; }
  std::size_t size() const noexcept { return size_; }
  const std::string& path() const noexcept { return path_; }

  /// Drops this process's resident pages of [p, p + n) when that range lies inside a live
  /// MappedFile (madvise MADV_DONTNEED on the whole pages inside it; the mapping is read-only and
  /// private, so a later read simply faults the file back in). Used once a weight was converted
  /// into an owned copy (int8), so resident memory holds the copy only. Returns the bytes released
  /// (0 when the range is not mapped by a MappedFile, e.g. heap memory, which is never touched).
  static std::size_t drop_pages(const void* p, std::size_t n) noexcept;

  /// Files this process has opened as a MappedFile so far (each successful construction counts
  /// one, empty files included; moves count nothing). Loading a model maps each of its weight
  /// files once: a test and `clef serve`'s /metrics (clef_files_mapped_total) read this to prove it.
  static std::uint64_t files_mapped() noexcept;

 private:
  void release() noexcept;
  std::string path_;
  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace clef
