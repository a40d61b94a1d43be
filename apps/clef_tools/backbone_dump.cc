// SPDX-License-Identifier: MIT
// The hidden-state dump behind `clef hidden` and clef_backbone_dump (clef_tools/backbone_dump.h).
#include "clef_tools/backbone_dump.h"

#include <sys/resource.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <filesystem>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "ops/parallel.h"

namespace clef {

std::vector<std::int32_t> parse_token_ids(const std::string& text) {
  std::vector<std::int32_t> out;
  std::string tok;
  auto flush = [&]() {
    if (tok.empty()) return;
    std::size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(tok, &used);
    } catch (const std::exception&) {
      throw InvalidArgument("not an integer token id: '" + tok + "'");
    }
    if (used != tok.size() || v < 0 || v > 0x7fffffff) throw InvalidArgument("bad token id: '" + tok + "'");
    out.push_back(static_cast<std::int32_t>(v));
    tok.clear();
  };
  for (char c : text) {
    if (c == ',' || c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '[' || c == ']') {
      flush();
    } else {
      tok.push_back(c);
    }
  }
  flush();
  return out;
}

long long parse_integer_flag(const std::string& flag, const std::string& text, long long lo, long long hi) {
  long long v = 0;
  const char* end = text.data() + text.size();
  const auto [p, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || ec != std::errc() || p != end || v < lo || v > hi) {
    throw InvalidArgument(flag + " must be an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                          "], got '" + text + "'");
  }
  return v;
}

namespace {

void write_npy(const std::string& path, const std::vector<float>& data, std::int64_t rows, std::int64_t cols) {
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + std::to_string(rows) + ", " +
                       std::to_string(cols) + "), }";
  const std::size_t unpadded = 10 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header.push_back('\n');
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) throw IoError("cannot write " + path + ": " + errno_message(errno));
  const char magic[] = {'\x93', 'N', 'U', 'M', 'P', 'Y', '\x01', '\x00'};
  f.write(magic, sizeof magic);
  const auto hl = static_cast<std::uint16_t>(header.size());
  const char len[2] = {static_cast<char>(hl & 0xff), static_cast<char>(hl >> 8)};
  f.write(len, 2);
  f.write(header.data(), static_cast<std::streamsize>(header.size()));
  f.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size() * sizeof(float)));
  if (!f) throw IoError("short write to " + path);
}

long long peak_rss_bytes() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<long long>(ru.ru_maxrss) * 1024;
}

std::vector<std::int32_t> load_ids(const BackboneDumpOptions& a, std::int64_t vocab) {
  if (!a.ids_file.empty()) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(a.ids_file, ec))
      throw IoError("--ids " + a.ids_file + " is not a readable regular file");
    std::ifstream f(a.ids_file);
    if (!f) throw IoError("cannot read " + a.ids_file);
    std::stringstream ss;
    ss << f.rdbuf();
    return parse_token_ids(ss.str());
  }
  if (!a.ids_list.empty()) return parse_token_ids(a.ids_list);
  if (!a.random_ids.empty()) {
    const auto colon = a.random_ids.find(':');
    const long long t = parse_integer_flag("--random-ids T", a.random_ids.substr(0, colon), 1, 1 << 24);
    const auto seed = colon == std::string::npos
                          ? 0u
                          : static_cast<unsigned>(parse_integer_flag("--random-ids SEED",
                                                                     a.random_ids.substr(colon + 1), 0, 0xffffffffLL));
    std::mt19937 gen(seed);
    std::uniform_int_distribution<std::int32_t> d(0,
                                                  static_cast<std::int32_t>(std::min<std::int64_t>(vocab, 248000) - 1));
    std::vector<std::int32_t> ids(static_cast<std::size_t>(t));
    for (auto& x : ids) x = d(gen);
    return ids;
  }
  throw InvalidArgument("give --ids FILE, --ids-list or --random-ids");
}

