// SPDX-License-Identifier: MIT
#include "core/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <mutex>
#include <utility>
#include <vector>

#include "core/error.h"

namespace clef {
namespace {

/// Live mappings [begin, end), for drop_pages.
struct Registry {
  std::mutex mu;
  std::vector<std::pair<std::uintptr_t, std::uintptr_t>> ranges;
};
Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: MappedFiles may outlive static teardown
  return *r;
}

std::atomic<std::uint64_t> g_files_mapped{0};

}  // namespace

std::uint64_t MappedFile::files_mapped() noexcept { return g_files_mapped.load(std::memory_order_relaxed); }

std::size_t MappedFile::drop_pages(const void* p, std::size_t n) noexcept {
  if (p == nullptr || n == 0) return 0;
  const auto b = reinterpret_cast<std::uintptr_t>(p), e = b + n;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  const bool inside =
      std::any_of(r.ranges.begin(), r.ranges.end(), [&](const auto& m) { return b >= m.first && e <= m.second; });
  if (!inside) return 0;
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const std::uintptr_t pb = (b + page - 1) / page * page, pe = e / page * page;
  if (pe <= pb) return 0;
  if (::madvise(reinterpret_cast<void*>(pb), pe - pb, MADV_DONTNEED) != 0) return 0;
  return pe - pb;
}

MappedFile::MappedFile(const std::string& path) : path_(path) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer; fstat below refuses it anyway.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw IoError(path + ": cannot open: " + errno_message(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw IoError(path + ": cannot stat: " + errno_message(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw IoError(path + ": not a regular file");
  }
  size_ = static_cast<std::size_t>(st.st_size);
  g_files_mapped.fetch_add(1, std::memory_order_relaxed);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      throw IoError(path + ": cannot mmap " + std::to_string(size_) + " bytes: " + errno_message(err));
    }
    data_ = static_cast<const std::byte*>(p);
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    const auto b = reinterpret_cast<std::uintptr_t>(p);
    r.ranges.emplace_back(b, b + size_);
  }
  ::close(fd);  // the mapping stays valid after close
}

MappedFile::~MappedFile() { release(); }

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)), data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void MappedFile::release() noexcept {
  if (data_ != nullptr) {
    {
      Registry& r = registry();
      std::lock_guard<std::mutex> lock(r.mu);
      const auto b = reinterpret_cast<std::uintptr_t>(data_);
      std::erase_if(r.ranges, [&](const auto& m) { return m.first == b; });
    }
    ::munmap(const_cast<std::byte*>(data_), size_);
    data_ = nullptr;
    size_ = 0;
  }
}

}  // namespace clef
