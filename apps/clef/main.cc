// The `clef` command-line program. Subcommands map one-to-one onto library calls; errors are
// translated to one line on stderr and a documented exit code here, and nowhere else.
#include <algorithm>
#include <charconv>
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

#include "core/error.h"
#include "core/json_reader.h"
#include "runtime/engine.h"
#include "runtime/inspect.h"
#include "runtime/release.h"
#include "serve_main.h"
#include "tokenizer/tokenize_command.h"
#include "tools/make_model.h"

namespace {

constexpr const char* kExitCodes =
    "Exit codes: 0 success; 2 invalid argument or usage; 3 model folder or file malformed, missing or\n"
    "inconsistent; 4 valid but unsupported model option; 5 I/O error; 70 internal error (a bug).";

/// The folder a command works on: the one given, else the embedded default model (made on first use).
/// An explicitly empty path is an error, not a request for the default.
std::string model_dir_or_default(const std::string& dir, bool given, bool* is_default) {
  *is_default = false;
  if (given) {
    if (dir.empty()) throw clef::InvalidArgument("the model folder path is empty");
    return dir;
  }
  const std::string d = clef::ensure_default_model();
  *is_default = true;
  std::cerr << "clef: no --model given; using the embedded default model at " << clef::printable(d)
            << " (tiny, RANDOM WEIGHTS: its answers are meaningless)\n";
  return d;
}

/// Largest request body `clef decide` reads (a SystemOne body is kilobytes to a few megabytes).
constexpr std::size_t kMaxRequestBytes = std::size_t{64} << 20;

/// Reads a request body from a file or standard input ("-"), refusing directories, devices that never
/// end and bodies over kMaxRequestBytes without reading them whole.
std::string read_request(const std::string& path) {
  std::ifstream file;
  std::istream* in = &std::cin;
  if (path != "-") {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec)) {
      throw clef::InvalidArgument("the request " + clef::printable(path) + " is not a readable regular file");
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

/// Flushes stdout and turns a failed write (disk full, closed pipe) into an I/O error: an answer
/// that did not reach its reader must not exit 0.
void flush_stdout() {
  std::cout.flush();
  if (!std::cout) throw clef::IoError("cannot write the output to standard output");
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

/// Runs `load` (which opens the model folder `dir`); when `dir` is the embedded default model, a
/// load error gets a hint on how to regenerate it.
template <typename Load>
auto with_default_hint(const std::string& dir, bool is_default, Load load) {
  try {
    return load();
  } catch (const clef::Error& e) {
    if (!is_default) throw;
    throw clef::ModelLoadError(std::string(e.what()) + " (the embedded default model is damaged; delete " +
                               clef::printable(dir) + " and run again to regenerate it)");
  }
}

int run(int argc, char** argv) {
  CLI::App app{"clef: run Clef decision models (Qwen3.5 backbone + joint schema head) locally.", "clef"};
  app.footer(kExitCodes);
  app.require_subcommand(1);
  app.allow_extras(false);
  app.set_version_flag("--version", "clef 0.1.0");

  std::string inspect_dir, manifest;
  bool verify = false, as_json = false;
  std::int64_t chunk = 512, context = 16384;
  auto* inspect = app.add_subcommand(
      "inspect", "Validate a Clef release folder and print its architecture, layer pattern, parameter counts, "
                 "dtypes, head and tokenizer summary, and memory needs.");
  auto* dir_pos = inspect->add_option("DIR", inspect_dir, "Release folder (default: the embedded tiny random-weight model)");
  auto* dir_opt = inspect->add_option("--model,-m", inspect_dir, "Same as DIR");
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
  auto* tk_model = tokenize->add_option("--model,-m", tk.model_dir, "Folder with tokenizer.json (default: the embedded tiny model)");
  tokenize->add_flag("--pieces", tk.pieces, "One line per token: id, TAB, token string");
  tokenize->add_flag("--decode", tk.decode, "TEXT holds token ids: print the decoded text");
  tokenize->add_flag("--skip-special", tk.skip_special, "With --decode: drop special added tokens");

  // decide: REQUEST.json (or - for standard input) -> the SystemOne response on stdout.
  std::string decide_dir, request_path = "-", precision = "f32", confidence = "reference", overflow = "refuse";
  std::int64_t decide_threads = 0, decide_chunk = 512, max_tokens = 16384;
  bool jev_legend = false, timings = false;
  auto* decide = app.add_subcommand(
      "decide", "Answer one SystemOne request (JSON file or - for stdin) and print the SystemOne response.");
  decide->add_option("REQUEST", request_path, "Request JSON file, or - for standard input")->capture_default_str();
  auto* decide_model = decide->add_option("--model,-m", decide_dir, "Release folder (default: the embedded tiny random-weight model)");
  decide->add_option("--precision", precision, "Backbone precision: f32 (parity) or bf16 (bf16 weights, fp32 accumulation)")
      ->check(CLI::IsMember({"f32", "bf16"}))
      ->capture_default_str();
  // More threads than CPUs only makes OpenMP threads spin against each other (never faster).
  const auto cpus = static_cast<std::int64_t>(std::max(1u, std::thread::hardware_concurrency()));
  decide->add_option("--threads", decide_threads, "Threads of the engine pool (0: all CPUs; at most the CPU count)")
      ->check(CLI::Range(std::int64_t{0}, cpus))
      ->capture_default_str();
  decide->add_option("--chunk", decide_chunk, "Prefill chunk size in tokens (activation memory is O(chunk))")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  decide->add_option("--max-tokens", max_tokens, "Token budget of the whole record")
      ->check(CLI::Range(1, 1 << 24))
      ->capture_default_str();
  decide->add_option("--overflow", overflow,
                     "Over-long records: refuse (error with the token counts) or truncate (cut the state's end, as the "
                     "reference does, and report usage.state_tokens_dropped)")
      ->check(CLI::IsMember({"refuse", "truncate"}))
      ->capture_default_str();
  decide->add_option("--confidence", confidence, "Confidence: reference (top probability) or jev (TypeSafe's formula)")
      ->check(CLI::IsMember({"reference", "jev"}))
      ->capture_default_str();
  decide->add_flag("--jev-legend", jev_legend, "Write null score levels as \"\" (the TypeSafe SDK rejects null)");
  decide->add_flag("--timings", timings, "Print per-stage timings to stderr");

  if (argc > 1 && argv[1][0] != '-') {
    bool known = false;
    for (const auto* sub : app.get_subcommands({})) known = known || sub->get_name() == argv[1];
    if (!known) throw clef::InvalidArgument("unknown command \"" + clef::printable(argv[1]) + "\" (see clef --help)");
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // One line, like every other error; usage errors exit 2.
    std::string what = e.what();
    std::replace(what.begin(), what.end(), '\n', ' ');
    std::cerr << "clef: error: " << clef::printable(what) << " (see clef --help)\n";
    return 2;
  }

  if (*inspect) {
    clef::OpenReleaseOptions opt;
    opt.verify = verify || !manifest.empty();
    opt.manifest = manifest;
    bool is_default = false;
    const std::string dir = model_dir_or_default(inspect_dir, dir_pos->count() + dir_opt->count() > 0, &is_default);
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
    tk.model_dir = model_dir_or_default(tk.model_dir, tk_model->count() > 0, &tk_default);
    clef::run_tokenize_command(tk, std::cin, std::cout);
    flush_stdout();
    return 0;
  }
  if (*decide) {
    bool is_default = false;
    const std::string dir = model_dir_or_default(decide_dir, decide_model->count() > 0, &is_default);
    const std::string body = read_request(request_path);
    clef::EngineOptions eo;
    eo.backbone.precision = precision == "bf16" ? clef::ops::Precision::kBF16 : clef::ops::Precision::kF32;
    eo.backbone.threads = static_cast<int>(decide_threads);
    eo.backbone.chunk_size = decide_chunk;
    eo.record.max_length = max_tokens;
    eo.record.overflow = overflow == "truncate" ? clef::OverflowPolicy::kTruncateState : clef::OverflowPolicy::kRefuse;
    eo.answers.confidence = confidence == "jev" ? clef::ConfidenceMode::kJev : clef::ConfidenceMode::kReference;
    eo.answers.jev_legend = jev_legend;
    eo.accept_any_model = true;  // the folder chooses the model; echo the request's name like the reference
    const auto engine = with_default_hint(dir, is_default, [&] { return std::make_unique<clef::Engine>(dir, eo); });
    const clef::Decision d = engine->decide(body);
    std::cout << d.body << "\n";
    flush_stdout();
    if (timings) {
      std::fprintf(stderr, "clef: %lld tokens: tokenize %.3f s, prefill %.3f s (%.1f tokens/s), head %.3f s, total %.3f s\n",
                   static_cast<long long>(d.input_tokens), d.timings.tokenize, d.timings.prefill,
                   d.timings.prefill > 0 ? static_cast<double>(d.input_tokens) / d.timings.prefill : 0.0, d.timings.head,
                   d.timings.total);
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
  try {
    // `clef hidden`: the backbone's final-norm hidden states for given ids, as .npy (debugging and
    // parity work; flags in src/runtime/backbone_dump.cc).
    if (argc > 1 && std::string(argv[1]) == "hidden") return clef::backbone_dump_main(argc - 1, argv + 1);
    // `clef serve`: the HTTP server (flags in apps/clef/serve_main.cc).
    if (argc > 1 && std::string(argv[1]) == "serve") return clef::cli::serve_main(argc - 1, argv + 1);
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
