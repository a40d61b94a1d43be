#include "runtime/engine.h"

#include <algorithm>
#include <chrono>
#include <filesystem>

#include "core/error.h"
#include "core/sha256.h"
#include "ops/parallel.h"

namespace clef {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// The state cache's model identity (see Engine::model_identity). File contents are not hashed
/// (gigabytes); name + size + mtime identify them within one process lifetime.
std::string engine_identity(const ReleaseFolder& r, const Backbone& b) {
  namespace fs = std::filesystem;
  std::string text = "dir=" + fs::weakly_canonical(fs::path(r.dir)).string() + "\n";
  std::vector<fs::directory_entry> files;
  for (const auto& e : fs::directory_iterator(r.dir)) {
    if (e.is_regular_file()) files.push_back(e);
  }
  std::sort(files.begin(), files.end(), [](const auto& a, const auto& c) { return a.path().filename() < c.path().filename(); });
  for (const auto& e : files) {
    const auto mtime = e.last_write_time().time_since_epoch().count();
    text += "file=" + e.path().filename().string() + " size=" + std::to_string(e.file_size()) +
            " mtime=" + std::to_string(static_cast<long long>(mtime)) + "\n";
  }
  const BackboneOptions& o = b.options();
  text += "precision=" + std::to_string(static_cast<int>(o.precision)) + " chunk=" + std::to_string(o.chunk_size) +
          " threads=" + std::to_string(ops::num_threads()) + " padded=" + std::to_string(o.padded_readout ? 1 : 0) +
          " pad=" + std::to_string(b.pad_id()) + "\n";
  return sha256_hex(std::as_bytes(std::span<const char>(text.data(), text.size())));
}

/// dst = snapshot (a deep copy), with KV capacity for `extra_tokens` more rows reserved up front,
/// so that continuing the sequence does not reallocate (and copy again) every KV cache.
void restore_with_room(SequenceState& dst, const SequenceState& snapshot, std::int64_t extra_tokens) {
  // Field by field: a new member of these structs must be copied here too.
  static_assert(sizeof(nn::KvCache) == 2 * sizeof(std::int64_t) + 2 * sizeof(std::vector<float>));
  static_assert(sizeof(nn::GdnState) == 2 * sizeof(std::vector<float>));
  static_assert(sizeof(nn::ModelState) == sizeof(std::vector<nn::LayerState>) + 2 * sizeof(std::int64_t));
  dst.layers.resize(snapshot.layers.size());
  for (std::size_t i = 0; i < snapshot.layers.size(); ++i) {
    const nn::LayerState& src = snapshot.layers[i];
    nn::LayerState& l = dst.layers[i];
    l.gdn = src.gdn;
    l.kv.width = src.kv.width;
    l.kv.length = src.kv.length;
    if (src.kv.width > 0) {
      const auto room = src.kv.k.size() + static_cast<std::size_t>(extra_tokens * src.kv.width);
      l.kv.k.clear();
      l.kv.v.clear();
      l.kv.k.reserve(room);
      l.kv.v.reserve(room);
    }
    l.kv.k.assign(src.kv.k.begin(), src.kv.k.end());
    l.kv.v.assign(src.kv.v.begin(), src.kv.v.end());
  }
  dst.n_tokens = snapshot.n_tokens;
  dst.next_position = snapshot.next_position;
}

}  // namespace

const char* state_cache_use_name(StateCacheUse u) noexcept {
  switch (u) {
    case StateCacheUse::kMiss:
      return "miss";
    case StateCacheUse::kHit:
      return "hit";
    case StateCacheUse::kOff:
      break;
  }
  return "off";
}

Engine::Engine(const std::string& model_dir, const EngineOptions& options)
    : options_(options), release_(open_release(model_dir)), tokenizer_(Tokenizer::load(model_dir)) {
  if (options.state_cache_mb < 0 || options.state_cache_mb > (std::int64_t{1} << 30)) {
    throw InvalidArgument("state cache budget must be in [0, 2^30] MiB, got " + std::to_string(options.state_cache_mb));
  }
  served_.name = release_.model_name;
  served_.aliases = options.aliases;
  served_.accept_any = options.accept_any_model;
  backbone_ = std::make_unique<Backbone>(release_, options.backbone);
  head_ = std::make_unique<JointHead>(release_.head, release_.head_config, release_.model.text.lm_head);
  identity_ = engine_identity(release_, *backbone_);
  if (options.state_cache_mb > 0 && !options.backbone.padded_readout) {
    cache_ = std::make_unique<StateCache>(static_cast<std::size_t>(options.state_cache_mb) << 20);
  }
}

