// SPDX-License-Identifier: MIT
// The JSON text of scalars exactly as Python writes it (docs/PROTOCOL.md §3.3): string literals as
// json.dumps(ensure_ascii=False) escapes them, and floats as repr() prints them. Pure functions of
// their arguments, used by the request protocol (decision/render.h, the JSON value's previews and
// the errors' paths) and by whatever answers in JSON.
#pragma once

#include <string>
#include <string_view>

namespace clef {

/// Appends `s` (valid UTF-8) as a JSON string literal the way Python's json.dumps does with
/// ensure_ascii=False: `"` and `\` escaped, \n \r \t \b \f as two-character escapes, every other
/// byte below 0x20 as \u00xx (lower-case hex), everything else (DEL, U+2028, non-ASCII) raw.
void append_json_string(std::string& out, std::string_view s);
/// append_json_string's literal as a new string.
std::string json_string(std::string_view s);

/// Python repr() of a finite double (docs/PROTOCOL.md §3.3): the shortest digits that round-trip;
/// positional when the decimal exponent of the leading digit is in [-4, 15] ("1.0", "0.0001",
/// "-0.0", "1e+16" is the first exponent form), else "d[.ddd]e±XX" with at least two exponent
/// digits ("1e-05", "1.2345e+20", "5e-324"). Throws InternalError for NaN and infinities.
std::string python_float_repr(double v);

}  // namespace clef
