// `clef mcp`: a Model Context Protocol server on stdio (docs/MODELS.md "clef mcp").
#pragma once

namespace clef::cli {

/// Parses the engine flags (`argv[0]` is "mcp"), loads the model once and answers MCP messages
/// (JSON-RPC 2.0, one message per line) from stdin on stdout until stdin ends: initialize, ping,
/// tools/list, tools/call with the tools `decide` and `model_info`. Only protocol messages go to
/// stdout (anything else the process writes there is sent to stderr). Returns 0 at end of input.
int mcp_main(int argc, char** argv);

}  // namespace clef::cli
