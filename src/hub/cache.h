// SPDX-License-Identifier: MIT
// Models by name in the Hugging Face cache (docs/MODELS.md): parsing `ORG/REPO`, `ORG/REPO:QUANT`
// and `ORG/REPO/FILE.gguf`, choosing the files a model needs from a repository's file list, and
// resolving a name to a local path through the cache layout huggingface_hub writes
// (docs/MODELS.md "The cache layout"), and writing that layout's pieces for `clef pull` (refs,
// snapshot links, blob locks). Only the file system: no network here (hub/pull.h).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace clef::hub {

/// A model named by its Hugging Face repository.
struct ModelName {
  std::string repo_id;  ///< "ORG/REPO"
  std::string quant;    ///< ":QUANT" tag of a GGUF repository ("" when not given), as typed
  std::string file;     ///< "/FILE.gguf" path inside the repository ("" when not given)
  /// The name as the user wrote it back: ORG/REPO[:QUANT] or ORG/REPO/FILE.gguf.
  std::string display() const;
};

/// `text` as a model name, or nullopt when it does not have a name's shape (docs/MODELS.md
/// "Names"): ORG and REPO are 1-96 characters of [A-Za-z0-9._-], not starting or ending with '.'
/// or '-', no "..", and ORG/REPO/FILE names a file ending in ".gguf" (any case, no "..").
/// A caller treats `text` as a path first when it exists on disk (is_model_name_arg).
std::optional<ModelName> parse_model_name(const std::string& text);

/// True when a -m argument is a model name rather than a path: it parses as a name and no file
/// or folder of that path exists (relative to the working directory).
bool is_model_name_arg(const std::string& text);

/// The hub cache folder, as huggingface_hub computes it: $HF_HUB_CACHE, else
/// $HUGGINGFACE_HUB_CACHE, else $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub, else
/// ~/.cache/huggingface/hub. "~" at the start is expanded.
std::string hub_cache_dir();

/// The HF_HOME folder (where huggingface_hub keeps its token file): $HF_HOME, else
/// $XDG_CACHE_HOME/huggingface, else ~/.cache/huggingface.
std::string hf_home_dir();

/// True when HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) is 1/ON/YES/TRUE (any case).
bool hub_offline();

/// The folder of a model repository inside `cache_dir`: models--ORG--REPO.
std::string repo_folder(const std::string& cache_dir, const std::string& repo_id);

/// The paths of the cache layout inside a repository folder `folder` (repo_folder), as
/// huggingface_hub lays them out (docs/MODELS.md "The cache layout"); the one place that spells
/// them, for the reader (resolve_cached) and the writer (`clef pull`, link_snapshot_file, write_ref):
///   refs/<revision>                  a text file holding the revision's commit id;
///   snapshots/<commit>/<path>        the files of a commit, each a relative link into blobs/;
///   blobs/<etag>                     the bytes, named by the hub's etag (sha256 or git blob id);
///   blobs/<etag>.incomplete          a partial download, resumed with a Range request;
/// and, beside the repository folders, <cache_dir>/.locks/models--ORG--REPO/<etag>.lock.
std::string ref_file(const std::string& folder, const std::string& revision);
std::string snapshot_dir(const std::string& folder, const std::string& commit);
std::string snapshot_file(const std::string& folder, const std::string& commit, const std::string& path);
std::string blobs_dir(const std::string& folder);
std::string blob_file(const std::string& folder, const std::string& etag);
std::string incomplete_blob_file(const std::string& folder, const std::string& etag);
std::string blob_lock_file(const std::string& cache_dir, const std::string& folder, const std::string& etag);

/// True for a 40-character lower-case hex commit id.
bool is_commit_hash(const std::string& revision);

/// True when `revision` can name a revision (docs/MODELS.md "Names"): a 40-hex commit id, or a
/// branch or tag name by git's rules (`git check-ref-format --allow-onelevel`): 1-255 bytes; no
/// ASCII control character, space, `~ ^ : ? * [ \`; no `..`, `@{`, `//`; not `@`; not starting or
/// ending with `/`, not ending with `.`; no component starting with `.` or ending with `.lock`.
/// Such a name is a relative path that stays inside refs/ (refs/pr/1 is written as refs/refs/pr/1).
bool is_valid_revision(const std::string& revision);

/// The error message for a revision that is_valid_revision refuses (it names the rules).
std::string invalid_revision_message(const std::string& revision);

/// What makes `path` (a file path inside a repository, as a hub lists it) unsafe to create under a
/// snapshot folder, or "" when it is safe: empty or over 1,024 bytes, a control character (NUL
/// included), a backslash, a leading `/` (absolute), or an empty, `.` or `..` component.
std::string repo_path_problem(const std::string& path);

/// True when select_model_files may choose `path` from some listing, judged by its name alone: a
/// `.gguf` anywhere, or at the root a `.json`, `.safetensors` or `.jinja` file, SHA256SUMS,
/// merges.txt or vocab.txt. `clef pull` keeps only these entries of a listing.
bool may_be_chosen(const std::string& path);

