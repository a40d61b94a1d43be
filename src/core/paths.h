// SPDX-License-Identifier: MIT
// File-system checks and path text for error messages: what every loader asks of a path before
// it opens it, and how a path (or any untrusted text) is shown in a one-line message.
#pragma once

#include <string>
#include <string_view>

namespace clef {

/// Checks that `path` names a regular file (following symlinks), without opening it, so a FIFO or
/// device never blocks. Throws ModelLoadError "<label>: not a regular file (...)" or
/// "<label>: missing" / "<label>: cannot stat: <reason>" (symlink loops included).
void require_regular_file(const std::string& path, const std::string& label);

/// True when something (file, directory, dangling or looping symlink) exists at `path`; never throws.
bool path_exists(const std::string& path) noexcept;

/// `s` with control characters, DEL and invalid UTF-8 bytes shown as \xNN, for one-line messages.
std::string printable(std::string_view s);

}  // namespace clef
