-- The waiting calls among the ids given that have not expired, for a listing page. With a
-- budget, values are read until they reach it (one at least): one reply holds at most one
-- call past the budget, however large the calls, so that no listing holds Redis for long.
-- Without one (0), only the ids and expiries are read: the light listing of a watcher.
--
-- KEYS[1]  <base>:calls
-- ARGV     base, the budget in bytes (0: no values), then the ids
-- returns  how many of the ids given were read, then a list of id, value ('' without a
--          budget), expiry ms, for each call still waiting among those, in the order given

local base, budget = ARGV[1], tonumber(ARGV[2])
local out, bytes, read = {}, 0, 0
for i = 3, #ARGV do
  if budget > 0 and bytes >= budget then
    break
  end
  read = read + 1
  local id = ARGV[i]
  local at = redis.call('ZSCORE', KEYS[1], id)
  if at and tonumber(at) > now then
    local row = base .. ':call:' .. id
    local value = false
    if budget > 0 then
      value = redis.call('HGET', row, 'value')
    elseif redis.call('HEXISTS', row, 'value') == 1 then
      value = ''
    end
    if value then
      bytes = bytes + #value
      out[#out + 1] = id
      out[#out + 1] = value
      out[#out + 1] = tonumber(at)
    end
  end
end
return {read, out}
