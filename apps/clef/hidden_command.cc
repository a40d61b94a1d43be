// SPDX-License-Identifier: MIT
// `clef hidden`: the backbone's final-norm hidden states for token ids, as .npy files (debugging and
// parity work; clef_tools/backbone_dump.h computes and writes them).
#include "hidden_command.h"

#include <exception>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>

#include "commands.h"
#include "core/error.h"
#include "engine_flags.h"
#include "clef_tools/backbone_dump.h"

namespace clef::cli {

namespace {

constexpr const char* kHiddenFooter =
    "Runs the backbone on the token ids and writes the final-norm hidden states as float32 .npy\n"
    "files PREFIX.chunk<C>.npy (and PREFIX.padded.npy with --padded); prints one JSON line per run\n"
    "(tokens/s of the fastest --repeat pass, every pass's seconds, peak RSS, precision, fp32 weights,\n"
    "threads, GEMM library). --fork-check also checks state fork/restore against the one-shot run.\n"
    "NAME is a hub name read from the Hugging Face cache (ORG/REPO, ORG/REPO:QUANT,\n"
    "ORG/REPO/FILE.gguf; docs/MODELS.md), --revision its branch, tag or commit.\n"
    "(Also built as the test tool clef_backbone_dump.)";

CLI::Option* last_wins(CLI::Option* o) { return o->multi_option_policy(CLI::MultiOptionPolicy::TakeLast); }

BackboneDumpOptions dump_options(const HiddenFlags& f, const std::string& model) {
  BackboneDumpOptions a;
  a.model = model;
  a.ids_file = f.ids_file;
  a.ids_list = f.ids_list;
  a.random_ids = f.random_ids;
  a.out = f.out;
  for (std::string list : f.chunks) {
    for (char& c : list) c = c == ',' ? ' ' : c;
    std::istringstream in(list);
    for (std::string c; in >> c;) a.chunks.push_back(parse_integer_flag("--chunks", c, 1, 1 << 24));
    if (a.chunks.empty()) throw InvalidArgument("--chunks needs at least one chunk size");
  }
  a.padded = f.padded;
  a.fork_check = f.fork_check;
  if (f.precision_opt->count() > 0) {
    const auto pr = ops::precision_from_name(f.precision);
    if (!pr) throw InvalidArgument("--precision must be fp32, bf16 or int8, got " + f.precision);
    a.precision = *pr;
  }
  if (f.fp32_weights_opt->count() > 0) {
    const std::string& v = f.fp32_weights;
    if (v != "stream" && v != "resident" && v != "auto") {
      throw InvalidArgument("--fp32-weights must be auto, stream or resident, got " + v);
    }
    a.fp32_weights = v == "resident" ? Fp32Weights::kResident
                     : v == "stream" ? Fp32Weights::kStream
                                     : Fp32Weights::kAuto;
  }
  if (f.threads_opt->count() > 0) a.threads = static_cast<int>(parse_integer_flag("--threads", f.threads, 0, 4096));
  if (f.repeat_opt->count() > 0) a.repeat = static_cast<int>(parse_integer_flag("--repeat", f.repeat, 1, 1000));
  if (a.model.empty()) throw InvalidArgument("--model DIR is required");
  if (a.chunks.empty() && !a.padded) a.chunks.push_back(512);
  return a;
}

}  // namespace

void add_hidden_flags(CLI::App& app, HiddenFlags& f) {
  app.footer(kHiddenFooter);
  f.model_opt = last_wins(app.add_option("--model,-m", f.model, "Release folder, GGUF model or hub NAME (required)"));
  f.revision_opt =
      last_wins(app.add_option("--revision", f.revision, "With a hub name: the branch, tag or commit (default main)"));
  last_wins(app.add_option("--ids", f.ids_file, "File of token ids (separated by commas, spaces or newlines)"));
  last_wins(app.add_option("--ids-list", f.ids_list, "Token ids, e.g. 1,2,3"));
  last_wins(app.add_option("--random-ids", f.random_ids, "T[:SEED]: T random token ids (seed default 0)"));
  last_wins(app.add_option("--out", f.out, "Write PREFIX.chunk<C>.npy (and PREFIX.padded.npy); default: no files"));
  app.add_option("--chunks", f.chunks, "Prefill chunk sizes, e.g. 1,16,64: one run each (default 512)")
      ->allow_extra_args(false);
  app.add_flag("--padded", f.padded, "Also run the static-shape (padded) readout");
  f.precision_opt = last_wins(app.add_option("--precision", f.precision, "fp32 (default), bf16 or int8"));
  f.fp32_weights_opt = last_wins(
      app.add_option("--fp32-weights", f.fp32_weights, "auto (default), stream or resident (fp32 on bf16 weights)"));
  f.threads_opt = last_wins(app.add_option("--threads", f.threads, "Threads, 0 = all CPUs (default 0)"));
  f.repeat_opt =
      last_wins(app.add_option("--repeat", f.repeat, "Runs per configuration; the fastest is reported (default 1)"));
  app.add_flag("--fork-check", f.fork_check, "Also check state fork/restore against the one-shot run");
}

int run_hidden(const HiddenFlags& f) {
  std::string model;
  if (f.model_opt->count() > 0) {
    bool is_default = false;
    model = resolve_model_arg(f.model, true, f.revision, false, &is_default);
  } else if (f.revision_opt->count() > 0) {
    throw InvalidArgument("--revision needs --model ORG/REPO");
  }
  try {
    run_backbone_dump(dump_options(f, model));
    return 0;
  } catch (const Error& e) {
    std::cerr << "clef_backbone_dump: " << e.what() << "\n";
    return exit_code_for(e.kind());
  } catch (const std::exception& e) {
    std::cerr << "clef_backbone_dump: " << e.what() << "\n";
    return 2;
  }
}

Command add_hidden_command(CLI::App& app) {
  auto f = std::make_shared<HiddenFlags>();
  auto* hidden =
      app.add_subcommand("hidden", "Backbone final-norm hidden states for token ids, as .npy (debugging, parity).");
  add_hidden_flags(*hidden, *f);
  return {hidden, "clef hidden --help", [f] { return run_hidden(*f); }};
}

}  // namespace clef::cli
