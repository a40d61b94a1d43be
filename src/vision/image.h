// SPDX-License-Identifier: MIT
// Images of a request: data-URL wire form -> decoded RGB8 pixels, the way the reference reads them
// (docs/PROTOCOL.md §1.5; docs/MODEL.md §6.1 step 1). See docs/VISION.md.
//
// Cloudflare's reference passes the request's data-URL strings to transformers, which decodes them
// with torchvision (RGB mode: alpha dropped, EXIF orientation of PNG/JPEG applied); that is the
// default (ImageDecodeOptions). Pixel decoding follows what Pillow 13 produces for the same bytes
// (modes, palettes, CMYK polarity), which equals torchvision's on 8-bit PNG, JPEG and WebP
// (docs/VISION.md). The PIL-processor behaviour (alpha composited on white, no EXIF) is an option.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string_view>
#include <utility>
#include <vector>

namespace clef {

/// A decoded image: `height` rows of `width` RGB pixels, row-major, 3 bytes per pixel (R, G, B),
/// values 0..255. `pixels.size() == width * height * 3`.
struct RgbImage {
  std::uint32_t width = 0;
  std::uint32_t height = 0;
  std::vector<std::uint8_t> pixels;
};

/// How transparency becomes RGB.
enum class AlphaMode : std::uint8_t {
  /// transformers >= 5 `convert_to_rgb` on a PIL image (the installed reference, 5.24.0): an image
  /// with an alpha band (LA, RGBA) or a PNG tRNS entry is converted to RGBA and composited onto
  /// opaque white with Pillow's fixed-point `alpha_composite`, then the alpha is dropped.
  kCompositeOnWhite,
  /// Plain Pillow `Image.convert("RGB")`: the alpha band is dropped, colours are kept as stored
  /// (transformers 4.x `convert_to_rgb`, and transformers' own `load_image` for URL strings).
  kDrop,
};

/// Limits on the `images` of one request (docs/PROTOCOL.md §1.3: hosted <= 4 images, <= 16 MP
/// each). Every value is inclusive; a value over a limit is a RequestError, never a truncation.
struct ImageLimits {
  std::size_t max_images = 4;                              ///< images per request
  std::size_t max_encoded_bytes_per_image = 8u << 20;      ///< file bytes after base64 decoding
  std::size_t max_encoded_bytes_total = 24u << 20;         ///< sum over the request's images
  std::uint64_t max_pixels_per_image = 4096ull * 4096ull;  ///< width * height of the decoded file
  std::uint32_t max_side = 32768;                          ///< width and height each
  /// Scans of a progressive JPEG (counted from the file's markers before decoding, and again while
  /// libjpeg reads them): each scan is a pass over every coefficient block of the image, so many
  /// tiny scans cost minutes; real encoders write about 10. More: image_too_many_scans.
  std::uint32_t max_jpeg_scans = 500;
  /// Pixels after the image processor's resize, per image (width' * height', 256 per vision patch:
  /// the vision tower's cost), checked from the file header when `resized_size` is set: more is
  /// image_over_pixel_limit, never a different resize (docs/COMPATIBILITY.md "limits and guards").
  /// 0 = no bound beyond the processor's own max_pixels.
  std::uint64_t max_resized_pixels = 0;
  /// (width', height') the processor resizes a width x height image to; {0, 0} when it refuses the
  /// size (the aspect ratio, reported later with the image's own error).
  std::function<std::pair<std::uint64_t, std::uint64_t>(std::uint64_t width, std::uint64_t height)> resized_size;
  /// Token budget checked from the file header, before any pixel is decoded: when
  /// `tokens_for_size` is set, image i's tokens tokens_for_size(width, height) plus those of the
  /// images before it must not exceed `max_image_tokens` (input_too_long at images.<i> otherwise),
  /// so an image that could never fit the record costs nothing to refuse.
  std::uint64_t max_image_tokens = 0;
  std::function<std::uint64_t(std::uint64_t width, std::uint64_t height)> tokens_for_size;
  std::uint64_t tokens_before = 0;  ///< set by decode_image_urls: tokens of the images before this one
};

/// Decoding options. The defaults are what Cloudflare's reference does with a request: it hands
/// the data-URL strings to transformers, which decodes them with torchvision (`decode_image`,
/// RGB mode, EXIF orientation applied): alpha dropped, PNG/JPEG EXIF orientation applied.
/// {kCompositeOnWhite, false} is transformers 5.24's PIL processor handed a PIL image.
struct ImageDecodeOptions {
  AlphaMode alpha = AlphaMode::kDrop;
  /// Apply the EXIF orientation tag (1-8) of a JPEG (APP1 "Exif") or PNG (eXIf chunk before
  /// IDAT); WebP files are left as stored, as torchvision 0.29 leaves them.
  bool apply_exif_orientation = true;
  /// An animated WebP (more than one frame, or the ANIM flag): false refuses it (image_invalid), as
  /// torchvision's decoder does; true decodes the first frame, as Pillow does.
  bool first_frame_of_animation = false;
};

/// The EXIF orientation (1-8) of a PNG or JPEG file's bytes, 1 when it has none or the EXIF data
/// is malformed (never throws). Reads only the bytes before the image data.
int exif_orientation(std::string_view file) noexcept;

/// The orientation value of a TIFF structure (EXIF's IFD0 tag 0x0112), 1 when absent or malformed.
int exif_orientation_of_tiff(std::string_view tiff) noexcept;

/// `image` turned upright for EXIF orientation 2-8 (mirror, rotations, transpose; 5-8 swap width
/// and height); 1 or an out-of-range value returns a copy.
RgbImage apply_exif_orientation(const RgbImage& image, int orientation);

/// Decodes the file bytes of one PNG, JPEG or WebP image (format found from the signature, not
/// from any declared MIME type) into RGB8. `index` is the image's position in the request, used for
/// the error path `images.<index>`. Dimensions are checked against `limits` from the file header
/// before any pixel buffer is allocated.
/// Throws RequestError: image_invalid (not PNG/JPEG/WebP, corrupt or truncated data, 0-sized,
/// unsupported variant such as 12-bit JPEG, an animated WebP unless options allow it),
/// image_too_large (pixels or a side over the limits), image_over_pixel_limit (more than
/// limits.max_resized_pixels after the processor's resize), image_too_many_scans (a JPEG with more
/// than limits.max_jpeg_scans scans). PNG text, ICC and palette-suggestion chunks are skipped
/// unread, so they cost no memory.
RgbImage decode_image_bytes(std::string_view bytes, std::size_t index, const ImageLimits& limits,
                            const ImageDecodeOptions& options = {});

/// Splits a data URL `data:image/<png|jpeg|jpg|webp>;base64,<payload>` (scheme, MIME type and
/// `base64` case-insensitive; nothing else allowed before the comma) and decodes the payload with
/// strict base64 (decode_base64_strict). Returns the file bytes.
/// Throws RequestError at path `images.<index>`: image_url_unsupported (http(s)/file/other URLs,
/// bare base64 without the `data:` prefix, non-base64 data URLs), image_type_unsupported (a MIME
/// type other than the four), invalid_base64 (naming the character offset in the URL),
/// image_too_large (more than limits.max_encoded_bytes_per_image bytes).
std::vector<std::uint8_t> decode_data_url(std::string_view url, std::size_t index, const ImageLimits& limits);

/// decode_data_url + decode_image_bytes for one `images[index]` entry.
RgbImage decode_image_url(std::string_view url, std::size_t index, const ImageLimits& limits,
                          const ImageDecodeOptions& options = {});

/// Decodes every entry of a request's `images` array, in request order (docs/PROTOCOL.md §1.5).
/// Throws RequestError: too_many_images (path `images.<max_images>`, checked first),
/// image_too_large (the running total of file bytes over max_encoded_bytes_total, at the first
/// image that crosses it), and everything decode_image_url throws.
std::vector<RgbImage> decode_image_urls(const std::vector<std::string_view>& urls, const ImageLimits& limits,
                                        const ImageDecodeOptions& options = {});

}  // namespace clef
