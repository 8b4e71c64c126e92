-- Pushes a held lease's expiry to now + TTL, on the Redis server's clock.
--
-- A lease still in the set is renewed even if its expiry has passed: acquirers drop
-- expired leases before they count, so a lease still there was never counted as free.
-- A lease no longer there was dropped as expired: it is not brought back.
--
-- KEYS[1]  the budget's leases
-- ARGV[1]  lease id
-- ARGV[2]  lease TTL in ms
-- returns  1 when renewed, 0 when the lease is gone

local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)

if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  return 0
end
redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[2]), ARGV[1])
local latest = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
redis.call('PEXPIRE', KEYS[1], math.max(1, tonumber(latest[2]) - now))
return 1
