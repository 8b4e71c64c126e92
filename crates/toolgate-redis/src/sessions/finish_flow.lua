-- Takes a waiting sign-in's secret out: a state serves once. Its place among its source's
-- flows (see `start_flow.lua`) is freed with it.
--
-- KEYS[1]  <base>:flows
-- ARGV     base, state
-- returns  the secret, or false when the state is unknown, used or expired

local base, state = ARGV[1], ARGV[2]
local key = base .. ':flow:' .. state
local secret = redis.call('GET', key)
local source = redis.call('GET', key .. ':from')
if source then
  redis.call('ZREM', base .. ':flows:from:' .. source, state)
end
redis.call('DEL', key, key .. ':from')
redis.call('ZREM', KEYS[1], state)
return secret
