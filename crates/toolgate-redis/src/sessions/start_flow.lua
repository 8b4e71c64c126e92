-- Keeps a sign-in waiting for its callback, or refuses it when as many wait as allowed in
-- all, or from its source (a client address) when it names one.
--
-- KEYS[1]  <base>:flows          (state → expiry ms)
-- ARGV     base, state, secret, ttl ms, max, source ('' for none), max from the source
-- returns  {'kept', 0}, {'full', 0}, or {'source', ms until the source's oldest expires}
--
-- A source's flows are <base>:flows:from:<source> (state → expiry ms); a flow's source is
-- kept beside its secret, at <base>:flow:<state>:from, for `finish_flow.lua`.

local base, state, secret = ARGV[1], ARGV[2], ARGV[3]
local ttl, max = tonumber(ARGV[4]), tonumber(ARGV[5])
local source, max_from = ARGV[6], tonumber(ARGV[7])
local flows = KEYS[1]

redis.call('ZREMRANGEBYSCORE', flows, '-inf', now)
local mine = base .. ':flows:from:' .. source
if source ~= '' then
  redis.call('ZREMRANGEBYSCORE', mine, '-inf', now)
  if redis.call('ZCARD', mine) >= max_from then
    local oldest = redis.call('ZRANGE', mine, 0, 0, 'WITHSCORES')
    return {'source', math.max(0, tonumber(oldest[2]) - now)}
  end
end
if redis.call('ZCARD', flows) >= max then
  return {'full', 0}
end
local flow = base .. ':flow:' .. state
redis.call('SET', flow, secret, 'PX', ttl)
redis.call('ZADD', flows, now + ttl, state)
extend(flows, ttl)
if source ~= '' then
  redis.call('SET', flow .. ':from', source, 'PX', ttl)
  redis.call('ZADD', mine, now + ttl, state)
  extend(mine, ttl)
end
return {'kept', 0}
