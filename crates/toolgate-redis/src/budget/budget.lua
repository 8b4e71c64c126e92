-- One budget decision, on the Redis server's clock: a charge, the cancel of a charge whose
-- answer came too late, or the reconciliation of a charge. One key, a hash: `end` (the end
-- of the window it counts, ms since the epoch, which also names the window), `used` (units
-- spent in it), `len` (the window's length in ms, written wherever `end` is) and, after a
-- reload changed the window's length, `from` (the earliest end of a window whose spending
-- was carried into this one, however many reloads carried it). The key expires a day (or
-- a window, when longer) after its window ends: a later window of the same length starts
-- at zero by these rules, and a reload to a longer window still finds what was spent.
--
-- A window of the same length as the stored one (or a hash without `len`, written by an
-- older version) keeps these rules: a later window begins at zero; a stored window ahead
-- by at most a window (the clock stepped back) is charged, so going back gives no fresh
-- allowance; one further ahead (a clock set far ahead, then corrected) is not trusted; an
-- older version's window that ended after the present one began is carried into it. A
-- window of another length (a reload changed it) carries the spending of a stored window
-- that overlaps the present one into the present one, its end moved there: it was spent
-- during a window that holds now, whether the window was made longer or shorter, and
-- carrying it errs on the side of refusing. A stored window that does not overlap the
-- present one is over, or ahead by a wrong clock: the present one begins at zero.
--
-- Each charge has an id, and a second key in the budget key's hash slot (its hash tag) for
-- that id: when the charge is made it holds `<end>:<cost>`, so that a cancel can give that
-- cost back; a cancel leaves `cancelled` there, so that the charge, should Redis run it
-- after its cancel (it came late, or it was sent again), charges nothing. Both live a
-- short while (ARGV's expiry), longer than a charge can be late.
--
-- Numbers stay below 2^53 (the gateway caps limits at 10^15), exact in a Lua double.
--
-- KEYS[1]  the budget
-- KEYS[2]  the record of the charge, or of the adjust (optional for an adjust)
-- charge:  ARGV = {'charge', cost, limit, window ms, record expiry ms}
--          returns {1 charged | 0 refused, used, end, ms until end}; refused, and nothing
--          charged, when the charge was cancelled; a charge sent again once it was made
--          answers charged and charges nothing more
-- cancel:  ARGV = {'cancel', record expiry ms}
--          returns {1} when the charge's cost was given back, {0} when there was nothing
--          to give back (it was not made, or its window is over)
-- adjust:  ARGV = {'adjust', end of the charged window, delta, record expiry ms}
--          returns {1, used, end, ms until end} after the change (used never below zero;
--          end the window the spending counts in now), {0} when that window is over; an
--          adjust sent again with the same record changes nothing more
-- A cancel or an adjust of a charge made in a window that ended at or after `from` applies
-- to the present window: every window whose spending was carried there ended then or
-- later (each overlaps the next, and the present one holds now), while a window that was
-- over before the spending began ended at or before the first of them began.

local state = redis.call('HMGET', KEYS[1], 'end', 'used', 'len', 'from')
local stored_end = tonumber(state[1])
local used = tonumber(state[2]) or 0
local stored_len = tonumber(state[3])
local carried_from = tonumber(state[4])

-- Whether a charge made in the window that ends at `charged_end` counts in the stored
-- spending: the present window, or one a reload carried into it.
local function counts(charged_end)
  return charged_end == stored_end or (carried_from ~= nil and charged_end >= carried_from)
end

-- A length no replica writes (not a positive number) reads as none: the rules of an older
-- version's hash.
if stored_len and not (stored_len > 0) then
  stored_len = nil
end
-- A count no replica writes (another program's) must not lift the budget for the rest of
-- its window: below zero or NaN reads as nothing spent, as text always did, and past
-- 2^53 - 1 as that count (the budget used up).
if used ~= used or used < 0 then
  used = 0
elseif used > 9007199254740991 then
  used = 9007199254740991
end

if ARGV[1] == 'adjust' then
  local charged_end = tonumber(ARGV[2])
  if not stored_end or not counts(charged_end) then
    return {0}
  end
  -- The answer names the window the spending counts in now (after a reload carried it,
  -- the present one, not the charged one), and how long until it ends.
  local clock = redis.call('TIME')
  local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
  local resets_in = math.max(0, stored_end - now)
  -- An adjust sent again (its answer came too late) is made once: KEYS[2] says it was.
  if KEYS[2] and redis.call('EXISTS', KEYS[2]) == 1 then
    return {1, used, stored_end, resets_in}
  end
  -- Never below zero, nor past 2^53 - 1: a count Lua's doubles keep exact.
  used = math.min(9007199254740991, math.max(0, used + tonumber(ARGV[3])))
  redis.call('HSET', KEYS[1], 'used', string.format('%d', used))
  if KEYS[2] then
    redis.call('SET', KEYS[2], '1', 'PX', ARGV[4])
  end
  return {1, used, stored_end, resets_in}
end

if ARGV[1] == 'cancel' then
  local record = redis.call('GET', KEYS[2])
  -- Whatever was there, the charge is cancelled from now on: run after this (late, or
  -- again), it charges nothing.
  redis.call('SET', KEYS[2], 'cancelled', 'PX', ARGV[2])
  if not record or record == 'cancelled' then
    return {0}
  end
  local charged_end, cost = string.match(record, '^(%d+):(%d+)$')
  charged_end = tonumber(charged_end)
  if not charged_end or not stored_end or not counts(charged_end) then
    -- Its window is over (a new one begins afresh anyway): nothing to give back.
    return {0}
  end
  used = math.max(0, used - tonumber(cost))
  redis.call('HSET', KEYS[1], 'used', string.format('%d', used))
  return {1}
end

local cost, limit, w = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local window_end = (math.floor(now / w) + 1) * w
-- Set when the stored spending is kept but its end or length changes: written even if
-- refused, so that the spending lasts as long as the window it now counts in.
local moved = false
if stored_end and stored_len and stored_len ~= w then
  if stored_end - stored_len < window_end and window_end - w < stored_end then
    -- The window's length changed (a reload), and the stored window overlaps the present
    -- one: what was spent was spent during a window that holds now, so it counts in the
    -- present window until that ends, whether the window was made longer (`1h` to `1d`)
    -- or shorter (`1d` to `1h`). Spending from before the present window began is so
    -- carried too: that errs on the side of refusing, never on a fresh allowance.
    if stored_end ~= window_end then
      -- Carried again (a second reload in one window, or replicas of both lengths during
      -- a reload): the earliest carried-from end is kept, so that the corrections of
      -- charges made in the first window still apply.
      carried_from = math.min(carried_from or stored_end, stored_end)
    end
    moved = true
  else
    -- A window of another length that does not overlap the present one is over, or lies
    -- ahead by a wrong clock: the present window begins afresh.
    used = 0
    carried_from = nil
  end
elseif stored_end ~= window_end then
  if stored_end and stored_end > window_end and stored_end - window_end <= w then
    -- The server's clock stepped back by less than a window: the window already begun
    -- is charged, so that going back gives no fresh allowance for the one before.
    window_end = stored_end
  elseif stored_end and stored_end > window_end - w and stored_end < window_end then
    -- A hash without `len` (an older version's) whose window ended after the present
    -- one began: the window's length changed, and what was spent lies in the present
    -- window, so it counts there. A window made shorter may so carry spending from
    -- before the present window began: that errs on the side of refusing.
    carried_from = stored_end
    moved = true
  else
    -- A later window, or a stored one further ahead than the next (a clock set far ahead,
    -- then corrected: it must not keep the budget refused for longer than a window).
    used = 0
    carried_from = nil
  end
end

-- How long the key outlives its window: a day, or a window when that is longer. A reload
-- that makes the window longer finds the spending of a window that ended within it and
-- carries it (`1m` made `1h`: the minute just over counts in the hour).
local horizon = math.max(w, 86400000)

-- Writes the window (its end, length and where its spending was carried from), with
-- `used` when given, and the key's expiry `horizon` after the window's end: never sooner
-- than it was, so that a replica of a shorter window (during a rolling reload) cannot cut
-- short the spending of a longer one, even by a refused call.
local function write_window(spent)
  local fields = {'end', string.format('%d', window_end), 'len', string.format('%d', w)}
  if spent then
    table.insert(fields, 'used')
    table.insert(fields, string.format('%d', spent))
  end
  if carried_from then
    table.insert(fields, 'from')
    table.insert(fields, string.format('%d', carried_from))
  elseif state[4] then
    redis.call('HDEL', KEYS[1], 'from')
  end
  redis.call('HSET', KEYS[1], unpack(fields))
  local keep_until = window_end + horizon
  local ttl = redis.call('PTTL', KEYS[1])
  if ttl < 0 or now + ttl < keep_until then
    redis.call('PEXPIREAT', KEYS[1], string.format('%d', keep_until))
  end
end

local record = redis.call('GET', KEYS[2])
if record == 'cancelled' then
  return {0, used, window_end, window_end - now}
elseif record then
  return {1, used, window_end, window_end - now}
end

if used + cost > limit then
  if moved then
    write_window(nil)
  end
  return {0, used, window_end, window_end - now}
end
used = used + cost
write_window(used)
redis.call('SET', KEYS[2], string.format('%d:%d', window_end, cost), 'PX', ARGV[5])
return {1, used, window_end, window_end - now}
