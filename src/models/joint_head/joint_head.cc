// SPDX-License-Identifier: MIT
#include "models/joint_head/joint_head.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/quant_blocks.h"
#include "ops/head_ops.h"
#include "ops/ops.h"
#include "ops/vision_ops.h"

namespace clef {
namespace {

using Linear = JointHead::Linear;
using Norm = JointHead::Norm;
using Mha = JointHead::Mha;

constexpr float kLayerNormEps = 1e-5f;

std::vector<float> f32(const WeightView& w) { return w.to_f32(); }

Linear make_linear(const WeightView& w, const WeightView* b) {
  Linear l;
  l.w = f32(w);
  l.out = w.shape()[0];
  l.in = w.shape()[1];
  if (b != nullptr) l.b = f32(*b);
  return l;
}

Norm make_norm(const LayerNormWeights& n) { return {f32(n.weight), f32(n.bias)}; }

/// Splits PyTorch's packed in_proj [3W, W] (rows Wq | Wk | Wv) into three linears.
Mha make_mha(const MultiheadAttentionWeights& m) {
  const std::vector<float> w = f32(m.in_proj_weight), b = f32(m.in_proj_bias);
  const std::int64_t width = m.out_proj_weight.shape()[0];
  const auto W = static_cast<std::size_t>(width);
  Mha out;
  Linear* parts[3] = {&out.q, &out.k, &out.v};
  for (std::size_t i = 0; i < 3; ++i) {
    parts[i]->w.assign(w.begin() + static_cast<std::ptrdiff_t>(i * W * W),
                       w.begin() + static_cast<std::ptrdiff_t>((i + 1) * W * W));
    parts[i]->b.assign(b.begin() + static_cast<std::ptrdiff_t>(i * W),
                       b.begin() + static_cast<std::ptrdiff_t>((i + 1) * W));
    parts[i]->out = parts[i]->in = width;
  }
  out.o = make_linear(m.out_proj_weight, &m.out_proj_bias);
  out.k_gemm = std::make_unique<ops::GemmWeight>(DType::kF32, out.k.w.data(), width, width, ops::Precision::kF32);
  out.v_gemm = std::make_unique<ops::GemmWeight>(DType::kF32, out.v.w.data(), width, width, ops::Precision::kF32);
  return out;
}

/// y[n, out] = x[n, in] · Wᵀ + b in the head's fixed order (ops::linear_dot16).
std::vector<float> linear_rows(const Linear& l, const float* x, std::int64_t n) {
  std::vector<float> y(static_cast<std::size_t>(n * l.out));
  ops::linear_dot16(x, n, l.in, l.w.data(), l.out, l.b.empty() ? nullptr : l.b.data(), y.data());
  return y;
}
std::vector<float> linear_rows(const Linear& l, const std::vector<float>& x) {
  return linear_rows(l, x.data(), static_cast<std::int64_t>(x.size()) / l.in);
}

/// y[n, out] = x[n, in] · Wᵀ + b through the GEMM library (fp32, ops::linear): for the large
/// key/value products of logits(); per-element sums are ordered as the library blocks them.
std::vector<float> linear_gemm(const Linear& l, const ops::GemmWeight& w, const std::vector<float>& x) {
  const std::int64_t n = static_cast<std::int64_t>(x.size()) / l.in;
  std::vector<float> y(static_cast<std::size_t>(n * l.out));
  if (n == 0) return y;
  ops::linear(x.data(), n, w, y.data());
  if (!l.b.empty()) ops::add_bias(y.data(), n, l.out, l.b.data());
  return y;
}

/// LayerNorm over rows of width `width` (biased variance, eps 1e-5, affine; double statistics).
std::vector<float> layer_norm(const Norm& n, const float* x, std::int64_t rows, std::int64_t width) {
  std::vector<float> y(static_cast<std::size_t>(rows * width));
  ops::layer_norm_f64stats(x, rows, width, n.w.data(), n.b.data(), kLayerNormEps, y.data());
  return y;
}
std::vector<float> layer_norm(const Norm& n, const std::vector<float>& x) {
  const auto width = static_cast<std::int64_t>(n.w.size());
  return layer_norm(n, x.data(), static_cast<std::int64_t>(x.size()) / width, width);
}

/// Exact (erf) GELU in place (PyTorch nn.GELU()).
void gelu_inplace(std::vector<float>& x) { ops::gelu_erf(x.data(), static_cast<std::int64_t>(x.size()), x.data()); }

void add_into(std::vector<float>& a, const std::vector<float>& b) {
  ops::add_inplace(a.data(), b.data(), static_cast<std::int64_t>(a.size()));
}

float dot(const float* a, const float* b, std::int64_t n) { return ops::dot16(a, b, n); }

using ops::KvRun;

/// nn.MultiheadAttention (batch_first, no mask) with already projected keys/values `runs`:
/// queries [nq, W] -> out_proj(attention(q_in·Wqᵀ + bq)).
std::vector<float> mha(const Mha& m, std::int64_t heads, const std::vector<float>& q_in, std::span<const KvRun> runs) {
  const std::vector<float> q = linear_rows(m.q, q_in);
  const std::int64_t W = m.q.out, nq = static_cast<std::int64_t>(q.size()) / W;
  std::vector<float> ctx(q.size());
  ops::attention_runs(q.data(), nq, W, heads, runs, ctx.data());
  return linear_rows(m.o, ctx);
}

/// nn.MultiheadAttention (batch_first, no mask): queries [nq, W], keys/values from kv [nk, W].
std::vector<float> mha(const Mha& m, std::int64_t heads, const std::vector<float>& q_in,
                       const std::vector<float>& kv_in) {
  const std::vector<float> k = linear_gemm(m.k, *m.k_gemm, kv_in), v = linear_gemm(m.v, *m.v_gemm, kv_in);
  const KvRun run{k.data(), v.data(), static_cast<std::int64_t>(kv_in.size()) / m.q.in};
  return mha(m, heads, q_in, std::span<const KvRun>(&run, 1));
}

std::vector<float> feed_forward(const Linear& l1, const Linear& l2, const std::vector<float>& x) {
  std::vector<float> h = linear_rows(l1, x);
  gelu_inplace(h);
  return linear_rows(l2, h);
}

std::vector<float> l2_normalize(const float* x, std::int64_t n) {
  std::vector<float> y(static_cast<std::size_t>(n));
  ops::l2_normalize_f64(x, n, y.data());
  return y;
}

}  // namespace

JointHead::JointHead(const JointHeadWeights& w, const JointHeadConfig& cfg, const WeightView& output_embeddings)
    : cfg_(cfg), output_embeddings_(&output_embeddings) {
  if (output_embeddings.shape().size() != 2 || output_embeddings.shape()[1] != cfg.hidden_size) {
    throw ModelLoadError("output embedding table " + shape_to_string(output_embeddings.shape()) +
                         " does not match the head's hidden_size " + std::to_string(cfg.hidden_size));
  }
  hidden_norm_ = make_norm(w.hidden_norm);
  memory_ = make_linear(w.memory_projection, nullptr);
  question_ = make_linear(w.question_projection, nullptr);
  option_question_ = make_linear(w.option_question_projection, nullptr);
  global_ = make_linear(w.global_projection, nullptr);
  option_context_ = make_linear(w.option_context_projection, nullptr);
  option_lexical_ = make_linear(w.option_lexical_projection, nullptr);
  type_embedding_ = f32(w.type_embedding);
  for (const auto& r : w.routing) {
    routing_.push_back({make_norm(r.query_norm), make_norm(r.memory_norm), make_norm(r.feedforward_norm),
                        make_mha(r.attention), make_linear(r.ff1_weight, &r.ff1_bias),
                        make_linear(r.ff2_weight, &r.ff2_bias)});
  }
  option_summary_norm_ = make_norm(w.option_summary_norm);
  for (const auto& l : w.field_layers) {
    field_.push_back({make_mha(l.self_attn), make_mha(l.cross_attn), make_linear(l.linear1_weight, &l.linear1_bias),
                      make_linear(l.linear2_weight, &l.linear2_bias), make_norm(l.norm1), make_norm(l.norm2),
                      make_norm(l.norm3)});
  }
  field_norm_ = make_norm(w.field_norm);
  option_norm_ = make_norm(w.option_norm);
  scorer1_ = make_linear(w.scorer1_weight, &w.scorer1_bias);
  scorer2_ = make_linear(w.scorer2_weight, &w.scorer2_bias);
  if (w.scales.valid()) {
    // A clef-layout GGUF stores the three already transformed (decision.scales).
    const std::vector<float> s = f32(w.scales);
    if (s.size() != 3 || !(s[0] > 0.0f) || !(s[1] > 0.0f) || !(s[2] >= 0.0f && s[2] <= 1.0f) || !std::isfinite(s[0]) ||
        !std::isfinite(s[1])) {
      throw ModelLoadError(
          "decision.scales must hold [exp(min(p, ln 100)) > 0, exp(min(j, ln 100)) > 0, sigmoid(g) in "
          "[0, 1]]");
    }
    prior_scale_ = s[0];
    joint_scale_ = s[1];
    gate_ = s[2];
  } else {
    // In double, rounded once to float: the numbers llama.cpp's Clef converter stores in
    // decision.scales, so that a folder and its clef-layout GGUF score with the same three floats
    // (docs/GGUF.md "Bit-identical answers").
    const double ln100 = std::log(100.0);
    prior_scale_ = static_cast<float>(std::exp(std::min(static_cast<double>(f32(w.prior_logit_scale)[0]), ln100)));
    joint_scale_ = static_cast<float>(std::exp(std::min(static_cast<double>(f32(w.joint_logit_scale)[0]), ln100)));
    gate_ = static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(f32(w.residual_gate)[0]))));
  }
}

