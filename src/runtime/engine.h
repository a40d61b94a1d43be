// The decision engine: one loaded Clef release that turns a SystemOne request body into a
// SystemOne response body. Request -> encode_record (tokenizer) -> chunked backbone prefill ->
// joint head fed row chunk by row chunk -> per-question softmax -> answers. It never sees HTTP;
// the CLI and the server call decide().
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "decision/answers.h"
#include "decision/joint_head.h"
#include "decision/record.h"
#include "decision/request.h"
#include "runtime/backbone.h"
#include "runtime/release.h"
#include "tokenizer/tokenizer.h"

namespace clef {

struct EngineOptions {
  BackboneOptions backbone;   ///< precision, chunk size, threads
  RecordOptions record;       ///< max_length (default 16,384) and the overflow policy
  RequestLimits limits;       ///< question / option / level counts
  AnswerOptions answers;      ///< confidence mode, Jev legend
  /// Model names the engine answers to besides the release's own; accept_any echoes any name
  /// (the reference's behaviour, right for a CLI where the folder chooses the model).
  std::vector<std::string> aliases;
  bool accept_any_model = false;
};

/// Wall-clock seconds per stage of one decision.
struct DecisionTimings {
  double tokenize = 0, prefill = 0, head = 0, total = 0;
};

/// One decision's outcome.
struct Decision {
  std::string body;                ///< the SystemOne response (compact JSON)
  std::int64_t input_tokens = 0;
  std::int64_t state_tokens_dropped = 0;
  DecisionTimings timings;
};

/// A loaded model ready to decide. Not thread-safe: one decision at a time (the scheduler of the
/// server serialises calls; the weights are shared read-only).
class Engine {
 public:
  /// Opens and validates the release folder, the tokenizer, the backbone and the head. Throws
  /// ModelLoadError / Unsupported / IoError / InvalidArgument (bad options).
  Engine(const std::string& model_dir, const EngineOptions& options);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  /// Decides one request body (UTF-8 JSON). Throws RequestError (a 4xx: code + JSON path) for a
  /// request it refuses; any other exception is an engine fault.
  Decision decide(std::string_view request_body, Dialect dialect = Dialect::kSystemOne);

  /// The name responses carry: a random-weight model's "-random" name, else the folder's name.
  const std::string& model_name() const noexcept { return release_.model_name; }
  bool random_weights() const noexcept { return release_.random_weights.has_value(); }
  const ReleaseFolder& release() const noexcept { return release_; }
  const Tokenizer& tokenizer() const noexcept { return tokenizer_; }

 private:
  EngineOptions options_;
  ReleaseFolder release_;
  Tokenizer tokenizer_;
  ServedModel served_;
  std::unique_ptr<Backbone> backbone_;
  std::unique_ptr<JointHead> head_;
};

}  // namespace clef
