#include "hub/pull.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "hub/http.h"

namespace fs = std::filesystem;

namespace clef::hub {

namespace {

using Clock = std::chrono::steady_clock;
using net::http;
using net::HttpResponse;
using net::lower;
using net::origin_of;
using net::Request;
using net::Sink;
using net::trim;
using net::url_encode;

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::string(v) : std::string();
}

/// The etag as huggingface_hub normalizes it: no weak prefix, no quotes.
std::string normalize_etag(std::string e) {
  e = trim(e);
  if (e.rfind("W/", 0) == 0) e = e.substr(2);
  if (e.size() >= 2 && e.front() == '"' && e.back() == '"') e = e.substr(1, e.size() - 2);
  return e;
}

bool safe_blob_name(const std::string& e) {
  return !e.empty() && e.size() <= 128 && std::all_of(e.begin(), e.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_';
  });
}

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", b, units[u]);
  return buf;
}

std::string human_eta(double seconds) {
  if (!(seconds >= 0) || seconds > 1e7) return "--:--";
  const auto s = static_cast<long long>(seconds + 0.5);
  char buf[32];
  if (s >= 3600) std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", s / 3600, (s / 60) % 60, s % 60);
  else std::snprintf(buf, sizeof buf, "%lld:%02lld", s / 60, s % 60);
  return buf;
}

// ---------------------------------------------------------------------------------------------
// Hashing

std::string hex(const unsigned char* d, unsigned n) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned i = 0; i < n; ++i) {
    out += digits[d[i] >> 4];
    out += digits[d[i] & 15];
  }
  return out;
}

/// Hash of a file: sha256 of its bytes, or the git blob id (sha1 of "blob <size>\0" + bytes).
std::string file_digest(const std::string& path, bool git_blob) {
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  EVP_DigestInit_ex(ctx.get(), git_blob ? EVP_sha1() : EVP_sha256(), nullptr);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError("cannot read " + path);
  if (git_blob) {
    std::error_code ec;
    const std::string prefix = "blob " + std::to_string(fs::file_size(path, ec));
    EVP_DigestUpdate(ctx.get(), prefix.c_str(), prefix.size() + 1);  // with its NUL
  }
  std::vector<char> buf(std::size_t{1} << 20);
  while (in.read(buf.data(), static_cast<std::streamsize>(buf.size())) || in.gcount() > 0) {
    EVP_DigestUpdate(ctx.get(), buf.data(), static_cast<std::size_t>(in.gcount()));
  }
  if (in.bad()) throw IoError("cannot read " + path);
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned n = 0;
  EVP_DigestFinal_ex(ctx.get(), md, &n);
  return hex(md, n);
}

// ---------------------------------------------------------------------------------------------
// One pull

struct RemoteFile {
  std::string path;
  std::atomic<std::int64_t> size{-1};  ///< bytes (the listing's, then the HEAD answer's)
  std::string oid;                     ///< git blob id
  std::string sha256;                  ///< LFS sha256 ("" for a file stored in git)
  // Progress (written by its worker, read by the progress thread).
  std::atomic<std::int64_t> done{0};
  std::atomic<std::int64_t> resumed_from{0};
  std::atomic<int> state{0};  ///< 0 waiting, 1 fetching, 2 done (set after `started`)
  Clock::time_point started;  ///< written before state becomes 1
};

struct PullContext {
  ModelName name;
  PullOptions opt;
  std::string endpoint, token, cache, folder, commit;
  std::vector<std::unique_ptr<RemoteFile>> files;
  std::atomic<std::int64_t> received{0};  ///< bytes of content received in this run
  std::atomic<int> fetched{0}, cached{0};
  std::mutex mu;
  std::vector<std::string> errors;
  std::unique_ptr<Error> first_error;
  std::mutex log_mu;
  bool progress_active = false;
};

std::vector<std::string> auth_headers(const PullContext& ctx) {
  std::vector<std::string> h;
  if (!ctx.token.empty()) h.push_back("Authorization: Bearer " + ctx.token);
  return h;
}

