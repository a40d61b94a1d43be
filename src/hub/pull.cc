// SPDX-License-Identifier: MIT
// Fetching a model from a hub into the shared cache (hub/pull.h; docs/MODELS.md "clef pull").
#include "hub/pull.h"

#include <openssl/evp.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
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
#include "core/json_reader.h"
#include "core/paths.h"
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

struct RemoteFile : FileProgress {
  std::string oid;     ///< git blob id
  std::string sha256;  ///< LFS sha256 ("" for a file stored in git)
};

struct PullContext {
  ModelName name;
  PullOptions opt;
  std::string endpoint, token, cache, folder, commit;
  Clock::time_point deadline = Clock::time_point::max();  ///< opt.timeout_s after the start (max: none)
  std::vector<std::unique_ptr<RemoteFile>> files;
  std::atomic<std::int64_t> received{0};  ///< bytes of content received in this run
  std::atomic<int> fetched{0}, cached{0};
  std::mutex mu;
  std::vector<std::string> errors;
  std::unique_ptr<Error> first_error;
  std::unique_ptr<PullProgress> progress;
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
  if (r.code != CURLE_OK) return r.code != CURLE_WRITE_ERROR && r.code != CURLE_TOO_MANY_REDIRECTS;
  return r.status >= 500 || r.status == 429 || r.status == 408;
}

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}

[[noreturn]] void throw_deadline(const PullContext& ctx, const std::string& what) {
  throw IoError(ctx.name.display() + ": clef pull stopped at its --timeout of " + seconds_text(ctx.opt.timeout_s) +
                " s while fetching " + what +
                " (verified files are kept and a partial file is resumed by the next run)");
}

/// Milliseconds left before the deadline for a request (0: no deadline); throws past it.
std::int64_t time_left_ms(const PullContext& ctx, const std::string& what) {
  if (ctx.deadline == Clock::time_point::max()) return 0;
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(ctx.deadline - Clock::now()).count();
  if (left <= 0) throw_deadline(ctx, what);
  return static_cast<std::int64_t>(left);
}

bool past_deadline(const PullContext& ctx) { return Clock::now() >= ctx.deadline; }

/// A request to the hub or its storage under the pull's deadline and stall limit.
Request make_request(const PullContext& ctx, const std::string& url, const std::string& what) {
  Request req;
  req.url = url;
  req.timeout_ms = time_left_ms(ctx, what);
  req.stall_s = ctx.opt.stall_s;
  req.min_rate = kMinRateBytesPerS;
  return req;
}

/// Waits before retry `attempt + 1` of `what` after the transient failure `r`: the server's
/// Retry-After when it sent one (IoError when it is over kMaxRetryAfterS), else 0.25 s doubling up
/// to 4 s; never past the deadline (then the deadline's IoError).
void wait_before_retry(const PullContext& ctx, const HttpResponse& r, int attempt, const std::string& what) {
  std::chrono::milliseconds wait(250 << std::min(attempt, 4));
  if (r.code == CURLE_OK && r.retry_after_s >= 0) {
    if (r.retry_after_s > kMaxRetryAfterS) {
      throw IoError(ctx.name.display() + ": the hub answered HTTP " + std::to_string(r.status) + " for " + what +
                    " with Retry-After: " + std::to_string(r.retry_after_s) + " s, longer than clef pull waits (" +
                    std::to_string(kMaxRetryAfterS) + " s); run it again later");
    }
    wait = std::chrono::seconds(r.retry_after_s);
  }
  const auto until = Clock::now() + wait;
  std::this_thread::sleep_until(std::min(until, ctx.deadline));
  if (past_deadline(ctx)) throw_deadline(ctx, what);
}

