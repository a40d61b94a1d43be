// SPDX-License-Identifier: MIT
// The decision engine: one loaded Clef release that turns a SystemOne request body into a
// SystemOne response body. Request -> encode_record (tokenizer) -> chunked backbone prefill ->
// joint head fed row chunk by row chunk -> per-question softmax -> answers. It never sees HTTP;
// the CLI and the server call decide().
//
// The prefill always splits at the end of the state (EncodedRecord::state_end()): rows
// [0, state_end) in chunks, then [state_end, T) in chunks. The first part depends only on the
// prefix + state tokens; it is computed once and kept in a StateCache, and a later
// request with the same prefix + state restores it and runs only its schema + suffix tokens. Cold,
// warm and cache-off runs do the very same arithmetic, so their answers are bit-identical.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "decision/answers.h"
#include "models/joint_head/joint_head.h"
#include "decision/record.h"
#include "decision/request.h"
#include "runtime/backbone.h"
#include "runtime/release.h"
#include "runtime/state_cache.h"
#include "runtime/step_batcher.h"
#include "models/qwen35/vision_tower.h"
#include "vision/image.h"
#include "vision/preprocess.h"
#include "tokenizer/tokenizer.h"

namespace clef {

struct EngineOptions {
  BackboneOptions backbone;  ///< precision, chunk size, threads
  RecordOptions record;      ///< max_length (default 16,384) and the overflow policy
  RequestLimits limits;      ///< question / option / level counts
  AnswerOptions answers;     ///< confidence mode, Jev legend
  /// Model names the engine answers to besides the release's own; accept_any echoes any name
  /// (the reference's behaviour, right for a CLI where the folder chooses the model).
  std::vector<std::string> aliases;
  bool accept_any_model = false;
  /// Byte budget of the state cache in MiB; 0 disables it. Entries count the backbone
  /// state (with the KV room reserved for later rows) and the head's cached keys/values. The
  /// default holds one maximum-length (16,384-token) state of the flash preset (~1.8 GiB) or two
  /// of 0.8b (~0.9 GiB each).
  /// Ignored (cache off) with backbone.padded_readout, whose 64-position call grid runs over the
  /// whole record.
  static constexpr std::int64_t kDefaultStateCacheMb = 2048;
  std::int64_t state_cache_mb = kDefaultStateCacheMb;
  /// Images (docs/PROTOCOL.md §1.5, §3.6): accepted when the release has a vision tower
  /// and this is true; decoded within `image_limits`.
  bool images = true;
  ImageLimits image_limits;
  /// The vision tower's bound (docs/COMPATIBILITY.md "limits and guards"): pixels per image after
  /// the processor's resize (width' * height', 256 per patch). An image over it is refused
  /// (image_over_pixel_limit), never resized differently from the reference; 0 = no bound beyond
  /// the processor's max_pixels. Default 200,704 (448 x 448, 784 patches, 196 image tokens): the
  /// cap the clef-vision-0.8b student was trained with (docs/MODEL.md §14).
  static constexpr std::uint64_t kDefaultMaxImagePixels = 200704;
  std::uint64_t max_image_pixels = kDefaultMaxImagePixels;
  /// Seed-000 fixed-grid mode: 0 = the processor's smart resize (keeps the aspect ratio); 8 or 14 =
  /// resize every image to 256x256 / 448x448 pixels (merged grid 8x8 / 14x14), aspect not kept.
  int vision_grid = 0;
  /// How images are read (docs/VISION.md): kTorchvision (default) = what Cloudflare's reference
  /// does with a request (transformers' torchvision decode: alpha dropped, EXIF orientation
  /// applied; torchvision's antialiased bicubic; fused rescale + normalize); kPil = transformers'
  /// PIL processor handed PIL images (alpha composited on white, no EXIF, Pillow 13 bicubic).
  ImageBackend image_backend = ImageBackend::kTorchvision;
  /// Continuous batching (docs/ARCHITECTURE.md "Continuous batching"): with `batching` the engine
  /// runs its model work on one compute thread (runtime/step_batcher.h) and decide() may be called
  /// from several threads at once, their prefill chunks batched into shared steps of at most
  /// `batch.max_step_tokens` tokens (0 there = the chunk size). Answers are bit-identical either way.
  bool batching = false;
  StepBatcherOptions batch{0};
  /// A projector GGUF giving a GGUF model its vision tower (OpenReleaseOptions::mmproj); "" = none.
  std::string mmproj;
  /// Tokenizer load options; `split_override` chooses the split regex (default: the file's,
  /// docs/TOKENIZER.md "Which split regex").
  TokenizerLoadOptions tokenizer;
};

/// How a decision used the state cache.
enum class StateCacheUse : std::uint8_t {
  kOff,   ///< no cache (budget 0 or padded readout)
  kMiss,  ///< the prefix + state was computed (and published if it fits the budget)
  kHit,   ///< the prefix + state was restored from the cache
};
/// "off", "miss" or "hit".
const char* state_cache_use_name(StateCacheUse u) noexcept;

/// Wall-clock seconds per stage of one decision.
struct DecisionTimings {
  double tokenize = 0, prefill = 0, head = 0, total = 0;
  /// Taking a cached (or just computed) prefix state: lending its KV buffers (or copying them when
  /// the request has more new rows than the entry's room) and copying its GDN states; part of total
  double state_restore = 0;
  double vision = 0;  ///< image decoding, preprocessing and the vision tower; part of total
  /// From the start of decide() to the end of its first prefill step (the first hidden rows): with
  /// batching, the wait for a place in a step shows here
  double first_step = 0;
};

/// One decision's outcome.
struct Decision {
  std::string body;  ///< the SystemOne response (compact JSON)
  std::int64_t input_tokens = 0;
  std::int64_t state_tokens_dropped = 0;
  DecisionTimings timings;
  StateCacheUse state_cache = StateCacheUse::kOff;
  std::int64_t reused_tokens = 0;  ///< prefix + state tokens restored instead of computed (a hit)
  std::int64_t stored_tokens = 0;  ///< prefix + state tokens this decision computed and the cache kept (a miss)
  /// The contract the body was read in (Dialect::kDecisions resolved by the body's shape) and
  /// `body` is written in: kOpenAI or the dialect decide() was given.
  Dialect contract = Dialect::kSystemOne;
  bool state_lent = false;  ///< the cache entry's KV buffers were lent to this decision, not copied (StateLoan)
  /// The state key (for balancers, docs/DEPLOYMENT.md): lower-case hex SHA-256 of (the routing
  /// identity, the prefix + state token ids, the images' data URLs), see Engine::routing_identity
  /// and docs/DEPLOYMENT.md. Equal for requests about the same state of the same model on every
  /// replica, whatever their cache budget, threads or folder path; computed with the cache on or
  /// off. `clef serve` sends it as `X-Clef-State-Key` so that a balancer can route a state's
  /// requests to one replica.
  std::string state_key;
  std::vector<float> logits;  ///< [N] option logits in model order (request order, §3.4 options)
};

/// A request parsed, with its images decoded and preprocessed (Engine::prepare): everything the
/// engine thread needs besides the tower and the prefill. Movable; owns its data.
struct PreparedRequest {
  SystemOneRequest request;
  std::vector<VisionInput> images;         ///< preprocessed tower inputs, request order (empty: none)
  std::string image_key;                   ///< the data URLs, length-prefixed: part of the state cache key
  Dialect contract = Dialect::kSystemOne;  ///< the contract the body was read in (see Decision::contract)
  double parse_seconds = 0;                ///< parsing and validating the body
  double image_seconds = 0;                ///< decoding and preprocessing the images
  /// The prompt's tokens and spans (encode_record, with the images' token counts), or empty when
  /// the request was built without prepare() (decide() then encodes it).
  std::optional<EncodedRecord> record;
  double record_seconds = 0;  ///< encoding the record
  /// Bytes the prepared images hold (their pixel_values), for memory budgets.
  std::size_t image_bytes() const noexcept;
};

/// Thrown by Engine::decide when its stop flag was set: the decision was abandoned at a step
/// boundary (not an error of the request or the engine).
class DecisionStopped : public std::exception {
 public:
  const char* what() const noexcept override { return "the decision was stopped before its answer"; }
};

/// A loaded model ready to decide. Without EngineOptions::batching, not thread-safe: one decision
/// at a time (the caller serialises calls; the weights are shared read-only). With it, decide(),
/// prepare() and hidden_states() may run on several threads at once.
class Engine {
 public:
  /// Opens and validates the release folder, the tokenizer, the backbone and the head. Throws
  /// ModelLoadError / Unsupported / IoError / InvalidArgument (bad options).
  Engine(const std::string& model_dir, const EngineOptions& options);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  /// Decides one request body (UTF-8 JSON). With Dialect::kOpenAI, or kDecisions and a body of
  /// OpenAI's shape, the body is OpenAI's Decisions contract and so is the answer
  /// (decision/openai_decisions.h). Throws RequestError (a 4xx: code + JSON path) for a request it
  /// refuses; any other exception is an engine fault.
  Decision decide(std::string_view request_body, Dialect dialect = Dialect::kSystemOne);

