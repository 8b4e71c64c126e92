-- Keeps the outcome of a decided call until its expiry, replacing one kept for the same
-- id, at most max_total of them: past that, the soonest to expire go first.
--
-- KEYS[1]  <base>:outcomes
-- ARGV     base, id, value, expiry ms, max_total
-- returns  'ok'

local base, id, value = ARGV[1], ARGV[2], ARGV[3]
local at, total = tonumber(ARGV[4]), math.max(1, tonumber(ARGV[5]))
local kept = KEYS[1]
local row = base .. ':outcome:' .. id

redis.call('ZREMRANGEBYSCORE', kept, '-inf', now)
redis.call('ZREM', kept, id)
redis.call('DEL', row)
if at <= now then
  return 'ok'
end
while redis.call('ZCARD', kept) >= total do
  local oldest = redis.call('ZPOPMIN', kept)
  redis.call('DEL', base .. ':outcome:' .. oldest[1])
end
redis.call('SET', row, value, 'PX', at - now)
redis.call('ZADD', kept, at, id)
extend(kept, at - now)
return 'ok'
