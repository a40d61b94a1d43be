// SPDX-License-Identifier: MIT
#include "decision/answers.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "core/error.h"
#include "core/json_text.h"
#include "decision/render.h"

namespace clef {

double python_round4(double x) {
  if (!std::isfinite(x)) throw InternalError("python_round4: non-finite value");
  char buf[512];
  std::snprintf(buf, sizeof buf, "%.4f", x);  // exact decimal expansion, round-half-even (glibc)
  return std::strtod(buf, nullptr);
}

std::vector<float> question_probabilities(const SystemOneRequest& request, std::span<const float> logits) {
  std::size_t n = 0;
  for (const auto& q : request.questions) n += q.options.size();
  if (logits.size() != n) {
    throw InvalidArgument("answers: " + std::to_string(logits.size()) + " logits for " + std::to_string(n) +
                          " options");
  }
  std::vector<float> p(n);
  std::size_t base = 0;
  for (const auto& q : request.questions) {
    const std::size_t k = q.options.size();
    float mx = -INFINITY;
    for (std::size_t i = 0; i < k; ++i) {
      const float v = logits[base + i];
      if (!std::isfinite(v)) throw InternalError("answers: non-finite logit for question " + q.id);
      mx = std::max(mx, v);
    }
    float sum = 0.0f;
    for (std::size_t i = 0; i < k; ++i) {
      p[base + i] = std::exp(logits[base + i] - mx);
      sum += p[base + i];
    }
    for (std::size_t i = 0; i < k; ++i) p[base + i] /= sum;
    base += k;
  }
  return p;
}

namespace {

void append_number(std::string& out, double v) { out += python_float_repr(python_round4(v)); }

void append_key(std::string& out, const std::string& key) {
  append_json_string(out, key);
  out += ':';
}

/// TypeSafe's score confidence: max(0, 1 - sum_i p_i |i - k| / D), k = mode, D = (1/n) sum_i |i - (n-1)/2|.
double jev_score_confidence(const std::vector<double>& p) {
  const auto n = static_cast<double>(p.size());
  const auto k = static_cast<double>(std::max_element(p.begin(), p.end()) - p.begin());
  double dist = 0.0, d = 0.0;
  for (std::size_t i = 0; i < p.size(); ++i) {
    const auto fi = static_cast<double>(i);
    dist += p[i] * std::fabs(fi - k);
    d += std::fabs(fi - (n - 1.0) / 2.0);
  }
  d /= n;
  return d > 0.0 ? std::max(0.0, 1.0 - dist / d) : 1.0;
}

}  // namespace

QuestionAnswer answer_question(const RequestQuestion& q, std::span<const float> probs, ConfidenceMode mode) {
  QuestionAnswer a;
  a.p.resize(q.options.size());
  for (std::size_t i = 0; i < a.p.size(); ++i) a.p[i] = static_cast<double>(probs[i]);
  const std::vector<double>& p = a.p;
  if (q.type == QuestionType::kChoice) {
    // The first option in request order with the largest unrounded probability.
    std::size_t best = q.request_order[0];
    for (std::size_t j : q.request_order) {
      if (p[j] > p[best]) best = j;
    }
    const double n = static_cast<double>(p.size());
    a.best = best;
    a.confidence = mode == ConfidenceMode::kJev ? (n > 1 ? (p[best] - 1.0 / n) / (1.0 - 1.0 / n) : 1.0) : p[best];
  } else if (q.type == QuestionType::kScore) {
    for (std::size_t i = 0; i < p.size(); ++i) a.score += static_cast<double>(i) * p[i];
    a.confidence = mode == ConfidenceMode::kJev ? jev_score_confidence(p) : *std::max_element(p.begin(), p.end());
  }
  return a;
}

std::string build_response_json(const SystemOneRequest& request, const std::string& model,
                                std::span<const float> logits, std::int64_t input_tokens, const AnswerOptions& options,
                                const std::string& extra_usage) {
  const std::vector<float> probs = question_probabilities(request, logits);
  std::string out = "{";
  append_key(out, "model");
  append_json_string(out, model);
  out += ',';
  append_key(out, "answers");
  out += '{';
  std::size_t base = 0;
  for (std::size_t qi = 0; qi < request.questions.size(); ++qi) {
    const RequestQuestion& q = request.questions[qi];
    // Probabilities as Python floats: doubles holding float32 values (docs/PROTOCOL.md §2.1).
    const QuestionAnswer a =
        answer_question(q, std::span<const float>(probs).subspan(base, q.options.size()), options.confidence);
    const std::vector<double>& p = a.p;
    base += p.size();
    if (qi) out += ',';
    append_key(out, q.id);
    out += '{';
    append_key(out, "type");
    append_json_string(out, question_type_name(q.type));
    out += ',';
    if (q.type == QuestionType::kNoul) {
      append_key(out, "noul");
      append_number(out, p[0]);  // model order is (true, false)
    } else if (q.type == QuestionType::kChoice) {
      append_key(out, "choice");
      append_json_string(out, q.options[a.best].id);
      out += ',';
      append_key(out, "confidence");
      append_number(out, a.confidence);
      out += ',';
      append_key(out, "probabilities");
      out += '{';
      for (std::size_t k = 0; k < q.request_order.size(); ++k) {
        const std::size_t j = q.request_order[k];
        if (k) out += ',';
        append_key(out, q.options[j].id);
        append_number(out, p[j]);
      }
      out += '}';
    } else {
      append_key(out, "score");
      append_number(out, a.score);
      out += ',';
      append_key(out, "confidence");
      append_number(out, a.confidence);
      out += ',';
      append_key(out, "legend");
      out += '{';
      const JsonValue::Array& levels = q.criteria.items();
      for (std::size_t i = 0; i < levels.size(); ++i) {
        if (i) out += ',';
        append_key(out, std::to_string(i));
        if (options.jev_legend && levels[i].is_null()) {
          out += "\"\"";
        } else {
          append_echo_json(out, levels[i]);  // as given, never key-sorted (reference)
        }
      }
      out += "},";
      append_key(out, "probabilities");
      out += '{';
      for (std::size_t i = 0; i < p.size(); ++i) {
        if (i) out += ',';
        append_key(out, std::to_string(i));
        append_number(out, p[i]);
      }
      out += '}';
    }
    out += '}';
  }
  out += "},";
  append_key(out, "usage");
  out += "{\"input_tokens\":" + std::to_string(input_tokens) + ",\"output_tokens\":0";
  if (!extra_usage.empty()) out += "," + extra_usage;
  out += "}}";
  return out;
}

}  // namespace clef