  /// The first half of decide(): parses and validates the body, then decodes and preprocesses its
  /// images within the image limits, --max-image-pixels and the record's token budget (file
  /// headers are checked before any pixel is decoded), then encodes the record (its token count
  /// is then known: decision_bytes()). Thread-safe (reads only what the
  /// constructor set), so the server runs it off the engine thread: a refused image never waits
  /// for a running decision. Throws the RequestError decide() would throw at those steps.
  /// This is the one parse of a body: decide(prepared) reads only the parsed value.
  /// `contract`, when given, receives the contract the body is read in (parse_request()), set
  /// before a RequestError is thrown, so that the caller answers in that contract's shape;
  /// `top_members`, when given, the body's top-level members as sent (parse_json(): views into
  /// `request_body`, for the server's route key).
  PreparedRequest prepare(std::string_view request_body, Dialect dialect = Dialect::kSystemOne,
                          Dialect* contract = nullptr, std::vector<JsonMemberText>* top_members = nullptr) const;
  /// The second half: the vision tower, the record, the prefill and the answer. decide(body) is
  /// decide(prepare(body)), with the same result bit for bit.
  ///
  /// `stop`, when given, is read between steps, after every prefill chunk (at most one chunk,
  /// --chunk tokens, apart) and before and after the head's last step (its logits over the memory
  /// rows, which runs to its end): once it is true the decision ends by throwing DecisionStopped,
  /// having given back every buffer it took (a state entry it borrowed is restored to its rows). A
  /// stop inside the prefill of the state part publishes nothing to the state cache; once that part
  /// is done its state is complete and stays published (a later request on the same state reuses it).
  /// Set it from any thread (the server does when the client disconnects).
  Decision decide(PreparedRequest prepared, const std::atomic<bool>* stop = nullptr);