JointHeadRecord::JointHeadRecord(const JointHead& head, std::vector<HeadQuestion> questions,
                                 std::span<const std::int32_t> input_ids, std::int64_t memory_split)
    : head_(head),
      questions_(std::move(questions)),
      total_(static_cast<std::int64_t>(input_ids.size())),
      split_(memory_split) {
  const JointHeadConfig& c = head.cfg_;
  const auto H = static_cast<std::size_t>(c.hidden_size);
  if (questions_.empty()) throw InvalidArgument("joint head: a record needs at least one question");
  std::size_t n_options = 0;
  auto check = [&](const TokenSpan& s, const std::string& what) {
    if (s.begin < 0 || s.end > total_ || s.size() <= 0) {
      throw InvalidArgument("joint head: " + what + " span [" + std::to_string(s.begin) + ", " + std::to_string(s.end) +
                            ") is empty or outside the record's " + std::to_string(total_) + " tokens");
    }
  };
  for (std::size_t q = 0; q < questions_.size(); ++q) {
    check(questions_[q].span, "question " + std::to_string(q));
    if (questions_[q].type_id < 0 || questions_[q].type_id > 2) throw InvalidArgument("joint head: bad question type");
    if (questions_[q].options.empty()) throw InvalidArgument("joint head: question without options");
    for (const auto& o : questions_[q].options) check(o, "option of question " + std::to_string(q));
    n_options += questions_[q].options.size();
  }
  if (split_ != 0) check_split(split_);
  // memory_ is sized by the first feed(): after restore_prefix it holds only rows [split_, T).
  question_sum_.assign(questions_.size() * H, 0.0);
  option_sum_.assign(n_options * H, 0.0);
  last_row_.assign(H, 0.0f);

  // Lexical vectors: the mean of the raw output-embedding rows of each option span's ids
  // (docs/PROTOCOL.md §4.4 step 5).
  const WeightView& table = *head.output_embeddings_;
  const std::int64_t vocab = table.shape()[0];
  const std::size_t row_bytes = dtype_bytes(table.dtype(), H);  // Q8_0 (a GGUF table): whole blocks
  lexical_.assign(n_options * H, 0.0f);
  std::vector<float> row(H);
  std::vector<double> acc(H);
  std::size_t o = 0;
  for (const auto& q : questions_) {
    for (const auto& s : q.options) {
      std::fill(acc.begin(), acc.end(), 0.0);
      for (std::int64_t t = s.begin; t < s.end; ++t) {
        const std::int32_t id = input_ids[static_cast<std::size_t>(t)];
        if (id < 0 || id >= vocab)
          throw InvalidArgument("joint head: token id " + std::to_string(id) + " outside the output table");
        convert_to_f32(table.dtype(), table.bytes.data() + static_cast<std::size_t>(id) * row_bytes, H, row.data());
        for (std::size_t i = 0; i < H; ++i) acc[i] += static_cast<double>(row[i]);
      }
      for (std::size_t i = 0; i < H; ++i)
        lexical_[o * H + i] = static_cast<float>(acc[i] / static_cast<double>(s.size()));
      ++o;
    }
  }
}

