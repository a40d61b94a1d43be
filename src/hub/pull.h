// SPDX-License-Identifier: MIT
// Fetching a model from a Hugging Face hub into the shared cache (docs/MODELS.md "clef pull"):
// the hub's HTTP protocol (repository listing, resolve/<revision>/<file> with its commit, etag and
// size headers and redirects to a storage host), range resumption, sha256 / git-blob verification
// before a file appears under its name, and the cache layout huggingface_hub writes. HTTP goes
// through libcurl.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "hub/cache.h"
#include "hub/progress.h"

namespace clef::hub {

/// The bounds of a pull (docs/MODELS.md "Bounds"; docs/COMPATIBILITY.md "Limits and guards").
constexpr std::size_t kMaxListingPageBytes = std::size_t{16} << 20;  ///< one JSON answer of the hub API
constexpr std::int64_t kMaxListingEntries = 100000;                  ///< entries of a file list, all pages
constexpr int kMaxListingPages = 1000;                               ///< pages of a file list
constexpr std::int64_t kMaxRetryAfterS = 60;  ///< the longest Retry-After waited for; a longer one fails
constexpr long kMinRateBytesPerS = 1024;      ///< slower than this for --stall-timeout seconds: cut, retried

struct PullOptions {
  std::string revision;   ///< branch, tag or commit ("" = main; is_valid_revision)
  std::string endpoint;   ///< hub base URL ("" = $HF_ENDPOINT, else https://huggingface.co)
  std::string cache_dir;  ///< "" = hub_cache_dir()
  std::string token;      ///< "" = hub_token()
  int parallel = 4;       ///< files fetched at once (1-16)
  int retries = 5;        ///< attempts per file after a dropped connection or a 5xx (resumed with Range)
  ProgressStyle progress = ProgressStyle::kAuto;
  double log_interval_s = 10;  ///< kLines: seconds between progress lines
  double timeout_s = 0;        ///< the whole pull's deadline in seconds (0: none)
  long stall_s = 30;           ///< a transfer slower than kMinRateBytesPerS for this many seconds is cut
};

struct PullReport {
  ResolvedModel model;                ///< where the model now is (as resolve_cached returns it)
  int files_fetched = 0;              ///< files downloaded (fully or resumed) and verified
  int files_cached = 0;               ///< files already in the cache (nothing downloaded)
  std::int64_t bytes_downloaded = 0;  ///< bytes received over the network for file contents
};

/// The hub base URL: $HF_ENDPOINT (trailing '/' removed), else https://huggingface.co.
std::string hub_endpoint();

/// The access token as huggingface_hub finds it: $HF_TOKEN (or $HUGGING_FACE_HUB_TOKEN), else the
/// first line of $HF_TOKEN_PATH, else of $HF_HOME/token (hf_home_dir()); "" when none.
std::string hub_token();

/// Fetches what `name` needs (select_model_files) at `options.revision` into the cache, skipping
/// files whose snapshot entry already exists, then returns the resolved model. The file list keeps
/// only entries may_be_chosen accepts, within kMaxListingPageBytes per page, kMaxListingEntries and
/// kMaxListingPages; a listed name with a repo_path_problem, or listed twice, fails the pull before
/// anything is written. Each transfer is bounded by its file's declared size (the listing's, which
/// the HEAD answer must agree with): a body that would pass it is aborted there and its bytes
/// deleted. Transient failures (a dropped or stalled connection, 408/429/5xx) are retried
/// `options.retries` times after the server's Retry-After (at most kMaxRetryAfterS) or a backoff
/// of 0.25-4 s; everything stops at `options.timeout_s`. Files are fetched
/// `options.parallel` at a time; each is written to blobs/<etag>.incomplete (resumed with an HTTP
/// Range request when present), checked against its published sha256 (LFS files) or git blob id
/// (other files), renamed to blobs/<etag>, and linked from snapshots/<commit>/<path>; refs/<branch
/// or tag> records the commit. Nothing unverified ever appears under a real name, and a failure of
/// one file keeps every other verified file.
/// Throws (docs/MODELS.md "Errors"): InvalidArgument for an invalid revision, 401/403 (how to set a
/// token), 404 (repository, revision or quant not found) and HF_HUB_OFFLINE set while something is
/// missing; ModelLoadError for a file whose bytes do not match the published hash or pass its
/// declared size (the partial file is removed); IoError for network errors after the retries, the
/// deadline, a Retry-After over the cap, a listing past its caps or with an unsafe name, a disk full
/// (the partial file is kept for resuming) and other file system errors.
PullReport pull_model(const ModelName& name, const PullOptions& options);

}  // namespace clef::hub
