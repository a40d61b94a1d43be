// The `clef` command-line program. Subcommands map one-to-one onto library calls; errors are
// translated to one line on stderr and a documented exit code here, and nowhere else.
#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>
#include <iostream>
#include <new>
#include <string>

#include <CLI/CLI.hpp>

#include "ops/gemm.h"
#include "ops/isa.h"
#include "ops/parallel.h"
#include "core/error.h"
#include "decide_jsonl.h"
#include "engine_flags.h"
#include "core/json_reader.h"
#include "runtime/engine.h"
#include "runtime/inspect.h"
#include "runtime/release.h"
#include "hidden_main.h"
#include "mcp_main.h"
#include "pull_main.h"
#include "serve_main.h"
#include "tokenizer/tokenize_command.h"
#include "tools/make_model.h"

namespace {

using clef::cli::model_dir_or_default;
using clef::cli::resolve_model_arg;
using clef::cli::with_default_hint;

constexpr const char* kExitCodes =
    "Models by name (ORG/REPO, ORG/REPO:QUANT, ORG/REPO/FILE.gguf) come from the Hugging Face cache\n"
    "($HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub); clef pull fetches them (docs/MODELS.md).\n"
    "Exit codes: 0 success; 1 decide --jsonl finished but refused at least one line (see its error lines);\n"
    "2 invalid argument, usage or a refused request; 3 model folder or file malformed, missing or\n"
    "inconsistent; 4 valid but unsupported model option; 5 I/O error; 70 internal error (a bug).\n"
    "Environment: CLEF_ISA=baseline|avx2|avx512|avx512bf16|native forces the CPU kernel level (default, and\n"
    "when empty: the best this CPU has; clef --version prints it; a bad value is exit 2, a level this CPU\n"
    "lacks exit 4, for every command); OMP_WAIT_POLICY / GOMP_SPINCOUNT override clef's default OpenMP wait\n"
    "(bounded spinning, GOMP_SPINCOUNT=10000; CLEF_OMP_REEXEC=0|false|off|no keeps libgomp's own default).";

/// Largest request body `clef decide` reads (a SystemOne body is kilobytes to a few megabytes).
constexpr std::size_t kMaxRequestBytes = std::size_t{64} << 20;

/// Reads a request body from a file, a pipe or FIFO (`<(...)`, mkfifo) or standard input ("-"),
/// refusing directories, devices (that may never end) and bodies over kMaxRequestBytes without
/// reading them whole.
std::string read_request(const std::string& path) {
  std::ifstream file;
  std::istream* in = &std::cin;
  if (path != "-") {
    std::error_code ec;
    const auto st = std::filesystem::status(path, ec);
    if (!std::filesystem::is_regular_file(st) && !std::filesystem::is_fifo(st)) {
      throw clef::InvalidArgument("the request " + clef::printable(path) +
                                  " is not a readable regular file or pipe");
    }
    file.open(path, std::ios::binary);
    if (!file) throw clef::InvalidArgument("cannot read the request file " + clef::printable(path));
    in = &file;
  }
  std::string body;
  char buf[1 << 16];
  while (in->read(buf, sizeof buf) || in->gcount() > 0) {
    body.append(buf, static_cast<std::size_t>(in->gcount()));
    if (body.size() > kMaxRequestBytes) {
      throw clef::InvalidArgument("the request body exceeds " + std::to_string(kMaxRequestBytes >> 20) + " MiB");
    }
  }
  return body;
}

/// What standard output is (the file or device it was opened on: "/dev/full", "/data/out.json"),
/// or "" when the system cannot tell.
std::string stdout_target() {
  std::error_code ec;
  const std::filesystem::path p = std::filesystem::read_symlink("/proc/self/fd/1", ec);
  return ec ? std::string() : p.string();
}

/// Flushes stdout and turns a failed write (disk full, closed pipe) into an I/O error that names
/// the file and the system's reason (exit 5, README "Exit codes"): an answer that did not reach
/// its reader must not exit 0.
[[noreturn]] void throw_stdout_error(int err) {
  const std::string target = stdout_target();
  throw clef::IoError("cannot write the output to standard output" +
                      (target.empty() ? std::string() : " (" + clef::printable(target) + ")") +
                      (err != 0 ? std::string(": ") + std::strerror(err) : std::string()));
}

void flush_stdout() {
  errno = 0;
  std::cout.flush();
  const int err = errno;
  if (!std::cout || std::ferror(stdout) != 0) throw_stdout_error(err);
}

/// Writes `text` to stdout and flushes it, reporting a failure as flush_stdout() does, with the
/// reason taken right at the failing call.
void write_stdout(std::string_view text) {
  flush_stdout();
  errno = 0;
  if (std::fwrite(text.data(), 1, text.size(), stdout) != text.size() || std::fflush(stdout) != 0) {
    throw_stdout_error(errno);
  }
}

/// A decimal integer in [0, 2^64), exactly (no sign, no spaces, no overflow).
std::uint64_t parse_seed(const std::string& text) {
  std::uint64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
    throw clef::InvalidArgument("--seed: \"" + clef::printable(text) + "\" is not an integer in [0, 2^64)");
  }
  return v;
}