std::vector<float> JointHead::project_memory(std::span<const float> hidden) const {
  const std::int64_t H = cfg_.hidden_size;
  if (static_cast<std::int64_t>(hidden.size()) % H != 0)
    throw InvalidArgument("joint head: project_memory() needs whole rows");
  const std::int64_t n = static_cast<std::int64_t>(hidden.size()) / H;
  const std::vector<float> x = layer_norm(hidden_norm_, hidden.data(), n, H);
  return linear_rows(memory_, x.data(), n);
}

std::size_t HeadMemoryPrefix::bytes() const noexcept {
  std::size_t b = 0;
  for (const auto& k : keys) b += k.size() * sizeof(float);
  for (const auto& v : values) b += v.size() * sizeof(float);
  return b;
}

std::shared_ptr<const HeadMemoryPrefix> JointHead::memory_prefix(std::span<const float> memory) const {
  const std::int64_t W = cfg_.width;
  if (static_cast<std::int64_t>(memory.size()) % W != 0)
    throw InvalidArgument("joint head: memory_prefix() needs whole rows");
  auto p = std::make_shared<HeadMemoryPrefix>();
  p->rows = static_cast<std::int64_t>(memory.size()) / W;
  p->width = W;
  const std::vector<float> m(memory.begin(), memory.end());
  // Step 7's keys/values read the memory normed per routing layer; step 11's read it raw.
  for (const auto& r : routing_) {
    const std::vector<float> mn = layer_norm(r.memory_norm, m);
    p->keys.push_back(linear_gemm(r.attn.k, *r.attn.k_gemm, mn));
    p->values.push_back(linear_gemm(r.attn.v, *r.attn.v_gemm, mn));
  }
  for (const auto& l : field_) {
    p->keys.push_back(linear_gemm(l.cross_attn.k, *l.cross_attn.k_gemm, m));
    p->values.push_back(linear_gemm(l.cross_attn.v, *l.cross_attn.v_gemm, m));
  }
  return p;
}

