// SPDX-License-Identifier: MIT
// The balancer's routing key of a decision body (docs/DEPLOYMENT.md "Routing key"): the text of
// the body's top-level "state" and "images" members exactly as sent, hashed. deploy/haproxy's
// clef_state.lua extracts the same text from bodies it can read and HAProxy hashes it the same
// way (sha2(256),hex), and the server returns the key as X-Clef-Route-Key, so a client that echoes
// it (gzip bodies, bodies beyond HAProxy's buffer) is routed by the very same string. The texts
// come from the body's one parse (parse_json()'s top-level members), never from a second scan.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "decision/json_value.h"

namespace clef::server {

/// "state=<raw>\nimages=<raw>" (images "" when absent) for a body whose top-level object has a
/// "state" member: `members` are parse_json()'s top-level members of `body`, in the order sent;
/// keys are compared as sent (an escaped `"st\u0061te"` is not "state", as in clef_state.lua), and
/// a repeated key's last value counts. nullopt without a "state" member, or when `body` starts with
/// a UTF-8 byte order mark (which the balancer's scan does not skip).
std::optional<std::string> route_text(std::string_view body, std::span<const JsonMemberText> members);

/// The lowercase hex SHA-256 of route_text(), or "" when there is none.
std::string route_key(std::string_view body, std::span<const JsonMemberText> members);

}  // namespace clef::server
