// SPDX-License-Identifier: MIT
#include "vision/image.h"

// clang-format off
#include <cstdio>  // jpeglib.h needs FILE
#include <jpeglib.h>
#include <jerror.h>
// clang-format on
#include <png.h>
#include <webp/decode.h>
#include <webp/demux.h>

#include <array>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <new>
#include <string>

#include "decision/request_error.h"
#include "vision/base64.h"

namespace clef {
namespace {

[[noreturn]] void fail(RequestErrorCode code, std::size_t index, const std::string& message) {
  throw RequestError(code, JsonPath().key("images").index(index), message);
}

// Pillow's in-memory image modes that PNG, JPEG and WebP files open as (Pillow 13), and what
// Image.convert("RGB"/"RGBA") does with each. See docs/VISION.md "Decoding".
enum class Mode : std::uint8_t {
  kBilevel,  // "1": stored 0 / 255
  kL,        // "L": 8-bit gray (PNG 2/4-bit gray is scaled to 8 bits by replication)
  kLA,       // "LA"
  kI16,      // "I;16": 16-bit gray, converted to 8 bits by clipping at 255 (not by shifting)
  kRGB,
  kRGBA,
  kP,     // "P": palette indices, palette entries RGBA
  kCMYK,  // "CMYK", Adobe polarity (Pillow always inverts what libjpeg returns)
};

// A decoded file in Pillow's terms.
struct Raster {
  Mode mode = Mode::kRGB;
  std::uint32_t width = 0;
  std::uint32_t height = 0;
  std::vector<std::uint8_t> data;     // interleaved 8-bit samples (all modes but kI16)
  std::vector<std::uint16_t> data16;  // kI16 samples
  // kP: 256 RGBA entries; entries PLTE does not define are (0, 0, 0, 255), as in Pillow.
  std::array<std::uint8_t, 1024> palette{};
  // PIL's info["transparency"] is set (PNG tRNS): the image counts as "having alpha".
  bool has_transparency = false;
  // The tRNS colour key of kBilevel/kL/kI16 (key[0]) and kRGB (key[0..2]), as Pillow stores it.
  std::array<std::uint32_t, 3> key{};
};

std::size_t channels_of(Mode m) {
  switch (m) {
    case Mode::kBilevel:
    case Mode::kL:
    case Mode::kI16:
    case Mode::kP: return 1;
    case Mode::kLA: return 2;
    case Mode::kRGB: return 3;
    case Mode::kRGBA:
    case Mode::kCMYK: return 4;
  }
  return 1;
}

void check_dimensions(std::uint64_t width, std::uint64_t height, std::size_t index, const ImageLimits& limits) {
  if (width == 0 || height == 0) fail(RequestErrorCode::kImageInvalid, index, "image has zero width or height");
  if (width > limits.max_side || height > limits.max_side) {
    fail(RequestErrorCode::kImageTooLarge, index,
         "image is " + std::to_string(width) + "x" + std::to_string(height) + " pixels; each side may be at most " +
             std::to_string(limits.max_side));
  }
  if (width * height > limits.max_pixels_per_image) {
    fail(RequestErrorCode::kImageTooLarge, index,
         "image is " + std::to_string(width) + "x" + std::to_string(height) + " = " + std::to_string(width * height) +
             " pixels; at most " + std::to_string(limits.max_pixels_per_image) + " are allowed");
  }
  if (limits.max_resized_pixels != 0 && limits.resized_size) {
    const auto [rw, rh] = limits.resized_size(width, height);
    if (rw * rh > limits.max_resized_pixels) {
      fail(RequestErrorCode::kImageOverPixelLimit, index,
           "image is " + std::to_string(width) + "x" + std::to_string(height) +
               " pixels, which the image processor resizes to " + std::to_string(rw) + "x" + std::to_string(rh) +
               " = " + std::to_string(rw * rh) + " pixels; the limit is " + std::to_string(limits.max_resized_pixels) +
               " pixels per image after the resize (--max-image-pixels; send a smaller image)");
    }
  }
  if (limits.tokens_for_size) {
    const std::uint64_t tokens = limits.tokens_for_size(width, height);
    if (limits.tokens_before + tokens > limits.max_image_tokens) {
      fail(RequestErrorCode::kInputTooLong, index,
           "image is " + std::to_string(width) + "x" + std::to_string(height) + " pixels = " + std::to_string(tokens) +
               " image tokens" +
               (limits.tokens_before ? " (" + std::to_string(limits.tokens_before) + " before it)" : std::string()) +
               "; the record leaves room for at most " + std::to_string(limits.max_image_tokens) +
               " image tokens (--max-tokens)");
    }
  }
}

/// check_dimensions() as a predicate, for the decoders that must leave their library's setjmp
/// context before throwing.
bool dimensions_refused(std::uint64_t width, std::uint64_t height, const ImageLimits& limits) {
  try {
    check_dimensions(width, height, 0, limits);
    return false;
  } catch (const RequestError&) {
    return true;
  }
}

// ---------------------------------------------------------------------------------------------
// PNG (libpng). libpng reports errors by longjmp: every piece of state that must survive a jump
// lives in PngJob, owned by the caller of run_png (which holds no objects a jump could skip).

struct PngJob {
  const std::uint8_t* bytes = nullptr;
  std::size_t size = 0;
  std::size_t pos = 0;
  std::size_t index = 0;
  const ImageLimits* limits = nullptr;
  char error[160] = {};
  bool rows_done = false;    // every row was read (errors after that, in trailing chunks, are ignored)
  bool header_only = false;  // stopped after the header (run_png returns to let the caller throw)
  png_uint_32 width = 0, height = 0;
  int bit_depth = 0, color_type = 0;
  std::vector<std::uint8_t> raw;  // rows as libpng delivers them (packing expanded)
  std::vector<png_bytep> row_pointers;
  std::vector<png_color> plte;
  std::vector<std::uint8_t> trns_alpha;  // palette tRNS
  bool has_trns = false;
  png_color_16 trns_color{};  // gray / RGB tRNS (raw sample values)
};

void png_on_error(png_structp png, png_const_charp message) {
  auto* job = static_cast<PngJob*>(png_get_error_ptr(png));
  std::snprintf(job->error, sizeof job->error, "%s", message != nullptr ? message : "libpng error");
  png_longjmp(png, 1);
}

void png_on_warning(png_structp, png_const_charp) {}

void png_read_bytes(png_structp png, png_bytep out, std::size_t length) {
  auto* job = static_cast<PngJob*>(png_get_io_ptr(png));
  if (length > job->size - job->pos) png_error(png, "file is truncated");
  std::memcpy(out, job->bytes + job->pos, length);
  job->pos += length;
}

// Returns false on a libpng error (job->error says which).
bool run_png(PngJob* job) {
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, job, png_on_error, png_on_warning);
  if (png == nullptr) throw std::bad_alloc();
  png_infop info = png_create_info_struct(png);
  if (info == nullptr) {
    png_destroy_read_struct(&png, nullptr, nullptr);
    throw std::bad_alloc();
  }
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &info, nullptr);
    return job->rows_done;
  }
  png_set_read_fn(png, job, png_read_bytes);
  png_set_user_limits(png, 0x7fffffffu, 0x7fffffffu);  // our own limits are checked after IHDR
  // Ancillary chunks are never used (EXIF is read from the bytes by exif_orientation): every chunk
  // but IHDR, PLTE, tRNS, IDAT and IEND is skipped with its CRC checked and its data neither
  // inflated nor kept (text chunks are compressed: 300 of them once cost gigabytes), so chunks cost
  // no memory. A chunk's length stays capped at libpng's default 8,000,000 bytes (which the
  // reference's libpng applies too).
  png_set_keep_unknown_chunks(png, PNG_HANDLE_CHUNK_NEVER, nullptr, -1);
  png_set_chunk_cache_max(png, 32);
  png_set_chunk_malloc_max(png, 8000000);
  png_read_info(png, info);
  int interlace = 0;
  png_get_IHDR(png, info, &job->width, &job->height, &job->bit_depth, &job->color_type, &interlace, nullptr, nullptr);
  if (dimensions_refused(job->width, job->height, *job->limits)) {
    job->header_only = true;
    png_destroy_read_struct(&png, &info, nullptr);
    return true;
  }
  if (job->color_type == PNG_COLOR_TYPE_PALETTE) {
    png_colorp plte = nullptr;
    int n = 0;
    if (png_get_PLTE(png, info, &plte, &n) != 0) job->plte.assign(plte, plte + n);
  }
  png_bytep trans_alpha = nullptr;
  int num_trans = 0;
  png_color_16p trans_color = nullptr;
  if (png_get_tRNS(png, info, &trans_alpha, &num_trans, &trans_color) != 0) {
    job->has_trns = true;
    if (job->color_type == PNG_COLOR_TYPE_PALETTE && trans_alpha != nullptr) {
      job->trns_alpha.assign(trans_alpha, trans_alpha + num_trans);
    } else if (trans_color != nullptr) {
      job->trns_color = *trans_color;
    }
  }
  if (job->bit_depth < 8) png_set_packing(png);  // one byte per sample, values not rescaled
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  const std::size_t rowbytes = png_get_rowbytes(png, info);
  job->raw.resize(rowbytes * job->height);
  job->row_pointers.resize(job->height);
  for (png_uint_32 y = 0; y < job->height; ++y) job->row_pointers[y] = job->raw.data() + rowbytes * y;
  png_read_image(png, job->row_pointers.data());
  job->rows_done = true;
  png_read_end(png, nullptr);  // errors after the pixel data (missing IEND, bad ancillary chunk) are ignored
  png_destroy_read_struct(&png, &info, nullptr);
  return true;
}