void JointHeadRecord::check_split(std::int64_t n) const {
  if (n < 0 || n >= total_) {
    throw InvalidArgument("joint head: a memory split / restored prefix of " + std::to_string(n) +
                          " rows must end before the record's last row " + std::to_string(total_ - 1));
  }
  for (const auto& q : questions_) {
    bool before = q.span.begin < n;
    for (const auto& o : q.options) before = before || o.begin < n;
    if (before) {
      throw InvalidArgument("joint head: a question/option span starts inside the memory split / restored prefix of " +
                            std::to_string(n) + " rows");
    }
  }
}

void JointHeadRecord::restore_prefix(std::shared_ptr<const HeadMemoryPrefix> prefix) {
  if (fed_ != 0) throw InvalidArgument("joint head: restore_prefix() after rows were fed");
  if (!prefix || prefix->width != head_.cfg_.width ||
      prefix->keys.size() != head_.routing_.size() + head_.field_.size() ||
      prefix->values.size() != prefix->keys.size()) {
    throw InvalidArgument("joint head: restore_prefix() needs the key/value rows of this head (memory_prefix)");
  }
  const std::int64_t n = prefix->rows;
  if (split_ != 0 && n != split_) {
    throw InvalidArgument("joint head: a restored prefix of " + std::to_string(n) +
                          " rows differs from the memory split " + std::to_string(split_));
  }
  check_split(n);
  split_ = n;
  prefix_ = std::move(prefix);
  memory_.clear();  // the first feed() sizes it for rows [n, T)
  fed_ = n;
}

