// SPDX-License-Identifier: MIT
#include "hub/cache.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "core/error.h"
#include "core/json_reader.h"
#include "core/paths.h"

namespace fs = std::filesystem;

namespace clef::hub {

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::string(v) : std::string();
}

std::string expand_home(const std::string& p) {
  if (p.empty() || p[0] != '~') return p;
  if (p.size() > 1 && p[1] != '/') return p;
  const std::string home = env("HOME");
  return home + p.substr(1);
}

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

bool ends_with_ci(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && upper(s.substr(s.size() - suffix.size())) == upper(suffix);
}

bool valid_part(const std::string& s) {
  if (s.empty() || s.size() > 96) return false;
  for (const char c : s) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-')) return false;
  }
  if (s.front() == '.' || s.front() == '-' || s.back() == '.' || s.back() == '-') return false;
  return s.find("..") == std::string::npos;
}

std::string base_name(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

bool is_gguf(const std::string& path) { return ends_with_ci(path, ".gguf"); }
bool is_projector(const std::string& path) { return is_gguf(path) && upper(base_name(path)).rfind("MMPROJ", 0) == 0; }

/// True when `name` is a later part of a split GGUF ("-0000k-of-0000n.gguf", k > 1).
bool later_split_part(const std::string& name) {
  const std::string u = upper(name);
  const auto of = u.rfind("-OF-");
  if (of == std::string::npos || of < 6) return false;
  const auto dash = u.rfind('-', of - 1);
  if (dash == std::string::npos) return false;
  const std::string part = u.substr(dash + 1, of - dash - 1);
  if (part.empty() ||
      !std::all_of(part.begin(), part.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); })) {
    return false;
  }
  return std::stoll(part) != 1;
}

bool is_sep_before(char c) { return c == '-' || c == '.' || c == '_' || c == '/'; }
bool is_sep_after(char c) { return c == '-' || c == '.'; }

/// True when `tag` stands between separators in `name` (both upper case).
bool carries_tag(const std::string& name, const std::string& tag) {
  if (tag.empty()) return false;
  for (std::size_t at = name.find(tag); at != std::string::npos; at = name.find(tag, at + 1)) {
    const bool before = at == 0 || is_sep_before(name[at - 1]);
    const std::size_t end = at + tag.size();
    const bool after = end == name.size() || is_sep_after(name[end]);
    if (before && after) return true;
  }
  return false;
}

/// Known quant tags, in the order error messages list them.
constexpr const char* kKnownQuants[] = {"F32",     "BF16",   "F16",    "Q8_0",   "Q8_K",    "Q6_K",  "Q5_K_M",
                                        "Q5_K_S",  "Q5_1",   "Q5_0",   "Q4_K_M", "Q4_K_S",  "Q4_1",  "Q4_0",
                                        "IQ4_XS",  "IQ4_NL", "Q3_K_L", "Q3_K_M", "Q3_K_S",  "IQ3_M", "IQ3_XS",
                                        "IQ3_XXS", "Q2_K",   "IQ2_M",  "IQ2_XS", "IQ2_XXS", "IQ1_M", "IQ1_S",
                                        "TQ1_0",   "TQ2_0",  "MXFP4"};

}  // namespace

std::string ModelName::display() const {
  if (!file.empty()) return repo_id + "/" + file;
  return quant.empty() ? repo_id : repo_id + ":" + quant;
}

std::optional<ModelName> parse_model_name(const std::string& text) {
  if (text.empty() || text.size() > 512) return std::nullopt;
  const auto slash = text.find('/');
  if (slash == std::string::npos) return std::nullopt;
  ModelName n;
  const std::string org = text.substr(0, slash);
  std::string rest = text.substr(slash + 1);
  if (!valid_part(org)) return std::nullopt;
  const auto slash2 = rest.find('/');
  if (slash2 != std::string::npos) {
    const std::string repo = rest.substr(0, slash2);
    const std::string file = rest.substr(slash2 + 1);
    if (!valid_part(repo) || file.empty() || !is_gguf(file) || file.find("..") != std::string::npos ||
        file.front() == '/' || file.find("//") != std::string::npos) {
      return std::nullopt;
    }
    n.repo_id = org + "/" + repo;
    n.file = file;
    return n;
  }
  const auto colon = rest.find(':');
  if (colon != std::string::npos) {
    const std::string quant = rest.substr(colon + 1);
    rest = rest.substr(0, colon);
    if (!valid_part(quant)) return std::nullopt;
    n.quant = quant;
  }
  if (!valid_part(rest)) return std::nullopt;
  n.repo_id = org + "/" + rest;
  return n;
}

