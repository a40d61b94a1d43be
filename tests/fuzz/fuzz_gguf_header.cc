// SPDX-License-Identifier: MIT
// libFuzzer target: parse_gguf_header must accept or reject any byte string with a
// ModelLoadError, never crash, hang, over-allocate or read out of bounds (ASan/UBSan watch).
#include <cstddef>
#include <cstdint>
#include <span>

#include "core/error.h"
#include "io/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  try {
    const clef::GgufHeader h = clef::parse_gguf_header(bytes, "fuzz");
    // Everything accepted must describe bytes inside the buffer, at aligned offsets.
    if (h.data_offset > size) __builtin_trap();
    for (const auto& t : h.tensors) {
      if (t.offset % h.alignment != 0 || h.data_offset + t.offset + t.nbytes > size) __builtin_trap();
    }
  } catch (const clef::ModelLoadError&) {
  }
  return 0;
}
