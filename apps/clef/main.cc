// SPDX-License-Identifier: MIT
// The `clef` command-line program: one CLI11 parser with a subcommand per command (commands.h; one
// file each). Errors are translated to one line on stderr and a documented exit code here, and
// nowhere else.
#include <filesystem>
#include <iostream>
#include <new>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>

#include "commands.h"
#include "core/error.h"
#include "core/paths.h"
#include "core/version.h"
#include "engine_flags.h"
#include "ops/gemm.h"
#include "ops/isa.h"
#include "ops/parallel.h"

namespace {

constexpr const char* kExitCodes =
    "Models by name (ORG/REPO, ORG/REPO:QUANT, ORG/REPO/FILE.gguf) come from the Hugging Face cache\n"
    "($HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub); clef pull fetches them (docs/MODELS.md).\n"
    "Exit codes: 0 success; 1 decide --jsonl finished but refused at least one line (see its error lines);\n"
    "2 invalid argument (a named input file that does not exist included), usage or a refused request;\n"
    "3 model folder or file malformed, missing or inconsistent; 4 valid but unsupported model option;\n"
    "5 I/O error (reading or writing failed); 70 internal error (a bug);\n"
    "130/143 decide --jsonl stopped by SIGINT/SIGTERM (with --out, rerun the same command to resume; serve: a\n"
    "second signal).\n"
#if defined(__aarch64__)
    "Environment: CLEF_ISA=LEVEL forces the CPU kernel level (LEVEL: baseline, neon, neon-dotprod, neon-i8mm,\n"
    "sve256, sve2-128 or native; docs/ARM64.md"
#else
    "Environment: CLEF_ISA=LEVEL forces the CPU kernel level (LEVEL: baseline, avx2, avx512, avx512bf16 or\n"
    "native"
#endif
    "; empty or native: the best this CPU has, which clef --version prints). For every command a\n"
    "bad value is exit 2 and a level this CPU lacks exit 4 (--help works regardless).\n"
    "CLEF_BF16_GEMM=clef runs bf16 mode's linear layers on clef's own vdpbf16ps GEMM where the level has\n"
    "AVX512-BF16 (elsewhere the library's, as by default; docs/NUMERICS.md).\n"
    "CLEF_BF16_PACK=N (0 to 1000000; unset or empty: 8) packs each bf16 weight into the library's own layout\n"
    "at the N-th product it runs with that weight (1: at once; 0: never, keeping the file's shared pages;\n"
    "docs/DEPLOYMENT.md); the same answers.\n"
    "CLEF_FP32_GEMM=library runs fp32 products (fp32 weights; bf16 values where the level has no bf16\n"
    "matmul) on the GEMM library instead of clef's own FMA GEMM at the avx2 level (the default there).\n"
    "OMP_WAIT_POLICY / GOMP_SPINCOUNT override clef's default OpenMP wait\n"
    "(bounded spinning, GOMP_SPINCOUNT=10000; CLEF_OMP_REEXEC=0|false|off|no keeps libgomp's own default).";

int run(int argc, char** argv) {
  CLI::App app{"clef: run Clef decision models (Qwen3.5 backbone + joint schema head) locally.", "clef"};
  app.footer(kExitCodes);
  app.require_subcommand(1);
  app.allow_extras(false);
  app.set_version_flag("--version", [] {
    return std::string("clef ") + clef::kVersion + "\nkernels: " + clef::ops::isa_description() +
           "; supported here: " + clef::ops::supported_isa_list() +
           " (CLEF_ISA=LEVEL forces one)\nGEMM: " + clef::ops::gemm_backend_name();
  });
  using namespace clef::cli;
  const std::vector<Command> commands = {add_inspect_command(app),  add_make_model_command(app),
                                         add_tokenize_command(app), add_decide_command(app),
                                         add_serve_command(app),    add_pull_command(app),
                                         add_mcp_command(app),      add_hidden_command(app)};

  if (argc > 1 && argv[1][0] != '-') {
    bool known = false;
    for (const auto& c : commands) known = known || c.app->get_name() == argv[1];
    if (!known) throw clef::InvalidArgument("unknown command \"" + clef::printable(argv[1]) + "\" (see clef --help)");
  }
  // A usage error points to the help of the command it belongs to.
  std::string hint = "clef --help";
  if (argc > 1) {
    for (const auto& c : commands) {
      if (c.app->get_name() == argv[1]) hint = c.help_hint;
    }
  }
  if (const int rc = parse_command_line(app, argc, argv, hint.c_str()); rc >= 0) return rc;
  for (const auto& c : commands) {
    if (c.app->parsed()) return c.run();
  }
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  clef::ops::apply_default_wait_policy(argv);  // may re-execute this program once (ops/parallel.h)
  try {
    // A bad CLEF_ISA is reported before any work; --help runs no kernel and works regardless.
    bool help = false;
    for (int i = 1; i < argc; ++i)
      help = help || std::string_view(argv[i]) == "--help" || std::string_view(argv[i]) == "-h";
    if (!help) {
      clef::ops::init_isa();
      (void)clef::ops::own_bf16_gemm_active();   // a bad CLEF_BF16_GEMM too, for every command
      (void)clef::ops::own_fp32_gemm_active();   // and CLEF_FP32_GEMM
      (void)clef::ops::bf16_pack_after_calls();  // and CLEF_BF16_PACK
    }
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
