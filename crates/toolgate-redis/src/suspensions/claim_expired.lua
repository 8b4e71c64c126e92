-- Claims the telling of expiries: up to `limit` calls that expired before anyone decided
-- them and whose expiry nobody claimed yet (the notices save.lua writes), oldest expiry
-- first. Each notice is given once, to whichever replica runs this first. A take holds its
-- call's notice aside (lookup.lua), and an undone save removes it (undo.lua), so a notice
-- past its expiry is a call that expired. One older than the window notices are kept for
-- is dropped.
--
-- A call claimed is also removed from the waiting calls and remembered as expired, as a
-- look-up that finds it expired does (lookup.lua): nobody else may look it up before
-- its id would be forgotten, and it answers "expired", not "unknown", all that while.
--
-- KEYS[1]  <base>:notices
-- ARGV     base, limit, how long a notice is kept past the expiry (ms), the most expired
--          ids remembered, how long they are remembered (ms)
-- returns  a list of id, the notice (the call without its contents, sealed as its value
--          was), expiry ms, for each call claimed

local base, limit, told_within = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local total, keep = tonumber(ARGV[4]), tonumber(ARGV[5])
local notices = KEYS[1]

for _, old in ipairs(redis.call('ZRANGEBYSCORE', notices, '-inf', now - told_within)) do
  redis.call('ZREM', notices, old)
  redis.call('DEL', base .. ':notice:' .. old)
end
local out = {}
local due = redis.call('ZRANGEBYSCORE', notices, '-inf', now, 'WITHSCORES', 'LIMIT', 0, limit)
for i = 1, #due, 2 do
  local id = due[i]
  local key = base .. ':notice:' .. id
  local notice = redis.call('GET', key)
  redis.call('ZREM', notices, id)
  redis.call('DEL', key)
  local waits = redis.call('ZSCORE', base .. ':calls', id)
  if waits and tonumber(waits) <= now then
    remember(base, id, tonumber(waits), keep, total, forget(base, id))
  end
  if notice then
    out[#out + 1] = id
    out[#out + 1] = notice
    out[#out + 1] = tonumber(due[i + 1])
  end
end
return out