  /// The backbone's final-norm hidden states of `ids` from a fresh state: [ids.size(), hidden_size()]
  /// float32, row-major, in the engine's precision, chunk size and threads, so equal to what
  /// `clef hidden` writes for the same ids and options (docs/ARCHITECTURE.md "Data flow, request to answer"). Touches
  /// no cache. Throws InvalidArgument for no ids or an id outside the embedding table. Not
  /// thread-safe (one call or decision at a time, like decide()).
  std::vector<float> hidden_states(std::span<const std::int32_t> ids);
  /// Bytes a decision of `prepared` holds at its peak beyond the engine's shared buffers, for
  /// admission control (docs/DEPLOYMENT.md "Sizing a batching server"): its backbone state with
  /// KV room for all its T tokens (a warm request borrowing a cached entry holds less), the head's
  /// per-row values (projected memory rows and the keys/values of its T rows), its prepared images
  /// and its chunk's rows. Requires prepared.record (prepare() sets it).
  std::size_t decision_bytes(const PreparedRequest& prepared) const;
  /// The record length bound (RecordOptions::max_length), tokens.
  std::int64_t max_record_tokens() const noexcept { return options_.record.max_length; }
  /// The batcher of a batching engine (null otherwise), e.g. for its step observer.
  StepBatcher* batcher() noexcept { return batcher_.get(); }

  /// Width of a hidden-state row (the backbone's hidden_size).
  std::int64_t hidden_size() const noexcept;

