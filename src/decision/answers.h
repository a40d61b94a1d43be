// SPDX-License-Identifier: MIT
// From option logits to the SystemOne answer (docs/PROTOCOL.md §2.1-2.3): per-question fp32
// softmax, noul / choice / score mapping, Python-compatible 4-decimal rounding, confidence modes,
// and the response body as JSON text with Python's number formatting.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "decision/request.h"

namespace clef {

/// How `confidence` is computed (docs/PROTOCOL.md §2.2).
enum class ConfidenceMode : std::uint8_t {
  kReference,  ///< Clef reference: the top probability (choice), the largest level probability (score)
  kJev,        ///< TypeSafe: (m - 1/n)/(1 - 1/n) (choice); max(0, 1 - sum p_i |i - k| / D) (score)
};

/// Options of build_response_json().
struct AnswerOptions {
  ConfidenceMode confidence = ConfidenceMode::kReference;
  /// Jev-compatible legends: a null level description becomes "" (the TypeSafe SDK rejects null,
  /// docs/PROTOCOL.md §2.3). Off: legends echo the raw criteria (reference).
  bool jev_legend = false;
};

/// Python's round(x, 4): correctly rounded from the exact binary value, ties to even (glibc's
/// "%.4f" then strtod). Finite input only.
double python_round4(double x);

/// Per-question softmax in fp32 (the reference's logits.float().softmax(-1)) over `logits` [N] in
/// model order; returns [N] probabilities, model order. Throws InvalidArgument when N does not match
/// the request's option count and InternalError on a non-finite logit (never NaN downstream).
std::vector<float> question_probabilities(const SystemOneRequest& request, std::span<const float> logits);

/// One question's answer numbers, unrounded (docs/PROTOCOL.md §2.1, §2.2), shared by the System
/// One and the OpenAI answer bodies so that both say the same.
struct QuestionAnswer {
  std::vector<double> p;  ///< probabilities in model order, as Python floats (doubles of float32)
  std::size_t best = 0;   ///< choice: index (model order) of the first option in request order with the top probability
  double score = 0.0;     ///< score: sum of i * p_i
  double confidence = 0.0;  ///< choice and score: per `mode`
};

/// The numbers of question `q` from its probabilities `probs` [options] (model order, from
/// question_probabilities()).
QuestionAnswer answer_question(const RequestQuestion& q, std::span<const float> probs, ConfidenceMode mode);

/// The SystemOne response body (docs/PROTOCOL.md §2.1) as compact UTF-8 JSON:
/// {"model": model, "answers": {qid: answer, ...}, "usage": {"input_tokens": n, "output_tokens": 0}}
/// with answers in request order, choice probabilities in request order, score levels "0".."n-1",
/// numbers rounded like Python's round(x, 4) and printed like Python's repr. `extra_usage` members
/// (already JSON text, e.g. "\"state_tokens_dropped\":12") are appended inside "usage" when non-empty.
std::string build_response_json(const SystemOneRequest& request, const std::string& model,
                                std::span<const float> logits, std::int64_t input_tokens,
                                const AnswerOptions& options = {}, const std::string& extra_usage = "");

}  // namespace clef
