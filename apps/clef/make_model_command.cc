// SPDX-License-Identifier: MIT
// `clef make-model`: write the random-weight tiny release folder (clef_tools/make_model.h).
#include <charconv>
#include <cstdint>
#include <iostream>
#include <memory>
#include <string>

#include "commands.h"
#include "core/error.h"
#include "core/paths.h"
#include "clef_tools/make_model.h"

namespace clef::cli {

namespace {

/// A decimal integer in [0, 2^64), exactly (no sign, no spaces, no overflow).
std::uint64_t parse_seed(const std::string& text) {
  std::uint64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
    throw InvalidArgument("--seed: \"" + printable(text) + "\" is not an integer in [0, 2^64)");
  }
  return v;
}

struct MakeModelFlags {
  MakeModelOptions options;
  std::string seed_text = "0";
};

}  // namespace

Command add_make_model_command(CLI::App& app) {
  auto f = std::make_shared<MakeModelFlags>();
  auto* make =
      app.add_subcommand("make-model",
                         "Write a random-weight Clef release folder (the embedded default model). "
                         "Only --preset tiny is generated in C++; tools/reference/make_model.py makes 0.8b and flash.");
  make->add_option("--preset", f->options.preset, "Model size preset")->check(CLI::IsMember({"tiny"}));
  make->add_option("--out,-o", f->options.out_dir, "Output folder")->required();
  make->add_option("--seed", f->seed_text, "Random seed, an integer in [0, 2^64) (same seed, same bytes)")
      ->capture_default_str();
  make->add_flag("--force", f->options.overwrite,
                 "Replace an existing release folder (never a folder that is not one)");
  return {make, "clef --help", [f] {
            f->options.seed = parse_seed(f->seed_text);
            make_model(f->options);
            std::cerr << "clef: wrote a random-weight " << f->options.preset << " model to " << f->options.out_dir
                      << "\n";
            return 0;
          }};
}

}  // namespace clef::cli
