// SPDX-License-Identifier: MIT
// Test driver for tests/reference/test_quant_decode.py: decodes ggml blocks the two ways clef does
// (ops::decode_quant_block per block, and ops::QuantWeight's repacked layout) and writes both as
// fp32, so the test can compare them with gguf-py's dequantize bit for bit.
//
//   clef_quant_decode_driver TYPE N K BLOCKS OUT
//     TYPE    Q4_K, Q5_K, Q6_K, Q4_0, Q4_1, Q5_0 or Q5_1
//     N, K    rows and elements per row (K whole blocks)
//     BLOCKS  file of N · K / elems blocks, row after row
//     OUT     written: N·K fp32 from decode_quant_block, then N·K fp32 from QuantWeight::value_at
// Exit 0 on success, 2 on bad arguments or sizes.
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include "ops/quant_gemm.h"

int main(int argc, char** argv) {
  using namespace clef::ops;
  if (argc != 6) {
    std::cerr << "usage: clef_quant_decode_driver TYPE N K BLOCKS OUT\n";
    return 2;
  }
  const std::string name = argv[1];
  const QuantType types[] = {QuantType::kQ4_K, QuantType::kQ5_K, QuantType::kQ6_K, QuantType::kQ4_0,
                             QuantType::kQ4_1, QuantType::kQ5_0, QuantType::kQ5_1};
  const QuantType* type = nullptr;
  for (const QuantType& t : types) {
    if (name == quant_type_name(t)) type = &t;
  }
  const long long n = std::atoll(argv[2]), k = std::atoll(argv[3]);
  if (type == nullptr || n <= 0 || k <= 0 || k % quant_block_elems(*type) != 0) {
    std::cerr << "bad type or shape\n";
    return 2;
  }
  std::ifstream in(argv[4], std::ios::binary);
  const std::vector<char> raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const long long be = quant_block_elems(*type), bb = quant_block_bytes(*type);
  if (static_cast<long long>(raw.size()) != n * k / be * bb) {
    std::cerr << "blocks file has " << raw.size() << " bytes, expected " << n * k / be * bb << "\n";
    return 2;
  }
  std::vector<float> out(static_cast<std::size_t>(2 * n * k));
  DecodedQuantBlock d;
  for (long long b = 0; b < n * k / be; ++b) {
    decode_quant_block(*type, reinterpret_cast<const std::byte*>(raw.data()) + b * bb, d);
    for (long long e = 0; e < be; ++e)
      out[static_cast<std::size_t>(b * be + e)] = quant_block_value(d, static_cast<int>(e));
  }
  const QuantWeight w = QuantWeight::from_blocks(*type, raw.data(), n, k);
  for (long long j = 0; j < n; ++j) {
    for (long long kk = 0; kk < k; ++kk) out[static_cast<std::size_t>(n * k + j * k + kk)] = w.value_at(j, kk);
  }
  std::ofstream o(argv[5], std::ios::binary);
  o.write(reinterpret_cast<const char*>(out.data()), static_cast<std::streamsize>(out.size() * sizeof(float)));
  return o.good() ? 0 : 2;
}
