// clef_backbone_dump: runs the backbone on given token ids and writes the final-norm hidden
// states as float32 .npy files, one per run configuration, for the pytest parity suite
// (tests/reference/test_backbone.py) and the benchmark script (bench/bench_backbone.py).
//
//   clef_backbone_dump --model DIR (--ids FILE | --ids-list 1,2,3 | --random-ids T[:SEED])
//                      [--out PREFIX] [--chunks 1,16,64] [--padded] [--precision fp32|bf16] [--fp32-weights auto|stream|resident]
//                      [--threads N] [--repeat N] [--fork-check]
//
// Writes PREFIX.chunk<C>.npy for each chunk size and PREFIX.padded.npy with --padded (no files
// without --out). Prints one JSON line per run: {"run", "tokens", "seconds", "tokens_per_s",
// "peak_rss_bytes", "precision", "fp32_weights", "threads", "gemm"}. --fork-check runs the first half, forks the
// state, runs the second half on the fork and on a restored copy, and reports the max difference
// against the one-shot run. Exit codes: 0 ok, 2 bad arguments, others per core/error.h.
#include <sys/resource.h>

#include <charconv>
#include <chrono>
#include <filesystem>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "ops/parallel.h"
#include "runtime/backbone.h"

namespace clef {
namespace {

std::vector<std::int32_t> parse_ints(const std::string& text) {
  std::vector<std::int32_t> out;
  std::string tok;
  auto flush = [&]() {
    if (tok.empty()) return;
    std::size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(tok, &used);
    } catch (const std::exception&) {
      throw InvalidArgument("not an integer token id: '" + tok + "'");
    }
    if (used != tok.size() || v < 0 || v > 0x7fffffff) throw InvalidArgument("bad token id: '" + tok + "'");
    out.push_back(static_cast<std::int32_t>(v));
    tok.clear();
  };
  for (char c : text) {
    if (c == ',' || c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '[' || c == ']') {
      flush();
    } else {
      tok.push_back(c);
    }
  }
  flush();
  return out;
}

void write_npy(const std::string& path, const std::vector<float>& data, std::int64_t rows, std::int64_t cols) {
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + std::to_string(rows) + ", " +
                       std::to_string(cols) + "), }";
  const std::size_t unpadded = 10 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header.push_back('\n');
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) throw IoError("cannot write " + path + ": " + errno_message(errno));
  const char magic[] = {'\x93', 'N', 'U', 'M', 'P', 'Y', '\x01', '\x00'};
  f.write(magic, sizeof magic);
  const auto hl = static_cast<std::uint16_t>(header.size());
  const char len[2] = {static_cast<char>(hl & 0xff), static_cast<char>(hl >> 8)};
  f.write(len, 2);
  f.write(header.data(), static_cast<std::streamsize>(header.size()));
  f.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size() * sizeof(float)));
  if (!f) throw IoError("short write to " + path);
}

constexpr const char* kUsage =
    "usage: clef hidden --model DIR|NAME (--ids FILE | --ids-list 1,2,3 | --random-ids T[:SEED])\n"
    "                   [--revision REV] [--out PREFIX] [--chunks 1,16,64] [--padded] [--precision fp32|bf16]\n"
    "                   [--fp32-weights auto|stream|resident] [--threads N] [--repeat N] [--fork-check]\n"
    "Runs the backbone on the token ids and writes the final-norm hidden states as float32 .npy\n"
    "files PREFIX.chunk<C>.npy (and PREFIX.padded.npy with --padded); prints one JSON line per run\n"
    "(tokens/s, peak RSS, precision, fp32 weights, threads, GEMM library). --fork-check also checks\n"
    "state fork/restore against the one-shot run. NAME is a hub name read from the Hugging Face cache\n"
    "(ORG/REPO, ORG/REPO:QUANT, ORG/REPO/FILE.gguf; docs/MODELS.md), --revision its branch, tag or commit.\n"
    "(Also installed as clef_backbone_dump.)\n";

