// SPDX-License-Identifier: MIT
// SIMD kernels of the block-quantized linear layer (ops/quant_gemm.h), written once for 256- and
// 512-bit vectors: cpu/quant_gemm.cc includes this file twice, with
//   QG_NS      the namespace of this copy (avx2 / avx512),
//   QG_TARGET  its target attribute,
//   QG_512     1 for the 512-bit copy,
//   QG_VNNI    1 for the copies whose row tiles use vpdpbusd (AVX512-VNNI on 512 bits, AVX-VNNI on
//              256): tile_vnni instead of tile.
// A 16-column panel is kNH vectors (AVX2: two of 8 columns, AVX-512: one of 16); the packed
// record and the unpacked buffer (cpu/quant_layout.h) are the same for both widths.
// No include guard: included once per width.

namespace QG_NS {

#define QG_FN __attribute__((target(QG_TARGET), always_inline)) inline

#if QG_512
using VI = __m512i;
using VF = __m512;
constexpr int kLanes = 16;
QG_FN VI loadi(const void* p) { return _mm512_loadu_si512(p); }
QG_FN void storei(void* p, VI v) { _mm512_storeu_si512(p, v); }
QG_FN VI zeroi() { return _mm512_setzero_si512(); }
QG_FN VI set32(std::int32_t x) { return _mm512_set1_epi32(x); }
QG_FN VI set8(std::uint8_t x) { return _mm512_set1_epi8(static_cast<char>(x)); }
QG_FN VI andi(VI a, VI b) { return _mm512_and_si512(a, b); }
QG_FN VI ori(VI a, VI b) { return _mm512_or_si512(a, b); }
template <int N>
QG_FN VI srl16(VI a) {
  return _mm512_srli_epi16(a, N);
}
template <int N>
QG_FN VI sll16(VI a) {
  return _mm512_slli_epi16(a, N);
}
template <int N>
QG_FN VI sll32(VI a) {
  return _mm512_slli_epi32(a, N);
}
QG_FN VI add16(VI a, VI b) { return _mm512_add_epi16(a, b); }
QG_FN VI add32(VI a, VI b) { return _mm512_add_epi32(a, b); }
QG_FN VI sub32(VI a, VI b) { return _mm512_sub_epi32(a, b); }
QG_FN VI maddubs(VI u, VI s) { return _mm512_maddubs_epi16(u, s); }
QG_FN VI madd(VI a, VI b) { return _mm512_madd_epi16(a, b); }
QG_FN VI u8_to_32(const std::uint8_t* p) {
  return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
QG_FN VI i8_to_32(const std::uint8_t* p) {
  return _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
QG_FN VF f16_to_32(const std::uint8_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
QG_FN VF tof(VI a) { return _mm512_cvtepi32_ps(a); }
QG_FN VF loadf(const void* p) { return _mm512_loadu_ps(p); }
QG_FN void storef(void* p, VF v) { _mm512_storeu_ps(static_cast<float*>(p), v); }
QG_FN VF setf(float x) { return _mm512_set1_ps(x); }
QG_FN VF zerof() { return _mm512_setzero_ps(); }
QG_FN VF mulf(VF a, VF b) { return _mm512_mul_ps(a, b); }
QG_FN VF addf(VF a, VF b) { return _mm512_add_ps(a, b); }
QG_FN VF fmaf_(VF a, VF b, VF c) { return _mm512_fmadd_ps(a, b, c); }
QG_FN VF fmsf(VF a, VF b, VF c) { return _mm512_fmsub_ps(a, b, c); }
QG_FN VI mullo32(VI a, VI b) { return _mm512_mullo_epi32(a, b); }
template <int N>
QG_FN VI sra32(VI a) {
  return _mm512_srai_epi32(a, N);
}
#if QG_VNNI
QG_FN VI dpbusd(VI acc, VI u, VI s) { return _mm512_dpbusd_epi32(acc, u, s); }
#endif
#else
using VI = __m256i;
using VF = __m256;
constexpr int kLanes = 8;
QG_FN VI loadi(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
QG_FN void storei(void* p, VI v) { _mm256_storeu_si256(static_cast<__m256i*>(p), v); }
QG_FN VI zeroi() { return _mm256_setzero_si256(); }
QG_FN VI set32(std::int32_t x) { return _mm256_set1_epi32(x); }
QG_FN VI set8(std::uint8_t x) { return _mm256_set1_epi8(static_cast<char>(x)); }
QG_FN VI andi(VI a, VI b) { return _mm256_and_si256(a, b); }
QG_FN VI ori(VI a, VI b) { return _mm256_or_si256(a, b); }
template <int N>
QG_FN VI srl16(VI a) {
  return _mm256_srli_epi16(a, N);
}
template <int N>
QG_FN VI sll16(VI a) {
  return _mm256_slli_epi16(a, N);
}
template <int N>
QG_FN VI sll32(VI a) {
  return _mm256_slli_epi32(a, N);
}
QG_FN VI add16(VI a, VI b) { return _mm256_add_epi16(a, b); }
QG_FN VI add32(VI a, VI b) { return _mm256_add_epi32(a, b); }
QG_FN VI sub32(VI a, VI b) { return _mm256_sub_epi32(a, b); }
QG_FN VI maddubs(VI u, VI s) { return _mm256_maddubs_epi16(u, s); }
QG_FN VI madd(VI a, VI b) { return _mm256_madd_epi16(a, b); }
QG_FN VI u8_to_32(const std::uint8_t* p) {
  return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}
QG_FN VI i8_to_32(const std::uint8_t* p) {
  return _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}
QG_FN VF f16_to_32(const std::uint8_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
QG_FN VF tof(VI a) { return _mm256_cvtepi32_ps(a); }
QG_FN VF loadf(const void* p) { return _mm256_loadu_ps(static_cast<const float*>(p)); }
QG_FN void storef(void* p, VF v) { _mm256_storeu_ps(static_cast<float*>(p), v); }
QG_FN VF setf(float x) { return _mm256_set1_ps(x); }
QG_FN VF zerof() { return _mm256_setzero_ps(); }
QG_FN VF mulf(VF a, VF b) { return _mm256_mul_ps(a, b); }
QG_FN VF addf(VF a, VF b) { return _mm256_add_ps(a, b); }
QG_FN VF fmaf_(VF a, VF b, VF c) { return _mm256_fmadd_ps(a, b, c); }
QG_FN VF fmsf(VF a, VF b, VF c) { return _mm256_fmsub_ps(a, b, c); }
QG_FN VI mullo32(VI a, VI b) { return _mm256_mullo_epi32(a, b); }
template <int N>
QG_FN VI sra32(VI a) {
  return _mm256_srai_epi32(a, N);
}
#if QG_VNNI
QG_FN VI dpbusd(VI acc, VI u, VI s) { return _mm256_dpbusd_avx_epi32(acc, u, s); }
#endif
#endif

/// Keeps an int16 running sum a chain: GCC would otherwise reassociate the unrolled block's
/// vpaddw chains into trees, computing every vpmaddubsw product first and spilling them all
/// (measured: 48 spilled products per block in the 3-row AVX2 tile). No instruction.
QG_FN VI chain(VI v) {
  asm("" : "+v"(v));
  return v;
}

constexpr int kVecBytes = kLanes * 4;                            ///< bytes per vector
constexpr int kNH = static_cast<int>(kQuantPanelCols) / kLanes;  ///< vectors per 16 columns

/// Bit 4 of the values of group u (0..7) from a 5-bit plane: bit u of each byte, moved to bit 4
/// (the byte is masked first, so the 16-bit shifts move nothing across bytes).
template <int U>
QG_FN VI plane5_bit(VI plane) {
  const VI b = andi(plane, set8(static_cast<std::uint8_t>(1u << U)));
  if constexpr (U < 4) return sll16<4 - U>(b);
  else if constexpr (U == 4) return b;
  else return srl16<U - 4>(b);
}

/// Bits 4-5 of the values of group 4h + u from a Q6_K plane: bits 2u, 2u+1 moved to 4, 5.
template <int U>
QG_FN VI plane6_bits(VI plane) {
  const VI b = andi(plane, set8(static_cast<std::uint8_t>(3u << (2 * U))));
  if constexpr (U < 2) return sll16<4 - 2 * U>(b);
  else if constexpr (U == 2) return b;
  else return srl16<2>(b);
}

/// Group pair U (0..3) of one vector of columns of a block: the values of groups U and U + 4
/// (k 4U .. 4U+3 and 16 + 4U ..), from the nibbles plus the high-bit planes.
template <QuantType T, int U>
QG_FN void decode_pair(const std::uint8_t* qsrc, int h, VI& lo, VI& hi) {
  using Tr = quant_detail::Traits<T>;
  const VI m4 = set8(15);
  const VI v = loadi(qsrc + U * 64 + h * kVecBytes);
  lo = andi(v, m4);
  hi = andi(srl16<4>(v), m4);
  if constexpr (Tr::kFive) {
    const VI p = loadi(qsrc + 256 + h * kVecBytes);
    lo = ori(lo, plane5_bit<U>(p));
    hi = ori(hi, plane5_bit<U + 4>(p));
  }
  if constexpr (Tr::kSix) {
    lo = ori(lo, plane6_bits<U>(loadi(qsrc + 256 + h * kVecBytes)));
    hi = ori(hi, plane6_bits<U>(loadi(qsrc + 320 + h * kVecBytes)));
  }
}

/// One vector of columns' scales of block g of a record: the vpmaddwd operands (scale in both
/// int16 halves) of the two halves, the offset correction pair, D and M · mb (cpu/quant_layout.h).
struct BlockScales {
  VI sclo, schi, corr;
  VF dv, mv;
};

template <QuantType T>
QG_FN BlockScales block_scales(const std::uint8_t* rec, const quant_detail::Layout& L, int g, int h) {
  using Tr = quant_detail::Traits<T>;
  const int c0 = h * kLanes;
  BlockScales S;
  S.corr = zeroi();
  S.dv = f16_to_32(rec + L.d_off + 2 * c0);
  S.mv = zerof();
  if constexpr (Tr::kKScale) {
    const VI x = u8_to_32(rec + L.sc_off + 16 * g + c0);
    S.sclo = S.schi = ori(x, sll32<16>(x));
    S.mv = mulf(f16_to_32(rec + L.m_off + 2 * c0), tof(u8_to_32(rec + L.sc_off + 16 * (Tr::kGroup + g) + c0)));
  } else if constexpr (Tr::kSix) {
    const VI a = i8_to_32(rec + L.sc_off + 32 * g + c0), b = i8_to_32(rec + L.sc_off + 32 * g + 16 + c0);
    const VI lo16 = set32(0xFFFF);
    S.sclo = ori(andi(a, lo16), sll32<16>(a));
    S.schi = ori(andi(b, lo16), sll32<16>(b));
    S.corr = ori(andi(sll32<5>(a), lo16), sll32<21>(b));  // (32·sc_lo, 32·sc_hi) as an int16 pair
  } else {
    S.sclo = S.schi = set32(0x00010001);
    if constexpr (Tr::kOff != 0) S.corr = set32(Tr::kOff | (Tr::kOff << 16));
    if constexpr (Tr::kMin) S.mv = mulf(f16_to_32(rec + L.m_off + 2 * c0), setf(1.0f));
  }
  return S;
}

template <QuantType T, int U>
QG_FN void unpack_pair(const std::uint8_t* qsrc, std::uint8_t* dst, int h) {
  VI lo, hi;
  decode_pair<T, U>(qsrc, h, lo, hi);
  storei(dst + U * 64 + h * kVecBytes, lo);
  storei(dst + (U + 4) * 64 + h * kVecBytes, hi);
}

/// Unpacks panel p of w into `buf` (blocks() × kUnpackedBlock bytes, cpu/quant_layout.h).
template <QuantType T>
__attribute__((target(QG_TARGET))) void unpack_panel(const QuantWeight& w, std::int64_t p, std::uint8_t* buf) {
  using Tr = quant_detail::Traits<T>;
  const quant_detail::Layout L = quant_detail::layout_of(T);
  constexpr std::size_t kQ = quant_detail::kUnpackedQ;
  for (std::int64_t s = 0; s < w.superblocks(); ++s) {
    const std::uint8_t* rec = w.record(p, s);
    for (int g = 0; g < Tr::kGroup; ++g) {
      const std::uint8_t* qsrc = rec + static_cast<std::size_t>(g) * L.qbytes;
      std::uint8_t* dst = buf + static_cast<std::size_t>(s * Tr::kGroup + g) * quant_detail::kUnpackedBlock;
      for (int h = 0; h < kNH; ++h) {
        unpack_pair<T, 0>(qsrc, dst, h);
        unpack_pair<T, 1>(qsrc, dst, h);
        unpack_pair<T, 2>(qsrc, dst, h);
        unpack_pair<T, 3>(qsrc, dst, h);
        const BlockScales S = block_scales<T>(rec, L, g, h);
        storei(dst + kQ + 0 * 64 + h * kVecBytes, S.sclo);
        storei(dst + kQ + 1 * 64 + h * kVecBytes, S.schi);
        storei(dst + kQ + 2 * 64 + h * kVecBytes, S.corr);
        storef(dst + kQ + 3 * 64 + h * kVecBytes, S.dv);
        storef(dst + kQ + 4 * 64 + h * kVecBytes, S.mv);
      }
    }
  }
}

/// Folds one block's int32 sums of a row into its accumulator (the fp32 steps of ops/quant_gemm.h):
/// da and sf the row's activation scale and float(σ) of the block.
template <QuantType T>
QG_FN VF fold_with(float da, float sf, VI is, VF dv, VF mv, VF acc) {
  VF u;
  if constexpr (quant_detail::Traits<T>::kMin) {
    u = fmsf(tof(is), dv, mulf(mv, setf(sf)));
  } else {
    (void)mv;
    (void)sf;
    u = mulf(tof(is), dv);
  }
  return fmaf_(u, setf(da), acc);
}

/// fold_with on the row-major arrays of the job (ab: the row's index · blocks + block).
template <QuantType T>
QG_FN VF fold(const QJob& j, std::int64_t ab, VI is, VF dv, VF mv, VF acc) {
  return fold_with<T>(j.da[ab], quant_detail::Traits<T>::kMin ? j.sf[ab] : 0.0f, is, dv, mv, acc);
}

/// How a row tile reads its activations of block b: the row-major arrays of Int8Activations
/// (RowActs), or one interleaved record per tile and block (TileActs, cpu/quant_layout.h).
struct RowActs {
  static constexpr bool kQ6Off = false;  ///< no −32·σ terms (tile_vnni subtracts the σ pair's product)
  const QJob& j;
  std::int64_t r0, nb, b = 0;
  QG_FN void block(std::int64_t bb) { b = bb; }
  QG_FN std::int32_t q4(int r, int g) const {
    std::int32_t a4;
    std::memcpy(&a4, j.qa + ((r0 + r) * nb + b) * 32 + 4 * g, 4);
    return a4;
  }
  QG_FN float da(int r) const { return j.da[(r0 + r) * nb + b]; }
  QG_FN float sf(int r) const { return j.sf[(r0 + r) * nb + b]; }
  QG_FN std::int32_t spair(int r) const { return j.spair[(r0 + r) * nb + b]; }
};
/// A row tile reads row r from record r / kTileRows, `stride` bytes (blocks · kTileRecord) after the
/// one before (the AVX512-VNNI tiles: up to 12 rows, ceil(MR / kTileRows) records; the AVX2 tiles
/// fit one record, stride 0). With r known at compile time a few address registers and the stride
/// serve all of a tile's rows (RowActs' one pointer per row did not fit in the general registers
/// next to a 12-row tile).
struct TileActs {
  static constexpr int kR = static_cast<int>(quant_detail::kTileRows);
  static constexpr bool kQ6Off = true;  ///< the record holds Q6_K's −32·σlo, −32·σhi
  const std::uint8_t* base;             ///< the tile's first record of block 0
  std::int64_t stride = 0;              ///< bytes from one record of the tile to the next (rows r and r + kR)
  const std::uint8_t* rec = nullptr;
  QG_FN void block(std::int64_t bb) { rec = base + bb * quant_detail::kTileRecord; }
  QG_FN std::int32_t q4(int r, int g) const { return word<std::int32_t>(r, g * 4 * kR + 4 * (r % kR)); }
  QG_FN float da(int r) const { return word<float>(r, quant_detail::kTileDa + 4 * (r % kR)); }
  QG_FN float sf(int r) const { return word<float>(r, quant_detail::kTileSf + 4 * (r % kR)); }
  QG_FN std::int32_t spair(int r) const { return word<std::int32_t>(r, quant_detail::kTileSpair + 4 * (r % kR)); }
  /// −32·σ of half t of row r's block (σlo for t = 0, σhi for 1).
  QG_FN std::int32_t q6off(int r, int t) const {
    return word<std::int32_t>(r, quant_detail::kTileQ6Off + 8 * (r % kR) + 4 * t);
  }
  template <typename V>
  QG_FN V word(int r, std::int64_t off) const {
    V v;
    std::memcpy(&v, rec + (r / kR) * stride + off, 4);
    return v;
  }
};

/// Writes a tile's accumulators acc [MR][kNH] (rows r0.., panel p0) to y, adding y's values first
/// when accumulating: vector loads and stores when the panel lies inside n, store_tile's scalar loop
/// for the last, partial panel. The same fp32 add per element either way, so the same bits. With the
/// output lines prefetched (cpu/tile_output.h), the vector stores are a further +3-5% on the 0.8b
/// k = 1,024 shapes (one thread, m = 512) over the scalar loop's compare, branch and add per value.
template <int MR>
QG_FN void store_acc(const QJob& j, std::int64_t r0, std::int64_t p0, const VF (&acc)[MR][kNH]) {
  const std::int64_t c0 = p0 * kQuantPanelCols;
  if (c0 + kQuantPanelCols > j.n) {
    float out[MR * kQuantPanelCols];
    for (int r = 0; r < MR; ++r)
      for (int h = 0; h < kNH; ++h) storef(out + r * kQuantPanelCols + h * kLanes, acc[r][h]);
    store_tile(j, r0, MR, p0, out);
    return;
  }
  float* y = j.y + r0 * j.n + c0;
  for (int r = 0; r < MR; ++r)
    for (int h = 0; h < kNH; ++h) {
      float* yr = y + r * j.n + h * kLanes;
      storef(yr, j.accumulate ? addf(loadf(yr), acc[r][h]) : acc[r][h]);
    }
}

/// tile_direct's step for group pair U: decode, multiply with MR rows, widen every kFlush / 2
/// pairs (at most 4 groups per int16 sum, the bounds of ops/quant_gemm.h).
template <QuantType T, int U, int MR>
QG_FN void direct_pair(const QJob& j, std::int64_t r0, std::int64_t nb, std::int64_t b, const std::uint8_t* qsrc, int h,
                       const BlockScales& S, VI (&is)[MR], VI (&pl)[MR], VI (&ph)[MR]) {
  constexpr int kFlush = quant_detail::Traits<T>::kFlush;
  constexpr int kPairFlush = kFlush >= 8 ? 4 : kFlush;
  VI lo, hi;
  decode_pair<T, U>(qsrc, h, lo, hi);
  for (int r = 0; r < MR; ++r) {
    const std::int8_t* qa = j.qa + ((r0 + r) * nb + b) * 32;
    std::int32_t al, ah;
    std::memcpy(&al, qa + 4 * U, 4);
    std::memcpy(&ah, qa + 16 + 4 * U, 4);
    pl[r] = chain(add16(pl[r], maddubs(lo, set32(al))));
    ph[r] = chain(add16(ph[r], maddubs(hi, set32(ah))));
  }
  if constexpr ((U + 1) % kPairFlush == 0) {
    for (int r = 0; r < MR; ++r) {
      is[r] = add32(is[r], add32(madd(pl[r], S.sclo), madd(ph[r], S.schi)));
      pl[r] = ph[r] = zeroi();
    }
  }
}

/// Few rows (decode): MR rows × one panel straight from the packed records, values decoded in
/// registers (no buffer); separate int16 sums for the two halves of a block (direct_pair).
template <QuantType T, int MR>
__attribute__((target(QG_TARGET))) void tile_direct(const QJob& j, std::int64_t r0, std::int64_t p0) {
  using Tr = quant_detail::Traits<T>;
  const quant_detail::Layout L = quant_detail::layout_of(T);
  const std::int64_t nb = j.w->blocks();
  VF acc[MR][kNH];
  for (int r = 0; r < MR; ++r)
    for (int h = 0; h < kNH; ++h) acc[r][h] = zerof();
  for (std::int64_t s = 0; s < j.w->superblocks(); ++s) {
    const std::uint8_t* rec = j.w->record(p0, s);
    for (int g = 0; g < Tr::kGroup; ++g) {
      const std::int64_t b = s * Tr::kGroup + g;
      const std::uint8_t* qsrc = rec + static_cast<std::size_t>(g) * L.qbytes;
      for (int h = 0; h < kNH; ++h) {
        const BlockScales S = block_scales<T>(rec, L, g, h);
        VI is[MR], pl[MR], ph[MR];
        for (int r = 0; r < MR; ++r) {
          is[r] = Tr::kOff != 0 ? sub32(zeroi(), madd(S.corr, set32(j.spair[(r0 + r) * nb + b]))) : zeroi();
          pl[r] = ph[r] = zeroi();
        }
        direct_pair<T, 0, MR>(j, r0, nb, b, qsrc, h, S, is, pl, ph);
        direct_pair<T, 1, MR>(j, r0, nb, b, qsrc, h, S, is, pl, ph);
        direct_pair<T, 2, MR>(j, r0, nb, b, qsrc, h, S, is, pl, ph);
        direct_pair<T, 3, MR>(j, r0, nb, b, qsrc, h, S, is, pl, ph);
        for (int r = 0; r < MR; ++r) acc[r][h] = fold<T>(j, (r0 + r) * nb + b, is[r], S.dv, S.mv, acc[r][h]);
      }
    }
  }
  store_acc<MR>(j, r0, p0, acc);
}

/// MR rows × one panel from the unpacked buffer (the expression of ops/quant_gemm.h). Per group g
/// of 4 k (in k order) and row: one broadcast of the 4 activation bytes, per vector of columns
/// vpmaddubsw into an int16 sum; every Traits::kFlush groups (inside one half block whenever the
/// halves' scales differ) the sums are widened by vpmaddwd with the scales into int32.
template <QuantType T, int MR, typename Acts>
__attribute__((target(QG_TARGET))) void tile(const QJob& j, Acts acts, std::int64_t r0, std::int64_t p0,
                                             const std::uint8_t* buf) {
  using Tr = quant_detail::Traits<T>;
  constexpr std::size_t kQ = quant_detail::kUnpackedQ;
  const std::int64_t nb = j.w->blocks();
  VF acc[MR][kNH];
  for (int r = 0; r < MR; ++r)
    for (int h = 0; h < kNH; ++h) acc[r][h] = zerof();
  for (std::int64_t b = 0; b < nb; ++b) {
    const std::uint8_t* bb = buf + static_cast<std::size_t>(b) * quant_detail::kUnpackedBlock;
    acts.block(b);
    VI is[MR][kNH], ps[MR][kNH];
    if constexpr (Tr::kOff != 0) {
      for (int h = 0; h < kNH; ++h) {
        const VI corr = loadi(bb + kQ + 128 + h * kVecBytes);
        for (int r = 0; r < MR; ++r) is[r][h] = sub32(zeroi(), madd(corr, set32(acts.spair(r))));
      }
    } else {
      for (int r = 0; r < MR; ++r)
        for (int h = 0; h < kNH; ++h) is[r][h] = zeroi();
    }
    for (int r = 0; r < MR; ++r)
      for (int h = 0; h < kNH; ++h) ps[r][h] = zeroi();
#pragma GCC unroll 8
    for (int g = 0; g < 8; ++g) {
      VI w[kNH];
      for (int h = 0; h < kNH; ++h) w[h] = loadi(bb + g * 64 + h * kVecBytes);
      for (int r = 0; r < MR; ++r) {
        const VI a = set32(acts.q4(r, g));
        for (int h = 0; h < kNH; ++h) ps[r][h] = chain(add16(ps[r][h], maddubs(w[h], a)));
      }
      if ((g + 1) % Tr::kFlush == 0) {
        for (int h = 0; h < kNH; ++h) {
          const VI sc = loadi(bb + kQ + (g < 4 ? 0 : 64) + h * kVecBytes);
          for (int r = 0; r < MR; ++r) {
            is[r][h] = add32(is[r][h], madd(ps[r][h], sc));
            ps[r][h] = zeroi();
          }
        }
      }
    }
    for (int h = 0; h < kNH; ++h) {
      const VF dv = loadf(bb + kQ + 192 + h * kVecBytes);
      const VF mv = Tr::kMin ? loadf(bb + kQ + 256 + h * kVecBytes) : zerof();
      for (int r = 0; r < MR; ++r) {
        acc[r][h] = fold_with<T>(acts.da(r), Tr::kMin ? acts.sf(r) : 0.0f, is[r][h], dv, mv, acc[r][h]);
      }
    }
  }
  store_acc<MR>(j, r0, p0, acc);
}

#if QG_VNNI
/// MR rows × one panel from the unpacked buffer with vpdpbusd (the same integers as tile, so the
/// same bits). Per group g of 4 k and row: one broadcast of the 4 activation bytes, per vector of
/// columns one vpdpbusd into an int32 sum of the half block (Q6_K, whose halves' scales differ) or
/// of the whole block (the others); per block the sums are multiplied by their int32 scales
/// (vpmulld; 1 for the types without scales) and the offset correction subtracted (Q6_K on the
/// records: taken into the sums' starting values instead): I exactly. Acts: the interleaved records
/// (TileActs over ceil(MR / kTileRows) records: the 512-bit copy) or the row-major arrays (RowActs:
/// AVX-VNNI's 3-row tiles).
template <QuantType T, int MR, typename Acts>
__attribute__((target(QG_TARGET))) void tile_vnni(const QJob& j, Acts acts, std::int64_t r0, std::int64_t p0,
                                                  const std::uint8_t* buf) {
  using Tr = quant_detail::Traits<T>;
  constexpr std::size_t kQ = quant_detail::kUnpackedQ;
  constexpr bool kTwo = Tr::kSix;                    // a sum per half block
  constexpr bool kScaled = Tr::kSix || Tr::kKScale;  // the others have sc = 1
  constexpr int kHalves = kTwo ? 2 : 1;
  const std::int64_t nb = j.w->blocks();
  VF acc[MR][kNH];
  for (int r = 0; r < MR; ++r)
    for (int h = 0; h < kNH; ++h) acc[r][h] = zerof();
  for (std::int64_t b = 0; b < nb; ++b) {
    const std::uint8_t* bb = buf + static_cast<std::size_t>(b) * quant_detail::kUnpackedBlock;
    acts.block(b);
    // Q6_K on the records: each half's sum starts at −32·σ of its half, so that it ends as Σ q·a of
    // the signed weights and the offset correction costs no vpmaddwd and vpsubd per row:
    // sc0·(S0 − 32σlo) + sc1·(S1 − 32σhi) is the corrected sum exactly (int32, no overflow: the
    // bounds of ops/quant_gemm.h).
    constexpr bool kOffInSums = Tr::kSix && Acts::kQ6Off;  // the record's words are Q6_K's offset terms
    VI s[MR][kHalves][kNH];
    for (int r = 0; r < MR; ++r)
      for (int t = 0; t < kHalves; ++t)
        for (int h = 0; h < kNH; ++h) {
          if constexpr (kOffInSums) s[r][t][h] = set32(acts.q6off(r, t));
          else s[r][t][h] = zeroi();
        }
#pragma GCC unroll 8
    for (int g = 0; g < 8; ++g) {
      const int t = kTwo && g >= 4 ? 1 : 0;
      VI w[kNH];
      for (int h = 0; h < kNH; ++h) w[h] = loadi(bb + g * 64 + h * kVecBytes);
      for (int r = 0; r < MR; ++r) {
        const VI a = set32(acts.q4(r, g));
        for (int h = 0; h < kNH; ++h) s[r][t][h] = dpbusd(s[r][t][h], w[h], a);
      }
    }
    for (int h = 0; h < kNH; ++h) {
      // The buffer holds each scale in both int16 halves (tile's vpmaddwd operand): the low half,
      // sign-extended, is the int32 scale.
      VI sc[kHalves];
      if constexpr (kScaled) {
        for (int t = 0; t < kHalves; ++t) sc[t] = sra32<16>(sll32<16>(loadi(bb + kQ + 64 * t + h * kVecBytes)));
      }
      const VI corr = Tr::kOff != 0 && !kOffInSums ? loadi(bb + kQ + 128 + h * kVecBytes) : zeroi();
      VF dv = loadf(bb + kQ + 192 + h * kVecBytes);
      const VF mv = Tr::kMin ? loadf(bb + kQ + 256 + h * kVecBytes) : zerof();
      // One scale for the whole block (Q4_K, Q5_K): float(sc · S) · D = float(S) · (D · sc) with the
      // same single rounding, since float(sc · S), float(S) and D · sc are exact (ops/quant_gemm.h
      // bounds); so the scale goes into D once per block instead of a vpmulld per row.
      constexpr bool kScaleInD = kScaled && !kTwo && Tr::kOff == 0;
      if constexpr (kScaleInD) dv = mulf(dv, tof(sc[0]));
      for (int r = 0; r < MR; ++r) {
        VI is = s[r][0][h];
        if constexpr (kScaled && !kScaleInD) is = mullo32(is, sc[0]);
        if constexpr (kTwo) is = add32(is, mullo32(s[r][1][h], sc[1]));
        if constexpr (Tr::kOff != 0 && !kOffInSums) is = sub32(is, madd(corr, set32(acts.spair(r))));
        acc[r][h] = fold_with<T>(acts.da(r), Tr::kMin ? acts.sf(r) : 0.0f, is, dv, mv, acc[r][h]);
      }
    }
  }
  store_acc<MR>(j, r0, p0, acc);
}
#endif

/// Rows per register tile: the sums of MR rows × kNH vectors stay in registers (16 ymm without
/// AVX-512, 32 zmm with it; the VNNI tile holds one int32 sum per row, two for Q6_K: 9 x 3 = 27
/// vectors with the accumulators). The tiles that read the interleaved records (AVX512-VNNI's and
/// the 256-bit AVX2 copy's) take a multiple of kTileRows.
template <QuantType T>
constexpr int rows_per_tile() {
  if constexpr (!QG_512) return 3;
  else if constexpr (!QG_VNNI) return 6;
  else return quant_detail::Traits<T>::kSix ? 9 : 12;
}

/// Rows [r, r + MR) × panel p0: the VNNI tile, or tile on the activations as this copy reads them
/// (the AVX2 and AVX512-VNNI copies on QJob::tiles, which run_quant interleaves in records of 3
/// rows; the others on the row-major arrays).
template <QuantType T, int MR>
QG_FN void row_tile(const QJob& j, std::int64_t r, std::int64_t p0, const std::uint8_t* buf) {
#if QG_VNNI && QG_512
  static_assert(rows_per_tile<T>() % quant_detail::kTileRows == 0, "a row tile spans whole records");
  const std::int64_t nb = j.w->blocks();
  const std::int64_t rec0 = r / quant_detail::kTileRows * nb;
  tile_vnni<T, MR>(j, TileActs{j.tiles + rec0 * quant_detail::kTileRecord, nb * quant_detail::kTileRecord}, r, p0, buf);
#elif QG_VNNI
  tile_vnni<T, MR>(j, RowActs{j, r, j.w->blocks()}, r, p0, buf);
#elif QG_512
  tile<T, MR>(j, RowActs{j, r, j.w->blocks()}, r, p0, buf);
#else
  static_assert(rows_per_tile<T>() == quant_detail::kTileRows, "QJob::tiles holds tiles of kTileRows rows");
  const std::int64_t rec0 = r / quant_detail::kTileRows * j.w->blocks();
  tile<T, MR>(j, TileActs{j.tiles + rec0 * quant_detail::kTileRecord}, r, p0, buf);
#endif
}

/// The last m − r < MR rows: one tile of exactly that height.
template <QuantType T, int R>
QG_FN void tail_tile(const QJob& j, std::int64_t r, std::int64_t p0, const std::uint8_t* buf, std::int64_t left) {
  if constexpr (R > 0) {
    if (left == R) {
      row_tile<T, R>(j, r, p0, buf);
    } else {
      tail_tile<T, R - 1>(j, r, p0, buf, left);
    }
  }
}

template <QuantType T>
__attribute__((target(QG_TARGET))) void panel(const QJob& j, std::int64_t p0, std::int64_t m, std::uint8_t* buf) {
  if (m <= 2) {  // decode: decoding in registers beats a buffer written and read once
    if (m == 2) {
      tile_direct<T, 2>(j, 0, p0);
    } else {
      tile_direct<T, 1>(j, 0, p0);
    }
    return;
  }
  unpack_panel<T>(*j.w, p0, buf);
  constexpr int kMR = rows_per_tile<T>();
  std::int64_t r = 0;
  // The next panel's records (this thread's next unit under the static schedule), prefetched into
  // L2 a few lines per row tile: unpack_panel is the first reader of a panel's weights, and without
  // this it stalled on memory (perf: most of its time on the records' first loads; Q4_K_M GEMMs
  // ~2.5% faster, Q6_K ~1%, docs/PERFORMANCE.md). Where values live only.
  const std::int64_t tiles = std::max<std::int64_t>(1, m / kMR);
  const char* next = p0 + 1 < j.w->panels() ? reinterpret_cast<const char*>(j.w->record(p0 + 1, 0)) : nullptr;
  const std::int64_t lines =
      next == nullptr ? 0 : static_cast<std::int64_t>(j.w->superblocks() * j.w->record_bytes() + 63) / 64;
  const std::int64_t per_tile = (lines + tiles - 1) / tiles;
  std::int64_t fetched = 0;
  for (; r + kMR <= m; r += kMR) {
    cpu::prefetch_output_tile(j.y, j.n, r, kMR, p0 * kQuantPanelCols, kQuantPanelCols);
    row_tile<T, kMR>(j, r, p0, buf);
    for (std::int64_t l = 0; l < per_tile && fetched < lines; ++l, ++fetched)
      __builtin_prefetch(next + fetched * 64, 0, 2);
  }
  for (; fetched < lines; ++fetched) __builtin_prefetch(next + fetched * 64, 0, 2);  // m < kMR: all of it here
  tail_tile<T, kMR - 1>(j, r, p0, buf, m - r);
}

/// Runs panel p0 for the weight's type.
inline void run_panel(const QJob& j, std::int64_t p0, std::int64_t m, std::uint8_t* buf) {
  switch (j.w->type()) {
    case QuantType::kQ4_K: panel<QuantType::kQ4_K>(j, p0, m, buf); break;
    case QuantType::kQ5_K: panel<QuantType::kQ5_K>(j, p0, m, buf); break;
    case QuantType::kQ6_K: panel<QuantType::kQ6_K>(j, p0, m, buf); break;
    case QuantType::kQ4_0: panel<QuantType::kQ4_0>(j, p0, m, buf); break;
    case QuantType::kQ4_1: panel<QuantType::kQ4_1>(j, p0, m, buf); break;
    case QuantType::kQ5_0: panel<QuantType::kQ5_0>(j, p0, m, buf); break;
    case QuantType::kQ5_1: panel<QuantType::kQ5_1>(j, p0, m, buf); break;
  }
}

#undef QG_FN

}  // namespace QG_NS