bool is_model_name_arg(const std::string& text) {
  if (!parse_model_name(text)) return false;
  std::error_code ec;
  return !fs::exists(fs::symlink_status(text, ec));
}

std::string hf_home_dir() {
  if (const std::string h = env("HF_HOME"); !h.empty()) return expand_home(h);
  const std::string xdg = env("XDG_CACHE_HOME");
  return (xdg.empty() ? expand_home("~/.cache") : expand_home(xdg)) + "/huggingface";
}

std::string hub_cache_dir() {
  if (const std::string c = env("HF_HUB_CACHE"); !c.empty()) return expand_home(c);
  if (const std::string c = env("HUGGINGFACE_HUB_CACHE"); !c.empty()) return expand_home(c);
  return hf_home_dir() + "/hub";
}

bool hub_offline() {
  for (const char* name : {"HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"}) {
    const std::string v = upper(env(name));
    if (v == "1" || v == "ON" || v == "YES" || v == "TRUE") return true;
  }
  return false;
}

std::string repo_folder(const std::string& cache_dir, const std::string& repo_id) {
  std::string folder = "models--";
  for (const char c : repo_id) {
    if (c == '/') folder += "--";
    else folder += c;
  }
  return cache_dir + "/" + folder;
}

std::string ref_file(const std::string& folder, const std::string& revision) { return folder + "/refs/" + revision; }

std::string snapshot_dir(const std::string& folder, const std::string& commit) {
  return folder + "/snapshots/" + commit;
}

std::string snapshot_file(const std::string& folder, const std::string& commit, const std::string& path) {
  return snapshot_dir(folder, commit) + "/" + path;
}

std::string blobs_dir(const std::string& folder) { return folder + "/blobs"; }

std::string blob_file(const std::string& folder, const std::string& etag) { return blobs_dir(folder) + "/" + etag; }

std::string incomplete_blob_file(const std::string& folder, const std::string& etag) {
  return blob_file(folder, etag) + ".incomplete";
}

std::string blob_lock_file(const std::string& cache_dir, const std::string& folder, const std::string& etag) {
  return cache_dir + "/.locks/" + fs::path(folder).filename().string() + "/" + etag + ".lock";
}

bool is_commit_hash(const std::string& revision) {
  return revision.size() == 40 && std::all_of(revision.begin(), revision.end(), [](char c) {
           return std::isdigit(static_cast<unsigned char>(c)) || (c >= 'a' && c <= 'f');
         });
}

bool is_valid_revision(const std::string& revision) {
  if (is_commit_hash(revision)) return true;
  if (revision.empty() || revision.size() > 255 || revision == "@") return false;
  for (const char ch : revision) {
    const auto c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c == 0x7f || std::strchr(" ~^:?*[\\", ch) != nullptr) return false;
  }
  if (revision.find("..") != std::string::npos || revision.find("@{") != std::string::npos ||
      revision.find("//") != std::string::npos || revision.front() == '/' || revision.back() == '/' ||
      revision.back() == '.') {
    return false;
  }
  std::size_t start = 0;
  while (start <= revision.size()) {
    const std::size_t end = std::min(revision.find('/', start), revision.size());
    const std::string component = revision.substr(start, end - start);
    if (component.front() == '.' || (component.size() >= 5 && component.compare(component.size() - 5, 5, ".lock") == 0))
      return false;
    start = end + 1;
  }
  return true;
}

