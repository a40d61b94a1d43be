#include "hidden_main.h"

#include <string>
#include <vector>

#include "engine_flags.h"
#include "runtime/backbone.h"

namespace clef::cli {

int hidden_main(int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  std::string revision;
  int model_at = -1;
  std::vector<std::string> kept;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--revision" && i + 1 < args.size()) {
      revision = args[++i];
      continue;
    }
    if (i > 0 && (args[i] == "--model" || args[i] == "-m") && i + 1 < args.size()) {
      kept.push_back(args[i]);
      model_at = static_cast<int>(kept.size());
      kept.push_back(args[++i]);
      continue;
    }
    if (args[i] == "--help" || args[i] == "-h") return backbone_dump_main(argc, argv);
    kept.push_back(args[i]);
  }
  if (model_at >= 0) {
    bool is_default = false;
    auto& m = kept[static_cast<std::size_t>(model_at)];
    m = resolve_model_arg(m, true, revision, false, &is_default);
  } else if (!revision.empty()) {
    throw InvalidArgument("--revision needs --model ORG/REPO");
  }
  std::vector<char*> out;
  for (auto& a : kept) out.push_back(a.data());
  out.push_back(nullptr);
  return backbone_dump_main(static_cast<int>(kept.size()), out.data());
}

}  // namespace clef::cli
