-- Keeps an entry at the head of a list, forgets the oldest past the bound, and keeps the list
-- for a while after its newest entry.
--
-- KEYS[1]  the list
-- ARGV     the entry, the most entries kept, how long the list is kept (ms)
-- returns  nothing

local list = KEYS[1]
local max, keep = tonumber(ARGV[2]), tonumber(ARGV[3])
redis.call('LPUSH', list, ARGV[1])
redis.call('LTRIM', list, 0, max - 1)
redis.call('PEXPIRE', list, keep)
