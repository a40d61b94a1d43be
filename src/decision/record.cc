// SPDX-License-Identifier: MIT
#include "decision/record.h"

#include <algorithm>

#include "decision/render.h"
#include "decision/request_error.h"

namespace clef {

std::string record_prefix() {
  return std::string("<|im_start|>system\n") + kSystemPrompt + "<|im_end|>\n<|im_start|>user\nSTATE:\n";
}

namespace {

std::string field_head(std::size_t k, const RequestQuestion& q) {
  return "\nFIELD " + std::to_string(k) + "\nID: " + q.id + "\nTYPE: " + question_type_name(q.type) + "\nINSTRUCTION: ";
}

/// Tokenizes pieces one by one and appends their ids (every piece on its own, docs/PROTOCOL.md §3.2).
struct PieceEncoder {
  const Tokenizer& tok;
  TokenizerWorkspace ws;
  std::vector<std::int32_t> ids;  // scratch

  void append(std::vector<std::int32_t>& dst, std::string_view text) {
    ids.clear();
    tok.encode(text, ids, ws);
    dst.insert(dst.end(), ids.begin(), ids.end());
  }
  /// Appends `text` and returns its span in `dst`; empty_span at `where` when it has no tokens.
  TokenSpan span(std::vector<std::int32_t>& dst, std::string_view text, const JsonPath& where,
                 const std::string& what) {
    const auto begin = static_cast<std::int64_t>(dst.size());
    append(dst, text);
    const auto end = static_cast<std::int64_t>(dst.size());
    if (end == begin) {
      throw RequestError(RequestErrorCode::kEmptySpan, where,
                         what + " renders to no tokens; the head would average zero rows");
    }
    return TokenSpan{begin, end};
  }
};

/// Step 1: the schema's ids, with each question's spans relative to the schema's start.
std::vector<std::int32_t> encode_schema(const SystemOneRequest& request, PieceEncoder& enc,
                                        std::vector<HeadQuestion>& questions) {
  std::vector<std::int32_t> schema;
  enc.append(schema, kSchemaHead);
  for (std::size_t k = 0; k < request.questions.size(); ++k) {
    const RequestQuestion& q = request.questions[k];
    const JsonPath qpath = JsonPath().key("questions").key(q.id);
    HeadQuestion hq;
    hq.type_id = static_cast<int>(q.type);
    enc.append(schema, field_head(k + 1, q));
    hq.span = enc.span(schema, render(q.instructions), qpath.key("instructions"), "the instruction");
    enc.append(schema, kAllowedOptions);
    for (std::size_t j = 0; j < q.options.size(); ++j) {
      enc.append(schema, "OPTION " + std::to_string(j + 1) + ": ");
      hq.options.push_back(
          enc.span(schema, render(option_semantics(q.options[j])), qpath.key("criteria"), "an option"));
      enc.append(schema, "\n");
    }
    enc.append(schema, kEndField);
    questions.push_back(std::move(hq));
  }
  return schema;
}

/// The media piece of §3.6: per image "<|vision_start|>" + N·"<|image_pad|>" + "<|vision_end|>", then "\n".
std::string media_piece(std::span<const std::int64_t> image_token_counts) {
  std::string media;
  for (const std::int64_t n : image_token_counts) {
    media += "<|vision_start|>";
    for (std::int64_t i = 0; i < n; ++i) media += "<|image_pad|>";
    media += "<|vision_end|>";
  }
  media += "\n";
  return media;
}

/// In a record with images, a vision token in the state or the schema would be taken for an image
/// slot: image_token_in_text at `state` / `questions`.
void refuse_vision_tokens(const Tokenizer& tok, const std::vector<std::int32_t>& state,
                          const std::vector<std::int32_t>& schema) {
  const std::int32_t vision_ids[] = {tok.token_to_id("<|vision_start|>"), tok.token_to_id("<|image_pad|>"),
                                     tok.token_to_id("<|vision_end|>")};
  auto has_vision_token = [&](const std::vector<std::int32_t>& ids) {
    for (const std::int32_t id : ids) {
      for (const std::int32_t v : vision_ids) {
        if (v >= 0 && id == v) return true;
      }
    }
    return false;
  };
  if (has_vision_token(state)) {
    throw RequestError(RequestErrorCode::kImageTokenInText, JsonPath().key("state"),
                       "the state contains a vision token (<|vision_start|>, <|image_pad|> or <|vision_end|>), "
                       "which would be taken for an image slot in a request with images");
  }
  if (has_vision_token(schema)) {
    throw RequestError(RequestErrorCode::kImageTokenInText, JsonPath().key("questions"),
                       "a question contains a vision token (<|vision_start|>, <|image_pad|> or <|vision_end|>), "
                       "which would be taken for an image slot in a request with images");
  }
}

/// Steps 5-6, the budget: input_too_long when the fixed part alone passes max_length (at `images`
/// when the media piece is what breaks it), or when the state did not fit the room left under kRefuse.
void check_budget(const EncodedRecord& r, std::int64_t fixed, std::int64_t room, bool state_fits,
                  const RecordOptions& options) {
  if (fixed > options.max_length) {
    const bool media_breaks_it = r.media_len > 0 && fixed - r.media_len <= options.max_length;
    throw RequestError(RequestErrorCode::kInputTooLong, JsonPath().key(media_breaks_it ? "images" : "questions"),
                       "schema requires " + std::to_string(fixed) + " tokens before state; maximum is " +
                           std::to_string(options.max_length));
  }
  if (!state_fits) {
    throw RequestError(RequestErrorCode::kInputTooLong, JsonPath().key("state"),
                       "the record needs more than the maximum of " + std::to_string(options.max_length) +
                           " tokens (state: more than " + std::to_string(room) +
                           ", counted up to that limit; prompt and schema: " + std::to_string(fixed) +
                           "); shorten the state, or start clef with --overflow truncate to cut its end");
  }
}

/// Step 7: input_ids = prefix ‖ state ‖ schema ‖ suffix, and the schema's spans shifted to absolute.
void concatenate(EncodedRecord& r, const std::vector<std::int32_t>& prefix, const std::vector<std::int32_t>& state,
                 const std::vector<std::int32_t>& schema, const std::vector<std::int32_t>& suffix) {
  r.input_ids.reserve(prefix.size() + state.size() + schema.size() + suffix.size());
  r.input_ids.insert(r.input_ids.end(), prefix.begin(), prefix.end());
  r.input_ids.insert(r.input_ids.end(), state.begin(), state.end());
  r.input_ids.insert(r.input_ids.end(), schema.begin(), schema.end());
  r.input_ids.insert(r.input_ids.end(), suffix.begin(), suffix.end());
  const std::int64_t shift = r.prefix_len + r.state_len;
  for (auto& q : r.questions) {
    q.span.begin += shift;
    q.span.end += shift;
    for (auto& o : q.options) {
      o.begin += shift;
      o.end += shift;
    }
  }
}

}  // namespace

EncodedRecord encode_record(const SystemOneRequest& request, const Tokenizer& tok, const RecordOptions& options,
                            std::span<const std::int64_t> image_token_counts) {
  PieceEncoder enc{tok, {}, {}};
  EncodedRecord r;
  const std::vector<std::int32_t> schema = encode_schema(request, enc, r.questions);
  // Steps 2-4: prefix (with the media piece), suffix, state.
  std::vector<std::int32_t> prefix, suffix, state;
  enc.append(prefix, record_prefix());
  const std::int64_t text_prefix_len = static_cast<std::int64_t>(prefix.size());
  if (!image_token_counts.empty()) enc.append(prefix, media_piece(image_token_counts));
  enc.append(suffix, kSuffix);
  r.prefix_len = static_cast<std::int64_t>(prefix.size());
  r.media_len = r.prefix_len - text_prefix_len;
  r.schema_len = static_cast<std::int64_t>(schema.size());
  r.suffix_len = static_cast<std::int64_t>(suffix.size());
  const std::int64_t fixed = r.prefix_len + r.schema_len + r.suffix_len;
  const std::int64_t room = std::max<std::int64_t>(options.max_length - fixed, 0);
  // Refusing: the state is tokenized only until it passes the room left (Tokenizer::encode_bounded),
  // so an over-long state costs memory bounded by the limit, not by its size. Truncating: in full
  // (its full length is reported as dropped tokens).
  bool state_fits = true;
  if (options.overflow == OverflowPolicy::kRefuse) {
    state_fits = tok.encode_bounded(render(request.state), static_cast<std::size_t>(room), state, enc.ws);
  } else {
    enc.append(state, render(request.state));
  }
  if (r.media_len > 0) refuse_vision_tokens(tok, state, schema);
  r.state_len_full = static_cast<std::int64_t>(state.size());
  check_budget(r, fixed, room, state_fits, options);
  if (r.state_len_full > room) {                   // truncation (kRefuse stopped above)
    state.resize(static_cast<std::size_t>(room));  // keep the beginning, as the reference does
  }
  r.state_len = static_cast<std::int64_t>(state.size());
  concatenate(r, prefix, state, schema, suffix);
  return r;
}

}  // namespace clef
