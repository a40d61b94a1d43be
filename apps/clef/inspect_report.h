// SPDX-License-Identifier: MIT
// The reports of `clef inspect` (text and --json) over a loaded release and its ModelSummary
// (runtime/inspect.h); the MCP tool model_info returns the JSON one.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/inspect.h"
#include "runtime/release.h"

namespace clef::cli {

/// Human-readable report (what `clef inspect` prints). `chunk` and `context` size the
/// activation and state estimates.
std::string format_inspect_report(const ReleaseFolder& release, const ModelSummary& s, std::int64_t chunk,
                                  std::int64_t context);

/// The same content as JSON (`clef inspect --json`), for scripts and tests.
nlohmann::ordered_json inspect_json(const ReleaseFolder& release, const ModelSummary& s, std::int64_t chunk,
                                    std::int64_t context);

}  // namespace clef::cli
