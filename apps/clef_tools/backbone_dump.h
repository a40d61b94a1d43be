// SPDX-License-Identifier: MIT
// The backbone's final-norm hidden states for given token ids, written as float32 .npy files with
// one JSON timing line per run: what `clef hidden` (apps/clef/hidden_command.cc) and the test tool
// clef_backbone_dump run for the parity suite (tests/reference/test_backbone.py) and
// bench/bench_backbone.py.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/backbone.h"

namespace clef {

/// A parsed `clef hidden` command line. The ids come from `ids_file`, else `ids_list`, else
/// `random_ids`, the first one that is not empty.
struct BackboneDumpOptions {
  std::string model;                 ///< release folder (or GGUF model) path
  std::string ids_file;              ///< file of token ids (separated by commas, spaces, newlines, brackets)
  std::string ids_list;              ///< token ids as text, e.g. "1,2,3"
  std::string random_ids;            ///< "T[:SEED]": T uniform ids below min(vocab, 248000) from mt19937(SEED)
  std::string out;                   ///< file prefix: PREFIX.chunk<C>.npy, PREFIX.padded.npy ("" writes no files)
  std::vector<std::int64_t> chunks;  ///< prefill chunk sizes, one run each
  bool padded = false;               ///< one more run with the static-shape (padded) readout
  bool fork_check = false;           ///< fork/restore the state at the middle and compare with the one-shot run
  ops::Precision precision = ops::Precision::kF32;
  Fp32Weights fp32_weights = Fp32Weights::kAuto;
  int threads = 0;  ///< 0 = all CPUs
  int repeat = 1;   ///< runs per configuration (>= 1); the fastest is reported, every one's seconds too
};

/// Loads the model, runs every configuration and prints one JSON line per run on stdout:
/// {"run", "tokens", "seconds" (the fastest pass), "pass_seconds" (every pass, in order), "tokens_per_s",
/// "peak_rss_bytes", "precision", "fp32_weights", "bf16_pack_after_calls", "threads", "gemm"}; with
/// fork_check a last line {"run": "fork_check", "max_abs_diff", "state_bytes"}. Hidden states are
/// [T, hidden_size] float32 rows. Throws InvalidArgument for repeat < 1, bad ids or no id source, and
/// what open_release and Backbone throw.
void run_backbone_dump(const BackboneDumpOptions& options);

/// Token ids from text: non-negative integers below 2^31 separated by commas, spaces, tabs,
/// newlines or brackets. Throws InvalidArgument naming the first bad token.
std::vector<std::int32_t> parse_token_ids(const std::string& text);

/// `text` as an integer in [lo, hi]; InvalidArgument naming `flag` otherwise.
long long parse_integer_flag(const std::string& flag, const std::string& text, long long lo, long long hi);

}  // namespace clef
