-- Keeps an approval for a retry until its expiry, under the caps on waiting calls, counted
-- apart from them.
--
-- KEYS[1]  <base>:retries
-- ARGV     base, approval id, the caller (as in save.lua), binding key, value, expiry ms, max_per_user,
--          max_total, the fingerprint of the key that sealed the value
-- returns  'ok' | 'user_full' | 'full'

local base, approval, user, binding, value = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local at, per_user, total = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local all = KEYS[1]

redis.call('ZREMRANGEBYSCORE', all, '-inf', now)
local mine = base .. ':retry_user:' .. user
redis.call('ZREMRANGEBYSCORE', mine, '-inf', now)
if redis.call('ZCARD', mine) >= per_user then
  return 'user_full'
end
if redis.call('ZCARD', all) >= total then
  return 'full'
end
if at <= now then
  return 'ok' -- void already: nothing could use it
end

local row = base .. ':retry:' .. approval
redis.call('HSET', row, 'user', user, 'value', value, 'seal', ARGV[9])
redis.call('PEXPIRE', row, at - now)
redis.call('ZADD', all, at, approval)
extend(all, at - now)
redis.call('ZADD', mine, at, approval)
extend(mine, at - now)
local queue = base .. ':retry_key:' .. binding
redis.call('ZADD', queue, now, approval)
extend(queue, at - now)
return 'ok'
