// SPDX-License-Identifier: MIT
// render(): the text of a JSON value inside a Clef prompt (docs/PROTOCOL.md §3.3), byte-identical
// to the reference's Python: a string is used as-is, any other value is
//   json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
// of the value json.loads produced from the request.
#pragma once

#include <string>
#include <string_view>

#include "decision/json_value.h"

namespace clef {

/// Prompt text of a value (docs/PROTOCOL.md §3.3): the string itself for a JSON string, else
/// dump_json(value). Returns UTF-8. Never throws for a JsonValue (its invariants exclude NaN,
/// infinities, invalid UTF-8 and lone surrogates).
std::string render(const JsonValue& value);

/// Python json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":")) of any
/// value, strings included (quoted). Object keys are sorted by code point (= UTF-8 byte order for
/// valid UTF-8), nested objects too; integers print their exact digits; floats print as Python's
/// repr (python_float_repr). Returns UTF-8.
std::string dump_json(const JsonValue& value);

/// Appends dump_json(value) to `out`.
void append_dump_json(std::string& out, const JsonValue& value);

/// Appends `value` as a response echoes a request value (docs/PROTOCOL.md §2.1 rule 4: the
/// reference returns the json.loads value inside its response dict, serialised without sort_keys):
/// Python json.dumps(value, ensure_ascii=False, separators=(",", ":")) with object members in the
/// order JsonValue keeps them (first position, last value of a repeated key, at every depth);
/// strings, numbers and literals exactly as dump_json writes them. Returns UTF-8; never throws for
/// a JsonValue.
void append_echo_json(std::string& out, const JsonValue& value);

}  // namespace clef
