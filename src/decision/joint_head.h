// The joint schema head (protocol.md §4.4), fp32, fed with the backbone's final-norm hidden rows
// chunk by chunk: a record of any length never needs the [T, hidden] matrix at once. Per row the
// head keeps only the projected memory row [W] and running span sums; everything else happens in
// logits() once all T rows have arrived.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "decision/joint_head_weights.h"
#include "io/hf_config.h"
#include "ops/gemm.h"

namespace clef {

/// Half-open token range [begin, end) inside a record.
struct TokenSpan {
  std::int64_t begin = 0;
  std::int64_t end = 0;
  std::int64_t size() const noexcept { return end - begin; }
};

/// One question of a record as the head sees it (protocol.md §4.3).
struct HeadQuestion {
  int type_id = 0;                  ///< 0 noul, 1 choice, 2 score (rows of type_embedding)
  TokenSpan span;                   ///< tokens of render(instructions or id)
  std::vector<TokenSpan> options;   ///< tokens of render({option_id, description}), model order
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

  /// The head's per-row input (protocol.md §4.4 steps 1-2): M = LN_hidden(rows) · Wmemᵀ.
  /// `hidden` [n, H] fp32 final-norm hidden rows -> [n, W] fp32. Row-independent: a row's result
  /// does not depend on the other rows given (so it can be computed once per state and reused,
  /// issue 7). Throws InvalidArgument unless `hidden` holds whole rows.
  std::vector<float> project_memory(std::span<const float> hidden) const;

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
    /// Wk, Wv bound to the GEMM library (pointing into k.w, v.w): the key/value projections run
    /// over all T memory rows in logits(), the head's one large product. Not used per row, so
    /// its blocking may depend on T without breaking state reuse (identical T, identical bits).
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
  /// order. Throws InvalidArgument if a span is empty or outside [0, T), or an id is outside the
  /// output table (an empty span would be a NaN in the reference, protocol.md §5.3).
  JointHeadRecord(const JointHead& head, std::vector<HeadQuestion> questions, std::span<const std::int32_t> input_ids);

  /// Consumes the next rows: `hidden` is [n, H] fp32 row-major, final-norm hidden states.
  void feed(std::span<const float> hidden);
  std::int64_t rows_fed() const noexcept { return fed_; }

  /// Takes rows [0, n) as already fed, from their projected memory rows `memory` [n, W]
  /// (JointHead::project_memory of the same hidden rows; state reuse, issue 7). The head keeps no
  /// other per-row value for rows before the first question/option span and before T-1, so the
  /// result is exactly that of feed()-ing those rows. Throws InvalidArgument unless nothing was fed
  /// yet, `memory` holds whole rows, n < T, and no span starts before n.
  void restore_prefix(std::span<const float> memory);

  /// [N] option logits in model order (questions in request order, options in §3.4 order).
  /// Throws InternalError unless exactly T rows were fed.
  std::vector<float> logits() const;

 private:
  const JointHead& head_;
  std::vector<HeadQuestion> questions_;
  std::int64_t total_ = 0;  ///< T
  std::int64_t fed_ = 0;
  std::vector<float> memory_;        ///< [T, W] projected memory rows M
  std::vector<double> question_sum_; ///< [Q, H] sums of normed rows over question spans
  std::vector<double> option_sum_;   ///< [N, H] sums over option spans
  std::vector<float> last_row_;      ///< [H] normed row T-1 (the global vector g)
  std::vector<float> lexical_;       ///< [N, H] mean lm_head rows of each option span
};

}  // namespace clef