void JointHeadRecord::feed(std::span<const float> hidden) {
  const JointHeadConfig& c = head_.cfg_;
  const std::int64_t H = c.hidden_size;
  if (static_cast<std::int64_t>(hidden.size()) % H != 0) throw InvalidArgument("joint head: feed() needs whole rows");
  const std::int64_t n = static_cast<std::int64_t>(hidden.size()) / H;
  if (fed_ + n > total_) throw InvalidArgument("joint head: fed more rows than the record has");
  // docs/PROTOCOL.md §4.4 steps 1-2: X = LN_hidden(rows); M = X · Wmemᵀ (as in
  // JointHead::project_memory).
  const std::vector<float> x = layer_norm(head_.hidden_norm_, hidden.data(), n, H);
  const std::vector<float> m = linear_rows(head_.memory_, x.data(), n);
  const std::int64_t base = prefix_ ? split_ : 0;  // memory_ holds rows [base, T)
  if (memory_.empty()) memory_.resize(static_cast<std::size_t>((total_ - base) * c.width));
  std::copy(m.begin(), m.end(), memory_.begin() + (fed_ - base) * c.width);
  // Running span sums (step 4) over the rows of this chunk.
  const std::int64_t r0 = fed_, r1 = fed_ + n;
  auto add_span = [&](const TokenSpan& s, double* sum) {
    for (std::int64_t t = std::max(s.begin, r0); t < std::min(s.end, r1); ++t) {
      const float* xr = x.data() + (t - r0) * H;
      for (std::int64_t i = 0; i < H; ++i) sum[i] += static_cast<double>(xr[i]);
    }
  };
  std::size_t o = 0;
  for (std::size_t q = 0; q < questions_.size(); ++q) {
    add_span(questions_[q].span, question_sum_.data() + q * static_cast<std::size_t>(H));
    for (const auto& s : questions_[q].options) add_span(s, option_sum_.data() + (o++) * static_cast<std::size_t>(H));
  }
  if (r1 == total_) std::copy(x.end() - H, x.end(), last_row_.begin());  // step 3: g = X[T-1]
  fed_ = r1;
}

namespace {

/// docs/PROTOCOL.md §4.4 steps 8-9: per question q, the softmax over its options k of
/// <Z_k, f0_q> / sqrt(W) weights the option rows Z_k into the summary s_q. z [N, W], f0 [Q, W],
/// owner[k] the question of option k; returns s [Q, W] fp32 (exp in float, the sum in double).
std::vector<float> option_summary(const std::vector<float>& z, const std::vector<float>& f0,
                                  const std::vector<std::size_t>& owner, std::size_t Q, std::int64_t W) {
  const auto Ws = static_cast<std::size_t>(W);
  const std::size_t N = owner.size();
  std::vector<float> s(Q * Ws, 0.0f);
  const float inv_sqrt_w = 1.0f / std::sqrt(static_cast<float>(W));
  for (std::size_t q = 0; q < Q; ++q) {
    std::vector<float> a;
    std::vector<std::size_t> members;
    for (std::size_t k = 0; k < N; ++k) {
      if (owner[k] != q) continue;
      members.push_back(k);
      a.push_back(dot(z.data() + k * Ws, f0.data() + q * Ws, W) * inv_sqrt_w);
    }
    const float mx = *std::max_element(a.begin(), a.end());
    double sum = 0.0;
    for (auto& e : a) {
      e = std::exp(e - mx);
      sum += static_cast<double>(e);
    }
    for (std::size_t j = 0; j < members.size(); ++j) {
      const auto w = static_cast<float>(static_cast<double>(a[j]) / sum);
      for (std::size_t i = 0; i < Ws; ++i) s[q * Ws + i] += w * z[members[j] * Ws + i];
    }
  }
  return s;
}

/// Step 13's anchors: normalize(u_q + g) per question, u [Q, H], g [H]; returns [Q, H].
std::vector<float> prior_anchors(const std::vector<float>& u, const std::vector<float>& g, std::size_t Q,
                                 std::int64_t H) {
  const auto Hs = static_cast<std::size_t>(H);
  std::vector<float> anchor(Q * Hs);
  for (std::size_t q = 0; q < Q; ++q) {
    std::vector<float> ug(Hs);
    for (std::size_t i = 0; i < Hs; ++i) ug[i] = u[q * Hs + i] + g[i];
    const auto nrm = l2_normalize(ug.data(), H);
    std::copy(nrm.begin(), nrm.end(), anchor.begin() + static_cast<std::ptrdiff_t>(q * Hs));
  }
  return anchor;
}

/// Step 14's residual scorer input per option k: [F_q, O_k, F_q ⊙ O_k, |F_q − O_k|] with q = owner[k];
/// fq [Q, W], on [N, W]; returns [N, 4W].
std::vector<float> pair_features(const std::vector<float>& fq, const std::vector<float>& on,
                                 const std::vector<std::size_t>& owner, std::int64_t W) {
  const auto Ws = static_cast<std::size_t>(W);
  const std::size_t N = owner.size();
  std::vector<float> pair(N * 4 * Ws);
  for (std::size_t k = 0; k < N; ++k) {
    const float* fk = fq.data() + owner[k] * Ws;
    const float* ok = on.data() + k * Ws;
    float* p = pair.data() + k * 4 * Ws;
    for (std::size_t i = 0; i < Ws; ++i) {
      p[i] = fk[i];
      p[Ws + i] = ok[i];
      p[2 * Ws + i] = fk[i] * ok[i];
      p[3 * Ws + i] = std::fabs(fk[i] - ok[i]);
    }
  }
  return pair;
}

}  // namespace