Raster decode_png(std::string_view bytes, std::size_t index, const ImageLimits& limits) {
  PngJob job;
  job.bytes = reinterpret_cast<const std::uint8_t*>(bytes.data());
  job.size = bytes.size();
  job.index = index;
  job.limits = &limits;
  if (!run_png(&job)) {
    fail(RequestErrorCode::kImageInvalid, index, std::string("corrupt or truncated PNG data (") + job.error + ")");
  }
  if (job.header_only) {
    check_dimensions(job.width, job.height, index, limits);
    fail(RequestErrorCode::kImageInvalid, index, "PNG header is invalid");
  }
  Raster r;
  r.width = job.width;
  r.height = job.height;
  const std::size_t n = std::size_t{job.width} * job.height;
  const bool wide = job.bit_depth == 16;
  // Sample k of a row-major sample array, reduced to 8 bits by keeping the high byte (Pillow's
  // ";16B" raw modes), or the 16-bit value itself.
  auto hi = [&](std::size_t k) { return wide ? job.raw[2 * k] : job.raw[k]; };
  auto full16 = [&](std::size_t k) { return static_cast<std::uint16_t>((job.raw[2 * k] << 8) | job.raw[2 * k + 1]); };
  switch (job.color_type) {
    case PNG_COLOR_TYPE_GRAY: {
      if (wide) {
        r.mode = Mode::kI16;
        r.data16.resize(n);
        for (std::size_t i = 0; i < n; ++i) r.data16[i] = full16(i);
      } else {
        r.mode = job.bit_depth == 1 ? Mode::kBilevel : Mode::kL;
        const int scale = job.bit_depth == 1 ? 255 : job.bit_depth == 2 ? 85 : job.bit_depth == 4 ? 17 : 1;
        r.data.resize(n);
        for (std::size_t i = 0; i < n; ++i) r.data[i] = static_cast<std::uint8_t>(job.raw[i] * scale);
      }
      if (job.has_trns) {
        r.has_transparency = true;
        r.key[0] = r.mode == Mode::kBilevel ? (job.trns_color.gray != 0 ? 255u : 0u) : job.trns_color.gray;
      }
      break;
    }
    case PNG_COLOR_TYPE_RGB:
    case PNG_COLOR_TYPE_RGB_ALPHA:
    case PNG_COLOR_TYPE_GRAY_ALPHA: {
      r.mode = job.color_type == PNG_COLOR_TYPE_RGB         ? Mode::kRGB
               : job.color_type == PNG_COLOR_TYPE_RGB_ALPHA ? Mode::kRGBA
                                                            : Mode::kLA;
      const std::size_t samples = n * channels_of(r.mode);
      r.data.resize(samples);
      for (std::size_t k = 0; k < samples; ++k) r.data[k] = hi(k);
      if (job.has_trns && r.mode == Mode::kRGB) {
        r.has_transparency = true;
        r.key = {job.trns_color.red, job.trns_color.green, job.trns_color.blue};
      }
      break;
    }
    case PNG_COLOR_TYPE_PALETTE: {
      r.mode = Mode::kP;
      for (std::size_t i = 0; i < 256; ++i) r.palette[4 * i + 3] = 255;  // undefined entries: (0, 0, 0, 255)
      for (std::size_t i = 0; i < job.plte.size() && i < 256; ++i) {
        r.palette[4 * i] = job.plte[i].red;
        r.palette[4 * i + 1] = job.plte[i].green;
        r.palette[4 * i + 2] = job.plte[i].blue;
      }
      for (std::size_t i = 0; i < job.trns_alpha.size() && i < 256; ++i) r.palette[4 * i + 3] = job.trns_alpha[i];
      r.has_transparency = job.has_trns;
      r.data.assign(job.raw.begin(), job.raw.begin() + static_cast<std::ptrdiff_t>(n));
      break;
    }
    default: fail(RequestErrorCode::kImageInvalid, index, "PNG colour type is invalid");
  }
  return r;
}

