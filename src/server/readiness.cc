// SPDX-License-Identifier: MIT
#include "server/readiness.h"

#include "core/json_text.h"

namespace clef::server {

ReadinessReply readiness(const ReadinessInput& in, const std::string& model) {
  const char* reason = nullptr;
  if (!in.model_loaded) {
    reason = "model_not_loaded";
  } else if (in.closed) {
    reason = "shutting_down";
  } else if (in.depth >= in.capacity) {
    reason = "queue_full";
  }
  ReadinessReply r;
  r.status = reason == nullptr ? 200 : 503;
  r.body = reason == nullptr ? "{\"status\":\"ready\""
                             : std::string("{\"status\":\"not_ready\",\"reason\":\"") + reason + "\"";
  r.body += ",\"model\":";
  append_json_string(r.body, model);
  r.body += ",\"loaded\":" + std::string(in.model_loaded ? "true" : "false") +
            ",\"queue_depth\":" + std::to_string(in.depth) + ",\"queue_capacity\":" + std::to_string(in.capacity) +
            ",\"running\":" + std::to_string(in.running) + ",\"max_running\":" + std::to_string(in.max_running) + "}";
  return r;
}

}  // namespace clef::server
