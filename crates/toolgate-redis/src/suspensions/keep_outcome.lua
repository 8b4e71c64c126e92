-- Keeps the outcome of a decided call until its expiry, replacing one kept for the same
-- id, at most max_per_user of them per caller and max_total in all. A caller at its cap
-- loses its own soonest to expire, never another caller's; past max_total, the soonest
-- to expire of all go first.
--
-- With a token (ARGV[8]), the value is a running record of the decision with that token,
-- kept only when nothing is kept for the id (set-if-absent): 'present' when something is,
-- which is left as it is. The record is marked in `:outcome_run:<id>`, a hash of the
-- token, the SHA-1 of the value it marks and the caller, which expires with the row;
-- remove_running.lua removes the record only when both still match, so that an outcome
-- written over it — by this version, which drops the mark, or by an earlier one, which
-- does not know it — is never removed by its token. Without a token the value is an
-- outcome, and replaces a running record whoever kept it.
--
-- With ARGV[9] 'over_running' (and an empty token), the value is an outcome kept only
-- over a running record — a row whose mark's digest is that of the row as it is now —
-- or over nothing: 'ended' when an outcome is kept already, which is left as it is. So a
-- caller's withdrawal of a running call and the call's own end replace the record, and
-- whichever comes second finds the first and is refused.
--
-- Each caller's outcome ids are in `:outcome_user:<caller>`, scored by expiry. Reading an
-- outcome never uses that index (only the row, and `:outcomes` for listings): an earlier
-- version keeps outcomes without it, and they read as any other. An id in it whose
-- outcome left `:outcomes` another way (past max_total, by this version or an earlier
-- one) no longer counts: while the caller is at its cap, their first SWEEP ids are
-- checked and such ids dropped, and whatever is left expires with its score.
--
-- KEYS[1]  <base>:outcomes
-- ARGV     base, id, value, expiry ms, max_total, the caller (as in save.lua),
--          max_per_user, and for a running record the decision's token ('' for none),
--          then 'over_running' for an outcome kept only over a running record
-- returns  'ok' | 'present' (a running record not kept) | 'ended' (an outcome kept
--          over_running not kept)

local SWEEP = 64

local base, id, value = ARGV[1], ARGV[2], ARGV[3]
local at, total = tonumber(ARGV[4]), math.max(1, tonumber(ARGV[5]))
local per_user = math.max(1, tonumber(ARGV[7]))
local token = ARGV[8]
if token == '' then
  token = nil
end
local kept = KEYS[1]
local mine = base .. ':outcome_user:' .. ARGV[6]
local row = base .. ':outcome:' .. id
local run = base .. ':outcome_run:' .. id

if token and redis.call('EXISTS', row) == 1 then
  return 'present'
end
if ARGV[9] == 'over_running' then
  local was = redis.call('GET', row)
  if was and redis.call('HGET', run, 'digest') ~= redis.sha1hex(was) then
    return 'ended'
  end
end

redis.call('ZREMRANGEBYSCORE', kept, '-inf', now)
redis.call('ZREMRANGEBYSCORE', mine, '-inf', now)
redis.call('ZREM', kept, id)
redis.call('ZREM', mine, id)
redis.call('DEL', row, run)
if at <= now then
  return 'ok'
end

if redis.call('ZCARD', mine) >= per_user then
  for _, other in ipairs(redis.call('ZRANGE', mine, 0, SWEEP - 1)) do
    if not redis.call('ZSCORE', kept, other) then
      redis.call('ZREM', mine, other)
    end
  end
end
while redis.call('ZCARD', mine) >= per_user do
  local oldest = redis.call('ZPOPMIN', mine)[1]
  redis.call('ZREM', kept, oldest)
  redis.call('DEL', base .. ':outcome:' .. oldest, base .. ':outcome_run:' .. oldest)
end
while redis.call('ZCARD', kept) >= total do
  local oldest = redis.call('ZPOPMIN', kept)
  redis.call('DEL', base .. ':outcome:' .. oldest[1], base .. ':outcome_run:' .. oldest[1])
end

redis.call('SET', row, value, 'PX', at - now)
if token then
  redis.call('HSET', run, 'token', token, 'digest', redis.sha1hex(value), 'caller', ARGV[6])
  redis.call('PEXPIRE', run, at - now)
end
redis.call('ZADD', kept, at, id)
extend(kept, at - now)
redis.call('ZADD', mine, at, id)
extend(mine, at - now)
return 'ok'