Engine::~Engine() = default;

StateCacheStats Engine::state_cache_stats() const { return cache_ ? cache_->stats() : StateCacheStats{}; }

Decision Engine::decide(std::string_view request_body, Dialect dialect) {
  const auto t0 = std::chrono::steady_clock::now();
  Decision d;
  const SystemOneRequest req = parse_request(request_body, options_.limits, dialect, served_);
  const EncodedRecord rec = encode_record(req, tokenizer_, options_.record);
  d.timings.tokenize = seconds_since(t0);
  d.input_tokens = static_cast<std::int64_t>(rec.input_ids.size());
  d.state_tokens_dropped = rec.state_tokens_dropped();

  const std::span<const std::int32_t> ids(rec.input_ids);
  JointHeadRecord head(*head_, rec.questions, rec.input_ids);
  SequenceState state = backbone_->new_state();
  double head_seconds = 0;
  const auto t1 = std::chrono::steady_clock::now();
  const HiddenConsumer feed_head = [&](std::int64_t, const float* rows, std::int64_t count, std::int64_t hidden) {
    const auto th = std::chrono::steady_clock::now();
    head.feed(std::span<const float>(rows, static_cast<std::size_t>(count * hidden)));
    head_seconds += seconds_since(th);
  };
  // The split at state_end (issue 7). The padded readout keeps the seed's 64-position call grid
  // over the whole record instead (no split, no cache).
  const std::int64_t split = options_.backbone.padded_readout ? 0 : rec.state_end();
  if (split > 0 && cache_) {
    const std::span<const std::int32_t> prefix = ids.first(static_cast<std::size_t>(split));
    const auto compute = [&]() -> StateCache::EntryPtr {
      auto e = std::make_shared<StateCacheEntry>();
      e->state = backbone_->new_state();
      e->rows = split;
      e->head_width = head_->config().width;
      e->head_memory.reserve(static_cast<std::size_t>(split * e->head_width));
      backbone_->prefill(prefix, e->state, [&](std::int64_t, const float* rows, std::int64_t count, std::int64_t hidden) {
        const auto th = std::chrono::steady_clock::now();
        const std::vector<float> m = head_->project_memory(std::span<const float>(rows, static_cast<std::size_t>(count * hidden)));
        e->head_memory.insert(e->head_memory.end(), m.begin(), m.end());
        head_seconds += seconds_since(th);
      });
      return e;
    };
    const StateCache::Result r = cache_->get_or_compute(state_cache_key(identity_, prefix), compute);
    d.state_cache = r.hit ? StateCacheUse::kHit : StateCacheUse::kMiss;
    d.reused_tokens = r.hit ? split : 0;
    const auto tr = std::chrono::steady_clock::now();
    restore_with_room(state, r.entry->state, static_cast<std::int64_t>(ids.size()) - split);
    head.restore_prefix(r.entry->head_memory);
    d.timings.state_restore = seconds_since(tr);
  } else if (split > 0) {
    backbone_->prefill(ids.first(static_cast<std::size_t>(split)), state, feed_head);
  }
  backbone_->prefill(ids.subspan(static_cast<std::size_t>(split)), state, feed_head);
  d.timings.prefill = seconds_since(t1) - head_seconds - d.timings.state_restore;
  const auto t2 = std::chrono::steady_clock::now();
  d.logits = head.logits();
  d.timings.head = head_seconds + seconds_since(t2);

  // A random-weight model always says so; otherwise the request's model is echoed (reference).
  const std::string& model = random_weights() ? release_.model_name : req.model;
  const std::string extra =
      d.state_tokens_dropped > 0 ? "\"state_tokens_dropped\":" + std::to_string(d.state_tokens_dropped) : "";
  d.body = build_response_json(req, model, d.logits, d.input_tokens, options_.answers, extra);
  d.timings.total = seconds_since(t0);
  return d;
}

}  // namespace clef
