-- Forgets a tool's pin and any change waiting for it: the next definition offered for the tool
-- is pinned afresh (trust on first use).
--
-- KEYS[1]  <base>:pinned
-- ARGV     base, tool, the most history entries kept
-- returns  the fingerprint that was pinned ('' when only a change waited), or nil when the
--          tool had neither

local base, tool = ARGV[1], ARGV[2]
local pinned = redis.call('HGET', KEYS[1], tool)
local waited = redis.call('HDEL', base .. ':pending', tool)
if not pinned and waited == 0 then
  return nil
end
redis.call('HDEL', KEYS[1], tool)
redis.call('HDEL', base .. ':pinned_forms', tool)
redis.call('HDEL', base .. ':pending_forms', tool)
record(base, tool, 'forgotten', pinned or '', tonumber(ARGV[3]))
return pinned or ''