[[noreturn]] void throw_http(const PullContext& ctx, const HttpResponse& r, const std::string& what) {
  const std::string name = ctx.name.display();
  if (r.code != CURLE_OK) {
    throw IoError("network error while fetching " + what + " of " + name + " from " + ctx.endpoint + ": " + r.error);
  }
  if (r.status == 401 || r.status == 403) {
    const bool had = !ctx.token.empty();
    throw InvalidArgument(
        name + ": the hub answered " + std::to_string(r.status) + " for " + what +
        (had ? " with the token given: the token has no access to this repository (a gated repository: accept its "
               "terms on the hub with the token's account)"
             : " (a gated or private repository needs a token: export HF_TOKEN=hf_... or run `hf auth login`, "
               "which writes " +
                   hf_home_dir() + "/token)"));
  }
  if (r.status == 404) {
    // The hub names what is missing in X-Error-Code (RepoNotFound, RevisionNotFound, EntryNotFound).
    const auto code = r.headers.find("x-error-code");
    const std::string kind = code == r.headers.end() ? "" : code->second;
    const std::string which =
        kind == "RevisionNotFound"
            ? "revision " + (ctx.opt.revision.empty() ? std::string("main") : ctx.opt.revision) + " not found"
        : kind == "EntryNotFound" ? what + " not found"
        : kind == "RepoNotFound"  ? "repository not found (or private: a token may be needed)"
                                  : "not found";
    throw InvalidArgument(name + ": " + which + " on " + ctx.endpoint + " (" + what +
                          ": 404; check the name and --revision)");
  }
  throw IoError(name + ": the hub answered HTTP " + std::to_string(r.status) + " for " + what);
}

bool transient(const HttpResponse& r) {
  if (r.code != CURLE_OK) return r.code != CURLE_WRITE_ERROR;
  return r.status >= 500 || r.status == 429 || r.status == 408;
}

/// GET of a JSON document from the hub API (follows redirects; retries transient failures).
nlohmann::json get_json(PullContext& ctx, const std::string& url, const std::string& what, std::string* next_link) {
  HttpResponse r;
  for (int attempt = 0;; ++attempt) {
    std::string body;
    Sink sink;
    sink.text = &body;
    Request req;
    req.url = url;
    req.headers = auth_headers(ctx);
    req.headers.emplace_back("Accept: application/json");
    req.follow = true;
    r = http(req, sink);
    r.body = std::move(body);
    if (r.code == CURLE_OK && r.status == 200) break;
    if (!transient(r) || attempt >= ctx.opt.retries) throw_http(ctx, r, what);
    std::this_thread::sleep_for(std::chrono::milliseconds(250 << std::min(attempt, 4)));
  }
  if (next_link != nullptr) {
    next_link->clear();
    // Link: <url>; rel="next"
    const auto it = r.headers.find("link");
    if (it != r.headers.end()) {
      const std::string& v = it->second;
      const auto rel = v.find("rel=\"next\"");
      if (rel != std::string::npos) {
        const auto lt = v.rfind('<', rel), gt = v.rfind('>', rel);
        if (lt != std::string::npos && gt != std::string::npos && gt > lt) *next_link = v.substr(lt + 1, gt - lt - 1);
      }
    }
  }
  try {
    return nlohmann::json::parse(r.body);
  } catch (const nlohmann::json::exception&) {
    throw IoError(ctx.name.display() + ": the hub's answer for " + what + " is not JSON");
  }
}

void log_line(PullContext& ctx, const std::string& line) {
  if (ctx.opt.progress == ProgressStyle::kNone) return;
  std::lock_guard<std::mutex> lock(ctx.log_mu);
  if (ctx.opt.progress == ProgressStyle::kBar) return;  // the bar shows it
  std::fprintf(stderr, "clef pull: %s\n", line.c_str());
  std::fflush(stderr);
}

/// An exclusive advisory lock on huggingface_hub's lock file of a blob (.locks/<repo>/<etag>.lock),
/// so that clef and huggingface_hub do not fetch the same blob at once.
class BlobLock {
 public:
  explicit BlobLock(const std::string& path) {
    std::error_code ec;
    fs::create_directories(fs::path(path).parent_path(), ec);
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ >= 0) {
      while (::flock(fd_, LOCK_EX) != 0 && errno == EINTR) {
      }
    }
  }
  ~BlobLock() {
    if (fd_ >= 0) ::close(fd_);
  }
  BlobLock(const BlobLock&) = delete;
  BlobLock& operator=(const BlobLock&) = delete;

 private:
  int fd_ = -1;
};

