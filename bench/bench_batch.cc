// SPDX-License-Identifier: MIT
// Batched prefill against one sequence at a time (qwen35::TextModel::forward_batch vs forward_chunk,
// docs/ARCHITECTURE.md "Batched prefill"): --seqs sequences of --tokens random tokens each, fresh
// states, on a release folder or GGUF, in one precision. Times both ways (best of --reps, the two
// interleaved so that a drift of the machine hits both), checks that every row is bit-identical, and
// prints tokens/s and the ratio. What continuous batching can gain on this machine for requests of
// that length; not a timed test.
//
//   clef_bench_batch --model DIR [--precision fp32|bf16|int8] [--own-bf16-gemm] [--threads N]
//                    [--seqs 16] [--tokens 128] [--reps 3]
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "ops/gemm.h"
#include "ops/isa.h"
#include "runtime/backbone.h"
#include "runtime/release.h"

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) try {
  std::string model, precision = "int8";
  int threads = 0, reps = 3;
  std::int64_t seqs = 16, tokens = 128;
  bool own_bf16 = false;
  CLI::App app{"Batched prefill (forward_batch) against one sequence at a time (forward_chunk): tokens/s, ratio.",
               "clef_bench_batch"};
  app.add_option("--model", model, "release folder or .gguf")->required();
  app.add_option("--precision", precision, "fp32, bf16 or int8")->capture_default_str();
  app.add_flag("--own-bf16-gemm", own_bf16, "bf16 on clef's vdpbf16ps GEMM (rows shared in one call)");
  app.add_option("--threads", threads, "engine threads (0: all CPUs; more than the CPUs run as many as the CPUs)")
      ->check(CLI::Range(0, 1 << 16))
      ->capture_default_str();
  app.add_option("--seqs", seqs, "sequences")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{4096}))
      ->capture_default_str();
  app.add_option("--tokens", tokens, "new tokens per sequence")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 16))
      ->capture_default_str();
  app.add_option("--reps", reps, "rounds, best of")->check(CLI::Range(1, 1000))->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  clef::ops::init_isa();
  const auto p = clef::ops::precision_from_name(precision);
  if (!p) throw clef::InvalidArgument("--precision: expected fp32, bf16 or int8, got " + precision);
  if (own_bf16 && *p != clef::ops::Precision::kBF16) {
    throw clef::InvalidArgument("--own-bf16-gemm: clef's vdpbf16ps GEMM runs bf16 mode only (--precision bf16)");
  }
  clef::ops::set_own_bf16_gemm(own_bf16);

  const clef::ReleaseFolder release = clef::open_release(model);
  clef::BackboneOptions bo;
  bo.precision = *p;
  bo.threads = threads;
  bo.chunk_size = tokens;
  clef::Backbone bb(release, bo);
  const clef::qwen35::TextModel& tm = bb.model();
  const std::int64_t H = tm.hidden_size(), m = seqs * tokens;
  clef::qwen35::TextActivations act = tm.activations(m);
  std::mt19937 gen(7);
  std::uniform_int_distribution<std::int32_t> id(0, static_cast<std::int32_t>(release.config.text.vocab_size - 1));
  std::vector<std::vector<std::int32_t>> ids(static_cast<std::size_t>(seqs));
  for (auto& v : ids) {
    v.resize(static_cast<std::size_t>(tokens));
    for (auto& x : v) x = id(gen);
  }
  std::vector<float> alone(static_cast<std::size_t>(m * H)), batched(alone.size());
  double best_alone = 1e30, best_batched = 1e30;
  for (int r = 0; r < reps + 1; ++r) {  // the first round warms up (pages, primitives)
    std::vector<clef::nn::ModelState> states(static_cast<std::size_t>(seqs), tm.new_state());
    auto t0 = std::chrono::steady_clock::now();
    for (std::int64_t s = 0; s < seqs; ++s) {
      tm.forward_chunk(ids[static_cast<std::size_t>(s)], {}, states[static_cast<std::size_t>(s)],
                       alone.data() + s * tokens * H, act);
    }
    const double ta = seconds_since(t0);
    std::vector<clef::nn::ModelState> bstates(static_cast<std::size_t>(seqs), tm.new_state());
    std::vector<clef::qwen35::SequenceChunk> chunks;
    for (std::int64_t s = 0; s < seqs; ++s) {
      chunks.push_back({ids[static_cast<std::size_t>(s)], {}, &bstates[static_cast<std::size_t>(s)], nullptr});
    }
    t0 = std::chrono::steady_clock::now();
    tm.forward_batch(chunks, batched.data(), act);
    const double tb = seconds_since(t0);
    if (r > 0) {
      best_alone = std::min(best_alone, ta);
      best_batched = std::min(best_batched, tb);
    }
  }
  const bool same = std::memcmp(alone.data(), batched.data(), alone.size() * sizeof(float)) == 0;
  std::printf("model %s, %s%s, kernels %s, %lld sequences x %lld tokens, best of %d\n", model.c_str(),
              precision.c_str(), own_bf16 && clef::ops::own_bf16_gemm_active() ? " (clef vdpbf16ps GEMM)" : "",
              clef::ops::isa_description().c_str(), static_cast<long long>(seqs), static_cast<long long>(tokens), reps);
  std::printf("one at a time: %.1f tok/s; batched: %.1f tok/s; batched / one at a time: %.2fx; rows %s\n",
              static_cast<double>(m) / best_alone, static_cast<double>(m) / best_batched, best_alone / best_batched,
              same ? "bit-identical" : "DIFFER");
  return same ? 0 : 1;
} catch (const clef::Error& e) {
  std::cerr << "clef_bench_batch: error: " << e.what() << "\n";
  return clef::exit_code_for(e.kind());
}