std::string repo_path_problem(const std::string& path) {
  if (path.empty()) return "an empty name";
  if (path.size() > 1024) return "a name longer than 1,024 bytes";
  for (const char ch : path) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == 0) return "a NUL character";
    if (c < 0x20 || c == 0x7f) return "a control character";
    if (c == '\\') return "a backslash";
  }
  if (path.front() == '/') return "an absolute path";
  std::size_t start = 0;
  while (start <= path.size()) {
    const std::size_t end = std::min(path.find('/', start), path.size());
    const std::string component = path.substr(start, end - start);
    if (component.empty()) return "an empty path component";
    if (component == "." || component == "..") return "a '" + component + "' path component";
    start = end + 1;
  }
  return "";
}

std::string invalid_revision_message(const std::string& revision) {
  return "--revision \"" + printable(revision) +
         "\" is not a branch, tag or commit id (40 hex digits, or a name by git's rules: no '..', '@{', '//', "
         "space, control character or any of ~^:?*[\\; no component starting with '.' or ending with '.lock'; "
         "at most 255 bytes; docs/MODELS.md \"Names\")";
}

bool may_be_chosen(const std::string& path) {
  if (is_gguf(path)) return true;
  if (path.find('/') != std::string::npos) return false;
  return ends_with_ci(path, ".json") || ends_with_ci(path, ".safetensors") || ends_with_ci(path, ".jinja") ||
         path == "SHA256SUMS" || path == "merges.txt" || path == "vocab.txt";
}

std::vector<std::string> match_quant(const std::vector<std::string>& files, const std::string& quant) {
  const std::string tag = upper(quant);
  std::vector<std::string> out;
  for (const auto& f : files) {
    if (!is_gguf(f) || is_projector(f) || later_split_part(base_name(f))) continue;
    if (carries_tag(upper(base_name(f)), tag)) out.push_back(f);
  }
  return out;
}

std::string available_quants(const std::vector<std::string>& files) {
  std::set<std::string> seen;
  std::string out;
  for (const char* q : kKnownQuants) {
    if (!match_quant(files, q).empty() && seen.insert(q).second) out += (out.empty() ? "" : ", ") + std::string(q);
  }
  if (out.empty()) {
    for (const auto& f : files) {
      if (is_gguf(f) && !is_projector(f)) out += (out.empty() ? "" : ", ") + base_name(f);
    }
  }
  return out.empty() ? std::string("none") : out;
}