std::vector<float> JointHeadRecord::logits() const {
  if (fed_ != total_) {
    throw InternalError("joint head: logits() after " + std::to_string(fed_) + " of " + std::to_string(total_) +
                        " rows");
  }
  const JointHead& hd = head_;
  const JointHeadConfig& c = hd.cfg_;
  const std::int64_t H = c.hidden_size, W = c.width;
  const auto Hs = static_cast<std::size_t>(H), Ws = static_cast<std::size_t>(W);
  const std::size_t Q = questions_.size();
  std::vector<std::size_t> owner;
  for (std::size_t q = 0; q < Q; ++q) owner.insert(owner.end(), questions_[q].options.size(), q);
  const std::size_t N = owner.size();

  // Step 4: span means.
  std::vector<float> u(Q * Hs), cvec(N * Hs);
  std::size_t o = 0;
  for (std::size_t q = 0; q < Q; ++q) {
    const double inv = 1.0 / static_cast<double>(questions_[q].span.size());
    for (std::size_t i = 0; i < Hs; ++i) u[q * Hs + i] = static_cast<float>(question_sum_[q * Hs + i] * inv);
    for (const auto& s : questions_[q].options) {
      const double iv = 1.0 / static_cast<double>(s.size());
      for (std::size_t i = 0; i < Hs; ++i) cvec[o * Hs + i] = static_cast<float>(option_sum_[o * Hs + i] * iv);
      ++o;
    }
  }
  // Step 6: option queries Z = Wctx c + Wlex ℓ + Woq u_owner.
  std::vector<float> z = linear_rows(hd.option_context_, cvec);
  add_into(z, linear_rows(hd.option_lexical_, lexical_));
  const std::vector<float> uq = linear_rows(hd.option_question_, u);
  for (std::size_t k = 0; k < N; ++k) {
    for (std::size_t i = 0; i < Ws; ++i) z[k * Ws + i] += uq[owner[k] * Ws + i];
  }
  // Keys/values of the memory (steps 7 and 11) in two runs split at split_: the restored prefix (or
  // the same function of this record's own rows [0, split_)), then rows [split_, T).
  const std::int64_t base = prefix_ ? split_ : 0;
  std::shared_ptr<const HeadMemoryPrefix> first = prefix_;
  if (!first && split_ > 0) {
    first = hd.memory_prefix(std::span<const float>(memory_).first(static_cast<std::size_t>(split_ * W)));
  }
  const std::shared_ptr<const HeadMemoryPrefix> rest =
      hd.memory_prefix(std::span<const float>(memory_).subspan(static_cast<std::size_t>((split_ - base) * W),
                                                               static_cast<std::size_t>((total_ - split_) * W)));
  const auto memory_runs = [&](std::size_t layer) {
    std::vector<KvRun> runs;
    if (first) runs.push_back({first->keys[layer].data(), first->values[layer].data(), first->rows});
    runs.push_back({rest->keys[layer].data(), rest->values[layer].data(), rest->rows});
    return runs;
  };
  // Step 7: evidence routing (pre-norm cross-attention over the normed memory, then feed-forward).
  for (std::size_t i = 0; i < hd.routing_.size(); ++i) {
    const auto& r = hd.routing_[i];
    add_into(z, mha(r.attn, c.heads, layer_norm(r.query_norm, z), memory_runs(i)));
    add_into(z, feed_forward(r.ff1, r.ff2, layer_norm(r.ff_norm, z)));
  }
  // Step 8-9: base fields and the per-question option summary (softmax scaled by sqrt(W)).
  const std::vector<float> f0 = linear_rows(hd.question_, u);
  const std::vector<float> s = option_summary(z, f0, owner, Q, W);
  // Step 10: F = f0 + LN_summary(s) + Wglob g + type_embedding[t].
  std::vector<float> f = f0;
  add_into(f, layer_norm(hd.option_summary_norm_, s));
  const std::vector<float> gw = linear_rows(hd.global_, last_row_);
  for (std::size_t q = 0; q < Q; ++q) {
    const auto t = static_cast<std::size_t>(questions_[q].type_id);
    for (std::size_t i = 0; i < Ws; ++i) f[q * Ws + i] += gw[i] + hd.type_embedding_[t * Ws + i];
  }
  // Step 11: field decoder (norm_first TransformerDecoderLayer; cross-attention to the raw memory).
  for (std::size_t j = 0; j < hd.field_.size(); ++j) {
    const auto& l = hd.field_[j];
    const std::vector<float> n1 = layer_norm(l.norm1, f);
    add_into(f, mha(l.self_attn, c.heads, n1, n1));
    add_into(f, mha(l.cross_attn, c.heads, layer_norm(l.norm2, f), memory_runs(hd.routing_.size() + j)));
    add_into(f, feed_forward(l.linear1, l.linear2, layer_norm(l.norm3, f)));
  }
  // Step 12.
  const std::vector<float> fq = layer_norm(hd.field_norm_, f);
  const std::vector<float> on = layer_norm(hd.option_norm_, z);
  // Step 13: prior = P · <normalize(ℓ_o), normalize(u_q + g)>.
  const std::vector<float> anchor = prior_anchors(u, last_row_, Q, H);
  // Steps 14-15: joint = J·cos(F_q, O_o) + residual scorer; logit = prior + sigmoid(gate)·joint.
  std::vector<float> hidden = linear_rows(hd.scorer1_, pair_features(fq, on, owner, W));
  gelu_inplace(hidden);
  const std::vector<float> r = linear_rows(hd.scorer2_, hidden);
  std::vector<float> out(N);
  for (std::size_t k = 0; k < N; ++k) {
    const float* fk = fq.data() + owner[k] * Ws;
    const float* ok = on.data() + k * Ws;
    const auto ff = static_cast<double>(dot(fk, fk, W)), oo = static_cast<double>(dot(ok, ok, W)),
               fo = static_cast<double>(dot(fk, ok, W));
    const auto cosv = static_cast<float>(fo / std::max(std::sqrt(ff * oo), 1e-8));
    const std::vector<float> lex = l2_normalize(lexical_.data() + k * Hs, H);
    const float prior = hd.prior_scale_ * dot(lex.data(), anchor.data() + owner[k] * Hs, H);
    out[k] = prior + hd.gate_ * (hd.joint_scale_ * cosv + r[k]);
  }
  return out;
}

}  // namespace clef