/// GET of a JSON document from the hub API (follows redirects; retries transient failures), at
/// most kMaxListingPageBytes, parsed with `keep` (nlohmann's parser callback: what it drops is
/// never stored). `next_link` gets the Link rel="next" URL ("" when none).
nlohmann::json get_json(PullContext& ctx, const std::string& url, const std::string& what, std::string* next_link,
                        const nlohmann::json::parser_callback_t& keep) {
  HttpResponse r;
  for (int attempt = 0;; ++attempt) {
    std::string body;
    Sink sink;
    sink.text = &body;
    sink.text_limit = kMaxListingPageBytes;
    Request req = make_request(ctx, url, what);
    req.headers = auth_headers(ctx);
    req.headers.emplace_back("Accept: application/json");
    req.follow = true;
    r = http(req, sink);
    r.body = std::move(body);
    if (sink.text_over_limit) {
      throw IoError(ctx.name.display() + ": the hub's answer for " + what + " is longer than " +
                    std::to_string(kMaxListingPageBytes >> 20) +
                    " MiB, the cap of one answer (docs/MODELS.md \"Bounds\")");
    }
    if (r.code == CURLE_OK && r.status == 200) break;
    if (r.code == CURLE_OPERATION_TIMEDOUT && past_deadline(ctx)) throw_deadline(ctx, what);
    if (!transient(r) || attempt >= ctx.opt.retries) throw_http(ctx, r, what);
    wait_before_retry(ctx, r, attempt, what);
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
    return nlohmann::json::parse(r.body, keep);
  } catch (const nlohmann::json::exception&) {
    throw IoError(ctx.name.display() + ": the hub's answer for " + what + " is not JSON");
  }
}

void log_line(PullContext& ctx, const std::string& line) {
  if (ctx.progress) ctx.progress->log(line);
}

/// Bytes of a partial file (0 when there is none).
std::int64_t partial_size(const fs::path& partial) {
  std::error_code ec;
  const auto n = fs::file_size(partial, ec);
  return ec ? 0 : static_cast<std::int64_t>(n);
}

/// Where a file's bytes are: what the HEAD answer for resolve/<commit>/<path> says.
struct BlobSource {
  std::string etag;   ///< the blob's name in blobs/ (safe_blob_name)
  std::int64_t size;  ///< declared bytes: bounds the transfer
  std::string url;    ///< where to GET them (the hub, or the storage host it redirects to)
};

/// Step 1 of fetch_file: HEAD resolve/<commit>/<path>: the blob's etag and size, and where its bytes are.
BlobSource resolve_blob(PullContext& ctx, RemoteFile& f) {
  const std::string resolve =
      ctx.endpoint + "/" + ctx.name.repo_id + "/resolve/" + ctx.commit + "/" + url_encode(f.path, true);
  HttpResponse head;
  std::string location = resolve;
  int redirects = 0;
  for (int attempt = 0;; ++attempt) {
    Sink sink;
    Request req = make_request(ctx, location, f.path);
    req.method = "HEAD";
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
    if (head.code == CURLE_OPERATION_TIMEDOUT && past_deadline(ctx)) throw_deadline(ctx, f.path);
    if (!transient(head) || attempt >= ctx.opt.retries) throw_http(ctx, head, f.path);
    wait_before_retry(ctx, head, attempt, f.path);
  }
  auto header = [&](const char* n) {
    const auto it = head.headers.find(n);
    return it == head.headers.end() ? std::string() : it->second;
  };
  std::string etag = normalize_etag(header("x-linked-etag"));
  if (etag.empty()) etag = normalize_etag(header("etag"));
  if (etag.empty()) etag = !f.sha256.empty() ? f.sha256 : f.oid;
  if (!safe_blob_name(etag)) throw IoError(ctx.name.display() + ": the hub sent an unusable etag for " + f.path);
  // The declared size bounds the transfer: the file list's, which the HEAD answer must agree with.
  std::int64_t head_size = -1;
  if (const std::string s = header("x-linked-size"); !s.empty()) head_size = std::strtoll(s.c_str(), nullptr, 10);
  else if (head.status == 200 && !header("content-length").empty())
    head_size = std::strtoll(header("content-length").c_str(), nullptr, 10);
  std::int64_t size = f.size.load();
  if (size >= 0 && head_size >= 0 && head_size != size) {
    throw IoError(ctx.name.display() + ": the hub declares two sizes for " + f.path + ": " + std::to_string(size) +
                  " bytes in the file list, " + std::to_string(head_size) + " in its HEAD answer");
  }
  if (size < 0) size = head_size;
  if (size < 0) {
    throw IoError(ctx.name.display() + ": the hub declares no size for " + f.path +
                  " (neither the file list nor the HEAD answer), so its transfer cannot be bounded");
  }
  f.size = size;
  std::string url = location;
  if (head.status >= 300 && head.status < 400) {
    url = header("location");
    if (!url.empty() && url[0] == '/') url = origin_of(location) + url;
  }
  return {etag, size, url};
}

