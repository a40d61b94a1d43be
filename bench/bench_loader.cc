// SPDX-License-Identifier: MIT
// Micro-benchmarks of the loader's hot spots: safetensors header parsing of a real-shaped
// header, and bf16/f16 -> f32 weight conversion (the scalar reference path).
#include <benchmark/benchmark.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/quant_blocks.h"
#include "io/safetensors.h"

namespace {

// A header with `n` BF16 tensors of shape [64, 64], followed by their (zero) data.
std::vector<std::byte> make_file(int n) {
  std::string json = "{";
  std::uint64_t off = 0;
  for (int i = 0; i < n; ++i) {
    if (i) json += ",";
    json += "\"model.language_model.layers." + std::to_string(i) +
            ".mlp.up_proj.weight\":{\"dtype\":\"BF16\","
            "\"shape\":[64,64],\"data_offsets\":[" +
            std::to_string(off) + "," + std::to_string(off + 8192) + "]}";
    off += 8192;
  }
  json += "}";
  std::vector<std::byte> f(8 + json.size() + off);
  const std::uint64_t len = json.size();
  for (int i = 0; i < 8; ++i) f[static_cast<std::size_t>(i)] = static_cast<std::byte>((len >> (8 * i)) & 0xff);
  std::memcpy(f.data() + 8, json.data(), json.size());
  return f;
}

void BM_ParseHeader(benchmark::State& state) {
  const auto file = make_file(static_cast<int>(state.range(0)));
  for (auto _ : state) {
    auto h = clef::parse_safetensors_header(file, "bench");
    benchmark::DoNotOptimize(h.tensors.data());
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_ParseHeader)->Arg(300)->Arg(3000);

// 16-bit -> f32 conversion throughput for BF16 and F16 weights.
template <clef::DType kType>
void BM_Convert16(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  std::vector<std::uint16_t> src(n);
  std::mt19937 rng(1);
  for (auto& v : src) {
    const float f = std::normal_distribution<float>()(rng);
    v = kType == clef::DType::kBF16 ? clef::f32_to_bf16(f) : clef::f32_to_f16(f);
  }
  std::vector<float> dst(n);
  for (auto _ : state) {
    clef::convert_to_f32(kType, reinterpret_cast<const std::byte*>(src.data()), n, dst.data());
    benchmark::DoNotOptimize(dst.data());
  }
  state.SetBytesProcessed(state.iterations() * state.range(0) * 2);
}
BENCHMARK(BM_Convert16<clef::DType::kBF16>)->Arg(1 << 20);
BENCHMARK(BM_Convert16<clef::DType::kF16>)->Arg(1 << 20);

}  // namespace

BENCHMARK_MAIN();
