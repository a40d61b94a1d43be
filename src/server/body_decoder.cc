// SPDX-License-Identifier: MIT
#include "server/body_decoder.h"

#include <brotli/decode.h>
#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <new>

namespace clef::server {

bool parse_body_encoding(std::string_view header, BodyEncoding& out) {
  while (!header.empty() && (header.front() == ' ' || header.front() == '\t')) header.remove_prefix(1);
  while (!header.empty() && (header.back() == ' ' || header.back() == '\t')) header.remove_suffix(1);
  std::string v(header);
  for (char& c : v) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (v.empty() || v == "identity") {
    out = BodyEncoding::kIdentity;
  } else if (v == "gzip" || v == "x-gzip") {
    out = BodyEncoding::kGzip;
  } else if (v == "deflate") {
    out = BodyEncoding::kDeflate;
  } else if (v == "br") {
    out = BodyEncoding::kBrotli;
  } else {
    return false;
  }
  return true;
}

bool BodyBudget::take(std::size_t n) noexcept {
  std::size_t used = used_.load();
  do {
    if (n > limit_ || used > limit_ - n) return false;
  } while (!used_.compare_exchange_weak(used, used + n));
  return true;
}

bool BodyGrant::resize(std::size_t bytes) noexcept {
  if (budget_ == nullptr) {
    held_ = bytes;
    return true;
  }
  if (bytes > held_) {
    if (!budget_->take(bytes - held_)) return false;
  } else if (bytes < held_) {
    budget_->give(held_ - bytes);
  }
  held_ = bytes;
  return true;
}

struct BodyDecoder::State {
  z_stream z{};
  bool z_ready = false;
  bool z_ended = false;  ///< the current gzip/zlib member ended (more input starts another)
  BrotliDecoderState* br = nullptr;
  bool br_done = false;
  ~State() {
    if (z_ready) inflateEnd(&z);
    if (br != nullptr) BrotliDecoderDestroyInstance(br);
  }
};

BodyDecoder::BodyDecoder(BodyEncoding encoding, std::size_t max_output, BodyGrant* grant)
    : encoding_(encoding), max_output_(max_output), grant_(grant), state_(std::make_unique<State>()) {
  if (encoding_ == BodyEncoding::kGzip || encoding_ == BodyEncoding::kDeflate) {
    // 32 + 15: detect zlib or gzip framing from the first bytes, largest window.
    if (inflateInit2(&state_->z, 32 + 15) != Z_OK) throw std::bad_alloc();
    state_->z_ready = true;
  } else if (encoding_ == BodyEncoding::kBrotli) {
    state_->br = BrotliDecoderCreateInstance(nullptr, nullptr, nullptr);
    if (state_->br == nullptr) throw std::bad_alloc();
  }
}

BodyDecoder::~BodyDecoder() = default;

bool BodyDecoder::reserve(std::string& out, std::size_t size) {
  if (size <= out.capacity()) return true;
  const std::size_t cap = std::max(size, std::min(2 * out.capacity(), max_output_ + 1));
  // While the bytes are copied both buffers exist: the grant covers both until the old one is freed.
  if (grant_ != nullptr && !grant_->resize(grant_->bytes() + cap)) return false;
  // A fresh string of exactly `cap` (std::string::reserve may round up to twice the old capacity).
  std::string bigger;
  bigger.reserve(cap);
  bigger.append(out);
  out.swap(bigger);
  if (grant_ != nullptr) grant_->resize(out.capacity());
  return true;
}

DecodeStatus BodyDecoder::feed(std::string_view in, std::string& out) {
  constexpr std::size_t kStep = 64 * 1024;
  if (encoding_ == BodyEncoding::kIdentity) {
    if (in.size() > max_output_ - std::min(out.size(), max_output_)) return DecodeStatus::kTooLarge;
    if (!reserve(out, out.size() + in.size())) return DecodeStatus::kOverBudget;
    out.append(in);
    return DecodeStatus::kOk;
  }
  if (encoding_ == BodyEncoding::kBrotli) {
    const auto* next_in = reinterpret_cast<const std::uint8_t*>(in.data());
    std::size_t avail_in = in.size();
    while (avail_in > 0 || BrotliDecoderHasMoreOutput(state_->br)) {
      if (state_->br_done) return avail_in > 0 ? DecodeStatus::kCorrupt : DecodeStatus::kOk;
      if (out.size() >= max_output_ && BrotliDecoderHasMoreOutput(state_->br)) return DecodeStatus::kTooLarge;
      const std::size_t room = std::min(kStep, max_output_ + 1 - std::min(out.size(), max_output_));
      const std::size_t before = out.size();
      if (!reserve(out, before + room)) return DecodeStatus::kOverBudget;
      out.resize(before + room);
      auto* next_out = reinterpret_cast<std::uint8_t*>(out.data() + before);
      std::size_t avail_out = room;
      const BrotliDecoderResult r =
          BrotliDecoderDecompressStream(state_->br, &avail_in, &next_in, &avail_out, &next_out, nullptr);
      out.resize(before + room - avail_out);
      if (out.size() > max_output_) return DecodeStatus::kTooLarge;
      if (r == BROTLI_DECODER_RESULT_ERROR) return DecodeStatus::kCorrupt;
      if (r == BROTLI_DECODER_RESULT_SUCCESS) state_->br_done = true;
      if (r == BROTLI_DECODER_RESULT_NEEDS_MORE_INPUT && avail_in == 0) break;
    }
    return DecodeStatus::kOk;
  }
  z_stream& z = state_->z;
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = static_cast<uInt>(in.size());
  bool pending = false;  // the last call filled its output: inflate may hold more
  while (z.avail_in > 0 || pending) {
    if (state_->z_ended) {
      if (z.avail_in == 0) break;
      // Concatenated members (gzip allows several): start the next one.
      if (inflateReset(&z) != Z_OK) return DecodeStatus::kCorrupt;
      state_->z_ended = false;
    }
    const std::size_t room = std::min(kStep, max_output_ + 1 - std::min(out.size(), max_output_));
    const std::size_t before = out.size();
    if (!reserve(out, before + room)) return DecodeStatus::kOverBudget;
    out.resize(before + room);
    z.next_out = reinterpret_cast<Bytef*>(out.data() + before);
    z.avail_out = static_cast<uInt>(room);
    const int r = inflate(&z, Z_NO_FLUSH);
    out.resize(before + room - z.avail_out);
    if (out.size() > max_output_) return DecodeStatus::kTooLarge;
    pending = z.avail_out == 0;
    if (r == Z_STREAM_END) {
      state_->z_ended = true;
      pending = false;
    } else if (r == Z_BUF_ERROR) {
      if (!pending) break;  // needs more input
    } else if (r != Z_OK) {
      return DecodeStatus::kCorrupt;
    }
  }
  return DecodeStatus::kOk;
}

DecodeStatus BodyDecoder::finish() {
  switch (encoding_) {
    case BodyEncoding::kIdentity: return DecodeStatus::kOk;
    case BodyEncoding::kBrotli: return state_->br_done ? DecodeStatus::kOk : DecodeStatus::kCorrupt;
    case BodyEncoding::kGzip:
    case BodyEncoding::kDeflate: break;
  }
  return state_->z_ended ? DecodeStatus::kOk : DecodeStatus::kCorrupt;
}

}  // namespace clef::server
