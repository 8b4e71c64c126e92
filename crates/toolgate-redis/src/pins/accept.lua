-- Accepts the change waiting for a tool: its definition becomes the pin.
--
-- KEYS[1]  <base>:pinned
-- ARGV     base, tool, the most history entries kept
-- returns  the fingerprint accepted, or nil when no change of the tool waits

local base, tool = ARGV[1], ARGV[2]
local offered = redis.call('HGET', base .. ':pending', tool)
if not offered then
  return nil
end
local form = redis.call('HGET', base .. ':pending_forms', tool)
redis.call('HSET', KEYS[1], tool, offered)
redis.call('HSET', base .. ':pinned_forms', tool, form or 'null')
redis.call('HDEL', base .. ':pending', tool)
redis.call('HDEL', base .. ':pending_forms', tool)
record(base, tool, 'accepted', offered, tonumber(ARGV[3]))
return offered
