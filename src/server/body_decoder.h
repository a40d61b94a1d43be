// SPDX-License-Identifier: MIT
// Content-Encoding decoding of request bodies for `clef serve`: identity, gzip, deflate (zlib
// or gzip framing, as cpp-httplib accepted) and br, fed piece by piece as the body arrives, with a
// hard cap on the decoded size (a compression bomb stops at the cap, never grows memory past it).
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

namespace clef::server {

/// The Content-Encodings the server decodes.
enum class BodyEncoding : unsigned char { kIdentity, kGzip, kDeflate, kBrotli };

/// Maps a Content-Encoding header value ("" = identity; case-insensitive; surrounding blanks
/// ignored) to an encoding. Returns false for anything else (several codings included).
bool parse_body_encoding(std::string_view header, BodyEncoding& out);

/// The server-wide budget of decoded request-body bytes held at once (--body-budget,
/// docs/COMPATIBILITY.md "limits and guards"): every connection's body buffer, from its first
/// byte until its decision is answered, is counted by its capacity. Thread-safe.
class BodyBudget {
 public:
  explicit BodyBudget(std::size_t limit_bytes) : limit_(limit_bytes) {}
  /// Takes `n` bytes; false (nothing taken) when that would exceed the limit.
  bool take(std::size_t n) noexcept;
  /// Returns `n` bytes taken before.
  void give(std::size_t n) noexcept { used_.fetch_sub(n); }
  std::size_t used() const noexcept { return used_.load(); }
  std::size_t limit() const noexcept { return limit_; }

 private:
  const std::size_t limit_;
  std::atomic<std::size_t> used_{0};
};

/// The share of a BodyBudget one body holds; returned when the grant ends (RAII).
class BodyGrant {
 public:
  explicit BodyGrant(BodyBudget* budget = nullptr) : budget_(budget) {}
  ~BodyGrant() { release(); }
  BodyGrant(const BodyGrant&) = delete;
  BodyGrant& operator=(const BodyGrant&) = delete;
  /// Holds exactly `bytes` (grows or shrinks the share); false when growing would exceed the
  /// budget (the share is then unchanged). Always true without a budget.
  bool resize(std::size_t bytes) noexcept;
  void release() noexcept { resize(0); }
  std::size_t bytes() const noexcept { return held_; }

 private:
  BodyBudget* budget_;
  std::size_t held_ = 0;
};

/// Outcome of feeding a decoder.
enum class DecodeStatus : unsigned char {
  kOk,          ///< all input consumed, output within the cap
  kTooLarge,    ///< the decoded body would exceed the cap (decoding stopped)
  kCorrupt,     ///< the input is not valid data of its encoding
  kOverBudget,  ///< growing the output would exceed the server's BodyBudget (decoding stopped)
};

/// Streaming decoder appending to one output string. Not thread-safe; one body per instance.
class BodyDecoder {
 public:
  /// `max_output`: the largest decoded size in bytes (ServeOptions::max_body_bytes). `grant`
  /// (may be null: no budget) is resized to the output's capacity before the output grows; it
  /// must outlive the decoder and be held as long as the output is.
  /// Throws std::bad_alloc when the compression library cannot allocate its state.
  BodyDecoder(BodyEncoding encoding, std::size_t max_output, BodyGrant* grant = nullptr);
  ~BodyDecoder();
  BodyDecoder(const BodyDecoder&) = delete;
  BodyDecoder& operator=(const BodyDecoder&) = delete;

  /// Decodes `in` (the next bytes of the body as received) and appends to `out`.
  DecodeStatus feed(std::string_view in, std::string& out);
  /// Called after the last byte: kCorrupt when a compressed stream is incomplete.
  DecodeStatus finish();

 private:
  struct State;
  BodyEncoding encoding_;
  std::size_t max_output_;
  BodyGrant* grant_;
  std::unique_ptr<State> state_;
  /// Makes `out`'s capacity at least `size` (doubling, capped at max_output + 1), the grant first
  /// grown by the new buffer (the old one exists until the copy is done), then set to the new
  /// capacity; false when the budget refuses.
  bool reserve(std::string& out, std::size_t size);
};

}  // namespace clef::server