// ---------------------------------------------------------------------------------------------
// JPEG (libjpeg-turbo). Same longjmp discipline as PNG: state in JpegJob.

struct JpegJob {
  jpeg_decompress_struct cinfo{};
  jpeg_error_mgr err{};
  jpeg_progress_mgr progress{};
  bool too_many_scans = false;  // the progress monitor stopped the decoder
  std::jmp_buf jump{};
  char error[JMSG_LENGTH_MAX] = {};
  bool corrupt = false;  // a warning that means lost data (truncation, premature end of a segment)
  bool header_only = false;
  const ImageLimits* limits = nullptr;
  JDIMENSION width = 0, height = 0;
  int components = 0;
  std::vector<std::uint8_t> raw;
};

void jpeg_on_error(j_common_ptr cinfo) {
  auto* job = reinterpret_cast<JpegJob*>(cinfo->client_data);
  (*cinfo->err->format_message)(cinfo, job->error);
  std::longjmp(job->jump, 1);
}

void jpeg_on_message(j_common_ptr cinfo, int level) {
  if (level != -1) return;  // trace messages
  auto* job = reinterpret_cast<JpegJob*>(cinfo->client_data);
  const int code = cinfo->err->msg_code;
  // Premature end of file (Pillow: "image file is truncated") and a scan cut short ("Corrupt JPEG
  // data: premature end of data segment") lose pixels: refuse. Other warnings (extraneous bytes
  // before a marker, unusual Adobe transforms) are tolerated, as Pillow decodes those files.
  if (code == JWRN_JPEG_EOF || code == JWRN_HIT_MARKER || code == JWRN_MUST_RESYNC || code == JWRN_NOT_SEQUENTIAL) {
    if (!job->corrupt) (*cinfo->err->format_message)(cinfo, job->error);
    job->corrupt = true;
  }
}

