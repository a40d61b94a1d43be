// SPDX-License-Identifier: MIT
// `clef pull`: flags, then hub::pull_model (src/hub/pull.h); docs/MODELS.md "clef pull".
#include "commands.h"

#include <iostream>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "core/error.h"
#include "core/paths.h"
#include "engine_flags.h"
#include "hub/cache.h"
#include "hub/pull.h"

namespace clef::cli {

namespace {

constexpr const char* kPullFooter =
    "Names: ORG/REPO (a release folder repository: its weights, head, config and tokenizer files),\n"
    "ORG/REPO:QUANT or ORG/REPO/FILE.gguf (a GGUF repository: one quant, its projector, the joint head and\n"
    "tokenizer files beside it). Files go to the Hugging Face cache exactly as huggingface_hub writes it\n"
    "($HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub), where clef -m NAME, huggingface_hub,\n"
    "transformers and llama.cpp find them. A kill or a dropped connection is resumed by running the same\n"
    "command again; each file is verified (sha256) before it appears under its name.\n"
    "Bounds: a file's transfer stops at its declared size (more is refused and deleted); the file list\n"
    "keeps only files a model may need, at most 100,000 entries, 1,000 pages and 16 MiB per page; a listed\n"
    "name with a control character, a backslash, a leading '/' or a '..' component is refused; --revision\n"
    "is a 40-hex commit or a branch or tag name by git's rules; a server's Retry-After is waited for up to\n"
    "60 s (a longer one stops the pull); --timeout bounds the whole pull, --stall-timeout each transfer.\n"
    "Environment: HF_ENDPOINT (hub URL), HF_TOKEN (else the token file $HF_HOME/token that `hf auth login`\n"
    "writes), HF_HUB_OFFLINE=1 (no network: succeed only when everything is cached). See docs/MODELS.md.\n"
    "Prints the model's local path on stdout. Exit codes: 0 done; 2 bad name, 401/403 (set a token), 404\n"
    "(repository, revision or quant not found), bad --revision, offline with files missing; 3 a file does\n"
    "not match its published hash or size (discarded); 5 network or disk error, --timeout, a bad listing\n"
    "(verified files are kept; rerun to resume).";

struct PullFlags {
  std::string name_text;
  hub::PullOptions options;
  std::string progress = "auto";
};

int run_pull(PullFlags& f) {
  hub::PullOptions& po = f.options;
  const std::string& progress = f.progress;
  const std::string& name_text = f.name_text;
  po.progress = progress == "bar"     ? hub::ProgressStyle::kBar
                : progress == "lines" ? hub::ProgressStyle::kLines
                : progress == "none"  ? hub::ProgressStyle::kNone
                                      : hub::ProgressStyle::kAuto;
  const auto name = hub::parse_model_name(name_text);
  if (!name) {
    throw InvalidArgument("\"" + printable(name_text) +
                          "\" is not a hub name (ORG/REPO, ORG/REPO:QUANT or ORG/REPO/FILE.gguf)");
  }
  const hub::PullReport rep = hub::pull_model(*name, po);
  std::cerr << "clef pull: " << printable(name->display()) << " is in the cache at commit " << rep.model.commit << " ("
            << rep.files_fetched << " files fetched, " << rep.files_cached << " already cached, "
            << rep.bytes_downloaded << " bytes downloaded)";
  if (!rep.model.mmproj.empty()) std::cerr << "; projector " << printable(rep.model.files.mmproj);
  std::cerr << "\n";
  std::cout << rep.model.path << "\n";
  std::cout.flush();
  if (!std::cout) throw IoError("cannot write the output to standard output");
  return 0;
}

}  // namespace

Command add_pull_command(CLI::App& parent) {
  auto f = std::make_shared<PullFlags>();
  auto* app = parent.add_subcommand("pull", "Fetch a model from the Hugging Face hub into the shared cache.");
  hub::PullOptions& po = f->options;
  app->footer(kPullFooter);
  app->allow_extras(false);
  app->add_option("NAME", f->name_text, "ORG/REPO, ORG/REPO:QUANT or ORG/REPO/FILE.gguf")->required();
  app->add_option("--revision", po.revision, "Branch, tag or commit (default main)");
  app->add_option("--parallel", po.parallel, "Files fetched at once")
      ->check(clef::cli::in_range(1, 16))
      ->capture_default_str();
  app->add_option("--progress", f->progress,
                  "auto (a bar on a terminal, else plain lines), bar (per file and total bytes, rate, ETA), lines "
                  "(a line every --log-interval seconds and one per verified file) or none")
      ->check(CLI::IsMember({"auto", "bar", "lines", "none"}))
      ->capture_default_str();
  app->add_option("--log-interval", po.log_interval_s, "Seconds between progress lines (--progress lines)")
      ->check(clef::cli::in_range(0.05, 3600.0))
      ->capture_default_str();
  app->add_option("--retries", po.retries,
                  "Attempts per file after a dropped connection or a server error (each resumes)")
      ->check(clef::cli::in_range(0, 100))
      ->capture_default_str();
  app->add_option("--timeout", po.timeout_s,
                  "Seconds the whole pull may take, retries and waits included (0: no limit); then it stops with "
                  "exit 5, keeping verified files and partial ones to resume")
      ->check(clef::cli::in_range(0.0, 1e9))
      ->capture_default_str();
  app->add_option("--stall-timeout", po.stall_s,
                  "A transfer slower than 1 KiB/s for this many seconds is cut (then retried and resumed)")
      ->check(clef::cli::in_range(1, 3600))
      ->capture_default_str();
  return {app, "clef pull --help", [f] { return run_pull(*f); }};
}

}  // namespace clef::cli
