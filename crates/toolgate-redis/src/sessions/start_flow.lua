-- Keeps a sign-in waiting for its callback, or refuses it when as many wait as allowed.
--
-- KEYS[1]  <base>:flows          (state → expiry ms)
-- ARGV     base, state, secret, ttl ms, max
-- returns  1 when kept, 0 when full

local base, state, secret = ARGV[1], ARGV[2], ARGV[3]
local ttl, max = tonumber(ARGV[4]), tonumber(ARGV[5])
local flows = KEYS[1]

redis.call('ZREMRANGEBYSCORE', flows, '-inf', now)
if redis.call('ZCARD', flows) >= max then
  return 0
end
redis.call('SET', base .. ':flow:' .. state, secret, 'PX', ttl)
redis.call('ZADD', flows, now + ttl, state)
extend(flows, ttl)
return 1