// Called by libjpeg between units of work (an iMCU row of a scan, a marker): stops a decoder that
// has started more scans than allowed. The scan count is also checked from the markers before
// decoding (jpeg_scan_count); this catches what that count could miss.
void jpeg_on_progress(j_common_ptr cinfo) {
  auto* job = reinterpret_cast<JpegJob*>(cinfo->client_data);
  const auto* d = reinterpret_cast<j_decompress_ptr>(cinfo);
  if (d->input_scan_number > static_cast<int>(job->limits->max_jpeg_scans)) {
    job->too_many_scans = true;
    std::snprintf(job->error, sizeof job->error, "more than %u scans", job->limits->max_jpeg_scans);
    std::longjmp(job->jump, 1);
  }
}

bool run_jpeg(JpegJob* job, const std::uint8_t* bytes, std::size_t size) {
  job->cinfo.err = jpeg_std_error(&job->err);
  job->err.error_exit = jpeg_on_error;
  job->err.emit_message = jpeg_on_message;
  job->cinfo.client_data = job;
  if (setjmp(job->jump)) {
    jpeg_destroy_decompress(&job->cinfo);
    return false;
  }
  jpeg_create_decompress(&job->cinfo);
  job->progress.progress_monitor = jpeg_on_progress;  // after create, which clears the struct
  job->cinfo.progress = &job->progress;
  jpeg_mem_src(&job->cinfo, bytes, static_cast<unsigned long>(size));
  jpeg_read_header(&job->cinfo, TRUE);
  job->width = job->cinfo.image_width;
  job->height = job->cinfo.image_height;
  job->components = job->cinfo.num_components;
  if (dimensions_refused(job->width, job->height, *job->limits)) {
    job->header_only = true;
    jpeg_destroy_decompress(&job->cinfo);
    return true;
  }
  switch (job->components) {
    case 1: job->cinfo.out_color_space = JCS_GRAYSCALE; break;
    case 3: job->cinfo.out_color_space = JCS_RGB; break;
    case 4: job->cinfo.out_color_space = JCS_CMYK; break;
    default:
      std::snprintf(job->error, sizeof job->error, "%d colour components are not supported", job->components);
      jpeg_destroy_decompress(&job->cinfo);
      return false;
  }
  jpeg_start_decompress(&job->cinfo);
  const std::size_t stride =
      std::size_t{job->cinfo.output_width} * static_cast<std::size_t>(job->cinfo.output_components);
  job->raw.resize(stride * job->cinfo.output_height);
  while (job->cinfo.output_scanline < job->cinfo.output_height) {
    JSAMPROW row = job->raw.data() + stride * job->cinfo.output_scanline;
    jpeg_read_scanlines(&job->cinfo, &row, 1);
  }
  // No jpeg_finish_decompress: what follows the last scan (a missing EOI, trailing bytes) does not
  // change the pixels, and Pillow ignores it too.
  jpeg_destroy_decompress(&job->cinfo);
  return true;
}

// The number of start-of-scan (SOS) markers in a JPEG file: its segments are walked from SOI,
// and each scan's entropy-coded data is skipped to the next marker (0xFF followed by a byte other
// than 0x00 stuffing and RST0-7). Bytes between segments are skipped as libjpeg skips them (with a
// warning). Stops at EOI, at the end of the bytes, or at a segment length below 2 (the decoder
// then reports what is wrong); linear in the file size, no allocation.
std::size_t jpeg_scan_count(std::string_view file) {
  const auto* b = reinterpret_cast<const std::uint8_t*>(file.data());
  const std::size_t size = file.size();
  std::size_t scans = 0;
  std::size_t pos = 2;  // after SOI
  while (pos + 1 < size) {
    if (b[pos] != 0xFF) {  // extraneous bytes before a marker
      ++pos;
      continue;
    }
    const std::uint8_t marker = b[pos + 1];
    if (marker == 0xFF) {  // fill byte
      ++pos;
      continue;
    }
    if (marker == 0xD9) return scans;                                              // EOI
    if (marker == 0x00 || marker == 0x01 || (marker >= 0xD0 && marker <= 0xD7)) {  // stuffing, TEM, RSTn
      pos += 2;
      continue;
    }
    if (pos + 4 > size) return scans;
    const std::size_t len = (std::size_t{b[pos + 2]} << 8) | b[pos + 3];
    if (len < 2) return scans;
    pos += 2 + len;
    if (marker != 0xDA) continue;
    ++scans;
    // Entropy-coded data up to the next marker that is not stuffing or a restart marker.
    while (pos + 1 < size) {
      if (b[pos] != 0xFF) {
        ++pos;
        continue;
      }
      const std::uint8_t next = b[pos + 1];
      if (next == 0x00 || next == 0xFF || (next >= 0xD0 && next <= 0xD7)) {
        pos += next == 0xFF ? 1 : 2;
        continue;
      }
      break;
    }
  }
  return scans;
}

