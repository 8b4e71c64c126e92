-- Who made the call `id`, if it expired: while its id is remembered as expired (as
-- lookup.lua answers 'expired' for it), or while it waits past its expiry, not yet removed.
-- Changes nothing.
--
-- KEYS[1]  <base>:expired
-- ARGV     base, id, how long expired ids are remembered (ms)
-- returns  the caller as save.lua kept it, or false: the call did not expire, its id is no longer remembered,
--          or nobody knows who made it (an id remembered by an earlier version, which kept
--          no owner: the caller then treats it as nobody's)

local base, id, keep = ARGV[1], ARGV[2], tonumber(ARGV[3])

local at = redis.call('ZSCORE', base .. ':calls', id)
if at then
  if tonumber(at) > now then
    return false
  end
  return redis.call('HGET', base .. ':owners', id)
    or redis.call('HGET', base .. ':call:' .. id, 'user')
end
local expired = redis.call('ZSCORE', KEYS[1], id)
if expired and tonumber(expired) + keep > now then
  return redis.call('HGET', base .. ':expired_owners', id)
end
return false