/// Kind of a model repository.
enum class RepoKind { kReleaseFolder, kGguf };

/// The files of a repository a model needs (paths inside the repository).
struct ModelFiles {
  RepoKind kind = RepoKind::kReleaseFolder;
  std::vector<std::string> files;  ///< everything to fetch / expect, sorted
  std::string model_file;          ///< a GGUF repository: the chosen .gguf (also in files)
  std::string mmproj;              ///< a GGUF repository: its projector .gguf ("" when none; also in files)
};

/// Chooses the files of `repo_files` (paths inside the repository) that the model `name` needs
/// (docs/MODELS.md "Which files"):
/// - a repository with config.json at its root is a release folder: the root's *.json and
///   *.safetensors files, SHA256SUMS and *.jinja/*.txt tokenizer side files (no README, images,
///   other weight formats or subfolders); a :QUANT or /FILE.gguf on such a name is InvalidArgument;
/// - else a repository with *.gguf files is a GGUF repository: the one .gguf that FILE names or
///   that QUANT matches (see match_quant; no tag: Q8_0, then BF16, F16, F32, then the only one),
///   its projector (mmproj*.gguf: the one carrying the same tag, else F16, else the first), and
///   joint_head.safetensors, joint_head_config.json, tokenizer.json, tokenizer_config.json,
///   random_weights.json when present.
/// Throws InvalidArgument naming the available quants when none or several match, and
/// ModelLoadError when the repository holds neither kind.
ModelFiles select_model_files(const std::vector<std::string>& repo_files, const ModelName& name);

/// The .gguf files (not projectors) of `files` whose name carries the quant tag `quant`: the tag,
/// compared without case, must stand in the file name between separators ('-', '.', '_' or the
/// start, and '-', '.' or the end), e.g. "Q4_K_M" matches "Clef-Flash-Q4_K_M.gguf" and
/// "clef.q4_k_m.gguf" but not "Clef-Flash-IQ4_K_M.gguf". Split files ("-00002-of-00003") keep only
/// the first part.
std::vector<std::string> match_quant(const std::vector<std::string>& files, const std::string& quant);

/// The quant tags found in a GGUF repository's file names (for error messages), e.g. "Q8_0, BF16".
std::string available_quants(const std::vector<std::string>& files);

/// A name resolved to files on this machine.
struct ResolvedModel {
  std::string path;      ///< what the loader opens: the snapshot folder, or the .gguf file in it
  std::string snapshot;  ///< the snapshot folder
  std::string commit;    ///< the 40-hex commit of the snapshot
  std::string mmproj;    ///< a GGUF repository's projector in the snapshot ("" when none)
  ModelFiles files;
};

/// Resolves `name` at `revision` (a branch, tag or commit; "" means "main") in the cache
/// `cache_dir` without any network access: refs/<revision> gives the commit (a commit id is used
/// as it is), snapshots/<commit>/ the files (symlinks into blobs/ are followed, nothing is
/// copied). Every file select_model_files chooses among the snapshot's files must be present.
/// Throws InvalidArgument when `revision` is not valid (is_valid_revision) and when the repository, revision or a file
/// is not cached, saying how to fetch it (`clef pull NAME`), and what select_model_files throws.
ResolvedModel resolve_cached(const ModelName& name, const std::string& revision, const std::string& cache_dir);

/// Links snapshots/<commit>/<path> of the repository folder `folder` to ../../blobs/<etag>
/// (relative, one more ../ per folder of `path`, as huggingface_hub does), replacing another link or
/// file there. `path` must be safe (repo_path_problem) and `etag` a plain file name. Throws IoError.
void link_snapshot_file(const std::string& folder, const std::string& commit, const std::string& path,
                        const std::string& etag);

/// Writes refs/<revision> of `folder` (is_valid_revision) with `commit` and no newline, through a
/// temporary file renamed over it; nothing when it already says so. Throws IoError.
void write_ref(const std::string& folder, const std::string& revision, const std::string& commit);

/// Writes `cache_dir`/CACHEDIR.TAG (the cache-directory marker that backup tools skip) when missing.
void write_cachedir_tag(const std::string& cache_dir);

/// An exclusive advisory lock (flock) on huggingface_hub's lock file of a blob,
/// .locks/models--ORG--REPO/<etag>.lock, so that clef and huggingface_hub do not fetch the same blob
/// at once. A lock file that cannot be opened is no lock (the fetch goes on).
class BlobLock {
 public:
  /// Waits for the lock until `until` (polling every 50 ms); `held()` says whether it got it.
  BlobLock(const std::string& path, std::chrono::steady_clock::time_point until);
  ~BlobLock();
  BlobLock(const BlobLock&) = delete;
  BlobLock& operator=(const BlobLock&) = delete;
  /// False only when another process held the lock until `until`.
  bool held() const { return held_; }

 private:
  int fd_ = -1;
  bool held_ = true;
};

/// Lists the regular files of a snapshot folder (relative paths with '/', following symlinks;
/// dangling links are left out), sorted.
std::vector<std::string> list_snapshot_files(const std::string& snapshot_dir);

}  // namespace clef::hub