Raster decode_jpeg(std::string_view bytes, std::size_t index, const ImageLimits& limits) {
  JpegJob job;
  job.limits = &limits;
  const std::size_t scans = jpeg_scan_count(bytes);
  const bool ok = scans <= limits.max_jpeg_scans &&
                  run_jpeg(&job, reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
  if (scans > limits.max_jpeg_scans || job.too_many_scans) {
    const std::string counted =
        job.too_many_scans ? "more than " + std::to_string(limits.max_jpeg_scans) : std::to_string(scans);
    fail(RequestErrorCode::kImageTooManyScans, index,
         "progressive JPEG has " + counted + " scans; at most " + std::to_string(limits.max_jpeg_scans) +
             " are decoded (each scan is a pass over the whole image; encoders write about 10)");
  }
  if (!ok)
    fail(RequestErrorCode::kImageInvalid, index, std::string("corrupt or unsupported JPEG data (") + job.error + ")");
  if (job.header_only) {
    check_dimensions(job.width, job.height, index, limits);
    fail(RequestErrorCode::kImageInvalid, index, "JPEG header is invalid");
  }
  if (job.corrupt)
    fail(RequestErrorCode::kImageInvalid, index, std::string("truncated or corrupt JPEG data (") + job.error + ")");
  Raster r;
  r.width = job.width;
  r.height = job.height;
  r.mode = job.components == 1 ? Mode::kL : job.components == 3 ? Mode::kRGB : Mode::kCMYK;
  r.data = std::move(job.raw);
  if (r.mode == Mode::kCMYK) {
    for (auto& v : r.data) v = static_cast<std::uint8_t>(255 - v);  // Pillow's "CMYK;I" raw mode
  }
  return r;
}

// ---------------------------------------------------------------------------------------------
// WebP (libwebp): the first frame through the animation decoder, as Pillow does for every WebP.

Raster decode_webp(std::string_view bytes, std::size_t index, const ImageLimits& limits, bool first_frame) {
  const auto* data = reinterpret_cast<const std::uint8_t*>(bytes.data());
  WebPBitstreamFeatures features;
  const VP8StatusCode status = WebPGetFeatures(data, bytes.size(), &features);
  if (status != VP8_STATUS_OK) {
    fail(RequestErrorCode::kImageInvalid, index,
         status == VP8_STATUS_NOT_ENOUGH_DATA ? "truncated WebP data" : "corrupt or unsupported WebP data");
  }
  check_dimensions(static_cast<std::uint64_t>(features.width), static_cast<std::uint64_t>(features.height), index,
                   limits);
  if (features.has_animation != 0 && !first_frame) {
    fail(RequestErrorCode::kImageInvalid, index,
         "animated WebP is not supported (the reference's torchvision decoder refuses it); send one frame");
  }
  WebPData webp{data, bytes.size()};
  WebPAnimDecoderOptions options;
  if (!WebPAnimDecoderOptionsInit(&options)) throw std::bad_alloc();
  options.color_mode = MODE_RGBA;
  options.use_threads = 0;
  WebPAnimDecoder* dec = WebPAnimDecoderNew(&webp, &options);
  if (dec == nullptr) fail(RequestErrorCode::kImageInvalid, index, "corrupt or truncated WebP data");
  struct Closer {
    WebPAnimDecoder* d;
    ~Closer() { WebPAnimDecoderDelete(d); }
  } closer{dec};
  WebPAnimInfo info;
  if (!WebPAnimDecoderGetInfo(dec, &info)) fail(RequestErrorCode::kImageInvalid, index, "corrupt WebP data");
  check_dimensions(info.canvas_width, info.canvas_height, index, limits);
  std::uint8_t* rgba = nullptr;
  int timestamp = 0;
  if (!WebPAnimDecoderGetNext(dec, &rgba, &timestamp) || rgba == nullptr) {
    fail(RequestErrorCode::kImageInvalid, index, "corrupt or truncated WebP data");
  }
  Raster r;
  r.width = info.canvas_width;
  r.height = info.canvas_height;
  const std::size_t n = std::size_t{r.width} * r.height;
  if (features.has_alpha != 0) {
    r.mode = Mode::kRGBA;
    r.data.assign(rgba, rgba + 4 * n);
  } else {
    r.mode = Mode::kRGB;
    r.data.resize(3 * n);
    for (std::size_t i = 0; i < n; ++i) std::memcpy(&r.data[3 * i], rgba + 4 * i, 3);
  }
  return r;
}

// ---------------------------------------------------------------------------------------------
// Conversion to RGB (Pillow Image.convert and alpha_composite semantics).

// Pillow's rounded x*y/255 for 8-bit x, y.
inline int mul_div255(int x, int y) {
  const int t = x * y + 128;
  return ((t >> 8) + t) >> 8;
}

// One channel of Pillow's alpha_composite(opaque white, (c, a)): its fixed-point "over" with 7
// fractional bits. The source weight is a*255*255/(a*255 + 255*(255-a)) in units of 2^-7 / 255;
// the blended value is then divided by 255 with the (t + t>>8) >> 8 approximation and rounded.
struct WhiteComposite {
  std::array<int, 256> coef_src{};
  std::array<int, 256> coef_white{};
  WhiteComposite() {
    constexpr int kBits = 7;
    for (int a = 1; a < 256; ++a) {
      const int out_alpha255 = a * 255 + 255 * (255 - a);
      coef_src[static_cast<std::size_t>(a)] = a * 255 * 255 * (1 << kBits) / out_alpha255;
      coef_white[static_cast<std::size_t>(a)] = 255 * (1 << kBits) - coef_src[static_cast<std::size_t>(a)];
    }
  }
  std::uint8_t operator()(int c, int a) const {
    if (a == 0) return 255;
    constexpr int kBits = 7;
    const int t =
        c * coef_src[static_cast<std::size_t>(a)] + 255 * coef_white[static_cast<std::size_t>(a)] + (0x80 << kBits);
    return static_cast<std::uint8_t>((((t >> 8) + t) >> 8) >> kBits);
  }
};

RgbImage to_rgb(const Raster& r, AlphaMode alpha_mode) {
  static const WhiteComposite composite;
  RgbImage out;
  out.width = r.width;
  out.height = r.height;
  const std::size_t n = std::size_t{r.width} * r.height;
  out.pixels.resize(3 * n);
  const bool has_alpha = r.mode == Mode::kLA || r.mode == Mode::kRGBA || r.has_transparency;
  const bool blend = alpha_mode == AlphaMode::kCompositeOnWhite && has_alpha;
  // Pillow matches a tRNS colour key against the converted 8-bit pixel using the key's low byte.
  const std::array<int, 3> key = {static_cast<int>(r.key[0] & 0xFF), static_cast<int>(r.key[1] & 0xFF),
                                  static_cast<int>(r.key[2] & 0xFF)};
  const std::size_t ch = channels_of(r.mode);
  for (std::size_t i = 0; i < n; ++i) {
    int red = 0, green = 0, blue = 0, alpha = 255;
    switch (r.mode) {
      case Mode::kBilevel:
      case Mode::kL:
        red = green = blue = r.data[i];
        if (r.has_transparency && red == key[0]) alpha = 0;
        break;
      case Mode::kI16:
        red = green = blue = r.data16[i] > 255 ? 255 : r.data16[i];
        if (r.has_transparency && red == key[0]) alpha = 0;
        break;
      case Mode::kLA:
        red = green = blue = r.data[ch * i];
        alpha = r.data[ch * i + 1];
        break;
      case Mode::kRGB:
        red = r.data[ch * i];
        green = r.data[ch * i + 1];
        blue = r.data[ch * i + 2];
        if (r.has_transparency && red == key[0] && green == key[1] && blue == key[2]) alpha = 0;
        break;
      case Mode::kRGBA:
        red = r.data[ch * i];
        green = r.data[ch * i + 1];
        blue = r.data[ch * i + 2];
        alpha = r.data[ch * i + 3];
        break;
      case Mode::kP: {
        const std::size_t e = 4 * std::size_t{r.data[i]};
        red = r.palette[e];
        green = r.palette[e + 1];
        blue = r.palette[e + 2];
        alpha = r.palette[e + 3];
        break;
      }
      case Mode::kCMYK: {
        const int nk = 255 - r.data[ch * i + 3];
        red = nk - mul_div255(r.data[ch * i], nk);
        green = nk - mul_div255(r.data[ch * i + 1], nk);
        blue = nk - mul_div255(r.data[ch * i + 2], nk);
        break;
      }
    }
    std::uint8_t* o = &out.pixels[3 * i];
    if (blend) {
      o[0] = composite(red, alpha);
      o[1] = composite(green, alpha);
      o[2] = composite(blue, alpha);
    } else {
      o[0] = static_cast<std::uint8_t>(red);
      o[1] = static_cast<std::uint8_t>(green);
      o[2] = static_cast<std::uint8_t>(blue);
    }
  }
  return out;
}

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() && s.compare(0, prefix.size(), prefix) == 0;
}