/// Downloads the blob's bytes into `partial`, resuming what is there with a Range request and
/// retrying transient failures, until it holds `src.size` bytes (or the server says it is complete).
void download_blob(PullContext& ctx, RemoteFile& f, const BlobSource& src, const fs::path& partial) {
  const std::int64_t size = src.size;
  const std::string& url = src.url;
  std::error_code ec;
  const bool same_host = origin_of(url) == origin_of(ctx.endpoint);
  for (int attempt = 0;; ++attempt) {
    std::int64_t have = partial_size(partial);
    if (have > size) {
      fs::remove(partial, ec);  // longer than the file: not a prefix of it
      have = 0;
    }
    f.resumed_from = have;
    f.done = have;
    if (have == size) break;  // complete already: verify below
    Sink sink;
    sink.file_path = partial.string();
    sink.have = have;
    sink.declared = size;
    sink.counter = &f.done;
    sink.total_counter = &ctx.received;
    Request req = make_request(ctx, url, f.path);
    if (same_host) req.headers = auth_headers(ctx);
    req.follow = true;
    req.range_from = have > 0 ? have : -1;
    HttpResponse r = http(req, sink);
    if (sink.over_declared) {
      fs::remove(partial, ec);
      throw ModelLoadError(
          ctx.name.display() + ": the server sent more than the declared size of " + f.path + " (" +
          std::to_string(size) + " bytes): " +
          (sink.announced >= 0
               ? "it announced " + std::to_string(sink.announced) + (sink.have > 0 ? " more" : "") + " bytes"
               : "the transfer was stopped at byte " + std::to_string(sink.have + sink.received)) +
          "; its partial download was deleted and nothing was stored under its name");
    }
    if (sink.write_errno != 0) {
      const int e = sink.write_errno;
      const std::int64_t kept = partial_size(partial);
      if (kept == 0) fs::remove(partial, ec);
      throw IoError(std::string(e == ENOSPC ? "disk full" : std::strerror(e)) + " while writing " + partial.string() +
                    " (" + std::to_string(kept) + " bytes kept; free space and run clef pull again to resume)");
    }
    if (r.code == CURLE_OK && (r.status == 200 || r.status == 206)) break;
    if (r.code == CURLE_OK && r.status == 416) {
      fs::remove(partial, ec);  // the range is past the file: start over
      if (attempt < ctx.opt.retries) continue;
    }
    if (r.code == CURLE_OPERATION_TIMEDOUT && past_deadline(ctx)) throw_deadline(ctx, f.path);
    if (!transient(r) || attempt >= ctx.opt.retries) throw_http(ctx, r, f.path);
    log_line(ctx, f.path + ": " + (r.code != CURLE_OK ? r.error : "HTTP " + std::to_string(r.status)) +
                      "; resuming at byte " + std::to_string(partial_size(partial)));
    wait_before_retry(ctx, r, attempt, f.path);
  }
}

