// SPDX-License-Identifier: MIT
// `clef inspect`: validate a release folder (or GGUF model) and print what it holds, its parameter
// counts and memory needs (inspect_report.h), as text or --json.
#include <cstdint>
#include <iostream>
#include <memory>
#include <string>

#include "commands.h"
#include "core/json_reader.h"
#include "engine_flags.h"
#include "inspect_report.h"
#include "output.h"
#include "runtime/inspect.h"
#include "runtime/release.h"

namespace clef::cli {

namespace {

struct InspectFlags {
  std::string dir, manifest, revision, mmproj;
  bool verify = false, as_json = false;
  std::int64_t chunk = 512, context = 16384;
  CLI::Option* dir_pos = nullptr;
  CLI::Option* dir_opt = nullptr;
};

int run_inspect(const InspectFlags& f) {
  OpenReleaseOptions opt;
  opt.verify = f.verify || !f.manifest.empty();
  opt.manifest = f.manifest;
  opt.mmproj = f.mmproj;
  bool is_default = false;
  const std::string dir =
      resolve_model_arg(f.dir, f.dir_pos->count() + f.dir_opt->count() > 0, f.revision, false, &is_default);
  const ReleaseFolder r = with_default_hint(dir, is_default, [&] { return open_release(dir, opt); });
  const ModelSummary s = summarize(r);
  if (f.as_json) {
    std::cout
        << inspect_json(r, s, f.chunk, f.context).dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace)
        << "\n";
  } else {
    std::cout << format_inspect_report(r, s, f.chunk, f.context);
  }
  flush_stdout();
  return 0;
}

}  // namespace

Command add_inspect_command(CLI::App& app) {
  auto f = std::make_shared<InspectFlags>();
  auto* inspect =
      app.add_subcommand("inspect",
                         "Validate a Clef release folder and print its architecture, layer pattern, parameter counts, "
                         "dtypes, head and tokenizer summary, and memory needs.");
  f->dir_pos = inspect->add_option(
      "DIR", f->dir,
      "Release folder, FILE.gguf (the head inside, or its files beside it), a folder holding one .gguf, or a "
      "hub name in the shared Hugging Face cache (ORG/REPO, ORG/REPO:QUANT, ORG/REPO/FILE.gguf; "
      "docs/MODELS.md) (default: the embedded tiny random-weight model)");
  f->dir_opt = inspect->add_option(
      "--model,-m", f->dir,
      "Same as DIR; also a hub name read from the shared cache (ORG/REPO, ORG/REPO:QUANT, ORG/REPO/FILE.gguf)");
  inspect->add_option("--mmproj", f->mmproj, kMmprojHelp);
  inspect->add_option("--revision", f->revision, "With a hub name: the branch, tag or commit to use (default main)");
  inspect->add_flag("--verify", f->verify, "Check the sha256 of every file against the manifest first");
  inspect->add_option("--manifest", f->manifest,
                      "sha256 manifest to verify against (implies --verify; default DIR/SHA256SUMS)");
  inspect->add_flag("--json", f->as_json, "Print the report as JSON");
  inspect->add_option("--chunk", f->chunk, "Prefill chunk size used for the activation estimate")
      ->check(clef::cli::in_range(1, 1 << 20))
      ->capture_default_str();
  inspect->add_option("--context", f->context, "Context length used for the memory estimate")
      ->check(clef::cli::in_range(1, 1 << 24))
      ->capture_default_str();
  return {inspect, "clef --help", [f] { return run_inspect(*f); }};
}

}  // namespace clef::cli
