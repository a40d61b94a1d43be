// SPDX-License-Identifier: MIT
#include "core/huge_pages.h"

#include <cstdlib>

#include "core/platform.h"

namespace clef {

void* huge_page_alloc(std::size_t bytes) {
  if (bytes < kHugePageBytes) return ::operator new(bytes);
  const std::size_t rounded = (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  void* p = std::aligned_alloc(kHugePageBytes, rounded);
  if (p == nullptr) throw std::bad_alloc();
  (void)advise_huge_pages(p, rounded);  // advice: failure leaves ordinary pages
  return p;
}

void huge_page_free(void* p, std::size_t bytes) noexcept {
  if (p == nullptr) return;
  if (bytes < kHugePageBytes) {
    ::operator delete(p);
  } else {
    std::free(p);
  }
}

}  // namespace clef