/// Step 2 of fetch_file: verifies the downloaded `partial` (size, then sha256 or git blob id)
/// before the file gets its real name; a mismatch discards the download.
void verify_blob(PullContext& ctx, const RemoteFile& f, std::int64_t size, const fs::path& partial) {
  std::error_code ec;
  if (size == 0 && !fs::exists(partial, ec)) std::ofstream(partial, std::ios::binary).close();  // no body to write
  const std::int64_t got = partial_size(partial);
  const bool lfs = !f.sha256.empty();
  const std::string want = lfs ? lower(f.sha256) : lower(f.oid);
  if (got != size) {
    throw IoError(ctx.name.display() + ": " + f.path + " ended after " + std::to_string(got) + " of " +
                  std::to_string(size) + " bytes" +
                  (got > 0 ? " (kept in " + partial.string() + "; run clef pull again to resume)" : ""));
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
}

/// Fetches one file into the cache (see pull_model): resolve its blob, download and verify it
/// under the blob's lock unless the blob is there already, then link it into the snapshot.
void fetch_file(PullContext& ctx, RemoteFile& f) {
  const fs::path pointer = snapshot_file(ctx.folder, ctx.commit, f.path);
  std::error_code ec;
  if (fs::is_regular_file(pointer, ec)) {
    f.done = std::max<std::int64_t>(0, f.size.load());
    f.state = 2;
    ++ctx.cached;
    return;
  }
  const BlobSource src = resolve_blob(ctx, f);
  fs::create_directories(blobs_dir(ctx.folder));
  const fs::path blob = blob_file(ctx.folder, src.etag);
  const fs::path partial = incomplete_blob_file(ctx.folder, src.etag);
  const BlobLock lock(blob_lock_file(ctx.cache, ctx.folder, src.etag), ctx.deadline);
  if (!lock.held()) throw_deadline(ctx, f.path + " (another process held its lock)");
  if (!fs::is_regular_file(blob, ec)) {
    f.started = Clock::now();
    f.state = 1;
    download_blob(ctx, f, src, partial);
    verify_blob(ctx, f, src.size, partial);
    fs::rename(partial, blob);
    ++ctx.fetched;
  } else {
    ++ctx.cached;
  }
  link_snapshot_file(ctx.folder, ctx.commit, f.path, src.etag);
  if (f.size.load() > 0) f.done = f.size.load();
  f.state = 2;
  log_line(ctx, "verified " + f.path + " (" + human_bytes(static_cast<double>(f.size.load())) + ")");
}

/// The listed files a model may need (may_be_chosen), read page by page within the caps of
/// pull.h; a listed file with an unsafe name (repo_path_problem) or listed twice is an IoError.
std::map<std::string, std::unique_ptr<RemoteFile>> list_files(PullContext& ctx) {
  using Event = nlohmann::json::parse_event_t;
  const std::string name = ctx.name.display();
  std::map<std::string, std::unique_ptr<RemoteFile>> listing;
  std::int64_t seen = 0;
  // Each entry of a page (depth 1 of its array) is counted, checked and dropped unless it may be chosen.
  const nlohmann::json::parser_callback_t keep = [&](int depth, Event event, nlohmann::json& parsed) {
    if (depth != 1 || (event != Event::object_end && event != Event::array_end && event != Event::value)) return true;
    if (++seen > kMaxListingEntries) {
      throw IoError(name + ": the hub's file list has more than " + std::to_string(kMaxListingEntries) +
                    " entries, the cap of a listing (docs/MODELS.md \"Bounds\")");
    }
    if (event != Event::object_end || parsed.value("type", "") != "file") return false;
    const auto path = parsed.find("path");
    if (path == parsed.end() || !path->is_string()) return false;
    const std::string& p = path->get_ref<const std::string&>();
    if (const std::string problem = repo_path_problem(p); !problem.empty()) {
      throw IoError(name + ": the hub's file list names a file \"" + printable(p) + "\" with " + problem +
                    "; refused (nothing of this listing is written)");
    }
    return may_be_chosen(p);
  };
  std::string next = ctx.endpoint + "/api/models/" + ctx.name.repo_id + "/tree/" + ctx.commit + "?recursive=true";
  for (int page = 0; !next.empty(); ++page) {
    if (page >= kMaxListingPages) {
      throw IoError(name + ": the hub's file list goes on past " + std::to_string(kMaxListingPages) +
                    " pages, the cap of a listing (docs/MODELS.md \"Bounds\")");
    }
    std::string link;
    const nlohmann::json tree = get_json(ctx, next, "the file list", &link, keep);
    if (!tree.is_array()) throw IoError(name + ": the hub's file list is not a JSON array");
    for (const auto& e : tree) {
      auto f = std::make_unique<RemoteFile>();
      f->path = e["path"].get<std::string>();
      if (e.contains("size") && e["size"].is_number_integer()) f->size = e["size"].get<std::int64_t>();
      if (e.contains("oid") && e["oid"].is_string()) f->oid = e["oid"].get<std::string>();
      if (e.contains("lfs") && e["lfs"].is_object()) {
        const auto& l = e["lfs"];
        if (l.contains("oid") && l["oid"].is_string()) f->sha256 = l["oid"].get<std::string>();
        if (l.contains("size") && l["size"].is_number_integer()) f->size = l["size"].get<std::int64_t>();
      }
      if (listing.count(f->path) != 0) {
        throw IoError(name + ": the hub's file list names " + printable(f->path) + " twice; refused");
      }
      const std::string key = f->path;
      listing[key] = std::move(f);
    }
    if (!link.empty() && link[0] == '/') link = ctx.endpoint + link;
    if (!link.empty() && origin_of(link) != origin_of(ctx.endpoint)) {
      throw IoError(name + ": the hub's file list continues on another host (" + printable(origin_of(link)) +
                    "); refused");
    }
    next = link;
  }
  return listing;
}

/// Step 3 of pull_model: fetches ctx.files, `parallel` at a time; after all have ended, throws the
/// first failure (of its kind) saying how many more failed and how many files are kept.
void fetch_files(PullContext& ctx) {
  std::atomic<std::size_t> next_file{0};
  ctx.progress->start();
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
  ctx.progress->finish();

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
  const std::string revision = options.revision.empty() ? std::string("main") : options.revision;
  if (!is_valid_revision(revision)) throw InvalidArgument(invalid_revision_message(revision));
  PullContext ctx;
  ctx.name = name;
  ctx.opt = options;
  ctx.opt.parallel = std::clamp(ctx.opt.parallel, 1, 16);
  ctx.opt.retries = std::clamp(ctx.opt.retries, 0, 100);
  ctx.opt.stall_s = std::clamp(ctx.opt.stall_s, 1L, 3600L);
  if (ctx.opt.timeout_s > 0) {
    ctx.deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double>(std::min(ctx.opt.timeout_s, 1e9)));
  }
  if (ctx.opt.progress == ProgressStyle::kAuto)
    ctx.opt.progress = ::isatty(2) ? ProgressStyle::kBar : ProgressStyle::kLines;
  ctx.endpoint = options.endpoint.empty() ? hub_endpoint() : options.endpoint;
  while (!ctx.endpoint.empty() && ctx.endpoint.back() == '/') ctx.endpoint.pop_back();
  ctx.token = options.token.empty() ? hub_token() : options.token;
  ctx.cache = options.cache_dir.empty() ? hub_cache_dir() : options.cache_dir;
  ctx.folder = repo_folder(ctx.cache, name.repo_id);

  if (hub_offline()) {
    try {
      return PullReport{resolve_cached(name, options.revision, ctx.cache), 0, 0, 0};
    } catch (const InvalidArgument& e) {
      throw InvalidArgument(std::string(e.what()) +
                            "; HF_HUB_OFFLINE is set, so nothing is downloaded (unset it to fetch)");
    }
  }

  // 1. The commit of the revision (only "sha" of the answer is kept), then the file list at that
  // commit (sizes, git ids, LFS sha256) of the files the model may need.
  const nlohmann::json info =
      get_json(ctx, ctx.endpoint + "/api/models/" + name.repo_id + "/revision/" + url_encode(revision, false),
               "the repository information", nullptr,
               [](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
                 return !(event == nlohmann::json::parse_event_t::key && depth == 1 && parsed != "sha");
               });
  if (!info.is_object() || !info.contains("sha") || !info["sha"].is_string() ||
      !is_commit_hash(info["sha"].get<std::string>())) {
    throw IoError(name.display() + ": the hub's repository information has no commit id");
  }
  ctx.commit = info["sha"].get<std::string>();
  std::map<std::string, std::unique_ptr<RemoteFile>> listing = list_files(ctx);
  std::vector<std::string> paths;
  for (const auto& [p, f] : listing) paths.push_back(p);
  const ModelFiles chosen = select_model_files(paths, name);
  for (const auto& p : chosen.files) ctx.files.push_back(std::move(listing[p]));

  // 2. The cache folders and the ref, as huggingface_hub writes them.
  fs::create_directories(ctx.folder);
  write_cachedir_tag(ctx.cache);
  if (!is_commit_hash(revision)) write_ref(ctx.folder, revision, ctx.commit);
  std::int64_t total = 0;
  std::vector<const FileProgress*> shown;
  for (const auto& f : ctx.files) {
    total += std::max<std::int64_t>(0, f->size.load());
    shown.push_back(f.get());
  }
  ctx.progress = std::make_unique<PullProgress>(ctx.opt.progress, ctx.opt.log_interval_s, shown, ctx.received);
  log_line(ctx, name.display() + " at " + ctx.commit.substr(0, 12) + ": " + std::to_string(ctx.files.size()) +
                    " files, " + human_bytes(static_cast<double>(total)));

  // 3. The files, `parallel` at a time.
  fetch_files(ctx);
  PullReport rep;
  rep.files_fetched = ctx.fetched.load();
  rep.files_cached = ctx.cached.load();
  rep.bytes_downloaded = ctx.received.load();
  rep.model = resolve_cached(name, is_commit_hash(revision) ? revision : options.revision, ctx.cache);
  return rep;
}

}  // namespace clef::hub