/// Links snapshots/<commit>/<path> to ../../blobs/<etag> (relative, as huggingface_hub does).
void link_pointer(const PullContext& ctx, const std::string& path, const std::string& etag) {
  const fs::path pointer = fs::path(ctx.folder) / "snapshots" / ctx.commit / path;
  fs::create_directories(pointer.parent_path());
  std::string target;
  const auto depth = static_cast<std::size_t>(std::count(path.begin(), path.end(), '/')) + 2;
  for (std::size_t i = 0; i < depth; ++i) target += "../";
  target += "blobs/" + etag;
  std::error_code ec;
  if (fs::is_symlink(fs::symlink_status(pointer, ec))) {
    if (fs::read_symlink(pointer, ec) == fs::path(target)) return;
    fs::remove(pointer, ec);
  } else if (fs::exists(fs::symlink_status(pointer, ec))) {
    fs::remove(pointer, ec);
  }
  fs::create_symlink(target, pointer, ec);
  if (ec && !fs::is_symlink(fs::symlink_status(pointer))) {
    throw IoError("cannot link " + pointer.string() + " -> " + target + ": " + ec.message());
  }
}

void write_ref(const PullContext& ctx, const std::string& revision) {
  if (revision == ctx.commit) return;
  const fs::path ref = fs::path(ctx.folder) / "refs" / revision;
  fs::create_directories(ref.parent_path());
  {
    std::ifstream in(ref);
    std::string old;
    if (in && std::getline(in, old) && old == ctx.commit) return;
  }
  const fs::path tmp = ref.string() + "." + std::to_string(::getpid()) + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << ctx.commit;
    if (!out.flush()) throw IoError("cannot write " + tmp.string());
  }
  fs::rename(tmp, ref);
}

void write_cachedir_tag(const std::string& cache) {
  const std::string tag = cache + "/CACHEDIR.TAG";
  std::error_code ec;
  if (fs::exists(tag, ec)) return;
  std::ofstream out(tag, std::ios::binary);
  out << "Signature: 8a477f597d28d172789f06886806bc55\n"
         "# This folder is a Hugging Face hub cache (written by clef pull or huggingface_hub).\n";
}

