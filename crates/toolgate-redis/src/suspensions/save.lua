-- Keeps a waiting call, or refuses it past a cap; exact, since Redis runs one script at a
-- time and every count is of the calls not expired by the server's clock.
--
-- KEYS[1]  <base>:calls
-- ARGV     base, id, the caller (its user id, or with a tenant the bytes values.rs's
--          caller_key writes), value, the call's own expiry in ms ('' for none),
--          expire_after ms, max_per_user, max_total, how long expired ids are remembered (ms),
--          the fingerprint of the key that sealed the value, a token of this save (for
--          undo.lua), the call without its contents, sealed as the value is (its expiry
--          notice, for claim_expired.lua), how long a notice is kept past the expiry (ms),
--          the call's size in bytes (its record as compact JSON), the most bytes one
--          caller's waiting calls may take, and the most all waiting calls may take
-- returns  {'ok', expiry ms} | {'user_full', 0} | {'user_bytes_full', 0} | {'full', 0} |
--          {'bytes_full', 0}

local base, id, user, value = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local given = tonumber(ARGV[5])
local expire_after, per_user = tonumber(ARGV[6]), tonumber(ARGV[7])
local total, keep = tonumber(ARGV[8]), tonumber(ARGV[9])
local calls = KEYS[1]

-- Expired calls leave first (a bounded batch; the counts below skip the rest anyway).
local gone = redis.call('ZRANGEBYSCORE', calls, '-inf', now, 'WITHSCORES', 'LIMIT', 0, 128)
for i = 1, #gone, 2 do
  remember(base, gone[i], tonumber(gone[i + 1]), keep, total, forget(base, gone[i]))
end

local mine = base .. ':user:' .. user
redis.call('ZREMRANGEBYSCORE', mine, '-inf', now)
if redis.call('ZCOUNT', mine, '(' .. now, '+inf') >= per_user then
  return {'user_full', 0}
end
if redis.call('ZCOUNT', calls, '(' .. now, '+inf') >= total then
  return {'full', 0}
end
-- The caller's bytes: the sizes of its calls not expired (at most `per_user` of them). A
-- row an older version wrote has no size, and counts nothing.
local size, per_user_bytes = tonumber(ARGV[14]), tonumber(ARGV[15])
if size and per_user_bytes then
  local held = size
  for _, other in ipairs(redis.call('ZRANGEBYSCORE', mine, '(' .. now, '+inf')) do
    held = held + (tonumber(redis.call('HGET', base .. ':call:' .. other, 'size')) or 0)
  end
  if held > per_user_bytes then
    return {'user_bytes_full', 0}
  end
end
-- All the bytes waiting (`:bytes`, common.lua). Before a refusal every expired call
-- leaves, and the bytes are counted again from the sizes: a refusal is exact, even after
-- the counter drifted (an earlier version's replicas remove calls without their sizes).
-- That count reads every waiting call's size, so it runs at most once a second
-- (`:bytes_counted`): a flood of calls refused costs Redis no more than the check, and
-- between counts every script of this version keeps the counter exact.
local total_bytes = tonumber(ARGV[16])
if size and total_bytes and held_bytes(base) + size > total_bytes then
  repeat
    gone = redis.call('ZRANGEBYSCORE', calls, '-inf', now, 'WITHSCORES', 'LIMIT', 0, 128)
    for i = 1, #gone, 2 do
      remember(base, gone[i], tonumber(gone[i + 1]), keep, total, forget(base, gone[i]))
    end
  until #gone == 0
  local held
  if redis.call('SET', base .. ':bytes_counted', '1', 'PX', 1000, 'NX') then
    held = recount_bytes(base)
  else
    held = held_bytes(base)
  end
  if held + size > total_bytes then
    return {'bytes_full', 0}
  end
end

local at = now + expire_after
if given and given < at then
  at = given
end
-- A call saved again under its id replaces the one before.
forget(base, id)
unremember(base, {id})
-- Its expiry notice, for one replica to claim and tell (claim_expired.lua); a take moves
-- it aside (lookup.lua). At most `total` notices of calls expired are kept, the oldest
-- going first.
local notices, told_within = base .. ':notices', tonumber(ARGV[13])
redis.call('SET', base .. ':notice:' .. id, ARGV[12], 'PX', math.max(1, at - now + told_within))
redis.call('ZADD', notices, at, id)
extend(notices, at - now + told_within)
local told = redis.call('ZCOUNT', notices, '-inf', now) - total
if told > 0 then
  for _, old in ipairs(redis.call('ZRANGE', notices, 0, told - 1)) do
    redis.call('ZREM', notices, old)
    redis.call('DEL', base .. ':notice:' .. old)
  end
end
if at <= now then
  remember(base, id, at, keep, total, user)
  return {'ok', at}
end

local row = base .. ':call:' .. id
redis.call('HSET', row, 'user', user, 'value', value, 'seal', ARGV[10], 'at', at, 'token', ARGV[11],
  'size', ARGV[14] or '0')
redis.call('PEXPIRE', row, at - now)
redis.call('ZADD', calls, at, id)
redis.call('ZADD', base .. ':ids', 0, id)
redis.call('HSET', base .. ':owners', id, user)
redis.call('ZADD', mine, at, id)
extend(calls, at - now + keep)
extend(base .. ':ids', at - now + keep)
extend(base .. ':owners', at - now + keep)
extend(mine, at - now)
if size and size > 0 then
  add_size(base, id, size, at - now + keep)
end
return {'ok', at}
