-- One rate-limit decision: GCRA for one key, on the Redis server's clock.
--
-- The same algorithm as toolgate-hooks' InMemoryQuota (governor's GCRA), so a policy
-- behaves the same on one replica and on many:
--   T   = the emission interval (period / count), one unit comes back every T
--   tau = T * (burst - 1), how far ahead of now the budget may be spent
--   tat = the key's theoretical arrival time, now when the key is new or expired
--   granted when now >= tat - tau, and then tat := max(tat, now) + T
--   limited otherwise, retry after (tat - tau) - now
--
-- Times are microseconds since the epoch from TIME (exact in a Lua double); T may carry
-- a fraction of a microsecond. The state is written with an expiry at the moment it
-- becomes equal to "no state" (tat reached), so no key outlives its use.
--
-- KEYS[1]  the key's TAT
-- ARGV[1]  T in nanoseconds
-- ARGV[2]  burst
-- returns  {1, 0} when granted, {0, wait in nanoseconds} when limited

local t = tonumber(ARGV[1]) / 1000
local tau = t * (tonumber(ARGV[2]) - 1)
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
local tat = tonumber(redis.call('GET', KEYS[1])) or now

local earliest = tat - tau
if now < earliest then
  return {0, math.floor((earliest - now) * 1000 + 0.5)}
end

local next_tat = math.max(tat, now) + t
local ttl_ms = math.max(1, math.ceil((next_tat - now) / 1000))
redis.call('SET', KEYS[1], string.format('%.17g', next_tat), 'PX', ttl_ms)
return {1, 0}