/// Fetches one file into the cache (see pull_model).
void fetch_file(PullContext& ctx, RemoteFile& f) {
  const fs::path pointer = fs::path(ctx.folder) / "snapshots" / ctx.commit / f.path;
  std::error_code ec;
  if (fs::is_regular_file(pointer, ec)) {
    f.done = std::max<std::int64_t>(0, f.size.load());
    f.state = 2;
    ++ctx.cached;
    return;
  }
  // 1. HEAD resolve/<commit>/<path>: the blob's etag and size, and where its bytes are.
  const std::string resolve =
      ctx.endpoint + "/" + ctx.name.repo_id + "/resolve/" + ctx.commit + "/" + url_encode(f.path, true);
  HttpResponse head;
  std::string location = resolve;
  int redirects = 0;
  for (int attempt = 0;; ++attempt) {
    Sink sink;
    Request req;
    req.method = "HEAD";
    req.url = location;
    req.headers = auth_headers(ctx);
    head = http(req, sink);
    if (head.code == CURLE_OK && head.status >= 300 && head.status < 400) {
      const auto loc = head.headers.find("location");
      if (loc == head.headers.end()) throw_http(ctx, head, f.path);
      // A redirect that stays on the hub's origin (a renamed repository) is followed for the
      // metadata; one to another host (the storage CDN) carries the metadata itself: stop there.
      const std::string target =
          loc->second.empty() || loc->second[0] != '/' ? loc->second : origin_of(location) + loc->second;
      if (origin_of(target) == origin_of(location) && ++redirects <= 10) {
        location = target;
        --attempt;
        continue;
      }
      break;
    }
    if (head.code == CURLE_OK && head.status == 200) break;
    if (!transient(head) || attempt >= ctx.opt.retries) throw_http(ctx, head, f.path);
    std::this_thread::sleep_for(std::chrono::milliseconds(250 << std::min(attempt, 4)));
  }
  auto header = [&](const char* n) {
    const auto it = head.headers.find(n);
    return it == head.headers.end() ? std::string() : it->second;
  };
  std::string etag = normalize_etag(header("x-linked-etag"));
  if (etag.empty()) etag = normalize_etag(header("etag"));
  if (etag.empty()) etag = !f.sha256.empty() ? f.sha256 : f.oid;
  if (!safe_blob_name(etag)) throw IoError(ctx.name.display() + ": the hub sent an unusable etag for " + f.path);
  std::int64_t size = f.size.load();
  if (const std::string s = header("x-linked-size"); !s.empty()) size = std::strtoll(s.c_str(), nullptr, 10);
  else if (head.status == 200 && !header("content-length").empty())
    size = std::strtoll(header("content-length").c_str(), nullptr, 10);
  f.size = size;
  std::string url = location;
  if (head.status >= 300 && head.status < 400) {
    url = header("location");
    if (!url.empty() && url[0] == '/') url = origin_of(location) + url;
  }

  const fs::path blobs = fs::path(ctx.folder) / "blobs";
  fs::create_directories(blobs);
  const fs::path blob = blobs / etag;
  const fs::path partial = blobs / (etag + ".incomplete");
  BlobLock lock(ctx.cache + "/.locks/" + fs::path(ctx.folder).filename().string() + "/" + etag + ".lock");
  if (!fs::is_regular_file(blob, ec)) {
    f.started = Clock::now();
    f.state = 1;
    const bool same_host = origin_of(url) == origin_of(ctx.endpoint);
    for (int attempt = 0;; ++attempt) {
      std::int64_t have = fs::is_regular_file(partial, ec) ? static_cast<std::int64_t>(fs::file_size(partial, ec)) : 0;
      if (ec) have = 0;
      if (size >= 0 && have > size) {
        fs::remove(partial, ec);  // longer than the file: not a prefix of it
        have = 0;
      }
      f.resumed_from = have;
      f.done = have;
      if (size >= 0 && have == size) break;  // complete already: verify below
      std::FILE* out = std::fopen(partial.c_str(), have > 0 ? "ab" : "wb");
      if (out == nullptr) throw IoError("cannot write " + partial.string() + ": " + std::strerror(errno));
      Sink sink;
      sink.file = out;
      sink.counter = &f.done;
      sink.total_counter = &ctx.received;
      Request req;
      req.url = url;
      if (same_host) req.headers = auth_headers(ctx);
      req.follow = true;
      req.range_from = have > 0 ? have : -1;
      HttpResponse r = http(req, sink);
      const int close_rc = std::fclose(out);
      if (sink.write_errno != 0 || close_rc != 0) {
        const int e = sink.write_errno != 0 ? sink.write_errno : errno;
        throw IoError(std::string(e == ENOSPC ? "disk full" : std::strerror(e)) + " while writing " + partial.string() +
                      " (" + std::to_string(fs::file_size(partial, ec)) +
                      " bytes kept; free space and run clef pull again to resume)");
      }
      if (r.code == CURLE_OK && r.status == 200 && have > 0) {
        // The server ignored the Range: the body written after the old bytes is the whole file.
        // Keep only the new copy.
        const fs::path fresh = partial.string() + ".fresh";
        {
          std::ifstream in(partial, std::ios::binary);
          std::ofstream o(fresh, std::ios::binary | std::ios::trunc);
          in.seekg(have);
          o << in.rdbuf();
          if (!o.flush()) throw IoError("cannot write " + fresh.string());
        }
        fs::rename(fresh, partial);
      }
      if (r.code == CURLE_OK && (r.status == 200 || r.status == 206)) break;
      if (r.code == CURLE_OK && r.status == 416) {
        fs::remove(partial, ec);  // the range is past the file: start over
        if (attempt < ctx.opt.retries) continue;
      }
      if (!transient(r) || attempt >= ctx.opt.retries) throw_http(ctx, r, f.path);
      log_line(ctx, f.path + ": " + (r.code != CURLE_OK ? r.error : "HTTP " + std::to_string(r.status)) +
                        "; resuming at byte " + std::to_string(fs::file_size(partial, ec)));
      std::this_thread::sleep_for(std::chrono::milliseconds(250 << std::min(attempt, 4)));
    }
    // 2. Verify before the file gets its real name.
    const std::int64_t got = static_cast<std::int64_t>(fs::file_size(partial, ec));
    const bool lfs = !f.sha256.empty();
    const std::string want = lfs ? lower(f.sha256) : lower(f.oid);
    if (size >= 0 && got != size) {
      throw IoError(ctx.name.display() + ": " + f.path + " ended after " + std::to_string(got) + " of " +
                    std::to_string(size) + " bytes (kept in " + partial.string() + "; run clef pull again to resume)");
    }
    if (!want.empty()) {
      const std::string have_hash = file_digest(partial.string(), !lfs);
      if (have_hash != want) {
        fs::remove(partial, ec);
        throw ModelLoadError(ctx.name.display() + ": " + f.path + " does not match its published " +
                             (lfs ? "sha256 " : "git blob id ") + want + " (got " + have_hash +
                             "); the download was discarded and nothing was stored under its name");
      }
    }
    fs::rename(partial, blob);
    ++ctx.fetched;
  } else {
    ++ctx.cached;
  }
  link_pointer(ctx, f.path, etag);
  if (f.size.load() > 0) f.done = f.size.load();
  f.state = 2;
  log_line(ctx, "verified " + f.path + " (" + human_bytes(static_cast<double>(f.size.load())) + ")");
}

