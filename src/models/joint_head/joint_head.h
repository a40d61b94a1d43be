// SPDX-License-Identifier: MIT
// The joint schema head (docs/PROTOCOL.md §4.4), fp32, fed with the backbone's final-norm hidden rows
// chunk by chunk: a record of any length never needs the [T, hidden] matrix at once. Per row the
// head keeps only the projected memory row [W] and running span sums; everything else happens in
// logits() once all T rows have arrived. Its kernels are the ops of ops/head_ops.h (fixed summation
// order, docs/NUMERICS.md "The joint head's kernels"); this file and joint_head.cc hold the recipe.
//
// State reuse (docs/ARCHITECTURE.md "Exact state reuse"): the memory rows before a record's state end depend only
// on the prefix + state tokens, and so do the attention keys and values the head computes from them
// (steps 7 and 11). HeadMemoryPrefix holds those keys/values for a run of leading rows; the state
// cache keeps it with the backbone state, and a warm record attends over it plus its own new rows.
// A record that computes everything itself splits its memory at the same row (`memory_split`) and
// runs the very same code on both parts, so cached, just computed and cache-off answers are
// bit-identical.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "decision/record.h"
#include "models/joint_head/weights.h"
#include "io/hf_config.h"
#include "ops/gemm.h"

namespace clef {

/// The attention keys and values of the joint head over memory rows [0, rows) (docs/PROTOCOL.md
/// §4.4): for each routing layer i (step 7) K = LN_mem_i(M)·Wkᵀ + bk and V = LN_mem_i(M)·Wvᵀ + bv,
/// then for each field-decoder layer j (step 11, cross-attention to the raw memory) K = M·Wkᵀ + bk
/// and V = M·Wvᵀ + bv, all [rows, W] fp32 row-major, M the projected memory rows. Exact functions
/// of those rows (computed once by JointHead::memory_prefix, never modified), so a state cache may
/// share one instance between records and threads.
struct HeadMemoryPrefix {
  std::int64_t rows = 0;   ///< memory rows covered
  std::int64_t width = 0;  ///< W
  /// [routing_layers + layers] of [rows, W]: routing layers first, then field layers.
  std::vector<std::vector<float>> keys, values;
  /// Bytes held by the key/value rows: 2 · (routing_layers + layers) · rows · W · 4.
  std::size_t bytes() const noexcept;
};

/// The head's weights converted to fp32 once, plus a reference to the output embedding table.
/// Immutable after construction; share one instance between threads.
class JointHead {
 public:
  /// `output_embeddings` is the [V, H] lm_head (or tied embedding) view; it must outlive this
  /// object (it stays mmapped; only option-span rows are read). Throws ModelLoadError when its
  /// width differs from cfg.hidden_size.
  JointHead(const JointHeadWeights& weights, const JointHeadConfig& cfg, const WeightView& output_embeddings);

  const JointHeadConfig& config() const noexcept { return cfg_; }

  /// The head's per-row input (docs/PROTOCOL.md §4.4 steps 1-2): M = LN_hidden(rows) · Wmemᵀ.
  /// `hidden` [n, H] fp32 final-norm hidden rows -> [n, W] fp32. Row-independent: a row's result
  /// does not depend on the other rows given (so it can be computed once per state and reused by
  /// the state cache). Throws InvalidArgument unless `hidden` holds whole rows.
  std::vector<float> project_memory(std::span<const float> hidden) const;

  /// The keys and values over memory rows `memory` [n, W] fp32 (project_memory of the rows), as
  /// HeadMemoryPrefix documents: one GEMM per layer and matrix over all n rows (oneDNN fp32; its
  /// blocking may depend on n, so a record must use the same row runs cold and warm, which
  /// `memory_split` / restore_prefix guarantee). Cost 2·(R+L)·n·W² multiply-adds, memory
  /// 8·(R+L)·n·W bytes. Throws InvalidArgument unless `memory` holds whole rows.
  std::shared_ptr<const HeadMemoryPrefix> memory_prefix(std::span<const float> memory) const;

