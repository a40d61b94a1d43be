// SPDX-License-Identifier: MIT
// The `images` member of a request body -> preprocessed tower inputs (docs/PROTOCOL.md §1.5, §3.6;
// docs/MODEL.md §6.1-6.2). The one entry point the engine calls for a request's images.
#pragma once

#include <cstdint>
#include <vector>

#include "decision/json_value.h"
#include "vision/image.h"
#include "vision/preprocess.h"

namespace clef {

/// Everything the prompt and the tower need from a request's images, in request order.
struct RequestImages {
  std::vector<VisionInput> inputs;  ///< per image: pixel_values [rows, 1536], grid, num_tokens
  std::int64_t total_tokens = 0;    ///< sum of num_tokens: the `<|image_pad|>` count of the prompt
};

/// Validates, decodes and preprocesses `images` (the body's `images` value, or nullptr when the
/// key is absent). Absent, `null` and `[]` mean no images. Accepted: an array of data-URL strings
/// (decode_image_urls). Throws RequestError: invalid_type at `images` (not an array) or
/// `images.<i>` (an element that is not a string), and every code of decode_image_urls and
/// preprocess_image (too_many_images, image_url_unsupported, image_type_unsupported,
/// invalid_base64, image_invalid, image_too_large, image_aspect_ratio), all at `images.<i>`.
RequestImages prepare_request_images(const JsonValue* images, const ImageLimits& limits = {},
                                     const ImageDecodeOptions& decode = {}, const VisionPreprocessConfig& config = {});

}  // namespace clef
