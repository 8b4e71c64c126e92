-- Counts the bytes of a cache entry against its caller's bound for this window, unless they
-- would take the caller past it: then nothing is counted, and the entry is not to be stored.
-- The window is fixed: it starts with the first bytes counted after the last one ended.
--
-- One key, so one slot: the entry itself is written by a call of its own (it hashes
-- elsewhere on Redis Cluster).
--
-- KEYS[1]  the caller's count of bytes this window
-- ARGV[1]  the entry's bytes
-- ARGV[2]  the bound, in bytes
-- ARGV[3]  the window, in ms
-- returns  {1, bytes counted now} when the entry may be stored; {0, bytes counted} when not

local size = tonumber(ARGV[1])
local used = tonumber(redis.call('GET', KEYS[1]) or '0')
if used + size > tonumber(ARGV[2]) then
  return {0, used}
end
used = redis.call('INCRBY', KEYS[1], size)
-- A count without an expiry (new, or one that lost it) would never let its caller write again.
if redis.call('PTTL', KEYS[1]) < 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
end
return {1, used}