bool iequals_prefix(std::string_view s, std::string_view lower_prefix) {
  if (s.size() < lower_prefix.size()) return false;
  for (std::size_t i = 0; i < lower_prefix.size(); ++i) {
    char c = s[i];
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    if (c != lower_prefix[i]) return false;
  }
  return true;
}

std::uint32_t read_u32be(const std::uint8_t* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) | p[3];
}

}  // namespace

int exif_orientation_of_tiff(std::string_view tiff) noexcept {
  if (tiff.size() < 8) return 1;
  const auto* t = reinterpret_cast<const std::uint8_t*>(tiff.data());
  const bool le = t[0] == 'I' && t[1] == 'I';
  if (!le && !(t[0] == 'M' && t[1] == 'M')) return 1;
  auto u16 = [&](std::size_t o) { return le ? t[o] | (t[o + 1] << 8) : (t[o] << 8) | t[o + 1]; };
  auto u32 = [&](std::size_t o) {
    return le ? std::uint32_t{t[o]} | (std::uint32_t{t[o + 1]} << 8) | (std::uint32_t{t[o + 2]} << 16) |
                    (std::uint32_t{t[o + 3]} << 24)
              : read_u32be(t + o);
  };
  if (u16(2) != 42) return 1;
  const std::uint32_t ifd = u32(4);
  if (ifd > tiff.size() || tiff.size() - ifd < 2) return 1;
  const std::size_t n = static_cast<std::size_t>(u16(ifd));
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t e = ifd + 2 + 12 * i;
    if (e + 12 > tiff.size()) return 1;
    if (u16(e) != 0x0112) continue;
    if (u16(e + 2) != 3 || u32(e + 4) < 1) return 1;  // SHORT, at least one value
    const int v = u16(e + 8);
    return v >= 1 && v <= 8 ? v : 1;
  }
  return 1;
}

