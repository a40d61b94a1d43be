// SPDX-License-Identifier: MIT
// clef_bench_tokenizer: single-thread encode throughput of clef's tokenizer and of the PyPI
// `tokenizers` (HF Rust core) on the same >= 50 MB mixed corpus, measured in one run, plus the
// cold load time of tokenizer.json; prints a table and the ratio (goal: >= 1.5x HF).
//
//   clef_bench_tokenizer --model DIR [--mb 50] [--sources PYTHON_STDLIB_DIR] [--no-hf] [--keep FILE]
//
// Corpus (deterministic): Python standard-library sources (code with English comments and
// docstrings; --sources, default: python3's stdlib), the request corpus strings of
// tests/data/requests/corpus.jsonl, and generated multilingual text (CJK, Hangul,
// Thai, Devanagari, Arabic with harakat, Cyrillic, accented Latin, emoji with ZWJ/VS16, digits,
// whitespace runs), cut into documents of 0.5-8 KiB. HF runs in a python3 child process with
// RAYON_NUM_THREADS=1 and TOKENIZERS_PARALLELISM=false (serial encode_batch_fast); both sides hash
// their ids (FNV-1a 64) so the run also checks that they agree on the whole corpus.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return std::move(ss).str();
}

std::string run_capture(const std::string& cmd) {
  std::string out;
  FILE* f = popen(cmd.c_str(), "r");
  if (!f) return out;
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  pclose(f);
  return out;
}

std::string utf8(std::uint32_t cp) {
  std::string s;
  clef::unicode::append_utf8(cp, s);
  return s;
}

// Generated multilingual text: words from several scripts, punctuation, digits, emoji, spaces.
std::string multilingual(std::mt19937_64& rng, std::size_t bytes) {
  struct Script {
    std::uint32_t lo, hi;
    std::uint32_t mark_lo, mark_hi;  // optional combining marks (0 = none)
  };
  const Script scripts[] = {{0x4E00, 0x9FA5, 0, 0},           {0xAC00, 0xD7A3, 0, 0},
                            {0x3041, 0x3096, 0, 0},           {0x30A1, 0x30FA, 0, 0},
                            {0x0E01, 0x0E2E, 0x0E31, 0x0E3A}, {0x0915, 0x0939, 0x093E, 0x094D},
                            {0x0621, 0x064A, 0x064B, 0x0652}, {0x0430, 0x044F, 0, 0},
                            {0x00E0, 0x00FF, 0, 0},           {0x03B1, 0x03C9, 0, 0}};
  const char* emoji[] = {"\xF0\x9F\x98\x80",
                         "\xF0\x9F\x8E\x89",
                         "\xE2\x9D\xA4\xEF\xB8\x8F",
                         "\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7",
                         "\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD",
                         "\xF0\x9F\x87\xAF\xF0\x9F\x87\xB5"};
  const char* punct[] = {", ", ". ", "\xEF\xBC\x8C", "\xE3\x80\x82", "! ", "? ", " - ", "\n", "\n\n", ": ", " (", ") "};
  std::string s;
  std::uniform_int_distribution<int> pick(0, 99);
  while (s.size() < bytes) {
    const Script& sc = scripts[static_cast<std::size_t>(pick(rng)) % std::size(scripts)];
    const int sentence = 4 + pick(rng) % 12;
    for (int w = 0; w < sentence; ++w) {
      const int len = 1 + pick(rng) % 7;
      for (int k = 0; k < len; ++k) {
        s += utf8(sc.lo + static_cast<std::uint32_t>(rng() % (sc.hi - sc.lo + 1)));
        if (sc.mark_lo && pick(rng) < 35)
          s += utf8(sc.mark_lo + static_cast<std::uint32_t>(rng() % (sc.mark_hi - sc.mark_lo + 1)));
      }
      const int r = pick(rng);
      if (r < 8) {
        s.push_back(' ');
        s.append(std::to_string(rng() % 100000));
      } else if (r < 12) {
        s += emoji[static_cast<std::size_t>(r) % std::size(emoji)];
      } else if (r < 15) {
        s += "  \t";
      }
      s += (sc.lo >= 0x3041 && sc.lo < 0xAC00) || sc.lo == 0x4E00 ? "" : " ";
    }
    s += punct[static_cast<std::size_t>(pick(rng)) % std::size(punct)];
  }
  return s;
}

// Cuts text into documents of 0.5..8 KiB at UTF-8 boundaries.
void cut(const std::string& text, std::mt19937_64& rng, std::vector<std::string>& docs) {
  std::size_t i = 0;
  while (i < text.size()) {
    std::size_t n = 512 + rng() % (8192 - 512);
    std::size_t j = std::min(text.size(), i + n);
    while (j < text.size() && (static_cast<unsigned char>(text[j]) & 0xC0) == 0x80) ++j;
    docs.push_back(text.substr(i, j - i));
    i = j;
  }
}

