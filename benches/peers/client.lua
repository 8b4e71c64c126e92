-- The one client of the peers benchmark (benches/peers/run.sh), the same for every target.
--
--   wrk -tN -cN -s client.lua URL -- MODE TOKEN TOOL SESSION_1 … SESSION_N
--
-- One wrk thread per connection, so a thread's state is its connection's: thread i sends
-- every call in MCP session SESSION_i (made beforehand by run.sh: initialize, then
-- notifications/initialized), one call at a time. MODE is `mcp` (a JSON-RPC `tools/call`
-- of TOOL, the upstream's echo as the target names it), `mcp-2026` (the same call as a
-- client of the 2026-07-28 revision writes it: no session, the protocol version and the
-- client's capabilities in `_meta`, the standard headers) or `v1` (toolgate's POST
-- /v1/tools/echo/invoke, no session). TOKEN, unless `-`, is sent as `Authorization: Bearer
-- TOKEN`.
--
-- Every call echoes a text unique to it ("peers-<thread>-<n>."); an answer counts as wrong
-- unless it is a 200 carrying that very text inside a result (MCP: a `result` that is not
-- `isError`; v1: an `output`). done() prints one line:
--   RESULT requests=… rps=… p50_ms=… p99_ms=… errors=… wrong=…

local threads = {}
local sessions = {}

function setup(thread)
  table.insert(threads, thread)
  thread:set("tid", #threads)
end

local mode, body_format, expected, last
bad = 0

function init(args)
  mode = args[1]
  wrk.method = "POST"
  wrk.headers["Content-Type"] = "application/json"
  if args[2] ~= "-" then wrk.headers["Authorization"] = "Bearer " .. args[2] end
  if mode == "mcp" then
    wrk.headers["Accept"] = "application/json, text/event-stream"
    local session = args[3 + tid]
    if session ~= nil and session ~= "-" then wrk.headers["Mcp-Session-Id"] = session end
    body_format = '{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"'
      .. args[3] .. '","arguments":{"text":"%s"}}}'
  elseif mode == "mcp-2026" then
    wrk.headers["Accept"] = "application/json, text/event-stream"
    wrk.headers["MCP-Protocol-Version"] = "2026-07-28"
    wrk.headers["Mcp-Method"] = "tools/call"
    wrk.headers["Mcp-Name"] = args[3]
    body_format = '{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"'
      .. args[3] .. '","arguments":{"text":"%s"},"_meta":{'
      .. '"io.modelcontextprotocol/protocolVersion":"2026-07-28",'
      .. '"io.modelcontextprotocol/clientCapabilities":{},'
      .. '"io.modelcontextprotocol/clientInfo":{"name":"peers","version":"1"}}}}'
  elseif mode == "v1" then
    wrk.headers["Accept"] = "application/json"
    body_format = '{"text":"%s"}'
  else
    error("client.lua: MODE must be mcp, mcp-2026 or v1, not " .. tostring(mode))
  end
end

local counter = 0

function request()
  counter = counter + 1
  last = string.format("peers-%d-%d.", tid, counter)
  local body
  if mode ~= "v1" then
    body = string.format(body_format, counter, last)
  else
    body = string.format(body_format, last)
  end
  return wrk.format(nil, nil, nil, body)
end

function response(status, headers, body)
  local ok = status == 200 and string.find(body, last, 1, true) ~= nil
  if ok and mode ~= "v1" then
    ok = string.find(body, '"result"', 1, true) ~= nil
      and string.find(body, '"isError"%s*:%s*true') == nil
  elseif ok then
    ok = string.find(body, '"output"', 1, true) ~= nil
  end
  if not ok then
    bad = bad + 1
    if bad == 1 then
      io.stderr:write(string.format("wrong answer (status %d): %s\n", status, string.sub(body, 1, 300)))
    end
  end
end

function done(summary, latency, requests)
  local wrong = 0
  for _, thread in ipairs(threads) do wrong = wrong + thread:get("bad") end
  io.write(string.format(
    "RESULT requests=%d rps=%.1f p50_ms=%.3f p99_ms=%.3f errors=%d wrong=%d\n",
    summary.requests, summary.requests / (summary.duration / 1e6),
    latency:percentile(50) / 1000, latency:percentile(99) / 1000,
    summary.errors.status + summary.errors.connect + summary.errors.read
      + summary.errors.write + summary.errors.timeout, wrong))
end
