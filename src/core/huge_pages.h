// SPDX-License-Identifier: MIT
// Allocator for large, long-lived buffers that are streamed or copied whole (the KV cache): blocks
// of at least 2 MiB are 2 MiB-aligned and advised as transparent huge pages (madvise
// MADV_HUGEPAGE; Linux, THP mode "madvise" or "always"), so filling a restored state faults in
// 2 MiB pages instead of 4 KiB ones and streaming it needs 512x fewer TLB entries
// (docs/PERFORMANCE.md "The warm path"). Smaller blocks come from operator new. The advice is only
// advice: where the kernel has no THP the memory is ordinary pages.
#pragma once

#include <cstddef>
#include <new>

namespace clef {

/// Allocates `bytes` (> 0): 2 MiB-aligned and huge-page advised from kHugePageBytes up, else plain
/// operator new. Throws std::bad_alloc. Free with huge_page_free(p, bytes) (the same size).
void* huge_page_alloc(std::size_t bytes);
void huge_page_free(void* p, std::size_t bytes) noexcept;

inline constexpr std::size_t kHugePageBytes = std::size_t{2} << 20;

/// std::allocator-compatible wrapper of huge_page_alloc (stateless; all instances compare equal).
template <class T>
struct HugePageAllocator {
  using value_type = T;
  HugePageAllocator() noexcept = default;
  template <class U>
  HugePageAllocator(const HugePageAllocator<U>&) noexcept {}  // NOLINT(google-explicit-constructor)
  T* allocate(std::size_t n) {
    if (n > static_cast<std::size_t>(-1) / sizeof(T)) throw std::bad_alloc();
    return static_cast<T*>(huge_page_alloc(n * sizeof(T)));
  }
  void deallocate(T* p, std::size_t n) noexcept { huge_page_free(p, n * sizeof(T)); }
  template <class U>
  bool operator==(const HugePageAllocator<U>&) const noexcept {
    return true;
  }
};

}  // namespace clef