std::uint64_t fnv(std::uint64_t h, std::int32_t id) {
  for (int k = 0; k < 4; ++k) {
    h ^= (static_cast<std::uint32_t>(id) >> (8 * k)) & 0xFFu;
    h *= 0x100000001B3ull;
  }
  return h;
}

constexpr const char* kPython = R"PY(
import os, struct, sys, time
from tokenizers import Tokenizer
path, corpus = sys.argv[1], sys.argv[2]
t0 = time.perf_counter(); tok = Tokenizer.from_file(path); load = time.perf_counter() - t0
data = open(corpus, "rb").read(); docs = []; pos = 0
while pos < len(data):
    (n,) = struct.unpack_from("<I", data, pos); pos += 4
    docs.append(data[pos:pos + n].decode("utf-8")); pos += n
best = None
fast = hasattr(tok, "encode_batch_fast")
for rep in range(2):
    t0 = time.perf_counter()
    encs = (tok.encode_batch_fast if fast else tok.encode_batch)(docs, add_special_tokens=False)
    dt = time.perf_counter() - t0
    best = dt if best is None else min(best, dt)
h = 0xCBF29CE484222325; n_ids = 0
for e in encs:
    for i in e.ids:
        for k in range(4):
            h ^= (i >> (8 * k)) & 0xFF; h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    n_ids += len(e.ids)
print(f"HF {load:.6f} {best:.6f} {n_ids} {h:016x} {'encode_batch_fast' if fast else 'encode_batch'}")
)PY";

}  // namespace