int run(int argc, char** argv) {
  CLI::App app{"clef: run Clef decision models (Qwen3.5 backbone + joint schema head) locally.", "clef"};
  app.footer(kExitCodes);
  app.require_subcommand(1);
  app.allow_extras(false);
  app.set_version_flag("--version", [] {
    return "clef 0.1.0\nkernels: " + clef::ops::isa_description() + "; supported here: " +
           clef::ops::supported_isa_list() + " (CLEF_ISA=LEVEL forces one)\nGEMM: " +
           clef::ops::gemm_backend_name();
  });

  std::string inspect_dir, manifest;
  bool verify = false, as_json = false;
  std::int64_t chunk = 512, context = 16384;
  auto* inspect = app.add_subcommand(
      "inspect", "Validate a Clef release folder and print its architecture, layer pattern, parameter counts, "
                 "dtypes, head and tokenizer summary, and memory needs.");
  auto* dir_pos = inspect->add_option("DIR", inspect_dir, "Release folder, FILE.gguf (joint head files beside it), a folder holding one .gguf, or a hub name in the shared Hugging Face cache (ORG/REPO, ORG/REPO:QUANT, ORG/REPO/FILE.gguf; docs/MODELS.md) (default: the embedded tiny random-weight model)");
  auto* dir_opt = inspect->add_option("--model,-m", inspect_dir, "Same as DIR; also a hub name read from the shared cache (ORG/REPO, ORG/REPO:QUANT, ORG/REPO/FILE.gguf)");
  std::string inspect_revision;
  inspect->add_option("--revision", inspect_revision, "With a hub name: the branch, tag or commit to use (default main)");
  inspect->add_flag("--verify", verify, "Check the sha256 of every file against the manifest first");
  inspect->add_option("--manifest", manifest, "sha256 manifest to verify against (implies --verify; default DIR/SHA256SUMS)");
  inspect->add_flag("--json", as_json, "Print the report as JSON");
  inspect->add_option("--chunk", chunk, "Prefill chunk size used for the activation estimate")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  inspect->add_option("--context", context, "Context length used for the memory estimate")
      ->check(CLI::Range(1, 1 << 24))
      ->capture_default_str();

  clef::MakeModelOptions mm;
  auto* make = app.add_subcommand("make-model",
                                  "Write a random-weight Clef release folder (the embedded default model). "
                                  "Only --preset tiny is generated in C++; tools/reference/make_model.py makes 0.8b and flash.");
  make->add_option("--preset", mm.preset, "Model size preset")->check(CLI::IsMember({"tiny"}));
  make->add_option("--out,-o", mm.out_dir, "Output folder")->required();
  std::string seed_text = "0";
  make->add_option("--seed", seed_text, "Random seed, an integer in [0, 2^64) (same seed, same bytes)")
      ->capture_default_str();
  make->add_flag("--force", mm.overwrite, "Replace an existing release folder (never a folder that is not one)");

  clef::TokenizeCommandOptions tk;
  auto* tokenize = app.add_subcommand("tokenize", "Print the token ids of TEXT (exactly as Hugging Face tokenizers), "
                                                  "its pieces, or decode ids. Invalid UTF-8 is rejected (exit 2).");
  tokenize->add_option("TEXT", tk.text, "Text to encode, ids to --decode, or - to read standard input")->required();
  auto* tk_model = tokenize->add_option("--model,-m", tk.model_dir, "Folder with tokenizer.json, a GGUF model (tokenizer.json beside it, else its tokenizer.ggml.* metadata), or a hub name in the shared cache (default: the embedded tiny model)");
  tokenize->add_flag("--pieces", tk.pieces, "One line per token: id, TAB, token string");
  tokenize->add_flag("--decode", tk.decode, "TEXT holds token ids: print the decoded text");
  tokenize->add_flag("--skip-special", tk.skip_special, "With --decode: drop special added tokens");
  std::string tk_split_regex = "file";
  clef::cli::add_split_regex_flag(*tokenize, tk_split_regex);

  // decide: REQUEST.json (or - for standard input) -> the SystemOne response on stdout.
  std::string request_path = "-";
  clef::cli::EngineFlags decide_flags;
  bool timings = false, no_progress = false;
  clef::cli::JsonlRunOptions jsonl;
  auto* decide = app.add_subcommand(
      "decide", "Answer one SystemOne request (JSON file or - for stdin) and print the SystemOne response, or a "
                "file of requests (--jsonl), one answer line per request line.");
  auto* request_opt =
      decide->add_option("REQUEST", request_path, "Request JSON file, or - for standard input")->capture_default_str();
  auto* jsonl_opt = decide->add_option(
      "--jsonl", jsonl.input,
      "File of requests, one JSON body per line (- for stdin). Writes one line per input line: the response, or "
      "{\"error\":{\"code\",\"message\",\"path\"},\"line\":N}; keeps going past refused lines");
  jsonl_opt->excludes(request_opt);
  decide->add_option("--out,-o", jsonl.output,
                     "With --jsonl: answer file (default stdout). An existing file is resumed: its complete lines "
                     "are kept and the matching input lines skipped")
      ->needs(jsonl_opt);
  decide->add_flag("--restart", jsonl.restart, "With --jsonl --out: start over instead of resuming")->needs(jsonl_opt);
  decide->add_flag("--no-progress", no_progress, "With --jsonl: no progress line on stderr")->needs(jsonl_opt);
  auto* decide_model = clef::cli::add_engine_flags(*decide, decide_flags);
  decide->add_flag("--timings", timings, "Print per-stage timings (and the state cache's hit/miss) to stderr");
  std::int64_t state_cache_mb = clef::EngineOptions::kDefaultStateCacheMb;
  auto* cache_opt = decide->add_option(
      "--state-cache-mb", state_cache_mb,
      "Memory budget of the exact state cache in MiB (0: off); requests of a --jsonl run that share a state reuse "
      "it (a single request has nothing to reuse: the cache is off then unless this is given)")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{1} << 30))
      ->capture_default_str();

  // Commands with parsers of their own (dispatched in main() before this parser runs), listed here
  // so that --help shows every command.
  app.add_subcommand("serve", "Serve a model over HTTP (SystemOne, Cloudflare and OpenRouter routes); clef serve --help");
  app.add_subcommand("pull", "Fetch a model from the Hugging Face hub into the shared cache (NAME or NAME:QUANT); clef pull --help");
  app.add_subcommand("mcp", "Model Context Protocol server on stdio (tools decide and model_info) for agents; clef mcp --help");
  app.add_subcommand("hidden", "Backbone final-norm hidden states for token ids, as .npy (debugging, parity); clef hidden --help");

  if (argc > 1 && argv[1][0] != '-') {
    bool known = false;
    for (const auto* sub : app.get_subcommands({})) known = known || sub->get_name() == argv[1];
    if (!known) throw clef::InvalidArgument("unknown command \"" + clef::printable(argv[1]) + "\" (see clef --help)");
  }
  if (const int rc = clef::cli::parse_command_line(app, argc, argv, "clef --help"); rc >= 0) return rc;

  if (*inspect) {
    clef::OpenReleaseOptions opt;
    opt.verify = verify || !manifest.empty();
    opt.manifest = manifest;
    bool is_default = false;
    const std::string dir =
        resolve_model_arg(inspect_dir, dir_pos->count() + dir_opt->count() > 0, inspect_revision, false, &is_default);
    const clef::ReleaseFolder r = with_default_hint(dir, is_default, [&] { return clef::open_release(dir, opt); });
    const clef::ModelSummary s = clef::summarize(r);
    if (as_json) {
      std::cout << clef::inspect_json(r, s, chunk, context).dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace)
                << "\n";
    } else {
      std::cout << clef::format_inspect_report(r, s, chunk, context);
    }
    flush_stdout();
    return 0;
  }
  if (*tokenize) {
    bool tk_default = false;
    tk.model_dir = resolve_model_arg(tk.model_dir, tk_model->count() > 0, "", false, &tk_default);
    tk.split_override = clef::cli::split_override_from_flag(tk_split_regex);
    clef::run_tokenize_command(tk, std::cin, std::cout);
    flush_stdout();
    return 0;
  }
  if (*decide) {
    bool is_default = false;
    const std::string dir = resolve_model_arg(decide_flags.model_dir, decide_model->count() > 0, decide_flags.revision,
                                              decide_flags.pull, &is_default);
    const bool batch = jsonl_opt->count() > 0;
    const std::string body = batch ? std::string() : read_request(request_path);
    clef::EngineOptions eo = clef::cli::engine_options(decide_flags);
    // One request cannot hit its own entry; building one would only copy the state (memory x2).
    eo.state_cache_mb = batch || cache_opt->count() > 0 ? state_cache_mb : 0;
    eo.accept_any_model = true;  // the folder chooses the model; echo the request's name like the reference
    const auto engine = with_default_hint(dir, is_default, [&] { return std::make_unique<clef::Engine>(dir, eo); });
    if (batch) {
      jsonl.progress = !no_progress;
      jsonl.timings = timings;
      const clef::cli::JsonlRunSummary sum = clef::cli::run_decide_jsonl(*engine, jsonl);
      return sum.refused > 0 ? 1 : 0;
    }
    const clef::Decision d = engine->decide(body);
    write_stdout(d.body + "\n");
    if (timings) {
      std::fprintf(stderr,
                   "clef: %lld tokens: tokenize %.3f s, prefill %.3f s (%.1f tokens/s), head %.3f s, total %.3f s; "
                   "state cache %s (%lld tokens reused, restore %.3f s)\n",
                   static_cast<long long>(d.input_tokens), d.timings.tokenize, d.timings.prefill,
                   d.timings.prefill > 0 ? static_cast<double>(d.input_tokens - d.reused_tokens) / d.timings.prefill : 0.0,
                   d.timings.head, d.timings.total, clef::state_cache_use_name(d.state_cache),
                   static_cast<long long>(d.reused_tokens), d.timings.state_restore);
    }
    return 0;
  }
  if (*make) {
    mm.seed = parse_seed(seed_text);
    clef::make_model(mm);
    std::cerr << "clef: wrote a random-weight " << mm.preset << " model to " << mm.out_dir << "\n";
    return 0;
  }
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  clef::ops::apply_default_wait_policy(argv);  // may re-execute this program once (ops/parallel.h)
  try {
    // `clef hidden`: the backbone's final-norm hidden states for given ids, as .npy (debugging and
    // parity work; flags in src/runtime/backbone_dump.cc).
    clef::ops::init_isa();  // a bad CLEF_ISA is reported before any work
    if (argc > 1 && std::string(argv[1]) == "hidden") return clef::cli::hidden_main(argc - 1, argv + 1);
    // `clef serve`: the HTTP server (flags in apps/clef/serve_main.cc).
    if (argc > 1 && std::string(argv[1]) == "serve") return clef::cli::serve_main(argc - 1, argv + 1);
    // `clef pull`: fetch a model into the Hugging Face cache (apps/clef/pull_main.cc).
    if (argc > 1 && std::string(argv[1]) == "pull") return clef::cli::pull_main(argc - 1, argv + 1);
    // `clef mcp`: the MCP server on stdio (apps/clef/mcp_main.cc).
    if (argc > 1 && std::string(argv[1]) == "mcp") return clef::cli::mcp_main(argc - 1, argv + 1);
    return run(argc, argv);
  } catch (const clef::Error& e) {
    std::cerr << "clef: error: " << clef::printable(e.what()) << "\n";
    return clef::exit_code_for(e.kind());
  } catch (const std::filesystem::filesystem_error& e) {
    std::cerr << "clef: error: " << clef::printable(e.what()) << "\n";
    return clef::exit_code_for(clef::ErrorKind::kIo);
  } catch (const std::bad_alloc&) {
    std::cerr << "clef: error: out of memory\n";
    return clef::exit_code_for(clef::ErrorKind::kIo);
  } catch (const std::exception& e) {
    std::cerr << "clef: internal error: " << e.what() << "\n";
    return clef::exit_code_for(clef::ErrorKind::kInternal);
  }
}
