-- Reads the counts every replica shares.
--
-- KEYS[1]  <base>:tools
-- ARGV     base
-- returns  {since (ms, '' before any addition), {tool, …}, {{field, count, …}, …}}, a tool's
--          fields empty when they expired before the list of tools did

local base = ARGV[1]
local tools = redis.call('SMEMBERS', KEYS[1])
local counts = {}
for n, tool in ipairs(tools) do
  counts[n] = redis.call('HGETALL', base .. ':tool:' .. tool)
end
return {redis.call('GET', base .. ':since') or '', tools, counts}
