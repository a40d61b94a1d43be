// SPDX-License-Identifier: MIT
#include "vision/request_images.h"

#include <string>
#include <string_view>

#include "decision/request_error.h"

namespace clef {

RequestImages prepare_request_images(const JsonValue* images, const ImageLimits& limits,
                                     const ImageDecodeOptions& decode, const VisionPreprocessConfig& config) {
  RequestImages out;
  if (images == nullptr || images->is_null()) return out;
  const JsonPath path = JsonPath().key("images");
  if (!images->is_array())
    throw RequestError(RequestErrorCode::kInvalidType, path, "images must be an array of data URLs");
  std::vector<std::string_view> urls;
  urls.reserve(images->size());
  for (std::size_t i = 0; i < images->size(); ++i) {
    const JsonValue& item = images->items()[i];
    if (!item.is_string()) {
      throw RequestError(RequestErrorCode::kInvalidType, path.index(i),
                         "each image must be a string (data:image/<png|jpeg|webp>;base64,...)");
    }
    urls.push_back(item.as_string());
  }
  const std::vector<RgbImage> decoded = decode_image_urls(urls, limits, decode);
  out.inputs.reserve(decoded.size());
  for (std::size_t i = 0; i < decoded.size(); ++i) {
    out.inputs.push_back(preprocess_image(decoded[i], i, config));
    out.total_tokens += out.inputs.back().num_tokens;
  }
  return out;
}

}  // namespace clef
