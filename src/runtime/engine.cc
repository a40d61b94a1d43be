// SPDX-License-Identifier: MIT
#include "runtime/engine.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"
#include "decision/dialects.h"
#include "decision/openai_decisions.h"
#include "models/qwen35/mrope_positions.h"
#include "ops/parallel.h"
#include "runtime/release_identity.h"
#include "vision/request_images.h"

namespace clef {
namespace {

/// Room a new state cache entry reserves past its prefix for later requests' own rows (so that
/// StateLoan lends its KV buffers instead of copying them): twice the computing request's rows,
/// and at least a quarter of the prefix's up to this many (10 typical questions); never more rows
/// than the prefix (what lending saves is a copy of the prefix's rows, so a short state asked a long
/// question is copied instead of reserving room many times its size) nor past the record budget.
/// For a 16k-token state the room is 1/8 more KV memory.
constexpr std::int64_t kLoanRoomRows = 2048;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// Throws DecisionStopped once `*stop` (if given) is set.
void check_stop(const std::atomic<bool>* stop) {
  if (stop != nullptr && stop->load(std::memory_order_relaxed)) throw DecisionStopped();
}

}  // namespace

const char* state_cache_use_name(StateCacheUse u) noexcept {
  switch (u) {
    case StateCacheUse::kMiss: return "miss";
    case StateCacheUse::kHit: return "hit";
    case StateCacheUse::kOff: break;
  }
  return "off";
}

namespace {
OpenReleaseOptions release_options(const EngineOptions& o) {
  OpenReleaseOptions r;
  r.mmproj = o.mmproj;
  return r;
}
}  // namespace

Engine::Engine(const std::string& model_dir, const EngineOptions& options)
    : options_(options),
      release_(open_release(model_dir, release_options(options))),
      tokenizer_(load_release_tokenizer(release_, options.tokenizer)) {
  if (options.state_cache_mb < 0 || options.state_cache_mb > (std::int64_t{1} << 30)) {
    throw InvalidArgument("state cache budget must be in [0, 2^30] MiB, got " + std::to_string(options.state_cache_mb));
  }
  served_.name = release_.model_name;
  served_.aliases = options.aliases;
  served_.accept_any = options.accept_any_model;
  backbone_ = std::make_unique<Backbone>(release_, options.backbone);
  head_ = std::make_unique<JointHead>(release_.head, release_.head_config, release_.model.text.lm_head);
  identity_ = engine_identity(release_, *backbone_);
  routing_identity_ = release_routing_identity(release_);
  fixed_text_tokens_ =
      static_cast<std::int64_t>(tokenizer_.encode(record_prefix()).size() + tokenizer_.encode(kSuffix).size());
  if (options.vision_grid != 0 && options.vision_grid != 8 && options.vision_grid != 14) {
    throw InvalidArgument("vision grid must be 0 (smart resize), 8 or 14, got " + std::to_string(options.vision_grid));
  }
  if (options.images && !release_.gguf.empty() && !release_.model.vision) {
    options_.limits.images_refused_because =
        "a GGUF model does not hold the vision tower; give its projector file with --mmproj (e.g. "
        "mmproj-Clef-Flash-Q8_0.gguf)";
  } else if (options.images && release_.model.vision && release_.config.vision && !release_.preprocessor) {
    // No image settings: refuse images by name rather than preprocess them with guessed values.
    options_.limits.images_refused_because =
        "the model folder has neither processor_config.json (with an image_processor object) nor "
        "preprocessor_config.json, so its image settings are unknown";
  } else if (options.images && release_.model.vision && release_.config.vision) {
    qwen35::VisionTowerOptions vo;
    vo.precision = options.backbone.precision;
    tower_ = std::make_unique<qwen35::VisionTower>(*release_.config.vision, *release_.model.vision, vo);
    options_.limits.accept_images = true;
  }
  if (options.state_cache_mb > 0 && !options.backbone.padded_readout) {
    cache_ = std::make_unique<StateCache>(static_cast<std::size_t>(options.state_cache_mb) << 20);
  }
  {
    // What a state costs: a fresh one (GDN states) and the KV bytes per token (reserving 1,024).
    SequenceState st = backbone_->new_state();
    state_fixed_bytes_ = st.capacity_bytes();
    constexpr std::int64_t kProbe = 1024;
    st.reserve_kv(kProbe);
    state_bytes_per_token_ = (st.capacity_bytes() - state_fixed_bytes_ + kProbe - 1) / kProbe;
  }
  if (options.batching) {
    StepBatcherOptions bo = options.batch;
    bo.threads = options.backbone.threads;
    if (bo.max_step_tokens == 0)
      bo.max_step_tokens = options.backbone.padded_readout ? kStaticReadoutRows : options.backbone.chunk_size;
    batcher_ = std::make_unique<StepBatcher>(backbone_->model(), bo);
  }
}

Engine::~Engine() = default;

VisionPreprocessConfig Engine::preprocess_config() const {
  VisionPreprocessConfig c;
  if (release_.preprocessor) {
    const PreprocessorConfig& p = *release_.preprocessor;
    c.patch_size = static_cast<std::uint32_t>(p.patch_size);
    c.merge_size = static_cast<std::uint32_t>(p.merge_size);
    c.temporal_patch_size = static_cast<std::uint32_t>(p.temporal_patch_size);
    c.min_pixels = static_cast<std::uint64_t>(p.min_pixels);
    c.max_pixels = static_cast<std::uint64_t>(p.max_pixels);
    c.rescale_factor = p.rescale_factor;
    for (int i = 0; i < 3; ++i) {
      c.image_mean[static_cast<std::size_t>(i)] = static_cast<float>(p.image_mean[static_cast<std::size_t>(i)]);
      c.image_std[static_cast<std::size_t>(i)] = static_cast<float>(p.image_std[static_cast<std::size_t>(i)]);
    }
  }
  c.backend = options_.image_backend;
  if (options_.vision_grid > 0) {
    c.fixed_side = static_cast<std::uint32_t>(options_.vision_grid) * c.patch_size * c.merge_size;
  }
  return c;
}

StateCacheStats Engine::state_cache_stats() const { return cache_ ? cache_->stats() : StateCacheStats{}; }

/// A request's images, decoded and through the vision tower (empty when it has none).
struct Engine::RequestMedia {
  std::vector<std::int64_t> tokens;      ///< merged tokens per image: sizes the prompt's media block
  std::vector<qwen35::ImageGrid> grids;  ///< patch grid per image (request order)
  std::vector<float> rows;               ///< [Σ tokens, H] tower output, replacing the image pads
  std::string key;                       ///< the data URLs, length-prefixed: part of the state cache key
};

/// One decide() call: its stop flag and start, and when its first rows came.
struct Engine::Call {
  const std::atomic<bool>* stop = nullptr;
  std::chrono::steady_clock::time_point start;
  double first_rows = 0;  ///< seconds from start to the first hidden rows (0: none yet)
};

/// An encoded record with what its prefill calls need.
struct Engine::PreparedRecord {
  EncodedRecord rec;
  RequestMedia media;
  qwen35::MropePositions mrope;  ///< [3, T] M-RoPE positions (§7.1); empty without images
  std::int32_t image_pad = -1;   ///< the `<|image_pad|>` id
  std::int64_t tokens() const noexcept { return static_cast<std::int64_t>(rec.input_ids.size()); }
};

void Engine::prepare_images(PreparedRequest& prepared) const {
  // Images: decode + preprocess (request order); their merged-token counts size the media block of
  // the prompt (docs/PROTOCOL.md §3.2 step 2, §3.6; docs/MODEL.md §6).
  const SystemOneRequest& req = prepared.request;
  if (req.images.is_null()) return;
  if (options_.backbone.padded_readout) {
    throw RequestError(RequestErrorCode::kImagesUnsupported, JsonPath().key("images"),
                       "images are not supported with the static-shape (padded) readout");
  }
  // Refuse from the file headers an image set that could never fit the record: the budget left
  // after the prompt's fixed text (prefix, suffix, one vision_start/end pair per image, "\n", and
  // at least one schema token); encode_record checks the exact total afterwards. Likewise an image
  // the processor would resize past --max-image-pixels.
  const VisionPreprocessConfig pc = preprocess_config();
  ImageLimits limits = options_.image_limits;
  const std::int64_t n_images = req.images.is_array() ? static_cast<std::int64_t>(req.images.size()) : 0;
  const std::int64_t room = options_.record.max_length - fixed_text_tokens_ - 2 * n_images - 2;
  limits.max_image_tokens = static_cast<std::uint64_t>(std::max<std::int64_t>(room, 0));
  limits.tokens_for_size = [&pc](std::uint64_t w, std::uint64_t h) -> std::uint64_t {
    try {
      const ImageGrid g = image_grid_for_size(static_cast<std::uint32_t>(w), static_cast<std::uint32_t>(h), 0, pc);
      const auto merge = static_cast<std::int64_t>(pc.merge_size);
      return static_cast<std::uint64_t>(g.t * (g.h / merge) * (g.w / merge));
    } catch (const RequestError&) {
      return 0;  // e.g. the aspect ratio: preprocess_image reports it with the image's own index
    }
  };
  limits.max_resized_pixels = options_.max_image_pixels;
  limits.resized_size = [&pc](std::uint64_t w, std::uint64_t h) -> std::pair<std::uint64_t, std::uint64_t> {
    try {
      const ImageGrid g = image_grid_for_size(static_cast<std::uint32_t>(w), static_cast<std::uint32_t>(h), 0, pc);
      return {static_cast<std::uint64_t>(g.w) * pc.patch_size, static_cast<std::uint64_t>(g.h) * pc.patch_size};
    } catch (const RequestError&) {
      return {0, 0};  // the aspect ratio: preprocess_image reports it with the image's own index
    }
  };
  ImageDecodeOptions decode;
  if (options_.image_backend == ImageBackend::kPil) {
    decode.alpha = AlphaMode::kCompositeOnWhite;
    decode.apply_exif_orientation = false;
    decode.first_frame_of_animation = true;  // Pillow opens an animated WebP at its first frame
  }
  RequestImages images = prepare_request_images(&req.images, limits, decode, pc);
  prepared.images = std::move(images.inputs);
  for (const JsonValue& url : req.images.items()) {
    prepared.image_key += std::to_string(url.as_string().size()) + ":" + url.as_string();
  }
}

Engine::RequestMedia Engine::request_images(PreparedRequest& prepared) const {
  RequestMedia m;
  std::vector<float> pixels;
  std::int64_t patches = 0;
  for (VisionInput& in : prepared.images) {
    m.tokens.push_back(in.num_tokens);
    m.grids.push_back(qwen35::ImageGrid{in.grid.t, in.grid.h, in.grid.w});
    pixels.insert(pixels.end(), in.pixel_values.begin(), in.pixel_values.end());
    std::vector<float>().swap(in.pixel_values);
    patches += in.rows;
  }
  m.key = std::move(prepared.image_key);
  m.rows = tower_->forward(pixels.data(), patches, m.grids);
  return m;
}

Engine::PreparedRecord Engine::prepare_record(const SystemOneRequest& req, RequestMedia media,
                                              std::optional<EncodedRecord> rec) const {
  PreparedRecord p;
  p.rec = rec ? std::move(*rec) : encode_record(req, tokenizer_, options_.record, media.tokens);
  p.media = std::move(media);
  p.image_pad = static_cast<std::int32_t>(release_.config.image_token_id);
  if (!p.media.grids.empty()) {
    p.mrope = qwen35::mrope_positions(p.rec.input_ids, p.image_pad, p.media.grids,
                                      release_.config.vision->spatial_merge_size);
  }
  return p;
}

void Engine::prefill_range(const PreparedRecord& p, std::int64_t a, std::int64_t b, SequenceState& st,
                           const HiddenConsumer& feed, Call& call) {
  const std::atomic<bool>* stop = call.stop;
  const std::vector<std::int32_t>& ids = p.rec.input_ids;
  const std::span<const std::int32_t> part(ids.data() + a, static_cast<std::size_t>(b - a));
  check_stop(stop);
  // The backbone calls its consumer after each chunk, outside its parallel loops (on the batcher's
  // compute thread with batching, which hands the exception back here), so the stop may throw from it.
  const HiddenConsumer consumer = [&](std::int64_t at, const float* rows, std::int64_t count, std::int64_t hidden) {
    if (call.first_rows == 0) call.first_rows = std::max(seconds_since(call.start), 1e-9);
    feed(at, rows, count, hidden);
    check_stop(stop);
  };
  if (p.media.grids.empty()) {
    if (!backbone_->prefill(part, st, consumer, nullptr, batcher_.get(), stop)) throw DecisionStopped();
    return;
  }
  // The call's slice of the record's [3, T] positions, and its image rows: those of the pads in
  // [a, b) (pads all sit in the prefix, but stay general).
  const std::int64_t T = p.tokens();
  std::vector<std::int32_t> positions(static_cast<std::size_t>(3 * (b - a)));
  for (std::int64_t r = 0; r < 3; ++r) {
    std::copy(p.mrope.pos.begin() + r * T + a, p.mrope.pos.begin() + r * T + b, positions.begin() + r * (b - a));
  }
  const auto pads_before = std::count(ids.begin(), ids.begin() + a, p.image_pad);
  const auto pads_in = std::count(part.begin(), part.end(), p.image_pad);
  const std::int64_t H = backbone_->hidden_size();
  PrefillMedia media;
  media.positions = positions;
  media.image_token_id = p.image_pad;
  media.image_rows = std::span<const float>(p.media.rows)
                         .subspan(static_cast<std::size_t>(pads_before * H), static_cast<std::size_t>(pads_in * H));
  if (!backbone_->prefill(part, st, consumer, &media, batcher_.get(), stop)) throw DecisionStopped();
}

double Engine::prefill_record(const PreparedRecord& p, std::int64_t split, JointHeadRecord& head, Decision& d,
                              const std::string& cache_scope, bool use_cache, Call& call) {
  const std::span<const std::int32_t> ids(p.rec.input_ids);
  double head_seconds = 0;
  const HiddenConsumer feed_head = [&](std::int64_t, const float* rows, std::int64_t count, std::int64_t hidden) {
    const auto th = std::chrono::steady_clock::now();
    head.feed(std::span<const float>(rows, static_cast<std::size_t>(count * hidden)));
    head_seconds += seconds_since(th);
  };
  const std::span<const std::byte> image_bytes =
      std::as_bytes(std::span<const char>(p.media.key.data(), p.media.key.size()));
  // The routing key covers the prefix + state whether or not this run splits or caches there.
  d.state_key = state_cache_key(routing_identity_, ids.first(static_cast<std::size_t>(p.rec.state_end())), image_bytes);
  if (split > 0 && cache_ && use_cache) {
    // Rows [0, split) from the cache, or computed and published: the backbone state and the head's
    // keys/values of the prefix's memory rows (what JointHeadRecord computes for them itself).
    const auto compute_entry = [&]() -> StateCache::EntryPtr {
      auto e = std::make_shared<StateCacheEntry>();
      e->state = backbone_->new_state();
      const std::int64_t room = std::min(std::max(2 * (p.tokens() - split), std::min(split / 4, kLoanRoomRows)), split);
      e->state.reserve_kv(std::min(split + room, options_.record.max_length));  // below the rows: no-op
      e->rows = split;
      std::vector<float> memory;  // the prefix's projected memory rows [split, W]
      memory.reserve(static_cast<std::size_t>(split * head_->config().width));
      prefill_range(
          p, 0, split, e->state,
          [&](std::int64_t, const float* rows, std::int64_t count, std::int64_t hidden) {
            const auto th = std::chrono::steady_clock::now();
            const std::vector<float> m =
                head_->project_memory(std::span<const float>(rows, static_cast<std::size_t>(count * hidden)));
            memory.insert(memory.end(), m.begin(), m.end());
            head_seconds += seconds_since(th);
          },
          call);
      const auto th = std::chrono::steady_clock::now();
      compute([&] { e->head = head_->memory_prefix(memory); });
      head_seconds += seconds_since(th);
      return e;
    };
    // A scope (OpenAI's prompt_cache_key, docs/PROTOCOL.md §7.6) joins the images in the key: a
    // scoped entry is found only by requests of the same scope.
    std::string scoped = p.media.key;
    if (!cache_scope.empty()) scoped += "scope:" + std::to_string(cache_scope.size()) + ":" + cache_scope;
    const StateCache::Result r =
        cache_->get_or_compute(state_cache_key(identity_, ids.first(static_cast<std::size_t>(split)),
                                               std::as_bytes(std::span<const char>(scoped.data(), scoped.size()))),
                               compute_entry);
    d.state_cache = r.hit ? StateCacheUse::kHit : StateCacheUse::kMiss;
    d.reused_tokens = r.hit ? split : 0;
    d.stored_tokens = r.stored ? split : 0;
    const auto tr = std::chrono::steady_clock::now();
    // Lent (the entry's KV buffers, given back when it ends) one decision at a time; a batching engine,
    // whose decisions may share the entry, copies.
    StateLoan loan(r.entry, p.tokens() - split, !batcher_);
    d.state_lent = loan.lent();
    head.restore_prefix(r.entry->head);
    d.timings.state_restore = seconds_since(tr);
    prefill_range(p, split, p.tokens(), loan.state(), feed_head, call);
    return head_seconds;
  }
  SequenceState state = backbone_->new_state();
  state.reserve_kv(p.tokens());  // the room decision_bytes() counts, taken once
  if (split > 0) prefill_range(p, 0, split, state, feed_head, call);
  prefill_range(p, split, p.tokens(), state, feed_head, call);
  return head_seconds;
}

std::size_t PreparedRequest::image_bytes() const noexcept {
  std::size_t n = image_key.capacity();
  for (const VisionInput& in : images) n += in.pixel_values.capacity() * sizeof(float);
  return n;
}

PreparedRequest Engine::prepare(std::string_view request_body, Dialect dialect, Dialect* contract,
                                std::vector<JsonMemberText>* top_members) const {
  const auto t0 = std::chrono::steady_clock::now();
  PreparedRequest p;
  Dialect read_in = dialect;
  Dialect* out = contract != nullptr ? contract : &read_in;
  p.request = parse_request(request_body, options_.limits, dialect, served_, out, top_members);
  p.contract = *out;
  p.parse_seconds = seconds_since(t0);
  if (!p.request.images.is_null()) {
    const auto ti = std::chrono::steady_clock::now();
    try {
      prepare_images(p);
    } catch (const RequestError& e) {
      if (!p.request.openai) throw;
      throw to_openai_error(e, p.request);  // name the part that carried the image, not `images.<k>`
    }
    p.image_seconds = seconds_since(ti);
  }
  const auto tr = std::chrono::steady_clock::now();
  std::vector<std::int64_t> image_tokens;
  for (const VisionInput& in : p.images) image_tokens.push_back(in.num_tokens);
  try {
    p.record = encode_record(p.request, tokenizer_, options_.record, image_tokens);
  } catch (const RequestError& e) {
    if (!p.request.openai) throw;
    throw to_openai_error(e, p.request);  // `input`, `questions.<index>`: the fields OpenAI's body has
  }
  p.record_seconds = seconds_since(tr);
  return p;
}

std::size_t Engine::decision_bytes(const PreparedRequest& prepared) const {
  const std::int64_t T =
      prepared.record ? static_cast<std::int64_t>(prepared.record->input_ids.size()) : options_.record.max_length;
  const JointHeadConfig& hc = head_->config();
  // JointHeadRecord's projected memory rows (4·W per row) and, at logits(), the keys/values of every
  // routing and field layer over the rows (2·4·W per row and layer); the hidden rows of one chunk.
  const auto layers = static_cast<std::size_t>(hc.routing_layers + hc.layers);
  const auto W = static_cast<std::size_t>(hc.width);
  const std::size_t head_per_token = 4 * W + 8 * layers * W;
  const auto H = static_cast<std::size_t>(backbone_->hidden_size());
  const auto chunk = static_cast<std::size_t>(std::min(T, options_.backbone.chunk_size));
  return state_fixed_bytes_ + static_cast<std::size_t>(T) * (state_bytes_per_token_ + head_per_token) +
         chunk * H * 4 * 2 + prepared.image_bytes();
}

void Engine::compute(const std::function<void()>& fn) {
  if (batcher_) {
    batcher_->run(fn);
  } else {
    fn();
  }
}

std::vector<float> Engine::hidden_states(std::span<const std::int32_t> ids) {
  if (ids.empty()) throw InvalidArgument("hidden states need at least one token id");
  if (!batcher_) return backbone_->hidden_states(ids);
  const std::int64_t H = backbone_->hidden_size();
  std::vector<float> all(ids.size() * static_cast<std::size_t>(H));
  SequenceState st = backbone_->new_state();
  const StepBatcher::Participant in_flight(*batcher_);
  backbone_->prefill(
      ids, st,
      [&](std::int64_t first, const float* rows, std::int64_t count, std::int64_t) {
        std::copy(rows, rows + count * H, all.begin() + first * H);
      },
      nullptr, batcher_.get(), nullptr);
  return all;
}

std::int64_t Engine::hidden_size() const noexcept { return backbone_->hidden_size(); }

Decision Engine::decide(std::string_view request_body, Dialect dialect) {
  return decide(prepare(request_body, dialect));
}

Decision Engine::decide(PreparedRequest prepared, const std::atomic<bool>* stop) {
  check_stop(stop);
  std::optional<StepBatcher::Participant> in_flight;
  if (batcher_) in_flight.emplace(*batcher_);
  const auto t0 = std::chrono::steady_clock::now();
  Decision d;
  const SystemOneRequest& req = prepared.request;
  d.contract = prepared.contract;

  // 1. Images (decoded and preprocessed by prepare(); the vision tower here).
  RequestMedia media;
  if (!req.images.is_null()) {
    const auto tv = std::chrono::steady_clock::now();
    try {
      compute([&] { media = request_images(prepared); });
    } catch (const RequestError& e) {
      if (!req.openai) throw;
      throw to_openai_error(e, req);  // name the part that carried the image, not `images.<k>`
    }
    d.timings.vision = prepared.image_seconds + seconds_since(tv);
  }
  check_stop(stop);
  // 2. The record: tokens, spans, positions (the tokens encoded by prepare()).
  const PreparedRecord p = [&] {
    try {
      return prepare_record(req, std::move(media), std::move(prepared.record));
    } catch (const RequestError& e) {
      if (!req.openai) throw;
      throw to_openai_error(e, req);  // `input`, `questions.<index>`: the fields OpenAI's body has
    }
  }();
  d.timings.tokenize = prepared.parse_seconds + prepared.record_seconds + seconds_since(t0) -
                       (d.timings.vision - prepared.image_seconds);
  d.input_tokens = p.tokens();
  d.state_tokens_dropped = p.rec.state_tokens_dropped();

  // 3. Prefill, split at state_end (state reuse, see engine.h) and through the state cache when it
  // is on. The padded readout keeps the on-device 64-position call grid (docs/MODEL.md §14) over the
  // whole record instead (no split, no cache). The head splits its memory keys/values at the same
  // row, cache on or off, so both do the same arithmetic.
  const std::int64_t split = options_.backbone.padded_readout ? 0 : p.rec.state_end();
  JointHeadRecord head(*head_, p.rec.questions, p.rec.input_ids, split);
  const auto t1 = std::chrono::steady_clock::now();
  const std::string cache_scope = req.openai && req.openai->prompt_cache_key ? *req.openai->prompt_cache_key : "";
  const bool use_cache = !(req.openai && req.openai->cache_disabled);
  Call call{stop, t0};
  const double head_seconds = prefill_record(p, split, head, d, cache_scope, use_cache, call);
  d.timings.first_step = call.first_rows;
  d.timings.prefill = seconds_since(t1) - head_seconds - d.timings.state_restore;

  // 4. The head's logits (one step: a stop set during it is honoured right after it).
  check_stop(stop);
  const auto t2 = std::chrono::steady_clock::now();
  compute([&] { d.logits = head.logits(); });
  d.timings.head = head_seconds + seconds_since(t2);
  check_stop(stop);

  // 5. The answer. A random-weight model always says so; otherwise the request's model is echoed
  // (reference).
  const std::string& model = random_weights() ? release_.model_name : req.model;
  const std::string extra =
      d.state_tokens_dropped > 0 ? "\"state_tokens_dropped\":" + std::to_string(d.state_tokens_dropped) : "";
  if (req.openai) {
    d.body = build_openai_response_json(req, model, d.logits, d.input_tokens, options_.answers,
                                        OpenAICacheUsage{d.reused_tokens, d.stored_tokens}, extra);
  } else {
    d.body = build_response_json(req, model, d.logits, d.input_tokens, options_.answers, extra);
  }
  d.timings.total = prepared.parse_seconds + prepared.image_seconds + prepared.record_seconds + seconds_since(t0);
  return d;
}

}  // namespace clef
