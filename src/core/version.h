// SPDX-License-Identifier: MIT
// clef's version, one source of truth: the VERSION of project() in the top-level CMakeLists.txt.
#pragma once

namespace clef {

/// The version as "MAJOR.MINOR.PATCH", a NUL-terminated static string. CMake compiles it into
/// core/version.cc (the definition CLEF_VERSION on that one file, src/core/CMakeLists.txt). Used by
/// `clef --version`, the MCP server's serverInfo and the hub client's User-Agent ("clef/<version>").
extern const char* const kVersion;

}  // namespace clef
