-- Adds what one replica counted since it last added to the counts every replica shares.
--
-- KEYS[1]  <base>:tools
-- ARGV     base, the most tools counted apart, how long the counts outlive the last
--          addition (ms), then for each tool: its name, how many fields follow, then each
--          field's name and what to add to it; none to add nothing
-- returns  since (ms, '' when nothing was ever added): a replica that finds it moved
--          knows the counts were reset, or expired, since its last addition

local base, max, keep = ARGV[1], tonumber(ARGV[2]), ARGV[3]
if #ARGV < 4 then
  return redis.call('GET', base .. ':since') or ''
end
redis.call('SET', base .. ':since', now, 'NX', 'PX', keep)
redis.call('PEXPIRE', base .. ':since', keep)
local i = 4
while i <= #ARGV do
  local tool, fields = ARGV[i], tonumber(ARGV[i + 1])
  if redis.call('SISMEMBER', KEYS[1], tool) == 0 and redis.call('SCARD', KEYS[1]) >= max then
    tool = 'other'
  end
  redis.call('SADD', KEYS[1], tool)
  local key = base .. ':tool:' .. tool
  for field = 0, fields - 1 do
    redis.call('HINCRBY', key, ARGV[i + 2 + 2 * field], ARGV[i + 3 + 2 * field])
  end
  redis.call('PEXPIRE', key, keep)
  i = i + 2 + 2 * fields
end
redis.call('PEXPIRE', KEYS[1], keep)
return redis.call('GET', base .. ':since')
