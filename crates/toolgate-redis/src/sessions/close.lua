-- Ends a session (nothing when there is none).
--
-- KEYS[1]  <base>:all
-- ARGV     base, session id
-- returns  1 when a session ended, 0 when there was none

local base, id = ARGV[1], ARGV[2]
local row = base .. ':session:' .. id
local user = redis.call('HGET', row, 'user')
redis.call('ZREM', KEYS[1], id)
if not user then
  return 0
end
redis.call('DEL', row)
redis.call('ZREM', base .. ':user:' .. user, id)
return 1