int main(int argc, char** argv) {
  try {
    std::string model, sources, keep;
    double mb = 50;
    bool hf = true;
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      if (a == "--model" && i + 1 < argc) {
        model = argv[++i];
      } else if (a == "--mb" && i + 1 < argc) {
        mb = std::atof(argv[++i]);
      } else if (a == "--sources" && i + 1 < argc) {
        sources = argv[++i];
      } else if (a == "--keep" && i + 1 < argc) {
        keep = argv[++i];
      } else if (a == "--no-hf") {
        hf = false;
      } else {
        std::cerr << "usage: clef_bench_tokenizer --model DIR [--mb 50] [--sources DIR] [--no-hf] [--keep FILE]\n";
        return 2;
      }
    }
    if (model.empty()) {
      std::cerr << "clef_bench_tokenizer: --model DIR is required (a folder with tokenizer.json)\n";
      return 2;
    }
    // --- cold load (first in this process), then warm loads ---
    auto t = Clock::now();
    clef::Tokenizer tok = clef::Tokenizer::load(model);
    const double cold = seconds_since(t);
    std::vector<double> warm;
    for (int i = 0; i < 3; ++i) {
      t = Clock::now();
      clef::Tokenizer again = clef::Tokenizer::load(model);
      warm.push_back(seconds_since(t));
    }
    std::sort(warm.begin(), warm.end());
    const auto json_size = fs::file_size(fs::path(model) / "tokenizer.json");

    // --- corpus ---
    if (sources.empty()) {
      std::string out =
          run_capture("python3 -c \"import sysconfig;print(sysconfig.get_paths()['stdlib'])\" 2>/dev/null");
      while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
      sources = out;
    }
    const auto target = static_cast<std::size_t>(mb * 1e6);
    std::mt19937_64 rng(20260501);
    std::vector<std::string> docs;
    std::size_t code_bytes = 0, ml_bytes = 0, req_bytes = 0;
    {
      std::vector<fs::path> files;
      if (!sources.empty() && fs::is_directory(sources)) {
        for (const auto& e : fs::recursive_directory_iterator(sources, fs::directory_options::skip_permission_denied)) {
          if (e.is_regular_file() && e.path().extension() == ".py" &&
              e.path().string().find("site-packages") == std::string::npos) {
            files.push_back(e.path());
          }
        }
      }
      std::sort(files.begin(), files.end());
      const fs::path corpus = fs::path(CLEF_SOURCE_DIR) / "tests" / "data" / "requests" / "corpus.jsonl";
      const std::string requests = fs::exists(corpus) ? slurp(corpus) : std::string();
      std::size_t fi = 0;
      std::size_t total = 0;
      while (total < target) {
        // ~60% code, ~37% multilingual, ~3% request JSON (the whole corpus file per draw)
        const auto r = rng() % 100;
        std::string chunk;
        if (r < 60 && !files.empty()) {
          chunk = slurp(files[fi++ % files.size()]);
          if (clef::unicode::find_invalid_utf8(chunk) != std::string_view::npos) continue;
          code_bytes += chunk.size();
        } else if (r < 97 || requests.empty()) {
          chunk = multilingual(rng, 16384);
          ml_bytes += chunk.size();
        } else {
          chunk = requests;
          req_bytes += chunk.size();
        }
        const std::size_t before = docs.size();
        cut(chunk, rng, docs);
        for (std::size_t k = before; k < docs.size(); ++k) total += docs[k].size();
      }
    }
    std::size_t bytes = 0;
    for (const auto& d : docs) bytes += d.size();

    // --- clef: single thread, one workspace; best of 3 ---
    clef::TokenizerWorkspace ws;
    std::vector<std::int32_t> ids;
    ids.reserve(1 << 16);
    double best = 1e300;
    std::uint64_t hash = 0;
    std::size_t n_ids = 0;
    for (int rep = 0; rep < 3; ++rep) {
      if (rep == 0) hash = 0xCBF29CE484222325ull;
      n_ids = 0;
      t = Clock::now();
      for (const auto& d : docs) {
        ids.clear();
        tok.encode(d, ids, ws);
        n_ids += ids.size();
        if (rep == 0) {
          for (const auto id : ids) hash = fnv(hash, id);
        }
      }
      const double dt = seconds_since(t);
      if (rep > 0) best = std::min(best, dt);  // rep 0 also hashes
    }
    const double clef_mbs = static_cast<double>(bytes) / 1e6 / best;

    // --- HF, same corpus, child process ---
    double hf_load = 0, hf_time = 0;
    std::size_t hf_ids = 0;
    std::string hf_hash, hf_api;
    if (hf) {
      const fs::path tmp = keep.empty()
                               ? fs::temp_directory_path() / ("clef-bench-corpus-" + std::to_string(getpid()) + ".bin")
                               : fs::path(keep);
      {
        std::ofstream f(tmp, std::ios::binary);
        for (const auto& d : docs) {
          const auto n = static_cast<std::uint32_t>(d.size());
          f.write(reinterpret_cast<const char*>(&n), 4);
          f.write(d.data(), static_cast<std::streamsize>(d.size()));
        }
      }
      const fs::path script = tmp.string() + ".py";
      {
        std::ofstream f(script);
        f << kPython;
      }
      const std::string out =
          run_capture("RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false python3 '" + script.string() + "' '" +
                      (fs::path(model) / "tokenizer.json").string() + "' '" + tmp.string() + "'");
      fs::remove(script);
      if (keep.empty()) fs::remove(tmp);
      std::istringstream in(out.substr(std::min(out.find("HF "), out.size())));
      std::string tag;
      in >> tag >> hf_load >> hf_time >> hf_ids >> hf_hash >> hf_api;
      if (tag != "HF") {
        std::cerr << "HF measurement failed: " << out << "\n";
        hf = false;
      }
    }
    char clef_hash[17];
    std::snprintf(clef_hash, sizeof clef_hash, "%016llx", static_cast<unsigned long long>(hash));

    std::printf("tokenizer: %s (tokenizer.json %.1f MB, %zu vocab, %zu merges, %s regex)\n", model.c_str(),
                static_cast<double>(json_size) / 1e6, tok.vocab_entries(), tok.merge_count(),
                clef::split_pattern_name(tok.split_pattern()));
    std::printf("corpus: %.1f MB in %zu documents (code %.1f MB, multilingual %.1f MB, request JSON %.1f MB)\n",
                static_cast<double>(bytes) / 1e6, docs.size(), static_cast<double>(code_bytes) / 1e6,
                static_cast<double>(ml_bytes) / 1e6, static_cast<double>(req_bytes) / 1e6);
    std::printf("\n| %-28s | %12s | %12s | %8s |\n", "measure", "clef.cpp", "HF tokenizers", "ratio");
    std::printf("|%s|%s|%s|%s|\n", std::string(30, '-').c_str(), std::string(14, '-').c_str(),
                std::string(15, '-').c_str(), std::string(10, '-').c_str());
    if (hf) {
      std::printf("| %-28s | %12.1f | %13.1f | %7.2fx |\n", "encode, 1 thread (MB/s)", clef_mbs,
                  static_cast<double>(bytes) / 1e6 / hf_time, hf_time / best);
      std::printf("| %-28s | %12.1f | %13.1f | %7.2fx |\n", "load tokenizer.json (ms)", cold * 1e3, hf_load * 1e3,
                  hf_load / cold);
      std::printf("| %-28s | %12zu | %13zu | %8s |\n", "tokens", n_ids, hf_ids, n_ids == hf_ids ? "same" : "DIFFER");
      std::printf("| %-28s | %12s | %13s | %8s |\n", "ids hash (FNV-1a 64)", clef_hash, hf_hash.c_str(),
                  hf_hash == clef_hash ? "same" : "DIFFER");
      std::printf("\nclef warm load: %.1f ms (median of 3); HF API: %s\n", warm[1] * 1e3, hf_api.c_str());
    } else {
      std::printf("| %-28s | %12.1f | %13s | %8s |\n", "encode, 1 thread (MB/s)", clef_mbs, "-", "-");
      std::printf("| %-28s | %12.1f | %13s | %8s |\n", "load tokenizer.json (ms)", cold * 1e3, "-", "-");
      std::printf("\nclef warm load: %.1f ms (median of 3); %zu tokens\n", warm[1] * 1e3, n_ids);
    }
    return hf && (n_ids != hf_ids || hf_hash != clef_hash) ? 1 : 0;
  } catch (const clef::Error& e) {
    std::cerr << "clef_bench_tokenizer: error: " << e.what() << "\n";
    return clef::exit_code_for(e.kind());
  }
}