int exif_orientation(std::string_view file) noexcept {
  const auto* b = reinterpret_cast<const std::uint8_t*>(file.data());
  const std::size_t size = file.size();
  if (starts_with(file, "\x89PNG\r\n\x1a\n")) {
    // Chunks up to the first IDAT: the eXIf chunk's data is the TIFF structure itself.
    for (std::size_t pos = 8; pos + 12 <= size;) {
      const std::uint32_t len = read_u32be(b + pos);
      const std::string_view type = file.substr(pos + 4, 4);
      if (type == "IDAT" || type == "IEND" || len > size - pos - 12) return 1;
      if (type == "eXIf") return exif_orientation_of_tiff(file.substr(pos + 8, len));
      pos += 12 + std::size_t{len};
    }
    return 1;
  }
  if (starts_with(file, "\xFF\xD8")) {
    // Marker segments up to the start of scan: the first APP1 holding "Exif\0\0" + TIFF.
    for (std::size_t pos = 2; pos + 4 <= size;) {
      if (b[pos] != 0xFF) return 1;
      const std::uint8_t marker = b[pos + 1];
      if (marker == 0xFF) {  // fill byte
        ++pos;
        continue;
      }
      if (marker == 0xDA || marker == 0xD9) return 1;
      if (marker == 0x01 || (marker >= 0xD0 && marker <= 0xD7)) {
        pos += 2;
        continue;
      }
      const std::size_t len = (std::size_t{b[pos + 2]} << 8) | b[pos + 3];
      if (len < 2 || pos + 2 + len > size) return 1;
      const std::string_view payload = file.substr(pos + 4, len - 2);
      if (marker == 0xE1 && payload.size() >= 6 && payload.substr(0, 6) == std::string_view("Exif\0\0", 6)) {
        return exif_orientation_of_tiff(payload.substr(6));
      }
      pos += 2 + len;
    }
  }
  return 1;
}

RgbImage apply_exif_orientation(const RgbImage& image, int orientation) {
  if (orientation <= 1 || orientation > 8) return image;
  const std::uint32_t w = image.width, h = image.height;
  const bool swap = orientation >= 5;
  RgbImage out;
  out.width = swap ? h : w;
  out.height = swap ? w : h;
  out.pixels.resize(image.pixels.size());
  for (std::uint32_t r = 0; r < out.height; ++r) {
    for (std::uint32_t c = 0; c < out.width; ++c) {
      std::uint32_t sr = r, sc = c;  // source row / column of output (r, c)
      switch (orientation) {
        case 2: sc = w - 1 - c; break;  // mirror left-right
        case 3:
          sr = h - 1 - r;
          sc = w - 1 - c;
          break;                        // rotate 180
        case 4: sr = h - 1 - r; break;  // mirror top-bottom
        case 5:
          sr = c;
          sc = r;
          break;  // transpose
        case 6:
          sr = h - 1 - c;
          sc = r;
          break;  // rotate 90 clockwise
        case 7:
          sr = h - 1 - c;
          sc = w - 1 - r;
          break;  // transverse
        case 8:
          sr = c;
          sc = w - 1 - r;
          break;  // rotate 90 counter-clockwise
        default: break;
      }
      const std::uint8_t* s = image.pixels.data() + (std::size_t{sr} * w + sc) * 3;
      std::uint8_t* d = out.pixels.data() + (std::size_t{r} * out.width + c) * 3;
      d[0] = s[0];
      d[1] = s[1];
      d[2] = s[2];
    }
  }
  return out;
}

RgbImage decode_image_bytes(std::string_view bytes, std::size_t index, const ImageLimits& limits,
                            const ImageDecodeOptions& options) {
  if (bytes.empty()) fail(RequestErrorCode::kImageInvalid, index, "image data is empty");
  Raster raster;
  bool exif_applies = false;  // torchvision applies EXIF orientation to PNG and JPEG, never to WebP
  if (starts_with(bytes, "\x89PNG\r\n\x1a\n")) {
    raster = decode_png(bytes, index, limits);
    exif_applies = true;
  } else if (starts_with(bytes, "\xFF\xD8\xFF")) {
    raster = decode_jpeg(bytes, index, limits);
    exif_applies = true;
  } else if (bytes.size() >= 12 && starts_with(bytes, "RIFF") && bytes.substr(8, 4) == "WEBP") {
    raster = decode_webp(bytes, index, limits, options.first_frame_of_animation);
  } else {
    fail(RequestErrorCode::kImageInvalid, index, "image data is not a PNG, JPEG or WebP file");
  }
  RgbImage rgb = to_rgb(raster, options.alpha);
  if (options.apply_exif_orientation && exif_applies) {
    const int o = exif_orientation(bytes);
    if (o > 1) return apply_exif_orientation(rgb, o);
  }
  return rgb;
}