  /// The name responses carry: a random-weight model's "-random" name, else the folder's name.
  const std::string& model_name() const noexcept { return release_.model_name; }
  bool random_weights() const noexcept { return release_.random_weights.has_value(); }
  const ReleaseFolder& release() const noexcept { return release_; }
  const Tokenizer& tokenizer() const noexcept { return tokenizer_; }

  /// Counters of the state cache (all zero with budget 0 when it is off). Thread-safe.
  StateCacheStats state_cache_stats() const;
  /// The model identity that keys the state cache: a SHA-256 over the release folder's canonical
  /// path, every file's name, size and modification time, and the options that change numbers
  /// (precision, chunk size, threads, padded readout, pad id).
  const std::string& model_identity() const noexcept { return identity_; }
  /// The replica-independent model identity of Decision::state_key: a SHA-256 (hex) over the
  /// release folder's regular files, sorted by name: name, size and a SHA-256 of the bytes (whole
  /// files up to 16 MiB, else the first and last MiB), then the same of the --mmproj projector file
  /// when there is one (it may live elsewhere). No path, modification time, folder name or engine
  /// option, so copies of one release on several hosts agree. Computed once at load.
  const std::string& routing_identity() const noexcept { return routing_identity_; }

 private:
  /// The image processor settings: the release's processor_config.json image_processor or
  /// preprocessor_config.json, or a GGUF model's projector (ReleaseFolder::preprocessor; images
  /// are refused without any) and the fixed-grid option.
  VisionPreprocessConfig preprocess_config() const;

  // The steps of decide(), in order.
  struct Call;
  struct RequestMedia;
  struct PreparedRecord;
  /// Images: runs the vision tower on the prepared images (their pixel values are released).
  RequestMedia request_images(PreparedRequest& prepared) const;
  /// Decodes and preprocesses a parsed request's images into `prepared` (see prepare()).
  void prepare_images(PreparedRequest& prepared) const;
  /// Record: the prompt's tokens and spans (encode_record) and, with images, the M-RoPE positions.
  /// `rec` is the record prepare() encoded (encoded here when absent).
  PreparedRecord prepare_record(const SystemOneRequest& req, RequestMedia media,
                                std::optional<EncodedRecord> rec) const;
  /// Runs `fn` where the model's parallel work runs: on the batcher's compute thread with
  /// batching, else right here.
  void compute(const std::function<void()>& fn);
  /// Backbone prefill of record rows [a, b) on `st`, with the positions and image rows of that range.
  /// Throws DecisionStopped before a chunk or after one once `*stop` is set.
  void prefill_range(const PreparedRecord& p, std::int64_t a, std::int64_t b, SequenceState& st,
                     const HiddenConsumer& consumer, Call& call);
  /// Prefill with the state cache: rows [0, split) restored from the cache or computed (and
  /// published), or fed to `head` directly when the cache is off; then rows [split, T) fed to
  /// `head`. Sets d.state_key, d.state_cache, d.reused_tokens and d.timings.state_restore; returns
  /// the seconds spent in the head meanwhile.
  /// `cache_scope` is appended to the cache key (OpenAI's prompt_cache_key); `use_cache` false
  /// bypasses the cache for this decision.
  double prefill_record(const PreparedRecord& p, std::int64_t split, JointHeadRecord& head, Decision& d,
                        const std::string& cache_scope, bool use_cache, Call& call);

  EngineOptions options_;
  ReleaseFolder release_;
  Tokenizer tokenizer_;
  ServedModel served_;
  std::unique_ptr<Backbone> backbone_;
  std::unique_ptr<JointHead> head_;
  std::string identity_;
  std::string routing_identity_;
  std::unique_ptr<StateCache> cache_;           ///< null when off
  std::unique_ptr<qwen35::VisionTower> tower_;  ///< null when images are off or the release has no tower
  std::unique_ptr<StepBatcher> batcher_;        ///< null without batching
  std::size_t state_bytes_per_token_ = 0;       ///< KV bytes a state adds per token (decision_bytes)
  std::size_t state_fixed_bytes_ = 0;           ///< a fresh state's bytes (GDN conv + recurrent states)
  std::int64_t fixed_text_tokens_ = 0;          ///< tokens of the prompt prefix + suffix (54 with Qwen3.5's tokenizer)
};

}  // namespace clef
