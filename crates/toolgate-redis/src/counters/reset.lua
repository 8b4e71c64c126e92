-- Starts the counts every replica shares over: every tool's counts are removed, and the
-- start is now.
--
-- KEYS[1]  <base>:tools
-- ARGV     base, how long the (empty) counts outlive the reset (ms)
-- returns  the new start (ms)

local base, keep = ARGV[1], ARGV[2]
for _, tool in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  redis.call('DEL', base .. ':tool:' .. tool)
end
redis.call('DEL', KEYS[1])
redis.call('SET', base .. ':since', now, 'PX', keep)
return tostring(now)
