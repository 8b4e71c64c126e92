-- Reads (or takes: reads and removes, at once) the waiting call `id`. A call past its
-- expiry on the server's clock is removed and answers 'expired', as does an id that
-- expired within the remembered window.
--
-- A taken call leaves every index at once (it no longer waits, counts or lists), but its
-- row is held a short while, marked with the take's token: if this answer is lost on the
-- way, the replica that asked puts the call back (undo.lua); otherwise the row expires.
-- Its expiry notice is held aside as long (a decided call is never told expired).
--
-- A take may keep its decision's running record in the call's place, in the same step
-- (keep_outcome() in outcome.lua, over nothing or a running record, never over an
-- outcome), so that only the decision that took the call keeps one; an undone take
-- removes it again (undo.lua).
--
-- KEYS[1]  <base>:calls, and for a running record KEYS[2] <base>:outcomes
-- ARGV     base, id, '1' to take or '0' to read, max_total, how long expired ids are
--          remembered (ms), the fingerprint of this replica's key, a token of this take,
--          how long a taken row is held (ms); for a take that keeps a running record,
--          then its value, its expiry ms, the caller (as in save.lua), max_per_user and
--          the decision's token
-- returns  {'ok', value, expiry ms} | {'expired', false, 0} | {'none', false, 0}, or
--          {'sealed', value, expiry ms} for a take of a call sealed with another key, which
--          is left in place

local base, id, take = ARGV[1], ARGV[2], ARGV[3] == '1'
local total, keep = tonumber(ARGV[4]), tonumber(ARGV[5])

local at = redis.call('ZSCORE', KEYS[1], id)
if not at then
  local expired = redis.call('ZSCORE', base .. ':expired', id)
  if expired and tonumber(expired) + keep > now then
    return {'expired', false, 0}
  end
  return {'none', false, 0}
end
at = tonumber(at)
local value = redis.call('HGET', base .. ':call:' .. id, 'value')
if at <= now or not value then
  remember(base, id, at, keep, total, forget(base, id))
  return {'expired', false, 0}
end
if take then
  if redis.call('HGET', base .. ':call:' .. id, 'seal') ~= ARGV[6] then
    return {'sealed', value, at}
  end
  local row = base .. ':call:' .. id
  local user = redis.call('HGET', row, 'user')
  if user then
    redis.call('ZREM', base .. ':user:' .. user, id)
  end
  redis.call('ZREM', KEYS[1], id)
  unsize(base, id)
  redis.call('ZREM', base .. ':ids', id)
  redis.call('HDEL', base .. ':owners', id)
  redis.call('HSET', row, 'held_by', ARGV[7])
  redis.call('PEXPIRE', row, tonumber(ARGV[8]))
  local notice = base .. ':notice:' .. id
  redis.call('ZREM', base .. ':notices', id)
  if redis.call('EXISTS', notice) == 1 then
    redis.call('RENAME', notice, base .. ':held_notice:' .. id)
    redis.call('PEXPIRE', base .. ':held_notice:' .. id, tonumber(ARGV[8]))
  end
  if ARGV[9] then
    redis.call('HSET', row, 'running', ARGV[13])
    keep_outcome(KEYS[2], base, id, ARGV[9], tonumber(ARGV[10]), math.max(1, total),
      ARGV[11], math.max(1, tonumber(ARGV[12])), ARGV[13], true)
  end
end
return {'ok', value, at}
