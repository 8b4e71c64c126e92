-- Keeps an entry at the head of its part's list when the part has a place among the parts
-- kept apart (or can take a free one), else at the head of the list of the other parts;
-- forgets the oldest past the bound, and keeps the lists for a while after their newest
-- entry. A part whose newest entry is older than that gives its place up.
--
-- KEYS[1]  the parts kept apart (sorted set: part -> newest entry, ms on Redis's clock)
-- KEYS[2]  the part's list
-- KEYS[3]  the list of the parts past the bound
-- ARGV     the entry, the part, the most entries per list, how long a list is kept (ms),
--          the most parts kept apart
-- returns  1 when the entry went into its part's list, 0 when into the other parts'

local parts, list, other = KEYS[1], KEYS[2], KEYS[3]
local entry, part = ARGV[1], ARGV[2]
local max, keep, max_parts = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', parts, '-inf', now - keep)
local into, apart = list, 1
if not redis.call('ZSCORE', parts, part) and redis.call('ZCARD', parts) >= max_parts then
  into, apart = other, 0
else
  redis.call('ZADD', parts, now, part)
  redis.call('PEXPIRE', parts, keep)
end
redis.call('LPUSH', into, entry)
redis.call('LTRIM', into, 0, max - 1)
redis.call('PEXPIRE', into, keep)
return apart
