-- The waiting calls among the ids given that have not expired, for a listing page.
--
-- KEYS[1]  <base>:calls
-- ARGV     base, then the ids
-- returns  id, value, expiry ms, for each call still waiting, in the order given

local out = {}
for i = 2, #ARGV do
  local id = ARGV[i]
  local at = redis.call('ZSCORE', KEYS[1], id)
  if at and tonumber(at) > now then
    local value = redis.call('HGET', ARGV[1] .. ':call:' .. id, 'value')
    if value then
      out[#out + 1] = id
      out[#out + 1] = value
      out[#out + 1] = tonumber(at)
    end
  end
end
return out