/// One JSON line per run: `secs` is the fastest of `passes` (every pass's wall seconds, in order, as
/// "pass_seconds": the first passes show one-time costs such as packing bf16 weights).
void report(const std::string& run, std::size_t tokens, const std::vector<double>& passes,
            const BackboneDumpOptions& a) {
  const double secs = *std::min_element(passes.begin(), passes.end());
  std::string list;
  for (const double p : passes) list += (list.empty() ? "" : ", ") + std::to_string(p);
  std::printf(
      "{\"run\": \"%s\", \"tokens\": %zu, \"seconds\": %.6f, \"pass_seconds\": [%s], \"tokens_per_s\": %.3f, "
      "\"peak_rss_bytes\": %lld, \"precision\": \"%s\", \"fp32_weights\": \"%s\", \"bf16_pack_after_calls\": %d, "
      "\"threads\": %d, \"gemm\": \"%s\"}\n",
      run.c_str(), tokens, secs, list.c_str(), secs > 0 ? static_cast<double>(tokens) / secs : 0.0, peak_rss_bytes(),
      ops::precision_name(a.precision), ops::fp32_resident_weights() ? "resident" : "stream",
      a.precision == ops::Precision::kBF16 ? ops::bf16_pack_after_calls() : 0, ops::num_threads(),
      ops::gemm_backend_name().c_str());
  std::fflush(stdout);
}

}  // namespace

void run_backbone_dump(const BackboneDumpOptions& a) {
  if (a.repeat < 1) throw InvalidArgument("backbone dump: repeat must be at least 1, got " + std::to_string(a.repeat));
  (void)ops::bf16_pack_after_calls();  // a bad CLEF_BF16_PACK is an error in every mode, as in clef
  const ReleaseFolder rel = open_release(a.model);
  const std::vector<std::int32_t> ids = load_ids(a, rel.config.text.vocab_size);
  const std::int64_t H = rel.config.text.hidden_size;
  const auto T = static_cast<std::int64_t>(ids.size());
  auto run_one = [&](BackboneOptions o, const std::string& name) {
    Backbone bb(rel, o);
    std::vector<float> hs;
    std::vector<double> passes;
    for (int r = 0; r < a.repeat; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      hs = bb.hidden_states(ids);
      passes.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    report(name, ids.size(), passes, a);
    if (!a.out.empty()) write_npy(a.out + "." + name + ".npy", hs, T, H);
    return hs;
  };
  BackboneOptions base;
  base.precision = a.precision;
  base.fp32_weights = a.fp32_weights;
  base.threads = a.threads;
  std::vector<float> first;
  for (std::int64_t c : a.chunks) {
    BackboneOptions o = base;
    o.chunk_size = c;
    auto hs = run_one(o, "chunk" + std::to_string(c));
    if (first.empty()) first = std::move(hs);
  }
  if (a.padded) {
    BackboneOptions o = base;
    o.padded_readout = true;
    run_one(o, "padded");
  }
  if (a.fork_check && T >= 2 && !first.empty()) {
    BackboneOptions o = base;
    o.chunk_size = a.chunks.front();
    Backbone bb(rel, o);
    const auto half = static_cast<std::size_t>(T / 2);
    SequenceState st = bb.new_state();
    bb.prefill(std::span(ids).first(half), st, {});
    const SequenceState snapshot = fork_state(st);
    double worst = 0.0;
    auto compare = [&](std::int64_t first_row, const float* rows, std::int64_t count, std::int64_t) {
      for (std::int64_t i = 0; i < count * H; ++i) {
        worst = std::max(worst,
                         static_cast<double>(std::fabs(rows[i] - first[static_cast<std::size_t>(first_row * H + i)])));
      }
    };
    SequenceState branch = fork_state(snapshot);
    bb.prefill(std::span(ids).subspan(half), branch, compare);
    restore_state(st, snapshot);
    bb.prefill(std::span(ids).subspan(half), st, compare);
    std::printf("{\"run\": \"fork_check\", \"max_abs_diff\": %.9g, \"state_bytes\": %zu}\n", worst, snapshot.bytes());
  }
}

}  // namespace clef
