-- SPDX-License-Identifier: MIT
-- clef_state.lua: an HAProxy 2.6 action, `http-request lua.clef_route`, for state affinity in front
-- of several `clef serve` replicas (docs/DEPLOYMENT.md). It sets the variable txn.clef_text to the
-- raw JSON text of the request body's top-level "state" and "images" members; haproxy.cfg hashes
-- it (sha2(256),hex,lower) into txn.clef_route, the routing key, so that
-- `balance hash var(txn.clef_route)` sends every request about one state to one replica even when
-- the client does not send X-Clef-Route-Key. The server computes the same key from the same text
-- (src/server/route_key.cc) and returns it as X-Clef-Route-Key: a client that echoes it is routed
-- by the very same string when this script cannot read its body.
--
-- Why Lua: HAProxy 2.6's json_query converter returns only strings, numbers and booleans; a state
-- that is an object, an array or null makes it fail (and the request would be balanced round
-- robin). This scanner walks the JSON text without decoding it (strings, escapes and nesting are
-- tracked, nothing is allocated per character).
--
-- What it does not do: it hashes the text as sent, so the same state written with other spacing,
-- key order or escapes routes differently (a cache miss on another replica, never a wrong answer:
-- every replica recomputes its own key). It sets nothing (HAProxy then uses the next rule) for
-- a body that is not a JSON object, that has no top-level "state", that is compressed
-- (Content-Encoding: HAProxy 2.6 cannot decompress a request), or that HAProxy did not buffer
-- whole (bodies over tune.bufsize). An OpenRouter body's image parts sit inside "state" and are
-- hashed with it.

-- Index just past the JSON string that starts at s[i] == '"', or nil when it is unterminated.
local function skip_string(s, i)
  local j = i + 1
  while true do
    local k = string.find(s, '["\\]', j)
    if k == nil then return nil end
    if string.byte(s, k) == 34 then return k + 1 end  -- '"'
    j = k + 2                                         -- a backslash and the character it escapes
  end
end

-- Index of the first non-blank character at or after i.
local function skip_blank(s, i)
  return string.find(s, '[^ \t\r\n]', i) or (#s + 1)
end

-- Index just past the JSON value that starts at s[i], or nil when it is malformed or cut short.
local function skip_value(s, i)
  local c = string.byte(s, i)
  if c == nil then return nil end
  if c == 34 then return skip_string(s, i) end
  if c == 123 or c == 91 then  -- '{' or '['
    local depth = 0
    local j = i
    while true do
      local k = string.find(s, '["{}%[%]]', j)
      if k == nil then return nil end
      local b = string.byte(s, k)
      if b == 34 then
        j = skip_string(s, k)
        if j == nil then return nil end
      else
        if b == 123 or b == 91 then depth = depth + 1 else depth = depth - 1 end
        j = k + 1
        if depth == 0 then return j end
      end
    end
  end
  -- A number, true, false or null: up to the next delimiter.
  local k = string.find(s, '[,}%] \t\r\n]', i)
  if k == nil then return nil end
  return k
end

-- "state=<raw>\nimages=<raw>" for a JSON object body with a top-level "state", else nil.
local function state_text(body)
  if body == nil then return nil end
  local i = skip_blank(body, 1)
  if string.byte(body, i) ~= 123 then return nil end
  i = skip_blank(body, i + 1)
  if string.byte(body, i) == 125 then return nil end  -- {}
  local state, images
  while true do
    if string.byte(body, i) ~= 34 then return nil end
    local key_end = skip_string(body, i)
    if key_end == nil then return nil end
    local key = string.sub(body, i + 1, key_end - 2)
    i = skip_blank(body, key_end)
    if string.byte(body, i) ~= 58 then return nil end  -- ':'
    i = skip_blank(body, i + 1)
    local value_end = skip_value(body, i)
    if value_end == nil then return nil end
    if key == "state" then
      state = string.sub(body, i, value_end - 1)
    elseif key == "images" then
      images = string.sub(body, i, value_end - 1)
    end
    i = skip_blank(body, value_end)
    local c = string.byte(body, i)
    if c == 125 then break end                        -- '}'
    if c ~= 44 then return nil end                     -- ','
    i = skip_blank(body, i + 1)
  end
  if state == nil then return nil end
  return "state=" .. state .. "\nimages=" .. (images or "")
end

if core ~= nil then
  -- An action, not a sample fetch: a Lua fetch cannot report "not found" (HAProxy turns a nil
  -- result into the integer 0, which would send every body without a state to one replica).
  -- The action sets txn.clef_text only when the body has a state; the configuration then falls
  -- back to the X-Clef-Route-Key header, and with neither HAProxy balances round robin.
  core.register_action("clef_route", {"http-req"}, function(txn)
    local coding = txn.f:req_hdr("content-encoding")
    if coding ~= nil and coding ~= "" and string.lower(coding) ~= "identity" then return end
    local text = state_text(txn.f:req_body())
    if text ~= nil then txn:set_var("txn.clef_text", text) end
  end)
end
