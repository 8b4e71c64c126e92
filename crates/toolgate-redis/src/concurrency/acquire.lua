-- Takes a concurrency lease if fewer than `limit` live leases exist, on the Redis
-- server's clock.
--
-- The leases of a budget are a sorted set: member = lease id, score = expiry in ms.
-- Expired leases (their holder died, or stopped renewing) are dropped first, so they never
-- count. A lease id already in the set is renewed, not added twice, so an acquisition
-- retried after a lost answer never takes two permits. The set expires with its latest
-- lease.
--
-- KEYS[1]  the budget's leases
-- ARGV[1]  lease id
-- ARGV[2]  limit
-- ARGV[3]  lease TTL in ms
-- returns  1 when the lease is held, 0 when the budget is full

local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local expiry = now + tonumber(ARGV[3])

redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then
    return 0
  end
end
redis.call('ZADD', KEYS[1], expiry, ARGV[1])
local latest = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
redis.call('PEXPIRE', KEYS[1], math.max(1, tonumber(latest[2]) - now))
return 1
