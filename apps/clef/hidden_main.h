// `clef hidden`: the backbone's final-norm hidden states (src/runtime/backbone_dump.cc), with the
// model given by path or by hub name.
#pragma once

namespace clef::cli {

/// Resolves --model/-m (a hub name through the Hugging Face cache, at --revision) and runs
/// backbone_dump_main with the local path. `argv[0]` is "hidden". Returns its exit code.
int hidden_main(int argc, char** argv);

}  // namespace clef::cli
