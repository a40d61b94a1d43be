// SPDX-License-Identifier: MIT
#include "engine_flags.h"

#include <algorithm>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "core/paths.h"
#include "hub/cache.h"
#include "hub/pull.h"
#include "clef_tools/make_model.h"

namespace clef::cli {

namespace {

/// Levenshtein distance between `a` and `b` (option names: a few dozen characters).
std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

/// After a usage error over unexpected arguments: "unknown option --thread (did you mean --threads?)"
/// for the first one that looks like an option, with the nearest long option (at most 2 edits) of
/// the command the user chose; "" when no unexpected argument is an option (CLI11's own message
/// then says which arguments were not expected).
std::string unknown_option_message(const CLI::App& app) {
  const CLI::App* command = &app;
  while (!command->get_subcommands().empty()) command = command->get_subcommands().front();
  for (const std::string& arg : app.remaining(true)) {
    if (arg.size() < 2 || arg[0] != '-') continue;
    const std::string name = arg.substr(0, arg.find('='));
    std::string nearest;
    std::size_t best = 3;
    for (const CLI::Option* option : command->get_options()) {
      for (const std::string& long_name : option->get_lnames()) {
        const std::size_t d = edit_distance(name, "--" + long_name);
        if (d < best) best = d, nearest = "--" + long_name;
      }
    }
    return "unknown option " + name + (nearest.empty() ? std::string() : " (did you mean " + nearest + "?)");
  }
  return "";
}

}  // namespace

int parse_command_line(CLI::App& app, int argc, char** argv, const char* help_hint) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // One line, like every other error; usage errors exit 2. A misspelt option is named as such,
    // rather than as a list of "arguments not expected" that starts with whatever followed it.
    std::string what = dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr ? unknown_option_message(app) : "";
    if (what.empty()) what = e.what();
    std::replace(what.begin(), what.end(), '\n', ' ');
    std::cerr << "clef: error: " << printable(what) << " (see " << help_hint << ")\n";
    return 2;
  }
  return -1;
}

void add_split_regex_flag(CLI::App& app, std::string& value) {
  app.add_option("--split-regex", value,
                 "Pre-tokenizer split regex: file (the one tokenizer.json names, as HF tokenizers and transformers "
                 "5.10 apply it; the clef-flash release names Qwen2's), qwen35 (Qwen3.5's own, with \\p{M}, as "
                 "transformers 5.18+ AutoTokenizer applies it to a qwen3_5 folder) or qwen2; docs/TOKENIZER.md")
      ->check(CLI::IsMember({"file", "qwen35", "qwen2"}))
      ->capture_default_str();
}

std::optional<SplitPattern> split_override_from_flag(const std::string& value) {
  if (value == "file") return std::nullopt;
  return split_pattern_from_name(value);
}

const char* const kModelHelp =
    "Release folder, FILE.gguf (llama.cpp's Clef GGUF, one file with the head inside; or its Qwen3.5 GGUF with "
    "joint_head.safetensors + joint_head_config.json beside it), "
    "a folder holding one .gguf, or a Hugging Face name read from the shared cache: ORG/REPO (release folder), "
    "ORG/REPO:QUANT or ORG/REPO/FILE.gguf (GGUF repository); docs/MODELS.md (default: the embedded tiny "
    "random-weight model)";

const char* const kMmprojHelp =
    "With a GGUF model: its vision projector GGUF as llama.cpp's convert_hf_to_gguf.py --mmproj writes it "
    "(e.g. mmproj-Clef-Flash-Q8_0.gguf; F32, F16, BF16 or Q8_0), so that requests with images are answered; "
    "an error with a release folder, whose vision tower is in its own weights (docs/GGUF.md)";