/// `text` as an integer in [lo, hi]; InvalidArgument naming `flag` otherwise.
long long integer_flag(const std::string& flag, const std::string& text, long long lo, long long hi) {
  long long v = 0;
  const char* end = text.data() + text.size();
  const auto [p, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || ec != std::errc() || p != end || v < lo || v > hi) {
    throw InvalidArgument(flag + " must be an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                          "], got '" + text + "'");
  }
  return v;
}

long long peak_rss_bytes() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<long long>(ru.ru_maxrss) * 1024;
}

struct Args {
  std::string model, ids_file, ids_list, random_ids, out;
  std::vector<std::int64_t> chunks;
  bool padded = false, fork_check = false;
  ops::Precision precision = ops::Precision::kF32;
  Fp32Weights fp32_weights = Fp32Weights::kAuto;
  int threads = 0, repeat = 1;
};

Args parse(int argc, char** argv) {
  Args a;
  auto need = [&](int& i) -> std::string {
    if (i + 1 >= argc) throw InvalidArgument(std::string("missing value after ") + argv[i]);
    return argv[++i];
  };
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    if (f == "--model" || f == "-m") a.model = need(i);
    else if (f == "--ids") a.ids_file = need(i);
    else if (f == "--ids-list") a.ids_list = need(i);
    else if (f == "--random-ids") a.random_ids = need(i);
    else if (f == "--out") a.out = need(i);
    else if (f == "--chunks") {
      std::string list = need(i);
      for (char& c : list) c = c == ',' ? ' ' : c;
      std::istringstream in(list);
      for (std::string c; in >> c;) a.chunks.push_back(integer_flag("--chunks", c, 1, 1 << 24));
      if (a.chunks.empty()) throw InvalidArgument("--chunks needs at least one chunk size");
    } else if (f == "--padded") a.padded = true;
    else if (f == "--fork-check") a.fork_check = true;
    else if (f == "--precision") {
      const std::string p = need(i);
      const auto pr = ops::precision_from_name(p);
      if (!pr) throw InvalidArgument("--precision must be fp32, bf16 or int8, got " + p);
      a.precision = *pr;
    } else if (f == "--fp32-weights") {
      const std::string v = need(i);
      if (v != "stream" && v != "resident" && v != "auto") {
        throw InvalidArgument("--fp32-weights must be auto, stream or resident, got " + v);
      }
      a.fp32_weights = v == "resident" ? Fp32Weights::kResident : v == "stream" ? Fp32Weights::kStream : Fp32Weights::kAuto;
    } else if (f == "--threads") a.threads = static_cast<int>(integer_flag(f, need(i), 0, 4096));
    else if (f == "--repeat") a.repeat = static_cast<int>(integer_flag(f, need(i), 1, 1000));
    else if (f == "--help" || f == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else throw InvalidArgument("unknown flag " + f + " (--help lists them)");
  }
  if (a.model.empty()) throw InvalidArgument("--model DIR is required");
  if (a.chunks.empty() && !a.padded) a.chunks.push_back(512);
  return a;
}

std::vector<std::int32_t> load_ids(const Args& a, std::int64_t vocab) {
  if (!a.ids_file.empty()) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(a.ids_file, ec)) throw IoError("--ids " + a.ids_file + " is not a readable regular file");
    std::ifstream f(a.ids_file);
    if (!f) throw IoError("cannot read " + a.ids_file);
    std::stringstream ss;
    ss << f.rdbuf();
    return parse_ints(ss.str());
  }
  if (!a.ids_list.empty()) return parse_ints(a.ids_list);
  if (!a.random_ids.empty()) {
    const auto colon = a.random_ids.find(':');
    const long long t = integer_flag("--random-ids T", a.random_ids.substr(0, colon), 1, 1 << 24);
    const auto seed = colon == std::string::npos
                          ? 0u
                          : static_cast<unsigned>(integer_flag("--random-ids SEED", a.random_ids.substr(colon + 1), 0, 0xffffffffLL));
    std::mt19937 gen(seed);
    std::uniform_int_distribution<std::int32_t> d(0, static_cast<std::int32_t>(std::min<std::int64_t>(vocab, 248000) - 1));
    std::vector<std::int32_t> ids(static_cast<std::size_t>(t));
    for (auto& x : ids) x = d(gen);
    return ids;
  }
  throw InvalidArgument("give --ids FILE, --ids-list or --random-ids");
}

