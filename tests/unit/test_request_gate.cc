// SPDX-License-Identifier: MIT
// Unit tests of the request gate of `clef serve` (server/request_gate.h): each header rule of
// docs/COMPATIBILITY.md "limits and guards" decided from a request head alone, and the order in
// which they apply (auth before route and method, framing before everything else).
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "server/request_gate.h"

namespace clef::server {
namespace {

RequestHead make(std::string_view method, std::string_view target,
                 std::vector<std::pair<std::string_view, std::string_view>> fields, unsigned version = 11) {
  RequestHead h;
  h.method = method;
  h.target = target;
  h.version = version;
  h.fields = std::move(fields);
  for (const auto& [name, value] : h.fields) {
    if (name == "Transfer-Encoding" && value == "chunked") h.chunked = true;
    if (name == "Content-Length") h.has_content_length = true;
  }
  return h;
}

const HostPolicy kHosts{{"127.0.0.1"}, false};

GateConfig config(std::string_view key = "") {
  GateConfig c;
  c.hosts = &kHosts;
  c.local_address = "127.0.0.1";
  c.api_key = key;
  c.max_body_bytes = 1000;
  return c;
}

int status(const GateVerdict& v) { return v.action == GateAction::kRefuse ? v.error->status : 0; }

constexpr std::pair<std::string_view, std::string_view> kHost{"Host", "127.0.0.1"};
constexpr std::pair<std::string_view, std::string_view> kJson{"Content-Type", "application/json"};

TEST(RequestGate, RoutesAndBodies) {
  GateVerdict v = gate_request(make("GET", "/health", {kHost}), config());
  EXPECT_EQ(v.action, GateAction::kDropBody);
  EXPECT_EQ(v.route.endpoint, Endpoint::kHealth);
  EXPECT_EQ(v.method_label, "GET");
  v = gate_request(make("POST", "/v1/systemone", {kHost, kJson, {"Content-Length", "10"}}), config());
  EXPECT_EQ(v.action, GateAction::kReadDecisionBody);
  EXPECT_EQ(v.encoding, BodyEncoding::kIdentity);
  v = gate_request(make("POST", "/api/alpha/decisions",
                        {kHost, kJson, {"Transfer-Encoding", "chunked"}, {"Content-Encoding", "gzip"}}),
                   config());
  EXPECT_EQ(v.action, GateAction::kReadDecisionBody);
  EXPECT_EQ(v.encoding, BodyEncoding::kGzip);
  EXPECT_EQ(v.route.dialect, Dialect::kOpenRouter);
  // A GET with a large body is answered without reading it; an unknown path with one is 404.
  EXPECT_EQ(gate_request(make("GET", "/health", {kHost, {"Content-Length", "100000"}}), config()).action,
            GateAction::kAnswerThenClose);
  EXPECT_EQ(status(gate_request(make("GET", "/nope", {kHost, {"Content-Length", "100000"}}), config())), 404);
  EXPECT_EQ(gate_request(make("BREW", "/nope", {kHost}), config()).method_label, "-");
}

TEST(RequestGate, FramingAndLengths) {
  EXPECT_EQ(status(gate_request(make("GET", "/health", {kHost}, 20), config())), 505);
  EXPECT_EQ(status(gate_request(make("POST", "/v1/systemone",
                                     {kHost, kJson, {"Content-Length", "1"}, {"Content-Length", "1"}}),
                                config())),
            400);
  EXPECT_EQ(status(gate_request(make("POST", "/v1/systemone", {kHost, kJson, {"Content-Length", "+1"}}), config())),
            400);
  // One all-digit length too large for any body (it fits 64 bits, not 63) is 413, as documented.
  const GateVerdict huge =
      gate_request(make("POST", "/v1/systemone", {kHost, kJson, {"Content-Length", "18446744073709551615"}}), config());
  EXPECT_EQ(status(huge), 413);
  EXPECT_TRUE(huge.close);
  EXPECT_EQ(status(gate_request(make("POST", "/v1/systemone", {kHost, kJson, {"Content-Length", "1001"}}), config())),
            413);
  EXPECT_EQ(status(gate_request(make("POST", "/v1/systemone", {kHost, kJson}), config())), 411);
  EXPECT_EQ(status(gate_request(make("POST", "/v1/systemone",
                                     {kHost, kJson, {"Content-Length", "2"}, {"Content-Encoding", "gzip, gzip"}}),
                                config())),
            415);
  EXPECT_EQ(status(gate_request(make("POST", "/v1/systemone", {kHost, {"Content-Length", "2"}}), config())), 415);
  std::vector<std::pair<std::string_view, std::string_view>> many(101, {"X-A", "b"});
  many.push_back(kHost);
  EXPECT_EQ(status(gate_request(make("GET", "/health", many), config())), 431);
}

TEST(RequestGate, HostAndAbsoluteForm) {
  EXPECT_EQ(status(gate_request(make("GET", "/health", {}), config())), 400);
  EXPECT_EQ(status(gate_request(make("GET", "/health", {{"Host", "evil.example"}}), config())), 421);
  EXPECT_EQ(status(gate_request(make("GET", "/health", {{"Host", "localhost:65536"}}), config())), 421);
  // The absolute-form authority replaces Host (RFC 9112 §3.2.2).
  EXPECT_EQ(status(gate_request(make("GET", "http://evil.example/health", {kHost}), config())), 421);
  EXPECT_EQ(gate_request(make("GET", "http://127.0.0.1:8000/health", {{"Host", "evil.example"}}), config()).action,
            GateAction::kDropBody);
  EXPECT_EQ(status(gate_request(make("GET", "ftp://127.0.0.1/health", {kHost}), config())), 400);
  // HTTP/1.0 may omit Host.
  EXPECT_EQ(gate_request(make("GET", "/health", {}, 10), config()).action, GateAction::kDropBody);
  // An escaped path matches no route.
  EXPECT_EQ(gate_request(make("GET", "/%6detrics", {kHost}), config()).route.endpoint, Endpoint::kNone);
}

TEST(RequestGate, AuthorizationComesFirst) {
  const std::pair<std::string_view, std::string_view> good{"Authorization", "Bearer k3y"};
  EXPECT_EQ(status(gate_request(make("GET", "/metrics", {kHost}), config("k3y"))), 401);
  EXPECT_EQ(status(gate_request(make("GET", "/nope", {kHost}), config("k3y"))), 401);
  EXPECT_EQ(gate_request(make("GET", "/metrics", {kHost, {"Authorization", "BEARER k3y"}}), config("k3y")).action,
            GateAction::kDropBody);
  EXPECT_EQ(status(gate_request(make("GET", "/metrics", {kHost, {"Authorization", "Bearer k3"}}), config("k3y"))), 401);
  // /health and /ready need no key.
  EXPECT_EQ(gate_request(make("GET", "/health", {kHost}), config("k3y")).action, GateAction::kDropBody);
  EXPECT_EQ(gate_request(make("GET", "/ready", {kHost}), config("k3y")).action, GateAction::kDropBody);
  // A 401 on a decision route uses its dialect; two Authorization fields are malformed.
  const GateVerdict cf =
      gate_request(make("POST", "/ai/run/@cf/cloudflare/clef", {kHost, kJson, {"Content-Length", "2"}}), config("k3y"));
  EXPECT_EQ(status(cf), 401);
  EXPECT_EQ(cf.dialect, Dialect::kCloudflare);
  EXPECT_EQ(status(gate_request(make("GET", "/metrics", {kHost, good, good}), config("k3y"))), 400);
  EXPECT_EQ(status(gate_request(make("GET", "/health", {kHost, good, {"Authorization", "x"}}), config())), 400);
}

TEST(RequestGate, ParseErrors) {
  EXPECT_EQ(status(gate_parse_error(ParseFailure::kHeaderTooLarge, "x", "", 1000)), 431);
  EXPECT_EQ(status(gate_parse_error(ParseFailure::kBadContentLength, "bad Content-Length",
                                    "Content-Length: 99999999999999999999999\r\n\r\n", 1000)),
            413);
  EXPECT_EQ(status(gate_parse_error(ParseFailure::kBadContentLength, "bad Content-Length", "Content-Length: -1\r\n\r\n",
                                    1000)),
            400);
  const GateVerdict other = gate_parse_error(ParseFailure::kOther, "bad method", "", 1000);
  EXPECT_EQ(status(other), 400);
  EXPECT_EQ(other.message, "malformed HTTP request (bad method)");
}

}  // namespace
}  // namespace clef::server