CLI::Option* add_engine_flags(CLI::App& app, EngineFlags& f, bool with_pull) {
  auto* model = app.add_option("--model,-m", f.model_dir, kModelHelp);
  app.add_option("--mmproj", f.mmproj, kMmprojHelp);
  app.add_option("--revision", f.revision, "With a hub name: the branch, tag or commit to use (default main)");
  if (with_pull) {
    app.add_flag("--pull", f.pull,
                 "With a hub name: fetch the files the cache lacks first (as clef pull; HF_ENDPOINT, HF_TOKEN, "
                 "HF_HUB_OFFLINE apply)");
  }
  app.add_option("--precision", f.precision,
                 "Backbone precision: fp32 (parity; also spelled f32), bf16 (bf16 weights, fp32 accumulation) or "
                 "int8 (Q8_0: int8 weights with a scale per 32 inputs, made at load or read from a Q8_0 GGUF; "
                 "activations quantized per 32 at each layer; int32 dot products, fp32 sums; docs/NUMERICS.md)")
      ->check(CLI::IsMember({"fp32", "f32", "bf16", "int8"}))
      ->capture_default_str();
  app.add_option("--fp32-weights", f.fp32_weights,
                 "fp32 mode on a bf16 checkpoint: resident (fp32 copies of the linear weights: 4 bytes per "
                 "parameter, 7-25% faster prefill), stream (widen each weight per call; memory = the mmapped "
                 "file) or auto (resident when the copies take at most 1/4 of the memory, else stream); same results")
      ->check(CLI::IsMember({"auto", "stream", "resident"}))
      ->capture_default_str();
  // More threads than CPUs only makes OpenMP threads spin against each other (never faster).
  const auto cpus = static_cast<std::int64_t>(std::max(1u, std::thread::hardware_concurrency()));
  app.add_option("--threads", f.threads, "Threads of the engine pool (0: all CPUs; at most the CPU count)")
      ->check(clef::cli::in_range(std::int64_t{0}, cpus))
      ->capture_default_str();
  app.add_option("--chunk", f.chunk, "Prefill chunk size in tokens (activation memory is O(chunk))")
      ->check(clef::cli::in_range(1, 1 << 20))
      ->capture_default_str();
  app.add_option("--max-tokens", f.max_tokens, "Token budget of the whole record")
      ->check(clef::cli::in_range(1, 1 << 24))
      ->capture_default_str();
  app.add_option("--overflow", f.overflow,
                 "Over-long records: refuse (error with the token counts) or truncate (cut the state's end, as the "
                 "reference does, and report usage.state_tokens_dropped)")
      ->check(CLI::IsMember({"refuse", "truncate"}))
      ->capture_default_str();
  app.add_option("--confidence", f.confidence, "Confidence: reference (top probability) or jev (TypeSafe's formula)")
      ->check(CLI::IsMember({"reference", "jev"}))
      ->capture_default_str();
  app.add_flag("--jev-legend", f.jev_legend, "Write null score levels as \"\" (the TypeSafe SDK rejects null)");
  app.add_option("--vision-grid", f.vision_grid,
                 "Images: 0 = the processor's smart resize (keeps the aspect ratio); 8 or 14 = the seed's fixed "
                 "grids, every image resized to 256x256 / 448x448 pixels (aspect not kept)")
      ->check(CLI::IsMember({0, 8, 14}))
      ->capture_default_str();
  app.add_flag("--no-images", f.no_images,
               "Refuse requests with images (images_unsupported) even when the model has a vision tower");
  app.add_option("--image-backend", f.image_backend,
                 "How images are read: torchvision (what Cloudflare's reference does with a request: alpha dropped, "
                 "EXIF orientation applied, torchvision's antialiased bicubic) or pil (transformers' PIL processor on "
                 "PIL images: alpha composited on white, no EXIF, Pillow 13 bicubic); docs/VISION.md")
      ->check(CLI::IsMember({"torchvision", "pil"}))
      ->capture_default_str();
  app.add_option("--max-image-pixels", f.max_image_pixels,
                 "Images: the most pixels one image may have after the processor's resize (256 per vision patch; "
                 "the vision tower's cost). A larger image is refused (image_over_pixel_limit), never resized "
                 "differently from the reference. The default is the 448x448 cap the clef-vision-0.8b student "
                 "was trained with; 0 = no bound but the processor's max_pixels (docs/COMPATIBILITY.md)")
      ->check(clef::cli::in_range(std::uint64_t{0}, std::uint64_t{1} << 40))
      ->capture_default_str();
  add_split_regex_flag(app, f.split_regex);
  return model;
}

EngineOptions engine_options(const EngineFlags& f) {
  EngineOptions eo;
  eo.backbone.precision = ops::precision_from_name(f.precision).value_or(ops::Precision::kF32);
  eo.backbone.fp32_weights = f.fp32_weights == "resident" ? Fp32Weights::kResident
                             : f.fp32_weights == "stream" ? Fp32Weights::kStream
                                                          : Fp32Weights::kAuto;
  eo.backbone.threads = static_cast<int>(f.threads);
  eo.backbone.chunk_size = f.chunk;
  eo.record.max_length = f.max_tokens;
  eo.record.overflow = f.overflow == "truncate" ? OverflowPolicy::kTruncateState : OverflowPolicy::kRefuse;
  eo.answers.confidence = f.confidence == "jev" ? ConfidenceMode::kJev : ConfidenceMode::kReference;
  eo.answers.jev_legend = f.jev_legend;
  eo.mmproj = f.mmproj;
  eo.vision_grid = f.vision_grid;
  eo.images = !f.no_images;
  eo.image_backend = f.image_backend == "pil" ? ImageBackend::kPil : ImageBackend::kTorchvision;
  eo.max_image_pixels = f.max_image_pixels;
  eo.tokenizer.split_override = split_override_from_flag(f.split_regex);
  return eo;
}

std::string model_dir_or_default(const std::string& dir, bool given, bool* is_default) {
  *is_default = false;
  if (given) {
    if (dir.empty()) throw InvalidArgument("the model folder path is empty");
    return dir;
  }
  const std::string d = ensure_default_model();
  *is_default = true;
  std::cerr << "clef: no --model given; using the embedded default model at " << printable(d)
            << " (tiny, RANDOM WEIGHTS: its answers are meaningless)\n";
  return d;
}

std::string resolve_model_arg(const std::string& arg, bool given, const std::string& revision, bool pull,
                              bool* is_default) {
  if (!given || !hub::is_model_name_arg(arg)) {
    if (given && !revision.empty())
      throw InvalidArgument("--revision applies to a hub name (ORG/REPO), not to the path " + printable(arg));
    return model_dir_or_default(arg, given, is_default);
  }
  *is_default = false;
  const hub::ModelName name = *hub::parse_model_name(arg);
  hub::ResolvedModel r;
  if (pull) {
    hub::PullOptions po;
    po.revision = revision;
    r = hub::pull_model(name, po).model;
  } else {
    r = hub::resolve_cached(name, revision, hub::hub_cache_dir());
  }
  std::cerr << "clef: " << printable(name.display()) << " -> " << printable(r.path) << " (commit "
            << r.commit.substr(0, 12) << ")\n";
  if (!r.mmproj.empty()) {
    std::cerr << "clef: note: the repository's projector " << printable(r.files.mmproj)
              << " is in the cache; give it with --mmproj " << printable(r.mmproj)
              << " to answer requests with images (without it they are refused)\n";
  }
  return r.path;
}

}  // namespace clef::cli
