// `clef pull NAME[:QUANT]`: fetch a model from the Hugging Face hub into the shared cache.
#pragma once

namespace clef::cli {

/// Parses the flags (`argv[0]` is "pull"), runs hub::pull_model and prints the local model path
/// on stdout. Returns the exit code (errors are thrown to main()).
int pull_main(int argc, char** argv);

}  // namespace clef::cli
