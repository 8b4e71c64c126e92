-- Keeps the outcome of a decided call, or a running record: keep_outcome() in
-- outcome.lua, which says how.
--
-- KEYS[1]  <base>:outcomes
-- ARGV     base, id, value, expiry ms, max_total, the caller (as in save.lua),
--          max_per_user, and for a running record the decision's token ('' for none),
--          then 'over_running' for an outcome kept only over a running record
-- returns  'ok' | 'present' (a running record not kept) | 'ended' (an outcome kept
--          over_running not kept)

local token = ARGV[8]
if token == '' then
  token = nil
end
return keep_outcome(KEYS[1], ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4]),
  math.max(1, tonumber(ARGV[5])), ARGV[6], math.max(1, tonumber(ARGV[7])), token,
  ARGV[9] == 'over_running')
