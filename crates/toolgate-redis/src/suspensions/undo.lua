-- Undoes a save or a take whose answer was lost on the way (the replica gave up at its
-- deadline, and told its caller so), if it happened: a save the caller was told failed
-- must not wait for an approver, and a take whose call nobody received must leave it
-- waiting. Each is recognised by its token, so nothing another replica did is undone. An
-- undone take that kept its decision's running record (lookup.lua) removes it too.
--
-- KEYS[1]  <base>:calls, KEYS[2] <base>:outcomes
-- ARGV     base, id, 'save' or 'take', the token, max_total, how long expired ids are
--          remembered (ms), how long an expiry notice is kept past the expiry (ms)
-- returns  'undone' | 'no' (not there, not yet there, or not that save's or take's)

local base, id, what, token = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local total, keep = tonumber(ARGV[5]), tonumber(ARGV[6])
local row = base .. ':call:' .. id
local found = redis.call('HMGET', row, 'user', 'at', 'token', 'held_by', 'running', 'size')

if what == 'save' then
  if found[3] ~= token or found[4] then
    return 'no'
  end
  forget(base, id)
  redis.call('ZREM', base .. ':notices', id)
  redis.call('DEL', base .. ':notice:' .. id)
  return 'undone'
end

if found[4] ~= token then
  return 'no'
end
local at = tonumber(found[2])
redis.call('HDEL', row, 'held_by', 'running')
if found[5] then
  remove_running(KEYS[2], base, id, found[5])
end
-- The expiry notice the take held aside waits again (to be told if the call expires).
local held, told_within = base .. ':held_notice:' .. id, tonumber(ARGV[7])
if redis.call('EXISTS', held) == 1 and at + told_within > now then
  local notice = base .. ':notice:' .. id
  redis.call('RENAME', held, notice)
  redis.call('PEXPIRE', notice, at + told_within - now)
  redis.call('ZADD', base .. ':notices', at, id)
  extend(base .. ':notices', at + told_within - now)
end
if at <= now then
  forget(base, id)
  remember(base, id, at, keep, total, found[1])
  return 'undone'
end
local mine = base .. ':user:' .. found[1]
redis.call('PEXPIRE', row, at - now)
redis.call('ZADD', KEYS[1], at, id)
redis.call('ZADD', base .. ':ids', 0, id)
redis.call('HSET', base .. ':owners', id, found[1])
redis.call('ZADD', mine, at, id)
extend(KEYS[1], at - now + keep)
extend(base .. ':ids', at - now + keep)
extend(base .. ':owners', at - now + keep)
extend(mine, at - now)
-- Its bytes count again (the take stopped counting them).
local size = tonumber(found[6])
if size and size > 0 then
  add_size(base, id, size, at - now + keep)
end
return 'undone'
