-- Takes a waiting sign-in's secret out: a state serves once.
--
-- KEYS[1]  <base>:flows
-- ARGV     base, state
-- returns  the secret, or false when the state is unknown, used or expired

local base, state = ARGV[1], ARGV[2]
local key = base .. ':flow:' .. state
local secret = redis.call('GET', key)
redis.call('DEL', key)
redis.call('ZREM', KEYS[1], state)
return secret
