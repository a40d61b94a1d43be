#include "runtime/engine.h"

#include <chrono>

namespace clef {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

Engine::Engine(const std::string& model_dir, const EngineOptions& options)
    : options_(options), release_(open_release(model_dir)), tokenizer_(Tokenizer::load(model_dir)) {
  served_.name = release_.model_name;
  served_.aliases = options.aliases;
  served_.accept_any = options.accept_any_model;
  backbone_ = std::make_unique<Backbone>(release_, options.backbone);
  head_ = std::make_unique<JointHead>(release_.head, release_.head_config, release_.model.text.lm_head);
}

Engine::~Engine() = default;

Decision Engine::decide(std::string_view request_body, Dialect dialect) {
  const auto t0 = std::chrono::steady_clock::now();
  Decision d;
  const SystemOneRequest req = parse_request(request_body, options_.limits, dialect, served_);
  const EncodedRecord rec = encode_record(req, tokenizer_, options_.record);
  d.timings.tokenize = seconds_since(t0);
  d.input_tokens = static_cast<std::int64_t>(rec.input_ids.size());
  d.state_tokens_dropped = rec.state_tokens_dropped();

  JointHeadRecord head(*head_, rec.questions, rec.input_ids);
  SequenceState state = backbone_->new_state();
  double head_seconds = 0;
  const auto t1 = std::chrono::steady_clock::now();
  backbone_->prefill(rec.input_ids, state, [&](std::int64_t, const float* rows, std::int64_t count, std::int64_t hidden) {
    const auto th = std::chrono::steady_clock::now();
    head.feed(std::span<const float>(rows, static_cast<std::size_t>(count * hidden)));
    head_seconds += seconds_since(th);
  });
  d.timings.prefill = seconds_since(t1) - head_seconds;
  const auto t2 = std::chrono::steady_clock::now();
  const std::vector<float> logits = head.logits();
  d.timings.head = head_seconds + seconds_since(t2);

  // A random-weight model always says so; otherwise the request's model is echoed (reference).
  const std::string& model = random_weights() ? release_.model_name : req.model;
  const std::string extra =
      d.state_tokens_dropped > 0 ? "\"state_tokens_dropped\":" + std::to_string(d.state_tokens_dropped) : "";
  d.body = build_response_json(req, model, logits, d.input_tokens, options_.answers, extra);
  d.timings.total = seconds_since(t0);
  return d;
}

}  // namespace clef
