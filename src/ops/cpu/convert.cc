// SPDX-License-Identifier: MIT
// Bulk dtype conversions (ops/convert.h), one copy per SIMD target (Highway foreach_target).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/cpu/convert.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include <cstdint>
#include <cstring>

#include "core/quant_blocks.h"
#include "ops/convert.h"
#include "ops/isa.h"
#include "ops/cpu/vmath-inl.h"

HWY_BEFORE_NAMESPACE();
namespace clef::ops {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
namespace cpu = ::clef::ops::cpu::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using DU32 = hn::RebindToUnsigned<DF>;
using DI32 = hn::RebindToSigned<DF>;
using DU16 = hn::Rebind<std::uint16_t, DF>;  // as many u16 lanes as floats

void Bf16ToF32Impl(const std::uint16_t* src, std::int64_t n, float* dst) {
  const DF d;
  const DU16 d16;
  const DU32 du;
  const auto N = static_cast<std::int64_t>(hn::Lanes(d));
  std::int64_t i = 0;
  for (; i + N <= n; i += N) {
    const auto w = hn::PromoteTo(du, hn::LoadU(d16, src + i));
    hn::StoreU(hn::BitCast(d, hn::ShiftLeft<16>(w)), d, dst + i);
  }
  for (; i < n; ++i) dst[i] = bf16_to_f32(src[i]);
}

void F32ToBf16Impl(const float* src, std::int64_t n, std::uint16_t* dst) {
  const DF d;
  const DU16 d16;
  const auto N = static_cast<std::int64_t>(hn::Lanes(d));
  std::int64_t i = 0;
  for (; i + N <= n; i += N) {
    hn::StoreU(hn::DemoteTo(d16, hn::BitCast(DI32(), cpu::bf16_bits(hn::LoadU(d, src + i)))), d16, dst + i);
  }
  for (; i < n; ++i) dst[i] = f32_to_bf16(src[i]);
}

void RoundToBf16Impl(const float* src, std::int64_t n, float* dst) { cpu::round_to_bf16(src, n, dst); }

/// The target this copy of the file was compiled for (ops/isa.h dispatched_hwy_target).
const char* DispatchedTargetImpl() { return hwy::TargetName(HWY_TARGET); }

}  // namespace HWY_NAMESPACE
}  // namespace clef::ops
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace clef::ops {
HWY_EXPORT(Bf16ToF32Impl);
HWY_EXPORT(F32ToBf16Impl);
HWY_EXPORT(RoundToBf16Impl);
HWY_EXPORT(DispatchedTargetImpl);

const char* dispatched_hwy_target() { return CLEF_DISPATCH(DispatchedTargetImpl)(); }

void bf16_to_f32_n(const std::uint16_t* src, std::int64_t n, float* dst) {
  if (n > 0) CLEF_DISPATCH(Bf16ToF32Impl)(src, n, dst);
}
void f32_to_bf16_n(const float* src, std::int64_t n, std::uint16_t* dst) {
  if (n > 0) CLEF_DISPATCH(F32ToBf16Impl)(src, n, dst);
}
void round_to_bf16_n(const float* src, std::int64_t n, float* dst) {
  if (n > 0) CLEF_DISPATCH(RoundToBf16Impl)(src, n, dst);
}
void widen_to_f32_n(DType dtype, const void* src, std::int64_t n, float* dst) {
  if (dtype == DType::kBF16 && reinterpret_cast<std::uintptr_t>(src) % alignof(std::uint16_t) == 0) {
    bf16_to_f32_n(static_cast<const std::uint16_t*>(src), n, dst);
    return;
  }
  convert_to_f32(dtype, static_cast<const std::byte*>(src), static_cast<std::size_t>(n), dst);
}
}  // namespace clef::ops
#endif  // HWY_ONCE
