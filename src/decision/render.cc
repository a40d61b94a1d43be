// SPDX-License-Identifier: MIT
#include "decision/render.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/json_text.h"

namespace clef {

namespace {

/// json.dumps(v, ensure_ascii=False, separators=(",", ":"), sort_keys=sort_keys) appended to `out`.
void append_json(std::string& out, const JsonValue& v, bool sort_keys) {
  switch (v.kind()) {
    case JsonValue::Kind::kNull: out += "null"; return;
    case JsonValue::Kind::kBool: out += v.as_bool() ? "true" : "false"; return;
    case JsonValue::Kind::kInt: out += v.int_text(); return;
    case JsonValue::Kind::kFloat: out += python_float_repr(v.as_float()); return;
    case JsonValue::Kind::kString: append_json_string(out, v.as_string()); return;
    case JsonValue::Kind::kArray: {
      out.push_back('[');
      bool first = true;
      for (const JsonValue& item : v.items()) {
        if (!first) out.push_back(',');
        first = false;
        append_json(out, item, sort_keys);
      }
      out.push_back(']');
      return;
    }
    case JsonValue::Kind::kObject: {
      std::vector<const JsonValue::Member*> members;
      members.reserve(v.members().size());
      for (const auto& m : v.members()) members.push_back(&m);
      if (sort_keys) {
        // Python compares str keys by code point, which for valid UTF-8 is the unsigned byte
        // order that std::string_view::compare uses (char_traits<char>).
        std::sort(members.begin(), members.end(), [](const JsonValue::Member* a, const JsonValue::Member* b) {
          return std::string_view(a->first) < std::string_view(b->first);
        });
      }
      out.push_back('{');
      bool first = true;
      for (const JsonValue::Member* m : members) {
        if (!first) out.push_back(',');
        first = false;
        append_json_string(out, m->first);
        out.push_back(':');
        append_json(out, m->second, sort_keys);
      }
      out.push_back('}');
      return;
    }
  }
}

}  // namespace

void append_dump_json(std::string& out, const JsonValue& v) { append_json(out, v, /*sort_keys=*/true); }

void append_echo_json(std::string& out, const JsonValue& v) { append_json(out, v, /*sort_keys=*/false); }

std::string dump_json(const JsonValue& value) {
  std::string out;
  append_dump_json(out, value);
  return out;
}

std::string render(const JsonValue& value) {
  if (value.is_string()) return value.as_string();
  return dump_json(value);
}

}  // namespace clef