/// Draws the progress bar (kBar) or writes a plain line (kLines) until `stop`.
void progress_loop(PullContext& ctx, std::atomic<bool>& stop) {
  const auto start = Clock::now();
  int drawn = 0;
  auto last_line = start;
  std::int64_t last_bytes = 0;
  auto last_tick = start;
  double rate = 0;
  std::int64_t total = 0, resumed = 0;
  for (const auto& f : ctx.files) total += std::max<std::int64_t>(0, f->size.load());
  while (true) {
    const bool final = stop.load();
    const auto now = Clock::now();
    std::int64_t done = 0;
    int finished = 0;
    for (const auto& f : ctx.files) {
      done += std::max<std::int64_t>(0, f->done.load());
      finished += f->state.load() == 2 ? 1 : 0;
    }
    resumed = 0;
    for (const auto& f : ctx.files) resumed += f->resumed_from.load();
    const double dt = std::chrono::duration<double>(now - last_tick).count();
    if (dt >= 0.5) {
      const double inst = static_cast<double>(ctx.received.load() - last_bytes) / dt;
      rate = rate == 0 ? inst : 0.7 * rate + 0.3 * inst;
      last_bytes = ctx.received.load();
      last_tick = now;
    }
    const double eta = rate > 0 ? static_cast<double>(total - done) / rate : -1;
    const std::string summary =
        std::to_string(finished) + "/" + std::to_string(ctx.files.size()) + " files, " +
        human_bytes(static_cast<double>(done)) + " / " + human_bytes(static_cast<double>(total)) +
        (total > 0 ? " (" + std::to_string(done * 100 / std::max<std::int64_t>(1, total)) + "%)" : "") + ", " +
        human_bytes(rate) + "/s, ETA " + human_eta(eta);
    if (ctx.opt.progress == ProgressStyle::kBar) {
      std::string out;
      if (drawn > 0) out += "\x1b[" + std::to_string(drawn) + "F";
      int lines = 0;
      for (const auto& f : ctx.files) {
        if (f->state.load() != 1) continue;
        const double el = std::chrono::duration<double>(now - f->started).count();
        const double fr = el > 0 ? static_cast<double>(f->done.load() - f->resumed_from.load()) / el : 0;
        const std::int64_t fsize = f->size.load();
        const std::int64_t fs_ = std::max<std::int64_t>(1, fsize);
        const int pct = static_cast<int>(std::min<std::int64_t>(100, f->done.load() * 100 / fs_));
        std::string bar(20, ' ');
        for (int i = 0; i < pct / 5; ++i) bar[static_cast<std::size_t>(i)] = '#';
        std::string shown = f->path.size() > 32 ? "..." + f->path.substr(f->path.size() - 29) : f->path;
        char line[256];
        std::snprintf(line, sizeof line, "\x1b[2K%-32s [%s] %3d%% %s / %s %s/s ETA %s\n", shown.c_str(), bar.c_str(),
                      pct, human_bytes(static_cast<double>(f->done.load())).c_str(),
                      human_bytes(static_cast<double>(fsize)).c_str(), human_bytes(fr).c_str(),
                      human_eta(fr > 0 ? static_cast<double>(fsize - f->done.load()) / fr : -1).c_str());
        out += line;
        ++lines;
      }
      out += "\x1b[2Ktotal: " + summary + "\n";
      ++lines;
      // Clear lines left from a taller previous frame.
      for (int i = lines; i < drawn; ++i) out += "\x1b[2K\n";
      const int extra = std::max(0, drawn - lines);
      if (extra > 0) out += "\x1b[" + std::to_string(extra) + "F";
      drawn = lines;
      std::lock_guard<std::mutex> lock(ctx.log_mu);
      std::fputs(out.c_str(), stderr);
      std::fflush(stderr);
    } else if (ctx.opt.progress == ProgressStyle::kLines) {
      if (final || std::chrono::duration<double>(now - last_line).count() >= ctx.opt.log_interval_s) {
        last_line = now;
        std::lock_guard<std::mutex> lock(ctx.log_mu);
        std::fprintf(stderr, "clef pull: %s\n", summary.c_str());
        std::fflush(stderr);
      }
    }
    if (final) break;
    for (int i = 0; i < 5 && !stop.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace

std::string hub_endpoint() {
  std::string e = env("HF_ENDPOINT");
  if (e.empty()) e = "https://huggingface.co";
  while (!e.empty() && e.back() == '/') e.pop_back();
  return e;
}

std::string hub_token() {
  for (const char* n : {"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"}) {
    if (std::string t = trim(env(n)); !t.empty()) return t;
  }
  std::string path = env("HF_TOKEN_PATH");
  if (path.empty()) path = hf_home_dir() + "/token";
  std::ifstream in(path);
  std::string line;
  if (in && std::getline(in, line)) return trim(line);
  return "";
}

PullReport pull_model(const ModelName& name, const PullOptions& options) {
  PullContext ctx;
  ctx.name = name;
  ctx.opt = options;
  ctx.opt.parallel = std::clamp(ctx.opt.parallel, 1, 16);
  ctx.opt.retries = std::clamp(ctx.opt.retries, 0, 100);
  if (ctx.opt.progress == ProgressStyle::kAuto)
    ctx.opt.progress = ::isatty(2) ? ProgressStyle::kBar : ProgressStyle::kLines;
  ctx.endpoint = options.endpoint.empty() ? hub_endpoint() : options.endpoint;
  while (!ctx.endpoint.empty() && ctx.endpoint.back() == '/') ctx.endpoint.pop_back();
  ctx.token = options.token.empty() ? hub_token() : options.token;
  ctx.cache = options.cache_dir.empty() ? hub_cache_dir() : options.cache_dir;
  ctx.folder = repo_folder(ctx.cache, name.repo_id);
  const std::string revision = options.revision.empty() ? std::string("main") : options.revision;

  if (hub_offline()) {
    try {
      return PullReport{resolve_cached(name, options.revision, ctx.cache), 0, 0, 0};
    } catch (const InvalidArgument& e) {
      throw InvalidArgument(std::string(e.what()) +
                            "; HF_HUB_OFFLINE is set, so nothing is downloaded (unset it to fetch)");
    }
  }

  // 1. The commit of the revision, then the file list at that commit (sizes, git ids, LFS sha256).
  const nlohmann::json info =
      get_json(ctx, ctx.endpoint + "/api/models/" + name.repo_id + "/revision/" + url_encode(revision, false),
               "the repository information", nullptr);
  if (!info.is_object() || !info.contains("sha") || !info["sha"].is_string() ||
      !is_commit_hash(info["sha"].get<std::string>())) {
    throw IoError(name.display() + ": the hub's repository information has no commit id");
  }
  ctx.commit = info["sha"].get<std::string>();
  std::map<std::string, std::unique_ptr<RemoteFile>> listing;
  std::string next = ctx.endpoint + "/api/models/" + name.repo_id + "/tree/" + ctx.commit + "?recursive=true";
  for (int page = 0; !next.empty() && page < 10000; ++page) {
    std::string link;
    const nlohmann::json tree = get_json(ctx, next, "the file list", &link);
    if (!tree.is_array()) throw IoError(name.display() + ": the hub's file list is not a JSON array");
    for (const auto& e : tree) {
      if (!e.is_object() || e.value("type", "") != "file" || !e.contains("path") || !e["path"].is_string()) continue;
      auto f = std::make_unique<RemoteFile>();
      f->path = e["path"].get<std::string>();
      if (f->path.empty() || f->path.find("..") != std::string::npos || f->path[0] == '/') continue;
      if (e.contains("size") && e["size"].is_number_integer()) f->size = e["size"].get<std::int64_t>();
      if (e.contains("oid") && e["oid"].is_string()) f->oid = e["oid"].get<std::string>();
      if (e.contains("lfs") && e["lfs"].is_object()) {
        const auto& l = e["lfs"];
        if (l.contains("oid") && l["oid"].is_string()) f->sha256 = l["oid"].get<std::string>();
        if (l.contains("size") && l["size"].is_number_integer()) f->size = l["size"].get<std::int64_t>();
      }
      listing[f->path] = std::move(f);
    }
    if (!link.empty() && link[0] == '/') link = ctx.endpoint + link;
    next = link;
  }
  std::vector<std::string> paths;
  for (const auto& [p, f] : listing) paths.push_back(p);
  const ModelFiles chosen = select_model_files(paths, name);
  for (const auto& p : chosen.files) ctx.files.push_back(std::move(listing[p]));

  // 2. The cache folders and the ref, as huggingface_hub writes them.
  fs::create_directories(ctx.folder);
  write_cachedir_tag(ctx.cache);
  if (options.revision.empty() || !is_commit_hash(revision)) write_ref(ctx, revision);
  std::int64_t total = 0;
  for (const auto& f : ctx.files) total += std::max<std::int64_t>(0, f->size.load());
  log_line(ctx, name.display() + " at " + ctx.commit.substr(0, 12) + ": " + std::to_string(ctx.files.size()) +
                    " files, " + human_bytes(static_cast<double>(total)));

  // 3. The files, `parallel` at a time.
  std::atomic<std::size_t> next_file{0};
  std::atomic<bool> stop{false};
  std::thread progress;
  if (ctx.opt.progress == ProgressStyle::kBar || ctx.opt.progress == ProgressStyle::kLines) {
    progress = std::thread([&] { progress_loop(ctx, stop); });
  }
  auto worker = [&] {
    for (std::size_t i; (i = next_file++) < ctx.files.size();) {
      try {
        fetch_file(ctx, *ctx.files[i]);
      } catch (const Error& e) {
        std::lock_guard<std::mutex> lock(ctx.mu);
        ctx.errors.emplace_back(e.what());
        if (!ctx.first_error) {
          if (e.kind() == ErrorKind::kInvalidArgument) ctx.first_error = std::make_unique<InvalidArgument>(e.what());
          else if (e.kind() == ErrorKind::kModelLoad) ctx.first_error = std::make_unique<ModelLoadError>(e.what());
          else ctx.first_error = std::make_unique<IoError>(e.what());
        }
        ctx.files[i]->state = 2;
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(ctx.mu);
        ctx.errors.emplace_back(ctx.files[i]->path + ": " + e.what());
        if (!ctx.first_error) ctx.first_error = std::make_unique<IoError>(ctx.files[i]->path + ": " + e.what());
        ctx.files[i]->state = 2;
      }
    }
  };
  std::vector<std::thread> workers;
  const std::size_t n = std::min<std::size_t>(static_cast<std::size_t>(ctx.opt.parallel), ctx.files.size());
  for (std::size_t i = 0; i < n; ++i) workers.emplace_back(worker);
  for (auto& w : workers) w.join();
  stop = true;
  if (progress.joinable()) progress.join();

  if (ctx.first_error) {
    std::string msg = ctx.first_error->what();
    if (ctx.errors.size() > 1) msg += " (and " + std::to_string(ctx.errors.size() - 1) + " more failed files)";
    msg += "; " + std::to_string(ctx.fetched.load() + ctx.cached.load()) + " of " + std::to_string(ctx.files.size()) +
           " files are verified in the cache and kept";
    switch (ctx.first_error->kind()) {
      case ErrorKind::kInvalidArgument: throw InvalidArgument(msg);
      case ErrorKind::kModelLoad: throw ModelLoadError(msg);
      default: throw IoError(msg);
    }
  }
  PullReport rep;
  rep.files_fetched = ctx.fetched.load();
  rep.files_cached = ctx.cached.load();
  rep.bytes_downloaded = ctx.received.load();
  rep.model = resolve_cached(name, is_commit_hash(revision) ? revision : options.revision, ctx.cache);
  return rep;
}

}  // namespace clef::hub
