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
-- becomes equal to "no state" (tat reached), so no key outlives its use. A stored tat is
-- never taken past now + tau + T (below).
--
-- KEYS[1]  the key's TAT
-- ARGV[1]  T in nanoseconds
-- ARGV[2]  burst
-- returns  {1, 0} when granted, {0, wait in nanoseconds} when limited

local t = tonumber(ARGV[1]) / 1000
local tau = t * (tonumber(ARGV[2]) - 1)
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
local tat = tonumber(redis.call('GET', KEYS[1]))

-- No replica on this clock writes a tat past now + tau + T (the budget spent in full). One
-- past it was written on a clock ahead of this one (a failover to a node whose clock is
-- behind) or by another program: taken as it is, it would refuse the key for as long as
-- the clocks differ (or forever); it reads as that latest tat, and is stored so for every
-- replica. A value that is not a number (NaN included) reads as no state.
local latest = now + tau + t
local clamped = false
if tat == nil or tat ~= tat then
  tat = now
elseif tat > latest then
  tat, clamped = latest, true
end

local earliest = tat - tau
if now < earliest then
  if clamped then
    redis.call('SET', KEYS[1], string.format('%.17g', tat), 'PX', math.max(1, math.ceil((tat - now) / 1000)))
  end
  return {0, math.floor((earliest - now) * 1000 + 0.5)}
end

local next_tat = math.max(tat, now) + t
local ttl_ms = math.max(1, math.ceil((next_tat - now) / 1000))
redis.call('SET', KEYS[1], string.format('%.17g', next_tat), 'PX', ttl_ms)
return {1, 0}
