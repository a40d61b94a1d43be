// SPDX-License-Identifier: MIT
// Names, quant tags, file choice and cache resolution (src/hub/cache.h; docs/MODELS.md).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "hub/cache.h"

namespace fs = std::filesystem;

namespace clef::hub {
namespace {

TEST(HubName, ParsesTheThreeForms) {
  auto a = parse_model_name("Cloudflare/clef-flash");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->repo_id, "Cloudflare/clef-flash");
  EXPECT_EQ(a->quant, "");
  auto b = parse_model_name("ggml-org/Clef-Flash-GGUF:Q4_K_M");
  ASSERT_TRUE(b);
  EXPECT_EQ(b->repo_id, "ggml-org/Clef-Flash-GGUF");
  EXPECT_EQ(b->quant, "Q4_K_M");
  EXPECT_EQ(b->display(), "ggml-org/Clef-Flash-GGUF:Q4_K_M");
  auto c = parse_model_name("ggml-org/Clef-Flash-GGUF/sub/clef-flash-Q8_0.gguf");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->file, "sub/clef-flash-Q8_0.gguf");
  for (const char* bad : {"", "clef-flash", "/abs/path", "./model", "../x/y", "a/b/c", "a/b/../c.gguf", "a/.b",
                          "a/b:", "a/b:c:d", "a b/c", "org/-repo", "x/y/z.safetensors"}) {
    EXPECT_FALSE(parse_model_name(bad)) << bad;
  }
}

TEST(HubName, AnExistingPathIsAPath) {
  const fs::path d = fs::temp_directory_path() / "clef-hub-unit-org";
  fs::create_directories(d / "repo");
  const fs::path old = fs::current_path();
  fs::current_path(d.parent_path());
  EXPECT_FALSE(is_model_name_arg("clef-hub-unit-org/repo"));
  EXPECT_TRUE(is_model_name_arg("clef-hub-unit-org/other"));
  fs::current_path(old);
  fs::remove_all(d);
}

TEST(HubQuant, MatchesTagsBetweenSeparators) {
  const std::vector<std::string> files = {"Clef-Flash-Q4_K_M.gguf",
                                          "Clef-Flash-IQ4_K_M.gguf",
                                          "clef.q8_0.gguf",
                                          "Clef-Flash-BF16-00001-of-00002.gguf",
                                          "Clef-Flash-BF16-00002-of-00002.gguf",
                                          "mmproj-Clef-Flash-F16.gguf",
                                          "README.md"};
  EXPECT_EQ(match_quant(files, "q4_k_m"), std::vector<std::string>{"Clef-Flash-Q4_K_M.gguf"});
  EXPECT_EQ(match_quant(files, "Q8_0"), std::vector<std::string>{"clef.q8_0.gguf"});
  EXPECT_EQ(match_quant(files, "BF16"), std::vector<std::string>{"Clef-Flash-BF16-00001-of-00002.gguf"});
  EXPECT_TRUE(match_quant(files, "F16").empty());  // only the projector carries it
  EXPECT_TRUE(match_quant(files, "Q4").empty());   // a prefix of a tag is not a tag
  EXPECT_EQ(available_quants(files), "BF16, Q8_0, Q4_K_M");
}

