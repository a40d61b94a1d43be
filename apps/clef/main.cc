// The `clef` command-line program. Subcommands map one-to-one onto library calls; errors are
// translated to one line on stderr and a documented exit code here, and nowhere else.
#include <cstdio>
#include <iostream>
#include <new>
#include <string>

#include <CLI/CLI.hpp>

#include "core/error.h"
#include "runtime/inspect.h"
#include "runtime/release.h"
#include "tools/make_model.h"

namespace {

constexpr const char* kExitCodes =
    "Exit codes: 0 success; 2 invalid argument or usage; 3 model folder or file malformed, missing or\n"
    "inconsistent; 4 valid but unsupported model option; 5 I/O error; 70 internal error (a bug).";

std::string model_dir_or_default(const std::string& dir) {
  if (!dir.empty()) return dir;
  const std::string d = clef::ensure_default_model();
  std::cerr << "clef: no --model given; using the embedded default model at " << d
            << " (tiny, RANDOM WEIGHTS: its answers are meaningless)\n";
  return d;
}

int run(int argc, char** argv) {
  CLI::App app{"clef: run Clef decision models (Qwen3.5 backbone + joint schema head) locally.", "clef"};
  app.footer(kExitCodes);
  app.require_subcommand(1);
  app.set_version_flag("--version", "clef 0.1.0");

  std::string inspect_dir, manifest;
  bool verify = false, as_json = false;
  std::int64_t chunk = 512, context = 16384;
  auto* inspect = app.add_subcommand(
      "inspect", "Validate a Clef release folder and print its architecture, layer pattern, parameter counts, "
                 "dtypes, head and tokenizer summary, and memory needs.");
  inspect->add_option("DIR", inspect_dir, "Release folder (default: the embedded tiny random-weight model)");
  inspect->add_option("--model,-m", inspect_dir, "Same as DIR");
  inspect->add_flag("--verify", verify, "Check the sha256 of every file against the manifest first");
  inspect->add_option("--manifest", manifest, "sha256 manifest for --verify (default DIR/SHA256SUMS)");
  inspect->add_flag("--json", as_json, "Print the report as JSON");
  inspect->add_option("--chunk", chunk, "Prefill chunk size used for the activation estimate")
      ->check(CLI::Range(1, 1 << 20));
  inspect->add_option("--context", context, "Context length used for the memory estimate")
      ->check(CLI::Range(1, 1 << 24));

  clef::MakeModelOptions mm;
  auto* make = app.add_subcommand("make-model",
                                  "Write a random-weight Clef release folder (the embedded default model). "
                                  "Only --preset tiny is generated in C++; tools/reference/make_model.py makes 0.8b and flash.");
  make->add_option("--preset", mm.preset, "Model size preset")->check(CLI::IsMember({"tiny"}));
  make->add_option("--out,-o", mm.out_dir, "Output folder")->required();
  make->add_option("--seed", mm.seed, "Random seed (same seed, same bytes)");
  make->add_flag("--force", mm.overwrite, "Overwrite the files of an existing folder");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }

  if (*inspect) {
    clef::OpenReleaseOptions opt;
    opt.verify = verify;
    opt.manifest = manifest;
    const clef::ReleaseFolder r = clef::open_release(model_dir_or_default(inspect_dir), opt);
    const clef::ModelSummary s = clef::summarize(r);
    if (as_json) {
      std::cout << clef::inspect_json(r, s, chunk, context).dump(2) << "\n";
    } else {
      std::cout << clef::format_inspect_report(r, s, chunk, context);
    }
    return 0;
  }
  if (*make) {
    clef::make_model(mm);
    std::cerr << "clef: wrote a random-weight " << mm.preset << " model to " << mm.out_dir << "\n";
    return 0;
  }
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const clef::Error& e) {
    std::cerr << "clef: error: " << e.what() << "\n";
    return clef::exit_code_for(e.kind());
  } catch (const std::bad_alloc&) {
    std::cerr << "clef: error: out of memory\n";
    return clef::exit_code_for(clef::ErrorKind::kIo);
  } catch (const std::exception& e) {
    std::cerr << "clef: internal error: " << e.what() << "\n";
    return clef::exit_code_for(clef::ErrorKind::kInternal);
  }
}