ModelFiles select_model_files(const std::vector<std::string>& repo_files, const ModelName& name) {
  ModelFiles mf;
  const bool has_config = std::find(repo_files.begin(), repo_files.end(), "config.json") != repo_files.end();
  std::vector<std::string> ggufs;
  for (const auto& f : repo_files) {
    if (is_gguf(f) && !is_projector(f)) ggufs.push_back(f);
  }
  if (has_config && name.quant.empty() && name.file.empty()) {
    mf.kind = RepoKind::kReleaseFolder;
    for (const auto& f : repo_files) {
      if (f.find('/') != std::string::npos) continue;
      if (ends_with_ci(f, ".json") || ends_with_ci(f, ".safetensors") || f == "SHA256SUMS" ||
          ends_with_ci(f, ".jinja") || f == "merges.txt" || f == "vocab.txt") {
        mf.files.push_back(f);
      }
    }
    std::sort(mf.files.begin(), mf.files.end());
    return mf;
  }
  if (ggufs.empty()) {
    if (has_config) {
      throw InvalidArgument(name.display() + " is a release folder repository (config.json, no .gguf): name it as " +
                            name.repo_id + " without a quant tag or file");
    }
    throw ModelLoadError(name.repo_id + " holds neither a Clef release folder (config.json) nor a .gguf model");
  }
  mf.kind = RepoKind::kGguf;
  std::string tag;
  if (!name.file.empty()) {
    if (std::find(repo_files.begin(), repo_files.end(), name.file) == repo_files.end()) {
      throw InvalidArgument(name.repo_id + " has no file " + name.file +
                            " (its GGUF quants: " + available_quants(repo_files) + ")");
    }
    mf.model_file = name.file;
  } else {
    std::vector<std::string> hits;
    if (!name.quant.empty()) {
      hits = match_quant(repo_files, name.quant);
      tag = upper(name.quant);
      if (hits.empty()) {
        throw InvalidArgument(name.repo_id + " has no " + name.quant + " GGUF (its quants: " +
                              available_quants(repo_files) + "; name one as " + name.repo_id + ":QUANT)");
      }
    } else {
      for (const char* q : {"Q8_0", "BF16", "F16", "F32"}) {
        hits = match_quant(repo_files, q);
        if (!hits.empty()) {
          tag = q;
          break;
        }
      }
      if (hits.empty()) {
        std::vector<std::string> firsts;
        for (const auto& g : ggufs) {
          if (!later_split_part(base_name(g))) firsts.push_back(g);
        }
        hits = firsts;
      }
    }
    if (hits.size() > 1) {
      std::string list;
      for (const auto& h : hits) list += (list.empty() ? "" : ", ") + h;
      throw InvalidArgument(name.display() + " matches several GGUF files (" + list + "); name one as " + name.repo_id +
                            "/FILE.gguf");
    }
    mf.model_file = hits.front();
  }
  mf.files.push_back(mf.model_file);
  // Later parts of a split GGUF travel with its first part.
  const std::string first = base_name(mf.model_file);
  const auto of = upper(first).rfind("-00001-OF-");
  if (of != std::string::npos) {
    const std::string stem = first.substr(0, of);
    for (const auto& f : ggufs) {
      if (f != mf.model_file && base_name(f).rfind(stem + "-", 0) == 0 && later_split_part(base_name(f)))
        mf.files.push_back(f);
    }
  }
  std::vector<std::string> projectors;
  for (const auto& f : repo_files) {
    if (is_projector(f)) projectors.push_back(f);
  }
  std::sort(projectors.begin(), projectors.end());
  if (!projectors.empty()) {
    std::string pick;
    for (const auto& p : projectors) {
      if (pick.empty() && !tag.empty() && carries_tag(upper(base_name(p)), tag)) pick = p;
    }
    for (const auto& p : projectors) {
      if (pick.empty() && carries_tag(upper(base_name(p)), "F16")) pick = p;
    }
    mf.mmproj = pick.empty() ? projectors.front() : pick;
    mf.files.push_back(mf.mmproj);
  }
  for (const char* side : {"joint_head.safetensors", "joint_head_config.json", "tokenizer.json",
                           "tokenizer_config.json", "random_weights.json"}) {
    if (std::find(repo_files.begin(), repo_files.end(), side) != repo_files.end()) mf.files.emplace_back(side);
  }
  std::sort(mf.files.begin(), mf.files.end());
  return mf;
}

void link_snapshot_file(const std::string& folder, const std::string& commit, const std::string& path,
                        const std::string& etag) {
  const fs::path pointer = snapshot_file(folder, commit, path);
  std::error_code ec;
  fs::create_directories(pointer.parent_path(), ec);
  if (ec) throw IoError("cannot create " + pointer.parent_path().string() + ": " + ec.message());
  std::string target;
  const auto depth = static_cast<std::size_t>(std::count(path.begin(), path.end(), '/')) + 2;
  for (std::size_t i = 0; i < depth; ++i) target += "../";
  target += "blobs/" + etag;
  if (fs::is_symlink(fs::symlink_status(pointer, ec))) {
    if (fs::read_symlink(pointer, ec) == fs::path(target)) return;
    fs::remove(pointer, ec);
  } else if (fs::exists(fs::symlink_status(pointer, ec))) {
    fs::remove(pointer, ec);
  }
  fs::create_symlink(target, pointer, ec);
  if (ec && !fs::is_symlink(fs::symlink_status(pointer, ec))) {
    throw IoError("cannot link " + pointer.string() + " -> " + target + ": " + ec.message());
  }
}

