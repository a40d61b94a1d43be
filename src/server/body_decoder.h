// Content-Encoding decoding of request bodies for `clef serve`: identity, gzip, deflate (zlib
// or gzip framing, as cpp-httplib accepted) and br, fed piece by piece as the body arrives, with a
// hard cap on the decoded size (a compression bomb stops at the cap, never grows memory past it).
#pragma once

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

/// Outcome of feeding a decoder.
enum class DecodeStatus : unsigned char {
  kOk,        ///< all input consumed, output within the cap
  kTooLarge,  ///< the decoded body would exceed the cap (decoding stopped)
  kCorrupt,   ///< the input is not valid data of its encoding
};

/// Streaming decoder appending to one output string. Not thread-safe; one body per instance.
class BodyDecoder {
 public:
  /// `max_output`: the largest decoded size in bytes (ServeOptions::max_body_bytes).
  /// Throws std::bad_alloc when the compression library cannot allocate its state.
  BodyDecoder(BodyEncoding encoding, std::size_t max_output);
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
  std::unique_ptr<State> state_;
};

}  // namespace clef::server