void report(const std::string& run, std::size_t tokens, double secs, const Args& a) {
  std::printf("{\"run\": \"%s\", \"tokens\": %zu, \"seconds\": %.6f, \"tokens_per_s\": %.3f, "
              "\"peak_rss_bytes\": %lld, \"precision\": \"%s\", \"fp32_weights\": \"%s\", \"threads\": %d, "
              "\"gemm\": \"%s\"}\n",
              run.c_str(), tokens, secs, secs > 0 ? static_cast<double>(tokens) / secs : 0.0, peak_rss_bytes(),
              ops::precision_name(a.precision), ops::fp32_resident_weights() ? "resident" : "stream",
              ops::num_threads(), ops::gemm_backend_name().c_str());
  std::fflush(stdout);
}

}  // namespace

int backbone_dump_main(int argc, char** argv) {
  try {
    const Args a = parse(argc, argv);
    const ReleaseFolder rel = open_release(a.model);
    const std::vector<std::int32_t> ids = load_ids(a, rel.config.text.vocab_size);
    const std::int64_t H = rel.config.text.hidden_size;
    const auto T = static_cast<std::int64_t>(ids.size());
    auto run_one = [&](BackboneOptions o, const std::string& name) {
      Backbone bb(rel, o);
      std::vector<float> hs;
      double best = 1e300;
      for (int r = 0; r < a.repeat; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        hs = bb.hidden_states(ids);
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
      report(name, ids.size(), best, a);
      if (!a.out.empty()) write_npy(a.out + "." + name + ".npy", hs, T, H);
      return hs;
    };
    BackboneOptions base;
    base.precision = a.precision;
    base.fp32_weights = a.fp32_weights;
    base.threads = a.threads;
    std::vector<float> first;
    for (std::int64_t c : a.chunks) {
      BackboneOptions o = base;
      o.chunk_size = c;
      auto hs = run_one(o, "chunk" + std::to_string(c));
      if (first.empty()) first = std::move(hs);
    }
    if (a.padded) {
      BackboneOptions o = base;
      o.padded_readout = true;
      run_one(o, "padded");
    }
    if (a.fork_check && T >= 2 && !first.empty()) {
      BackboneOptions o = base;
      o.chunk_size = a.chunks.front();
      Backbone bb(rel, o);
      const auto half = static_cast<std::size_t>(T / 2);
      SequenceState st = bb.new_state();
      bb.prefill(std::span(ids).first(half), st, {});
      const SequenceState snapshot = fork_state(st);
      double worst = 0.0;
      auto compare = [&](std::int64_t first_row, const float* rows, std::int64_t count, std::int64_t) {
        for (std::int64_t i = 0; i < count * H; ++i) {
          worst = std::max(worst, static_cast<double>(std::fabs(rows[i] - first[static_cast<std::size_t>(first_row * H + i)])));
        }
      };
      SequenceState branch = fork_state(snapshot);
      bb.prefill(std::span(ids).subspan(half), branch, compare);
      restore_state(st, snapshot);
      bb.prefill(std::span(ids).subspan(half), st, compare);
      std::printf("{\"run\": \"fork_check\", \"max_abs_diff\": %.9g, \"state_bytes\": %zu}\n", worst, snapshot.bytes());
    }
    return 0;
  } catch (const Error& e) {
    std::cerr << "clef_backbone_dump: " << e.what() << "\n";
    return exit_code_for(e.kind());
  } catch (const std::exception& e) {
    std::cerr << "clef_backbone_dump: " << e.what() << "\n";
    return 2;
  }
}

}  // namespace clef
