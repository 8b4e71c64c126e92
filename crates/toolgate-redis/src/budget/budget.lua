-- One budget decision, on the Redis server's clock: a charge, or the reconciliation of a
-- charge. One key, a hash: `end` (the end of the window it counts, ms since the epoch,
-- which also names the window) and `used` (units spent in it). The key expires when its
-- window ends, so no key outlives its use and a new window starts at zero.
--
-- Numbers stay below 2^53 (the gateway caps limits at 10^15), exact in a Lua double.
--
-- KEYS[1]  the budget
-- charge:  ARGV = {'charge', cost, limit, window ms}
--          returns {1 charged | 0 refused, used, end, ms until end}
-- adjust:  ARGV = {'adjust', end of the charged window, delta}
--          returns {1, used} after the change (never below zero), {0} when that window is over

local state = redis.call('HMGET', KEYS[1], 'end', 'used')
local stored_end = tonumber(state[1])
local used = tonumber(state[2]) or 0
-- A count no replica writes (another program's) must not lift the budget for the rest of
-- its window: below zero or NaN reads as nothing spent, as text always did, and past
-- 2^53 - 1 as that count (the budget used up).
if used ~= used or used < 0 then
  used = 0
elseif used > 9007199254740991 then
  used = 9007199254740991
end

if ARGV[1] == 'adjust' then
  if stored_end ~= tonumber(ARGV[2]) then
    return {0}
  end
  -- Never below zero, nor past 2^53 - 1: a count Lua's doubles keep exact.
  used = math.min(9007199254740991, math.max(0, used + tonumber(ARGV[3])))
  redis.call('HSET', KEYS[1], 'used', string.format('%d', used))
  return {1, used}
end

local cost, limit, w = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local window_end = (math.floor(now / w) + 1) * w
if stored_end ~= window_end then
  if stored_end and stored_end > window_end and stored_end - window_end <= w then
    -- The server's clock stepped back by less than a window: the window already begun
    -- is charged, so that going back gives no fresh allowance for the one before.
    window_end = stored_end
  else
    -- A later window, or a stored one further ahead than the next (a clock set far ahead,
    -- then corrected: it must not keep the budget refused for longer than a window).
    used = 0
  end
end
if used + cost > limit then
  return {0, used, window_end, window_end - now}
end
used = used + cost
redis.call('HSET', KEYS[1], 'end', string.format('%d', window_end), 'used', string.format('%d', used))
redis.call('PEXPIREAT', KEYS[1], string.format('%d', window_end))
return {1, used, window_end, window_end - now}
