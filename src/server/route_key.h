// The balancer's routing key of a decision body (docs/DEPLOYMENT.md "Routing key"): the text of
// the body's top-level "state" and "images" members exactly as sent, hashed. deploy/haproxy's
// clef_state.lua extracts the same text from bodies it can read and HAProxy hashes it the same
// way (sha2(256),hex), and the server returns the key as X-Clef-Route-Key, so a client that echoes
// it (gzip bodies, bodies beyond HAProxy's buffer) is routed by the very same string.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace clef::server {

/// "state=<raw>\nimages=<raw>" (images "" when absent) for a JSON object body with a top-level
/// "state" member, the raw texts cut from `body` without decoding (spacing and escapes as sent);
/// nullopt for a body that is not such an object. The same scan as clef_state.lua's state_text.
std::optional<std::string> route_text(std::string_view body);

/// The lowercase hex SHA-256 of route_text(body), or "" when there is none.
std::string route_key(std::string_view body);

}  // namespace clef::server