  struct Linear {
    std::vector<float> w;  ///< [out, in] row-major
    std::vector<float> b;  ///< [out] or empty
    std::int64_t out = 0, in = 0;
  };
  struct Norm {
    std::vector<float> w, b;
  };
  struct Mha {
    Linear q, k, v, o;  ///< in_proj split into Wq | Wk | Wv, then out_proj
    /// Wk, Wv bound to the GEMM library (pointing into k.w, v.w): the key/value projections over
    /// the memory rows, the head's one large product. Run over whole row runs ([0, split) and
    /// [split, T), JointHead::memory_prefix), so their blocking may depend on a run's length
    /// without breaking state reuse (identical runs, identical bits).
    std::unique_ptr<ops::GemmWeight> k_gemm, v_gemm;
  };
  struct Routing {
    Norm query_norm, memory_norm, ff_norm;
    Mha attn;
    Linear ff1, ff2;
  };
  struct Field {
    Mha self_attn, cross_attn;
    Linear linear1, linear2;
    Norm norm1, norm2, norm3;
  };

 private:
  friend class JointHeadRecord;
  JointHeadConfig cfg_;
  const WeightView* output_embeddings_;
  Norm hidden_norm_;
  Linear memory_, question_, option_question_, global_, option_context_, option_lexical_;
  std::vector<float> type_embedding_;  ///< [3, W]
  std::vector<Routing> routing_;
  Norm option_summary_norm_;
  std::vector<Field> field_;
  Norm field_norm_, option_norm_;
  Linear scorer1_, scorer2_;
  float prior_scale_ = 0, joint_scale_ = 0, gate_ = 0;  ///< already exp/clamped and sigmoid-ed
};

/// The head's evaluation of one record: feed() the T hidden rows in order (any chunking), then
/// logits(). Not thread-safe; one per record.
class JointHeadRecord {
 public:
  /// `input_ids` [T] are the record's token ids (for the lexical rows); `questions` in request
  /// order. `memory_split` (0: none) is the row where the memory's keys/values are split into two
  /// runs, [0, split) through JointHead::memory_prefix and [split, T) likewise: the record's state
  /// end, so that an uncached record does exactly the arithmetic of one whose prefix was restored
  /// from a cache (restore_prefix with `split` rows). Throws InvalidArgument if a span is empty or
  /// outside [0, T), an id is outside the output table (an empty span would be a NaN in the
  /// reference, docs/PROTOCOL.md §5.3), or the split is invalid (see restore_prefix).
  JointHeadRecord(const JointHead& head, std::vector<HeadQuestion> questions, std::span<const std::int32_t> input_ids,
                  std::int64_t memory_split = 0);

  /// Consumes the next rows: `hidden` is [n, H] fp32 row-major, final-norm hidden states.
  void feed(std::span<const float> hidden);
  std::int64_t rows_fed() const noexcept { return fed_; }

  /// Takes rows [0, n) as already fed, from `prefix` (JointHead::memory_prefix of their projected
  /// memory rows; state reuse), which the record keeps a reference to (no copy).
  /// The head keeps no other per-row value for rows before the first question/option span and
  /// before T-1, so the result is bit-identical to feeding those rows to a record constructed with
  /// memory_split = n. Throws InvalidArgument unless nothing was fed yet, `prefix` is non-null with
  /// the head's width, n equals the record's memory_split (when one was given), n < T, and no span
  /// starts before n.
  void restore_prefix(std::shared_ptr<const HeadMemoryPrefix> prefix);

  /// [N] option logits in model order (questions in request order, options in §3.4 order).
  /// Throws InternalError unless exactly T rows were fed.
  std::vector<float> logits() const;

 private:
  /// Throws InvalidArgument unless rows [0, n) hold no question/option span and n < T.
  void check_split(std::int64_t n) const;

  const JointHead& head_;
  std::vector<HeadQuestion> questions_;
  std::int64_t total_ = 0;  ///< T
  std::int64_t fed_ = 0;
  std::int64_t split_ = 0;                          ///< memory_split (rows of the first key/value run)
  std::shared_ptr<const HeadMemoryPrefix> prefix_;  ///< restored keys/values of rows [0, split_), or null
  std::vector<float> memory_;                       ///< [T - base, W] projected memory rows M of rows [base, T),
                                                    ///< base = split_ when restored, else 0
  std::vector<double> question_sum_;                ///< [Q, H] sums of normed rows over question spans
  std::vector<double> option_sum_;                  ///< [N, H] sums over option spans
  std::vector<float> last_row_;                     ///< [H] normed row T-1 (the global vector g)
  std::vector<float> lexical_;                      ///< [N, H] mean lm_head rows of each option span
};

}  // namespace clef