std::vector<std::uint8_t> decode_data_url(std::string_view url, std::size_t index, const ImageLimits& limits) {
  if (!iequals_prefix(url, "data:")) {
    if (iequals_prefix(url, "http://") || iequals_prefix(url, "https://")) {
      fail(RequestErrorCode::kImageUrlUnsupported, index, "remote image URLs are not fetched; send a base64 data URL");
    }
    if (iequals_prefix(url, "file:"))
      fail(RequestErrorCode::kImageUrlUnsupported, index, "file URLs are not allowed; send a base64 data URL");
    if (!check_base64_strict(url) && !url.empty()) {
      fail(RequestErrorCode::kImageUrlUnsupported, index,
           "image must be a data URL (data:image/<png|jpeg|webp>;base64,...), not bare base64");
    }
    fail(RequestErrorCode::kImageUrlUnsupported, index,
         "image must be a data URL (data:image/<png|jpeg|webp>;base64,...)");
  }
  const std::size_t comma = url.find(',');
  if (comma == std::string_view::npos)
    fail(RequestErrorCode::kImageUrlUnsupported, index, "data URL has no ',' before its payload");
  std::string header(url.substr(5, comma - 5));
  for (auto& c : header) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  const std::size_t semi = header.find(';');
  const std::string mime = header.substr(0, semi);
  if (mime != "image/png" && mime != "image/jpeg" && mime != "image/jpg" && mime != "image/webp") {
    fail(RequestErrorCode::kImageTypeUnsupported, index,
         "the data URL's media type is not image/png, image/jpeg, image/jpg or image/webp");
  }
  if (semi == std::string::npos || header.substr(semi) != ";base64") {
    fail(RequestErrorCode::kImageUrlUnsupported, index, "data URL must be ';base64' encoded with no other parameters");
  }
  const std::string_view payload = url.substr(comma + 1);
  if (payload.size() / 4 * 3 > limits.max_encoded_bytes_per_image + 2) {
    fail(RequestErrorCode::kImageTooLarge, index,
         "image file is about " + std::to_string(payload.size() / 4 * 3) + " bytes; at most " +
             std::to_string(limits.max_encoded_bytes_per_image) + " are allowed");
  }
  Base64Problem problem;
  auto bytes = decode_base64_strict(payload, &problem);
  if (!bytes) {
    fail(RequestErrorCode::kInvalidBase64, index,
         "invalid base64 in the data URL: " + problem.reason + " at character " +
             std::to_string(comma + 1 + problem.offset));
  }
  if (bytes->size() > limits.max_encoded_bytes_per_image) {
    fail(RequestErrorCode::kImageTooLarge, index,
         "image file is " + std::to_string(bytes->size()) + " bytes; at most " +
             std::to_string(limits.max_encoded_bytes_per_image) + " are allowed");
  }
  if (bytes->empty()) fail(RequestErrorCode::kImageInvalid, index, "data URL payload is empty");
  return std::move(*bytes);
}

RgbImage decode_image_url(std::string_view url, std::size_t index, const ImageLimits& limits,
                          const ImageDecodeOptions& options) {
  const std::vector<std::uint8_t> bytes = decode_data_url(url, index, limits);
  return decode_image_bytes(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()), index, limits,
                            options);
}

std::vector<RgbImage> decode_image_urls(const std::vector<std::string_view>& urls, const ImageLimits& limits,
                                        const ImageDecodeOptions& options) {
  if (urls.size() > limits.max_images) {
    fail(RequestErrorCode::kTooManyImages, limits.max_images,
         std::to_string(urls.size()) + " images; at most " + std::to_string(limits.max_images) + " are allowed");
  }
  std::vector<RgbImage> out;
  out.reserve(urls.size());
  std::size_t total = 0;
  for (std::size_t i = 0; i < urls.size(); ++i) {
    const std::vector<std::uint8_t> bytes = decode_data_url(urls[i], i, limits);
    total += bytes.size();
    if (total > limits.max_encoded_bytes_total) {
      fail(RequestErrorCode::kImageTooLarge, i,
           "the images' files total " + std::to_string(total) + " bytes so far; at most " +
               std::to_string(limits.max_encoded_bytes_total) + " are allowed per request");
    }
    ImageLimits li = limits;
    li.tokens_before = 0;
    if (limits.tokens_for_size) {
      for (const RgbImage& prev : out) li.tokens_before += limits.tokens_for_size(prev.width, prev.height);
    }
    out.push_back(decode_image_bytes(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()), i, li,
                                     options));
  }
  return out;
}

}  // namespace clef