TEST(HubSelect, ReleaseFolderTakesTheRootModelFiles) {
  const std::vector<std::string> files = {".gitattributes",
                                          "README.md",
                                          "config.json",
                                          "model-00001-of-00002.safetensors",
                                          "model-00002-of-00002.safetensors",
                                          "model.safetensors.index.json",
                                          "joint_head.safetensors",
                                          "joint_head_config.json",
                                          "tokenizer.json",
                                          "tokenizer_config.json",
                                          "SHA256SUMS",
                                          "images/demo.png",
                                          "sub/config.json"};
  const ModelFiles mf = select_model_files(files, *parse_model_name("Cloudflare/clef-flash"));
  EXPECT_EQ(mf.kind, RepoKind::kReleaseFolder);
  EXPECT_EQ(mf.files,
            (std::vector<std::string>{"SHA256SUMS", "config.json", "joint_head.safetensors", "joint_head_config.json",
                                      "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                                      "model.safetensors.index.json", "tokenizer.json", "tokenizer_config.json"}));
  EXPECT_THROW(select_model_files(files, *parse_model_name("Cloudflare/clef-flash:Q8_0")), InvalidArgument);
}

TEST(HubSelect, GgufRepositoryTakesOneQuantItsProjectorAndSideFiles) {
  const std::vector<std::string> files = {"README.md",
                                          "clef-flash-Q4_K_M.gguf",
                                          "clef-flash-Q8_0.gguf",
                                          "clef-flash-F16.gguf",
                                          "mmproj-clef-flash-F16.gguf",
                                          "mmproj-clef-flash-Q8_0.gguf",
                                          "joint_head.safetensors",
                                          "joint_head_config.json"};
  const ModelFiles q4 = select_model_files(files, *parse_model_name("o/r:Q4_K_M"));
  EXPECT_EQ(q4.kind, RepoKind::kGguf);
  EXPECT_EQ(q4.model_file, "clef-flash-Q4_K_M.gguf");
  EXPECT_EQ(q4.mmproj, "mmproj-clef-flash-F16.gguf");
  EXPECT_EQ(q4.files, (std::vector<std::string>{"clef-flash-Q4_K_M.gguf", "joint_head.safetensors",
                                                "joint_head_config.json", "mmproj-clef-flash-F16.gguf"}));
  const ModelFiles def = select_model_files(files, *parse_model_name("o/r"));
  EXPECT_EQ(def.model_file, "clef-flash-Q8_0.gguf");  // no tag: Q8_0 first
  EXPECT_EQ(def.mmproj, "mmproj-clef-flash-Q8_0.gguf");
  EXPECT_EQ(select_model_files(files, *parse_model_name("o/r/clef-flash-F16.gguf")).model_file, "clef-flash-F16.gguf");
  try {
    select_model_files(files, *parse_model_name("o/r:IQ2_XS"));
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("F16, Q8_0, Q4_K_M"), std::string::npos) << e.what();
  }
  EXPECT_THROW(select_model_files({"README.md"}, *parse_model_name("o/r")), ModelLoadError);
}

TEST(HubSelect, TheListingFilterKeepsEverythingAChoiceCanTake) {
  // clef pull keeps only the listed names may_be_chosen accepts: every choice from a full listing
  // must be the same from the filtered one, and the filter must drop what no choice takes.
  const std::vector<std::string> release = {".gitattributes",       "README.md",           "config.json",
                                            "model.safetensors",    "chat_template.jinja", "SHA256SUMS",
                                            "merges.txt",           "vocab.txt",           "notes.txt",
                                            "images/demo.png",      "sub/config.json",     "sub/model.safetensors",
                                            "tokenizer_config.json"};
  const std::vector<std::string> gguf = {"README.md",
                                         "clef-flash-Q4_K_M.gguf",
                                         "sub/clef-flash-Q8_0.gguf",
                                         "big-Q8_0-00001-of-00002.gguf",
                                         "big-Q8_0-00002-of-00002.gguf",
                                         "mmproj-clef-flash-F16.gguf",
                                         "joint_head.safetensors",
                                         "joint_head_config.json",
                                         "tokenizer.json",
                                         "random_weights.json",
                                         "imatrix.dat",
                                         "docs/usage.md"};
  auto filtered = [](const std::vector<std::string>& files) {
    std::vector<std::string> out;
    for (const auto& f : files) {
      if (may_be_chosen(f)) out.push_back(f);
    }
    return out;
  };
  EXPECT_EQ(select_model_files(filtered(release), *parse_model_name("o/r")).files,
            select_model_files(release, *parse_model_name("o/r")).files);
  for (const char* name : {"o/r:Q4_K_M", "o/r/sub/clef-flash-Q8_0.gguf", "o/r/big-Q8_0-00001-of-00002.gguf"}) {
    const ModelFiles all = select_model_files(gguf, *parse_model_name(name));
    const ModelFiles kept = select_model_files(filtered(gguf), *parse_model_name(name));
    EXPECT_EQ(kept.files, all.files) << name;
    EXPECT_EQ(kept.mmproj, all.mmproj) << name;
  }
  for (const char* dropped : {"README.md", ".gitattributes", "notes.txt", "images/demo.png", "sub/config.json",
                              "sub/model.safetensors", "imatrix.dat", "docs/usage.md"}) {
    EXPECT_FALSE(may_be_chosen(dropped)) << dropped;
  }
}

TEST(HubCache, UnsafeRepositoryPathsAreNamed) {
  EXPECT_EQ(repo_path_problem("config.json"), "");
  EXPECT_EQ(repo_path_problem("sub/dir/model-Q8_0.gguf"), "");
  EXPECT_EQ(repo_path_problem("..config.json"), "");  // a name starting with dots is not a '..' component
  EXPECT_EQ(repo_path_problem(std::string("config.json\0.bak.json", sizeof("config.json\0.bak.json") - 1)),
            "a NUL character");
  EXPECT_EQ(repo_path_problem("a\nb.json"), "a control character");
  EXPECT_EQ(repo_path_problem("a\x7f.json"), "a control character");
  EXPECT_EQ(repo_path_problem("sub\\config.json"), "a backslash");
  EXPECT_EQ(repo_path_problem("/etc/passwd.json"), "an absolute path");
  EXPECT_EQ(repo_path_problem("../x.gguf"), "a '..' path component");
  EXPECT_EQ(repo_path_problem("a/../../x.json"), "a '..' path component");
  EXPECT_EQ(repo_path_problem("a/./x.json"), "a '.' path component");
  EXPECT_EQ(repo_path_problem("a//x.json"), "an empty path component");
  EXPECT_EQ(repo_path_problem("dir/"), "an empty path component");
  EXPECT_EQ(repo_path_problem(""), "an empty name");
  EXPECT_EQ(repo_path_problem(std::string(1025, 'a')), "a name longer than 1,024 bytes");
}

TEST(HubCache, RevisionsAreCommitsOrGitRefNames) {
  // tests/hub/test_pull.py compares these rules with `git check-ref-format` itself.
  for (const char* ok : {"main", "v1.0", "refs/pr/1", "feature/x_y", "0123456789abcdef0123456789abcdef01234567"}) {
    EXPECT_TRUE(is_valid_revision(ok)) << ok;
  }
  for (const char* bad :
       {"",    "@",   "../../../../x", "a..b", "x.lock", ".hidden", "x/.y", "end/", "/start", "x.",    "a//b",
        "a b", "a~b", "a^b",           "a:b",  "a?b",    "a*b",     "a[b",  "a\\b", "a@{1}",  "tab\tx"}) {
    EXPECT_FALSE(is_valid_revision(bad)) << bad;
  }
  EXPECT_TRUE(is_valid_revision(std::string(255, 'x')));
  EXPECT_FALSE(is_valid_revision(std::string(256, 'x')));
  const std::string folder = (fs::temp_directory_path() / "clef-hub-unit-rev").string();
  EXPECT_THROW(resolve_cached(*parse_model_name("o/r"), "../../x", folder), InvalidArgument);
}

TEST(HubCache, ResolvesThroughRefsSnapshotsAndBlobs) {
  const fs::path cache = fs::temp_directory_path() / "clef-hub-unit-cache";
  fs::remove_all(cache);
  const std::string commit = "0123456789abcdef0123456789abcdef01234567";
  const fs::path repo = cache / "models--o--r";
  fs::create_directories(repo / "refs");
  fs::create_directories(repo / "blobs");
  fs::create_directories(repo / "snapshots" / commit);
  std::ofstream(repo / "refs" / "main") << commit;
  for (const char* f : {"config.json", "model.safetensors", "joint_head.safetensors"}) {
    std::ofstream(repo / "blobs" / (std::string("b-") + f)) << f;
    fs::create_symlink(std::string("../../blobs/b-") + f, repo / "snapshots" / commit / f);
  }
  EXPECT_EQ(repo_folder(cache.string(), "o/r"), repo.string());
  const ResolvedModel r = resolve_cached(*parse_model_name("o/r"), "", cache.string());
  EXPECT_EQ(r.commit, commit);
  EXPECT_EQ(r.path, (repo / "snapshots" / commit).string());
  EXPECT_EQ(resolve_cached(*parse_model_name("o/r"), commit, cache.string()).path, r.path);
  EXPECT_THROW(resolve_cached(*parse_model_name("o/r"), "dev", cache.string()), InvalidArgument);
  try {
    resolve_cached(*parse_model_name("o/missing"), "", cache.string());
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("clef pull o/missing"), std::string::npos) << e.what();
  }
  fs::remove_all(cache);
}

TEST(HubCache, CacheFolderFollowsHuggingfaceHubEnvironment) {
  ::setenv("HF_HUB_CACHE", "/tmp/a-cache", 1);
  EXPECT_EQ(hub_cache_dir(), "/tmp/a-cache");
  ::unsetenv("HF_HUB_CACHE");
  ::setenv("HF_HOME", "/tmp/a-home", 1);
  EXPECT_EQ(hub_cache_dir(), "/tmp/a-home/hub");
  ::unsetenv("HF_HOME");
  ::setenv("HF_HUB_OFFLINE", "1", 1);
  EXPECT_TRUE(hub_offline());
  ::setenv("HF_HUB_OFFLINE", "0", 1);
  EXPECT_FALSE(hub_offline());
  ::unsetenv("HF_HUB_OFFLINE");
}

}  // namespace
}  // namespace clef::hub