void write_ref(const std::string& folder, const std::string& revision, const std::string& commit) {
  const fs::path ref = ref_file(folder, revision);
  std::error_code ec;
  fs::create_directories(ref.parent_path(), ec);
  if (ec) throw IoError("cannot create " + ref.parent_path().string() + ": " + ec.message());
  {
    std::ifstream in(ref);
    std::string old;
    if (in && std::getline(in, old) && old == commit) return;
  }
  const fs::path tmp = ref.string() + "." + std::to_string(::getpid()) + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << commit;
    if (!out.flush()) throw IoError("cannot write " + tmp.string());
  }
  fs::rename(tmp, ref, ec);
  if (ec) throw IoError("cannot rename " + tmp.string() + " to " + ref.string() + ": " + ec.message());
}

void write_cachedir_tag(const std::string& cache_dir) {
  const std::string tag = cache_dir + "/CACHEDIR.TAG";
  std::error_code ec;
  if (fs::exists(tag, ec)) return;
  std::ofstream out(tag, std::ios::binary);
  out << "Signature: 8a477f597d28d172789f06886806bc55\n"
         "# This folder is a Hugging Face hub cache (written by clef pull or huggingface_hub).\n";
}

BlobLock::BlobLock(const std::string& path, std::chrono::steady_clock::time_point until) {
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) return;
  while (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK && errno != EINTR) return;  // no lock to be had: go on without one
    if (std::chrono::steady_clock::now() >= until) {
      held_ = false;
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

BlobLock::~BlobLock() {
  if (fd_ >= 0) ::close(fd_);
}

std::vector<std::string> list_snapshot_files(const std::string& snapshot_dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(snapshot_dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    std::error_code ec2;
    if (!fs::is_regular_file(it->path(), ec2)) continue;  // follows the symlink; dangling -> false
    out.push_back(it->path().lexically_relative(snapshot_dir).generic_string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

ResolvedModel resolve_cached(const ModelName& name, const std::string& revision, const std::string& cache_dir) {
  const std::string rev = revision.empty() ? std::string("main") : revision;
  if (!is_valid_revision(rev)) throw InvalidArgument(invalid_revision_message(rev));
  const std::string folder = repo_folder(cache_dir, name.repo_id);
  const std::string how = " (fetch it with `clef pull " + name.display() +
                          (revision.empty() ? "" : " --revision " + rev) + "`, or add --pull)";
  std::error_code ec;
  if (!fs::is_directory(folder, ec)) {
    throw InvalidArgument(name.display() + " is not in the Hugging Face cache " + cache_dir + how);
  }
  ResolvedModel r;
  if (is_commit_hash(rev)) {
    r.commit = rev;
  } else {
    std::ifstream ref(ref_file(folder, rev));
    if (!ref || !(ref >> r.commit) || !is_commit_hash(r.commit)) {
      throw InvalidArgument(name.display() + ": revision " + rev + " is not in the Hugging Face cache " + cache_dir +
                            how);
    }
  }
  r.snapshot = snapshot_dir(folder, r.commit);
  if (!fs::is_directory(r.snapshot, ec)) {
    throw InvalidArgument(name.display() + ": snapshot " + r.commit + " is not in the Hugging Face cache " + cache_dir +
                          how);
  }
  const std::vector<std::string> present = list_snapshot_files(r.snapshot);
  r.files = select_model_files(present, name);
  for (const auto& f : r.files.files) {
    if (!fs::is_regular_file(r.snapshot + "/" + f, ec)) {
      throw InvalidArgument(name.display() + ": " + f + " is missing from the cached snapshot " + r.snapshot + how);
    }
  }
  if (r.files.kind == RepoKind::kReleaseFolder) {
    // A release folder needs at least its config and weights; a half-fetched snapshot says so.
    const bool weights = std::any_of(present.begin(), present.end(), [](const std::string& f) {
      return f == "model.safetensors" || f == "model.safetensors.index.json";
    });
    if (!weights) {
      throw InvalidArgument(name.display() + ": the cached snapshot " + r.snapshot + " has no model weights" + how);
    }
    r.path = r.snapshot;
  } else {
    r.path = r.snapshot + "/" + r.files.model_file;
    if (!r.files.mmproj.empty()) r.mmproj = r.snapshot + "/" + r.files.mmproj;
  }
  return r;
}

}  // namespace clef::hub
