-- Starts the counts every replica shares over: every tool's counts are removed, and the
-- start is now — or, when the counts started within this millisecond, the next one: a
-- replica knows of a reset by the start moving, so it must move.
--
-- KEYS[1]  <base>:tools
-- ARGV     base, how long the (empty) counts outlive the reset (ms)
-- returns  the new start (ms)

local base, keep = ARGV[1], ARGV[2]
for _, tool in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  redis.call('DEL', base .. ':tool:' .. tool)
end
redis.call('DEL', KEYS[1])
local previous = tonumber(redis.call('GET', base .. ':since')) or 0
local start = string.format('%d', math.max(now, previous + 1))
redis.call('SET', base .. ':since', start, 'PX', keep)
return start
